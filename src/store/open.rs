//! Opening a store: choosing the snapshot to start from, opening the log,
//! and replaying what follows the snapshot into the index and host slices.

use crate::conversation::HashMap;
use std::any::TypeId;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex, RwLock};

use super::backend::{Backend, Follow, SegmentHandles};
use super::hosts::{host_slots, Dispatch, Ordered};
use super::index::State;
use super::snapshot::{self, LoadedSnapshot};
use super::snapshots::Background;
use super::{Store, StoreCore, StoreOptions, APPEND_STRIPES};
use crate::error::{Error, Result};
use crate::log::format::StoreId;
use crate::log::{
    Binding, EventLog, FrameSummary, Log, LogCursor, LogOptions, Lsn, RecoveryReport,
};
use crate::reducer::{ErasedReducer, HostSlot};
use crate::storage::Storage;

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

impl Store {
    /// Opens (or creates) the store at `dir` with no host reducers.
    pub fn open(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        Store::open_with(dir.as_ref().to_path_buf(), options, Vec::new())
    }

    pub(super) fn open_with(
        dir: PathBuf,
        options: StoreOptions,
        reducers: Vec<(TypeId, Box<dyn ErasedReducer>)>,
    ) -> Result<Store> {
        options.check()?;
        let storage = Arc::clone(&options.log.storage);
        let mut report = OpenReport::default();
        sync_snapshot_dir(storage.as_ref(), &dir)?;
        check_log_present(storage.as_ref(), &dir)?;
        let candidates = load_candidates(
            storage.as_ref(),
            &dir,
            options.log.tamper.as_ref().map(|tamper| &*tamper.key),
            &mut report,
        )?;
        let (log, known_chain) = open_log(&dir, &options.log, &candidates)?;
        remove_snapshot_leftovers(storage.as_ref(), &dir)?;
        report.recovery = log.recovery_report().clone();
        let log = Arc::new(log);
        let segment = SegmentHandles {
            reader: log.reader(),
            writer: Some(Arc::clone(&log)),
        };
        let backend = Backend::new(log, dir, storage, report.recovery.clone(), Some(segment));
        let hosts = host_slots(reducers);
        Store::open_backend(backend, candidates, known_chain, options, hosts, report)
    }

