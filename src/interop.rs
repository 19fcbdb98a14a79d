//! Snapshot JSON: a conversation as a session snapshot of "inner messages",
//! and back.
//!
//! Session-based agent frameworks persist a conversation as a snapshot
//! document: `{"version": "1", "created_at": ..., "slices": [{"slice_type":
//! "module:Type", "item_type": "module:Type", "items": [...]}]}`, one item
//! per message (`role`, `content`, `evaluation_id`, `sequence`,
//! `tool_calls` of `call_id`/`name`/`arguments`/`status`, `tool_call_id`,
//! `tool_name`, `turn`, `prompt_ns`, `prompt_key`, `created_at`,
//! `message_id`). [`export_json`] writes a conversation in that shape;
//! [`import`] records such a document into a store as one atomic batch, so a
//! host built on that session model can restore from convlog and convlog
//! from it. What convlog holds beyond the documented fields (a `running`
//! status, call times and errors, reasoning, `is_error`, `finish_reason`,
//! metadata, absent content) goes in one extension object per item,
//! `"convlog"`, so a convlog → JSON → convlog round trip gives the same
//! entries; [`ExportOptions::documented_only`] leaves it out for readers that
//! refuse unknown keys. `docs/interop.md` gives the shape field by field, the
//! id mapping and the import rules.
//!
//! ```
//! use convlog::interop::{self, ExportOptions, ImportOptions};
//! use convlog::{ConversationEntry, Store, StoreOptions, ToolCall};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path().join("a"), StoreOptions::default())?;
//! let ask = ConversationEntry::assistant_calling("eval-1", 1, [ToolCall::new("c1", "search", "{}")]);
//! store.append(&[
//!     ConversationEntry::system("eval-1", 0, "You search.").recorded_in("trip"),
//!     ask.with_turn(1).recorded_in("trip"),
//! ])?;
//! let slice = store.conversation("trip")?;
//! let json = interop::slice_to_json(&slice, &ExportOptions::default())?;
//!
//! let other = Store::open(dir.path().join("b"), StoreOptions::default())?;
//! let report = interop::import(&other, &json, &ImportOptions::default())?;
//! assert_eq!((report.conversation_id.as_str(), report.entries), ("trip", 2));
//! let copied = other.conversation("trip")?;
//! assert!(copied.entries().eq(slice.entries()));
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::conversation::{fold, ConversationSlice};
use crate::error::Error;
use crate::log::{Lsn, BATCH_EVENTS_MAX};
use crate::model::{
    ConversationEntry, Event, MessagesReplaced, Reasoning, Role, Timestamp, ToolCall, ToolStatus,
    ToolStatusChanged, ID_BYTES_MAX, SEQUENCE_MAX, TURN_MAX,
};
use crate::store::{AppendOptions, Expect, Store};

/// The snapshot format version written and read.
pub const SNAPSHOT_VERSION: &str = "1";
/// The default `slice_type` and `item_type` of exported documents.
pub const DEFAULT_TYPE: &str = "convlog.interop:InnerMessage";
/// The type name (after the last `:`) an importer looks for when no item
/// type is configured: any slice whose `item_type` ends in `:InnerMessage`.
pub const ITEM_TYPE_NAME: &str = "InnerMessage";
/// The key of convlog's extension object, on the document and on each item.
pub const EXTENSION_KEY: &str = "convlog";
/// Largest document [`plan_import`] reads, in bytes (a log batch holds at
/// most `BATCH_BYTES_MAX`, 64 MiB, anyway).
pub const DOCUMENT_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Most items one document may hold (an import is one atomic batch; with
/// its status events it must stay under `BATCH_EVENTS_MAX`).
pub const ITEMS_MAX: usize = 16_384;
/// The namespace of the name-based (v5) UUIDs given to items without a
/// `message_id`: the name is `"{evaluation_id}\n{sequence}\n{n}"`, `n`
/// counting earlier items of the document with the same evaluation and
/// sequence (0 for the first). Importing the same document twice gives the
/// same ids, so a merge import records nothing twice.
pub const MESSAGE_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6f3b_71c4_2e46_4e7f_9c00_45c5_ffed_f10e);

/// What is wrong with a document, and where: `path` names the field
/// (`slices[0].items[3].tool_calls[1].status`), empty for the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError {
    /// The field at fault, as a JSON path from the document's root.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

impl SnapshotError {
    fn new(path: impl Into<String>, reason: impl Into<String>) -> SnapshotError {
        SnapshotError {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(formatter, "snapshot document: {}", self.reason)
        } else {
            write!(
                formatter,
                "snapshot document, {}: {}",
                self.path, self.reason
            )
        }
    }
}

impl std::error::Error for SnapshotError {}

/// How [`export_json`] writes a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    /// The slice's `slice_type` (default [`DEFAULT_TYPE`]).
    pub slice_type: String,
    /// The slice's `item_type` (default [`DEFAULT_TYPE`]).
    pub item_type: String,
    /// Write the `"convlog"` extension objects (default true). Without
    /// them the document holds only the documented fields, and an import
    /// of it loses what only the extension says (`docs/interop.md`).
    pub extensions: bool,
    /// The document's `created_at` (default: the time of the export).
    pub created_at: Option<Timestamp>,
}

impl Default for ExportOptions {
    fn default() -> ExportOptions {
        ExportOptions {
            slice_type: DEFAULT_TYPE.to_string(),
            item_type: DEFAULT_TYPE.to_string(),
            extensions: true,
            created_at: None,
        }
    }
}

impl ExportOptions {
    /// The defaults.
    pub fn new() -> ExportOptions {
        ExportOptions::default()
    }

