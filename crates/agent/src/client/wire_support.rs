//! Helpers shared by the Anthropic, Gemini and Responses wire formats:
//! errors, the rendered body, the one-entry ingest and tool-call deltas.
//!
//! The error constructors are `reply`'s, shared with the OpenAI Chat and
//! Ollama formats.

use convlog::{ConversationEntry, Provider, Role, Timestamp};
use serde_json::{Map, Value};

use super::{ModelError, ModelRequest, StreamDelta, Usage};

pub(crate) use super::reply::{
    malformed, provider_error, request_error, PLACEHOLDER_EVALUATION_ID,
};

/// The rendered messages (and system field) of `request` as a body object.
pub(crate) fn rendered_body(
    provider: Provider,
    request: &ModelRequest<'_>,
) -> Result<Map<String, Value>, ModelError> {
    let rendered = convlog::render(provider, request.entries, request.render)
        .map_err(|err| request_error(format!("{provider} messages: {err}")))?;
    match rendered.body() {
        Value::Object(body) => Ok(body),
        other => Err(request_error(format!(
            "{provider} messages rendered as {other}, not an object"
        ))),
    }
}

/// The `Authorization`-style header for `key` under `name` (none without a
/// key).
pub(crate) fn auth_header(name: &str, value: Option<String>) -> Vec<(String, String)> {
    value
        .map(|value| vec![(name.to_string(), value)])
        .unwrap_or_default()
}

/// `Authorization: Bearer KEY` when the config has a (non-empty) key.
pub(crate) fn bearer_header(config: &super::ClientConfig) -> Vec<(String, String)> {
    auth_header(
        "Authorization",
        config
            .api_key
            .as_ref()
            .filter(|key| !key.is_empty())
            .map(|key| format!("Bearer {key}")),
    )
}

/// `provider`'s assistant message(s) in `messages` as ONE assistant entry
/// (placeholder evaluation id, sequence 0).
pub(crate) fn ingest_one(
    provider: Provider,
    messages: &Value,
) -> Result<ConversationEntry, ModelError> {
    let entries = convlog::ingest(
        provider,
        messages,
        PLACEHOLDER_EVALUATION_ID,
        0,
        Timestamp::now(),
    )
    .map_err(|err| malformed(format!("the {provider} reply: {err}")))?;
    let count = entries.len();
    let mut entries = entries.into_iter();
    match (entries.next(), count) {
        (Some(entry), 1) if entry.role == Role::Assistant => Ok(entry),
        (Some(entry), 1) => Err(malformed(format!(
            "the {provider} reply reads as a {:?} entry, not the assistant's",
            entry.role
        ))),
        _ => Err(malformed(format!(
            "the {provider} reply reads as {count} entries, not one assistant entry"
        ))),
    }
}

/// A non-negative integer field, 0 when absent.
pub(crate) fn count(value: &Value, field: &str) -> u64 {
    value.get(field).and_then(Value::as_u64).unwrap_or(0)
}

/// Usage from an object holding `input` and `output` counters (`None` when
/// the object is absent).
pub(crate) fn usage(value: Option<&Value>, input: &[&str], output: &str) -> Option<Usage> {
    let value = value.filter(|value| value.is_object())?;
    Some(Usage {
        input_tokens: input.iter().map(|field| count(value, field)).sum(),
        output_tokens: count(value, output),
    })
}

/// The first fragment of tool call `index`: its id and name.
pub(crate) fn call_started(index: usize, id: Option<&str>, name: &str) -> StreamDelta {
    StreamDelta::ToolCall {
        index,
        id: id.map(str::to_string),
        name: Some(name.to_string()),
        arguments: String::new(),
    }
}

/// A further piece of tool call `index`'s arguments.
pub(crate) fn call_arguments(index: usize, arguments: &str) -> StreamDelta {
    StreamDelta::ToolCall {
        index,
        id: None,
        name: None,
        arguments: arguments.to_string(),
    }
}

/// A stream event's data as JSON.
pub(crate) fn event_json(provider: Provider, data: &str) -> Result<Value, ModelError> {
    serde_json::from_str(data).map_err(|err| {
        malformed(format!(
            "a {provider} stream event is not JSON ({err}): {data}"
        ))
    })
}

