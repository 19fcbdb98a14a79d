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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use convlog::history::{curated_event_with, CurationContext};
use convlog::model::{
    ConversationEntry, Event, Role, Timestamp, ToolCall, ToolStatus, ToolStatusChanged,
};
use convlog::resume::EvaluationState;
use convlog::{AppendOptions, ConversationSlice, Durability, Lsn};
use futures_util::stream::{FuturesUnordered, StreamExt};
use uuid::Uuid;

use super::{
    blocking, in_place, view, RunError, RunEvent, RunObserver, RunOutcome, Runner, StopReason,
};
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
    /// This evaluation's appends: those not yet folded into `slice`, and
    /// where each batch began.
    appended: Mutex<Appended>,
    /// `slice` holds every batch of the conversation below this LSN, and
    /// of those at or after it, `batches_folded` (and this evaluation's own
    /// appends): what [`Evaluation::keep`] checks against the store.
    folded_since: Lsn,
    batches_folded: Vec<Lsn>,
    /// What the model was last shown, kept between steps.
    view: view::ModelView,
    /// The tools offered and the render options, built at the first model
    /// call and reused by the evaluation's later ones.
    request_parts: OnceLock<(Vec<crate::ToolSpec>, convlog::RenderOptions)>,
    /// The model call is refused once the evaluation's turn reaches this
    /// (`None`: `RunnerOptions::max_steps`, counted per evaluation).
    turn_limit: Option<u32>,
    /// Call the model even though the evaluation has ended (once).
    answer_again: AtomicBool,
    /// Shown after the view at every model call, never recorded.
    steering: Vec<ConversationEntry>,
    /// Ask the client for a stream (and hand the observer its deltas)
    /// when there is an observer.
    stream: bool,
}

/// An evaluation's appends.
#[derive(Default)]
struct Appended {
    /// Not yet folded into the slice, in the order they were acknowledged
    /// (folded in LSN order).
    unfolded: Vec<(Lsn, Event)>,
    /// The first LSN of each batch.
    batches: Vec<Lsn>,
}

/// How many conversations a runner keeps folded between runs by default
/// ([`KeptSlices`], `RunnerOptions::kept_conversations`).
pub const KEPT_SLICES_MAX: usize = 16;

/// Folded conversations a runner keeps between its runs, so a run of a
/// conversation the runner ran before reads nothing from the store: each
/// with the first LSN of the last batch folded into it. A kept slice is
/// used only while the store lists no batch of its conversation after that
/// one ([`convlog::Store::conversation_batches_since`]); any write by
/// someone else, a snapshot since, or a batch taken back means a fresh
/// read. At most `RunnerOptions::kept_conversations`, the least recently
/// run dropped first.
/// The model view's earlier part is kept with it
/// ([`view::ModelView::into_earlier`]).
#[derive(Debug, Default)]
pub(super) struct KeptSlices {
    slices: std::collections::VecDeque<Kept>,
}

/// One kept conversation.
#[derive(Debug)]
struct Kept {
    conversation_id: String,
    /// The first LSN of the last batch folded into `slice`.
    last_batch: Lsn,
    slice: ConversationSlice,
    /// What the next evaluation shows before its own entries.
    earlier: Option<view::Earlier>,
}

impl KeptSlices {
    fn take(&mut self, conversation_id: &str) -> Option<Kept> {
        let at = self
            .slices
            .iter()
            .position(|kept| kept.conversation_id == conversation_id)?;
        self.slices.remove(at)
    }

    fn keep(&mut self, kept: Kept, max: usize) {
        self.slices
            .retain(|old| old.conversation_id != kept.conversation_id);
        self.slices.push_back(kept);
        while self.slices.len() > max {
            self.slices.pop_front();
        }
    }
}

/// Up to how many id comparisons [`Evaluation::place`] checks a reply's
/// call ids one by one (the reply's calls times the evaluation's and its
/// own); above, with a set.
const CALLS_COMPARED_MAX: usize = 64;

