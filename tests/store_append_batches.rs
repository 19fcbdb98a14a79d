//! `Store::append_batches`: several batches, each its own atomic batch,
//! made durable together by one commit. Each batch is a frame of its own,
//! is indexed and folded on its own and fails alone; the group costs one
//! durable write; a failed commit acknowledges nothing that is not durable;
//! whatever was acknowledged survives a crash.

use std::path::Path;
use std::sync::Arc;

use convlog::erasure::StoreKey;
use convlog::log::format::BATCH_EVENTS_MAX;
use convlog::model::{ConversationEntry, CustomEvent, Event, Role, Timestamp};
use convlog::reducer::Reducer;
use convlog::storage::sim::{Fault, SimStorage};
use convlog::storage::Storage;
use convlog::store::{Store, StoreBuilder, StoreOptions};
use convlog::Error;

const SIM_STORE: &str = "/sim/store";

fn entry(conversation: &str, sequence: u64) -> Event {
    let mut entry = ConversationEntry::new(
        "eval-1",
        sequence,
        Role::User,
        Some(format!("{conversation} {sequence}")),
    );
    entry.created_at = Timestamp(1_000_000 + sequence as i64);
    entry.recorded_in(conversation)
}

fn contents(store: &Store, conversation: &str) -> Vec<String> {
    store
        .conversation(conversation)
        .unwrap()
        .entries()
        .map(|entry| entry.content.clone().unwrap_or_default())
        .collect()
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

fn sim_disk(seed: u64) -> SimStorage {
    let storage = SimStorage::new(seed);
    storage.create_dir_all(Path::new("/sim")).unwrap();
    storage.sync_dir(Path::new("/")).unwrap();
    storage
}

fn open_sim(storage: &SimStorage) -> convlog::Result<Store> {
    StoreBuilder::new(SIM_STORE)
        .options(StoreOptions::new().storage(Arc::new(storage.clone())))
        .reducer(Count)
        .open()
}

#[test]
fn each_batch_is_a_frame_of_its_own_and_the_group_is_one_durable_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path()).reducer(Count).open().unwrap();
    store.append(&[entry("a", 0)]).unwrap();
    let before = store.log().writer_stats();
    let a = [entry("a", 1), entry("a", 2)];
    let b = [entry("b", 0)];
    let c = [entry("a", 3), entry("c", 0)];
    let results = store.append_batches(&[&a, &b, &c]);
    let lsns: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(lsns, [2..4, 4..5, 5..7]);
    // Durable when it returns, by one write and no fdatasync: a durable
    // direct write counts as one sync.
    let after = store.log().writer_stats();
    assert_eq!(after.frames, before.frames + 3);
    assert_eq!(after.writes, before.writes + 1, "one write for the group");
    assert_eq!(after.syncs, before.syncs + 1, "one commit for the group");
    assert_eq!(store.log().durable_lsn(), 7);
    // A frame per batch.
    let positions: Vec<_> = store
        .log()
        .iter_from(2)
        .map(|record| record.unwrap().position)
        .collect();
    assert_eq!(positions[0], positions[1]);
    assert_ne!(positions[1], positions[2]);
    assert_ne!(positions[2], positions[3]);
    assert_eq!(positions[3], positions[4]);
    // Indexed and folded.
    assert_eq!(contents(&store, "a"), ["a 0", "a 1", "a 2", "a 3"]);
    assert_eq!(contents(&store, "b"), ["b 0"]);
    assert_eq!(contents(&store, "c"), ["c 0"]);
    assert_eq!(store.slice::<Count>().unwrap(), 6);
    drop(store);
    let store = StoreBuilder::new(dir.path()).reducer(Count).open().unwrap();
    assert_eq!(contents(&store, "a"), ["a 0", "a 1", "a 2", "a 3"]);
    assert_eq!(store.slice::<Count>().unwrap(), 6);
}

