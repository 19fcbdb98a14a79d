//! A read-only view of a store directory, and the one scan of the log that
//! finds re-run (resumed) calls and failed model calls.
//!
//! Opening and replaying is the store's own: [`AuditView::open`] opens the
//! directory with [`Store::open_read_only`] (the snapshot a writer's open
//! would choose, with the same checks, then the log after it) and reads
//! the folded conversations from it. The resumed flags and the failed
//! model calls, which the folded slices do not keep, come from one pass
//! over the store's log ([`resumed_calls`]), shared with
//! [`Timeline::from_store`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::timeline::{
    ConversationSummary, ResumedCalls, StoreOverview, Timeline, TimelineOptions,
};
use crate::codec;
use crate::conversation::ConversationSlice;
use crate::erasure::StoreKey;
use crate::error::{Error, Result};
use crate::log::Lsn;
use crate::model::MODEL_CALL_FAILED;
use crate::store::{LogView, Store, StoreOptions};

/// How often [`AuditView::open`] reads a store that compaction keeps
/// shrinking under it before it reports the gap.
const READ_ATTEMPTS_MAX: usize = 3;

/// The conversations of a store directory, read without the writer's lock.
///
/// [`AuditView::open`] opens the store read-only ([`Store::open_read_only`]:
/// no lock, nothing written, so it works while another process appends and
/// sees what was written when it reached the end), folds every
/// conversation, or only the one asked for, and reads the log once more to
/// note which calls were re-run after a resume and which model calls
/// failed, which the folded slices do not keep.
///
/// The store starts from its newest usable snapshot. When the log was
/// compacted (it no longer starts at LSN 1), that snapshot stands in for
/// the missing events; resumed flags are then known only for calls
/// recorded after the log's first LSN.
#[derive(Debug)]
pub struct AuditView {
    dir: PathBuf,
    first_lsn: Lsn,
    next_lsn: Lsn,
    snapshot_lsn: Option<Lsn>,
    conversations: BTreeMap<String, (ConversationSlice, ResumedCalls)>,
    erased: Vec<String>,
}

impl AuditView {
    /// Reads the store at `dir`, folding every conversation, or only
    /// `only` when given. Fails as [`Store::open_read_only`] does
    /// (`NotAStore` when `dir` holds no segments, `Corrupted` on damage
    /// with segment and offset, `SnapshotRestore` when the log was
    /// compacted and no snapshot covers its start), and with
    /// `UndecodableEvent` (LSN) on a payload that is not an event.
    ///
    /// Compaction deleting segments while it reads makes it start again
    /// from the newer snapshot (up to `READ_ATTEMPTS_MAX` reads in all).
    ///
    /// An encrypted store (docs/erasure.md) needs its store key:
    /// [`AuditView::open_with_key`].
    pub fn open(dir: impl AsRef<Path>, only: Option<&str>) -> Result<AuditView> {
        AuditView::open_with_key(dir, only, None)
    }

    /// [`AuditView::open`] of an encrypted store with its store key: its
    /// conversations read opened; erased ones are listed apart
    /// ([`AuditView::erased`], the overview's `erased`), and asking for
    /// one (`only`) fails with [`Error::Erased`]. Without a key an
    /// encrypted store is refused with `Error::Encryption`, which says so;
    /// its structure without the key is [`SealedOverview`](super::SealedOverview)
    /// (what `convlog inspect` shows then).
    pub fn open_with_key(
        dir: impl AsRef<Path>,
        only: Option<&str>,
        key: Option<&StoreKey>,
    ) -> Result<AuditView> {
        let mut attempt = 1;
        loop {
            match AuditView::read(dir.as_ref(), only, key) {
                Err(Error::Compacted { .. }) if attempt < READ_ATTEMPTS_MAX => attempt += 1,
                result => return result,
            }
        }
    }