    /// `name` as both the `slice_type` and the `item_type` (the host's
    /// `module:Type` of its message class).
    #[must_use]
    pub fn type_name(mut self, name: impl Into<String>) -> ExportOptions {
        self.slice_type = name.into();
        self.item_type = self.slice_type.clone();
        self
    }

    /// Only the documented fields: no `"convlog"` extension objects.
    #[must_use]
    pub fn documented_only(mut self) -> ExportOptions {
        self.extensions = false;
        self
    }

    /// `at` as the document's `created_at`.
    #[must_use]
    pub fn created_at(mut self, at: Timestamp) -> ExportOptions {
        self.created_at = Some(at);
        self
    }
}

/// What the extension of an item holds: the exact convlog value of every
/// field the documented ones cannot say (present only when it differs from
/// what the import rules derive from the documented fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemExtension {
    /// The exact content: `null` for none, `""` for an empty one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    content: Option<Option<String>>,
    /// The exact prompt namespace (`""` when it is present and empty).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    prompt_ns: Option<Option<String>>,
    /// The exact prompt key (`""` when it is present and empty).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    prompt_key: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    is_error: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    metadata: BTreeMap<String, String>,
    /// The exact state of each call that is not plainly pending (every
    /// finished one: without it the import rules for other hosts' documents
    /// would apply, which derive times and `is_error`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<CallExtension>,
}

/// A call's exact state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallExtension {
    call_id: String,
    status: ToolStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The document-level extension.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentExtension {
    /// The conversation the document was exported from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conversation_id: Option<String>,
}

/// A field that is there (even as `null`) is `Some`; a missing one is
/// `None` through `#[serde(default)]`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

#[derive(Serialize)]
struct DocumentOut<'a> {
    version: &'static str,
    created_at: Timestamp,
    slices: [SliceOut<'a>; 1],
    #[serde(rename = "convlog", skip_serializing_if = "Option::is_none")]
    extension: Option<DocumentExtension>,
}

#[derive(Serialize)]
struct SliceOut<'a> {
    slice_type: &'a str,
    item_type: &'a str,
    items: Vec<ItemOut<'a>>,
}

#[derive(Serialize)]
struct ItemOut<'a> {
    role: Role,
    content: &'a str,
    evaluation_id: &'a str,
    sequence: u64,
    tool_calls: Vec<CallOut<'a>>,
    tool_call_id: Option<&'a str>,
    tool_name: Option<&'a str>,
    turn: u32,
    prompt_ns: &'a str,
    prompt_key: &'a str,
    created_at: Timestamp,
    message_id: Uuid,
    #[serde(rename = "convlog", skip_serializing_if = "Option::is_none")]
    extension: Option<ItemExtension>,
}

#[derive(Serialize)]
struct CallOut<'a> {
    call_id: &'a str,
    name: &'a str,
    arguments: &'a str,
    status: &'static str,
}

/// The documented status of a call: the documents know `pending`,
/// `completed` and `failed`; a `running` call is `pending` there (not
/// finished: a resume runs it again).
fn documented_status(status: ToolStatus) -> &'static str {
    match status {
        ToolStatus::Pending | ToolStatus::Running => "pending",
        ToolStatus::Completed => "completed",
        ToolStatus::Failed => "failed",
    }
}

/// What the import rules read from a documented `content` alone: `""` on
/// an assistant item is no text (the documents write `content or ""`).
fn content_from_documented(role: Role, content: &str) -> Option<String> {
    (!(content.is_empty() && role == Role::Assistant)).then(|| content.to_string())
}

/// What the import rules read from a documented prompt part alone.
fn prompt_from_documented(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

/// The extension of `entry`: the exact value of each field the documented
/// ones do not carry; `None` when there is nothing to add.
fn extension_of(entry: &ConversationEntry) -> Option<ItemExtension> {
    let documented_content = entry.content.as_deref().unwrap_or("");
    let exact_prompt = |value: &Option<String>| {
        (prompt_from_documented(value.as_deref().unwrap_or("")) != *value).then(|| value.clone())
    };
    let extension = ItemExtension {
        content: (content_from_documented(entry.role, documented_content) != entry.content)
            .then(|| entry.content.clone()),
        prompt_ns: exact_prompt(&entry.prompt_ns),
        prompt_key: exact_prompt(&entry.prompt_key),
        reasoning: entry.reasoning.clone(),
        is_error: entry.is_error,
        finish_reason: entry.finish_reason.clone(),
        metadata: entry.metadata.clone(),
        tool_calls: entry
            .tool_calls
            .iter()
            .filter(|call| {
                call.status != ToolStatus::Pending
                    || call.started_at.is_some()
                    || call.ended_at.is_some()
                    || call.error.is_some()
            })
            .map(|call| CallExtension {
                call_id: call.call_id.clone(),
                status: call.status,
                started_at: call.started_at,
                ended_at: call.ended_at,
                error: call.error.clone(),
            })
            .collect(),
    };
    (extension != ItemExtension::default()).then_some(extension)
}

/// `entries` of `conversation_id` (in conversation order) as a snapshot
/// document, pretty-printed. Fails only on a time before 1970, which has
/// no RFC 3339 form (the error names the entry).
pub fn export_json<'a>(
    conversation_id: &str,
    entries: impl IntoIterator<Item = &'a ConversationEntry>,
    options: &ExportOptions,
) -> Result<String, SnapshotError> {
    let mut items = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let path = format!("slices[0].items[{index}]");
        let times = std::iter::once(entry.created_at).chain(
            entry
                .tool_calls
                .iter()
                .flat_map(|call| call.started_at.into_iter().chain(call.ended_at)),
        );
        if let Some(time) = times.into_iter().find(|time| time.0 < 0) {
            return Err(SnapshotError::new(
                path,
                format!(
                    "message {} has a time before 1970 ({time}), which has no RFC 3339 form",
                    entry.message_id
                ),
            ));
        }
        items.push(ItemOut {
            role: entry.role,
            content: entry.content.as_deref().unwrap_or(""),
            evaluation_id: &entry.evaluation_id,
            sequence: entry.sequence,
            tool_calls: entry
                .tool_calls
                .iter()
                .map(|call| CallOut {
                    call_id: &call.call_id,
                    name: &call.name,
                    arguments: &call.arguments,
                    status: documented_status(call.status),
                })
                .collect(),
            tool_call_id: entry.tool_call_id.as_deref(),
            tool_name: entry.tool_name.as_deref(),
            turn: entry.turn,
            prompt_ns: entry.prompt_ns.as_deref().unwrap_or(""),
            prompt_key: entry.prompt_key.as_deref().unwrap_or(""),
            created_at: entry.created_at,
            message_id: entry.message_id,
            extension: options.extensions.then(|| extension_of(entry)).flatten(),
        });
    }
    let document = DocumentOut {
        version: SNAPSHOT_VERSION,
        created_at: options.created_at.unwrap_or_else(Timestamp::now),
        slices: [SliceOut {
            slice_type: &options.slice_type,
            item_type: &options.item_type,
            items,
        }],
        extension: options.extensions.then(|| DocumentExtension {
            conversation_id: Some(conversation_id.to_string()),
        }),
    };
    let mut text = serde_json::to_string_pretty(&document)
        .map_err(|error| SnapshotError::new("", format!("has no JSON form: {error}")))?;
    text.push('\n');
    Ok(text)
}

