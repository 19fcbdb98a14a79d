//! Read-only stores: a store on a follower of a log
//! ([`EventLog::is_writable`] false) that another process (or handle)
//! writes.
//!
//! [`Store::open_read_only`](super::Store::open_read_only) runs on a
//! [`LogFollower`] of the segment log: it takes no lock and writes nothing
//! to the store directory (not `LOCK`, not a segment, not a snapshot). A
//! read-only store starts from the snapshot a writer's open would choose
//! (the same checks), indexes the log after it, and catches up with what
//! the writer appended since whenever it is read (see
//! `StoreCore::catch_up`), following the log with one cursor.

use std::any::TypeId;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::backend::{Backend, SegmentHandles};
use super::hosts::host_slots;
use super::open::{check_log_present, load_candidates, start_from_snapshot, Started};
use super::{OpenReport, Store, StoreCore, StoreOptions};
use crate::error::{Error, Result};
use crate::log::{EventLog, LogFollower, LogReader, Lsn, ReaderOptions, RecoveryReport};
use crate::reducer::{ErasedReducer, HostSlot};
use crate::storage::Storage;

/// How many events a catch-up indexes under one hold of the index lock.
const CATCH_UP_CHUNK_EVENTS: usize = 1024;

/// How many times a read of a read-only store starts again from a newer
/// snapshot when the writer compacted away segments it needed, before it
/// reports `Error::Compacted`.
pub const READ_ONLY_RESTARTS_MAX: usize = 3;

/// Starts a read-only store again: the writer's snapshot choice and checks,
/// then the log after the snapshot indexed. Writes nothing.
pub(super) fn follow(
    backend: &Backend,
    key: Option<&crate::tamper::TamperKey>,
    hosts: Vec<(TypeId, HostSlot)>,
) -> Result<(Started, OpenReport)> {
    let mut report = OpenReport::default();
    let candidates = load_candidates(backend.storage().as_ref(), backend.dir(), key, &mut report)?;
    let started = start_from_snapshot(backend, candidates, None, hosts, &mut report)?;
    Ok((started, report))
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
        check_log_present(storage, dir)?;
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
    /// `append`, `append_with`, `snapshot`, `compact` and `sync` fail with
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
    /// writer.append(&[hello.clone().recorded_in("ctx")])?;
    ///
    /// // Beside the writer (here in the same process; usually another one).
    /// let reader = Store::open_read_only(dir.path(), StoreOptions::default())?;
    /// assert_eq!(reader.conversation("ctx")?.len(), 1);
    ///
    /// let answer = ConversationEntry::new("eval-1", 1, Role::Assistant, Some("Hi!".into()));
    /// writer.append(&[answer.recorded_in("ctx")])?;
    /// assert_eq!(reader.resume("ctx", &Default::default())?.entries.len(), 2); // caught up
    ///
    /// assert!(matches!(reader.append(&[hello.recorded_in("ctx")]), Err(Error::ReadOnly { .. })));
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
        options.check()?;
        let storage = Arc::clone(&options.log.storage);
        let reader = open_follower_reader(&storage, &dir)?;
        let segments = crate::log::segment::list(storage.as_ref(), &dir)?
            .segments
            .len();
        let follower = LogFollower::new(&dir, Arc::clone(&storage), reader.clone())?;
        let mut report = OpenReport {
            recovery: RecoveryReport {
                segments,
                store_id: follower.store_id(),
                ..RecoveryReport::default()
            },
            ..OpenReport::default()
        };
        let candidates = load_candidates(
            storage.as_ref(),
            &dir,
            options.log.tamper.as_ref().map(|tamper| &*tamper.key),
            &mut report,
        )?;
        let segment = SegmentHandles {
            reader,
            writer: None,
        };
        let backend = Backend::new(
            Arc::new(follower),
            dir,
            storage,
            report.recovery.clone(),
            Some(segment),
        );
        let hosts = host_slots(reducers);
        Store::open_backend(backend, candidates, None, options, hosts, report)
    }

    /// Whether this store was opened read-only ([`Store::open_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.log.is_read_only()
    }

    /// Catches a read-only store up with what its writer appended since the
    /// last read; returns one past the last event it has now read. Every
    /// read does this first, so calling it is needed only to see errors
    /// of reads that return none, or to follow without reading. A writer
    /// on a log with many writers ([`EventLog::many_writers`]) catches up
    /// with the other writers the same way; the only writer of its log just
    /// returns the next LSN.
    pub fn refresh(&self) -> Result<Lsn> {
        self.core.follow_read(|| Ok(()))?;
        Ok(self.log.next_lsn())
    }
}

impl StoreCore {
    /// Runs `read` after catching up (a read-only store, or a writer on a
    /// log with many writers), starting again from the newest snapshot
    /// when the writer compacted away what it needed. A store that is the
    /// log's one writer just runs it.
    pub(super) fn follow_read<T>(&self, read: impl Fn() -> Result<T>) -> Result<T> {
        // A writer on a log with many writers follows it too.
        if self.log.follow.is_none() {
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
        self.catch_up_until(Lsn::MAX)
    }

    /// Indexes and folds what the log holds since the last catch-up, up to
    /// the end of the batch holding `until - 1` at least (a writer on a log
    /// with many writers needs no more than its own batch's end).
    pub(super) fn catch_up_until(&self, until: Lsn) -> Result<()> {
        let Some(follower) = &self.log.follow else {
            return Ok(());
        };
        let mut tail = follower.tail.lock();
        let tail_iter = tail.get_or_insert_with(|| {
            self.log
                .log()
                .read_from(follower.next_lsn.load(Ordering::Acquire))
        });
        let mut outcome = Ok(());
        loop {
            let mut chunk: Vec<(crate::log::Record, crate::model::Event)> = Vec::new();
            while chunk.len() < CATCH_UP_CHUNK_EVENTS {
                let indexed = chunk
                    .last()
                    .map_or(follower.next_lsn.load(Ordering::Acquire), |(record, _)| {
                        record.lsn + 1
                    });
                if indexed >= until {
                    break;
                }
                match tail_iter.next() {
                    None => break,
                    Some(Err(error)) => {
                        outcome = Err(error);
                        break;
                    }
                    Some(Ok(record)) => match record.event() {
                        Ok(event) => {
                            let event = match &self.log.keyring {
                                Some(keyring) => keyring.open_for_hosts(event, record.lsn),
                                None => event,
                            };
                            chunk.push((record, event))
                        }
                        Err(error) => {
                            outcome = Err(error);
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
                    ordered.push(record.lsn, 1, vec![event], &mut notes)
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

    /// Starts a following store (read-only, or a writer on a log with many
    /// writers) again from the newest usable snapshot: a writer compacted
    /// away what it was reading.
    pub(super) fn restart_from_snapshot(&self) -> Result<()> {
        let Some(follower) = &self.log.follow else {
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
        let key = self.options.log.tamper.as_ref().map(|tamper| &*tamper.key);
        let (followed, report) = follow(&self.log, key, hosts)?;
        let next_lsn = followed.tail.next_lsn();
        tracing::info!(
            store = %self.log.dir().display(),
            snapshot = ?report.snapshot,
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
