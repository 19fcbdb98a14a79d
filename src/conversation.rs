//! The conversation slice: one conversation's state, folded from its events.
//!
//! The fold is pure and deterministic (no I/O, no clock): the same events in
//! the same LSN order always give the same slice. Its rules:
//!
//! - Entries are deduplicated by `message_id` (recording the same message
//!   twice is a no-op) and ordered by evaluation, then `sequence`.
//!   Evaluations are ordered by their first appearance in the log (LSN
//!   order), which is the order of their first messages' times without
//!   trusting host clocks.
//! - A tool-status event updates the call in its evaluation's assistant
//!   entry. A status never moves backwards (pending → running →
//!   completed | failed); repeating one is a no-op; a second, different
//!   final status is kept out and reported as an anomaly.
//! - A tool entry (the call's result) completes its call, or fails it when
//!   `is_error` is set.
//! - A status or result for a call that is not (yet) known is kept and
//!   reported; it is applied when the assistant entry arrives.
//! - `messages_replaced` replaces every entry at once.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use crate::codec::FoldEvent;
use crate::log::Lsn;
use crate::model::{
    ConversationEntry, Event, HistoryCurated, Role, ToolCall, ToolStatus, ToolStatusChanged,
};

/// The hash maps and sets of the fold and of call pairing (and of the
/// store's index and the request planner): `std`'s maps with foldhash's
/// hasher, seeded at random, instead of SipHash (which cost about a sixth
/// of the agent runner's instructions per step).
///
/// Their keys are call ids, evaluation ids and conversation ids, which come
/// from models and hosts, so a crafted set of ids must not be able to
/// collide (HashDoS). foldhash is not a keyed PRF like SipHash, but every
/// map gets its own seed ([`SeededState`]), drawn from the operating
/// system's randomness (through `std`'s `RandomState`) rather than
/// foldhash's own default (address-space layout and the clock): no list of
/// ids collides in every process or every map, and these maps never expose
/// their hashes or iteration order to whoever supplies the ids.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, SeededState>;
/// See [`HashMap`].
pub(crate) type HashSet<K> = std::collections::HashSet<K, SeededState>;

/// The hasher builder of [`HashMap`]: foldhash with a per-process seed and
/// a per-map seed, both from `std`'s randomly keyed `RandomState`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SeededState {
    per_map: u64,
    shared: &'static foldhash::SharedSeed,
}

impl Default for SeededState {
    fn default() -> SeededState {
        use std::hash::BuildHasher;
        static SHARED: std::sync::OnceLock<foldhash::SharedSeed> = std::sync::OnceLock::new();
        thread_local! {
            /// The next per-map seed of this thread: random at first, then
            /// stepped by an odd constant (foldhash mixes it with the
            /// shared seed).
            static NEXT: std::cell::Cell<u64> = std::cell::Cell::new(
                std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64),
            );
        }
        let per_map = NEXT.with(|next| {
            let seed = next.get();
            next.set(seed.wrapping_add(0x9e37_79b9_7f4a_7c15));
            seed
        });
        let shared = SHARED.get_or_init(|| {
            foldhash::SharedSeed::from_u64(
                std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64),
            )
        });
        SeededState { per_map, shared }
    }
}

impl std::hash::BuildHasher for SeededState {
    type Hasher = foldhash::fast::FoldHasher;

    fn build_hasher(&self) -> foldhash::fast::FoldHasher {
        foldhash::fast::FoldHasher::with_seed(self.per_map, self.shared)
    }
}

/// An entry and the LSN of the event that recorded it.
///
/// On-disk format: field order is part of the snapshot format (stored in
/// this order, without names: docs/format.md section 13); do not reorder,
/// insert or remove fields. `codec`'s golden tests pin the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedEntry {
    /// LSN of the `conversation_recorded` (or `messages_replaced`) event.
    pub lsn: Lsn,
    /// The entry, with tool call statuses folded in.
    pub entry: ConversationEntry,
}

/// Something the fold kept out and reports rather than drops.
///
/// On-disk format: field order is part of the snapshot format (stored in
/// this order, without names: docs/format.md section 13); do not reorder,
/// insert or remove fields. `codec`'s golden tests pin the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anomaly {
    /// LSN of the event.
    pub lsn: Lsn,
    /// The call concerned.
    pub call_id: String,
    /// What happened.
    pub detail: String,
}

/// Where an entry sits in conversation order: its evaluation's rank (order
/// of first appearance), its sequence, then the order in which entries with
/// the same two arrived. Keys of stored entries never change, so the
/// indexes below can hold them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct EntryKey {
    rank: usize,
    sequence: u64,
    arrival: u64,
}

impl Ord for EntryKey {
    fn cmp(&self, other: &EntryKey) -> std::cmp::Ordering {
        #[cfg(test)]
        comparisons::count();
        (self.rank, self.sequence, self.arrival).cmp(&(other.rank, other.sequence, other.arrival))
    }
}

