//! The conversation store: recording, folding, snapshots, compaction and
//! host reducers.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::Rng;
use convlog::conversation::{self, ConversationSlice};
use convlog::model::{
    ConversationEntry, CustomEvent, Event, HistoryCurated, MessagesReplaced, Role, Timestamp,
    ToolCall, ToolStatus, ToolStatusChanged,
};
use convlog::reducer::Reducer;
use convlog::store::{Retention, Store, StoreBuilder, StoreOptions};
use convlog::Error;
use proptest::prelude::*;

fn small_store_options() -> StoreOptions {
    StoreOptions::new().segment_bytes_max(4096)
}

fn entry(evaluation: &str, sequence: u64, role: Role, text: &str) -> ConversationEntry {
    let mut entry = ConversationEntry::new(evaluation, sequence, role, Some(text.to_string()));
    entry.created_at = Timestamp(1_000_000 + sequence as i64);
    entry
}

fn assistant(evaluation: &str, sequence: u64, calls: &[&str]) -> ConversationEntry {
    let mut entry = entry(evaluation, sequence, Role::Assistant, "calling tools");
    entry.tool_calls = calls
        .iter()
        .map(|call| ToolCall {
            call_id: call.to_string(),
            name: "search".into(),
            arguments: format!("{{\"q\":\"{call}\"}}"),
            status: ToolStatus::Pending,
            started_at: None,
            ended_at: None,
            error: None,
        })
        .collect();
    entry
}

fn tool_result(evaluation: &str, sequence: u64, call: &str) -> ConversationEntry {
    let mut entry = entry(
        evaluation,
        sequence,
        Role::Tool,
        &format!("result of {call}"),
    );
    entry.tool_call_id = Some(call.into());
    entry.tool_name = Some("search".into());
    entry
}

fn status(conversation: &str, evaluation: &str, call: &str, status: ToolStatus) -> Event {
    Event::ToolStatus(ToolStatusChanged::new(
        conversation,
        evaluation,
        call,
        status,
        Timestamp(5),
    ))
}

#[test]
fn a_recorded_conversation_reads_back_folded_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    store
        .append(&[entry("e1", 0, Role::System, "be brief").recorded_in("c1")])
        .unwrap();
    store
        .append(&[entry("e1", 1, Role::User, "weather?").recorded_in("c1")])
        .unwrap();
    store
        .append(&[entry("e1", 0, Role::System, "other").recorded_in("c2")])
        .unwrap();
    store
        .append(&[
            assistant("e1", 2, &["a", "b"]).recorded_in("c1"),
            status("c1", "e1", "a", ToolStatus::Running),
        ])
        .unwrap();
    store
        .append(&[tool_result("e1", 3, "a").recorded_in("c1")])
        .unwrap();

    let slice = store.conversation("c1").unwrap();
    let texts: Vec<_> = slice
        .entries()
        .map(|entry| entry.content.clone().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["be brief", "weather?", "calling tools", "result of a"]
    );
    assert_eq!(
        slice.tool_call("a").unwrap().1.status,
        ToolStatus::Completed
    );
    assert_eq!(slice.tool_call("b").unwrap().1.status, ToolStatus::Pending);
    assert_eq!(store.conversation("c2").unwrap().len(), 1);
    assert!(matches!(
        store.conversation("nope"),
        Err(Error::ConversationNotFound { conversation_id }) if conversation_id == "nope"
    ));
    assert_eq!(store.conversation_ids(), ["c1", "c2"]);
}

#[test]
fn an_invalid_event_rejects_its_whole_batch_and_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    store
        .append(&[entry("e1", 0, Role::System, "kept").recorded_in("c")])
        .unwrap();
    let mut bad = assistant("e1", 1, &["a"]);
    bad.tool_calls[0].call_id = "x".repeat(300);
    let error = store
        .append(&[
            entry("e1", 2, Role::User, "fine").recorded_in("c"),
            bad.recorded_in("c"),
        ])
        .unwrap_err();
    match &error {
        Error::InvalidEvent { index, field } => {
            assert_eq!(*index, 1);
            assert_eq!(field.field, "entry.tool_calls[0].call_id");
        }
        other => panic!("expected InvalidEvent, got {other:?}"),
    }
    assert!(error.to_string().contains("ID_BYTES_MAX"), "{error}");
    let empty_id = entry("e1", 3, Role::User, "x").recorded_in("");
    assert!(matches!(
        store.append(&[empty_id]),
        Err(Error::InvalidEvent { .. })
    ));
    assert_eq!(
        store.conversation("c").unwrap().len(),
        1,
        "nothing of the batch was stored"
    );
    assert_eq!(store.log().next_lsn(), 2);
}

