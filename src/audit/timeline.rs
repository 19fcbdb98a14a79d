//! The timeline model: one conversation as evaluations → turns → messages,
//! tool calls with status and duration, and what the fold flagged.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::format::{serialize_time, serialize_time_always};
use crate::conversation::{CallResults, ConversationSlice, RecordedEntry};
use crate::error::Result;
use crate::log::Lsn;
use crate::model::{Event, ModelCallFailed, Role, Timestamp, ToolCall, ToolStatus};
use crate::store::Store;

/// Characters kept of each text field by default ([`TimelineOptions::default`]).
pub const TEXT_CHARS_DEFAULT: usize = 2_000;

/// Characters kept of each text field for an HTML page
/// ([`TimelineOptions::for_html`]): long messages stay readable in a
/// scrolling box, and a multi-megabyte tool result does not make a
/// multi-megabyte page.
pub const TEXT_CHARS_HTML: usize = 100_000;

/// How a [`Timeline`] is built.
///
/// A builder, so a new option never breaks a host: start from `new()` (the
/// defaults) and chain a setter per option, each named as the field it
/// sets; the fields stay public for reading.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimelineOptions {
    /// Most characters kept of each text field (content, reasoning,
    /// arguments, errors, metadata values); `None` keeps them whole.
    pub text_chars: Option<usize>,
}

impl Default for TimelineOptions {
    /// Text fields cut at [`TEXT_CHARS_DEFAULT`] characters.
    fn default() -> TimelineOptions {
        TimelineOptions {
            text_chars: Some(TEXT_CHARS_DEFAULT),
        }
    }
}

impl TimelineOptions {
    /// Text fields cut at [`TEXT_CHARS_DEFAULT`] characters.
    pub fn new() -> TimelineOptions {
        TimelineOptions::default()
    }

    /// Sets the most characters kept of each text field (`None`: whole).
    pub fn text_chars(mut self, text_chars: Option<usize>) -> TimelineOptions {
        self.text_chars = text_chars;
        self
    }

    /// Every text field whole.
    pub fn full() -> TimelineOptions {
        TimelineOptions { text_chars: None }
    }

    /// Text fields cut at [`TEXT_CHARS_HTML`] characters.
    pub fn for_html() -> TimelineOptions {
        TimelineOptions {
            text_chars: Some(TEXT_CHARS_HTML),
        }
    }
}

/// A text field, possibly cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrimmedText {
    /// The text (ending with `…` when cut).
    pub text: String,
    /// Characters of the whole text.
    pub chars: usize,
    /// Whether `text` was cut.
    pub truncated: bool,
}

impl TrimmedText {
    /// `text` cut to `limit` characters (`None`: whole).
    pub fn new(text: &str, limit: Option<usize>) -> TrimmedText {
        let chars = text.chars().count();
        match limit {
            Some(limit) if chars > limit => TrimmedText {
                text: super::format::cut(text, limit.max(1)),
                chars,
                truncated: true,
            },
            _ => TrimmedText {
                text: text.to_string(),
                chars,
                truncated: false,
            },
        }
    }
}

/// What the folded slice does not keep, collected from a conversation's
/// events as far as they were read: which calls a host re-ran after a
/// resume (a `tool_status` event with `resumed` set), and the failed model
/// calls (custom events of kind
/// [`MODEL_CALL_FAILED`](crate::model::MODEL_CALL_FAILED)).
///
/// [`AuditView`](super::AuditView) and [`Timeline::from_store`] collect it
/// in their one pass over the log ([`ResumedCalls::observe_at`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumedCalls {
    visible_from: Lsn,
    calls: HashSet<(String, String)>,
    model_failures: Vec<(Lsn, std::result::Result<ModelCallFailed, String>)>,
}

impl ResumedCalls {
    /// An empty set for events read from LSN `visible_from` on (events
    /// before it, compacted away or not read, are unknown).
    pub fn new(visible_from: Lsn) -> ResumedCalls {
        ResumedCalls {
            visible_from,
            calls: HashSet::new(),
            model_failures: Vec::new(),
        }
    }

