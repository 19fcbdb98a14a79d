//! The durable segment log: framed, checksummed, group-committed, crash-recovering.
//!
//! A store is a directory of segment files named by their first LSN. Each
//! [`Log::append`] writes one frame: its events get consecutive LSNs,
//! and after any crash the frame is either wholly there or wholly absent.
//! `docs/format.md` specifies every byte; `ARCHITECTURE.md` the layers.
//!
//! ```
//! use convlog::log::{Durability, Log, LogOptions};
//!
//! # fn main() -> convlog::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let log = Log::open(dir.path(), LogOptions::default())?;
//! let first = log.append(&[b"user asked about Paris"])?;
//! let batch = log.append(&[b"call_1 pending".as_slice(), b"call_2 pending"])?;
//! assert_eq!(batch, first.end..first.end + 2);
//! log.append_with(&[b"not urgent"], Durability::None)?;
//! log.sync()?;
//!
//! let payloads: Vec<Vec<u8>> = log
//!     .iter_from(batch.start)
//!     .map(|record| record.map(|record| record.payload))
//!     .collect::<convlog::Result<_>>()?;
//! assert_eq!(payloads, [b"call_1 pending".to_vec(), b"call_2 pending".to_vec(), b"not urgent".to_vec()]);
//! # Ok(()) }
//! ```

pub mod boundary;
#[cfg(feature = "testing")]
pub mod format;
#[cfg(not(feature = "testing"))]
pub(crate) mod format;
mod memory;
mod reader;
#[cfg(feature = "testing")]
pub mod recovery;
#[cfg(not(feature = "testing"))]
pub(crate) mod recovery;
#[cfg(feature = "testing")]
pub mod segment;
#[cfg(not(feature = "testing"))]
pub(crate) mod segment;
pub(crate) mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::storage::{FileSystem, LockGuard, Storage};

pub use boundary::{Binding, Dropped, EventLog, Locator, LogCursor, LogFollower};
pub use format::{
    BATCH_BYTES_MAX, BATCH_EVENTS_MAX, EVENT_BYTES_MAX, SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_LIMIT,
    SEGMENT_BYTES_MIN,
};
pub use memory::MemoryLog;
pub(crate) use reader::FrameSummary;
pub use reader::{FrameVisitor, LogIter, LogReader, Position, ReaderOptions, Record};
pub use recovery::{RecoveryReport, Salvage, TornTail, VerifyReport};
pub use segment::SegmentFile;
pub use writer::WriterStats;

/// Of the bytes of a last (active) segment, those allocated ahead of its
/// frames and not written yet: the zeros an open (or killed) writer holds
/// for its next appends; 0 for a segment that ends at its last frame, and
/// for one that does not scan (damage is `verify`'s to report).
pub fn unused_tail_bytes(segment: &[u8]) -> u64 {
    match recovery::scan_segment(segment, true) {
        Ok(scan) => match scan.end {
            recovery::ScanEnd::Unused { offset } => (segment.len() as u64).saturating_sub(offset),
            _ => 0,
        },
        Err(_) => 0,
    }
}

/// The segment files of the store at `dir`, in LSN order (read without the
/// writer's lock).
pub fn segment_files(dir: impl AsRef<Path>) -> Result<Vec<SegmentFile>> {
    Ok(segment::list(&FileSystem, dir.as_ref())?.segments)
}

/// A log sequence number: an event's position in the log. LSNs start at 1
/// and are gap-free and increasing.
pub type Lsn = u64;

/// Name of the lock file in a store directory. The writer locks the store
/// directory itself and this file (see [`Log::open`]).
pub const LOCK_FILE_NAME: &str = "LOCK";

/// How many entries of a non-empty directory [`Error::DirectoryNotEmpty`]
/// names.
pub const DIRECTORY_ENTRIES_LISTED_MAX: usize = 5;

