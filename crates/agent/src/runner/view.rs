//! What the model is shown: built from the store, never a dangling call.

use std::collections::HashSet;

use convlog::conversation::CallResults;
use convlog::model::{ConversationEntry, Role};
use convlog::ConversationSlice;

/// This evaluation's system entries, then the non-system entries of the
/// evaluations that started before it (log order), then this evaluation's
/// non-system entries; see [`answered_only`].
pub(super) fn model_view(slice: &ConversationSlice, evaluation_id: &str) -> Vec<ConversationEntry> {
    let earlier: HashSet<&str> = slice
        .evaluations()
        .iter()
        .map(String::as_str)
        .take_while(|evaluation| *evaluation != evaluation_id)
        .collect();
    let own = || {
        slice
            .entries()
            .filter(move |entry| entry.evaluation_id == evaluation_id)
    };
    let mut view: Vec<ConversationEntry> = own()
        .filter(|entry| entry.role == Role::System)
        .cloned()
        .collect();
    view.extend(
        slice
            .entries()
            .filter(|entry| {
                entry.role != Role::System && earlier.contains(entry.evaluation_id.as_str())
            })
            .cloned(),
    );
    view.extend(own().filter(|entry| entry.role != Role::System).cloned());
    answered_only(view)
}

/// `entries` without a dangling call: a call no result entry answers is
/// taken out of its assistant entry (an assistant entry left with no text,
/// reasoning or call is dropped), and a tool entry that does not answer a
/// call still shown (an orphan, or a duplicate answer) is dropped.
pub(super) fn answered_only(entries: Vec<ConversationEntry>) -> Vec<ConversationEntry> {
    let answering: HashSet<uuid::Uuid> = {
        let results = CallResults::new(&entries);
        entries
            .iter()
            .filter(|entry| entry.role == Role::Assistant)
            .flat_map(|entry| {
                entry.tool_calls.iter().filter_map(|call| {
                    results
                        .answer(&entry.evaluation_id, &call.call_id)
                        .map(|result| result.message_id)
                })
            })
            .collect()
    };
    let answered: HashSet<(String, String)> = entries
        .iter()
        .filter(|entry| answering.contains(&entry.message_id))
        .filter_map(|entry| {
            let call_id = entry.tool_call_id.clone()?;
            Some((entry.evaluation_id.clone(), call_id))
        })
        .collect();
    entries
        .into_iter()
        .filter_map(|mut entry| match entry.role {
            Role::Tool => answering.contains(&entry.message_id).then_some(entry),
            Role::Assistant => {
                let evaluation_id = entry.evaluation_id.clone();
                entry.tool_calls.retain(|call| {
                    answered.contains(&(evaluation_id.clone(), call.call_id.clone()))
                });
                let empty = entry.tool_calls.is_empty()
                    && entry.reasoning.is_none()
                    && entry.content.as_deref().is_none_or(str::is_empty);
                (!empty).then_some(entry)
            }
            _ => Some(entry),
        })
        .collect()
}