    /// [`ResumedCalls::observe`], and notes a failed model call (a custom
    /// event of kind [`MODEL_CALL_FAILED`](crate::model::MODEL_CALL_FAILED))
    /// recorded at `lsn`, readable or not. The caller passes one
    /// conversation's events in log order.
    pub fn observe_at(&mut self, lsn: Lsn, event: &Event) {
        self.observe(event);
        if let Some(failure) = ModelCallFailed::from_event(event) {
            self.model_failures.push((lsn, failure));
        }
    }

    /// Notes the call of a `tool_status` event with `resumed` set; other
    /// events are ignored. The caller passes one conversation's events.
    pub fn observe(&mut self, event: &Event) {
        if let Event::ToolStatus(change) = event {
            if change.resumed {
                self.calls
                    .insert((change.evaluation_id.clone(), change.call_id.clone()));
            }
        }
    }

    /// The first LSN whose events were read.
    pub fn visible_from(&self) -> Lsn {
        self.visible_from
    }

    /// Whether call `call_id` of `evaluation_id` was re-run after a resume.
    pub fn contains(&self, evaluation_id: &str, call_id: &str) -> bool {
        self.calls
            .contains(&(evaluation_id.to_string(), call_id.to_string()))
    }
}

/// Where a call's duration comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DurationSource {
    /// From its `started_at` (status running) to its `ended_at`.
    StatusTimes,
    /// From the assistant entry's `created_at` to its result entry's.
    EntryTimes,
    /// From the assistant entry's `created_at` to the call's `ended_at`
    /// (it finished by a status event, with no running status and no result).
    RequestToEnd,
}

/// Tool calls counted by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CallCounts {
    /// Every call.
    pub total: usize,
    /// Completed.
    pub completed: usize,
    /// Failed.
    pub failed: usize,
    /// Pending or running with no result: a resume would run them again.
    pub unfinished: usize,
    /// Re-run after a resume (when visible).
    pub resumed: usize,
}

impl CallCounts {
    fn add(&mut self, call: &CallView) {
        self.total += 1;
        match call.status {
            ToolStatus::Completed => self.completed += 1,
            ToolStatus::Failed => self.failed += 1,
            _ => {}
        }
        self.unfinished += usize::from(call.unfinished);
        self.resumed += usize::from(call.resumed == Some(true));
    }

    fn merge(&mut self, other: CallCounts) {
        self.total += other.total;
        self.completed += other.completed;
        self.failed += other.failed;
        self.unfinished += other.unfinished;
        self.resumed += other.resumed;
    }
}

/// The result entry that answers a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResultRef {
    /// Its sequence in the evaluation.
    pub sequence: u64,
    /// LSN of the event that recorded it.
    pub lsn: Lsn,
    /// When it was created.
    #[serde(serialize_with = "serialize_time_always")]
    pub created_at: Timestamp,
    /// It carries an error.
    pub is_error: bool,
}

/// One tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallView {
    /// Provider-assigned id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The JSON-encoded arguments, as recorded.
    pub arguments: TrimmedText,
    /// Where it is in its life cycle.
    pub status: ToolStatus,
    /// Pending or running, with no result entry: a resume would run it again.
    pub unfinished: bool,
    /// When it started running.
    #[serde(serialize_with = "serialize_time")]
    pub started_at: Option<Timestamp>,
    /// When it completed or failed.
    #[serde(serialize_with = "serialize_time")]
    pub ended_at: Option<Timestamp>,
    /// How long it took, in milliseconds, when the times allow.
    pub duration_ms: Option<i64>,
    /// Which times `duration_ms` comes from.
    pub duration_from: Option<DurationSource>,
    /// The error of a failed call.
    pub error: Option<TrimmedText>,
    /// Whether it was re-run after a resume; `None` when the events that
    /// would say so were not read (a slice alone, or a compacted log).
    pub resumed: Option<bool>,
    /// Its result entry, if one was recorded.
    pub result: Option<ResultRef>,
    /// Conflicting statuses the fold kept out for this call.
    pub anomalies: Vec<String>,
}

/// Reasoning of an assistant entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReasoningView {
    /// The reasoning text, when the provider returned it.
    pub text: Option<TrimmedText>,
    /// Returned redacted.
    pub redacted: bool,
    /// Carries a provider signature.
    pub signed: bool,
}

