//! Ollama `/api/chat` `messages`.
//!
//! | neutral | Ollama |
//! |---|---|
//! | system entry | `{"role": "system", "content"}`, in place |
//! | user entry | `{"role": "user", "content"}` |
//! | assistant entry | `{"role": "assistant", "content": text or "", "thinking", "tool_calls"}` |
//! | tool call | `{"function": {"name", "arguments": object}}` (Ollama has no call ids) |
//! | result | `{"role": "tool", "content", "tool_name"}`, one per result, in call order |

use serde_json::{json, Map, Value};

use super::build::{message_list, optional_string, string_field, Builder, CallRef, Parsed};
use super::layout::{self, Extras};
use super::openai::reasoning_text;
use super::plan::{Plan, Step};
use super::{has_text, RenderOptions};
use crate::model::Reasoning;

pub(crate) fn render(plan: &Plan<'_>, options: &RenderOptions) -> Vec<Value> {
    let mut messages = Vec::new();
    for step in &plan.steps {
        match step {
            Step::System { text, .. } => messages.push(json!({"role": "system", "content": text})),
            Step::User(entry) => messages.push(json!({
                "role": "user",
                "content": entry.content.as_deref().unwrap_or_default(),
            })),
            Step::Assistant { entry, kept } => {
                let mut message = Map::new();
                message.insert("role".into(), json!("assistant"));
                let content = entry
                    .content
                    .as_deref()
                    .filter(|text| has_text(Some(text)))
                    .unwrap_or_default();
                message.insert("content".into(), json!(content));
                if options.include_reasoning {
                    if let Some(thinking) = reasoning_text(entry) {
                        message.insert("thinking".into(), json!(thinking));
                    }
                }
                let calls: Vec<Value> = entry
                    .tool_calls
                    .iter()
                    .filter(|call| kept.contains(call.call_id.as_str()))
                    .map(|call| {
                        json!({"function": {
                            "name": call.name,
                            "arguments": layout::arguments_object(&call.arguments),
                        }})
                    })
                    .collect();
                if !calls.is_empty() {
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                messages.push(Value::Object(message));
            }
            Step::Result(answer) => messages.push(json!({
                "role": "tool",
                "content": answer.content,
                "tool_name": answer.call.name,
            })),
        }
    }
    messages
}

pub(crate) fn to_entries(value: &Value, builder: &mut Builder<'_>) -> crate::Result<()> {
    let messages = message_list(builder, value, "messages")?;
    for (index, message) in messages.iter().enumerate() {
        let path = format!("messages[{index}]");
        if let Some(Value::Array(images)) = message.get("images") {
            if !images.is_empty() {
                return Err(builder.unsupported(format!("{path}.images"), "images"));
            }
        }
        let role = string_field(builder, message, "role", &path)?;
        let content = optional_string(builder, message, "content", &path)?
            .unwrap_or_default()
            .to_string();
        match role {
            "system" => builder.system(content, None),
            "user" => builder.user(vec![(content, Extras::default())]),
            "assistant" => {
                let mut parts = Vec::new();
                if let Some(thinking) = optional_string(builder, message, "thinking", &path)? {
                    parts.push(Parsed::Reasoning(
                        Reasoning {
                            text: Some(thinking.to_string()),
                            signature: None,
                            redacted: false,
                        },
                        Extras::default(),
                    ));
                }
                if !content.is_empty() {
                    parts.push(Parsed::Text(content, Extras::default()));
                }
                parts.extend(tool_calls(builder, message, &path)?);
                builder.assistant(parts, &path)?;
            }
            "tool" => {
                let name = match optional_string(builder, message, "tool_name", &path)? {
                    Some(name) => Some(name),
                    None => optional_string(builder, message, "name", &path)?,
                };
                let call = name.map_or(CallRef::Next, CallRef::Name);
                builder.result(call, content, false, name.map(str::to_string), &path)?;
            }
            other => {
                return Err(builder.unsupported(format!("{path}.role"), format!("role {other:?}")))
            }
        }
    }
    Ok(())
}

fn tool_calls(builder: &Builder<'_>, message: &Value, path: &str) -> crate::Result<Vec<Parsed>> {
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(calls)) => calls,
        Some(_) => return Err(builder.malformed(format!("{path}.tool_calls"), "is not an array")),
    };
    let mut parsed = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        let function_path = format!("{path}.tool_calls[{index}].function");
        let Some(function) = call.get("function") else {
            return Err(builder.malformed(&function_path, "is missing"));
        };
        let arguments = match function.get("arguments") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(other) => layout::arguments_string(other),
        };
        parsed.push(Parsed::Call {
            id: None,
            name: string_field(builder, function, "name", &function_path)?.to_string(),
            arguments,
            extras: Extras::default(),
        });
    }
    Ok(parsed)
}
