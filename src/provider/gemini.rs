//! Google Gemini `contents` and `system_instruction`.
//!
//! | neutral | Gemini |
//! |---|---|
//! | system entries | `system_instruction: {"parts": [{"text"}, ...]}` |
//! | user entry | `user` content of text parts |
//! | assistant entry | `model` content: thought, text and `functionCall` parts in recorded order |
//! | reasoning | `{"text", "thought": true, "thoughtSignature"}` |
//! | signature on a text or call part | `thoughtSignature` on that part (kept in the layout) |
//! | tool call | `{"functionCall": {"name", "args": object, "id"}}` (no `id` when it was generated) |
//! | results | one `user` content of `functionResponse` parts, in call order, first in that content: `{"name", "id", "response": {"output": text}}` or `{"error": text}` |
//!
//! Consecutive same-role contents are merged (roles alternate); a history
//! that starts with the model gets a leading user turn.
//!
//! Thought signatures: to_entries keeps a signature where it was — on a
//! thought part in the reasoning, on a text or call part in the layout. A
//! host recording entries itself may put one signature in
//! `reasoning.signature` with no reasoning text; it is echoed on the first
//! `functionCall` part, or on the last part when there is no call (where
//! Gemini puts it). A dropped call's signature moves the same way, so the
//! turn's first sent call keeps one. Signatures are echoed even with
//! `include_reasoning: false`, which only leaves out thought text: Gemini 3
//! rejects function calls whose signatures are missing.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::build::{message_list, optional_string, string_field, Builder, CallRef, Parsed};
use super::layout::{self, Extras, Piece};
use super::plan::{Answer, Plan, Step};
use super::{has_text, Provider, RenderOptions, LEADING_USER_TEXT};
use crate::model::{ConversationEntry, Reasoning};

const SIGNATURE: &str = "thoughtSignature";

pub(crate) fn render(plan: &Plan<'_>, options: &RenderOptions) -> (Vec<Value>, Option<Value>) {
    let mut system: Vec<Value> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut synthesized_ids: HashSet<&str> = HashSet::new();
    for step in &plan.steps {
        match step {
            Step::System { text, .. } => system.push(json!({"text": text})),
            Step::User(entry) => push(&mut turns, "user", user_parts(entry)),
            Step::Assistant { entry, kept } => {
                let parts = model_turn_parts(entry, kept, options, &mut synthesized_ids);
                push(&mut turns, "model", parts);
            }
            Step::Result(answer) => {
                let part = function_response(answer, &synthesized_ids);
                push(&mut turns, "user", vec![part]);
            }
        }
    }
    if turns.first().is_some_and(|(role, _)| *role == "model") {
        turns.insert(0, ("user", vec![json!({"text": LEADING_USER_TEXT})]));
    }
    let contents = turns
        .into_iter()
        .map(|(role, mut parts)| {
            // Function responses first in their content.
            parts.sort_by_key(|part| part.get("functionResponse").is_none());
            json!({"role": role, "parts": parts})
        })
        .collect();
    let system = (!system.is_empty()).then(|| json!({"parts": system}));
    (contents, system)
}

/// The text parts of a user entry.
fn user_parts(entry: &ConversationEntry) -> Vec<Value> {
    layout::pieces(entry)
        .0
        .into_iter()
        .filter_map(|piece| match piece {
            Piece::Text(text, _) if has_text(Some(text)) => Some(json!({"text": text})),
            _ => None,
        })
        .collect()
}

