//! The JSON form of events (`docs/events.md`): reading input lines with their
//! defaults, and writing events with their LSN.
//!
//! Input is one JSON event per line; a JSON array on one line is one atomic
//! batch. [`parse_line`] fills what `docs/events.md` lets a writer omit:
//!
//! - `entry.message_id`: a new UUID v4;
//! - `created_at` of an event: now; `entry.created_at`: the event's
//!   `created_at` (now when that is omitted too); `at` of `tool_status`,
//!   `messages_replaced` and `history_curated`: now;
//! - `entry.sequence`: the next one in that conversation and evaluation,
//!   asked of the store through a callback, counting up within the line. The
//!   entries of a `messages_replaced` event count from 0 (they replace the
//!   conversation's messages);
//! - optional fields may be `null` or absent, and so may fields with a
//!   default (`turn`, `tool_calls`, `is_error`, `metadata`,
//!   `reasoning.redacted`, a call's `status`, `resumed`).
//!
//! An `lsn` field at the top of an event (as [`to_json_line`] writes it) is
//! accepted and ignored: the store assigns LSNs. Anything else unknown (an
//! event type, a role, a status, a field, a field given twice) is rejected.
//! Every error names the line and the field path (`entry.tool_calls[0].status`;
//! `[2].entry.role` for the third event of a batch), and the fields
//! [`Event::validate`] checks are checked here too.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::log::Lsn;
use crate::model::{
    ConversationRecorded, CustomEvent, Event, HistoryCurated, MessagesReplaced, Timestamp,
    ToolStatusChanged,
};

/// The field [`to_json_line`] adds to an event: its LSN.
pub const LSN_FIELD: &str = "lsn";

/// The event types, as the `type` field names them.
pub const EVENT_TYPES: [&str; 5] = [
    "conversation_recorded",
    "tool_status",
    "messages_replaced",
    "history_curated",
    "custom",
];

/// Parses one input line into the events it holds, filling defaults with
/// the current time. A blank line holds none (an empty vector); an object is
/// one event; an array is one atomic batch.
///
/// `next_sequence(conversation_id, evaluation_id)` gives the next free
/// sequence of that evaluation in the store (0 if it is new); it is asked at
/// most once per evaluation per line, and only for entries that omit
/// `sequence`. An error from it rejects the line.
pub fn parse_line(
    line: u64,
    text: &str,
    next_sequence: &mut dyn FnMut(&str, &str) -> Result<u64, String>,
) -> crate::Result<Vec<Event>> {
    parse_line_at(line, text, Timestamp::now(), next_sequence)
}

/// [`parse_line`] with `now` as the time that omitted times default to.
pub fn parse_line_at(
    line: u64,
    text: &str,
    now: Timestamp,
    next_sequence: &mut dyn FnMut(&str, &str) -> Result<u64, String>,
) -> crate::Result<Vec<Event>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let error = |field: Option<String>, reason: String| crate::Error::InvalidLine {
        line,
        field,
        reason,
    };
    let value = parse_strict(text).map_err(|(field, message)| error(field, message))?;
    let mut sequences = Sequences {
        next_sequence,
        floors: HashMap::new(),
        asked: HashSet::new(),
        replaced: HashSet::new(),
    };
    let mut context = Context {
        now: Value::String(now.to_string()),
        sequences: &mut sequences,
    };
    match value {
        Value::Object(object) => {
            let event = context
                .event(object)
                .map_err(|fault| error(Some(fault.field), fault.message))?;
            Ok(vec![event])
        }
        Value::Array(items) if items.is_empty() => Err(error(
            None,
            "an empty array is not a batch: a batch needs at least one event".to_string(),
        )),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(index, item)| {
                let prefix = |field: String| {
                    if field.is_empty() {
                        format!("[{index}]")
                    } else {
                        format!("[{index}].{field}")
                    }
                };
                match item {
                    Value::Object(object) => context
                        .event(object)
                        .map_err(|fault| error(Some(prefix(fault.field)), fault.message)),
                    other => Err(error(
                        Some(prefix(String::new())),
                        format!("expected an event (a JSON object), found {}", kind(&other)),
                    )),
                }
            })
            .collect(),
        other => Err(error(
            None,
            format!(
                "expected an event (a JSON object) or a batch (an array of events), found {}",
                kind(&other)
            ),
        )),
    }
}

