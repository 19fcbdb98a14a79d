//! The binary form of events and snapshot parts: the only module that calls
//! bincode.
//!
//! An event payload in the log is `[codec version: u8][event kind: u8][body]`
//! where the body is the kind's struct in bincode's standard configuration
//! (little-endian varints). `docs/format.md` specifies those bytes, so the
//! format never depends on the crate.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::model::{
    ConversationRecorded, CustomEvent, Event, HistoryCurated, MessagesReplaced, ToolStatusChanged,
};

/// The codec version this build writes and reads (first byte of an event).
pub const EVENT_CODEC_VERSION: u8 = 1;

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

fn encode_body<T: Serialize>(kind: u8, body: &T) -> Vec<u8> {
    let mut out = vec![EVENT_CODEC_VERSION, kind];
    bincode::serde::encode_into_std_write(body, &mut out, config())
        .expect("encoding model types into a Vec cannot fail");
    out
}

/// Encodes an event as a log payload.
pub fn encode_event(event: &Event) -> Vec<u8> {
    match event {
        Event::ConversationRecorded(body) => encode_body(KIND_CONVERSATION_RECORDED, body),
        Event::ToolStatus(body) => encode_body(KIND_TOOL_STATUS, body),
        Event::MessagesReplaced(body) => encode_body(KIND_MESSAGES_REPLACED, body),
        Event::HistoryCurated(body) => encode_body(KIND_HISTORY_CURATED, body),
        Event::Custom(body) => encode_body(KIND_CUSTOM, body),
    }
}

/// Reads one unsigned varint (docs/format.md section 12) at `*at`.
fn peek_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let first = *bytes.get(*at)?;
    *at += 1;
    let width = match first {
        0..=250 => return Some(u64::from(first)),
        251 => 2,
        252 => 4,
        253 => 8,
        _ => return None,
    };
    let mut word = [0u8; 8];
    word[..width].copy_from_slice(bytes.get(*at..*at + width)?);
    *at += width;
    Some(u64::from_le_bytes(word))
}

fn peek_string<'a>(bytes: &'a [u8], at: &mut usize) -> Option<&'a str> {
    let length = usize::try_from(peek_varint(bytes, at)?).ok()?;
    let text = bytes.get(*at..at.checked_add(length)?)?;
    *at += length;
    std::str::from_utf8(text).ok()
}

/// The conversation an encoded event belongs to, read without decoding the
/// event: `None` when it has none or the bytes are not a well-formed event
/// (decode it to find out which). Lets a reader skip other conversations'
/// events in a shared frame cheaply.
pub fn peek_conversation_id(payload: &[u8]) -> Option<&str> {
    let [EVENT_CODEC_VERSION, kind, ..] = payload else {
        return None;
    };
    let mut at = 2;
    match *kind {
        KIND_CONVERSATION_RECORDED
        | KIND_TOOL_STATUS
        | KIND_MESSAGES_REPLACED
        | KIND_HISTORY_CURATED => peek_string(payload, &mut at),
        KIND_CUSTOM => {
            peek_string(payload, &mut at)?;
            match payload.get(at)? {
                1 => {
                    at += 1;
                    peek_string(payload, &mut at)
                }
                _ => None,
            }
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
    if *version != EVENT_CODEC_VERSION {
        return Err(format!(
            "event codec version {version} is not supported (this build reads {EVENT_CODEC_VERSION})"
        ));
    }
    match *kind {
        KIND_CONVERSATION_RECORDED => decode_value::<ConversationRecorded>(body)
            .map(|body| Event::ConversationRecorded(Box::new(body))),
        KIND_TOOL_STATUS => decode_value::<ToolStatusChanged>(body).map(Event::ToolStatus),
        KIND_MESSAGES_REPLACED => {
            decode_value::<MessagesReplaced>(body).map(Event::MessagesReplaced)
        }
        KIND_HISTORY_CURATED => decode_value::<HistoryCurated>(body).map(Event::HistoryCurated),
        KIND_CUSTOM => decode_value::<CustomEvent>(body).map(Event::Custom),
        other => Err(format!("unknown event kind {other}")),
    }
    .map_err(|reason| format!("cannot decode event: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

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

    #[test]
    fn the_conversation_id_is_read_without_decoding() {
        for event in sample_events() {
            let bytes = encode_event(&event);
            assert_eq!(
                peek_conversation_id(&bytes),
                event.conversation_id(),
                "{event:?}"
            );
            for cut in 0..bytes.len() {
                let _ = peek_conversation_id(&bytes[..cut]);
            }
        }
        let mut custom = CustomEvent {
            kind: "k".into(),
            conversation_id: Some("c".repeat(300)),
            payload: vec![1],
        };
        assert_eq!(
            peek_conversation_id(&encode_event(&Event::Custom(custom.clone()))),
            custom.conversation_id.as_deref()
        );
        custom.conversation_id = None;
        assert_eq!(
            peek_conversation_id(&encode_event(&Event::Custom(custom))),
            None
        );
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
}
