//! The `convlog` command: a thin shell over the library. JSON in and out:
//! events in their JSON form (`docs/events.md`), one per line; the conversation
//! commands (`resume`, `export`, `create-context`, `add-messages`,
//! `set-messages`) print pretty JSON and read message lists (docs/history.md).
//!
//! Exit codes: 0 success, 1 failure (the message names the store, file and
//! offset, or the input line and field, at fault), 2 usage error.

#![forbid(unsafe_code)]
#![warn(clippy::too_many_lines)]

mod append;
mod audit;
mod backup;
mod chat;
mod commands;
mod control;
mod demo;
mod erase;
mod export;
mod help;
mod import;
mod input;
mod remote;
mod resume;
mod shell;
mod tamper;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// The command's allocator: `convlog serve` runs about a fifth fewer
/// instructions per appended event with it than with the system's
/// (docs/performance.md, "The server's floor and allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "convlog",
    version,
    about = "An embedded, durable, event-sourced store for LLM agent conversations",
    after_help = help::EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The store key of an encrypted store (docs/erasure.md), for every
    /// command that reads or writes one (default: $CONVLOG_KEY_FILE).
    #[arg(long, global = true, value_name = "FILE")]
    key_file: Option<PathBuf>,
}

/// When `append` acknowledges an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DurabilityArg {
    /// Durable before acknowledged: its own fsync.
    Sync,
    /// Durable before acknowledged, sharing fsyncs (the default).
    Group,
    /// Written to the OS; fsynced every --interval-ms.
    Periodic,
    /// Written to the OS; fsynced when convlog exits.
    None,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Append events read from standard input, one JSON event per line, and
    /// print the LSN of each, one per line.
    #[command(after_help = help::APPEND_HELP)]
    Append {
        /// The store directory (a store is created in it if it is missing or
        /// empty), or a store URL nats://host:port[,host:port...]/STORE.
        store: PathBuf,
        /// When an event is acknowledged (its LSN printed).
        #[arg(long, value_enum, default_value_t = DurabilityArg::Group)]
        durability: DurabilityArg,
        /// The fsync interval of --durability periodic, in milliseconds.
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
        interval_ms: Option<u64>,
        /// Create the store even if the directory exists and holds other
        /// files (by default a store is created only in a new or empty
        /// directory).
        #[arg(long)]
        create_in_nonempty: bool,
        #[command(flatten)]
        tamper: tamper::WriterArgs,
    },
    /// Print every event as one JSON line with its "lsn", in LSN order.
    #[command(after_help = help::DUMP_HELP)]
    Dump {
        /// The store directory.
        store: PathBuf,
        /// Start at this LSN (default: the first event in the log).
        #[arg(long, value_name = "LSN", value_parser = clap::value_parser!(u64).range(1..))]
        from: Option<u64>,
        /// Print only the events of this conversation.
        #[arg(long, value_name = "ID")]
        conversation: Option<String>,
    },
    /// Check every record of every segment, and every snapshot, without
    /// changing the store.
    #[command(after_help = help::VERIFY_HELP)]
    Verify {
        /// The store directory.
        store: PathBuf,
        /// Check only the log's frames (checksums, LSN order), not that each
        /// payload is a convlog event, nor the snapshots.
        #[arg(long)]
        log_only: bool,
        /// Also check a tamper-evident store with its secret key file: every
        /// frame's tag, place and chain (docs/tamper.md).
        #[arg(long, value_name = "KEYFILE")]
        key: Option<PathBuf>,
        /// Check with a public key file only (with --head): the history up to
        /// the checkpoint is the one signed.
        #[arg(long, value_name = "PUBFILE")]
        public: Option<PathBuf>,
        /// The newest checkpoint kept outside the store: the log must reach
        /// its LSN with the signed history.
        #[arg(long, value_name = "CHECKPOINT")]
        head: Option<PathBuf>,
    },
    /// Generate a tamper key file (mode 0600) and its public key file, or a
    /// rotated one that keeps the old keys; with --encryption, a store key
    /// file for encryption at rest instead.
    #[command(after_help = help::KEYGEN_HELP)]
    Keygen {
        /// The key file to create (it must not exist; keep it outside every
        /// store).
        key: PathBuf,
        /// Make a store key for encryption at rest (pass it to commands as
        /// CONVLOG_KEY_FILE; docs/erasure.md) instead of a tamper key.
        #[arg(long, conflicts_with_all = ["public", "rotate"])]
        encryption: bool,
        /// The public key file to create (default: KEYFILE.pub).
        #[arg(long, value_name = "PUBFILE")]
        public: Option<PathBuf>,
        /// Rotate: the new file holds OLD_KEYFILE's keys plus a new one, which
        /// the writer uses from its next open.
        #[arg(long, value_name = "OLD_KEYFILE")]
        rotate: Option<PathBuf>,
    },
    /// Write a snapshot of every conversation at the end of the log.
    #[command(after_help = help::SNAPSHOT_HELP)]
    Snapshot {
        /// The store directory.
        store: PathBuf,
    },
    /// Delete log segments the newest snapshot covers (only with
    /// --delete-covered; by default the whole log is kept for audit).
    #[command(after_help = help::COMPACT_HELP)]
    Compact {
        /// The store directory.
        store: PathBuf,
        /// Delete the sealed segments whose events the newest snapshot
        /// covers (Retention::DeleteCoveredBySnapshot). Without it nothing
        /// is deleted.
        #[arg(long)]
        delete_covered: bool,
    },
    /// Copy a store into a new directory beside its running writer, and
    /// verify the copy.
    #[command(after_help = help::BACKUP_HELP)]
    Backup {
        /// The store directory.
        store: PathBuf,
        /// The backup directory (new, or empty).
        dest: PathBuf,
    },
    /// Erase a conversation of an encrypted store: destroy its key, so its
    /// content can never be read again (docs/erasure.md).
    #[command(after_help = help::ERASE_HELP)]
    Erase {
        /// The store directory.
        store: PathBuf,
        /// The conversation to erase.
        #[arg(long, value_name = "ID")]
        conversation: String,
        /// The store key file (default: $CONVLOG_KEY_FILE).
        #[arg(long = "key", value_name = "FILE")]
        store_key: Option<PathBuf>,
        /// Who asks for the erasure (recorded in the log's erasure event).
        #[arg(long, value_name = "WHO", default_value = "convlog erase")]
        by: String,
        #[command(flatten)]
        tamper: tamper::WriterArgs,
    },
    /// Print counters of a store: segments, LSN range, conversations,
    /// snapshot, index size.
    #[command(after_help = help::STATS_HELP)]
    Stats {
        /// The store directory.
        store: PathBuf,
    },
    /// Report what an evaluation left to do after a crash: unfinished and
    /// finished tool calls, next sequence and turn (JSON).
    #[command(after_help = help::RESUME_HELP)]
    Resume {
        /// The store directory.
        store: PathBuf,
        /// The conversation to resume.
        #[arg(long, value_name = "ID")]
        conversation: String,
        /// The evaluation to resume (default: the conversation's latest).
        #[arg(long, value_name = "ID")]
        evaluation: Option<String>,
        /// Fail unless the evaluation was started with this prompt identity
        /// (NAMESPACE/KEY; - for an absent part).
        #[arg(long, value_name = "NS/KEY", value_parser = resume::parse_prompt, allow_hyphen_values = true)]
        prompt: Option<convlog::resume::PromptIdentity>,
        /// Also print the evaluation's entries.
        #[arg(long)]
        entries: bool,
        /// Carry the evaluation to its end with the agent runner (needs
        /// --provider and --model) instead of printing the report.
        #[arg(long = "continue")]
        continue_run: bool,
        #[command(flatten)]
        model: chat::ModelArgs,
        #[command(flatten)]
        tamper: tamper::WriterArgs,
    },
    /// Run one evaluation of a conversation against a model provider (with
    /// the tools of MCP servers) and print what it recorded.
    #[command(after_help = help::CHAT_HELP)]
    Chat {
        /// The store directory (a store is created in it if it is missing or
        /// empty).
        store: PathBuf,
        /// The conversation (created if new).
        #[arg(long, value_name = "ID")]
        conversation: String,
        /// The system prompt recorded at the start of the evaluation.
        #[arg(long, value_name = "TEXT")]
        system: Option<String>,
        /// The prompt identity recorded on the system entry (NAMESPACE/KEY;
        /// - for an absent part).
        #[arg(long, value_name = "NS/KEY", value_parser = resume::parse_prompt, allow_hyphen_values = true)]
        prompt: Option<convlog::resume::PromptIdentity>,
        #[command(flatten)]
        model: chat::ModelArgs,
        /// The user's message.
        message: String,
        #[command(flatten)]
        tamper: tamper::WriterArgs,
    },
    /// Serve the message-control HTTP API over a store (one writer for any
    /// number of clients) until SIGTERM or SIGINT.
    #[command(after_help = help::SERVE_HELP)]
    Serve {
        /// The store directory (a store is created in it if it is missing or
        /// empty; the server holds its writer's lock), or a store URL
        /// nats://host:port[,host:port...]/STORE (docs/scale-out.md).
        store: PathBuf,
        /// Where to listen (loopback by default; put TLS in a reverse proxy).
        #[arg(long, value_name = "ADDR", default_value = convlog_server::DEFAULT_LISTEN)]
        listen: std::net::SocketAddr,
        /// The configuration file (TOML: agents, MCP tools, users' tokens).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Print a conversation rebuilt as a provider's request body (JSON), or
    /// its neutral entries as JSON lines.
    #[command(after_help = help::EXPORT_HELP)]
    Export {
        /// The store directory.
        store: PathBuf,
        /// The conversation to export.
        #[arg(long, value_name = "ID")]
        conversation: String,
        /// The provider request to rebuild, or jsonl for the neutral entries.
        #[arg(long, value_enum)]
        format: export::ExportFormat,
        /// Tool calls that never finished: left out (drop, the default) or
        /// answered with an error result (error). Provider formats only.
        #[arg(long, value_enum, value_name = "MODE")]
        pending: Option<export::PendingArg>,
        /// History managers applied before rendering, in order:
        /// window=N,truncate=N,budget=N,prune=N.
        #[arg(long, value_name = "SPEC", value_parser = export::check_curation)]
        curate: Option<String>,
        /// The slice_type and item_type written (snapshot-json only;
        /// default convlog.interop:InnerMessage).
        #[arg(long, value_name = "MODULE:TYPE")]
        type_name: Option<String>,
        /// Write only the documented item fields, no "convlog" extension
        /// objects (snapshot-json only; loses what only they hold).
        #[arg(long)]
        documented_only: bool,
    },
    /// Record a snapshot JSON document (docs/interop.md) into a
    /// conversation, as one atomic batch, and print what was recorded.
    #[command(after_help = help::IMPORT_HELP)]
    Import {
        /// The store directory (a store is created in it if it is missing or
        /// empty).
        store: PathBuf,
        /// The snapshot document; - reads standard input.
        file: PathBuf,
        /// The conversation to record into (default: the one the document
        /// names in convlog.conversation_id).
        #[arg(long, value_name = "ID")]
        conversation: Option<String>,
        /// Add to a conversation that has messages (already held message
        /// ids are not recorded again).
        #[arg(long, conflicts_with = "replace")]
        merge: bool,
        /// Replace every message of the conversation with the document's.
        #[arg(long)]
        replace: bool,
        /// The item_type of the slice to read (default: the one slice whose
        /// item_type ends in :InnerMessage).
        #[arg(long, value_name = "MODULE:TYPE")]
        item_type: Option<String>,
        /// Create the store even if the directory exists and holds other
        /// files.
        #[arg(long)]
        create_in_nonempty: bool,
        #[command(flatten)]
        tamper: tamper::WriterArgs,
    },
    /// Show a readable timeline of a conversation, or every conversation of
    /// the store.
    #[command(after_help = help::INSPECT_HELP)]
    Inspect {
        /// The store directory.
        store: PathBuf,
        /// The conversation (default: an overview of all of them).
        #[arg(long, value_name = "ID")]
        conversation: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Colour the text: auto (on a terminal), always, never.
        #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
        color: audit::ColorArg,
    },
    /// Print the last events, and with --follow every new one as a writer
    /// appends it.
    #[command(after_help = help::TAIL_HELP)]
    Tail {
        /// The store directory.
        store: PathBuf,
        /// How many of the latest events to print first.
        #[arg(short = 'n', long = "lines", default_value_t = 10, value_name = "N")]
        last: u64,
        /// Keep printing events as they are appended, until interrupted.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Print the JSON lines of `dump` instead of one-line summaries.
        #[arg(long)]
        json: bool,
        /// Only this conversation's events.
        #[arg(long, value_name = "ID")]
        conversation: Option<String>,
    },
    /// Create a context (a conversation with an owner and a public flag) for
    /// add-messages and set-messages.
    #[command(after_help = help::CREATE_CONTEXT_HELP)]
    CreateContext {
        /// The store directory (a store is created in it if it is missing or
        /// empty).
        store: PathBuf,
        /// The context (conversation) id.
        #[arg(long, value_name = "ID")]
        conversation: String,
        /// The acting user, who owns the context (default: anonymous, which
        /// needs --public).
        #[arg(long = "as", value_name = "USER")]
        as_user: Option<String>,
        /// Anyone may use the context, not only its owner.
        #[arg(long)]
        public: bool,
        /// Create the store even if the directory exists and holds other
        /// files (by default a store is created only in a new or empty
        /// directory).
        #[arg(long)]
        create_in_nonempty: bool,
    },
    /// Append a JSON message list (stdin) to a context, validated,
    /// atomically; print the context.
    #[command(after_help = help::ADD_MESSAGES_HELP)]
    AddMessages {
        /// The store directory.
        store: PathBuf,
        /// The context (conversation) id; it must exist (create-context).
        #[arg(long, value_name = "ID")]
        conversation: String,
        /// The acting user (default: anonymous, for public contexts).
        #[arg(long = "as", value_name = "USER")]
        as_user: Option<String>,
    },
    /// Replace every message of a context with a JSON message list
    /// (stdin), validated, atomically; the old ones stay in the log.
    #[command(after_help = help::SET_MESSAGES_HELP)]
    SetMessages {
        /// The store directory.
        store: PathBuf,
        /// The context (conversation) id; it must exist (create-context).
        #[arg(long, value_name = "ID")]
        conversation: String,
        /// The acting user (default: anonymous, for public contexts).
        #[arg(long = "as", value_name = "USER")]
        as_user: Option<String>,
    },
    /// Run a writer, kill it with SIGKILL mid-batch, reopen, and show that
    /// every acknowledged append survived.
    #[command(after_help = help::DEMO_HELP)]
    Demo {
        /// Store directory to create (default: a new directory under the
        /// system temporary directory). Must not exist yet.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Internal: the worker process the demo kills.
    #[command(hide = true)]
    DemoWorker {
        /// The store directory.
        store: PathBuf,
    },
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    shell::set_key_file(cli.key_file);
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(shell::Failure(message)) => {
            eprintln!("convlog: error: {message}");
            ExitCode::from(1)
        }
    }
}

