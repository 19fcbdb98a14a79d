//! What each provider's API rejects, as checkers over rendered requests.
//!
//! [`check`] holds a [`RenderedRequest`] to its provider's rules; the golden
//! tests and the property test (random conversations cut at random crash
//! points, both pending-call modes) call it on everything they render. Each
//! error names the message index and the rule broken.
//!
//! The rules, per provider:
//!
//! - OpenAI Chat ([`check_openai_chat`]): roles `system`, `developer`,
//!   `user`, `assistant`, `tool`; every tool message follows an assistant
//!   message whose `tool_calls` holds its id, contiguously; every call id is
//!   answered before the next non-tool message and before the end; call ids
//!   are unique; `tool_calls` is never empty; `content` is null only
//!   alongside `tool_calls`; `arguments` is a string; no key outside
//!   OpenAI's published message types (so no `reasoning_content`, which
//!   only an OpenAI-compatible dialect takes).
//! - OpenAI Responses ([`check_openai_responses`]): every `function_call`
//!   has exactly one `function_call_output` after it and every output has
//!   its call (`call_id`); a `reasoning` item has an `id` and a `summary`
//!   and is followed (after any further reasoning items) by an assistant
//!   message or a function call.
//! - Anthropic ([`check_anthropic`]): no `system` role in `messages` (the
//!   system prompt is the top-level `system`); the first message is `user`;
//!   roles alternate; no empty content or blank text block; `tool_use`,
//!   `thinking` and `redacted_thinking` only from the assistant, thinking
//!   with its signature; every `tool_use` (id `[A-Za-z0-9_-]+`, unique,
//!   `input` an object) is answered by a `tool_result` in the very next
//!   message, which is the user's; `tool_result` blocks come first in their
//!   message and answer a `tool_use` of the message before; `is_error` is a
//!   boolean.
//! - Gemini ([`check_gemini`]): roles `user` and `model` only, alternating,
//!   `user` first; the system prompt is `system_instruction`; each part holds
//!   one of `text`, `functionCall`, `functionResponse`; calls only from the
//!   model, with object `args`; the content after a model content with calls
//!   is the user's and starts with one `functionResponse` per call, in call
//!   order (same name, same id when the call has one), with an object
//!   `response`; no other `functionResponse` anywhere.
//! - Ollama ([`check_ollama`]): roles `system`, `user`, `assistant`, `tool`;
//!   `content` always a string; `tool_calls` with object `arguments`; the
//!   messages after an assistant message with calls are one `tool` message
//!   per call, in call order, each with the call's `tool_name`.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{Provider, RenderedRequest};

/// Checks a rendered request against its provider's rules.
pub fn check(provider: Provider, request: &RenderedRequest) -> Result<(), String> {
    if request.provider != provider {
        return Err(format!(
            "the request was rendered for {}, not {provider}",
            request.provider
        ));
    }
    let system = request.system.as_ref();
    if system.is_some() && provider.system_field().is_none() {
        return Err(format!(
            "{provider} has no top-level system field; its system prompt is a message"
        ));
    }
    match provider {
        Provider::OpenAiChat => check_openai_chat(&request.messages),
        Provider::OpenAiResponses => check_openai_responses(&request.messages),
        Provider::Anthropic => check_anthropic(system, &request.messages),
        Provider::Gemini => check_gemini(system, &request.messages),
        Provider::Ollama => check_ollama(&request.messages),
    }
}

/// How many tool calls the request sends (for tests that count calls).
pub fn tool_call_count(request: &RenderedRequest) -> usize {
    let messages = request.messages.iter();
    match request.provider {
        Provider::OpenAiChat | Provider::Ollama => messages
            .filter_map(|message| message.get("tool_calls")?.as_array())
            .map(Vec::len)
            .sum(),
        Provider::OpenAiResponses => messages
            .filter(|item| item_type(item) == Some("function_call"))
            .count(),
        Provider::Anthropic => messages
            .filter_map(|message| message.get("content")?.as_array())
            .flatten()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_use"))
            .count(),
        Provider::Gemini => messages
            .filter_map(|content| content.get("parts")?.as_array())
            .flatten()
            .filter(|part| part.get("functionCall").is_some())
            .count(),
    }
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

fn is_string(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::String(_)))
}