/// `value[field]` as a string, or a malformed error naming `what`.
pub(crate) fn str_field<'v>(
    value: &'v Value,
    field: &str,
    what: &str,
) -> Result<&'v str, ModelError> {
    value
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| malformed(format!("{what} has no string `{field}`: {value}")))
}

/// `value[field]` as an index, or a malformed error naming `what`.
pub(crate) fn index_field(value: &Value, field: &str, what: &str) -> Result<usize, ModelError> {
    value
        .get(field)
        .and_then(Value::as_u64)
        .and_then(|index| usize::try_from(index).ok())
        .ok_or_else(|| malformed(format!("{what} has no index `{field}`: {value}")))
}

/// Test helpers shared by the three formats' tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::time::Duration;

    use convlog::provider::rules;
    use convlog::{
        ConversationEntry, Provider, RenderOptions, RenderedRequest, Role, Timestamp, ToolStatus,
    };
    use serde_json::{json, Value};
    use uuid::Uuid;

    use super::super::wire::{Frame, StreamAssembler};
    use super::super::{
        ApiKind, ClientConfig, ModelError, ModelReply, ModelRequest, Reasoning, StreamDelta,
    };
    use crate::tools::ToolSpec;

    /// A config for `api` with nothing optional set.
    pub(crate) fn config(api: ApiKind, model: &str, base_url: &str) -> ClientConfig {
        ClientConfig {
            api,
            model: model.to_string(),
            base_url: base_url.to_string(),
            api_key: Some("sk-test".to_string()),
            headers: Vec::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_tokens: None,
            temperature: None,
            reasoning: None,
        }
    }

    /// `config` with a reasoning request.
    pub(crate) fn reasoning(mut config: ClientConfig, reasoning: Reasoning) -> ClientConfig {
        config.reasoning = Some(reasoning);
        config
    }

    /// Two tools, one schema carrying keywords some APIs reject.
    pub(crate) fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "get_weather".to_string(),
                description: "Current weather in a city".to_string(),
                parameters: json!({
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "City name"},
                        "unit": {"type": ["string", "null"], "enum": ["c", "f", null]},
                        "days": {"type": "array", "items": {"type": "integer", "minimum": 1, "exclusiveMaximum": 8}}
                    },
                    "required": ["city"],
                    "additionalProperties": false
                }),
            },
            ToolSpec {
                name: "get_time".to_string(),
                description: "Local time in a city".to_string(),
                parameters: json!({"type": "object", "properties": {"city": {"const": "Paris"}}}),
            },
        ]
    }

    /// System prompt and a user question.
    pub(crate) fn history() -> Vec<ConversationEntry> {
        vec![
            ConversationEntry::new("e1", 0, Role::System, Some("You are terse.".to_string())),
            ConversationEntry::new(
                "e1",
                1,
                Role::User,
                Some("Weather in Paris and Rome?".to_string()),
            ),
        ]
    }

    /// `history()` continued by `reply` (placed in evaluation e1) and a
    /// result for each of its calls.
    pub(crate) fn continued(reply: &ModelReply) -> Vec<ConversationEntry> {
        let mut entries = history();
        let mut assistant = reply.entry.clone();
        assistant.evaluation_id = "e1".to_string();
        assistant.sequence = 2;
        for call in &mut assistant.tool_calls {
            call.status = ToolStatus::Completed;
        }
        let calls = assistant.tool_calls.clone();
        entries.push(assistant);
        for (at, call) in calls.iter().enumerate() {
            let mut result =
                ConversationEntry::new("e1", 3 + at as u64, Role::Tool, Some("18C".to_string()));
            result.tool_call_id = Some(call.call_id.clone());
            result.tool_name = Some(call.name.clone());
            result.turn = 1;
            entries.push(result);
        }
        entries
    }

    /// A request over `entries` and `tools`.
    pub(crate) fn request<'a>(
        entries: &'a [ConversationEntry],
        tools: &'a [ToolSpec],
        render: &'a RenderOptions,
    ) -> ModelRequest<'a> {
        ModelRequest {
            entries,
            tools,
            render,
        }
    }

    /// Holds a built body's messages to convlog's rules for `provider` and
    /// its top-level fields to `allowed`.
    pub(crate) fn assert_valid_body(provider: Provider, body: &Value, allowed: &[&str]) {
        let object = body.as_object().expect("the body is an object");
        for key in object.keys() {
            assert!(
                allowed.contains(&key.as_str()),
                "{provider} body carries {key:?}, not a field of its API: {body}"
            );
        }
        let messages = object[provider.messages_field()]
            .as_array()
            .expect("messages")
            .clone();
        let system = provider
            .system_field()
            .and_then(|field| object.get(field).cloned());
        let rendered = RenderedRequest {
            provider,
            messages,
            system,
            unfinished_calls: Vec::new(),
            skipped_results: Vec::new(),
        };
        rules::check(provider, &rendered).unwrap_or_else(|err| panic!("{err}: {body}"));
    }

    /// `reply` with its random parts fixed: message id, time, and generated
    /// call ids (renamed `call#N` wherever they appear).
    pub(crate) fn normalise(reply: &ModelReply) -> ModelReply {
        let mut reply = reply.clone();
        reply.entry.message_id = Uuid::nil();
        reply.entry.created_at = Timestamp(0);
        let ids: Vec<String> = reply
            .entry
            .tool_calls
            .iter()
            .map(|call| call.call_id.clone())
            .filter(|id| id.starts_with("call_") && id.len() == 37)
            .collect();
        for (at, id) in ids.iter().enumerate() {
            let name = format!("call#{at}");
            for call in &mut reply.entry.tool_calls {
                if &call.call_id == id {
                    call.call_id = name.clone();
                }
            }
            for value in reply.entry.metadata.values_mut() {
                *value = value.replace(id.as_str(), &name);
            }
        }
        reply
    }

    /// An SSE frame whose data is `data` (its `type`, when it has one, as
    /// the event name).
    pub(crate) fn sse(data: &Value) -> Frame {
        Frame::Sse {
            event: data.get("type").and_then(Value::as_str).map(str::to_string),
            data: data.to_string(),
        }
    }

    /// Feeds `frames`; `ends_at` is the index of the frame that must end
    /// the stream (no frame before it may). Returns the deltas and the
    /// reply.
    pub(crate) fn run_stream(
        mut assembler: Box<dyn StreamAssembler>,
        frames: &[Frame],
        ends_at: Option<usize>,
    ) -> (Vec<StreamDelta>, Result<ModelReply, ModelError>) {
        let mut deltas = Vec::new();
        for (at, frame) in frames.iter().enumerate() {
            match assembler.push(frame, &mut deltas) {
                Ok(ended) => assert_eq!(ended, Some(at) == ends_at, "frame {at} {frame:?}"),
                Err(err) => return (deltas, Err(err)),
            }
        }
        (deltas, assembler.finish())
    }

    /// One streamed call merged: id, name, arguments.
    pub(crate) type MergedCall = (Option<String>, Option<String>, String);

    /// The deltas merged: all text, all reasoning, and per call (id, name,
    /// arguments).
    pub(crate) fn merged(deltas: &[StreamDelta]) -> (String, String, Vec<MergedCall>) {
        let (mut text, mut reasoning) = (String::new(), String::new());
        let mut calls: Vec<MergedCall> = Vec::new();
        for delta in deltas {
            match delta {
                StreamDelta::Text(piece) => text.push_str(piece),
                StreamDelta::Reasoning(piece) => reasoning.push_str(piece),
                StreamDelta::ToolCall {
                    index,
                    id,
                    name,
                    arguments,
                } => {
                    if *index == calls.len() {
                        calls.push((None, None, String::new()));
                    }
                    let call = &mut calls[*index];
                    if id.is_some() {
                        call.0 = id.clone();
                    }
                    if name.is_some() {
                        call.1 = name.clone();
                    }
                    call.2.push_str(arguments);
                }
            }
        }
        (text, reasoning, calls)
    }

    /// `text` cut into pieces at awkward places (every `size` chars, so
    /// multi-byte characters and JSON tokens are split across deltas).
    pub(crate) fn pieces(text: &str, size: usize) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars
            .chunks(size.max(1))
            .map(|chunk| chunk.iter().collect())
            .collect()
    }
}
