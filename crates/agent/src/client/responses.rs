//! The OpenAI Responses wire format (`POST {base}/responses`).
//!
//! - Headers: `Authorization: Bearer KEY` (none without a key).
//! - Body: the rendered `input` items (the system prompt stays the
//!   `system`/`developer` message item the mapper renders, not
//!   `instructions`), `model`, `tools` (`[{type: "function", name,
//!   description, parameters, strict: false}]` — `strict` is required by
//!   OpenAI's request types and defaults to true, which would refuse the
//!   ordinary JSON Schemas host and MCP tools have), `stream` (only when
//!   streaming), `store: false` (the conversation lives in convlog),
//!   `max_output_tokens`, `temperature`, and for [`Reasoning::Effort`]
//!   `reasoning: {effort, summary: "auto"}` with `include:
//!   ["reasoning.encrypted_content"]`, so reasoning items come back with the
//!   encrypted content the mapper sends back (stateless, `store: false`).
//!   [`Reasoning::Budget`] is a request error (Responses takes an effort).
//!   Under `store: false` a reasoning item without `encrypted_content` (a
//!   reply from a reasoning model called without an effort) cannot be sent
//!   back: it is left out and the ids of its run's other items dropped (see
//!   [`stateless_input`]).
//! - Reply: the `output` items ingested by convlog's Responses mapper as one
//!   assistant entry (reasoning items with id, summary and
//!   `encrypted_content`, messages with their item ids, function calls with
//!   `call_id` and item id). Before that, a reasoning item's raw `content`
//!   (`reasoning_text`, which the mapper does not take and the API does not
//!   need back) is dropped, and a `refusal` content part is read as text.
//!   `finish_reason`: `completed` → `stop` (`tool_calls` when the reply
//!   calls tools, `content_filter` for a refusal); `incomplete` → its
//!   `incomplete_details.reason` (`max_output_tokens` → `length`,
//!   `content_filter` kept, others verbatim) — an incomplete response is a
//!   reply, as a truncated answer is for the other formats, not an error.
//! - Errors: `status: "failed"` (its `error`), a top-level `error` body, and
//!   the stream's `response.failed` and `error` events are
//!   [`ModelErrorKind::Status`] with status 0 (the driver puts in the HTTP
//!   status) and the provider's text verbatim (a stream event's data as
//!   sent).
//! - Stream: text, refusal, reasoning summary and reasoning text deltas and
//!   function-call fragments are handed on as they arrive;
//!   `response.completed` / `response.incomplete` end it and carry the whole
//!   response, from which the reply is built (the same path as
//!   [`Wire::parse`]), after checking that it agrees with the deltas seen
//!   (its items from `response.output_item.done` when the terminal event's
//!   `output` is empty).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::wire::{Frame, Framing, StreamAssembler, Wire};
use super::wire_support::{
    self as support, call_arguments, call_started, event_json, index_field, ingest_one, malformed,
    provider_error, request_error, str_field,
};
#[allow(unused_imports)] // named in the docs
use super::ModelErrorKind;
use super::{ClientConfig, ModelError, ModelReply, ModelRequest, Reasoning, StreamDelta};
use convlog::Provider;

/// The `include` entry that asks for reasoning items' encrypted content.
pub const INCLUDE_ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// Separator the mapper puts between reasoning summary parts; the stream
/// hands it on between two parts so the streamed reasoning reads as the
/// recorded one.
const SUMMARY_SEPARATOR: &str = "\n\n";

/// OpenAI Responses.
pub(crate) struct ResponsesWire;

impl Wire for ResponsesWire {
    fn url(&self, config: &ClientConfig, _stream: bool) -> String {
        format!("{}/responses", config.base_url.trim_end_matches('/'))
    }

    fn headers(&self, config: &ClientConfig) -> Vec<(String, String)> {
        support::bearer_header(config)
    }

