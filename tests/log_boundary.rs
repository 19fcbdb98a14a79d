//! The log boundary (`convlog::log::EventLog`) is real: the store's
//! behaviour (append, conversation reads, resume, host reducers, snapshots,
//! conditional appends, compaction, following a writer) is run with the
//! same test body on the segment log and on `MemoryLog`, and the trait's
//! contract is checked on both logs directly. The bodies live in
//! tests/boundary_suite, which crates/nats runs on a JetStream log too. In-memory-only checks show
//! the store asks nothing of a log outside the trait: it runs on an
//! implementation written outside the crate, and writes no file but its
//! snapshots.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use convlog::log::{
    Binding, Dropped, Durability, EventLog, Locator, Log, LogCursor, LogFollower, LogOptions,
    LogReader, Lsn, MemoryLog, Record,
};
use convlog::model::Role;
use convlog::store::{Store, StoreBuilder, StoreOptions};
use convlog::Error;
use tempfile::TempDir;

#[path = "boundary_suite/mod.rs"]
mod suite;

use suite::{said, Backing, Counter};

struct Segments {
    dir: TempDir,
}

impl Backing for Segments {
    fn name(&self) -> &'static str {
        "segment log"
    }
    fn open(&self, options: StoreOptions) -> Store {
        StoreBuilder::new(self.dir.path())
            .options(options)
            .reducer(Counter)
            .open()
            .unwrap()
    }
    fn open_follower(&self) -> Store {
        StoreBuilder::new(self.dir.path())
            .reducer(Counter)
            .open_read_only()
            .unwrap()
    }
    fn follower_log(&self) -> Box<dyn EventLog> {
        let reader = LogReader::open(self.dir.path()).unwrap();
        let storage = LogOptions::default().storage;
        Box::new(LogFollower::new(self.dir.path(), storage, reader).unwrap())
    }
}

struct Memory {
    log: MemoryLog,
    dir: TempDir,
}

impl Backing for Memory {
    fn name(&self) -> &'static str {
        "memory log"
    }
    fn open(&self, options: StoreOptions) -> Store {
        StoreBuilder::new(self.dir.path())
            .options(options)
            .reducer(Counter)
            .open_on(self.log.clone())
            .unwrap()
    }
    fn open_follower(&self) -> Store {
        StoreBuilder::new(self.dir.path())
            .reducer(Counter)
            .open_on(self.log.follower())
            .unwrap()
    }
    fn follower_log(&self) -> Box<dyn EventLog> {
        Box::new(self.log.follower())
    }
}

/// A memory log written by several stores at once, each through its own
/// compare-and-set handle (`suite::SharedMemoryWriter`): the many-writer
/// path of the store, in memory.
struct SharedMemory {
    log: MemoryLog,
    gate: Arc<std::sync::Mutex<()>>,
    dir: TempDir,
    second_dir: TempDir,
}

impl SharedMemory {
    fn new() -> SharedMemory {
        SharedMemory {
            log: MemoryLog::new(),
            gate: Arc::default(),
            dir: tempfile::tempdir().unwrap(),
            second_dir: tempfile::tempdir().unwrap(),
        }
    }
}

impl Backing for SharedMemory {
    fn name(&self) -> &'static str {
        "memory log with many writers"
    }
    fn open(&self, options: StoreOptions) -> Store {
        StoreBuilder::new(self.dir.path())
            .options(options)
            .reducer(Counter)
            .open_on(suite::SharedMemoryWriter::new(&self.log, &self.gate))
            .unwrap()
    }
    fn open_follower(&self) -> Store {
        StoreBuilder::new(self.dir.path())
            .reducer(Counter)
            .open_on(self.log.follower())
            .unwrap()
    }
    fn follower_log(&self) -> Box<dyn EventLog> {
        Box::new(self.log.follower())
    }
    fn open_another_writer(&self) -> Option<Store> {
        Some(
            StoreBuilder::new(self.second_dir.path())
                .reducer(Counter)
                .open_on(suite::SharedMemoryWriter::new(&self.log, &self.gate))
                .unwrap(),
        )
    }
}

/// Many writers on one log: on a memory log whose writers race (the
/// segment log has one writer: its lock). crates/nats runs the same body
/// on a JetStream stream.
#[test]
fn many_writers_share_one_log() {
    suite::many_writers_share_one_log(&SharedMemory::new());
}

