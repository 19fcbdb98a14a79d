//! Real processes: the conversation store, with automatic and explicit
//! snapshots and compaction, in a writer killed with SIGKILL at random
//! moments.
//!
//! The child (this test binary again, with `CONVLOG_TEST_ROLE=store-writer`,
//! see `common::spawn_role`) opens a `Store` with 16 KiB segments, appends
//! deterministic conversation events from three threads and prints
//! `ACK <first_lsn> <cycle> <thread> <counter> .` after each acknowledged
//! batch, while a fourth thread calls `Store::snapshot` and `Store::compact`
//! at random moments (and prints markers around them). The parent kills it
//! after a random delay, reopens the store and checks:
//!
//! 1. every acknowledged batch is present: its LSNs lie below the end of the
//!    log, the log holds exactly its events there (while its segment still
//!    exists) and each conversation read through `Store::conversation` holds
//!    its entries at its LSNs (also once compaction removed its segment);
//! 2. the log is gap-free from its first LSN, each frame is exactly one
//!    batch that a child appended (all-or-nothing), and every LSN from 1 to
//!    the end belongs to exactly one batch;
//! 3. each conversation read from the store equals the pure fold
//!    (`convlog::conversation::fold`) of the events the parent knows are at
//!    those LSNs: the acknowledged batches plus the unacknowledged ones the
//!    log (or, once compacted, the snapshot) holds, which are checked to be
//!    batches a child really attempted (the prefix rule);
//! 4. the store opens whatever the kill interrupted: its own opening, an
//!    append, a snapshot (a leftover `.snap.tmp`), a compaction (segments
//!    partly removed); no snapshot is ever skipped as damaged;
//! 5. `convlog::store::verify` passes, before the reopen and after it.
//!
//! `CONVLOG_STORE_KILL_CYCLES=N` runs N kill cycles (default 40),
//! `CONVLOG_STORE_KILL_SEED=S` chooses the seed of the parent's choices
//! (retention, snapshot interval, kill delay); a failure prints both and the
//! cycle. The children's thread timing is not reproducible: a seed replays
//! the same plan, not the same interleaving. Every `GENERATION_CYCLES`
//! cycles the test starts a fresh store so that the cost of each check stays
//! bounded. A thread in the child reads conversations while snapshots and
//! compactions run and fails on any read error (`CONVLOG_STORE_KILL_READERS=0`
//! turns it off).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{env_number, role, spawn_role, Rng};
use convlog::conversation::{self, ConversationSlice};
use convlog::log::{LogReader, Lsn};
use convlog::model::{
    ConversationEntry, CustomEvent, Event, HistoryCurated, Role, Timestamp, ToolCall, ToolStatus,
    ToolStatusChanged,
};
use convlog::store::{Retention, Store, StoreOptions};
use convlog::Error;

const TEST_NAME: &str = "sigkill_during_appends_snapshots_and_compaction_loses_nothing";
const CONVERSATIONS: u64 = 6;
const APPENDER_THREADS: u64 = 3;
const SEGMENT_BYTES_MAX: u64 = 16 * 1024;
/// Cycles on one store directory before the test starts a fresh one.
const GENERATION_CYCLES: u64 = 25;

/// Which batch: the cycle (child process), its appender thread, and the
/// thread's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct BatchId {
    cycle: u64,
    thread: u64,
    counter: u64,
}

impl std::fmt::Display for BatchId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "c{}t{}n{}",
            self.cycle, self.thread, self.counter
        )
    }
}

/// The message id of event `index` of a batch: the batch can be read back
/// from any entry it recorded.
fn message_id(batch: BatchId, index: u64) -> uuid::Uuid {
    uuid::Uuid::from_u128(
        (u128::from(batch.cycle) << 64)
            | (u128::from(batch.thread) << 48)
            | (u128::from(batch.counter) << 8)
            | u128::from(index),
    )
}