impl PartialOrd for EntryKey {
    fn partial_cmp(&self, other: &EntryKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Counts entry-key comparisons on this thread, so a test can check that
/// the fold does O(log n) of them per entry whatever the order.
#[cfg(test)]
pub(crate) mod comparisons {
    use std::cell::Cell;

    thread_local! {
        static COUNT: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn count() {
        COUNT.with(|count| count.set(count.get() + 1));
    }

    /// Comparisons so far on this thread.
    pub(crate) fn so_far() -> u64 {
        COUNT.with(Cell::get)
    }
}

/// One conversation's state.
///
/// Entries sit in a tree by (evaluation rank, sequence, arrival), with
/// indexes by message id, evaluation and call id, so folding n events costs
/// O(n log n) whatever their order (descending sequences, a new evaluation
/// per entry, results before their calls). Its serialized form (in
/// snapshots) is the list form: the entries in order, the evaluations, the
/// unknown statuses, anomalies, curations and last LSN; the indexes are
/// rebuilt when it is decoded.
#[derive(Debug, Clone, Default)]
pub struct ConversationSlice {
    conversation_id: String,
    entries: BTreeMap<EntryKey, RecordedEntry>,
    /// Evaluation ids in order of first appearance.
    evaluations: Vec<String>,
    /// Evaluation id → its rank in `evaluations`.
    ranks: HashMap<String, usize>,
    /// Statuses for calls not known yet, waiting for their assistant entry,
    /// by arrival.
    unknown_statuses: BTreeMap<u64, (Lsn, ToolStatusChanged)>,
    /// (evaluation, call id) → arrivals in `unknown_statuses`.
    waiting: HashMap<(String, String), Vec<u64>>,
    anomalies: Vec<Anomaly>,
    curations: Vec<(Lsn, HistoryCurated)>,
    last_lsn: Lsn,
    message_ids: HashSet<Uuid>,
    /// Call id → for each evaluation (by rank) with an assistant entry
    /// holding the call, the last such entry in order. Keyed by call id
    /// alone so that a status finds its call without building a key.
    calls_in_evaluation: HashMap<String, Vec<(usize, EntryKey)>>,
    /// Call id → the last entry in order holding it.
    calls: HashMap<String, EntryKey>,
    /// Call id → the first tool entry in order answering it.
    results: HashMap<String, EntryKey>,
    next_arrival: u64,
}

/// The serialized form (unchanged from the list-based slice): the field
/// order and types are what snapshots hold.
///
/// On-disk format: field order is part of the snapshot format
/// (docs/format.md section 13); do not reorder, insert or remove fields.
/// `SliceData` must list the same fields in the same order. `codec`'s
/// golden tests pin the bytes.
#[derive(Serialize)]
struct SliceForm<'a> {
    conversation_id: &'a str,
    entries: Vec<&'a RecordedEntry>,
    evaluations: &'a [String],
    unknown_statuses: Vec<&'a (Lsn, ToolStatusChanged)>,
    anomalies: &'a [Anomaly],
    curations: &'a [(Lsn, HistoryCurated)],
    last_lsn: Lsn,
}

/// The decoded form of `SliceForm`: the same fields in the same order
/// (on-disk format, docs/format.md section 13; do not reorder).
#[derive(Deserialize)]
struct SliceData {
    conversation_id: String,
    entries: Vec<RecordedEntry>,
    evaluations: Vec<String>,
    unknown_statuses: Vec<(Lsn, ToolStatusChanged)>,
    anomalies: Vec<Anomaly>,
    curations: Vec<(Lsn, HistoryCurated)>,
    last_lsn: Lsn,
}

impl Serialize for ConversationSlice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SliceForm {
            conversation_id: &self.conversation_id,
            entries: self.entries.values().collect(),
            evaluations: &self.evaluations,
            unknown_statuses: self.unknown_statuses.values().collect(),
            anomalies: &self.anomalies,
            curations: &self.curations,
            last_lsn: self.last_lsn,
        }
        .serialize(serializer)
    }
}

/// The slice form of snapshot version 2: `SliceData` with the curations of
/// event codec version 1 (without `prompt_name` and `session_id`).
/// On-disk format, frozen (docs/format.md section 13).
#[derive(Deserialize)]
struct SliceDataV2 {
    conversation_id: String,
    entries: Vec<RecordedEntry>,
    evaluations: Vec<String>,
    unknown_statuses: Vec<(Lsn, ToolStatusChanged)>,
    anomalies: Vec<Anomaly>,
    curations: Vec<(Lsn, crate::codec::HistoryCuratedV1)>,
    last_lsn: Lsn,
}

/// Decodes a conversation's slice from a snapshot blob of snapshot format
/// `version` (2 or 3; the caller has checked the version): version 3 is the
/// current form, version 2 holds the curations without `prompt_name` and
/// `session_id`, which decode as `None`.
pub(crate) fn decode_snapshot_slice(
    version: u32,
    blob: &[u8],
) -> Result<ConversationSlice, String> {
    if version == 2 {
        let old: SliceDataV2 = crate::codec::decode_value(blob)?;
        return Ok(ConversationSlice::from_data(SliceData {
            conversation_id: old.conversation_id,
            entries: old.entries,
            evaluations: old.evaluations,
            unknown_statuses: old.unknown_statuses,
            anomalies: old.anomalies,
            curations: old
                .curations
                .into_iter()
                .map(|(lsn, curated)| (lsn, curated.into()))
                .collect(),
            last_lsn: old.last_lsn,
        }));
    }
    crate::codec::decode_value(blob)
}