/// When an append is acknowledged, relative to making it durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Durable before `append` returns: the frame is written and
    /// `fdatasync`ed. Issued at once, never delayed to gather a group
    /// (concurrent appenders still share a write and an fsync: the frames
    /// that queued up while the previous one was in flight).
    Sync,
    /// Durable before `append` returns, with group commit: concurrent
    /// appenders share one write and one `fdatasync`. Under load a leader
    /// may hold its write back briefly (at most half the duration of the
    /// last fsync, and 1 ms) for the appenders the previous commit released
    /// to rejoin, so groups hold nearly all appenders rather than about
    /// half; a lone appender never waits. The default.
    Group,
    /// Acknowledged once written to the operating system; a background
    /// thread fsyncs every interval. A process crash loses nothing
    /// acknowledged; a machine crash can lose up to one interval (plus the
    /// time of one fsync). The thread starts when the log opens with this as
    /// its default policy, or at the first append that asks for it (then
    /// that append fails if the thread cannot start); it runs at the
    /// shortest interval any append or the default has asked for.
    Periodic(Duration),
    /// Acknowledged once written to the operating system; durable only after
    /// [`Log::sync`]. A process crash loses nothing acknowledged; a machine
    /// crash can lose anything not yet synced. So does a failed fsync: the
    /// poisoned writer truncates the active segment to its last fsynced byte.
    None,
}

/// Options for opening a [`Log`]: a builder, so a new option never breaks a
/// host.
///
/// Start from [`LogOptions::new`] (the defaults) and chain a setter per
/// option, each named as the field it sets; the fields stay public for
/// reading. A [`crate::Store`] takes the common ones directly
/// (`StoreOptions::new().durability(..)`), and these through
/// `StoreOptions::log`.
///
/// ```
/// use convlog::log::{Durability, Log, LogOptions};
///
/// # fn main() -> convlog::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let options = LogOptions::new()
///     .durability(Durability::Sync)
///     .segment_bytes_max(1 << 20);
/// let log = Log::open(dir.path(), options)?;
/// assert_eq!(log.durability(), Durability::Sync);
/// # Ok(()) }
/// ```
///
/// Which sealed segments opening checks only by header is not a host
/// option (the store's open sets it from its snapshot):
///
/// ```compile_fail,E0616
/// let options = convlog::log::LogOptions::new();
/// let _ = options.full_check_from_lsn;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LogOptions {
    /// Default durability of appends (`append_with` overrides it per call).
    pub durability: Durability,
    /// Segments roll before a frame would grow them past this size
    /// (a segment holding one frame larger than this is allowed).
    pub segment_bytes_max: u64,
    /// On damage, keep what precedes it and move the rest into
    /// `quarantine/` instead of failing the open. Off by default.
    pub salvage: bool,
    /// Sealed segments whose events all precede this LSN are checked by
    /// header only on open (a snapshot covers them). Default 1: check all.
    /// Not a host option: the store's open sets it from its snapshot.
    pub(crate) full_check_from_lsn: Lsn,
    /// Create the store in an existing directory that holds other files.
    /// Off by default: a store is created only in a missing or empty
    /// directory, and any other directory that is not already a store fails
    /// with [`Error::DirectoryNotEmpty`].
    pub create_in_nonempty_dir: bool,
    /// The storage to use (the real file system by default).
    pub storage: Arc<dyn Storage>,
    /// Tamper evidence (`docs/tamper.md`): a keyed chain over the frames
    /// and signed checkpoints. `None` by default. Chosen when the store is
    /// created: a tamper-evident store opens for writing only with its key,
    /// and a plain store never with one.
    pub tamper: Option<crate::tamper::TamperOptions>,
}

impl Default for LogOptions {
    fn default() -> LogOptions {
        LogOptions {
            durability: Durability::Group,
            segment_bytes_max: format::SEGMENT_BYTES_DEFAULT,
            salvage: false,
            full_check_from_lsn: 1,
            create_in_nonempty_dir: false,
            storage: Arc::new(FileSystem),
            tamper: None,
        }
    }
}

impl LogOptions {
    /// The defaults: [`Durability::Group`], segments of 64 MiB
    /// (`SEGMENT_BYTES_DEFAULT`), no salvage, only in a missing or empty directory, on the
    /// real file system.
    pub fn new() -> LogOptions {
        LogOptions::default()
    }

    /// Sets the default durability of appends (`append_with` overrides it
    /// per call).
    pub fn durability(mut self, durability: Durability) -> LogOptions {
        self.durability = durability;
        self
    }

    /// Sets the size segments roll at: from 4 KiB (`SEGMENT_BYTES_MIN`) to
    /// 1 GiB (`SEGMENT_BYTES_LIMIT`), checked on open
    /// ([`Error::InvalidOption`]).
    pub fn segment_bytes_max(mut self, segment_bytes_max: u64) -> LogOptions {
        self.segment_bytes_max = segment_bytes_max;
        self
    }