fn batch_of_message(id: uuid::Uuid) -> (BatchId, u64) {
    let value = id.as_u128();
    (
        BatchId {
            cycle: (value >> 64) as u64,
            thread: ((value >> 48) & 0xffff) as u64,
            counter: ((value >> 8) & 0xff_ffff_ffff) as u64,
        },
        (value & 0xff) as u64,
    )
}

fn conversation_name(index: u64) -> String {
    format!("conv-{index}")
}

/// A fixed time for event `index` of a batch.
fn time(batch: BatchId, index: u64) -> Timestamp {
    Timestamp(
        1_700_000_000_000_000
            + batch.cycle as i64 * 1_000_000_000
            + batch.thread as i64 * 100_000_000
            + batch.counter as i64 * 1_000
            + index as i64,
    )
}

fn entry(
    batch: BatchId,
    index: u64,
    evaluation: &str,
    role: Role,
    text: String,
) -> ConversationEntry {
    let mut entry = ConversationEntry::new(evaluation, batch.counter, role, Some(text));
    entry.message_id = message_id(batch, index);
    entry.created_at = time(batch, index);
    entry.turn = (batch.counter / 4) as u32;
    entry
}

fn call_id(batch: BatchId, which: char) -> String {
    format!("call-{batch}-{which}")
}

/// The events of a batch: a pure function of its id. The first event always
/// records an entry (so a batch can be found from a conversation slice);
/// the others are tool statuses, a tool result, a curation record and a
/// custom event. Sizes vary so that segments roll at different points.
fn batch_events(batch: BatchId) -> Vec<Event> {
    let mut rng = Rng::new(
        batch.cycle.wrapping_mul(1_000_003)
            ^ (batch.thread << 40)
            ^ batch.counter.wrapping_mul(7919),
    );
    // One evaluation per (cycle, thread, conversation); each thread moves
    // between two conversations.
    let conversation_index =
        (batch.cycle * APPENDER_THREADS + batch.thread + (batch.counter / 8) % 2) % CONVERSATIONS;
    let conversation = conversation_name(conversation_index);
    let evaluation = format!("eval-c{}t{}", batch.cycle, batch.thread);
    let text =
        |rng: &mut Rng, what: &str| format!("{what} {batch} ").repeat(1 + rng.below(40) as usize);
    match batch.counter % 4 {
        0 => {
            let mut events = vec![entry(
                batch,
                0,
                &evaluation,
                Role::User,
                text(&mut rng, "question"),
            )
            .recorded_in(&conversation)];
            if rng.below(2) == 0 {
                events.push(Event::Custom(CustomEvent {
                    kind: "progress".to_string(),
                    conversation_id: None,
                    payload: batch.to_string().into_bytes(),
                }));
            }
            events
        }
        1 => {
            let mut assistant = entry(
                batch,
                0,
                &evaluation,
                Role::Assistant,
                text(&mut rng, "calling"),
            );
            assistant.tool_calls = ['a', 'b']
                .into_iter()
                .map(|which| ToolCall {
                    call_id: call_id(batch, which),
                    name: "search".to_string(),
                    arguments: format!("{{\"q\":\"{batch}-{which}\"}}"),
                    status: ToolStatus::Pending,
                    started_at: None,
                    ended_at: None,
                    error: None,
                })
                .collect();
            let mut events = vec![assistant.recorded_in(&conversation)];
            if rng.below(2) == 0 {
                events.push(Event::ToolStatus(ToolStatusChanged::new(
                    &conversation,
                    &evaluation,
                    &call_id(batch, 'a'),
                    ToolStatus::Running,
                    time(batch, 1),
                )));
            }
            events
        }
        2 => {
            // Results and statuses for the calls of the previous batch.
            let previous = BatchId {
                counter: batch.counter - 1,
                ..batch
            };
            let mut result = entry(batch, 0, &evaluation, Role::Tool, text(&mut rng, "result"));
            result.tool_call_id = Some(call_id(previous, 'a'));
            result.tool_name = Some("search".to_string());
            let mut failed = ToolStatusChanged::new(
                &conversation,
                &evaluation,
                &call_id(previous, 'b'),
                ToolStatus::Failed,
                time(batch, 2),
            );
            failed.error = Some(format!("tool failed in {batch}"));
            vec![
                result.recorded_in(&conversation),
                Event::ToolStatus(ToolStatusChanged::new(
                    &conversation,
                    &evaluation,
                    &call_id(previous, 'b'),
                    ToolStatus::Running,
                    time(batch, 1),
                )),
                Event::ToolStatus(failed),
            ]
        }
        _ => {
            let mut answer = entry(
                batch,
                0,
                &evaluation,
                Role::Assistant,
                text(&mut rng, "answer"),
            );
            answer.finish_reason = Some("stop".to_string());
            let mut events = vec![answer.recorded_in(&conversation)];
            if rng.below(3) == 0 {
                events.push(Event::HistoryCurated(HistoryCurated {
                    conversation_id: conversation.clone(),
                    strategy: "sliding_window(8)".to_string(),
                    original_count: batch.counter,
                    curated_count: batch.counter.min(8),
                    at: time(batch, 1),
                    prompt_name: None,
                    session_id: None,
                }));
            }
            events
        }
    }
}

