//! The in-memory index: for each conversation, the frames that hold its
//! events (16 bytes per conversation and frame), and the conversation reads
//! that fold a conversation from its snapshot slice and those frames.

use std::collections::VecDeque;
use std::sync::Arc;

use super::snapshot::LoadedSnapshot;
use super::{Store, StoreCore};
use crate::codec;
use crate::conversation::{ConversationSlice, HashMap};
use crate::error::{Error, Result};
use crate::log::{Lsn, Position};
use crate::model::Event;

/// Counters describing a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStats {
    /// First LSN still in the log.
    pub first_lsn: Lsn,
    /// The LSN the next event will get.
    pub next_lsn: Lsn,
    /// Conversations known (in the snapshot or the tail).
    pub conversations: usize,
    /// LSN of the snapshot in use.
    pub snapshot_lsn: Option<Lsn>,
    /// (conversation, frame) entries in the in-memory index.
    pub index_entries: usize,
    /// Estimated heap bytes of the in-memory index.
    pub index_bytes: usize,
}

/// One index entry: a frame holding events of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IndexEntry {
    /// LSN of the conversation's first event in the frame.
    pub(super) lsn: Lsn,
    /// Segment ordinal (high 24 bits) and byte offset (low 40 bits).
    pub(super) packed: u64,
}

pub(super) const OFFSET_BITS: u32 = 40;

pub(super) struct State {
    pub(super) snapshot: Option<Arc<LoadedSnapshot>>,
    pub(super) index: HashMap<String, Vec<IndexEntry>>,
    /// First LSN of every segment ever indexed, in order (ordinal = position).
    pub(super) segments: Vec<Lsn>,
    pub(super) events_since_snapshot: u64,
    pub(super) bytes_since_snapshot: u64,
    /// The latest frames indexed (one past the last LSN of each, and where
    /// it starts), oldest first, at most `RECENT_FRAMES_KEPT`: where a
    /// snapshot finds the frame ending just before its LSN.
    pub(super) recent_frames: VecDeque<(Lsn, Position)>,
    /// A sparse map from LSN to frame: (one past the last LSN, position)
    /// of a frame at least `SEEK_SPAN_BYTES` after the one before it in
    /// the list (or the first of a segment), in LSN order; where reading
    /// the log from an LSN starts instead of at the start of its segment.
    pub(super) seek_points: Vec<(Lsn, Position)>,
}

/// Bytes of log between two seek points: reading from an LSN scans at
/// most about this much before reaching it (16 bytes of memory per span).
pub(super) const SEEK_SPAN_BYTES: u64 = 64 * 1024;

/// How many of the latest frames the index remembers for snapshots (a
/// snapshot whose last frame has left this window records no replay
/// position, and opening replays its segment from the start).
pub(super) const RECENT_FRAMES_KEPT: usize = 1024;

impl State {
    pub(super) fn pack(&mut self, position: Position) -> u64 {
        let ordinal = match self.segments.binary_search(&position.segment) {
            Ok(ordinal) => ordinal,
            Err(insert_at) => {
                self.segments.insert(insert_at, position.segment);
                insert_at
            }
        };
        debug_assert!(position.offset < 1 << OFFSET_BITS);
        ((ordinal as u64) << OFFSET_BITS) | position.offset
    }

    /// Remembers that the frame at `position` reaches at least LSN `end - 1`.
    fn remember_frame(&mut self, end: Lsn, position: Position) {
        // Replay indexes a frame event by event: its seek point, if it has
        // one, reaches its last event.
        if let Some((last_end, last)) = self.seek_points.last_mut() {
            if *last == position {
                *last_end = (*last_end).max(end);
            }
        }
        let spaced = self.seek_points.last().is_none_or(|(last_end, last)| {
            end > *last_end
                && (last.segment != position.segment
                    || position.offset >= last.offset + SEEK_SPAN_BYTES)
        });
        if spaced {
            self.seek_points.push((end, position));
        }
        // Likewise its entry among the recent frames; concurrent appenders
        // may index frames out of order (an entry per frame all the same).
        if let Some(known) = self
            .recent_frames
            .iter_mut()
            .rev()
            .take(8)
            .find(|(_, known)| *known == position)
        {
            known.0 = known.0.max(end);
            return;
        }
        if self.recent_frames.len() == RECENT_FRAMES_KEPT {
            self.recent_frames.pop_front();
        }
        self.recent_frames.push_back((end, position));
    }

