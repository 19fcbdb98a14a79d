//! The provider-neutral conversation model: entries, tool calls and events.
//!
//! These types are the events convlog stores. Their JSON form, with every
//! field, default and limit and an example of each event, is in
//! `docs/events.md`; `docs/model.md` gives the fold rules and how the message
//! shapes of other libraries (parts, history managers, provider mappers) map
//! onto these types. Their binary form is the codec's business
//! (`crate::codec`, specified in `docs/format.md`).
//!
//! Every event is checked against named limits before it is stored
//! ([`Event::validate`]); a failed check names the field.
//!
//! A host builds what it records with the constructors:
//! [`ConversationEntry::user`], [`ConversationEntry::assistant_calling`],
//! [`ConversationEntry::tool_result`], [`Event::tool_status`] and the like.
//! Each gives the event the JSON form gives with its defaults: a fresh
//! message id, the current time, every optional field empty.
//!
//! ```
//! use convlog::model::{ConversationEntry, Event, ToolCall, ToolStatus};
//!
//! let ask = ConversationEntry::assistant_calling(
//!     "eval-1",
//!     1,
//!     [ToolCall::new("call_1", "search", r#"{"q":"paris"}"#)],
//! )
//! .with_turn(1);
//! let events = vec![
//!     ask.recorded_in("ctx_123"),
//!     Event::tool_status("ctx_123", "eval-1", "call_1", ToolStatus::Running),
//!     ConversationEntry::tool_result("eval-1", 2, "call_1", "search", "18C")
//!         .with_turn(1)
//!         .recorded_in("ctx_123"),
//! ];
//! assert!(events.iter().all(|event| event.validate().is_ok()));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// Longest conversation, evaluation, session, call id or tool name, in bytes.
pub const ID_BYTES_MAX: usize = 256;
/// Longest text field (content, arguments, reasoning, error), in bytes.
pub const TEXT_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Most tool calls in one assistant entry.
pub const TOOL_CALLS_MAX: usize = 1024;
/// Most metadata pairs on one entry.
pub const METADATA_ENTRIES_MAX: usize = 256;
/// Longest metadata key or short label (strategy, finish reason, prompt key, kind).
pub const LABEL_BYTES_MAX: usize = 1024;
/// Most entries in one `messages_replaced` event.
pub const REPLACED_ENTRIES_MAX: usize = 100_000;
/// Highest entry `sequence`: 2^53 - 1, the largest integer every JSON
/// reader holds exactly. Far below `u64::MAX`, so "the next sequence"
/// (`sequence + 1`) of any stored entry is a number, never a wrap to 0.
pub const SEQUENCE_MAX: u64 = (1 << 53) - 1;
/// Highest entry `turn`: 2^31 - 1, the largest a signed 32-bit reader
/// holds. Far below `u32::MAX`, so the next turn of any stored entry is a
/// number, never a wrap to 0.
pub const TURN_MAX: u32 = i32::MAX as u32;

/// A point in time: microseconds since the Unix epoch, UTC.
///
/// JSON: an RFC 3339 string in UTC (`2026-11-22T12:00:00.123456Z`).
/// Binary: a signed 64-bit count of microseconds (a zigzag varint,
/// docs/format.md section 12). Its serde form is written by hand below,
/// not derived; `codec`'s golden tests pin it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The current time. Only hosts and the store's input layer call this;
    /// reducers never read the clock.
    pub fn now() -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }

    /// Converts from `SystemTime` (saturating outside the representable range).
    pub fn from_system_time(time: SystemTime) -> Timestamp {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => Timestamp(i64::try_from(after.as_micros()).unwrap_or(i64::MAX)),
            Err(before) => {
                Timestamp(-i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX))
            }
        }
    }

    /// Parses an RFC 3339 time in UTC (`Z`; `T` and `Z` in either case, as
    /// RFC 3339 allows; a space for `T` and a missing `Z` are accepted too).
    ///
    /// Refused, with what is wrong: times before 1970-01-01 (convlog times
    /// count microseconds from the Unix epoch), a field out of its range
    /// (month 13, day 31 of April, hour 24, ...), and the leap second
    /// `:60`, which Unix time cannot represent (record `23:59:59.999999`).
    pub fn parse_rfc3339(text: &str) -> Result<Timestamp, String> {
        let normalized: String = text
            .chars()
            .map(|c| match c {
                't' => 'T',
                'z' => 'Z',
                c => c,
            })
            .collect();
        check_rfc3339_fields(&normalized)
            .map_err(|reason| format!("not an RFC 3339 UTC time: {reason}: {text:?}"))?;
        humantime::parse_rfc3339_weak(&normalized)
            .map(Timestamp::from_system_time)
            .map_err(|error| format!("not an RFC 3339 UTC time ({error}): {text:?}"))
    }

    /// Milliseconds from `self` to `later` (negative if `later` is earlier).
    pub fn millis_until(self, later: Timestamp) -> i64 {
        (later.0 - self.0) / 1000
    }
}

