//! `convlog export`: a conversation rebuilt as a provider's request body
//! (`convlog::provider::render`), as its neutral entries, or as snapshot
//! JSON in the session-snapshot shape (`convlog::interop`), optionally
//! curated by history managers first (`convlog::history`). Read-only: the
//! store keeps the full history and nothing is appended.

use std::io::Write;
use std::path::Path;

use clap::ValueEnum;
use convlog::history::{parse_curation, CurationContext, HistoryManager};
use convlog::interop::{self, ExportOptions};
use convlog::model::ConversationEntry;
use convlog::provider::{self, PendingCalls, Provider, RenderOptions};

use crate::shell::{existing_store, print_json, stdout_closed, Failure};

/// What `export --format` names. A new format is a variant here and an arm
/// in [`ExportFormat::output`]; the compiler points at every place to
/// extend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// OpenAI Chat Completions `messages`.
    Openai,
    /// OpenAI Responses `input` items.
    OpenaiResponses,
    /// Anthropic Messages `system` and `messages`.
    Anthropic,
    /// Google Gemini `system_instruction` and `contents`.
    Gemini,
    /// Ollama `/api/chat` `messages`.
    Ollama,
    /// The neutral entries, one JSON object per line.
    Jsonl,
    /// One self-contained HTML page: the conversation as a timeline.
    Html,
    /// Snapshot JSON in the session-snapshot shape (docs/interop.md).
    SnapshotJson,
}

/// How a format is produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    /// A provider's request body, by `convlog::provider::render`.
    Request(Provider),
    /// The neutral entries as JSON lines.
    EntryLines,
    /// An HTML timeline page (`convlog::audit`).
    Page,
    /// A snapshot document (`convlog::interop`).
    Snapshot,
}

impl ExportFormat {
    fn output(self) -> Output {
        match self {
            ExportFormat::Openai => Output::Request(Provider::OpenAiChat),
            ExportFormat::OpenaiResponses => Output::Request(Provider::OpenAiResponses),
            ExportFormat::Anthropic => Output::Request(Provider::Anthropic),
            ExportFormat::Gemini => Output::Request(Provider::Gemini),
            ExportFormat::Ollama => Output::Request(Provider::Ollama),
            ExportFormat::Jsonl => Output::EntryLines,
            ExportFormat::Html => Output::Page,
            ExportFormat::SnapshotJson => Output::Snapshot,
        }
    }

    /// Whether this format is the HTML page (no `--pending` or `--curate`).
    pub fn is_page(self) -> bool {
        matches!(self.output(), Output::Page)
    }

    /// Whether this format is snapshot JSON (`--type-name`,
    /// `--documented-only`).
    pub fn is_snapshot(self) -> bool {
        matches!(self.output(), Output::Snapshot)
    }

    /// Whether `--pending` means anything for this format.
    pub fn renders_requests(self) -> bool {
        matches!(self.output(), Output::Request(_))
    }
}

/// `--pending`: what to do with calls that never finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PendingArg {
    /// Leave them out of their assistant message (the default).
    Drop,
    /// Keep them and answer each with an error result.
    Error,
}

impl From<PendingArg> for PendingCalls {
    fn from(pending: PendingArg) -> PendingCalls {
        match pending {
            PendingArg::Drop => PendingCalls::Drop,
            PendingArg::Error => PendingCalls::SyntheticError,
        }
    }
}

/// Checks a `--curate` spec at parse time (a bad one is a usage error);
/// the command parses it again into its managers.
pub fn check_curation(text: &str) -> Result<String, String> {
    parse_curation(text)
        .map(|_| text.to_string())
        .map_err(|error| error.to_string())
}

/// `convlog export STORE --conversation ID --format FORMAT [--pending MODE] [--curate SPEC]
/// [--type-name TYPE] [--documented-only]`; `snapshot` holds the last two
/// (snapshot-json only).
pub fn export(
    dir: &Path,
    conversation: &str,
    format: ExportFormat,
    pending: PendingArg,
    curate: Option<&str>,
    snapshot: ExportOptions,
) -> Result<(), Failure> {
    if format.is_page() {
        return crate::audit::export_html(dir, conversation);
    }
    existing_store(dir)?;
    let bar = crate::shell::spinner("reading the conversation");
    let opened = crate::shell::open_store_read_only(dir);
    let slice = opened
        .as_ref()
        .ok()
        .map(|store| store.conversation(conversation));
    bar.finish_and_clear();
    let store = opened?;
    let slice = slice.expect("the store opened")?;
    let mut entries: Vec<ConversationEntry> = slice.entries().cloned().collect();
    if let Some(spec) = curate {
        let manager = parse_curation(spec)?;
        let context = CurationContext::new()
            .with_store(&store)
            .with_conversation(&slice);
        entries = manager.curate(&entries, &context);
    }
    match format.output() {
        Output::Request(provider) => export_request(provider, &entries, pending.into()),
        Output::EntryLines => export_entry_lines(&entries),
        Output::Page => crate::audit::export_html(dir, conversation),
        Output::Snapshot => export_snapshot(conversation, &entries, &snapshot),
    }
}

fn export_snapshot(
    conversation: &str,
    entries: &[ConversationEntry],
    options: &ExportOptions,
) -> Result<(), Failure> {
    let text = interop::export_json(conversation, entries, options)
        .map_err(|error| Failure(error.to_string()))?;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .or_else(stdout_closed)
}

fn export_request(
    provider: Provider,
    entries: &[ConversationEntry],
    pending: PendingCalls,
) -> Result<(), Failure> {
    let options = RenderOptions::new().pending(pending);
    let request = provider::render(provider, entries, &options)?;
    if !request.unfinished_calls.is_empty() {
        let what = match pending {
            PendingCalls::Drop => "left out (--pending error answers them instead)",
            PendingCalls::SyntheticError => "answered with an error result",
        };
        eprintln!(
            "convlog: note: {} unfinished tool call(s) {what}: {}",
            request.unfinished_calls.len(),
            request.unfinished_calls.join(", ")
        );
    }
    if !request.skipped_results.is_empty() {
        let calls: Vec<&str> = request
            .skipped_results
            .iter()
            .map(|skipped| skipped.call_id.as_deref().unwrap_or("(none)"))
            .collect();
        eprintln!(
            "convlog: note: {} tool result(s) left out (no earlier call to answer, or a second result of one call): call ids {}",
            calls.len(),
            calls.join(", ")
        );
    }
    print_json(&request.body())
}

fn export_entry_lines(entries: &[ConversationEntry]) -> Result<(), Failure> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for entry in entries {
        let line = serde_json::to_string(entry).map_err(|error| {
            Failure(format!(
                "entry {} has no JSON form: {error}",
                entry.message_id
            ))
        })?;
        if let Err(error) = writeln!(out, "{line}") {
            return stdout_closed(error);
        }
    }
    out.flush().or_else(stdout_closed)
}