impl<'de> Deserialize<'de> for ConversationSlice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ConversationSlice, D::Error> {
        Ok(ConversationSlice::from_data(SliceData::deserialize(
            deserializer,
        )?))
    }
}

impl ConversationSlice {
    fn from_data(data: SliceData) -> ConversationSlice {
        let mut slice = ConversationSlice::new(data.conversation_id);
        for evaluation_id in &data.evaluations {
            slice.rank_of(evaluation_id);
        }
        // The list is in conversation order: arrivals in list order keep
        // entries of equal evaluation and sequence in their order.
        for recorded in data.entries {
            slice.message_ids.insert(recorded.entry.message_id);
            let key = slice.key_for(&recorded.entry);
            slice.index(key, &recorded.entry);
            slice.entries.insert(key, recorded);
        }
        for (lsn, change) in data.unknown_statuses {
            slice.keep_unknown(lsn, change);
        }
        slice.anomalies = data.anomalies;
        slice.curations = data.curations;
        slice.last_lsn = data.last_lsn;
        slice
    }
}

/// Equality of state: the indexes are derived from the entries and take no
/// part.
impl PartialEq for ConversationSlice {
    fn eq(&self, other: &ConversationSlice) -> bool {
        self.conversation_id == other.conversation_id
            && self.entries.values().eq(other.entries.values())
            && self.evaluations == other.evaluations
            && self
                .unknown_statuses
                .values()
                .eq(other.unknown_statuses.values())
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
        match event {
            // The entry is the one part worth not copying twice.
            Event::ConversationRecorded(recorded)
                if recorded.conversation_id == self.conversation_id =>
            {
                self.record(recorded.entry.clone(), lsn);
                self.last_lsn = lsn;
            }
            _ => self.apply_other(event, lsn),
        }
    }

    /// [`ConversationSlice::apply`], taking the event: a recorded entry is
    /// moved into the slice instead of copied.
    pub fn apply_owned(&mut self, event: Event, lsn: Lsn) {
        match event {
            Event::ConversationRecorded(recorded)
                if recorded.conversation_id == self.conversation_id =>
            {
                self.record(recorded.entry, lsn);
                self.last_lsn = lsn;
            }
            other => self.apply_other(&other, lsn),
        }
    }

    /// [`ConversationSlice::apply_owned`] of an event decoded for the fold
    /// ([`crate::codec::decode_fold_event`]): the same slice, without
    /// copying the texts of a status change the fold does not keep.
    pub(crate) fn apply_decoded(&mut self, event: FoldEvent<'_>, lsn: Lsn) {
        match event {
            FoldEvent::Recorded {
                conversation_id,
                entry,
            } if conversation_id == self.conversation_id => {
                self.record(entry, lsn);
                self.last_lsn = lsn;
            }
            FoldEvent::Recorded { .. } => {}
            FoldEvent::Status(change) if change.conversation_id == self.conversation_id => {
                let status = StatusChange {
                    evaluation_id: change.evaluation_id,
                    call_id: change.call_id,
                    status: change.status,
                    at: change.at,
                    error: change.error,
                };
                if !self.apply_status(&status, lsn) {
                    self.keep_unknown(lsn, change.to_owned_change());
                }
                self.last_lsn = lsn;
            }
            FoldEvent::Status(_) => {}
        }
    }

    fn apply_other(&mut self, event: &Event, lsn: Lsn) {
        if event.conversation_id() != Some(self.conversation_id.as_str()) {
            return;
        }
        match event {
            Event::ConversationRecorded(recorded) => self.record(recorded.entry.clone(), lsn),
            Event::ToolStatus(change) => {
                if !self.apply_status(&StatusChange::of(change), lsn) {
                    self.keep_unknown(lsn, change.clone());
                }
            }
            Event::MessagesReplaced(replaced) => {
                self.entries.clear();
                self.evaluations.clear();
                self.ranks.clear();
                self.unknown_statuses.clear();
                self.waiting.clear();
                self.message_ids.clear();
                self.calls_in_evaluation.clear();
                self.calls.clear();
                self.results.clear();
                for entry in &replaced.entries {
                    self.record(entry.clone(), lsn);
                }
            }
            Event::HistoryCurated(curated) => self.curations.push((lsn, curated.clone())),
            Event::Custom(_) => return,
        }
        self.last_lsn = lsn;
    }

    /// The rank of `evaluation_id`, giving a new evaluation the next one.
    fn rank_of(&mut self, evaluation_id: &str) -> usize {
        if let Some(&rank) = self.ranks.get(evaluation_id) {
            return rank;
        }
        let rank = self.evaluations.len();
        self.evaluations.push(evaluation_id.to_string());
        self.ranks.insert(evaluation_id.to_string(), rank);
        rank
    }