/// Log records (recovery notes, warnings) go to stderr; `CONVLOG_LOG`
/// filters them (default: warnings).
fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CONVLOG_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colour escapes only for a terminal: a file or a pipe gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}

/// Runs one command.
fn run(command: Command) -> Result<(), shell::Failure> {
    refuse_url_for_files(&command)?;
    match command {
        Command::Append {
            store,
            durability,
            interval_ms,
            create_in_nonempty,
            tamper,
        } => {
            let durability = durability_of(durability, interval_ms);
            append::append(&store, durability, create_in_nonempty, &tamper)
        }
        Command::Dump {
            store,
            from,
            conversation,
        } => commands::dump(
            &store,
            from,
            conversation.as_deref(),
            shell::store_key(None)?,
        ),
        Command::Verify {
            store,
            log_only,
            key,
            public,
            head,
        } => commands::verify(&store, log_only, &tamper::TamperArgs { key, public, head }),
        Command::Keygen {
            key,
            encryption: true,
            ..
        } => erase::keygen(&key),
        Command::Keygen {
            key,
            encryption: false,
            public,
            rotate,
        } => tamper::keygen(&key, public.as_deref(), rotate.as_deref()),
        Command::Snapshot { store } => commands::snapshot(&store),
        Command::Compact {
            store,
            delete_covered,
        } => commands::compact(&store, delete_covered),
        Command::Stats { store } => commands::stats(&store),
        Command::Erase {
            store,
            conversation,
            store_key,
            by,
            tamper,
        } => erase::erase(&store, &conversation, store_key.as_deref(), &by, &tamper),
        Command::Backup { store, dest } => backup::backup(&store, &dest),
        Command::Inspect {
            store,
            conversation,
            json,
            color,
        } => audit::inspect(&store, conversation.as_deref(), json, color),
        Command::Tail {
            store,
            last,
            follow,
            json,
            conversation,
        } => audit::tail(&store, last, follow, json, conversation),
        Command::Serve {
            store,
            listen,
            config,
        } => convlog_server::run(convlog_server::ServeArgs {
            store,
            listen,
            config,
        })
        .map_err(shell::Failure),
        Command::Import {
            store,
            file,
            conversation,
            merge,
            replace,
            item_type,
            create_in_nonempty,
            tamper,
        } => import::import(
            &store,
            &file,
            conversation,
            import::mode(merge, replace),
            item_type,
            create_in_nonempty,
            &tamper,
        ),
        conversation_command => run_on_conversations(conversation_command),
    }
}

