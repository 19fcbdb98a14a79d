//! The writer: assigns LSNs, frames batches, and makes them durable with
//! group commit.
//!
//! Appenders encode their frame into a shared pending buffer under one mutex.
//! Whoever then finds no write in flight becomes the *write leader*: it takes
//! the whole pending buffer (every appender that arrived meanwhile) and
//! writes it with one positioned write, outside the mutex. Whoever finds its
//! frame written but not durable, and no fsync in flight, becomes the *sync
//! leader* and issues one `fdatasync` for everything written so far. Without
//! pipelining the two roles exclude each other; with it, the next group's
//! write overlaps the current group's fsync.
//!
//! A failed write or fsync poisons the writer: it acknowledges nothing more,
//! and once no I/O is in flight it truncates the active segment back to the
//! last fsynced byte so that nothing it refused can come back on reopen. An
//! appender waiting when the writer is poisoned first waits for the write or
//! fsync in flight (with pipelining, an fsync issued before the poisoning may
//! still cover its frame), then is acknowledged if its frame is durable and
//! refused if it is not: the truncation keeps exactly the durable frames.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::log::format::{self, SEGMENT_HEADER_BYTES};
use crate::log::reader::{Position, SharedView};
use crate::log::recovery::Recovered;
use crate::log::segment;
use crate::log::{Durability, LogOptions, Lsn};
use crate::storage::{Storage, StorageFile};

/// Counters of the writer's work, for benchmarks and `stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Frames (atomic batches) appended.
    pub frames: u64,
    /// Positioned writes issued.
    pub writes: u64,
    /// `fdatasync` calls issued.
    pub syncs: u64,
    /// Segments created after the first.
    pub rolls: u64,
}

struct State {
    active_first_lsn: Lsn,
    active_path: PathBuf,
    active_file: Arc<dyn StorageFile>,
    /// Bytes of the active segment including frames still in `pending`.
    active_assigned_bytes: u64,
    next_lsn: Lsn,
    /// Checksum of the last frame encoded (the next frame links to it).
    chain_crc: u32,
    pending: Vec<u8>,
    spare: Vec<u8>,
    written_bytes: u64,
    written_lsn: Lsn,
    durable_bytes: u64,
    durable_lsn: Lsn,
    writing: bool,
    syncing: bool,
    poisoned: Option<String>,
    truncated_after_poison: bool,
    stats: WriterStats,
}

pub(crate) struct Writer {
    dir: PathBuf,
    /// The store identity every new segment header carries.
    store_id: format::StoreId,
    storage: Arc<dyn Storage>,
    options: LogOptions,
    state: Mutex<State>,
    changed: Condvar,
    view: Arc<SharedView>,
    /// After a poisoning: the LSN from which the writer truncated what it
    /// had written but not made durable (0 until then).
    taken_back_from: AtomicU64,
}

impl Writer {
    /// A writer that continues the log where recovery left it.
    pub(crate) fn new(
        dir: PathBuf,
        options: LogOptions,
        recovered: &Recovered,
        view: Arc<SharedView>,
    ) -> Writer {
        let active_bytes = recovered.active_bytes;
        let next_lsn = recovered.report.next_lsn;
        let active_file = preallocated(
            Arc::clone(&recovered.active_file),
            &recovered.active.path,
            options.segment_bytes_max,
        );
        Writer {
            dir,
            store_id: recovered.report.store_id,
            storage: Arc::clone(&options.storage),
            options,
            state: Mutex::new(State {
                active_first_lsn: recovered.active.first_lsn,
                active_path: recovered.active.path.clone(),
                active_file,
                active_assigned_bytes: active_bytes,
                next_lsn,
                chain_crc: recovered.active_chain_crc,
                pending: Vec::new(),
                spare: Vec::new(),
                written_bytes: active_bytes,
                written_lsn: next_lsn,
                durable_bytes: active_bytes,
                durable_lsn: next_lsn,
                writing: false,
                syncing: false,
                poisoned: None,
                truncated_after_poison: false,
                stats: WriterStats::default(),
            }),
            changed: Condvar::new(),
            view,
            taken_back_from: AtomicU64::new(0),
        }
    }

    pub(crate) fn next_lsn(&self) -> Lsn {
        self.state.lock().next_lsn
    }

    pub(crate) fn durable_lsn(&self) -> Lsn {
        self.state.lock().durable_lsn
    }

    pub(crate) fn stats(&self) -> WriterStats {
        self.state.lock().stats
    }

