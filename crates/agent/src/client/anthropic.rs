//! The Anthropic Messages wire format (`POST {base}/v1/messages`).
//!
//! - Headers: `x-api-key` (none without a key) and `anthropic-version`
//!   ([`ANTHROPIC_VERSION`]).
//! - Body: the rendered `system` + `messages`, then `model`, `max_tokens`
//!   (the config's, or [`DEFAULT_MAX_TOKENS`]), `tools`
//!   (`[{name, description, input_schema}]`, left out when there are none),
//!   `stream` (only when streaming), `temperature`, and for
//!   [`Reasoning::Budget`] `thinking: {type: "enabled", budget_tokens}`.
//!   Thinking rules of the API, enforced here: the budget is at least
//!   [`MIN_THINKING_BUDGET`]; `max_tokens` must exceed it — when the config
//!   sets no `max_tokens`, the budget plus [`DEFAULT_MAX_TOKENS`] is sent
//!   (the answer keeps its default room); a configured `max_tokens` at or
//!   below the budget is a request error; a temperature other than 1 is
//!   refused with thinking. [`Reasoning::Effort`] is a request error
//!   (Messages takes a budget). Thinking cannot be switched on in the middle
//!   of a tool-use loop: when the request continues one whose assistant
//!   message holds no thinking block, `thinking` is left out of that request
//!   (see [`tool_loop_without_thinking`]).
//! - Reply: `content` blocks ingested by convlog's Anthropic mapper as one
//!   assistant message (thinking blocks keep their signatures,
//!   `redacted_thinking` its data, `tool_use` its id); `finish_reason` is
//!   normalised: `end_turn`/`stop_sequence` → `stop`, `tool_use` →
//!   `tool_calls`, `max_tokens`/`model_context_window_exceeded` → `length`,
//!   `refusal` → `content_filter`, anything else kept verbatim. Usage:
//!   input = `input_tokens` + cache creation + cache read tokens.
//! - Errors (`{"type": "error", "error": {"type", "message"}}`, whole or as
//!   a stream `error` event): [`ModelErrorKind::Status`] with status 0 (the
//!   driver puts in the HTTP status) and the provider's text verbatim (a
//!   stream event's data as sent).
//! - Stream: events `message_start`, `content_block_start` / `_delta` /
//!   `_stop`, `message_delta`, `message_stop` (ends it), `ping` (ignored),
//!   `error`. The blocks are rebuilt into the whole message and read by the
//!   same path as [`Wire::parse`], so both give the same entry.

use serde_json::{json, Map, Value};

use super::wire::{Frame, Framing, StreamAssembler, Wire};
#[allow(unused_imports)] // named in the docs
use super::ModelErrorKind;
use super::{ClientConfig, ModelError, ModelReply, ModelRequest, Reasoning, StreamDelta};
use convlog::Provider;

