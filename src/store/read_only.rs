//! The log under a [`Store`](super::Store): the writer's own [`Log`], or a
//! read-only follower of a store another process writes.
//!
//! A follower ([`Store::open_read_only`](super::Store::open_read_only))
//! takes no lock and writes nothing to the store directory: not `LOCK`, not
//! a segment, not a snapshot. It starts from the snapshot a writer's open
//! would choose (the same checks), indexes the log after it with a
//! directory [`LogReader`], and catches up with what the writer appended
//! since whenever it is read (see `StoreCore::catch_up`).

use std::any::TypeId;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::hosts::{host_slots, Ordered};
use super::index::State;
use super::open::{load_candidates, LogSpan, Start};
use super::{OpenReport, Store, StoreCore, StoreOptions};
use crate::codec;
use crate::error::{Error, Result};
use crate::log::{
    Durability, Log, LogIter, LogReader, Lsn, ReaderOptions, RecoveryReport, WriterStats,
};
use crate::reducer::{ErasedReducer, HostSlot};
use crate::storage::Storage;

/// Where a store's events come from.
pub(crate) enum Backend {
    /// This process holds the lock and appends.
    Writer(Log),
    /// Another process (or nobody) writes; this store only reads.
    Follower(Follower),
}

/// A read-only store's view of the log.
pub(crate) struct Follower {
    pub(crate) dir: PathBuf,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) reader: LogReader,
    /// The store identity and the LSNs found when opening (no recovery ran).
    pub(crate) report: RecoveryReport,
    /// Reads on from the last event indexed. `None` after a read failed
    /// (an iterator ends at its first error): the next catch-up starts a
    /// new one at `next_lsn`, which reports the error again if it persists.
    pub(crate) tail: Mutex<Option<LogIter>>,
    /// One past the last event indexed and folded.
    pub(crate) next_lsn: AtomicU64,
}

impl Backend {
    /// The writer's log, or `Error::ReadOnly` naming `operation`.
    pub(crate) fn writer(&self, operation: &'static str) -> Result<&Log> {
        match self {
            Backend::Writer(log) => Ok(log),
            Backend::Follower(follower) => Err(Error::ReadOnly {
                store: follower.dir.clone(),
                operation,
            }),
        }
    }

    pub(crate) fn is_read_only(&self) -> bool {
        matches!(self, Backend::Follower(_))
    }

    pub(crate) fn dir(&self) -> &Path {
        match self {
            Backend::Writer(log) => log.dir(),
            Backend::Follower(follower) => &follower.dir,
        }
    }

    /// The first LSN the log holds. A follower lists the directory.
    pub(crate) fn first_lsn(&self) -> Lsn {
        match self {
            Backend::Writer(log) => log.first_lsn(),
            Backend::Follower(follower) => {
                crate::log::segment::list(follower.storage.as_ref(), &follower.dir)
                    .ok()
                    .and_then(|listing| listing.segments.first().map(|segment| segment.first_lsn))
                    .unwrap_or(follower.report.next_lsn)
            }
        }
    }

    /// The writer's next LSN; for a follower, one past the last event it
    /// has read.
    pub(crate) fn next_lsn(&self) -> Lsn {
        match self {
            Backend::Writer(log) => log.next_lsn(),
            Backend::Follower(follower) => follower.next_lsn.load(Ordering::Acquire),
        }
    }

    pub(crate) fn durable_lsn(&self) -> Lsn {
        match self {
            Backend::Writer(log) => log.durable_lsn(),
            Backend::Follower(follower) => follower.next_lsn.load(Ordering::Acquire),
        }
    }

    pub(crate) fn visible_next_lsn(&self) -> Lsn {
        match self {
            Backend::Writer(log) => log.visible_next_lsn(),
            Backend::Follower(follower) => follower.next_lsn.load(Ordering::Acquire),
        }
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        match self {
            Backend::Writer(log) => log.is_poisoned(),
            Backend::Follower(_) => false,
        }
    }

    pub(crate) fn taken_back_from(&self) -> Option<Lsn> {
        match self {
            Backend::Writer(log) => log.taken_back_from(),
            Backend::Follower(_) => None,
        }
    }

    pub(crate) fn durability(&self) -> Durability {
        match self {
            Backend::Writer(log) => log.durability(),
            Backend::Follower(_) => Durability::Group,
        }
    }

    pub(crate) fn recovery_report(&self) -> &RecoveryReport {
        match self {
            Backend::Writer(log) => log.recovery_report(),
            Backend::Follower(follower) => &follower.report,
        }
    }