/// The parts of an assistant entry's `model` content, in recorded order:
/// thoughts, text, and its kept calls (a call with a generated id is added
/// to `synthesized_ids` and sent without one). Signatures with no part of
/// their own (no thought text sent, a dropped call) are attached after.
fn model_turn_parts<'a>(
    entry: &'a ConversationEntry,
    kept: &crate::conversation::HashSet<&str>,
    options: &RenderOptions,
    synthesized_ids: &mut HashSet<&'a str>,
) -> Vec<Value> {
    let signature_allowed = layout::signature_allowed(entry, Provider::Gemini);
    let mut parts: Vec<Value> = Vec::new();
    let mut floating: Vec<String> = Vec::new();
    for piece in layout::pieces(entry).0 {
        match piece {
            Piece::Reasoning(reasoning, _) => {
                let signature = reasoning.signature.clone().filter(|_| signature_allowed);
                match (&reasoning.text, reasoning.redacted) {
                    (_, true) => {}
                    (Some(text), false) if options.include_reasoning => {
                        parts.push(with_signature(
                            json!({"text": text, "thought": true}),
                            signature,
                        ));
                    }
                    (_, false) => floating.extend(signature),
                }
            }
            Piece::Text(text, extras) => {
                if text.is_empty() && extras.thought_signature.is_none() {
                    continue;
                }
                parts.push(with_signature(
                    json!({"text": text}),
                    extras.thought_signature,
                ));
            }
            Piece::Call(call, extras) => {
                if !kept.contains(call.call_id.as_str()) {
                    floating.extend(extras.thought_signature);
                    continue;
                }
                let mut function_call = Map::new();
                function_call.insert("name".into(), json!(call.name));
                function_call.insert(
                    "args".into(),
                    Value::Object(layout::arguments_object(&call.arguments)),
                );
                if extras.id_synthesized {
                    synthesized_ids.insert(call.call_id.as_str());
                } else {
                    function_call.insert("id".into(), json!(call.call_id));
                }
                parts.push(with_signature(
                    json!({"functionCall": Value::Object(function_call)}),
                    extras.thought_signature,
                ));
            }
        }
    }
    for signature in floating {
        attach_signature(&mut parts, signature);
    }
    parts
}

/// `part` (an object) with `thoughtSignature` set when there is one.
fn with_signature(mut part: Value, signature: Option<String>) -> Value {
    if let (Value::Object(object), Some(signature)) = (&mut part, signature) {
        object.insert(SIGNATURE.into(), json!(signature));
    }
    part
}

/// The `functionResponse` part answering a call (with the call's id unless
/// the id was generated).
fn function_response(answer: &Answer<'_>, synthesized_ids: &HashSet<&str>) -> Value {
    let mut function_response = Map::new();
    function_response.insert("name".into(), json!(answer.call.name));
    if !synthesized_ids.contains(answer.call.call_id.as_str()) {
        function_response.insert("id".into(), json!(answer.call.call_id));
    }
    function_response.insert("response".into(), response(answer));
    json!({"functionResponse": Value::Object(function_response)})
}

/// Puts a signature on the first call part without one, else on the last
/// part without one.
fn attach_signature(parts: &mut [Value], signature: String) {
    let free = |part: &Value| part.get(SIGNATURE).is_none();
    let target = match parts
        .iter()
        .position(|part| part.get("functionCall").is_some() && free(part))
    {
        Some(index) => Some(index),
        None => parts.iter().rposition(free),
    };
    if let Some(Value::Object(part)) = target.and_then(|index| parts.get_mut(index)) {
        part.insert(SIGNATURE.into(), json!(signature));
    }
}

fn response(answer: &Answer<'_>) -> Value {
    let verbatim = answer
        .entry
        .filter(|entry| {
            entry
                .metadata
                .get(layout::GEMINI_RESPONSE_KEY)
                .map(String::as_str)
                == Some("json")
        })
        .and_then(|_| serde_json::from_str::<Value>(&answer.content).ok())
        .filter(Value::is_object);
    match verbatim {
        Some(object) => object,
        None if answer.is_error => json!({"error": answer.content}),
        None => json!({"output": answer.content}),
    }
}

fn push(turns: &mut Vec<(&'static str, Vec<Value>)>, role: &'static str, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some((last, existing)) if *last == role => existing.extend(parts),
        _ => turns.push((role, parts)),
    }
}

pub(crate) fn to_entries(value: &Value, builder: &mut Builder<'_>) -> crate::Result<()> {
    let system = value
        .get("system_instruction")
        .or_else(|| value.get("systemInstruction"));
    if let Some(system) = system {
        for (index, part) in parts_of(builder, system, "system_instruction")?
            .iter()
            .enumerate()
        {
            let path = format!("system_instruction.parts[{index}]");
            let text = string_field(builder, part, "text", &path)?.to_string();
            builder.system(text, None);
        }
    }
    let contents = message_list(builder, value, "contents")?;
    for (index, content) in contents.iter().enumerate() {
        let path = format!("contents[{index}]");
        let role = optional_string(builder, content, "role", &path)?.unwrap_or("user");
        let parts = parts_of(builder, content, &path)?;
        match role {
            "user" | "function" => user(builder, parts, &path)?,
            "model" => {
                let parsed = model_parts(builder, parts, &path)?;
                builder.assistant(parsed, &path)?;
            }
            other => {
                return Err(builder.unsupported(format!("{path}.role"), format!("role {other:?}")))
            }
        }
    }
    Ok(())
}

