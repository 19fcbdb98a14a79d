//! The OpenAI Chat Completions wire format, strict (OpenAI itself) and
//! OpenAI-compatible (vLLM, GLM, DeepSeek, Ollama's `/v1`, ...) with its
//! [`Dialect`].
//!
//! Request: `POST {base}/chat/completions` with `Authorization: Bearer`
//! when a key is set; the body is convlog's OpenAI Chat rendering plus
//! `model`, `tools`, `stream` (and `stream_options.include_usage`),
//! `temperature`, the output limit (`max_completion_tokens` for OpenAI,
//! `max_tokens` for compatible servers), `reasoning_effort` for
//! [`Reasoning::Effort`] (a token budget has no Chat Completions field and
//! is not sent), and a compatible dialect's `extra_body` merged on top.
//! The strict body never carries `reasoning_content` (OpenAI rejects it);
//! a dialect with `reasoning_content` sends reasoning back in it.
//!
//! Answer: `choices[0].message` read by convlog's OpenAI Chat mapper, its
//! `finish_reason` and `usage`. A stream (SSE) carries `choices[0].delta`
//! pieces (`content`, `reasoning_content` or `reasoning`, `tool_calls`
//! fragments by `index`), a `finish_reason`, a usage chunk, and ends at
//! `data: [DONE]`; it is assembled into the message a whole answer would
//! have held and read the same way.

use serde_json::{json, Map, Value};

use convlog::Provider;

use super::reply::{
    assistant_reply, frame_json, malformed, provider_error, request_error, usage_from,
};
use super::wire::{Frame, Framing, StreamAssembler, Wire};
use super::{
    ApiKind, ClientConfig, Dialect, ModelError, ModelReply, ModelRequest, Reasoning, StreamDelta,
    Usage,
};
use crate::tools::ToolSpec;

/// OpenAI Chat Completions (strict) and OpenAI-compatible endpoints (with their dialect).
pub(crate) struct OpenAiChatWire;

/// The `tools` field of OpenAI Chat (and Ollama, which takes the same shape).
pub(crate) fn function_tools(tools: &[ToolSpec]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                }})
            })
            .collect(),
    )
}

fn dialect(config: &ClientConfig) -> Option<&Dialect> {
    match &config.api {
        ApiKind::OpenAiCompatible(dialect) => Some(dialect),
        _ => None,
    }
}

impl Wire for OpenAiChatWire {
    fn url(&self, config: &ClientConfig, _stream: bool) -> String {
        format!("{}/chat/completions", config.base_url.trim_end_matches('/'))
    }

    fn headers(&self, config: &ClientConfig) -> Vec<(String, String)> {
        super::wire_support::bearer_header(config)
    }

    fn body(
        &self,
        config: &ClientConfig,
        request: &ModelRequest<'_>,
        stream: bool,
    ) -> Result<Value, ModelError> {
        let dialect = dialect(config);
        let reasoning_content = dialect.is_some_and(|dialect| dialect.reasoning_content);
        let options = request
            .render
            .clone()
            .openai_reasoning_content(reasoning_content);
        let rendered = convlog::render(Provider::OpenAiChat, request.entries, &options)
            .map_err(|error| request_error(format!("the history cannot be rendered: {error}")))?;
        let mut messages = rendered.messages;
        if !reasoning_content {
            // OpenAI rejects the field: never send it, whatever the renderer did.
            for message in &mut messages {
                if let Some(message) = message.as_object_mut() {
                    message.remove("reasoning_content");
                }
            }
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(config.model));
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            body.insert("tools".into(), function_tools(request.tools));
        }
        body.insert("stream".into(), json!(stream));
        if stream {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        if let Some(temperature) = config.temperature {
            body.insert("temperature".into(), json!(temperature));
        }
        if let Some(max_tokens) = config.max_tokens {
            let field = if dialect.is_some() {
                "max_tokens"
            } else {
                "max_completion_tokens"
            };
            body.insert(field.into(), json!(max_tokens));
        }
        if let Some(Reasoning::Effort(effort)) = &config.reasoning {
            body.insert("reasoning_effort".into(), json!(effort));
        }
        if let Some(dialect) = dialect {
            for (key, value) in &dialect.extra_body {
                body.insert(key.clone(), value.clone());
            }
        }
        Ok(Value::Object(body))
    }

    fn parse(&self, body: &Value) -> Result<ModelReply, ModelError> {
        if body.get("error").is_some_and(|error| !error.is_null()) {
            return Err(provider_error(body.to_string()));
        }
        let choice = body
            .get("choices")
            .and_then(|choices| choices.get(0))
            .ok_or_else(|| malformed("the answer has no choices[0]"))?;
        let message = choice
            .get("message")
            .filter(|message| message.is_object())
            .ok_or_else(|| malformed("choices[0] has no message object"))?;
        let finish_reason = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        let usage = usage_from(body.get("usage"), "prompt_tokens", "completion_tokens");
        assistant_reply(
            Provider::OpenAiChat,
            normalize(message.clone()),
            finish_reason,
            usage,
        )
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        Box::<ChatAssembler>::default()
    }
}