/// The commands that read or copy a store directory's files refuse a store
/// URL (`nats://...`), saying so; the others open it through the store.
fn refuse_url_for_files(command: &Command) -> Result<(), shell::Failure> {
    let (name, store, what) = match command {
        Command::Dump { store, .. } => ("dump", store, "reads the segment files"),
        Command::Verify { store, .. } => ("verify", store, "checks the segment and snapshot files"),
        Command::Stats { store } => ("stats", store, "counts the segment files"),
        Command::Backup { store, .. } => ("backup", store, "copies the store's files"),
        Command::Erase { store, .. } => (
            "erase",
            store,
            "destroys a key in the store's key table (encryption at rest is for store directories)",
        ),
        Command::Inspect { store, .. } => ("inspect", store, "reads the segment files"),
        Command::Tail { store, .. } => ("tail", store, "reads and follows the segment files"),
        Command::Export {
            store,
            format: export::ExportFormat::Html,
            ..
        } => ("export --format html", store, "reads the segment files"),
        Command::DemoWorker { store } => ("demo-worker", store, "writes a store directory"),
        _ => return Ok(()),
    };
    remote::refuse_url(name, store, what)
}

/// The commands about conversations: resume, chat and export,
/// message control, the demo.
fn run_on_conversations(command: Command) -> Result<(), shell::Failure> {
    match command {
        Command::Append { .. }
        | Command::Dump { .. }
        | Command::Verify { .. }
        | Command::Keygen { .. }
        | Command::Snapshot { .. }
        | Command::Compact { .. }
        | Command::Stats { .. }
        | Command::Erase { .. }
        | Command::Backup { .. }
        | Command::Inspect { .. }
        | Command::Serve { .. }
        | Command::Import { .. }
        | Command::Tail { .. } => unreachable!("run() handles the store and audit commands"),
        Command::Resume {
            store,
            conversation,
            evaluation,
            prompt,
            entries,
            continue_run,
            model,
            tamper,
        } => resume::dispatch(
            &store,
            &conversation,
            evaluation,
            prompt,
            entries,
            continue_run,
            model,
            &tamper,
        ),
        Command::Chat {
            store,
            conversation,
            system,
            prompt,
            model,
            message,
            tamper,
        } => chat::chat(
            &store,
            &conversation,
            message,
            chat::Recording { system, prompt },
            model,
            &tamper,
        ),
        Command::Export {
            store,
            conversation,
            format,
            pending,
            curate,
            type_name,
            documented_only,
        } => checked_export(
            &store,
            &conversation,
            format,
            pending,
            curate.as_deref(),
            snapshot_options(format, type_name, documented_only),
        ),
        Command::CreateContext {
            store,
            conversation,
            as_user,
            public,
            create_in_nonempty,
        } => checked_create_context(&store, &conversation, as_user, public, create_in_nonempty),
        Command::AddMessages {
            store,
            conversation,
            as_user,
        } => control::change_messages(&store, &conversation, as_user, control::Change::Add),
        Command::SetMessages {
            store,
            conversation,
            as_user,
        } => control::change_messages(&store, &conversation, as_user, control::Change::Set),
        Command::Demo { dir } => demo::run(dir),
        Command::DemoWorker { store } => demo::worker(&store),
    }
}

