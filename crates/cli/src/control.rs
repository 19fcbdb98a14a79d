//! `convlog create-context`, `add-messages` and `set-messages`: message
//! control's context operations over `convlog::control::MessageControl`, with
//! message lists on stdin and message control's error texts (docs/history.md).

use std::io::{IsTerminal, Read};
use std::path::Path;
use std::sync::Arc;

use convlog::control::{ControlMessage, MessageControl, Principal};
use convlog::log::Lsn;
use convlog::StoreOptions;
use serde::Serialize;
use serde_json::Value;

use crate::commands::{existing_store, open_store, print_json, Failure};

pub const CREATE_CONTEXT_HELP: &str = r#"Creates a context: a conversation with an owner (--as USER) and a public/private flag.
A private context is usable only by its owner; a public one by anyone, --as or not.
Without --as the context has no owner and must be --public. The id may be a
conversation already recorded with `convlog append`: its entries become the context's.
Creates the store if it does not exist. Needs the writer's lock.

Output: the context as pretty JSON:
  {"context_id": "ctx_123", "owner": "alice", "public": false, "created_lsn": 1}

Fails (exit 1) with "Context with id: ID already exists" when it does.

Example:
  convlog create-context ./my-store --conversation ctx_123 --as alice"#;

pub const ADD_MESSAGES_HELP: &str = r#"Input (stdin): a message list, a JSON array (or a request body,
{"context_id": ..., "messages": [...]}):
  [{"sender": "human", "message": "Search for user data"},
   {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "database_search", "tool_input": {"table": "users"}},
   {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "Found 100 active users"},
   {"sender": "ai", "message": "There are 100 active users."}]
sender is human, ai or system. The messages continue the conversation's latest
evaluation, appended as one atomic batch.

Validation (message control's rules and wording; on any error nothing is appended, exit 1):
  Tool responses found without corresponding tool calls: ['call_123']
  Tool response with ID 'call_1' appears before its corresponding tool call
  Tool calls found without corresponding responses: ['call_2']
A response may answer a call already stored and still open.

The context must exist: create it with `convlog create-context` (add-messages never
creates one). Otherwise: "Context with id: ID does not exist"; a private context of
another user (or used without --as): "Context does not belong to user".

Output: the context after the change, as pretty JSON: its id, owner, public flag, the
LSNs appended, and every stored message in the message-list shapes:
  {"context_id": "ctx_123", "owner": "alice", "public": false, "lsns": [5, 6, 7, 8],
   "messages": [{"sender": "human", "message": "..."}, ...]}

Example:
  echo '[{"sender":"human","message":"Hello!"},{"sender":"ai","message":"Hi!"}]' \
    | convlog add-messages ./my-store --conversation ctx_123 --as alice"#;

pub const SET_MESSAGES_HELP: &str = r#"Input (stdin): a message list, as for `convlog add-messages`.

Replaces every message of the context with the list, atomically: one messages_replaced
event. The old messages stay in the log for audit (`convlog dump` shows them); the
conversation, its exports and resume see only the new ones, as one new evaluation.
Validated like add-messages, against an empty conversation; on any error nothing is
appended (exit 1). The context must exist (`convlog create-context`).

Output: as add-messages (one LSN: the messages_replaced event).

Example:
  echo '[{"sender":"system","message":"This is a fresh conversation"},{"sender":"human","message":"Hello, starting over"}]' \
    | convlog set-messages ./my-store --conversation ctx_123 --as alice"#;

/// The acting principal of `--as USER`; anonymous without it.
fn principal(as_user: Option<String>) -> Principal {
    as_user.map_or(Principal::Anonymous, Principal::User)
}

/// Message control over the store at `dir`.
fn control(dir: &Path, create_in_nonempty: bool) -> Result<MessageControl, Failure> {
    let options = StoreOptions::new().create_in_nonempty_dir(create_in_nonempty);
    Ok(MessageControl::new(Arc::new(open_store(dir, options)?)))
}

/// `convlog create-context STORE --conversation ID [--as USER] [--public]`.
pub fn create_context(
    dir: &Path,
    conversation: &str,
    as_user: Option<String>,
    public: bool,
    create_in_nonempty: bool,
) -> Result<(), Failure> {
    let control = control(dir, create_in_nonempty)?;
    let info = control.create_context(&principal(as_user), conversation, public)?;
    print_json(&info)
}

/// Replace every message, or append to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `add-messages`.
    Add,
    /// `set-messages`.
    Set,
}

/// The printed outcome: the updated context, plus the LSNs.
#[derive(Serialize)]
struct Updated<'a> {
    context_id: &'a str,
    owner: Option<&'a str>,
    public: bool,
    lsns: Vec<Lsn>,
    messages: Vec<ControlMessage>,
}

/// `convlog add-messages` / `convlog set-messages STORE --conversation ID [--as USER]`.
pub fn change_messages(
    dir: &Path,
    conversation: &str,
    as_user: Option<String>,
    change: Change,
) -> Result<(), Failure> {
    existing_store(dir)?;
    let messages = read_messages(conversation)?;
    let control = control(dir, false)?;
    let principal = principal(as_user);
    let applied = match change {
        Change::Add => control.add_messages(&principal, conversation, &messages)?,
        Change::Set => control.set_messages(&principal, conversation, &messages)?,
    };
    let info = control.context(&principal, conversation)?;
    print_json(&Updated {
        context_id: &info.context_id,
        owner: info.owner.as_deref(),
        public: info.public,
        lsns: applied.lsns.collect(),
        messages: control.messages(&principal, conversation)?,
    })
}

/// Reads the message list from standard input: a JSON array, or an object
/// with `messages` (and optionally a `context_id` that must match).
fn read_messages(conversation: &str) -> Result<Vec<ControlMessage>, Failure> {
    let mut input = std::io::stdin().lock();
    if input.is_terminal() {
        eprintln!("convlog: reading the JSON message list from standard input (end with Ctrl-D)");
    }
    let limit = crate::commands::INPUT_LINE_BYTES_MAX;
    let mut bytes = Vec::new();
    (&mut input)
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| Failure(format!("read standard input: {error}")))?;
    if bytes.len() > limit {
        return Err(Failure(format!(
            "standard input: longer than {limit} bytes (INPUT_LINE_BYTES_MAX, the most one atomic batch can hold); nothing was read past it"
        )));
    }
    let text = std::str::from_utf8(crate::commands::without_bom(&bytes)).map_err(|error| {
        Failure(format!(
            "standard input: not UTF-8 text (invalid byte at offset {})",
            error.valid_up_to()
        ))
    })?;
    let value: Value = serde_json::from_str(text)
        .map_err(|error| Failure(format!("standard input: invalid JSON: {error}")))?;
    let list = match value {
        Value::Array(list) => list,
        Value::Object(mut body) => {
            if let Some(id) = body.get("context_id") {
                if id.as_str() != Some(conversation) {
                    return Err(Failure(format!(
                        "standard input: context_id {id} differs from --conversation {conversation:?}"
                    )));
                }
            }
            match body.remove("messages") {
                Some(Value::Array(list)) => list,
                _ => {
                    return Err(Failure(
                        "standard input: expected a JSON array of messages, or an object with a \"messages\" array"
                            .to_string(),
                    ))
                }
            }
        }
        _ => {
            return Err(Failure(
                "standard input: expected a JSON array of messages, or an object with a \"messages\" array"
                    .to_string(),
            ))
        }
    };
    list.into_iter()
        .enumerate()
        .map(|(index, message)| {
            serde_json::from_value(message)
                .map_err(|error| Failure(format!("standard input: message [{index}]: {error}")))
        })
        .collect()
}
