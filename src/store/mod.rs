//! The conversation store an agent host embeds: events in, slices out.
//!
//! A [`Store`] wraps the segment log. Appending a batch of [`Event`]s
//! validates each, encodes it (`crate::codec`), appends the batch as one
//! atomic frame, and indexes the frame under every conversation it touches.
//! The index holds 16 bytes per (conversation, frame): reading one
//! conversation reads only its frames and folds them, so its cost follows
//! that conversation's size, not the store's.
//!
//! Snapshots ([`Store::snapshot`]) write every conversation's folded slice
//! and every host slice at an LSN; opening then loads the newest good
//! snapshot's directory and replays only the log after it. Compaction
//! ([`Store::compact`]) may then delete the segments a snapshot covers, if
//! the retention policy allows (the default keeps the whole log for audit).
//!
//! [`Store::append_with`] with an [`Expect`] appends only if a conversation (or the store) is
//! still at the version the caller read ([`Expect`]), atomically against
//! every other append. [`Store::open_read_only`] reads a store beside its
//! writer (another process), following it, without writing anything.

mod append_options;
pub mod backup;
mod conditional;
mod read_only;
#[cfg(feature = "testing")]
pub mod snapshot;
#[cfg(not(feature = "testing"))]
pub(crate) mod snapshot;

use std::any::TypeId;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

use crate::codec;
use crate::conversation::ConversationSlice;
use crate::error::{Error, Result};
use crate::log::format::StoreId;
use crate::log::recovery::ChainAt;
use crate::log::{Durability, Log, LogOptions, LogReader, Lsn, Position, RecoveryReport};
use crate::model::Event;
use crate::reducer::{self, AnySlice, ErasedReducer, HostSlot, Observer, Reducer};
pub use append_options::AppendOptions;
pub use backup::{backup, BackupReport};
pub use conditional::Expect;
use read_only::Backend;
pub use read_only::READ_ONLY_RESTARTS_MAX;
use snapshot::LoadedSnapshot;

/// What compaction may delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retention {
    /// Keep every segment (the whole log stays auditable). The default.
    #[default]
    KeepAll,
    /// Delete segments whose events the newest snapshot covers.
    DeleteCoveredBySnapshot,
}

/// Options for opening a [`Store`]: a builder, so a new option never breaks
/// a host.
///
/// Start from [`StoreOptions::new`] (the defaults) and chain a setter per
/// option; each setter is named as the field it sets. The fields stay public
/// for reading (`options.retention`, `options.log.durability`). The log's
/// common settings are set here directly; the rest through
/// [`StoreOptions::log`].
///
/// ```
/// use convlog::store::{Retention, Store, StoreOptions};
/// use convlog::Durability;
///
/// # fn main() -> convlog::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let options = StoreOptions::new()
///     .durability(Durability::Sync)
///     .segment_bytes_max(1 << 20)
///     .snapshot_every_events(Some(10_000))
///     .retention(Retention::DeleteCoveredBySnapshot);
/// let store = Store::open(dir.path(), options)?;
/// assert_eq!(store.log().durability(), Durability::Sync);
/// # Ok(()) }
/// ```
///
/// The struct is `#[non_exhaustive]`: outside convlog it cannot be written
/// as a struct literal, so adding an option is not a breaking change.
///
/// ```compile_fail,E0639
/// let options = convlog::StoreOptions {
///     snapshots_kept: 3,
///     ..convlog::StoreOptions::default()
/// };
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Options of the underlying log (durability, segment size, storage).
    pub log: LogOptions,
    /// Take a snapshot after this many events since the last one (checked
    /// after each append; the append that crosses it wakes the store's
    /// background snapshot thread and returns without waiting for it).
    pub snapshot_every_events: Option<u64>,
    /// Take a snapshot after this many payload bytes since the last one.
    pub snapshot_every_bytes: Option<u64>,
    /// What [`Store::compact`] may delete.
    pub retention: Retention,
    /// How many snapshot files to keep (the newest ones; at least 1).
    pub snapshots_kept: usize,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            log: LogOptions::default(),
            snapshot_every_events: None,
            snapshot_every_bytes: None,
            retention: Retention::KeepAll,
            snapshots_kept: 2,
        }
    }
}

impl StoreOptions {
    /// The defaults: the log's defaults ([`LogOptions::new`]), no automatic
    /// snapshot, [`Retention::KeepAll`], 2 snapshots kept.
    pub fn new() -> StoreOptions {
        StoreOptions::default()
    }

    /// Sets every option of the underlying log at once (replacing what the
    /// log setters below set before: call it first).
    pub fn log(mut self, log: LogOptions) -> StoreOptions {
        self.log = log;
        self
    }

    /// Sets the default durability of appends ([`LogOptions::durability`]).
    pub fn durability(mut self, durability: Durability) -> StoreOptions {
        self.log.durability = durability;
        self
    }

    /// Sets the size segments roll at ([`LogOptions::segment_bytes_max`]).
    pub fn segment_bytes_max(mut self, segment_bytes_max: u64) -> StoreOptions {
        self.log.segment_bytes_max = segment_bytes_max;
        self
    }

    /// Sets the storage the store lives on ([`LogOptions::storage`]).
    pub fn storage(mut self, storage: Arc<dyn crate::storage::Storage>) -> StoreOptions {
        self.log.storage = storage;
        self
    }

    /// Sets how long a group commit waits for more appenders
    /// ([`LogOptions::group_commit_delay`]).
    pub fn group_commit_delay(
        mut self,
        group_commit_delay: Option<std::time::Duration>,
    ) -> StoreOptions {
        self.log.group_commit_delay = group_commit_delay;
        self
    }

    /// Sets whether opening keeps what precedes damage instead of failing
    /// ([`LogOptions::salvage`]).
    pub fn salvage(mut self, salvage: bool) -> StoreOptions {
        self.log.salvage = salvage;
        self
    }

    /// Sets whether the store may be created in a directory holding other
    /// files ([`LogOptions::create_in_nonempty_dir`]).
    pub fn create_in_nonempty_dir(mut self, create_in_nonempty_dir: bool) -> StoreOptions {
        self.log.create_in_nonempty_dir = create_in_nonempty_dir;
        self
    }

    /// Sets after how many events since the last snapshot a snapshot is
    /// taken automatically (`None`: never by count).
    pub fn snapshot_every_events(mut self, snapshot_every_events: Option<u64>) -> StoreOptions {
        self.snapshot_every_events = snapshot_every_events;
        self
    }

    /// Sets after how many payload bytes since the last snapshot a snapshot
    /// is taken automatically (`None`: never by size).
    pub fn snapshot_every_bytes(mut self, snapshot_every_bytes: Option<u64>) -> StoreOptions {
        self.snapshot_every_bytes = snapshot_every_bytes;
        self
    }

    /// Sets what [`Store::compact`] may delete.
    pub fn retention(mut self, retention: Retention) -> StoreOptions {
        self.retention = retention;
        self
    }

    /// Sets how many snapshot files to keep (the newest; 0 counts as 1).
    pub fn snapshots_kept(mut self, snapshots_kept: usize) -> StoreOptions {
        self.snapshots_kept = snapshots_kept;
        self
    }
}

