//! One evaluation driven from what the store holds: run unfinished calls,
//! call the model, record each step.
//!
//! The conversation is read from the store (folded) once, at the first
//! step; after that the runner folds its own appends into that slice, in
//! LSN order, before each decision: `ConversationSlice::apply` is the
//! store's own fold, so the slice equals a fresh read as long as no other
//! writer appends to the conversation meanwhile (one runner per
//! conversation). A fresh read decodes every event of the conversation;
//! this keeps a step's cost independent of the conversation's length.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use convlog::history::{curated_event_with, CurationContext};
use convlog::model::{
    ConversationEntry, Event, Role, Timestamp, ToolCall, ToolStatus, ToolStatusChanged,
};
use convlog::resume::{ResumeState, UnfinishedCall};
use convlog::{AppendOptions, ConversationSlice, Lsn};
use futures_util::stream::{FuturesUnordered, StreamExt};
use uuid::Uuid;

use super::{blocking, view, RunError, RunEvent, RunObserver, RunOutcome, Runner, StopReason};
use crate::client::{ModelErrorKind, ModelRequest, StreamDelta, Usage};
use crate::tools::ToolError;
use convlog::model::ModelCallFailed;

/// The evaluation a run or resume is driving.
pub(super) struct Evaluation<'r> {
    runner: &'r Runner,
    conversation_id: String,
    evaluation_id: String,
    observer: Option<RunObserver<'r>>,
    /// Message ids this call recorded, in order.
    new_ids: Vec<Uuid>,
    usage: Usage,
    /// The conversation as folded so far (`None` before the first read).
    slice: Option<ConversationSlice>,
    /// This evaluation's appends not yet folded into `slice`, in the order
    /// they were acknowledged (folded in LSN order).
    unfolded: Mutex<Vec<(Lsn, Event)>>,
}

impl<'r> Evaluation<'r> {
    pub(super) fn new(
        runner: &'r Runner,
        conversation_id: &str,
        evaluation_id: &str,
        observer: Option<RunObserver<'r>>,
    ) -> Evaluation<'r> {
        Evaluation {
            runner,
            conversation_id: conversation_id.to_string(),
            evaluation_id: evaluation_id.to_string(),
            observer,
            new_ids: Vec::new(),
            usage: Usage::default(),
            slice: None,
            unfolded: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn note_new(&mut self, entries: &[&ConversationEntry]) {
        self.new_ids
            .extend(entries.iter().map(|entry| entry.message_id));
    }

    fn notify(&self, event: RunEvent) {
        if let Some(observer) = self.observer {
            observer(&event);
        }
    }

    /// Appends one atomic batch on the blocking pool.
    pub(super) async fn append(&self, events: Vec<Event>) -> Result<(), RunError> {
        let store = Arc::clone(&self.runner.store);
        let mut options = AppendOptions::new();
        if let Some(durability) = self.runner.options.durability {
            options = options.durability(durability);
        }
        let (lsns, events) = blocking(move || {
            store
                .append_with(&events, options)
                .map(|lsns| (lsns, events))
        })
        .await??;
        self.unfolded
            .lock()
            .expect("no panic while holding the lock")
            .extend(lsns.zip(events));
        Ok(())
    }

    /// Brings `self.slice` up to date: read from the store the first time,
    /// then with this evaluation's appends folded in.
    async fn refresh(&mut self) -> Result<(), RunError> {
        let mut unfolded = std::mem::take(
            &mut *self
                .unfolded
                .lock()
                .expect("no panic while holding the lock"),
        );
        match &mut self.slice {
            Some(slice) => {
                unfolded.sort_by_key(|(lsn, _)| *lsn);
                for (lsn, event) in &unfolded {
                    slice.apply(event, *lsn);
                }
            }
            None => {
                // Everything appended so far is in what the store folds.
                let store = Arc::clone(&self.runner.store);
                let conversation = self.conversation_id.clone();
                let slice = blocking(move || store.conversation(&conversation)).await??;
                self.slice = Some(slice);
            }
        }
        Ok(())
    }

    /// Steps until the evaluation ends, the step limit, or calls only a
    /// client can answer. Each step starts from the store.
    pub(super) async fn drive(&mut self) -> Result<StopReason, RunError> {
        loop {
            self.refresh().await?;
            let slice = self.slice.as_ref().expect("refreshed");
            let state = ResumeState::from_slice(slice, &self.evaluation_id);
            if state.finished {
                return Ok(StopReason::Final);
            }
            if !state.unfinished_calls.is_empty() {
                let (runnable, unknown): (Vec<&UnfinishedCall>, Vec<&UnfinishedCall>) = state
                    .unfinished_calls
                    .iter()
                    .partition(|unfinished| self.runner.tools.get(&unfinished.call.name).is_some());
                if runnable.is_empty() {
                    let calls = unknown.iter().map(|unfinished| unfinished.call.clone());
                    return Ok(StopReason::PendingCalls(calls.collect()));
                }
                let recorded = self.run_calls(&state, &runnable).await?;
                self.new_ids.extend(recorded);
                continue;
            }
            let max_steps = self.runner.options.max_steps;
            if state.turn >= max_steps {
                return Ok(StopReason::StepLimit { max_steps });
            }
            let shown = view::model_view(slice, &self.evaluation_id);
            let shown = self.curate(slice, shown).await?;
            let (id, usage) = self.step(shown, &state).await?;
            self.new_ids.push(id);
            if let Some(usage) = usage {
                self.usage.input_tokens += usage.input_tokens;
                self.usage.output_tokens += usage.output_tokens;
            }
        }
    }

    /// `shown` curated by the history manager, the curation recorded when
    /// it changed something.
    async fn curate(
        &self,
        slice: &ConversationSlice,
        shown: Vec<ConversationEntry>,
    ) -> Result<Vec<ConversationEntry>, RunError> {
        let runner = self.runner;
        Ok(match &runner.options.history_manager {
            Some(manager) => {
                let context = CurationContext::new()
                    .with_store(&runner.store)
                    .with_conversation(slice);
                let curated = manager.curate(&shown, &context);
                if curated != shown {
                    let event = curated_event_with(
                        &self.conversation_id,
                        &manager.strategy(),
                        shown.len(),
                        curated.len(),
                        Timestamp::now(),
                        &runner.curation_scope(),
                    );
                    self.append(vec![event]).await?;
                }
                curated
            }
            None => shown,
        })
    }

    /// One model call with `shown`; the assistant entry recorded. Returns
    /// its message id and the usage reported.
    async fn step(
        &self,
        shown: Vec<ConversationEntry>,
        state: &ResumeState,
    ) -> Result<(Uuid, Option<Usage>), RunError> {
        let runner = self.runner;
        let specs = runner.tools.specs();
        let render = runner.options.render();
        let request = ModelRequest {
            entries: &shown,
            tools: &specs,
            render: &render,
        };
        let reply = match self.observer {
            Some(observer) => {
                let forward = move |delta: &StreamDelta| observer(&RunEvent::Delta(delta.clone()));
                runner.client.complete(request, Some(&forward)).await
            }
            None => runner.client.complete(request, None).await,
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) => {
                self.append(vec![self.failure_event(state, &error)]).await?;
                return Err(RunError::Model {
                    conversation_id: self.conversation_id.clone(),
                    evaluation_id: self.evaluation_id.clone(),
                    error,
                });
            }
        };
        let entry = self.place(reply.entry, state)?;
        let id = entry.message_id;
        self.append(vec![runner.recorded(&self.conversation_id, entry.clone())])
            .await?;
        self.notify(RunEvent::AssistantRecorded(entry));
        Ok((id, reply.usage))
    }

