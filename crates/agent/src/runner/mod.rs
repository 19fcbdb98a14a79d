//! The agent loop: calls the model, runs tools, records every step in a
//! convlog store, and resumes an interrupted evaluation by itself.
//!
//! A [`Runner`] holds a store, a [`ModelClient`] and a [`Toolset`]. One
//! [`Runner::run`] is one *evaluation* of the conversation (a fresh
//! evaluation id); it records, each the moment it happens:
//!
//! 1. the system entry (sequence 0, carrying the prompt identity) and the
//!    user input (sequence 1), in one atomic batch;
//! 2. before each provider call, when the history manager changed what the
//!    model is shown, a `history_curated` event;
//! 3. each assistant response as soon as it is complete (next sequence,
//!    next turn), its tool calls pending in it;
//! 4. for each call it starts, a `running` status event; the parallel calls
//!    of one response run concurrently;
//! 5. each call's result the moment it finishes: the result entry and its
//!    `completed` / `failed` status in **one** atomic batch, so a crash never
//!    leaves one without the other. The result of the call at position `i`
//!    of an assistant entry at sequence `s` gets sequence `s + 1 + i`,
//!    whatever order the calls finish in, so a run and a resumed run give
//!    the same conversation;
//! 6. a failed model call (after the client's retries) as a custom event of
//!    kind [`MODEL_CALL_FAILED`].
//!
//! The loop stops at a final answer (an assistant response with no tool
//! calls), at the step limit ([`RunnerOptions::max_steps`], model calls per
//! evaluation), or when the model calls a tool the runner does not have:
//! that call stays *pending* and is returned in [`StopReason::PendingCalls`].
//! A client answers it later ([`Runner::answer_call`], or any append of a
//! result entry for that call) and continues with [`Runner::resume`].
//!
//! **The loop is the resume.** Every step decides from the recorded state
//! ([`convlog::resume::ResumeState`] of the evaluation; the conversation is
//! read from the store at most once per run or resume, then the runner
//! folds its own appends into it, with the store's fold; a runner keeps the
//! last [`KEPT_SLICES_MAX`] conversations it ran folded between runs, and
//! uses a kept one only while the store lists no batch of it that the
//! runner did not fold in itself): unfinished calls
//! the runner has are run (a call whose `running` status was recorded is
//! run again with [`ToolContext::resumed`] set and its new `running` event
//! marked `resumed`; a call still pending was never started), a call with a
//! recorded result is never run again, and when every call is answered and
//! the last entry is not a final answer the model is called. So
//! [`Runner::resume`] after a crash at any point continues exactly as the
//! uninterrupted run would have.
//!
//! **What the model is shown** (built from the store before each call):
//! this evaluation's system entries, then the non-system entries of the
//! evaluations that started before it (in log order), then this
//! evaluation's non-system entries; a tool call no result entry answers is
//! left out of its assistant entry (an assistant entry left with nothing is
//! dropped), and a result whose call is not shown is dropped, so a request
//! never holds a dangling call. The history manager then curates that view.
//!
//! **Blocking store work.** Appends that wait for an fsync and reads never
//! block an executor (an append with `Durability::None` runs in the task):
//! on a multi-thread runtime they run in place under
//! [`tokio::task::block_in_place`] (the worker's other tasks move to
//! another worker; no hop to another thread and back), on a current-thread
//! runtime on the blocking pool ([`tokio::task::spawn_blocking`]), where
//! `block_in_place` is not allowed.
//!
//! One runner at a time per conversation: two resuming the same
//! evaluation at once would both re-run its unfinished calls. A run, a
//! resume and [`Runner::answer_call`] claim the conversation for their
//! duration; another one meanwhile (any runner on the same `Arc<Store>`)
//! fails with [`RunError::Busy`] and records nothing.

mod claim;
mod drive;
mod generator;
mod view;

use std::fmt;
use std::sync::Arc;

use convlog::history::{CurationScope, HistoryManager};
use convlog::model::{ConversationEntry, Event, Role, ToolCall};
use convlog::provider::DisplayName;
use convlog::resume::{PromptIdentity, ResumeOptions};
use convlog::{Durability, RenderOptions, Store};

use crate::client::{ModelClient, ModelError, StreamDelta, Usage};
use crate::tools::{ToolContext, Toolset};

pub use drive::{KEPT_SLICES_MAX, TOOL_RESULT_BYTES_MAX};
pub use generator::RunnerGenerator;