/// One message (conversation entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageView {
    /// LSN of the event that recorded it.
    pub lsn: Lsn,
    /// Its unique id.
    pub message_id: String,
    /// Position in the evaluation.
    pub sequence: u64,
    /// Provider round trip.
    pub turn: u32,
    /// Who it is from.
    pub role: Role,
    /// When it was created.
    #[serde(serialize_with = "serialize_time_always")]
    pub created_at: Timestamp,
    /// Text content.
    pub content: Option<TrimmedText>,
    /// Reasoning (assistant entries).
    pub reasoning: Option<ReasoningView>,
    /// Tool calls requested (assistant entries); more than one ran as a
    /// parallel batch.
    pub tool_calls: Vec<CallView>,
    /// The call this entry answers (tool entries).
    pub answers_call: Option<String>,
    /// The tool that produced it (tool entries).
    pub tool_name: Option<String>,
    /// The tool failed; `content` is its error.
    pub is_error: bool,
    /// Why the model stopped.
    pub finish_reason: Option<String>,
    /// Prompt namespace.
    pub prompt_ns: Option<String>,
    /// Prompt key.
    pub prompt_key: Option<String>,
    /// Provider extras (values cut like text fields).
    pub metadata: BTreeMap<String, String>,
}

/// Consecutive messages of one provider round trip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurnView {
    /// The turn number the entries carry.
    pub turn: u32,
    /// Its messages, in sequence order.
    pub messages: Vec<MessageView>,
}

/// One `evaluate()` run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvaluationView {
    /// Its id.
    pub evaluation_id: String,
    /// Prompt namespace of its system entry.
    pub prompt_ns: Option<String>,
    /// Prompt key of its system entry.
    pub prompt_key: Option<String>,
    /// Earliest entry time.
    #[serde(serialize_with = "serialize_time")]
    pub first_at: Option<Timestamp>,
    /// Latest entry or call end time.
    #[serde(serialize_with = "serialize_time")]
    pub last_at: Option<Timestamp>,
    /// From `first_at` to `last_at`.
    pub duration_ms: Option<i64>,
    /// It ended: the last entry is an assistant answer with no tool calls,
    /// and no call is unfinished (the rule `resume` uses).
    pub finished: bool,
    /// Its messages.
    pub entries: usize,
    /// Its tool calls.
    pub calls: CallCounts,
    /// Its turns.
    pub turns: Vec<TurnView>,
    /// Its failed model calls, in log order (each sits after the messages
    /// with a lower LSN); known only when the events were read, as the
    /// resumed flags are.
    pub failed_model_calls: Vec<ModelFailureView>,
}

/// A conflicting final status the fold kept out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnomalyView {
    /// LSN of the refused event.
    pub lsn: Lsn,
    /// The call.
    pub call_id: String,
    /// What happened.
    pub detail: String,
}

/// A status or result for a call no assistant entry has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusView {
    /// LSN of the event.
    pub lsn: Lsn,
    /// The evaluation it names.
    pub evaluation_id: String,
    /// The unknown call.
    pub call_id: String,
    /// The status it carries.
    pub status: ToolStatus,
    /// When.
    #[serde(serialize_with = "serialize_time_always")]
    pub at: Timestamp,
    /// Its error text.
    pub error: Option<String>,
    /// Marked as a re-run after a resume.
    pub resumed: bool,
}

/// A failed model call, at its place in the log: what the provider
/// answered, or why the event recording it could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelFailureView {
    /// LSN of the event.
    pub lsn: Lsn,
    /// The failure as recorded; `None` when its payload is unreadable.
    pub failure: Option<ModelFailureDetails>,
    /// Why the payload could not be read (a damaged or foreign event of
    /// that kind); `None` when `failure` is set.
    pub unreadable: Option<String>,
}

/// What a [`ModelFailureView`] recorded
/// ([`ModelCallFailed`](crate::model::ModelCallFailed)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelFailureDetails {
    /// The evaluation whose model call failed.
    pub evaluation_id: String,
    /// The turn the response would have had.
    pub turn: u32,
    /// The provider mapper's name.
    pub provider: String,
    /// The client that made the call.
    pub client: String,
    /// The URL called.
    pub url: String,
    /// Attempts made, retries included.
    pub attempts: u32,
    /// The HTTP status of the last attempt, when it got one.
    pub status: Option<u16>,
    /// The error's text, the provider's body included (cut like other
    /// text fields).
    pub error: TrimmedText,
}

