//! `tail`: print events as a writer (in this or another process) appends them.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::format::{clock, first_line, model_failure_facts, one_line};
use crate::codec;
use crate::erasure::{StoreKey, Unsealed, Unsealer};
use crate::error::{Error, Result};
use crate::json;
use crate::log::{LogIter, LogReader, Lsn, Record};
use crate::model::{
    ConversationEntry, CustomEvent, Event, ModelCallFailed, Role, ToolStatus, ToolStatusChanged,
};

/// How [`tail()`] prints each event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailFormat {
    /// The event's JSON form with its `"lsn"`, one per line (as `dump`).
    Json,
    /// One human line per event ([`event_summary`]), coloured when `color`.
    Summary {
        /// Use ANSI colour escapes.
        color: bool,
    },
}

/// Where [`tail()`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailStart {
    /// At the first event of the log.
    Beginning,
    /// At this LSN.
    Lsn(Lsn),
    /// With the last this-many events (of the conversation, when filtered),
    /// like `tail -n`. Finding them reads the log once.
    Last(usize),
    /// After the last event: only events appended from now on.
    End,
}

/// What [`tail()`] prints and when it stops.
///
/// A builder, so a new option never breaks a host: start from `new()` (the
/// defaults) and chain a setter per option, each named as the field it
/// sets; the fields stay public for reading.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TailOptions {
    /// Where to start.
    pub start: TailStart,
    /// Keep waiting for new events at the end of the log (`--follow`).
    /// Without it, tail stops at the end of what is written.
    pub follow: bool,
    /// How to print each event.
    pub format: TailFormat,
    /// Print only the events of this conversation.
    pub conversation: Option<String>,
    /// Stop after printing this many events.
    pub max_events: Option<u64>,
    /// When following, stop after this long with no new event.
    pub idle_timeout: Option<Duration>,
    /// When following, how long one wait for new events lasts before the
    /// stop condition is checked again.
    pub poll_interval: Duration,
}

impl Default for TailOptions {
    /// The last 10 events as summaries, not following, no other bound.
    fn default() -> TailOptions {
        TailOptions {
            start: TailStart::Last(10),
            follow: false,
            format: TailFormat::Summary { color: false },
            conversation: None,
            max_events: None,
            idle_timeout: None,
            poll_interval: Duration::from_millis(200),
        }
    }
}

impl TailOptions {
    /// The last 10 events as summaries, not following, no other bound.
    pub fn new() -> TailOptions {
        TailOptions::default()
    }

    /// Sets where to start.
    pub fn start(mut self, start: TailStart) -> TailOptions {
        self.start = start;
        self
    }

    /// Sets whether tail keeps waiting for new events at the end of the log.
    pub fn follow(mut self, follow: bool) -> TailOptions {
        self.follow = follow;
        self
    }

    /// Sets how each event is printed.
    pub fn format(mut self, format: TailFormat) -> TailOptions {
        self.format = format;
        self
    }

    /// Sets the one conversation whose events are printed (`None`: all).
    pub fn conversation(mut self, conversation: Option<String>) -> TailOptions {
        self.conversation = conversation;
        self
    }

    /// Sets after how many printed events tail stops (`None`: no bound).
    pub fn max_events(mut self, max_events: Option<u64>) -> TailOptions {
        self.max_events = max_events;
        self
    }

    /// Sets how long, when following, tail waits for a new event before it
    /// stops (`None`: forever).
    pub fn idle_timeout(mut self, idle_timeout: Option<Duration>) -> TailOptions {
        self.idle_timeout = idle_timeout;
        self
    }

    /// Sets how long one wait for new events lasts, when following, before
    /// the stop condition is checked again.
    pub fn poll_interval(mut self, poll_interval: Duration) -> TailOptions {
        self.poll_interval = poll_interval;
        self
    }
}

/// Why [`tail()`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailStop {
    /// Not following, and the end of the log was reached.
    EndOfLog,
    /// `max_events` were printed.
    MaxEvents,
    /// Following, and no event arrived for `idle_timeout`.
    Idle,
    /// The caller's stop condition said so.
    Stopped,
    /// The output was closed (a broken pipe: `convlog tail | head`).
    OutputClosed,
}

/// What [`tail()`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailReport {
    /// Events printed.
    pub printed: u64,
    /// The LSN after the last event read: where a later tail would resume.
    pub next_lsn: Lsn,
    /// Why it returned.
    pub stop: TailStop,
}