/// Checks the date and time fields of `YYYY-MM-DDTHH:MM:SS...` one by one,
/// so a bad one is named; text of another shape is left to the parser.
fn check_rfc3339_fields(text: &str) -> Result<(), String> {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = bytes.get(range)?;
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0, |value, digit| value * 10 + u32::from(digit - b'0'))
        })
    };
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    let shaped = bytes.len() >= 19
        && separators
            .iter()
            .all(|&(at, separator)| bytes[at] == separator)
        && matches!(bytes[10], b'T' | b' ');
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second), true) = (
        digits(0..4),
        digits(5..7),
        digits(8..10),
        digits(11..13),
        digits(14..16),
        digits(17..19),
        shaped,
    ) else {
        return Ok(());
    };
    if year < 1970 {
        return Err(format!(
            "year {year:04} is before 1970 (times count microseconds from 1970-01-01T00:00:00Z)"
        ));
    }
    if !(1..=12).contains(&month) {
        return Err(format!("month {month:02} is out of range 01-12"));
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=days).contains(&day) {
        return Err(format!(
            "day {day:02} is out of range 01-{days} for {year:04}-{month:02}"
        ));
    }
    if hour > 23 {
        return Err(format!("hour {hour:02} is out of range 00-23"));
    }
    if minute > 59 {
        return Err(format!("minute {minute:02} is out of range 00-59"));
    }
    if second == 60 {
        return Err(
            "second 60 is a leap second, which Unix time (and so convlog) cannot represent; record 23:59:59.999999 instead"
                .to_string(),
        );
    }
    if second > 59 {
        return Err(format!("second {second:02} is out of range 00-59"));
    }
    Ok(())
}

impl fmt::Display for Timestamp {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 0 {
            let time = UNIX_EPOCH + Duration::from_micros(self.0 as u64);
            write!(formatter, "{}", humantime::format_rfc3339_micros(time))
        } else {
            write!(formatter, "{}us-before-epoch", -self.0)
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            if self.0 < 0 {
                return Err(serde::ser::Error::custom(
                    "times before 1970 have no RFC 3339 form here",
                ));
            }
            serializer.collect_str(self)
        } else {
            serializer.serialize_i64(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            Timestamp::parse_rfc3339(&text).map_err(serde::de::Error::custom)
        } else {
            i64::deserialize(deserializer).map(Timestamp)
        }
    }
}

/// Who a message is from.
///
/// On-disk format: a role is stored as its variant index (system 0, user 1,
/// assistant 2, tool 3; docs/format.md section 12): variant order is part
/// of the format. Do not reorder the variants or insert one before another;
/// a new role goes last. `codec`'s golden tests
/// pin the indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system prompt.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// The life of a tool call: pending → running → completed | failed.
///
/// On-disk format: a status is stored as its variant index (pending 0,
/// running 1, completed 2, failed 3; docs/format.md section 12): variant
/// order is part of the format. Do not reorder the variants or insert one
/// before another; a new status goes last.
/// `codec`'s golden tests pin the indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    /// Requested by the model, not started.
    #[default]
    Pending,
    /// Started, not finished.
    Running,
    /// Finished with a result.
    Completed,
    /// Finished with an error.
    Failed,
}

impl ToolStatus {
    /// Position in the life cycle; a status never moves to a lower rank.
    pub fn rank(self) -> u8 {
        match self {
            ToolStatus::Pending => 0,
            ToolStatus::Running => 1,
            ToolStatus::Completed | ToolStatus::Failed => 2,
        }
    }

    /// Completed or failed.
    pub fn is_finished(self) -> bool {
        self.rank() == 2
    }

    /// The JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Pending => "pending",
            ToolStatus::Running => "running",
            ToolStatus::Completed => "completed",
            ToolStatus::Failed => "failed",
        }
    }
}

/// The model's reasoning, kept so it can be passed back verbatim.
///
/// On-disk format: field order is part of the format. The fields are
/// stored in this order, without names, in event payloads and, for the
/// types a conversation slice holds, in snapshot blobs (docs/format.md
/// sections 12 and 13). Do not reorder, insert or remove fields without a
/// new codec version. `codec`'s golden tests pin the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Reasoning {
    /// The reasoning text, when the provider returned it.
    #[serde(default)]
    pub text: Option<String>,
    /// The provider's signature over it (Anthropic thinking, Gemini thought
    /// signature), echoed back unchanged.
    #[serde(default)]
    pub signature: Option<String>,
    /// Whether the provider returned it redacted (the opaque data is then in
    /// `signature`).
    #[serde(default)]
    pub redacted: bool,
}

/// A tool call requested by the assistant, with its status.
///
/// On-disk format: field order is part of the format. The fields are
/// stored in this order, without names, in event payloads and, for the
/// types a conversation slice holds, in snapshot blobs (docs/format.md
/// sections 12 and 13). Do not reorder, insert or remove fields without a
/// new codec version. `codec`'s golden tests pin the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// Provider-assigned id that the result refers to.
    pub call_id: String,
    /// Name of the tool.
    pub name: String,
    /// The provider's JSON-encoded arguments, verbatim (even if not valid JSON).
    pub arguments: String,
    /// Where the call is in its life cycle.
    #[serde(default)]
    pub status: ToolStatus,
    /// When it started running.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// When it completed or failed.
    #[serde(default)]
    pub ended_at: Option<Timestamp>,
    /// The error text of a failed call.
    #[serde(default)]
    pub error: Option<String>,
}