fn store_options(delete_covered: bool, snapshot_every: u64) -> StoreOptions {
    StoreOptions::new()
        .segment_bytes_max(SEGMENT_BYTES_MAX)
        .snapshot_every_events(Some(snapshot_every))
        .retention(if delete_covered {
            Retention::DeleteCoveredBySnapshot
        } else {
            Retention::KeepAll
        })
}

fn print_line(line: &str) {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}").unwrap();
    stdout.flush().unwrap();
}

/// A library failure in the child: reported to the parent, which fails.
fn child_failure(what: &str, error: &Error) -> ! {
    print_line(&format!("FAIL {what}: {error}"));
    std::process::exit(3);
}

/// Child role: opens the store, appends from three threads, snapshots and
/// compacts from a fourth, until killed.
fn run_store_writer() {
    let dir = PathBuf::from(std::env::var("CONVLOG_TEST_STORE").unwrap());
    let cycle = env_number("CONVLOG_TEST_CYCLE", 0);
    let delete_covered = std::env::var("CONVLOG_TEST_DELETE_COVERED").is_ok();
    let snapshot_every = env_number("CONVLOG_TEST_SNAPSHOT_EVERY", 100);
    // A panic anywhere in the child is a failure the parent must see.
    std::panic::set_hook(Box::new(|info| {
        print_line(&format!("FAIL panic: {info}"));
        std::process::exit(3);
    }));
    let store = match Store::open(&dir, store_options(delete_covered, snapshot_every)) {
        Ok(store) => Arc::new(store),
        Err(error) => child_failure("open", &error),
    };
    print_line("READY");
    let mut threads: Vec<_> = (0..APPENDER_THREADS)
        .map(|thread| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for counter in 0.. {
                    let batch = BatchId {
                        cycle,
                        thread,
                        counter,
                    };
                    match store.append(&batch_events(batch)) {
                        Ok(lsns) => {
                            print_line(&format!("ACK {} {cycle} {thread} {counter} .", lsns.start))
                        }
                        Err(error) => child_failure(&format!("append {batch}"), &error),
                    }
                }
            })
        })
        .collect();
    let maintenance = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            let mut rng = Rng::new(cycle + 1);
            loop {
                std::thread::sleep(Duration::from_millis(rng.below(12)));
                if rng.below(3) == 0 {
                    print_line("COMPACT-BEGIN");
                    match store.compact() {
                        Ok(report) => print_line(&format!("COMPACT-END {}", report.removed.len())),
                        Err(error) => child_failure("compact", &error),
                    }
                } else {
                    print_line("SNAPSHOT-BEGIN");
                    match store.snapshot() {
                        Ok(info) => print_line(&format!("SNAPSHOT-END {}", info.lsn)),
                        Err(error) => child_failure("snapshot", &error),
                    }
                }
            }
        })
    };
    threads.push(maintenance);
    if std::env::var("CONVLOG_TEST_READERS").is_ok() {
        // Reads racing snapshots and compaction (CONVLOG_STORE_KILL_READERS).
        let store = Arc::clone(&store);
        threads.push(std::thread::spawn(move || {
            for round in 0.. {
                let id = conversation_name(round % CONVERSATIONS);
                match store.conversation(&id) {
                    Ok(_) | Err(Error::ConversationNotFound { .. }) => {}
                    Err(error) => child_failure(&format!("read {id}"), &error),
                }
            }
        }));
    }
    for thread in threads {
        thread.join().unwrap();
    }
}