/// Opens a store with host reducers registered.
pub struct StoreBuilder {
    dir: PathBuf,
    options: StoreOptions,
    reducers: Vec<(TypeId, Box<dyn ErasedReducer>)>,
}

impl StoreBuilder {
    /// A builder for the store at `dir`.
    pub fn new(dir: impl AsRef<Path>) -> StoreBuilder {
        StoreBuilder {
            dir: dir.as_ref().to_path_buf(),
            options: StoreOptions::default(),
            reducers: Vec::new(),
        }
    }

    /// Sets the options.
    pub fn options(mut self, options: StoreOptions) -> StoreBuilder {
        self.options = options;
        self
    }

    /// Registers a host reducer; its slice is folded from every event.
    pub fn reducer<R: Reducer>(mut self, reducer: R) -> StoreBuilder {
        self.reducers
            .push((TypeId::of::<R>(), reducer::erase(reducer)));
        self
    }

    /// Opens (or creates) the store.
    pub fn open(self) -> Result<Store> {
        Store::open_with(self.dir, self.options, self.reducers)
    }

    /// Opens the store read-only, beside its writer, with the host reducers
    /// folded as it follows the writer ([`Store::open_read_only`]).
    pub fn open_read_only(self) -> Result<Store> {
        Store::open_read_only_with(self.dir, self.options, self.reducers)
    }
}

/// What opening the store did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// What log recovery did.
    pub recovery: RecoveryReport,
    /// The snapshot opening started from, and its LSN.
    pub snapshot: Option<(PathBuf, Lsn)>,
    /// Snapshots that were damaged or unusable, and why (skipped).
    pub skipped_snapshots: Vec<(PathBuf, String)>,
    /// Events replayed from the log after the snapshot.
    pub replayed_events: u64,
}

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
struct IndexEntry {
    /// LSN of the conversation's first event in the frame.
    lsn: Lsn,
    /// Segment ordinal (high 24 bits) and byte offset (low 40 bits).
    packed: u64,
}

const OFFSET_BITS: u32 = 40;

struct State {
    snapshot: Option<Arc<LoadedSnapshot>>,
    index: HashMap<String, Vec<IndexEntry>>,
    /// First LSN of every segment ever indexed, in order (ordinal = position).
    segments: Vec<Lsn>,
    events_since_snapshot: u64,
    bytes_since_snapshot: u64,
}

impl State {
    fn pack(&mut self, position: Position) -> u64 {
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

    fn unpack(&self, packed: u64) -> Position {
        Position {
            segment: self.segments[(packed >> OFFSET_BITS) as usize],
            offset: packed & ((1 << OFFSET_BITS) - 1),
        }
    }

    /// Records that the frame at `position` holds events of these conversations.
    fn index_frame(&mut self, events: &[(Lsn, &Event)], position: Position) {
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

/// Host slices, folded strictly in LSN order.
struct Ordered {
    next_lsn: Lsn,
    pending: BTreeMap<Lsn, Vec<Event>>,
    hosts: Vec<(TypeId, HostSlot)>,
    /// Set when the host slices stopped being folded (the store's host
    /// poison says why); nothing more is folded or observed.
    stopped: bool,
}

impl Ordered {
    /// Folds every batch that is next in LSN order into the host slices, and
    /// queues the observer notifications in `notes`. A panicking reducer
    /// stops all folding and is returned.
    fn push(
        &mut self,
        first_lsn: Lsn,
        events: Vec<Event>,
        notes: &mut Vec<Notification>,
    ) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.pending.insert(first_lsn, events);
        let observed = self
            .hosts
            .iter()
            .any(|(_, slot)| !slot.observers.is_empty());
        while let Some(events) = self.pending.remove(&self.next_lsn) {
            for event in events {
                let lsn = self.next_lsn;
                // Shared with the notifications only when someone observes.
                let (shared, owned) = if observed {
                    (Some(Arc::new(event)), None)
                } else {
                    (None, Some(event))
                };
                let event: &Event = match (&shared, &owned) {
                    (Some(shared), _) => shared,
                    (None, owned) => owned.as_ref().expect("one of the two is set"),
                };
                for (_, slot) in &mut self.hosts {
                    if let Err(error) = slot.apply(event, lsn) {
                        self.stopped = true;
                        self.pending.clear();
                        return Err(error);
                    }
                    if let (Some(shared), false) = (&shared, slot.observers.is_empty()) {
                        notes.push(Notification {
                            reducer: Arc::clone(&slot.name),
                            slice: Arc::clone(&slot.slice),
                            event: Arc::clone(shared),
                            lsn,
                            observers: Arc::clone(&slot.observers),
                        });
                    }
                }
                self.next_lsn += 1;
            }
        }
        Ok(())
    }
}

/// One folded event for the observers of one reducer: the slice as it was
/// right after the event (shared copy-on-write with the live slice).
struct Notification {
    reducer: Arc<str>,
    slice: Arc<AnySlice>,
    event: Arc<Event>,
    lsn: Lsn,
    observers: Arc<Vec<Observer>>,
}

/// Observer notifications waiting to run, in LSN order. One thread at a
/// time runs them (`running`), with no store lock held.
#[derive(Default)]
struct Dispatch {
    queue: VecDeque<Notification>,
    running: bool,
}

/// Why the store stopped serving host slices.
#[derive(Debug, Clone)]
enum HostPoison {
    /// A reducer or an observer panicked: appends are refused too.
    Panicked {
        reducer: String,
        observer: bool,
        lsn: Lsn,
        message: String,
    },
    /// The poisoned writer took back events from this LSN on, after the
    /// host slices had folded some of them.
    TakenBack { from_lsn: Lsn },
}

/// The automatic snapshots' thread and what it reports.
#[derive(Default)]
struct Background {
    /// An append crossed a threshold: a snapshot is due.
    requested: bool,
    /// A snapshot is being written.
    running: bool,
    /// The store is being dropped.
    stop: bool,
    /// Automatic snapshots written and failed since open.
    written: u64,
    failed: u64,
    /// Why the most recent automatic snapshot failed (cleared when one succeeds).
    last_error: Option<String>,
}

/// Read-only access to a store's log: positions, durability, readers.
///
/// What [`Store::log`] gives hosts. It has nothing that appends: every event
/// goes through [`Store::append`], which indexes it and folds it into the
/// host slices. An event appended beside the store would reach neither.
///
/// ```compile_fail,E0599
/// # let dir = tempfile::tempdir().unwrap();
/// let store = convlog::Store::open(dir.path(), convlog::StoreOptions::default()).unwrap();
/// store.log().append(b"not an event"); // no such method: the view cannot append
/// ```
#[derive(Clone, Copy)]
pub struct LogView<'a> {
    log: &'a Backend,
}

impl std::fmt::Debug for LogView<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.log.fmt(formatter)
    }
}