impl ModelFailureView {
    fn new(
        lsn: Lsn,
        failure: &std::result::Result<ModelCallFailed, String>,
        options: &TimelineOptions,
    ) -> ModelFailureView {
        match failure {
            Ok(failure) => ModelFailureView {
                lsn,
                failure: Some(ModelFailureDetails {
                    evaluation_id: failure.evaluation_id.clone(),
                    turn: failure.turn,
                    provider: failure.provider.clone(),
                    client: failure.client.clone(),
                    url: failure.url.clone(),
                    attempts: failure.attempts,
                    status: failure.status,
                    error: TrimmedText::new(&failure.error, options.text_chars),
                }),
                unreadable: None,
            },
            Err(reason) => ModelFailureView {
                lsn,
                failure: None,
                unreadable: Some(reason.clone()),
            },
        }
    }
}

/// A history curation record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CurationView {
    /// LSN of the event.
    pub lsn: Lsn,
    /// The manager.
    pub strategy: String,
    /// Messages before curation.
    pub original_count: u64,
    /// Messages sent.
    pub curated_count: u64,
    /// When.
    #[serde(serialize_with = "serialize_time_always")]
    pub at: Timestamp,
    /// The prompt the curated request was built for, when recorded.
    pub prompt_name: Option<String>,
    /// The session, when recorded.
    pub session_id: Option<String>,
}

impl CurationView {
    /// `(prompt P, session S)`, naming what is recorded; empty when
    /// neither is. Raw text: the caller makes it safe for its output.
    pub fn scope_suffix(&self) -> String {
        let parts: Vec<String> = [
            self.prompt_name
                .as_ref()
                .map(|name| format!("prompt {name}")),
            self.session_id.as_ref().map(|id| format!("session {id}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!("({})", parts.join(", "))
        }
    }
}

/// One conversation, ready to render: see the [module docs](super).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// The conversation.
    pub conversation_id: String,
    /// LSN of the last event folded in.
    pub last_lsn: Lsn,
    /// Messages.
    pub entries: usize,
    /// Earliest entry time.
    #[serde(serialize_with = "serialize_time")]
    pub first_at: Option<Timestamp>,
    /// Latest entry or call end time.
    #[serde(serialize_with = "serialize_time")]
    pub last_at: Option<Timestamp>,
    /// From `first_at` to `last_at`.
    pub duration_ms: Option<i64>,
    /// Every tool call, counted.
    pub calls: CallCounts,
    /// Resumed flags are known for calls recorded at or after this LSN,
    /// and failed model calls for those recorded at or after it; `None`
    /// when no events were read (built from a slice alone: no failed model
    /// call is known).
    pub resumed_visible_from: Option<Lsn>,
    /// Failed model calls, in every evaluation and apart.
    pub failed_model_calls: usize,
    /// Evaluations in order of first appearance.
    pub evaluations: Vec<EvaluationView>,
    /// Conflicting final statuses the fold kept out.
    pub anomalies: Vec<AnomalyView>,
    /// Statuses and results for calls no assistant entry has (yet).
    pub unknown_statuses: Vec<StatusView>,
    /// History curation records.
    pub curations: Vec<CurationView>,
    /// Failed model calls not shown in an evaluation: unreadable ones, and
    /// ones naming an evaluation the conversation has no message of.
    pub failed_model_calls_apart: Vec<ModelFailureView>,
}

impl Timeline {
    /// The timeline of a folded conversation. Resumed flags are unknown
    /// (`None`) and no failed model call is known: the slice keeps
    /// neither; see [`Timeline::with_resumed`].
    pub fn from_slice(slice: &ConversationSlice, options: &TimelineOptions) -> Timeline {
        build(slice, None, options)
    }

    /// The timeline of a folded conversation, with the resumed flags and
    /// failed model calls collected from its events.
    pub fn with_resumed(
        slice: &ConversationSlice,
        resumed: &ResumedCalls,
        options: &TimelineOptions,
    ) -> Timeline {
        build(slice, Some(resumed), options)
    }

