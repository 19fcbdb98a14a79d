//! The message-control message list (`docs/history.md`, "Message shapes")
//! and its conversion to and from neutral
//! entries.
//!
//! ```json
//! {"sender": "human", "message": "Hello!"}
//! {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "search", "tool_input": {"q": "x"}}
//! {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "Found it"}
//! ```
//!
//! To entries ([`to_entries`]): `human` → user, `system` → system, `ai` →
//! assistant. Tool calls become calls of an assistant entry: an `ai`
//! message directly followed by tool calls carries them, and consecutive
//! tool calls share one assistant entry (a repeated call id starts a new
//! one). `tool_input` becomes the call's `arguments` as compact JSON (a
//! string input is taken verbatim; a missing or null one is `{}`). A tool
//! response becomes a tool entry; its `tool_name` is the name of the call
//! it answers when that call is in the list.
//!
//! From entries ([`to_messages`]): an assistant entry gives an `ai` message
//! with its content (left out when it is empty and the entry has calls),
//! then one `tool_call` per call (`arguments` parsed as JSON; a string when
//! they are not JSON); a tool entry gives a `tool_response` (with
//! `"is_error": true` when the tool failed; that field is this crate's
//! addition and is left out when false). Reasoning, metadata and the other
//! neutral fields have no message-control form and are dropped.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::model::{ConversationEntry, Role, Timestamp, ToolCall, ToolStatus};

/// Who sent a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sender {
    /// The user.
    Human,
    /// The model.
    Ai,
    /// A system prompt.
    System,
}

/// `{"sender": ..., "message": ...}`: a human, AI or system message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who sent it.
    pub sender: Sender,
    /// The text.
    pub message: String,
}

/// `{"type": "tool_call", ...}`: the model calling a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallMessage {
    /// The call id its response refers to.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// The tool's parameters (an object; `null` when absent).
    #[serde(default)]
    pub tool_input: Value,
}

/// `{"type": "tool_response", ...}`: a tool's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResponseMessage {
    /// The call it answers.
    pub tool_call_id: String,
    /// The output.
    pub tool_output: String,
    /// The tool failed and the output is its error (convlog's addition).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// One message of a message-control message list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlMessage {
    /// A human, AI or system message.
    Chat(ChatMessage),
    /// A tool call.
    ToolCall(ToolCallMessage),
    /// A tool response.
    ToolResponse(ToolResponseMessage),
}

impl ControlMessage {
    /// A human message.
    pub fn human(text: impl Into<String>) -> ControlMessage {
        ControlMessage::chat(Sender::Human, text)
    }

