//! The `convlog` command: a thin shell over the library.
//!
//! Exit codes: 0 success, 1 failure (the message names the store, file and
//! offset at fault), 2 usage error.

mod demo;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "convlog",
    version,
    about = "An embedded, durable, event-sourced store for LLM agent conversations",
    after_help = "Examples:\n  convlog demo                 # crash a writer mid-run and recover\n  convlog verify ./my-store    # check every record of a store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a writer, kill it with SIGKILL mid-batch, reopen, and show that
    /// every acknowledged append survived.
    #[command(after_help = "Example:\n  convlog demo --dir /tmp/convlog-demo")]
    Demo {
        /// Store directory to create (default: a new directory under the
        /// system temporary directory). Must not exist yet.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Check every record of every segment of a store without changing it.
    #[command(after_help = "Example:\n  convlog verify ./my-store")]
    Verify {
        /// The store directory.
        store: PathBuf,
    },
    /// Internal: the worker process the demo kills.
    #[command(hide = true)]
    DemoWorker {
        /// The store directory.
        store: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CONVLOG_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { dir } => demo::run(dir),
        Command::DemoWorker { store } => demo::worker(&store),
        Command::Verify { store } => verify(&store),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("convlog: error: {error}");
            ExitCode::from(1)
        }
    }
}

fn verify(store: &std::path::Path) -> convlog::Result<()> {
    let report = convlog::log::verify(store)?;
    println!("store      {}", store.display());
    println!("segments   {}", report.segments);
    println!("frames     {} (atomic batches)", report.frames);
    println!("events     {}", report.events);
    println!("bytes      {}", report.bytes);
    if report.events == 0 {
        println!("LSN range  empty");
    } else {
        println!("LSN range  {}..={}", report.first_lsn, report.next_lsn - 1);
    }
    match &report.torn_tail {
        Some((segment, offset)) => println!(
            "tail       torn at {}:{offset} (unsynced bytes a crash left; the next writer cuts them)",
            segment.display()
        ),
        None => println!("tail       clean"),
    }
    println!("result     ok: every record checked");
    Ok(())
}