fn is_blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// OpenAI Chat Completions `messages`.
pub fn check_openai_chat(messages: &[Value]) -> Result<(), String> {
    let mut unanswered: Vec<String> = Vec::new();
    let mut ids = HashSet::new();
    for (index, message) in messages.iter().enumerate() {
        let at = format!("message {index}");
        let role = role(message).ok_or(format!("{at}: no role"))?;
        if role != "tool" && !unanswered.is_empty() {
            return Err(format!(
                "{at} ({role}) comes before tool call(s) {unanswered:?} are answered"
            ));
        }
        check_keys(message, openai_chat_keys(role), &at)?;
        match role {
            "system" | "developer" | "user" => {
                if !is_string(message.get("content")) {
                    return Err(format!("{at}: {role} content is not a string"));
                }
            }
            "assistant" => {
                let calls = match message.get("tool_calls") {
                    None => None,
                    Some(Value::Array(calls)) if calls.is_empty() => {
                        return Err(format!("{at}: empty tool_calls"))
                    }
                    Some(Value::Array(calls)) => Some(calls),
                    Some(_) => return Err(format!("{at}: tool_calls is not an array")),
                };
                match message.get("content") {
                    Some(Value::String(_)) => {}
                    Some(Value::Null) | None if calls.is_some() => {}
                    _ => return Err(format!("{at}: content null without tool_calls")),
                }
                for call in calls.into_iter().flatten() {
                    let id = call
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|id| !id.is_empty())
                        .ok_or(format!("{at}: a tool call without an id"))?;
                    if !ids.insert(id.to_string()) {
                        return Err(format!("{at}: tool call id {id:?} used twice"));
                    }
                    if call.get("type").and_then(Value::as_str) != Some("function") {
                        return Err(format!("{at}: tool call {id:?} is not of type function"));
                    }
                    let function = call.get("function");
                    if !is_string(function.and_then(|function| function.get("name")))
                        || !is_string(function.and_then(|function| function.get("arguments")))
                    {
                        return Err(format!(
                            "{at}: tool call {id:?} needs a string name and string arguments"
                        ));
                    }
                    unanswered.push(id.to_string());
                }
            }
            "tool" => {
                let id = message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or(format!("{at}: tool message without tool_call_id"))?;
                let Some(position) = unanswered.iter().position(|open| open == id) else {
                    return Err(format!(
                        "{at}: tool message for {id:?} does not follow an assistant message whose tool_calls holds it (or answers it twice)"
                    ));
                };
                unanswered.remove(position);
                if !is_string(message.get("content")) {
                    return Err(format!("{at}: tool content is not a string"));
                }
            }
            other => return Err(format!("{at}: unknown role {other:?}")),
        }
    }
    if !unanswered.is_empty() {
        return Err(format!("tool call(s) {unanswered:?} are never answered"));
    }
    Ok(())
}

/// The keys OpenAI's published message types allow, per role (its SDK's
/// `ChatCompletion*MessageParam`; unknown keys are rejected by strict
/// endpoints). `reasoning_content` is not among them.
fn openai_chat_keys(role: &str) -> &'static [&'static str] {
    match role {
        "system" | "developer" | "user" => &["role", "content", "name"],
        "assistant" => &[
            "role",
            "content",
            "name",
            "tool_calls",
            "refusal",
            "audio",
            "function_call",
        ],
        "tool" => &["role", "content", "tool_call_id"],
        _ => &[],
    }
}

/// Refuses a key of `value` outside `allowed` (an empty list allows all).
fn check_keys(value: &Value, allowed: &[&str], at: &str) -> Result<(), String> {
    if allowed.is_empty() {
        return Ok(());
    }
    if let Some(object) = value.as_object() {
        if let Some(key) = object.keys().find(|key| !allowed.contains(&key.as_str())) {
            return Err(format!("{at}: key {key:?} is not allowed here"));
        }
    }
    Ok(())
}

fn item_type(item: &Value) -> Option<&str> {
    match item.get("type") {
        Some(Value::String(kind)) => Some(kind),
        None if item.get("role").is_some() => Some("message"),
        _ => None,
    }
}

