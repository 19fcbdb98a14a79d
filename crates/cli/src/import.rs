//! `convlog import`: a snapshot JSON document (`convlog::interop`,
//! docs/interop.md) recorded into a store as one atomic batch.

use std::io::Read;
use std::path::Path;

use convlog::interop::{self, ImportError, ImportMode, ImportOptions, DOCUMENT_BYTES_MAX};
use convlog::{ResumeOptions, StoreOptions};

use crate::shell::{lsn_range, open_store, row, Failure};

/// The mode of `--merge` / `--replace` (clap refuses both at once).
pub fn mode(merge: bool, replace: bool) -> ImportMode {
    match (merge, replace) {
        (true, _) => ImportMode::Merge,
        (_, true) => ImportMode::Replace,
        _ => ImportMode::New,
    }
}

/// Reads FILE (`-`: standard input), at most `DOCUMENT_BYTES_MAX` bytes.
fn read_document(file: &Path) -> Result<String, Failure> {
    let name = file.display();
    let mut bytes = Vec::new();
    let limit = DOCUMENT_BYTES_MAX as u64 + 1;
    let read = if file == Path::new("-") {
        std::io::stdin().lock().take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(file).and_then(|opened| opened.take(limit).read_to_end(&mut bytes))
    };
    read.map_err(|error| Failure(format!("read {name}: {error}")))?;
    if bytes.len() > DOCUMENT_BYTES_MAX {
        return Err(Failure(format!(
            "{name}: over DOCUMENT_BYTES_MAX ({DOCUMENT_BYTES_MAX} bytes); nothing was imported"
        )));
    }
    String::from_utf8(bytes).map_err(|error| {
        Failure(format!(
            "{name}: not UTF-8 at byte {}; nothing was imported",
            error.utf8_error().valid_up_to()
        ))
    })
}

/// `convlog import STORE FILE [--conversation ID] [--merge | --replace] [--item-type TYPE]`.
pub fn import(
    dir: &Path,
    file: &Path,
    conversation: Option<String>,
    mode: ImportMode,
    item_type: Option<String>,
    create_in_nonempty: bool,
    tamper: &crate::tamper::WriterArgs,
) -> Result<(), Failure> {
    let text = read_document(file)?;
    let mut options = ImportOptions::new().mode(mode);
    options.conversation_id = conversation;
    options.item_type = item_type;
    // Checked before the store is opened (or created): a bad file leaves
    // no trace.
    interop::plan_import(&text, &options)
        .map_err(|error| Failure(format!("{}: {error}; nothing was imported", file.display())))?;
    let store = open_store(
        dir,
        StoreOptions::new()
            .create_in_nonempty_dir(create_in_nonempty)
            .tamper(tamper.options()?),
    )?;
    let report = interop::import(&store, &text, &options).map_err(|error| match error {
        ImportError::NotEmpty { .. } => Failure(format!(
            "{error} (--merge adds the document's messages, --replace replaces them); nothing was imported"
        )),
        ImportError::Document(error) => Failure(format!(
            "{}: {error}; nothing was imported",
            file.display()
        )),
        ImportError::Store(error) => Failure::from(error),
    })?;
    let mode = match report.mode {
        ImportMode::New => "new conversation",
        ImportMode::Merge => "merge",
        ImportMode::Replace => "replace",
    };
    row("conversation", &report.conversation_id);
    row("mode", mode);
    row("entries", report.entries);
    row("status events", report.status_events);
    if report.calls_recorded_in_entry > 0 {
        row(
            "calls in entry",
            format!(
                "{} (their state recorded in the entry)",
                report.calls_recorded_in_entry
            ),
        );
    }
    if report.generated_message_ids > 0 {
        row(
            "named ids",
            format!(
                "{} item(s) without message_id (UUID v5)",
                report.generated_message_ids
            ),
        );
    }
    row(
        "evaluations",
        format!(
            "{} ({})",
            report.evaluations.len(),
            report.evaluations.join(", ")
        ),
    );
    row("lsns", lsn_range(report.lsns.start, report.lsns.end));
    if let Ok(state) = store.resume(&report.conversation_id, &ResumeOptions::new()) {
        let unfinished: Vec<&str> = state
            .unfinished_calls
            .iter()
            .map(|unfinished| unfinished.call.call_id.as_str())
            .collect();
        let calls = if unfinished.is_empty() {
            "none".to_string()
        } else {
            unfinished.join(", ")
        };
        row(
            "unfinished calls",
            format!("{calls} (latest evaluation {})", state.evaluation_id),
        );
    }
    tamper.finish(&store)
}