/// The custom-event kind recording a failed model call (the core's
/// [`convlog::model::MODEL_CALL_FAILED`]); its payload is a
/// [`convlog::model::ModelCallFailed`] as JSON: `conversation_id`,
/// `evaluation_id`, `turn` (the turn the response would have had),
/// `provider` (the mapper's name), `client` ([`ModelClient::describe`]),
/// `url`, `attempts`, `status` (the HTTP status, or null) and `error` (the
/// error's text verbatim, provider body included).
pub use convlog::model::MODEL_CALL_FAILED;

/// Model calls per evaluation when [`RunnerOptions::max_steps`] is not set.
pub const DEFAULT_MAX_STEPS: u32 = 32;

/// Prefix of the evaluation ids [`Runner::run`] makes (then a UUID).
pub const EVALUATION_ID_PREFIX: &str = "eval-";

/// How a [`Runner`] records and what it shows the model.
///
/// A builder: start from [`RunnerOptions::new`] and chain a setter per
/// option, each named as the field it sets.
#[derive(Clone)]
#[non_exhaustive]
pub struct RunnerOptions {
    /// The system prompt recorded at the start of each evaluation (`None`:
    /// a system entry with no text is recorded, so the evaluation still
    /// carries its prompt identity; the default system prompt, if any, is
    /// injected when rendering).
    pub system_prompt: Option<String>,
    /// The prompt identity (namespace, key) recorded on the system entry;
    /// [`Runner::resume`] refuses an evaluation recorded with another one
    /// (`convlog::Error::PromptMismatch`).
    pub prompt: Option<PromptIdentity>,
    /// Injected as the system prompt when what the model is shown holds no
    /// system entry with text (render-time only, never recorded).
    pub default_system_prompt: Option<String>,
    /// Replacement applied to the injected default system prompt.
    pub display_name: Option<DisplayName>,
    /// Pass reasoning back where the provider accepts it (default true).
    pub include_reasoning: bool,
    /// Curates what the model is shown before each call; a change is
    /// recorded as `history_curated`.
    pub history_manager: Option<Arc<dyn HistoryManager>>,
    /// Model calls per evaluation ([`DEFAULT_MAX_STEPS`]).
    pub max_steps: u32,
    /// The host session recorded on every entry the runner records.
    pub session_id: Option<String>,
    /// Durability of the runner's appends (`None`: the store's default).
    pub durability: Option<Durability>,
    /// How many conversations the runner keeps folded between runs
    /// (default [`KEPT_SLICES_MAX`]; 0 keeps none, and every run reads its
    /// conversation from the store).
    pub kept_conversations: usize,
}

impl Default for RunnerOptions {
    fn default() -> RunnerOptions {
        RunnerOptions {
            system_prompt: None,
            prompt: None,
            default_system_prompt: None,
            display_name: None,
            include_reasoning: true,
            history_manager: None,
            max_steps: DEFAULT_MAX_STEPS,
            session_id: None,
            durability: None,
            kept_conversations: KEPT_SLICES_MAX,
        }
    }
}

impl fmt::Debug for RunnerOptions {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("RunnerOptions")
            .field("system_prompt", &self.system_prompt)
            .field("prompt", &self.prompt)
            .field("default_system_prompt", &self.default_system_prompt)
            .field("display_name", &self.display_name)
            .field("include_reasoning", &self.include_reasoning)
            .field(
                "history_manager",
                &self
                    .history_manager
                    .as_ref()
                    .map(|manager| manager.strategy()),
            )
            .field("max_steps", &self.max_steps)
            .field("session_id", &self.session_id)
            .field("durability", &self.durability)
            .field("kept_conversations", &self.kept_conversations)
            .finish()
    }
}

impl RunnerOptions {
    /// The defaults: no system prompt, no prompt identity, reasoning
    /// included, no history manager, [`DEFAULT_MAX_STEPS`].
    pub fn new() -> RunnerOptions {
        RunnerOptions::default()
    }

    /// Sets the system prompt recorded at the start of each evaluation.
    pub fn system_prompt(mut self, system_prompt: Option<String>) -> RunnerOptions {
        self.system_prompt = system_prompt;
        self
    }

    /// Sets the prompt identity recorded and checked on resume.
    pub fn prompt(mut self, prompt: Option<PromptIdentity>) -> RunnerOptions {
        self.prompt = prompt;
        self
    }

    /// Sets the default system prompt injected when none is shown.
    pub fn default_system_prompt(mut self, default_system_prompt: Option<String>) -> RunnerOptions {
        self.default_system_prompt = default_system_prompt;
        self
    }