    /// Opens a store on any log ([`EventLog`]): the segment log, a
    /// [`MemoryLog`](crate::log::MemoryLog), or a replicated log. The store
    /// keeps its snapshots in `dir` (its `snapshots` directory, on
    /// `options.log.storage`; created at the first snapshot), which only
    /// this store may write; only that option of `options.log` is used.
    ///
    /// A writable log opens a writable store; a follower
    /// ([`EventLog::is_writable`] false) opens a read-only store that
    /// follows the log's writer, as [`Store::open_read_only`] does. The
    /// store behaves as on the segment log, with one exception:
    /// [`LogView::reader`](super::LogView::reader) and
    /// [`LogView::iter_from`](super::LogView::iter_from) exist for the
    /// segment log only.
    ///
    /// ```
    /// use convlog::log::MemoryLog;
    /// use convlog::model::{ConversationEntry, Role};
    /// use convlog::{Store, StoreOptions};
    ///
    /// # fn main() -> convlog::Result<()> {
    /// let snapshots = tempfile::tempdir().unwrap();
    /// let log = MemoryLog::new();
    /// let store = Store::open_on(log.clone(), snapshots.path(), StoreOptions::default())?;
    /// let hello = ConversationEntry::new("eval-1", 0, Role::User, Some("Hello".into()));
    /// store.append(&[hello.recorded_in("ctx")])?;
    /// drop(store);
    ///
    /// // Reopened on the same log: the conversation is there.
    /// let store = Store::open_on(log, snapshots.path(), StoreOptions::default())?;
    /// assert_eq!(store.conversation("ctx")?.len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn open_on(
        log: impl EventLog + 'static,
        dir: impl AsRef<Path>,
        options: StoreOptions,
    ) -> Result<Store> {
        Store::open_on_with(
            Arc::new(log),
            dir.as_ref().to_path_buf(),
            options,
            Vec::new(),
        )
    }

    pub(super) fn open_on_with(
        log: Arc<dyn EventLog>,
        dir: PathBuf,
        options: StoreOptions,
        reducers: Vec<(TypeId, Box<dyn ErasedReducer>)>,
    ) -> Result<Store> {
        options.check()?;
        let storage = Arc::clone(&options.log.storage);
        let mut report = OpenReport::default();
        if log.is_writable() {
            log.claim_writer()?;
            sync_snapshot_dir(storage.as_ref(), &dir)?;
        }
        let candidates = load_candidates(
            storage.as_ref(),
            &dir,
            options.log.tamper.as_ref().map(|tamper| &*tamper.key),
            &mut report,
        )?;
        if log.is_writable() {
            remove_snapshot_leftovers(storage.as_ref(), &dir)?;
        }
        report.recovery = RecoveryReport {
            store_id: log.store_id(),
            next_lsn: log.next_lsn(),
            ..RecoveryReport::default()
        };
        let backend = Backend::new(log, dir, storage, report.recovery.clone(), None);
        let hosts = host_slots(reducers);
        Store::open_backend(backend, candidates, None, options, hosts, report)
    }

    /// The phases every open shares, once the log is open: choose the
    /// snapshot, replay the log after it, and start the store (a read-only
    /// one following the log from where the replay ended).
    pub(super) fn open_backend(
        mut backend: Backend,
        candidates: Vec<LoadedSnapshot>,
        known_chain: Option<(Lsn, u32)>,
        options: StoreOptions,
        hosts: Vec<(TypeId, HostSlot)>,
        mut report: OpenReport,
    ) -> Result<Store> {
        super::erase::refuse_lost_key_table(&backend, options.encryption.as_ref())?;
        backend.keyring = crate::erasure::Keyring::open(
            Arc::clone(backend.storage_ref()),
            backend.dir(),
            options.encryption.as_ref(),
            !backend.is_read_only(),
        )?;
        let Started {
            state,
            hosts,
            tail,
            encryption,
        } = start_from_snapshot(&backend, candidates, known_chain, hosts, &mut report)?;
        if backend.keyring.is_none() && !backend.is_read_only() {
            super::erase::refuse_keyless_writer(&backend, encryption)?;
        }
        // A read-only store follows its writer; a writer on a log with many
        // writers follows the log too (its own appends and the others').
        let (options, next_lsn) = if backend.is_read_only() || backend.log().many_writers() {
            let next_lsn = tail.next_lsn();
            report.recovery.next_lsn = next_lsn;
            backend.recovery.next_lsn = next_lsn;
            backend.follow = Some(Follow {
                tail: Mutex::new(Some(tail)),
                next_lsn: AtomicU64::new(next_lsn),
            });
            if !backend.is_read_only() {
                (options, next_lsn)
            } else {
                let options = StoreOptions {
                    // A read-only store takes no snapshot.
                    snapshot_every_events: None,
                    snapshot_every_bytes: None,
                    ..options
                };
                (options, next_lsn)
            }
        } else {
            let next_lsn = backend.log().next_lsn();
            (options, next_lsn)
        };
        let ordered = Ordered::new(next_lsn, hosts);
        let store = Store::start(StoreCore::new(backend, options, state, ordered, report))?;
        if !store.log.is_read_only() {
            store.finish_erasures()?;
        }
        Ok(store)
    }

    /// Starts the background snapshot thread when a threshold is set.
    pub(super) fn start(core: StoreCore) -> Result<Store> {
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
}

/// Makes the names in the snapshot directory durable: a snapshot whose
/// rename was never made durable (its writer failed or died at the last
/// step) is still used on open, and compaction may then delete what it
/// covers.
fn sync_snapshot_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let snapshots = dir.join(snapshot::SNAPSHOT_DIR);
    if storage.exists(&snapshots) {
        storage
            .sync_dir(&snapshots)
            .map_err(Error::io("fsync snapshot directory", &snapshots))?;
    }
    Ok(())
}

