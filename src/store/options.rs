//! How a store is opened: its options, its retention policy, and the
//! builder that registers host reducers.

use std::any::TypeId;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Store;
use crate::error::Result;
use crate::log::{EventLog, LogOptions};
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

/// Options for opening a [`Store`].
#[derive(Debug, Clone)]
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