/// One message of a conversation, provider-neutral.
///
/// On-disk format: field order is part of the format. The fields are
/// stored in this order, without names, in event payloads and, for the
/// types a conversation slice holds, in snapshot blobs (docs/format.md
/// sections 12 and 13). Do not reorder, insert or remove fields without a
/// new codec version. `codec`'s golden tests pin the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationEntry {
    /// Unique id; recording the same id twice is a no-op.
    pub message_id: Uuid,
    /// The `evaluate()` run this entry belongs to.
    pub evaluation_id: String,
    /// Position within the evaluation (system = 0).
    pub sequence: u64,
    /// Provider round trip number (increments after each assistant response).
    #[serde(default)]
    pub turn: u32,
    /// Who it is from.
    pub role: Role,
    /// Text content; may be absent on an assistant entry with tool calls.
    #[serde(default)]
    pub content: Option<String>,
    /// Reasoning content with its signature or redacted form.
    #[serde(default)]
    pub reasoning: Option<Reasoning>,
    /// Tool calls requested (assistant entries).
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// The call this entry answers (tool entries).
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// The tool that produced this result (tool entries).
    #[serde(default)]
    pub tool_name: Option<String>,
    /// The tool failed; `content` holds its error.
    #[serde(default)]
    pub is_error: bool,
    /// Why the model stopped (`stop`, `tool_calls`, `length`, ...).
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Prompt namespace (for the resume identity check).
    #[serde(default)]
    pub prompt_ns: Option<String>,
    /// Prompt key (for the resume identity check).
    #[serde(default)]
    pub prompt_key: Option<String>,
    /// When the entry was created.
    pub created_at: Timestamp,
    /// Provider extras that must be echoed back, and part layout (see `docs/model.md`).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

impl ConversationEntry {
    /// A new entry with a fresh message id and the current time.
    pub fn new(
        evaluation_id: impl Into<String>,
        sequence: u64,
        role: Role,
        content: Option<String>,
    ) -> Self {
        ConversationEntry {
            message_id: Uuid::new_v4(),
            evaluation_id: evaluation_id.into(),
            sequence,
            turn: 0,
            role,
            content,
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            is_error: false,
            finish_reason: None,
            prompt_ns: None,
            prompt_key: None,
            created_at: Timestamp::now(),
            metadata: BTreeMap::new(),
        }
    }

    /// A system prompt at `sequence` (the system prompt of an evaluation is
    /// sequence 0), with a fresh message id and the current time.
    pub fn system(
        evaluation_id: impl Into<String>,
        sequence: u64,
        text: impl Into<String>,
    ) -> Self {
        ConversationEntry::new(evaluation_id, sequence, Role::System, Some(text.into()))
    }

    /// A user message, with a fresh message id and the current time.
    pub fn user(evaluation_id: impl Into<String>, sequence: u64, text: impl Into<String>) -> Self {
        ConversationEntry::new(evaluation_id, sequence, Role::User, Some(text.into()))
    }

    /// An assistant response with text and no tool calls (add them with
    /// [`with_tool_call`](Self::with_tool_call)); a fresh message id and the
    /// current time. Set its turn with [`with_turn`](Self::with_turn).
    pub fn assistant(
        evaluation_id: impl Into<String>,
        sequence: u64,
        text: impl Into<String>,
    ) -> Self {
        ConversationEntry::new(evaluation_id, sequence, Role::Assistant, Some(text.into()))
    }

    /// An assistant response that only asks for tool calls (no text), with a
    /// fresh message id and the current time.
    pub fn assistant_calling(
        evaluation_id: impl Into<String>,
        sequence: u64,
        calls: impl IntoIterator<Item = ToolCall>,
    ) -> Self {
        let mut entry = ConversationEntry::new(evaluation_id, sequence, Role::Assistant, None);
        entry.tool_calls.extend(calls);
        entry
    }

    /// The result of call `call_id` of tool `tool_name`. Recording it
    /// completes the call.
    pub fn tool_result(
        evaluation_id: impl Into<String>,
        sequence: u64,
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        output: impl Into<String>,
    ) -> Self {
        let mut entry =
            ConversationEntry::new(evaluation_id, sequence, Role::Tool, Some(output.into()));
        entry.tool_call_id = Some(call_id.into());
        entry.tool_name = Some(tool_name.into());
        entry
    }

    /// Call `call_id` of tool `tool_name` failed with `error` (held in
    /// `content`, with `is_error` set). Recording it fails the call.
    pub fn tool_error(
        evaluation_id: impl Into<String>,
        sequence: u64,
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        error: impl Into<String>,
    ) -> Self {
        let mut entry =
            ConversationEntry::tool_result(evaluation_id, sequence, call_id, tool_name, error);
        entry.is_error = true;
        entry
    }

    /// This entry with one more tool call.
    #[must_use]
    pub fn with_tool_call(mut self, call: ToolCall) -> Self {
        self.tool_calls.push(call);
        self
    }

    /// This entry in provider round trip `turn`
    /// ([`ResumeState::next_turn`](crate::resume::ResumeState::next_turn)
    /// for the next assistant response).
    #[must_use]
    pub fn with_turn(mut self, turn: u32) -> Self {
        self.turn = turn;
        self
    }

    /// This entry with the host's own message id, so that recording it again
    /// after a crash is a no-op.
    #[must_use]
    pub fn with_message_id(mut self, message_id: Uuid) -> Self {
        self.message_id = message_id;
        self
    }

    /// This entry recorded in `conversation_id` as an event.
    pub fn recorded_in(self, conversation_id: &str) -> Event {
        Event::ConversationRecorded(Box::new(ConversationRecorded {
            conversation_id: conversation_id.to_string(),
            session_id: None,
            created_at: self.created_at,
            entry: self,
        }))
    }
}

impl ToolCall {
    /// A pending call of tool `name` with the provider's id and its
    /// JSON-encoded arguments (kept verbatim).
    pub fn new(
        call_id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> ToolCall {
        ToolCall {
            call_id: call_id.into(),
            name: name.into(),
            arguments: arguments.into(),
            status: ToolStatus::Pending,
            started_at: None,
            ended_at: None,
            error: None,
        }
    }
}

/// A conversation entry was recorded.
///
/// On-disk format: field order is part of the format. The fields are
/// stored in this order, without names, in event payloads and, for the
/// types a conversation slice holds, in snapshot blobs (docs/format.md
/// sections 12 and 13). Do not reorder, insert or remove fields without a
/// new codec version. `codec`'s golden tests pin the bytes.
/// `conversation_id` stays the first field: `codec::peek_conversation_id`
/// reads it there without decoding the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationRecorded {
    /// The conversation (context / session / thread).
    pub conversation_id: String,
    /// The host session that recorded it.
    #[serde(default)]
    pub session_id: Option<String>,
    /// When the event was emitted.
    pub created_at: Timestamp,
    /// The entry.
    pub entry: ConversationEntry,
}