#[test]
fn a_bad_batch_fails_alone_with_the_error_an_append_gives_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreBuilder::new(dir.path()).reducer(Count).open().unwrap();
    let good = [entry("a", 0)];
    // The second event is invalid (an empty evaluation id).
    let invalid = [
        entry("b", 0),
        ConversationEntry::user("", 1, "no evaluation").recorded_in("b"),
    ];
    let empty: [Event; 0] = [];
    // A kind only the store writes.
    let reserved = [Event::Custom(CustomEvent {
        kind: convlog::erasure::KEY_MADE_KIND.to_string(),
        conversation_id: Some("d".to_string()),
        payload: Vec::new(),
    })];
    // Over the log's limit of events per batch: refused by the log, not by
    // the checks before it.
    let huge: Vec<Event> = (0..=BATCH_EVENTS_MAX)
        .map(|_| {
            Event::Custom(CustomEvent {
                kind: "tick".to_string(),
                conversation_id: Some("e".to_string()),
                payload: Vec::new(),
            })
        })
        .collect();
    let last = [entry("a", 1)];
    let results = store.append_batches(&[&good, &invalid, &empty, &reserved, &huge, &last]);
    assert_eq!(results[0].as_ref().unwrap(), &(1..2));
    assert!(
        matches!(&results[1], Err(Error::InvalidEvent { index: 1, field }) if field.field == "entry.evaluation_id"),
        "{:?}",
        results[1]
    );
    assert!(
        matches!(results[2], Err(Error::EmptyBatch)),
        "{:?}",
        results[2]
    );
    assert!(
        matches!(&results[3], Err(Error::InvalidEvent { index: 0, field }) if field.field == "kind"),
        "{:?}",
        results[3]
    );
    assert!(
        matches!(
            &results[4],
            Err(Error::LimitExceeded {
                constant: "BATCH_EVENTS_MAX",
                ..
            })
        ),
        "{:?}",
        results[4]
    );
    // The LSNs go on from the last batch stored: nothing of the refused
    // ones took any.
    assert_eq!(results[5].as_ref().unwrap(), &(2..3));
    assert_eq!(contents(&store, "a"), ["a 0", "a 1"]);
    for refused in ["b", "d", "e"] {
        assert!(!store.contains_conversation(refused), "{refused}");
    }
    assert_eq!(store.slice::<Count>().unwrap(), 2);
    assert!(!store.log().is_poisoned());
    drop(store);
    let store = StoreBuilder::new(dir.path()).reducer(Count).open().unwrap();
    assert_eq!(store.log().next_lsn(), 3);
    assert_eq!(store.slice::<Count>().unwrap(), 2);
}

/// A failed commit fails every batch of the group: nothing is acknowledged,
/// indexed or folded, the writer is poisoned, and a reopen finds only what
/// was durable before.
#[test]
fn a_failed_commit_fails_every_batch_of_the_group() {
    let storage = sim_disk(11);
    let store = open_sim(&storage).unwrap();
    store.append(&[entry("a", 0)]).unwrap();
    // The group's commit is one durable write: it fails.
    storage.inject(Fault::WriteEio { nth: 1 });
    let (a, b) = ([entry("a", 1)], [entry("b", 0), entry("b", 1)]);
    let results = store.append_batches(&[&a, &b]);
    for result in &results {
        assert!(matches!(result, Err(Error::Poisoned { .. })), "{result:?}");
    }
    assert!(store.log().is_poisoned());
    assert_eq!(store.log().durable_lsn(), 2);
    assert_eq!(contents(&store, "a"), ["a 0"]);
    assert!(!store.contains_conversation("b"));
    assert_eq!(store.slice::<Count>().unwrap(), 1);
    // Poisoned: the next group is refused whole too.
    let results = store.append_batches(&[&[entry("c", 0)]]);
    assert!(matches!(results[0], Err(Error::Poisoned { .. })));
    drop(store);
    storage.clear_faults();
    let store = open_sim(&storage).unwrap();
    assert_eq!(store.log().next_lsn(), 2);
    assert_eq!(contents(&store, "a"), ["a 0"]);
    assert!(!store.contains_conversation("b"));
}

/// Every batch acknowledged survives a power loss at any point after it
/// (the simulated disk keeps or drops each unsynced write at random).
#[test]
fn every_acknowledged_batch_survives_a_power_loss() {
    for seed in 0..20 {
        let storage = sim_disk(seed);
        let store = open_sim(&storage).unwrap();
        let mut acknowledged = 0;
        for round in 0..5 {
            let batches: Vec<Vec<Event>> = (0..=round)
                .map(|batch| vec![entry(&format!("c{batch}"), round)])
                .collect();
            let refs: Vec<&[Event]> = batches.iter().map(Vec::as_slice).collect();
            for result in store.append_batches(&refs) {
                result.unwrap();
                acknowledged += 1;
            }
        }
        let image = storage.crash(seed + 100);
        drop(store);
        let store = open_sim(&image).unwrap();
        assert_eq!(store.log().next_lsn(), acknowledged + 1, "seed {seed}");
        assert_eq!(store.slice::<Count>().unwrap(), acknowledged, "seed {seed}");
        assert_eq!(contents(&store, "c0").len(), 5, "seed {seed}");
        assert_eq!(contents(&store, "c4"), ["c4 4"], "seed {seed}");
    }
}

