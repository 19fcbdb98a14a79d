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

/// What a request body usually needs at least (the system prompt and a
/// few messages); it grows as needed.
const BODY_CAPACITY_HINT: usize = 4096;

/// One top-level field of the request body, borrowed.
enum Field<'a> {
    Messages,
    Str(&'a str),
    Bool(bool),
    U32(u32),
    F64(f64),
    StreamOptions,
    Tools(&'a [ToolSpec]),
    Value(&'a Value),
}

/// `value` as compact JSON appended to `out`.
fn write_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    serde_json::to_writer(out, value).expect("writing JSON to a Vec cannot fail");
}

/// The `tools` field written as [`function_tools`] builds it.
struct FunctionTools<'a>(&'a [ToolSpec]);

impl serde::Serialize for FunctionTools<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Function<'a> {
            description: &'a str,
            name: &'a str,
            parameters: &'a Value,
        }
        #[derive(serde::Serialize)]
        struct Tool<'a> {
            function: Function<'a>,
            #[serde(rename = "type")]
            kind: &'static str,
        }
        serializer.collect_seq(self.0.iter().map(|tool| Tool {
            function: Function {
                description: &tool.description,
                name: &tool.name,
                parameters: &tool.parameters,
            },
            kind: "function",
        }))
    }
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

    fn body_bytes(
        &self,
        config: &ClientConfig,
        request: &ModelRequest<'_>,
        stream: bool,
    ) -> Result<Vec<u8>, ModelError> {
        let dialect = dialect(config);
        let reasoning_content = dialect.is_some_and(|dialect| dialect.reasoning_content);
        let mut fields: Vec<(&str, Field<'_>)> = vec![
            ("messages", Field::Messages),
            ("model", Field::Str(&config.model)),
            ("stream", Field::Bool(stream)),
        ];
        if !request.tools.is_empty() {
            fields.push(("tools", Field::Tools(request.tools)));
        }
        if stream {
            fields.push(("stream_options", Field::StreamOptions));
        }
        if let Some(temperature) = config.temperature {
            fields.push(("temperature", Field::F64(temperature)));
        }
        if let Some(max_tokens) = config.max_tokens {
            let field = if dialect.is_some() {
                "max_tokens"
            } else {
                "max_completion_tokens"
            };
            fields.push((field, Field::U32(max_tokens)));
        }
        if let Some(Reasoning::Effort(effort)) = &config.reasoning {
            fields.push(("reasoning_effort", Field::Str(effort)));
        }
        if let Some(dialect) = dialect {
            // Merged on top, as `body` inserts them into its map.
            for (key, value) in &dialect.extra_body {
                fields.retain(|(name, _)| name != key);
                fields.push((key, Field::Value(value)));
            }
        }
        // `body`'s map writes its keys sorted.
        fields.sort_by(|a, b| a.0.cmp(b.0));
        let options;
        let render = if request.render.openai_reasoning_content == reasoning_content {
            request.render
        } else {
            options = request
                .render
                .clone()
                .openai_reasoning_content(reasoning_content);
            &options
        };
        let rendered_error = |error: convlog::Error| {
            request_error(format!("the history cannot be rendered: {error}"))
        };
        let mut out = Vec::with_capacity(BODY_CAPACITY_HINT);
        let mut rendered = false;
        out.push(b'{');
        for (at, (key, field)) in fields.iter().enumerate() {
            if at > 0 {
                out.push(b',');
            }
            write_json(&mut out, key);
            out.push(b':');
            match field {
                Field::Messages => {
                    convlog::provider::render_json(
                        Provider::OpenAiChat,
                        request.entries,
                        render,
                        &mut out,
                    )
                    .map_err(rendered_error)?;
                    rendered = true;
                }
                Field::Str(text) => write_json(&mut out, text),
                Field::Bool(flag) => write_json(&mut out, flag),
                Field::U32(number) => write_json(&mut out, number),
                Field::F64(number) => write_json(&mut out, number),
                Field::StreamOptions => out.extend_from_slice(b"{\"include_usage\":true}"),
                Field::Tools(tools) => write_json(&mut out, &FunctionTools(tools)),
                Field::Value(value) => write_json(&mut out, value),
            }
        }
        out.push(b'}');
        if !rendered {
            // `messages` replaced by the dialect: the history must still
            // render, as `body` requires.
            convlog::provider::render_json(
                Provider::OpenAiChat,
                request.entries,
                render,
                &mut Vec::new(),
            )
            .map_err(rendered_error)?;
        }
        Ok(out)
    }

    fn parse(&self, body: &Value) -> Result<ModelReply, ModelError> {
        read_completion(&mut body.clone())
    }

    fn parse_bytes(&self, bytes: &[u8]) -> Result<ModelReply, ModelError> {
        // The common shape is read without a value tree for the envelope
        // (only the message becomes one); anything else is read whole, by
        // the same rules, so the reply or error is the same either way.
        if let Ok(Envelope {
            error: false,
            choice: Some(choice),
            usage,
        }) = serde_json::from_slice::<Envelope>(bytes)
        {
            if choice.message.is_object() {
                let finish_reason = choice.finish_reason.as_ref().and_then(Value::as_str);
                return assistant_reply(
                    Provider::OpenAiChat,
                    normalize(choice.message),
                    finish_reason.map(str::to_string),
                    usage_from(usage.as_ref(), "prompt_tokens", "completion_tokens"),
                );
            }
        }
        let mut body: Value = serde_json::from_slice(bytes).map_err(|error| {
            malformed(format!(
                "the body is not JSON ({error}): {}",
                super::http::excerpt(bytes)
            ))
        })?;
        read_completion(&mut body)
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        Box::<ChatAssembler>::default()
    }
}