/// Counts tool-status events and sums custom "tokens" payloads.
#[derive(Default)]
struct Counter;

impl Reducer for Counter {
    type Slice = BTreeMap<String, u64>;
    fn name(&self) -> &str {
        "test-counter/v1"
    }
    fn apply(&self, slice: &mut Self::Slice, event: &Event, _lsn: u64) {
        *slice.entry(event.type_name().to_string()).or_default() += 1;
        if let Event::Custom(custom) = event {
            *slice.entry("tokens".into()).or_default() += custom.payload.len() as u64;
        }
    }
}

fn custom(bytes: usize) -> Event {
    Event::Custom(CustomEvent {
        kind: "tokens".into(),
        conversation_id: None,
        payload: vec![7; bytes],
    })
}

#[test]
fn host_reducers_fold_observe_and_survive_snapshots_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let observed = Arc::new(AtomicU64::new(0));
    {
        let store = StoreBuilder::new(dir.path())
            .reducer(Counter)
            .open()
            .unwrap();
        let seen = Arc::clone(&observed);
        store.observe::<Counter>(move |slice, _event, lsn| {
            assert!(slice.values().sum::<u64>() > 0);
            seen.store(lsn, Ordering::SeqCst);
        });
        store.append(&[custom(3), custom(4)]).unwrap();
        store
            .append(&[entry("e", 0, Role::User, "hi").recorded_in("c")])
            .unwrap();
        store.snapshot().unwrap();
        store.append(&[custom(10)]).unwrap();
        let slice = store.slice::<Counter>().unwrap();
        assert_eq!(slice["tokens"], 17);
        assert_eq!(slice["custom"], 3);
        assert_eq!(
            observed.load(Ordering::SeqCst),
            4,
            "observer saw the last LSN"
        );
    }
    // Snapshot slice + tail replay.
    let store = StoreBuilder::new(dir.path())
        .reducer(Counter)
        .open()
        .unwrap();
    assert_eq!(store.open_report().replayed_events, 1);
    assert_eq!(store.slice::<Counter>().unwrap()["tokens"], 17);
    assert_eq!(
        store.slice::<Counter>().unwrap()["conversation_recorded"],
        1
    );
}

/// A reducer registered after the snapshot was taken has no slice in it.
struct LateCounter;

impl Reducer for LateCounter {
    type Slice = u64;
    fn name(&self) -> &str {
        "late/v1"
    }
    fn apply(&self, slice: &mut u64, _event: &Event, _lsn: u64) {
        *slice += 1;
    }
}

#[test]
fn a_reducer_missing_from_the_snapshot_is_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        for _ in 0..5 {
            store.append(&[custom(1)]).unwrap();
        }
        store.snapshot().unwrap();
        store.append(&[custom(1)]).unwrap();
    }
    let store = StoreBuilder::new(dir.path())
        .reducer(LateCounter)
        .open()
        .unwrap();
    assert_eq!(store.slice::<LateCounter>().unwrap(), 6);
}

fn full_fold(dir: &std::path::Path, conversation_id: &str) -> ConversationSlice {
    let events: Vec<(Event, u64)> = common::read_all(dir)
        .into_iter()
        .map(|record| {
            (
                convlog::codec::decode_event(&record.payload).unwrap(),
                record.lsn,
            )
        })
        .collect();
    conversation::fold(
        conversation_id,
        events.iter().map(|(event, lsn)| (event, *lsn)),
    )
}

#[test]
fn open_after_a_snapshot_replays_only_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), small_store_options()).unwrap();
        for index in 0..200u64 {
            store
                .append(&[entry("e", index, Role::User, &format!("message {index}"))
                    .recorded_in(&format!("c{}", index % 7))])
                .unwrap();
        }
        let info = store.snapshot().unwrap();
        assert_eq!(info.lsn, 201);
        assert_eq!(info.conversations, 7);
        for index in 200..230u64 {
            store
                .append(&[
                    entry("e", index, Role::User, "after").recorded_in(&format!("c{}", index % 7))
                ])
                .unwrap();
        }
    }
    let store = Store::open(dir.path(), small_store_options()).unwrap();
    let report = store.open_report();
    assert_eq!(report.snapshot.as_ref().map(|(_, lsn)| *lsn), Some(201));
    assert_eq!(report.replayed_events, 30);
    for conversation in store.conversation_ids() {
        assert_eq!(
            store.conversation(&conversation).unwrap(),
            full_fold(dir.path(), &conversation)
        );
    }
}

