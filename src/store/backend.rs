//! The log under a [`Store`](super::Store), behind the log boundary
//! ([`EventLog`]): the store reads and writes its events only through the
//! trait. Beside it the store keeps where its snapshots are, and, for a
//! read-only store, how far it has followed the log.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::log::{
    Durability, EventLog, Log, LogCursor, LogReader, Lsn, RecoveryReport, WriterStats,
};
use crate::storage::Storage;

/// A store's log and what the store keeps beside it.
pub(crate) struct Backend {
    log: Arc<dyn EventLog>,
    /// The store directory: where the snapshots are, what errors name.
    dir: PathBuf,
    /// The storage the snapshots are on.
    storage: Arc<dyn Storage>,
    /// What opening found (for a log other than the segment writer's: its
    /// identity and next LSN only).
    pub(super) recovery: RecoveryReport,
    /// The segment log's handles, when the store runs on it: what
    /// [`LogView`](super::LogView) offers beyond the trait.
    segment: Option<SegmentHandles>,
    /// A read-only store's progress (`None` for a writer).
    pub(super) follow: Option<Follow>,
    /// An encrypted store's keys (docs/erasure.md); `None` for a store
    /// opened without a store key.
    pub(crate) keyring: Option<crate::erasure::Keyring>,
}

/// The segment log beyond the trait: its reader, and its writer's counters.
pub(crate) struct SegmentHandles {
    pub(crate) reader: LogReader,
    pub(crate) writer: Option<Arc<Log>>,
}

/// How far a read-only store has followed its log.
pub(crate) struct Follow {
    /// Reads on from the last event indexed. `None` after a read failed
    /// (a cursor ends at its first error): the next catch-up starts a new
    /// one at `next_lsn`, which reports the error again if it persists.
    pub(crate) tail: Mutex<Option<Box<dyn LogCursor>>>,
    /// One past the last event indexed and folded.
    pub(crate) next_lsn: AtomicU64,
}

impl Backend {
    pub(crate) fn new(
        log: Arc<dyn EventLog>,
        dir: PathBuf,
        storage: Arc<dyn Storage>,
        recovery: RecoveryReport,
        segment: Option<SegmentHandles>,
    ) -> Backend {
        Backend {
            log,
            dir,
            storage,
            recovery,
            segment,
            follow: None,
            keyring: None,
        }
    }

    /// The storage the store directory is on.
    pub(crate) fn storage_ref(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The log behind the boundary (for reads: writes go through
    /// [`Backend::writer`]).
    pub(crate) fn log(&self) -> &dyn EventLog {
        self.log.as_ref()
    }

    /// The log, to write to, or `Error::ReadOnly` naming `operation`.
    pub(crate) fn writer(&self, operation: &'static str) -> Result<&dyn EventLog> {
        if self.is_read_only() {
            return Err(Error::ReadOnly {
                store: self.dir.clone(),
                operation,
            });
        }
        Ok(self.log.as_ref())
    }

    pub(crate) fn is_read_only(&self) -> bool {
        !self.log.is_writable()
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    pub(crate) fn first_lsn(&self) -> Lsn {
        self.log.first_lsn()
    }

    /// The writer's next LSN; for a follower, one past the last event it
    /// has read.
    pub(crate) fn next_lsn(&self) -> Lsn {
        match &self.follow {
            Some(follow) => follow.next_lsn.load(Ordering::Acquire),
            None => self.log.next_lsn(),
        }
    }

    /// A follower cannot tell what is durable: it reports what it has read.
    pub(crate) fn durable_lsn(&self) -> Lsn {
        match &self.follow {
            Some(follow) => follow.next_lsn.load(Ordering::Acquire),
            None => self.log.durable_lsn(),
        }
    }

    pub(crate) fn visible_next_lsn(&self) -> Lsn {
        match &self.follow {
            Some(follow) => follow.next_lsn.load(Ordering::Acquire),
            None => self.log.visible_next_lsn(),
        }
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.log.is_poisoned()
    }

    pub(crate) fn taken_back_from(&self) -> Option<Lsn> {
        self.log.taken_back_from()
    }

    pub(crate) fn durability(&self) -> Durability {
        self.log.durability()
    }

    pub(crate) fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    pub(crate) fn writer_stats(&self) -> WriterStats {
        self.segment
            .as_ref()
            .and_then(|segment| segment.writer.as_ref())
            .map(|log| log.writer_stats())
            .unwrap_or_default()
    }

    /// The segment log's reader; `None` for a store on another log
    /// ([`Store::open_on`](super::Store::open_on)).
    pub(crate) fn reader(&self) -> Option<LogReader> {
        self.segment.as_ref().map(|segment| segment.reader.clone())
    }

    /// Makes what the writer appended durable; a follower has nothing to sync.
    pub(crate) fn sync(&self) -> Result<()> {
        self.writer("sync")?.sync()
    }

    /// Signs a checkpoint of a tamper-evident segment log
    /// ([`Log::checkpoint`]): `Error::ReadOnly` for a follower,
    /// `Error::InvalidOption` for a store on another log or one without
    /// tamper evidence.
    pub(crate) fn checkpoint(&self) -> Result<crate::tamper::Checkpoint> {
        self.writer("checkpoint")?;
        match self
            .segment
            .as_ref()
            .and_then(|segment| segment.writer.as_ref())
        {
            Some(log) => log.checkpoint(),
            None => Err(Error::InvalidOption {
                option: "LogOptions::tamper",
                reason: format!(
                    "store {} runs on a log other than the segment log: tamper evidence and its checkpoints need the segment log",
                    self.dir.display()
                ),
            }),
        }
    }

    /// Whether the store's log is a tamper-evident segment log this
    /// process writes (one [`Backend::checkpoint`] can sign).
    pub(crate) fn is_tamper_evident(&self) -> bool {
        self.segment
            .as_ref()
            .and_then(|segment| segment.writer.as_ref())
            .is_some_and(|log| log.is_tamper_evident())
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.follow {
            None => self.log.fmt(formatter),
            Some(follow) => formatter
                .debug_struct("ReadOnlyLog")
                .field("dir", &self.dir)
                .field("next_lsn", &follow.next_lsn.load(Ordering::Acquire))
                .finish_non_exhaustive(),
        }
    }
}