/// What compatible servers vary, made uniform before the mapper reads a
/// message (whole or assembled alike): reasoning under `reasoning` becomes
/// `reasoning_content`, empty reasoning is dropped, empty text beside tool
/// calls is `null`, a missing role is `assistant`.
fn normalize(mut message: Value) -> Value {
    let Some(object) = message.as_object_mut() else {
        return message;
    };
    let reasoning = object.remove("reasoning");
    if object.get("reasoning_content").is_none_or(Value::is_null) {
        if let Some(Value::String(text)) = reasoning {
            object.insert("reasoning_content".into(), Value::String(text));
        }
    }
    if object.get("reasoning_content") == Some(&json!("")) {
        object.remove("reasoning_content");
    }
    let has_calls = object
        .get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|calls| !calls.is_empty());
    if has_calls && object.get("content") == Some(&json!("")) {
        object.insert("content".into(), Value::Null);
    }
    object
        .entry("role")
        .or_insert_with(|| Value::String("assistant".into()));
    message
}

/// One streamed tool call, as its fragments arrived.
#[derive(Debug, Default)]
struct CallParts {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Assembles a Chat Completions stream.
#[derive(Debug, Default)]
struct ChatAssembler {
    content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    calls: Vec<CallParts>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl ChatAssembler {
    fn tool_call(
        &mut self,
        fragment: &Value,
        out: &mut Vec<StreamDelta>,
    ) -> Result<(), ModelError> {
        let id = fragment.get("id").and_then(Value::as_str);
        let index = match fragment.get("index").and_then(Value::as_u64) {
            Some(index) => usize::try_from(index)
                .map_err(|_| malformed(format!("tool call index {index} is out of range")))?,
            // No index: a new call when the id is new, else the last one.
            None => match id {
                Some(id) if !self.calls.iter().any(|call| call.id.as_deref() == Some(id)) => {
                    self.calls.len()
                }
                _ => self.calls.len().saturating_sub(1),
            },
        };
        if index > self.calls.len() + MAX_TOOL_CALL_INDEX_GAP {
            return Err(malformed(format!(
                "tool call index {index} skips past the {} calls seen",
                self.calls.len()
            )));
        }
        if index >= self.calls.len() {
            self.calls.resize_with(index + 1, CallParts::default);
        }
        let call = &mut self.calls[index];
        if let Some(id) = id.filter(|id| !id.is_empty()) {
            call.id = Some(id.to_string());
        }
        let function = fragment.get("function");
        let name = function
            .and_then(|function| function.get("name"))
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty());
        if let Some(name) = name {
            // Some servers repeat the whole name in every fragment.
            if call.name != name {
                call.name.push_str(name);
            }
        }
        let arguments = function
            .and_then(|function| function.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        call.arguments.push_str(arguments);
        if id.is_some() || name.is_some() || !arguments.is_empty() {
            out.push(StreamDelta::ToolCall {
                index,
                id: id.map(str::to_string),
                name: name.map(str::to_string),
                arguments: arguments.to_string(),
            });
        }
        Ok(())
    }
}

/// How far ahead of the calls seen a streamed `index` may jump (servers
/// number calls from 0, one after another).
const MAX_TOOL_CALL_INDEX_GAP: usize = 64;

/// Appends `piece` to `field` when it is a string; returns it.
fn append<'v>(field: &mut Option<String>, piece: Option<&'v Value>) -> Option<&'v str> {
    let piece = piece.and_then(Value::as_str)?;
    field.get_or_insert_with(String::new).push_str(piece);
    Some(piece)
}