impl LogView<'_> {
    /// The store directory.
    pub fn dir(&self) -> &Path {
        self.log.dir()
    }

    /// The first LSN still in the log (1 unless segments were removed).
    pub fn first_lsn(&self) -> Lsn {
        self.log.first_lsn()
    }

    /// The LSN the next appended event will get. For a read-only store:
    /// one past the last event it has read (see [`Store::refresh`]).
    pub fn next_lsn(&self) -> Lsn {
        self.log.next_lsn()
    }

    /// Every event with an LSN below this one is durable. A read-only
    /// store cannot tell: it reports what it has read.
    pub fn durable_lsn(&self) -> Lsn {
        self.log.durable_lsn()
    }

    /// One past the last event readers can see now.
    pub fn visible_next_lsn(&self) -> Lsn {
        self.log.visible_next_lsn()
    }

    /// Whether an I/O failure has stopped the writer (reopen the store).
    pub fn is_poisoned(&self) -> bool {
        self.log.is_poisoned()
    }

    /// The durability appends get by default.
    pub fn durability(&self) -> Durability {
        self.log.durability()
    }

    /// What recovery did when the store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        self.log.recovery_report()
    }

    /// Counters of the writer's work since open.
    pub fn writer_stats(&self) -> crate::log::WriterStats {
        self.log.writer_stats()
    }

    /// A reader of the log that sees events as soon as they are written.
    pub fn reader(&self) -> LogReader {
        self.log.reader()
    }

    /// Iterates over events with LSN `lsn` and above.
    pub fn iter_from(&self, lsn: Lsn) -> crate::log::LogIter {
        self.log.reader().iter_from(lsn)
    }
}

/// The conversation store. Share it between threads (`Arc<Store>`).
///
/// ```
/// use convlog::model::{ConversationEntry, Role};
/// use convlog::{Store, StoreOptions};
///
/// # fn main() -> convlog::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path(), StoreOptions::default())?;
/// let question = ConversationEntry::new("eval-1", 1, Role::User, Some("Weather in Oslo?".into()));
/// store.append(&[question.recorded_in("ctx_123")])?; // durable when it returns
///
/// let conversation = store.conversation("ctx_123")?; // reads only this conversation
/// assert_eq!(conversation.len(), 1);
/// assert_eq!(conversation.latest_evaluation(), Some("eval-1"));
/// store.snapshot()?; // the next open replays only what comes after
/// # Ok(()) }
/// ```
pub struct Store {
    core: Arc<StoreCore>,
    /// Writes automatic snapshots (only with a snapshot threshold set).
    snapshot_thread: Option<JoinHandle<()>>,
}

/// The state of a [`Store`], shared with its background snapshot thread.
/// Not for hosts: it has no public methods or fields.
#[doc(hidden)]
pub struct StoreCore {
    log: Backend,
    reader: LogReader,
    options: StoreOptions,
    state: RwLock<State>,
    ordered: Mutex<Ordered>,
    snapshotting: Mutex<()>,
    /// Held shared while a conversation's frames are read, exclusively
    /// while compaction deletes segments: a read never loses its frames
    /// between finding and reading them.
    compacting: RwLock<()>,
    open_report: OpenReport,
    /// Observer notifications, run after the ordering lock is released.
    dispatch: Mutex<Dispatch>,
    /// Set once, when host slices stop being served.
    host_poison: OnceLock<HostPoison>,
    /// The LSN from which the writer's take-back has been forgotten by the
    /// index and host slices (0: none yet).
    forgotten_from: AtomicU64,
    background: Mutex<Background>,
    background_changed: Condvar,
    /// Held shared by every append from before its LSNs are assigned until
    /// it is indexed; exclusively by an append that expects the store's
    /// next LSN ([`Expect::Store`]), which so sees no append in flight.
    appending: RwLock<()>,
    /// Per-conversation locks (by hash of the id), held like `appending`:
    /// shared by each append touching the conversation, exclusively by one
    /// that expects its version ([`Expect::Conversation`]).
    stripes: Vec<RwLock<()>>,
}

/// How many locks order conditional appends per conversation (by hash).
const APPEND_STRIPES: usize = 64;

#[doc(hidden)]
impl std::ops::Deref for Store {
    type Target = StoreCore;