    /// Sets whether opening keeps what precedes damage (moving the rest into
    /// `quarantine/`) instead of failing.
    pub fn salvage(mut self, salvage: bool) -> LogOptions {
        self.salvage = salvage;
        self
    }

    /// Sets whether the store may be created in an existing directory that
    /// holds other files.
    pub fn create_in_nonempty_dir(mut self, create_in_nonempty_dir: bool) -> LogOptions {
        self.create_in_nonempty_dir = create_in_nonempty_dir;
        self
    }

    /// Makes the store tamper-evident with `tamper`'s key (at creation),
    /// or gives the key of a tamper-evident store (`docs/tamper.md`).
    pub fn tamper(mut self, tamper: crate::tamper::TamperOptions) -> LogOptions {
        self.tamper = Some(tamper);
        self
    }

    /// Sets the storage the log lives on (the real file system by default).
    pub fn storage(mut self, storage: Arc<dyn Storage>) -> LogOptions {
        self.storage = storage;
        self
    }

    fn check(&self) -> Result<()> {
        if !(format::SEGMENT_BYTES_MIN..=format::SEGMENT_BYTES_LIMIT)
            .contains(&self.segment_bytes_max)
        {
            return Err(Error::InvalidOption {
                option: "LogOptions::segment_bytes_max",
                reason: format!(
                    "it is {}; it must be between SEGMENT_BYTES_MIN ({}) and SEGMENT_BYTES_LIMIT ({})",
                    self.segment_bytes_max,
                    format::SEGMENT_BYTES_MIN,
                    format::SEGMENT_BYTES_LIMIT
                ),
            });
        }
        check_durability(self.durability)
    }
}

/// Fails for a durability that can never be valid (a zero interval).
fn check_durability(durability: Durability) -> Result<()> {
    match durability {
        Durability::Periodic(interval) if interval.is_zero() => Err(Error::InvalidOption {
            option: "durability",
            reason: "Durability::Periodic needs a non-zero interval".to_string(),
        }),
        _ => Ok(()),
    }
}

/// The writer of a store: the one handle that appends. Share it between
/// threads (`Arc<Log>`); appends from many threads form commit groups.
pub struct Log {
    writer: Arc<writer::Writer>,
    view: Arc<reader::SharedView>,
    report: RecoveryReport,
    durability: Durability,
    /// The periodic sync thread, once started.
    syncer: Mutex<Option<Syncer>>,
    /// Its interval in nanoseconds (0 while there is none): lets a
    /// `Periodic` append skip the mutex when the thread already runs at
    /// least as often as it asks.
    syncer_interval_nanos: AtomicU64,
    /// The LSN of the newest checkpoint published (serializes publishing,
    /// so an older checkpoint never replaces a newer one).
    last_checkpoint: Mutex<Option<Lsn>>,
    /// Serializes segment removal; true while a removal is not known to
    /// be durable (the directory fsync after it failed).
    removal_unsynced: Mutex<bool>,
    /// The store directory's lock, then the `LOCK` file's.
    _locks: [LockGuard; 2],
}

impl std::fmt::Debug for Log {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Log")
            .field("dir", &self.writer.dir())
            .field("next_lsn", &self.next_lsn())
            .finish_non_exhaustive()
    }
}