    /// An AI message.
    pub fn ai(text: impl Into<String>) -> ControlMessage {
        ControlMessage::chat(Sender::Ai, text)
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> ControlMessage {
        ControlMessage::chat(Sender::System, text)
    }

    fn chat(sender: Sender, text: impl Into<String>) -> ControlMessage {
        ControlMessage::Chat(ChatMessage {
            sender,
            message: text.into(),
        })
    }

    /// A tool call.
    pub fn tool_call(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        tool_input: Value,
    ) -> ControlMessage {
        ControlMessage::ToolCall(ToolCallMessage {
            tool_call_id: call_id.into(),
            tool_name: tool_name.into(),
            tool_input,
        })
    }

    /// A tool response.
    pub fn tool_response(call_id: impl Into<String>, output: impl Into<String>) -> ControlMessage {
        ControlMessage::ToolResponse(ToolResponseMessage {
            tool_call_id: call_id.into(),
            tool_output: output.into(),
            is_error: false,
        })
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireRef<'a> {
    Chat(&'a ChatMessage),
    Tool(ToolWireRef<'a>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ToolWireRef<'a> {
    ToolCall(&'a ToolCallMessage),
    ToolResponse(&'a ToolResponseMessage),
}

impl Serialize for ControlMessage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ControlMessage::Chat(chat) => WireRef::Chat(chat),
            ControlMessage::ToolCall(call) => WireRef::Tool(ToolWireRef::ToolCall(call)),
            ControlMessage::ToolResponse(response) => {
                WireRef::Tool(ToolWireRef::ToolResponse(response))
            }
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ControlMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ControlMessage, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(deserializer)?;
        let Some(object) = value.as_object() else {
            return Err(D::Error::custom("a message must be a JSON object"));
        };
        let kind = object.get("type").cloned();
        // Unknown fields are refused (as `convlog append` refuses them), so a
        // misspelt field is not silently dropped.
        let known: &[&str] = match &kind {
            Some(Value::String(kind)) if kind == "tool_call" => {
                &["type", "tool_call_id", "tool_name", "tool_input"]
            }
            Some(Value::String(kind)) if kind == "tool_response" => {
                &["type", "tool_call_id", "tool_output", "is_error"]
            }
            None => &["sender", "message"],
            Some(_) => &[],
        };
        if let Some(unknown) = object
            .keys()
            .find(|key| !known.is_empty() && !known.contains(&key.as_str()))
        {
            let what = match &kind {
                Some(Value::String(kind)) => format!("a {kind} message"),
                _ => "a chat message".to_string(),
            };
            return Err(D::Error::custom(format!(
                "unknown field `{unknown}` in {what}, expected one of: {}",
                known.join(", ")
            )));
        }
        let parsed = match kind {
            Some(Value::String(kind)) if kind == "tool_call" => {
                serde_json::from_value(value).map(ControlMessage::ToolCall)
            }
            Some(Value::String(kind)) if kind == "tool_response" => {
                serde_json::from_value(value).map(ControlMessage::ToolResponse)
            }
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "unknown message type {other}: expected \"tool_call\" or \"tool_response\""
                )))
            }
            None if object.contains_key("sender") => {
                serde_json::from_value(value).map(ControlMessage::Chat)
            }
            None => {
                return Err(D::Error::custom(
                    "a message needs \"sender\" (human, ai, system) or \"type\" (tool_call, tool_response)",
                ))
            }
        };
        parsed.map_err(D::Error::custom)
    }
}

/// The neutral entries of `messages`, numbered in `evaluation_id` from
/// `first_sequence`, with fresh message ids and the current time (see the
/// module docs for the mapping).
pub fn to_entries(
    messages: &[ControlMessage],
    evaluation_id: &str,
    first_sequence: u64,
) -> Vec<ConversationEntry> {
    let now = Timestamp::now();
    let mut entries: Vec<ConversationEntry> = Vec::new();
    // Whether the last entry is an assistant entry that may take more calls.
    let mut open_assistant = false;
    let new_entry = |role: Role, content: Option<String>| {
        let mut entry = ConversationEntry::new(evaluation_id, 0, role, content);
        entry.created_at = now;
        entry
    };
    for message in messages {
        match message {
            ControlMessage::Chat(chat) => {
                let role = match chat.sender {
                    Sender::Human => Role::User,
                    Sender::Ai => Role::Assistant,
                    Sender::System => Role::System,
                };
                entries.push(new_entry(role, Some(chat.message.clone())));
                open_assistant = role == Role::Assistant;
            }
            ControlMessage::ToolCall(call) => {
                let call = ToolCall {
                    call_id: call.tool_call_id.clone(),
                    name: call.tool_name.clone(),
                    arguments: arguments_of(&call.tool_input),
                    status: ToolStatus::Pending,
                    started_at: None,
                    ended_at: None,
                    error: None,
                };
                let joins = open_assistant
                    && entries.last().is_some_and(|last| {
                        last.tool_calls
                            .iter()
                            .all(|existing| existing.call_id != call.call_id)
                    });
                if !joins {
                    entries.push(new_entry(Role::Assistant, None));
                }
                let last = entries
                    .last_mut()
                    .expect("an assistant entry was just ensured");
                last.finish_reason = Some("tool_calls".to_string());
                last.tool_calls.push(call);
                open_assistant = true;
            }
            ControlMessage::ToolResponse(response) => {
                let tool_name = entries
                    .iter()
                    .rev()
                    .flat_map(|entry| entry.tool_calls.iter())
                    .find(|call| call.call_id == response.tool_call_id)
                    .map(|call| call.name.clone());
                let mut entry = new_entry(Role::Tool, Some(response.tool_output.clone()));
                entry.tool_call_id = Some(response.tool_call_id.clone());
                entry.tool_name = tool_name;
                entry.is_error = response.is_error;
                entries.push(entry);
                open_assistant = false;
            }
        }
    }
    for (entry, sequence) in entries.iter_mut().zip(first_sequence..) {
        entry.sequence = sequence;
    }
    entries
}

fn arguments_of(input: &Value) -> String {
    match input {
        Value::Null => "{}".to_string(),
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// The message-control messages for `entries` (see the module docs for the
/// mapping).
pub fn to_messages(entries: &[ConversationEntry]) -> Vec<ControlMessage> {
    let mut messages = Vec::with_capacity(entries.len());
    for entry in entries {
        match entry.role {
            Role::User => messages.push(ControlMessage::human(text_of(entry))),
            Role::System => messages.push(ControlMessage::system(text_of(entry))),
            Role::Assistant => {
                let empty = entry.content.as_deref().is_none_or(str::is_empty);
                if !empty || entry.tool_calls.is_empty() {
                    messages.push(ControlMessage::ai(text_of(entry)));
                }
                for call in &entry.tool_calls {
                    let input = serde_json::from_str(&call.arguments)
                        .unwrap_or_else(|_| Value::String(call.arguments.clone()));
                    messages.push(ControlMessage::tool_call(&call.call_id, &call.name, input));
                }
            }
            Role::Tool => messages.push(ControlMessage::ToolResponse(ToolResponseMessage {
                tool_call_id: entry.tool_call_id.clone().unwrap_or_default(),
                tool_output: text_of(entry),
                is_error: entry.is_error,
            })),
        }
    }
    messages
}

fn text_of(entry: &ConversationEntry) -> String {
    entry.content.clone().unwrap_or_default()
}