/// One event as a JSON line (no trailing newline): its JSON form
/// (`docs/events.md`) with an `"lsn"` field first.
///
/// Fails only for times before 1970, which have no RFC 3339 form here
/// ([`crate::Error::JsonEncode`]).
pub fn to_json_line(lsn: Lsn, event: &Event) -> crate::Result<String> {
    let json = serde_json::to_string(event).map_err(|error| crate::Error::JsonEncode {
        lsn,
        reason: error.to_string(),
    })?;
    // An event always serializes as a non-empty object: `{"type":...}`.
    debug_assert!(json.starts_with("{\"type\""));
    Ok(format!("{{\"{LSN_FIELD}\":{lsn},{}", &json[1..]))
}

/// A fault inside one event: the field path (relative to the event) and why.
struct Fault {
    field: String,
    message: String,
}

impl Fault {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Fault {
        Fault {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Sequence numbers handed out while parsing one line.
struct Sequences<'a> {
    next_sequence: &'a mut dyn FnMut(&str, &str) -> Result<u64, String>,
    /// (conversation, evaluation) → the lowest sequence still free.
    floors: HashMap<(String, String), u64>,
    /// Keys whose floor already includes the store's answer.
    asked: HashSet<(String, String)>,
    /// Conversations a `messages_replaced` of this line replaced: the store's
    /// sequences no longer apply to them.
    replaced: HashSet<String>,
}

impl Sequences<'_> {
    fn assign(&mut self, conversation_id: &str, evaluation_id: &str) -> Result<u64, String> {
        let key = (conversation_id.to_string(), evaluation_id.to_string());
        if !self.replaced.contains(conversation_id) && !self.asked.contains(&key) {
            let stored = (self.next_sequence)(conversation_id, evaluation_id)?;
            self.asked.insert(key.clone());
            let floor = self.floors.entry(key.clone()).or_insert(0);
            *floor = (*floor).max(stored);
        }
        let floor = self.floors.entry(key).or_insert(0);
        let sequence = *floor;
        *floor = sequence.saturating_add(1);
        Ok(sequence)
    }

    fn observe(&mut self, conversation_id: &str, evaluation_id: &str, sequence: u64) {
        let key = (conversation_id.to_string(), evaluation_id.to_string());
        let floor = self.floors.entry(key).or_insert(0);
        *floor = (*floor).max(sequence.saturating_add(1));
    }

    fn replace(&mut self, conversation_id: &str) {
        self.floors.retain(|(id, _), _| id != conversation_id);
        self.asked.retain(|(id, _)| id != conversation_id);
        self.replaced.insert(conversation_id.to_string());
    }
}

struct Context<'a, 'b> {
    /// Now, as the JSON string omitted times default to.
    now: Value,
    sequences: &'a mut Sequences<'b>,
}

impl Context<'_, '_> {
    fn event(&mut self, mut object: Map<String, Value>) -> Result<Event, Fault> {
        let type_name = match object.remove("type") {
            Some(Value::String(name)) => name,
            Some(other) => {
                return Err(Fault::new(
                    "type",
                    format!(
                        "expected a string, one of {}; found {}",
                        EVENT_TYPES.join(", "),
                        kind(&other)
                    ),
                ))
            }
            None => {
                return Err(Fault::new(
                    "type",
                    format!(
                        "missing: every event needs one of {}",
                        EVENT_TYPES.join(", ")
                    ),
                ))
            }
        };
        match object.remove(LSN_FIELD) {
            None | Some(Value::Null) => {}
            Some(Value::Number(number)) if number.as_u64().is_some() => {}
            Some(other) => {
                return Err(Fault::new(
                    LSN_FIELD,
                    format!(
                        "expected a positive integer, found {} (an input LSN is ignored: the store assigns LSNs)",
                        kind(&other)
                    ),
                ))
            }
        }
        let event = match type_name.as_str() {
            "conversation_recorded" => {
                default_time(&mut object, "created_at", &self.now);
                let entry_time = object["created_at"].clone();
                let conversation_id = string_field(&object, "conversation_id");
                if let Some(Value::Object(entry)) = object.get_mut("entry") {
                    self.entry(entry, "entry", &conversation_id, &entry_time)?;
                }
                Event::ConversationRecorded(Box::new(typed::<ConversationRecorded>(object)?))
            }
            "tool_status" => {
                default_time(&mut object, "at", &self.now);
                null_is_absent(&mut object, &["resumed"]);
                Event::ToolStatus(typed::<ToolStatusChanged>(object)?)
            }
            "messages_replaced" => {
                default_time(&mut object, "at", &self.now);
                let conversation_id = string_field(&object, "conversation_id");
                if let Some(id) = &conversation_id {
                    self.sequences.replace(id);
                }
                if let Some(Value::Array(entries)) = object.get_mut("entries") {
                    for (index, entry) in entries.iter_mut().enumerate() {
                        if let Value::Object(entry) = entry {
                            let now = self.now.clone();
                            let path = format!("entries[{index}]");
                            self.entry(entry, &path, &conversation_id, &now)?;
                        }
                    }
                }
                Event::MessagesReplaced(typed::<MessagesReplaced>(object)?)
            }
            "history_curated" => {
                default_time(&mut object, "at", &self.now);
                Event::HistoryCurated(typed::<HistoryCurated>(object)?)
            }
            "custom" => Event::Custom(typed::<CustomEvent>(object)?),
            unknown => {
                return Err(Fault::new(
                    "type",
                    format!(
                        "unknown event type {unknown:?}, expected one of {}",
                        EVENT_TYPES.join(", ")
                    ),
                ))
            }
        };
        event
            .validate()
            .map_err(|invalid| Fault::new(invalid.field, invalid.reason))?;
        Ok(event)
    }

