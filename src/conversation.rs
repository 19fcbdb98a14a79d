//! The conversation slice: one conversation's state, folded from its events.
//!
//! The fold is pure and deterministic (no I/O, no clock): the same events in
//! the same LSN order always give the same slice. Its rules:
//!
//! - Entries are deduplicated by `message_id` (recording the same message
//!   twice is a no-op) and ordered by evaluation, then `sequence`.
//!   Evaluations are ordered by their first appearance in the log (LSN
//!   order); the seed orders them by their first message's time, which the
//!   log order reflects without trusting host clocks.
//! - A tool-status event updates the call in its evaluation's assistant
//!   entry. A status never moves backwards (pending → running →
//!   completed | failed); repeating one is a no-op; a second, different
//!   final status is kept out and reported as an anomaly.
//! - A tool entry (the call's result) completes its call, or fails it when
//!   `is_error` is set.
//! - A status or result for a call that is not (yet) known is kept and
//!   reported; it is applied when the assistant entry arrives.
//! - `messages_replaced` replaces every entry at once.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::log::Lsn;
use crate::model::{
    ConversationEntry, Event, HistoryCurated, Role, Timestamp, ToolCall, ToolStatus,
    ToolStatusChanged,
};

/// An entry and the LSN of the event that recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedEntry {
    /// LSN of the `conversation_recorded` (or `messages_replaced`) event.
    pub lsn: Lsn,
    /// The entry, with tool call statuses folded in.
    pub entry: ConversationEntry,
}

/// Something the fold kept out and reports rather than drops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anomaly {
    /// LSN of the event.
    pub lsn: Lsn,
    /// The call concerned.
    pub call_id: String,
    /// What happened.
    pub detail: String,
}

/// One conversation's state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConversationSlice {
    conversation_id: String,
    entries: Vec<RecordedEntry>,
    /// Evaluation ids in order of first appearance.
    evaluations: Vec<String>,
    /// Statuses for calls not known yet, waiting for their assistant entry.
    unknown_statuses: Vec<(Lsn, ToolStatusChanged)>,
    anomalies: Vec<Anomaly>,
    curations: Vec<(Lsn, HistoryCurated)>,
    last_lsn: Lsn,
    #[serde(skip)]
    message_ids: HashSet<Uuid>,
}

/// Equality of state: the message-id set is a cache derived from the
/// entries and takes no part.
impl PartialEq for ConversationSlice {
    fn eq(&self, other: &ConversationSlice) -> bool {
        self.conversation_id == other.conversation_id
            && self.entries == other.entries
            && self.evaluations == other.evaluations
            && self.unknown_statuses == other.unknown_statuses
            && self.anomalies == other.anomalies
            && self.curations == other.curations
            && self.last_lsn == other.last_lsn
    }
}

impl Eq for ConversationSlice {}

impl ConversationSlice {
    /// An empty slice for `conversation_id`.
    pub fn new(conversation_id: impl Into<String>) -> ConversationSlice {
        ConversationSlice {
            conversation_id: conversation_id.into(),
            ..ConversationSlice::default()
        }
    }

    /// Folds one event (recorded at `lsn`) into the slice. Events of other
    /// conversations and custom events are ignored.
    pub fn apply(&mut self, event: &Event, lsn: Lsn) {
        if event.conversation_id() != Some(self.conversation_id.as_str()) {
            return;
        }
        self.ensure_message_ids();
        match event {
            Event::ConversationRecorded(recorded) => self.record(recorded.entry.clone(), lsn),
            Event::ToolStatus(change) => {
                if !self.apply_status(change, lsn) {
                    self.unknown_statuses.push((lsn, change.clone()));
                }
            }
            Event::MessagesReplaced(replaced) => {
                self.entries.clear();
                self.evaluations.clear();
                self.unknown_statuses.clear();
                self.message_ids.clear();
                for entry in &replaced.entries {
                    self.record(entry.clone(), lsn);
                }
            }
            Event::HistoryCurated(curated) => self.curations.push((lsn, curated.clone())),
            Event::Custom(_) => return,
        }
        self.last_lsn = lsn;
    }