/// A conversation slice (every entry, with its calls' folded statuses) as
/// a snapshot document; [`export_json`] of its entries.
pub fn slice_to_json(
    slice: &ConversationSlice,
    options: &ExportOptions,
) -> Result<String, SnapshotError> {
    export_json(slice.conversation_id(), slice.entries(), options)
}

/// What an import does when the conversation already has events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImportMode {
    /// Refuse ([`ImportError::NotEmpty`]): the default.
    #[default]
    New,
    /// Add the document's messages to the conversation; messages whose
    /// `message_id` it already holds are not recorded again.
    Merge,
    /// Replace every message of the conversation with the document's (one
    /// `messages_replaced` event with no entries opens the batch).
    Replace,
}

/// How [`plan_import`] and [`import`] read a document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// The conversation to record into (default: the document's
    /// `convlog.conversation_id`; one of the two is needed).
    pub conversation_id: Option<String>,
    /// The `item_type` of the slice holding the messages (default: the one
    /// slice whose `item_type` ends in `:InnerMessage`).
    pub item_type: Option<String>,
    /// What to do with a conversation that has events.
    pub mode: ImportMode,
}

impl ImportOptions {
    /// The defaults.
    pub fn new() -> ImportOptions {
        ImportOptions::default()
    }

    /// Record into `conversation_id`.
    #[must_use]
    pub fn conversation(mut self, conversation_id: impl Into<String>) -> ImportOptions {
        self.conversation_id = Some(conversation_id.into());
        self
    }

    /// Read the slice whose `item_type` is exactly `item_type`.
    #[must_use]
    pub fn item_type(mut self, item_type: impl Into<String>) -> ImportOptions {
        self.item_type = Some(item_type.into());
        self
    }

    /// What to do with a conversation that has events.
    #[must_use]
    pub fn mode(mut self, mode: ImportMode) -> ImportOptions {
        self.mode = mode;
        self
    }
}

/// The events an import appends, and what they hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportPlan {
    /// The conversation they are recorded in.
    pub conversation_id: String,
    /// The batch, in order.
    pub events: Vec<Event>,
    /// `conversation_recorded` events (one per item).
    pub entries: usize,
    /// `tool_status` events.
    pub status_events: usize,
    /// Calls whose state could not be reached by status events (they are
    /// recorded in their assistant entry as they are).
    pub calls_recorded_in_entry: usize,
    /// The evaluations, in the order they are recorded.
    pub evaluations: Vec<String>,
    /// Items that had no `message_id` (given a name-based UUID).
    pub generated_message_ids: usize,
}

/// What [`import`] recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// The conversation.
    pub conversation_id: String,
    /// The mode used.
    pub mode: ImportMode,
    /// Messages recorded (a merge's already-held ones are recorded again
    /// as no-ops and counted here).
    pub entries: usize,
    /// Tool status events recorded.
    pub status_events: usize,
    /// Calls recorded with their state in the entry.
    pub calls_recorded_in_entry: usize,
    /// The evaluations, in order.
    pub evaluations: Vec<String>,
    /// Items given a name-based message id.
    pub generated_message_ids: usize,
    /// The LSNs of the batch.
    pub lsns: Range<Lsn>,
}

/// Why an import recorded nothing.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The document is malformed or breaks a limit (path and reason).
    #[error("{0}")]
    Document(#[from] SnapshotError),
    /// The conversation already has events and the mode is
    /// [`ImportMode::New`].
    #[error("conversation {conversation_id:?} already holds {entries} message(s); import into a new conversation, or merge or replace explicitly")]
    NotEmpty {
        /// The conversation.
        conversation_id: String,
        /// Its messages.
        entries: usize,
    },
    /// The store refused the batch (nothing was appended).
    #[error(transparent)]
    Store(#[from] Error),
}

/// One item read from the document.
struct Item {
    /// Its index in the document's items.
    index: usize,
    entry: ConversationEntry,
    /// The documented status of each call.
    statuses: Vec<ToolStatus>,
    /// The exact state of each call, from the extension.
    exact: Vec<Option<CallExtension>>,
    /// Whether the item had an extension object.
    extended: bool,
}

fn item_path(slice: usize, index: usize) -> String {
    format!("slices[{slice}].items[{index}]")
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A string field; `None` when it is missing or `null`.
fn optional_str<'a>(
    object: &'a Map<String, Value>,
    field: &str,
    path: &str,
) -> Result<Option<&'a str>, SnapshotError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(SnapshotError::new(
            format!("{path}.{field}"),
            format!("must be a string, is {}", type_name(other)),
        )),
    }
}