    /// A fresh key for `entry`: after every stored entry of an earlier
    /// evaluation and every one of its own with a sequence at or below its own.
    fn key_for(&mut self, entry: &ConversationEntry) -> EntryKey {
        let key = EntryKey {
            rank: self.rank_of(&entry.evaluation_id),
            sequence: entry.sequence,
            arrival: self.next_arrival,
        };
        self.next_arrival += 1;
        key
    }

    /// Adds the calls and result of the entry at `key` to the indexes.
    fn index(&mut self, key: EntryKey, entry: &ConversationEntry) {
        for call in &entry.tool_calls {
            if entry.role == Role::Assistant {
                if let Some(held) = self.calls_in_evaluation.get_mut(&call.call_id) {
                    match held.iter_mut().find(|(rank, _)| *rank == key.rank) {
                        Some((_, last)) => *last = (*last).max(key),
                        None => held.push((key.rank, key)),
                    }
                } else {
                    self.calls_in_evaluation
                        .insert(call.call_id.clone(), vec![(key.rank, key)]);
                }
            }
            match self.calls.get_mut(&call.call_id) {
                Some(held) => *held = (*held).max(key),
                None => {
                    self.calls.insert(call.call_id.clone(), key);
                }
            }
        }
        if let (Role::Tool, Some(call_id)) = (entry.role, &entry.tool_call_id) {
            match self.results.get_mut(call_id) {
                Some(first) => *first = (*first).min(key),
                None => {
                    self.results.insert(call_id.clone(), key);
                }
            }
        }
    }

    /// Keeps a status (or result) for a call not known yet.
    fn keep_unknown(&mut self, lsn: Lsn, change: ToolStatusChanged) {
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.waiting
            .entry((change.evaluation_id.clone(), change.call_id.clone()))
            .or_default()
            .push(arrival);
        self.unknown_statuses.insert(arrival, (lsn, change));
    }

    fn record(&mut self, entry: ConversationEntry, lsn: Lsn) {
        if !self.message_ids.insert(entry.message_id) {
            return;
        }
        let key = self.key_for(&entry);
        self.index(key, &entry);
        // Only a new call can pick up statuses that arrived before it.
        let calls: Vec<String> = if self.waiting.is_empty() {
            Vec::new()
        } else {
            entry
                .tool_calls
                .iter()
                .map(|call| call.call_id.clone())
                .collect()
        };
        // A result completes (or fails) the call it answers; only a failed
        // one carries its content on as the call's error. The entry is not
        // stored yet, and cannot be the one found: a call is found only in
        // an assistant entry.
        if let (Role::Tool, Some(call_id)) = (entry.role, entry.tool_call_id.as_deref()) {
            let change = StatusChange {
                evaluation_id: &entry.evaluation_id,
                call_id,
                status: if entry.is_error {
                    ToolStatus::Failed
                } else {
                    ToolStatus::Completed
                },
                at: entry.created_at,
                error: if entry.is_error {
                    entry.content.as_deref()
                } else {
                    None
                },
            };
            if !self.apply_status(&change, lsn) {
                let change = change.to_owned_change(&self.conversation_id);
                self.keep_unknown(lsn, change);
            }
        }
        let evaluation_id = if calls.is_empty() {
            String::new()
        } else {
            entry.evaluation_id.clone()
        };
        self.entries.insert(key, RecordedEntry { lsn, entry });

        // New calls pick up statuses and results that arrived before them,
        // in the order they arrived.
        let mut picked: Vec<u64> = Vec::new();
        for call_id in &calls {
            let waiting_key = (evaluation_id.clone(), call_id.clone());
            if self.holds_call(key.rank, call_id) {
                if let Some(arrivals) = self.waiting.remove(&waiting_key) {
                    picked.extend(arrivals);
                }
            }
        }
        picked.sort_unstable();
        for arrival in picked {
            if let Some((status_lsn, change)) = self.unknown_statuses.remove(&arrival) {
                if !self.apply_status(&StatusChange::of(&change), status_lsn) {
                    self.keep_unknown(status_lsn, change);
                }
            }
        }
    }

    /// Applies a status change to a known call; false when the call is unknown.
    fn apply_status(&mut self, change: &StatusChange<'_>, lsn: Lsn) -> bool {
        let Some(call) = self.find_call_mut(change.evaluation_id, change.call_id) else {
            return false;
        };
        let anomaly = advance(call, change);
        if let Some(detail) = anomaly {
            self.anomalies.push(Anomaly {
                lsn,
                call_id: change.call_id.to_string(),
                detail,
            });
        }
        true
    }

    /// Whether an assistant entry of the evaluation ranked `rank` holds
    /// the call.
    fn holds_call(&self, rank: usize, call_id: &str) -> bool {
        self.calls_in_evaluation
            .get(call_id)
            .is_some_and(|held| held.iter().any(|(held_rank, _)| *held_rank == rank))
    }