    fn deref(&self) -> &StoreCore {
        &self.core
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(thread) = self.snapshot_thread.take() {
            // A snapshot being written is finished; one only requested is not.
            self.background.lock().stop = true;
            self.background_changed.notify_all();
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Store")
            .field("dir", &self.log.dir())
            .field("next_lsn", &self.log.next_lsn())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (or creates) the store at `dir` with no host reducers.
    pub fn open(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        Store::open_with(dir.as_ref().to_path_buf(), options, Vec::new())
    }

    fn open_with(
        dir: PathBuf,
        options: StoreOptions,
        reducers: Vec<(TypeId, Box<dyn ErasedReducer>)>,
    ) -> Result<Store> {
        let storage = Arc::clone(&options.log.storage);
        let mut report = OpenReport::default();
        // A snapshot whose rename was never made durable (its writer failed
        // or died at the last step) is still used below, and compaction may
        // then delete what it covers: make its name durable first.
        let snapshots = dir.join(snapshot::SNAPSHOT_DIR);
        if storage.exists(&snapshots) {
            storage
                .sync_dir(&snapshots)
                .map_err(Error::io("fsync snapshot directory", &snapshots))?;
        }
        let candidates = load_candidates(storage.as_ref(), &dir, &mut report)?;
        // Sealed segments the newest snapshot covers are checked by header
        // (and link) only; recovery also reads the log's chain value at its
        // LSN, which the snapshot must carry.
        let full_check_from_lsn = candidates.first().map_or(1, |loaded| loaded.lsn);
        let log = Log::open(
            &dir,
            LogOptions {
                full_check_from_lsn,
                ..options.log.clone()
            },
        )?;
        // Leftovers of snapshots a crash interrupted (the lock is held now,
        // so no live writer owns them).
        if storage.exists(&snapshots) {
            let names = storage
                .list_dir(&snapshots)
                .map_err(Error::io("list snapshot directory", &snapshots))?;
            for name in names.iter().filter(|name| name.ends_with(".snap.tmp")) {
                let leftover = snapshots.join(name);
                storage
                    .remove_file(&leftover)
                    .map_err(Error::io("remove leftover snapshot", &leftover))?;
            }
        }
        report.recovery = log.recovery_report().clone();
        let next_lsn = log.next_lsn();
        let span = LogSpan {
            store_id: report.recovery.store_id,
            first_lsn: log.first_lsn(),
            next_lsn,
            known_chain: report
                .recovery
                .chain_before_full_check
                .map(|chain| (full_check_from_lsn, chain)),
        };
        let hosts = reducers
            .into_iter()
            .map(|(type_id, reducer)| (type_id, HostSlot::new(reducer)))
            .collect();
        let start = Start::choose(
            storage.as_ref(),
            &dir,
            candidates,
            &span,
            hosts,
            &mut report,
        )?;
        let reader = log.reader();
        let mut tail = reader.iter_from(start.replay_from);
        let (state, hosts) = start.replay(&mut tail, &mut report)?;
        let core = StoreCore::new(
            Backend::Writer(log),
            reader,
            options,
            state,
            Ordered {
                next_lsn,
                pending: BTreeMap::new(),
                hosts,
                stopped: false,
            },
            report,
        );
        Store::start(core)
    }

    /// Starts the background snapshot thread when a threshold is set.
    fn start(core: StoreCore) -> Result<Store> {
        let core = Arc::new(core);
        let automatic = core.options.snapshot_every_events.is_some()
            || core.options.snapshot_every_bytes.is_some();
        let snapshot_thread = if automatic {
            let thread_core = Arc::clone(&core);
            let thread = std::thread::Builder::new()
                .name("convlog-snapshot".to_string())
                .spawn(move || thread_core.run_snapshots())
                .map_err(Error::io("start the snapshot thread of", core.log.dir()))?;
            Some(thread)
        } else {
            None
        };
        Ok(Store {
            core,
            snapshot_thread,
        })
    }

    /// Appends events as one atomic batch with the store's durability;
    /// returns their LSNs. Every event is validated first: on a bad one
    /// nothing is appended and the error names the event and field.
    ///
    /// Shorthand for [`Store::append_with`] with [`AppendOptions::new`].
    pub fn append(&self, events: &[Event]) -> Result<Range<Lsn>> {
        self.append_with(events, AppendOptions::new())
    }

    /// Appends events as one atomic batch, like [`Store::append`], with
    /// per-call settings: a durability other than the store's, and a
    /// condition ([`Expect`]).
    ///
    /// With a condition, the batch is appended only if the conversation
    /// (or the store) is still at the version it names; otherwise nothing
    /// is appended and the error is [`Error::Conflict`], naming the
    /// expected and the actual version. The check and the append are
    /// atomic against every other append of the store, conditional or not:
    /// none can come between them. Checking a conversation costs a read of
    /// it (like [`Store::conversation`]), and appends to that conversation
    /// wait meanwhile; other conversations' appends go on.
    /// [`Expect::Store`] waits for every append in flight and holds all
    /// others until it is written.
    ///
    /// ```
    /// use convlog::model::ConversationEntry;
    /// use convlog::{AppendOptions, Error, Expect, Store, StoreOptions};
    ///
    /// # fn main() -> convlog::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), StoreOptions::default())?;
    /// store.append(&[ConversationEntry::user("eval-1", 0, "Hello").recorded_in("ctx")])?;
    ///
    /// // Read, decide, append only if nobody appended meanwhile.
    /// let read = store.conversation("ctx")?;
    /// let unchanged = || AppendOptions::new().expect(Expect::conversation("ctx", read.last_lsn()));
    /// let answer = ConversationEntry::assistant("eval-1", 1, "Hi!");
    /// store.append_with(&[answer.recorded_in("ctx")], unchanged())?;
    ///
    /// // The version read before that append is stale now.
    /// let late = ConversationEntry::assistant("eval-1", 1, "Hey");
    /// match store.append_with(&[late.recorded_in("ctx")], unchanged()) {
    ///     Err(Error::Conflict { expected, actual, .. }) => assert_eq!((expected, actual), (1, 2)),
    ///     other => panic!("expected a conflict, got {other:?}"),
    /// }
    /// assert_eq!(store.conversation("ctx")?.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn append_with(&self, events: &[Event], options: AppendOptions) -> Result<Range<Lsn>> {
        let durability = options.durability.unwrap_or_else(|| self.log.durability());
        self.append_checked(events.to_vec(), durability, options.expect.as_ref())
    }

    fn append_checked(
        &self,
        events: Vec<Event>,
        durability: Durability,
        expect: Option<&Expect>,
    ) -> Result<Range<Lsn>> {
        let log = self.log.writer("append")?;
        if events.is_empty() {
            return Err(Error::EmptyBatch);
        }
        for (index, event) in events.iter().enumerate() {
            event
                .validate()
                .map_err(|field| Error::InvalidEvent { index, field })?;
        }
        self.forget_taken_back();
        if let Some(HostPoison::Panicked { .. }) = self.host_poison.get() {
            return Err(self.host_poison_error());
        }
        let payloads: Vec<Vec<u8>> = events.iter().map(codec::encode_event).collect();
        // Held until the batch is indexed: see `conditional`.
        let order = self.order_append(&events, expect)?;
        let (lsns, position) = log.append_positioned(&payloads, durability)?;
        let bytes: u64 = payloads.iter().map(|payload| payload.len() as u64).sum();
        let due = {
            let mut state = self.state.write();
            if self.taken_back(lsns.start) {
                // A failed fsync took the batch back right after the writer
                // acknowledged it (`Durability::None`): it is not in the log.
                drop(state);
                self.forget_taken_back();
                return Err(self.writer_error());
            }
            let numbered: Vec<(Lsn, &Event)> = (lsns.start..).zip(events.iter()).collect();
            state.index_frame(&numbered, position);
            state.events_since_snapshot += events.len() as u64;
            state.bytes_since_snapshot += bytes;
            self.options
                .snapshot_every_events
                .is_some_and(|every| state.events_since_snapshot >= every)
                || self
                    .options
                    .snapshot_every_bytes
                    .is_some_and(|every| state.bytes_since_snapshot >= every)
        };
        drop(order);
        let folded = {
            let mut ordered = self.ordered.lock();
            // Checked under the ordering lock: a take-back forgotten before
            // this point must not be folded after it.
            if self.taken_back(lsns.start) {
                Ok(())
            } else {
                let mut notes = Vec::new();
                let folded = ordered.push(lsns.start, events, &mut notes);
                if !notes.is_empty() {
                    self.dispatch.lock().queue.extend(notes);
                }
                folded
            }
        };
        if let Err(error) = folded {
            // The batch is committed: the append reports its LSNs (a caller
            // would retry and record it twice); the next append and every
            // host slice read report the panic.
            self.poison_hosts(error);
        }
        // Observers run here, after the ordering lock is released.
        self.dispatch_observers();
        if due {
            // The batch is committed whatever happens to the snapshot, which
            // the background thread writes; this append does not wait for it.
            self.request_snapshot();
        }
        Ok(lsns)
    }

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
    }

    /// Every conversation id, sorted.
    pub fn conversation_ids(&self) -> Vec<String> {
        self.follow_quietly();
        self.core.conversation_ids()
    }
}

impl StoreCore {
    fn conversation_ids(&self) -> Vec<String> {
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
        ids
    }

    /// Folds a conversation from its snapshot slice and its indexed frames,
    /// taking only events below `below_lsn` when given. `None` when the
    /// conversation has neither.
    fn fold_conversation(
        &self,
        conversation_id: &str,
        below_lsn: Option<Lsn>,
    ) -> Result<Option<ConversationSlice>> {
        self.forget_taken_back();
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
        let mut slice = match &snapshot {
            Some(loaded) => match loaded.read_blob(conversation_id) {
                Ok(Some(blob)) => Some(codec::decode_value::<ConversationSlice>(&blob).map_err(|reason| {
                    Error::SnapshotDamaged {
                        path: loaded.path.clone(),
                        reason: format!("the slice of conversation {conversation_id:?} does not decode: {reason}"),
                    }
                })),
                Ok(None) => None,
                Err(error) => Some(Err(error)),
            },
            None => None,
        };
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
        for (frame_lsn, position) in positions.into_iter().filter(|(lsn, _)| *lsn < limit) {
            let records = match self.reader.read_frame(position) {
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
                let event = codec::decode_event(&record.payload).map_err(|reason| {
                    Error::UndecodableEvent {
                        lsn: record.lsn,
                        reason,
                    }
                })?;
                slice.apply(&event, record.lsn);
            }
        }
        Ok(Some(slice))
    }

