//! Writing snapshots (on demand and on the background thread) and
//! compaction. The snapshot file format is `snapshot.rs`.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;

use super::snapshot;
use super::{Retention, Store, StoreCore};
use crate::codec;
use crate::error::{Error, Result};
use crate::log::{Binding, Lsn};
use crate::reducer::{self, AnySlice, ErasedReducer};

/// What a snapshot wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The file.
    pub path: PathBuf,
    /// Every event below this LSN is in it.
    pub lsn: Lsn,
    /// Conversations in it.
    pub conversations: usize,
}

/// What compaction did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompactReport {
    /// Segment files deleted.
    pub removed: Vec<PathBuf>,
    /// Why nothing was deleted, when nothing was.
    pub note: Option<String>,
}

/// The automatic snapshots' thread and what it reports.
#[derive(Default)]
pub(super) struct Background {
    /// An append crossed a threshold: a snapshot is due.
    pub(super) requested: bool,
    /// A snapshot is being written.
    pub(super) running: bool,
    /// The store is being dropped.
    pub(super) stop: bool,
    /// Automatic snapshots written and failed since open.
    pub(super) written: u64,
    pub(super) failed: u64,
    /// Why the most recent automatic snapshot failed (cleared when one succeeds).
    pub(super) last_error: Option<String>,
}

impl Store {
    /// Writes a snapshot of every slice at the current end of the log.
    pub fn snapshot(&self) -> Result<SnapshotInfo> {
        self.core.snapshot()
    }

    /// Deletes the segments the newest snapshot covers, if the retention
    /// policy allows it.
    pub fn compact(&self) -> Result<CompactReport> {
        let log = self.log.writer("compact")?;
        if self.options.retention == Retention::KeepAll {
            return Ok(CompactReport {
                removed: Vec::new(),
                note: Some("retention keeps the whole log (Retention::KeepAll)".to_string()),
            });
        }
        let Some(loaded) = self.state.read().snapshot.clone() else {
            return Ok(CompactReport {
                removed: Vec::new(),
                note: Some("no snapshot yet: nothing is covered".to_string()),
            });
        };
        let lsn = loaded.lsn;
        let first_lsn = log.first_lsn();
        let dropped = {
            let _no_reads = self.compacting.write();
            // Never delete on the word of a snapshot not checked against the
            // log as it is now (its files may have changed under the store).
            match snapshot::check_binding(&loaded, &log.store_id(), None, &|lsn| {
                log.binding_at(lsn)
            }) {
                Ok(()) => {}
                // Another writer of the log compacted past this snapshot:
                // nothing it covers is left to drop.
                Err(snapshot::SnapshotMismatch::BeforeStart { log_first_lsn, .. }) => {
                    return Ok(CompactReport {
                        removed: Vec::new(),
                        note: Some(format!(
                            "the log already starts at LSN {log_first_lsn}, past the snapshot at LSN {lsn}: nothing it covers is left to drop"
                        )),
                    })
                }
                Err(mismatch) => {
                    return Err(Error::CompactionRefused {
                        store: self.log.dir().to_path_buf(),
                        snapshot: loaded.path.clone(),
                        reason: mismatch.to_string(),
                    })
                }
            }
            log.drop_before(lsn)?
        };
        let note = (dropped.removed.is_empty() && dropped.first_lsn == first_lsn)
            .then(|| format!("no sealed segment lies wholly before the snapshot at LSN {lsn}"));
        Ok(CompactReport {
            removed: dropped.removed,
            note,
        })
    }

    /// Why the most recent automatic snapshot failed, if it did (a later
    /// success clears it). Automatic snapshots run on a background thread;
    /// their failures never fail an append.
    pub fn last_snapshot_error(&self) -> Option<String> {
        self.background.lock().last_error.clone()
    }

    /// Automatic snapshots written and failed since the store was opened.
    pub fn automatic_snapshots(&self) -> (u64, u64) {
        let background = self.background.lock();
        (background.written, background.failed)
    }

    /// Blocks until no automatic snapshot is due or being written. Returns
    /// at once when no snapshot threshold is set.
    pub fn wait_for_snapshots(&self) {
        if self.snapshot_thread.is_none() {
            return;
        }
        let mut background = self.background.lock();
        while (background.requested || background.running) && !background.stop {
            self.background_changed.wait(&mut background);
        }
    }
}

