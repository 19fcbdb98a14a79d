//! `convlog resume`: what a host that died mid-evaluation has left to do,
//! as `Store::resume` reports it.

use std::path::Path;

use convlog::model::ConversationEntry;
use convlog::resume::{FinishedCall, PromptIdentity, ResumeOptions, UnfinishedCall};
use serde::Serialize;

use crate::commands::{existing_store, print_json, Failure};

pub const RESUME_HELP: &str = r#"Output: one pretty JSON object, the library's resume state (`convlog::resume`):
  {
    "conversation_id": "trip",
    "evaluation_id": "eval-1",
    "finished": false,         // the last entry is an answer with no calls, nothing unfinished
    "next_sequence": 4,        // the sequence the next entry gets
    "turn": 1,                 // the turn of the last assistant response (0 before any)
    "next_turn": 2,
    "unfinished_calls": [      // no result, status pending or running: run these again
      {"call": {"call_id": "rome", "name": "lookup", "arguments": "...", "status": "running", ...},
       "assistant_message_id": "..."}
    ],
    "finished_calls": [        // completed or failed, or answered: never run these twice
      {"call": {"call_id": "paris", ...}, "result": {<the tool entry>} or null}
    ]
  }
--entries adds "entries": every entry of the evaluation, in sequence order.

--prompt NAMESPACE/KEY checks the prompt identity recorded on the evaluation's system
entry; "-" stands for an absent part (travel/- , -/-). A mismatch fails naming both
identities. An unknown conversation or evaluation fails too (exit 1).

Opens the store read-only (its newest usable snapshot, then the log after it): takes no
lock and writes nothing, so it runs beside a writer in another process and sees what that
writer has appended so far.

Example:
  convlog resume ./my-store --conversation ctx_123 --prompt travel/planner"#;

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

/// `convlog resume STORE --conversation ID [--evaluation ID] [--prompt NS/KEY] [--entries]`.
pub fn resume(
    dir: &Path,
    conversation: &str,
    evaluation: Option<String>,
    prompt: Option<PromptIdentity>,
    with_entries: bool,
) -> Result<(), Failure> {
    existing_store(dir)?;
    let store = crate::commands::open_store_read_only(dir)?;
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