    /// Sets the display-name replacement in the default system prompt.
    pub fn display_name(mut self, display_name: Option<DisplayName>) -> RunnerOptions {
        self.display_name = display_name;
        self
    }

    /// Sets whether reasoning is sent back where the provider accepts it.
    pub fn include_reasoning(mut self, include_reasoning: bool) -> RunnerOptions {
        self.include_reasoning = include_reasoning;
        self
    }

    /// Sets the history manager.
    pub fn history_manager(
        mut self,
        history_manager: Option<Arc<dyn HistoryManager>>,
    ) -> RunnerOptions {
        self.history_manager = history_manager;
        self
    }

    /// Sets the model calls allowed per evaluation.
    pub fn max_steps(mut self, max_steps: u32) -> RunnerOptions {
        self.max_steps = max_steps;
        self
    }

    /// Sets the session id recorded on every entry.
    pub fn session_id(mut self, session_id: Option<String>) -> RunnerOptions {
        self.session_id = session_id;
        self
    }

    /// Sets the durability of the runner's appends.
    pub fn durability(mut self, durability: Option<Durability>) -> RunnerOptions {
        self.durability = durability;
        self
    }

    /// Sets how many conversations the runner keeps folded between runs
    /// (0: none).
    pub fn kept_conversations(mut self, kept_conversations: usize) -> RunnerOptions {
        self.kept_conversations = kept_conversations;
        self
    }

    /// The render options handed to the client.
    fn render(&self) -> RenderOptions {
        RenderOptions::new()
            .default_system_prompt(self.default_system_prompt.clone())
            .display_name(self.display_name.clone())
            .include_reasoning(self.include_reasoning)
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The model gave a final answer (no tool calls).
    Final,
    /// The evaluation reached [`RunnerOptions::max_steps`] model calls; the
    /// tools of the last response ran. [`Runner::resume`] stops here again
    /// unless a runner with a higher limit resumes it.
    StepLimit {
        /// The limit.
        max_steps: u32,
    },
    /// The model called tools the runner does not have: they stay pending
    /// in the store. Answer them ([`Runner::answer_call`]) and call
    /// [`Runner::resume`] to continue.
    PendingCalls(Vec<ToolCall>),
    /// [`Runner::resume`] found the evaluation already finished: nothing
    /// was done.
    AlreadyFinished,
}

/// What one [`Runner::run`] or [`Runner::resume`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The evaluation.
    pub evaluation_id: String,
    /// Only the entries this call recorded (system and user entries of a
    /// new evaluation included), in sequence order, with the tool-call
    /// statuses as they stand at its end.
    pub entries: Vec<ConversationEntry>,
    /// Why it stopped.
    pub stop: StopReason,
    /// Tokens the provider reported for this call's model calls, summed.
    pub usage: Usage,
}

impl RunOutcome {
    /// The text of the last new assistant entry with text (the answer, for
    /// [`StopReason::Final`]).
    pub fn output(&self) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .filter(|entry| entry.role == Role::Assistant)
            .find_map(|entry| entry.content.as_deref().filter(|text| !text.is_empty()))
    }
}

/// A step of a streamed run, delivered as it happens.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RunEvent {
    /// A piece of the model's reply, from the client's stream.
    Delta(StreamDelta),
    /// An assistant entry was recorded (as recorded).
    AssistantRecorded(ConversationEntry),
    /// A tool call started (its `running` status was recorded).
    ToolStarted {
        /// The call.
        call: ToolCall,
        /// It is run again after a resume.
        resumed: bool,
    },
    /// A tool call finished: its result entry was recorded.
    ToolFinished(ConversationEntry),
    /// A batch of events was recorded (every append of the run; the steps
    /// above follow their own batch): the LSN of its first event, and the
    /// events as recorded. Tool calls side by side record from tasks of
    /// their own, so their batches may arrive out of LSN order: order by
    /// `first_lsn` where it matters.
    Recorded {
        /// The LSN of the batch's first event.
        first_lsn: convlog::Lsn,
        /// The batch.
        events: Vec<Event>,
    },
}