/// A tool call changed status.
///
/// On-disk format: field order is part of the format. The fields are
/// stored in this order, without names, in event payloads and, for the
/// types a conversation slice holds, in snapshot blobs (docs/format.md
/// sections 12 and 13). Do not reorder, insert or remove fields without a
/// new codec version. `codec`'s golden tests pin the bytes.
/// `conversation_id` stays the first field: `codec::peek_conversation_id`
/// reads it there without decoding the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolStatusChanged {
    /// The conversation.
    pub conversation_id: String,
    /// The evaluation whose assistant entry holds the call.
    pub evaluation_id: String,
    /// The call.
    pub call_id: String,
    /// The new status.
    pub status: ToolStatus,
    /// When it changed.
    pub at: Timestamp,
    /// Error text when failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Set when the host re-ran the call after a resume.
    #[serde(default)]
    pub resumed: bool,
}

/// All messages of a conversation were replaced atomically.
///
/// On-disk format: field order is part of the format. The fields are
/// stored in this order, without names, in event payloads and, for the
/// types a conversation slice holds, in snapshot blobs (docs/format.md
/// sections 12 and 13). Do not reorder, insert or remove fields without a
/// new codec version. `codec`'s golden tests pin the bytes.
/// `conversation_id` stays the first field: `codec::peek_conversation_id`
/// reads it there without decoding the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesReplaced {
    /// The conversation.
    pub conversation_id: String,
    /// The new messages, in order.
    pub entries: Vec<ConversationEntry>,
    /// When.
    pub at: Timestamp,
}

/// A history manager curated what the provider was shown (the full history
/// is untouched).
///
/// On-disk format: field order is part of the format. The fields are
/// stored in this order, without names, in event payloads and, for the
/// types a conversation slice holds, in snapshot blobs (docs/format.md
/// sections 12 and 13). Do not reorder, insert or remove fields without a
/// new codec version. `codec`'s golden tests pin the bytes.
/// `conversation_id` stays the first field: `codec::peek_conversation_id`
/// reads it there without decoding the rest. `prompt_name` and `session_id`
/// came with event codec version 2 and snapshot version 3: a payload of
/// codec version 1 (and a version 2 snapshot) holds the first five fields
/// only and decodes with both `None` (`codec::HistoryCuratedV1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryCurated {
    /// The conversation.
    pub conversation_id: String,
    /// The manager (`sliding_window(50)`, ...).
    pub strategy: String,
    /// Messages before curation.
    pub original_count: u64,
    /// Messages sent.
    pub curated_count: u64,
    /// When.
    pub at: Timestamp,
    /// The prompt the curated request was built for (a label, e.g. the
    /// prompt's name or `namespace/key`), when the host names one.
    #[serde(default)]
    pub prompt_name: Option<String>,
    /// The session the request belongs to, when the host has one (an id).
    #[serde(default)]
    pub session_id: Option<String>,
}

/// An event for host reducers: a kind and opaque bytes.
///
/// On-disk format: field order is part of the format. The fields are
/// stored in this order, without names, in event payloads and, for the
/// types a conversation slice holds, in snapshot blobs (docs/format.md
/// sections 12 and 13). Do not reorder, insert or remove fields without a
/// new codec version. `codec`'s golden tests pin the bytes.
/// `conversation_id` stays the second field, after `kind`:
/// `codec::peek_conversation_id` reads it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomEvent {
    /// What the payload is; host reducers match on it.
    pub kind: String,
    /// The conversation it concerns, if any.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// The bytes (base64 in JSON).
    #[serde(with = "payload_bytes")]
    pub payload: Vec<u8>,
}

mod payload_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
        } else {
            serializer.serialize_bytes(bytes)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map_err(|error| {
                    serde::de::Error::custom(format!("payload is not base64: {error}"))
                })
        } else {
            serde_bytes_vec(deserializer)
        }
    }

    fn serde_bytes_vec<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Vec<u8>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
                Ok(bytes.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(bytes)
            }
        }
        deserializer.deserialize_byte_buf(Visitor)
    }
}

/// The [`CustomEvent::kind`] of a failed model call: the provider could not
/// be reached or refused the request, after every retry. Its payload is a
/// [`ModelCallFailed`] as a JSON object. The agent runner records one
/// whenever a model call fails, and the audit views (`convlog inspect`,
/// `tail`) show it in its evaluation.
pub const MODEL_CALL_FAILED: &str = "convlog.model_call_failed";

/// The payload of a [`MODEL_CALL_FAILED`] custom event: which model call
/// failed, where, and the provider's answer verbatim.
///
/// Stored as a JSON object with these field names (docs/events.md, "Failed
/// model calls"); unknown fields are ignored when read, so a newer writer
/// may add some. Build one with [`ModelCallFailed::new`] and set the other
/// fields; record it with [`ModelCallFailed::to_event`]; read it back with
/// [`ModelCallFailed::from_event`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelCallFailed {
    /// The conversation (also the custom event's `conversation_id`).
    pub conversation_id: String,
    /// The evaluation whose model call failed.
    pub evaluation_id: String,
    /// The turn the response would have had.
    pub turn: u32,
    /// The provider mapper's name (`openai`, `anthropic`, ...).
    pub provider: String,
    /// The client that made the call (its own description).
    pub client: String,
    /// The URL called.
    pub url: String,
    /// Attempts made, retries included.
    pub attempts: u32,
    /// The HTTP status of the last attempt, when it got one (`null` for a
    /// timeout or a connection that failed).
    pub status: Option<u16>,
    /// The error's text verbatim, the provider's response body included.
    pub error: String,
}