/// What one child printed before it was killed.
#[derive(Debug, Default)]
struct ChildOutput {
    ready: bool,
    acknowledged: Vec<(Lsn, BatchId)>,
    snapshots: u64,
    compactions: u64,
    segments_compacted: u64,
    /// The last maintenance marker: what was running when the kill came.
    running: Option<&'static str>,
    failures: Vec<String>,
}

fn parse_output(lines: &[String]) -> ChildOutput {
    let mut output = ChildOutput::default();
    for line in lines {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields[0] {
            "READY" => output.ready = true,
            // A line cut by the kill has no final ".": not an acknowledgement.
            "ACK" if fields.len() == 6 && fields[5] == "." => {
                let number = |index: usize| fields[index].parse::<u64>().unwrap();
                output.acknowledged.push((
                    number(1),
                    BatchId {
                        cycle: number(2),
                        thread: number(3),
                        counter: number(4),
                    },
                ));
            }
            "SNAPSHOT-BEGIN" => output.running = Some("snapshot"),
            "COMPACT-BEGIN" => output.running = Some("compaction"),
            "SNAPSHOT-END" if fields.len() == 2 => {
                output.snapshots += 1;
                output.running = None;
            }
            "COMPACT-END" if fields.len() == 2 => {
                output.compactions += 1;
                output.segments_compacted += fields[1].parse::<u64>().unwrap_or(0);
                output.running = None;
            }
            "FAIL" => output.failures.push(line.clone()),
            _ => {}
        }
    }
    output
}

/// Figures summed over all cycles.
#[derive(Debug, Default)]
struct Totals {
    kills: u64,
    kills_before_open_finished: u64,
    kills_during_snapshot: u64,
    kills_during_compaction: u64,
    kills_leaving_snapshot_tmp: u64,
    snapshot_tmp_files_max: u64,
    snapshots: u64,
    compactions: u64,
    segments_compacted: u64,
    reopens_on_compacted_log: u64,
    batches_acknowledged: u64,
    events_acknowledged: u64,
    acknowledged_events_checked: u64,
    unacknowledged_batches_kept: u64,
    conversations_compared: u64,
    records_lost: u64,
}

/// What the parent knows about one store directory.
#[derive(Debug, Default)]
struct Knowledge {
    /// First LSN -> the batch there: acknowledged, or found in the log (or a
    /// snapshot) after a kill.
    batches: BTreeMap<Lsn, BatchId>,
    /// First LSNs of the acknowledged batches.
    acknowledged: BTreeSet<Lsn>,
}

impl Knowledge {
    /// Records that `batch` starts at `first`; fails if the parent knew
    /// another batch there.
    fn learn(&mut self, first: Lsn, batch: BatchId, context: &str) {
        if let Some(known) = self.batches.insert(first, batch) {
            assert_eq!(
                known, batch,
                "{context}: LSN {first} holds batch {batch}, but batch {known} was there before"
            );
        }
    }
}

fn snapshot_tmp_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("snapshots"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| entry.file_name().to_string_lossy().ends_with(".snap.tmp"))
                .count()
        })
        .unwrap_or(0)
}