    /// The latest seek point at or before `lsn`: a frame ending at or
    /// before it, and where it starts.
    pub(super) fn seek_point(&self, lsn: Lsn) -> Option<(Lsn, Position)> {
        let after = self.seek_points.partition_point(|(end, _)| *end <= lsn);
        after.checked_sub(1).map(|index| self.seek_points[index])
    }

    /// Where the frame ending just before `lsn` starts, if it is among the
    /// latest frames indexed.
    pub(super) fn frame_ending_before(&self, lsn: Lsn) -> Option<Position> {
        self.recent_frames
            .iter()
            .rev()
            .find(|(end, _)| *end == lsn)
            .map(|(_, position)| *position)
    }

    pub(super) fn unpack(&self, packed: u64) -> Position {
        Position {
            segment: self.segments[(packed >> OFFSET_BITS) as usize],
            offset: packed & ((1 << OFFSET_BITS) - 1),
        }
    }

    /// Records that the frame at `position` holds events of these conversations.
    pub(super) fn index_frame(&mut self, events: &[(Lsn, &Event)], position: Position) {
        if let Some(end) = events.iter().map(|(lsn, _)| lsn + 1).max() {
            self.remember_frame(end, position);
        }
        let packed = self.pack(position);
        for (lsn, event) in events {
            let Some(id) = event.conversation_id() else {
                continue;
            };
            // Appends hit known conversations almost always: look up before
            // allocating the key.
            if !self.index.contains_key(id) {
                self.index.insert(id.to_string(), Vec::new());
            }
            let entries = self.index.get_mut(id).expect("inserted above");
            // Concurrent appenders may index out of LSN order; keep it sorted.
            let at = entries.partition_point(|existing| existing.lsn < *lsn);
            // One entry per (conversation, frame): a frame's LSNs are
            // contiguous, so an earlier event of this frame is the entry
            // just before this one, wherever the frame landed in the order.
            if at > 0 && entries[at - 1].packed == packed {
                continue;
            }
            entries.insert(at, IndexEntry { lsn: *lsn, packed });
        }
    }
}

impl Store {
    /// The folded state of one conversation.
    ///
    /// Costs time proportional to that conversation: its slice from the
    /// snapshot (if any) plus its frames after the snapshot.
    pub fn conversation(&self, conversation_id: &str) -> Result<ConversationSlice> {
        self.follow_read(|| self.fold_conversation(conversation_id, None))?
            .ok_or_else(|| Error::ConversationNotFound {
                conversation_id: conversation_id.to_string(),
            })
    }

    /// Whether any event of `conversation_id` was recorded.
    pub fn contains_conversation(&self, conversation_id: &str) -> bool {
        self.follow_quietly();
        self.forget_taken_back();
        let state = self.state.read();
        state.index.contains_key(conversation_id)
            || state
                .snapshot
                .as_ref()
                .is_some_and(|loaded| loaded.conversations.contains_key(conversation_id))
            || self.is_erased(conversation_id)
    }

