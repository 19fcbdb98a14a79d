//! The log boundary: what a [`Store`](crate::Store) needs from a log.
//!
//! The store keeps its index, host slices and snapshots itself; from the
//! log it needs only what [`EventLog`] declares. Implementations
//! ship for the segment log ([`Log`], the writer, and [`LogFollower`], a
//! read-only follower of a store another process writes) and in memory
//! ([`MemoryLog`](super::MemoryLog)), which proves the store asks nothing
//! more. A replicated log (a NATS JetStream stream, say) would be a
//! third: [`Store::open_on`](crate::Store::open_on) opens a store on any.
//!
//! # The contract
//!
//! - **Batches are atomic.** [`EventLog::append`] appends a batch of
//!   payloads as one unit: every reader sees all of it or none of it, and
//!   after any crash it is wholly there or wholly absent.
//! - **LSNs are gap-free.** A batch of `n` payloads gets the `n`
//!   consecutive LSNs following the previous batch's; the first batch of a
//!   new log starts at 1. LSNs are never reused: after a take-back (below)
//!   the log is poisoned and appends no more.
//! - **Durable** means the batch survives a crash of the machine (for the
//!   segment log: written and `fdatasync`ed; for a replicated log: stored
//!   by a quorum). [`EventLog::durable_lsn`] is a lower bound on it: every
//!   event below it is durable. Appends return after what their
//!   [`Durability`] asks for.
//! - **Read after drop.** [`EventLog::drop_before`] removes a prefix the
//!   store's snapshot covers. Reading an LSN or a locator in the dropped
//!   prefix returns [`Error::Compacted`] naming the first missing LSN and
//!   where the log continues, never other events and never a silent gap.
//! - **Followers** ([`EventLog::is_writable`] false) read what another
//!   handle appends; every write method returns [`Error::ReadOnly`].

use std::fmt::Debug;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::format::StoreId;
use super::recovery::{self, ChainAt};
use super::{Durability, Log, LogIter, LogReader, Lsn, Position, Record};
use crate::error::{Error, Result};
use crate::storage::Storage;

/// For implementations outside the crate (the format module is public only
/// with the `testing` feature): a store identity, a new random one, and
/// its hex form.
pub use super::format::{new_store_id, store_id_hex, StoreId as LogStoreId};

/// For implementations outside the crate that route a batch by
/// conversation: the conversation id of the event a payload encodes, read
/// without decoding the rest (`None` for an event of no conversation, or
/// bytes that are not an event).
pub fn payload_conversation_id(payload: &[u8]) -> Option<&str> {
    crate::codec::peek_conversation_id(payload)
}

/// Where a batch is in a log: what the store's index keeps to read the
/// batch again with [`EventLog::read_batch`]. For the segment log, the
/// segment (by first LSN) and byte offset of its frame; another log
/// chooses its own meaning for the two numbers, within these limits: the
/// store packs a locator into 64 bits, so `segment` may take at most
/// 2^24 distinct values over the store's life and `offset` must stay
/// below 2^40.
pub type Locator = Position;

/// What a log holds just before an LSN: what ties a snapshot to exactly one
/// prefix of one log. A snapshot taken at LSN `n` records the binding at
/// `n`; it may stand in for events `1..n` only while the log still answers
/// [`Binding::Found`] with the same value there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// The value of the batch ending at `lsn - 1` (for the segment log its
    /// chain value: a checksum covering every frame up to it). Two logs
    /// that hold different events before `lsn` must answer different
    /// values (with overwhelming probability).
    Found(u32),
    /// The log starts after the LSN: the batch before it was dropped.
    BeforeStart {
        /// The log's first LSN.
        first_lsn: Lsn,
    },
    /// The log ends before the LSN.
    PastEnd {
        /// One past the log's last event.
        next_lsn: Lsn,
    },
    /// The LSN falls inside a batch: no batch ends just before it.
    InsideBatch {
        /// The first LSN of the batch holding it.
        batch_first_lsn: Lsn,
        /// One past the batch's last LSN.
        batch_end_lsn: Lsn,
    },
}