/// `convlog export`, after the flag combinations clap cannot check.
fn checked_export(
    store: &std::path::Path,
    conversation: &str,
    format: export::ExportFormat,
    pending: Option<export::PendingArg>,
    curate: Option<&str>,
    snapshot: convlog::interop::ExportOptions,
) -> Result<(), shell::Failure> {
    if format.is_page() && (pending.is_some() || curate.is_some()) {
        usage_error(
            "export",
            clap::error::ErrorKind::ArgumentConflict,
            "--pending and --curate apply to provider formats, not to --format html",
        );
    }
    if pending.is_some() && !format.renders_requests() {
        usage_error(
            "export",
            clap::error::ErrorKind::ArgumentConflict,
            "--pending applies only to the provider formats, not to --format jsonl or snapshot-json",
        );
    }
    export::export(
        store,
        conversation,
        format,
        pending.unwrap_or(export::PendingArg::Drop),
        curate,
        snapshot,
    )
}

/// The snapshot-json settings of `convlog export`; a usage error (exit 2)
/// when they come with another format.
fn snapshot_options(
    format: export::ExportFormat,
    type_name: Option<String>,
    documented_only: bool,
) -> convlog::interop::ExportOptions {
    if !format.is_snapshot() && (type_name.is_some() || documented_only) {
        usage_error(
            "export",
            clap::error::ErrorKind::ArgumentConflict,
            "--type-name and --documented-only apply only to --format snapshot-json",
        );
    }
    let mut options = convlog::interop::ExportOptions::new();
    if let Some(name) = type_name {
        options = options.type_name(name);
    }
    if documented_only {
        options = options.documented_only();
    }
    options
}