use super::wire_support as support;
use support::{
    call_arguments, call_started, event_json, index_field, ingest_one, malformed, provider_error,
    request_error, str_field,
};

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` when the config sets none (the API requires the field).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The smallest `thinking.budget_tokens` the API accepts.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// Anthropic Messages.
pub(crate) struct AnthropicWire;

impl Wire for AnthropicWire {
    fn url(&self, config: &ClientConfig, _stream: bool) -> String {
        format!("{}/v1/messages", config.base_url.trim_end_matches('/'))
    }

    fn headers(&self, config: &ClientConfig) -> Vec<(String, String)> {
        let mut headers = support::auth_header("x-api-key", config.api_key.clone());
        headers.push((
            "anthropic-version".to_string(),
            ANTHROPIC_VERSION.to_string(),
        ));
        headers
    }

    fn body(
        &self,
        config: &ClientConfig,
        request: &ModelRequest<'_>,
        stream: bool,
    ) -> Result<Value, ModelError> {
        let mut body = support::rendered_body(Provider::Anthropic, request)?;
        body.insert("model".into(), json!(config.model));
        let budget = match &config.reasoning {
            None => None,
            Some(Reasoning::Budget(budget)) => Some(*budget),
            Some(other) => {
                return Err(request_error(format!(
                    "Anthropic Messages takes a thinking budget in tokens, not {other:?}"
                )))
            }
        };
        body.insert("max_tokens".into(), json!(max_tokens(config, budget)?));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": tool.parameters,
                    })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if stream {
            body.insert("stream".into(), json!(true));
        }
        if let Some(temperature) = config.temperature {
            body.insert("temperature".into(), json!(temperature));
        }
        let loop_without_thinking = body
            .get("messages")
            .and_then(Value::as_array)
            .is_some_and(|messages| tool_loop_without_thinking(messages));
        if let Some(budget) = budget.filter(|_| !loop_without_thinking) {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
        Ok(Value::Object(body))
    }

    fn parse(&self, body: &Value) -> Result<ModelReply, ModelError> {
        if body.get("type").and_then(Value::as_str) == Some("error") {
            return Err(provider_error(body.to_string()));
        }
        let content = body
            .get("content")
            .filter(|content| content.is_array())
            .ok_or_else(|| malformed(format!("an Anthropic reply without `content`: {body}")))?;
        let message = json!([{"role": "assistant", "content": content}]);
        let mut entry = ingest_one(Provider::Anthropic, &message)?;
        entry.finish_reason = body
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(finish_reason);
        Ok(ModelReply {
            entry,
            usage: support::usage(
                body.get("usage"),
                &[
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                ],
                "output_tokens",
            ),
        })
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        Box::new(AnthropicAssembler::default())
    }
}

/// `max_tokens` to send, given the thinking budget (see the module docs).
fn max_tokens(config: &ClientConfig, budget: Option<u32>) -> Result<u32, ModelError> {
    let Some(budget) = budget else {
        return Ok(config.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS));
    };
    if budget < MIN_THINKING_BUDGET {
        return Err(request_error(format!(
            "an Anthropic thinking budget of {budget} tokens is below the API's minimum of {MIN_THINKING_BUDGET}"
        )));
    }
    if config
        .temperature
        .is_some_and(|temperature| temperature != 1.0)
    {
        return Err(request_error(
            "Anthropic thinking accepts no temperature other than 1",
        ));
    }
    match config.max_tokens {
        Some(max) if max <= budget => Err(request_error(format!(
            "Anthropic max_tokens ({max}) must exceed the thinking budget ({budget})"
        ))),
        Some(max) => Ok(max),
        None => Ok(budget.saturating_add(DEFAULT_MAX_TOKENS)),
    }
}

/// Whether `messages` continue a tool-use loop (they end with the user's
/// `tool_result`s) whose assistant message does not start with a thinking
/// block. With thinking enabled the API refuses that ("a final `assistant`
/// message must start with a thinking block"): thinking cannot be switched
/// on in the middle of an assistant turn, so it is left off for such a
/// request (a history whose calls came from another provider or model, or
/// rendered without reasoning).
fn tool_loop_without_thinking(messages: &[Value]) -> bool {
    let [.., assistant, user] = messages else {
        return false;
    };
    let first_type = |message: &Value| {
        message
            .get("content")
            .and_then(Value::as_array)
            .and_then(|blocks| blocks.first())
            .and_then(|block| block.get("type"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    assistant.get("role").and_then(Value::as_str) == Some("assistant")
        && first_type(user).as_deref() == Some("tool_result")
        && !matches!(
            first_type(assistant).as_deref(),
            Some("thinking" | "redacted_thinking")
        )
}

/// The neutral finish reason of an Anthropic `stop_reason`.
fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "refusal" => "content_filter",
        other => other,
    }
    .to_string()
}

/// One content block being streamed.
#[derive(Debug)]
struct Block {
    /// The block as `content_block_start` gave it, completed by the deltas
    /// (`tool_use` input is kept apart until the block stops).
    value: Map<String, Value>,
    /// `input_json_delta` pieces of a `tool_use` block.
    input_json: String,
    /// Position among the reply's tool calls (`tool_use` blocks).
    call_index: Option<usize>,
}

/// Assembles a streamed Messages reply.
#[derive(Debug, Default)]
struct AnthropicAssembler {
    started: bool,
    blocks: Vec<Block>,
    calls: usize,
    stop_reason: Option<Value>,
    usage: Map<String, Value>,
    stopped: bool,
}

impl AnthropicAssembler {
    fn block(&mut self, event: &Value, kind: &str) -> Result<&mut Block, ModelError> {
        let index = index_field(event, "index", kind)?;
        self.blocks
            .get_mut(index)
            .ok_or_else(|| malformed(format!("{kind} for a block never started: {event}")))
    }

    fn start_block(&mut self, event: &Value, out: &mut Vec<StreamDelta>) -> Result<(), ModelError> {
        let index = index_field(event, "index", "content_block_start")?;
        if index != self.blocks.len() {
            return Err(malformed(format!(
                "content_block_start with index {index} where block {} was expected",
                self.blocks.len()
            )));
        }
        let block = event
            .get("content_block")
            .filter(|block| block.is_object())
            .ok_or_else(|| {
                malformed(format!(
                    "content_block_start without a content_block: {event}"
                ))
            })?;
        let mut value = block.as_object().cloned().unwrap_or_default();
        let mut call_index = None;
        match value.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = value.get("text").and_then(Value::as_str).unwrap_or("");
                if !text.is_empty() {
                    out.push(StreamDelta::Text(text.to_string()));
                }
            }
            Some("thinking") => {
                let text = value.get("thinking").and_then(Value::as_str).unwrap_or("");
                if !text.is_empty() {
                    out.push(StreamDelta::Reasoning(text.to_string()));
                }
            }
            Some("tool_use") => {
                let id = str_field(block, "id", "a tool_use block")?;
                let name = str_field(block, "name", "a tool_use block")?;
                out.push(call_started(self.calls, Some(id), name));
                call_index = Some(self.calls);
                self.calls += 1;
                // The input comes as input_json_delta pieces.
                value.remove("input");
            }
            _ => {}
        }
        self.blocks.push(Block {
            value,
            input_json: String::new(),
            call_index,
        });
        Ok(())
    }

    fn delta(&mut self, event: &Value, out: &mut Vec<StreamDelta>) -> Result<(), ModelError> {
        let block = self.block(event, "content_block_delta")?;
        let delta = event.get("delta").cloned().unwrap_or(Value::Null);
        let piece = |field: &str| str_field(&delta, field, "a content_block_delta");
        let append = |block: &mut Block, field: &str, text: &str| {
            let mut joined = block
                .value
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            joined.push_str(text);
            block.value.insert(field.to_string(), json!(joined));
        };
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => {
                let text = piece("text")?;
                append(block, "text", text);
                out.push(StreamDelta::Text(text.to_string()));
            }
            Some("thinking_delta") => {
                let text = piece("thinking")?;
                append(block, "thinking", text);
                out.push(StreamDelta::Reasoning(text.to_string()));
            }
            Some("signature_delta") => append(block, "signature", piece("signature")?),
            Some("input_json_delta") => {
                let json = piece("partial_json")?;
                block.input_json.push_str(json);
                if let Some(index) = block.call_index {
                    if !json.is_empty() {
                        out.push(call_arguments(index, json));
                    }
                }
            }
            // Deltas this client does not use (citations, ...).
            _ => {}
        }
        Ok(())
    }

    fn stop_block(&mut self, event: &Value) -> Result<(), ModelError> {
        let block = self.block(event, "content_block_stop")?;
        if block.call_index.is_some() {
            let input = if block.input_json.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&block.input_json).map_err(|err| {
                    malformed(format!(
                        "a streamed tool_use input is not JSON ({err}): {}",
                        block.input_json
                    ))
                })?
            };
            block.value.insert("input".into(), input);
        }
        Ok(())
    }

    fn message_delta(&mut self, event: &Value) {
        if let Some(stop_reason) = event.pointer("/delta/stop_reason") {
            self.stop_reason = Some(stop_reason.clone());
        }
        if let Some(Value::Object(usage)) = event.get("usage") {
            for (key, value) in usage {
                if !value.is_null() {
                    self.usage.insert(key.clone(), value.clone());
                }
            }
        }
    }
}

impl StreamAssembler for AnthropicAssembler {
    fn push(&mut self, frame: &Frame, out: &mut Vec<StreamDelta>) -> Result<bool, ModelError> {
        let Frame::Sse { data, .. } = frame else {
            return Err(malformed("an Anthropic stream carries SSE events only"));
        };
        if data.trim().is_empty() {
            return Ok(false);
        }
        let event = event_json(Provider::Anthropic, data)?;
        // The data's own `type` names the event (the same as `event:`).
        let kind = str_field(&event, "type", "an Anthropic stream event")?;
        if kind != "message_start" && kind != "ping" && kind != "error" && !self.started {
            return Err(malformed(format!("{kind} before message_start")));
        }
        match kind {
            "message_start" => {
                self.started = true;
                if let Some(Value::Object(usage)) = event.pointer("/message/usage") {
                    self.usage = usage.clone();
                }
            }
            "content_block_start" => self.start_block(&event, out)?,
            "content_block_delta" => self.delta(&event, out)?,
            "content_block_stop" => self.stop_block(&event)?,
            "message_delta" => self.message_delta(&event),
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => return Err(provider_error(data.clone())),
            // `ping` and events this client does not use.
            _ => {}
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ModelReply, ModelError> {
        if !self.stopped {
            return Err(malformed("the Anthropic stream ended before message_stop"));
        }
        let content: Vec<Value> = self
            .blocks
            .into_iter()
            .map(|block| Value::Object(block.value))
            .collect();
        let mut message = Map::new();
        message.insert("type".into(), json!("message"));
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), Value::Array(content));
        message.insert(
            "stop_reason".into(),
            self.stop_reason.unwrap_or(Value::Null),
        );
        message.insert("usage".into(), Value::Object(self.usage));
        AnthropicWire.parse(&Value::Object(message))
    }
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