    /// Fills the defaults of an entry at `path` of conversation `conversation_id`.
    fn entry(
        &mut self,
        entry: &mut Map<String, Value>,
        path: &str,
        conversation_id: &Option<String>,
        created_at: &Value,
    ) -> Result<(), Fault> {
        if matches!(entry.get("message_id"), None | Some(Value::Null)) {
            entry.insert(
                "message_id".to_string(),
                Value::String(Uuid::new_v4().to_string()),
            );
        }
        default_time(entry, "created_at", created_at);
        null_is_absent(entry, &["turn", "tool_calls", "is_error", "metadata"]);
        if let Some(Value::Object(reasoning)) = entry.get_mut("reasoning") {
            null_is_absent(reasoning, &["redacted"]);
        }
        if let Some(Value::Array(calls)) = entry.get_mut("tool_calls") {
            for call in calls {
                if let Value::Object(call) = call {
                    null_is_absent(call, &["status"]);
                }
            }
        }
        let (Some(conversation_id), Some(evaluation_id)) =
            (conversation_id, string_field(entry, "evaluation_id"))
        else {
            // The event cannot deserialize without string ids; a placeholder
            // sequence lets that error, not a missing sequence, be reported.
            if matches!(entry.get("sequence"), None | Some(Value::Null)) {
                entry.insert("sequence".to_string(), Value::from(0));
            }
            return Ok(());
        };
        match entry.get("sequence") {
            None | Some(Value::Null) => {
                let sequence = self
                    .sequences
                    .assign(conversation_id, &evaluation_id)
                    .map_err(|reason| {
                        Fault::new(
                            format!("{path}.sequence"),
                            format!("omitted, and the next sequence is unknown: {reason}"),
                        )
                    })?;
                entry.insert("sequence".to_string(), Value::from(sequence));
            }
            Some(Value::Number(number)) => {
                if let Some(sequence) = number.as_u64() {
                    self.sequences
                        .observe(conversation_id, &evaluation_id, sequence);
                }
            }
            Some(_) => {}
        }
        Ok(())
    }
}

/// Deserializes an event body, with the path of the field at fault.
fn typed<T: DeserializeOwned>(object: Map<String, Value>) -> Result<T, Fault> {
    serde_path_to_error::deserialize(Value::Object(object)).map_err(|error| {
        let field = path_string(error.path());
        let message = error.inner().to_string();
        // serde names a missing field in the message, at its parent's path.
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            let field = if field.is_empty() {
                name.to_string()
            } else {
                format!("{field}.{name}")
            };
            return Fault::new(field, "missing (a required field)");
        }
        Fault::new(field, message)
    })
}

fn path_string(path: &serde_path_to_error::Path) -> String {
    if path.iter().next().is_none() {
        String::new()
    } else {
        path.to_string()
    }
}

/// Sets `field` to `time` when it is absent or null.
fn default_time(object: &mut Map<String, Value>, field: &str, time: &Value) {
    if matches!(object.get(field), None | Some(Value::Null)) {
        object.insert(field.to_string(), time.clone());
    }
}

