//! Anthropic Messages `messages` and `system`.
//!
//! | neutral | Anthropic |
//! |---|---|
//! | system entries | top-level `system`: a string, or text blocks when several |
//! | user entry | `user` message: text blocks (a string when it is one text) |
//! | assistant entry | `assistant` message: `thinking` / `redacted_thinking`, `text`, `tool_use` blocks in recorded order |
//! | reasoning | `{"type": "thinking", "thinking", "signature"}`; redacted: `{"type": "redacted_thinking", "data": signature}`; without a signature it is not sent (the API would reject it) |
//! | tool call | `{"type": "tool_use", "id", "name", "input": object}` (see `arguments_object`) |
//! | results | one `user` message of `tool_result` blocks, first in that message; failed: `"is_error": true` |
//!
//! Consecutive same-role messages are merged into one (roles alternate); a
//! history that starts with the assistant gets a leading user turn
//! ([`LEADING_USER_TEXT`]). Call ids outside `[A-Za-z0-9_-]` are rewritten
//! (see [`tool_use_id`]).

use std::borrow::Cow;

use serde_json::{json, Value};

use super::build::{message_list, string_field, Builder, CallRef, Parsed};
use super::layout::{self, Extras, Piece};
use super::plan::{Plan, Step};
use super::{has_text, Provider, RenderOptions, LEADING_USER_TEXT};
use crate::model::Reasoning;

pub(crate) fn render(plan: &Plan<'_>, options: &RenderOptions) -> (Vec<Value>, Option<Value>) {
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for step in &plan.steps {
        match step {
            Step::System { text, .. } => system.push(text.to_string()),
            Step::User(entry) => {
                let blocks = layout::pieces(entry)
                    .0
                    .into_iter()
                    .filter_map(|piece| match piece {
                        Piece::Text(text, _) if has_text(Some(text)) => {
                            Some(json!({"type": "text", "text": text}))
                        }
                        _ => None,
                    })
                    .collect();
                push(&mut turns, "user", blocks);
            }
            Step::Assistant { entry, kept } => {
                let signature_allowed = layout::signature_allowed(entry, Provider::Anthropic);
                let mut blocks = Vec::new();
                for piece in layout::pieces(entry).0 {
                    match piece {
                        Piece::Reasoning(reasoning, _) => {
                            if options.include_reasoning && signature_allowed {
                                blocks.extend(thinking_block(&reasoning));
                            }
                        }
                        Piece::Text(text, _) => {
                            if has_text(Some(text)) {
                                blocks.push(json!({"type": "text", "text": text}));
                            }
                        }
                        Piece::Call(call, _) => {
                            if kept.contains(call.call_id.as_str()) {
                                blocks.push(json!({
                                    "type": "tool_use",
                                    "id": tool_use_id(&call.call_id),
                                    "name": call.name,
                                    "input": layout::arguments_object(&call.arguments),
                                }));
                            }
                        }
                    }
                }
                push(&mut turns, "assistant", blocks);
            }
            Step::Result(answer) => {
                let mut block = serde_json::Map::new();
                block.insert("type".into(), json!("tool_result"));
                block.insert(
                    "tool_use_id".into(),
                    json!(tool_use_id(&answer.call.call_id)),
                );
                if !answer.content.is_empty() {
                    block.insert("content".into(), json!(answer.content));
                }
                if answer.is_error {
                    block.insert("is_error".into(), json!(true));
                }
                push(&mut turns, "user", vec![Value::Object(block)]);
            }
        }
    }
    if turns.first().is_some_and(|(role, _)| *role == "assistant") {
        turns.insert(
            0,
            (
                "user",
                vec![json!({"type": "text", "text": LEADING_USER_TEXT})],
            ),
        );
    }
    let messages = turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // Tool results first in their message.
            blocks.sort_by_key(|block| block["type"] != "tool_result");
            json!({"role": role, "content": content(blocks)})
        })
        .collect();
    let system = match system.len() {
        0 => None,
        1 => Some(json!(system[0])),
        _ => Some(Value::Array(
            system
                .iter()
                .map(|text| json!({"type": "text", "text": text}))
                .collect(),
        )),
    };
    (messages, system)
}

/// Appends blocks to the last message when it has the same role.
fn push(turns: &mut Vec<(&'static str, Vec<Value>)>, role: &'static str, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some((last, existing)) if *last == role => existing.extend(blocks),
        _ => turns.push((role, blocks)),
    }
}

/// A message of one text block is sent as a string.
fn content(blocks: Vec<Value>) -> Value {
    if let [block] = blocks.as_slice() {
        if block["type"] == "text" {
            return block["text"].clone();
        }
    }
    Value::Array(blocks)
}

fn thinking_block(reasoning: &Reasoning) -> Option<Value> {
    let signature = reasoning.signature.as_ref()?;
    Some(if reasoning.redacted {
        json!({"type": "redacted_thinking", "data": signature})
    } else {
        json!({
            "type": "thinking",
            "thinking": reasoning.text.as_deref().unwrap_or_default(),
            "signature": signature,
        })
    })
}

