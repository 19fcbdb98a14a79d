//! `convlog append`: events from standard input, one JSON line each, with
//! the sequences a line leaves out filled in from the store.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use convlog::json;
use convlog::store::StoreOptions;
use convlog::{Durability, Error, Event, Store};

use crate::input::{read_line_bounded, without_bom, LineRead, INPUT_LINE_BYTES_MAX};
use crate::shell::{open_store, Failure};

/// The fsync interval of `--durability periodic` without `--interval-ms`.
pub const PERIODIC_INTERVAL_MS_DEFAULT: u64 = 100;

/// Line numbers listed in the summary of rejected lines.
const REJECTED_LINES_LISTED_MAX: usize = 10;

/// `convlog append STORE`.
pub fn append(
    dir: &Path,
    durability: Durability,
    create_in_nonempty: bool,
    tamper: &crate::tamper::WriterArgs,
) -> Result<(), Failure> {
    let store = open_store(
        dir,
        StoreOptions::new()
            .durability(durability)
            .create_in_nonempty_dir(create_in_nonempty)
            .tamper(tamper.options()?),
    )?;
    let mut appender = Appender {
        store,
        sequences: SequenceCache::default(),
        appended_lines: 0,
    };
    let mut input = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut bytes = Vec::new();
    let mut line = 0u64;
    let mut rejected = Vec::new();
    loop {
        let read = read_line_bounded(&mut input, &mut bytes, INPUT_LINE_BYTES_MAX)
            .map_err(|error| Failure(format!("read standard input after line {line}: {error}")))?;
        if read == LineRead::End {
            break;
        }
        line += 1;
        match appender.line(line, read, &bytes)? {
            LineOutcome::Empty => {}
            LineOutcome::Appended(lsns) => print_lsns(&mut stdout, line, lsns)?,
            LineOutcome::Rejected(message) => {
                eprintln!("convlog: error: {message}");
                rejected.push(line);
            }
        }
    }
    // The checkpoint covers every line appended, also when some were
    // rejected.
    tamper.finish(&appender.store)?;
    rejected_summary(&rejected, appender.appended_lines)
}

/// What became of one input line.
enum LineOutcome {
    /// Nothing to append (an empty line or batch).
    Empty,
    /// Appended: the LSN of each of its events.
    Appended(Vec<u64>),
    /// Not appended: why (printed after `convlog: error: `).
    Rejected(String),
}

/// The store `append` writes, and what it knows of it.
struct Appender {
    store: Store,
    sequences: SequenceCache,
    /// Lines appended so far.
    appended_lines: u64,
}

impl Appender {
    /// Parses, validates and appends input line `line` (its bytes, as
    /// read). Fails only when the store does: a bad line is `Rejected`.
    fn line(&mut self, line: u64, read: LineRead, bytes: &[u8]) -> Result<LineOutcome, Failure> {
        if read == LineRead::TooLong {
            return Ok(LineOutcome::Rejected(format!(
                "line {line}: longer than {INPUT_LINE_BYTES_MAX} bytes (INPUT_LINE_BYTES_MAX, the most one event or batch can hold); the line was skipped"
            )));
        }
        // A byte order mark at the start of the input is not part of the JSON.
        let text = if line == 1 { without_bom(bytes) } else { bytes };
        let events = match self.parse(line, text) {
            Ok(events) if events.is_empty() => return Ok(LineOutcome::Empty),
            Ok(events) => events,
            Err(error) => return Ok(LineOutcome::Rejected(error.to_string())),
        };
        let batch = events.len() > 1;
        let lsns = match self.store.append(&events) {
            Ok(lsns) => lsns,
            Err(Error::InvalidEvent { index, field }) => {
                let at = if batch { format!("[{index}].") } else { String::new() };
                return Ok(LineOutcome::Rejected(format!(
                    "line {line}: {at}{}: {}",
                    field.field, field.reason
                )));
            }
            Err(error @ (Error::LimitExceeded { .. } | Error::EmptyBatch)) => {
                return Ok(LineOutcome::Rejected(format!("line {line}: {error}")));
            }
            Err(error) => {
                return Err(Failure(format!(
                    "line {line} was not appended: {error}; the {} line(s) before it that were acknowledged stay appended",
                    self.appended_lines
                )))
            }
        };
        self.sequences.appended(&events);
        self.appended_lines += 1;
        Ok(LineOutcome::Appended(lsns.into_iter().collect()))
    }