#[test]
fn a_damaged_snapshot_is_skipped_for_an_older_one_or_a_full_replay() {
    let dir = tempfile::tempdir().unwrap();
    let snapshots: Vec<_> = {
        let store = Store::open(dir.path(), small_store_options()).unwrap();
        let mut taken = Vec::new();
        for round in 0..2u64 {
            for index in 0..20u64 {
                store
                    .append(&[entry("e", round * 20 + index, Role::User, "m").recorded_in("c")])
                    .unwrap();
            }
            taken.push(store.snapshot().unwrap());
        }
        taken
    };
    // Damage the directory of the newest snapshot: the older one is used.
    let newest = &snapshots[1].path;
    let mut bytes = std::fs::read(newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(newest, &bytes).unwrap();
    let store = Store::open(dir.path(), small_store_options()).unwrap();
    assert_eq!(store.open_report().skipped_snapshots.len(), 1);
    assert_eq!(
        store.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(snapshots[0].lsn)
    );
    assert_eq!(store.conversation("c").unwrap(), full_fold(dir.path(), "c"));
    drop(store);
    // Damage the older one's header too: a full replay.
    let mut bytes = std::fs::read(&snapshots[0].path).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&snapshots[0].path, &bytes).unwrap();
    let store = Store::open(dir.path(), small_store_options()).unwrap();
    assert_eq!(store.open_report().snapshot, None);
    assert_eq!(store.open_report().replayed_events, 40);
    assert_eq!(store.conversation("c").unwrap(), full_fold(dir.path(), "c"));
}

#[test]
fn a_damaged_slice_in_a_snapshot_falls_back_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let info = {
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        for index in 0..10u64 {
            store
                .append(&[entry("e", index, Role::User, "m").recorded_in("c")])
                .unwrap();
        }
        store.snapshot().unwrap()
    };
    // The first blob starts right after the header.
    let mut bytes = std::fs::read(&info.path).unwrap();
    bytes[convlog::store::snapshot::SNAPSHOT_HEADER_BYTES + 12] ^= 0x01;
    std::fs::write(&info.path, &bytes).unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(store.conversation("c").unwrap(), full_fold(dir.path(), "c"));
    let verified = convlog::store::verify(dir.path(), &mut |_| {}).unwrap();
    assert!(
        verified.snapshots[0].1.is_err(),
        "verify reports the damaged blob"
    );
}

#[test]
fn compaction_deletes_only_what_a_snapshot_covers_and_only_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let fill = |store: &Store, from: u64, to: u64| {
        for index in from..to {
            store
                .append(&[entry("e", index, Role::User, &"words ".repeat(20))
                    .recorded_in(&format!("c{}", index % 3))])
                .unwrap();
        }
    };
    let before: Vec<ConversationSlice>;
    {
        let store = Store::open(dir.path(), small_store_options()).unwrap();
        fill(&store, 0, 200);
        store.snapshot().unwrap();
        let kept = store.compact().unwrap();
        assert!(
            kept.removed.is_empty(),
            "the default retention keeps the log"
        );
        assert!(kept.note.unwrap().contains("KeepAll"));
    }
    let options = small_store_options().retention(Retention::DeleteCoveredBySnapshot);
    {
        let store = Store::open(dir.path(), options.clone()).unwrap();
        fill(&store, 200, 260);
        store.snapshot().unwrap();
        let segments_before = common::segment_paths(dir.path()).len();
        let report = store.compact().unwrap();
        assert!(!report.removed.is_empty());
        assert_eq!(
            common::segment_paths(dir.path()).len(),
            segments_before - report.removed.len()
        );
        assert!(store.log().first_lsn() > 1);
        fill(&store, 260, 270);
        before = (0..3)
            .map(|c| store.conversation(&format!("c{c}")).unwrap())
            .collect();
        assert_eq!(
            before.iter().map(ConversationSlice::len).sum::<usize>(),
            270
        );
    }
    let store = Store::open(dir.path(), options).unwrap();
    let after: Vec<ConversationSlice> = (0..3)
        .map(|c| store.conversation(&format!("c{c}")).unwrap())
        .collect();
    assert_eq!(after, before);
    drop(store);
    // Without a usable snapshot, a compacted log cannot be opened silently.
    for entry in std::fs::read_dir(dir.path().join("snapshots")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    assert!(matches!(
        Store::open(dir.path(), small_store_options()),
        Err(Error::SnapshotRestore { .. })
    ));
}