    pub(crate) fn writer_stats(&self) -> WriterStats {
        match self {
            Backend::Writer(log) => log.writer_stats(),
            Backend::Follower(_) => WriterStats::default(),
        }
    }

    pub(crate) fn reader(&self) -> LogReader {
        match self {
            Backend::Writer(log) => log.reader(),
            Backend::Follower(follower) => follower.reader.clone(),
        }
    }

    /// Makes what the writer appended durable; a follower has nothing to sync.
    pub(crate) fn sync(&self) -> Result<()> {
        self.writer("sync")?.sync()
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Writer(log) => log.fmt(formatter),
            Backend::Follower(follower) => formatter
                .debug_struct("ReadOnlyLog")
                .field("dir", &follower.dir)
                .field("next_lsn", &follower.next_lsn.load(Ordering::Acquire))
                .finish_non_exhaustive(),
        }
    }
}

/// How many events a catch-up indexes under one hold of the index lock.
const CATCH_UP_CHUNK_EVENTS: usize = 1024;

/// How many times a read of a read-only store starts again from a newer
/// snapshot when the writer compacted away segments it needed, before it
/// reports `Error::Compacted`.
pub const READ_ONLY_RESTARTS_MAX: usize = 3;

/// A read-only store as it starts (or starts again) from a snapshot.
pub(super) struct Followed {
    pub(super) state: State,
    pub(super) hosts: Vec<(TypeId, HostSlot)>,
    pub(super) tail: LogIter,
    pub(super) report: OpenReport,
}

/// Opens the store at `dir` for reading: the writer's snapshot choice and
/// checks, then the log after the snapshot indexed with `reader`. Writes
/// nothing.
pub(super) fn follow(
    storage: &dyn Storage,
    dir: &Path,
    reader: &LogReader,
    hosts: Vec<(TypeId, HostSlot)>,
) -> Result<Followed> {
    let mut report = OpenReport::default();
    let candidates = load_candidates(storage, dir, &mut report)?;
    let segments = crate::log::segment::list(storage, dir)?.segments;
    let Some(first) = segments.first() else {
        return Err(not_a_store(storage, dir));
    };
    let store_id = crate::log::recovery::store_identity(storage, dir)?;
    let span = LogSpan {
        store_id,
        first_lsn: first.first_lsn,
        // Unknown without reading the whole last segment: a snapshot past
        // the end is found by the chain check, which reads it.
        next_lsn: Lsn::MAX,
        known_chain: None,
    };
    let start = Start::choose(storage, dir, candidates, &span, hosts, &mut report)?;
    let mut tail = reader.iter_from(start.replay_from);
    let (state, hosts) = start.replay(&mut tail, &mut report)?;
    report.recovery = RecoveryReport {
        segments: segments.len(),
        next_lsn: tail.next_lsn(),
        store_id,
        ..RecoveryReport::default()
    };
    Ok(Followed {
        state,
        hosts,
        tail,
        report,
    })
}

/// A directory reader of the store at `dir`, which must hold a segment:
/// fails with what a writer's open would report (snapshots without a log),
/// or `Error::NotAStore`, creating nothing.
fn open_follower_reader(shared: &Arc<dyn Storage>, dir: &Path) -> Result<LogReader> {
    let storage = shared.as_ref();
    if !storage.exists(dir) {
        return Err(Error::NotAStore {
            path: dir.to_path_buf(),
        });
    }
    if crate::log::segment::list(storage, dir)?.segments.is_empty() {
        // Snapshots without a log are reported as the writer reports them.
        load_candidates(storage, dir, &mut OpenReport::default())?;
        return Err(not_a_store(storage, dir));
    }
    LogReader::open_with(
        dir,
        ReaderOptions {
            salvage: false,
            storage: Arc::clone(shared),
        },
    )
}

/// Why `dir` cannot be read as a store: it holds no segment.
fn not_a_store(storage: &dyn Storage, dir: &Path) -> Error {
    if storage.exists(&dir.join(crate::log::LOCK_FILE_NAME)) {
        Error::LogMissing {
            path: dir.to_path_buf(),
        }
    } else {
        Error::NotAStore {
            path: dir.to_path_buf(),
        }
    }
}

