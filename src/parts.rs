//! Parts-based messages (text parts and tool parts), converted to and from neutral entries
//! without loss.
//!
//! A [`PartsMessage`] (text parts and tool parts with status and output)
//! becomes one entry carrying the text and the tool calls, plus one `tool`
//! entry per tool part that has an output. The part ids and the byte length
//! of each text part are kept in `metadata["convlog.parts"]`, so
//! [`from_entries`] rebuilds the message exactly.

use serde::{Deserialize, Serialize};

use crate::model::{ConversationEntry, Role, Timestamp, ToolCall, ToolStatus};

/// Metadata key holding the part layout.
pub const PARTS_METADATA_KEY: &str = "convlog.parts";

/// One part of a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Text.
    Text {
        /// Part id.
        id: String,
        /// The text.
        text: String,
    },
    /// A tool invocation and, once it ran, its output.
    Tool {
        /// Part id.
        id: String,
        /// The call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// JSON-encoded input, verbatim.
        input: String,
        /// Life-cycle status.
        status: ToolStatus,
        /// The output (or error text when failed), once finished.
        output: Option<String>,
    },
}

/// A message made of parts: text parts and tool parts, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartsMessage {
    /// Who it is from.
    pub role: Role,
    /// Its parts, in order.
    pub parts: Vec<Part>,
    /// The model finished this message.
    pub finished: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Layout {
    Text { id: String, bytes: usize },
    Tool { id: String, call_id: String },
}

/// Converts a parts message into entries: the message entry (sequence
/// `sequence`), then one tool entry per tool output.
pub fn to_entries(
    message: &PartsMessage,
    evaluation_id: &str,
    sequence: u64,
    turn: u32,
    created_at: Timestamp,
) -> Vec<ConversationEntry> {
    let mut entry = ConversationEntry::new(evaluation_id, sequence, message.role, None);
    entry.turn = turn;
    entry.created_at = created_at;
    let mut text = String::new();
    let mut layout = Vec::new();
    let mut results = Vec::new();
    for part in &message.parts {
        match part {
            Part::Text {
                id,
                text: part_text,
            } => {
                text.push_str(part_text);
                layout.push(Layout::Text {
                    id: id.clone(),
                    bytes: part_text.len(),
                });
            }
            Part::Tool {
                id,
                call_id,
                tool,
                input,
                status,
                output,
            } => {
                entry.tool_calls.push(ToolCall {
                    call_id: call_id.clone(),
                    name: tool.clone(),
                    arguments: input.clone(),
                    status: *status,
                    started_at: None,
                    ended_at: None,
                    error: None,
                });
                layout.push(Layout::Tool {
                    id: id.clone(),
                    call_id: call_id.clone(),
                });
                if let Some(output) = output {
                    results.push((
                        call_id.clone(),
                        tool.clone(),
                        output.clone(),
                        *status == ToolStatus::Failed,
                    ));
                }
            }
        }
    }
    if layout
        .iter()
        .any(|item| matches!(item, Layout::Text { .. }))
    {
        entry.content = Some(text);
    }
    entry.finish_reason = message.finished.then(|| "stop".to_string());
    entry.metadata.insert(
        PARTS_METADATA_KEY.to_string(),
        serde_json::to_string(&layout).expect("layout serializes"),
    );
    let mut entries = vec![entry];
    for (offset, (call_id, tool, output, failed)) in results.into_iter().enumerate() {
        let mut result = ConversationEntry::new(
            evaluation_id,
            sequence + 1 + offset as u64,
            Role::Tool,
            Some(output),
        );
        result.turn = turn;
        result.created_at = created_at;
        result.tool_call_id = Some(call_id);
        result.tool_name = Some(tool);
        result.is_error = failed;
        entries.push(result);
    }
    entries
}

/// Rebuilds a parts message from its entry and the tool entries answering
/// its calls. `None` when the entry carries no part layout.
pub fn from_entries(
    entry: &ConversationEntry,
    results: &[ConversationEntry],
) -> Option<PartsMessage> {
    let layout: Vec<Layout> = serde_json::from_str(entry.metadata.get(PARTS_METADATA_KEY)?).ok()?;
    let text = entry.content.as_deref().unwrap_or_default();
    let mut offset = 0;
    let mut parts = Vec::new();
    for item in layout {
        match item {
            Layout::Text { id, bytes } => {
                let part_text = text.get(offset..offset + bytes)?.to_string();
                offset += bytes;
                parts.push(Part::Text {
                    id,
                    text: part_text,
                });
            }
            Layout::Tool { id, call_id } => {
                let call = entry
                    .tool_calls
                    .iter()
                    .find(|call| call.call_id == call_id)?;
                let output = results
                    .iter()
                    .find(|result| result.tool_call_id.as_deref() == Some(call_id.as_str()))
                    .and_then(|result| result.content.clone());
                parts.push(Part::Tool {
                    id,
                    call_id,
                    tool: call.name.clone(),
                    input: call.arguments.clone(),
                    status: call.status,
                    output,
                });
            }
        }
    }
    Some(PartsMessage {
        role: entry.role,
        parts,
        finished: entry.finish_reason.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parts_message_round_trips_through_entries() {
        let message = PartsMessage {
            role: Role::Assistant,
            parts: vec![
                Part::Text {
                    id: "text_002".into(),
                    text: "I'll create the file.\n".into(),
                },
                Part::Tool {
                    id: "tool_001".into(),
                    call_id: "call_1".into(),
                    tool: "write_file".into(),
                    input: "{\"path\":\"hello.py\"".into(),
                    status: ToolStatus::Completed,
                    output: Some("written".into()),
                },
                Part::Text {
                    id: "text_003".into(),
                    text: "Done.".into(),
                },
                Part::Tool {
                    id: "tool_002".into(),
                    call_id: "call_2".into(),
                    tool: "run".into(),
                    input: "{}".into(),
                    status: ToolStatus::Failed,
                    output: Some("exit 1".into()),
                },
                Part::Tool {
                    id: "tool_003".into(),
                    call_id: "call_3".into(),
                    tool: "run".into(),
                    input: "{}".into(),
                    status: ToolStatus::Pending,
                    output: None,
                },
            ],
            finished: true,
        };
        let entries = to_entries(&message, "e1", 4, 2, Timestamp(9));
        assert_eq!(entries.len(), 3, "one message entry and one per output");
        assert_eq!(
            entries[0].content.as_deref(),
            Some("I'll create the file.\nDone.")
        );
        assert_eq!(entries[0].tool_calls.len(), 3);
        assert!(entries[2].is_error);
        assert_eq!((entries[1].sequence, entries[2].sequence), (5, 6));
        let rebuilt = from_entries(&entries[0], &entries[1..]).unwrap();
        assert_eq!(rebuilt, message);
    }

    #[test]
    fn entries_without_a_layout_are_not_parts_messages() {
        let entry = ConversationEntry::new("e", 0, Role::User, Some("hi".into()));
        assert!(from_entries(&entry, &[]).is_none());
    }
}