/// The id sent for a call: itself when it matches Anthropic's
/// `^[a-zA-Z0-9_-]+$`; otherwise every other character becomes `_` and the
/// CRC-32 of the original id is appended (`call.1` → `call_1_<8 hex>`), so
/// the `tool_use` and its `tool_result` still agree and two ids stay apart.
pub fn tool_use_id(call_id: &str) -> Cow<'_, str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !call_id.is_empty() && call_id.chars().all(allowed) {
        return Cow::Borrowed(call_id);
    }
    let cleaned: String = call_id
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect();
    Cow::Owned(format!(
        "{cleaned}_{:08x}",
        crc32fast::hash(call_id.as_bytes())
    ))
}

pub(crate) fn to_entries(value: &Value, builder: &mut Builder<'_>) -> crate::Result<()> {
    match value.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => builder.system(text.clone(), None),
        Some(Value::Array(blocks)) => {
            for (index, block) in blocks.iter().enumerate() {
                let path = format!("system[{index}]");
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = string_field(builder, block, "text", &path)?.to_string();
                        builder.system(text, None);
                    }
                    _ => return Err(builder.unsupported(path, "a system block that is not text")),
                }
            }
        }
        Some(_) => return Err(builder.malformed("system", "is neither a string nor an array")),
    }
    let messages = message_list(builder, value, "messages")?;
    for (index, message) in messages.iter().enumerate() {
        let path = format!("messages[{index}]");
        let role = string_field(builder, message, "role", &path)?;
        let blocks: Cow<'_, [Value]> = match message.get("content") {
            Some(Value::String(text)) => Cow::Owned(vec![json!({"type": "text", "text": text})]),
            Some(Value::Array(blocks)) => Cow::Borrowed(blocks.as_slice()),
            _ => {
                return Err(builder.malformed(
                    format!("{path}.content"),
                    "is neither a string nor an array",
                ))
            }
        };
        match role {
            "user" => user(builder, &blocks, &path)?,
            "assistant" => {
                let parts = assistant_parts(builder, &blocks, &path)?;
                builder.assistant(parts, &path)?;
            }
            other => {
                return Err(builder.unsupported(format!("{path}.role"), format!("role {other:?}")))
            }
        }
    }
    Ok(())
}

fn user(builder: &mut Builder<'_>, blocks: &[Value], path: &str) -> crate::Result<()> {
    let mut texts: Vec<(String, Extras)> = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        let block_path = format!("{path}.content[{index}]");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push((
                string_field(builder, block, "text", &block_path)?.to_string(),
                Extras::default(),
            )),
            Some("tool_result") => {
                if !texts.is_empty() {
                    builder.user(std::mem::take(&mut texts));
                }
                let call_id = string_field(builder, block, "tool_use_id", &block_path)?;
                let content = match block.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(parts)) => {
                        let mut text = String::new();
                        for (part_index, part) in parts.iter().enumerate() {
                            let part_path = format!("{block_path}.content[{part_index}]");
                            if part.get("type").and_then(Value::as_str) != Some("text") {
                                return Err(builder.unsupported(
                                    part_path,
                                    "a tool result part that is not text",
                                ));
                            }
                            text.push_str(string_field(builder, part, "text", &part_path)?);
                        }
                        text
                    }
                    Some(_) => {
                        return Err(builder.malformed(
                            format!("{block_path}.content"),
                            "is neither a string nor an array",
                        ))
                    }
                };
                let is_error = block
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                builder.result(CallRef::Id(call_id), content, is_error, None, &block_path)?;
            }
            other => {
                return Err(
                    builder.unsupported(block_path, format!("a user block of type {other:?}"))
                )
            }
        }
    }
    if !texts.is_empty() {
        builder.user(texts);
    }
    Ok(())
}

fn assistant_parts(
    builder: &Builder<'_>,
    blocks: &[Value],
    path: &str,
) -> crate::Result<Vec<Parsed>> {
    let mut parts = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        let block_path = format!("{path}.content[{index}]");
        let part = match block.get("type").and_then(Value::as_str) {
            Some("text") => Parsed::Text(
                string_field(builder, block, "text", &block_path)?.to_string(),
                Extras::default(),
            ),
            Some("thinking") => Parsed::Reasoning(
                Reasoning {
                    text: Some(string_field(builder, block, "thinking", &block_path)?.to_string()),
                    signature: Some(
                        string_field(builder, block, "signature", &block_path)?.to_string(),
                    ),
                    redacted: false,
                },
                Extras::default(),
            ),
            Some("redacted_thinking") => Parsed::Reasoning(
                Reasoning {
                    text: None,
                    signature: Some(string_field(builder, block, "data", &block_path)?.to_string()),
                    redacted: true,
                },
                Extras::default(),
            ),
            Some("tool_use") => Parsed::Call {
                id: Some(string_field(builder, block, "id", &block_path)?.to_string()),
                name: string_field(builder, block, "name", &block_path)?.to_string(),
                arguments: block
                    .get("input")
                    .filter(|input| !input.is_null())
                    .map(layout::arguments_string)
                    .unwrap_or_default(),
                extras: Extras::default(),
            },
            other => {
                return Err(builder
                    .unsupported(block_path, format!("an assistant block of type {other:?}")))
            }
        };
        parts.push(part);
    }
    Ok(parts)
}
