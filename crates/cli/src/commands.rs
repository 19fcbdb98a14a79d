//! The subcommands that read and write stores: `append`, `dump`, `verify`,
//! `snapshot`, `compact` and `stats`, and the helpers the conversation
//! commands (`resume`, `export`, the message-control ones) share. Each is a
//! few calls of the library; the JSON form of events is `convlog::json`'s.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

use convlog::control::{ContextsReducer, ControlError};
use convlog::json::{self, LineError};
use convlog::log::LogOptions;
use convlog::provider::ProviderError;
use convlog::store::{Retention, StoreBuilder, StoreOptions};
use convlog::{Durability, Error, Event, LogReader, Store};

pub const APPEND_HELP: &str = r#"Input: one event per line in the JSON form of docs/events.md; a JSON array on one line is one
atomic batch (all of its events or none). Empty lines are skipped. Omitted fields get
defaults: entry.message_id a new UUID v4, created_at / at the current time, entry.sequence
the next one in that conversation and evaluation (counting up across lines). An "lsn"
field (as dump prints it) is ignored: the store assigns LSNs.

Output: the LSN of each appended event, one per line, flushed after each input line.

A line that does not parse or validate is reported on stderr with its line number and
field ("convlog: error: line 3: entry.role: unknown variant ...") and is not appended;
the lines before and after it are. convlog keeps going and exits 1 at the end if any
line was rejected. An I/O failure of the store stops it at once (exit 1). A line longer
than 64 MiB (INPUT_LINE_BYTES_MAX) is rejected without being read into memory. A UTF-8
byte order mark before the first line is skipped.

Example:
  echo '{"type":"conversation_recorded","conversation_id":"ctx_1","entry":{"evaluation_id":"eval-1","role":"user","content":"Weather in Paris?"}}' \
    | convlog append ./my-store
  convlog dump ./old-store | convlog append ./new-store --durability none"#;

pub const DUMP_HELP: &str = r#"Output: one line per event, its JSON form (docs/events.md) with an "lsn" field first:
  {"lsn":1,"type":"conversation_recorded","conversation_id":"ctx_1",...}

Read-only: takes no lock, so it works while a writer appends (it prints what was
written when it reaches the end). A damaged record before the writer's durable end, or
events that compaction deleted before dump reached them, stop it with exit 1 and the
located error on stderr, saying after which LSN the output stops.

Example:
  convlog dump ./my-store --conversation ctx_1 --from 100"#;

pub const VERIFY_HELP: &str = r#"Checks every record's checksum and that it decodes as an event, and every snapshot,
then prints a summary. Exits 1 naming the segment file and byte offset of the first
damage in the log, or the damaged snapshot. Takes no lock. --log-only checks only the
frames (checksums, LSN order), for a log written with the raw log API (`convlog demo`).

Example:
  convlog verify ./my-store"#;

pub const SNAPSHOT_HELP: &str = r#"Prints the snapshot file, its LSN (every event below it is in the snapshot) and the
number of conversations in it. Needs the writer's lock (no other writer may run).

Example:
  convlog snapshot ./my-store"#;

pub const COMPACT_HELP: &str = r#"Without --delete-covered nothing is deleted (the whole log stays for audit). With it,
the sealed segments whose events all precede the newest snapshot are deleted; prints
each removed file, or why nothing was removed. Needs the writer's lock.

Example:
  convlog snapshot ./my-store && convlog compact ./my-store --delete-covered"#;

pub const STATS_HELP: &str = r#"Prints segments (count and bytes), the LSN range, events, conversations, the LSN of the
snapshot in use, the in-memory index (entries and estimated bytes) and log bytes per
event. Opens the store read-only (its newest usable snapshot, then the log after it): takes no
lock and writes nothing, so it runs beside a writer in another process and sees what that
writer has appended so far.

Example:
  convlog stats ./my-store"#;

/// The fsync interval of `--durability periodic` without `--interval-ms`.
pub const PERIODIC_INTERVAL_MS_DEFAULT: u64 = 100;

/// Width of the label column of summaries.
const LABEL_WIDTH: usize = 17;

