//! Invariants of the store layer that host code must not be able to break:
//! a read-only log view, panicking reducers and observers, a failed fsync
//! taking back acknowledged frames, automatic snapshots off the append
//! path, and observers run outside the store's locks.
//!
//! (`Store::log` cannot append: that is a compile-time guarantee, checked
//! by the `compile_fail` example on `convlog::store::LogView`.)

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::ThreadId;

use convlog::log::Durability;
use convlog::model::{ConversationEntry, CustomEvent, Event, Role, Timestamp};
use convlog::reducer::Reducer;
use convlog::storage::sim::{Fault, SimStorage};
use convlog::storage::Storage;
use convlog::store::{AppendOptions, Store, StoreBuilder, StoreOptions};
use convlog::Error;
use serde::{Deserialize, Serialize};

const SIM_STORE: &str = "/sim/store";

fn entry(conversation: &str, sequence: u64) -> Event {
    let mut entry = ConversationEntry::new(
        "eval-1",
        sequence,
        Role::User,
        Some(format!("message {sequence}")),
    );
    entry.created_at = Timestamp(1_000_000 + sequence as i64);
    entry.recorded_in(conversation)
}

fn custom(kind: &str) -> Event {
    Event::Custom(CustomEvent {
        kind: kind.to_string(),
        conversation_id: None,
        payload: Vec::new(),
    })
}

/// Counts every event; panics on a custom event of kind "boom".
struct Bomb;

impl Reducer for Bomb {
    type Slice = u64;
    fn name(&self) -> &str {
        "bomb/v1"
    }
    fn apply(&self, slice: &mut u64, event: &Event, _lsn: u64) {
        if let Event::Custom(custom) = event {
            if custom.kind == "boom" {
                panic!("the bomb reducer cannot fold a boom");
            }
        }
        *slice += 1;
    }
}

/// Counts every event.
struct Count;

impl Reducer for Count {
    type Slice = u64;
    fn name(&self) -> &str {
        "count/v1"
    }
    fn apply(&self, slice: &mut u64, _event: &Event, _lsn: u64) {
        *slice += 1;
    }
}

#[test]
fn the_log_view_reads_what_the_store_appended() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    store.append(&[entry("c", 1), entry("c", 2)]).unwrap();
    let log = store.log();
    assert_eq!((log.first_lsn(), log.next_lsn()), (1, 3));
    assert_eq!(log.durable_lsn(), 3);
    assert!(!log.is_poisoned());
    let lsns: Vec<u64> = log
        .iter_from(1)
        .take_while(|record| record.as_ref().map_or(true, |record| record.lsn < 3))
        .map(|record| record.unwrap().lsn)
        .collect();
    assert_eq!(lsns, [1, 2]);
}

#[test]
fn a_panicking_reducer_poisons_the_store_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path())
        .reducer(Count)
        .reducer(Bomb)
        .open()
        .unwrap();
    store.append(&[entry("c", 1)]).unwrap();
    // The batch is committed before the reducer folds it: the append reports
    // its LSN (a retry would record it twice).
    let lsns = store.append(&[custom("boom")]).unwrap();
    assert_eq!(lsns, 2..3);
    let named = |error: &Error| {
        matches!(error, Error::ReducerPanicked { reducer, observer: false, lsn: 2, message }
            if reducer == "bomb/v1" && message.contains("cannot fold a boom"))
    };
    let refused = store.append(&[entry("c", 2)]).unwrap_err();
    assert!(named(&refused), "{refused}");
    assert!(refused.to_string().contains("bomb/v1"), "{refused}");
    let unserved = store.slice::<Count>().unwrap_err();
    assert!(named(&unserved), "{unserved}");
    assert!(named(&store.health().unwrap_err()));
    assert!(store.snapshot().is_err(), "no snapshot of poisoned slices");
    // The log and the conversation index are intact.
    assert_eq!(store.log().next_lsn(), 3);
    assert_eq!(store.conversation("c").unwrap().len(), 1);
    drop(store);
    // A deterministic reducer panics again on replay: the open says so.
    let reopened = StoreBuilder::new(dir.path())
        .reducer(Count)
        .reducer(Bomb)
        .open()
        .unwrap_err();
    assert!(named(&reopened), "{reopened}");
    // Without it the store opens and serves everything.
    let store = StoreBuilder::new(dir.path()).reducer(Count).open().unwrap();
    assert_eq!(store.slice::<Count>().unwrap(), 2);
}