    /// The reply as this evaluation's next assistant entry, its calls
    /// pending; refused when a call id is empty or already used in the
    /// evaluation.
    fn place(
        &self,
        mut entry: ConversationEntry,
        state: &ResumeState,
    ) -> Result<ConversationEntry, RunError> {
        let mut seen: HashSet<&str> = state
            .entries
            .iter()
            .flat_map(|entry| entry.tool_calls.iter().map(|call| call.call_id.as_str()))
            .collect();
        for call in &entry.tool_calls {
            let problem = if call.call_id.is_empty() {
                Some(format!("tool call of {} has an empty id", call.name))
            } else if !seen.insert(call.call_id.as_str()) {
                Some(format!("tool call id {} is used twice", call.call_id))
            } else {
                None
            };
            if let Some(reason) = problem {
                return Err(RunError::InvalidReply {
                    client: self.runner.client.describe(),
                    evaluation_id: self.evaluation_id.clone(),
                    reason,
                });
            }
        }
        entry.evaluation_id = self.evaluation_id.clone();
        entry.sequence = state.next_sequence;
        entry.turn = state.next_turn;
        entry.role = Role::Assistant;
        entry.created_at = Timestamp::now();
        for call in &mut entry.tool_calls {
            call.status = ToolStatus::Pending;
            call.started_at = None;
            call.ended_at = None;
            call.error = None;
        }
        Ok(entry)
    }

    fn failure_event(&self, state: &ResumeState, error: &crate::ModelError) -> Event {
        let status = match &error.kind {
            ModelErrorKind::Status { status, .. } => Some(*status),
            _ => None,
        };
        let mut failure = ModelCallFailed::new(
            self.conversation_id.clone(),
            self.evaluation_id.clone(),
            state.next_turn,
            error.to_string(),
        );
        failure.provider = self.runner.client.provider().name().to_string();
        failure.client = self.runner.client.describe();
        failure.url = error.url.clone();
        failure.attempts = error.attempts;
        failure.status = status;
        failure.to_event()
    }

