//! The binary form of events and snapshot parts: the only module that calls
//! bincode.
//!
//! An event payload in the log is `[codec version: u8][event kind: u8][body]`
//! where the body is the kind's struct in bincode's standard configuration
//! (little-endian varints). `docs/format.md` specifies those bytes, so the
//! format never depends on the crate.
//!
//! The codec version names the layout of the body. Version 2 changed one
//! layout, `history_curated` (two optional fields at the end); the other
//! kinds have the same layout in both versions. Each payload is written
//! with the oldest version that has its kind's current layout
//! ([`event_codec_version`]): version 2 for `history_curated`, version 1 for
//! the rest, so a log without curation events stays readable by a build
//! that knows version 1 only. Both versions are read; a version 1
//! `history_curated` body decodes with `prompt_name` and `session_id` `None`.
//!
//! The kind byte is explicit; the body, and every snapshot structure, is
//! serde's derived form of a Rust type, so its declaration order (fields,
//! enum variants) is the on-disk order. Each such type says so in a comment,
//! and the golden tests below spell out the bytes of every one, field by
//! field, so a reordering fails a test instead of silently changing the
//! format.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::log::Lsn;

mod fold;
use crate::model::{
    ConversationRecorded, CustomEvent, Event, HistoryCurated, MessagesReplaced, ToolStatusChanged,
};

/// The newest codec version this build writes and reads (first byte of an
/// event): version 2, whose `history_curated` body holds `prompt_name` and
/// `session_id`. [`event_codec_version`] says which version a kind is
/// written with.
pub const EVENT_CODEC_VERSION: u8 = 2;

/// The oldest codec version this build reads: version 1, whose layouts are
/// version 2's except `history_curated` (without the last two fields).
pub const EVENT_CODEC_VERSION_MIN: u8 = 1;

const KIND_CONVERSATION_RECORDED: u8 = 1;
const KIND_TOOL_STATUS: u8 = 2;
const KIND_MESSAGES_REPLACED: u8 = 3;
const KIND_HISTORY_CURATED: u8 = 4;
const KIND_CUSTOM: u8 = 5;

/// Most bytes one decoded value (an event body, a slice) may claim. Bounds
/// what a damaged or hostile length prefix can make the decoder allocate.
pub const DECODE_BYTES_MAX: usize = 1 << 30;

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

fn decode_config() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<DECODE_BYTES_MAX>,
> {
    bincode::config::standard().with_limit::<DECODE_BYTES_MAX>()
}

/// Encodes any serde value (snapshot parts, host slices).
pub fn encode_value<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    bincode::serde::encode_to_vec(value, config()).map_err(|error| error.to_string())
}

/// Decodes a serde value that must fill `bytes` exactly.
pub fn decode_value<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, decode_config())
        .map_err(|error| error.to_string())?;
    if read != bytes.len() {
        return Err(format!(
            "{} trailing bytes after the value",
            bytes.len() - read
        ));
    }
    Ok(value)
}

/// The `history_curated` body of codec version 1: [`HistoryCurated`]
/// without `prompt_name` and `session_id`. Also the form of the curations
/// in a version 2 snapshot blob (docs/format.md sections 12, 13).
///
/// On-disk format: field order is part of the format (frozen: version 1 is
/// never written again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HistoryCuratedV1 {
    conversation_id: String,
    strategy: String,
    original_count: u64,
    curated_count: u64,
    at: crate::model::Timestamp,
}

impl From<HistoryCuratedV1> for HistoryCurated {
    fn from(old: HistoryCuratedV1) -> HistoryCurated {
        HistoryCurated {
            conversation_id: old.conversation_id,
            strategy: old.strategy,
            original_count: old.original_count,
            curated_count: old.curated_count,
            at: old.at,
            prompt_name: None,
            session_id: None,
        }
    }
}

/// The codec version `event` is written with: the oldest whose layout for
/// its kind is the current one (2 for `history_curated`, 1 for every other
/// kind, whose layout version 2 left as it was).
pub fn event_codec_version(event: &Event) -> u8 {
    match event {
        Event::HistoryCurated(_) => 2,
        Event::ConversationRecorded(_)
        | Event::ToolStatus(_)
        | Event::MessagesReplaced(_)
        | Event::Custom(_) => 1,
    }
}

fn is_known_version(version: u8) -> bool {
    (EVENT_CODEC_VERSION_MIN..=EVENT_CODEC_VERSION).contains(&version)
}

fn encode_body<T: Serialize>(version: u8, kind: u8, body: &T, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(&[version, kind]);
    bincode::serde::encode_into_std_write(body, &mut out, config())
        .expect("encoding model types into a Vec cannot fail");
    out
}

/// Encodes an event as a log payload.
pub fn encode_event(event: &Event) -> Vec<u8> {
    let version = event_codec_version(event);
    let capacity = encoded_size_hint(event);
    match event {
        Event::ConversationRecorded(body) => {
            encode_body(version, KIND_CONVERSATION_RECORDED, body, capacity)
        }
        Event::ToolStatus(body) => encode_body(version, KIND_TOOL_STATUS, body, capacity),
        Event::MessagesReplaced(body) => {
            encode_body(version, KIND_MESSAGES_REPLACED, body, capacity)
        }
        Event::HistoryCurated(body) => encode_body(version, KIND_HISTORY_CURATED, body, capacity),
        Event::Custom(body) => encode_body(version, KIND_CUSTOM, body, capacity),
    }
}

/// Bytes reserved for an encoded event's fixed-size fields and length
/// prefixes, on top of its texts: enough for the common events to encode
/// without growing their buffer (a varint is at most 10 bytes).
const ENCODED_FIXED_BYTES: usize = 96;