impl ModelCallFailed {
    /// A failure of the model call at `turn` of `evaluation_id` in
    /// `conversation_id` with `error`: one attempt, no HTTP status, and an
    /// empty provider, client and URL until set.
    pub fn new(
        conversation_id: impl Into<String>,
        evaluation_id: impl Into<String>,
        turn: u32,
        error: impl Into<String>,
    ) -> ModelCallFailed {
        ModelCallFailed {
            conversation_id: conversation_id.into(),
            evaluation_id: evaluation_id.into(),
            turn,
            provider: String::new(),
            client: String::new(),
            url: String::new(),
            attempts: 1,
            status: None,
            error: error.into(),
        }
    }

    /// The custom event recording it: kind [`MODEL_CALL_FAILED`], its
    /// conversation, and the JSON object as payload.
    pub fn to_event(&self) -> Event {
        Event::Custom(CustomEvent {
            kind: MODEL_CALL_FAILED.to_string(),
            conversation_id: Some(self.conversation_id.clone()),
            payload: serde_json::to_vec(self).expect("a ModelCallFailed always serializes"),
        })
    }

    /// The failure `event` records: `None` when it is not a custom event of
    /// kind [`MODEL_CALL_FAILED`]; `Some(Err(reason))` when it is one whose
    /// payload is not such a JSON object (a damaged or foreign event: show
    /// it as unreadable rather than drop it).
    pub fn from_event(event: &Event) -> Option<Result<ModelCallFailed, String>> {
        match event {
            Event::Custom(custom) => ModelCallFailed::from_custom(custom),
            _ => None,
        }
    }

    /// [`ModelCallFailed::from_event`] for the body of a custom event.
    pub fn from_custom(custom: &CustomEvent) -> Option<Result<ModelCallFailed, String>> {
        if custom.kind != MODEL_CALL_FAILED {
            return None;
        }
        Some(
            serde_json::from_slice::<ModelCallFailed>(&custom.payload).map_err(|error| {
                format!(
                    "the payload ({} bytes) is not a {MODEL_CALL_FAILED} object: {error}",
                    custom.payload.len()
                )
            }),
        )
    }
}

/// Everything convlog records.
///
/// JSON: an object with a `"type"` field (`conversation_recorded`,
/// `tool_status`, `messages_replaced`, `history_curated`, `custom`).
///
/// Binary: the variant order is not part of the format. The codec gives
/// each kind an explicit number (`conversation_recorded` 1 ... `custom` 5,
/// docs/format.md section 12) and never encodes this enum through serde.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A message was recorded.
    ConversationRecorded(Box<ConversationRecorded>),
    /// A tool call changed status.
    ToolStatus(ToolStatusChanged),
    /// A conversation's messages were replaced.
    MessagesReplaced(MessagesReplaced),
    /// What the provider was shown was curated.
    HistoryCurated(HistoryCurated),
    /// A host event.
    Custom(CustomEvent),
}

impl ToolStatusChanged {
    /// A status change at time `at`.
    pub fn new(
        conversation_id: &str,
        evaluation_id: &str,
        call_id: &str,
        status: ToolStatus,
        at: Timestamp,
    ) -> Self {
        ToolStatusChanged {
            conversation_id: conversation_id.to_string(),
            evaluation_id: evaluation_id.to_string(),
            call_id: call_id.to_string(),
            status,
            at,
            error: None,
            resumed: false,
        }
    }
}

impl From<ToolStatusChanged> for Event {
    fn from(change: ToolStatusChanged) -> Event {
        Event::ToolStatus(change)
    }
}

impl From<ConversationRecorded> for Event {
    fn from(recorded: ConversationRecorded) -> Event {
        Event::ConversationRecorded(Box::new(recorded))
    }
}

impl Event {
    /// Call `call_id` of `evaluation_id` in `conversation_id` moved to
    /// `status`, now. For a failure with its error text use
    /// [`Event::tool_failed`]; for another time or a re-run after a resume,
    /// build a [`ToolStatusChanged`] (or use
    /// [`ResumeState::rerun_event`](crate::resume::ResumeState::rerun_event)).
    pub fn tool_status(
        conversation_id: impl Into<String>,
        evaluation_id: impl Into<String>,
        call_id: impl Into<String>,
        status: ToolStatus,
    ) -> Event {
        Event::ToolStatus(ToolStatusChanged {
            conversation_id: conversation_id.into(),
            evaluation_id: evaluation_id.into(),
            call_id: call_id.into(),
            status,
            at: Timestamp::now(),
            error: None,
            resumed: false,
        })
    }

    /// Call `call_id` of `evaluation_id` in `conversation_id` failed with
    /// `error`, now.
    pub fn tool_failed(
        conversation_id: impl Into<String>,
        evaluation_id: impl Into<String>,
        call_id: impl Into<String>,
        error: impl Into<String>,
    ) -> Event {
        Event::ToolStatus(ToolStatusChanged {
            conversation_id: conversation_id.into(),
            evaluation_id: evaluation_id.into(),
            call_id: call_id.into(),
            status: ToolStatus::Failed,
            at: Timestamp::now(),
            error: Some(error.into()),
            resumed: false,
        })
    }