    /// After a poisoning, the LSN from which events were taken back (every
    /// event at or after it is gone from the log); `None` before.
    pub(crate) fn taken_back_from(&self) -> Option<Lsn> {
        match self.taken_back_from.load(Ordering::Acquire) {
            0 => None,
            lsn => Some(lsn),
        }
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.state.lock().poisoned.is_some()
    }

    /// Appends `payloads` as one atomic frame; returns its LSN range and
    /// where the frame starts.
    pub(crate) fn append<P: AsRef<[u8]>>(
        &self,
        payloads: &[P],
        durability: Durability,
    ) -> Result<(std::ops::Range<Lsn>, Position)> {
        check_batch(payloads)?;
        let frame_bytes = format::frame_bytes(payloads) as u64;
        let mut state = self.state.lock();
        self.check_poison(&state)?;
        if self.needs_roll(&state, frame_bytes) {
            self.roll(&mut state, frame_bytes)?;
        }
        let first_lsn = state.next_lsn;
        let durable_lsn = state.durable_lsn;
        let position = Position {
            segment: state.active_first_lsn,
            offset: state.active_assigned_bytes,
        };
        let chain_crc = state.chain_crc;
        state.chain_crc = format::encode_frame(
            &mut state.pending,
            first_lsn,
            durable_lsn,
            chain_crc,
            payloads,
        );
        let end_lsn = first_lsn + payloads.len() as u64;
        state.next_lsn = end_lsn;
        state.active_assigned_bytes += frame_bytes;
        state.stats.frames += 1;
        match durability {
            Durability::Sync => self.wait_for(&mut state, end_lsn, true, None)?,
            Durability::Group => {
                self.wait_for(&mut state, end_lsn, true, self.options.group_commit_delay)?
            }
            Durability::Periodic(_) | Durability::None => {
                self.wait_for(&mut state, end_lsn, false, None)?
            }
        }
        Ok((first_lsn..end_lsn, position))
    }