#[test]
fn automatic_snapshots_every_n_events() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions::new().snapshot_every_events(Some(50));
    let store = Store::open(dir.path(), options.clone()).unwrap();
    for index in 0..120u64 {
        store
            .append(&[entry("e", index, Role::User, "m").recorded_in("c")])
            .unwrap();
    }
    // Written by the store's background thread: the crossing append asked
    // for it and returned; where the snapshot cuts depends on when it ran.
    store.wait_for_snapshots();
    let (written, failed) = store.automatic_snapshots();
    assert!(
        written >= 1 && failed == 0,
        "{written} written, {failed} failed"
    );
    let snapshot_lsn = store.stats().snapshot_lsn.expect("a snapshot was taken");
    assert!(snapshot_lsn > 50, "snapshot at LSN {snapshot_lsn}");
    drop(store);
    let store = Store::open(dir.path(), options).unwrap();
    assert_eq!(
        store.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(snapshot_lsn)
    );
    assert_eq!(store.open_report().replayed_events, 121 - snapshot_lsn);
    assert_eq!(store.conversation("c").unwrap().len(), 120);
}

#[test]
fn a_crash_while_writing_a_snapshot_leaves_the_store_usable() {
    let dir = tempfile::tempdir().unwrap();
    let (older, newer) = {
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        for index in 0..5u64 {
            store
                .append(&[entry("e", index, Role::User, "m").recorded_in("c")])
                .unwrap();
        }
        let older = store.snapshot().unwrap();
        for index in 5..10u64 {
            store
                .append(&[entry("e", index, Role::User, "m").recorded_in("c")])
                .unwrap();
        }
        (older, store.snapshot().unwrap())
    };
    let bytes = std::fs::read(&newer.path).unwrap();
    let temporary = dir
        .path()
        .join("snapshots")
        .join(format!("{:020}.snap.tmp", newer.lsn));
    // A crash before the rename leaves a temporary file of any length; a
    // power loss after it can leave the final file cut at any length.
    for cut in [0, 10, 47, 48, 60, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&temporary, &bytes[..cut]).unwrap();
        std::fs::write(&newer.path, &bytes[..cut]).unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let report = store.open_report();
        assert_eq!(
            report.snapshot.as_ref().map(|(_, lsn)| *lsn),
            Some(older.lsn),
            "cut {cut}"
        );
        assert_eq!(report.skipped_snapshots.len(), 1, "cut {cut}");
        assert_eq!(report.replayed_events, 5, "cut {cut}");
        assert_eq!(store.conversation("c").unwrap(), full_fold(dir.path(), "c"));
    }
    std::fs::write(&newer.path, &bytes).unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(
        store.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(newer.lsn)
    );
}