/// Removes these fields when they are null, so their defaults apply.
fn null_is_absent(object: &mut Map<String, Value>, fields: &[&str]) {
    for field in fields {
        if object.get(*field) == Some(&Value::Null) {
            object.remove(*field);
        }
    }
}

fn string_field(object: &Map<String, Value>, field: &str) -> Option<String> {
    match object.get(field) {
        Some(Value::String(text)) => Some(text.clone()),
        _ => None,
    }
}

/// What kind of JSON value this is, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses JSON text into a value, rejecting a key given twice in one object
/// (which `serde_json::Value` would silently resolve to the last one).
/// Errors carry the field path, or none for malformed JSON.
fn parse_strict(text: &str) -> Result<Value, (Option<String>, String)> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed: Result<StrictValue, _> = serde_path_to_error::deserialize(&mut deserializer);
    let value = match parsed {
        Ok(StrictValue(value)) => value,
        Err(error) => {
            let field = path_string(error.path());
            let inner = error.into_inner();
            let message = without_position(&inner);
            // Our own check: a key given twice, named at its parent's path.
            if let Some(key) = message
                .strip_prefix("field `")
                .and_then(|rest| rest.strip_suffix("` is given twice"))
            {
                let field = if field.is_empty() {
                    key.to_string()
                } else {
                    format!("{field}.{key}")
                };
                return Err((
                    Some(field),
                    "given twice (each field at most once)".to_string(),
                ));
            }
            return Err((None, invalid_json(&inner)));
        }
    };
    deserializer
        .end()
        .map_err(|error| (None, invalid_json(&error)))?;
    Ok(value)
}

fn invalid_json(error: &serde_json::Error) -> String {
    format!(
        "invalid JSON at column {}: {}",
        error.column(),
        without_position(error)
    )
}

/// serde_json's message without its " at line L column C" suffix.
fn without_position(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    message
        .strip_suffix(&suffix)
        .map(str::to_string)
        .unwrap_or(message)
}

