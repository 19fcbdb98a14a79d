//! Resume: what a host that died mid-evaluation needs to carry on.
//!
//! [`Store::resume`] folds one conversation and reports, for one evaluation
//! (the latest by default): its entries in order, the tool calls that never
//! finished (to run again), the calls that did (never to run twice), the
//! next sequence and turn, and whether the evaluation had already finished.
//!
//! A call is *unfinished* when its status is pending or running and no
//! result entry answers it. A call with a result entry, or a completed or
//! failed status, is *finished*. Which result answers a call (one of its
//! evaluation, wherever it sits in the order, the first if several) is
//! [`CallResults`], the definition the provider planner and the audit
//! timeline use too.

use serde::Serialize;

use crate::conversation::{CallResults, ConversationSlice};
use crate::error::{Error, Result};
use crate::model::{
    ConversationEntry, Event, Role, Timestamp, ToolCall, ToolStatus, ToolStatusChanged,
};
use crate::store::Store;

/// The prompt a host is resuming with: its namespace and key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptIdentity {
    /// Prompt namespace.
    pub namespace: Option<String>,
    /// Prompt key.
    pub key: Option<String>,
}

impl std::fmt::Display for PromptIdentity {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "{}/{}",
            self.namespace.as_deref().unwrap_or("-"),
            self.key.as_deref().unwrap_or("-")
        )
    }
}

/// What to resume.
///
/// A builder, so a new option never breaks a host: start from `new()` (the
/// defaults) and chain a setter per option, each named as the field it
/// sets; the fields stay public for reading.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ResumeOptions {
    /// The evaluation (default: the latest one of the conversation).
    pub evaluation_id: Option<String>,
    /// When set, the evaluation's system entry must carry this prompt
    /// identity, or resume fails with `Error::PromptMismatch`.
    pub prompt: Option<PromptIdentity>,
}

impl ResumeOptions {
    /// The latest evaluation, any prompt.
    pub fn new() -> ResumeOptions {
        ResumeOptions::default()
    }

    /// Sets the evaluation to resume (`None`: the latest one).
    pub fn evaluation_id(mut self, evaluation_id: Option<String>) -> ResumeOptions {
        self.evaluation_id = evaluation_id;
        self
    }

    /// Sets the prompt identity the evaluation's system entry must carry
    /// (`None`: any).
    pub fn prompt(mut self, prompt: Option<PromptIdentity>) -> ResumeOptions {
        self.prompt = prompt;
        self
    }
}

/// A tool call that never finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnfinishedCall {
    /// The call as recorded (status pending or running).
    pub call: ToolCall,
    /// The assistant entry that requested it.
    pub assistant_message_id: uuid::Uuid,
}

/// A tool call that finished: do not run it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FinishedCall {
    /// The call as recorded (completed or failed).
    pub call: ToolCall,
    /// Its result entry, when one was recorded.
    pub result: Option<ConversationEntry>,
}

/// Everything a host needs to continue an evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumeState {
    /// The conversation.
    pub conversation_id: String,
    /// The evaluation being resumed.
    pub evaluation_id: String,
    /// Its entries, in sequence order.
    pub entries: Vec<ConversationEntry>,
    /// Calls to run again, in the order they were requested.
    pub unfinished_calls: Vec<UnfinishedCall>,
    /// Calls that finished, in the order they were requested.
    pub finished_calls: Vec<FinishedCall>,
    /// The sequence number the next entry should get.
    pub next_sequence: u64,
    /// The turn of the last assistant response (0 before any).
    pub turn: u32,
    /// The turn the next assistant response should carry.
    pub next_turn: u32,
    /// The evaluation ended: its last entry is an assistant response with no
    /// tool calls, and nothing is unfinished.
    pub finished: bool,
}

/// Where one evaluation stands, borrowed from a folded conversation: what
/// [`ResumeState`] reports, without copying an entry. A host that decides
/// its next step from a slice it keeps (the agent runner does, at every
/// step) reads this; [`ResumeState::from_slice`] is built from it.
#[derive(Debug)]
pub struct EvaluationState<'a> {
    /// The evaluation's entries, in sequence order.
    pub entries: Vec<&'a ConversationEntry>,
    /// The unfinished calls in the order they were requested, each with the
    /// assistant entry holding it.
    pub unfinished: Vec<(&'a ConversationEntry, &'a ToolCall)>,
    /// The sequence number the next entry should get.
    pub next_sequence: u64,
    /// The turn of the last assistant response (0 before any).
    pub turn: u32,
    /// The evaluation ended: its last entry is an assistant response with
    /// no tool calls, and nothing is unfinished.
    pub finished: bool,
}