    fn find_call_mut(&mut self, evaluation_id: &str, call_id: &str) -> Option<&mut ToolCall> {
        let rank = *self.ranks.get(evaluation_id)?;
        let key = self
            .calls_in_evaluation
            .get(call_id)?
            .iter()
            .find(|(held_rank, _)| *held_rank == rank)?
            .1;
        self.entries
            .get_mut(&key)?
            .entry
            .tool_calls
            .iter_mut()
            .find(|call| call.call_id == call_id)
    }

    /// The conversation id.
    pub fn conversation_id(&self) -> &str {
        &self.conversation_id
    }

    /// Every entry in order, with the LSN that recorded it.
    pub fn recorded(&self) -> Vec<&RecordedEntry> {
        self.entries.values().collect()
    }

    /// Every entry in order, with the LSN that recorded it.
    pub fn recorded_iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = &RecordedEntry> + ExactSizeIterator {
        self.entries.values()
    }

    /// Every entry in order.
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &ConversationEntry> {
        self.entries.values().map(|recorded| &recorded.entry)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the conversation has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries of one evaluation (with their LSNs), in sequence order.
    fn evaluation_range(
        &self,
        evaluation_id: &str,
    ) -> impl DoubleEndedIterator<Item = &RecordedEntry> {
        let range = self.ranks.get(evaluation_id).map(|&rank| {
            let first = EntryKey {
                rank,
                sequence: 0,
                arrival: 0,
            };
            let last = EntryKey {
                rank,
                sequence: u64::MAX,
                arrival: u64::MAX,
            };
            self.entries.range(first..=last)
        });
        range.into_iter().flatten().map(|(_, recorded)| recorded)
    }

    /// The entries of one evaluation, in sequence order.
    pub fn evaluation(&self, evaluation_id: &str) -> Vec<&ConversationEntry> {
        self.evaluation_range(evaluation_id)
            .map(|recorded| &recorded.entry)
            .collect()
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
            .values()
            .filter(|recorded| recorded.lsn > lsn)
            .map(|recorded| &recorded.entry)
            .collect()
    }

    /// The call `call_id` (the last entry in order holding it: the latest
    /// evaluations first) and the assistant entry that holds it.
    pub fn tool_call(&self, call_id: &str) -> Option<(&ConversationEntry, &ToolCall)> {
        let recorded = self.entries.get(self.calls.get(call_id)?)?;
        let call = recorded
            .entry
            .tool_calls
            .iter()
            .find(|call| call.call_id == call_id)?;
        Some((&recorded.entry, call))
    }

    /// The recorded result of call `call_id`, if any (the first in order):
    /// lets a host return the stored result instead of running a mutating
    /// tool twice.
    pub fn tool_result(&self, call_id: &str) -> Option<&ConversationEntry> {
        Some(&self.entries.get(self.results.get(call_id)?)?.entry)
    }

    /// The next free sequence number in `evaluation_id` (0 if it is new).
    ///
    /// Stored sequences are at most `SEQUENCE_MAX` (< `u64::MAX`), so this
    /// is always one more than the highest; it saturates rather than wraps
    /// for entries stored before that limit, and an entry numbered past
    /// `SEQUENCE_MAX` is refused on the way in.
    pub fn next_sequence(&self, evaluation_id: &str) -> u64 {
        self.evaluation_range(evaluation_id)
            .next_back()
            .map_or(0, |recorded| recorded.entry.sequence.saturating_add(1))
    }

    /// Statuses and results for calls no assistant entry has (yet), in the
    /// order they arrived.
    pub fn unknown_statuses(&self) -> Vec<&(Lsn, ToolStatusChanged)> {
        self.unknown_statuses.values().collect()
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

/// How a tool result entry stands against the calls of its list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultUse {
    /// It answers its call: the first result in order for a call an
    /// assistant entry of its evaluation holds.
    Answers,
    /// Its call already has an earlier result.
    Duplicate,
    /// No assistant entry of its evaluation holds its call.
    NoCall,
}

/// Which entry answers each tool call of a list of entries, and so which
/// calls are unfinished: the one definition `resume`, the provider planner
/// and the audit timeline share.
///
/// - A tool entry answers the call with its `tool_call_id` that an
///   assistant entry *of its evaluation* in the list holds, wherever the
///   result sits in the order: a result recorded before its call (a lower
///   sequence, or an earlier LSN) still says the call ran. The first such
///   entry in order answers; a later one is a duplicate.
/// - A call is *unfinished* when its status is pending or running and no
///   entry answers it. A completed or failed status finishes a call even
///   without a result entry.
///
/// Building it costs O(n) expected time for n entries.
#[derive(Debug, Default)]
pub struct CallResults<'a> {
    /// (evaluation, call id) of every call an assistant entry holds → the
    /// position and entry of the result answering it, if one does.
    calls: HashMap<(&'a str, &'a str), Option<(usize, &'a ConversationEntry)>>,
}

impl<'a> CallResults<'a> {
    /// Pairs the results of `entries` (in conversation order) with their calls.
    pub fn new(entries: impl IntoIterator<Item = &'a ConversationEntry>) -> CallResults<'a> {
        let entries: Vec<&'a ConversationEntry> = entries.into_iter().collect();
        let held: usize = entries
            .iter()
            .filter(|entry| entry.role == Role::Assistant)
            .map(|entry| entry.tool_calls.len())
            .sum();
        let mut calls = HashMap::with_capacity_and_hasher(held, SeededState::default());
        for entry in entries.iter().filter(|entry| entry.role == Role::Assistant) {
            for call in &entry.tool_calls {
                calls
                    .entry((entry.evaluation_id.as_str(), call.call_id.as_str()))
                    .or_insert(None);
            }
        }
        for (position, entry) in entries.iter().enumerate() {
            if let (Role::Tool, Some(call_id)) = (entry.role, entry.tool_call_id.as_deref()) {
                if let Some(answer @ None) = calls.get_mut(&(entry.evaluation_id.as_str(), call_id))
                {
                    *answer = Some((position, *entry));
                }
            }
        }
        CallResults { calls }
    }

    /// The result entry answering call `call_id` of `evaluation_id`.
    pub fn answer(&self, evaluation_id: &str, call_id: &str) -> Option<&'a ConversationEntry> {
        self.answer_at(evaluation_id, call_id)
            .map(|(_, entry)| entry)
    }

    /// The answering result entry and its position in the list.
    pub fn answer_at(
        &self,
        evaluation_id: &str,
        call_id: &str,
    ) -> Option<(usize, &'a ConversationEntry)> {
        self.calls.get(&(evaluation_id, call_id)).copied().flatten()
    }

    /// Whether `call`, held by an assistant entry of `evaluation_id`, is
    /// unfinished: pending or running, and no result answers it.
    pub fn is_unfinished(&self, evaluation_id: &str, call: &ToolCall) -> bool {
        !call.status.is_finished() && self.answer(evaluation_id, &call.call_id).is_none()
    }

    /// How the tool entry at `position` of the list stands.
    pub fn result_use(&self, position: usize, entry: &ConversationEntry) -> ResultUse {
        let Some(call_id) = entry.tool_call_id.as_deref() else {
            return ResultUse::NoCall;
        };
        match self.answer_at(&entry.evaluation_id, call_id) {
            Some((answering, _)) if answering == position => ResultUse::Answers,
            Some(_) => ResultUse::Duplicate,
            None => ResultUse::NoCall,
        }
    }
}

/// What the fold reads of a status change (an event's, or the one a result
/// entry implies), borrowed.
#[derive(Debug, Clone, Copy)]
struct StatusChange<'a> {
    evaluation_id: &'a str,
    call_id: &'a str,
    status: ToolStatus,
    at: crate::model::Timestamp,
    error: Option<&'a str>,
}

impl<'a> StatusChange<'a> {
    fn of(change: &'a ToolStatusChanged) -> StatusChange<'a> {
        StatusChange {
            evaluation_id: &change.evaluation_id,
            call_id: &change.call_id,
            status: change.status,
            at: change.at,
            error: change.error.as_deref(),
        }
    }

    /// The status change event of `conversation_id` it reads (not resumed).
    fn to_owned_change(self, conversation_id: &str) -> ToolStatusChanged {
        ToolStatusChanged {
            conversation_id: conversation_id.to_string(),
            evaluation_id: self.evaluation_id.to_string(),
            call_id: self.call_id.to_string(),
            status: self.status,
            at: self.at,
            error: self.error.map(str::to_string),
            resumed: false,
        }
    }
}

/// Moves a call's status forward; returns a note when a conflicting final
/// status was refused.
fn advance(call: &mut ToolCall, change: &StatusChange<'_>) -> Option<String> {
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
        call.error = change.error.map(str::to_string);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

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

    /// Key comparisons made while folding `events` into a new slice.
    fn comparisons_folding(events: &[Event]) -> (ConversationSlice, u64) {
        let before = comparisons::so_far();
        let slice = fold("c", events.iter().zip(1..));
        (slice, comparisons::so_far() - before)
    }

    fn descending_sequences(n: u64) -> Vec<Event> {
        (0..n)
            .rev()
            .map(|sequence| entry("e1", sequence, Role::User).recorded_in("c"))
            .collect()
    }

    fn distinct_evaluations(n: u64) -> Vec<Event> {
        (0..n)
            .map(|index| entry(&format!("e{index}"), 0, Role::User).recorded_in("c"))
            .collect()
    }

    /// Every call's result first (highest sequence first), then the calls.
    fn results_before_calls(n: u64) -> Vec<Event> {
        let results = (0..n)
            .rev()
            .map(|index| result("e1", 2 * index + 1, &format!("call{index}"), false));
        let calls = (0..n)
            .rev()
            .map(|index| assistant_with_calls("e1", 2 * index, &[&format!("call{index}")]));
        results
            .chain(calls)
            .map(|entry| entry.recorded_in("c"))
            .collect()
    }

    /// The fold does O(log n) key comparisons per event whatever the order
    /// (the list-based fold did O(n) work per event in these orders: 1.9 s
    /// → 9.0 s for 30k → 60k entries). Counted, not timed.
    #[test]
    fn folding_adversarial_orders_costs_n_log_n_comparisons() {
        type Order = fn(u64) -> Vec<Event>;
        let orders: [(&str, Order); 3] = [
            ("descending sequences", descending_sequences),
            ("distinct evaluations", distinct_evaluations),
            ("results before calls", results_before_calls),
        ];
        for (name, events) in orders {
            let n = 4096u64;
            let (small_slice, small) = comparisons_folding(&events(n));
            let (large_slice, large) = comparisons_folding(&events(2 * n));
            assert_eq!(large_slice.len() as u64, 2 * small_slice.len() as u64);
            let bound = |n: u64| 4 * n * u64::from(n.ilog2());
            assert!(
                small <= bound(small_slice.len() as u64)
                    && large <= bound(large_slice.len() as u64),
                "{name}: {small} comparisons for {} entries, {large} for {}",
                small_slice.len(),
                large_slice.len()
            );
            // Doubling the input a little more than doubles the work; a
            // quadratic fold would quadruple it.
            assert!(
                large * 10 <= small * 25,
                "{name}: {small} comparisons for n, {large} for 2n"
            );
        }
        let (slice, _) = comparisons_folding(&results_before_calls(64));
        assert!(slice.unknown_statuses().is_empty());
        assert!(slice
            .entries()
            .flat_map(|entry| &entry.tool_calls)
            .all(|call| call.status == ToolStatus::Completed));
        let sequences: Vec<u64> = slice.entries().map(|entry| entry.sequence).collect();
        assert_eq!(sequences, (0..128).collect::<Vec<_>>());
    }

    /// The fold's order, checked against its definition (sort the distinct
    /// entries by evaluation's first appearance, sequence, then arrival)
    /// over many random orders with collisions and repeats.
    #[test]
    fn entries_follow_evaluation_then_sequence_then_arrival_in_any_order() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        for _ in 0..200 {
            let pool: Vec<ConversationEntry> = (0..30)
                .map(|index| {
                    let mut entry = entry(&format!("e{}", next(4)), next(6), Role::User);
                    entry.content = Some(format!("{index}"));
                    entry
                })
                .collect();
            let picks: Vec<&ConversationEntry> =
                (0..40).map(|_| &pool[next(30) as usize]).collect();
            let events: Vec<Event> = picks
                .iter()
                .map(|entry| (*entry).clone().recorded_in("c"))
                .collect();
            let slice = fold("c", events.iter().zip(1..));

            let mut seen = std::collections::HashSet::new();
            let mut ranks: Vec<&str> = Vec::new();
            let mut expected: Vec<(usize, u64, usize, &ConversationEntry)> = Vec::new();
            for (arrival, entry) in picks.iter().enumerate() {
                if !seen.insert(entry.message_id) {
                    continue;
                }
                let rank = match ranks.iter().position(|id| *id == entry.evaluation_id) {
                    Some(rank) => rank,
                    None => {
                        ranks.push(&entry.evaluation_id);
                        ranks.len() - 1
                    }
                };
                expected.push((rank, entry.sequence, arrival, entry));
            }
            expected.sort_by_key(|(rank, sequence, arrival, _)| (*rank, *sequence, *arrival));
            let expected: Vec<&ConversationEntry> =
                expected.into_iter().map(|(_, _, _, entry)| entry).collect();
            assert_eq!(slice.entries().collect::<Vec<_>>(), expected);
            assert_eq!(slice.evaluations(), ranks);
            for evaluation in &ranks {
                let next_sequence = expected
                    .iter()
                    .filter(|entry| entry.evaluation_id == *evaluation)
                    .map(|entry| entry.sequence + 1)
                    .max()
                    .unwrap_or(0);
                assert_eq!(slice.next_sequence(evaluation), next_sequence);
            }

            // The decoded slice is the same state and folds on the same way.
            let bytes = crate::codec::encode_value(&slice).unwrap();
            let mut decoded: ConversationSlice = crate::codec::decode_value(&bytes).unwrap();
            assert_eq!(decoded, slice);
            let mut continued = slice.clone();
            for (event, lsn) in events.iter().zip(100..) {
                decoded.apply(event, lsn);
                continued.apply(event, lsn);
            }
            let extra = entry("e0", 3, Role::User).recorded_in("c");
            decoded.apply(&extra, 200);
            continued.apply(&extra, 200);
            assert_eq!(decoded, continued);
        }
    }