/// Where two lists first differ, for failure messages.
fn list_difference<T: std::fmt::Debug + PartialEq>(
    what: &str,
    got: &[T],
    expected: &[T],
) -> Option<String> {
    if got == expected {
        return None;
    }
    let index = got
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(expected.len()));
    Some(format!(
        "{what}: {} in the store, {} expected; first difference at index {index}: store {:?}, expected {:?}",
        got.len(),
        expected.len(),
        got.get(index),
        expected.get(index)
    ))
}

/// Where two slices differ, for failure messages.
fn first_difference(got: &ConversationSlice, expected: &ConversationSlice) -> String {
    list_difference("entries", &got.recorded(), &expected.recorded())
        .or_else(|| list_difference("evaluations", got.evaluations(), expected.evaluations()))
        .or_else(|| {
            list_difference(
                "statuses for unknown calls",
                &got.unknown_statuses(),
                &expected.unknown_statuses(),
            )
        })
        .or_else(|| list_difference("anomalies", got.anomalies(), expected.anomalies()))
        .or_else(|| list_difference("curations", got.curations(), expected.curations()))
        .unwrap_or_else(|| {
            format!(
                "last LSN {} in the store, {} expected",
                got.last_lsn(),
                expected.last_lsn()
            )
        })
}

/// Reopens the store after a kill and checks everything (see the module
/// docs). `context` names the seed and cycle for failure messages.
fn check_store(
    dir: &Path,
    options: StoreOptions,
    knowledge: &mut Knowledge,
    totals: &mut Totals,
    context: &str,
) {
    // verify runs before anything touches the store: a kill leaves at most
    // a torn tail, never damage. (A child killed before it created the
    // store's first segment leaves nothing to verify.)
    if !common::segment_paths(dir).is_empty() {
        let before = convlog::store::verify(dir, &mut |_| {})
            .unwrap_or_else(|error| panic!("{context}: verify before the reopen failed: {error}"));
        for (path, check) in &before.snapshots {
            assert!(
                check.is_ok(),
                "{context}: snapshot {} is damaged after a kill: {check:?}",
                path.display()
            );
        }
    }

    let store = Store::open(dir, options).unwrap_or_else(|error| {
        panic!("{context}: the store does not open after the kill: {error}")
    });
    let report = store.open_report().clone();
    let (first_lsn, next_lsn) = (store.log().first_lsn(), store.log().next_lsn());
    for (path, reason) in &report.skipped_snapshots {
        assert!(
            reason.contains("but the log now starts at LSN"),
            "{context}: snapshot {} was skipped: {reason} (only compaction may make a snapshot unusable)",
            path.display()
        );
    }
    if first_lsn > 1 {
        totals.reopens_on_compacted_log += 1;
        assert!(
            report.snapshot.is_some(),
            "{context}: the log starts at LSN {first_lsn} but no snapshot was used"
        );
    }

    // The log, as a reader sees it: gap-free from its first LSN, one batch
    // a child appended per frame.
    let records: Vec<_> = LogReader::open(dir)
        .unwrap()
        .iter_from(first_lsn)
        .map(|record| record.unwrap_or_else(|error| panic!("{context}: reading the log: {error}")))
        .collect();
    for (offset, record) in records.iter().enumerate() {
        assert_eq!(
            record.lsn,
            first_lsn + offset as Lsn,
            "{context}: the log is not gap-free from LSN {first_lsn}"
        );
    }
    assert_eq!(
        first_lsn + records.len() as Lsn,
        next_lsn,
        "{context}: a reader sees {} records from LSN {first_lsn} but the store continues at LSN {next_lsn}",
        records.len()
    );
    let mut index = 0;
    while index < records.len() {
        let position = records[index].position;
        let frame_end = records[index..]
            .iter()
            .position(|record| record.position != position)
            .map_or(records.len(), |offset| index + offset);
        let events: Vec<Event> = records[index..frame_end]
            .iter()
            .map(|record| {
                convlog::codec::decode_event(&record.payload).unwrap_or_else(|reason| {
                    panic!("{context}: LSN {} does not decode: {reason}", record.lsn)
                })
            })
            .collect();
        let first = records[index].lsn;
        let Event::ConversationRecorded(recorded) = &events[0] else {
            panic!("{context}: the frame at LSN {first} does not start with a recorded entry: {events:?}");
        };
        let (batch, event_index) = batch_of_message(recorded.entry.message_id);
        assert_eq!(
            event_index, 0,
            "{context}: the frame at LSN {first} starts with event {event_index} of batch {batch}"
        );
        assert_eq!(
            events,
            batch_events(batch),
            "{context}: the frame at LSN {first} is not batch {batch} whole (all-or-nothing)"
        );
        knowledge.learn(first, batch, context);
        index = frame_end;
    }

    // Batches below the first LSN left the log with compaction; those the
    // parent does not know yet (unacknowledged, then compacted before the
    // kill) are found from the entries they recorded.
    let conversation_ids = store.conversation_ids();
    let mut slices: BTreeMap<String, ConversationSlice> = BTreeMap::new();
    for id in &conversation_ids {
        let slice = store
            .conversation(id)
            .unwrap_or_else(|error| panic!("{context}: reading conversation {id}: {error}"));
        slices.insert(id.clone(), slice);
    }
    let covered = |knowledge: &Knowledge, lsn: Lsn| {
        knowledge
            .batches
            .range(..=lsn)
            .next_back()
            .is_some_and(|(first, batch)| lsn < first + batch_events(*batch).len() as Lsn)
    };
    for slice in slices.values() {
        for recorded in slice.recorded() {
            if recorded.lsn < first_lsn && !covered(knowledge, recorded.lsn) {
                let (batch, event_index) = batch_of_message(recorded.entry.message_id);
                assert_eq!(
                    event_index, 0,
                    "{context}: entries are only recorded by a batch's first event"
                );
                knowledge.learn(recorded.lsn, batch, context);
            }
        }
    }

    // Every LSN from 1 to the end belongs to exactly one known batch: the
    // store holds a prefix of what the children appended, in whole batches.
    // A thread appends its next batch only after printing the previous
    // one's ACK, so an unacknowledged batch can only be the one after its
    // thread's last acknowledged batch, and no batch appears twice.
    let mut last_acknowledged: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for first in &knowledge.acknowledged {
        let batch = knowledge.batches[first];
        let last = last_acknowledged
            .entry((batch.cycle, batch.thread))
            .or_insert(batch.counter);
        *last = (*last).max(batch.counter);
    }
    let mut seen = BTreeSet::new();
    let mut expected_lsn = 1;
    let mut events: Vec<(Lsn, Event)> = Vec::new();
    for (&first, &batch) in knowledge.batches.range(..next_lsn) {
        assert_eq!(
            first, expected_lsn,
            "{context}: LSNs {expected_lsn}..{first} belong to no batch the parent knows of"
        );
        assert!(
            seen.insert(batch),
            "{context}: batch {batch} is in the store twice (again at LSN {first})"
        );
        if !knowledge.acknowledged.contains(&first) {
            let in_flight = last_acknowledged
                .get(&(batch.cycle, batch.thread))
                .map_or(0, |last| last + 1);
            assert_eq!(
                batch.counter, in_flight,
                "{context}: unacknowledged batch {batch} at LSN {first} was never in flight"
            );
        }
        let batch_events = batch_events(batch);
        expected_lsn = first + batch_events.len() as Lsn;
        events.extend((first..).zip(batch_events));
    }
    assert_eq!(
        expected_lsn, next_lsn,
        "{context}: a batch crosses the end of the log (LSN {next_lsn})"
    );

    // Every acknowledged batch is present.
    for &first in &knowledge.acknowledged {
        let batch = knowledge.batches[&first];
        let count = batch_events(batch).len() as Lsn;
        if first + count > next_lsn {
            totals.records_lost += first + count - next_lsn.max(first);
            panic!(
                "{context}: batch {batch}, acknowledged at LSNs {first}..{}, is lost: the log ends before LSN {next_lsn}",
                first + count
            );
        }
        totals.acknowledged_events_checked += count;
        // Its recorded entry is in its conversation, at its LSN.
        let Event::ConversationRecorded(recorded) = &batch_events(batch)[0] else {
            unreachable!("a batch starts with a recorded entry");
        };
        let slice = slices.get(&recorded.conversation_id).unwrap_or_else(|| {
            panic!(
                "{context}: conversation {} of acknowledged batch {batch} is missing",
                recorded.conversation_id
            )
        });
        assert!(
            slice
                .recorded()
                .iter()
                .any(|entry| entry.lsn == first
                    && entry.entry.message_id == recorded.entry.message_id),
            "{context}: the entry of acknowledged batch {batch} (LSN {first}) is not in {}",
            recorded.conversation_id
        );
    }

    // Each conversation equals the pure fold of the events known to be at
    // those LSNs.
    let mut expected_ids = BTreeSet::new();
    for index in 0..CONVERSATIONS {
        let id = conversation_name(index);
        let expected = conversation::fold(&id, events.iter().map(|(lsn, event)| (event, *lsn)));
        if expected.last_lsn() == 0 {
            assert!(
                !slices.contains_key(&id),
                "{context}: conversation {id} has no events but the store has it"
            );
            continue;
        }
        expected_ids.insert(id.clone());
        let slice = slices
            .get(&id)
            .unwrap_or_else(|| panic!("{context}: conversation {id} is missing"));
        assert!(
            *slice == expected,
            "{context}: conversation {id} read from the store (snapshot {:?}, {} replayed) differs from the fold of its events: {}",
            report.snapshot,
            report.replayed_events,
            first_difference(slice, &expected)
        );
        totals.conversations_compared += 1;
    }
    assert_eq!(
        conversation_ids.into_iter().collect::<BTreeSet<_>>(),
        expected_ids,
        "{context}: the store's conversations"
    );
    drop(store);

    let after = convlog::store::verify(dir, &mut |_| {})
        .unwrap_or_else(|error| panic!("{context}: verify after the reopen failed: {error}"));
    assert!(
        after.log.torn_tail.is_none(),
        "{context}: the reopen left a torn tail"
    );
    assert_eq!(
        (after.log.first_lsn, after.log.next_lsn),
        (first_lsn, next_lsn),
        "{context}: verify sees another log than the store"
    );
    for (path, check) in &after.snapshots {
        assert!(
            check.is_ok(),
            "{context}: snapshot {} does not verify: {check:?}",
            path.display()
        );
    }
}

