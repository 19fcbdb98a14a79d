//! The three pairing rules of message control for a list of messages added to (or
//! replacing) a conversation.

use std::collections::HashMap;

use crate::history::coherence::{self, Incoherence};
use crate::model::{ConversationEntry, Role};
use crate::Error;

/// Checks `added`, to be appended after `existing`, against the rules:
///
/// 1. every tool response answers a call: one the list made before it, or
///    one of `existing` that no result answers yet —
///    [`Error::ResponsesWithoutCalls`] lists every response that
///    answers neither and whose call does not come later in the list;
/// 2. calls come before their responses —
///    [`Error::ResponseBeforeCall`] names the first response whose
///    call comes later in the list;
/// 3. every call of the list is answered by a later response in it —
///    [`Error::CallsWithoutResponses`] lists the rest.
///
/// Before them, a call id that another open (not yet answered) call of the
/// list or of `existing` already uses is refused —
/// [`Error::DuplicateOpenCallIds`] lists them: a response could not
/// tell the two calls apart (an id may be used again once its call is
/// answered).
///
/// The first rule broken decides the error. A response answers the most
/// recent open call with its id. For `set_messages`, `existing` is empty.
pub fn validate_added(
    existing: &[ConversationEntry],
    added: &[ConversationEntry],
) -> crate::Result<()> {
    // call id -> stack of open calls: None for a call of `existing`,
    // Some(position in `added`) for one of the list.
    let mut open: HashMap<String, Vec<Option<(usize, usize)>>> = HashMap::new();
    for incoherence in coherence::incoherences(existing) {
        if let Incoherence::UnansweredCall { call_id, .. } = incoherence {
            open.entry(call_id).or_default().push(None);
        }
    }
    let mut answered: Vec<Vec<bool>> = added
        .iter()
        .map(|entry| vec![false; entry.tool_calls.len()])
        .collect();
    // call id -> the last position in `added` of an entry calling it, so
    // "is it called later?" is one lookup, not a scan.
    let mut last_call: HashMap<&str, usize> = HashMap::new();
    for (index, entry) in added.iter().enumerate() {
        for call in &entry.tool_calls {
            last_call.insert(call.call_id.as_str(), index);
        }
    }
    let mut without_calls = Vec::new();
    let mut before_call = None;
    let mut duplicates: Vec<String> = Vec::new();
    for (index, entry) in added.iter().enumerate() {
        if entry.role == Role::Tool {
            let call_id = entry.tool_call_id.as_deref().unwrap_or("");
            match open.get_mut(call_id).and_then(Vec::pop) {
                Some(Some((call_index, position))) => answered[call_index][position] = true,
                Some(None) => {}
                None if last_call.get(call_id).is_some_and(|&last| last > index) => {
                    before_call.get_or_insert_with(|| call_id.to_string());
                }
                None => without_calls.push(call_id.to_string()),
            }
        } else {
            for (position, call) in entry.tool_calls.iter().enumerate() {
                let stack = open.entry(call.call_id.clone()).or_default();
                if !stack.is_empty() && !duplicates.contains(&call.call_id) {
                    duplicates.push(call.call_id.clone());
                }
                stack.push(Some((index, position)));
            }
        }
    }
    if !duplicates.is_empty() {
        return Err(Error::DuplicateOpenCallIds {
            call_ids: duplicates,
        });
    }
    if !without_calls.is_empty() {
        return Err(Error::ResponsesWithoutCalls {
            call_ids: without_calls,
        });
    }
    if let Some(call_id) = before_call {
        return Err(Error::ResponseBeforeCall { call_id });
    }
    let unanswered: Vec<String> = added
        .iter()
        .zip(&answered)
        .flat_map(|(entry, answered)| {
            entry
                .tool_calls
                .iter()
                .zip(answered)
                .filter(|(_, answered)| !**answered)
                .map(|(call, _)| call.call_id.clone())
        })
        .collect();
    if !unanswered.is_empty() {
        return Err(Error::CallsWithoutResponses {
            call_ids: unanswered,
        });
    }
    Ok(())
}
