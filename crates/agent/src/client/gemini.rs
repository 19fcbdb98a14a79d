//! The Gemini `generateContent` / `streamGenerateContent` wire format.
//!
//! - URL: `{base}/models/{model}:generateContent`, streamed
//!   `{base}/models/{model}:streamGenerateContent?alt=sse` (the model is in
//!   the URL, not the body; a model given as `models/NAME` is not doubled).
//! - Headers: `x-goog-api-key` (none without a key).
//! - Body: the rendered `system_instruction` + `contents`; `tools:
//!   [{functionDeclarations: [{name, description, parameters}]}]` with each
//!   schema cut down to the OpenAPI subset Gemini's `Schema` accepts (see
//!   [`gemini_schema`]); `generationConfig` with `temperature`,
//!   `maxOutputTokens` and `thinkingConfig` (`thinkingBudget` for
//!   [`Reasoning::Budget`], `thinkingLevel` for [`Reasoning::Effort`], with
//!   `includeThoughts: true`), each only when set.
//! - Reply: `candidates[0].content.parts` ingested by convlog's Gemini mapper
//!   as one `model` content, thought parts and `thoughtSignature`s kept where
//!   they were. Consecutive text parts of the same kind (thought or answer)
//!   are joined first, a signature staying with the text it closes — a
//!   stream splits one part over many chunks, and the whole reply must read
//!   the same. `finish_reason`: `STOP` → `stop` (`tool_calls` when the reply
//!   calls tools), `MAX_TOKENS` → `length`, `SAFETY`, `RECITATION`,
//!   `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII`, `IMAGE_SAFETY` →
//!   `content_filter`, others lower-cased verbatim. Usage from
//!   `usageMetadata` (output = candidates + thoughts tokens).
//! - Errors: an `{"error": {"code", "message", "status"}}` body (whole, or
//!   as a stream chunk), a reply with no candidate (prompt blocked,
//!   `promptFeedback`) and a candidate with no content (finish reason
//!   `SAFETY`, ...) are [`ModelErrorKind::Status`] with status 0 (the driver
//!   puts in the HTTP status) and the provider's text verbatim (a stream
//!   chunk's data as sent).
//! - Stream (`alt=sse`): each event's data is a whole
//!   `GenerateContentResponse` chunk. There is no end event: the chunk that
//!   carries the `finishReason` (with the final `usageMetadata`) is the last
//!   one Gemini sends, so `push` returns `true` on it; a stream that ends
//!   before it is cut short (the driver reports it, and `finish` refuses a
//!   stream in which no chunk carried a finish reason).

use serde_json::{json, Map, Value};

use super::wire::{Frame, Framing, StreamAssembler, Wire};
use super::wire_support::{call_started, event_json, ingest_one, malformed, provider_error};
#[allow(unused_imports)] // named in the docs
use super::ModelErrorKind;
use super::{ClientConfig, ModelError, ModelReply, ModelRequest, Reasoning, StreamDelta, Usage};
use convlog::Provider;

/// The `thoughtSignature` part field.
const SIGNATURE: &str = "thoughtSignature";

/// The JSON Schema keywords Gemini's `Schema` object accepts; any other is
/// dropped from tool parameters (the API answers 400 "Unknown name" to
/// `$schema`, `additionalProperties`, `$ref`, `const`, ...).
pub const SCHEMA_KEYWORDS: [&str; 22] = [
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

/// Gemini generateContent / streamGenerateContent.
pub(crate) struct GeminiWire;

impl Wire for GeminiWire {
    fn url(&self, config: &ClientConfig, stream: bool) -> String {
        let base = config.base_url.trim_end_matches('/');
        let model = config.model.trim_start_matches("models/");
        if stream {
            format!("{base}/models/{model}:streamGenerateContent?alt=sse")
        } else {
            format!("{base}/models/{model}:generateContent")
        }
    }

    fn headers(&self, config: &ClientConfig) -> Vec<(String, String)> {
        super::wire_support::auth_header("x-goog-api-key", config.api_key.clone())
    }

    fn body(
        &self,
        config: &ClientConfig,
        request: &ModelRequest<'_>,
        _stream: bool,
    ) -> Result<Value, ModelError> {
        let mut body = super::wire_support::rendered_body(Provider::Gemini, request)?;
        if !request.tools.is_empty() {
            let declarations: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": gemini_schema(&tool.parameters),
                    })
                })
                .collect();
            body.insert(
                "tools".into(),
                json!([{ "functionDeclarations": declarations }]),
            );
        }
        let mut generation = Map::new();
        if let Some(temperature) = config.temperature {
            generation.insert("temperature".into(), json!(temperature));
        }
        if let Some(max_tokens) = config.max_tokens {
            generation.insert("maxOutputTokens".into(), json!(max_tokens));
        }
        match &config.reasoning {
            None => {}
            Some(Reasoning::Budget(budget)) => {
                generation.insert(
                    "thinkingConfig".into(),
                    json!({"thinkingBudget": budget, "includeThoughts": true}),
                );
            }
            Some(Reasoning::Effort(level)) => {
                generation.insert(
                    "thinkingConfig".into(),
                    json!({"thinkingLevel": level, "includeThoughts": true}),
                );
            }
        }
        if !generation.is_empty() {
            body.insert("generationConfig".into(), Value::Object(generation));
        }
        Ok(Value::Object(body))
    }

    fn parse(&self, body: &Value) -> Result<ModelReply, ModelError> {
        if is_error(body) {
            return Err(provider_error(body.to_string()));
        }
        let candidate = body
            .pointer("/candidates/0")
            .ok_or_else(|| provider_error(body.to_string()))?;
        let parts = match candidate.pointer("/content/parts") {
            Some(Value::Array(parts)) if !parts.is_empty() => parts.clone(),
            // No content: blocked (SAFETY, ...) or empty; the body says why.
            _ => return Err(provider_error(body.to_string())),
        };
        let parts = join_parts(parts.into_iter());
        let message = json!([{"role": "model", "parts": parts}]);
        let mut entry = ingest_one(Provider::Gemini, &message)?;
        entry.finish_reason = candidate
            .get("finishReason")
            .and_then(Value::as_str)
            .map(|reason| finish_reason(reason, !entry.tool_calls.is_empty()));
        Ok(ModelReply {
            entry,
            usage: usage(body.get("usageMetadata")),
        })
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        Box::new(GeminiAssembler::default())
    }
}

