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

use crate::shell::{existing_store, open_store, print_json, Failure};

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
    let limit = crate::input::INPUT_LINE_BYTES_MAX;
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
    let text = std::str::from_utf8(crate::input::without_bom(&bytes)).map_err(|error| {
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
