//! The store's behaviour on a log, one body per behaviour, run on every
//! log by the tests that include this module (`#[path]`): the segment log
//! and `MemoryLog` (tests/log_boundary.rs) and the JetStream log
//! (crates/nats/tests/jetstream.rs), so the backends cannot drift. Each
//! body takes the `Backing` to open stores on; `check_contract` checks the
//! `EventLog` contract on a log directly.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use convlog::log::{
    Binding, Dropped, Durability, EventLog, Locator, LogCursor, Lsn, MemoryLog, Record,
};
use convlog::model::{ConversationEntry, Event, Role};
use convlog::reducer::Reducer;
use convlog::store::{AppendOptions, Expect, Retention, Store, StoreOptions};
use convlog::Error;

/// Counts events by type; a host reducer.
pub struct Counter;

impl Reducer for Counter {
    type Slice = u64;
    fn name(&self) -> &str {
        "boundary-counter/v1"
    }
    fn apply(&self, slice: &mut u64, _event: &Event, _lsn: Lsn) {
        *slice += 1;
    }
}

/// What a store runs on, for one test body run on every log.
pub trait Backing {
    fn name(&self) -> &'static str;
    /// Opens (or reopens) the writable store, with the `Counter` reducer.
    fn open(&self, options: StoreOptions) -> Store;
    /// Opens a read-only store following the writer.
    fn open_follower(&self) -> Store;
    /// A read-only handle on the log itself.
    fn follower_log(&self) -> Box<dyn EventLog>;
    /// Another writable store on the same log, with its own snapshot
    /// directory (another host), for a log with many writers
    /// ([`EventLog::many_writers`]); `None` for a log with one writer.
    fn open_another_writer(&self) -> Option<Store> {
        None
    }
}

/// Small segments, so that compaction has sealed segments to delete.
pub fn options() -> StoreOptions {
    StoreOptions::new().segment_bytes_max(4096)
}

pub fn said(conversation: &str, sequence: u64, role: Role, text: &str) -> Event {
    ConversationEntry::new("eval-1", sequence, role, Some(text.to_string()))
        .recorded_in(conversation)
}

pub fn appends_reads_resume_and_reopen_behave_the_same_on_both_logs(backing: &dyn Backing) {
    let name = backing.name();
    {
        let store = backing.open(options());
        let first = store
            .append(&[
                said("a", 0, Role::User, "hello"),
                said("b", 0, Role::User, "other"),
            ])
            .unwrap();
        assert_eq!(first, 1..3, "{name}");
        let second = store
            .append(&[said("a", 1, Role::Assistant, "hi")])
            .unwrap();
        assert_eq!(second, 3..4, "{name}");
        assert_eq!(store.conversation("a").unwrap().len(), 2, "{name}");
        assert_eq!(store.conversation("a").unwrap().last_lsn(), 3, "{name}");
        assert_eq!(store.conversation_ids(), ["a", "b"], "{name}");
        assert!(matches!(
            store.conversation("missing"),
            Err(Error::ConversationNotFound { .. })
        ));
        let resumed = store.resume("a", &Default::default()).unwrap();
        assert_eq!(resumed.entries.len(), 2, "{name}");
        assert_eq!(store.log().next_lsn(), 4, "{name}");
        store.sync().unwrap();
        assert_eq!(store.log().durable_lsn(), 4, "{name}");
        assert_eq!(store.slice::<Counter>().unwrap(), 3, "{name}");
    }
    let store = backing.open(options());
    assert_eq!(store.open_report().replayed_events, 3, "{name}");
    assert_eq!(store.conversation("a").unwrap().len(), 2, "{name}");
    assert_eq!(store.conversation("b").unwrap().len(), 1, "{name}");
    assert_eq!(store.slice::<Counter>().unwrap(), 3, "{name}");
    assert_eq!(store.stats().next_lsn, 4, "{name}");
}