    /// The timeline of conversation `conversation_id` of an open store.
    ///
    /// Folds the conversation (cost: that conversation), then reads the
    /// store's log once for the resumed flags and failed model calls (cost:
    /// the whole log). Fails with `ConversationNotFound` for an unknown id.
    pub fn from_store(
        store: &Store,
        conversation_id: &str,
        options: &TimelineOptions,
    ) -> Result<Timeline> {
        let slice = store.conversation(conversation_id)?;
        let log = store.log();
        let end = log.visible_next_lsn();
        let mut scan = super::source::resumed_calls(store, &log, Some(conversation_id), end)?;
        let resumed = scan
            .calls
            .remove(conversation_id)
            .unwrap_or_else(|| ResumedCalls::new(scan.visible_from));
        Ok(Timeline::with_resumed(&slice, &resumed, options))
    }

    /// Every call of every evaluation, in order.
    pub fn calls(&self) -> impl Iterator<Item = &CallView> {
        self.messages()
            .flat_map(|message| message.tool_calls.iter())
    }

    /// Every message of every evaluation, in order.
    pub fn messages(&self) -> impl Iterator<Item = &MessageView> {
        self.evaluations
            .iter()
            .flat_map(|evaluation| evaluation.turns.iter())
            .flat_map(|turn| turn.messages.iter())
    }

    /// The call `call_id` (the first one with that id).
    pub fn call(&self, call_id: &str) -> Option<&CallView> {
        self.calls().find(|call| call.call_id == call_id)
    }
}

fn text(value: Option<&str>, options: &TimelineOptions) -> Option<TrimmedText> {
    value.map(|value| TrimmedText::new(value, options.text_chars))
}

fn later(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    a.max(b)
}

fn earlier(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        _ => a.or(b),
    }
}

fn span(first: Option<Timestamp>, last: Option<Timestamp>) -> Option<i64> {
    Some(first?.millis_until(last?))
}

/// The timeline of `slice`: its entries grouped into evaluations and turns,
/// each call with its status, result, duration and resumed flag, then the
/// evaluations' totals and the slice's anomalies, unknown statuses and
/// curations.
fn build(
    slice: &ConversationSlice,
    resumed: Option<&ResumedCalls>,
    options: &TimelineOptions,
) -> Timeline {
    let recorded_entries = slice.recorded();
    let calls = CallBuilder::new(slice, &recorded_entries, resumed, options);
    let mut evaluations: Vec<EvaluationView> = slice
        .evaluations()
        .iter()
        .map(|evaluation_id| EvaluationView::empty(evaluation_id))
        .collect();
    let rank: HashMap<&str, usize> = slice
        .evaluations()
        .iter()
        .enumerate()
        .map(|(index, id)| (id.as_str(), index))
        .collect();
    for recorded in &recorded_entries {
        let entry = &recorded.entry;
        let Some(&index) = rank.get(entry.evaluation_id.as_str()) else {
            continue;
        };
        let views = entry
            .tool_calls
            .iter()
            .map(|call| calls.view(recorded, call))
            .collect();
        evaluations[index].add(recorded, views, options);
    }
    let mut failed_model_calls_apart = Vec::new();
    let mut failed_model_calls = 0;
    for (lsn, failure) in resumed
        .map(|resumed| resumed.model_failures.as_slice())
        .unwrap_or_default()
    {
        failed_model_calls += 1;
        let view = ModelFailureView::new(*lsn, failure, options);
        let evaluation = failure
            .as_ref()
            .ok()
            .and_then(|failure| rank.get(failure.evaluation_id.as_str()));
        match evaluation {
            Some(&index) => evaluations[index].failed_model_calls.push(view),
            None => failed_model_calls_apart.push(view),
        }
    }
    let (calls, first_at, last_at) = finish_evaluations(&mut evaluations);
    Timeline {
        conversation_id: slice.conversation_id().to_string(),
        last_lsn: slice.last_lsn(),
        entries: slice.len(),
        first_at,
        last_at,
        duration_ms: span(first_at, last_at),
        calls,
        resumed_visible_from: resumed.map(ResumedCalls::visible_from),
        failed_model_calls,
        evaluations,
        anomalies: slice
            .anomalies()
            .iter()
            .map(|anomaly| AnomalyView {
                lsn: anomaly.lsn,
                call_id: anomaly.call_id.clone(),
                detail: anomaly.detail.clone(),
            })
            .collect(),
        unknown_statuses: slice
            .unknown_statuses()
            .iter()
            .map(|(lsn, change)| StatusView {
                lsn: *lsn,
                evaluation_id: change.evaluation_id.clone(),
                call_id: change.call_id.clone(),
                status: change.status,
                at: change.at,
                error: change.error.clone(),
                resumed: change.resumed,
            })
            .collect(),
        curations: slice
            .curations()
            .iter()
            .map(|(lsn, curated)| CurationView {
                lsn: *lsn,
                strategy: curated.strategy.clone(),
                original_count: curated.original_count,
                curated_count: curated.curated_count,
                at: curated.at,
                prompt_name: curated.prompt_name.clone(),
                session_id: curated.session_id.clone(),
            })
            .collect(),
        failed_model_calls_apart,
    }
}