impl StreamAssembler for ChatAssembler {
    fn push(&mut self, frame: &Frame, out: &mut Vec<StreamDelta>) -> Result<bool, ModelError> {
        let Frame::Sse { data, .. } = frame else {
            return Err(malformed("an OpenAI Chat stream is made of SSE events"));
        };
        if data.trim() == "[DONE]" {
            return Ok(true);
        }
        let chunk = frame_json(data, "a stream chunk")?;
        if chunk.get("error").is_some_and(|error| !error.is_null()) {
            return Err(provider_error(data.clone()));
        }
        if let Some(usage) = usage_from(chunk.get("usage"), "prompt_tokens", "completion_tokens") {
            self.usage = Some(usage);
        }
        let choices = chunk.get("choices").and_then(Value::as_array);
        let Some(choice) = choices.and_then(|choices| {
            choices
                .iter()
                .find(|choice| choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        }) else {
            return Ok(false);
        };
        if let Some(delta) = choice.get("delta") {
            let reasoning = delta
                .get("reasoning_content")
                .filter(|value| value.is_string())
                .or_else(|| delta.get("reasoning"));
            if let Some(piece) = append(&mut self.reasoning, reasoning) {
                if !piece.is_empty() {
                    out.push(StreamDelta::Reasoning(piece.to_string()));
                }
            }
            if let Some(piece) = append(&mut self.content, delta.get("content")) {
                if !piece.is_empty() {
                    out.push(StreamDelta::Text(piece.to_string()));
                }
            }
            append(&mut self.refusal, delta.get("refusal"));
            match delta.get("tool_calls") {
                None | Some(Value::Null) => {}
                Some(Value::Array(fragments)) => {
                    for fragment in fragments {
                        self.tool_call(fragment, out)?;
                    }
                }
                Some(_) => return Err(malformed("a delta's tool_calls is not an array")),
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ModelReply, ModelError> {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), json!(self.content));
        if let Some(reasoning) = self.reasoning {
            message.insert("reasoning_content".into(), json!(reasoning));
        }
        if let Some(refusal) = self.refusal {
            message.insert("refusal".into(), json!(refusal));
        }
        if !self.calls.is_empty() {
            let mut calls = Vec::new();
            for (index, call) in self.calls.into_iter().enumerate() {
                let id = call
                    .id
                    .ok_or_else(|| malformed(format!("streamed tool call {index} has no id")))?;
                if call.name.is_empty() {
                    return Err(malformed(format!("streamed tool call {index} has no name")));
                }
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }));
            }
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        assistant_reply(
            Provider::OpenAiChat,
            normalize(Value::Object(message)),
            self.finish_reason,
            self.usage,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(data: Value) -> Frame {
        Frame::Sse {
            event: None,
            data: data.to_string(),
        }
    }

    fn delta(delta: Value) -> Frame {
        sse(json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]}))
    }

    fn assemble(frames: &[Frame]) -> (Result<ModelReply, ModelError>, Vec<StreamDelta>) {
        let mut assembler = OpenAiChatWire.assembler();
        let mut out = Vec::new();
        for frame in frames {
            assembler.push(frame, &mut out).unwrap();
        }
        (assembler.finish(), out)
    }

    #[test]
    fn fragments_without_index_and_repeated_names() {
        let (reply, deltas) = assemble(&[
            delta(
                json!({"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{\"a\""}}]}),
            ),
            delta(json!({"tool_calls": [{"function": {"name": "f", "arguments": ":1}"}}]})),
            delta(
                json!({"tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": "{}"}}]}),
            ),
        ]);
        let entry = reply.unwrap().entry;
        let calls: Vec<(&str, &str, &str)> = entry
            .tool_calls
            .iter()
            .map(|call| {
                (
                    call.call_id.as_str(),
                    call.name.as_str(),
                    call.arguments.as_str(),
                )
            })
            .collect();
        assert_eq!(calls, [("c1", "f", "{\"a\":1}"), ("c2", "g", "{}")]);
        assert_eq!(deltas.len(), 3);
        assert!(matches!(
            &deltas[1],
            StreamDelta::ToolCall {
                index: 0,
                id: None,
                ..
            }
        ));
        assert!(matches!(&deltas[2], StreamDelta::ToolCall { index: 1, .. }));
    }

    #[test]
    fn a_call_without_an_id_or_a_wild_index_is_malformed() {
        let (reply, _) = assemble(&[delta(
            json!({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}),
        )]);
        let error = reply.unwrap_err();
        assert!(
            error.to_string().contains("tool call 0 has no id"),
            "{error}"
        );
        let mut assembler = OpenAiChatWire.assembler();
        let error = assembler
            .push(
                &delta(json!({"tool_calls": [{"index": 100000, "id": "x"}]})),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert!(error.to_string().contains("index 100000"), "{error}");
    }

    #[test]
    fn whole_answers_from_compatible_servers() {
        let body = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "content": "",
            "reasoning": "because",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }}]});
        let entry = OpenAiChatWire.parse(&body).unwrap().entry;
        assert_eq!(entry.content, None, "empty text beside calls is no text");
        assert_eq!(
            entry
                .reasoning
                .and_then(|reasoning| reasoning.text)
                .as_deref(),
            Some("because")
        );
        assert_eq!(entry.finish_reason.as_deref(), Some("tool_calls"));
        let error = OpenAiChatWire
            .parse(&json!({"choices": [{"message": "hi"}]}))
            .unwrap_err();
        assert!(error.to_string().contains("no message object"), "{error}");
    }

    #[test]
    fn ndjson_frames_are_refused() {
        let mut assembler = OpenAiChatWire.assembler();
        let error = assembler
            .push(&Frame::Line("{}".into()), &mut Vec::new())
            .unwrap_err();
        assert!(error.to_string().contains("SSE"), "{error}");
    }
}