pub fn host_reducers_are_folded_observed_and_restored_from_snapshots_on_both_logs(
    backing: &dyn Backing,
) {
    let name = backing.name();
    let observed = Arc::new(AtomicU64::new(0));
    {
        let store = backing.open(options());
        let seen = Arc::clone(&observed);
        store.observe::<Counter>(move |_, _, lsn| {
            seen.store(lsn, Ordering::SeqCst);
        });
        for sequence in 0..5 {
            store
                .append(&[said("a", sequence, Role::User, "turn")])
                .unwrap();
        }
        assert_eq!(observed.load(Ordering::SeqCst), 5, "{name}");
        let info = store.snapshot().unwrap();
        assert_eq!(info.lsn, 6, "{name}");
        store
            .append(&[said("a", 5, Role::Assistant, "after the snapshot")])
            .unwrap();
    }
    let store = backing.open(options());
    let report = store.open_report();
    assert_eq!(
        report.snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(6),
        "{name}"
    );
    assert!(report.skipped_snapshots.is_empty(), "{name}: {report:?}");
    // Only the event after the snapshot is replayed.
    assert_eq!(report.replayed_events, 1, "{name}");
    assert_eq!(store.slice::<Counter>().unwrap(), 6, "{name}");
    assert_eq!(store.conversation("a").unwrap().len(), 6, "{name}");
}