/// One random operation of the property test.
#[derive(Debug, Clone)]
enum Step {
    Record {
        conversation: u8,
        evaluation: u8,
        role: u8,
        calls: u8,
    },
    Duplicate(u8),
    Status {
        conversation: u8,
        call: u8,
        status: u8,
    },
    Result {
        conversation: u8,
        call: u8,
        error: bool,
    },
    Replace {
        conversation: u8,
        keep: u8,
    },
    Curate(u8),
    Custom(u8),
    Snapshot,
    Reopen,
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..3, 0u8..3, 0u8..3, 0u8..3).prop_map(|(conversation, evaluation, role, calls)| Step::Record { conversation, evaluation, role, calls }),
        1 => any::<u8>().prop_map(Step::Duplicate),
        3 => (0u8..3, any::<u8>(), 0u8..4).prop_map(|(conversation, call, status)| Step::Status { conversation, call, status }),
        2 => (0u8..3, any::<u8>(), any::<bool>()).prop_map(|(conversation, call, error)| Step::Result { conversation, call, error }),
        1 => (0u8..3, 0u8..4).prop_map(|(conversation, keep)| Step::Replace { conversation, keep }),
        1 => (0u8..3).prop_map(Step::Curate),
        1 => any::<u8>().prop_map(Step::Custom),
        1 => Just(Step::Snapshot),
        1 => Just(Step::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// For random event sequences with snapshots and reopens at random
    /// points: every conversation read from the store (snapshot + tail)
    /// equals the pure fold of every event in the log, slice for slice, and
    /// host slices equal a full replay.
    #[test]
    fn snapshot_plus_tail_replay_equals_full_replay(steps in proptest::collection::vec(step_strategy(), 1..60), seed in any::<u64>()) {
        let dir = tempfile::tempdir().unwrap();
        let open = || StoreBuilder::new(dir.path()).options(small_store_options()).reducer(Counter).open().unwrap();
        let mut store = open();
        let mut rng = Rng::new(seed);
        let mut recorded: Vec<Event> = Vec::new();
        let mut calls: Vec<(String, String, String)> = Vec::new();
        let mut sequence = 0u64;
        for step in steps {
            let conversation_of = |index: u8| format!("conv-{index}");
            let event = match step {
                Step::Record { conversation, evaluation, role, calls: call_count } => {
                    sequence += 1;
                    let evaluation = format!("eval-{evaluation}");
                    let conversation = conversation_of(conversation);
                    let mut new = match role {
                        0 => entry(&evaluation, rng.below(20), Role::User, "u"),
                        1 => entry(&evaluation, rng.below(20), Role::System, "s"),
                        _ => {
                            let ids: Vec<String> = (0..call_count).map(|index| format!("call-{sequence}-{index}")).collect();
                            for id in &ids {
                                calls.push((conversation.clone(), evaluation.clone(), id.clone()));
                            }
                            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                            assistant(&evaluation, rng.below(20), &refs)
                        }
                    };
                    new.turn = rng.below(3) as u32;
                    new.recorded_in(&conversation)
                }
                Step::Duplicate(pick) => match recorded.iter().filter(|event| matches!(event, Event::ConversationRecorded(_))).nth(pick as usize) {
                    Some(event) => event.clone(),
                    None => continue,
                },
                Step::Status { conversation, call, status: which } => {
                    let (conversation, evaluation, call) = calls
                        .get(call as usize % calls.len().max(1))
                        .cloned()
                        .unwrap_or((conversation_of(conversation), "eval-0".into(), "ghost".into()));
                    let status_value = [ToolStatus::Pending, ToolStatus::Running, ToolStatus::Completed, ToolStatus::Failed][which as usize];
                    status(&conversation, &evaluation, &call, status_value)
                }
                Step::Result { conversation, call, error } => {
                    sequence += 1;
                    let (conversation, evaluation, call) = calls
                        .get(call as usize % calls.len().max(1))
                        .cloned()
                        .unwrap_or((conversation_of(conversation), "eval-0".into(), "ghost".into()));
                    let mut result = tool_result(&evaluation, rng.below(20), &call);
                    result.is_error = error;
                    result.recorded_in(&conversation)
                }
                Step::Replace { conversation, keep } => Event::MessagesReplaced(MessagesReplaced {
                    conversation_id: conversation_of(conversation),
                    entries: (0..keep).map(|index| entry("eval-r", u64::from(index), Role::User, "replaced")).collect(),
                    at: Timestamp(9),
                }),
                Step::Curate(conversation) => Event::HistoryCurated(HistoryCurated {
                    conversation_id: conversation_of(conversation),
                    strategy: "sliding_window(3)".into(),
                    original_count: 10,
                    curated_count: 4,
                    at: Timestamp(9),
                    prompt_name: Some("planner".into()),
                    session_id: Some("sess-1".into()),
                }),
                Step::Custom(size) => custom(usize::from(size % 16)),
                Step::Snapshot => {
                    store.snapshot().unwrap();
                    continue;
                }
                Step::Reopen => {
                    drop(store);
                    store = open();
                    continue;
                }
            };
            store.append(std::slice::from_ref(&event)).unwrap();
            recorded.push(event);
        }
        for index in 0..3u8 {
            let id = format!("conv-{index}");
            let expected = conversation::fold(&id, recorded.iter().zip(1..));
            match store.conversation(&id) {
                Ok(slice) => prop_assert_eq!(slice, expected),
                Err(Error::ConversationNotFound { .. }) => prop_assert!(expected.last_lsn() == 0),
                Err(other) => prop_assert!(false, "{other}"),
            }
        }
        let mut counter = BTreeMap::new();
        for (event, lsn) in recorded.iter().zip(1..) {
            Counter.apply(&mut counter, event, lsn);
        }
        prop_assert_eq!(store.slice::<Counter>().unwrap(), counter);
    }
}