/// Longest input line `append` reads (and the most standard input the
/// message-control commands read): one line holds one event or one atomic
/// batch, and a batch holds at most `BATCH_BYTES_MAX` encoded bytes. A
/// longer line is refused after this many bytes: the rest of it is skipped
/// unread into memory.
pub const INPUT_LINE_BYTES_MAX: usize = convlog::log::format::BATCH_BYTES_MAX;

/// The UTF-8 byte order mark some editors put at the start of a file.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// `bytes` without a leading UTF-8 byte order mark.
pub fn without_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes)
}

/// What [`read_line_bounded`] read.
#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    /// The input ended.
    End,
    /// A line (with its newline, if any) is in the buffer.
    Line,
    /// The line was longer than the limit: it was skipped, the buffer is empty.
    TooLong,
}

/// Reads one line into `line`, holding at most `limit` bytes of it (its
/// newline aside): the rest of a longer line is consumed and dropped, never
/// buffered.
fn read_line_bounded(
    input: &mut impl BufRead,
    line: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    line.clear();
    let (mut any, mut too_long) = (false, false);
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            break;
        }
        any = true;
        let newline = available.iter().position(|&byte| byte == b'\n');
        let used = newline.map_or(available.len(), |at| at + 1);
        let content = newline.map_or(used, |at| at);
        if !too_long {
            if line.len() + content > limit {
                too_long = true;
                line.clear();
                line.shrink_to_fit();
            } else {
                line.extend_from_slice(&available[..used]);
            }
        }
        input.consume(used);
        if newline.is_some() {
            break;
        }
    }
    Ok(match (any, too_long) {
        (false, _) => LineRead::End,
        (true, true) => LineRead::TooLong,
        (true, false) => LineRead::Line,
    })
}

/// Line numbers listed in the summary of rejected lines.
const REJECTED_LINES_LISTED_MAX: usize = 10;

/// Why a command failed: the message printed after `convlog: error: `.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        match error {
            Error::DirectoryNotEmpty { .. } => Failure(format!(
                "{error}; pass --create-in-nonempty to create it there anyway"
            )),
            other => Failure(other.to_string()),
        }
    }
}

impl From<LineError> for Failure {
    fn from(error: LineError) -> Failure {
        Failure(error.to_string())
    }
}

impl From<ControlError> for Failure {
    /// The message-control wording, unchanged ("Context does not belong to user").
    fn from(error: ControlError) -> Failure {
        Failure(error.to_string())
    }
}

impl From<ProviderError> for Failure {
    fn from(error: ProviderError) -> Failure {
        Failure(error.to_string())
    }
}

pub fn row(label: &str, value: impl std::fmt::Display) {
    println!("{label:<LABEL_WIDTH$}{value}");
}

/// Fails unless `dir` holds a store, so a mistyped path is not created.
pub fn existing_store(dir: &Path) -> Result<(), Failure> {
    LogReader::open(dir)?;
    Ok(())
}

/// Opens (or creates) the store as its writer, with the host reducers every
/// command registers: [`ContextsReducer`], so the snapshots `convlog
/// snapshot` writes carry the contexts of `create-context` and a compacted
/// store still knows them.
/// Opens the store read-only, beside any running writer: no lock, nothing
/// written. No host reducers: a snapshot taken by a host without them still
/// serves conversations.
pub fn open_store_read_only(dir: &Path) -> Result<Store, Failure> {
    let store = Store::open_read_only(dir, StoreOptions::default())?;
    // Catch up now, so a damaged log fails here with its location.
    store.refresh()?;
    Ok(store)
}

pub fn open_store(dir: &Path, options: StoreOptions) -> Result<Store, Failure> {
    Ok(StoreBuilder::new(dir)
        .options(options)
        .reducer(ContextsReducer)
        .open()?)
}

/// Writes `value` to standard output as pretty JSON and a newline.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|error| Failure(format!("the output has no JSON form: {error}")))?;
    text.push('\n');
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .or_else(stdout_closed)
}

pub fn lsn_range(first_lsn: u64, next_lsn: u64) -> String {
    if next_lsn > first_lsn {
        format!("{first_lsn}..={}", next_lsn - 1)
    } else {
        format!("empty (the next LSN is {next_lsn})")
    }
}

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