/// Opens the writer's segment log; returns it with the chain value recovery
/// read (LSN, chain just before it), which spares the snapshot check a read.
/// Sealed segments the newest snapshot (`candidates`' first) covers are
/// checked by header (and link) only; recovery also reads the log's chain
/// value at its LSN, which the snapshot must carry.
fn open_log(
    dir: &Path,
    options: &LogOptions,
    candidates: &[LoadedSnapshot],
) -> Result<(Log, Option<(Lsn, u32)>)> {
    let full_check_from_lsn = candidates.first().map_or(1, |loaded| loaded.lsn);
    let log = Log::open(
        dir,
        LogOptions {
            full_check_from_lsn,
            ..options.clone()
        },
    )?;
    let known_chain = log
        .recovery_report()
        .chain_before_full_check
        .map(|chain| (full_check_from_lsn, chain));
    Ok((log, known_chain))
}

/// Removes leftovers of snapshots a crash interrupted. Only with the
/// writer's lock held: then no live writer owns them.
fn remove_snapshot_leftovers(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let snapshots = dir.join(snapshot::SNAPSHOT_DIR);
    if !storage.exists(&snapshots) {
        return Ok(());
    }
    let names = storage
        .list_dir(&snapshots)
        .map_err(Error::io("list snapshot directory", &snapshots))?;
    for name in names.iter().filter(|name| name.ends_with(".snap.tmp")) {
        let leftover = snapshots.join(name);
        storage
            .remove_file(&leftover)
            .map_err(Error::io("remove leftover snapshot", &leftover))?;
    }
    Ok(())
}

/// Chooses the snapshot to start from (the newest that belongs to the
/// log) and replays the log after it: the index, the host slots, and the
/// cursor where the replay ended.
pub(super) fn start_from_snapshot(
    backend: &Backend,
    candidates: Vec<LoadedSnapshot>,
    known_chain: Option<(Lsn, u32)>,
    hosts: Vec<(TypeId, HostSlot)>,
    report: &mut OpenReport,
) -> Result<Started> {
    let log = backend.log();
    let reader = backend.reader();
    let frame_at = reader
        .as_ref()
        .map(|reader| move |lsn: Lsn, offset: u64| reader.frame_in_segment_of(lsn, offset));
    let span = LogSpan {
        store_id: log.store_id(),
        first_lsn: log.first_lsn(),
        // A follower's next LSN is unknown until it reads, and a handle of
        // a log with many writers knows only its own end (other writers,
        // and the snapshots they took, may be past it): a snapshot past the
        // end is found by the binding check.
        next_lsn: if backend.is_read_only() || log.many_writers() {
            Lsn::MAX
        } else {
            log.next_lsn()
        },
        known_chain,
        binding_at: &|lsn| log.binding_at(lsn),
        frame_at: frame_at
            .as_ref()
            .map(|frame_at| frame_at as &dyn Fn(Lsn, u64) -> Result<FrameSummary>),
    };
    let start = Start::choose(backend.dir(), candidates, &span, hosts, report)?;
    // A writer replays from just after the snapshot's last frame when the
    // snapshot named it and it checked out; otherwise (and a read-only
    // store, which follows the log with its own cursor) from the start of
    // the segment holding the LSN.
    let after = start
        .chosen
        .as_ref()
        .and_then(|loaded| loaded.last_frame)
        .filter(|frame| start.replay_from == frame.end_lsn && !backend.is_read_only());
    let mut tail: Box<dyn LogCursor> = match (after, backend.reader()) {
        (Some(frame), Some(reader)) => Box::new(reader.iter_after(frame)),
        _ => log.read_from(start.replay_from),
    };
    let encrypted_snapshot = start.chosen.as_ref().and_then(|loaded| {
        loaded
            .host_slices
            .contains_key(crate::erasure::SNAPSHOT_MARK)
            .then_some(loaded.lsn)
    });
    let (state, hosts, first_key_event) =
        start.replay(tail.as_mut(), backend.keyring.as_ref(), report)?;
    let encryption = match (encrypted_snapshot, first_key_event) {
        (_, Some((lsn, id))) => Some(EncryptionSeen::Event { lsn, id }),
        (Some(lsn), None) => Some(EncryptionSeen::Snapshot { lsn }),
        (None, None) => None,
    };
    Ok(Started {
        state,
        hosts,
        tail,
        encryption,
    })
}