/// Receives the steps of [`Runner::run_stream`].
pub type RunObserver<'a> = &'a (dyn Fn(&RunEvent) + Send + Sync);

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The store failed (or refused: `PromptMismatch`,
    /// `ConversationNotFound`, ...).
    #[error(transparent)]
    Store(#[from] convlog::Error),
    /// The model call failed after the client's retries; it was recorded
    /// as a [`MODEL_CALL_FAILED`] event. `error` is the client's error as
    /// it was (the provider's body verbatim).
    #[error("model call failed in evaluation {evaluation_id} of {conversation_id}: {error}")]
    Model {
        /// The conversation.
        conversation_id: String,
        /// The evaluation.
        evaluation_id: String,
        /// The client's error.
        error: ModelError,
    },
    /// The model's reply cannot be recorded (nothing was recorded).
    #[error("the reply of {client} in evaluation {evaluation_id} cannot be recorded: {reason}")]
    InvalidReply {
        /// The client ([`ModelClient::describe`]).
        client: String,
        /// The evaluation.
        evaluation_id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// [`Runner::answer_call`]: no unfinished call with this id.
    #[error("conversation {conversation_id} has no unfinished tool call {call_id}")]
    NoSuchPendingCall {
        /// The conversation.
        conversation_id: String,
        /// The call id.
        call_id: String,
    },
    /// Another run, resume or answer of this conversation is in progress
    /// in this process (one runner at a time per conversation: two would
    /// both run its unfinished calls). Nothing was recorded; try again
    /// when it has returned.
    #[error("conversation {conversation_id} is being run by another runner; try again when it has finished")]
    Busy {
        /// The conversation.
        conversation_id: String,
    },
    /// A blocking store task could not finish (the runtime is shutting
    /// down, or it panicked).
    #[error("a store task did not finish: {0}")]
    Task(String),
}

/// A conversation claimed for [`Runner::generate`] ([`Runner::claim`]);
/// dropping it releases the conversation.
pub struct ConversationClaim {
    claim: claim::Claim,
    conversation_id: String,
}

impl ConversationClaim {
    /// The claimed conversation.
    pub fn conversation_id(&self) -> &str {
        &self.conversation_id
    }
}

impl fmt::Debug for ConversationClaim {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ConversationClaim")
            .field("conversation_id", &self.conversation_id)
            .finish()
    }
}

/// The agent loop over one store, one model client and one tool set. See
/// the module docs for what is recorded when.
#[derive(Clone)]
pub struct Runner {
    store: Arc<Store>,
    client: Arc<dyn ModelClient>,
    tools: Toolset,
    options: RunnerOptions,
    /// Conversations kept folded between runs (shared by clones).
    kept: Arc<std::sync::Mutex<drive::KeptSlices>>,
}

impl fmt::Debug for Runner {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Runner")
            .field("client", &self.client.describe())
            .field("tools", &self.tools)
            .field("options", &self.options)
            .finish()
    }
}