/// A `serde_json::Value` whose objects may not repeat a key.
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<StrictValue, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_string()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(deserializer).map(|value| value.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let StrictValue(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "field `{key}` is given twice"
                )));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Role, ToolStatus};

    const NOW: Timestamp = Timestamp(1_795_000_000_123_456);

    fn parse(text: &str) -> crate::Result<Vec<Event>> {
        parse_line_at(7, text, NOW, &mut |_, _| Ok(0))
    }

    /// An `Error::InvalidLine`, taken apart.
    struct Rejected {
        line: u64,
        field: Option<String>,
        message: String,
        error: crate::Error,
    }

    impl fmt::Display for Rejected {
        fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.error.fmt(formatter)
        }
    }

    fn rejected(error: crate::Error) -> Rejected {
        let (line, field, message) = match &error {
            crate::Error::InvalidLine {
                line,
                field,
                reason,
            } => (*line, field.clone(), reason.clone()),
            other => panic!("expected InvalidLine, got {other:?}"),
        };
        Rejected {
            line,
            field,
            message,
            error,
        }
    }

    fn error(text: &str) -> Rejected {
        rejected(parse(text).expect_err("the line must be rejected"))
    }

    fn recorded(event: &Event) -> &ConversationRecorded {
        match event {
            Event::ConversationRecorded(body) => body,
            other => panic!("expected conversation_recorded, got {other:?}"),
        }
    }

    const EXAMPLE: &str = r#"{"type": "conversation_recorded",
 "conversation_id": "ctx_123",
 "session_id": null,
 "created_at": "2026-11-22T12:00:00.123456Z",
 "entry": {
   "message_id": "0b6f3c1e-6a39-4d4e-9a57-2f1d8f0c9a11",
   "evaluation_id": "eval-7",
   "sequence": 1,
   "turn": 1,
   "role": "assistant",
   "content": "Let me look that up.",
   "reasoning": {"text": "need two lookups", "signature": "EqQBCkYIBx...", "redacted": false},
   "tool_calls": [
     {"call_id": "call_1", "name": "search", "arguments": "{\"q\":\"paris\"}", "status": "pending"},
     {"call_id": "call_2", "name": "search", "arguments": "{\"q\":\"rome\"}", "status": "pending"}
   ],
   "tool_call_id": null,
   "tool_name": null,
   "is_error": false,
   "finish_reason": "tool_calls",
   "prompt_ns": "travel",
   "prompt_key": "planner",
   "created_at": "2026-11-22T12:00:00.123456Z",
   "metadata": {}
 }}"#;

    #[test]
    fn parses_the_examples_of_events_md() {
        let events = parse(&EXAMPLE.replace('\n', " ")).unwrap();
        let body = recorded(&events[0]);
        assert_eq!(body.conversation_id, "ctx_123");
        assert_eq!(body.entry.sequence, 1);
        assert_eq!(body.entry.role, Role::Assistant);
        assert_eq!(body.entry.tool_calls.len(), 2);
        assert_eq!(
            body.entry.message_id.to_string(),
            "0b6f3c1e-6a39-4d4e-9a57-2f1d8f0c9a11"
        );
        assert_eq!(body.created_at.to_string(), "2026-11-22T12:00:00.123456Z");

        let events = parse(
            r#"{"type": "tool_status", "conversation_id": "ctx_123", "evaluation_id": "eval-7", "call_id": "call_1", "status": "running", "at": "2026-11-22T12:00:00.2Z", "error": null}"#,
        )
        .unwrap();
        let Event::ToolStatus(status) = &events[0] else {
            panic!("expected tool_status")
        };
        assert_eq!(status.status, ToolStatus::Running);
        assert!(!status.resumed);
    }

    #[test]
    fn output_round_trips_and_carries_the_lsn_first() {
        let event = parse(&EXAMPLE.replace('\n', " ")).unwrap().remove(0);
        let line = to_json_line(42, &event).unwrap();
        assert!(
            line.starts_with(r#"{"lsn":42,"type":"conversation_recorded","#),
            "{line}"
        );
        assert!(!line.contains('\n'));
        let back = parse_line_at(1, &line, Timestamp(0), &mut |_, _| panic!("not asked"))
            .unwrap()
            .remove(0);
        assert_eq!(back, event);
    }

    #[test]
    fn every_event_type_round_trips() {
        let lines = [
            r#"{"type":"tool_status","conversation_id":"c","evaluation_id":"e","call_id":"k","status":"failed","at":"2026-01-01T00:00:00Z","error":"boom","resumed":true}"#,
            r#"{"type":"messages_replaced","conversation_id":"c","entries":[{"evaluation_id":"e","role":"system","content":"be brief"}],"at":"2026-01-01T00:00:00Z"}"#,
            r#"{"type":"history_curated","conversation_id":"c","strategy":"sliding_window(50)","original_count":80,"curated_count":50,"at":"2026-01-01T00:00:00Z"}"#,
            r#"{"type":"history_curated","conversation_id":"c","strategy":"s","original_count":2,"curated_count":1,"at":"2026-01-01T00:00:00Z","prompt_name":"travel/planner","session_id":"sess-1"}"#,
            r#"{"type":"custom","kind":"budget","conversation_id":null,"payload":"AAEC"}"#,
        ];
        for line in lines {
            let event = parse(line).unwrap().remove(0);
            let again = parse(&to_json_line(1, &event).unwrap()).unwrap().remove(0);
            assert_eq!(again, event, "{line}");
        }
    }

    #[test]
    fn history_curated_prompt_name_and_session_id_are_optional() {
        let curated = |line: &str| match parse(line).unwrap().remove(0) {
            Event::HistoryCurated(body) => body,
            other => panic!("expected history_curated, got {other:?}"),
        };
        let absent = curated(
            r#"{"type":"history_curated","conversation_id":"c","strategy":"s","original_count":2,"curated_count":1}"#,
        );
        assert_eq!((absent.prompt_name, absent.session_id), (None, None));
        let null = curated(
            r#"{"type":"history_curated","conversation_id":"c","strategy":"s","original_count":2,"curated_count":1,"prompt_name":null,"session_id":null}"#,
        );
        assert_eq!((null.prompt_name, null.session_id), (None, None));
        let given = curated(
            r#"{"type":"history_curated","conversation_id":"c","strategy":"s","original_count":2,"curated_count":1,"prompt_name":"travel/planner","session_id":"sess-1"}"#,
        );
        assert_eq!(given.prompt_name.as_deref(), Some("travel/planner"));
        assert_eq!(given.session_id.as_deref(), Some("sess-1"));
        // The session id is an id: empty is refused, naming the field.
        let refused = error(
            r#"{"type":"history_curated","conversation_id":"c","strategy":"s","original_count":2,"curated_count":1,"session_id":""}"#,
        );
        assert_eq!(refused.field.as_deref(), Some("session_id"), "{refused}");
    }

    #[test]
    fn fills_omitted_ids_times_and_sequences() {
        let mut asked = Vec::new();
        let events = parse_line_at(
            1,
            r#"[{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"user","content":"hi"}},
                {"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"assistant","sequence":null,"message_id":null}},
                {"type":"conversation_recorded","conversation_id":"c","created_at":"2026-01-01T00:00:00Z","entry":{"evaluation_id":"other","role":"user"}},
                {"type":"tool_status","conversation_id":"c","evaluation_id":"e","call_id":"k","status":"running"}]"#
                .replace('\n', " ")
                .as_str(),
            NOW,
            &mut |conversation, evaluation| {
                asked.push((conversation.to_string(), evaluation.to_string()));
                Ok(if evaluation == "e" { 5 } else { 0 })
            },
        )
        .unwrap();
        assert_eq!(
            asked,
            [
                ("c".to_string(), "e".to_string()),
                ("c".to_string(), "other".to_string())
            ],
            "asked once per evaluation"
        );
        let first = recorded(&events[0]);
        let second = recorded(&events[1]);
        let third = recorded(&events[2]);
        assert_eq!((first.entry.sequence, second.entry.sequence), (5, 6));
        assert_eq!(third.entry.sequence, 0);
        assert_ne!(first.entry.message_id, second.entry.message_id);
        assert_eq!(first.entry.message_id.get_version_num(), 4);
        assert_eq!((first.created_at, first.entry.created_at), (NOW, NOW));
        let stated = Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        assert_eq!(
            (third.created_at, third.entry.created_at),
            (stated, stated),
            "an entry takes its event's time"
        );
        let Event::ToolStatus(status) = &events[3] else {
            panic!("expected tool_status")
        };
        assert_eq!(status.at, NOW);
    }

    #[test]
    fn explicit_sequences_raise_the_next_omitted_one() {
        let events = parse_line_at(
            1,
            r#"[{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"user","sequence":9}},{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"user"}}]"#,
            NOW,
            &mut |_, _| Ok(3),
        )
        .unwrap();
        assert_eq!(recorded(&events[1]).entry.sequence, 10);
    }

    #[test]
    fn replaced_entries_count_from_zero_and_later_entries_follow_them() {
        let events = parse_line_at(
            1,
            r#"[{"type":"messages_replaced","conversation_id":"c","entries":[{"evaluation_id":"e","role":"system"},{"evaluation_id":"e","role":"user"}]},{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"assistant"}}]"#,
            NOW,
            &mut |_, _| Ok(40),
        )
        .unwrap();
        let Event::MessagesReplaced(replaced) = &events[0] else {
            panic!("expected messages_replaced")
        };
        let sequences: Vec<u64> = replaced
            .entries
            .iter()
            .map(|entry| entry.sequence)
            .collect();
        assert_eq!(sequences, [0, 1]);
        assert_eq!(recorded(&events[1]).entry.sequence, 2);
    }

    #[test]
    fn a_failing_sequence_source_rejects_the_line() {
        let rejected = rejected(
            parse_line_at(
                4,
                r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"user"}}"#,
                NOW,
                &mut |_, _| Err("disk on fire".to_string()),
            )
            .unwrap_err(),
        );
        assert_eq!(rejected.line, 4);
        assert_eq!(rejected.field.as_deref(), Some("entry.sequence"));
        assert!(rejected.message.contains("disk on fire"));
    }

    #[test]
    fn blank_lines_hold_no_events() {
        assert!(parse("").unwrap().is_empty());
        assert!(parse("  \t ").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let cases = [
            (
                r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"robot"}}"#,
                "entry.role",
                "unknown variant `robot`",
            ),
            (
                r#"{"type":"conversation_recorded","entry":{"evaluation_id":"e","role":"user"}}"#,
                "conversation_id",
                "missing",
            ),
            (
                r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"role":"user"}}"#,
                "entry.evaluation_id",
                "missing",
            ),
            (
                r#"{"type":"tool_status","conversation_id":"c","evaluation_id":"e","call_id":"k","status":"done"}"#,
                "status",
                "unknown variant `done`",
            ),
            (
                r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"assistant","tool_calls":[{"call_id":"a","name":"n","arguments":"{}","status":"later"}]}}"#,
                "entry.tool_calls[0].status",
                "unknown variant `later`",
            ),
            (
                r#"{"type":"conversation_recorded","conversation_id":"c","colour":"red","entry":{"evaluation_id":"e","role":"user"}}"#,
                "colour",
                "unknown field `colour`",
            ),
            (
                r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"user","mood":1}}"#,
                "entry.mood",
                "unknown field `mood`",
            ),
            (
                r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"user","created_at":"yesterday"}}"#,
                "entry.created_at",
                "RFC 3339",
            ),
            (
                r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"user","message_id":"nope"}}"#,
                "entry.message_id",
                "",
            ),
            (
                r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"user","sequence":-1}}"#,
                "entry.sequence",
                "",
            ),
            (
                r#"{"type":"custom","kind":"k","payload":"not base64!"}"#,
                "payload",
                "base64",
            ),
            (
                r#"{"type":"renamed","conversation_id":"c"}"#,
                "type",
                "unknown event type",
            ),
            (r#"{"conversation_id":"c"}"#, "type", "missing"),
            (r#"{"type":7}"#, "type", "expected a string"),
            (
                r#"{"type":"custom","kind":"k","payload":"","lsn":"one"}"#,
                "lsn",
                "positive integer",
            ),
            (
                r#"{"type":"custom","kind":"k","kind":"j","payload":""}"#,
                "kind",
                "given twice",
            ),
            (
                r#"{"type":"history_curated","conversation_id":"c","strategy":"s","original_count":1}"#,
                "curated_count",
                "missing",
            ),
        ];
        for (line, field, message) in cases {
            let rejected = error(line);
            assert_eq!(rejected.line, 7);
            assert_eq!(
                rejected.field.as_deref().unwrap_or("<none>"),
                field,
                "{line}: {rejected}"
            );
            assert!(
                rejected.message.contains(message),
                "{line}: {rejected} should say {message:?}"
            );
        }
    }

    #[test]
    fn validation_failures_name_the_field() {
        let long = "x".repeat(crate::model::ID_BYTES_MAX + 1);
        let rejected = error(&format!(
            r#"{{"type":"conversation_recorded","conversation_id":"{long}","entry":{{"evaluation_id":"e","role":"user"}}}}"#
        ));
        assert_eq!(rejected.field.as_deref(), Some("conversation_id"));
        assert!(rejected.message.contains("ID_BYTES_MAX"), "{rejected}");

        let rejected = error(
            r#"[{"type":"custom","kind":"k","payload":""},{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"tool"}}]"#,
        );
        assert_eq!(rejected.field.as_deref(), Some("[1].entry.tool_call_id"));
        assert_eq!(
            rejected.to_string(),
            "line 7: [1].entry.tool_call_id: a tool entry needs the call id it answers"
        );
    }

    #[test]
    fn malformed_lines_are_rejected_with_a_column() {
        let rejected = error(r#"{"type": "custom", "kind": "#);
        assert_eq!(rejected.field, None);
        assert!(
            rejected.message.starts_with("invalid JSON at column"),
            "{rejected}"
        );
        let rejected = error(r#"{"type":"custom","kind":"k","payload":""} trailing"#);
        assert!(rejected.message.contains("trailing"), "{rejected}");
        assert!(error("[]").message.contains("empty array"));
        assert!(error("42").message.contains("found a number"));
        let rejected = error(r#"[{"type":"custom","kind":"k","payload":""}, 3]"#);
        assert_eq!(rejected.field.as_deref(), Some("[1]"));
    }

    #[test]
    fn null_means_absent_for_defaulted_fields() {
        let events = parse(
            r#"{"type":"conversation_recorded","conversation_id":"c","session_id":null,"created_at":null,"entry":{"evaluation_id":"e","role":"assistant","turn":null,"tool_calls":[{"call_id":"a","name":"n","arguments":"not json","status":null}],"is_error":null,"metadata":null,"reasoning":{"text":null,"redacted":null},"created_at":null}}"#,
        )
        .unwrap();
        let body = recorded(&events[0]);
        assert_eq!(body.entry.tool_calls[0].status, ToolStatus::Pending);
        assert_eq!(body.entry.tool_calls[0].arguments, "not json");
        assert_eq!(body.entry.turn, 0);
        assert_eq!(body.created_at, NOW);
    }
}