#[test]
fn concurrent_appenders_to_one_conversation_read_back_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        StoreBuilder::new(dir.path())
            .reducer(Counter)
            .open()
            .unwrap(),
    );
    let threads: Vec<_> = (0..8u64)
        .map(|thread| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for index in 0..50u64 {
                    let evaluation = format!("eval-{thread}");
                    store
                        .append(&[entry(&evaluation, index, Role::User, "m").recorded_in("shared")])
                        .unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let slice = store.conversation("shared").unwrap();
    assert_eq!(slice.len(), 400);
    assert_eq!(slice, full_fold(dir.path(), "shared"));
    assert_eq!(
        store.slice::<Counter>().unwrap()["conversation_recorded"],
        400
    );
}

/// `conversation_batches_since` lists the batches of one conversation from
/// an LSN on, from the index, and refuses to answer for a range a snapshot
/// folded away.
#[test]
fn conversation_batches_since_lists_a_conversations_batches_until_a_snapshot_hides_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let user = |conversation: &str, text: &str| {
        convlog::ConversationEntry::user("ev", 0, text).recorded_in(conversation)
    };
    let a1 = store.append(&[user("a", "1"), user("a", "2")]).unwrap();
    let b1 = store.append(&[user("b", "1")]).unwrap();
    // A batch of both: listed for each at its first event of that conversation.
    let mixed = store.append(&[user("b", "2"), user("a", "3")]).unwrap();
    assert_eq!(
        store.conversation_batches_since("a", 1),
        Some(vec![a1.start, mixed.start + 1])
    );
    assert_eq!(
        store.conversation_batches_since("a", a1.start + 1),
        Some(vec![mixed.start + 1])
    );
    assert_eq!(
        store.conversation_batches_since("b", 1),
        Some(vec![b1.start, mixed.start])
    );
    assert_eq!(
        store.conversation_batches_since("a", mixed.end),
        Some(vec![])
    );
    assert_eq!(store.conversation_batches_since("nobody", 1), Some(vec![]));

    store.snapshot().unwrap();
    let a2 = store.append(&[user("a", "4")]).unwrap();
    // Before the snapshot: folded away, so no answer; after it: listed.
    assert_eq!(store.conversation_batches_since("a", 1), None);
    assert_eq!(
        store.conversation_batches_since("a", mixed.end),
        Some(vec![a2.start])
    );
}

/// The events of one tool-using evaluation of `conversation`: a user entry,
/// an assistant entry calling two tools (a status of the second may come
/// before the call), their statuses and results (the second failed, its
/// result larger than a first positioned read), and an answer.
fn evaluation_events(conversation: &str, evaluation: &str, round: usize) -> Vec<Vec<Event>> {
    let (first, second) = (format!("{evaluation}-a"), format!("{evaluation}-b"));
    let mut failed = tool_result(evaluation, 3, &second);
    failed.is_error = true;
    failed.content = Some("x".repeat(9_000 + round * 100));
    let mut batches = vec![
        vec![entry(evaluation, 0, Role::User, "question").recorded_in(conversation)],
        vec![status(
            conversation,
            evaluation,
            &second,
            ToolStatus::Running,
        )],
        vec![assistant(evaluation, 1, &[&first, &second]).recorded_in(conversation)],
        vec![
            status(conversation, evaluation, &first, ToolStatus::Running),
            status(conversation, evaluation, &first, ToolStatus::Completed),
            tool_result(evaluation, 2, &first).recorded_in(conversation),
        ],
        vec![failed.recorded_in(conversation)],
        vec![entry(
            evaluation,
            4,
            Role::Assistant,
            &"answer ".repeat(round % 50),
        )
        .recorded_in(conversation)],
    ];
    if round % 2 == 1 {
        // The status before its call comes after it instead.
        batches.swap(1, 2);
    }
    batches
}

/// Reading a conversation reads its frames in one pass (nearby frames of
/// the active segment together, sealed segments from their maps): the
/// slice equals a fold of the whole log, for conversations whose frames
/// are interleaved with others', shared with others', spread across
/// segment boundaries, in the active segment, before and after a reopen,
/// and from a read-only store.
#[test]
fn reading_a_conversation_equals_folding_the_whole_log() {
    let dir = tempfile::tempdir().unwrap();
    let conversations: Vec<String> = (0..7).map(|index| format!("conv-{index}")).collect();
    {
        let store =
            Store::open(dir.path(), StoreOptions::new().segment_bytes_max(64 * 1024)).unwrap();
        let mut pending: Vec<(usize, Vec<Vec<Event>>)> = Vec::new();
        let mut rng = Rng::new(15);
        for round in 0..30 {
            for (index, conversation) in conversations.iter().enumerate() {
                pending.push((
                    index,
                    evaluation_events(conversation, &format!("e{round}-{index}"), round),
                ));
            }
            // Interleave the conversations' batches at random, sometimes
            // two conversations in one batch.
            while !pending.is_empty() {
                let pick = rng.below(pending.len() as u64) as usize;
                let mut batch = pending[pick].1.remove(0);
                if rng.below(5) == 0 {
                    let other = rng.below(pending.len() as u64) as usize;
                    if other != pick && !pending[other].1.is_empty() {
                        batch.extend(pending[other].1.remove(0));
                    }
                }
                store.append_with(&batch, quick()).unwrap();
                pending.retain(|(_, batches)| !batches.is_empty());
            }
        }
        store.sync().unwrap();
        for conversation in &conversations {
            let slice = store.conversation(conversation).unwrap();
            assert_eq!(slice.len(), 30 * 5);
            assert_eq!(slice, full_fold(dir.path(), conversation), "{conversation}");
        }
    }
    let segments = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".seg")
        })
        .count();
    assert!(
        segments > 3,
        "sealed segments and an active one: {segments}"
    );
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let reader = Store::open_read_only(dir.path(), StoreOptions::default()).unwrap();
    for conversation in &conversations {
        let expected = full_fold(dir.path(), conversation);
        assert_eq!(store.conversation(conversation).unwrap(), expected);
        assert_eq!(reader.conversation(conversation).unwrap(), expected);
    }
}

