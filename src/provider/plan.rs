//! The provider-independent half of rendering: which entries are sent, which
//! calls are kept, and where each result goes.
//!
//! Rules, applied in this order:
//!
//! 1. A call id held by two assistant entries is an error: results could not
//!    be paired.
//! 2. A tool entry answers the call with its `tool_call_id` held by an
//!    assistant entry of its evaluation, wherever it sits (a result recorded
//!    before its call still answers it, and is sent after it: rule 5) —
//!    `crate::conversation::CallResults`, the definition `resume` and the
//!    audit timeline share. A tool entry with no such call, or answering a
//!    call that already has a result, is skipped and reported (sending it
//!    would orphan it).
//! 3. In each assistant entry, a call is kept when it has a result entry;
//!    when it failed without one (its error text is the result); or when it
//!    completed without one (the result says it was not recorded: the call
//!    ran, so the model must not be led to run it again). A pending or
//!    running call without a result is unfinished (the same set
//!    `crate::resume` reports): dropped under `PendingCalls::Drop`, kept and
//!    answered with an error under `PendingCalls::SyntheticError`.
//! 4. System and user entries without text, and assistant entries with
//!    neither text nor kept calls, are not sent (the content requirement;
//!    the latter also covers an assistant entry whose only
//!    calls were dropped).
//! 5. The results of an assistant entry's kept calls follow it directly, in
//!    call order; entries recorded between the call and its result come
//!    after the results.
//! 6. With no system entry, `default_system_prompt` (with the display name
//!    put in) is sent first.

use std::borrow::Cow;

use crate::conversation::{CallResults, HashMap, HashSet, ResultUse};
use crate::model::{ConversationEntry, Role, ToolCall, ToolStatus};

use super::{
    has_text, PendingCalls, RenderOptions, SkipReason, SkippedResult, FAILED_WITHOUT_ERROR_TEXT,
    INTERRUPTED_TEXT, RESULT_NOT_RECORDED_TEXT,
};

/// The answer sent for one kept call.
#[derive(Debug)]
pub(crate) struct Answer<'a> {
    pub call: &'a ToolCall,
    pub content: Cow<'a, str>,
    pub is_error: bool,
    /// The result entry; `None` for a failure taken from the call's status or
    /// a synthetic error.
    pub entry: Option<&'a ConversationEntry>,
}

/// One thing to send, in order.
#[derive(Debug)]
pub(crate) enum Step<'a> {
    System {
        text: Cow<'a, str>,
        entry: Option<&'a ConversationEntry>,
    },
    User(&'a ConversationEntry),
    Assistant {
        entry: &'a ConversationEntry,
        kept: HashSet<&'a str>,
    },
    Result(Answer<'a>),
}

#[derive(Debug)]
pub(crate) struct Plan<'a> {
    pub steps: Vec<Step<'a>>,
    pub unfinished_calls: Vec<String>,
    pub skipped_results: Vec<SkippedResult>,
}

pub(crate) fn plan<'a>(
    entries: &[&'a ConversationEntry],
    options: &RenderOptions,
) -> crate::Result<Plan<'a>> {
    check_call_ids_unique(entries)?;
    let results = CallResults::new(entries.iter().copied());
    let skipped_results = skipped_results(entries, &results);
    let mut steps = Vec::new();
    let mut unfinished_calls = Vec::new();
    for entry in entries {
        match entry.role {
            Role::System if has_text(entry.content.as_deref()) => steps.push(Step::System {
                text: Cow::Borrowed(entry.content.as_deref().unwrap_or_default()),
                entry: Some(entry),
            }),
            Role::User if has_text(entry.content.as_deref()) => steps.push(Step::User(entry)),
            Role::Assistant => {
                assistant_steps(entry, &results, options, &mut steps, &mut unfinished_calls)
            }
            Role::System | Role::User | Role::Tool => {}
        }
    }
    add_default_system(&mut steps, options);
    Ok(Plan {
        steps,
        unfinished_calls,
        skipped_results,
    })
}