impl Log {
    /// Opens (or creates) the store at `dir` for writing.
    ///
    /// Creates `dir` if it is missing. Takes the store's lock
    /// (`Error::Locked` if another writer has it): an OS lock on the store
    /// directory itself, which no change to the files in it can release,
    /// and one on its `LOCK` file, which older convlog versions take. A
    /// directory that holds other files but no store is refused with
    /// `Error::DirectoryNotEmpty` (unless `create_in_nonempty_dir`). Then
    /// removes leftovers of interrupted segment creation, checks the sealed
    /// segments, and cuts a torn tail off the last one. Corruption fails with
    /// `Error::Corrupted` naming segment and offset, unless `salvage` is on.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log> {
        options.check()?;
        let dir = dir.as_ref().to_path_buf();
        if let Some(tamper) = &options.tamper {
            tamper.check(&dir)?;
        }
        let storage = Arc::clone(&options.storage);
        create_store_directory(storage.as_ref(), &dir)?;
        let directory_lock = take_lock(storage.as_ref(), &dir, &dir)?;
        // Checked under the directory's lock: no other convlog writer can be
        // creating a store here meanwhile.
        if !options.create_in_nonempty_dir {
            check_store_directory(storage.as_ref(), &dir)?;
        }
        let recovered = recovery::recover(
            storage.as_ref(),
            &dir,
            recovery::RecoveryOptions {
                salvage: options.salvage,
                full_check_from_lsn: options.full_check_from_lsn,
                keyed: options.tamper.is_some(),
            },
        )?;
        // `LOCK` (for older versions, which lock only it) is created once the
        // first segment is durable: a `LOCK` without segments then means the
        // log was deleted (`Error::LogMissing`), never an interrupted creation.
        let file_lock = take_lock(storage.as_ref(), &dir.join(LOCK_FILE_NAME), &dir)?;
        let next_lsn = recovered.report.next_lsn;
        let view = Arc::new(reader::SharedView::new(
            Arc::clone(&storage),
            recovered
                .sealed
                .iter()
                .map(|segment| (segment.first_lsn, segment.path.clone()))
                .collect(),
            recovered.active.first_lsn,
            recovered.active.path.clone(),
            Arc::clone(&recovered.active_file),
            recovered.active_bytes,
            next_lsn,
        ));
        let chain = match (&options.tamper, recovered.keyed) {
            (Some(tamper), true) => Some(crate::tamper::resume_head(
                storage.as_ref(),
                &dir,
                &recovered,
                &tamper.key,
            )?),
            (Some(_), false) => {
                return Err(Error::InvalidOption {
                    option: "LogOptions::tamper",
                    reason: format!(
                        "store {} was created without tamper evidence (its segments are format version {}); tamper evidence is chosen when a store is created: copy its events into a new store opened with the key",
                        dir.display(),
                        format::FORMAT_VERSION_PLAIN
                    ),
                })
            }
            (None, true) => {
                return Err(Error::InvalidOption {
                    option: "LogOptions::tamper",
                    reason: format!(
                        "store {} is tamper-evident (format version {}): only a writer with its key may append; open it with its tamper key file (`LogOptions::tamper`; on the command line `--tamper-key KEYFILE` or `CONVLOG_TAMPER_KEY_FILE`)",
                        dir.display(),
                        format::FORMAT_VERSION_KEYED
                    ),
                })
            }
            (None, false) => None,
        };
        let writer = Arc::new(writer::Writer::new(
            dir,
            options.clone(),
            &recovered,
            Arc::clone(&view),
            chain,
        ));
        let log = Log {
            writer,
            view,
            report: recovered.report,
            durability: options.durability,
            syncer: Mutex::new(None),
            syncer_interval_nanos: AtomicU64::new(0),
            last_checkpoint: Mutex::new(None),
            removal_unsynced: Mutex::new(false),
            _locks: [directory_lock, file_lock],
        };
        log.prepare(options.durability)?;
        Ok(log)
    }

    /// Appends events as one atomic batch with the log's default
    /// durability; returns their LSNs (consecutive, gap-free).
    pub fn append<P: AsRef<[u8]>>(&self, payloads: &[P]) -> Result<std::ops::Range<Lsn>> {
        self.append_with(payloads, self.default_durability())
    }

    /// Appends events as one atomic batch with the given durability.
    ///
    /// `Durability::Periodic` starts the periodic sync thread if it does not
    /// run yet, or makes it run more often if it runs at a longer interval;
    /// if the thread cannot start, nothing is appended and the error is
    /// returned.
    pub fn append_with<P: AsRef<[u8]>>(
        &self,
        payloads: &[P],
        durability: Durability,
    ) -> Result<std::ops::Range<Lsn>> {
        Ok(self.append_positioned(payloads, durability)?.0)
    }

    /// Appends events as one atomic batch; returns their LSNs and where the
    /// frame starts, for an index ([`LogReader::read_frame`] reads it back).
    pub(crate) fn append_positioned<P: AsRef<[u8]>>(
        &self,
        payloads: &[P],
        durability: Durability,
    ) -> Result<(std::ops::Range<Lsn>, Position)> {
        self.prepare(durability)?;
        let appended = self.writer.append(payloads, durability)?;
        self.checkpoint_if_due([&appended.0]);
        Ok(appended)
    }

    /// Appends each of `batches` as its own atomic batch, in order, and
    /// makes them all durable with one commit (one durable write when
    /// nothing written before waits for a sync); returns each batch's LSNs
    /// and where its frame starts, or the error that kept it out. A batch
    /// over the limits fails alone; after a failed write or sync, every
    /// batch that is not durable fails.
    pub(crate) fn append_batches_positioned<P: AsRef<[u8]>>(
        &self,
        batches: &[&[P]],
    ) -> Vec<Result<(std::ops::Range<Lsn>, Position)>> {
        let appended = self.writer.append_frames(batches);
        self.checkpoint_if_due(appended.iter().flatten().map(|(lsns, _)| lsns));
        appended
    }

    /// Signs a checkpoint when the events appended in `ranges` crossed a
    /// multiple of a tamper-evident log's `checkpoint_every_events`.
    fn checkpoint_if_due<'a>(&self, ranges: impl IntoIterator<Item = &'a std::ops::Range<Lsn>>) {
        let Some(every) = self
            .writer
            .tamper()
            .and_then(|tamper| tamper.checkpoint_every_events)
        else {
            return;
        };
        if ranges
            .into_iter()
            .any(|range| (range.start - 1) / every != (range.end - 1) / every)
        {
            // The events are appended whatever happens here: a failed
            // checkpoint is logged, and the next interval tries again.
            if let Err(error) = self.checkpoint() {
                tracing::warn!(store = %self.dir().display(), %error, "signing or publishing a tamper checkpoint failed");
            }
        }
    }

    /// Signs a checkpoint of a tamper-evident log (`docs/tamper.md`): makes
    /// everything appended so far durable, signs (store identity, last LSN,
    /// chain digest) with the key, writes it to
    /// [`TamperOptions::checkpoint_path`](crate::tamper::TamperOptions::checkpoint_path)
    /// and calls the host's callback. Fails with `Error::InvalidOption` for
    /// a log without tamper evidence.
    pub fn checkpoint(&self) -> Result<crate::tamper::Checkpoint> {
        let (Some(tamper), Some((lsn, digest))) = (self.writer.tamper(), self.writer.chain_head())
        else {
            return Err(Error::InvalidOption {
                option: "LogOptions::tamper",
                reason: format!(
                    "store {} is not tamper-evident: there is nothing to sign",
                    self.dir().display()
                ),
            });
        };
        self.writer.sync()?;
        let checkpoint = tamper.key.sign(self.writer.store_id(), lsn, digest);
        let mut last = self.last_checkpoint.lock();
        if last.is_some_and(|last| last > lsn) {
            // A newer checkpoint was published meanwhile.
            return Ok(checkpoint);
        }
        if let Some(path) = &tamper.checkpoint_path {
            checkpoint.publish(path)?;
        }
        *last = Some(lsn);
        if let Some(callback) = &tamper.on_checkpoint {
            callback(&checkpoint);
        }
        Ok(checkpoint)
    }

    /// Whether the log is tamper-evident (written with a key).
    pub fn is_tamper_evident(&self) -> bool {
        self.writer.tamper().is_some()
    }

    /// The durability appends get by default.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The interval of the periodic sync thread, if it runs: the shortest
    /// interval of `Durability::Periodic` asked for since the log opened.
    pub fn periodic_sync_interval(&self) -> Option<Duration> {
        self.syncer
            .lock()
            .as_ref()
            .map(|syncer| syncer.shared.state.lock().interval)
    }

    /// Checks `durability` and, for `Periodic`, makes sure the sync thread
    /// runs at least that often: starts it, or shortens its interval.
    fn prepare(&self, durability: Durability) -> Result<()> {
        check_durability(durability)?;
        let Durability::Periodic(interval) = durability else {
            return Ok(());
        };
        let nanos = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        let running = self.syncer_interval_nanos.load(Ordering::Acquire);
        if running != 0 && running <= nanos {
            return Ok(());
        }
        let mut syncer = self.syncer.lock();
        match syncer.as_ref() {
            Some(syncer) => {
                let mut state = syncer.shared.state.lock();
                if interval < state.interval {
                    state.interval = interval;
                    syncer.shared.wake.notify_all();
                }
            }
            None => {
                *syncer = Some(Syncer::start(
                    Arc::downgrade(&self.writer),
                    interval,
                    self.dir(),
                )?)
            }
        }
        self.syncer_interval_nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running == 0 || nanos < running).then_some(nanos)
            })
            .ok();
        Ok(())
    }

    /// Deletes every sealed segment whose events all precede `lsn` (a
    /// snapshot covers them). Returns the removed files. Readers that have
    /// a segment mapped keep reading it; new reads no longer find it.
    ///
    /// On failure the segments not removed stay in the log, and the next
    /// call removes them first: the log only ever starts later, it never
    /// has a hole.
    pub fn remove_segments_before(&self, lsn: Lsn) -> Result<Vec<std::path::PathBuf>> {
        let mut removal_unsynced = self.removal_unsynced.lock();
        let storage = self.writer.storage();
        let dir = self.dir();
        if *removal_unsynced {
            // A removal whose directory fsync failed may still be undone by
            // a crash; a later removal made durable without it would leave
            // a hole.
            storage
                .sync_dir(dir)
                .map_err(Error::io("fsync store directory", dir))?;
            *removal_unsynced = false;
        }
        let removable = self.view.take_sealed_before(lsn);
        // Oldest first, each removal made durable before the next: a crash
        // in between leaves a log that starts later, never one with a hole.
        for (index, (_, path)) in removable.iter().enumerate() {
            if let Err(error) = storage.remove_file(path) {
                self.view.restore_sealed(&removable[index..]);
                return Err(Error::io("remove compacted segment", path)(error));
            }
            if let Err(error) = storage.sync_dir(dir) {
                *removal_unsynced = true;
                self.view.restore_sealed(&removable[index + 1..]);
                return Err(Error::io("fsync store directory", dir)(error));
            }
        }
        Ok(removable.into_iter().map(|(_, path)| path).collect())
    }

    /// Makes every event appended so far durable.
    pub fn sync(&self) -> Result<()> {
        self.writer.sync()
    }

    /// The LSN the next appended event will get.
    pub fn next_lsn(&self) -> Lsn {
        self.writer.next_lsn()
    }

    /// Every event with an LSN below this one is durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.writer.durable_lsn()
    }

    /// After an I/O failure poisoned the writer: the LSN from which it took
    /// back what it had written but not made durable (events acknowledged
    /// under `Durability::None` among them). Every event at or after it is
    /// gone from the log; `None` while the writer is healthy.
    pub fn taken_back_from(&self) -> Option<Lsn> {
        self.writer.taken_back_from()
    }

    /// Whether an I/O failure has stopped the writer (reopen the store).
    pub fn is_poisoned(&self) -> bool {
        self.writer.is_poisoned()
    }

    /// What recovery did when this log was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// Counters of the writer's work since open.
    pub fn writer_stats(&self) -> WriterStats {
        self.writer.stats()
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        self.writer.dir()
    }

    /// A reader of this log that sees events as soon as they are written
    /// (before they are durable under `Group` or `Sync`).
    pub fn reader(&self) -> LogReader {
        LogReader::for_writer(Arc::clone(&self.view))
    }

    /// Iterates over events with LSN `lsn` and above.
    pub fn iter_from(&self, lsn: Lsn) -> LogIter {
        self.reader().iter_from(lsn)
    }

    /// One past the last event readers can see now.
    pub fn visible_next_lsn(&self) -> Lsn {
        self.view.visible_next_lsn()
    }

    fn default_durability(&self) -> Durability {
        self.durability
    }

    /// The first LSN still in the log (1 unless segments were removed).
    pub fn first_lsn(&self) -> Lsn {
        self.view.first_lsn()
    }
}