    fn ensure_message_ids(&mut self) {
        if self.message_ids.len() != self.entries.len() {
            self.message_ids = self
                .entries
                .iter()
                .map(|recorded| recorded.entry.message_id)
                .collect();
        }
    }

    fn record(&mut self, entry: ConversationEntry, lsn: Lsn) {
        if !self.message_ids.insert(entry.message_id) {
            return;
        }
        let index = self.insertion_index(&entry);
        let evaluation_id = entry.evaluation_id.clone();
        let answers = (entry.role == Role::Tool)
            .then(|| entry.tool_call_id.clone())
            .flatten();
        let calls: Vec<String> = entry
            .tool_calls
            .iter()
            .map(|call| call.call_id.clone())
            .collect();
        let result_status = (entry.is_error, entry.created_at, entry.content.clone());
        self.entries.insert(index, RecordedEntry { lsn, entry });

        // A result completes (or fails) the call it answers.
        if let Some(call_id) = answers {
            let (is_error, at, content) = result_status;
            let change = ToolStatusChanged {
                conversation_id: self.conversation_id.clone(),
                evaluation_id: evaluation_id.clone(),
                call_id,
                status: if is_error {
                    ToolStatus::Failed
                } else {
                    ToolStatus::Completed
                },
                at,
                error: if is_error { content } else { None },
                resumed: false,
            };
            if !self.apply_status(&change, lsn) {
                self.unknown_statuses.push((lsn, change));
            }
        }
        // New calls pick up statuses and results that arrived before them.
        if !calls.is_empty() {
            let waiting = std::mem::take(&mut self.unknown_statuses);
            for (status_lsn, change) in waiting {
                let for_this_entry =
                    change.evaluation_id == evaluation_id && calls.contains(&change.call_id);
                if !(for_this_entry && self.apply_status(&change, status_lsn)) {
                    self.unknown_statuses.push((status_lsn, change));
                }
            }
        }
    }

    /// Where an entry goes: after every entry of an earlier evaluation and
    /// every entry of its own evaluation with a sequence at or below its own.
    fn insertion_index(&mut self, entry: &ConversationEntry) -> usize {
        let rank = match self
            .evaluations
            .iter()
            .position(|id| *id == entry.evaluation_id)
        {
            Some(rank) => rank,
            None => {
                self.evaluations.push(entry.evaluation_id.clone());
                return self.entries.len();
            }
        };
        let ranks: Vec<&str> = self.evaluations.iter().map(String::as_str).collect();
        let key = |recorded: &RecordedEntry| {
            let position = ranks
                .iter()
                .position(|id| *id == recorded.entry.evaluation_id)
                .unwrap_or(usize::MAX);
            (position, recorded.entry.sequence)
        };
        self.entries
            .partition_point(|recorded| key(recorded) <= (rank, entry.sequence))
    }

    /// Applies a status change to a known call; false when the call is unknown.
    fn apply_status(&mut self, change: &ToolStatusChanged, lsn: Lsn) -> bool {
        let Some(call) = self.find_call_mut(&change.evaluation_id, &change.call_id) else {
            return false;
        };
        let anomaly = advance(call, change);
        if let Some(detail) = anomaly {
            self.anomalies.push(Anomaly {
                lsn,
                call_id: change.call_id.clone(),
                detail,
            });
        }
        true
    }

    fn find_call_mut(&mut self, evaluation_id: &str, call_id: &str) -> Option<&mut ToolCall> {
        self.entries
            .iter_mut()
            .rev()
            .filter(|recorded| {
                recorded.entry.evaluation_id == evaluation_id
                    && recorded.entry.role == Role::Assistant
            })
            .find_map(|recorded| {
                recorded
                    .entry
                    .tool_calls
                    .iter_mut()
                    .find(|call| call.call_id == call_id)
            })
    }

    /// The conversation id.
    pub fn conversation_id(&self) -> &str {
        &self.conversation_id
    }

    /// Every entry in order, with the LSN that recorded it.
    pub fn recorded(&self) -> &[RecordedEntry] {
        &self.entries
    }