impl From<ChainAt> for Binding {
    fn from(chain: ChainAt) -> Binding {
        match chain {
            ChainAt::Found(value) => Binding::Found(value),
            ChainAt::BeforeStart { first_lsn } => Binding::BeforeStart { first_lsn },
            ChainAt::PastEnd { next_lsn } => Binding::PastEnd { next_lsn },
            ChainAt::InsideBatch {
                frame_first_lsn,
                frame_end_lsn,
            } => Binding::InsideBatch {
                batch_first_lsn: frame_first_lsn,
                batch_end_lsn: frame_end_lsn,
            },
        }
    }
}

/// What [`EventLog::drop_before`] removed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dropped {
    /// The log's first LSN after the drop.
    pub first_lsn: Lsn,
    /// Files deleted (the segment log's; empty for a log without files).
    pub removed: Vec<PathBuf>,
}

/// Reads a log in LSN order from an LSN, and follows it: after it returns
/// `None` (it reached the end of what is visible), a later `next` returns
/// what was appended since. It ends for good at its first error.
pub trait LogCursor: Iterator<Item = Result<Record>> + Send {
    /// The LSN the next record returned will have (one past the last
    /// returned).
    fn next_lsn(&self) -> Lsn;
}

impl LogCursor for LogIter {
    fn next_lsn(&self) -> Lsn {
        LogIter::next_lsn(self)
    }
}

/// What a [`Store`](crate::Store) needs from a log. See the module
/// documentation for the contract every implementation keeps; each method
/// says what it adds.
pub trait EventLog: Send + Sync + Debug {
    /// The identity of the store this log belongs to: the same for every
    /// handle on it and for every copy of it, fixed when the log was
    /// created. Snapshots record it and are used only with their log.
    fn store_id(&self) -> StoreId;

    /// Whether this handle appends. `false` for a follower: it reads what
    /// another handle (usually another process) appends, and every write
    /// method fails with [`Error::ReadOnly`].
    fn is_writable(&self) -> bool;

    /// Makes this handle the log's one writer. A store calls it once, when
    /// it opens on a writable handle, before reading anything: the store
    /// indexes and folds only what it appends itself after its open replay,
    /// so a second writer beside it would append events it never serves.
    /// An implementation that already has a writer fails with
    /// [`Error::Locked`]; the claim ends when the claiming handle is
    /// dropped. The default admits every handle: for logs whose open
    /// already excludes a second writer (the segment log's lock), and for
    /// logs with many writers ([`EventLog::many_writers`]).
    fn claim_writer(&self) -> Result<()> {
        Ok(())
    }

    /// Whether other writable handles — usually in other processes —
    /// append to this log beside this one (a replicated log with many
    /// writers). `false` by default: the log has one writer.
    ///
    /// A store on a writable handle that answers `true` follows the log
    /// as a read-only store does: it indexes every batch, its own and
    /// other writers', by reading the log in LSN order, and catches up
    /// before every read and before checking a conditional append. Such a
    /// log's [`EventLog::append`] is a compare-and-set on the log's end:
    /// when another handle appended after the last batch this handle
    /// knows of, it fails with [`Error::Conflict`] (`conversation_id`
    /// `None`, `expected` the LSN it would have assigned, `actual` the
    /// log's next LSN as now learnt), nothing of the batch is stored, and
    /// the handle has learnt the new end, so a retry can succeed. The
    /// store retries such an append (checking its condition again) up to
    /// [`APPEND_RACES_MAX`](crate::store::APPEND_RACES_MAX) times.
    fn many_writers(&self) -> bool {
        false
    }

    /// Appends `payloads` (at least one) as one atomic batch; returns once
    /// `durability` is met, with the batch's LSN range (gap-free, right
    /// after the previous batch's) and its locator. On error nothing of
    /// the batch is visible to any reader.
    fn append(&self, payloads: &[Vec<u8>], durability: Durability)
        -> Result<(Range<Lsn>, Locator)>;