fn required_str<'a>(
    object: &'a Map<String, Value>,
    field: &str,
    path: &str,
) -> Result<&'a str, SnapshotError> {
    optional_str(object, field, path)?
        .ok_or_else(|| SnapshotError::new(format!("{path}.{field}"), "is missing"))
}

fn optional_integer(
    object: &Map<String, Value>,
    field: &str,
    path: &str,
    max: u64,
) -> Result<Option<u64>, SnapshotError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => match number.as_u64() {
            Some(value) if value <= max => Ok(Some(value)),
            _ => Err(SnapshotError::new(
                format!("{path}.{field}"),
                format!("must be an integer from 0 to {max}, is {number}"),
            )),
        },
        Some(other) => Err(SnapshotError::new(
            format!("{path}.{field}"),
            format!("must be an integer, is {}", type_name(other)),
        )),
    }
}

/// Parses a time: RFC 3339 in UTC (`Z`), or with a numeric offset
/// (`+00:00`, as Python's `isoformat` writes, or any other: converted to
/// UTC), or without one (read as UTC).
pub fn parse_time(text: &str) -> Result<Timestamp, String> {
    let bytes = text.as_bytes();
    let offset = bytes.len().checked_sub(6).and_then(|at| {
        let sign = match bytes[at] {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let digit = |i: usize| {
            bytes[i]
                .is_ascii_digit()
                .then(|| i64::from(bytes[i] - b'0'))
        };
        let (h1, h2, m1, m2) = (
            digit(at + 1)?,
            digit(at + 2)?,
            digit(at + 4)?,
            digit(at + 5)?,
        );
        (bytes[at + 3] == b':' && at >= 19)
            .then_some((at, sign * ((h1 * 10 + h2) * 60 + m1 * 10 + m2)))
    });
    match offset {
        Some((at, minutes)) => {
            if minutes.abs() >= 24 * 60 {
                return Err(format!("offset out of range: {text:?}"));
            }
            let utc = Timestamp::parse_rfc3339(&format!("{}Z", &text[..at]))?;
            let shifted = utc.0 - minutes * 60 * 1_000_000;
            if shifted < 0 {
                return Err(format!("{text:?} is before 1970-01-01T00:00:00Z"));
            }
            Ok(Timestamp(shifted))
        }
        None => Timestamp::parse_rfc3339(text),
    }
}

fn optional_time(
    object: &Map<String, Value>,
    field: &str,
    path: &str,
) -> Result<Option<Timestamp>, SnapshotError> {
    optional_str(object, field, path)?
        .map(|text| {
            parse_time(text).map_err(|reason| SnapshotError::new(format!("{path}.{field}"), reason))
        })
        .transpose()
}

fn parse_role(text: &str, path: &str) -> Result<Role, SnapshotError> {
    match text {
        "system" => Ok(Role::System),
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        "tool" => Ok(Role::Tool),
        other => Err(SnapshotError::new(
            format!("{path}.role"),
            format!("{other:?} is not a role (system, user, assistant, tool)"),
        )),
    }
}

fn parse_status(text: &str, path: &str) -> Result<ToolStatus, SnapshotError> {
    match text {
        "pending" => Ok(ToolStatus::Pending),
        "completed" => Ok(ToolStatus::Completed),
        "failed" => Ok(ToolStatus::Failed),
        other => Err(SnapshotError::new(
            format!("{path}.status"),
            format!("{other:?} is not a call status (pending, completed, failed)"),
        )),
    }
}

/// Reads one call of an item.
fn parse_call(value: &Value, path: &str) -> Result<(ToolCall, ToolStatus), SnapshotError> {
    let Value::Object(object) = value else {
        return Err(SnapshotError::new(
            path,
            format!("a tool call must be an object, is {}", type_name(value)),
        ));
    };
    let call = ToolCall::new(
        required_str(object, "call_id", path)?,
        required_str(object, "name", path)?,
        optional_str(object, "arguments", path)?.unwrap_or(""),
    );
    let status = match optional_str(object, "status", path)? {
        Some(text) => parse_status(text, path)?,
        None => ToolStatus::Pending,
    };
    Ok((call, status))
}

/// Reads one item; `document_time` stands in for a missing `created_at`.
fn parse_item(
    value: &Value,
    index: usize,
    path: &str,
    document_time: Option<Timestamp>,
) -> Result<Item, SnapshotError> {
    let Value::Object(object) = value else {
        return Err(SnapshotError::new(
            path,
            format!("an item must be an object, is {}", type_name(value)),
        ));
    };
    let role = parse_role(required_str(object, "role", path)?, path)?;
    let evaluation_id = required_str(object, "evaluation_id", path)?;
    let sequence = optional_integer(object, "sequence", path, SEQUENCE_MAX)?
        .ok_or_else(|| SnapshotError::new(format!("{path}.sequence"), "is missing"))?;
    let turn = optional_integer(object, "turn", path, u64::from(TURN_MAX))?.unwrap_or(0);
    let created_at = optional_time(object, "created_at", path)?
        .or(document_time)
        .ok_or_else(|| {
            SnapshotError::new(
                format!("{path}.created_at"),
                "is missing (and the document has no created_at to stand in)",
            )
        })?;
    let content = optional_str(object, "content", path)?.unwrap_or("");
    let mut entry = ConversationEntry::new(
        evaluation_id,
        sequence,
        role,
        content_from_documented(role, content),
    );
    entry.turn = u32::try_from(turn).unwrap_or(TURN_MAX);
    entry.created_at = created_at;
    entry.tool_call_id = optional_str(object, "tool_call_id", path)?.map(str::to_string);
    entry.tool_name = optional_str(object, "tool_name", path)?.map(str::to_string);
    let prompt_ns = optional_str(object, "prompt_ns", path)?.unwrap_or("");
    let prompt_key = optional_str(object, "prompt_key", path)?.unwrap_or("");
    entry.prompt_ns = prompt_from_documented(prompt_ns);
    entry.prompt_key = prompt_from_documented(prompt_key);
    entry.message_id = Uuid::nil();
    if let Some(text) = optional_str(object, "message_id", path)? {
        entry.message_id = Uuid::parse_str(text).map_err(|error| {
            SnapshotError::new(
                format!("{path}.message_id"),
                format!("{text:?} is not a UUID ({error})"),
            )
        })?;
    }
    let mut statuses = Vec::new();
    match object.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(calls)) => {
            for (at, call) in calls.iter().enumerate() {
                let (call, status) = parse_call(call, &format!("{path}.tool_calls[{at}]"))?;
                entry.tool_calls.push(call);
                statuses.push(status);
            }
        }
        Some(other) => {
            return Err(SnapshotError::new(
                format!("{path}.tool_calls"),
                format!("must be an array, is {}", type_name(other)),
            ))
        }
    }
    let mut exact = vec![None; entry.tool_calls.len()];
    let extended = object.contains_key(EXTENSION_KEY);
    if let Some(value) = object.get(EXTENSION_KEY) {
        let extension_path = format!("{path}.{EXTENSION_KEY}");
        let extension: ItemExtension =
            serde_path_to_error::deserialize(value).map_err(|error| {
                let inner = error.path().to_string();
                let field = if inner == "." {
                    extension_path.clone()
                } else {
                    format!("{extension_path}.{inner}")
                };
                SnapshotError::new(field, error.into_inner().to_string())
            })?;
        apply_extension(
            &mut entry, extension, &statuses, &mut exact, content, prompt_ns, prompt_key,
        );
    }
    Ok(Item {
        index,
        entry,
        statuses,
        exact,
        extended,
    })
}