    /// Every entry in order.
    pub fn entries(&self) -> impl Iterator<Item = &ConversationEntry> {
        self.entries.iter().map(|recorded| &recorded.entry)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the conversation has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries of one evaluation, in sequence order.
    pub fn evaluation(&self, evaluation_id: &str) -> Vec<&ConversationEntry> {
        self.select_where(|entry| entry.evaluation_id == evaluation_id)
    }

    /// Evaluation ids in the order they first appeared.
    pub fn evaluations(&self) -> &[String] {
        &self.evaluations
    }

    /// The evaluation that started last.
    pub fn latest_evaluation(&self) -> Option<&str> {
        self.evaluations.last().map(String::as_str)
    }

    /// The entries that satisfy `predicate`, in order.
    pub fn select_where(
        &self,
        predicate: impl Fn(&ConversationEntry) -> bool,
    ) -> Vec<&ConversationEntry> {
        self.entries().filter(|entry| predicate(entry)).collect()
    }

    /// Entries recorded by events after `lsn`, in conversation order: what a
    /// run added since the host last looked.
    pub fn entries_since(&self, lsn: Lsn) -> Vec<&ConversationEntry> {
        self.entries
            .iter()
            .filter(|recorded| recorded.lsn > lsn)
            .map(|recorded| &recorded.entry)
            .collect()
    }

    /// The call `call_id` (searching the latest evaluations first) and the
    /// assistant entry that holds it.
    pub fn tool_call(&self, call_id: &str) -> Option<(&ConversationEntry, &ToolCall)> {
        self.entries.iter().rev().find_map(|recorded| {
            recorded
                .entry
                .tool_calls
                .iter()
                .find(|call| call.call_id == call_id)
                .map(|call| (&recorded.entry, call))
        })
    }

    /// The recorded result of call `call_id`, if any: lets a host return the
    /// stored result instead of running a mutating tool twice.
    pub fn tool_result(&self, call_id: &str) -> Option<&ConversationEntry> {
        self.entries().find(|entry| {
            entry.role == Role::Tool && entry.tool_call_id.as_deref() == Some(call_id)
        })
    }

    /// The next free sequence number in `evaluation_id` (0 if it is new).
    pub fn next_sequence(&self, evaluation_id: &str) -> u64 {
        self.entries()
            .filter(|entry| entry.evaluation_id == evaluation_id)
            .map(|entry| entry.sequence + 1)
            .max()
            .unwrap_or(0)
    }

    /// Statuses and results for calls no assistant entry has (yet).
    pub fn unknown_statuses(&self) -> &[(Lsn, ToolStatusChanged)] {
        &self.unknown_statuses
    }

    /// Conflicting final statuses that were kept out.
    pub fn anomalies(&self) -> &[Anomaly] {
        &self.anomalies
    }

    /// History curation records, in order.
    pub fn curations(&self) -> &[(Lsn, HistoryCurated)] {
        &self.curations
    }

    /// LSN of the last event folded in.
    pub fn last_lsn(&self) -> Lsn {
        self.last_lsn
    }
}

/// Moves a call's status forward; returns a note when a conflicting final
/// status was refused.
fn advance(call: &mut ToolCall, change: &ToolStatusChanged) -> Option<String> {
    if change.status == call.status {
        return None;
    }
    if call.status.is_finished() && change.status.is_finished() {
        return Some(format!(
            "call already {}; a later {} was ignored",
            call.status.as_str(),
            change.status.as_str()
        ));
    }
    if change.status.rank() < call.status.rank() {
        return None;
    }
    call.status = change.status;
    if change.status == ToolStatus::Running && call.started_at.is_none() {
        call.started_at = Some(change.at);
    }
    if change.status.is_finished() {
        call.ended_at = Some(change.at);
        call.error = change.error.clone();
    }
    None
}

/// Builds the slice of `conversation_id` from events in LSN order.
pub fn fold<'a>(
    conversation_id: &str,
    events: impl IntoIterator<Item = (&'a Event, Lsn)>,
) -> ConversationSlice {
    let mut slice = ConversationSlice::new(conversation_id);
    for (event, lsn) in events {
        slice.apply(event, lsn);
    }
    slice
}

/// Helpers to build events in tests and examples.
impl ConversationEntry {
    /// This entry recorded in `conversation_id` as an event.
    pub fn recorded_in(self, conversation_id: &str) -> Event {
        Event::ConversationRecorded(Box::new(crate::model::ConversationRecorded {
            conversation_id: conversation_id.to_string(),
            session_id: None,
            created_at: self.created_at,
            entry: self,
        }))
    }
}

impl ToolStatusChanged {
    /// A status change at time `at`.
    pub fn new(
        conversation_id: &str,
        evaluation_id: &str,
        call_id: &str,
        status: ToolStatus,
        at: Timestamp,
    ) -> Self {
        ToolStatusChanged {
            conversation_id: conversation_id.to_string(),
            evaluation_id: evaluation_id.to_string(),
            call_id: call_id.to_string(),
            status,
            at,
            error: None,
            resumed: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(evaluation: &str, sequence: u64, role: Role) -> ConversationEntry {
        let mut entry = ConversationEntry::new(
            evaluation,
            sequence,
            role,
            Some(format!("{evaluation}/{sequence}")),
        );
        entry.created_at = Timestamp(sequence as i64);
        entry
    }

    fn assistant_with_calls(evaluation: &str, sequence: u64, calls: &[&str]) -> ConversationEntry {
        let mut entry = entry(evaluation, sequence, Role::Assistant);
        entry.tool_calls = calls
            .iter()
            .map(|id| ToolCall {
                call_id: id.to_string(),
                name: "search".into(),
                arguments: "{}".into(),
                status: ToolStatus::Pending,
                started_at: None,
                ended_at: None,
                error: None,
            })
            .collect();
        entry
    }

    fn result(evaluation: &str, sequence: u64, call: &str, is_error: bool) -> ConversationEntry {
        let mut entry = entry(evaluation, sequence, Role::Tool);
        entry.tool_call_id = Some(call.into());
        entry.tool_name = Some("search".into());
        entry.is_error = is_error;
        entry
    }

    fn status(call: &str, status: ToolStatus) -> Event {
        Event::ToolStatus(ToolStatusChanged::new(
            "c",
            "e1",
            call,
            status,
            Timestamp(100),
        ))
    }

    fn call_status(slice: &ConversationSlice, call: &str) -> ToolStatus {
        slice.tool_call(call).unwrap().1.status
    }

    #[test]
    fn entries_are_deduplicated_and_ordered_by_evaluation_then_sequence() {
        let system = entry("e1", 0, Role::System);
        let events = [
            entry("e1", 2, Role::User).recorded_in("c"),
            system.clone().recorded_in("c"),
            entry("e2", 0, Role::System).recorded_in("c"),
            entry("e1", 1, Role::Assistant).recorded_in("c"),
            system.recorded_in("c"),
            entry("e1", 0, Role::User).recorded_in("other conversation"),
        ];
        let slice = fold("c", events.iter().zip(1..));
        let order: Vec<(String, u64)> = slice
            .entries()
            .map(|entry| (entry.evaluation_id.clone(), entry.sequence))
            .collect();
        assert_eq!(
            order,
            [
                ("e1".into(), 0),
                ("e1".into(), 1),
                ("e1".into(), 2),
                ("e2".into(), 0)
            ]
        );
        assert_eq!(slice.latest_evaluation(), Some("e2"));
        assert_eq!(slice.next_sequence("e1"), 3);
        assert_eq!(slice.next_sequence("new"), 0);
        let since = |lsn| {
            slice
                .entries_since(lsn)
                .iter()
                .map(|entry| (entry.evaluation_id.clone(), entry.sequence))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            since(3),
            [("e1".to_string(), 1)],
            "LSN 4; LSN 5 was a duplicate"
        );
        assert_eq!(since(2), [("e1".to_string(), 1), ("e2".to_string(), 0)]);
    }

    #[test]
    fn statuses_never_move_backwards_and_repeats_are_no_ops() {
        let events = [
            assistant_with_calls("e1", 1, &["a", "b"]).recorded_in("c"),
            status("a", ToolStatus::Running),
            status("a", ToolStatus::Completed),
            status("a", ToolStatus::Running),
            status("a", ToolStatus::Completed),
            status("a", ToolStatus::Failed),
        ];
        let slice = fold("c", events.iter().zip(1..));
        assert_eq!(call_status(&slice, "a"), ToolStatus::Completed);
        assert_eq!(call_status(&slice, "b"), ToolStatus::Pending);
        assert_eq!(
            slice.anomalies().len(),
            1,
            "the conflicting failed status is reported"
        );
        assert_eq!(slice.anomalies()[0].lsn, 6);
        let (_, call) = slice.tool_call("a").unwrap();
        assert_eq!(
            (call.started_at, call.ended_at),
            (Some(Timestamp(100)), Some(Timestamp(100)))
        );
    }

    #[test]
    fn results_complete_or_fail_their_calls() {
        let events = [
            assistant_with_calls("e1", 1, &["a", "b"]).recorded_in("c"),
            result("e1", 2, "a", false).recorded_in("c"),
            result("e1", 3, "b", true).recorded_in("c"),
        ];
        let slice = fold("c", events.iter().zip(1..));
        assert_eq!(call_status(&slice, "a"), ToolStatus::Completed);
        assert_eq!(call_status(&slice, "b"), ToolStatus::Failed);
        assert_eq!(
            slice.tool_call("b").unwrap().1.error.as_deref(),
            Some("e1/3")
        );
        assert_eq!(slice.tool_result("a").unwrap().sequence, 2);
        assert!(slice.tool_result("zzz").is_none());
    }

    #[test]
    fn statuses_for_unknown_calls_are_kept_and_applied_when_the_call_arrives() {
        let events = [
            status("a", ToolStatus::Running),
            result("e1", 2, "a", false).recorded_in("c"),
            status("ghost", ToolStatus::Running),
            assistant_with_calls("e1", 1, &["a"]).recorded_in("c"),
        ];
        let mut slice = ConversationSlice::new("c");
        for (event, lsn) in events.iter().take(3).zip(1..) {
            slice.apply(event, lsn);
        }
        assert_eq!(
            slice.unknown_statuses().len(),
            3,
            "two for a, one for ghost"
        );
        slice.apply(&events[3], 4);
        assert_eq!(call_status(&slice, "a"), ToolStatus::Completed);
        assert_eq!(slice.unknown_statuses().len(), 1);
        assert_eq!(slice.unknown_statuses()[0].1.call_id, "ghost");
        assert_eq!(
            slice.entries().next().unwrap().role,
            Role::Assistant,
            "sequence 1 before 2"
        );
    }

    #[test]
    fn messages_replaced_resets_the_conversation() {
        let events = [
            entry("e1", 0, Role::System).recorded_in("c"),
            entry("e1", 1, Role::User).recorded_in("c"),
            Event::MessagesReplaced(crate::model::MessagesReplaced {
                conversation_id: "c".into(),
                entries: vec![entry("e9", 0, Role::User)],
                at: Timestamp(5),
            }),
        ];
        let slice = fold("c", events.iter().zip(1..));
        assert_eq!(slice.len(), 1);
        assert_eq!(slice.evaluations(), ["e9".to_string()]);
        assert_eq!(slice.last_lsn(), 3);
    }

    #[test]
    fn a_slice_survives_a_codec_round_trip() {
        let events = [
            assistant_with_calls("e1", 1, &["a"]).recorded_in("c"),
            result("e1", 2, "a", false).recorded_in("c"),
        ];
        let slice = fold("c", events.iter().zip(1..));
        let bytes = crate::codec::encode_value(&slice).unwrap();
        let mut decoded: ConversationSlice = crate::codec::decode_value(&bytes).unwrap();
        decoded.apply(&events[0], 3);
        assert_eq!(
            decoded.len(),
            2,
            "the message-id set is rebuilt after decoding"
        );
    }
}