/// `convlog dump STORE`.
pub fn dump(dir: &Path, from: Option<u64>, conversation: Option<&str>) -> Result<(), Failure> {
    let reader = LogReader::open(dir)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let bar = progress_bar(segment_bytes(dir), "dumping");
    let records = match from {
        Some(lsn) => reader.iter_from(lsn),
        None => reader.iter(),
    };
    let mut last_lsn = None;
    for record in records {
        let record = match record {
            Ok(record) => record,
            Err(error) => {
                // The lines printed so far are whole, checked events; say
                // where the output stops so a pipe's reader knows it is short.
                bar.finish_and_clear();
                out.flush().or_else(stdout_closed)?;
                let printed = match last_lsn {
                    Some(lsn) => format!("the output stops after LSN {lsn}"),
                    None => "no event was printed".to_string(),
                };
                return Err(Failure(format!("{error} ({printed})")));
            }
        };
        last_lsn = Some(record.lsn);
        bar.inc(record.payload.len() as u64);
        let event = convlog::codec::decode_event_at(record.lsn, &record.payload)
            .map_err(|error| Failure(format!("store {}: {error}", dir.display())))?;
        if conversation.is_some_and(|id| event.conversation_id() != Some(id)) {
            continue;
        }
        let line = json::to_json_line(record.lsn, &event).map_err(|error| {
            Failure(format!(
                "the event at LSN {} has no JSON form: {error}",
                record.lsn
            ))
        })?;
        if let Err(error) = writeln!(out, "{line}") {
            return stdout_closed(error);
        }
    }
    bar.finish_and_clear();
    out.flush().or_else(stdout_closed)
}

/// Bytes in the store's segment files (the work a full read does).
pub fn segment_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .filter(|entry| {
                    entry
                        .path()
                        .extension()
                        .is_some_and(|extension| extension == "seg")
                })
                .filter_map(|entry| entry.metadata().ok())
                .map(|metadata| metadata.len())
                .sum()
        })
        .unwrap_or(0)
}

/// A byte progress bar on stderr; indicatif draws nothing when stderr is
/// not a terminal, so pipes and CI logs stay clean.
pub fn progress_bar(total_bytes: u64, label: &'static str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total_bytes),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, {eta} left)",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label);
    bar
}

/// A spinner on stderr for work without a known size (hidden off a terminal).
pub fn spinner(label: &'static str) -> indicatif::ProgressBar {
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(label);
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// A reader that went away (`convlog dump | head`) ends the output quietly.
pub fn stdout_closed(error: std::io::Error) -> Result<(), Failure> {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(())
    } else {
        Err(Failure(format!("write to standard output: {error}")))
    }
}

/// `convlog verify STORE [--log-only]`.
pub fn verify(dir: &Path, log_only: bool) -> Result<(), Failure> {
    if log_only {
        let log = convlog::log::verify(dir)?;
        log_rows(dir, &log);
        let checked = if log.torn_tail.is_some() {
            "ok: every frame before the torn tail checked (payloads not decoded: --log-only)"
        } else {
            "ok: every frame checked (payloads not decoded: --log-only)"
        };
        row("result", checked);
        return Ok(());
    }
    let total: u64 = segment_bytes(dir);
    let bar = progress_bar(total, "verifying");
    let verified = convlog::store::verify(dir, &mut |checked| bar.set_position(checked));
    bar.finish_and_clear();
    let report = verified.map_err(|error| match error {
        Error::UndecodableEvent { .. } => Failure(format!(
            "{error} (a log written with the raw log API holds no convlog events: check its frames with `convlog verify --log-only`)"
        )),
        other => Failure::from(other),
    })?;
    let log = &report.log;
    log_rows(dir, log);
    row("conversations", report.conversations);
    if report.snapshots.is_empty() {
        row("snapshots", "none");
    }
    let mut damaged = Vec::new();
    for (path, checked) in &report.snapshots {
        match checked {
            Ok((lsn, conversations)) => row(
                "snapshot",
                format!(
                    "{}: LSN {lsn}, {conversations} conversation(s), ok",
                    path.display()
                ),
            ),
            Err(reason) => {
                row(
                    "snapshot",
                    format!("{}: UNUSABLE: {reason}", path.display()),
                );
                damaged.push(format!("snapshot {} is unusable: {reason}", path.display()));
            }
        }
    }
    if damaged.is_empty() {
        let checked = if log.torn_tail.is_some() {
            "ok: every record before the torn tail and every snapshot checked"
        } else {
            "ok: every record and every snapshot checked"
        };
        row("result", checked);
        return Ok(());
    }
    row(
        "result",
        format!("{} unusable snapshot(s); the log is intact", damaged.len()),
    );
    Err(Failure(format!(
        "{} (the log is intact: opening the store skips it; take a new snapshot, then delete it)",
        damaged.join("; ")
    )))
}