/// Applies an item's extension where it agrees with the documented fields
/// (a document edited by a host that kept the extension: the documented
/// fields win).
fn apply_extension(
    entry: &mut ConversationEntry,
    extension: ItemExtension,
    statuses: &[ToolStatus],
    exact: &mut [Option<CallExtension>],
    content: &str,
    prompt_ns: &str,
    prompt_key: &str,
) {
    if let (Some(value), "") = (extension.content, content) {
        entry.content = value;
    }
    if let (Some(value), "") = (extension.prompt_ns, prompt_ns) {
        entry.prompt_ns = value;
    }
    if let (Some(value), "") = (extension.prompt_key, prompt_key) {
        entry.prompt_key = value;
    }
    entry.reasoning = extension.reasoning;
    entry.is_error = extension.is_error;
    entry.finish_reason = extension.finish_reason;
    entry.metadata = extension.metadata;
    for call in extension.tool_calls {
        let Some(at) = entry
            .tool_calls
            .iter()
            .position(|held| held.call_id == call.call_id)
        else {
            continue;
        };
        if documented_status(call.status) == documented_status(statuses[at]) {
            exact[at] = Some(call);
        }
    }
}

/// The status events that take a pending call to `state`, if events can.
fn events_reaching(
    conversation_id: &str,
    evaluation_id: &str,
    state: &CallExtension,
) -> Option<Vec<ToolStatusChanged>> {
    let change = |status, at: Timestamp, error: Option<String>| ToolStatusChanged {
        error,
        ..ToolStatusChanged::new(conversation_id, evaluation_id, &state.call_id, status, at)
    };
    let mut events = Vec::new();
    match (state.status, state.started_at, state.ended_at) {
        (ToolStatus::Pending, None, None) if state.error.is_none() => {}
        (ToolStatus::Running, Some(started), None) if state.error.is_none() => {
            events.push(change(ToolStatus::Running, started, None));
        }
        (status @ (ToolStatus::Completed | ToolStatus::Failed), started, Some(ended)) => {
            if let Some(started) = started {
                events.push(change(ToolStatus::Running, started, None));
            }
            events.push(change(status, ended, state.error.clone()));
        }
        _ => return None,
    }
    Some(events)
}

/// The document's root object, its size, JSON form and version checked.
fn read_document(text: &str) -> Result<Map<String, Value>, SnapshotError> {
    if text.len() > DOCUMENT_BYTES_MAX {
        return Err(SnapshotError::new(
            "",
            format!(
                "is {} bytes, over DOCUMENT_BYTES_MAX ({DOCUMENT_BYTES_MAX})",
                text.len()
            ),
        ));
    }
    let document: Value = serde_json::from_str(text).map_err(|error| {
        SnapshotError::new(
            "",
            format!(
                "is not JSON: {error} (line {}, column {})",
                error.line(),
                error.column()
            ),
        )
    })?;
    let Value::Object(document) = document else {
        return Err(SnapshotError::new(
            "",
            format!("must be a JSON object, is {}", type_name(&document)),
        ));
    };
    match document.get("version") {
        None => {}
        Some(Value::String(version)) if version == SNAPSHOT_VERSION => {}
        Some(other) => {
            return Err(SnapshotError::new(
                "version",
                format!("unsupported version {other} (this reader knows {SNAPSHOT_VERSION:?})"),
            ))
        }
    }
    Ok(document)
}

