//! Building neutral entries from provider messages: sequences, turns, call
//! ids, result pairing and the part layout, shared by every provider.

use std::collections::HashSet;

use serde_json::Value;
use uuid::Uuid;

use crate::model::{ConversationEntry, Reasoning, Role, Timestamp, ToolCall, ToolStatus};

use super::layout::{self, Block, BlockRef, Extras};
use super::Provider;

/// One part of a provider's assistant message.
#[derive(Debug)]
pub(crate) enum Parsed {
    Reasoning(Reasoning, Extras),
    Text(String, Extras),
    Call {
        id: Option<String>,
        name: String,
        arguments: String,
        extras: Extras,
    },
}

/// Which call a result answers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CallRef<'v> {
    /// The call with this id (OpenAI, Anthropic, Gemini with ids).
    Id(&'v str),
    /// The first unanswered call with this name in the latest assistant
    /// entry (Gemini without ids, Ollama `tool_name`).
    Name(&'v str),
    /// The first unanswered call of the latest assistant entry (Ollama
    /// without `tool_name`).
    Next,
}

pub(crate) struct Builder<'e> {
    pub provider: Provider,
    evaluation_id: &'e str,
    next_sequence: u64,
    turn: u32,
    created_at: Timestamp,
    entries: Vec<ConversationEntry>,
    last_assistant: Option<usize>,
    answered: HashSet<String>,
}