/// OpenAI Responses `input` items.
pub fn check_openai_responses(items: &[Value]) -> Result<(), String> {
    let mut calls: HashMap<String, usize> = HashMap::new();
    let mut outputs: HashSet<String> = HashSet::new();
    for (index, item) in items.iter().enumerate() {
        let at = format!("item {index}");
        match item_type(item).ok_or(format!("{at}: no type"))? {
            "message" => {
                let role = role(item).ok_or(format!("{at}: message without role"))?;
                if !["user", "assistant", "system", "developer"].contains(&role) {
                    return Err(format!("{at}: unknown role {role:?}"));
                }
                if !matches!(
                    item.get("content"),
                    Some(Value::String(_) | Value::Array(_))
                ) {
                    return Err(format!("{at}: content is neither a string nor an array"));
                }
            }
            "reasoning" => {
                if !is_string(item.get("id")) || !item.get("summary").is_some_and(Value::is_array) {
                    return Err(format!("{at}: reasoning item needs an id and a summary"));
                }
                let follower = items[index + 1..]
                    .iter()
                    .find(|next| item_type(next) != Some("reasoning"));
                let followed = follower.is_some_and(|next| match item_type(next) {
                    Some("function_call") => true,
                    Some("message") => role(next) == Some("assistant"),
                    _ => false,
                });
                if !followed {
                    return Err(format!(
                        "{at}: reasoning item not followed by the message or function call it led to"
                    ));
                }
            }
            "function_call" => {
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .ok_or(format!("{at}: function_call without call_id"))?;
                if calls.insert(call_id.to_string(), index).is_some() {
                    return Err(format!("{at}: call_id {call_id:?} used twice"));
                }
                if !is_string(item.get("name")) || !is_string(item.get("arguments")) {
                    return Err(format!(
                        "{at}: function_call needs a string name and string arguments"
                    ));
                }
            }
            "function_call_output" => {
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .ok_or(format!("{at}: function_call_output without call_id"))?;
                if !calls.contains_key(call_id) {
                    return Err(format!(
                        "{at}: function_call_output for {call_id:?} has no function_call before it"
                    ));
                }
                if !outputs.insert(call_id.to_string()) {
                    return Err(format!("{at}: second output for {call_id:?}"));
                }
                if !is_string(item.get("output")) {
                    return Err(format!("{at}: output is not a string"));
                }
            }
            other => return Err(format!("{at}: unknown item type {other:?}")),
        }
    }
    let mut missing: Vec<(&usize, &String)> = calls
        .iter()
        .filter(|(call_id, _)| !outputs.contains(*call_id))
        .map(|(call_id, index)| (index, call_id))
        .collect();
    missing.sort();
    if let Some((index, call_id)) = missing.first() {
        return Err(format!(
            "item {index}: function_call {call_id:?} has no function_call_output"
        ));
    }
    Ok(())
}

fn valid_tool_use_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Anthropic Messages `system` and `messages`.
pub fn check_anthropic(system: Option<&Value>, messages: &[Value]) -> Result<(), String> {
    check_anthropic_system(system)?;
    let mut tool_use_ids = HashSet::new();
    let mut awaiting: Vec<String> = Vec::new();
    let mut previous_role: Option<&str> = None;
    for (index, message) in messages.iter().enumerate() {
        let at = format!("message {index}");
        let role = anthropic_role(&at, index, message, previous_role)?;
        previous_role = Some(role);
        let blocks = anthropic_blocks(&at, message)?;
        let mut turn = AnthropicTurn {
            role,
            answering: std::mem::take(&mut awaiting),
            answered: HashSet::new(),
            results_done: false,
        };
        for (block_index, block) in blocks.iter().enumerate() {
            let at = format!("{at} block {block_index}");
            turn.check_block(&at, block, &mut tool_use_ids, &mut awaiting)?;
        }
        turn.check_all_answered(&at)?;
    }
    if !awaiting.is_empty() {
        return Err(format!(
            "the last message's tool_use {awaiting:?} is never answered"
        ));
    }
    Ok(())
}

/// Anthropic's top-level `system`: absent, a non-blank string, or non-blank
/// text blocks.
fn check_anthropic_system(system: Option<&Value>) -> Result<(), String> {
    match system {
        None => Ok(()),
        Some(Value::String(text)) if !is_blank(text) => Ok(()),
        Some(Value::Array(blocks)) if !blocks.is_empty() => {
            for block in blocks {
                let text = block.get("text").and_then(Value::as_str);
                if block.get("type").and_then(Value::as_str) != Some("text")
                    || text.is_none_or(is_blank)
                {
                    return Err("system: every block must be a non-blank text block".into());
                }
            }
            Ok(())
        }
        Some(_) => Err("system: must be a non-blank string or text blocks".into()),
    }
}