/// The conversation to import into: the caller's, or the document's.
fn target_conversation(
    options: &ImportOptions,
    extension: Option<&DocumentExtension>,
) -> Result<String, SnapshotError> {
    let conversation_id = options
        .conversation_id
        .clone()
        .or_else(|| extension.and_then(|ext| ext.conversation_id.clone()))
        .ok_or_else(|| {
            SnapshotError::new(
                "",
                "names no conversation (no convlog.conversation_id): give the conversation to import into",
            )
        })?;
    if conversation_id.is_empty() || conversation_id.len() > ID_BYTES_MAX {
        return Err(SnapshotError::new(
            "",
            format!(
                "conversation id {conversation_id:?} must be 1 to {ID_BYTES_MAX} bytes (ID_BYTES_MAX)"
            ),
        ));
    }
    Ok(conversation_id)
}

/// Reads a document into the batch an import appends (nothing is
/// appended). Every failure names the field at fault.
pub fn plan_import(text: &str, options: &ImportOptions) -> Result<ImportPlan, SnapshotError> {
    let document = read_document(text)?;
    let document_time = optional_time(&document, "created_at", "")
        .map_err(|error| SnapshotError::new("created_at", error.reason))?;
    let extension: Option<DocumentExtension> = document
        .get(EXTENSION_KEY)
        .map(|value| {
            serde_path_to_error::deserialize(value)
                .map_err(|error| SnapshotError::new(EXTENSION_KEY, error.into_inner().to_string()))
        })
        .transpose()?;
    let conversation_id = target_conversation(options, extension.as_ref())?;
    let (slice_index, items) = message_slice(&document, options.item_type.as_deref())?;
    if items.is_empty() && options.mode != ImportMode::Replace {
        return Err(SnapshotError::new(
            format!("slices[{slice_index}].items"),
            "holds no items: nothing to import",
        ));
    }
    if items.len() > ITEMS_MAX {
        return Err(SnapshotError::new(
            format!("slices[{slice_index}].items"),
            format!("{} items, over ITEMS_MAX ({ITEMS_MAX})", items.len()),
        ));
    }
    let mut parsed = Vec::with_capacity(items.len());
    for (index, value) in items.iter().enumerate() {
        parsed.push(parse_item(
            value,
            index,
            &item_path(slice_index, index),
            document_time,
        )?);
    }
    let generated_message_ids = name_message_ids(&mut parsed, slice_index)?;
    // A document convlog wrote is in conversation order; another host's
    // may list evaluations in any order (by id): they are recorded in the
    // order of their earliest message.
    if extension.is_none() {
        order_evaluations_by_time(&mut parsed);
    }
    fail_results_of_failed_calls(&mut parsed);
    let (mut built, calls_recorded_in_entry) = settle_calls(&conversation_id, &parsed);
    let mut events = built.events;
    if options.mode == ImportMode::Replace {
        events.insert(
            0,
            Event::MessagesReplaced(MessagesReplaced {
                conversation_id: conversation_id.clone(),
                entries: Vec::new(),
                at: Timestamp::now(),
            }),
        );
        built.origins.insert(0, None);
    }
    for (event, origin) in events.iter().zip(&built.origins) {
        if let Err(field) = event.validate() {
            let path = origin.map_or_else(String::new, |index| item_path(slice_index, index));
            return Err(SnapshotError::new(path, field.to_string()));
        }
    }
    if events.len() > BATCH_EVENTS_MAX {
        return Err(SnapshotError::new(
            "",
            format!(
                "needs {} events, over a batch's BATCH_EVENTS_MAX ({BATCH_EVENTS_MAX})",
                events.len()
            ),
        ));
    }
    let mut evaluations: Vec<String> = Vec::new();
    for item in &parsed {
        if !evaluations.contains(&item.entry.evaluation_id) {
            evaluations.push(item.entry.evaluation_id.clone());
        }
    }
    Ok(ImportPlan {
        conversation_id,
        entries: parsed.len(),
        status_events: events
            .iter()
            .filter(|event| matches!(event, Event::ToolStatus(_)))
            .count(),
        calls_recorded_in_entry,
        events,
        evaluations,
        generated_message_ids,
    })
}

/// The batch for `items`, with the calls whose exact state the status
/// events do not reach (for instance: a result ordered before its call, or
/// a finished call without times) recorded in their entry as they are; and how many those are.
fn settle_calls(conversation_id: &str, parsed: &[Item]) -> (Built, usize) {
    let mut in_entry: HashSet<(usize, usize)> = HashSet::new();
    let mut built = build_events(conversation_id, parsed, &in_entry);
    // The fold may not reach an exact state through events (a result
    // ordered before its call, a finished call without times): such calls are
    // recorded in their entry as they are.
    let folded = fold(conversation_id, built.events.iter().map(|event| (event, 1)));
    let held: HashMap<Uuid, &ConversationEntry> = folded
        .entries()
        .map(|entry| (entry.message_id, entry))
        .collect();
    for (position, item) in parsed.iter().enumerate() {
        for (at, exact) in item.exact.iter().enumerate() {
            let Some(exact) = exact else { continue };
            let reached = held
                .get(&item.entry.message_id)
                .and_then(|entry| entry.tool_calls.get(at));
            if reached.is_none_or(|call| !same_state(call, exact)) {
                in_entry.insert((position, at));
            }
        }
    }
    if !in_entry.is_empty() {
        built = build_events(conversation_id, parsed, &in_entry);
    }
    let count = in_entry.len();
    (built, count)
}