/// The store's other behaviours hold on a log with many writers too (one
/// writer at a time here).
#[test]
fn a_store_among_many_writers_behaves_as_the_only_writer() {
    suite::appends_reads_resume_and_reopen_behave_the_same_on_both_logs(&SharedMemory::new());
    suite::host_reducers_are_folded_observed_and_restored_from_snapshots_on_both_logs(
        &SharedMemory::new(),
    );
    suite::conditional_appends_conflict_on_both_logs(&SharedMemory::new());
    suite::a_read_only_store_follows_its_writer_on_both_logs(&SharedMemory::new());
    suite::the_log_view_and_the_audit_timeline_read_every_log(&SharedMemory::new());
}

/// Runs `body` on a fresh segment log and a fresh memory log.
fn on_both_logs(body: impl Fn(&dyn Backing)) {
    let segments = Segments {
        dir: tempfile::tempdir().unwrap(),
    };
    body(&segments);
    let memory = Memory {
        log: MemoryLog::new(),
        dir: tempfile::tempdir().unwrap(),
    };
    body(&memory);
}

#[test]
fn appends_reads_resume_and_reopen_behave_the_same_on_both_logs() {
    on_both_logs(suite::appends_reads_resume_and_reopen_behave_the_same_on_both_logs);
}

#[test]
fn host_reducers_are_folded_observed_and_restored_from_snapshots_on_both_logs() {
    on_both_logs(suite::host_reducers_are_folded_observed_and_restored_from_snapshots_on_both_logs);
}

#[test]
fn conditional_appends_conflict_on_both_logs() {
    on_both_logs(suite::conditional_appends_conflict_on_both_logs);
}

#[test]
fn compaction_drops_the_prefix_and_reads_of_it_are_compacted_on_both_logs() {
    on_both_logs(suite::compaction_drops_the_prefix_and_reads_of_it_are_compacted_on_both_logs);
}

#[test]
fn a_read_only_store_follows_its_writer_on_both_logs() {
    on_both_logs(suite::a_read_only_store_follows_its_writer_on_both_logs);
}

/// Regression: `LogView::iter_from` and the audit timeline (which scans
/// the log for re-run calls) panicked on a store that does not run on the
/// segment log. Both read through the boundary now.
#[test]
fn the_log_view_and_the_audit_timeline_read_every_log() {
    on_both_logs(suite::the_log_view_and_the_audit_timeline_read_every_log);
}

#[test]
fn both_logs_keep_the_event_log_contract() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let follower = LogFollower::new(
        dir.path(),
        LogOptions::default().storage,
        LogReader::open(dir.path()).unwrap(),
    )
    .unwrap();
    suite::check_contract("segment log", &log, &follower);

    let memory = MemoryLog::new();
    suite::check_contract("memory log", &memory, &memory.follower());
}

#[test]
fn the_memory_log_drops_a_prefix_and_answers_compacted_for_it() {
    let log = MemoryLog::new();
    let mut locators = Vec::new();
    for batch in 0..4u8 {
        let (_, locator) = log
            .append(&[vec![batch], vec![batch]], Durability::None)
            .unwrap();
        locators.push(locator);
    }
    // `None` appends are durable only after a sync.
    assert_eq!((log.next_lsn(), log.durable_lsn()), (9, 1));
    log.sync().unwrap();
    assert_eq!(log.durable_lsn(), 9);
    let before = log.binding_at(5).unwrap();
    // Only whole batches below the LSN are dropped.
    let dropped = log.drop_before(6).unwrap();
    assert_eq!(
        dropped,
        Dropped {
            first_lsn: 5,
            removed: Vec::new()
        }
    );
    assert_eq!(log.first_lsn(), 5);
    // The binding at the new start is what it was before the drop.
    assert_eq!(log.binding_at(5).unwrap(), before);
    assert!(matches!(
        log.binding_at(3),
        Ok(Binding::BeforeStart { first_lsn: 5 })
    ));
    assert!(matches!(
        log.read_batch(locators[0]),
        Err(Error::Compacted {
            next_present: 5,
            ..
        })
    ));
    assert_eq!(log.read_batch(locators[2]).unwrap()[0].lsn, 5);
    let mut cursor = log.read_from(3);
    assert!(matches!(
        cursor.next(),
        Some(Err(Error::Compacted {
            first_missing: 3,
            next_present: 5,
            ..
        }))
    ));
    assert!(cursor.next().is_none(), "a cursor ends at its first error");
    assert_eq!(log.read_from(5).count(), 4);
}