/// What the view of each call needs from the whole conversation.
struct CallBuilder<'a> {
    /// The entries in conversation order, with their LSNs.
    recorded: &'a [&'a RecordedEntry],
    /// Which result answers each call: the definition resume and the
    /// provider planner share.
    results: CallResults<'a>,
    /// The fold's anomalies, as text, by call id.
    anomalies_by_call: HashMap<&'a str, Vec<String>>,
    resumed: Option<&'a ResumedCalls>,
    options: &'a TimelineOptions,
}

impl<'a> CallBuilder<'a> {
    fn new(
        slice: &'a ConversationSlice,
        recorded: &'a [&'a RecordedEntry],
        resumed: Option<&'a ResumedCalls>,
        options: &'a TimelineOptions,
    ) -> CallBuilder<'a> {
        let mut anomalies_by_call: HashMap<&str, Vec<String>> = HashMap::new();
        for anomaly in slice.anomalies() {
            anomalies_by_call
                .entry(anomaly.call_id.as_str())
                .or_default()
                .push(format!("LSN {}: {}", anomaly.lsn, anomaly.detail));
        }
        CallBuilder {
            recorded,
            results: CallResults::new(recorded.iter().map(|recorded| &recorded.entry)),
            anomalies_by_call,
            resumed,
            options,
        }
    }

    /// The view of `call`, requested by the assistant entry `recorded`.
    fn view(&self, recorded: &RecordedEntry, call: &ToolCall) -> CallView {
        let entry = &recorded.entry;
        let result = self
            .results
            .answer_at(&entry.evaluation_id, &call.call_id)
            .map(|(position, result)| ResultRef {
                sequence: result.sequence,
                lsn: self.recorded[position].lsn,
                created_at: result.created_at,
                is_error: result.is_error,
            });
        let (duration_ms, duration_from) = match (call.started_at, call.ended_at, &result) {
            (Some(start), Some(end), _) => (
                Some(start.millis_until(end)),
                Some(DurationSource::StatusTimes),
            ),
            (_, _, Some(result)) => (
                Some(entry.created_at.millis_until(result.created_at)),
                Some(DurationSource::EntryTimes),
            ),
            (None, Some(end), None) => (
                Some(entry.created_at.millis_until(end)),
                Some(DurationSource::RequestToEnd),
            ),
            _ => (None, None),
        };
        let resumed = self.resumed.and_then(|resumed| {
            if resumed.contains(&entry.evaluation_id, &call.call_id) {
                Some(true)
            } else if recorded.lsn >= resumed.visible_from() {
                Some(false)
            } else {
                None
            }
        });
        CallView {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            arguments: TrimmedText::new(&call.arguments, self.options.text_chars),
            status: call.status,
            unfinished: self.results.is_unfinished(&entry.evaluation_id, call),
            started_at: call.started_at,
            ended_at: call.ended_at,
            duration_ms,
            duration_from,
            error: text(call.error.as_deref(), self.options),
            resumed,
            result,
            anomalies: self
                .anomalies_by_call
                .get(call.call_id.as_str())
                .cloned()
                .unwrap_or_default(),
        }
    }
}

