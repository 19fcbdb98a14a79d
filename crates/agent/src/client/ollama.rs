//! Ollama's native `/api/chat` wire format (NDJSON streaming).
//!
//! Request: `POST {base}/api/chat` (`Authorization: Bearer` only when a key
//! is set, for a proxied or hosted Ollama) with convlog's Ollama rendering
//! plus `model`, `tools` (OpenAI's function shape), `stream` (always sent:
//! Ollama streams by default), `options` (`temperature`, `num_predict`)
//! and `think` when reasoning is requested (`true` for a budget, the effort
//! for `low`/`medium`/`high`, `true` for another effort).
//!
//! Answer: `message` (`content`, `thinking`, `tool_calls` with object
//! arguments and no ids: convlog's mapper gives each a fresh id),
//! `done_reason`, `prompt_eval_count`/`eval_count`. A stream is one JSON
//! object per line, each with a piece of `message` (a tool call arrives
//! whole), the last with `"done": true`.

use serde_json::{json, Map, Value};

use convlog::provider::arguments_string;
use convlog::Provider;

use super::openai::function_tools;
use super::reply::{
    assistant_reply, frame_json, malformed, provider_error, request_error, usage_from,
};
use super::wire::{Frame, Framing, StreamAssembler, Wire};
use super::{ClientConfig, ModelError, ModelReply, ModelRequest, Reasoning, StreamDelta};

/// Ollama's native /api/chat (NDJSON streaming).
pub(crate) struct OllamaWire;

impl Wire for OllamaWire {
    fn url(&self, config: &ClientConfig, _stream: bool) -> String {
        format!("{}/api/chat", config.base_url.trim_end_matches('/'))
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
        let rendered = convlog::render(Provider::Ollama, request.entries, request.render)
            .map_err(|error| request_error(format!("the history cannot be rendered: {error}")))?;
        let mut body = Map::new();
        body.insert("model".into(), json!(config.model));
        body.insert("messages".into(), Value::Array(rendered.messages));
        if !request.tools.is_empty() {
            body.insert("tools".into(), function_tools(request.tools));
        }
        body.insert("stream".into(), json!(stream));
        let mut options = Map::new();
        if let Some(temperature) = config.temperature {
            options.insert("temperature".into(), json!(temperature));
        }
        if let Some(max_tokens) = config.max_tokens {
            options.insert("num_predict".into(), json!(max_tokens));
        }
        if !options.is_empty() {
            body.insert("options".into(), Value::Object(options));
        }
        match &config.reasoning {
            None => {}
            Some(Reasoning::Effort(effort))
                if matches!(effort.as_str(), "low" | "medium" | "high") =>
            {
                body.insert("think".into(), json!(effort));
            }
            Some(_) => {
                body.insert("think".into(), json!(true));
            }
        }
        Ok(Value::Object(body))
    }

    fn parse(&self, body: &Value) -> Result<ModelReply, ModelError> {
        if body.get("error").is_some_and(|error| !error.is_null()) {
            return Err(provider_error(body.to_string()));
        }
        let message = body
            .get("message")
            .filter(|message| message.is_object())
            .ok_or_else(|| malformed("the answer has no message object"))?;
        reply(message.clone(), body)
    }

    fn framing(&self) -> Framing {
        Framing::Ndjson
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        Box::<OllamaAssembler>::default()
    }
}

/// The reply for `message`, with the finish reason and counts of `last`
/// (the whole answer, or the stream's `done` line).
fn reply(mut message: Value, last: &Value) -> Result<ModelReply, ModelError> {
    if let Some(object) = message.as_object_mut() {
        if object.get("thinking") == Some(&json!("")) {
            object.remove("thinking");
        }
        object
            .entry("role")
            .or_insert_with(|| Value::String("assistant".into()));
    }
    let finish_reason = last
        .get("done_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    let usage = usage_from(Some(last), "prompt_eval_count", "eval_count");
    assistant_reply(Provider::Ollama, message, finish_reason, usage)
}

/// Assembles an `/api/chat` stream.
#[derive(Debug, Default)]
struct OllamaAssembler {
    content: String,
    thinking: String,
    calls: Vec<Value>,
    /// The `done` line.
    last: Option<Value>,
}

impl StreamAssembler for OllamaAssembler {
    fn push(&mut self, frame: &Frame, out: &mut Vec<StreamDelta>) -> Result<bool, ModelError> {
        let Frame::Line(line) = frame else {
            return Err(malformed("an Ollama stream is made of JSON lines"));
        };
        let chunk = frame_json(line, "a stream line")?;
        if chunk.get("error").is_some_and(|error| !error.is_null()) {
            return Err(provider_error(line.clone()));
        }
        if let Some(message) = chunk.get("message") {
            if let Some(piece) = message.get("thinking").and_then(Value::as_str) {
                if !piece.is_empty() {
                    self.thinking.push_str(piece);
                    out.push(StreamDelta::Reasoning(piece.to_string()));
                }
            }
            if let Some(piece) = message.get("content").and_then(Value::as_str) {
                if !piece.is_empty() {
                    self.content.push_str(piece);
                    out.push(StreamDelta::Text(piece.to_string()));
                }
            }
            match message.get("tool_calls") {
                None | Some(Value::Null) => {}
                Some(Value::Array(calls)) => {
                    for call in calls {
                        let function = call.get("function");
                        let name = function
                            .and_then(|function| function.get("name"))
                            .and_then(Value::as_str)
                            .ok_or_else(|| {
                                malformed("a streamed tool call has no function.name")
                            })?;
                        let arguments =
                            match function.and_then(|function| function.get("arguments")) {
                                None | Some(Value::Null) => String::new(),
                                Some(Value::String(text)) => text.clone(),
                                Some(other) => arguments_string(other),
                            };
                        out.push(StreamDelta::ToolCall {
                            index: self.calls.len(),
                            id: call.get("id").and_then(Value::as_str).map(str::to_string),
                            name: Some(name.to_string()),
                            arguments,
                        });
                        self.calls.push(call.clone());
                    }
                }
                Some(_) => return Err(malformed("a stream line's tool_calls is not an array")),
            }
        }
        if chunk.get("done").and_then(Value::as_bool) == Some(true) {
            self.last = Some(chunk);
            return Ok(true);
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ModelReply, ModelError> {
        let last = self
            .last
            .ok_or_else(|| malformed("the stream ended before its \"done\": true line"))?;
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), json!(self.content));
        if !self.thinking.is_empty() {
            message.insert("thinking".into(), json!(self.thinking));
        }
        if !self.calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(self.calls));
        }
        reply(Value::Object(message), &last)
    }
}
