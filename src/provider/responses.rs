//! OpenAI Responses `input` items.
//!
//! | neutral | Responses item |
//! |---|---|
//! | system entry | `{"role": "system" or "developer", "content": text}`, in place |
//! | user entry | `{"role": "user", "content": text}` |
//! | assistant text | `{"role": "assistant", "content": text}`; with a recorded item id, the full `{"type": "message", "id", ...}` item |
//! | reasoning | `{"type": "reasoning", "id", "summary": [...], "encrypted_content": signature}`, only when the item id was recorded (the API requires it) |
//! | tool call | `{"type": "function_call", "call_id", "name", "arguments": string verbatim}` (+ `id` when recorded) |
//! | result | `{"type": "function_call_output", "call_id", "output": text}` |
//!
//! Responses has no error flag: a failed result's text is sent as its output.

use serde_json::{json, Map, Value};

use super::build::{message_list, optional_string, string_field, Builder, CallRef, Parsed};
use super::layout::{self, Extras, Piece};
use super::openai::{content_text, system_role};
use super::plan::{Plan, Step};
use super::{Provider, RenderOptions};
use crate::model::Reasoning;

/// Separator between summary parts joined into one reasoning text.
const SUMMARY_SEPARATOR: &str = "\n\n";

pub(crate) fn render(plan: &Plan<'_>, options: &RenderOptions) -> Vec<Value> {
    let mut items = Vec::new();
    for step in &plan.steps {
        match step {
            Step::System { text, entry } => items.push(json!({
                "role": system_role(*entry),
                "content": text,
            })),
            Step::User(entry) => items.push(json!({
                "role": "user",
                "content": entry.content.as_deref().unwrap_or_default(),
            })),
            Step::Assistant { entry, kept } => {
                let signature_allowed = layout::signature_allowed(entry, Provider::OpenAiResponses);
                let mut turn: Vec<Value> = Vec::new();
                for piece in layout::pieces(entry).0 {
                    match piece {
                        Piece::Reasoning(reasoning, extras) => {
                            if !options.include_reasoning || reasoning.redacted {
                                continue;
                            }
                            let Some(item_id) = &extras.item_id else {
                                continue;
                            };
                            let mut item = Map::new();
                            item.insert("type".into(), json!("reasoning"));
                            item.insert("id".into(), json!(item_id));
                            item.insert("summary".into(), summary(&reasoning, &extras));
                            if let Some(signature) =
                                reasoning.signature.as_ref().filter(|_| signature_allowed)
                            {
                                item.insert("encrypted_content".into(), json!(signature));
                            }
                            turn.push(Value::Object(item));
                        }
                        Piece::Text(text, extras) => {
                            if text.is_empty() {
                                continue;
                            }
                            turn.push(match &extras.item_id {
                                Some(item_id) => json!({
                                    "type": "message",
                                    "id": item_id,
                                    "role": "assistant",
                                    "status": "completed",
                                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                                }),
                                None => json!({"role": "assistant", "content": text}),
                            });
                        }
                        Piece::Call(call, extras) => {
                            if !kept.contains(call.call_id.as_str()) {
                                continue;
                            }
                            let mut item = Map::new();
                            item.insert("type".into(), json!("function_call"));
                            if let Some(item_id) = &extras.item_id {
                                item.insert("id".into(), json!(item_id));
                            }
                            item.insert("call_id".into(), json!(call.call_id));
                            item.insert("name".into(), json!(call.name));
                            item.insert("arguments".into(), json!(call.arguments));
                            turn.push(Value::Object(item));
                        }
                    }
                }
                // A reasoning item must be followed by the output it led to.
                while turn.last().is_some_and(is_reasoning) {
                    turn.pop();
                }
                items.extend(turn);
            }
            Step::Result(answer) => items.push(json!({
                "type": "function_call_output",
                "call_id": answer.call.call_id,
                "output": answer.content,
            })),
        }
    }
    items
}

fn is_reasoning(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) == Some("reasoning")
}

/// The summary parts: split at the recorded part lengths when they fit the
/// text, otherwise the whole text as one part (none when there is no text).
fn summary(reasoning: &Reasoning, extras: &Extras) -> Value {
    let text = reasoning.text.as_deref().unwrap_or_default();
    let part = |text: &str| json!({"type": "summary_text", "text": text});
    if let Some(parts) = extras
        .summary_bytes
        .as_ref()
        .and_then(|bytes| split_summary(text, bytes))
    {
        return Value::Array(parts.into_iter().map(part).collect());
    }
    if reasoning.text.is_none() {
        return json!([]);
    }
    json!([part(text)])
}