    fn body(
        &self,
        config: &ClientConfig,
        request: &ModelRequest<'_>,
        stream: bool,
    ) -> Result<Value, ModelError> {
        let mut body = support::rendered_body(Provider::OpenAiResponses, request)?;
        if let Some(Value::Array(input)) = body.get_mut("input") {
            stateless_input(input);
        }
        body.insert("model".into(), json!(config.model));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "type": "function",
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                        "strict": false,
                    })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if stream {
            body.insert("stream".into(), json!(true));
        }
        body.insert("store".into(), json!(false));
        match &config.reasoning {
            None => {}
            Some(Reasoning::Effort(effort)) => {
                body.insert(
                    "reasoning".into(),
                    json!({"effort": effort, "summary": "auto"}),
                );
                body.insert("include".into(), json!([INCLUDE_ENCRYPTED_REASONING]));
            }
            Some(other) => {
                return Err(request_error(format!(
                    "OpenAI Responses takes a reasoning effort, not {other:?}"
                )))
            }
        }
        if let Some(max_tokens) = config.max_tokens {
            body.insert("max_output_tokens".into(), json!(max_tokens));
        }
        if let Some(temperature) = config.temperature {
            body.insert("temperature".into(), json!(temperature));
        }
        Ok(Value::Object(body))
    }

    fn parse(&self, body: &Value) -> Result<ModelReply, ModelError> {
        let status = body.get("status").and_then(Value::as_str);
        if status == Some("failed") || (status.is_none() && body.get("error").is_some()) {
            return Err(provider_error(body.to_string()));
        }
        if !matches!(status, Some("completed" | "incomplete")) {
            return Err(malformed(format!(
                "a Responses reply with status {}, neither completed nor incomplete: {body}",
                body.get("status").unwrap_or(&Value::Null)
            )));
        }
        let Some(Value::Array(output)) = body.get("output") else {
            return Err(malformed(format!(
                "a Responses reply without `output`: {body}"
            )));
        };
        let mut refused = false;
        let items: Vec<Value> = output
            .iter()
            .map(|item| mapper_item(item, &mut refused))
            .collect();
        let mut entry = ingest_one(Provider::OpenAiResponses, &Value::Array(items))?;
        entry.finish_reason = Some(match status {
            Some("incomplete") => match body
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
            {
                Some("max_output_tokens") | None => "length".to_string(),
                Some(other) => other.to_string(),
            },
            _ if refused => "content_filter".to_string(),
            _ if !entry.tool_calls.is_empty() => "tool_calls".to_string(),
            _ => "stop".to_string(),
        });
        Ok(ModelReply {
            entry,
            usage: support::usage(body.get("usage"), &["input_tokens"], "output_tokens"),
        })
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        Box::new(ResponsesAssembler::default())
    }
}

/// Makes `input` valid under `store: false`, where the API looks up by id
/// any item it cannot read by itself and answers 404 ("Items are not
/// persisted when `store` is set to false"): a reasoning item without
/// `encrypted_content` (recorded from a reply that did not ask for it — a
/// reasoning model reasons even when no effort is set) is left out, and the
/// other items of its assistant run lose their ids, which would otherwise
/// name the missing reasoning item as their required predecessor: a
/// function call just drops `id`, a message becomes the plain
/// `{"role": "assistant", "content": text}` the mapper writes for a message
/// without an id.
fn stateless_input(input: &mut Vec<Value>) {
    let is_kind = |item: &Value, kind: &str| item.get("type").and_then(Value::as_str) == Some(kind);
    let assistant_side = |item: &Value| {
        is_kind(item, "reasoning")
            || is_kind(item, "function_call")
            || item.get("role").and_then(Value::as_str) == Some("assistant")
    };
    let mut at = 0;
    while at < input.len() {
        let end = at
            + input[at..]
                .iter()
                .position(|item| !assistant_side(item))
                .unwrap_or(input.len() - at);
        if end == at {
            at += 1;
            continue;
        }
        let unreadable = |item: &Value| {
            is_kind(item, "reasoning")
                && item
                    .get("encrypted_content")
                    .is_none_or(|content| !content.is_string())
        };
        let dropped = input[at..end]
            .iter()
            .filter(|item| unreadable(item))
            .count();
        if dropped > 0 {
            let run: Vec<Value> = input
                .drain(at..end)
                .filter(|item| !unreadable(item))
                .map(anonymous)
                .collect();
            let kept = run.len();
            input.splice(at..at, run);
            at += kept;
        } else {
            at = end;
        }
    }
}