/// Prints the events of the store at `dir` to `out`, following the log as
/// another process appends when `options.follow` is set. Takes no lock.
///
/// `should_stop` is asked after every event and every idle wait (at most
/// `poll_interval` apart); returning true ends the tail (the CLI passes a
/// Ctrl-C flag, tests a deadline). The output is flushed whenever tail
/// reaches the end of what is written, so a pipe sees events as they come.
/// A closed output ends it quietly ([`TailStop::OutputClosed`]); any other
/// write failure, damage in the log or an undecodable event is an error.
///
/// On an encrypted store (docs/erasure.md) sealed events are printed as
/// stored: their conversation id, LSN and size, "sealed" (their content
/// needs the store key: [`tail_with_key`]).
pub fn tail(
    dir: impl AsRef<Path>,
    out: &mut dyn Write,
    options: &TailOptions,
    should_stop: &mut dyn FnMut() -> bool,
) -> Result<TailReport> {
    let reader = LogReader::open(dir.as_ref())?;
    tail_reader(&reader, out, options, should_stop)
}

/// [`tail()`] of an encrypted store with its store key: sealed events are
/// printed opened, those of erased conversations as stored and marked
/// erased. Without a key (or on a store in the clear) it is [`tail()`].
/// Fails with `Error::Encryption` when the key is not the store's.
pub fn tail_with_key(
    dir: impl AsRef<Path>,
    key: Option<&StoreKey>,
    out: &mut dyn Write,
    options: &TailOptions,
    should_stop: &mut dyn FnMut() -> bool,
) -> Result<TailReport> {
    let dir = dir.as_ref();
    let reader = LogReader::open(dir)?;
    let unsealer = match key {
        Some(key) if crate::erasure::is_encrypted_store(dir) => Some(Unsealer::open(dir, key)?),
        _ => None,
    };
    tail_inner(&reader, unsealer.as_ref(), out, options, should_stop)
}

/// [`tail()`] over an open reader: a directory reader, or
/// [`crate::log::Log::reader`] in the writer's own process.
pub fn tail_reader(
    reader: &LogReader,
    out: &mut dyn Write,
    options: &TailOptions,
    should_stop: &mut dyn FnMut() -> bool,
) -> Result<TailReport> {
    tail_inner(reader, None, out, options, should_stop)
}

fn tail_inner(
    reader: &LogReader,
    unsealer: Option<&Unsealer>,
    out: &mut dyn Write,
    options: &TailOptions,
    should_stop: &mut dyn FnMut() -> bool,
) -> Result<TailReport> {
    let mut tail = Tail {
        out,
        options,
        unsealer,
        printed: 0,
        next_lsn: match options.start {
            TailStart::Lsn(lsn) => lsn,
            _ => 1,
        },
    };
    let mut iter = match options.start {
        TailStart::Beginning => reader.iter(),
        TailStart::Lsn(lsn) => reader.iter_from(lsn),
        TailStart::End | TailStart::Last(_) => {
            let keep = match options.start {
                TailStart::Last(count) => count,
                _ => 0,
            };
            let mut iter = reader.iter();
            let mut last: VecDeque<(Lsn, Event)> = VecDeque::with_capacity(keep.min(4096));
            for record in iter.by_ref() {
                let record = record?;
                tail.next_lsn = record.lsn + 1;
                if keep == 0 {
                    continue;
                }
                let event = decode(&record)?;
                if tail.selected(&event) {
                    if last.len() == keep {
                        last.pop_front();
                    }
                    last.push_back((record.lsn, event));
                }
            }
            for (lsn, event) in last {
                // Opened only when printed (the deque drops most).
                let (event, erased) = tail.unseal(lsn, event)?;
                if let Some(stop) = tail.print(lsn, &event, erased)? {
                    return Ok(tail.report(stop));
                }
            }
            iter
        }
    };
    let stop = tail.follow(&mut iter, should_stop)?;
    Ok(tail.report(stop))
}

struct Tail<'a> {
    out: &'a mut dyn Write,
    options: &'a TailOptions,
    unsealer: Option<&'a Unsealer>,
    printed: u64,
    next_lsn: Lsn,
}

fn decode(record: &Record) -> Result<Event> {
    codec::decode_event_at(record.lsn, &record.payload)
}

fn write_failed(error: io::Error) -> Error {
    Error::Io {
        operation: "write tail output to",
        path: PathBuf::from("<output>"),
        source: error,
    }
}

