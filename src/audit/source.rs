//! A read-only view of a store directory, folded from its log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::timeline::{
    ConversationSummary, ResumedCalls, StoreOverview, Timeline, TimelineOptions,
};
use crate::codec;
use crate::conversation::ConversationSlice;
use crate::error::{Error, Result};
use crate::log::{segment, LogReader, Lsn};
use crate::storage::FileSystem;
use crate::store::snapshot;

/// How often [`AuditView::open`] reads a store that compaction keeps
/// shrinking under it before it reports the gap.
const READ_ATTEMPTS_MAX: usize = 3;

/// The conversations of a store directory, read without the writer's lock.
///
/// [`AuditView::open`] reads the log from its first event with a
/// [`LogReader`] (so it works while another process appends, and sees what
/// was written when it reached the end) and folds every conversation, or
/// only the one asked for. While it reads, it notes which calls were re-run
/// after a resume, which the folded slices do not keep.
///
/// When the log was compacted (it no longer starts at LSN 1), the newest
/// snapshot that covers its start stands in for the missing events; resumed
/// flags are then known only for calls recorded after the log's first LSN.
#[derive(Debug)]
pub struct AuditView {
    dir: PathBuf,
    first_lsn: Lsn,
    next_lsn: Lsn,
    snapshot_lsn: Option<Lsn>,
    conversations: BTreeMap<String, (ConversationSlice, ResumedCalls)>,
}

impl AuditView {
    /// Reads the store at `dir`, folding every conversation, or only
    /// `only` when given. Fails with `NotAStore` when `dir` holds no
    /// segments, `Corrupted` on damage (segment and offset), and
    /// `UndecodableEvent` (LSN) on a payload that is not an event.
    ///
    /// Compaction deleting segments while it reads makes it start again
    /// from the newer snapshot (up to `READ_ATTEMPTS_MAX` reads in all).
    pub fn open(dir: impl AsRef<Path>, only: Option<&str>) -> Result<AuditView> {
        let mut attempt = 1;
        loop {
            match AuditView::read(dir.as_ref(), only) {
                Err(Error::Compacted { .. }) if attempt < READ_ATTEMPTS_MAX => attempt += 1,
                result => return result,
            }
        }
    }

    fn read(dir: &Path, only: Option<&str>) -> Result<AuditView> {
        let dir = dir.to_path_buf();
        let reader = LogReader::open(&dir)?;
        let first_lsn = segment::list(&FileSystem, &dir)?
            .segments
            .first()
            .map_or(1, |segment| segment.first_lsn);
        let mut conversations: BTreeMap<String, (ConversationSlice, ResumedCalls)> =
            BTreeMap::new();
        let mut snapshot_lsn = None;
        let mut replay_from = first_lsn;
        if first_lsn > 1 {
            let (lsn, slices) = load_snapshot(&dir, first_lsn, only)?;
            snapshot_lsn = Some(lsn);
            replay_from = lsn;
            for slice in slices {
                let resumed = ResumedCalls::new(first_lsn);
                conversations.insert(slice.conversation_id().to_string(), (slice, resumed));
            }
        }
        let mut next_lsn = first_lsn;
        for record in reader.iter_from(first_lsn) {
            let record = record?;
            next_lsn = record.lsn + 1;
            let event =
                codec::decode_event(&record.payload).map_err(|reason| Error::UndecodableEvent {
                    lsn: record.lsn,
                    reason,
                })?;
            let Some(id) = event.conversation_id() else {
                continue;
            };
            if only.is_some_and(|only| only != id) {
                continue;
            }
            let (slice, resumed) = conversations
                .entry(id.to_string())
                .or_insert_with(|| (ConversationSlice::new(id), ResumedCalls::new(first_lsn)));
            resumed.observe(&event);
            if record.lsn >= replay_from {
                slice.apply(&event, record.lsn);
            }
        }
        Ok(AuditView {
            dir,
            first_lsn,
            next_lsn,
            snapshot_lsn,
            conversations,
        })
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
    }
}

/// The newest usable snapshot at or after `first_lsn`: its LSN and slices.
fn load_snapshot(
    dir: &Path,
    first_lsn: Lsn,
    only: Option<&str>,
) -> Result<(Lsn, Vec<ConversationSlice>)> {
    let mut reasons = Vec::new();
    for (lsn, path) in snapshot::list(&FileSystem, dir)? {
        if lsn < first_lsn {
            reasons.push(format!(
                "{}: ends at LSN {lsn}, before the log's first LSN {first_lsn}",
                path.display()
            ));
            continue;
        }
        // Only a snapshot bound to this log (its store, its exact prefix).
        let loaded = match snapshot::load_checked(&FileSystem, dir, &path) {
            Ok(loaded) => loaded,
            Err(rejection) => {
                reasons.push(format!("{}: {rejection}", path.display()));
                continue;
            }
        };
        let mut ids: Vec<&String> = loaded
            .conversations
            .keys()
            .filter(|id| only.is_none_or(|only| only == id.as_str()))
            .collect();
        ids.sort();
        let mut slices = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(blob) = loaded.read_blob(id)? else {
                continue;
            };
            let slice = codec::decode_value::<ConversationSlice>(&blob).map_err(|reason| {
                Error::SnapshotDamaged {
                    path: path.clone(),
                    reason: format!("the slice of conversation {id:?} does not decode: {reason}"),
                }
            })?;
            slices.push(slice);
        }
        return Ok((lsn, slices));
    }
    Err(Error::SnapshotRestore {
        path: dir.join(snapshot::SNAPSHOT_DIR),
        reason: format!(
            "the log was compacted to start at LSN {first_lsn} and no snapshot covers its start{}",
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join("; "))
            }
        ),
    })
}