#[test]
fn a_panicking_observer_poisons_the_store_with_its_reducers_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path()).reducer(Count).open().unwrap();
    store.observe::<Count>(|_slice, event, _lsn| {
        if matches!(event, Event::Custom(custom) if custom.kind == "boom") {
            panic!("the observer cannot take a boom");
        }
    });
    store.append(&[custom("fine")]).unwrap();
    store.append(&[custom("boom")]).unwrap();
    let refused = store.append(&[custom("fine")]).unwrap_err();
    assert!(
        matches!(&refused, Error::ReducerPanicked { reducer, observer: true, lsn: 2, message }
            if reducer == "count/v1" && message.contains("cannot take a boom")),
        "{refused}"
    );
    assert!(refused.to_string().contains("an observer of host reducer"));
    assert!(matches!(
        store.slice::<Count>(),
        Err(Error::ReducerPanicked { observer: true, .. })
    ));
}

fn sim_disk(seed: u64) -> SimStorage {
    let storage = SimStorage::new(seed);
    storage.create_dir_all(Path::new("/sim")).unwrap();
    storage.sync_dir(Path::new("/")).unwrap();
    storage
}

fn sim_options(storage: &SimStorage) -> StoreOptions {
    StoreOptions::new().storage(Arc::new(storage.clone()))
}

/// Frames acknowledged under `Durability::None` and then taken back by the
/// poisoned writer after a failed fsync are forgotten by the index and the
/// host slices too: reads serve exactly what the log still holds.
#[test]
fn what_a_failed_fsync_takes_back_the_index_and_host_slices_forget() {
    let storage = sim_disk(7);
    let store = StoreBuilder::new(SIM_STORE)
        .options(sim_options(&storage))
        .reducer(Count)
        .open()
        .unwrap();
    store
        .append_with(
            &[entry("kept", 1), entry("both", 1)],
            AppendOptions::new().durability(Durability::Sync),
        )
        .unwrap();
    let taken = store
        .append_with(
            &[entry("both", 2), entry("only-taken-back", 1)],
            AppendOptions::new().durability(Durability::None),
        )
        .unwrap();
    assert_eq!(taken, 3..5);
    assert_eq!(store.slice::<Count>().unwrap(), 4);
    storage.inject(Fault::FsyncEio { nth: 1 });
    assert!(matches!(store.sync(), Err(Error::Poisoned { .. })));
    assert_eq!(store.log().durable_lsn(), 3);

    // The conversation reads what the segment holds, not `Corrupted`.
    let both = store.conversation("both").unwrap();
    assert_eq!(both.len(), 1, "only the durable entry of \"both\"");
    assert_eq!(both.last_lsn(), 2);
    assert_eq!(store.conversation("kept").unwrap().len(), 1);
    assert!(!store.contains_conversation("only-taken-back"));
    assert!(matches!(
        store.conversation("only-taken-back"),
        Err(Error::ConversationNotFound { .. })
    ));
    assert_eq!(store.conversation_ids(), ["both", "kept"]);
    assert_eq!(store.stats().index_entries, 2);
    // The host slice folded taken-back events: it is refused, not served
    // ahead of the log (a reopen rebuilds it from what the log holds).
    let refused = store.slice::<Count>().unwrap_err();
    assert!(
        matches!(&refused, Error::Poisoned { cause, .. } if cause.contains("LSN 3")),
        "{refused}"
    );
    drop(store);
    let store = StoreBuilder::new(SIM_STORE)
        .options(sim_options(&storage))
        .reducer(Count)
        .open()
        .unwrap();
    assert_eq!(store.slice::<Count>().unwrap(), 2);
    assert_eq!(store.conversation("both").unwrap().len(), 1);
}