impl Runner {
    /// A runner recording in `store`, calling `client`, running `tools`.
    pub fn new(
        store: Arc<Store>,
        client: Arc<dyn ModelClient>,
        tools: Toolset,
        options: RunnerOptions,
    ) -> Runner {
        Runner {
            store,
            client,
            tools,
            options,
            kept: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The options.
    pub fn options(&self) -> &RunnerOptions {
        &self.options
    }

    /// The tools.
    pub fn tools(&self) -> &Toolset {
        &self.tools
    }

    /// Drops the conversations the runner keeps folded between runs (their
    /// memory; the next run of each reads it from the store).
    pub fn forget_kept(&self) {
        *self.kept.lock().expect("no panic while holding the lock") = Default::default();
    }

    /// A new evaluation of `conversation_id` (created if new) with the user
    /// `input`, run to a final answer, the step limit or pending calls.
    /// Returns only what it recorded.
    pub async fn run(
        &self,
        conversation_id: &str,
        input: impl Into<String>,
    ) -> Result<RunOutcome, RunError> {
        self.start(conversation_id, input.into(), None).await
    }

    /// [`Runner::run`], handing `observer` the model's stream deltas and
    /// each step (assistant recorded, tool started, tool finished) as it
    /// happens.
    pub async fn run_stream(
        &self,
        conversation_id: &str,
        input: impl Into<String>,
        observer: RunObserver<'_>,
    ) -> Result<RunOutcome, RunError> {
        self.start(conversation_id, input.into(), Some(observer))
            .await
    }

    /// Continues the latest evaluation of `conversation_id` (checked
    /// against the runner's prompt identity when it has one): re-runs only
    /// its unfinished calls, calls the model when an answer is missing,
    /// and carries on to the end. A finished evaluation returns at once
    /// with [`StopReason::AlreadyFinished`] and no entries.
    pub async fn resume(&self, conversation_id: &str) -> Result<RunOutcome, RunError> {
        let options = ResumeOptions::new().prompt(self.options.prompt.clone());
        self.resume_with(conversation_id, options, None).await
    }

    /// [`Runner::resume`] with explicit options (which evaluation; which
    /// prompt identity the evaluation must carry, else
    /// `convlog::Error::PromptMismatch`), and an optional observer.
    pub async fn resume_with(
        &self,
        conversation_id: &str,
        options: ResumeOptions,
        observer: Option<RunObserver<'_>>,
    ) -> Result<RunOutcome, RunError> {
        let _claim = claim::Claim::take(&self.store, conversation_id)?;
        let store = Arc::clone(&self.store);
        let conversation = conversation_id.to_string();
        let state = blocking(move || store.resume(&conversation, &options)).await??;
        let mut evaluation =
            drive::Evaluation::new(self, conversation_id, &state.evaluation_id, observer);
        if state.finished {
            return evaluation.outcome(StopReason::AlreadyFinished).await;
        }
        let stop = evaluation.drive().await?;
        evaluation.outcome(stop).await
    }

    /// Answers the unfinished call `call_id` of `conversation_id` (one the
    /// runner returned as pending): records its result entry (an error
    /// result for `Err`) at the call's place and its final status, in one
    /// batch. Continue with [`Runner::resume`].
    pub async fn answer_call(
        &self,
        conversation_id: &str,
        call_id: &str,
        output: Result<String, String>,
    ) -> Result<ConversationEntry, RunError> {
        let _claim = claim::Claim::take(&self.store, conversation_id)?;
        let store = Arc::clone(&self.store);
        let conversation = conversation_id.to_string();
        let slice = blocking(move || store.conversation(&conversation)).await??;
        let not_pending = || RunError::NoSuchPendingCall {
            conversation_id: conversation_id.to_string(),
            call_id: call_id.to_string(),
        };
        let (assistant, call) = slice.tool_call(call_id).ok_or_else(not_pending)?;
        let evaluation_id = assistant.evaluation_id.clone();
        let state = convlog::ResumeState::from_slice(&slice, &evaluation_id);
        if !state
            .unfinished_calls
            .iter()
            .any(|unfinished| unfinished.call.call_id == call_id)
        {
            return Err(not_pending());
        }
        let (entry, status) = drive::result_batch(
            conversation_id,
            assistant,
            call,
            output.map_err(crate::tools::ToolError),
        );
        let evaluation = drive::Evaluation::new(self, conversation_id, &evaluation_id, None);
        evaluation
            .append(vec![self.recorded(conversation_id, entry.clone()), status])
            .await?;
        Ok(entry)
    }

    /// Claims `conversation_id` for a [`Runner::generate`] (one runner at
    /// a time per conversation): while the claim is held, every other run,
    /// resume, answer or claim of it fails with [`RunError::Busy`]. A host
    /// that records something before generating (message control's human
    /// message of a chat request) records it under the claim, so no other
    /// run answers it first.
    pub fn claim(&self, conversation_id: &str) -> Result<ConversationClaim, RunError> {
        Ok(ConversationClaim {
            claim: claim::Claim::take(&self.store, conversation_id)?,
            conversation_id: conversation_id.to_string(),
        })
    }

    /// Message control's generation, recorded step by step: carries the
    /// claimed conversation's latest evaluation on, whatever recorded it
    /// (this runner, message control's `add_messages`, a host's append).
    ///
    /// - unfinished calls the runner has tools for are run (again, marked
    ///   resumed, when their `running` status was recorded), the finished
    ///   ones never; calls to tools it does not have stop the run with
    ///   [`StopReason::PendingCalls`];
    /// - when every call is answered the model is called, and the loop goes
    ///   on as in [`Runner::run`]; an evaluation that already ended (its
    ///   last entry a final answer) is answered again once, as message
    ///   control's `invoke` does;
    /// - `steering` texts are shown to the model as system messages after
    ///   the conversation, at every model call of this generation, and
    ///   never recorded (message control's temporary steering);
    /// - [`RunnerOptions::max_steps`] counts the model calls of this
    ///   generation (not of the evaluation, which message control keeps
    ///   open across many requests).
    ///
    /// Nothing else is recorded at the start: a host records the human or
    /// system message first, under the claim. A conversation with no
    /// entries gets a new evaluation (`eval-<uuid>`). The model's replies
    /// are requested whole: `observer` gets the steps and every recorded
    /// batch ([`RunEvent::Recorded`]), no deltas.
    ///
    /// # Panics
    ///
    /// If `claim` was taken on another store's runner.
    pub async fn generate(
        &self,
        claim: &ConversationClaim,
        steering: &[String],
        observer: Option<RunObserver<'_>>,
    ) -> Result<RunOutcome, RunError> {
        assert!(
            claim.claim.is_of(&self.store),
            "a claim is used with a runner of its own store"
        );
        let conversation_id = claim.conversation_id.as_str();
        let mut evaluation = drive::Evaluation::new(self, conversation_id, "", observer);
        evaluation.latest(steering).await?;
        let stop = evaluation.drive().await?;
        evaluation.outcome(stop).await
    }

    async fn start(
        &self,
        conversation_id: &str,
        input: String,
        observer: Option<RunObserver<'_>>,
    ) -> Result<RunOutcome, RunError> {
        let _claim = claim::Claim::take(&self.store, conversation_id)?;
        let evaluation_id = format!("{EVALUATION_ID_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let mut system = ConversationEntry::new(
            evaluation_id.as_str(),
            0,
            Role::System,
            self.options.system_prompt.clone(),
        );
        if let Some(prompt) = &self.options.prompt {
            system.prompt_ns = prompt.namespace.clone();
            system.prompt_key = prompt.key.clone();
        }
        let user = ConversationEntry::user(evaluation_id.as_str(), 1, input);
        let mut evaluation =
            drive::Evaluation::new(self, conversation_id, &evaluation_id, observer);
        evaluation.reuse_kept();
        evaluation.note_new(&[&system, &user]);
        evaluation
            .append(vec![
                self.recorded(conversation_id, system),
                self.recorded(conversation_id, user),
            ])
            .await?;
        let stop = evaluation.drive().await?;
        let outcome = evaluation.outcome(stop).await?;
        evaluation.keep();
        Ok(outcome)
    }

    /// `entry` recorded in `conversation_id` by this runner's session.
    fn recorded(&self, conversation_id: &str, entry: ConversationEntry) -> Event {
        Event::ConversationRecorded(Box::new(convlog::model::ConversationRecorded {
            conversation_id: conversation_id.to_string(),
            session_id: self.options.session_id.clone(),
            created_at: entry.created_at,
            entry,
        }))
    }

    /// What a `history_curated` event records of this runner: the prompt
    /// identity (`namespace/key`) as the prompt name, and the session id.
    fn curation_scope(&self) -> CurationScope {
        let mut scope = CurationScope::new();
        if let Some(prompt) = &self.options.prompt {
            scope = scope.prompt_name(prompt.to_string());
        }
        if let Some(session_id) = &self.options.session_id {
            scope = scope.session_id(session_id.clone());
        }
        scope
    }

    /// The tool context of a call.
    fn tool_context(
        conversation_id: &str,
        evaluation_id: &str,
        call_id: &str,
        resumed: bool,
    ) -> ToolContext {
        ToolContext {
            conversation_id: conversation_id.to_string(),
            evaluation_id: evaluation_id.to_string(),
            call_id: call_id.to_string(),
            resumed,
        }
    }
}

/// Runs store work (an append's write and fsync, a read) without blocking
/// an executor: in place on a multi-thread runtime (`block_in_place` moves
/// the worker's other tasks elsewhere — no hop to another thread and back,
/// which costs more than a small append), on the blocking pool on a
/// current-thread runtime (where `block_in_place` is not allowed). A panic
/// in it is a [`RunError::Task`] either way.
/// Runs short store work right here, a panic in it a [`RunError::Task`]
/// as in [`blocking`].
fn in_place<T>(work: impl FnOnce() -> T) -> Result<T, RunError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
        .map_err(|panic| RunError::Task(panic_text(panic.as_ref())))
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RunError> {
    let flavor = tokio::runtime::Handle::current().runtime_flavor();
    if flavor == tokio::runtime::RuntimeFlavor::MultiThread {
        let work = std::panic::AssertUnwindSafe(work);
        return tokio::task::block_in_place(|| std::panic::catch_unwind(work))
            .map_err(|panic| RunError::Task(panic_text(panic.as_ref())));
    }
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| RunError::Task(error.to_string()))
}

/// The message of a panic's payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        format!("store work panicked: {text}")
    } else if let Some(text) = payload.downcast_ref::<String>() {
        format!("store work panicked: {text}")
    } else {
        "store work panicked".to_string()
    }
}