impl<'e> Builder<'e> {
    pub fn new(
        provider: Provider,
        evaluation_id: &'e str,
        first_sequence: u64,
        created_at: Timestamp,
    ) -> Builder<'e> {
        Builder {
            provider,
            evaluation_id,
            next_sequence: first_sequence,
            turn: 0,
            created_at,
            entries: Vec::new(),
            last_assistant: None,
            answered: HashSet::new(),
        }
    }

    pub fn finish(self) -> Vec<ConversationEntry> {
        self.entries
    }

    /// A malformed-input error at `path`.
    pub fn malformed(&self, path: impl Into<String>, reason: impl Into<String>) -> crate::Error {
        crate::Error::ProviderMalformed {
            provider: self.provider,
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// An unsupported-content error at `path`.
    pub fn unsupported(&self, path: impl Into<String>, what: impl Into<String>) -> crate::Error {
        crate::Error::ProviderUnsupported {
            provider: self.provider,
            path: path.into(),
            what: what.into(),
        }
    }

    fn entry(&mut self, role: Role, content: Option<String>) -> ConversationEntry {
        let mut entry =
            ConversationEntry::new(self.evaluation_id, self.next_sequence, role, content);
        // Never wraps: a saturated sequence is refused by validation.
        self.next_sequence = self.next_sequence.saturating_add(1);
        entry.turn = self.turn;
        entry.created_at = self.created_at;
        entry
    }

    /// A system entry; `openai_role` keeps `developer`.
    pub fn system(&mut self, text: String, openai_role: Option<&str>) {
        let mut entry = self.entry(Role::System, Some(text));
        if let Some(role) = openai_role.filter(|role| *role != "system") {
            entry
                .metadata
                .insert(layout::OPENAI_ROLE_KEY.to_string(), role.to_string());
        }
        self.entries.push(entry);
    }

    /// A user entry made of text parts (kept apart in the layout when more
    /// than one).
    pub fn user(&mut self, texts: Vec<(String, Extras)>) {
        let content: String = texts.iter().map(|(text, _)| text.as_str()).collect();
        let blocks: Vec<Block> = texts
            .into_iter()
            .map(|(text, extras)| Block {
                what: BlockRef::Text(text.len()),
                extras,
            })
            .collect();
        let mut entry = self.entry(Role::User, Some(content));
        layout::store_blocks(&mut entry, &blocks);
        self.entries.push(entry);
    }

    /// An assistant entry from its parts, in order.
    pub fn assistant(&mut self, parts: Vec<Parsed>, path: &str) -> crate::Result<()> {
        self.turn = self.turn.saturating_add(1);
        let mut content: Option<String> = None;
        let mut reasoning: Vec<Reasoning> = Vec::new();
        let mut calls: Vec<ToolCall> = Vec::new();
        let mut blocks = Vec::new();
        for part in parts {
            match part {
                Parsed::Reasoning(block, extras) => {
                    blocks.push(Block {
                        what: BlockRef::Reasoning(reasoning.len()),
                        extras,
                    });
                    reasoning.push(block);
                }
                Parsed::Text(text, extras) => {
                    blocks.push(Block {
                        what: BlockRef::Text(text.len()),
                        extras,
                    });
                    content.get_or_insert_with(String::new).push_str(&text);
                }
                Parsed::Call {
                    id,
                    name,
                    arguments,
                    mut extras,
                } => {
                    let call_id = match id {
                        Some(id) => id,
                        None => {
                            extras.id_synthesized = true;
                            format!("call_{}", Uuid::new_v4().simple())
                        }
                    };
                    if calls.iter().any(|call| call.call_id == call_id) {
                        return Err(self.malformed(
                            path,
                            format!("tool call id {call_id:?} appears twice in one message"),
                        ));
                    }
                    blocks.push(Block {
                        what: BlockRef::Call(call_id.clone()),
                        extras,
                    });
                    calls.push(ToolCall {
                        call_id,
                        name,
                        arguments,
                        status: ToolStatus::Pending,
                        started_at: None,
                        ended_at: None,
                        error: None,
                    });
                }
            }
        }
        let mut entry = self.entry(Role::Assistant, content);
        entry.tool_calls = calls;
        let mut reasoning = reasoning.into_iter();
        entry.reasoning = reasoning.next();
        let more: Vec<Reasoning> = reasoning.collect();
        if !more.is_empty() {
            let json = serde_json::to_string(&more).unwrap_or_default();
            entry
                .metadata
                .insert(layout::REASONING_MORE_KEY.to_string(), json);
        }
        if entry.reasoning.is_some() {
            entry.metadata.insert(
                layout::REASONING_SOURCE_KEY.to_string(),
                self.provider.name().to_string(),
            );
        }
        layout::store_blocks(&mut entry, &blocks);
        self.last_assistant = Some(self.entries.len());
        self.entries.push(entry);
        Ok(())
    }

    /// A tool result answering `call`. A result naming an id the list does
    /// not hold is kept as is (the call may be in the store already); a
    /// result that can only be paired by name or position must find its call
    /// in the latest assistant entry.
    pub fn result(
        &mut self,
        call: CallRef<'_>,
        content: String,
        is_error: bool,
        tool_name: Option<String>,
        path: &str,
    ) -> crate::Result<&mut ConversationEntry> {
        let found = self.find_call(call);
        let (call_id, name) = match (found, call) {
            (Some((entry_index, call_index)), _) => {
                let created_at = self.created_at;
                let call = &mut self.entries[entry_index].tool_calls[call_index];
                call.status = if is_error {
                    ToolStatus::Failed
                } else {
                    ToolStatus::Completed
                };
                call.ended_at = Some(created_at);
                call.error = is_error.then(|| content.clone());
                self.answered.insert(call.call_id.clone());
                (call.call_id.clone(), Some(call.name.clone()))
            }
            (None, CallRef::Id(id)) => (id.to_string(), tool_name),
            (None, CallRef::Name(name)) => {
                return Err(self.malformed(
                    path,
                    format!("a result for tool {name:?} answers no unanswered call of the preceding assistant message"),
                ))
            }
            (None, CallRef::Next) => {
                return Err(self.malformed(
                    path,
                    "a tool result follows no assistant message with an unanswered call",
                ))
            }
        };
        let mut entry = self.entry(Role::Tool, Some(content));
        entry.tool_call_id = Some(call_id);
        entry.tool_name = name;
        entry.is_error = is_error;
        self.entries.push(entry);
        Ok(self.entries.last_mut().expect("just pushed"))
    }

    fn find_call(&self, call: CallRef<'_>) -> Option<(usize, usize)> {
        match call {
            CallRef::Id(id) => self
                .entries
                .iter()
                .enumerate()
                .rev()
                .find_map(|(at, entry)| {
                    entry
                        .tool_calls
                        .iter()
                        .position(|call| call.call_id == id && !self.answered.contains(id))
                        .map(|position| (at, position))
                }),
            CallRef::Name(name) => {
                let at = self.last_assistant?;
                self.entries[at]
                    .tool_calls
                    .iter()
                    .position(|call| call.name == name && !self.answered.contains(&call.call_id))
                    .map(|position| (at, position))
            }
            CallRef::Next => {
                let at = self.last_assistant?;
                self.entries[at]
                    .tool_calls
                    .iter()
                    .position(|call| !self.answered.contains(&call.call_id))
                    .map(|position| (at, position))
            }
        }
    }
}

/// The message list in `value`: the value itself when it is an array,
/// otherwise its `field`.
pub(crate) fn message_list<'v>(
    builder: &Builder<'_>,
    value: &'v Value,
    field: &str,
) -> crate::Result<&'v [Value]> {
    match value {
        Value::Array(items) => Ok(items),
        Value::Object(object) => match object.get(field) {
            Some(Value::Array(items)) => Ok(items),
            Some(_) => Err(builder.malformed(field, "is not an array")),
            None => Err(builder.malformed("$", format!("an object without `{field}`"))),
        },
        _ => Err(builder.malformed(
            "$",
            format!("expected the `{field}` array or a request body holding it"),
        )),
    }
}

/// `object[key]` as a string, or an error naming the path.
pub(crate) fn string_field<'v>(
    builder: &Builder<'_>,
    object: &'v Value,
    key: &str,
    path: &str,
) -> crate::Result<&'v str> {
    match object.get(key) {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(builder.malformed(format!("{path}.{key}"), "is not a string")),
        None => Err(builder.malformed(path, format!("has no `{key}`"))),
    }
}

/// An optional string field: absent or null is `None`.
pub(crate) fn optional_string<'v>(
    builder: &Builder<'_>,
    object: &'v Value,
    key: &str,
    path: &str,
) -> crate::Result<Option<&'v str>> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(builder.malformed(format!("{path}.{key}"), "is not a string")),
    }
}