/// When nothing the host slices folded was taken back, they stay served.
#[test]
fn host_slices_stay_served_when_the_take_back_spares_them() {
    let storage = sim_disk(8);
    let store = StoreBuilder::new(SIM_STORE)
        .options(sim_options(&storage))
        .reducer(Count)
        .open()
        .unwrap();
    store
        .append_with(
            &[entry("c", 1)],
            AppendOptions::new().durability(Durability::Sync),
        )
        .unwrap();
    // The `Sync` append's commit is one durable write (nothing unsynced
    // before it: `docs/format.md` 5.9), so the device error is the write's.
    storage.inject(Fault::WriteEio { nth: 1 });
    assert!(store
        .append_with(
            &[entry("c", 2)],
            AppendOptions::new().durability(Durability::Sync)
        )
        .is_err());
    assert_eq!(store.slice::<Count>().unwrap(), 1);
    assert_eq!(store.conversation("c").unwrap().len(), 1);
    assert!(matches!(store.health(), Err(Error::Poisoned { .. })));
}

/// A slice whose serialization (run only by snapshots) reports the thread
/// it runs on, and blocks until released when that is not the appender's.
#[derive(Default, Clone, Serialize, Deserialize)]
struct Gated(u64);

#[derive(Default)]
struct Gate {
    appender: Option<ThreadId>,
    on_appender_thread: bool,
    entered: bool,
    released: bool,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    appender: None,
    on_appender_thread: false,
    entered: false,
    released: false,
});
static GATE_CHANGED: Condvar = Condvar::new();

fn gate_serialize() {
    let mut gate = GATE.lock().unwrap();
    if gate.appender == Some(std::thread::current().id()) {
        gate.on_appender_thread = true;
        return;
    }
    gate.entered = true;
    GATE_CHANGED.notify_all();
    while !gate.released {
        gate = GATE_CHANGED.wait(gate).unwrap();
    }
}

struct GatedReducer;

impl Reducer for GatedReducer {
    type Slice = GatedSlice;
    fn name(&self) -> &str {
        "gated/v1"
    }
    fn apply(&self, slice: &mut GatedSlice, _event: &Event, _lsn: u64) {
        slice.0 .0 += 1;
    }
}

#[derive(Default, Clone, Deserialize)]
struct GatedSlice(Gated);

impl Serialize for GatedSlice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        gate_serialize();
        self.0.serialize(serializer)
    }
}

#[test]
fn an_append_crossing_the_snapshot_threshold_does_not_wait_for_the_snapshot() {
    GATE.lock().unwrap().appender = Some(std::thread::current().id());
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path())
        .options(
            StoreOptions::new()
                .durability(Durability::None)
                .snapshot_every_events(Some(3)),
        )
        .reducer(GatedReducer)
        .open()
        .unwrap();
    for sequence in 1..=3 {
        store.append(&[entry("c", sequence)]).unwrap();
    }
    assert!(
        !GATE.lock().unwrap().on_appender_thread,
        "the append that crossed the threshold wrote the snapshot on its own thread"
    );
    // The snapshot is under way on another thread, blocked in the middle.
    {
        let mut gate = GATE.lock().unwrap();
        while !gate.entered {
            gate = GATE_CHANGED.wait(gate).unwrap();
        }
    }
    // Appends go on (crossing the threshold again) while it is blocked.
    for sequence in 4..=8 {
        store.append(&[entry("c", sequence)]).unwrap();
    }
    assert_eq!(
        store.stats().snapshot_lsn,
        None,
        "the snapshot is still blocked"
    );
    assert_eq!(store.slice::<GatedReducer>().unwrap().0 .0, 8);
    {
        let mut gate = GATE.lock().unwrap();
        gate.released = true;
        GATE_CHANGED.notify_all();
    }
    store.wait_for_snapshots();
    let snapshot_lsn = store.stats().snapshot_lsn.expect("the snapshot completed");
    assert!(snapshot_lsn >= 4, "cut at LSN {snapshot_lsn}");
    assert_eq!(store.last_snapshot_error(), None);
    assert!(store.automatic_snapshots().0 >= 1);
    assert!(!GATE.lock().unwrap().on_appender_thread);
    drop(store);
    let store = StoreBuilder::new(dir.path())
        .reducer(GatedReducer)
        .open()
        .unwrap();
    assert_eq!(store.slice::<GatedReducer>().unwrap().0 .0, 8);
    assert_eq!(store.conversation("c").unwrap().len(), 8);
}