fn same_state(call: &ToolCall, exact: &CallExtension) -> bool {
    call.status == exact.status
        && call.started_at == exact.started_at
        && call.ended_at == exact.ended_at
        && call.error == exact.error
}

/// The one slice of messages: the one whose `item_type` is `item_type`,
/// or by default the one whose type name is `InnerMessage`.
fn message_slice<'a>(
    document: &'a Map<String, Value>,
    item_type: Option<&str>,
) -> Result<(usize, &'a Vec<Value>), SnapshotError> {
    let slices = match document.get("slices") {
        Some(Value::Array(slices)) => slices,
        Some(other) => {
            return Err(SnapshotError::new(
                "slices",
                format!("must be an array, is {}", type_name(other)),
            ))
        }
        None => return Err(SnapshotError::new("slices", "is missing")),
    };
    let mut found = Vec::new();
    let mut matching = Vec::new();
    for (index, slice) in slices.iter().enumerate() {
        let path = format!("slices[{index}]");
        let Value::Object(slice) = slice else {
            return Err(SnapshotError::new(
                path,
                format!("a slice must be an object, is {}", type_name(slice)),
            ));
        };
        let slice_item_type = required_str(slice, "item_type", &path)?;
        let matches = match item_type {
            Some(wanted) => slice_item_type == wanted,
            None => slice_item_type
                .rsplit(':')
                .next()
                .is_some_and(|name| name == ITEM_TYPE_NAME),
        };
        found.push(slice_item_type.to_string());
        if matches {
            let items = match slice.get("items") {
                Some(Value::Array(items)) => items,
                Some(other) => {
                    return Err(SnapshotError::new(
                        format!("{path}.items"),
                        format!("must be an array, is {}", type_name(other)),
                    ))
                }
                None => return Err(SnapshotError::new(format!("{path}.items"), "is missing")),
            };
            matching.push((index, items));
        }
    }
    let wanted = item_type.map_or_else(
        || format!("an item_type ending in :{ITEM_TYPE_NAME}"),
        |wanted| format!("item_type {wanted:?}"),
    );
    match matching.len() {
        1 => Ok(matching.remove(0)),
        0 => Err(SnapshotError::new(
            "slices",
            format!("no slice has {wanted} (item types found: {found:?})"),
        )),
        _ => Err(SnapshotError::new(
            "slices",
            format!(
                "{} slices have {wanted} (slices {:?}); name the one to read",
                matching.len(),
                matching.iter().map(|(index, _)| *index).collect::<Vec<_>>()
            ),
        )),
    }
}

/// Gives items without a `message_id` a name-based one and refuses two
/// items with one id; returns how many were named.
fn name_message_ids(items: &mut [Item], slice: usize) -> Result<usize, SnapshotError> {
    let mut occurrences: HashMap<(String, u64), u64> = HashMap::new();
    let mut named = 0;
    for item in items.iter_mut() {
        let key = (item.entry.evaluation_id.clone(), item.entry.sequence);
        let count = occurrences.entry(key).or_insert(0);
        if item.entry.message_id.is_nil() {
            let name = format!(
                "{}\n{}\n{count}",
                item.entry.evaluation_id, item.entry.sequence
            );
            item.entry.message_id = Uuid::new_v5(&MESSAGE_ID_NAMESPACE, name.as_bytes());
            named += 1;
        }
        *count += 1;
    }
    let mut seen: HashMap<Uuid, usize> = HashMap::new();
    for item in items.iter() {
        if let Some(first) = seen.insert(item.entry.message_id, item.index) {
            return Err(SnapshotError::new(
                format!("{}.message_id", item_path(slice, item.index)),
                format!(
                    "{} is also the message_id of items[{first}]",
                    item.entry.message_id
                ),
            ));
        }
    }
    Ok(named)
}

/// Orders the items by evaluation, evaluations by their earliest
/// `created_at` (ties: first in the document), keeping document order
/// within each.
fn order_evaluations_by_time(items: &mut [Item]) {
    let mut earliest: HashMap<String, (Timestamp, usize)> = HashMap::new();
    for (position, item) in items.iter().enumerate() {
        let at = earliest
            .entry(item.entry.evaluation_id.clone())
            .or_insert((item.entry.created_at, position));
        at.0 = at.0.min(item.entry.created_at);
    }
    items.sort_by_key(|item| (earliest[&item.entry.evaluation_id], item.index));
}

/// A call documented `failed` with no exact state in an extension, whose
/// result has no extension: the result is the error (`is_error`), so the
/// call fails with its content as the error.
fn fail_results_of_failed_calls(items: &mut [Item]) {
    let failed: HashSet<(String, String)> = items
        .iter()
        .filter(|item| item.entry.role == Role::Assistant)
        .flat_map(|item| {
            item.entry
                .tool_calls
                .iter()
                .zip(&item.statuses)
                .zip(&item.exact)
                .filter(|((_, status), exact)| **status == ToolStatus::Failed && exact.is_none())
                .map(|((call, _), _)| (item.entry.evaluation_id.clone(), call.call_id.clone()))
        })
        .collect();
    for item in items.iter_mut() {
        if item.entry.role != Role::Tool || item.extended {
            continue;
        }
        if let Some(call_id) = &item.entry.tool_call_id {
            if failed.contains(&(item.entry.evaluation_id.clone(), call_id.clone())) {
                item.entry.is_error = true;
            }
        }
    }
}