    /// Runs `calls` concurrently, recording each start and each result the
    /// moment it happens.
    async fn run_calls(
        &self,
        state: &ResumeState,
        calls: &[&UnfinishedCall],
    ) -> Result<Vec<Uuid>, RunError> {
        let mut running = FuturesUnordered::new();
        for unfinished in calls {
            let assistant = state
                .entries
                .iter()
                .find(|entry| entry.message_id == unfinished.assistant_message_id)
                .expect("an unfinished call's assistant entry is in its evaluation");
            running.push(self.run_call(state, assistant, &unfinished.call));
        }
        let mut finished = Vec::new();
        while let Some(result) = running.next().await {
            finished.push(result?);
        }
        Ok(finished)
    }

    /// Runs one call: `running` recorded (marked resumed when it had
    /// started before), the tool, then result + status in one batch.
    async fn run_call(
        &self,
        state: &ResumeState,
        assistant: &ConversationEntry,
        call: &ToolCall,
    ) -> Result<Uuid, RunError> {
        let resumed = call.status == ToolStatus::Running;
        let running = if resumed {
            state.rerun_event(&call.call_id, Timestamp::now())
        } else {
            Event::tool_status(
                self.conversation_id.as_str(),
                self.evaluation_id.as_str(),
                call.call_id.as_str(),
                ToolStatus::Running,
            )
        };
        self.append(vec![running]).await?;
        self.notify(RunEvent::ToolStarted {
            call: call.clone(),
            resumed,
        });
        let context = Runner::tool_context(
            &self.conversation_id,
            &self.evaluation_id,
            &call.call_id,
            resumed,
        );
        let output = self
            .runner
            .tools
            .call(&call.name, &call.arguments, &context)
            .await;
        let (entry, status) = result_batch(&self.conversation_id, assistant, call, output);
        let id = entry.message_id;
        self.append(vec![
            self.runner.recorded(&self.conversation_id, entry.clone()),
            status,
        ])
        .await?;
        self.notify(RunEvent::ToolFinished(entry));
        Ok(id)
    }

    /// The outcome: the entries this call recorded, as they stand now.
    pub(super) async fn outcome(&mut self, stop: StopReason) -> Result<RunOutcome, RunError> {
        let entries = if self.new_ids.is_empty() {
            Vec::new()
        } else {
            self.refresh().await?;
            let slice = self.slice.as_ref().expect("refreshed");
            let new: HashSet<Uuid> = self.new_ids.iter().copied().collect();
            slice
                .evaluation(&self.evaluation_id)
                .into_iter()
                .filter(|entry| new.contains(&entry.message_id))
                .cloned()
                .collect()
        };
        Ok(RunOutcome {
            evaluation_id: self.evaluation_id.clone(),
            entries,
            stop,
            usage: self.usage,
        })
    }
}

/// The result entry of `call` (held by `assistant`) and its final status,
/// recorded together. The result of the call at position `i` gets sequence
/// `assistant.sequence + 1 + i` and the assistant's turn, whatever order
/// the calls finish in.
/// The longest tool result (or error) text the runner records; a longer
/// one is cut at a character boundary and says how much was cut. The
/// store refuses texts over `convlog::model::TEXT_BYTES_MAX`: without the
/// cut such a result could never be recorded, and every resume would run
/// the tool again only to fail again.
pub const TOOL_RESULT_BYTES_MAX: usize = convlog::model::TEXT_BYTES_MAX / 2;

/// `text` cut to [`TOOL_RESULT_BYTES_MAX`] with a note, if it is longer.
fn within_result_limit(mut text: String, tool: &str) -> String {
    if text.len() <= TOOL_RESULT_BYTES_MAX {
        return text;
    }
    let total = text.len();
    let mut end = TOOL_RESULT_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!(
        "\n[convlog: the result of tool {tool} was {total} bytes; cut to its first {end}]"
    ));
    text
}

pub(super) fn result_batch(
    conversation_id: &str,
    assistant: &ConversationEntry,
    call: &ToolCall,
    output: Result<String, ToolError>,
) -> (ConversationEntry, Event) {
    let position = assistant
        .tool_calls
        .iter()
        .position(|held| held.call_id == call.call_id)
        .unwrap_or(0) as u64;
    let sequence = assistant.sequence.saturating_add(1 + position);
    let evaluation_id = assistant.evaluation_id.as_str();
    let output = output
        .map(|text| within_result_limit(text, &call.name))
        .map_err(|ToolError(text)| ToolError(within_result_limit(text, &call.name)));
    let (entry, status, error) = match output {
        Ok(text) => (
            ConversationEntry::tool_result(
                evaluation_id,
                sequence,
                &call.call_id,
                &call.name,
                text,
            ),
            ToolStatus::Completed,
            None,
        ),
        Err(ToolError(text)) => (
            ConversationEntry::tool_error(
                evaluation_id,
                sequence,
                &call.call_id,
                &call.name,
                text.clone(),
            ),
            ToolStatus::Failed,
            Some(text),
        ),
    };
    let entry = entry.with_turn(assistant.turn);
    let mut change = ToolStatusChanged::new(
        conversation_id,
        evaluation_id,
        &call.call_id,
        status,
        entry.created_at,
    );
    change.error = error;
    (entry, Event::ToolStatus(change))
}