    /// The batches (frames) holding events of `conversation_id` that were
    /// appended at or after LSN `lsn`: the LSN of the conversation's first
    /// event in each, in order. `None` when the store cannot list them all:
    /// a snapshot taken after `lsn` folded the earlier ones away.
    ///
    /// A cheap lookup in the in-memory index, no read. It lets a host that
    /// keeps a folded [`ConversationSlice`] between uses check that no one
    /// else wrote to the conversation meanwhile: if the batches since the
    /// point it folded through are exactly the ones it folded itself (or
    /// none), the slice still equals a fresh [`Store::conversation`]. A
    /// frame taken back (a failed write under `Durability::None`) is not
    /// listed.
    pub fn conversation_batches_since(&self, conversation_id: &str, lsn: Lsn) -> Option<Vec<Lsn>> {
        self.follow_quietly();
        self.forget_taken_back();
        let state = self.state.read();
        if state
            .snapshot
            .as_ref()
            .is_some_and(|loaded| loaded.lsn > lsn)
        {
            return None;
        }
        let entries = state
            .index
            .get(conversation_id)
            .map_or(&[][..], Vec::as_slice);
        let from = entries.partition_point(|entry| entry.lsn < lsn);
        Some(entries[from..].iter().map(|entry| entry.lsn).collect())
    }

    /// Every conversation id, sorted.
    pub fn conversation_ids(&self) -> Vec<String> {
        self.follow_quietly();
        self.core.conversation_ids()
    }
}

impl StoreCore {
    pub(super) fn conversation_ids(&self) -> Vec<String> {
        self.forget_taken_back();
        let state = self.state.read();
        let mut ids: Vec<String> = state.index.keys().cloned().collect();
        if let Some(loaded) = &state.snapshot {
            ids.extend(
                loaded
                    .conversations
                    .keys()
                    .filter(|id| !state.index.contains_key(*id))
                    .cloned(),
            );
        }
        ids.sort();
        if self.log.keyring.is_some() {
            // Erased conversations are listed by `Store::erased_conversations`.
            let erased = self.erased_ids();
            ids.retain(|id| erased.binary_search(id).is_err());
        }
        ids
    }