/// What an open saw that says the store is encrypted, with or without its
/// key table (docs/erasure.md, "A missing key table").
pub(super) enum EncryptionSeen {
    /// The snapshot it started from was written by a store with a key.
    Snapshot { lsn: Lsn },
    /// The log it replayed holds a store-written event of an encrypted
    /// conversation (sealed, key made, erased).
    Event { lsn: Lsn, id: String },
}

/// A store as it starts (or a read-only one starts again) from a snapshot.
pub(super) struct Started {
    pub(super) state: State,
    pub(super) hosts: Vec<(TypeId, HostSlot)>,
    /// Where the replay ended; a read-only store follows the log from here.
    pub(super) tail: Box<dyn LogCursor>,
    /// Whether the snapshot or the log replayed shows the store encrypted.
    pub(super) encryption: Option<EncryptionSeen>,
}

/// Fails when the directory holds snapshots but no segment: the segment
/// log is missing, and opening would start a new one beside them.
pub(super) fn check_log_present(storage: &dyn Storage, dir: &Path) -> Result<()> {
    if !snapshot::list(storage, dir)?.is_empty()
        && crate::log::segment::list(storage, dir)?.segments.is_empty()
    {
        return Err(Error::SnapshotRestore {
            path: dir.join(snapshot::SNAPSHOT_DIR),
            reason: format!(
                "{} holds snapshots but no segment file: the store's log is missing (restore its segments, or remove the snapshots to start an empty store)",
                dir.display()
            ),
        });
    }
    Ok(())
}

/// Loads every snapshot of the store at `dir` (newest first) whose header
/// and directory check out; the others are skipped in `report`.
///
/// With a tamper key (`docs/tamper.md`), a snapshot whose keyed tag is
/// missing or does not authenticate it is skipped too: the log, which the
/// key vouches for, is replayed instead.
pub(super) fn load_candidates(
    storage: &dyn Storage,
    dir: &Path,
    key: Option<&crate::tamper::TamperKey>,
    report: &mut OpenReport,
) -> Result<Vec<LoadedSnapshot>> {
    let listed = snapshot::list(storage, dir)?;
    let mut candidates = Vec::new();
    for (_, path) in listed {
        match snapshot::load(storage, &path) {
            Ok(loaded) => match key.map(|key| snapshot::check_tag(storage, &path, key)) {
                Some(Err((offset, reason))) => skip_snapshot(
                    report,
                    path,
                    format!(
                        "tampered: {reason} (byte {offset}); ignored, the log is replayed instead"
                    ),
                ),
                _ => candidates.push(loaded),
            },
            Err(error) => skip_snapshot(report, path, damaged_reason(&error)),
        }
    }
    Ok(candidates)
}

/// Where opening starts: the snapshot chosen (the same choice for a writer
/// and a read-only open), and the host slices set from it.
pub(super) struct Start {
    pub(super) chosen: Option<LoadedSnapshot>,
    pub(super) hosts: Vec<(TypeId, HostSlot)>,
    /// Host slots the snapshot has no usable slice for: folded from the
    /// start of the log.
    pub(super) rebuild_from_start: Vec<usize>,
    pub(super) snapshot_lsn: Lsn,
    pub(super) replay_from: Lsn,
}