fn quick() -> convlog::AppendOptions {
    convlog::AppendOptions::new().durability(convlog::log::Durability::None)
}

/// A conversation read while a writer appends others' events to the same
/// active segment reads exactly its own frames.
#[test]
fn reading_a_conversation_while_others_are_appended_reads_its_frames() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
    for round in 0..20 {
        for batch in evaluation_events("mine", &format!("e{round}"), round) {
            store.append_with(&batch, quick()).unwrap();
            store
                .append_with(
                    &[entry("other", round as u64, Role::User, "noise").recorded_in("other")],
                    quick(),
                )
                .unwrap();
        }
    }
    let expected = store.conversation("mine").unwrap();
    assert_eq!(expected, full_fold(dir.path(), "mine"));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut sequence = 1_000u64;
            while !stop.load(Ordering::SeqCst) || sequence < 1_100 {
                store
                    .append_with(
                        &[entry(
                            "later",
                            sequence,
                            Role::User,
                            &"n".repeat((sequence % 7_000) as usize),
                        )
                        .recorded_in("other")],
                        quick(),
                    )
                    .unwrap();
                sequence += 1;
            }
        })
    };
    for _ in 0..40 {
        assert_eq!(store.conversation("mine").unwrap(), expected);
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    assert_eq!(store.conversation("mine").unwrap(), expected);
}

/// Rewrites a snapshot header's version and last-frame offset (bytes 8
/// and 44, docs/format.md section 13) and its checksum.
fn rewrite_snapshot_header(path: &std::path::Path, version: u32, last_frame_offset: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    bytes[44..48].copy_from_slice(&last_frame_offset.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..68]);
    bytes[68..72].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

fn last_frame_offset(path: &std::path::Path) -> u32 {
    let bytes = std::fs::read(path).unwrap();
    u32::from_le_bytes(bytes[44..48].try_into().unwrap())
}

/// A store with a snapshot late in its active segment and a tail after it.
fn store_with_a_snapshot_and_a_tail(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u64>) {
    let store = Store::open(dir, StoreOptions::default()).unwrap();
    let mut frames = Vec::new();
    for round in 0..40 {
        for batch in evaluation_events("c", &format!("e{round}"), round) {
            frames.push(store.append_with(&batch, quick()).unwrap().start);
        }
    }
    let info = store.snapshot().unwrap();
    for round in 40..45 {
        for batch in evaluation_events("c", &format!("e{round}"), round) {
            store.append_with(&batch, quick()).unwrap();
        }
    }
    store.sync().unwrap();
    (info.path, frames)
}

/// A snapshot records where its last frame is; opening replays from just
/// after it, and reads the same store as a full replay.
#[test]
fn open_replays_from_the_snapshots_last_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (snapshot, _) = store_with_a_snapshot_and_a_tail(dir.path());
    assert_ne!(
        last_frame_offset(&snapshot),
        0,
        "the snapshot names its last frame"
    );
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let report = store.open_report();
    assert_eq!(
        report.snapshot.as_ref().map(|(path, _)| path),
        Some(&snapshot)
    );
    assert!(
        report.skipped_snapshots.is_empty(),
        "{:?}",
        report.skipped_snapshots
    );
    assert_eq!(report.replayed_events, 5 * 8);
    assert_eq!(store.conversation("c").unwrap(), full_fold(dir.path(), "c"));
    // The tail replayed from there is indexed: appends and reads go on.
    store
        .append(&[entry("e-last", 0, Role::User, "more").recorded_in("c")])
        .unwrap();
    assert_eq!(store.conversation("c").unwrap(), full_fold(dir.path(), "c"));
}