impl EvaluationView {
    /// An evaluation with nothing in it yet.
    fn empty(evaluation_id: &str) -> EvaluationView {
        EvaluationView {
            evaluation_id: evaluation_id.to_string(),
            prompt_ns: None,
            prompt_key: None,
            first_at: None,
            last_at: None,
            duration_ms: None,
            finished: false,
            entries: 0,
            calls: CallCounts::default(),
            turns: Vec::new(),
            failed_model_calls: Vec::new(),
        }
    }

    /// Adds the message of `recorded` (one of this evaluation's entries, in
    /// conversation order) with the views of its calls, to its turn.
    fn add(&mut self, recorded: &RecordedEntry, calls: Vec<CallView>, options: &TimelineOptions) {
        let entry = &recorded.entry;
        let mut last = Some(entry.created_at);
        for call in &calls {
            self.calls.add(call);
            last = later(last, later(call.ended_at, call.started_at));
        }
        self.first_at = earlier(self.first_at, Some(entry.created_at));
        self.last_at = later(self.last_at, last);
        self.entries += 1;
        if entry.role == Role::System && self.prompt_ns.is_none() {
            self.prompt_ns = entry.prompt_ns.clone();
            self.prompt_key = entry.prompt_key.clone();
        }
        let message = MessageView::new(recorded, calls, options);
        match self.turns.last_mut() {
            Some(turn) if turn.turn == entry.turn => turn.messages.push(message),
            _ => self.turns.push(TurnView {
                turn: entry.turn,
                messages: vec![message],
            }),
        }
    }
}

impl MessageView {
    /// The view of the entry of `recorded`, with the views of its calls.
    fn new(recorded: &RecordedEntry, calls: Vec<CallView>, options: &TimelineOptions) -> Self {
        let entry = &recorded.entry;
        MessageView {
            lsn: recorded.lsn,
            message_id: entry.message_id.to_string(),
            sequence: entry.sequence,
            turn: entry.turn,
            role: entry.role,
            created_at: entry.created_at,
            content: text(entry.content.as_deref(), options),
            reasoning: entry.reasoning.as_ref().map(|reasoning| ReasoningView {
                text: text(reasoning.text.as_deref(), options),
                redacted: reasoning.redacted,
                signed: reasoning.signature.is_some(),
            }),
            tool_calls: calls,
            answers_call: entry.tool_call_id.clone(),
            tool_name: entry.tool_name.clone(),
            is_error: entry.is_error,
            finish_reason: entry.finish_reason.clone(),
            prompt_ns: entry.prompt_ns.clone(),
            prompt_key: entry.prompt_key.clone(),
            metadata: entry
                .metadata
                .iter()
                .map(|(key, value)| {
                    (
                        key.clone(),
                        TrimmedText::new(value, options.text_chars).text,
                    )
                })
                .collect(),
        }
    }
}

/// Sets each evaluation's duration and finished flag; returns the call
/// counts over all of them and the first and last times.
fn finish_evaluations(
    evaluations: &mut [EvaluationView],
) -> (CallCounts, Option<Timestamp>, Option<Timestamp>) {
    let mut calls = CallCounts::default();
    let (mut first_at, mut last_at) = (None, None);
    for evaluation in evaluations {
        evaluation.duration_ms = span(evaluation.first_at, evaluation.last_at);
        let last_message = evaluation
            .turns
            .last()
            .and_then(|turn| turn.messages.last());
        evaluation.finished = evaluation.calls.unfinished == 0
            && last_message.is_some_and(|message| {
                message.role == Role::Assistant && message.tool_calls.is_empty()
            });
        calls.merge(evaluation.calls);
        first_at = earlier(first_at, evaluation.first_at);
        last_at = later(last_at, evaluation.last_at);
    }
    (calls, first_at, last_at)
}