    fn read(dir: &Path, only: Option<&str>, key: Option<&StoreKey>) -> Result<AuditView> {
        let store = Store::open_read_only(dir, StoreOptions::default().encryption(key.cloned()))?;
        let erased = store.erased_conversations();
        let snapshot_lsn = store.stats().snapshot_lsn;
        let ids = match only {
            Some(id) => vec![id.to_string()],
            None => store.conversation_ids(),
        };
        let mut slices = Vec::with_capacity(ids.len());
        for id in ids {
            match store.conversation(&id) {
                Ok(slice) => slices.push(slice),
                Err(Error::ConversationNotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        // Every slice was folded up to at most this LSN: the resumed flags
        // are read up to it too.
        let log = store.log();
        let next_lsn = log.visible_next_lsn();
        let mut resumed = resumed_calls(&store, &log, only, next_lsn)?;
        let first_lsn = resumed.visible_from;
        let conversations = slices
            .into_iter()
            .map(|slice| {
                let id = slice.conversation_id().to_string();
                let calls = resumed
                    .calls
                    .remove(&id)
                    .unwrap_or_else(|| ResumedCalls::new(first_lsn));
                (id, (slice, calls))
            })
            .collect();
        Ok(AuditView {
            dir: dir.to_path_buf(),
            first_lsn,
            next_lsn,
            snapshot_lsn,
            conversations,
            erased,
        })
    }

    /// The conversations erased (an encrypted store's), sorted.
    pub fn erased(&self) -> &[String] {
        &self.erased
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The first LSN of the log.
    pub fn first_lsn(&self) -> Lsn {
        self.first_lsn
    }

    /// One past the last event read.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// The conversation ids read, sorted.
    pub fn conversation_ids(&self) -> impl Iterator<Item = &str> {
        self.conversations.keys().map(String::as_str)
    }

    /// The folded slice of a conversation.
    pub fn slice(&self, conversation_id: &str) -> Option<&ConversationSlice> {
        self.conversations
            .get(conversation_id)
            .map(|(slice, _)| slice)
    }

    /// The timeline of a conversation, with resumed flags; fails with
    /// `ConversationNotFound` for an id that has no events.
    pub fn timeline(&self, conversation_id: &str, options: &TimelineOptions) -> Result<Timeline> {
        let (slice, resumed) =
            self.conversations
                .get(conversation_id)
                .ok_or_else(|| Error::ConversationNotFound {
                    conversation_id: conversation_id.to_string(),
                })?;
        Ok(Timeline::with_resumed(slice, resumed, options))
    }

    /// One row per conversation read.
    pub fn overview(&self) -> StoreOverview {
        let rows = self
            .conversations
            .values()
            .map(|(slice, resumed)| ConversationSummary::from_slice(slice, Some(resumed)))
            .collect();
        StoreOverview::new(
            self.dir.display().to_string(),
            self.first_lsn,
            self.next_lsn,
            self.snapshot_lsn,
            rows,
        )
        .with_erased(self.erased.clone())
    }
}

/// The re-run calls of each conversation, read from a store's log.
pub(super) struct ResumedScan {
    /// The first LSN read: flags of calls recorded before it (compacted
    /// away) are unknown.
    pub(super) visible_from: Lsn,
    /// Per conversation with any event in the range read.
    pub(super) calls: BTreeMap<String, ResumedCalls>,
}

/// Reads the log of a store from its first LSN up to `end` (exclusive)
/// and notes the re-run calls and failed model calls of every
/// conversation, or only of `only`. Only `tool_status` events and custom
/// events of kind [`MODEL_CALL_FAILED`] are decoded.
/// Fails with `Corrupted` on damage, `Compacted` when compaction deleted
/// what it was about to read, and `UndecodableEvent` on a payload that is
/// not an event.
pub(super) fn resumed_calls(
    store: &Store,
    log: &LogView<'_>,
    only: Option<&str>,
    end: Lsn,
) -> Result<ResumedScan> {
    let visible_from = log.first_lsn();
    let mut calls: BTreeMap<String, ResumedCalls> = BTreeMap::new();
    let encrypted = store.is_encrypted();
    for record in log.iter_from(visible_from) {
        let record = record?;
        if record.lsn >= end {
            break;
        }
        let kind = codec::custom_kind(&record.payload);
        let event = if encrypted && kind == Some(crate::erasure::SEALED_KIND) {
            // An encrypted store's events are sealed: open those of the
            // conversations asked for (an erased one has none to show).
            let Some(id) = codec::peek_conversation_id(&record.payload) else {
                continue;
            };
            if only.is_some_and(|only| only != id) || store.is_erased(id) {
                continue;
            }
            let sealed = codec::decode_event_at(record.lsn, &record.payload)?;
            let event = store.unseal_event(record.lsn, sealed)?;
            let wanted = match &event {
                crate::model::Event::ToolStatus(_) => true,
                crate::model::Event::Custom(custom) => custom.kind == MODEL_CALL_FAILED,
                _ => false,
            };
            if !wanted {
                continue;
            }
            event
        } else {
            if !codec::is_tool_status(&record.payload) && kind != Some(MODEL_CALL_FAILED) {
                // Only status changes carry the flag, and the folded slice
                // keeps no custom event (the store's open decoded what it
                // replayed).
                continue;
            }
            codec::decode_event_at(record.lsn, &record.payload)?
        };
        let Some(id) = event.conversation_id() else {
            continue;
        };
        if only.is_some_and(|only| only != id) {
            continue;
        }
        calls
            .entry(id.to_string())
            .or_insert_with(|| ResumedCalls::new(visible_from))
            .observe_at(record.lsn, &event);
    }
    Ok(ResumedScan {
        visible_from,
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        ConversationEntry, Role, Timestamp, ToolCall, ToolStatus, ToolStatusChanged,
    };

    /// A call, its re-run after a resume, and its result; a snapshot
    /// between them.
    #[test]
    fn the_view_starts_from_the_snapshot_and_still_sees_resumed_calls() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let ask = ConversationEntry::new("eval-1", 0, Role::User, Some("Weather?".into()));
        let call = ConversationEntry::new("eval-1", 1, Role::Assistant, None)
            .with_tool_call(ToolCall::new("call_1", "get_weather", "{}"));
        store.append(&[ask.recorded_in("ctx")]).unwrap();
        store.append(&[call.recorded_in("ctx")]).unwrap();
        let mut rerun =
            ToolStatusChanged::new("ctx", "eval-1", "call_1", ToolStatus::Running, Timestamp(5));
        rerun.resumed = true;
        store.append(&[rerun.into()]).unwrap();
        let snapshot = store.snapshot().unwrap();
        store
            .append(&[ToolStatusChanged::new(
                "ctx",
                "eval-1",
                "call_1",
                ToolStatus::Completed,
                Timestamp(9),
            )
            .into()])
            .unwrap();
        store
            .append(&[
                ConversationEntry::new("eval-1", 0, Role::User, Some("Hi".into()))
                    .recorded_in("other"),
            ])
            .unwrap();

        // Beside the writer, which holds the lock.
        let view = AuditView::open(dir.path(), None).unwrap();
        let overview = view.overview();
        assert_eq!(overview.snapshot_lsn, Some(snapshot.lsn));
        assert_eq!((view.first_lsn(), view.next_lsn()), (1, 6));
        assert_eq!(
            view.conversation_ids().collect::<Vec<_>>(),
            ["ctx", "other"]
        );
        assert_eq!(view.slice("ctx"), Some(&store.conversation("ctx").unwrap()));
        let timeline = view.timeline("ctx", &TimelineOptions::default()).unwrap();
        let call = timeline.call("call_1").unwrap();
        assert_eq!(
            call.resumed,
            Some(true),
            "the re-run is before the snapshot"
        );
        assert_eq!(call.status, ToolStatus::Completed, "the result is after it");
        assert_eq!(
            timeline,
            Timeline::from_store(&store, "ctx", &TimelineOptions::default()).unwrap()
        );

        let only = AuditView::open(dir.path(), Some("other")).unwrap();
        assert_eq!(only.conversation_ids().collect::<Vec<_>>(), ["other"]);
        assert!(matches!(
            only.timeline("ctx", &TimelineOptions::default()),
            Err(Error::ConversationNotFound { .. })
        ));
    }
}