fn split_summary<'t>(text: &'t str, bytes: &[usize]) -> Option<Vec<&'t str>> {
    let mut parts = Vec::new();
    let mut offset = 0usize;
    for (index, length) in bytes.iter().enumerate() {
        if index > 0 {
            let separator_end = offset.checked_add(SUMMARY_SEPARATOR.len())?;
            if text.get(offset..separator_end)? != SUMMARY_SEPARATOR {
                return None;
            }
            offset = separator_end;
        }
        let end = offset.checked_add(*length)?;
        parts.push(text.get(offset..end)?);
        offset = end;
    }
    (offset == text.len() && !parts.is_empty()).then_some(parts)
}

pub(crate) fn to_entries(value: &Value, builder: &mut Builder<'_>) -> crate::Result<()> {
    if let Some(instructions) = value.get("instructions").and_then(Value::as_str) {
        builder.system(instructions.to_string(), None);
    }
    if let Some(Value::String(text)) = value.get("input") {
        builder.user(vec![(text.clone(), Extras::default())]);
        return Ok(());
    }
    let items = message_list(builder, value, "input")?;
    let mut turn: Vec<Parsed> = Vec::new();
    let mut turn_path = String::new();
    for (index, item) in items.iter().enumerate() {
        let path = format!("input[{index}]");
        let kind = match item.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            None if item.get("role").is_some() => "message",
            _ => return Err(builder.malformed(&path, "an item without `type`")),
        };
        let assistant_side = match kind {
            "message" => item.get("role").and_then(Value::as_str) == Some("assistant"),
            "reasoning" | "function_call" => true,
            _ => false,
        };
        if !assistant_side && !turn.is_empty() {
            builder.assistant(std::mem::take(&mut turn), &turn_path)?;
        }
        if assistant_side && turn.is_empty() {
            turn_path = path.clone();
        }
        match kind {
            "message" => {
                let role = string_field(builder, item, "role", &path)?;
                let text = content_text(builder, item, &path)?.unwrap_or_default();
                match role {
                    "assistant" => {
                        let extras = Extras {
                            item_id: optional_string(builder, item, "id", &path)?
                                .map(str::to_string),
                            ..Extras::default()
                        };
                        turn.push(Parsed::Text(text, extras));
                    }
                    "system" | "developer" => builder.system(text, Some(role)),
                    "user" => builder.user(vec![(text, Extras::default())]),
                    other => {
                        return Err(
                            builder.unsupported(format!("{path}.role"), format!("role {other:?}"))
                        )
                    }
                }
            }
            "reasoning" => turn.push(reasoning(builder, item, &path)?),
            "function_call" => {
                let arguments = match item.get("arguments") {
                    Some(Value::String(text)) => text.clone(),
                    None | Some(Value::Null) => String::new(),
                    Some(other) => layout::arguments_string(other),
                };
                turn.push(Parsed::Call {
                    id: Some(string_field(builder, item, "call_id", &path)?.to_string()),
                    name: string_field(builder, item, "name", &path)?.to_string(),
                    arguments,
                    extras: Extras {
                        item_id: optional_string(builder, item, "id", &path)?.map(str::to_string),
                        ..Extras::default()
                    },
                });
            }
            "function_call_output" => {
                let call_id = string_field(builder, item, "call_id", &path)?;
                let output = match item.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(_)) => content_text(
                        builder,
                        &json!({"content": item["output"]}),
                        &format!("{path}.output"),
                    )?
                    .unwrap_or_default(),
                    _ => return Err(builder.malformed(format!("{path}.output"), "is not a string")),
                };
                builder.result(CallRef::Id(call_id), output, false, None, &path)?;
            }
            other => return Err(builder.unsupported(path, format!("an item of type {other:?}"))),
        }
    }
    if !turn.is_empty() {
        builder.assistant(turn, &turn_path)?;
    }
    Ok(())
}

fn reasoning(builder: &Builder<'_>, item: &Value, path: &str) -> crate::Result<Parsed> {
    if let Some(Value::Array(content)) = item.get("content") {
        if !content.is_empty() {
            return Err(builder.unsupported(format!("{path}.content"), "raw reasoning content"));
        }
    }
    let mut texts = Vec::new();
    if let Some(summary) = item.get("summary") {
        let Value::Array(parts) = summary else {
            return Err(builder.malformed(format!("{path}.summary"), "is not an array"));
        };
        for (index, part) in parts.iter().enumerate() {
            texts.push(string_field(
                builder,
                part,
                "text",
                &format!("{path}.summary[{index}]"),
            )?);
        }
    }
    let extras = Extras {
        item_id: optional_string(builder, item, "id", path)?.map(str::to_string),
        summary_bytes: (texts.len() > 1).then(|| texts.iter().map(|text| text.len()).collect()),
        ..Extras::default()
    };
    let reasoning = Reasoning {
        text: (!texts.is_empty()).then(|| texts.join(SUMMARY_SEPARATOR)),
        signature: optional_string(builder, item, "encrypted_content", path)?.map(str::to_string),
        redacted: false,
    };
    Ok(Parsed::Reasoning(reasoning, extras))
}