    /// Appends each of `batches` (each of at least one payload) as its own
    /// atomic batch, in order, and returns once all of them are durable:
    /// per batch its LSN range and locator, or the error that kept it out
    /// (and nothing of it visible). A batch the log refuses (over a limit)
    /// fails alone; when making them durable fails, every batch not
    /// durable fails. The default appends each with [`Durability::Sync`];
    /// a log that can make several batches durable with one write (the
    /// segment log) does so.
    fn append_batches(&self, batches: &[&[Vec<u8>]]) -> Vec<Result<(Range<Lsn>, Locator)>> {
        batches
            .iter()
            .map(|payloads| self.append(payloads, Durability::Sync))
            .collect()
    }

    /// Reads the batch at `locator` (as `append` or a cursor's records
    /// returned it): every record of the batch, in LSN order.
    /// [`Error::Compacted`] if it was dropped.
    fn read_batch(&self, locator: Locator) -> Result<Vec<Record>>;

    /// A cursor from `lsn` on, following the log (see [`LogCursor`]). A
    /// cursor from below [`EventLog::first_lsn`] returns
    /// [`Error::Compacted`] first (then ends).
    fn read_from(&self, lsn: Lsn) -> Box<dyn LogCursor>;

    /// The first LSN the log holds (1 unless a prefix was dropped).
    fn first_lsn(&self) -> Lsn;

    /// One past the last event this handle knows of: for a writer, the
    /// LSN the next append gets; a follower may lag its writer (it learns
    /// of events by reading them).
    fn next_lsn(&self) -> Lsn;

    /// Every event below this LSN is durable. A follower that cannot tell
    /// reports what it has read.
    fn durable_lsn(&self) -> Lsn;

    /// One past the last event readers of this handle can see now (an
    /// append in flight may have its LSNs and not be visible yet).
    fn visible_next_lsn(&self) -> Lsn {
        self.next_lsn()
    }

    /// Drops every batch wholly below `lsn` that the implementation may
    /// drop (the segment log: whole sealed segments only), oldest first;
    /// never a batch at or above `lsn`. The store calls it only with the
    /// LSN of a snapshot it has checked against [`EventLog::binding_at`].
    fn drop_before(&self, lsn: Lsn) -> Result<Dropped>;

    /// Makes every event appended so far durable.
    fn sync(&self) -> Result<()>;

    /// What the log holds just before `lsn` (see [`Binding`]). Answers for
    /// any `lsn` from [`EventLog::first_lsn`] to one past the last event.
    fn binding_at(&self, lsn: Lsn) -> Result<Binding>;

    /// The durability appends get when the caller asks for none.
    fn durability(&self) -> Durability {
        Durability::Group
    }

    /// After an I/O failure poisoned the writer: the LSN from which it
    /// took back what it had acknowledged but not made durable (under
    /// `Durability::None`); events at or after it are gone. The store
    /// drops them from its index and host slices. `None` while healthy;
    /// a log that never takes back keeps the default.
    fn taken_back_from(&self) -> Option<Lsn> {
        None
    }

    /// Whether a failure has stopped the writer (`append` and `sync` then
    /// fail with the reason).
    fn is_poisoned(&self) -> bool {
        false
    }
}

impl EventLog for Log {
    fn store_id(&self) -> StoreId {
        self.recovery_report().store_id
    }

    fn is_writable(&self) -> bool {
        true
    }

    fn append(
        &self,
        payloads: &[Vec<u8>],
        durability: Durability,
    ) -> Result<(Range<Lsn>, Locator)> {
        self.append_positioned(payloads, durability)
    }

    fn append_batches(&self, batches: &[&[Vec<u8>]]) -> Vec<Result<(Range<Lsn>, Locator)>> {
        self.append_batches_positioned(batches)
    }

    fn read_batch(&self, locator: Locator) -> Result<Vec<Record>> {
        self.reader().read_frame(locator)
    }

    fn read_from(&self, lsn: Lsn) -> Box<dyn LogCursor> {
        Box::new(self.iter_from(lsn))
    }

    fn first_lsn(&self) -> Lsn {
        Log::first_lsn(self)
    }

    fn next_lsn(&self) -> Lsn {
        Log::next_lsn(self)
    }

    fn durable_lsn(&self) -> Lsn {
        Log::durable_lsn(self)
    }

    fn visible_next_lsn(&self) -> Lsn {
        Log::visible_next_lsn(self)
    }