/// Creates the store directory (and missing parents) and makes each new
/// level's entry durable. The store directory's parent is fsynced on every
/// open, so an fsync that failed on an earlier open is retried.
fn create_store_directory(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let parent_of = |path: &Path| -> PathBuf {
        match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        }
    };
    let mut missing = Vec::new();
    let mut level = dir.to_path_buf();
    while !storage.exists(&level) {
        missing.push(level.clone());
        let parent = parent_of(&level);
        if parent == level || parent.as_os_str() == "." {
            break;
        }
        level = parent;
    }
    if !missing.is_empty() {
        storage
            .create_dir_all(dir)
            .map_err(Error::io("create store directory", dir))?;
    }
    // Parents of every created level, outermost first, then the store's own.
    let mut parents: Vec<PathBuf> = missing.iter().rev().map(|level| parent_of(level)).collect();
    let own_parent = parent_of(dir);
    if !parents.contains(&own_parent) {
        parents.push(own_parent);
    }
    for parent in parents {
        storage
            .sync_dir(&parent)
            .map_err(Error::io("fsync parent of store directory", &parent))?;
    }
    Ok(())
}

/// Takes the lock on `path` (the store directory or its `LOCK` file) for
/// the writer of the store at `dir`.
fn take_lock(storage: &dyn Storage, path: &Path, dir: &Path) -> Result<LockGuard> {
    storage.try_lock(path).map_err(|error| {
        if error.kind() == std::io::ErrorKind::WouldBlock {
            Error::Locked {
                path: dir.to_path_buf(),
            }
        } else {
            Error::io("lock store", path)(error)
        }
    })
}