    /// Folds a conversation by reading the whole log (the fallback when its
    /// snapshot slice is damaged).
    fn fold_from_log(
        &self,
        conversation_id: &str,
        below_lsn: Option<Lsn>,
    ) -> Result<Option<ConversationSlice>> {
        let mut slice = ConversationSlice::new(conversation_id);
        let limit = below_lsn.unwrap_or(Lsn::MAX);
        let mut found = false;
        for record in self.reader.iter_from(1) {
            let record = record?;
            if record.lsn >= limit || record.lsn >= self.log.visible_next_lsn() {
                break;
            }
            let event =
                codec::decode_event(&record.payload).map_err(|reason| Error::UndecodableEvent {
                    lsn: record.lsn,
                    reason,
                })?;
            if event.conversation_id() == Some(conversation_id) {
                found = true;
                slice.apply(&event, record.lsn);
            }
        }
        Ok(found.then_some(slice))
    }
}

impl Store {
    /// A copy of host reducer `R`'s slice, with every event folded that is
    /// next in LSN order. Panics if `R` was not registered.
    ///
    /// Fails with [`Error::ReducerPanicked`] once a reducer or observer has
    /// panicked, and with [`Error::Poisoned`] once a failed fsync took back
    /// events the host slices had folded: the slices are then no longer
    /// what the log holds (reopen the store to rebuild them).
    pub fn slice<R: Reducer>(&self) -> Result<R::Slice> {
        self.follow_read(|| Ok(()))?;
        self.forget_taken_back();
        let ordered = self.ordered.lock();
        if self.host_poison.get().is_some() {
            drop(ordered);
            return Err(self.host_poison_error());
        }
        let (_, slot) = ordered
            .hosts
            .iter()
            .find(|(type_id, _)| *type_id == TypeId::of::<R>())
            .expect("reducer was registered with StoreBuilder::reducer");
        Ok(slot
            .slice
            .downcast_ref::<R::Slice>()
            .expect("a host slot holds its reducer's slice type")
            .clone())
    }

    /// Calls `observer` after every event folded into `R`'s slice from now
    /// on, in LSN order, with the slice as it was right after that event.
    /// Panics if `R` was not registered.
    ///
    /// Observers run after the store's locks are released, on the thread of
    /// an appender (usually the one whose append folded the event; when
    /// appenders race, one of them runs every pending notification before
    /// its append returns). The observers of a store never run
    /// concurrently. An observer may call back into the store (`slice`,
    /// `conversation`, even `append`: the events it appends are observed
    /// after it returns). A panicking observer poisons the store like a
    /// panicking reducer ([`Error::ReducerPanicked`]).
    pub fn observe<R: Reducer>(
        &self,
        observer: impl Fn(&R::Slice, &Event, Lsn) + Send + Sync + 'static,
    ) {
        let mut ordered = self.ordered.lock();
        let (_, slot) = ordered
            .hosts
            .iter_mut()
            .find(|(type_id, _)| *type_id == TypeId::of::<R>())
            .expect("reducer was registered with StoreBuilder::reducer");
        let observer: Observer = Arc::new(move |slice: &AnySlice, event: &Event, lsn: Lsn| {
            let slice = slice
                .downcast_ref::<R::Slice>()
                .expect("a host slot holds its reducer's slice type");
            observer(slice, event, lsn);
        });
        let mut observers = Vec::clone(&slot.observers);
        observers.push(observer);
        slot.observers = Arc::new(observers);
    }

    /// Writes a snapshot of every slice at the current end of the log.
    pub fn snapshot(&self) -> Result<SnapshotInfo> {
        self.core.snapshot()
    }
}

impl StoreCore {
    fn snapshot(&self) -> Result<SnapshotInfo> {
        let guard = self.snapshotting.lock();
        self.snapshot_locked(guard)
    }

    fn snapshot_locked(&self, _guard: parking_lot::MutexGuard<'_, ()>) -> Result<SnapshotInfo> {
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
                    conversations += 1;
                    Some(
                        codec::encode_value(&slice)
                            .map(|blob| (id.clone(), blob))
                            .map_err(|reason| Error::SnapshotWrite {
                                path: self
                                    .log
                                    .dir()
                                    .join(snapshot::SNAPSHOT_DIR)
                                    .join(snapshot::snapshot_file_name(lsn)),
                                reason: format!(
                                    "the slice of conversation {id:?} does not encode: {reason}"
                                ),
                            }),
                    )
                }
                Ok(_) => None,
                Err(error) => Some(Err(error)),
            });
        let storage = Arc::clone(&self.options.log.storage);
        let binding = self.binding_at(storage.as_ref(), lsn)?;
        let path = snapshot::write(
            storage.as_ref(),
            self.log.dir(),
            lsn,
            binding,
            blobs,
            host_slices,
        )?;
        let loaded = Arc::new(snapshot::load(storage.as_ref(), &path)?);
        {
            let mut state = self.state.write();
            state.snapshot = Some(Arc::clone(&loaded));
            for entries in state.index.values_mut() {
                entries.retain(|entry| entry.lsn >= lsn);
            }
            state.index.retain(|_, entries| !entries.is_empty());
            state.events_since_snapshot = 0;
            state.bytes_since_snapshot = 0;
        }
        self.remove_old_snapshots(storage.as_ref())?;
        Ok(SnapshotInfo {
            path,
            lsn,
            conversations,
        })
    }

    fn remove_old_snapshots(&self, storage: &dyn crate::storage::Storage) -> Result<()> {
        let all = snapshot::list(storage, self.log.dir())?;
        for (_, path) in all.iter().skip(self.options.snapshots_kept) {
            storage
                .remove_file(path)
                .map_err(Error::io("remove old snapshot", path))?;
        }
        Ok(())
    }
}