#[test]
fn a_failed_automatic_snapshot_is_reported_and_the_append_is_not() {
    let storage = sim_disk(9);
    let store = StoreBuilder::new(SIM_STORE)
        .options(sim_options(&storage).snapshot_every_events(Some(2)))
        .reducer(Count)
        .open()
        .unwrap();
    store.append(&[entry("c", 1)]).unwrap();
    storage.inject(Fault::CreateEio { nth: 1 });
    store.append(&[entry("c", 2)]).unwrap();
    store.wait_for_snapshots();
    let error = store.last_snapshot_error().expect("the snapshot failed");
    assert!(error.contains("snap"), "{error}");
    assert_eq!(store.automatic_snapshots(), (0, 1));
    assert_eq!(store.stats().snapshot_lsn, None);
    // The next crossing tries again, and a success clears the error.
    store.append(&[entry("c", 3)]).unwrap();
    store.wait_for_snapshots();
    assert_eq!(store.last_snapshot_error(), None);
    assert_eq!(store.automatic_snapshots(), (1, 1));
    assert_eq!(store.stats().snapshot_lsn, Some(4));
}

/// An observer may read the store and append to it: it runs after the
/// ordering lock is released (on the code before, this deadlocks).
#[test]
fn an_observer_may_read_and_append_to_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(StoreBuilder::new(dir.path()).reducer(Count).open().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let weak: Weak<Store> = Arc::downgrade(&store);
    let record = Arc::clone(&seen);
    store.observe::<Count>(move |slice, event, lsn| {
        let store = weak.upgrade().expect("the store is alive");
        let live = store.slice::<Count>().unwrap();
        assert!(
            live >= *slice,
            "the live slice is at least the observed one"
        );
        let kind = match event {
            Event::Custom(custom) => custom.kind.clone(),
            _ => "entry".to_string(),
        };
        record.lock().unwrap().push((lsn, *slice, kind.clone()));
        if kind == "ping" {
            store.append(&[custom("pong")]).unwrap();
            assert!(store.conversation_ids().is_empty());
        }
    });
    store.append(&[custom("ping")]).unwrap();
    // The pong the observer appended was observed before this append returned.
    assert_eq!(
        *seen.lock().unwrap(),
        [(1, 1, "ping".to_string()), (2, 2, "pong".to_string())]
    );
    assert_eq!(store.slice::<Count>().unwrap(), 2);
}

/// Appenders on many threads: every event is observed once, in LSN order,
/// with the slice as it was right after that event, and never two
/// observer calls at once.
#[test]
fn observers_see_every_event_in_lsn_order_one_at_a_time() {
    const THREADS: u64 = 4;
    const APPENDS: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        StoreBuilder::new(dir.path())
            .options(StoreOptions::new().durability(Durability::None))
            .reducer(Count)
            .open()
            .unwrap(),
    );
    let inside = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    let (flag, seen) = (Arc::clone(&inside), Arc::clone(&last));
    store.observe::<Count>(move |slice, _event, lsn| {
        assert!(
            !flag.swap(true, Ordering::SeqCst),
            "two observer calls at once"
        );
        assert_eq!(*slice, lsn, "the slice right after event {lsn}");
        let previous = seen.swap(lsn, Ordering::SeqCst);
        assert_eq!(previous + 1, lsn, "observed out of LSN order");
        flag.store(false, Ordering::SeqCst);
    });
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for _ in 0..APPENDS {
                    store.append(&[custom("a"), custom("b")]).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    store.health().unwrap();
    assert_eq!(last.load(Ordering::SeqCst), THREADS * APPENDS * 2);
    assert_eq!(store.slice::<Count>().unwrap(), THREADS * APPENDS * 2);
}