/// A message's role: user or assistant, the user's first, alternating.
fn anthropic_role<'v>(
    at: &str,
    index: usize,
    message: &'v Value,
    previous_role: Option<&str>,
) -> Result<&'v str, String> {
    let role = role(message).ok_or(format!("{at}: no role"))?;
    if role != "user" && role != "assistant" {
        return Err(format!(
            "{at}: role {role:?} (only user and assistant; the system prompt is top-level)"
        ));
    }
    if index == 0 && role != "user" {
        return Err(format!("{at}: the first message must be the user's"));
    }
    if previous_role == Some(role) {
        return Err(format!(
            "{at}: two {role} messages in a row (roles must alternate)"
        ));
    }
    Ok(role)
}

/// A message's content blocks (none for non-blank string content).
fn anthropic_blocks(at: &str, message: &Value) -> Result<Vec<Value>, String> {
    match message.get("content") {
        Some(Value::String(text)) => {
            if is_blank(text) {
                return Err(format!("{at}: blank content"));
            }
            Ok(Vec::new())
        }
        Some(Value::Array(blocks)) if !blocks.is_empty() => Ok(blocks.clone()),
        _ => Err(format!(
            "{at}: content must be a non-blank string or blocks"
        )),
    }
}

/// One Anthropic message being checked: its role, the `tool_use` ids of the
/// previous message it must answer, those it answered, and whether a block
/// other than `tool_result` came (results come first).
struct AnthropicTurn<'v> {
    role: &'v str,
    answering: Vec<String>,
    answered: HashSet<String>,
    results_done: bool,
}

impl AnthropicTurn<'_> {
    /// Checks one block; a `tool_use` is added to `tool_use_ids` (unique
    /// across the request) and to `awaiting` (answered by the next message).
    fn check_block(
        &mut self,
        at: &str,
        block: &Value,
        tool_use_ids: &mut HashSet<String>,
        awaiting: &mut Vec<String>,
    ) -> Result<(), String> {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let role = self.role;
        let only = |wanted: &str| {
            if role == wanted {
                Ok(())
            } else {
                Err(format!("{at}: {kind} block in a {role} message"))
            }
        };
        if kind != "tool_result" {
            self.results_done = true;
        }
        match kind {
            "text" => {
                if block
                    .get("text")
                    .and_then(Value::as_str)
                    .is_none_or(is_blank)
                {
                    return Err(format!("{at}: blank text block"));
                }
            }
            "thinking" => {
                only("assistant")?;
                let signature = block.get("signature").and_then(Value::as_str);
                if !is_string(block.get("thinking")) || signature.is_none_or(str::is_empty) {
                    return Err(format!("{at}: thinking needs its text and signature"));
                }
            }
            "redacted_thinking" => {
                only("assistant")?;
                if block
                    .get("data")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(format!("{at}: redacted_thinking needs its data"));
                }
            }
            "tool_use" => {
                only("assistant")?;
                awaiting.push(check_tool_use(at, block, tool_use_ids)?);
            }
            "tool_result" => {
                only("user")?;
                self.check_tool_result(at, block)?;
            }
            other => return Err(format!("{at}: unknown block type {other:?}")),
        }
        Ok(())
    }

    /// A `tool_result`: first in its message, answering a `tool_use` of the
    /// previous message once, with a boolean `is_error` and string or block
    /// content.
    fn check_tool_result(&mut self, at: &str, block: &Value) -> Result<(), String> {
        if self.results_done {
            return Err(format!(
                "{at}: tool_result after other content (results come first)"
            ));
        }
        let id = block
            .get("tool_use_id")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !self.answering.iter().any(|open| open == id) {
            return Err(format!(
                "{at}: tool_result for {id:?} answers no tool_use of the previous message"
            ));
        }
        if !self.answered.insert(id.to_string()) {
            return Err(format!("{at}: second tool_result for {id:?}"));
        }
        if !matches!(block.get("is_error"), None | Some(Value::Bool(_))) {
            return Err(format!("{at}: is_error is not a boolean"));
        }
        if !matches!(
            block.get("content"),
            None | Some(Value::String(_) | Value::Array(_))
        ) {
            return Err(format!(
                "{at}: tool_result content is neither a string nor blocks"
            ));
        }
        Ok(())
    }

    /// Every `tool_use` of the previous message is answered in this one.
    fn check_all_answered(&self, at: &str) -> Result<(), String> {
        let unanswered: Vec<&String> = self
            .answering
            .iter()
            .filter(|id| !self.answered.contains(*id))
            .collect();
        if !unanswered.is_empty() {
            return Err(format!(
                "{at}: tool_use {unanswered:?} of the previous message not answered here"
            ));
        }
        Ok(())
    }
}