/// `schema` (JSON Schema) as Gemini's `Schema`: only [`SCHEMA_KEYWORDS`]
/// kept, recursively through `properties`, `items` and `anyOf`; a `type`
/// list such as `["string", "null"]` becomes `type` + `nullable: true` (a
/// `null` in `enum` likewise, and other enum values become strings, the
/// only enum values Gemini takes); a `const` becomes a one-value `enum` (typed
/// `string` when it is one and no type is given).
pub fn gemini_schema(schema: &Value) -> Value {
    let Value::Object(object) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in object {
        match key.as_str() {
            "properties" => {
                if let Value::Object(properties) = value {
                    let properties = properties
                        .iter()
                        .map(|(name, schema)| (name.clone(), gemini_schema(schema)))
                        .collect();
                    out.insert(key.clone(), Value::Object(properties));
                }
            }
            "items" => {
                out.insert(key.clone(), gemini_schema(value));
            }
            "anyOf" => {
                if let Value::Array(options) = value {
                    out.insert(
                        key.clone(),
                        Value::Array(options.iter().map(gemini_schema).collect()),
                    );
                }
            }
            "type" => match value {
                Value::Array(types) => {
                    let mut rest = types.iter().filter(|kind| kind.as_str() != Some("null"));
                    if let Some(kind) = rest.next() {
                        out.insert(key.clone(), kind.clone());
                    }
                    if types.len() > 1 && types.iter().any(|kind| kind == "null") {
                        out.insert("nullable".into(), json!(true));
                    }
                }
                _ => {
                    out.insert(key.clone(), value.clone());
                }
            },
            "const" => {
                out.entry("enum").or_insert_with(|| json!([value]));
                if value.is_string() {
                    out.entry("type").or_insert_with(|| json!("string"));
                }
            }
            "enum" => {
                if let Value::Array(values) = value {
                    // Gemini's enum is a list of strings.
                    let values: Vec<Value> = values
                        .iter()
                        .filter(|value| !value.is_null())
                        .map(|value| match value {
                            Value::String(_) => value.clone(),
                            other => json!(other.to_string()),
                        })
                        .collect();
                    if values.len() < value.as_array().map_or(0, Vec::len) {
                        out.insert("nullable".into(), json!(true));
                    }
                    out.insert(key.clone(), Value::Array(values));
                }
            }
            _ if SCHEMA_KEYWORDS.contains(&key.as_str()) => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    Value::Object(out)
}

/// Whether `body` is a Gemini `{"error": {...}}` body.
fn is_error(body: &Value) -> bool {
    body.get("error").is_some_and(Value::is_object)
}

/// The neutral finish reason of a Gemini `finishReason`.
fn finish_reason(reason: &str, calls: bool) -> String {
    match reason {
        "STOP" if calls => "tool_calls".to_string(),
        "STOP" => "stop".to_string(),
        "MAX_TOKENS" => "length".to_string(),
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            "content_filter".to_string()
        }
        other => other.to_ascii_lowercase(),
    }
}

fn usage(metadata: Option<&Value>) -> Option<Usage> {
    let metadata = metadata.filter(|metadata| metadata.is_object())?;
    let count = super::wire_support::count;
    Some(Usage {
        input_tokens: count(metadata, "promptTokenCount"),
        output_tokens: count(metadata, "candidatesTokenCount")
            + count(metadata, "thoughtsTokenCount"),
    })
}

/// Whether a part is a text part, and a thought.
fn text_kind(part: &Value) -> Option<bool> {
    let object = part.as_object()?;
    let thought = object.get("thought").and_then(Value::as_bool) == Some(true);
    let only_text = object
        .keys()
        .all(|key| matches!(key.as_str(), "text" | "thought" | SIGNATURE));
    (object.get("text").is_some_and(Value::is_string) && only_text).then_some(thought)
}

/// Joins consecutive text parts of the same kind (thought or not) into one,
/// unless the earlier one already carries a signature (a signature closes
/// its part). Other parts are kept as they are.
fn join_parts(parts: impl Iterator<Item = Value>) -> Vec<Value> {
    let mut joined: Vec<Value> = Vec::new();
    for part in parts {
        let kind = text_kind(&part);
        let last = joined.last_mut();
        let mergeable = match (&kind, last) {
            (Some(thought), Some(last)) => {
                text_kind(last) == Some(*thought) && last.get(SIGNATURE).is_none()
            }
            _ => false,
        };
        if !mergeable {
            joined.push(part);
            continue;
        }
        let last = joined.last_mut().expect("checked above");
        let text = format!(
            "{}{}",
            last["text"].as_str().unwrap_or_default(),
            part["text"].as_str().unwrap_or_default()
        );
        last["text"] = json!(text);
        if let Some(signature) = part.get(SIGNATURE) {
            last[SIGNATURE] = signature.clone();
        }
    }
    joined
}

/// Assembles a streamed Gemini reply (see the module docs for how the end
/// is known).
#[derive(Debug, Default)]
struct GeminiAssembler {
    parts: Vec<Value>,
    calls: usize,
    finish_reason: Option<Value>,
    usage: Option<Value>,
    /// The last chunk as sent, for an error that needs it.
    last: String,
    /// Whether the last chunk holds a `promptFeedback` (a blocked prompt).
    blocked: bool,
}

impl GeminiAssembler {
    fn take_parts(&mut self, parts: &[Value], out: &mut Vec<StreamDelta>) {
        for part in parts {
            match (text_kind(part), part.get("text").and_then(Value::as_str)) {
                (Some(true), Some(text)) if !text.is_empty() => {
                    out.push(StreamDelta::Reasoning(text.to_string()));
                }
                (Some(false), Some(text)) if !text.is_empty() => {
                    out.push(StreamDelta::Text(text.to_string()));
                }
                _ => {}
            }
            if let Some(call) = part.get("functionCall") {
                let name = call.get("name").and_then(Value::as_str).unwrap_or("");
                let id = call.get("id").and_then(Value::as_str);
                out.push(call_started(self.calls, id, name));
                let arguments = call.get("args").map(Value::to_string).unwrap_or_default();
                if let Some(StreamDelta::ToolCall {
                    arguments: slot, ..
                }) = out.last_mut()
                {
                    *slot = arguments;
                }
                self.calls += 1;
            }
            self.parts.push(part.clone());
        }
    }
}

impl StreamAssembler for GeminiAssembler {
    fn push(&mut self, frame: &Frame, out: &mut Vec<StreamDelta>) -> Result<bool, ModelError> {
        let Frame::Sse { data, .. } = frame else {
            return Err(malformed("a Gemini stream carries SSE events only"));
        };
        if data.trim().is_empty() {
            return Ok(false);
        }
        let chunk = event_json(Provider::Gemini, data)?;
        if is_error(&chunk) {
            return Err(provider_error(data.clone()));
        }
        if let Some(candidate) = chunk.pointer("/candidates/0") {
            if let Some(Value::Array(parts)) = candidate.pointer("/content/parts") {
                self.take_parts(parts, out);
            }
            if let Some(reason) = candidate.get("finishReason").filter(|r| !r.is_null()) {
                self.finish_reason = Some(reason.clone());
            }
        }
        if let Some(usage) = chunk.get("usageMetadata") {
            self.usage = Some(usage.clone());
        }
        self.blocked = chunk.get("promptFeedback").is_some();
        self.last = data.clone();
        Ok(self.finish_reason.is_some())
    }

    fn finish(self: Box<Self>) -> Result<ModelReply, ModelError> {
        let Some(finish_reason) = self.finish_reason else {
            if self.blocked {
                return Err(provider_error(self.last));
            }
            return Err(malformed(
                "the Gemini stream ended before any chunk carried a finishReason",
            ));
        };
        if self.parts.is_empty() {
            // Blocked or empty: the last chunk is what the provider said.
            return Err(provider_error(self.last));
        }
        let mut body = Map::new();
        body.insert(
            "candidates".into(),
            json!([{
                "content": {"role": "model", "parts": self.parts},
                "finishReason": finish_reason,
            }]),
        );
        if let Some(usage) = self.usage {
            body.insert("usageMetadata".into(), usage);
        }
        GeminiWire.parse(&Value::Object(body))
    }
}

#[cfg(test)]
#[path = "gemini_tests.rs"]
mod tests;