    /// Makes everything appended so far durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let mut state = self.state.lock();
        self.check_poison(&state)?;
        let end_lsn = state.next_lsn;
        self.wait_for(&mut state, end_lsn, true, None)
    }

    /// Whether a frame of `frame_bytes` must go into a new segment: it would
    /// grow a non-empty active segment past `segment_bytes_max`.
    fn needs_roll(&self, state: &State, frame_bytes: u64) -> bool {
        state.active_assigned_bytes > SEGMENT_HEADER_BYTES as u64
            && state.active_assigned_bytes + frame_bytes > self.options.segment_bytes_max
    }

    fn check_poison(&self, state: &State) -> Result<()> {
        match &state.poisoned {
            Some(cause) => Err(Error::Poisoned {
                store: self.dir.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Blocks until every LSN below `end_lsn` is written (and, with
    /// `durable`, fsynced), taking the leader's role when it is free.
    fn wait_for(
        &self,
        state: &mut MutexGuard<'_, State>,
        end_lsn: Lsn,
        durable: bool,
        commit_delay: Option<Duration>,
    ) -> Result<()> {
        let pipelined = self.options.pipelined;
        let mut delay_deadline = commit_delay.map(|delay| Instant::now() + delay);
        loop {
            if state.poisoned.is_some() {
                // After a poisoning only what is durable survives (the
                // writer truncates the rest). A write or fsync issued before
                // the poisoning may still be in flight and make this frame
                // durable: wait for it, then acknowledge the frame if it is
                // durable and refuse it if it is not, so that nothing
                // refused comes back on reopen and nothing acknowledged is
                // taken back.
                if state.writing || state.syncing {
                    self.changed.wait(state);
                    continue;
                }
                if state.durable_lsn >= end_lsn {
                    return Ok(());
                }
                return self.check_poison(state);
            }
            let done = if durable {
                state.durable_lsn >= end_lsn
            } else {
                state.written_lsn >= end_lsn
            };
            if done {
                return Ok(());
            }
            self.check_poison(state)?;
            let our_frame_written = state.written_lsn >= end_lsn;
            if our_frame_written {
                if !state.syncing && (pipelined || !state.writing) {
                    self.lead_sync(state);
                    continue;
                }
            } else if !state.writing && (pipelined || !state.syncing) {
                if let Some(deadline) = delay_deadline.take() {
                    // Commit delay: give concurrent appenders a moment to join
                    // this group before its write is issued.
                    self.changed.wait_until(state, deadline);
                    continue;
                }
                self.lead_write(state);
                continue;
            }
            self.changed.wait(state);
        }
    }

    fn lead_write(&self, state: &mut MutexGuard<'_, State>) {
        debug_assert!(!state.writing && !state.pending.is_empty());
        state.writing = true;
        let spare = std::mem::take(&mut state.spare);
        let buffer = std::mem::replace(&mut state.pending, spare);
        let offset = state.written_bytes;
        let end_lsn = state.next_lsn;
        let file = Arc::clone(&state.active_file);
        let result = MutexGuard::unlocked(state, || file.write_all_at(&buffer, offset));
        state.writing = false;
        state.stats.writes += 1;
        match result {
            Ok(()) => {
                state.written_bytes = offset + buffer.len() as u64;
                state.written_lsn = end_lsn;
                self.view
                    .publish_active(state.written_bytes, state.written_lsn);
                let mut buffer = buffer;
                buffer.clear();
                state.spare = buffer;
            }
            Err(error) => self.poison(state, "write to", &error),
        }
        self.after_io(state);
    }

    fn lead_sync(&self, state: &mut MutexGuard<'_, State>) {
        debug_assert!(!state.syncing);
        state.syncing = true;
        let target_bytes = state.written_bytes;
        let target_lsn = state.written_lsn;
        let file = Arc::clone(&state.active_file);
        let result = MutexGuard::unlocked(state, || file.sync_data());
        state.syncing = false;
        state.stats.syncs += 1;
        match result {
            Ok(()) => {
                if target_lsn > state.durable_lsn {
                    state.durable_lsn = target_lsn;
                    state.durable_bytes = target_bytes;
                }
            }
            Err(error) => self.poison(state, "fdatasync", &error),
        }
        self.after_io(state);
    }

    fn poison(&self, state: &mut State, operation: &str, error: &std::io::Error) {
        let cause = format!("{operation} {}: {error}", state.active_path.display());
        self.poison_with(state, cause);
    }

    /// Poisons the writer from code that holds the mutex throughout (a roll)
    /// and returns the resulting error.
    fn fail_under_lock(
        &self,
        state: &mut State,
        operation: &str,
        error: &std::io::Error,
    ) -> Result<()> {
        self.poison(state, operation, error);
        self.after_io(state);
        self.check_poison(state)
    }

    fn poison_with(&self, state: &mut State, cause: String) {
        tracing::error!(store = %self.dir.display(), cause = %cause, "writer poisoned; reopen the store");
        if state.poisoned.is_none() {
            state.poisoned = Some(cause);
        }
    }

    /// Wakes waiters, and after a poisoning with no I/O left in flight,
    /// removes every byte past the last fsync.
    fn after_io(&self, state: &mut State) {
        if state.poisoned.is_some()
            && !state.writing
            && !state.syncing
            && !state.truncated_after_poison
        {
            state.truncated_after_poison = true;
            state.pending.clear();
            // Announced before readers see the shorter log, so a reader that
            // fails on a taken-back frame can tell why.
            self.taken_back_from
                .store(state.durable_lsn, Ordering::Release);
            self.view
                .publish_active(state.durable_bytes, state.durable_lsn);
            // Leave a durable note first: the next open then writes into a
            // fresh segment, never over the offsets of refused frames.
            let marker = self.dir.join(crate::log::recovery::POISONED_MARKER);
            let noted = self
                .storage
                .create(&marker)
                .and_then(|file| file.sync_all())
                .and_then(|()| self.storage.sync_dir(&self.dir));
            if let Err(error) = noted {
                tracing::error!(marker = %marker.display(), error = %error, "could not leave the poisoned marker");
            }
            let file = &state.active_file;
            let truncated = file
                .set_len(state.durable_bytes)
                .and_then(|()| file.sync_all());
            if let Err(error) = truncated {
                tracing::error!(
                    segment = %state.active_path.display(),
                    error = %error,
                    "could not truncate unsynced bytes after poisoning"
                );
            }
        }
        self.changed.notify_all();
    }

    /// Seals the active segment (all of it written and fsynced) and starts a
    /// new one at the next LSN. Runs under the mutex: rolls are rare.
    fn roll(&self, state: &mut MutexGuard<'_, State>, frame_bytes: u64) -> Result<()> {
        while state.writing || state.syncing {
            self.changed.wait(state);
        }
        self.check_poison(state)?;
        if !self.needs_roll(state, frame_bytes) {
            // Another appender rolled while this one waited.
            return Ok(());
        }
        let file = Arc::clone(&state.active_file);
        if !state.pending.is_empty() {
            let buffer = std::mem::take(&mut state.pending);
            state.stats.writes += 1;
            if let Err(error) = file.write_all_at(&buffer, state.written_bytes) {
                return self.fail_under_lock(state, "write to", &error);
            }
            state.written_bytes += buffer.len() as u64;
            state.written_lsn = state.next_lsn;
            self.view
                .publish_active(state.written_bytes, state.written_lsn);
        }
        if state.durable_lsn < state.written_lsn {
            state.stats.syncs += 1;
            if let Err(error) = file.sync_data() {
                return self.fail_under_lock(state, "fdatasync", &error);
            }
            state.durable_lsn = state.written_lsn;
            state.durable_bytes = state.written_bytes;
        }
        // The segment is sealed only once its file ends at its last frame.
        if let Err(error) = segment::trim_to_data(file.as_ref(), state.written_bytes) {
            return self.fail_under_lock(state, "cut the preallocated space of", &error);
        }
        let next_lsn = state.next_lsn;
        // The active segment holds frames (`needs_roll`): the chain value
        // is its last frame's checksum, which the new header links to.
        let link = format::SegmentLink {
            store_id: self.store_id,
            prev_chain: state.chain_crc,
        };
        match segment::create(self.storage.as_ref(), &self.dir, next_lsn, link) {
            Ok((created, handle, header_crc)) => {
                state.chain_crc = header_crc;
                let sealed_path = std::mem::replace(&mut state.active_path, created.path.clone());
                state.active_first_lsn = created.first_lsn;
                state.active_file = preallocated(
                    Arc::from(handle),
                    &created.path,
                    self.options.segment_bytes_max,
                );
                let header = SEGMENT_HEADER_BYTES as u64;
                state.active_assigned_bytes = header;
                state.written_bytes = header;
                state.durable_bytes = header;
                state.stats.rolls += 1;
                self.view.seal_and_start(
                    sealed_path,
                    created.first_lsn,
                    created.path,
                    Arc::clone(&state.active_file),
                );
                self.changed.notify_all();
                Ok(())
            }
            Err(error) => {
                let cause = format!("create segment at LSN {next_lsn}: {error}");
                self.poison_with(state, cause);
                self.after_io(state);
                self.check_poison(state)
            }
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }
}

/// The active segment `file` as the writer writes it: its space allocated
/// ahead of the frames (`segment::PreallocatedFile`). A file whose length
/// cannot be read is written as it is (appending).
fn preallocated(file: Arc<dyn StorageFile>, path: &Path, limit: u64) -> Arc<dyn StorageFile> {
    match segment::PreallocatedFile::new(Arc::clone(&file), path.to_path_buf(), limit) {
        Ok(wrapped) => Arc::new(wrapped),
        Err(error) => {
            tracing::debug!(segment = %path.display(), error = %error, "cannot preallocate segment space; appending");
            file
        }
    }
}

/// Checks a batch against the limits before anything is encoded.
pub(crate) fn check_batch<P: AsRef<[u8]>>(payloads: &[P]) -> Result<()> {
    if payloads.is_empty() {
        return Err(Error::EmptyBatch);
    }
    if payloads.len() > format::BATCH_EVENTS_MAX {
        return Err(Error::LimitExceeded {
            what: "events in the batch",
            actual: payloads.len() as u64,
            limit: format::BATCH_EVENTS_MAX as u64,
            constant: "BATCH_EVENTS_MAX",
        });
    }
    let mut body = 0u64;
    for (index, payload) in payloads.iter().enumerate() {
        let length = payload.as_ref().len();
        if length > format::EVENT_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: if index == 0 && payloads.len() == 1 {
                    "event payload bytes"
                } else {
                    "an event payload in the batch (bytes)"
                },
                actual: length as u64,
                limit: format::EVENT_BYTES_MAX as u64,
                constant: "EVENT_BYTES_MAX",
            });
        }
        body += (format::EVENT_LENGTH_PREFIX_BYTES + length) as u64;
    }
    if body > format::BATCH_BYTES_MAX as u64 {
        return Err(Error::LimitExceeded {
            what: "batch bytes (payloads and length prefixes)",
            actual: body,
            limit: format::BATCH_BYTES_MAX as u64,
            constant: "BATCH_BYTES_MAX",
        });
    }
    Ok(())
}