fn parts_of<'v>(
    builder: &Builder<'_>,
    content: &'v Value,
    path: &str,
) -> crate::Result<&'v [Value]> {
    match content.get("parts") {
        Some(Value::Array(parts)) => Ok(parts),
        _ => Err(builder.malformed(format!("{path}.parts"), "is not an array")),
    }
}

fn signature(builder: &Builder<'_>, part: &Value, path: &str) -> crate::Result<Option<String>> {
    Ok(optional_string(builder, part, SIGNATURE, path)?.map(str::to_string))
}

fn user(builder: &mut Builder<'_>, parts: &[Value], path: &str) -> crate::Result<()> {
    let mut texts: Vec<(String, Extras)> = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        let part_path = format!("{path}.parts[{index}]");
        if let Some(text) = part.get("text") {
            let Value::String(text) = text else {
                return Err(builder.malformed(format!("{part_path}.text"), "is not a string"));
            };
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                return Err(builder.unsupported(part_path, "a thought part in a user content"));
            }
            texts.push((text.clone(), Extras::default()));
        } else if let Some(function_response) = part.get("functionResponse") {
            if !texts.is_empty() {
                builder.user(std::mem::take(&mut texts));
            }
            let response_path = format!("{part_path}.functionResponse");
            let name = string_field(builder, function_response, "name", &response_path)?;
            let id = optional_string(builder, function_response, "id", &response_path)?;
            let response = function_response.get("response").unwrap_or(&Value::Null);
            let (content, is_error, verbatim) = match response.as_object() {
                Some(object) if object.len() == 1 => match object.iter().next() {
                    Some((key, Value::String(text))) if key == "output" => {
                        (text.clone(), false, false)
                    }
                    Some((key, Value::String(text))) if key == "error" => {
                        (text.clone(), true, false)
                    }
                    _ => (response.to_string(), false, true),
                },
                Some(_) => (response.to_string(), false, true),
                None => {
                    return Err(
                        builder.malformed(format!("{response_path}.response"), "is not an object")
                    )
                }
            };
            let call = match id {
                Some(id) => CallRef::Id(id),
                None => CallRef::Name(name),
            };
            let entry =
                builder.result(call, content, is_error, Some(name.to_string()), &part_path)?;
            if verbatim {
                entry
                    .metadata
                    .insert(layout::GEMINI_RESPONSE_KEY.to_string(), "json".to_string());
            }
        } else {
            return Err(builder.unsupported(
                part_path,
                "a user part that is neither text nor functionResponse",
            ));
        }
    }
    if !texts.is_empty() {
        builder.user(texts);
    }
    Ok(())
}

fn model_parts(builder: &Builder<'_>, parts: &[Value], path: &str) -> crate::Result<Vec<Parsed>> {
    let mut parsed = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        let part_path = format!("{path}.parts[{index}]");
        let signature = signature(builder, part, &part_path)?;
        let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
        if thought {
            let text = optional_string(builder, part, "text", &part_path)?.unwrap_or_default();
            parsed.push(Parsed::Reasoning(
                Reasoning {
                    text: Some(text.to_string()),
                    signature,
                    redacted: false,
                },
                Extras::default(),
            ));
        } else if part.get("text").is_some() {
            let text = string_field(builder, part, "text", &part_path)?.to_string();
            parsed.push(Parsed::Text(
                text,
                Extras {
                    thought_signature: signature,
                    ..Extras::default()
                },
            ));
        } else if let Some(function_call) = part.get("functionCall") {
            let call_path = format!("{part_path}.functionCall");
            parsed.push(Parsed::Call {
                id: optional_string(builder, function_call, "id", &call_path)?.map(str::to_string),
                name: string_field(builder, function_call, "name", &call_path)?.to_string(),
                arguments: function_call
                    .get("args")
                    .filter(|args| !args.is_null())
                    .map(layout::arguments_string)
                    .unwrap_or_default(),
                extras: Extras {
                    thought_signature: signature,
                    ..Extras::default()
                },
            });
        } else {
            return Err(builder.unsupported(
                part_path,
                "a model part that is not text, thought or functionCall",
            ));
        }
    }
    Ok(parsed)
}