impl Store {
    /// Opens the store at `dir` read-only, beside its writer (in another
    /// process, or none): resume, export, stats and audit while the writer
    /// appends, following it.
    ///
    /// It takes no lock and writes nothing to the directory (no `LOCK`, no
    /// segment, no snapshot; a directory that is not a store fails with
    /// [`Error::NotAStore`] and nothing is created). It starts from the
    /// snapshot the writer's open would choose, with the same checks, and
    /// indexes the log after it. Only `options.log.storage` is used.
    ///
    /// **Following the writer.** Every read (`conversation`, `resume`,
    /// `slice`, `conversation_ids`, `contains_conversation`, `stats`)
    /// first catches up with what the writer has written since the last
    /// one, so it sees at least every event acknowledged before the read
    /// began. [`Store::refresh`] catches up explicitly and reports errors;
    /// the reads that return no `Result` leave an error to the next
    /// `refresh` or `Result` read and answer from what was read before.
    /// When the writer compacted away segments this store still needed, a
    /// read starts again from the newest snapshot (the writer took one
    /// before compacting), up to [`READ_ONLY_RESTARTS_MAX`] times in a row,
    /// and otherwise fails with [`Error::Compacted`]. Damage is
    /// [`Error::Corrupted`], as for any reader.
    ///
    /// `append`, `append_if`, `snapshot`, `compact` and `sync` fail with
    /// [`Error::ReadOnly`]. Host reducers registered with
    /// [`StoreBuilder::open_read_only`](super::StoreBuilder::open_read_only)
    /// are folded as the store catches up, and observed.
    ///
    /// ```
    /// use convlog::model::{ConversationEntry, Role};
    /// use convlog::{Error, Store, StoreOptions};
    ///
    /// # fn main() -> convlog::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let writer = Store::open(dir.path(), StoreOptions::default())?; // holds the lock
    /// let hello = ConversationEntry::new("eval-1", 0, Role::User, Some("Hello".into()));
    /// writer.append_one(hello.clone().recorded_in("ctx"))?;
    ///
    /// // Beside the writer (here in the same process; usually another one).
    /// let reader = Store::open_read_only(dir.path(), StoreOptions::default())?;
    /// assert_eq!(reader.conversation("ctx")?.len(), 1);
    ///
    /// let answer = ConversationEntry::new("eval-1", 1, Role::Assistant, Some("Hi!".into()));
    /// writer.append_one(answer.recorded_in("ctx"))?;
    /// assert_eq!(reader.resume("ctx", &Default::default())?.entries.len(), 2); // caught up
    ///
    /// assert!(matches!(reader.append_one(hello.recorded_in("ctx")), Err(Error::ReadOnly { .. })));
    /// # Ok(()) }
    /// ```
    pub fn open_read_only(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        Store::open_read_only_with(dir.as_ref().to_path_buf(), options, Vec::new())
    }

    pub(super) fn open_read_only_with(
        dir: PathBuf,
        options: StoreOptions,
        reducers: Vec<(TypeId, Box<dyn ErasedReducer>)>,
    ) -> Result<Store> {
        let storage = Arc::clone(&options.log.storage);
        let reader = open_follower_reader(&storage, &dir)?;
        let followed = follow(storage.as_ref(), &dir, &reader, host_slots(reducers))?;
        let next_lsn = followed.tail.next_lsn();
        let follower = Follower {
            dir,
            storage,
            reader: reader.clone(),
            report: followed.report.recovery.clone(),
            tail: Mutex::new(Some(followed.tail)),
            next_lsn: AtomicU64::new(next_lsn),
        };
        let options = StoreOptions {
            // A read-only store takes no snapshot.
            snapshot_every_events: None,
            snapshot_every_bytes: None,
            ..options
        };
        let ordered = Ordered::new(next_lsn, followed.hosts);
        let core = StoreCore::new(
            Backend::Follower(follower),
            reader,
            options,
            followed.state,
            ordered,
            followed.report,
        );
        Store::start(core)
    }

    /// Whether this store was opened read-only ([`Store::open_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.log.is_read_only()
    }

    /// Catches a read-only store up with what its writer appended since the
    /// last read; returns one past the last event it has now read. Every
    /// read does this first, so calling it is needed only to see errors
    /// of reads that return none, or to follow without reading. On a
    /// writable store it only returns the next LSN.
    pub fn refresh(&self) -> Result<Lsn> {
        self.core.follow_read(|| Ok(()))?;
        Ok(self.log.next_lsn())
    }
}