/// An assistant-side item without its id (see [`stateless_input`]); a
/// reasoning item (one with encrypted content, the others are gone) keeps
/// its id, which the API needs with it.
fn anonymous(mut item: Value) -> Value {
    let kind = item.get("type").and_then(Value::as_str);
    if kind == Some("reasoning") {
        return item;
    }
    if kind == Some("message") {
        let text: String = item
            .get("content")
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        return json!({"role": "assistant", "content": text});
    }
    if let Value::Object(object) = &mut item {
        object.remove("id");
    }
    item
}

/// An output item as the mapper reads it: a reasoning item without its raw
/// `content`, a message's `refusal` parts as `output_text` (noting it in
/// `refused`).
fn mapper_item(item: &Value, refused: &mut bool) -> Value {
    let mut item = item.clone();
    match item.get("type").and_then(Value::as_str) {
        Some("reasoning") => {
            if let Value::Object(object) = &mut item {
                object.remove("content");
            }
        }
        Some("message") => {
            if let Some(Value::Array(parts)) = item.get_mut("content") {
                for part in parts {
                    if part.get("type").and_then(Value::as_str) == Some("refusal") {
                        *refused = true;
                        let text = part.get("refusal").cloned().unwrap_or(json!(""));
                        *part = json!({"type": "output_text", "text": text});
                    }
                }
            }
        }
        _ => {}
    }
    item
}

/// Assembles a streamed Responses reply.
#[derive(Debug, Default)]
struct ResponsesAssembler {
    /// Tool call index of each function-call output index.
    calls: BTreeMap<usize, usize>,
    /// Answer text (and refusal) deltas per output index.
    texts: BTreeMap<usize, String>,
    /// Argument deltas per output index.
    arguments: BTreeMap<usize, String>,
    /// Items from `response.output_item.done`, per output index.
    done: BTreeMap<usize, Value>,
    /// The last reasoning summary part seen (output index, summary index).
    summary_part: Option<(usize, u64)>,
    /// The response of the terminal event.
    response: Option<Value>,
}

impl ResponsesAssembler {
    fn item_added(&mut self, event: &Value, out: &mut Vec<StreamDelta>) -> Result<(), ModelError> {
        let index = index_field(event, "output_index", "response.output_item.added")?;
        let item = event.get("item").unwrap_or(&Value::Null);
        if item.get("type").and_then(Value::as_str) == Some("function_call") {
            let call = self.calls.len();
            self.calls.insert(index, call);
            let name = str_field(item, "name", "a function_call item")?;
            out.push(call_started(
                call,
                item.get("call_id").and_then(Value::as_str),
                name,
            ));
            let arguments = item.get("arguments").and_then(Value::as_str).unwrap_or("");
            if !arguments.is_empty() {
                self.arguments.entry(index).or_default().push_str(arguments);
                out.push(call_arguments(call, arguments));
            }
        }
        Ok(())
    }

    fn text_delta(&mut self, event: &Value, out: &mut Vec<StreamDelta>) -> Result<(), ModelError> {
        let index = index_field(event, "output_index", "a text delta")?;
        let delta = str_field(event, "delta", "a text delta")?;
        self.texts.entry(index).or_default().push_str(delta);
        out.push(StreamDelta::Text(delta.to_string()));
        Ok(())
    }

    fn summary_delta(
        &mut self,
        event: &Value,
        out: &mut Vec<StreamDelta>,
    ) -> Result<(), ModelError> {
        let index = index_field(event, "output_index", "a reasoning summary delta")?;
        let part = event
            .get("summary_index")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let delta = str_field(event, "delta", "a reasoning summary delta")?;
        match self.summary_part {
            Some((last_index, last_part)) if last_index == index && last_part != part => {
                out.push(StreamDelta::Reasoning(SUMMARY_SEPARATOR.to_string()));
            }
            _ => {}
        }
        self.summary_part = Some((index, part));
        out.push(StreamDelta::Reasoning(delta.to_string()));
        Ok(())
    }