/// The summary rows of a log check.
fn log_rows(dir: &Path, log: &convlog::log::VerifyReport) {
    row("store", dir.display());
    row("segments", log.segments);
    row("frames", format!("{} (atomic batches)", log.frames));
    row("events", log.events);
    row("bytes", log.bytes);
    row("LSN range", lsn_range(log.first_lsn, log.next_lsn));
    match &log.torn_tail {
        Some((segment, offset)) => row(
            "tail",
            format!(
                "torn at {}:{offset} (unsynced bytes a crash left; the next writer cuts them)",
                segment.display()
            ),
        ),
        None => row("tail", "clean"),
    }
}

/// `convlog snapshot STORE`.
pub fn snapshot(dir: &Path) -> Result<(), Failure> {
    existing_store(dir)?;
    let store = open_store(dir, StoreOptions::default())?;
    let bar = spinner("writing snapshot");
    let info = store.snapshot();
    bar.finish_and_clear();
    let info = info?;
    row("snapshot", info.path.display());
    row(
        "lsn",
        format!("{} (every event below it is in the snapshot)", info.lsn),
    );
    row("conversations", info.conversations);
    Ok(())
}

/// `convlog compact STORE [--delete-covered]`.
pub fn compact(dir: &Path, delete_covered: bool) -> Result<(), Failure> {
    existing_store(dir)?;
    let retention = if delete_covered {
        Retention::DeleteCoveredBySnapshot
    } else {
        Retention::KeepAll
    };
    let store = open_store(
        dir,
        StoreOptions {
            retention,
            ..StoreOptions::default()
        },
    )?;
    let bar = spinner("compacting");
    let report = store.compact();
    bar.finish_and_clear();
    let report = report?;
    for path in &report.removed {
        row("removed", path.display());
    }
    if report.removed.is_empty() {
        let mut note = report
            .note
            .unwrap_or_else(|| "no segment could be removed".to_string());
        if !delete_covered {
            note.push_str(
                "; pass --delete-covered to delete the segments the newest snapshot covers",
            );
        }
        row("removed", format!("nothing: {note}"));
    } else {
        row("removed", format!("{} segment(s)", report.removed.len()));
    }
    Ok(())
}

/// `convlog stats STORE`.
pub fn stats(dir: &Path) -> Result<(), Failure> {
    existing_store(dir)?;
    let store = open_store_read_only(dir)?;
    let stats = store.stats();
    let listing = convlog::log::segment::list(&convlog::storage::FileSystem, dir)?;
    let mut bytes = 0u64;
    for segment in &listing.segments {
        bytes += std::fs::metadata(&segment.path)
            .map_err(|error| Failure(format!("stat {}: {error}", segment.path.display())))?
            .len();
    }
    let events = stats.next_lsn.saturating_sub(stats.first_lsn);
    row("store", dir.display());
    row(
        "segments",
        format!("{} ({bytes} bytes)", listing.segments.len()),
    );
    row("LSN range", lsn_range(stats.first_lsn, stats.next_lsn));
    row("events", events);
    row("conversations", stats.conversations);
    row(
        "snapshot LSN",
        stats
            .snapshot_lsn
            .map_or_else(|| "none".to_string(), |lsn| lsn.to_string()),
    );
    row(
        "index",
        format!(
            "{} entries, {} bytes (in memory)",
            stats.index_entries, stats.index_bytes
        ),
    );
    if events > 0 {
        row(
            "bytes per event",
            format!("{:.1} (log bytes / events)", bytes as f64 / events as f64),
        );
    } else {
        row("bytes per event", "- (no events)");
    }
    Ok(())
}