impl Store {
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
        let removed = {
            let _no_reads = self.compacting.write();
            // Never delete on the word of a snapshot not checked against the
            // log as it is now (its files may have changed under the store).
            let storage = Arc::clone(&self.options.log.storage);
            snapshot::check_against_log(
                storage.as_ref(),
                self.log.dir(),
                &loaded,
                &self.open_report.recovery.store_id,
                None,
            )
            .map_err(|mismatch| Error::CompactionRefused {
                store: self.log.dir().to_path_buf(),
                snapshot: loaded.path.clone(),
                reason: mismatch.to_string(),
            })?;
            log.remove_segments_before(lsn)?
        };
        let note = removed
            .is_empty()
            .then(|| format!("no sealed segment lies wholly before the snapshot at LSN {lsn}"));
        Ok(CompactReport { removed, note })
    }

    /// Makes every event appended so far durable.
    pub fn sync(&self) -> Result<()> {
        self.log.sync()
    }

    /// What opening the store did.
    pub fn open_report(&self) -> &OpenReport {
        &self.open_report
    }

    /// Read-only access to the underlying log (positions, durability,
    /// readers). Events are appended only through [`Store::append`].
    pub fn log(&self) -> LogView<'_> {
        LogView { log: &self.log }
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

    /// Whether host slices are served and appends accepted: the error a
    /// panicking reducer or observer, or a poisoned writer, left behind.
    pub fn health(&self) -> Result<()> {
        self.forget_taken_back();
        if self.host_poison.get().is_some() {
            return Err(self.host_poison_error());
        }
        if self.log.is_poisoned() {
            return Err(self.writer_error());
        }
        Ok(())
    }

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

impl StoreCore {
    /// Whether the poisoned writer took back the event at `lsn`.
    fn taken_back(&self, lsn: Lsn) -> bool {
        self.log.taken_back_from().is_some_and(|from| lsn >= from)
    }

    /// Makes the index and the host slices forget whatever the writer took
    /// back after a failed fsync (frames acknowledged under
    /// `Durability::None` but never made durable): index entries at or
    /// after the cut are dropped, pending folds and observer notifications
    /// of them discarded, and host slices that already folded some of them
    /// are no longer served (`Error::Poisoned`; a reopen rebuilds them from
    /// what the log holds). Every read and append calls this first, so none
    /// sees the index or a host slice ahead of the log.
    fn forget_taken_back(&self) {
        let Some(from) = self.log.taken_back_from() else {
            return;
        };
        if self.forgotten_from.load(Ordering::Acquire) == from {
            return;
        }
        {
            let mut state = self.state.write();
            for entries in state.index.values_mut() {
                entries.retain(|entry| entry.lsn < from);
            }
            state.index.retain(|_, entries| !entries.is_empty());
        }
        {
            let mut ordered = self.ordered.lock();
            ordered.pending.retain(|lsn, _| *lsn < from);
            if ordered.next_lsn > from {
                ordered.stopped = true;
                let _ = self
                    .host_poison
                    .set(HostPoison::TakenBack { from_lsn: from });
            }
            self.dispatch.lock().queue.retain(|note| note.lsn < from);
        }
        self.forgotten_from.store(from, Ordering::Release);
    }

    /// The poisoned writer's error.
    fn writer_error(&self) -> Error {
        match self.log.sync() {
            Err(error) => error,
            Ok(()) => Error::Poisoned {
                store: self.log.dir().to_path_buf(),
                cause: "the writer took back events it had not made durable".to_string(),
            },
        }
    }

    /// Why host slices are not served.
    fn host_poison_error(&self) -> Error {
        match self.host_poison.get() {
            Some(HostPoison::Panicked {
                reducer,
                observer,
                lsn,
                message,
            }) => Error::ReducerPanicked {
                reducer: reducer.clone(),
                observer: *observer,
                lsn: *lsn,
                message: message.clone(),
            },
            Some(HostPoison::TakenBack { from_lsn }) => match self.writer_error() {
                Error::Poisoned { store, cause } => Error::Poisoned {
                    store,
                    cause: format!(
                        "{cause}; the host slices had folded events from LSN {from_lsn} on, which the writer took back"
                    ),
                },
                other => other,
            },
            None => unreachable!("asked why the host slices are poisoned when they are not"),
        }
    }

    /// Stops serving host slices after a reducer or observer panicked.
    fn poison_hosts(&self, error: Error) {
        tracing::error!(store = %self.log.dir().display(), error = %error, "host reducer panicked; the store is poisoned");
        if let Error::ReducerPanicked {
            reducer,
            observer,
            lsn,
            message,
        } = error
        {
            let _ = self.host_poison.set(HostPoison::Panicked {
                reducer,
                observer,
                lsn,
                message,
            });
        }
        self.ordered.lock().stopped = true;
        self.dispatch.lock().queue.clear();
    }

    /// Runs queued observer notifications, in LSN order, with no store lock
    /// held. One thread runs them at a time: a caller that finds another
    /// running returns (that one runs what this caller queued).
    fn dispatch_observers(&self) {
        let mut dispatch = self.dispatch.lock();
        if dispatch.running {
            return;
        }
        dispatch.running = true;
        loop {
            let batch = std::mem::take(&mut dispatch.queue);
            if batch.is_empty() || self.host_poison.get().is_some() {
                dispatch.queue.clear();
                dispatch.running = false;
                return;
            }
            let panicked = MutexGuard::unlocked(&mut dispatch, || {
                for note in batch {
                    for observer in note.observers.iter() {
                        let call = || observer(note.slice.as_ref(), &note.event, note.lsn);
                        if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(call)) {
                            return Some(Error::ReducerPanicked {
                                reducer: note.reducer.to_string(),
                                observer: true,
                                lsn: note.lsn,
                                message: reducer::panic_message(payload.as_ref()),
                            });
                        }
                    }
                }
                None
            });
            if let Some(error) = panicked {
                dispatch.running = false;
                drop(dispatch);
                self.poison_hosts(error);
                return;
            }
        }
    }

    /// Wakes the background snapshot thread.
    fn request_snapshot(&self) {
        let mut background = self.background.lock();
        if !background.requested {
            background.requested = true;
            self.background_changed.notify_all();
        }
    }

    /// The background snapshot thread: writes a snapshot whenever an append
    /// asks for one, until the store is dropped. Failures are logged and
    /// kept for [`Store::last_snapshot_error`]; they never fail an append.
    fn run_snapshots(&self) {
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
}