/// About how many bytes `event` encodes to (its texts plus
/// [`ENCODED_FIXED_BYTES`] per struct), so that encoding allocates its
/// buffer once instead of doubling it from empty. Only a capacity: a wrong
/// guess costs a reallocation or some slack, never a different encoding.
fn encoded_size_hint(event: &Event) -> usize {
    fn text(text: &Option<String>) -> usize {
        text.as_ref().map_or(0, String::len)
    }
    fn entry(entry: &crate::model::ConversationEntry) -> usize {
        let calls: usize = entry
            .tool_calls
            .iter()
            .map(|call| {
                ENCODED_FIXED_BYTES
                    + call.call_id.len()
                    + call.name.len()
                    + call.arguments.len()
                    + text(&call.error)
            })
            .sum();
        let reasoning = entry.reasoning.as_ref().map_or(0, |reasoning| {
            text(&reasoning.text) + text(&reasoning.signature)
        });
        let metadata: usize = entry
            .metadata
            .iter()
            .map(|(key, value)| key.len() + value.len() + 20)
            .sum();
        ENCODED_FIXED_BYTES
            + entry.evaluation_id.len()
            + text(&entry.content)
            + reasoning
            + calls
            + text(&entry.tool_call_id)
            + text(&entry.tool_name)
            + text(&entry.finish_reason)
            + text(&entry.prompt_ns)
            + text(&entry.prompt_key)
            + metadata
    }
    2 + match event {
        Event::ConversationRecorded(body) => {
            ENCODED_FIXED_BYTES
                + body.conversation_id.len()
                + text(&body.session_id)
                + entry(&body.entry)
        }
        Event::ToolStatus(body) => {
            ENCODED_FIXED_BYTES
                + body.conversation_id.len()
                + body.evaluation_id.len()
                + body.call_id.len()
                + text(&body.error)
        }
        Event::MessagesReplaced(body) => {
            ENCODED_FIXED_BYTES + body.entries.iter().map(entry).sum::<usize>()
        }
        Event::HistoryCurated(_) | Event::Custom(_) => 4 * ENCODED_FIXED_BYTES,
    }
}

/// The head of a `custom` body: `kind`, then the optional conversation id.
#[derive(Deserialize)]
struct CustomHead<'a> {
    kind: &'a str,
    #[serde(borrow)]
    conversation_id: Option<&'a str>,
}

/// Decodes the leading fields of `body` as `T`, ignoring the rest.
fn decode_head<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Option<T> {
    bincode::serde::borrow_decode_from_slice(body, decode_config())
        .ok()
        .map(|(head, _)| head)
}

/// The conversation an encoded event belongs to, read without decoding the
/// event: only the body's leading fields, up to its conversation id, are
/// decoded (docs/format.md section 12, "Conversation id"). `None` when the
/// event has none, or the payload is not an event of this codec version or
/// its head does not decode; the rest of the body is not checked (decode it
/// to find out). Lets a reader skip other conversations' events in a shared
/// frame cheaply. For every payload that decodes, the answer is the decoded
/// event's [`Event::conversation_id`].
pub fn peek_conversation_id(payload: &[u8]) -> Option<&str> {
    let [version, kind, body @ ..] = payload else {
        return None;
    };
    if !is_known_version(*version) {
        return None;
    }
    match *kind {
        KIND_CONVERSATION_RECORDED
        | KIND_TOOL_STATUS
        | KIND_MESSAGES_REPLACED
        | KIND_HISTORY_CURATED => fold::leading_str(body),
        KIND_CUSTOM => decode_head::<CustomHead>(body)?.conversation_id,
        _ => None,
    }
}

/// The kind of a `custom` event, read from its head without decoding the
/// payload bytes; `None` for any other event or a payload whose head does
/// not decode. Lets a reader that wants one custom kind skip the others.
pub fn custom_kind(payload: &[u8]) -> Option<&str> {
    match payload {
        [version, KIND_CUSTOM, body @ ..] if is_known_version(*version) => {
            decode_head::<CustomHead>(body).map(|head| head.kind)
        }
        _ => None,
    }
}

/// A `custom` body with its payload bytes borrowed.
#[derive(Deserialize)]
struct CustomBorrowed<'a> {
    kind: &'a str,
    #[serde(borrow)]
    conversation_id: Option<&'a str>,
    #[serde(borrow)]
    payload: &'a [u8],
}

/// The conversation id and payload bytes of a `custom` event of `kind`,
/// borrowed from the encoded event (no copy): the encrypted read path
/// opens sealed payloads in place. `None` for any other event, or a body
/// that does not decode.
pub(crate) fn custom_payload_of<'a>(
    payload: &'a [u8],
    kind: &str,
) -> Option<(Option<&'a str>, &'a [u8])> {
    match payload {
        [version, KIND_CUSTOM, body @ ..] if is_known_version(*version) => {
            decode_head::<CustomBorrowed>(body)
                .filter(|custom| custom.kind == kind)
                .map(|custom| (custom.conversation_id, custom.payload))
        }
        _ => None,
    }
}

/// Decodes a log payload into an event. Never panics on any input.
pub fn decode_event(payload: &[u8]) -> Result<Event, String> {
    let [version, kind, body @ ..] = payload else {
        return Err(format!(
            "event payload of {} bytes is too short",
            payload.len()
        ));
    };
    if !is_known_version(*version) {
        return Err(format!(
            "event codec version {version} is not supported (this build reads {EVENT_CODEC_VERSION_MIN} to {EVENT_CODEC_VERSION})"
        ));
    }
    match *kind {
        KIND_CONVERSATION_RECORDED => decode_value::<ConversationRecorded>(body)
            .map(|body| Event::ConversationRecorded(Box::new(body))),
        KIND_TOOL_STATUS => decode_value::<ToolStatusChanged>(body).map(Event::ToolStatus),
        KIND_MESSAGES_REPLACED => {
            decode_value::<MessagesReplaced>(body).map(Event::MessagesReplaced)
        }
        KIND_HISTORY_CURATED if *version == 1 => {
            decode_value::<HistoryCuratedV1>(body).map(|old| Event::HistoryCurated(old.into()))
        }
        KIND_HISTORY_CURATED => decode_value::<HistoryCurated>(body).map(Event::HistoryCurated),
        KIND_CUSTOM => decode_value::<CustomEvent>(body).map(Event::Custom),
        other => Err(format!("unknown event kind {other}")),
    }
    .map_err(|reason| format!("cannot decode event: {reason}"))
}

/// An event as the conversation fold takes it ([`decode_fold_event`]):
/// a recorded entry decoded into an owned entry (the slice keeps it), and
/// a status change borrowed from the payload (the fold keeps none of its
/// texts unless the call is not known yet).
// Decoded and moved into the slice at once, never stored: boxing the
// entry would cost an allocation per event for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub(crate) enum FoldEvent<'a> {
    /// A `conversation_recorded` event.
    Recorded {
        conversation_id: &'a str,
        entry: crate::model::ConversationEntry,
    },
    /// A `tool_status` event.
    Status(ToolStatusRef<'a>),
}