    /// The events of one line (UTF-8 JSON), with the sequences it leaves
    /// out taken from the store.
    fn parse(&mut self, line: u64, text: &[u8]) -> Result<Vec<Event>, Error> {
        match std::str::from_utf8(text) {
            Ok(text) => json::parse_line(line, text, &mut |conversation, evaluation| {
                self.sequences.next(&self.store, conversation, evaluation)
            }),
            Err(error) => Err(Error::InvalidLine {
                line,
                field: None,
                reason: format!(
                    "not UTF-8 text (invalid byte at offset {} of the line)",
                    error.valid_up_to()
                ),
            }),
        }
    }
}

/// Prints the LSNs of appended line `line`, one per line, and flushes.
fn print_lsns(stdout: &mut impl Write, line: u64, lsns: Vec<u64>) -> Result<(), Failure> {
    lsns.into_iter()
        .try_for_each(|lsn| writeln!(stdout, "{lsn}"))
        .and_then(|()| stdout.flush())
        .map_err(|error| {
            Failure(format!(
                "write to standard output after line {line} (appended): {error}; stopped reading input"
            ))
        })
}

/// The failure when any line was `rejected` (their numbers), else success.
fn rejected_summary(rejected: &[u64], appended_lines: u64) -> Result<(), Failure> {
    if rejected.is_empty() {
        return Ok(());
    }
    let mut listed: Vec<String> = rejected
        .iter()
        .take(REJECTED_LINES_LISTED_MAX)
        .map(u64::to_string)
        .collect();
    if rejected.len() > REJECTED_LINES_LISTED_MAX {
        listed.push("...".to_string());
    }
    Err(Failure(format!(
        "{} line(s) rejected and not appended ({} {}); the {appended_lines} other non-empty line(s) were appended",
        rejected.len(),
        if rejected.len() == 1 { "line" } else { "lines" },
        listed.join(", ")
    )))
}

/// The next free sequence of each evaluation of the conversations this
/// `append` has touched. A conversation is folded from the store once, on
/// first use; after that its appended entries keep it current (this process
/// is the store's only writer while it runs).
#[derive(Default)]
struct SequenceCache {
    conversations: HashMap<String, HashMap<String, u64>>,
}

impl SequenceCache {
    fn next(&mut self, store: &Store, conversation: &str, evaluation: &str) -> Result<u64, String> {
        if !self.conversations.contains_key(conversation) {
            let mut next = HashMap::new();
            match store.conversation(conversation) {
                Ok(slice) => {
                    for entry in slice.entries() {
                        let free = next.entry(entry.evaluation_id.clone()).or_insert(0);
                        *free = (*free).max(entry.sequence.saturating_add(1));
                    }
                }
                Err(Error::ConversationNotFound { .. }) => {}
                Err(error) => return Err(error.to_string()),
            }
            self.conversations.insert(conversation.to_string(), next);
        }
        Ok(self.conversations[conversation]
            .get(evaluation)
            .copied()
            .unwrap_or(0))
    }

    fn appended(&mut self, events: &[Event]) {
        for event in events {
            match event {
                Event::ConversationRecorded(body) => {
                    if let Some(next) = self.conversations.get_mut(&body.conversation_id) {
                        let free = next.entry(body.entry.evaluation_id.clone()).or_insert(0);
                        *free = (*free).max(body.entry.sequence.saturating_add(1));
                    }
                }
                Event::MessagesReplaced(body) => {
                    // Folded again from the store when next needed.
                    self.conversations.remove(&body.conversation_id);
                }
                _ => {}
            }
        }
    }
}