impl Tail<'_> {
    fn report(&self, stop: TailStop) -> TailReport {
        TailReport {
            printed: self.printed,
            next_lsn: self.next_lsn,
            stop,
        }
    }

    fn selected(&self, event: &Event) -> bool {
        match &self.options.conversation {
            Some(id) => event.conversation_id() == Some(id.as_str()),
            None => true,
        }
    }

    /// The event opened when there is an unsealer, and whether it stays
    /// sealed because its conversation was erased.
    fn unseal(&self, lsn: Lsn, event: Event) -> Result<(Event, bool)> {
        match self.unsealer {
            Some(unsealer) => Ok(match unsealer.unseal(lsn, event)? {
                Unsealed::Plain(event) => (event, false),
                Unsealed::Erased(event) => (event, true),
            }),
            None => Ok((event, false)),
        }
    }

    /// Prints one event; `Some(stop)` when tail must end.
    fn print(&mut self, lsn: Lsn, event: &Event, erased: bool) -> Result<Option<TailStop>> {
        if self
            .options
            .max_events
            .is_some_and(|max| self.printed >= max)
        {
            return Ok(Some(TailStop::MaxEvents));
        }
        let line = match self.options.format {
            TailFormat::Json => json::to_json_line(lsn, event)?,
            TailFormat::Summary { color } if erased => {
                let summary = event_summary(lsn, event, color);
                match summary.rfind(SEALED_SUMMARY) {
                    Some(at) => {
                        format!("{}{}", &summary[..at], paint(color, "1;31", ERASED_SUMMARY))
                    }
                    None => summary,
                }
            }
            TailFormat::Summary { color } => event_summary(lsn, event, color),
        };
        match writeln!(self.out, "{line}") {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                return Ok(Some(TailStop::OutputClosed))
            }
            Err(error) => return Err(write_failed(error)),
        }
        self.printed += 1;
        if self
            .options
            .max_events
            .is_some_and(|max| self.printed >= max)
        {
            return self
                .flush()
                .map(|closed| Some(closed.unwrap_or(TailStop::MaxEvents)));
        }
        Ok(None)
    }

    /// Flushes; `Some(OutputClosed)` when the reader went away.
    fn flush(&mut self) -> Result<Option<TailStop>> {
        match self.out.flush() {
            Ok(()) => Ok(None),
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                Ok(Some(TailStop::OutputClosed))
            }
            Err(error) => Err(write_failed(error)),
        }
    }

    fn follow(
        &mut self,
        iter: &mut LogIter,
        should_stop: &mut dyn FnMut() -> bool,
    ) -> Result<TailStop> {
        if self
            .options
            .max_events
            .is_some_and(|max| self.printed >= max)
        {
            return Ok(TailStop::MaxEvents);
        }
        let mut last_event = Instant::now();
        loop {
            let item = match iter.next() {
                Some(item) => Some(item),
                None => {
                    if let Some(stop) = self.flush()? {
                        return Ok(stop);
                    }
                    if !self.options.follow {
                        return Ok(TailStop::EndOfLog);
                    }
                    if should_stop() {
                        return Ok(TailStop::Stopped);
                    }
                    if self
                        .options
                        .idle_timeout
                        .is_some_and(|idle| last_event.elapsed() >= idle)
                    {
                        return Ok(TailStop::Idle);
                    }
                    let mut wait = self.options.poll_interval.max(Duration::from_millis(1));
                    if let Some(idle) = self.options.idle_timeout {
                        wait = wait.min(idle.saturating_sub(last_event.elapsed()));
                    }
                    iter.wait_next(wait)
                }
            };
            let Some(record) = item else {
                continue;
            };
            let record = record?;
            self.next_lsn = record.lsn + 1;
            last_event = Instant::now();
            let event = decode(&record)?;
            if self.selected(&event) {
                let (event, erased) = self.unseal(record.lsn, event)?;
                if let Some(stop) = self.print(record.lsn, &event, erased)? {
                    return Ok(stop);
                }
            }
            if should_stop() {
                self.flush()?;
                return Ok(TailStop::Stopped);
            }
        }
    }
}