/// [`ToolStatusChanged`] borrowed from its payload: the same fields in the
/// same order (the body's layout, docs/format.md section 12).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ToolStatusRef<'a> {
    pub(crate) conversation_id: &'a str,
    pub(crate) evaluation_id: &'a str,
    pub(crate) call_id: &'a str,
    pub(crate) status: crate::model::ToolStatus,
    pub(crate) at: crate::model::Timestamp,
    pub(crate) error: Option<&'a str>,
    pub(crate) resumed: bool,
}

impl ToolStatusRef<'_> {
    /// The owned status change.
    pub(crate) fn to_owned_change(self) -> ToolStatusChanged {
        ToolStatusChanged {
            conversation_id: self.conversation_id.to_string(),
            evaluation_id: self.evaluation_id.to_string(),
            call_id: self.call_id.to_string(),
            status: self.status,
            at: self.at,
            error: self.error.map(str::to_string),
            resumed: self.resumed,
        }
    }
}

/// Decodes a `conversation_recorded` or `tool_status` payload for the
/// conversation fold without copying the texts the fold drops; `None` for
/// any other payload, or one that does not decode (decode it with
/// [`decode_event`], which says why). Whenever this gives an event,
/// [`decode_event`] gives the same one, owned
/// (`tests::the_fold_decode_is_decode_event`).
pub(crate) fn decode_fold_event(payload: &[u8]) -> Option<FoldEvent<'_>> {
    match payload {
        [version, KIND_CONVERSATION_RECORDED, body @ ..] if is_known_version(*version) => {
            fold::recorded(body)
        }
        [version, KIND_TOOL_STATUS, body @ ..] if is_known_version(*version) => fold::status(body),
        _ => None,
    }
}

/// Whether a log payload holds a `tool_status` event, by its version and
/// kind bytes alone (the body is not checked): a reader that needs only
/// status changes decodes nothing else.
pub fn is_tool_status(payload: &[u8]) -> bool {
    matches!(payload, [version, KIND_TOOL_STATUS, ..] if is_known_version(*version))
}