    /// The snapshot form is the list form the slice always had: the
    /// entries in order, evaluations, unknown statuses, anomalies,
    /// curations and last LSN, in that order, and nothing else.
    /// Folding by value gives the slice folding by reference gives, for
    /// every kind of event, other conversations' and results before calls
    /// included.
    #[test]
    fn apply_owned_folds_as_apply_does() {
        let mut events = results_before_calls(3);
        events.extend(descending_sequences(3));
        events.push(status("late", ToolStatus::Running));
        events.push(assistant_with_calls("e1", 40, &["late"]).recorded_in("c"));
        events.push(entry("e9", 0, Role::User).recorded_in("other"));
        events.push(result("e1", 41, "late", true).recorded_in("c"));
        events.push(entry("e1", 42, Role::Assistant).recorded_in("c"));
        let replaced = Event::MessagesReplaced(crate::model::MessagesReplaced {
            conversation_id: "c".into(),
            entries: vec![entry("e5", 0, Role::System), entry("e5", 1, Role::User)],
            at: crate::model::Timestamp::now(),
        });
        let (mut by_reference, mut by_value) =
            (ConversationSlice::new("c"), ConversationSlice::new("c"));
        let all: Vec<&Event> = events.iter().chain([&replaced]).collect();
        for (event, lsn) in all.iter().cycle().take(40).zip(1..) {
            by_reference.apply(event, lsn);
            by_value.apply_owned((**event).clone(), lsn);
            assert_eq!(
                serde_json::to_string(&by_reference).unwrap(),
                serde_json::to_string(&by_value).unwrap(),
                "after LSN {lsn}"
            );
        }
        assert!(!by_value.is_empty());
    }