/// Whether `name` is an entry a store directory holds (`docs/format.md`,
/// section 1): the lock file, a segment or a segment being created, the
/// poisoned marker, the snapshot or the quarantine directory.
fn is_store_entry(name: &str) -> bool {
    let segment_or_temporary = name.strip_suffix(segment::TEMPORARY_SUFFIX).unwrap_or(name);
    name == LOCK_FILE_NAME
        || name == recovery::POISONED_MARKER
        || name == recovery::QUARANTINE_DIR
        || name == crate::store::snapshot::SNAPSHOT_DIR
        || segment::parse_segment_file_name(segment_or_temporary).is_some()
}

/// Fails unless `dir` is empty or already holds a store: a store is never
/// created among unrelated files.
fn check_store_directory(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let mut names = storage
        .list_dir(dir)
        .map_err(Error::io("list store directory", dir))?;
    if names.is_empty() || names.iter().any(|name| is_store_entry(name)) {
        return Ok(());
    }
    names.sort();
    let total = names.len();
    names.truncate(DIRECTORY_ENTRIES_LISTED_MAX);
    Err(Error::DirectoryNotEmpty {
        path: dir.to_path_buf(),
        entries: names,
        total,
    })
}

/// The thread of `Durability::Periodic`: fsyncs the log every interval.
struct Syncer {
    shared: Arc<SyncerShared>,
    thread: Option<JoinHandle<()>>,
}