/// Decodes the log payload of the event at `lsn`: [`decode_event`], with a
/// failure located as [`Error::UndecodableEvent`] (its LSN and why). Every
/// reader of events (the audit views, `tail`, the command line) decodes
/// through it.
pub fn decode_event_at(lsn: Lsn, payload: &[u8]) -> Result<Event, Error> {
    decode_event(payload).map_err(|reason| Error::UndecodableEvent { lsn, reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use std::collections::BTreeMap;

    fn sample_events() -> Vec<Event> {
        let mut entry =
            ConversationEntry::new("eval-7", 1, Role::Assistant, Some("Let me look.".into()));
        entry.reasoning = Some(Reasoning {
            text: Some("two lookups".into()),
            signature: Some("EqQBCkYIBx".into()),
            redacted: false,
        });
        entry.tool_calls.push(ToolCall {
            call_id: "call_1".into(),
            name: "search".into(),
            arguments: "{not json".into(),
            status: ToolStatus::Pending,
            started_at: None,
            ended_at: Some(Timestamp(5)),
            error: None,
        });
        entry.metadata.insert("k".into(), "v".into());
        vec![
            Event::ConversationRecorded(Box::new(ConversationRecorded {
                conversation_id: "ctx_123".into(),
                session_id: None,
                created_at: Timestamp(1_795_000_000_000_000),
                entry: entry.clone(),
            })),
            Event::ToolStatus(ToolStatusChanged {
                conversation_id: "ctx_123".into(),
                evaluation_id: "eval-7".into(),
                call_id: "call_1".into(),
                status: ToolStatus::Failed,
                at: Timestamp(3),
                error: Some("boom".into()),
                resumed: true,
            }),
            Event::MessagesReplaced(MessagesReplaced {
                conversation_id: "c".into(),
                entries: vec![entry],
                at: Timestamp(0),
            }),
            Event::HistoryCurated(HistoryCurated {
                conversation_id: "c".into(),
                strategy: "sliding_window(2)".into(),
                original_count: 10,
                curated_count: 3,
                at: Timestamp(1),
                prompt_name: Some("travel/planner".into()),
                session_id: Some("sess-1".into()),
            }),
            Event::Custom(CustomEvent {
                kind: "budget".into(),
                conversation_id: None,
                payload: vec![0, 1, 2, 255],
            }),
        ]
    }

    #[test]
    fn events_round_trip_through_binary_and_json() {
        for event in sample_events() {
            let bytes = encode_event(&event);
            assert_eq!(decode_event(&bytes).unwrap(), event);
            let json = serde_json::to_string(&event).unwrap();
            assert_eq!(
                serde_json::from_str::<Event>(&json).unwrap(),
                event,
                "{json}"
            );
        }
    }

    /// Pins the bytes `docs/format.md` section 12 specifies.
    #[test]
    fn the_documented_encoding_is_the_one_written() {
        let event = Event::ToolStatus(ToolStatusChanged {
            conversation_id: "c".into(),
            evaluation_id: "e".into(),
            call_id: "k".into(),
            status: ToolStatus::Running,
            at: Timestamp(-300),
            error: Some("x".repeat(300)),
            resumed: true,
        });
        let mut expected = vec![1, 2, 1, b'c', 1, b'e', 1, b'k', 1];
        expected.extend([0xFB, 0x57, 0x02]); // zigzag(-300) = 599 = 0x0257
        expected.extend([1, 0xFB, 0x2C, 0x01]); // Some, length 300
        expected.extend(std::iter::repeat_n(b'x', 300));
        expected.push(1); // resumed
        assert_eq!(encode_event(&event), expected);

        let mut entry = ConversationEntry::new("e", 2, Role::Tool, None);
        entry.message_id = uuid::Uuid::from_bytes([7; 16]);
        entry.created_at = Timestamp(1);
        let bytes = encode_event(&entry.recorded_in("c"));
        let mut expected = vec![1, 1, 1, b'c', 0, 2]; // version, kind, id, no session, created_at
        expected.push(16);
        expected.extend([7; 16]);
        expected.extend([1, b'e', 2, 0, 3]); // evaluation, sequence, turn, role tool
        assert_eq!(&bytes[..expected.len()], &expected[..]);
    }

    // Golden bytes: every type whose serde form reaches disk, field by
    // field, so that reordering the fields of a struct or the variants of
    // an enum (or changing a type) fails here rather than silently
    // changing the format. A layout is a list of (field, bytes); bytes are
    // written as hex pairs and 'quoted ASCII'.

    /// The bytes a layout spec stands for: hex pairs and 'quoted ASCII'
    /// (no quote inside), spaces ignored.
    fn spec_bytes(spec: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut chars = spec.chars();
        while let Some(c) = chars.next() {
            match c {
                ' ' => {}
                '\'' => {
                    for c in chars.by_ref().take_while(|&c| c != '\'') {
                        out.push(u8::try_from(c).expect("ASCII in a layout spec"));
                    }
                }
                high => {
                    let low = chars.next().expect("hex pairs in a layout spec");
                    out.push(
                        u8::from_str_radix(&format!("{high}{low}"), 16)
                            .expect("hex pairs in a layout spec"),
                    );
                }
            }
        }
        out
    }

    fn hex(bytes: &[u8]) -> String {
        bytes
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A string short enough for a one-byte length, as a layout spec.
    fn short_string(text: &str) -> String {
        assert!(text.len() < 251, "a one-byte varint length");
        format!("{:02x} {}", text.len(), hex(text.as_bytes()))
    }

    /// Asserts that `actual` is exactly `layout`'s fields in order, naming
    /// the first field that differs.
    fn assert_layout(what: &str, actual: &[u8], layout: &[(&str, &str)]) {
        let mut at = 0;
        for (field, spec) in layout {
            let expected = spec_bytes(spec);
            let end = (at + expected.len()).min(actual.len());
            let found = actual.get(at..end).unwrap_or(&[]);
            assert!(
                found == expected.as_slice(),
                "{what}: field `{field}` at byte {at}: expected {}, the encoding has {}\n\
                 whole encoding: {}",
                hex(&expected),
                hex(found),
                hex(actual)
            );
            at += expected.len();
        }
        assert!(
            at == actual.len(),
            "{what}: {} bytes after the last field: {}",
            actual.len().saturating_sub(at),
            hex(actual.get(at..).unwrap_or(&[]))
        );
    }

    /// An entry with every field set to a value distinct from its
    /// neighbours', so that swapping any two fields changes the bytes.
    fn full_entry() -> ConversationEntry {
        let mut metadata = BTreeMap::new();
        metadata.insert("b".to_string(), "2".to_string());
        metadata.insert("a".to_string(), "1".to_string());
        ConversationEntry {
            message_id: uuid::Uuid::from_bytes([
                0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
            ]),
            evaluation_id: "eval".into(),
            sequence: 7,
            turn: 300,
            role: Role::Assistant,
            content: Some("hi".into()),
            reasoning: Some(Reasoning {
                text: Some("think".into()),
                signature: Some("sig".into()),
                redacted: true,
            }),
            tool_calls: vec![ToolCall {
                call_id: "call_1".into(),
                name: "search".into(),
                arguments: "{}".into(),
                status: ToolStatus::Running,
                started_at: Some(Timestamp(5)),
                ended_at: Some(Timestamp(-3)),
                error: Some("e".into()),
            }],
            tool_call_id: Some("tc".into()),
            tool_name: Some("tn".into()),
            is_error: true,
            finish_reason: Some("stop".into()),
            prompt_ns: Some("ns".into()),
            prompt_key: Some("key".into()),
            created_at: Timestamp(2),
            metadata,
        }
    }

    const FULL_ENTRY: &[(&str, &str)] = &[
        (
            "entry.message_id",
            "10 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f",
        ),
        ("entry.evaluation_id", "04 'eval'"),
        ("entry.sequence", "07"),
        ("entry.turn", "fb 2c 01"),
        ("entry.role (assistant)", "02"),
        ("entry.content", "01 02 'hi'"),
        ("entry.reasoning (some)", "01"),
        ("entry.reasoning.text", "01 05 'think'"),
        ("entry.reasoning.signature", "01 03 'sig'"),
        ("entry.reasoning.redacted", "01"),
        ("entry.tool_calls (count)", "01"),
        ("entry.tool_calls[0].call_id", "06 'call_1'"),
        ("entry.tool_calls[0].name", "06 'search'"),
        ("entry.tool_calls[0].arguments", "02 '{}'"),
        ("entry.tool_calls[0].status (running)", "01"),
        ("entry.tool_calls[0].started_at", "01 0a"),
        ("entry.tool_calls[0].ended_at", "01 05"),
        ("entry.tool_calls[0].error", "01 01 'e'"),
        ("entry.tool_call_id", "01 02 'tc'"),
        ("entry.tool_name", "01 02 'tn'"),
        ("entry.is_error", "01"),
        ("entry.finish_reason", "01 04 'stop'"),
        ("entry.prompt_ns", "01 02 'ns'"),
        ("entry.prompt_key", "01 03 'key'"),
        ("entry.created_at", "04"),
        ("entry.metadata (count)", "02"),
        ("entry.metadata (first key)", "01 'a' 01 '1'"),
        ("entry.metadata (second key)", "01 'b' 01 '2'"),
    ];

    fn layout<'a>(parts: &[&[(&'a str, &'a str)]]) -> Vec<(&'a str, &'a str)> {
        parts.concat()
    }

    #[test]
    fn conversation_recorded_has_its_golden_bytes() {
        let recorded = Event::ConversationRecorded(Box::new(ConversationRecorded {
            conversation_id: "conv".into(),
            session_id: Some("sess".into()),
            created_at: Timestamp(1_795_000_000_000_000),
            entry: full_entry(),
        }));
        assert_layout(
            "conversation_recorded",
            &encode_event(&recorded),
            &layout(&[
                &[
                    ("codec version", "01"),
                    ("kind", "01"),
                    ("conversation_id", "04 'conv'"),
                    ("session_id", "01 04 'sess'"),
                    ("created_at", "fd 00 60 be 02 16 c1 0c 00"),
                ],
                FULL_ENTRY,
            ]),
        );
    }

    #[test]
    fn tool_status_has_its_golden_bytes() {
        let status = Event::ToolStatus(ToolStatusChanged {
            conversation_id: "conv".into(),
            evaluation_id: "eval".into(),
            call_id: "call_1".into(),
            status: ToolStatus::Failed,
            at: Timestamp(1_000_000),
            error: Some("boom".into()),
            resumed: true,
        });
        assert_layout(
            "tool_status",
            &encode_event(&status),
            &[
                ("codec version", "01"),
                ("kind", "02"),
                ("conversation_id", "04 'conv'"),
                ("evaluation_id", "04 'eval'"),
                ("call_id", "06 'call_1'"),
                ("status (failed)", "03"),
                ("at", "fc 80 84 1e 00"),
                ("error", "01 04 'boom'"),
                ("resumed", "01"),
            ],
        );
    }

    #[test]
    fn messages_replaced_has_its_golden_bytes() {
        let mut bare = ConversationEntry::new("e", 0, Role::System, None);
        bare.message_id = uuid::Uuid::from_bytes([0xAA; 16]);
        bare.created_at = Timestamp(0);
        let replaced = Event::MessagesReplaced(MessagesReplaced {
            conversation_id: "conv".into(),
            entries: vec![full_entry(), bare],
            at: Timestamp(9),
        });
        assert_layout(
            "messages_replaced",
            &encode_event(&replaced),
            &layout(&[
                &[
                    ("codec version", "01"),
                    ("kind", "03"),
                    ("conversation_id", "04 'conv'"),
                    ("entries (count)", "02"),
                ],
                FULL_ENTRY,
                &[
                    ("entries[1].message_id", "10 aa aa aa aa aa aa aa aa aa aa aa aa aa aa aa aa"),
                    ("entries[1].evaluation_id", "01 'e'"),
                    ("entries[1].sequence", "00"),
                    ("entries[1].turn", "00"),
                    ("entries[1].role (system)", "00"),
                    ("entries[1].content .. prompt_key (none, none, no calls, none, none, false, none, none, none)", "00 00 00 00 00 00 00 00 00"),
                    ("entries[1].created_at", "00"),
                    ("entries[1].metadata", "00"),
                    ("at", "12"),
                ],
            ]),
        );
    }

    #[test]
    fn history_curated_has_its_golden_bytes() {
        let curated = Event::HistoryCurated(HistoryCurated {
            conversation_id: "conv".into(),
            strategy: "sliding_window(2)".into(),
            original_count: 300,
            curated_count: 3,
            at: Timestamp(1),
            prompt_name: Some("p".into()),
            session_id: Some("s-1".into()),
        });
        assert_layout(
            "history_curated",
            &encode_event(&curated),
            &[
                ("codec version", "02"),
                ("kind", "04"),
                ("conversation_id", "04 'conv'"),
                ("strategy", "11 'sliding_window(2)'"),
                ("original_count", "fb 2c 01"),
                ("curated_count", "03"),
                ("at", "02"),
                ("prompt_name", "01 01 'p'"),
                ("session_id", "01 03 's-1'"),
            ],
        );
        let without = Event::HistoryCurated(HistoryCurated {
            prompt_name: None,
            session_id: None,
            ..match curated {
                Event::HistoryCurated(body) => body,
                _ => unreachable!(),
            }
        });
        let bytes = encode_event(&without);
        assert_eq!(&bytes[..2], [2, KIND_HISTORY_CURATED]);
        assert_eq!(&bytes[bytes.len() - 2..], [0, 0], "two absent options");
    }

    /// A `history_curated` payload written by codec version 1 (before
    /// `prompt_name` and `session_id`): these bytes are what version 1
    /// wrote, and they must keep decoding, with both fields `None`.
    #[test]
    fn a_version_1_history_curated_payload_still_decodes() {
        let mut old = vec![0x01, 0x04, 0x04];
        old.extend(b"conv");
        old.push(0x11);
        old.extend(b"sliding_window(2)");
        old.extend([0xfb, 0x2c, 0x01, 0x03, 0x02]);
        let expected = Event::HistoryCurated(HistoryCurated {
            conversation_id: "conv".into(),
            strategy: "sliding_window(2)".into(),
            original_count: 300,
            curated_count: 3,
            at: Timestamp(1),
            prompt_name: None,
            session_id: None,
        });
        assert_eq!(decode_event(&old).unwrap(), expected);
        assert_eq!(peek_conversation_id(&old), Some("conv"));
        // Version 1 has no room for the new fields: their bytes are left
        // over, an error, not a silent misread.
        let mut longer = old.clone();
        longer.extend([0, 0]);
        assert!(decode_event(&longer).unwrap_err().contains("trailing"));
        // Version 2 needs them.
        let mut as_version_2 = old.clone();
        as_version_2[0] = 2;
        assert!(decode_event(&as_version_2).is_err());
    }

    /// Kinds whose layout version 2 left alone are still written as version
    /// 1 (a store without curations stays readable by a version 1 build),
    /// and read under either version.
    #[test]
    fn unchanged_kinds_are_written_as_version_1_and_read_as_either() {
        for event in sample_events() {
            let bytes = encode_event(&event);
            let expected = if matches!(event, Event::HistoryCurated(_)) {
                2
            } else {
                1
            };
            assert_eq!(bytes[0], expected, "{event:?}");
            assert_eq!(event_codec_version(&event), expected);
            if expected == 1 {
                let mut as_version_2 = bytes.clone();
                as_version_2[0] = 2;
                assert_eq!(decode_event(&as_version_2).unwrap(), event);
                assert_eq!(
                    is_tool_status(&as_version_2),
                    matches!(event, Event::ToolStatus(_))
                );
            }
        }
    }

    #[test]
    fn custom_has_its_golden_bytes() {
        let custom = Event::Custom(CustomEvent {
            kind: "budget".into(),
            conversation_id: Some("conv".into()),
            payload: vec![0, 1, 2, 255],
        });
        assert_layout(
            "custom",
            &encode_event(&custom),
            &[
                ("codec version", "01"),
                ("kind", "05"),
                ("kind (custom)", "06 'budget'"),
                ("conversation_id", "01 04 'conv'"),
                ("payload", "04 00 01 02 ff"),
            ],
        );
        let custom = Event::Custom(CustomEvent {
            kind: "k".into(),
            conversation_id: None,
            payload: Vec::new(),
        });
        assert_layout(
            "custom without a conversation",
            &encode_event(&custom),
            &[
                ("codec version", "01"),
                ("kind", "05"),
                ("kind (custom)", "01 'k'"),
                ("conversation_id", "00"),
                ("payload", "00"),
            ],
        );
    }

    #[test]
    fn enum_variant_indexes_and_times_have_their_golden_bytes() {
        let roles = [Role::System, Role::User, Role::Assistant, Role::Tool];
        for (index, role) in roles.into_iter().enumerate() {
            assert_eq!(encode_value(&role).unwrap(), [index as u8], "{role:?}");
        }
        let statuses = [
            ToolStatus::Pending,
            ToolStatus::Running,
            ToolStatus::Completed,
            ToolStatus::Failed,
        ];
        for (index, status) in statuses.into_iter().enumerate() {
            assert_eq!(encode_value(&status).unwrap(), [index as u8], "{status:?}");
        }
        for (time, spec) in [
            (0, "00"),
            (-1, "01"),
            (1, "02"),
            (125, "fa"),
            (126, "fb fc 00"),
            (-300, "fb 57 02"),
            (1_000_000, "fc 80 84 1e 00"),
            (1_795_000_000_000_000, "fd 00 60 be 02 16 c1 0c 00"),
            (i64::MAX, "fd fe ff ff ff ff ff ff ff"),
            (i64::MIN, "fd ff ff ff ff ff ff ff ff"),
        ] {
            let time = Timestamp(time);
            assert_layout(
                &format!("{time:?}"),
                &encode_value(&time).unwrap(),
                &[("time", spec)],
            );
            assert_eq!(decode_value::<Timestamp>(&spec_bytes(spec)).unwrap(), time);
        }
    }

    fn status_change(call_id: &str, status: ToolStatus) -> Event {
        Event::ToolStatus(ToolStatusChanged {
            conversation_id: "c".into(),
            evaluation_id: "e1".into(),
            call_id: call_id.into(),
            status,
            at: Timestamp(7),
            error: None,
            resumed: false,
        })
    }

    /// The slice list form (docs/format.md section 13): `SliceForm`,
    /// `RecordedEntry`, `Anomaly` and the (LSN, body) pairs.
    #[test]
    fn the_slice_list_form_has_its_golden_bytes() {
        use crate::conversation::{fold, ConversationSlice};
        let mut assistant = ConversationEntry::new("e1", 1, Role::Assistant, None);
        assistant.message_id = uuid::Uuid::from_bytes([1; 16]);
        assistant.created_at = Timestamp(0);
        assistant.tool_calls.push(ToolCall {
            call_id: "a".into(),
            name: "t".into(),
            arguments: "{}".into(),
            status: ToolStatus::Pending,
            started_at: None,
            ended_at: None,
            error: None,
        });
        let events = [
            assistant.recorded_in("c"),
            status_change("ghost", ToolStatus::Running),
            status_change("a", ToolStatus::Completed),
            status_change("a", ToolStatus::Failed),
            Event::HistoryCurated(HistoryCurated {
                conversation_id: "c".into(),
                strategy: "all".into(),
                original_count: 2,
                curated_count: 1,
                at: Timestamp(7),
                prompt_name: Some("p".into()),
                session_id: None,
            }),
        ];
        let slice = fold("c", events.iter().zip(1..));
        let bytes = encode_value(&slice).unwrap();
        // The entry's own bytes are pinned above; here it is a field.
        let entry = hex(&encode_value(&slice.recorded()[0].entry).unwrap());
        assert_eq!(slice.anomalies().len(), 1, "{:?}", slice.anomalies());
        let detail = short_string(&slice.anomalies()[0].detail);
        assert_layout(
            "conversation slice",
            &bytes,
            &[
                ("conversation_id", "01 'c'"),
                ("entries (count)", "01"),
                ("entries[0].lsn", "01"),
                ("entries[0].entry", &entry),
                ("evaluations", "01 02 'e1'"),
                ("unknown_statuses (count)", "01"),
                ("unknown_statuses[0].lsn", "02"),
                ("unknown_statuses[0].conversation_id", "01 'c'"),
                ("unknown_statuses[0].evaluation_id", "02 'e1'"),
                ("unknown_statuses[0].call_id", "05 'ghost'"),
                ("unknown_statuses[0].status (running)", "01"),
                ("unknown_statuses[0].at", "0e"),
                ("unknown_statuses[0].error", "00"),
                ("unknown_statuses[0].resumed", "00"),
                ("anomalies (count)", "01"),
                ("anomalies[0].lsn", "04"),
                ("anomalies[0].call_id", "01 'a'"),
                ("anomalies[0].detail", &detail),
                ("curations (count)", "01"),
                ("curations[0].lsn", "05"),
                ("curations[0].conversation_id", "01 'c'"),
                ("curations[0].strategy", "03 'all'"),
                ("curations[0].original_count", "02"),
                ("curations[0].curated_count", "01"),
                ("curations[0].at", "0e"),
                ("curations[0].prompt_name", "01 01 'p'"),
                ("curations[0].session_id", "00"),
                ("last_lsn", "05"),
            ],
        );
        assert_eq!(decode_value::<ConversationSlice>(&bytes).unwrap(), slice);
        assert_eq!(
            crate::conversation::decode_snapshot_slice(3, &bytes).unwrap(),
            slice
        );

        // The same slice as snapshot version 2 wrote it: curations without
        // the last two fields, decoded with both `None`.
        // Drop "01 01 'p'" and "00" (4 bytes) before last_lsn (1 byte).
        let cut = bytes.len() - 1 - 4;
        let mut version_2 = bytes[..cut].to_vec();
        version_2.push(bytes[bytes.len() - 1]);
        assert_eq!(&version_2[version_2.len() - 2..], [0x0e, 0x05]);
        let old = crate::conversation::decode_snapshot_slice(2, &version_2).unwrap();
        let mut without = events.clone();
        if let Event::HistoryCurated(curated) = &mut without[4] {
            curated.prompt_name = None;
        }
        assert_eq!(old, fold("c", without.iter().zip(1..)));
        assert_eq!(old.curations()[0].1.prompt_name, None);
        assert!(
            crate::conversation::decode_snapshot_slice(3, &version_2).is_err(),
            "a version 2 blob is not a version 3 one"
        );
    }

    /// The snapshot directory and blob locations (docs/format.md section
    /// 13), as `snapshot::write` puts them in the file and `load` reads
    /// them back.
    #[test]
    fn the_snapshot_directory_has_its_golden_bytes() {
        use crate::store::snapshot::{self, BlobLocation, SnapshotBinding};
        let dir = tempfile::tempdir().unwrap();
        let storage = crate::storage::FileSystem;
        let path = snapshot::write(
            &storage,
            dir.path(),
            3,
            SnapshotBinding {
                store_id: [0; 16],
                chain: 0,
            },
            None,
            vec![
                Ok(("c".to_string(), vec![1, 2, 3])),
                Ok(("d".to_string(), vec![4])),
            ]
            .into_iter(),
            vec![("h".to_string(), vec![9, 8])],
        )
        .unwrap();
        let file = std::fs::read(&path).unwrap();
        let field = |at: usize| u64::from_le_bytes(file[at..at + 8].try_into().unwrap()) as usize;
        let (directory_offset, directory_bytes) = (field(48), field(56));
        assert_eq!(
            (directory_offset, directory_offset + directory_bytes),
            (76, file.len())
        );
        assert_layout(
            "snapshot directory",
            &file[directory_offset..],
            &[
                ("conversations (count)", "02"),
                ("conversations[0].id", "01 'c'"),
                ("conversations[0].offset", "48"),
                ("conversations[0].bytes", "03"),
                ("conversations[0].crc (0x55bc801d)", "fc 1d 80 bc 55"),
                ("conversations[1].id", "01 'd'"),
                ("conversations[1].offset", "4b"),
                ("conversations[1].bytes", "01"),
                ("conversations[1].crc (0xd56f2b94)", "fc 94 2b 6f d5"),
                ("host_slices (count)", "01"),
                ("host_slices[0].name", "01 'h'"),
                ("host_slices[0].bytes", "02 09 08"),
            ],
        );
        let loaded = snapshot::load(&storage, &path).unwrap();
        assert_eq!(
            loaded.conversations["d"],
            BlobLocation {
                offset: 75,
                bytes: 1,
                crc: 0xd56f_2b94,
            }
        );
        assert_eq!(loaded.host_slices["h"], [9, 8]);
    }

    /// The library's own host slice, `convlog.contexts/v1`.
    #[test]
    fn the_contexts_host_slice_has_its_golden_bytes() {
        use crate::control::{context_created_event, ContextRegistry, ContextsReducer};
        use crate::reducer::Reducer;
        let mut registry = ContextRegistry::default();
        let created = context_created_event("ctx", Some("alice"), true);
        ContextsReducer.apply(&mut registry, &created, 1);
        ContextsReducer.apply(&mut registry, &created, 2);
        assert_eq!(registry.rejected().len(), 1);
        let reason = short_string(&registry.rejected()[0].1);
        let bytes = encode_value(&registry).unwrap();
        assert_layout(
            "contexts slice",
            &bytes,
            &[
                ("contexts (count)", "01"),
                ("contexts[0] key", "03 'ctx'"),
                ("contexts[0].context_id", "03 'ctx'"),
                ("contexts[0].owner", "01 05 'alice'"),
                ("contexts[0].public", "01"),
                ("contexts[0].created_lsn", "01"),
                ("rejected (count)", "01"),
                ("rejected[0].lsn", "02"),
                ("rejected[0].reason", &reason),
            ],
        );
        assert_eq!(decode_value::<ContextRegistry>(&bytes).unwrap(), registry);
    }

    /// Events whose conversation id sits in every position `peek` reads:
    /// every kind, a custom event with and without one, and ids long
    /// enough for a two-byte length.
    fn peek_cases() -> Vec<Event> {
        let mut events = sample_events();
        let long = "c".repeat(ID_BYTES_MAX);
        for event in sample_events() {
            let mut event = event;
            match &mut event {
                Event::ConversationRecorded(body) => body.conversation_id.clone_from(&long),
                Event::ToolStatus(body) => body.conversation_id.clone_from(&long),
                Event::MessagesReplaced(body) => body.conversation_id.clone_from(&long),
                Event::HistoryCurated(body) => body.conversation_id.clone_from(&long),
                Event::Custom(body) => body.conversation_id = Some(long.clone()),
            }
            events.push(event);
        }
        events
    }

    /// `peek_conversation_id` decodes only the head of the body; it must
    /// give the decoded event's id for every kind, and for every payload
    /// that decodes at all (here: each byte of each case altered).
    #[test]
    fn the_peeked_id_is_the_decoded_one() {
        for event in peek_cases() {
            let bytes = encode_event(&event);
            assert_eq!(
                peek_conversation_id(&bytes),
                event.conversation_id(),
                "{event:?}"
            );
            let kind = match &event {
                Event::Custom(custom) => Some(custom.kind.as_str()),
                _ => None,
            };
            assert_eq!(custom_kind(&bytes), kind, "{event:?}");
            for cut in 0..bytes.len() {
                let _ = peek_conversation_id(&bytes[..cut]);
                let _ = custom_kind(&bytes[..cut]);
            }
            for at in 0..bytes.len() {
                for flip in [0x01, 0x80, 0xFF] {
                    let mut altered = bytes.clone();
                    altered[at] ^= flip;
                    if let Ok(decoded) = decode_event(&altered) {
                        assert_eq!(
                            peek_conversation_id(&altered),
                            decoded.conversation_id(),
                            "byte {at} ^ {flip:#x} of {event:?}"
                        );
                    }
                }
            }
        }
        assert_eq!(
            peek_conversation_id(&[3, 1, 1, b'c']),
            None,
            "another codec version"
        );
        assert_eq!(
            peek_conversation_id(&[0, 1, 1, b'c']),
            None,
            "another codec version"
        );
        assert_eq!(
            peek_conversation_id(&[1, 9, 1, b'c']),
            None,
            "an unknown kind"
        );
        assert_eq!(peek_conversation_id(&[1, 1, 1, 0xFF]), None, "not UTF-8");
    }

    #[test]
    fn truncated_or_altered_payloads_are_errors_not_panics() {
        for event in sample_events() {
            let bytes = encode_event(&event);
            for cut in 0..bytes.len() {
                assert!(decode_event(&bytes[..cut]).is_err(), "prefix {cut} decoded");
            }
            let mut extra = bytes.clone();
            extra.push(0);
            assert!(decode_event(&extra).is_err());
        }
        assert!(decode_event(&[9, 1]).unwrap_err().contains("version"));
        assert!(decode_event(&[1, 99]).unwrap_err().contains("kind"));
    }

    #[test]
    fn only_status_payloads_are_tool_status() {
        for event in sample_events() {
            let is_status = matches!(event, Event::ToolStatus(_));
            assert_eq!(
                is_tool_status(&encode_event(&event)),
                is_status,
                "{event:?}"
            );
        }
        assert!(!is_tool_status(&[]));
        assert!(
            !is_tool_status(&[9, KIND_TOOL_STATUS]),
            "another codec version"
        );
    }

    /// What [`decode_fold_event`] gives, as the owned event
    /// [`decode_event`] gives (the dropped `session_id` and `created_at`
    /// taken from `owned`, which must then be the same event).
    fn fold_event_as_owned(folded: FoldEvent<'_>, owned: &Event) -> Event {
        match (folded, owned) {
            (
                FoldEvent::Recorded {
                    conversation_id,
                    entry,
                },
                Event::ConversationRecorded(recorded),
            ) => Event::ConversationRecorded(Box::new(ConversationRecorded {
                conversation_id: conversation_id.to_string(),
                session_id: recorded.session_id.clone(),
                created_at: recorded.created_at,
                entry,
            })),
            (FoldEvent::Status(change), _) => Event::ToolStatus(change.to_owned_change()),
            (folded, owned) => panic!("{folded:?} decoded from a payload of {owned:?}"),
        }
    }

    /// Checks [`decode_fold_event`] against [`decode_event`] on `payload`:
    /// an event exactly when `decode_event` decodes a recorded entry or a
    /// status change, and then the same one.
    fn check_fold_decode(payload: &[u8]) {
        let owned = decode_event(payload);
        let folded = decode_fold_event(payload);
        match (&owned, folded) {
            (Ok(event @ (Event::ConversationRecorded(_) | Event::ToolStatus(_))), Some(folded)) => {
                assert_eq!(&fold_event_as_owned(folded, event), event, "{payload:?}");
            }
            (Ok(Event::ConversationRecorded(_) | Event::ToolStatus(_)), None) => {
                panic!("the fold decode refused {payload:?}, decode_event read {owned:?}")
            }
            (_, Some(folded)) => {
                panic!("the fold decode read {folded:?} from {payload:?}: {owned:?}")
            }
            (_, None) => {}
        }
    }

    #[test]
    fn the_fold_decode_is_decode_event() {
        let mut events = sample_events();
        let mut with_session = full_entry();
        with_session.content = Some("naïve ✓".into());
        events.push(Event::ConversationRecorded(Box::new(
            ConversationRecorded {
                conversation_id: "ctx_9".into(),
                session_id: Some("sess-1".into()),
                created_at: Timestamp(-4),
                entry: with_session,
            },
        )));
        events.push(status_change("call_2", ToolStatus::Running));
        // Every width of varint, a second call, long texts (two-byte
        // lengths), the extreme times.
        let mut wide = full_entry();
        wide.sequence = 1 << 40;
        wide.turn = 70_000;
        wide.created_at = Timestamp(i64::MIN);
        wide.content = Some("é".repeat(200));
        wide.tool_calls
            .push(ToolCall::new("call_2", "lookup", "{\"k\":1}"));
        wide.tool_calls[0].started_at = Some(Timestamp(i64::MAX));
        wide.metadata.insert("c".repeat(300), String::new());
        events.push(Event::ConversationRecorded(Box::new(
            ConversationRecorded {
                conversation_id: "c".repeat(ID_BYTES_MAX),
                session_id: None,
                created_at: Timestamp(1 << 33),
                entry: wide,
            },
        )));
        let mut long_status = status_change("call_3", ToolStatus::Completed);
        if let Event::ToolStatus(change) = &mut long_status {
            change.error = Some("x".repeat(300));
            change.at = Timestamp(-(1 << 20));
        }
        events.push(long_status);
        // A fixed pseudo-random stream (xorshift) of edits with two to
        // four bytes changed at once, beside the one-byte edits below.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for event in &events {
            let bytes = encode_event(event);
            for _ in 0..500 {
                let mut altered = bytes.clone();
                for _ in 0..2 + next() % 3 {
                    let at = (next() % bytes.len() as u64) as usize;
                    altered[at] = next() as u8;
                }
                check_fold_decode(&altered);
            }
            for version in [1, 2] {
                let mut other = bytes.clone();
                other[0] = version;
                check_fold_decode(&other);
            }
            // Every prefix, one byte more, every byte altered.
            for cut in 0..bytes.len() {
                check_fold_decode(&bytes[..cut]);
            }
            let mut extra = bytes.clone();
            extra.push(0);
            check_fold_decode(&extra);
            for at in 0..bytes.len() {
                for value in [0u8, 1, 0x7F, 0x80, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF] {
                    let mut altered = bytes.clone();
                    altered[at] = value;
                    check_fold_decode(&altered);
                }
            }
        }
        check_fold_decode(&[]);
        check_fold_decode(&[9, KIND_TOOL_STATUS]);
    }

    /// Forms the encoder never writes but bincode reads, and so must the
    /// fold decode: a varint in a wider form than it needs, a metadata key
    /// given twice (the last value stays).
    #[test]
    fn the_fold_decode_reads_what_bincode_reads_beyond_the_encoder() {
        let entry = full_entry();
        let payload = encode_event(&entry.clone().recorded_in("c"));
        let sequence = [0x04, b'e', b'v', b'a', b'l', 0x07];
        let at = payload
            .windows(sequence.len())
            .position(|window| window == sequence)
            .expect("the evaluation id and sequence")
            + sequence.len()
            - 1;
        for wider in [
            &[0xFB, 0x07, 0x00][..],
            &[0xFC, 0x07, 0, 0, 0],
            &[0xFD, 0x07, 0, 0, 0, 0, 0, 0, 0],
        ] {
            let mut widened = payload[..at].to_vec();
            widened.extend_from_slice(wider);
            widened.extend_from_slice(&payload[at + 1..]);
            check_fold_decode(&widened);
            assert!(decode_fold_event(&widened).is_some(), "{wider:?}");
        }
        let twice = payload.len() - 4;
        assert_eq!(&payload[twice..], &[0x01, b'b', 0x01, b'2']);
        let mut repeated = payload.clone();
        repeated[twice + 1] = b'a';
        check_fold_decode(&repeated);
        match decode_fold_event(&repeated) {
            Some(FoldEvent::Recorded { entry, .. }) => {
                assert_eq!(entry.metadata.len(), 1);
                assert_eq!(entry.metadata["a"], "2");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decode_event_at_locates_the_failure() {
        let event = sample_events().remove(0);
        assert_eq!(decode_event_at(7, &encode_event(&event)).unwrap(), event);
        match decode_event_at(42, &[1, 99]) {
            Err(Error::UndecodableEvent { lsn: 42, reason }) => assert!(reason.contains("kind")),
            other => panic!("expected UndecodableEvent at LSN 42, got {other:?}"),
        }
    }
}