/// A snapshot whose last-frame offset names another frame (or no frame)
/// does not match the log: it is refused like a stale one, and the store
/// opens from the log.
#[test]
fn a_snapshot_naming_the_wrong_last_frame_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (snapshot, _) = store_with_a_snapshot_and_a_tail(dir.path());
    let honest = last_frame_offset(&snapshot);
    let expected = full_fold(dir.path(), "c");
    let reader = convlog::log::LogReader::open(dir.path()).unwrap();
    let earlier = reader
        .iter()
        .map(|record| record.unwrap().position.offset as u32)
        .filter(|offset| *offset < honest)
        .last()
        .unwrap();
    for lie in [earlier, honest + 1, 56, u32::MAX] {
        rewrite_snapshot_header(&snapshot, 4, lie);
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let report = store.open_report();
        assert_eq!(report.snapshot, None, "offset {lie}");
        assert_eq!(report.skipped_snapshots.len(), 1, "offset {lie}");
        assert!(
            report.skipped_snapshots[0]
                .1
                .contains("does not match the log"),
            "{:?}",
            report.skipped_snapshots
        );
        assert_eq!(store.conversation("c").unwrap(), expected);
        drop(store);
        let verified = convlog::store::verify(dir.path(), &mut |_| {}).unwrap();
        assert_eq!(verified.chosen_snapshot, None, "offset {lie}");
    }
    rewrite_snapshot_header(&snapshot, 4, honest);
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(store.open_report().snapshot.is_some());
    assert_eq!(store.conversation("c").unwrap(), expected);
}

/// A snapshot of format version 3 (no last-frame offset) still opens: the
/// replay starts at the start of the segment holding its LSN.
#[test]
fn a_version_3_snapshot_without_a_last_frame_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let (snapshot, _) = store_with_a_snapshot_and_a_tail(dir.path());
    rewrite_snapshot_header(&snapshot, 3, 0);
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let report = store.open_report();
    assert_eq!(
        report.snapshot.as_ref().map(|(path, _)| path),
        Some(&snapshot)
    );
    assert!(report.skipped_snapshots.is_empty());
    assert_eq!(report.replayed_events, 5 * 8);
    assert_eq!(store.conversation("c").unwrap(), full_fold(dir.path(), "c"));
    drop(store);
    // A version 3 header with something in its reserved field is damaged.
    rewrite_snapshot_header(&snapshot, 3, 1234);
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(store.open_report().snapshot, None);
}

/// `LogView::iter_from` starts near the LSN (at a frame the store indexed)
/// instead of at the start of its segment: from every LSN it returns
/// exactly what a reader scanning from the log's start returns from there,
/// across segments, in the active segment, from LSNs inside batches, and
/// after a reopen (seek points of replayed frames only).
#[test]
fn reading_the_log_from_an_lsn_returns_what_a_full_scan_returns_from_there() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreOptions::new().segment_bytes_max(256 * 1024),
    )
    .unwrap();
    for round in 0..60 {
        for batch in evaluation_events("c", &format!("e{round}"), round) {
            store.append_with(&batch, quick()).unwrap();
        }
    }
    let all: Vec<(u64, Vec<u8>)> = common::read_all(dir.path())
        .into_iter()
        .map(|record| (record.lsn, record.payload))
        .collect();
    let check = |store: &Store| {
        for from in (1..=all.len() as u64 + 1)
            .step_by(7)
            .chain([all.len() as u64, all.len() as u64 + 1])
        {
            let read: Vec<(u64, Vec<u8>)> = store
                .log()
                .iter_from(from)
                .map(|record| {
                    let record = record.unwrap();
                    (record.lsn, record.payload)
                })
                .collect();
            assert_eq!(read, all[from as usize - 1..], "from LSN {from}");
        }
    };
    check(&store);
    drop(store);
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    check(&store);
    store.snapshot().unwrap();
    drop(store);
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    check(&store);
}

/// Regression (found by the store crash simulation): when compaction has
/// deleted the segment holding a snapshot's last frame (the log starts at
/// the snapshot's LSN), that frame cannot be looked at; the snapshot is
/// bound by the next segment's header and is used, not refused.
#[test]
fn a_snapshot_whose_last_frame_was_compacted_away_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let options = || small_store_options().retention(Retention::DeleteCoveredBySnapshot);
    let snapshot_lsn = {
        let store = Store::open(dir.path(), options()).unwrap();
        for sequence in 0..5 {
            store
                .append(&[entry("e", sequence, Role::User, "hello").recorded_in("c")])
                .unwrap();
        }
        let info = store.snapshot().unwrap();
        assert_ne!(last_frame_offset(&info.path), 0);
        // Too large for what is left of the segment: the next one starts
        // at the snapshot's LSN, and compaction deletes the one before.
        store.append(&[custom(3_600)]).unwrap();
        let report = store.compact().unwrap();
        assert!(!report.removed.is_empty(), "{report:?}");
        assert_eq!(store.log().first_lsn(), info.lsn);
        info.lsn
    };
    let store = Store::open(dir.path(), options()).unwrap();
    let report = store.open_report();
    assert!(
        report.skipped_snapshots.is_empty(),
        "{:?}",
        report.skipped_snapshots
    );
    assert_eq!(
        report.snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(snapshot_lsn)
    );
    assert_eq!(store.conversation("c").unwrap().len(), 5);
}