impl Start {
    /// Chooses the snapshot to start from (the newest that belongs to the
    /// log, see [`choose_snapshot`]) and sets each host slot's slice from
    /// it. Fails when the log does not start at LSN 1 and nothing usable
    /// covers what precedes it.
    pub(super) fn choose(
        dir: &Path,
        candidates: Vec<LoadedSnapshot>,
        span: &LogSpan<'_>,
        mut hosts: Vec<(TypeId, HostSlot)>,
        report: &mut OpenReport,
    ) -> Result<Start> {
        let first_lsn = span.first_lsn;
        let (chosen, rejected) = choose_snapshot(candidates, span);
        for (path, mismatch) in &rejected {
            if mismatch.is_problem() {
                skip_snapshot(report, path.clone(), mismatch.to_string());
            }
        }
        if chosen.is_none() && first_lsn > 1 {
            return Err(no_usable_snapshot(
                dir,
                first_lsn,
                // Only the segment log can show a snapshot's last frame.
                span.frame_at.is_some(),
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
    /// the index, the host slots, and the first event only an encrypted
    /// store writes (sealed, key made, erased), its LSN and conversation.
    #[allow(clippy::type_complexity)]
    pub(super) fn replay(
        self,
        tail: &mut dyn LogCursor,
        keyring: Option<&crate::erasure::Keyring>,
        report: &mut OpenReport,
    ) -> Result<(State, Vec<(TypeId, HostSlot)>, Option<(Lsn, String)>)> {
        let Start {
            chosen,
            mut hosts,
            rebuild_from_start,
            snapshot_lsn,
            ..
        } = self;
        let mut state = State {
            snapshot: chosen.map(Arc::new),
            index: HashMap::default(),
            segments: Vec::new(),
            events_since_snapshot: 0,
            bytes_since_snapshot: 0,
            recent_frames: std::collections::VecDeque::new(),
            seek_points: Vec::new(),
        };
        let mut first_key_event = None;
        for record in tail {
            let record = record?;
            let mut event = record.event()?;
            if first_key_event.is_none() && crate::erasure::is_reserved(&event) {
                let id = event.conversation_id().unwrap_or_default().to_string();
                first_key_event = Some((record.lsn, id));
            }
            if let (Some(keyring), false) = (keyring, hosts.is_empty()) {
                // Host slices fold the events as appended: opened.
                event = keyring.open_for_hosts(event, record.lsn);
            }
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
        Ok((state, hosts, first_key_event))
    }
}

impl StoreCore {
    pub(super) fn new(
        log: Backend,
        options: StoreOptions,
        state: State,
        ordered: Ordered,
        report: OpenReport,
    ) -> StoreCore {
        StoreCore {
            ordered: Mutex::new(ordered),
            log,
            options,
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
pub(super) struct LogSpan<'a> {
    pub(super) store_id: StoreId,
    pub(super) first_lsn: Lsn,
    pub(super) next_lsn: Lsn,
    /// A chain value recovery already read: (LSN, chain just before it).
    pub(super) known_chain: Option<(Lsn, u32)>,
    /// What the log holds just before an LSN ([`EventLog::binding_at`]).
    pub(super) binding_at: &'a dyn Fn(Lsn) -> Result<Binding>,
    /// The frame at a byte offset of the segment holding an LSN (the
    /// segment log's [`LogReader::frame_in_segment_of`](crate::log::LogReader));
    /// `None` for another log: a snapshot's last frame offset is then not
    /// used.
    pub(super) frame_at: Option<&'a dyn Fn(Lsn, u64) -> Result<FrameSummary>>,
}

/// The snapshot opening starts from: the newest one (of `candidates`,
/// newest first, each with a good header and directory) that belongs to
/// this log. Returns it, and why each newer one was passed over. Older
/// snapshots than the chosen one are not examined.
pub(super) fn choose_snapshot(
    candidates: Vec<LoadedSnapshot>,
    log: &LogSpan<'_>,
) -> (
    Option<LoadedSnapshot>,
    Vec<(PathBuf, snapshot::SnapshotMismatch)>,
) {
    let mut rejected = Vec::new();
    for mut loaded in candidates {
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
            snapshot::check_binding(&loaded, &log.store_id, log.known_chain, log.binding_at)
                .and_then(|()| check_last_frame(&mut loaded, log))
        };
        match checked {
            Ok(()) => return (Some(loaded), rejected),
            Err(mismatch) => rejected.push((loaded.path.clone(), mismatch)),
        }
    }
    (None, rejected)
}

/// Checks the last frame a snapshot names (by byte offset) against the
/// log: a complete frame must start there and end just before the
/// snapshot's LSN, with the chain value the snapshot carries. Keeps the
/// frame in the snapshot, where replay starts after it. A snapshot that
/// names none, or a log that cannot look (not the segment log), passes
/// without one.
fn check_last_frame(
    loaded: &mut LoadedSnapshot,
    log: &LogSpan<'_>,
) -> std::result::Result<(), snapshot::SnapshotMismatch> {
    let (Some(offset), Some(frame_at)) = (loaded.last_frame_offset, log.frame_at) else {
        return Ok(());
    };
    let lsn = loaded.lsn;
    if lsn <= log.first_lsn {
        // Compaction deleted the segment holding that frame: the log
        // starts at the snapshot's LSN, whose segment header carries the
        // chain value the binding check compared. Replay starts at that
        // segment's start, which is the snapshot's LSN.
        return Ok(());
    }
    let mismatch = |found: String| snapshot::SnapshotMismatch::LastFrame { lsn, offset, found };
    let frame = frame_at(lsn - 1, u64::from(offset))
        .map_err(|error| mismatch(format!("no batch starts there ({error})")))?;
    if frame.end_lsn != lsn || frame.crc != loaded.binding.chain {
        return Err(mismatch(format!(
            "the batch there ends at LSN {} with checksum {:#010x} (the snapshot covers one with checksum {:#010x})",
            frame.end_lsn - 1,
            frame.crc,
            loaded.binding.chain
        )));
    }
    loaded.last_frame = Some(frame);
    Ok(())
}

/// The error when the log does not start at LSN 1 and no snapshot usable
/// with it covers the events before its start (`segment_log`: the store's
/// own segment log, whose files the error can name; otherwise a log other
/// writers may have compacted).
pub(super) fn no_usable_snapshot(
    dir: &Path,
    first_lsn: Lsn,
    segment_log: bool,
    passed_over: impl Iterator<Item = (PathBuf, String)>,
) -> Error {
    let reasons: Vec<String> = passed_over
        .map(|(path, reason)| format!("{}: {reason}", path.display()))
        .collect();
    let reasons = if reasons.is_empty() {
        "there is no snapshot".to_string()
    } else {
        reasons.join("; ")
    };
    let snapshots = dir.join(snapshot::SNAPSHOT_DIR);
    let reason = if segment_log {
        let first_segment = crate::log::segment::segment_file_name(first_lsn);
        format!(
            "the log starts at LSN {first_lsn} (segment {first_segment}), so events 1..{} must come from a snapshot, and no snapshot usable with this log covers them ({reasons}); either segments before it were deleted (compaction, or by hand) and their snapshot is gone or does not match, or a segment file is missing",
            first_lsn - 1,
        )
    } else {
        format!(
            "the log starts at LSN {first_lsn}, so events 1..{} must come from a snapshot, and no snapshot usable with this log covers them ({reasons}); a writer of the log dropped the events before it (compaction) after taking a snapshot that is not in this store's snapshot directory {}: open the store with the snapshot directory its writers share (the one the compacting writer used)",
            first_lsn - 1,
            snapshots.display(),
        )
    };
    Error::SnapshotRestore {
        path: snapshots,
        reason,
    }
}

/// A load failure as a reason to skip a snapshot.
pub(super) fn damaged_reason(error: &Error) -> String {
    match error {
        Error::SnapshotDamaged { reason, .. } => format!("damaged: {reason}"),
        other => format!("damaged: {other}"),
    }
}

pub(super) fn skip_snapshot(report: &mut OpenReport, path: PathBuf, reason: String) {
    tracing::warn!(snapshot = %path.display(), reason = %reason, "skipping unusable snapshot");
    report.skipped_snapshots.push((path, reason));
}