impl StoreCore {
    /// What ties a snapshot at `lsn` to this store's log: the store identity
    /// and the chain value of the frame ending at `lsn - 1`.
    fn binding_at(
        &self,
        storage: &dyn crate::storage::Storage,
        lsn: Lsn,
    ) -> Result<snapshot::SnapshotBinding> {
        let _frames_stay = self.compacting.read();
        match crate::log::recovery::chain_before(storage, self.log.dir(), lsn)? {
            ChainAt::Found(chain) => Ok(snapshot::SnapshotBinding {
                store_id: self.open_report.recovery.store_id,
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

/// Loads every snapshot of the store at `dir` (newest first) whose header
/// and directory check out; the others are skipped in `report`. Fails when
/// the directory holds snapshots but no segment: the log is missing, and
/// opening would start a new one beside them.
fn load_candidates(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    report: &mut OpenReport,
) -> Result<Vec<LoadedSnapshot>> {
    let listed = snapshot::list(storage, dir)?;
    if !listed.is_empty() && crate::log::segment::list(storage, dir)?.segments.is_empty() {
        return Err(Error::SnapshotRestore {
            path: dir.join(snapshot::SNAPSHOT_DIR),
            reason: format!(
                "{} holds snapshots but no segment file: the store's log is missing (restore its segments, or remove the snapshots to start an empty store)",
                dir.display()
            ),
        });
    }
    let mut candidates = Vec::new();
    for (_, path) in listed {
        match snapshot::load(storage, &path) {
            Ok(loaded) => candidates.push(loaded),
            Err(error) => skip_snapshot(report, path, damaged_reason(&error)),
        }
    }
    Ok(candidates)
}

/// Where opening starts: the snapshot chosen (the same choice for a writer
/// and a read-only open), and the host slices set from it.
struct Start {
    chosen: Option<LoadedSnapshot>,
    hosts: Vec<(TypeId, HostSlot)>,
    /// Host slots the snapshot has no usable slice for: folded from the
    /// start of the log.
    rebuild_from_start: Vec<usize>,
    snapshot_lsn: Lsn,
    replay_from: Lsn,
}

impl Start {
    /// Chooses the snapshot to start from (the newest that belongs to the
    /// log, see [`choose_snapshot`]) and sets each host slot's slice from
    /// it. Fails when the log does not start at LSN 1 and nothing usable
    /// covers what precedes it.
    fn choose(
        storage: &dyn crate::storage::Storage,
        dir: &Path,
        candidates: Vec<LoadedSnapshot>,
        span: &LogSpan,
        mut hosts: Vec<(TypeId, HostSlot)>,
        report: &mut OpenReport,
    ) -> Result<Start> {
        let first_lsn = span.first_lsn;
        let (chosen, rejected) = choose_snapshot(storage, dir, candidates, span);
        for (path, mismatch) in &rejected {
            if mismatch.is_problem() {
                skip_snapshot(report, path.clone(), mismatch.to_string());
            }
        }
        if chosen.is_none() && first_lsn > 1 {
            return Err(no_usable_snapshot(
                dir,
                first_lsn,
                report
                    .skipped_snapshots
                    .iter()
                    .map(|(path, reason)| (path.clone(), reason.clone()))
                    .chain(
                        rejected
                            .iter()
                            .filter(|(_, mismatch)| !mismatch.is_problem())
                            .map(|(path, mismatch)| (path.clone(), mismatch.to_string())),
                    ),
            ));
        }
        let snapshot_lsn = chosen.as_ref().map_or(1, |loaded| loaded.lsn);
        report.snapshot = chosen
            .as_ref()
            .map(|loaded| (loaded.path.clone(), loaded.lsn));
        // Host slices: from the snapshot, or rebuilt from the start of the log.
        let mut rebuild_from_start = Vec::new();
        for (index, (_, slot)) in hosts.iter_mut().enumerate() {
            let name = slot.reducer.name().to_string();
            match chosen
                .as_ref()
                .and_then(|loaded| loaded.host_slices.get(&name))
            {
                Some(bytes) => match slot.reducer.decode(bytes) {
                    Ok(slice) => slot.slice = slice,
                    Err(reason) => {
                        tracing::warn!(reducer = %name, reason = %reason, "host slice in snapshot does not decode; rebuilding it");
                        rebuild_from_start.push(index);
                    }
                },
                None if chosen.is_some() => rebuild_from_start.push(index),
                None => {}
            }
        }
        if !rebuild_from_start.is_empty() && first_lsn > 1 {
            return Err(Error::SnapshotRestore {
                path: report.snapshot.clone().map(|(path, _)| path).unwrap_or_default(),
                reason: format!(
                    "a registered reducer has no slice in it, and the log starts at LSN {first_lsn}: the events before it are not there to rebuild the slice from"
                ),
            });
        }
        let replay_from = if rebuild_from_start.is_empty() {
            snapshot_lsn
        } else {
            first_lsn
        };
        Ok(Start {
            chosen,
            hosts,
            rebuild_from_start,
            snapshot_lsn,
            replay_from,
        })
    }

    /// Indexes and folds every event `tail` returns (it starts at
    /// `replay_from`) until it reaches the end of what is written; returns
    /// the index and the host slots.
    fn replay(
        self,
        tail: &mut crate::log::LogIter,
        report: &mut OpenReport,
    ) -> Result<(State, Vec<(TypeId, HostSlot)>)> {
        let Start {
            chosen,
            mut hosts,
            rebuild_from_start,
            snapshot_lsn,
            ..
        } = self;
        let mut state = State {
            snapshot: chosen.map(Arc::new),
            index: HashMap::new(),
            segments: Vec::new(),
            events_since_snapshot: 0,
            bytes_since_snapshot: 0,
        };
        for record in tail.by_ref() {
            let record = record?;
            let event =
                codec::decode_event(&record.payload).map_err(|reason| Error::UndecodableEvent {
                    lsn: record.lsn,
                    reason,
                })?;
            if record.lsn < snapshot_lsn {
                for &index in &rebuild_from_start {
                    hosts[index].1.apply(&event, record.lsn)?;
                }
                continue;
            }
            state.index_frame(&[(record.lsn, &event)], record.position);
            for (_, slot) in &mut hosts {
                slot.apply(&event, record.lsn)?;
            }
            state.events_since_snapshot += 1;
            state.bytes_since_snapshot += record.payload.len() as u64;
            report.replayed_events += 1;
        }
        Ok((state, hosts))
    }
}

impl StoreCore {
    fn new(
        log: Backend,
        reader: LogReader,
        options: StoreOptions,
        state: State,
        ordered: Ordered,
        report: OpenReport,
    ) -> StoreCore {
        let snapshots_kept = options.snapshots_kept.max(1);
        StoreCore {
            ordered: Mutex::new(ordered),
            log,
            reader,
            options: StoreOptions {
                snapshots_kept,
                ..options
            },
            state: RwLock::new(state),
            snapshotting: Mutex::new(()),
            compacting: RwLock::new(()),
            open_report: report,
            dispatch: Mutex::new(Dispatch::default()),
            host_poison: OnceLock::new(),
            forgotten_from: AtomicU64::new(0),
            background: Mutex::new(Background::default()),
            background_changed: Condvar::new(),
            appending: RwLock::new(()),
            stripes: (0..APPEND_STRIPES).map(|_| RwLock::new(())).collect(),
        }
    }
}

/// The log a snapshot is checked against.
struct LogSpan {
    store_id: StoreId,
    first_lsn: Lsn,
    next_lsn: Lsn,
    /// A chain value recovery already read: (LSN, chain just before it).
    known_chain: Option<(Lsn, u32)>,
}

/// The snapshot opening starts from: the newest one (of `candidates`,
/// newest first, each with a good header and directory) that belongs to
/// this log. Returns it, and why each newer one was passed over. Older
/// snapshots than the chosen one are not examined.
fn choose_snapshot(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    candidates: Vec<LoadedSnapshot>,
    log: &LogSpan,
) -> (
    Option<LoadedSnapshot>,
    Vec<(PathBuf, snapshot::SnapshotMismatch)>,
) {
    let mut rejected = Vec::new();
    for loaded in candidates {
        // The cheap verdicts first; the chain check reads the log.
        let checked = if loaded.binding.store_id != log.store_id {
            Err(snapshot::SnapshotMismatch::ForeignStore {
                snapshot: loaded.binding.store_id,
                store: log.store_id,
            })
        } else if loaded.lsn > log.next_lsn {
            Err(snapshot::SnapshotMismatch::PastEnd {
                lsn: loaded.lsn,
                log_next_lsn: log.next_lsn,
            })
        } else if loaded.lsn < log.first_lsn {
            Err(snapshot::SnapshotMismatch::BeforeStart {
                lsn: loaded.lsn,
                log_first_lsn: log.first_lsn,
            })
        } else {
            snapshot::check_against_log(storage, dir, &loaded, &log.store_id, log.known_chain)
        };
        match checked {
            Ok(()) => return (Some(loaded), rejected),
            Err(mismatch) => rejected.push((loaded.path.clone(), mismatch)),
        }
    }
    (None, rejected)
}

/// The error when the log does not start at LSN 1 and no snapshot usable
/// with it covers the events before its start.
fn no_usable_snapshot(
    dir: &Path,
    first_lsn: Lsn,
    passed_over: impl Iterator<Item = (PathBuf, String)>,
) -> Error {
    let reasons: Vec<String> = passed_over
        .map(|(path, reason)| format!("{}: {reason}", path.display()))
        .collect();
    let first_segment = crate::log::segment::segment_file_name(first_lsn);
    Error::SnapshotRestore {
        path: dir.join(snapshot::SNAPSHOT_DIR),
        reason: format!(
            "the log starts at LSN {first_lsn} (segment {first_segment}), so events 1..{} must come from a snapshot, and no snapshot usable with this log covers them ({}); either segments before it were deleted (compaction, or by hand) and their snapshot is gone or does not match, or a segment file is missing",
            first_lsn - 1,
            if reasons.is_empty() {
                "there is no snapshot".to_string()
            } else {
                reasons.join("; ")
            }
        ),
    }
}

/// A load failure as a reason to skip a snapshot.
fn damaged_reason(error: &Error) -> String {
    match error {
        Error::SnapshotDamaged { reason, .. } => format!("damaged: {reason}"),
        other => format!("damaged: {other}"),
    }
}

fn skip_snapshot(report: &mut OpenReport, path: PathBuf, reason: String) {
    tracing::warn!(snapshot = %path.display(), reason = %reason, "skipping unusable snapshot");
    report.skipped_snapshots.push((path, reason));
}

/// A checked snapshot's LSN and conversation count, or what is wrong with
/// it (damaged, another store's, or stale: not matching the log). A
/// snapshot merely superseded (it ends before the log's first LSN) whose
/// bytes check out is `Ok`.
pub type SnapshotCheck = std::result::Result<(Lsn, usize), String>;

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreVerifyReport {
    /// The log's report.
    pub log: crate::log::VerifyReport,
    /// Distinct conversations in the log.
    pub conversations: usize,
    /// Every snapshot, newest first: its file and LSN and conversation
    /// count, or what is wrong.
    pub snapshots: Vec<(PathBuf, SnapshotCheck)>,
    /// The snapshot opening the store starts from (the newest one that
    /// belongs to the log), and its LSN.
    pub chosen_snapshot: Option<(PathBuf, Lsn)>,
}

/// Checks a whole store without changing it: every record of every segment
/// (checksums, links between segments, the store identity, and that each
/// payload decodes as an event) and every snapshot (its bytes, and that it
/// belongs to this log).
///
/// Reaches the verdict [`Store::open`] reaches on the same bytes: it fails
/// wherever opening fails (damage in the log, a missing segment, a log that
/// does not start at LSN 1 with no usable snapshot), and also when the
/// snapshot opening would use is needed (the log starts after LSN 1) but
/// holds a damaged conversation slice, which reading that conversation
/// would then report. It can fail where opening succeeds only on damage in
/// bytes opening does not read: the frames of sealed segments wholly
/// covered by the snapshot in use. Snapshots that are damaged, another
/// store's or stale are reported in [`StoreVerifyReport::snapshots`].
pub fn verify(dir: impl AsRef<Path>, progress: &mut dyn FnMut(u64)) -> Result<StoreVerifyReport> {
    let dir = dir.as_ref();
    let storage = crate::storage::FileSystem;
    let log = crate::log::recovery::verify_with_progress(&storage, dir, progress)?;
    let mut conversations = std::collections::HashSet::new();
    for record in LogReader::open(dir)?.iter() {
        let record = record?;
        if record.lsn >= log.next_lsn {
            break;
        }
        let event =
            codec::decode_event(&record.payload).map_err(|reason| Error::UndecodableEvent {
                lsn: record.lsn,
                reason,
            })?;
        if let Some(id) = event.conversation_id() {
            if !conversations.contains(id) {
                conversations.insert(id.to_string());
            }
        }
    }
    let span = LogSpan {
        store_id: log.store_id,
        first_lsn: log.first_lsn,
        next_lsn: log.next_lsn,
        known_chain: None,
    };
    let mut snapshots = Vec::new();
    // Why each snapshot newer than the chosen one was passed over.
    let mut passed_over = Vec::new();
    let mut chosen: Option<(PathBuf, Lsn, SnapshotCheck)> = None;
    for (_, path) in snapshot::list(&storage, dir)? {
        let loaded = match snapshot::load(&storage, &path) {
            Ok(loaded) => loaded,
            Err(error) => {
                let reason = damaged_reason(&error);
                if chosen.is_none() {
                    passed_over.push((path.clone(), reason.clone()));
                }
                snapshots.push((path, Err(reason)));
                continue;
            }
        };
        let lsn = loaded.lsn;
        let (usable, mut rejected) = choose_snapshot(&storage, dir, vec![loaded], &span);
        let contents = snapshot::verify(&storage, &path).map_err(|error| damaged_reason(&error));
        let checked = match rejected.pop() {
            Some((_, mismatch)) if mismatch.is_problem() => Err(mismatch.to_string()),
            Some((_, superseded)) => {
                if chosen.is_none() {
                    passed_over.push((path.clone(), superseded.to_string()));
                }
                contents
            }
            None => contents,
        };
        match &checked {
            // Passed over above, as superseded.
            _ if usable.is_none() && passed_over.last().is_some_and(|(last, _)| *last == path) => {}
            Err(reason) if chosen.is_none() && usable.is_none() => {
                passed_over.push((path.clone(), reason.clone()))
            }
            _ => {}
        }
        if usable.is_some() && chosen.is_none() {
            chosen = Some((path.clone(), lsn, checked.clone()));
        }
        snapshots.push((path, checked));
    }
    if log.first_lsn > 1 {
        match &chosen {
            None => return Err(no_usable_snapshot(dir, log.first_lsn, passed_over.into_iter())),
            Some((path, _, Err(reason))) => {
                return Err(Error::SnapshotRestore {
                    path: path.clone(),
                    reason: format!(
                        "{reason}; it is the snapshot opening uses, and the log starts at LSN {}, so the conversations it holds cannot be served",
                        log.first_lsn
                    ),
                })
            }
            Some(_) => {}
        }
    }
    Ok(StoreVerifyReport {
        log,
        conversations: conversations.len(),
        snapshots,
        chosen_snapshot: chosen.map(|(path, lsn, _)| (path, lsn)),
    })
}