/// What one pass of the loop did.
enum Pass {
    /// The evaluation stops here.
    Stop(StopReason),
    /// Entries recorded (their message ids) and the usage a model call
    /// reported.
    Recorded(Vec<Uuid>, Option<Usage>),
    /// The model gave its final answer (no tool calls), recorded: its
    /// message id and the usage reported. The evaluation has ended (the
    /// model is called only when no call is unfinished, and the answer
    /// adds none), so no pass is needed to find that out.
    Answered(Uuid, Option<Usage>),
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
            appended: Mutex::new(Appended::default()),
            folded_since: 0,
            batches_folded: Vec::new(),
            view: view::ModelView::default(),
            request_parts: OnceLock::new(),
            turn_limit: None,
            answer_again: AtomicBool::new(false),
            steering: Vec::new(),
            stream: true,
        }
    }

    /// Reads the conversation and makes this the driver of its latest
    /// evaluation, as `Runner::generate` carries it on: `max_steps` model
    /// calls from where it stands, one more answer if it has ended,
    /// `steering` shown after the view. A conversation with no entries
    /// gets a new evaluation. The model's replies are requested whole (the
    /// observer gets the steps, not deltas).
    pub(super) async fn latest(&mut self, steering: &[String]) -> Result<(), RunError> {
        let store = Arc::clone(&self.runner.store);
        let conversation = self.conversation_id.clone();
        let read = blocking(move || {
            let since = store.log().visible_next_lsn();
            store
                .conversation(&conversation)
                .map(|slice| (since, slice))
        })
        .await?;
        let (since, slice) = match read {
            Ok(read) => read,
            Err(convlog::Error::ConversationNotFound { .. }) => {
                // Nothing of it is recorded yet (it is claimed: nothing
                // will be but by this evaluation).
                let store = &self.runner.store;
                (
                    store.log().visible_next_lsn(),
                    ConversationSlice::new(self.conversation_id.as_str()),
                )
            }
            Err(error) => return Err(error.into()),
        };
        let latest = slice.latest_evaluation().map_or_else(
            || format!("{}{}", super::EVALUATION_ID_PREFIX, Uuid::new_v4().simple()),
            str::to_string,
        );
        let state = EvaluationState::of(&slice, &latest);
        self.turn_limit = Some(state.turn.saturating_add(self.runner.options.max_steps));
        self.answer_again = AtomicBool::new(state.finished);
        self.steering = steering
            .iter()
            .map(|text| convlog::control::steering_entry(text))
            .collect();
        self.evaluation_id = latest;
        self.slice = Some(slice);
        self.folded_since = since;
        self.stream = false;
        Ok(())
    }

    pub(super) fn note_new(&mut self, entries: &[&ConversationEntry]) {
        self.new_ids
            .extend(entries.iter().map(|entry| entry.message_id));
    }

    /// Hands the event `event` builds to the observer, if there is one
    /// (built only then: an event clones what it reports).
    fn notify(&self, event: impl FnOnce() -> RunEvent) {
        if let Some(observer) = self.observer {
            observer(&event());
        }
    }

    /// Appends one atomic batch. An append that waits for an fsync runs as
    /// blocking work ([`blocking`]); one with `Durability::None` only
    /// copies the batch into the log's buffer and page cache, shorter than
    /// a hand-off to another thread, so it runs right here.
    pub(super) async fn append(&self, events: Vec<Event>) -> Result<(), RunError> {
        let store = Arc::clone(&self.runner.store);
        let durability = self
            .runner
            .options
            .durability
            .unwrap_or_else(|| store.log().durability());
        let options = AppendOptions::new().durability(durability);
        let work = move || {
            store
                .append_with(&events, options)
                .map(|lsns| (lsns, events))
        };
        let (lsns, events) = if durability == Durability::None {
            in_place(work)?
        } else {
            blocking(work).await?
        }?;
        self.notify(|| RunEvent::Recorded {
            first_lsn: lsns.start,
            events: events.clone(),
        });
        let mut appended = self
            .appended
            .lock()
            .expect("no panic while holding the lock");
        appended.batches.push(lsns.start);
        appended.unfolded.extend(lsns.zip(events));
        Ok(())
    }

    /// Starts from the slice the runner kept of this conversation, if the
    /// store holds nothing it lacks. Call before the first append.
    pub(super) fn reuse_kept(&mut self) {
        let kept = self
            .runner
            .kept
            .lock()
            .expect("no panic while holding the lock")
            .take(&self.conversation_id);
        let Some(kept) = kept else {
            return;
        };
        let store = &self.runner.store;
        if store.conversation_batches_since(&self.conversation_id, kept.last_batch)
            == Some(vec![kept.last_batch])
        {
            self.slice = Some(kept.slice);
            self.folded_since = kept.last_batch;
            self.batches_folded = vec![kept.last_batch];
            if let Some(earlier) = kept.earlier {
                self.view = view::ModelView::with_earlier(earlier);
            }
        }
    }

    /// Hands the slice to the runner to keep for the next run, if it still
    /// equals what the store holds: every batch of the conversation since
    /// the slice was read is one this evaluation folded in. Call after
    /// [`Evaluation::outcome`].
    pub(super) fn keep(mut self) {
        if self.runner.options.kept_conversations == 0 {
            return;
        }
        let appended = std::mem::take(
            &mut *self
                .appended
                .lock()
                .expect("no panic while holding the lock"),
        );
        let Some(slice) = self.slice.take() else {
            return;
        };
        if !appended.unfolded.is_empty() {
            return;
        }
        let mut folded = std::mem::take(&mut self.batches_folded);
        let mut own: Vec<Lsn> = appended
            .batches
            .into_iter()
            .filter(|lsn| *lsn >= self.folded_since)
            .collect();
        own.sort_unstable();
        folded.extend(own);
        let Some(&last_batch) = folded.last() else {
            return;
        };
        let store = &self.runner.store;
        if store.conversation_batches_since(&self.conversation_id, self.folded_since)
            == Some(folded)
        {
            let earlier = std::mem::take(&mut self.view).into_earlier(&self.evaluation_id);
            self.runner
                .kept
                .lock()
                .expect("no panic while holding the lock")
                .keep(
                    Kept {
                        conversation_id: std::mem::take(&mut self.conversation_id),
                        last_batch,
                        slice,
                        earlier,
                    },
                    self.runner.options.kept_conversations,
                );
        }
    }

    /// Brings `self.slice` up to date: read from the store the first time,
    /// then with this evaluation's appends folded in.
    async fn refresh(&mut self) -> Result<(), RunError> {
        let mut unfolded = std::mem::take(
            &mut self
                .appended
                .lock()
                .expect("no panic while holding the lock")
                .unfolded,
        );
        match &mut self.slice {
            Some(slice) => {
                unfolded.sort_by_key(|(lsn, _)| *lsn);
                for (lsn, event) in unfolded {
                    slice.apply_owned(event, lsn);
                }
            }
            None => {
                // Everything appended so far is in what the store folds.
                let store = Arc::clone(&self.runner.store);
                let conversation = self.conversation_id.clone();
                let (since, slice) = blocking(move || {
                    let since = store.log().visible_next_lsn();
                    store
                        .conversation(&conversation)
                        .map(|slice| (since, slice))
                })
                .await??;
                self.slice = Some(slice);
                self.folded_since = since;
            }
        }
        Ok(())
    }

    /// Steps until the evaluation ends, the step limit, or calls only a
    /// client can answer. Each step starts from the store.
    pub(super) async fn drive(&mut self) -> Result<StopReason, RunError> {
        loop {
            self.refresh().await?;
            // The view is taken out for the pass (which borrows `self`
            // shared) and put back after it.
            let mut view = std::mem::take(&mut self.view);
            let pass = self.pass(&mut view).await;
            self.view = view;
            match pass? {
                Pass::Stop(reason) => return Ok(reason),
                Pass::Recorded(ids, usage) => {
                    self.new_ids.extend(ids);
                    self.add_usage(usage);
                }
                Pass::Answered(id, usage) => {
                    self.new_ids.push(id);
                    self.add_usage(usage);
                    return Ok(StopReason::Final);
                }
            }
        }
    }

    fn add_usage(&mut self, usage: Option<Usage>) {
        if let Some(usage) = usage {
            self.usage.input_tokens += usage.input_tokens;
            self.usage.output_tokens += usage.output_tokens;
        }
    }

    /// One pass: run the unfinished calls the runner has, or call the
    /// model, or say why the evaluation stops.
    async fn pass(&self, view: &mut view::ModelView) -> Result<Pass, RunError> {
        let slice = self.slice.as_ref().expect("refreshed");
        let state = EvaluationState::of(slice, &self.evaluation_id);
        if state.finished && !self.answer_again.load(Ordering::Relaxed) {
            return Ok(Pass::Stop(StopReason::Final));
        }
        if !state.unfinished.is_empty() {
            let (runnable, unknown): (Vec<_>, Vec<_>) = state
                .unfinished
                .iter()
                .partition(|(_, call)| self.runner.tools.get(&call.name).is_some());
            if runnable.is_empty() {
                let calls = unknown.iter().map(|(_, call)| (*call).clone());
                return Ok(Pass::Stop(StopReason::PendingCalls(calls.collect())));
            }
            let recorded = self.run_calls(&runnable).await?;
            return Ok(Pass::Recorded(recorded, None));
        }
        let max_steps = self.runner.options.max_steps;
        if state.turn >= self.turn_limit.unwrap_or(max_steps) {
            return Ok(Pass::Stop(StopReason::StepLimit { max_steps }));
        }
        self.answer_again.store(false, Ordering::Relaxed);
        let shown = view.update(slice, &self.evaluation_id);
        let curated = self.curate(slice, shown).await?;
        let shown = curated.as_deref().unwrap_or(shown);
        let (id, usage, calls) = if self.steering.is_empty() {
            self.step(shown, &state).await?
        } else {
            self.step(&[shown, &self.steering].concat(), &state).await?
        };
        Ok(if calls {
            Pass::Recorded(vec![id], usage)
        } else {
            Pass::Answered(id, usage)
        })
    }

    /// `shown` curated by the history manager, the curation recorded when
    /// it changed something; `None` when there is no history manager.
    async fn curate(
        &self,
        slice: &ConversationSlice,
        shown: &[ConversationEntry],
    ) -> Result<Option<Vec<ConversationEntry>>, RunError> {
        let runner = self.runner;
        Ok(match &runner.options.history_manager {
            Some(manager) => {
                let context = CurationContext::new()
                    .with_store(&runner.store)
                    .with_conversation(slice);
                let curated = manager.curate(shown, &context);
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
                Some(curated)
            }
            None => None,
        })
    }

    /// One model call with `shown`; the assistant entry recorded. Returns
    /// its message id, the usage reported, and whether it calls tools.
    async fn step(
        &self,
        shown: &[ConversationEntry],
        state: &EvaluationState<'_>,
    ) -> Result<(Uuid, Option<Usage>, bool), RunError> {
        let runner = self.runner;
        let (specs, render) = self
            .request_parts
            .get_or_init(|| (runner.tools.specs(), runner.options.render()));
        let request = ModelRequest {
            entries: shown,
            tools: specs,
            render,
        };
        let reply = match self.observer.filter(|_| self.stream) {
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
        let calls = !entry.tool_calls.is_empty();
        let noticed = self.observer.is_some().then(|| entry.clone());
        self.append(vec![runner.recorded(&self.conversation_id, entry)])
            .await?;
        if let Some(entry) = noticed {
            self.notify(|| RunEvent::AssistantRecorded(entry));
        }
        Ok((id, reply.usage, calls))
    }

    /// The reply as this evaluation's next assistant entry, its calls
    /// pending; refused when a call id is empty or already used in the
    /// evaluation.
    fn place(
        &self,
        mut entry: ConversationEntry,
        state: &EvaluationState<'_>,
    ) -> Result<ConversationEntry, RunError> {
        let held = state
            .entries
            .iter()
            .flat_map(|entry| entry.tool_calls.iter().map(|call| call.call_id.as_str()));
        // Few calls (the common case) are compared one by one; many, in a
        // set.
        let few = entry.tool_calls.len() * (held.clone().count() + entry.tool_calls.len())
            <= CALLS_COMPARED_MAX;
        let mut seen: HashSet<&str> = if few {
            HashSet::new()
        } else {
            held.clone().collect()
        };
        for (index, call) in entry.tool_calls.iter().enumerate() {
            let used_before = if few {
                held.clone().any(|id| id == call.call_id)
                    || entry.tool_calls[..index]
                        .iter()
                        .any(|earlier| earlier.call_id == call.call_id)
            } else {
                !seen.insert(call.call_id.as_str())
            };
            let problem = if call.call_id.is_empty() {
                Some(format!("tool call of {} has an empty id", call.name))
            } else if used_before {
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
        entry.turn = state.next_turn();
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

    fn failure_event(&self, state: &EvaluationState<'_>, error: &crate::ModelError) -> Event {
        let status = match &error.kind {
            ModelErrorKind::Status { status, .. } => Some(*status),
            _ => None,
        };
        let mut failure = ModelCallFailed::new(
            self.conversation_id.clone(),
            self.evaluation_id.clone(),
            state.next_turn(),
            error.to_string(),
        );
        failure.provider = self.runner.client.provider().name().to_string();
        failure.client = self.runner.client.describe();
        failure.url = error.url.clone();
        failure.attempts = error.attempts;
        failure.status = status;
        failure.to_event()
    }

    /// Runs `calls` (each with the assistant entry holding it)
    /// concurrently, recording each start and each result the moment it
    /// happens.
    async fn run_calls(
        &self,
        calls: &[(&ConversationEntry, &ToolCall)],
    ) -> Result<Vec<Uuid>, RunError> {
        if let [(assistant, call)] = calls {
            // One call: nothing to run beside it, so it runs in this task.
            return Ok(vec![self.run_call(assistant, call, Alone::Yes).await?]);
        }
        let mut running: FuturesUnordered<_> = calls
            .iter()
            .map(|(assistant, call)| self.run_call(assistant, call, Alone::No))
            .collect();
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
        assistant: &ConversationEntry,
        call: &ToolCall,
        alone: Alone,
    ) -> Result<Uuid, RunError> {
        let resumed = call.status == ToolStatus::Running;
        let mut running = ToolStatusChanged::new(
            self.conversation_id.as_str(),
            self.evaluation_id.as_str(),
            call.call_id.as_str(),
            ToolStatus::Running,
            Timestamp::now(),
        );
        running.resumed = resumed;
        self.append(vec![Event::ToolStatus(running)]).await?;
        self.notify(|| RunEvent::ToolStarted {
            call: call.clone(),
            resumed,
        });
        let context = Runner::tool_context(
            &self.conversation_id,
            &self.evaluation_id,
            &call.call_id,
            resumed,
        );
        let tools = &self.runner.tools;
        let output = match alone {
            Alone::Yes => tools.call_inline(&call.name, &call.arguments, &context),
            Alone::No => tools.call(&call.name, &call.arguments, &context),
        }
        .await;
        let (entry, status) = result_batch(&self.conversation_id, assistant, call, output);
        let id = entry.message_id;
        let noticed = self.observer.is_some().then(|| entry.clone());
        self.append(vec![
            self.runner.recorded(&self.conversation_id, entry),
            status,
        ])
        .await?;
        if let Some(entry) = noticed {
            self.notify(|| RunEvent::ToolFinished(entry));
        }
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

/// Whether a tool call runs alone (in the runner's task) or beside others
/// of the same assistant message (each in a task of its own, so they run
/// in parallel).
#[derive(Clone, Copy)]
enum Alone {
    Yes,
    No,
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