impl<'a> EvaluationState<'a> {
    /// The state of `evaluation_id` in `slice`.
    pub fn of(slice: &'a ConversationSlice, evaluation_id: &str) -> EvaluationState<'a> {
        let entries = slice.evaluation(evaluation_id);
        let results = CallResults::new(entries.iter().copied());
        let mut unfinished = Vec::new();
        let mut turn = 0;
        for entry in entries.iter().filter(|entry| entry.role == Role::Assistant) {
            turn = turn.max(entry.turn);
            for call in &entry.tool_calls {
                if results.is_unfinished(&entry.evaluation_id, call) {
                    unfinished.push((*entry, call));
                }
            }
        }
        let finished = unfinished.is_empty()
            && entries
                .last()
                .is_some_and(|last| last.role == Role::Assistant && last.tool_calls.is_empty());
        EvaluationState {
            // `slice.next_sequence`, from the entries in hand: the last in
            // order has the highest sequence.
            next_sequence: entries
                .last()
                .map_or(0, |last| last.sequence.saturating_add(1)),
            entries,
            unfinished,
            turn,
            finished,
        }
    }

    /// The turn the next assistant response should carry. Stored turns are
    /// at most `TURN_MAX` (< `u32::MAX`), so this never saturates for
    /// validated entries; it never wraps to 0.
    pub fn next_turn(&self) -> u32 {
        self.turn.saturating_add(1)
    }
}

impl ResumeState {
    /// Builds the resume state of `evaluation_id` from a folded conversation.
    pub fn from_slice(slice: &ConversationSlice, evaluation_id: &str) -> ResumeState {
        let state = EvaluationState::of(slice, evaluation_id);
        let results = CallResults::new(state.entries.iter().copied());
        let finished_calls = state
            .entries
            .iter()
            .filter(|entry| entry.role == Role::Assistant)
            .flat_map(|entry| entry.tool_calls.iter().map(move |call| (*entry, call)))
            .filter(|(entry, call)| !results.is_unfinished(&entry.evaluation_id, call))
            .map(|(entry, call)| FinishedCall {
                call: call.clone(),
                result: results.answer(&entry.evaluation_id, &call.call_id).cloned(),
            })
            .collect();
        ResumeState {
            conversation_id: slice.conversation_id().to_string(),
            evaluation_id: evaluation_id.to_string(),
            next_sequence: state.next_sequence,
            unfinished_calls: state
                .unfinished
                .iter()
                .map(|(assistant, call)| UnfinishedCall {
                    call: (*call).clone(),
                    assistant_message_id: assistant.message_id,
                })
                .collect(),
            finished_calls,
            turn: state.turn,
            next_turn: state.next_turn(),
            finished: state.finished,
            entries: state.entries.into_iter().cloned().collect(),
        }
    }

    /// The event a host records when it starts running an unfinished call
    /// again after a resume: status running, marked `resumed`.
    pub fn rerun_event(&self, call_id: &str, at: Timestamp) -> Event {
        let mut change = ToolStatusChanged::new(
            &self.conversation_id,
            &self.evaluation_id,
            call_id,
            ToolStatus::Running,
            at,
        );
        change.resumed = true;
        Event::ToolStatus(change)
    }
}

impl Store {
    /// What a host needs to resume a conversation's evaluation; see the
    /// module docs. Fails with `ConversationNotFound`, `EvaluationNotFound`,
    /// `PromptMismatch`, or `SnapshotRestore` when a damaged snapshot has no
    /// fallback.
    pub fn resume(&self, conversation_id: &str, options: &ResumeOptions) -> Result<ResumeState> {
        let slice = self.conversation(conversation_id)?;
        let evaluation_id = match &options.evaluation_id {
            Some(id) if slice.evaluations().iter().any(|known| known == id) => id.clone(),
            Some(id) => {
                return Err(Error::EvaluationNotFound {
                    conversation_id: conversation_id.to_string(),
                    evaluation_id: id.clone(),
                })
            }
            None => slice
                .latest_evaluation()
                .map(str::to_string)
                .ok_or_else(|| Error::ConversationNotFound {
                    conversation_id: conversation_id.to_string(),
                })?,
        };
        let state = ResumeState::from_slice(&slice, &evaluation_id);
        if let Some(expected) = &options.prompt {
            let system = state
                .entries
                .iter()
                .find(|entry| entry.role == Role::System);
            let recorded = PromptIdentity {
                namespace: system.and_then(|entry| entry.prompt_ns.clone()),
                key: system.and_then(|entry| entry.prompt_key.clone()),
            };
            if &recorded != expected {
                return Err(Error::PromptMismatch {
                    conversation_id: conversation_id.to_string(),
                    evaluation_id,
                    recorded: recorded.to_string(),
                    requested: expected.to_string(),
                });
            }
        }
        Ok(state)
    }

    /// The recorded result of call `call_id` in a conversation, if any: a
    /// host re-running a mutating tool returns this instead of acting twice.
    pub fn recorded_result(
        &self,
        conversation_id: &str,
        call_id: &str,
    ) -> Result<Option<ConversationEntry>> {
        Ok(self
            .conversation(conversation_id)?
            .tool_result(call_id)
            .cloned())
    }
}