pub fn conditional_appends_conflict_on_both_logs(backing: &dyn Backing) {
    let name = backing.name();
    let store = backing.open(options());
    store.append(&[said("a", 0, Role::User, "hello")]).unwrap();
    let read = store.conversation("a").unwrap();
    store
        .append_with(
            &[said("a", 1, Role::Assistant, "hi")],
            AppendOptions::new().expect(Expect::conversation("a", read.last_lsn())),
        )
        .unwrap();
    match store.append_with(
        &[said("a", 1, Role::Assistant, "late")],
        AppendOptions::new().expect(Expect::conversation("a", read.last_lsn())),
    ) {
        Err(Error::Conflict {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (1, 2), "{name}"),
        other => panic!("{name}: expected a conflict, got {other:?}"),
    }
    match store.append_with(
        &[said("b", 0, Role::User, "x")],
        AppendOptions::new().expect(Expect::store(2)),
    ) {
        Err(Error::Conflict {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (2, 3), "{name}"),
        other => panic!("{name}: expected a conflict, got {other:?}"),
    }
    store
        .append_with(
            &[said("b", 0, Role::User, "x")],
            AppendOptions::new().expect(Expect::store(3)),
        )
        .unwrap();
    assert_eq!(store.conversation("a").unwrap().len(), 2, "{name}");
    assert_eq!(store.log().next_lsn(), 4, "{name}");
}

pub fn compaction_drops_the_prefix_and_reads_of_it_are_compacted_on_both_logs(
    backing: &dyn Backing,
) {
    let name = backing.name();
    let text = "x".repeat(300);
    let options = options().retention(Retention::DeleteCoveredBySnapshot);
    {
        let store = backing.open(options.clone());
        for sequence in 0..60 {
            store
                .append(&[said("a", sequence, Role::User, &text)])
                .unwrap();
        }
        let snapshot = store.snapshot().unwrap();
        assert_eq!(snapshot.lsn, 61, "{name}");
        store.compact().unwrap();
        let first = store.log().first_lsn();
        assert!(first > 1 && first <= 61, "{name}: first LSN {first}");
        store
            .append(&[said("a", 60, Role::User, "after compaction")])
            .unwrap();
        assert_eq!(store.conversation("a").unwrap().len(), 61, "{name}");
    }
    // Reading the dropped prefix is `Compacted`, naming where the log
    // continues.
    let log = backing.follower_log();
    let first = log.first_lsn();
    match log.read_from(1).next() {
        Some(Err(Error::Compacted {
            first_missing,
            next_present,
            ..
        })) => assert_eq!((first_missing, next_present), (1, first), "{name}"),
        other => panic!("{name}: expected Compacted, got {other:?}"),
    }
    // Reopened, the store starts from the snapshot.
    let store = backing.open(options);
    assert_eq!(store.conversation("a").unwrap().len(), 61, "{name}");
    assert_eq!(store.slice::<Counter>().unwrap(), 61, "{name}");
}

pub fn a_read_only_store_follows_its_writer_on_both_logs(backing: &dyn Backing) {
    let name = backing.name();
    let writer = backing.open(options());
    writer.append(&[said("a", 0, Role::User, "hello")]).unwrap();
    let follower = backing.open_follower();
    assert!(follower.is_read_only(), "{name}");
    assert_eq!(follower.conversation("a").unwrap().len(), 1, "{name}");
    writer
        .append(&[
            said("a", 1, Role::Assistant, "hi"),
            said("b", 0, Role::User, "new"),
        ])
        .unwrap();
    assert_eq!(follower.refresh().unwrap(), 4, "{name}");
    assert_eq!(follower.conversation("a").unwrap().len(), 2, "{name}");
    assert_eq!(follower.conversation_ids(), ["a", "b"], "{name}");
    assert_eq!(follower.slice::<Counter>().unwrap(), 3, "{name}");
    assert!(matches!(
        follower.append(&[said("a", 2, Role::User, "no")]),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(follower.snapshot(), Err(Error::ReadOnly { .. })));
}

/// The contract of `EventLog`, checked on a log directly.
pub fn check_contract(name: &str, log: &dyn EventLog, follower: &dyn EventLog) {
    assert!(log.is_writable() && !follower.is_writable(), "{name}");
    assert_eq!(log.store_id(), follower.store_id(), "{name}");
    let payloads = |texts: &[&str]| -> Vec<Vec<u8>> {
        texts.iter().map(|text| text.as_bytes().to_vec()).collect()
    };
    // Gap-free LSN ranges, batch after batch.
    let (first, at_first) = log
        .append(&payloads(&["a", "b"]), Durability::Sync)
        .unwrap();
    let (second, at_second) = log.append(&payloads(&["c"]), Durability::Sync).unwrap();
    assert_eq!((first.clone(), second.clone()), (1..3, 3..4), "{name}");
    assert_eq!(log.next_lsn(), 4, "{name}");
    // One batch back at its locator, with the locator on every record.
    let batch: Vec<(Lsn, Vec<u8>, Locator)> = log
        .read_batch(at_first)
        .unwrap()
        .into_iter()
        .map(|record| (record.lsn, record.payload, record.position))
        .collect();
    assert_eq!(
        batch,
        [(1, b"a".to_vec(), at_first), (2, b"b".to_vec(), at_first)],
        "{name}"
    );
    assert_ne!(at_first, at_second, "{name}");
    // A cursor reads on, stops at the end, and follows what comes later.
    let mut cursor = follower.read_from(2);
    let lsns: Vec<Lsn> = cursor.by_ref().map(|record| record.unwrap().lsn).collect();
    assert_eq!(lsns, [2, 3], "{name}");
    assert_eq!(cursor.next_lsn(), 4, "{name}");
    log.append(&payloads(&["d"]), Durability::Sync).unwrap();
    let later: Vec<Record> = cursor.by_ref().map(Result::unwrap).collect();
    assert_eq!(later.len(), 1, "{name}");
    assert_eq!(
        (later[0].lsn, later[0].payload.as_slice()),
        (4, &b"d"[..]),
        "{name}"
    );
    // What the log holds before an LSN binds snapshots.
    assert!(matches!(log.binding_at(3), Ok(Binding::Found(_))), "{name}");
    assert!(matches!(log.binding_at(5), Ok(Binding::Found(_))), "{name}");
    assert!(
        matches!(
            log.binding_at(2),
            Ok(Binding::InsideBatch {
                batch_first_lsn: 1,
                batch_end_lsn: 3
            })
        ),
        "{name}"
    );
    assert!(
        matches!(log.binding_at(6), Ok(Binding::PastEnd { next_lsn: 5 })),
        "{name}"
    );
    assert_ne!(
        log.binding_at(3).unwrap(),
        log.binding_at(4).unwrap(),
        "{name}"
    );
    assert_eq!(
        log.binding_at(4).unwrap(),
        follower.binding_at(4).unwrap(),
        "{name}"
    );
    // Durable after sync; a follower writes nothing.
    log.sync().unwrap();
    assert_eq!(log.durable_lsn(), 5, "{name}");
    assert!(matches!(
        follower.append(&payloads(&["e"]), Durability::Sync),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(
        follower.drop_before(3),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(follower.sync(), Err(Error::ReadOnly { .. })));
}

/// Regression: `LogView::iter_from` and the audit timeline (which scans
/// the log for re-run calls) panicked on a store that does not run on the
/// segment log. Both read through the boundary now.
pub fn the_log_view_and_the_audit_timeline_read_every_log(backing: &dyn Backing) {
    let name = backing.name();
    let store = backing.open(options());
    store
        .append(&[
            said("a", 0, Role::User, "hello"),
            said("a", 1, Role::Assistant, "hi"),
        ])
        .unwrap();
    let lsns: Vec<Lsn> = store
        .log()
        .iter_from(1)
        .take(2)
        .map(|record| record.unwrap().lsn)
        .collect();
    assert_eq!(lsns, [1, 2], "{name}");
    let timeline = convlog::audit::Timeline::from_store(&store, "a", &Default::default()).unwrap();
    assert_eq!(timeline.entries, 2, "{name}");
    assert_eq!(
        store.log().reader().is_some(),
        name == "segment log",
        "{name}: only the segment log has its own reader"
    );
}

/// A writer of a shared `MemoryLog` that behaves as a handle of a log with
/// many writers: its appends are a compare-and-set on the log's end (as a
/// JetStream writer's `Nats-Expected-Last-Sequence`), so the store's
/// many-writer path runs in memory too.
#[derive(Debug)]
pub struct SharedMemoryWriter {
    log: MemoryLog,
    /// Shared by every writer of the log: one compare-and-set at a time.
    gate: Arc<std::sync::Mutex<()>>,
    /// One past the last event this handle knows of.
    known: AtomicU64,
}

impl SharedMemoryWriter {
    /// A writer of `log`; every writer of one log shares `gate`.
    pub fn new(log: &MemoryLog, gate: &Arc<std::sync::Mutex<()>>) -> SharedMemoryWriter {
        SharedMemoryWriter {
            log: log.clone(),
            gate: Arc::clone(gate),
            known: AtomicU64::new(log.next_lsn()),
        }
    }
}

impl EventLog for SharedMemoryWriter {
    fn store_id(&self) -> convlog::log::boundary::LogStoreId {
        self.log.store_id()
    }
    fn is_writable(&self) -> bool {
        true
    }
    fn many_writers(&self) -> bool {
        true
    }
    fn append(
        &self,
        payloads: &[Vec<u8>],
        durability: Durability,
    ) -> convlog::Result<(std::ops::Range<Lsn>, Locator)> {
        let _one_at_a_time = self.gate.lock().unwrap();
        let (known, actual) = (self.known.load(Ordering::Acquire), self.log.next_lsn());
        if known != actual {
            self.known.store(actual, Ordering::Release);
            return Err(Error::Conflict {
                store: self.log.name().to_path_buf(),
                conversation_id: None,
                expected: known,
                actual,
            });
        }
        let appended = self.log.append(payloads, durability)?;
        self.known.store(appended.0.end, Ordering::Release);
        Ok(appended)
    }
    fn read_batch(&self, locator: Locator) -> convlog::Result<Vec<Record>> {
        self.log.read_batch(locator)
    }
    fn read_from(&self, lsn: Lsn) -> Box<dyn LogCursor> {
        self.log.read_from(lsn)
    }
    fn first_lsn(&self) -> Lsn {
        self.log.first_lsn()
    }
    fn next_lsn(&self) -> Lsn {
        self.known.load(Ordering::Acquire)
    }
    fn durable_lsn(&self) -> Lsn {
        self.log.durable_lsn().min(self.next_lsn())
    }
    fn drop_before(&self, lsn: Lsn) -> convlog::Result<Dropped> {
        self.log.drop_before(lsn)
    }
    fn sync(&self) -> convlog::Result<()> {
        self.log.sync()
    }
    fn binding_at(&self, lsn: Lsn) -> convlog::Result<Binding> {
        self.log.binding_at(lsn)
    }
}

/// Two hosts write one store through two `Store`s: each sees the other's
/// appends (indexed, folded into host slices, in reads and resumes), LSNs
/// stay gap-free whoever appends, a conditional append checks the version
/// every writer made (the loser of a race gets `Conflict`, never an
/// interleaving), and a store reopened (from its own snapshot) has it all.
pub fn many_writers_share_one_log(backing: &dyn Backing) {
    let name = backing.name();
    let first = backing.open(options());
    let Some(second) = backing.open_another_writer() else {
        return;
    };
    assert_eq!(
        first.append(&[said("a", 0, Role::User, "one")]).unwrap(),
        1..2,
        "{name}"
    );
    // The second learns of the first's append when its own loses the race.
    assert_eq!(
        second.append(&[said("b", 0, Role::User, "two")]).unwrap(),
        2..3,
        "{name}"
    );
    assert_eq!(
        first
            .append(&[said("a", 1, Role::Assistant, "three")])
            .unwrap(),
        3..4,
        "{name}"
    );
    for store in [&first, &second] {
        assert_eq!(store.conversation("a").unwrap().len(), 2, "{name}");
        assert_eq!(store.conversation("b").unwrap().len(), 1, "{name}");
        assert_eq!(store.conversation_ids(), ["a", "b"], "{name}");
        assert_eq!(store.slice::<Counter>().unwrap(), 3, "{name}");
        assert_eq!(store.log().next_lsn(), 4, "{name}");
    }

    // Both read conversation "a" at version 3 and append on it: one wins.
    let read = second.conversation("a").unwrap().last_lsn();
    assert_eq!(read, 3, "{name}");
    let expect = || AppendOptions::new().expect(Expect::conversation("a", read));
    first
        .append_with(&[said("a", 2, Role::User, "first wins")], expect())
        .unwrap();
    match second.append_with(&[said("a", 2, Role::User, "second loses")], expect()) {
        Err(Error::Conflict {
            conversation_id: Some(id),
            expected,
            actual,
            ..
        }) => assert_eq!((id.as_str(), expected, actual), ("a", 3, 4), "{name}"),
        other => panic!("{name}: expected a conflict, got {other:?}"),
    }
    // Another conversation's version did not move: its append goes through
    // although the second store had not seen the first's last append.
    second
        .append_with(
            &[said("b", 1, Role::Assistant, "b goes on")],
            AppendOptions::new().expect(Expect::conversation("b", 2)),
        )
        .unwrap();
    // The store's version: every writer's append moves it.
    match first.append_with(
        &[said("c", 0, Role::User, "stale")],
        AppendOptions::new().expect(Expect::store(5)),
    ) {
        Err(Error::Conflict {
            conversation_id: None,
            expected,
            actual,
            ..
        }) => assert_eq!((expected, actual), (5, 6), "{name}"),
        other => panic!("{name}: expected a conflict, got {other:?}"),
    }
    first
        .append_with(
            &[said("c", 0, Role::User, "fresh")],
            AppendOptions::new().expect(Expect::store(6)),
        )
        .unwrap();

    // Appends from both stores at once, on threads: gap-free, nothing lost.
    const EACH: u64 = 12;
    std::thread::scope(|scope| {
        for (index, store) in [&first, &second].into_iter().enumerate() {
            scope.spawn(move || {
                for sequence in 0..EACH {
                    let conversation = format!("t{index}");
                    store
                        .append(&[said(&conversation, sequence, Role::User, "x")])
                        .unwrap();
                }
            });
        }
    });
    let total = 6 + 2 * EACH;
    for store in [&first, &second] {
        assert_eq!(store.refresh().unwrap(), total + 1, "{name}");
        for conversation in ["t0", "t1"] {
            let slice = store.conversation(conversation).unwrap();
            assert_eq!(slice.len() as u64, EACH, "{name}");
        }
        assert_eq!(store.slice::<Counter>().unwrap(), total, "{name}");
        assert_eq!(store.conversation("a").unwrap().len(), 3, "{name}");
    }
    let log = backing.follower_log();
    let lsns: Vec<Lsn> = log.read_from(1).map(|record| record.unwrap().lsn).collect();
    assert_eq!(lsns, (1..=total).collect::<Vec<_>>(), "{name}");

    // A snapshot taken by the second covers the first's events too; the
    // second, reopened from it, has them all.
    second.snapshot().unwrap();
    drop(second);
    let second = backing.open_another_writer().unwrap();
    assert_eq!(second.slice::<Counter>().unwrap(), total, "{name}");
    assert_eq!(
        second.conversation("t0").unwrap().len() as u64,
        EACH,
        "{name}"
    );
    assert_eq!(
        second.append(&[said("a", 3, Role::User, "after")]).unwrap(),
        total + 1..total + 2,
        "{name}"
    );
    assert_eq!(first.conversation("a").unwrap().len(), 4, "{name}");
}
