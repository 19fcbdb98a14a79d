//! The conversation store an agent host embeds: events in, slices out.
//!
//! A [`Store`] runs on a log: the segment log ([`Store::open`]), or any
//! implementation of the log boundary, [`EventLog`](crate::log::EventLog)
//! ([`Store::open_on`]), which is all the store asks of a log. Appending a
//! batch of [`Event`](crate::model::Event)s validates each, encodes it
//! (`crate::codec`), appends the batch as one atomic frame, and indexes the
//! frame under every conversation it touches.
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
//! [`Store::append_with`] with an [`Expect`] appends only if a conversation
//! (or the store) is still at the version the caller read, atomically against
//! every other append. [`Store::open_read_only`] reads a store beside its
//! writer (another process), following it, without writing anything.
//!
//! # Module map
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`Store`] and the state it shares with its snapshot thread |
//! | `options.rs` | [`StoreOptions`], [`Retention`], [`StoreBuilder`] |
//! | `open.rs` | opening: snapshot choice, log open, replay ([`OpenReport`]) |
//! | `index.rs` | the per-conversation frame index and conversation reads |
//! | `append.rs` | the append path (`append_checked`; `append_batches`, several batches with one durable commit) |
//! | `append_options.rs` | [`AppendOptions`], an append's per-call settings |
//! | `erase.rs` | encryption at rest: sealing, opening, [`Store::erase`] |
//! | `conditional.rs` | ordering appends, [`Expect`] and `Conflict` |
//! | `hosts.rs` | host reducers: ordered folding, observers, poison |
//! | `snapshots.rs` | writing snapshots (also in the background), compaction |
//! | `snapshot.rs` | the snapshot file format |
//! | `backend.rs` | the log behind the boundary ([`EventLog`](crate::log::EventLog)), snapshot location, follow state |
//! | `read_only.rs` | the read-only follower ([`Store::open_read_only`]) |
//! | `view.rs` | [`LogView`], hosts' read-only view of the log |
//! | `verify.rs` | [`verify()`], checking a store without opening it |
//! | `backup.rs` | [`backup()`], consistent copies beside a writer |

mod append;
mod append_options;
mod backend;
pub mod backup;
mod conditional;
mod erase;
mod hosts;
mod index;
mod open;
mod options;
mod read_only;
#[cfg(feature = "testing")]
pub mod snapshot;
#[cfg(not(feature = "testing"))]
pub(crate) mod snapshot;
mod snapshots;
mod verify;
mod view;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::error::Result;
use crate::log::Lsn;
pub use append_options::AppendOptions;
use backend::Backend;
pub use backup::{backup, BackupReport};
pub use conditional::{Expect, APPEND_RACES_MAX};
use hosts::{Dispatch, HostPoison, Ordered};
use index::State;
pub use index::StoreStats;
pub use open::OpenReport;
pub use options::{Retention, StoreBuilder, StoreOptions};
pub use read_only::READ_ONLY_RESTARTS_MAX;
use snapshots::Background;
pub use snapshots::{CompactReport, SnapshotInfo};
pub use verify::{verify, SnapshotCheck, StoreVerifyReport};
pub use view::LogView;

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
    /// One past the store's last event: [`StoreStats::next_lsn`] without
    /// the rest of [`Store::stats`], which walks the whole index. A
    /// read-only store, or a writer on a log with many writers, first
    /// catches up with what the log's other writers appended, as `stats`
    /// does; a store that writes alone answers at once.
    pub fn next_lsn(&self) -> Lsn {
        self.follow_quietly();
        self.log.next_lsn()
    }

    /// Makes every event appended so far durable.
    pub fn sync(&self) -> Result<()> {
        self.log.sync()
    }

    /// Signs a checkpoint now (`docs/tamper.md`): makes everything
    /// appended so far durable, signs (store identity, last LSN, chain
    /// digest) with the store's tamper key, writes it to the
    /// [`TamperOptions::checkpoint_path`](crate::tamper::TamperOptions::checkpoint_path)
    /// and calls the [`on_checkpoint`](crate::tamper::TamperOptions::on_checkpoint)
    /// callback given in `StoreOptions::log(LogOptions::new().tamper(..))`,
    /// and returns it. The same as [`Log::checkpoint`](crate::log::Log::checkpoint)
    /// for a store. Fails with `Error::InvalidOption` for a store without
    /// tamper evidence (or on a log other than the segment log), and with
    /// `Error::ReadOnly` for a read-only store.
    pub fn checkpoint(&self) -> Result<crate::tamper::Checkpoint> {
        self.log.checkpoint()
    }

    /// Whether this store is tamper-evident and this handle writes it (so
    /// [`Store::checkpoint`] can sign).
    pub fn is_tamper_evident(&self) -> bool {
        self.log.is_tamper_evident()
    }

    /// What opening the store did.
    pub fn open_report(&self) -> &OpenReport {
        &self.open_report
    }

    /// Read-only access to the underlying log (positions, durability,
    /// readers). Events are appended only through [`Store::append`].
    pub fn log(&self) -> LogView<'_> {
        LogView {
            log: &self.log,
            state: &self.state,
        }
    }
}