    /// Folds a conversation from its snapshot slice and its indexed frames,
    /// taking only events below `below_lsn` when given. `None` when the
    /// conversation has neither.
    pub(super) fn fold_conversation(
        &self,
        conversation_id: &str,
        below_lsn: Option<Lsn>,
    ) -> Result<Option<ConversationSlice>> {
        self.forget_taken_back();
        // An erased conversation fails here, before anything is read.
        let key = self.read_key(conversation_id)?;
        let key = key.as_deref();
        let _frames_stay = self.compacting.read();
        let (snapshot, positions) = {
            let state = self.state.read();
            let positions: Vec<(Lsn, Position)> = state
                .index
                .get(conversation_id)
                .map(|entries| {
                    entries
                        .iter()
                        .map(|entry| (entry.lsn, state.unpack(entry.packed)))
                        .collect()
                })
                .unwrap_or_default();
            (state.snapshot.clone(), positions)
        };
        let base_lsn = snapshot.as_ref().map_or(1, |loaded| loaded.lsn);
        if let Some(limit) = below_lsn.filter(|limit| *limit < base_lsn) {
            // A following store started again from a newer snapshot than
            // the cut (another writer compacted): what lies between is only
            // in that snapshot, folded past the cut.
            return Err(Error::Compacted {
                store: self.log.dir().to_path_buf(),
                first_missing: limit,
                next_present: base_lsn,
            });
        }
        let mut slice = self.snapshot_slice(snapshot.as_deref(), conversation_id, key);
        if let Some(Err(error)) = &slice {
            // Snapshots are derived data: rebuild from the log if it is whole.
            if self.log.first_lsn() > 1 {
                return Err(Error::SnapshotRestore {
                    path: snapshot
                        .as_ref()
                        .map(|loaded| loaded.path.clone())
                        .unwrap_or_default(),
                    reason: format!(
                        "{error}; the log starts at LSN {}, so there is no fallback",
                        self.log.first_lsn()
                    ),
                });
            }
            tracing::warn!(conversation = %conversation_id, error = %error, "snapshot slice unusable; replaying the log");
            return self.fold_from_log(conversation_id, below_lsn);
        }
        let mut slice = match slice.take() {
            Some(Ok(slice)) => slice,
            _ if positions.is_empty() => return Ok(None),
            _ => ConversationSlice::new(conversation_id),
        };
        let limit = below_lsn.unwrap_or(Lsn::MAX);
        let positions: Vec<(Lsn, Position)> = positions
            .into_iter()
            .filter(|(lsn, _)| *lsn < limit)
            .collect();
        // The segment log reads the frames in one pass, payloads borrowed.
        // A take-back (a failed write under `Durability::None`) is rare: the
        // frame-by-frame fold below knows which frames it removed.
        if let Some(reader) = self
            .log
            .reader()
            .filter(|_| self.log.taken_back_from().is_none())
        {
            let locators: Vec<Position> = positions.iter().map(|(_, position)| *position).collect();
            let mut scratch = crate::erasure::OpenScratch::default();
            let mut fold = |_: Position, lsn: Lsn, payload: &[u8]| -> Result<()> {
                if lsn < base_lsn || lsn >= limit {
                    return Ok(());
                }
                // A frame may hold other conversations' events: skip them
                // without decoding.
                if codec::peek_conversation_id(payload).is_some_and(|id| id != conversation_id) {
                    return Ok(());
                }
                self.fold_payload(&mut slice, conversation_id, key, lsn, payload, &mut scratch)
            };
            match reader.visit_frames(&locators, &mut fold) {
                Ok(()) => return Ok(Some(slice)),
                // Taken back meanwhile: fold again, frame by frame.
                Err(_) if self.log.taken_back_from().is_some() => {
                    return self.fold_conversation(conversation_id, below_lsn)
                }
                Err(error) => return Err(error),
            }
        }
        for (frame_lsn, position) in positions {
            let records = match self.log.log().read_batch(position) {
                Ok(records) => records,
                // The writer took this frame back after its position was
                // taken (a failed fsync under `Durability::None`): it is
                // no longer in the log, so it is not part of the fold.
                Err(_) if self.taken_back(frame_lsn) => continue,
                Err(error) => return Err(error),
            };
            for record in records {
                if record.lsn < base_lsn || record.lsn >= limit || self.taken_back(record.lsn) {
                    continue;
                }
                // A frame may hold other conversations' events: skip them
                // without decoding.
                if codec::peek_conversation_id(&record.payload)
                    .is_some_and(|id| id != conversation_id)
                {
                    continue;
                }
                let event = self.open_event(key, conversation_id, record.lsn, record.event()?)?;
                slice.apply_owned(event, record.lsn);
            }
        }
        Ok(Some(slice))
    }

    /// Folds one event of conversation `conversation_id` into `slice`, its
    /// payload borrowed from the log. Encrypted: a sealed event is opened in
    /// place. A plain conversation's entries and status changes are folded
    /// without copying the texts the fold drops. Anything else is decoded
    /// whole (and opened).
    fn fold_payload(
        &self,
        slice: &mut ConversationSlice,
        conversation_id: &str,
        key: Option<&crate::erasure::ConversationKey>,
        lsn: Lsn,
        payload: &[u8],
        scratch: &mut crate::erasure::OpenScratch,
    ) -> Result<()> {
        if let Some(key) = key {
            if let Some(event) = key.open_payload(conversation_id, lsn, payload, scratch)? {
                slice.apply_owned(event, lsn);
                return Ok(());
            }
        } else if let Some(event) = codec::decode_fold_event(payload) {
            slice.apply_decoded(event, lsn);
            return Ok(());
        }
        let event = codec::decode_event_at(lsn, payload)?;
        slice.apply_owned(self.open_event(key, conversation_id, lsn, event)?, lsn);
        Ok(())
    }

    /// A conversation's slice in the snapshot: `None` when it has none
    /// there; an error when its blob does not read, open or decode.
    fn snapshot_slice(
        &self,
        snapshot: Option<&LoadedSnapshot>,
        conversation_id: &str,
        key: Option<&crate::erasure::ConversationKey>,
    ) -> Option<Result<ConversationSlice>> {
        let loaded = snapshot?;
        match loaded.read_blob(conversation_id) {
            Ok(Some(blob)) => Some(
                self.open_slice(key, conversation_id, blob)
                    .and_then(|blob| loaded.decode_slice(&blob))
                    .map_err(|reason| Error::SnapshotDamaged {
                        path: loaded.path.clone(),
                        reason: format!(
                            "the slice of conversation {conversation_id:?} does not decode: {reason}"
                        ),
                    }),
            ),
            Ok(None) => None,
            Err(error) => Some(Err(error)),
        }
    }

