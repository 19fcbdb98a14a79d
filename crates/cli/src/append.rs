//! `convlog append`: events from standard input, one JSON line each, with
//! the sequences a line leaves out filled in from the store.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use convlog::json::{self, LineError};
use convlog::log::LogOptions;
use convlog::store::StoreOptions;
use convlog::{Durability, Error, Event, Store};

use crate::input::{read_line_bounded, without_bom, LineRead, INPUT_LINE_BYTES_MAX};
use crate::shell::{open_store, Failure};

/// The fsync interval of `--durability periodic` without `--interval-ms`.
pub const PERIODIC_INTERVAL_MS_DEFAULT: u64 = 100;

/// Line numbers listed in the summary of rejected lines.
const REJECTED_LINES_LISTED_MAX: usize = 10;

/// `convlog append STORE`.
pub fn append(dir: &Path, durability: Durability, create_in_nonempty: bool) -> Result<(), Failure> {
    let store = open_store(
        dir,
        StoreOptions {
            log: LogOptions {
                durability,
                create_in_nonempty_dir: create_in_nonempty,
                ..LogOptions::default()
            },
            ..StoreOptions::default()
        },
    )?;
    let mut sequences = SequenceCache::default();
    let mut input = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut bytes = Vec::new();
    let mut line = 0u64;
    let mut rejected = Vec::new();
    let mut appended_lines = 0u64;
    loop {
        let read = read_line_bounded(&mut input, &mut bytes, INPUT_LINE_BYTES_MAX)
            .map_err(|error| Failure(format!("read standard input after line {line}: {error}")))?;
        if read == LineRead::End {
            break;
        }
        line += 1;
        match read {
            LineRead::End | LineRead::Line => {}
            LineRead::TooLong => {
                eprintln!(
                    "convlog: error: line {line}: longer than {INPUT_LINE_BYTES_MAX} bytes (INPUT_LINE_BYTES_MAX, the most one event or batch can hold); the line was skipped"
                );
                rejected.push(line);
                continue;
            }
        }
        // A byte order mark at the start of the input is not part of the JSON.
        let text = if line == 1 {
            without_bom(&bytes)
        } else {
            &bytes
        };
        let parsed = match std::str::from_utf8(text) {
            Ok(text) => json::parse_line(line, text, &mut |conversation, evaluation| {
                sequences.next(&store, conversation, evaluation)
            }),
            Err(error) => Err(LineError {
                line,
                field: None,
                message: format!(
                    "not UTF-8 text (invalid byte at offset {} of the line)",
                    error.valid_up_to()
                ),
            }),
        };
        let events = match parsed {
            Ok(events) if events.is_empty() => continue,
            Ok(events) => events,
            Err(error) => {
                eprintln!("convlog: error: {error}");
                rejected.push(line);
                continue;
            }
        };
        let batch = events.len() > 1;
        let lsns = match store.append(events.clone()) {
            Ok(lsns) => lsns,
            Err(Error::InvalidEvent { index, field }) => {
                let at = if batch { format!("[{index}].") } else { String::new() };
                eprintln!(
                    "convlog: error: line {line}: {at}{}: {}",
                    field.field, field.reason
                );
                rejected.push(line);
                continue;
            }
            Err(error @ (Error::LimitExceeded { .. } | Error::InvalidArgument(_))) => {
                eprintln!("convlog: error: line {line}: {error}");
                rejected.push(line);
                continue;
            }
            Err(error) => {
                return Err(Failure(format!(
                    "line {line} was not appended: {error}; the {appended_lines} line(s) before it that were acknowledged stay appended"
                )))
            }
        };
        sequences.appended(&events);
        appended_lines += 1;
        let printed = lsns
            .into_iter()
            .try_for_each(|lsn| writeln!(stdout, "{lsn}"))
            .and_then(|()| stdout.flush());
        if let Err(error) = printed {
            return Err(Failure(format!(
                "write to standard output after line {line} (appended): {error}; stopped reading input"
            )));
        }
    }
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