struct SyncerShared {
    state: Mutex<SyncerState>,
    wake: Condvar,
}

struct SyncerState {
    /// The shortest interval asked for so far.
    interval: Duration,
    stopped: bool,
}

impl Syncer {
    /// Starts the thread; an error if the system cannot start it.
    fn start(writer: Weak<writer::Writer>, interval: Duration, dir: &Path) -> Result<Syncer> {
        let shared = Arc::new(SyncerShared {
            state: Mutex::new(SyncerState {
                interval,
                stopped: false,
            }),
            wake: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("convlog-periodic-sync".to_string())
            .spawn(move || Syncer::run(&thread_shared, &writer))
            .map_err(Error::io("start the periodic sync thread of store", dir))?;
        Ok(Syncer {
            shared,
            thread: Some(thread),
        })
    }

    fn run(shared: &SyncerShared, writer: &Weak<writer::Writer>) {
        loop {
            {
                let mut state = shared.state.lock();
                let started = Instant::now();
                // Wait one interval; a shorter interval asked for meanwhile
                // takes effect at once.
                loop {
                    if state.stopped {
                        return;
                    }
                    match started.checked_add(state.interval) {
                        Some(due) if Instant::now() >= due => break,
                        Some(due) => {
                            shared.wake.wait_until(&mut state, due);
                        }
                        None => shared.wake.wait(&mut state),
                    }
                }
            }
            let Some(writer) = writer.upgrade() else {
                return;
            };
            if let Err(error) = writer.sync() {
                // A failed sync poisoned the writer: every later append and
                // sync returns that error, so nothing is acknowledged as if
                // this thread still ran.
                tracing::error!(error = %error, "periodic sync stopped");
                return;
            }
        }
    }

    fn stop(&mut self) {
        self.shared.state.lock().stopped = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        if let Some(mut syncer) = self.syncer.get_mut().take() {
            syncer.stop();
        }
        if !self.writer.is_poisoned() {
            // Best effort: appends under None or Periodic become durable on a
            // clean close, and the space allocated ahead of the frames is
            // given back. Errors here have no one left to report to.
            if self.writer.sync().is_ok() {
                if let Err(error) = self.writer.release_unused_space() {
                    tracing::warn!(error = %error, "could not cut the active segment's unused space on close");
                }
            }
        }
    }
}

/// Checks every frame of every segment of the store at `dir` without
/// changing it (no lock needed).
pub fn verify(dir: impl AsRef<Path>) -> Result<VerifyReport> {
    recovery::verify(&FileSystem, dir.as_ref())
}

#[cfg(test)]
mod tests {
    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::Log>();
        check::<super::LogReader>();
    }
}