#[test]
fn sigkill_during_appends_snapshots_and_compaction_loses_nothing() {
    if role().as_deref() == Some("store-writer") {
        run_store_writer();
        return;
    }
    let started = Instant::now();
    let cycles = env_number("CONVLOG_STORE_KILL_CYCLES", 40);
    let seed = env_number("CONVLOG_STORE_KILL_SEED", 0x5708e);
    let readers = std::env::var("CONVLOG_STORE_KILL_READERS").map_or(true, |value| value != "0");
    eprintln!(
        "store kill test: {cycles} cycles, seed {seed} (CONVLOG_STORE_KILL_CYCLES / CONVLOG_STORE_KILL_SEED)"
    );
    let mut rng = Rng::new(seed);
    let mut totals = Totals::default();
    let mut dir = tempfile::tempdir().unwrap();
    let mut knowledge = Knowledge::default();
    for cycle in 0..cycles {
        if cycle > 0 && cycle % GENERATION_CYCLES == 0 {
            dir = tempfile::tempdir().unwrap();
            knowledge = Knowledge::default();
        }
        let context = format!("seed {seed} cycle {cycle}");
        let delete_covered = rng.below(3) != 0;
        let snapshot_every = 20 + rng.below(300);
        let delay = Duration::from_millis(20 + rng.below(180));
        let mut env = vec![
            ("CONVLOG_TEST_STORE", dir.path().display().to_string()),
            ("CONVLOG_TEST_CYCLE", cycle.to_string()),
            ("CONVLOG_TEST_SNAPSHOT_EVERY", snapshot_every.to_string()),
        ];
        if delete_covered {
            env.push(("CONVLOG_TEST_DELETE_COVERED", "1".to_string()));
        }
        if readers {
            env.push(("CONVLOG_TEST_READERS", "1".to_string()));
        }
        let tmp_before = snapshot_tmp_files(dir.path());
        let mut child = spawn_role(TEST_NAME, "store-writer", &env);
        let stdout = child.stdout.take().unwrap();
        let (first_ack, acked) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut first_ack = Some(first_ack);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("ACK ") {
                    if let Some(first_ack) = first_ack.take() {
                        let _ = first_ack.send(());
                    }
                }
                lines.push(line);
            }
            lines
        });
        // Every fourth cycle kills only after the child acknowledged a
        // batch, so acknowledged batches are checked however slow this
        // machine is; the others kill at any moment (during open too).
        if cycle % 4 == 3 {
            let _ = acked.recv();
        }
        std::thread::sleep(delay);
        let exited_early = child.try_wait().unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let output = parse_output(&reader.join().unwrap());
        assert!(
            output.failures.is_empty(),
            "{context}: the child failed: {:?}",
            output.failures
        );
        assert!(
            exited_early.is_none(),
            "{context}: the child exited before the kill: {exited_early:?}"
        );
        totals.kills += 1;
        if !output.ready {
            totals.kills_before_open_finished += 1;
        }
        match output.running {
            Some("snapshot") => totals.kills_during_snapshot += 1,
            Some(_) => totals.kills_during_compaction += 1,
            None => {}
        }
        // Leftover snapshot temporaries are ignored by the store (and, so
        // far, never removed): count them.
        let tmp_after = snapshot_tmp_files(dir.path());
        if tmp_after > tmp_before {
            totals.kills_leaving_snapshot_tmp += 1;
        }
        totals.snapshot_tmp_files_max = totals.snapshot_tmp_files_max.max(tmp_after as u64);
        totals.snapshots += output.snapshots;
        totals.compactions += output.compactions;
        totals.segments_compacted += output.segments_compacted;
        for &(first, batch) in &output.acknowledged {
            assert_eq!(batch.cycle, cycle, "{context}: an ACK of another cycle");
            knowledge.learn(first, batch, &context);
            knowledge.acknowledged.insert(first);
            totals.batches_acknowledged += 1;
            totals.events_acknowledged += batch_events(batch).len() as u64;
        }

        let known_before = knowledge.batches.len();
        let options = store_options(delete_covered, snapshot_every);
        check_store(dir.path(), options, &mut knowledge, &mut totals, &context);
        totals.unacknowledged_batches_kept += (knowledge.batches.len() - known_before) as u64;
    }
    assert_eq!(totals.kills, cycles);
    assert!(
        totals.batches_acknowledged > 0,
        "seed {seed}: the children acknowledged nothing"
    );
    eprintln!(
        "store kill test: {} kills in {:.1?} ({} before the store had opened, {} during a snapshot, {} during a compaction, \
         {} left a new .snap.tmp, at most {} .snap.tmp files in the store), {} snapshots and {} compactions completed ({} segments removed), \
         {} reopens of a compacted log, {} batches ({} events) acknowledged, {} unacknowledged batches kept, \
         {} acknowledged events checked, {} conversations compared with the fold, records lost: {}",
        totals.kills,
        started.elapsed(),
        totals.kills_before_open_finished,
        totals.kills_during_snapshot,
        totals.kills_during_compaction,
        totals.kills_leaving_snapshot_tmp,
        totals.snapshot_tmp_files_max,
        totals.snapshots,
        totals.compactions,
        totals.segments_compacted,
        totals.reopens_on_compacted_log,
        totals.batches_acknowledged,
        totals.events_acknowledged,
        totals.unacknowledged_batches_kept,
        totals.acknowledged_events_checked,
        totals.conversations_compared,
        totals.records_lost
    );
    assert_eq!(totals.records_lost, 0);
}