/// A `tool_use` block: a valid id not used before, a name and an object
/// input. Returns its id.
fn check_tool_use(
    at: &str,
    block: &Value,
    tool_use_ids: &mut HashSet<String>,
) -> Result<String, String> {
    let id = block.get("id").and_then(Value::as_str).unwrap_or("");
    if !valid_tool_use_id(id) {
        return Err(format!("{at}: tool_use id {id:?} is not [A-Za-z0-9_-]+"));
    }
    if !tool_use_ids.insert(id.to_string()) {
        return Err(format!("{at}: tool_use id {id:?} used twice"));
    }
    if !is_string(block.get("name")) || !block.get("input").is_some_and(Value::is_object) {
        return Err(format!("{at}: tool_use needs a name and an object input"));
    }
    Ok(id.to_string())
}

/// A Gemini function call awaiting its response: name and id (if it has one).
type GeminiCall = (String, Option<String>);

/// Gemini `system_instruction` and `contents`.
pub fn check_gemini(system_instruction: Option<&Value>, contents: &[Value]) -> Result<(), String> {
    if let Some(system) = system_instruction {
        check_gemini_system(system)?;
    }
    let mut awaiting: Vec<GeminiCall> = Vec::new();
    let mut previous_role: Option<&str> = None;
    for (index, content) in contents.iter().enumerate() {
        let at = format!("content {index}");
        let role = gemini_role(&at, index, content, previous_role)?;
        previous_role = Some(role);
        let parts = content
            .get("parts")
            .and_then(Value::as_array)
            .filter(|parts| !parts.is_empty())
            .ok_or(format!("{at}: needs non-empty parts"))?;
        let answering = std::mem::take(&mut awaiting);
        let mut responses = 0usize;
        for (part_index, part) in parts.iter().enumerate() {
            let at = format!("{at} part {part_index}");
            match gemini_part_field(&at, part)? {
                "text" => check_gemini_text(&at, role, part)?,
                "functionCall" => awaiting.push(check_gemini_call(&at, role, part)?),
                _ => {
                    let first_parts = part_index == responses;
                    check_gemini_response(&at, role, part, first_parts, responses, &answering)?;
                    responses += 1;
                }
            }
        }
        if responses != answering.len() {
            return Err(format!(
                "{at}: {} function call(s) of the previous model content answered here, {} expected",
                responses,
                answering.len()
            ));
        }
    }
    if !awaiting.is_empty() {
        return Err(format!(
            "the last model content's calls {awaiting:?} are never answered"
        ));
    }
    Ok(())
}

/// `system_instruction`: non-empty parts, all text.
fn check_gemini_system(system: &Value) -> Result<(), String> {
    let parts = system
        .get("parts")
        .and_then(Value::as_array)
        .filter(|parts| !parts.is_empty())
        .ok_or("system_instruction: needs non-empty parts")?;
    if !parts.iter().all(|part| is_string(part.get("text"))) {
        return Err("system_instruction: every part must be text".into());
    }
    Ok(())
}

/// A content's role: user or model, the user's first, alternating.
fn gemini_role<'v>(
    at: &str,
    index: usize,
    content: &'v Value,
    previous_role: Option<&str>,
) -> Result<&'v str, String> {
    let role = role(content).ok_or(format!("{at}: no role"))?;
    if role != "user" && role != "model" {
        return Err(format!("{at}: role {role:?} (only user and model)"));
    }
    if index == 0 && role != "user" {
        return Err(format!("{at}: the first content must be the user's"));
    }
    if previous_role == Some(role) {
        return Err(format!("{at}: two {role} contents in a row"));
    }
    Ok(role)
}

/// The one field a part holds (`text`, `functionCall` or
/// `functionResponse`); its `thoughtSignature`, if any, is a string.
fn gemini_part_field(at: &str, part: &Value) -> Result<&'static str, String> {
    let fields = ["text", "functionCall", "functionResponse"]
        .into_iter()
        .filter(|field| part.get(field).is_some())
        .collect::<Vec<_>>();
    let [field] = fields.as_slice() else {
        return Err(format!(
            "{at}: a part holds exactly one of text, functionCall, functionResponse"
        ));
    };
    if !matches!(part.get("thoughtSignature"), None | Some(Value::String(_))) {
        return Err(format!("{at}: thoughtSignature is not a string"));
    }
    Ok(field)
}