    /// Folds a conversation by reading the whole log (the fallback when its
    /// snapshot slice is damaged).
    pub(super) fn fold_from_log(
        &self,
        conversation_id: &str,
        below_lsn: Option<Lsn>,
    ) -> Result<Option<ConversationSlice>> {
        let key = self.read_key(conversation_id)?;
        let mut slice = ConversationSlice::new(conversation_id);
        let limit = below_lsn.unwrap_or(Lsn::MAX);
        let mut found = false;
        for record in self.log.log().read_from(1) {
            let record = record?;
            if record.lsn >= limit || record.lsn >= self.log.visible_next_lsn() {
                break;
            }
            let event = record.event()?;
            if event.conversation_id() == Some(conversation_id) {
                found = true;
                let event = self.open_event(key.as_deref(), conversation_id, record.lsn, event)?;
                slice.apply_owned(event, record.lsn);
            }
        }
        Ok(found.then_some(slice))
    }
}

impl Store {
    /// Counters describing the store.
    pub fn stats(&self) -> StoreStats {
        self.follow_quietly();
        self.forget_taken_back();
        let state = self.state.read();
        let index_entries: usize = state.index.values().map(Vec::len).sum();
        let index_bytes: usize = state
            .index
            .iter()
            .map(|(id, entries)| {
                // Key, vector header, entries, and the hash table slot.
                id.capacity()
                    + std::mem::size_of::<(String, Vec<IndexEntry>)>()
                    + 8
                    + entries.capacity() * std::mem::size_of::<IndexEntry>()
            })
            .sum::<usize>()
            + state.segments.capacity() * 8;
        drop(state);
        StoreStats {
            first_lsn: self.log.first_lsn(),
            next_lsn: self.log.next_lsn(),
            conversations: self.core.conversation_ids().len(),
            snapshot_lsn: self.state.read().snapshot.as_ref().map(|loaded| loaded.lsn),
            index_entries,
            index_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConversationEntry, Role};

    fn empty_state() -> State {
        State {
            snapshot: None,
            index: HashMap::default(),
            segments: Vec::new(),
            events_since_snapshot: 0,
            bytes_since_snapshot: 0,
            recent_frames: VecDeque::new(),
            seek_points: Vec::new(),
        }
    }

    /// Replay indexes a frame one event at a time: the frame's seek point
    /// and its entry among the recent frames must still end where the
    /// frame ends (a seek point ending early is refused when checked
    /// against the frame, and the read falls back to a segment scan).
    #[test]
    fn a_frame_indexed_event_by_event_ends_at_its_last_event() {
        let event = ConversationEntry::new("e", 0, Role::User, Some("hi".into())).recorded_in("c");
        let mut state = empty_state();
        let first = Position {
            segment: 1,
            offset: 56,
        };
        let second = Position {
            segment: 1,
            offset: 56 + SEEK_SPAN_BYTES,
        };
        for lsn in 1..=3 {
            state.index_frame(&[(lsn, &event)], first);
        }
        for lsn in 4..=5 {
            state.index_frame(&[(lsn, &event)], second);
        }
        assert_eq!(state.seek_points, vec![(4, first), (6, second)]);
        assert_eq!(state.seek_point(5), Some((4, first)));
        assert_eq!(state.seek_point(6), Some((6, second)));
        assert_eq!(state.seek_point(3), None);
        assert_eq!(state.frame_ending_before(4), Some(first));
        assert_eq!(state.frame_ending_before(6), Some(second));
        assert_eq!(state.frame_ending_before(5), None);
    }
}