    /// Folding events decoded for the fold (a status change borrowed from
    /// its payload; a result's implied status without copies) gives the
    /// slice folding the decoded events does, for every kind of event:
    /// statuses before their calls, failed results, a conflicting final
    /// status (an anomaly), other conversations' events, a replacement.
    #[test]
    fn apply_decoded_folds_as_apply_does() {
        let mut events = results_before_calls(3);
        events.extend(descending_sequences(3));
        events.push(status("late", ToolStatus::Running));
        let mut failed =
            ToolStatusChanged::new("c", "e1", "late", ToolStatus::Failed, Timestamp(9));
        failed.error = Some("tool broke".into());
        events.push(Event::ToolStatus(failed));
        events.push(assistant_with_calls("e1", 40, &["late"]).recorded_in("c"));
        events.push(entry("e9", 0, Role::User).recorded_in("other"));
        events.push(
            ToolStatusChanged::new("other", "e1", "late", ToolStatus::Completed, Timestamp(1))
                .into(),
        );
        events.push(result("e1", 41, "late", true).recorded_in("c"));
        events.push(status("late", ToolStatus::Completed));
        events.push(assistant_with_calls("e2", 1, &["x"]).recorded_in("c"));
        events.push(result("e2", 2, "x", true).recorded_in("c"));
        events.push(entry("e1", 42, Role::Assistant).recorded_in("c"));
        events.push(Event::MessagesReplaced(crate::model::MessagesReplaced {
            conversation_id: "c".into(),
            entries: vec![entry("e5", 0, Role::System), entry("e5", 1, Role::User)],
            at: Timestamp::now(),
        }));
        let (mut by_reference, mut decoded) =
            (ConversationSlice::new("c"), ConversationSlice::new("c"));
        let mut borrowed = 0;
        for (event, lsn) in events.iter().cycle().take(3 * events.len()).zip(1..) {
            by_reference.apply(event, lsn);
            let payload = crate::codec::encode_event(event);
            match crate::codec::decode_fold_event(&payload) {
                Some(folded) => {
                    borrowed += 1;
                    decoded.apply_decoded(folded, lsn);
                }
                None => decoded.apply_owned(crate::codec::decode_event(&payload).unwrap(), lsn),
            }
            assert_eq!(decoded, by_reference, "after LSN {lsn}");
            assert_eq!(
                serde_json::to_string(&decoded).unwrap(),
                serde_json::to_string(&by_reference).unwrap(),
                "after LSN {lsn}"
            );
        }
        assert!(borrowed > 2 * events.len(), "{borrowed}");
        assert!(!decoded.anomalies().is_empty());
        assert!(!decoded.is_empty());
    }