    fn arguments_delta(
        &mut self,
        event: &Value,
        out: &mut Vec<StreamDelta>,
    ) -> Result<(), ModelError> {
        let index = index_field(event, "output_index", "a function call arguments delta")?;
        let delta = str_field(event, "delta", "a function call arguments delta")?;
        let call = *self.calls.get(&index).ok_or_else(|| {
            malformed(format!(
                "function call arguments for output {index}, which is not a function call"
            ))
        })?;
        self.arguments.entry(index).or_default().push_str(delta);
        out.push(call_arguments(call, delta));
        Ok(())
    }

    /// Checks the final output against the deltas seen.
    fn check_agreement(&self, output: &[Value]) -> Result<(), ModelError> {
        for (index, item) in output.iter().enumerate() {
            if let Some(streamed) = self.texts.get(&index) {
                let text: String = item
                    .get("content")
                    .and_then(Value::as_array)
                    .map(|parts| {
                        parts
                            .iter()
                            .filter_map(|part| part.get("text").or_else(|| part.get("refusal")))
                            .filter_map(Value::as_str)
                            .collect()
                    })
                    .unwrap_or_default();
                if &text != streamed {
                    return Err(malformed(format!(
                        "the completed response's output {index} reads {text:?}, its deltas {streamed:?}"
                    )));
                }
            }
            if let Some(streamed) = self.arguments.get(&index) {
                let arguments = item.get("arguments").and_then(Value::as_str);
                if arguments != Some(streamed.as_str()) {
                    return Err(malformed(format!(
                        "the completed response's call arguments at output {index} are {arguments:?}, its deltas {streamed:?}"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl StreamAssembler for ResponsesAssembler {
    fn push(&mut self, frame: &Frame, out: &mut Vec<StreamDelta>) -> Result<bool, ModelError> {
        let Frame::Sse { data, .. } = frame else {
            return Err(malformed("a Responses stream carries SSE events only"));
        };
        if data.trim().is_empty() || data.trim() == "[DONE]" {
            return Ok(false);
        }
        let event = event_json(Provider::OpenAiResponses, data)?;
        let kind = str_field(&event, "type", "a Responses stream event")?;
        match kind {
            "response.output_item.added" => self.item_added(&event, out)?,
            "response.output_text.delta" | "response.refusal.delta" => {
                self.text_delta(&event, out)?
            }
            "response.reasoning_summary_text.delta" => self.summary_delta(&event, out)?,
            "response.reasoning_text.delta" => {
                let delta = str_field(&event, "delta", "a reasoning text delta")?;
                out.push(StreamDelta::Reasoning(delta.to_string()));
            }
            "response.function_call_arguments.delta" => self.arguments_delta(&event, out)?,
            "response.output_item.done" => {
                let index = index_field(&event, "output_index", kind)?;
                let item = event.get("item").cloned().unwrap_or(Value::Null);
                self.done.insert(index, item);
            }
            "response.completed" | "response.incomplete" => {
                let response = event
                    .get("response")
                    .filter(|response| response.is_object())
                    .ok_or_else(|| malformed(format!("{kind} without its response: {event}")))?;
                self.response = Some(response.clone());
                return Ok(true);
            }
            "response.failed" | "error" => return Err(provider_error(data.clone())),
            // response.created, response.in_progress, *.done, ...
            _ => {}
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ModelReply, ModelError> {
        let Some(mut response) = self.response.clone() else {
            return Err(malformed(
                "the Responses stream ended before response.completed",
            ));
        };
        let empty = response
            .get("output")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if empty && !self.done.is_empty() {
            let items: Vec<Value> = self.done.values().cloned().collect();
            response["output"] = Value::Array(items);
        }
        if let Some(Value::Array(output)) = response.get("output") {
            self.check_agreement(output)?;
        }
        ResponsesWire.parse(&response)
    }
}

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