/// A log written outside the crate: a `MemoryLog` that counts the calls
/// the store makes. The store runs on it like on any other.
#[derive(Debug)]
struct Counting {
    inner: MemoryLog,
    appends: Arc<AtomicU64>,
    batch_reads: Arc<AtomicU64>,
}

impl EventLog for Counting {
    fn store_id(&self) -> [u8; 16] {
        self.inner.store_id()
    }
    fn is_writable(&self) -> bool {
        self.inner.is_writable()
    }
    fn append(
        &self,
        payloads: &[Vec<u8>],
        durability: Durability,
    ) -> convlog::Result<(std::ops::Range<Lsn>, Locator)> {
        self.appends.fetch_add(1, Ordering::SeqCst);
        self.inner.append(payloads, durability)
    }
    fn read_batch(&self, locator: Locator) -> convlog::Result<Vec<Record>> {
        self.batch_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_batch(locator)
    }
    fn read_from(&self, lsn: Lsn) -> Box<dyn LogCursor> {
        self.inner.read_from(lsn)
    }
    fn first_lsn(&self) -> Lsn {
        self.inner.first_lsn()
    }
    fn next_lsn(&self) -> Lsn {
        self.inner.next_lsn()
    }
    fn durable_lsn(&self) -> Lsn {
        self.inner.durable_lsn()
    }
    fn drop_before(&self, lsn: Lsn) -> convlog::Result<Dropped> {
        self.inner.drop_before(lsn)
    }
    fn sync(&self) -> convlog::Result<()> {
        self.inner.sync()
    }
    fn binding_at(&self, lsn: Lsn) -> convlog::Result<Binding> {
        self.inner.binding_at(lsn)
    }
}

#[test]
fn the_store_runs_on_a_log_implemented_outside_the_crate_and_writes_only_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let memory = MemoryLog::new();
    let appends = Arc::new(AtomicU64::new(0));
    let batch_reads = Arc::new(AtomicU64::new(0));
    let counting = Counting {
        inner: memory.clone(),
        appends: Arc::clone(&appends),
        batch_reads: Arc::clone(&batch_reads),
    };
    let store = Store::open_on(counting, dir.path(), StoreOptions::default()).unwrap();
    store
        .append(&[
            said("a", 0, Role::User, "hello"),
            said("a", 1, Role::Assistant, "hi"),
        ])
        .unwrap();
    store.append(&[said("b", 0, Role::User, "other")]).unwrap();
    assert_eq!(appends.load(Ordering::SeqCst), 2);
    // A conversation read reads its batches at the locators the log gave.
    assert_eq!(store.conversation("a").unwrap().len(), 2);
    assert!(batch_reads.load(Ordering::SeqCst) >= 1);
    // The events are in the log the store was given, and nowhere else: the
    // store's directory stays empty until a snapshot is written.
    assert_eq!(memory.next_lsn(), 4);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    store.snapshot().unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["snapshots"]);
    // A snapshot taken of another log is not used with this one.
    drop(store);
    let other = Store::open_on(MemoryLog::new(), dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(other.open_report().snapshot, None);
    assert_eq!(other.open_report().skipped_snapshots.len(), 1);
    assert!(other.conversation_ids().is_empty());
}

/// Regression: two stores could write one memory log at once (through two
/// clones of its handle). Each indexes only its own appends, so each
/// served a store missing the other's events. The second writer is now
/// refused, as the segment log's lock refuses it; followers are not.
#[test]
fn a_memory_log_admits_one_writing_store_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = MemoryLog::new();
    let first = Store::open_on(log.clone(), dir.path(), StoreOptions::new()).unwrap();
    first.append(&[said("a", 0, Role::User, "hello")]).unwrap();
    match Store::open_on(log.clone(), dir.path(), StoreOptions::new()) {
        Err(Error::Locked { path }) => assert_eq!(path, log.name()),
        other => panic!("a second writer must be refused, got {other:?}"),
    }
    // Reading beside the writer is fine.
    let follower = Store::open_on(log.follower(), dir.path(), StoreOptions::new()).unwrap();
    assert_eq!(follower.conversation("a").unwrap().len(), 1);
    // The claim ends with the store that holds it.
    drop(first);
    let second = Store::open_on(log.clone(), dir.path(), StoreOptions::new()).unwrap();
    second
        .append(&[said("a", 1, Role::Assistant, "hi")])
        .unwrap();
    assert_eq!(second.conversation("a").unwrap().len(), 2);
}