/// Rule 1: no call id is held by two assistant entries.
fn check_call_ids_unique(entries: &[&ConversationEntry]) -> crate::Result<()> {
    let mut holder: HashMap<&str, usize> = HashMap::default();
    for (index, entry) in entries.iter().enumerate() {
        if entry.role != Role::Assistant {
            continue;
        }
        for call in &entry.tool_calls {
            if let Some(first) = holder.insert(call.call_id.as_str(), index) {
                return Err(crate::Error::DuplicateCallId {
                    call_id: call.call_id.clone(),
                    first_sequence: entries[first].sequence,
                    second_sequence: entry.sequence,
                });
            }
        }
    }
    Ok(())
}

/// Rule 2: the tool entries that answer no call (or a call already
/// answered), which are not sent.
fn skipped_results(
    entries: &[&ConversationEntry],
    results: &CallResults<'_>,
) -> Vec<SkippedResult> {
    let mut skipped = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if entry.role != Role::Tool {
            continue;
        }
        let reason = match results.result_use(index, entry) {
            ResultUse::Answers => continue,
            ResultUse::Duplicate => SkipReason::DuplicateResult,
            ResultUse::NoCall => SkipReason::NoMatchingCall,
        };
        skipped.push(SkippedResult {
            message_id: entry.message_id,
            call_id: entry.tool_call_id.clone(),
            reason,
        });
    }
    skipped
}

/// Rules 3 to 5 for one assistant entry: the entry with its kept calls,
/// then their answers; nothing when it has neither text nor kept calls.
fn assistant_steps<'a>(
    entry: &'a ConversationEntry,
    results: &CallResults<'a>,
    options: &RenderOptions,
    steps: &mut Vec<Step<'a>>,
    unfinished_calls: &mut Vec<String>,
) {
    let mut kept = HashSet::default();
    let mut answers = Vec::new();
    for call in &entry.tool_calls {
        if let Some(answer) = answer(entry, call, results, options, unfinished_calls) {
            kept.insert(call.call_id.as_str());
            answers.push(answer);
        }
    }
    if kept.is_empty() && !has_text(entry.content.as_deref()) {
        return;
    }
    steps.push(Step::Assistant { entry, kept });
    steps.extend(answers.into_iter().map(Step::Result));
}

/// Rule 3: what answers `call` of assistant `entry`, or `None` when it is
/// dropped (unfinished, under `PendingCalls::Drop`). An unfinished call is
/// added to `unfinished_calls`.
fn answer<'a>(
    entry: &ConversationEntry,
    call: &'a ToolCall,
    results: &CallResults<'a>,
    options: &RenderOptions,
    unfinished_calls: &mut Vec<String>,
) -> Option<Answer<'a>> {
    match results.answer(&entry.evaluation_id, &call.call_id) {
        Some(result) => Some(Answer {
            call,
            content: Cow::Borrowed(result.content.as_deref().unwrap_or_default()),
            is_error: result.is_error,
            entry: Some(result),
        }),
        None if results.is_unfinished(&entry.evaluation_id, call) => {
            unfinished_calls.push(call.call_id.clone());
            match options.pending {
                PendingCalls::Drop => None,
                PendingCalls::SyntheticError => Some(Answer {
                    call,
                    content: Cow::Borrowed(INTERRUPTED_TEXT),
                    is_error: true,
                    entry: None,
                }),
            }
        }
        None if call.status == ToolStatus::Failed => Some(Answer {
            call,
            content: Cow::Borrowed(call.error.as_deref().unwrap_or(FAILED_WITHOUT_ERROR_TEXT)),
            is_error: true,
            entry: None,
        }),
        // Completed without a result entry.
        None => Some(Answer {
            call,
            content: Cow::Borrowed(RESULT_NOT_RECORDED_TEXT),
            is_error: false,
            entry: None,
        }),
    }
}

/// Rule 6: with no system entry, the default system prompt (with the
/// display name put in) goes first.
fn add_default_system(steps: &mut Vec<Step<'_>>, options: &RenderOptions) {
    let has_system = steps.iter().any(|step| matches!(step, Step::System { .. }));
    if let Some(prompt) = &options.default_system_prompt {
        if !has_system && has_text(Some(prompt)) {
            let text = match &options.display_name {
                Some(display) if !display.placeholder.is_empty() => {
                    Cow::Owned(prompt.replace(&display.placeholder, &display.name))
                }
                _ => Cow::Owned(prompt.clone()),
            };
            steps.insert(0, Step::System { text, entry: None });
        }
    }
}