/// On an encrypted store, two batches of one group that start the same
/// conversation both read back after a reopen, sealed.
#[test]
fn batches_of_an_encrypted_store_that_start_one_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let options = || StoreOptions::new().encryption(Some(StoreKey::from_bytes([7; 32])));
    let store = Store::open(dir.path(), options()).unwrap();
    let (first, second) = ([entry("new", 0)], [entry("new", 1)]);
    let results = store.append_batches(&[&first, &second]);
    // The caller's events' LSNs (the key event before the first is the
    // store's own).
    let lsns: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(lsns[0].end - lsns[0].start, 1);
    assert_eq!(lsns[1].end - lsns[1].start, 1);
    assert!(lsns[0].end <= lsns[1].start);
    assert_eq!(contents(&store, "new"), ["new 0", "new 1"]);
    drop(store);
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(contents(&store, "new"), ["new 0", "new 1"]);
}

#[test]
fn a_read_only_store_refuses_each_batch() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), StoreOptions::default()).unwrap());
    let store = Store::open_read_only(dir.path(), StoreOptions::default()).unwrap();
    let results = store.append_batches(&[&[entry("a", 0)], &[entry("b", 0)]]);
    assert_eq!(results.len(), 2);
    for result in results {
        assert!(matches!(result, Err(Error::ReadOnly { .. })), "{result:?}");
    }
}

/// Groups that cross segment rolls, with a fault injected at a random
/// write, fsync or segment creation: every batch acknowledged is durable
/// (it survives a power loss), no batch is acknowledged after one of its
/// group was refused, and nothing refused comes back after the reopen.
#[test]
fn groups_across_rolls_and_faults_keep_every_acknowledged_batch() {
    // How many runs had a batch refused, and rolled a segment: the test
    // must reach both.
    let (mut runs_refused, mut runs_rolled) = (0, 0);
    for seed in 0..60u64 {
        let storage = sim_disk(seed);
        let options = || {
            StoreOptions::new()
                .storage(Arc::new(storage.clone()))
                .segment_bytes_max(4096)
        };
        let store = StoreBuilder::new(SIM_STORE)
            .options(options())
            .reducer(Count)
            .open()
            .unwrap();
        let nth = 2 + seed % 9;
        storage.inject(match seed % 3 {
            0 => Fault::WriteEio { nth },
            1 => Fault::FsyncEio { nth },
            _ => Fault::CreateEio { nth: 1 + seed % 2 },
        });
        // (conversation, sequence) of every event acknowledged, in order.
        let mut acknowledged: Vec<(String, u64)> = Vec::new();
        let mut refused = false;
        for round in 0..20u64 {
            let batches: Vec<Vec<Event>> = (0..1 + (seed + round) % 5)
                .map(|batch| {
                    let conversation = format!("c{}", (seed + batch) % 4);
                    (0..1 + batch % 3)
                        .map(|n| entry(&conversation, round * 100 + batch * 10 + n))
                        .collect()
                })
                .collect();
            let refs: Vec<&[Event]> = batches.iter().map(Vec::as_slice).collect();
            for (batch, result) in batches.iter().zip(store.append_batches(&refs)) {
                match result {
                    Ok(_) => {
                        assert!(!refused, "seed {seed}: acknowledged after a refusal");
                        for event in batch {
                            let Event::ConversationRecorded(recorded) = event else {
                                unreachable!()
                            };
                            acknowledged
                                .push((recorded.conversation_id.clone(), recorded.entry.sequence));
                        }
                    }
                    Err(error) => {
                        assert!(
                            matches!(error, Error::Poisoned { .. }),
                            "seed {seed}: {error}"
                        );
                        refused = true;
                    }
                }
            }
        }
        runs_refused += u32::from(refused);
        runs_rolled += u32::from(store.log().writer_stats().rolls > 0);
        let image = storage.crash(seed + 1_000);
        drop(store);
        image.clear_faults();
        let store = StoreBuilder::new(SIM_STORE)
            .options(
                StoreOptions::new()
                    .storage(Arc::new(image.clone()))
                    .segment_bytes_max(4096),
            )
            .reducer(Count)
            .open()
            .unwrap();
        // Exactly the acknowledged events: durable, and nothing refused.
        let mut found: Vec<(String, u64)> = Vec::new();
        for record in store.log().iter_from(1) {
            let record = record.unwrap();
            let event = convlog::codec::decode_event(&record.payload).unwrap();
            if let Event::ConversationRecorded(recorded) = event {
                found.push((recorded.conversation_id, recorded.entry.sequence));
            }
        }
        assert_eq!(found, acknowledged, "seed {seed}");
        assert_eq!(
            store.slice::<Count>().unwrap(),
            acknowledged.len() as u64,
            "seed {seed}"
        );
    }
    assert!(
        runs_refused >= 20,
        "{runs_refused} runs of 60 had a refusal"
    );
    assert!(
        runs_rolled >= 20,
        "{runs_rolled} runs of 60 rolled a segment"
    );
}