    fn drop_before(&self, lsn: Lsn) -> Result<Dropped> {
        let removed = self.remove_segments_before(lsn)?;
        Ok(Dropped {
            first_lsn: Log::first_lsn(self),
            removed,
        })
    }

    fn sync(&self) -> Result<()> {
        Log::sync(self)
    }

    fn binding_at(&self, lsn: Lsn) -> Result<Binding> {
        recovery::chain_before(self.writer.storage(), self.dir(), lsn).map(Binding::from)
    }

    fn durability(&self) -> Durability {
        Log::durability(self)
    }

    fn taken_back_from(&self) -> Option<Lsn> {
        Log::taken_back_from(self)
    }

    fn is_poisoned(&self) -> bool {
        Log::is_poisoned(self)
    }
}

/// A read-only follower of the segment log of the store at a directory,
/// which another process (or nobody) writes: no lock, nothing written.
/// What [`Store::open_read_only`](crate::Store::open_read_only) runs on.
pub struct LogFollower {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    reader: LogReader,
    store_id: StoreId,
    /// One past the last event any cursor of this follower has returned.
    seen: Arc<AtomicU64>,
}

impl LogFollower {
    /// Follows the store at `dir` with `reader` (a directory reader of it).
    /// Fails if the directory holds no segment to read the identity from.
    pub fn new(dir: &Path, storage: Arc<dyn Storage>, reader: LogReader) -> Result<LogFollower> {
        let store_id = recovery::store_identity(storage.as_ref(), dir)?;
        Ok(LogFollower {
            dir: dir.to_path_buf(),
            storage,
            reader,
            store_id,
            seen: Arc::new(AtomicU64::new(1)),
        })
    }

    /// The directory reader.
    pub fn reader(&self) -> &LogReader {
        &self.reader
    }

    fn read_only(&self, operation: &'static str) -> Error {
        Error::ReadOnly {
            store: self.dir.clone(),
            operation,
        }
    }
}

impl Debug for LogFollower {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LogFollower")
            .field("dir", &self.dir)
            .field("seen", &self.seen.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

/// A cursor that records how far its follower has read.
struct FollowerCursor {
    inner: LogIter,
    seen: Arc<AtomicU64>,
}

impl Iterator for FollowerCursor {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        let next = self.inner.next();
        if let Some(Ok(record)) = &next {
            self.seen.fetch_max(record.lsn + 1, Ordering::AcqRel);
        }
        next
    }
}

impl LogCursor for FollowerCursor {
    fn next_lsn(&self) -> Lsn {
        self.inner.next_lsn()
    }
}

impl EventLog for LogFollower {
    fn store_id(&self) -> StoreId {
        self.store_id
    }

    fn is_writable(&self) -> bool {
        false
    }

    fn append(&self, _: &[Vec<u8>], _: Durability) -> Result<(Range<Lsn>, Locator)> {
        Err(self.read_only("append"))
    }

    fn read_batch(&self, locator: Locator) -> Result<Vec<Record>> {
        self.reader.read_frame(locator)
    }

    fn read_from(&self, lsn: Lsn) -> Box<dyn LogCursor> {
        Box::new(FollowerCursor {
            inner: self.reader.iter_from(lsn),
            seen: Arc::clone(&self.seen),
        })
    }

    /// Lists the directory: the writer may have dropped a prefix since.
    fn first_lsn(&self) -> Lsn {
        super::segment::list(self.storage.as_ref(), &self.dir)
            .ok()
            .and_then(|listing| listing.segments.first().map(|segment| segment.first_lsn))
            .unwrap_or_else(|| self.seen.load(Ordering::Acquire))
    }

    fn next_lsn(&self) -> Lsn {
        self.seen.load(Ordering::Acquire)
    }

    fn durable_lsn(&self) -> Lsn {
        self.seen.load(Ordering::Acquire)
    }

    fn drop_before(&self, _: Lsn) -> Result<Dropped> {
        Err(self.read_only("compact"))
    }

    fn sync(&self) -> Result<()> {
        Err(self.read_only("sync"))
    }

    fn binding_at(&self, lsn: Lsn) -> Result<Binding> {
        recovery::chain_before(self.storage.as_ref(), &self.dir, lsn).map(Binding::from)
    }
}