    /// The conversation the event belongs to, if any.
    pub fn conversation_id(&self) -> Option<&str> {
        match self {
            Event::ConversationRecorded(event) => Some(&event.conversation_id),
            Event::ToolStatus(event) => Some(&event.conversation_id),
            Event::MessagesReplaced(event) => Some(&event.conversation_id),
            Event::HistoryCurated(event) => Some(&event.conversation_id),
            Event::Custom(event) => event.conversation_id.as_deref(),
        }
    }

    /// The JSON `type` name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::ConversationRecorded(_) => "conversation_recorded",
            Event::ToolStatus(_) => "tool_status",
            Event::MessagesReplaced(_) => "messages_replaced",
            Event::HistoryCurated(_) => "history_curated",
            Event::Custom(_) => "custom",
        }
    }

    /// Checks every field against the named limits.
    pub fn validate(&self) -> Result<(), InvalidField> {
        match self {
            Event::ConversationRecorded(event) => {
                check_id("conversation_id", &event.conversation_id)?;
                check_optional_id("session_id", event.session_id.as_deref())?;
                validate_entry("entry", &event.entry)
            }
            Event::ToolStatus(event) => {
                check_id("conversation_id", &event.conversation_id)?;
                check_id("evaluation_id", &event.evaluation_id)?;
                check_id("call_id", &event.call_id)?;
                check_optional_text("error", event.error.as_deref())
            }
            Event::MessagesReplaced(event) => {
                check_id("conversation_id", &event.conversation_id)?;
                if event.entries.len() > REPLACED_ENTRIES_MAX {
                    return Err(InvalidField::new(
                        "entries",
                        format!(
                            "{} entries, over REPLACED_ENTRIES_MAX ({REPLACED_ENTRIES_MAX})",
                            event.entries.len()
                        ),
                    ));
                }
                for (index, entry) in event.entries.iter().enumerate() {
                    validate_entry(&format!("entries[{index}]"), entry)?;
                }
                Ok(())
            }
            Event::HistoryCurated(event) => {
                check_id("conversation_id", &event.conversation_id)?;
                check_label("strategy", &event.strategy)?;
                if let Some(prompt_name) = &event.prompt_name {
                    check_label("prompt_name", prompt_name)?;
                }
                check_optional_id("session_id", event.session_id.as_deref())
            }
            Event::Custom(event) => {
                check_label("kind", &event.kind)?;
                if event.kind.is_empty() {
                    return Err(InvalidField::new("kind", "must not be empty"));
                }
                check_optional_id("conversation_id", event.conversation_id.as_deref())
            }
        }
    }
}

/// A field that failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidField {
    /// Path of the field (`entry.tool_calls[1].call_id`).
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl InvalidField {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> InvalidField {
        InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }

    fn within(self, parent: &str) -> InvalidField {
        InvalidField {
            field: format!("{parent}.{}", self.field),
            reason: self.reason,
        }
    }
}

impl fmt::Display for InvalidField {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "field `{}`: {}", self.field, self.reason)
    }
}

fn check_id(field: &str, value: &str) -> Result<(), InvalidField> {
    if value.is_empty() || value.len() > ID_BYTES_MAX {
        return Err(InvalidField::new(
            field,
            format!(
                "must be 1 to {ID_BYTES_MAX} bytes (ID_BYTES_MAX), is {}",
                value.len()
            ),
        ));
    }
    Ok(())
}

fn check_optional_id(field: &str, value: Option<&str>) -> Result<(), InvalidField> {
    value.map_or(Ok(()), |value| check_id(field, value))
}

fn check_label(field: &str, value: &str) -> Result<(), InvalidField> {
    if value.len() > LABEL_BYTES_MAX {
        return Err(InvalidField::new(
            field,
            format!(
                "is {} bytes, over LABEL_BYTES_MAX ({LABEL_BYTES_MAX})",
                value.len()
            ),
        ));
    }
    Ok(())
}

fn check_optional_label(field: &str, value: Option<&str>) -> Result<(), InvalidField> {
    value.map_or(Ok(()), |value| check_label(field, value))
}

fn check_text(field: &str, value: &str) -> Result<(), InvalidField> {
    if value.len() > TEXT_BYTES_MAX {
        return Err(InvalidField::new(
            field,
            format!(
                "is {} bytes, over TEXT_BYTES_MAX ({TEXT_BYTES_MAX})",
                value.len()
            ),
        ));
    }
    Ok(())
}

fn check_optional_text(field: &str, value: Option<&str>) -> Result<(), InvalidField> {
    value.map_or(Ok(()), |value| check_text(field, value))
}

