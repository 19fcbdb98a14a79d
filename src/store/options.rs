//! How a store is opened: its options, its retention policy, and the
//! builder that registers host reducers.

use std::any::TypeId;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Store;
use crate::error::Result;
use crate::log::{Durability, EventLog, LogOptions};
use crate::reducer::{self, ErasedReducer, Reducer};

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
    /// How many snapshot files to keep (the newest ones; at least 1, or
    /// opening fails with [`Error::InvalidOption`](crate::Error::InvalidOption)).
    pub snapshots_kept: usize,
    /// The store key of an encrypted store (docs/erasure.md): each
    /// conversation it creates is sealed with a key of its own, which
    /// [`Store::erase`] destroys. `None` (the default): events are stored
    /// in the clear, and opening a store that has a key table fails.
    pub encryption: Option<crate::erasure::StoreKey>,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            log: LogOptions::default(),
            snapshot_every_events: None,
            snapshot_every_bytes: None,
            retention: Retention::KeepAll,
            snapshots_kept: 2,
            encryption: None,
        }
    }
}

impl StoreOptions {
    /// Fails with `Error::InvalidOption` for a value that can never be
    /// valid: a zero snapshot threshold (a snapshot after every append, and
    /// never a wait) or no snapshot kept (the store would delete the one it
    /// just wrote).
    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |option: &'static str, reason: String| {
            Err(crate::Error::InvalidOption { option, reason })
        };
        if self.snapshot_every_events == Some(0) {
            return invalid(
                "StoreOptions::snapshot_every_events",
                "it is Some(0); use None for no automatic snapshots, or at least 1".to_string(),
            );
        }
        if self.snapshot_every_bytes == Some(0) {
            return invalid(
                "StoreOptions::snapshot_every_bytes",
                "it is Some(0); use None for no automatic snapshots, or at least 1".to_string(),
            );
        }
        if self.snapshots_kept == 0 {
            return invalid(
                "StoreOptions::snapshots_kept",
                "it is 0; a store keeps at least its newest snapshot".to_string(),
            );
        }
        Ok(())
    }

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

    /// Sets the store key: the store seals each conversation it creates
    /// with a key of its own ([`StoreOptions::encryption`]).
    pub fn encryption(mut self, key: Option<crate::erasure::StoreKey>) -> StoreOptions {
        self.encryption = key;
        self
    }

    /// Sets tamper evidence ([`LogOptions::tamper`], `docs/tamper.md`):
    /// the key, where checkpoints are published, how often, and the
    /// host's callback for each ([`Store::checkpoint`] signs one on
    /// demand). `None` leaves the log without a key.
    pub fn tamper(mut self, tamper: Option<crate::tamper::TamperOptions>) -> StoreOptions {
        self.log.tamper = tamper;
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

    /// Opens the store on `log`, any [`EventLog`], with the builder's
    /// directory holding the snapshots ([`Store::open_on`]).
    pub fn open_on(self, log: impl EventLog + 'static) -> Result<Store> {
        Store::open_on_with(Arc::new(log), self.dir, self.options, self.reducers)
    }

    /// Opens the store read-only, beside its writer, with the host reducers
    /// folded as it follows the writer ([`Store::open_read_only`]).
    pub fn open_read_only(self) -> Result<Store> {
        Store::open_read_only_with(self.dir, self.options, self.reducers)
    }
}