/// `convlog create-context`, after the flag combination clap cannot check.
fn checked_create_context(
    store: &std::path::Path,
    conversation: &str,
    as_user: Option<String>,
    public: bool,
    create_in_nonempty: bool,
) -> Result<(), shell::Failure> {
    if as_user.is_none() && !public {
        usage_error(
            "create-context",
            clap::error::ErrorKind::MissingRequiredArgument,
            "a context created without --as has no owner and must be --public",
        );
    }
    control::create_context(store, conversation, as_user, public, create_in_nonempty)
}

/// Exits with clap's usage error (exit 2) for `subcommand`: for flag
/// combinations clap's derive cannot express.
fn usage_error(subcommand: &str, kind: clap::error::ErrorKind, message: &str) -> ! {
    use clap::CommandFactory;
    let mut command = Cli::command();
    command.build();
    command
        .find_subcommand_mut(subcommand)
        .expect("a subcommand of convlog")
        .error(kind, message)
        .exit()
}

/// The library's durability for the flags; a usage error (exit 2) when
/// --interval-ms comes without --durability periodic.
fn durability_of(durability: DurabilityArg, interval_ms: Option<u64>) -> convlog::Durability {
    if interval_ms.is_some() && durability != DurabilityArg::Periodic {
        usage_error(
            "append",
            clap::error::ErrorKind::ArgumentConflict,
            "--interval-ms applies only to --durability periodic",
        );
    }
    match durability {
        DurabilityArg::Sync => convlog::Durability::Sync,
        DurabilityArg::Group => convlog::Durability::Group,
        DurabilityArg::Periodic => convlog::Durability::Periodic(std::time::Duration::from_millis(
            interval_ms.unwrap_or(append::PERIODIC_INTERVAL_MS_DEFAULT),
        )),
        DurabilityArg::None => convlog::Durability::None,
    }
}

#[cfg(test)]
mod tests {
    /// clap checks a command's definition only when that command is parsed
    /// (two arguments of `erase` once shared an id, and `convlog erase`
    /// panicked); this checks every command's at once.
    #[test]
    fn every_command_line_definition_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