/// A text part: a string, and no thought from the user.
fn check_gemini_text(at: &str, role: &str, part: &Value) -> Result<(), String> {
    if !is_string(part.get("text")) {
        return Err(format!("{at}: text is not a string"));
    }
    if role == "user" && part.get("thought").is_some() {
        return Err(format!("{at}: thought part from the user"));
    }
    Ok(())
}

/// A `functionCall` part: from the model, with a name and object `args`.
/// Returns the call, to be answered by the next content.
fn check_gemini_call(at: &str, role: &str, part: &Value) -> Result<GeminiCall, String> {
    if role != "model" {
        return Err(format!("{at}: functionCall from the user"));
    }
    let call = &part["functionCall"];
    let name = call
        .get("name")
        .and_then(Value::as_str)
        .ok_or(format!("{at}: functionCall without name"))?;
    if !matches!(call.get("args"), None | Some(Value::Object(_))) {
        return Err(format!("{at}: functionCall args is not an object"));
    }
    let id = call.get("id").and_then(Value::as_str).map(str::to_string);
    Ok((name.to_string(), id))
}

/// The `functionResponse` part answering call `responses` of the previous
/// model content: from the user, among the first parts of its content
/// (`first_parts`: only responses precede it), with the call's name and id
/// and an object `response`.
fn check_gemini_response(
    at: &str,
    role: &str,
    part: &Value,
    first_parts: bool,
    responses: usize,
    answering: &[GeminiCall],
) -> Result<(), String> {
    if role != "user" {
        return Err(format!("{at}: functionResponse from the model"));
    }
    if !first_parts {
        return Err(format!(
            "{at}: functionResponse after other parts (responses come first)"
        ));
    }
    let response = &part["functionResponse"];
    let Some((name, id)) = answering.get(responses) else {
        return Err(format!(
            "{at}: functionResponse answers no call of the previous model content"
        ));
    };
    if response.get("name").and_then(Value::as_str) != Some(name.as_str()) {
        return Err(format!("{at}: functionResponse name differs from call {responses} ({name:?}); responses go in call order"));
    }
    if response.get("id").and_then(Value::as_str) != id.as_deref() {
        return Err(format!(
            "{at}: functionResponse id differs from its call's ({id:?})"
        ));
    }
    if !response.get("response").is_some_and(Value::is_object) {
        return Err(format!("{at}: functionResponse response is not an object"));
    }
    Ok(())
}

/// Ollama `/api/chat` `messages`.
pub fn check_ollama(messages: &[Value]) -> Result<(), String> {
    let mut awaiting: Vec<String> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let at = format!("message {index}");
        let role = role(message).ok_or(format!("{at}: no role"))?;
        if !is_string(message.get("content")) {
            return Err(format!("{at}: content is not a string"));
        }
        if role != "tool" && !awaiting.is_empty() {
            return Err(format!(
                "{at} ({role}) comes before tool call(s) {awaiting:?} are answered"
            ));
        }
        match role {
            "system" | "user" => {}
            "assistant" => {
                let calls = match message.get("tool_calls") {
                    None => continue,
                    Some(Value::Array(calls)) if !calls.is_empty() => calls,
                    Some(_) => return Err(format!("{at}: tool_calls must be a non-empty array")),
                };
                for call in calls {
                    let function = call.get("function");
                    let name = function
                        .and_then(|function| function.get("name"))
                        .and_then(Value::as_str)
                        .ok_or(format!("{at}: a tool call without a function name"))?;
                    if !function
                        .and_then(|function| function.get("arguments"))
                        .is_some_and(Value::is_object)
                    {
                        return Err(format!(
                            "{at}: tool call {name:?} arguments is not an object"
                        ));
                    }
                    awaiting.push(name.to_string());
                }
            }
            "tool" => {
                let name = message
                    .get("tool_name")
                    .and_then(Value::as_str)
                    .ok_or(format!("{at}: tool message without tool_name"))?;
                if awaiting.first().map(String::as_str) != Some(name) {
                    return Err(format!(
                        "{at}: tool result for {name:?} where the next unanswered call is {:?}",
                        awaiting.first()
                    ));
                }
                awaiting.remove(0);
            }
            other => return Err(format!("{at}: unknown role {other:?}")),
        }
    }
    if !awaiting.is_empty() {
        return Err(format!("tool call(s) {awaiting:?} are never answered"));
    }
    Ok(())
}