/// A completion's top level read as `read_completion` reads it, without
/// a value tree: whether `error` is set (not null), `choices[0]`, and
/// `usage` (a small value). Only a JSON object is read (an array or any
/// other value fails, and the body is then read whole); a key given twice
/// counts once, the last one, as in a value. Fields it does not read are
/// skipped unchecked: a number out of range or bytes that are not UTF-8
/// there, which a value tree refuses, do not make the answer unreadable.
struct Envelope {
    error: bool,
    choice: Option<FirstChoice>,
    usage: Option<Value>,
}

/// `choices[0]` of a completion, when it is an object: its message and
/// finish reason as values (what `read_completion` reads of them).
struct FirstChoice {
    message: Value,
    finish_reason: Option<Value>,
}

impl<'de> serde::Deserialize<'de> for Envelope {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Envelope;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a completion object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Envelope, A::Error> {
                let mut envelope = Envelope {
                    error: false,
                    choice: None,
                    usage: None,
                };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "error" => {
                            envelope.error =
                                map.next_value::<Option<serde::de::IgnoredAny>>()?.is_some()
                        }
                        "choices" => envelope.choice = map.next_value::<FirstOf>()?.0,
                        "usage" => envelope.usage = Some(map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(envelope)
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// The first element of `choices` when it is an object (the rest
/// skipped); fails when `choices` is not an array.
struct FirstOf(Option<FirstChoice>);

impl<'de> serde::Deserialize<'de> for FirstOf {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = FirstOf;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<FirstOf, A::Error> {
                let first = seq.next_element::<FirstChoice>()?;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(FirstOf(first))
            }
        }
        deserializer.deserialize_seq(Visit)
    }
}

impl<'de> serde::Deserialize<'de> for FirstChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = FirstChoice;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a choice object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<FirstChoice, A::Error> {
                let mut choice = FirstChoice {
                    message: Value::Null,
                    finish_reason: None,
                };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "message" => choice.message = map.next_value()?,
                        "finish_reason" => choice.finish_reason = Some(map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(choice)
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// Reads a whole completion; its message is moved out of `body`, not
/// copied.
fn read_completion(body: &mut Value) -> Result<ModelReply, ModelError> {
    if body.get("error").is_some_and(|error| !error.is_null()) {
        return Err(provider_error(body.to_string()));
    }
    let usage = usage_from(body.get("usage"), "prompt_tokens", "completion_tokens");
    let choice = body
        .get_mut("choices")
        .and_then(|choices| choices.get_mut(0))
        .ok_or_else(|| malformed("the answer has no choices[0]"))?;
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    let message = choice
        .get_mut("message")
        .filter(|message| message.is_object())
        .ok_or_else(|| malformed("choices[0] has no message object"))?;
    assistant_reply(
        Provider::OpenAiChat,
        normalize(message.take()),
        finish_reason,
        usage,
    )
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
    use super::super::wire_support::testing;
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

    /// A history with everything OpenAI Chat renders: a system prompt,
    /// reasoning, text and calls, results (one failed), escapes.
    fn rich_history() -> Vec<convlog::ConversationEntry> {
        use convlog::model::{ConversationEntry, Reasoning, Role, ToolCall, ToolStatus};
        let mut entries = testing::history();
        entries[1].content = Some("Weather in \"Paris\"\n and Zürich? \u{1F600}".into());
        let mut call = ToolCall::new("call_1", "get_weather", "{\"city\":\"Paris\"}");
        call.status = ToolStatus::Completed;
        let mut failed = ToolCall::new("call_2", "get_time", "not json");
        failed.status = ToolStatus::Failed;
        failed.error = Some("no clock".into());
        let mut pending = ToolCall::new("call_3", "get_time", "{}");
        pending.status = ToolStatus::Pending;
        let mut assistant =
            ConversationEntry::assistant_calling("e1", 2, vec![call, failed, pending]);
        assistant.content = Some("Let me look.".into());
        assistant.reasoning = Some(Reasoning {
            text: Some("Two cities.".into()),
            signature: None,
            redacted: false,
        });
        assistant.turn = 1;
        entries.push(assistant);
        let mut result = ConversationEntry::new("e1", 3, Role::Tool, Some("18C".into()));
        result.tool_call_id = Some("call_1".into());
        result.tool_name = Some("get_weather".into());
        result.turn = 1;
        entries.push(result);
        let mut answer = ConversationEntry::assistant("e1", 4, "Paris: 18C.");
        answer.turn = 2;
        entries.push(answer);
        entries
    }

    /// The bytes sent equal `body` serialised, for every option that
    /// shapes the body (strict and compatible, dialect extras that add or
    /// replace fields, tools or none, streamed or not, settings).
    #[test]
    fn body_bytes_are_the_body_serialised() {
        use convlog::RenderOptions;
        let entries = rich_history();
        let tools = testing::tools();
        let strict = testing::config(ApiKind::OpenAiChat, "gpt-4o", "https://api.openai.com/v1");
        let mut configs = vec![strict.clone()];
        let mut set = strict.clone();
        set.temperature = Some(0.7);
        set.max_tokens = Some(512);
        set.reasoning = Some(Reasoning::Effort("high".into()));
        configs.push(set.clone());
        let mut nan = strict.clone();
        nan.temperature = Some(f64::NAN);
        configs.push(nan);
        for dialect in [
            Dialect::new(),
            Dialect::new().reasoning_content(true),
            Dialect::new()
                .reasoning_content(true)
                .extra("thinking", json!({"type": "enabled"}))
                .extra("a_first", json!(1))
                .extra("zzz", json!([null, "x"])),
            Dialect::new()
                .extra("stream", json!("replaced"))
                .extra("model", json!(7)),
            Dialect::new().extra("messages", json!([])),
        ] {
            let mut config = set.clone();
            config.api = ApiKind::OpenAiCompatible(dialect);
            configs.push(config);
        }
        let renders = [
            RenderOptions::new(),
            RenderOptions::new()
                .default_system_prompt(Some("You are Wolo.".into()))
                .openai_reasoning_content(true),
            RenderOptions::new().pending(convlog::provider::PendingCalls::SyntheticError),
        ];
        for config in &configs {
            for render in &renders {
                for offered in [&tools[..], &[]] {
                    for history in [&entries[..], &entries[..2], &entries[1..]] {
                        let request = testing::request(history, offered, render);
                        for stream in [false, true] {
                            let body = OpenAiChatWire.body(config, &request, stream).unwrap();
                            let bytes =
                                OpenAiChatWire.body_bytes(config, &request, stream).unwrap();
                            assert_eq!(
                                String::from_utf8(bytes).unwrap(),
                                serde_json::to_string(&body).unwrap(),
                                "{config:?} {render:?} stream {stream}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn body_bytes_refuse_what_body_refuses() {
        use convlog::model::{ConversationEntry, ToolCall};
        let mut entries = testing::history();
        for sequence in [2, 3] {
            entries.push(ConversationEntry::assistant_calling(
                "e1",
                sequence,
                vec![ToolCall::new("same", "get_time", "{}")],
            ));
        }
        let render = convlog::RenderOptions::new();
        let request = testing::request(&entries, &[], &render);
        for config in [
            testing::config(ApiKind::OpenAiChat, "m", "http://x"),
            testing::config(
                ApiKind::OpenAiCompatible(Dialect::new().extra("messages", json!([]))),
                "m",
                "http://x",
            ),
        ] {
            let expected = OpenAiChatWire.body(&config, &request, false).unwrap_err();
            let error = OpenAiChatWire
                .body_bytes(&config, &request, false)
                .unwrap_err();
            assert_eq!(error, expected);
        }
    }

    /// Reading the bytes gives what reading the parsed value gives, for
    /// answers of every shape `parse` handles, errors included.
    #[test]
    fn parse_bytes_reads_as_parse_does() {
        let bodies = [
            json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Hi \"there\"", "refusal": null}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}),
            json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "content": "", "reasoning": "because",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"message": {"role": "assistant", "content": "a"}}, {"message": 5}],
                "usage": {"prompt_tokens": "many"}}),
            json!({"choices": [{"message": {"role": "assistant", "content": "a"}, "finish_reason": 3}],
                "usage": [1, 2]}),
            json!({"error": null, "choices": [{"message": {"role": "assistant", "content": "a"}}]}),
            json!({"error": {"message": "overloaded"}, "choices": []}),
            json!({"choices": [{"message": "hi"}]}),
            json!({"choices": []}),
            json!([{"message": {"role": "assistant", "content": "a"}}]),
            json!({"choices": {"0": {"message": {"role": "assistant", "content": "a"}}}}),
            json!({"choices": [5]}),
            json!({"choices": null}),
            json!({"usage": {"completion_tokens": 4}, "choices": [{"message": {"role": "assistant", "content": "a"}, "finish_reason": null}]}),
        ];
        // A key given twice counts once (the last), as in a value; escaped
        // keys read as their text.
        let twice = br#"{"choices": [{"message": {"role": "assistant", "content": "first"}, "message": {"role": "assistant", "content": "last"}, "finish_reason": "stop"}], "\u0065rror": null, "usage": 5, "usage": {"prompt_tokens": 2}}"#;
        let value: Value = serde_json::from_slice(twice).unwrap();
        assert_eq!(
            OpenAiChatWire
                .parse_bytes(twice)
                .map(|reply| testing::normalise(&reply)),
            OpenAiChatWire
                .parse(&value)
                .map(|reply| testing::normalise(&reply))
        );
        let reply = OpenAiChatWire.parse_bytes(twice).unwrap();
        assert_eq!(reply.entry.content.as_deref(), Some("last"));
        assert_eq!(reply.usage.map(|usage| usage.input_tokens), Some(2));
        let erred = br#"{"choices": [{"message": {"role": "assistant", "content": "a"}}], "err\u006fr": {"message": "x"}}"#;
        assert!(matches!(
            OpenAiChatWire.parse_bytes(erred).unwrap_err().kind,
            crate::client::ModelErrorKind::Status { .. }
        ));
        for body in bodies {
            let expected = OpenAiChatWire
                .parse(&body)
                .map(|reply| testing::normalise(&reply));
            let read = OpenAiChatWire
                .parse_bytes(body.to_string().as_bytes())
                .map(|reply| testing::normalise(&reply));
            assert_eq!(read, expected, "{body}");
        }
        // Fields the reply does not use are not checked.
        let lenient = br#"{"created": 1e400, "choices": [{"message": {"role": "assistant", "content": "a"}}]}"#;
        assert!(OpenAiChatWire.parse_bytes(lenient).is_ok());
        let error = OpenAiChatWire.parse_bytes(b"{\"choices\": [").unwrap_err();
        assert!(
            error.to_string().contains("the body is not JSON"),
            "{error}"
        );
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