impl StoreCore {
    pub(super) fn snapshot(&self) -> Result<SnapshotInfo> {
        let guard = self.snapshotting.lock();
        if self.log.follow.is_none() || self.log.is_read_only() {
            return self.snapshot_locked(&guard);
        }
        // A writer on a log with many writers: the snapshot is taken at the
        // log's end as known after catching up with the other writers. One
        // of them may have compacted the prefix this store's index points
        // into: start again from the newest snapshot, and take it again.
        self.follow_read(|| Ok(()))?;
        let mut restarts = 0;
        loop {
            match self.snapshot_locked(&guard) {
                Err(Error::Compacted { .. }) if restarts < super::READ_ONLY_RESTARTS_MAX => {
                    restarts += 1;
                    self.restart_from_snapshot()?;
                }
                other => return other,
            }
        }
    }

    fn snapshot_locked(&self, _guard: &parking_lot::MutexGuard<'_, ()>) -> Result<SnapshotInfo> {
        self.log.writer("snapshot")?.sync()?;
        self.forget_taken_back();
        // A consistent cut: every event below `lsn` is indexed and folded
        // into the host slices, taken at exactly that point (shared
        // copy-on-write) and encoded after the ordering lock is released.
        let (lsn, taken) = {
            let ordered = self.ordered.lock();
            if self.host_poison.get().is_some() {
                drop(ordered);
                return Err(self.host_poison_error());
            }
            let taken: Vec<(Arc<dyn ErasedReducer>, Arc<AnySlice>)> = ordered
                .hosts
                .iter()
                .map(|(_, slot)| (Arc::clone(&slot.reducer), Arc::clone(&slot.slice)))
                .collect();
            (ordered.next_lsn, taken)
        };
        // Encoding runs host code (the slices' `Serialize`): appends go on
        // meanwhile, copying a slice they fold while it is held here.
        let mut host_slices = Vec::new();
        for (reducer, slice) in &taken {
            let bytes = reducer
                .encode(slice.as_ref())
                .map_err(|reason| Error::SliceEncode {
                    reducer: reducer.name().to_string(),
                    reason,
                })?;
            host_slices.push((reducer.name().to_string(), bytes));
        }
        drop(taken);
        host_slices.extend(self.encryption_mark());
        let current = self.state.read().snapshot.clone();
        if let Some(loaded) = current.as_ref().filter(|loaded| loaded.lsn == lsn) {
            return Ok(SnapshotInfo {
                path: loaded.path.clone(),
                lsn,
                conversations: loaded.conversations.len(),
            });
        }
        let ids = self.conversation_ids();
        let mut conversations = 0;
        let blobs = ids
            .iter()
            .filter_map(|id| match self.fold_conversation(id, Some(lsn)) {
                Ok(Some(slice)) if slice.last_lsn() > 0 => {
                    let blob = match codec::encode_value(&slice) {
                        Ok(blob) => blob,
                        Err(reason) => {
                            return Some(Err(Error::SnapshotWrite {
                                path: self
                                    .log
                                    .dir()
                                    .join(snapshot::SNAPSHOT_DIR)
                                    .join(snapshot::snapshot_file_name(lsn)),
                                reason: format!(
                                    "the slice of conversation {id:?} does not encode: {reason}"
                                ),
                            }))
                        }
                    };
                    // An encrypted conversation's slice is sealed with its
                    // key (no plaintext here); one erased since it was
                    // folded is left out.
                    let blob = self.seal_slice(id, blob)?;
                    conversations += 1;
                    Some(Ok((id.clone(), blob)))
                }
                Ok(_) => None,
                // Erased meanwhile: nothing of it goes into the snapshot.
                Err(Error::Erased { .. }) => None,
                Err(error) => Some(Err(error)),
            });
        let storage = Arc::clone(&self.options.log.storage);
        let binding = self.binding_at(lsn)?;
        // Where replay can start on open: the offset of the frame ending
        // just before `lsn` (segment log only; checked on open).
        let last_frame_offset = self
            .log
            .reader()
            .and_then(|_| self.state.read().frame_ending_before(lsn))
            .and_then(|position| u32::try_from(position.offset).ok());
        // A tamper-evident store's snapshots carry a keyed tag (docs/tamper.md).
        let key = self.options.log.tamper.as_ref().map(|tamper| &*tamper.key);
        let path = snapshot::write_tagged(
            storage.as_ref(),
            self.log.dir(),
            lsn,
            binding,
            last_frame_offset,
            blobs,
            host_slices,
            key,
        )?;
        let loaded = Arc::new(snapshot::load(storage.as_ref(), &path)?);
        self.start_from_written(loaded);
        self.remove_old_snapshots(storage.as_ref())?;
        Ok(SnapshotInfo {
            path,
            lsn,
            conversations,
        })
    }

