//! OpenAI Chat Completions `messages`.
//!
//! | neutral | OpenAI Chat |
//! |---|---|
//! | system entry | `{"role": "system"}` (or `developer`, kept in metadata), in place |
//! | user entry | `{"role": "user", "content": text}` |
//! | assistant entry | `{"role": "assistant", "content": text or null, "tool_calls": [...]}`; `null` only with calls |
//! | reasoning text | `reasoning_content` only with `RenderOptions::openai_reasoning_content` (GLM, DeepSeek); never for OpenAI itself |
//! | tool call | `{"id", "type": "function", "function": {"name", "arguments": string verbatim}}` |
//! | result | one `{"role": "tool", "tool_call_id", "content"}` message per result |

use serde_json::{json, Map, Value};

use super::build::{message_list, optional_string, string_field, Builder, CallRef, Parsed};
use super::json_text::write_str;
use super::layout::{self, Extras};
use super::plan::{Plan, Step};
use super::{has_text, RenderOptions};
use crate::model::ConversationEntry;

pub(crate) fn render(plan: &Plan<'_>, options: &RenderOptions) -> Vec<Value> {
    let mut messages = Vec::new();
    for step in &plan.steps {
        match step {
            Step::System { text, entry } => messages.push(json!({
                "role": system_role(*entry),
                "content": text,
            })),
            Step::User(entry) => messages.push(json!({
                "role": "user",
                "content": entry.content.as_deref().unwrap_or_default(),
            })),
            Step::Assistant { entry, kept } => {
                let mut message = Map::new();
                message.insert("role".into(), json!("assistant"));
                let content = entry.content.as_deref().filter(|text| has_text(Some(text)));
                message.insert("content".into(), json!(content));
                // OpenAI's own API rejects `reasoning_content` (its request
                // types forbid unknown keys): only a dialect that asks for it
                // gets it.
                if options.include_reasoning && options.openai_reasoning_content {
                    if let Some(reasoning) = reasoning_text(entry) {
                        message.insert("reasoning_content".into(), json!(reasoning));
                    }
                }
                let calls: Vec<Value> = entry
                    .tool_calls
                    .iter()
                    .filter(|call| kept.contains(call.call_id.as_str()))
                    .map(|call| {
                        json!({
                            "id": call.call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        })
                    })
                    .collect();
                if !calls.is_empty() {
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                messages.push(Value::Object(message));
            }
            Step::Result(answer) => messages.push(json!({
                "role": "tool",
                "tool_call_id": answer.call.call_id,
                "content": answer.content,
            })),
        }
    }
    messages
}

/// The messages `render` builds, written straight to JSON bytes: the same
/// bytes `serde_json::to_vec(&Value::Array(render(plan, options)))` gives
/// (keys in the sorted order of `serde_json::Map`), without building the
/// value tree; strings go through `json_text::write_str` (serde_json's
/// escapes, found eight bytes at a time). Pinned against `render` by
/// tests/providers.rs (the golden scenarios and the property test over
/// random conversations).
pub(crate) fn write(plan: &Plan<'_>, options: &RenderOptions, out: &mut Vec<u8>) {
    let reasoning = options.include_reasoning && options.openai_reasoning_content;
    out.push(b'[');
    for (at, step) in plan.steps.iter().enumerate() {
        if at > 0 {
            out.push(b',');
        }
        match step {
            Step::System { text, entry } => write_text_message(out, text, system_role(*entry)),
            Step::User(entry) => {
                write_text_message(out, entry.content.as_deref().unwrap_or_default(), "user")
            }
            Step::Assistant { entry, kept } => {
                out.extend_from_slice(b"{\"content\":");
                match entry.content.as_deref().filter(|text| has_text(Some(text))) {
                    Some(text) => write_str(out, text),
                    None => out.extend_from_slice(b"null"),
                }
                if let Some(text) = reasoning.then(|| reasoning_text(entry)).flatten() {
                    out.extend_from_slice(b",\"reasoning_content\":");
                    write_str(out, &text);
                }
                out.extend_from_slice(b",\"role\":\"assistant\"");
                let mut calls = entry
                    .tool_calls
                    .iter()
                    .filter(|call| kept.contains(call.call_id.as_str()))
                    .peekable();
                if calls.peek().is_some() {
                    out.extend_from_slice(b",\"tool_calls\":[");
                    for (index, call) in calls.enumerate() {
                        if index > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(b"{\"function\":{\"arguments\":");
                        write_str(out, &call.arguments);
                        out.extend_from_slice(b",\"name\":");
                        write_str(out, &call.name);
                        out.extend_from_slice(b"},\"id\":");
                        write_str(out, &call.call_id);
                        out.extend_from_slice(b",\"type\":\"function\"}");
                    }
                    out.push(b']');
                }
                out.push(b'}');
            }
            Step::Result(answer) => {
                out.extend_from_slice(b"{\"content\":");
                write_str(out, &answer.content);
                out.extend_from_slice(b",\"role\":\"tool\",\"tool_call_id\":");
                write_str(out, &answer.call.call_id);
                out.push(b'}');
            }
        }
    }
    out.push(b']');
}

/// `{"content": content, "role": role}`, keys in `serde_json::Map`'s order.
fn write_text_message(out: &mut Vec<u8>, content: &str, role: &str) {
    out.extend_from_slice(b"{\"content\":");
    write_str(out, content);
    out.extend_from_slice(b",\"role\":");
    write_str(out, role);
    out.push(b'}');
}

/// `system`, or the OpenAI role recorded in metadata (`developer`).
pub(crate) fn system_role(entry: Option<&ConversationEntry>) -> &str {
    entry
        .and_then(|entry| entry.metadata.get(layout::OPENAI_ROLE_KEY))
        .map(String::as_str)
        .filter(|role| *role == "developer")
        .unwrap_or("system")
}

/// The readable reasoning of an entry (redacted blocks have none), joined
/// with blank lines; `None` when there is none.
pub(crate) fn reasoning_text(entry: &ConversationEntry) -> Option<String> {
    let texts: Vec<String> = layout::reasoning_blocks(entry)
        .into_iter()
        .filter(|block| !block.redacted)
        .filter_map(|block| block.text)
        .filter(|text| !text.is_empty())
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

pub(crate) fn to_entries(value: &Value, builder: &mut Builder<'_>) -> crate::Result<()> {
    let messages = message_list(builder, value, "messages")?;
    for (index, message) in messages.iter().enumerate() {
        let path = format!("messages[{index}]");
        let role = string_field(builder, message, "role", &path)?;
        match role {
            "system" | "developer" => {
                let text = content_text(builder, message, &path)?.unwrap_or_default();
                builder.system(text, Some(role));
            }
            "user" => {
                let text = content_text(builder, message, &path)?.unwrap_or_default();
                builder.user(vec![(text, Extras::default())]);
            }
            "assistant" => {
                let mut parts = Vec::new();
                if let Some(reasoning) =
                    optional_string(builder, message, "reasoning_content", &path)?
                {
                    parts.push(Parsed::Reasoning(
                        crate::model::Reasoning {
                            text: Some(reasoning.to_string()),
                            signature: None,
                            redacted: false,
                        },
                        Extras::default(),
                    ));
                }
                if let Some(refusal) = optional_string(builder, message, "refusal", &path)? {
                    if !refusal.is_empty() {
                        return Err(builder.unsupported(format!("{path}.refusal"), "a refusal"));
                    }
                }
                if let Some(text) = content_text(builder, message, &path)? {
                    parts.push(Parsed::Text(text, Extras::default()));
                }
                parts.extend(tool_calls(builder, message, &path)?);
                builder.assistant(parts, &path)?;
            }
            "tool" => {
                let call_id = string_field(builder, message, "tool_call_id", &path)?;
                let text = content_text(builder, message, &path)?.unwrap_or_default();
                let name = optional_string(builder, message, "name", &path)?.map(str::to_string);
                builder.result(CallRef::Id(call_id), text, false, name, &path)?;
            }
            other => {
                return Err(builder.unsupported(format!("{path}.role"), format!("role {other:?}")))
            }
        }
    }
    Ok(())
}

fn tool_calls(
    builder: &Builder<'_>,
    message: &Value,
    path: &str,
) -> Result<Vec<Parsed>, crate::Error> {
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(calls)) => calls,
        Some(_) => return Err(builder.malformed(format!("{path}.tool_calls"), "is not an array")),
    };
    let mut parsed = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        let call_path = format!("{path}.tool_calls[{index}]");
        let id = string_field(builder, call, "id", &call_path)?;
        let Some(function) = call.get("function") else {
            return Err(builder.unsupported(&call_path, "a tool call that is not a function call"));
        };
        let function_path = format!("{call_path}.function");
        let name = string_field(builder, function, "name", &function_path)?;
        let arguments = match function.get("arguments") {
            Some(Value::String(text)) => text.clone(),
            None | Some(Value::Null) => String::new(),
            Some(other) => layout::arguments_string(other),
        };
        parsed.push(Parsed::Call {
            id: Some(id.to_string()),
            name: name.to_string(),
            arguments,
            extras: Extras::default(),
        });
    }
    Ok(parsed)
}

/// `content` as text: a string, null (`None`), or an array of text parts
/// (joined; any other part kind is refused).
pub(crate) fn content_text(
    builder: &Builder<'_>,
    message: &Value,
    path: &str,
) -> Result<Option<String>, crate::Error> {
    match message.get("content") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (index, part) in parts.iter().enumerate() {
                let part_path = format!("{path}.content[{index}]");
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                match kind {
                    "text" | "input_text" | "output_text" => {
                        text.push_str(string_field(builder, part, "text", &part_path)?)
                    }
                    other => {
                        return Err(builder
                            .unsupported(part_path, format!("a content part of type {other:?}")))
                    }
                }
            }
            Ok(Some(text))
        }
        Some(_) => Err(builder.malformed(
            format!("{path}.content"),
            "is neither a string nor an array",
        )),
    }
}