impl StoreCore {
    /// Runs `read` after catching up (a read-only store), starting again
    /// from the newest snapshot when the writer compacted away what it
    /// needed. A writable store just runs it.
    pub(super) fn follow_read<T>(&self, read: impl Fn() -> Result<T>) -> Result<T> {
        if !self.log.is_read_only() {
            return read();
        }
        let mut restarts = 0;
        loop {
            let result = self.catch_up().and_then(|()| read());
            match result {
                Err(Error::Compacted { .. }) if restarts < READ_ONLY_RESTARTS_MAX => {
                    restarts += 1;
                    self.restart_from_snapshot()?;
                }
                other => return other,
            }
        }
    }

    /// Catches up, leaving an error for the next `Result` read (see
    /// [`Store::open_read_only`]).
    pub(super) fn follow_quietly(&self) {
        if let Err(error) = self.follow_read(|| Ok(())) {
            tracing::warn!(store = %self.log.dir().display(), error = %error, "a read-only store could not catch up with its writer; answering from what it read before");
        }
    }

    /// Indexes and folds what the writer appended since the last catch-up.
    fn catch_up(&self) -> Result<()> {
        let Backend::Follower(follower) = &self.log else {
            return Ok(());
        };
        let mut tail = follower.tail.lock();
        let tail_iter = tail.get_or_insert_with(|| {
            follower
                .reader
                .iter_from(follower.next_lsn.load(Ordering::Acquire))
        });
        let mut outcome = Ok(());
        loop {
            let mut chunk = Vec::new();
            while chunk.len() < CATCH_UP_CHUNK_EVENTS {
                match tail_iter.next() {
                    None => break,
                    Some(Err(error)) => {
                        outcome = Err(error);
                        break;
                    }
                    Some(Ok(record)) => match codec::decode_event(&record.payload) {
                        Ok(event) => chunk.push((record, event)),
                        Err(reason) => {
                            outcome = Err(Error::UndecodableEvent {
                                lsn: record.lsn,
                                reason,
                            });
                            break;
                        }
                    },
                }
            }
            let Some((last, _)) = chunk.last() else {
                break;
            };
            let next_lsn = last.lsn + 1;
            {
                let mut state = self.state.write();
                for (record, event) in &chunk {
                    state.index_frame(&[(record.lsn, event)], record.position);
                    state.events_since_snapshot += 1;
                    state.bytes_since_snapshot += record.payload.len() as u64;
                }
            }
            let mut notes = Vec::new();
            let folded = {
                let mut ordered = self.ordered.lock();
                chunk.into_iter().try_for_each(|(record, event)| {
                    ordered.push(record.lsn, vec![event], &mut notes)
                })
            };
            if !notes.is_empty() {
                self.dispatch.lock().queue.extend(notes);
            }
            if let Err(error) = folded {
                self.poison_hosts(error);
            }
            follower.next_lsn.store(next_lsn, Ordering::Release);
            if outcome.is_err() {
                break;
            }
        }
        if outcome.is_err() {
            // The iterator ended at the error: the next catch-up starts a
            // new one where this one stopped.
            *tail = None;
        }
        drop(tail);
        self.dispatch_observers();
        outcome
    }

    /// Starts a read-only store again from the newest usable snapshot: the
    /// writer compacted away segments it was reading.
    fn restart_from_snapshot(&self) -> Result<()> {
        let Backend::Follower(follower) = &self.log else {
            return Ok(());
        };
        let mut tail = follower.tail.lock();
        let hosts: Vec<(TypeId, HostSlot)> = self
            .ordered
            .lock()
            .hosts
            .iter()
            .map(|(type_id, slot)| {
                (
                    *type_id,
                    HostSlot {
                        reducer: Arc::clone(&slot.reducer),
                        name: Arc::clone(&slot.name),
                        slice: slot.reducer.new_slice(),
                        observers: Arc::clone(&slot.observers),
                    },
                )
            })
            .collect();
        let followed = follow(
            follower.storage.as_ref(),
            &follower.dir,
            &follower.reader,
            hosts,
        )?;
        let next_lsn = followed.tail.next_lsn();
        tracing::info!(
            store = %follower.dir.display(),
            snapshot = ?followed.report.snapshot,
            "the writer compacted segments this read-only store needed; started again from the newest snapshot"
        );
        *self.state.write() = followed.state;
        {
            let mut ordered = self.ordered.lock();
            ordered.hosts = followed.hosts;
            ordered.next_lsn = next_lsn;
            ordered.pending.clear();
        }
        follower.next_lsn.store(next_lsn, Ordering::Release);
        *tail = Some(followed.tail);
        Ok(())
    }
}