    /// Makes the snapshot just written the one reads start from, and drops
    /// the index entries it covers.
    fn start_from_written(&self, loaded: Arc<snapshot::LoadedSnapshot>) {
        let lsn = loaded.lsn;
        let mut state = self.state.write();
        if state.snapshot.as_ref().is_some_and(|newer| newer.lsn > lsn) {
            // A following store started again meanwhile from another
            // writer's newer snapshot: reads keep starting from that one.
            return;
        }
        state.snapshot = Some(loaded);
        for entries in state.index.values_mut() {
            entries.retain(|entry| entry.lsn >= lsn);
        }
        state.index.retain(|_, entries| !entries.is_empty());
        state.events_since_snapshot = 0;
        state.bytes_since_snapshot = 0;
    }

    pub(super) fn remove_old_snapshots(&self, storage: &dyn crate::storage::Storage) -> Result<()> {
        let all = snapshot::list(storage, self.log.dir())?;
        for (_, path) in all.iter().skip(self.options.snapshots_kept) {
            storage
                .remove_file(path)
                .map_err(Error::io("remove old snapshot", path))?;
        }
        Ok(())
    }

    /// Wakes the background snapshot thread.
    pub(super) fn request_snapshot(&self) {
        let mut background = self.background.lock();
        if !background.requested {
            background.requested = true;
            self.background_changed.notify_all();
        }
    }

    /// The background snapshot thread: writes a snapshot whenever an append
    /// asks for one, until the store is dropped. Failures are logged and
    /// kept for [`Store::last_snapshot_error`]; they never fail an append.
    pub(super) fn run_snapshots(&self) {
        loop {
            {
                let mut background = self.background.lock();
                while !background.requested && !background.stop {
                    self.background_changed.wait(&mut background);
                }
                if background.stop {
                    return;
                }
                background.requested = false;
                background.running = true;
            }
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| self.snapshot()))
                .unwrap_or_else(|payload| {
                    Err(Error::SnapshotPanicked {
                        store: self.log.dir().to_path_buf(),
                        message: reducer::panic_message(payload.as_ref()),
                    })
                });
            let mut background = self.background.lock();
            background.running = false;
            match result {
                Ok(_) => {
                    background.written += 1;
                    background.last_error = None;
                }
                Err(error) => {
                    tracing::warn!(
                        store = %self.log.dir().display(),
                        error = %error,
                        "automatic snapshot failed; the appends are committed"
                    );
                    background.failed += 1;
                    background.last_error = Some(error.to_string());
                }
            }
            self.background_changed.notify_all();
        }
    }

    /// What ties a snapshot at `lsn` to this store's log: the store identity
    /// and what the log holds just before `lsn` ([`EventLog::binding_at`](crate::log::EventLog::binding_at):
    /// for the segment log, the chain value of the frame ending at `lsn - 1`).
    pub(super) fn binding_at(&self, lsn: Lsn) -> Result<snapshot::SnapshotBinding> {
        let _frames_stay = self.compacting.read();
        let log = self.log.log();
        match log.binding_at(lsn)? {
            Binding::Found(chain) => Ok(snapshot::SnapshotBinding {
                store_id: log.store_id(),
                chain,
            }),
            other => Err(Error::SnapshotWrite {
                path: self
                    .log
                    .dir()
                    .join(snapshot::SNAPSHOT_DIR)
                    .join(snapshot::snapshot_file_name(lsn)),
                reason: format!("cannot bind a snapshot at LSN {lsn} to the log: {other:?}"),
            }),
        }
    }
}