fn paint(color: bool, style: &str, text: &str) -> String {
    if color {
        format!("\x1b[{style}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// One line describing an event, for `tail` and logs:
///
/// ```text
///     42  12:00:01.000  ctx_1  eval-1 #2 assistant: I'll check both. → get_weather(call_1), search(call_2)
///     43  12:00:01.010  ctx_1  eval-1 call call_1 → running
///     44  12:00:03.000  ctx_1  eval-1 #4 tool ← call_2 get_weather ERROR: upstream timeout
/// ```
///
/// Recorded content is put on one line, cut, and stripped of control
/// characters; with `color` false the line holds no escape sequence.
pub fn event_summary(lsn: Lsn, event: &Event, color: bool) -> String {
    let (at, what) = match event {
        Event::ConversationRecorded(recorded) => (
            Some(recorded.entry.created_at),
            entry_summary(&recorded.entry, color),
        ),
        Event::ToolStatus(change) => (Some(change.at), status_summary(change, color)),
        Event::MessagesReplaced(replaced) => (
            Some(replaced.at),
            format!("messages replaced: now {} entries", replaced.entries.len()),
        ),
        Event::HistoryCurated(curated) => (
            Some(curated.at),
            format!(
                "history curated by {}: {} → {} messages sent{}{}",
                one_line(&curated.strategy, 60),
                curated.original_count,
                curated.curated_count,
                curated
                    .prompt_name
                    .as_deref()
                    .map(|name| format!(", prompt {}", one_line(name, 60)))
                    .unwrap_or_default(),
                curated
                    .session_id
                    .as_deref()
                    .map(|id| format!(", session {}", one_line(id, 60)))
                    .unwrap_or_default()
            ),
        ),
        Event::Custom(custom) => (None, custom_summary(custom, color)),
    };
    let at = at.map(clock).unwrap_or_else(|| "-".to_string());
    let conversation = event
        .conversation_id()
        .map(|id| one_line(id, 60))
        .unwrap_or_else(|| "-".to_string());
    format!(
        "{}  {}  {}  {what}",
        paint(color, "2", &format!("{lsn:>6}")),
        paint(color, "2", &format!("{at:<12}")),
        paint(color, "36", &conversation)
    )
}

/// What `event_summary` says of a custom event: a failed model call's
/// status, attempts and the first line of its error; an unreadable one as
/// such; any other kind its name and size.
fn custom_summary(custom: &CustomEvent, color: bool) -> String {
    if custom.kind == crate::erasure::SEALED_KIND {
        return format!(
            "{}: {} bytes",
            paint(color, "33", SEALED_SUMMARY),
            custom.payload.len()
        );
    }
    match ModelCallFailed::from_custom(custom) {
        Some(Ok(failure)) => format!(
            "{} {} ({}): {}",
            one_line(&failure.evaluation_id, 60),
            paint(color, "1;31", "model call failed"),
            model_failure_facts(failure.status, failure.attempts),
            first_line(&failure.error, SUMMARY_TEXT_CHARS)
        ),
        Some(Err(reason)) => format!(
            "{} {}",
            paint(color, "1;31", "model call failed (unreadable):"),
            one_line(&reason, SUMMARY_TEXT_CHARS)
        ),
        None => format!(
            "custom {}: {} bytes",
            one_line(&custom.kind, 60),
            custom.payload.len()
        ),
    }
}

/// What a summary says of a sealed event read without the store key.
const SEALED_SUMMARY: &str = "sealed (its content needs the store key)";

/// What a summary says of a sealed event of an erased conversation.
const ERASED_SUMMARY: &str = "sealed, conversation erased (its key is destroyed)";

/// Characters of recorded text a summary keeps.
const SUMMARY_TEXT_CHARS: usize = 100;

/// Calls of an assistant entry a summary names; the rest are counted.
const SUMMARY_CALLS_LISTED_MAX: usize = 5;

/// What `event_summary` says of a recorded entry: evaluation, sequence,
/// role, the call it answers, its text, the calls it makes.
fn entry_summary(entry: &ConversationEntry, color: bool) -> String {
    let role = match entry.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut line = format!(
        "{} #{} {}",
        one_line(&entry.evaluation_id, 60),
        entry.sequence,
        paint(color, "1", role)
    );
    if let (Role::Tool, Some(call_id)) = (entry.role, entry.tool_call_id.as_deref()) {
        line.push_str(&format!(" ← {}", one_line(call_id, 60)));
        if let Some(name) = &entry.tool_name {
            line.push_str(&format!(" {}", one_line(name, 60)));
        }
        if entry.is_error {
            line.push_str(&format!(" {}", paint(color, "1;31", "ERROR")));
        }
    }
    if let Some(content) = entry
        .content
        .as_deref()
        .filter(|text| !text.trim().is_empty())
    {
        line.push_str(&format!(": {}", one_line(content, SUMMARY_TEXT_CHARS)));
    }
    if !entry.tool_calls.is_empty() {
        let calls: Vec<String> = entry
            .tool_calls
            .iter()
            .take(SUMMARY_CALLS_LISTED_MAX)
            .map(|call| {
                format!(
                    "{}({})",
                    one_line(&call.name, 40),
                    one_line(&call.call_id, 40)
                )
            })
            .collect();
        let more = entry
            .tool_calls
            .len()
            .saturating_sub(SUMMARY_CALLS_LISTED_MAX);
        let more = if more > 0 {
            format!(", +{more} more")
        } else {
            String::new()
        };
        line.push_str(&format!(" → {}{more}", calls.join(", ")));
    }
    line
}

/// What `event_summary` says of a status change.
fn status_summary(change: &ToolStatusChanged, color: bool) -> String {
    let style = match change.status {
        ToolStatus::Failed => "1;31",
        ToolStatus::Completed => "32",
        _ => "33",
    };
    let mut line = format!(
        "{} call {} → {}",
        one_line(&change.evaluation_id, 60),
        one_line(&change.call_id, 60),
        paint(color, style, change.status.as_str())
    );
    if change.resumed {
        line.push_str(" (resumed)");
    }
    if let Some(error) = &change.error {
        line.push_str(&format!(": {}", one_line(error, SUMMARY_TEXT_CHARS)));
    }
    line
}