fn validate_entry(path: &str, entry: &ConversationEntry) -> Result<(), InvalidField> {
    let checked = (|| {
        check_id("evaluation_id", &entry.evaluation_id)?;
        if entry.sequence > SEQUENCE_MAX {
            return Err(InvalidField::new(
                "sequence",
                format!("{} is over SEQUENCE_MAX ({SEQUENCE_MAX})", entry.sequence),
            ));
        }
        if entry.turn > TURN_MAX {
            return Err(InvalidField::new(
                "turn",
                format!("{} is over TURN_MAX ({TURN_MAX})", entry.turn),
            ));
        }
        check_optional_text("content", entry.content.as_deref())?;
        if let Some(reasoning) = &entry.reasoning {
            check_optional_text("reasoning.text", reasoning.text.as_deref())?;
            check_optional_text("reasoning.signature", reasoning.signature.as_deref())?;
        }
        if entry.tool_calls.len() > TOOL_CALLS_MAX {
            return Err(InvalidField::new(
                "tool_calls",
                format!(
                    "{} calls, over TOOL_CALLS_MAX ({TOOL_CALLS_MAX})",
                    entry.tool_calls.len()
                ),
            ));
        }
        if !entry.tool_calls.is_empty() && entry.role != Role::Assistant {
            return Err(InvalidField::new(
                "tool_calls",
                "only assistant entries carry tool calls",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (index, call) in entry.tool_calls.iter().enumerate() {
            let call_path = format!("tool_calls[{index}]");
            check_id("call_id", &call.call_id).map_err(|error| error.within(&call_path))?;
            check_id("name", &call.name).map_err(|error| error.within(&call_path))?;
            check_text("arguments", &call.arguments).map_err(|error| error.within(&call_path))?;
            check_optional_text("error", call.error.as_deref())
                .map_err(|error| error.within(&call_path))?;
            if !seen.insert(call.call_id.as_str()) {
                return Err(InvalidField::new(
                    format!("{call_path}.call_id"),
                    format!("duplicate call id {:?} in one entry", call.call_id),
                ));
            }
        }
        check_optional_id("tool_call_id", entry.tool_call_id.as_deref())?;
        check_optional_id("tool_name", entry.tool_name.as_deref())?;
        if entry.role == Role::Tool && entry.tool_call_id.is_none() {
            return Err(InvalidField::new(
                "tool_call_id",
                "a tool entry needs the call id it answers",
            ));
        }
        check_optional_label("finish_reason", entry.finish_reason.as_deref())?;
        check_optional_label("prompt_ns", entry.prompt_ns.as_deref())?;
        check_optional_label("prompt_key", entry.prompt_key.as_deref())?;
        if entry.metadata.len() > METADATA_ENTRIES_MAX {
            return Err(InvalidField::new(
                "metadata",
                format!(
                    "{} pairs, over METADATA_ENTRIES_MAX ({METADATA_ENTRIES_MAX})",
                    entry.metadata.len()
                ),
            ));
        }
        for (key, value) in &entry.metadata {
            check_label("metadata key", key)?;
            check_text(&format!("metadata.{key}"), value)?;
        }
        Ok(())
    })();
    checked.map_err(|error| error.within(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{parse_line_at, to_json_line};

    /// Parses one JSON line with `now` as the default time; the sequence is
    /// always given in these lines.
    fn parse(text: &str, now: Timestamp) -> Event {
        let mut no_sequence = |_: &str, _: &str| Err("not asked in these tests".to_string());
        let mut events = parse_line_at(1, text, now, &mut no_sequence).expect("the line parses");
        assert_eq!(events.len(), 1);
        events.remove(0)
    }

    /// The event is valid, and its JSON line reads back as the same event.
    fn assert_valid_and_round_trips(event: &Event) {
        event.validate().expect("the constructed event is valid");
        let line = to_json_line(7, event).expect("the event has a JSON form");
        assert_eq!(&parse(&line, Timestamp(0)), event, "round trip of {line}");
    }

    /// The event that the minimal JSON form of `entry` (its message id, its
    /// evaluation, sequence and role, and `fields`) gives, every omitted
    /// time defaulting to the entry's `created_at`.
    fn from_minimal_json(entry: &ConversationEntry, fields: &str) -> Event {
        let line = format!(
            r#"{{"type": "conversation_recorded", "conversation_id": "ctx", "entry": {{"message_id": "{}", "evaluation_id": "{}", "sequence": {}, "role": "{}"{fields}}}}}"#,
            entry.message_id,
            entry.evaluation_id,
            entry.sequence,
            serde_json::to_value(entry.role).unwrap().as_str().unwrap(),
        );
        parse(&line, entry.created_at)
    }

    #[test]
    fn system_and_user_entries_hold_their_text() {
        let system = ConversationEntry::system("eval", 0, "You plan trips.");
        assert_eq!(system.role, Role::System);
        assert_eq!(system.content.as_deref(), Some("You plan trips."));
        let user = ConversationEntry::user("eval", 1, "Weather in Paris?");
        assert_eq!(
            (
                user.role,
                user.evaluation_id.as_str(),
                user.sequence,
                user.turn
            ),
            (Role::User, "eval", 1, 0)
        );
        assert_eq!(user.content.as_deref(), Some("Weather in Paris?"));
        assert!(user.tool_calls.is_empty() && user.tool_call_id.is_none() && !user.is_error);
        assert_ne!(system.message_id, user.message_id, "each gets a fresh id");
        for (entry, content) in [(system, "You plan trips."), (user, "Weather in Paris?")] {
            let event = entry.clone().recorded_in("ctx");
            assert_valid_and_round_trips(&event);
            let fields = format!(r#", "content": "{content}""#);
            assert_eq!(from_minimal_json(&entry, &fields), event);
        }
    }

    #[test]
    fn assistant_entries_carry_text_and_pending_calls() {
        let call = ToolCall::new("call_1", "weather", r#"{"city":"paris"}"#);
        assert_eq!(
            call,
            ToolCall {
                call_id: "call_1".into(),
                name: "weather".into(),
                arguments: r#"{"city":"paris"}"#.into(),
                status: ToolStatus::Pending,
                started_at: None,
                ended_at: None,
                error: None,
            }
        );

        let calling = ConversationEntry::assistant_calling("eval", 2, [call.clone()]).with_turn(1);
        assert_eq!((calling.role, calling.turn), (Role::Assistant, 1));
        assert_eq!(calling.content, None);
        assert_eq!(calling.tool_calls, std::slice::from_ref(&call));
        let event = calling.clone().recorded_in("ctx");
        assert_valid_and_round_trips(&event);
        let fields = r#", "turn": 1, "tool_calls": [{"call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"paris\"}"}]"#;
        assert_eq!(from_minimal_json(&calling, fields), event);

        let second = ToolCall::new("call_2", "weather", r#"{"city":"rome"}"#);
        let talking = ConversationEntry::assistant("eval", 2, "Let me look.")
            .with_tool_call(call.clone())
            .with_tool_call(second.clone());
        assert_eq!(talking.content.as_deref(), Some("Let me look."));
        assert_eq!(talking.tool_calls, [call, second]);
        assert_valid_and_round_trips(&talking.recorded_in("ctx"));

        let done = ConversationEntry::assistant("eval", 3, "Sunny.");
        assert!(done.tool_calls.is_empty());
        assert_valid_and_round_trips(&done.recorded_in("ctx"));
    }

    #[test]
    fn tool_results_answer_their_call() {
        let result = ConversationEntry::tool_result("eval", 3, "call_1", "weather", "18C");
        assert_eq!(result.role, Role::Tool);
        assert_eq!(result.tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(result.tool_name.as_deref(), Some("weather"));
        assert_eq!(result.content.as_deref(), Some("18C"));
        assert!(!result.is_error);
        let event = result.clone().recorded_in("ctx");
        assert_valid_and_round_trips(&event);
        let fields = r#", "tool_call_id": "call_1", "tool_name": "weather", "content": "18C""#;
        assert_eq!(from_minimal_json(&result, fields), event);

        let failure = ConversationEntry::tool_error("eval", 4, "call_2", "weather", "timed out");
        assert_eq!(failure.role, Role::Tool);
        assert_eq!(failure.tool_call_id.as_deref(), Some("call_2"));
        assert_eq!(failure.content.as_deref(), Some("timed out"));
        assert!(failure.is_error);
        let event = failure.clone().recorded_in("ctx");
        assert_valid_and_round_trips(&event);
        let fields = r#", "tool_call_id": "call_2", "tool_name": "weather", "is_error": true, "content": "timed out""#;
        assert_eq!(from_minimal_json(&failure, fields), event);
    }

    #[test]
    fn a_host_message_id_is_kept() {
        let id = Uuid::from_u128(7);
        let entry = ConversationEntry::user("eval", 0, "hi").with_message_id(id);
        assert_eq!(entry.message_id, id);
        let recorded = ConversationRecorded {
            conversation_id: "ctx".into(),
            session_id: None,
            created_at: entry.created_at,
            entry: entry.clone(),
        };
        assert_eq!(Event::from(recorded), entry.recorded_in("ctx"));
    }

    #[test]
    fn tool_status_events_match_their_minimal_json() {
        let running = Event::tool_status("ctx", "eval", "call_1", ToolStatus::Running);
        let Event::ToolStatus(change) = &running else {
            panic!("a tool status event: {running:?}");
        };
        assert_eq!(
            (change.status, change.error.as_deref(), change.resumed),
            (ToolStatus::Running, None, false)
        );
        assert_valid_and_round_trips(&running);
        let line = r#"{"type": "tool_status", "conversation_id": "ctx", "evaluation_id": "eval", "call_id": "call_1", "status": "running"}"#;
        assert_eq!(parse(line, change.at), running);

        let failed = Event::tool_failed("ctx", "eval", "call_2", "timed out");
        let Event::ToolStatus(change) = &failed else {
            panic!("a tool status event: {failed:?}");
        };
        assert_eq!(
            (
                change.call_id.as_str(),
                change.status,
                change.error.as_deref()
            ),
            ("call_2", ToolStatus::Failed, Some("timed out"))
        );
        assert_valid_and_round_trips(&failed);
        let line = r#"{"type": "tool_status", "conversation_id": "ctx", "evaluation_id": "eval", "call_id": "call_2", "status": "failed", "error": "timed out"}"#;
        assert_eq!(parse(line, change.at), failed);

        let converted: Event = change.clone().into();
        assert_eq!(converted, failed);
    }

    #[test]
    fn a_model_call_failure_round_trips_through_its_custom_event() {
        let mut failure = ModelCallFailed::new("ctx", "eval-1", 2, "HTTP 503: {\"error\":1}");
        failure.status = Some(503);
        failure.attempts = 3;
        failure.provider = "openai".into();
        let event = failure.to_event();
        let Event::Custom(custom) = &event else {
            panic!("a custom event: {event:?}");
        };
        assert_eq!(custom.kind, MODEL_CALL_FAILED);
        assert_eq!(custom.conversation_id.as_deref(), Some("ctx"));
        let payload: serde_json::Value = serde_json::from_slice(&custom.payload).unwrap();
        assert_eq!(payload["status"], 503);
        assert_eq!(payload["error"], "HTTP 503: {\"error\":1}");
        assert_eq!(ModelCallFailed::from_event(&event), Some(Ok(failure)));

        // Another kind, or another event, is not one.
        let other = Event::Custom(CustomEvent {
            kind: "budget".into(),
            conversation_id: None,
            payload: b"{}".to_vec(),
        });
        assert_eq!(ModelCallFailed::from_event(&other), None);
        assert_eq!(
            ModelCallFailed::from_event(&Event::tool_status("c", "e", "k", ToolStatus::Running)),
            None
        );
        // The kind with a payload that is not the object: an error, kept.
        let damaged = Event::Custom(CustomEvent {
            kind: MODEL_CALL_FAILED.into(),
            conversation_id: Some("ctx".into()),
            payload: b"\xffnot json".to_vec(),
        });
        let reason = ModelCallFailed::from_event(&damaged).unwrap().unwrap_err();
        assert!(
            reason.contains("(9 bytes) is not a convlog.model_call_failed object"),
            "{reason}"
        );
    }
}
