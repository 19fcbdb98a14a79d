//! `convlog resume`: what a host that died mid-evaluation has left to do,
//! as `Store::resume` reports it.

use std::path::Path;

use convlog::model::ConversationEntry;
use convlog::resume::{FinishedCall, PromptIdentity, ResumeOptions, UnfinishedCall};
use serde::Serialize;

use crate::shell::{existing_store, print_json, Failure};

/// Parses `--prompt NAMESPACE/KEY` (`-` for an absent part), the form
/// `PromptIdentity` displays.
pub fn parse_prompt(text: &str) -> Result<PromptIdentity, String> {
    let (namespace, key) = text.split_once('/').ok_or_else(|| {
        format!("{text:?} is not NAMESPACE/KEY (write - for an absent part: travel/-)")
    })?;
    let part = |part: &str, name: &str| match part {
        "" => Err(format!(
            "the {name} of {text:?} is empty (write - for an absent one)"
        )),
        "-" => Ok(None),
        part => Ok(Some(part.to_string())),
    };
    Ok(PromptIdentity {
        namespace: part(namespace, "namespace")?,
        key: part(key, "key")?,
    })
}

/// The printed report: the resume state, its fields in reading order.
#[derive(Serialize)]
struct Report<'a> {
    conversation_id: &'a str,
    evaluation_id: &'a str,
    finished: bool,
    next_sequence: u64,
    turn: u32,
    next_turn: u32,
    unfinished_calls: &'a [UnfinishedCall],
    finished_calls: &'a [FinishedCall],
    #[serde(skip_serializing_if = "Option::is_none")]
    entries: Option<&'a [ConversationEntry]>,
}

/// `convlog resume`: the report, or with `--continue` the evaluation carried
/// to its end by the agent runner (`chat::resume_continue`).
#[allow(clippy::too_many_arguments)] // the command's flags, passed on
pub fn dispatch(
    dir: &Path,
    conversation: &str,
    evaluation: Option<String>,
    prompt: Option<PromptIdentity>,
    with_entries: bool,
    continue_run: bool,
    model: crate::chat::ModelArgs,
    tamper: &crate::tamper::WriterArgs,
) -> Result<(), Failure> {
    if continue_run {
        if with_entries {
            crate::usage_error(
                "resume",
                clap::error::ErrorKind::ArgumentConflict,
                "--entries applies to the report, not to --continue",
            );
        }
        return crate::chat::resume_continue(dir, conversation, evaluation, prompt, model, tamper);
    }
    if let Some(flag) = model.first_flag() {
        crate::usage_error(
            "resume",
            clap::error::ErrorKind::ArgumentConflict,
            &format!("{flag} applies only with --continue"),
        );
    }
    resume(dir, conversation, evaluation, prompt, with_entries)
}

/// `convlog resume STORE --conversation ID [--evaluation ID] [--prompt NS/KEY] [--entries]`.
pub fn resume(
    dir: &Path,
    conversation: &str,
    evaluation: Option<String>,
    prompt: Option<PromptIdentity>,
    with_entries: bool,
) -> Result<(), Failure> {
    existing_store(dir)?;
    let store = crate::shell::open_store_read_only(dir)?;
    let state = store.resume(
        conversation,
        &ResumeOptions::new()
            .evaluation_id(evaluation)
            .prompt(prompt),
    )?;
    print_json(&Report {
        conversation_id: &state.conversation_id,
        evaluation_id: &state.evaluation_id,
        finished: state.finished,
        next_sequence: state.next_sequence,
        turn: state.turn,
        next_turn: state.next_turn,
        unfinished_calls: &state.unfinished_calls,
        finished_calls: &state.finished_calls,
        entries: with_entries.then_some(state.entries.as_slice()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_parse_like_they_display() {
        for text in ["travel/planner", "travel/-", "-/-", "a/b/c"] {
            let parsed = parse_prompt(text).unwrap();
            assert_eq!(parsed.to_string(), text);
        }
        for bad in ["travel", "/planner", "travel/", ""] {
            assert!(parse_prompt(bad).is_err(), "{bad:?}");
        }
    }
}