    #[test]
    fn the_encoded_slice_keeps_the_list_form() {
        #[derive(Serialize, Deserialize)]
        struct ListForm {
            conversation_id: String,
            entries: Vec<RecordedEntry>,
            evaluations: Vec<String>,
            unknown_statuses: Vec<(Lsn, ToolStatusChanged)>,
            anomalies: Vec<Anomaly>,
            curations: Vec<(Lsn, HistoryCurated)>,
            last_lsn: Lsn,
        }
        let events = [
            entry("e1", 2, Role::User).recorded_in("c"),
            assistant_with_calls("e1", 1, &["a"]).recorded_in("c"),
            status("ghost", ToolStatus::Running),
            status("a", ToolStatus::Completed),
            status("a", ToolStatus::Failed),
            entry("e2", 0, Role::User).recorded_in("c"),
        ];
        let slice = fold("c", events.iter().zip(1..));
        let bytes = crate::codec::encode_value(&slice).unwrap();
        let list: ListForm = crate::codec::decode_value(&bytes).unwrap();
        assert_eq!(list.conversation_id, "c");
        assert_eq!(
            list.entries.iter().collect::<Vec<_>>(),
            slice.recorded(),
            "entries in conversation order"
        );
        assert_eq!(list.evaluations, ["e1", "e2"]);
        assert_eq!(list.unknown_statuses.len(), 1);
        assert_eq!(list.anomalies.len(), 1);
        assert_eq!(list.last_lsn, 6);
        assert_eq!(crate::codec::encode_value(&list).unwrap(), bytes);
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