struct Built {
    events: Vec<Event>,
    /// The item index each event comes from.
    origins: Vec<Option<usize>>,
}

/// The batch: each item's `conversation_recorded` event, an assistant
/// item's followed by the status events of its calls. Calls in
/// `in_entry` ((item position, call index)) are recorded in the entry with
/// their exact state instead.
fn build_events(
    conversation_id: &str,
    items: &[Item],
    in_entry: &HashSet<(usize, usize)>,
) -> Built {
    let answered: HashSet<(&str, &str)> = items
        .iter()
        .filter(|item| item.entry.role == Role::Tool)
        .filter_map(|item| {
            item.entry
                .tool_call_id
                .as_deref()
                .map(|call_id| (item.entry.evaluation_id.as_str(), call_id))
        })
        .collect();
    let mut built = Built {
        events: Vec::new(),
        origins: Vec::new(),
    };
    for (position, item) in items.iter().enumerate() {
        let mut entry = item.entry.clone();
        let mut changes = Vec::new();
        for (at, call) in entry.tool_calls.iter_mut().enumerate() {
            if item.entry.role != Role::Assistant {
                break;
            }
            let evaluation_id = item.entry.evaluation_id.as_str();
            match &item.exact[at] {
                Some(exact) => match events_reaching(conversation_id, evaluation_id, exact)
                    .filter(|_| !in_entry.contains(&(position, at)))
                {
                    Some(events) => changes.extend(events),
                    None => {
                        call.status = exact.status;
                        call.started_at = exact.started_at;
                        call.ended_at = exact.ended_at;
                        call.error = exact.error.clone();
                    }
                },
                None => {
                    let status = item.statuses[at];
                    let answered = answered.contains(&(evaluation_id, call.call_id.as_str()));
                    if status.is_finished() && !answered {
                        changes.push(ToolStatusChanged::new(
                            conversation_id,
                            evaluation_id,
                            &call.call_id,
                            status,
                            item.entry.created_at,
                        ));
                    }
                }
            }
        }
        built.events.push(entry.recorded_in(conversation_id));
        built.origins.push(Some(item.index));
        for change in changes {
            built.events.push(Event::ToolStatus(change));
            built.origins.push(Some(item.index));
        }
    }
    built
}

/// Records a snapshot document into `store` as one atomic batch
/// ([`plan_import`], then one append). With [`ImportMode::New`] the
/// conversation must have no events, and the append is conditional on
/// that; with `Replace` it is conditional on the version read. On any
/// error nothing is appended.
pub fn import(
    store: &Store,
    text: &str,
    options: &ImportOptions,
) -> Result<ImportReport, ImportError> {
    let plan = plan_import(text, options)?;
    let existing = match store.conversation(&plan.conversation_id) {
        Ok(slice) => Some(slice),
        Err(Error::ConversationNotFound { .. }) => None,
        Err(error) => return Err(error.into()),
    };
    let last_lsn = existing.as_ref().map_or(0, ConversationSlice::last_lsn);
    let expect = match options.mode {
        ImportMode::New => {
            if let Some(slice) = existing.as_ref().filter(|slice| slice.last_lsn() > 0) {
                return Err(ImportError::NotEmpty {
                    conversation_id: plan.conversation_id,
                    entries: slice.len(),
                });
            }
            Some(Expect::conversation(plan.conversation_id.clone(), 0))
        }
        ImportMode::Replace => Some(Expect::conversation(plan.conversation_id.clone(), last_lsn)),
        ImportMode::Merge => None,
    };
    let mut append = AppendOptions::new();
    if let Some(expect) = expect {
        append = append.expect(expect);
    }
    let lsns = store.append_with(&plan.events, append)?;
    Ok(ImportReport {
        conversation_id: plan.conversation_id,
        mode: options.mode,
        entries: plan.entries,
        status_events: plan.status_events,
        calls_recorded_in_entry: plan.calls_recorded_in_entry,
        evaluations: plan.evaluations,
        generated_message_ids: plan.generated_message_ids,
        lsns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_with_offsets_are_read_as_utc() {
        let utc = parse_time("2026-01-02T03:04:05.123456Z").unwrap();
        assert_eq!(parse_time("2026-01-02T03:04:05.123456+00:00").unwrap(), utc);
        assert_eq!(parse_time("2026-01-02T05:04:05.123456+02:00").unwrap(), utc);
        assert_eq!(parse_time("2026-01-02T00:34:05.123456-02:30").unwrap(), utc);
        assert_eq!(parse_time("2026-01-02T03:04:05.123456").unwrap(), utc);
        assert!(parse_time("2026-01-02T03:04:05+25:00").is_err());
        assert!(parse_time("1970-01-01T00:00:00+01:00").is_err());
    }

    #[test]
    fn the_extension_holds_only_what_documented_fields_cannot_say() {
        let plain = ConversationEntry::user("e", 0, "hi");
        assert_eq!(extension_of(&plain), None);
        let mut calling =
            ConversationEntry::assistant_calling("e", 1, [ToolCall::new("c", "t", "{}")]);
        assert_eq!(
            extension_of(&calling),
            None,
            "no text on an assistant is documented as \"\""
        );
        calling.content = Some(String::new());
        assert_eq!(
            extension_of(&calling).unwrap().content,
            Some(Some(String::new()))
        );
        let mut tool = ConversationEntry::tool_result("e", 2, "c", "t", "x");
        tool.content = None;
        tool.prompt_ns = Some(String::new());
        let extension = extension_of(&tool).unwrap();
        assert_eq!(
            (extension.content, extension.prompt_ns),
            (Some(None), Some(Some(String::new())))
        );
    }
}