/// One row of a [`StoreOverview`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConversationSummary {
    /// The conversation.
    pub conversation_id: String,
    /// Messages.
    pub entries: usize,
    /// Evaluations.
    pub evaluations: usize,
    /// Tool calls by state (`resumed` is counted only when the events were read).
    pub calls: CallCounts,
    /// Conflicting statuses kept out.
    pub anomalies: usize,
    /// Statuses and results for unknown calls.
    pub unknown_statuses: usize,
    /// Failed model calls (known only when the events were read).
    pub failed_model_calls: usize,
    /// Earliest entry time.
    #[serde(serialize_with = "serialize_time")]
    pub first_at: Option<Timestamp>,
    /// Latest entry or call end time.
    #[serde(serialize_with = "serialize_time")]
    pub last_at: Option<Timestamp>,
    /// LSN of its last event.
    pub last_lsn: Lsn,
}

impl ConversationSummary {
    /// The summary of a folded conversation.
    pub fn from_slice(slice: &ConversationSlice, resumed: Option<&ResumedCalls>) -> Self {
        // Built with no text kept: only counts and times are needed.
        let timeline = build(
            slice,
            resumed,
            &TimelineOptions {
                text_chars: Some(0),
            },
        );
        ConversationSummary::from_timeline(&timeline)
    }

    /// The summary of a timeline.
    pub fn from_timeline(timeline: &Timeline) -> ConversationSummary {
        ConversationSummary {
            conversation_id: timeline.conversation_id.clone(),
            entries: timeline.entries,
            evaluations: timeline.evaluations.len(),
            calls: timeline.calls,
            anomalies: timeline.anomalies.len(),
            unknown_statuses: timeline.unknown_statuses.len(),
            failed_model_calls: timeline.failed_model_calls,
            first_at: timeline.first_at,
            last_at: timeline.last_at,
            last_lsn: timeline.last_lsn,
        }
    }
}

/// Every conversation of a store, one row each: `inspect STORE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreOverview {
    /// The store directory, as given.
    pub store: String,
    /// First LSN in the log.
    pub first_lsn: Lsn,
    /// The LSN the next event will get.
    pub next_lsn: Lsn,
    /// LSN of the snapshot the folded state started from, if any (a
    /// [`Store`], and so an [`AuditView`](super::AuditView), starts from
    /// its newest usable snapshot).
    pub snapshot_lsn: Option<Lsn>,
    /// The conversations, sorted by id.
    pub conversations: Vec<ConversationSummary>,
    /// Totals over all conversations.
    pub calls: CallCounts,
    /// Failed model calls over all conversations.
    pub failed_model_calls: usize,
    /// The conversations erased (their keys destroyed: docs/erasure.md),
    /// sorted; not in `conversations`. Left out of the JSON form when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub erased: Vec<String>,
}

impl StoreOverview {
    /// The same overview, listing `erased` as erased conversations.
    pub fn with_erased(mut self, mut erased: Vec<String>) -> StoreOverview {
        erased.sort();
        self.erased = erased;
        self
    }

    /// The overview of an open store (folds every conversation; resumed
    /// flags are not counted).
    pub fn from_store(store: &Store) -> Result<StoreOverview> {
        let mut conversations = Vec::new();
        for id in store.conversation_ids() {
            let slice = store.conversation(&id)?;
            conversations.push(ConversationSummary::from_slice(&slice, None));
        }
        Ok(StoreOverview::new(
            store.log().dir().display().to_string(),
            store.log().first_lsn(),
            store.log().next_lsn(),
            store.stats().snapshot_lsn,
            conversations,
        )
        .with_erased(store.erased_conversations()))
    }

    /// An overview of `conversations` (sorted here by id).
    pub fn new(
        store: String,
        first_lsn: Lsn,
        next_lsn: Lsn,
        snapshot_lsn: Option<Lsn>,
        mut conversations: Vec<ConversationSummary>,
    ) -> StoreOverview {
        conversations.sort_by(|a, b| a.conversation_id.cmp(&b.conversation_id));
        let mut calls = CallCounts::default();
        let mut failed_model_calls = 0;
        for conversation in &conversations {
            calls.merge(conversation.calls);
            failed_model_calls += conversation.failed_model_calls;
        }
        StoreOverview {
            store,
            first_lsn,
            next_lsn,
            snapshot_lsn,
            conversations,
            calls,
            failed_model_calls,
            erased: Vec::new(),
        }
    }
}
