//! Crash and fault simulation of the whole store: a seeded, model-based test
//! of `Store` over `SimStorage` (see `tests/crash_sim.rs` for the log alone).
//!
//! Each seed runs random operations on a store whose segments roll every
//! 4 KiB: appends of 1-4 conversation events (recorded entries with
//! deterministic message ids, assistant entries with tool calls, tool
//! statuses and results, duplicates, `messages_replaced`, curations, and
//! custom events a host reducer counts) under Sync / Group / None, explicit
//! syncs, snapshots (also automatic ones), compactions under both
//! retentions, clean reopens, power losses, process crashes, power cuts in
//! the middle of `snapshot()`, `compact()` and the open, and injected faults
//! (EIO on a write, fsync, create or rename; a full disk). A model keeps
//! every batch the store committed, in LSN order, and what was promised
//! about it: what survives a power loss (Sync / Group acknowledgements,
//! None ones followed by a successful sync or snapshot, the log's own
//! `durable_lsn`) and what survives a process crash. After every reopen:
//!
//! 1. every durably acknowledged event is there: the recovered end lies
//!    between the durable count and everything appended;
//! 2. the log is exactly the model's first N events, frame by frame, and
//!    batches are all-or-nothing; every conversation read from the store
//!    (snapshot + tail) equals `conversation::fold` of that prefix, and the
//!    host reducer's slice equals the same reducer folded over it;
//! 3. on the main line no snapshot is ever skipped except one the log has
//!    outgrown after compaction, and the open never fails. Side probes, on
//!    copies of the disk, remove or damage snapshots: a damaged one is
//!    skipped, never fatal while the log covers what it covered; a damaged
//!    conversation blob falls back to the log; the open refuses with
//!    `Error::SnapshotRestore` exactly when every usable snapshot is gone
//!    and compaction removed the start of the log;
//! 4. opening twice, a power loss right after an open, and a power cut in
//!    the middle of the open give the same store;
//! 5. after a failed write or fsync every append is refused with
//!    `Error::Poisoned` until reopened, and nothing refused comes back; an
//!    error is only ever seen when an injected fault fired.
//!
//! `convlog::store::verify` reads the real file system, so it is not run.
//! A conversation that only custom events name has an empty fold; the store
//! lists it until a snapshot (which keeps only conversations with entries)
//! and not after, so reading it may give the empty slice or
//! `ConversationNotFound`.
//!
//! The simulation found four library gaps, now fixed, each kept as a
//! regression test at the end of this file: an append that failed after its
//! batch was committed (its automatic snapshot failed), a hole a crash during
//! compaction left in the log, compaction relying on a snapshot whose name
//! was not durable, and recovery after a poisoned writer not fsyncing the
//! segment it sealed. The model checks all four strictly;
//! `CONVLOG_SIM_STORE_STRICT=0` restores the old workarounds (counted in the
//! summary) to compare.
//!
//! `CONVLOG_SIM_STORE_SEEDS=N` runs N seeds (default 1000, about 50-70 s in
//! a debug build); `CONVLOG_SIM_STORE_SEED=S` runs seed S alone and prints
//! its operations. A failure prints the seed, the step and the operations
//! that led there (for the first failing seed; one line for the others).

mod common;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use common::{env_number, Rng};
use convlog::codec;
use convlog::conversation::{self, ConversationSlice};
use convlog::log::recovery::{scan_segment, POISONED_MARKER};
use convlog::log::segment::parse_segment_file_name;
use convlog::log::{Durability, LogOptions, Lsn, Position};
use convlog::model::{
    ConversationEntry, CustomEvent, Event, HistoryCurated, MessagesReplaced, Reasoning, Role,
    Timestamp, ToolCall, ToolStatus, ToolStatusChanged,
};
use convlog::reducer::Reducer;
use convlog::storage::sim::{Fault, SimStorage};
use convlog::storage::Storage;
use convlog::store::{snapshot, AppendOptions, Retention, Store, StoreBuilder, StoreOptions};
use convlog::Error;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

const STORE: &str = "/sim/store";
const SEGMENT_BYTES_MAX: u64 = 4096;
const SEEDS_DEFAULT: u64 = 1000;
/// Conversations that get every kind of event; one more gets only custom
/// events (a conversation the fold never sees).
const CONVERSATIONS: usize = 4;
const BASE_TIME: i64 = 1_750_000_000_000_000;

type Check<T = ()> = Result<T, String>;

macro_rules! ensure {
    ($condition:expr, $($message:tt)*) => {
        if !$condition {
            return Err(format!($($message)*));
        }
    };
}

thread_local! {
    /// The operations of the running seed, printed when it fails.
    static TRACE: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    /// The running step.
    static STEP: RefCell<usize> = const { RefCell::new(0) };
}

/// Whether the four (fixed) library gaps fail the test; on unless
/// `CONVLOG_SIM_STORE_STRICT=0`.
fn strict() -> bool {
    std::env::var("CONVLOG_SIM_STORE_STRICT").map_or(true, |value| value != "0")
}

fn trace(line: String) {
    TRACE.with(|trace| trace.borrow_mut().push(line));
}

// ---------------------------------------------------------------------------
// The host reducer.

/// What the host reducer folds: counts, a counter summed from custom
/// events, and an order-sensitive mix of every LSN (so a replay that skips,
/// repeats or reorders an event shows).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Tally {
    events: u64,
    by_type: BTreeMap<String, u64>,
    counter: u64,
    lsn_mix: u64,
    last_lsn: Lsn,
}

struct TallyReducer;

impl Reducer for TallyReducer {
    type Slice = Tally;

    fn name(&self) -> &str {
        "sim-tally/v1"
    }

    fn apply(&self, tally: &mut Tally, event: &Event, lsn: Lsn) {
        tally.events += 1;
        *tally
            .by_type
            .entry(event.type_name().to_string())
            .or_default() += 1;
        if let Event::Custom(custom) = event {
            if custom.kind == "counter" && custom.payload.len() == 8 {
                let value = u64::from_le_bytes(custom.payload[..8].try_into().expect("8 bytes"));
                tally.counter = tally.counter.wrapping_add(value);
            }
        }
        tally.lsn_mix = tally.lsn_mix.rotate_left(7) ^ lsn.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        tally.last_lsn = lsn;
    }
}

fn tally_of<'a>(events: impl IntoIterator<Item = (&'a Event, Lsn)>) -> Tally {
    let mut tally = Tally::default();
    for (event, lsn) in events {
        TallyReducer.apply(&mut tally, event, lsn);
    }
    tally
}

// ---------------------------------------------------------------------------
// The event generator: a few agent conversations.

#[derive(Debug)]
struct ConversationGen {
    id: String,
    evaluation: u32,
    sequence: u64,
    turn: u32,
    /// Calls requested and not answered yet: (evaluation id, call id).
    open_calls: Vec<(String, String)>,
    /// Every entry generated (for duplicates and replacements).
    entries: Vec<ConversationEntry>,
}

#[derive(Debug)]
struct EventGen {
    next_message: u128,
    next_call: u64,
    clock: i64,
    conversations: Vec<ConversationGen>,
}

impl EventGen {
    fn new() -> EventGen {
        EventGen {
            next_message: 1,
            next_call: 1,
            clock: 0,
            conversations: (0..CONVERSATIONS)
                .map(|index| ConversationGen {
                    id: format!("conv-{index}"),
                    evaluation: 0,
                    sequence: 1,
                    turn: 0,
                    open_calls: Vec::new(),
                    entries: Vec::new(),
                })
                .collect(),
        }
    }

    fn time(&mut self) -> Timestamp {
        self.clock += 1_000;
        Timestamp(BASE_TIME + self.clock)
    }

    fn text(rng: &mut Rng, what: &str) -> String {
        format!("{what} {}", "lorem ipsum ".repeat(rng.below(14) as usize))
    }

    fn evaluation_id(&self, conversation: usize) -> String {
        let generator = &self.conversations[conversation];
        format!("{}-eval-{}", generator.id, generator.evaluation)
    }

    /// A new entry of `conversation`'s current evaluation.
    fn entry(
        &mut self,
        conversation: usize,
        role: Role,
        content: Option<String>,
    ) -> ConversationEntry {
        let message_id =
            Uuid::from_u128(0x5151_0000_0000_0000_0000_0000_0000_0000 + self.next_message);
        self.next_message += 1;
        let created_at = self.time();
        let evaluation_id = self.evaluation_id(conversation);
        let generator = &mut self.conversations[conversation];
        let entry = ConversationEntry {
            message_id,
            evaluation_id,
            sequence: generator.sequence,
            turn: generator.turn,
            role,
            content,
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            is_error: false,
            finish_reason: None,
            prompt_ns: None,
            prompt_key: None,
            created_at,
            metadata: BTreeMap::new(),
        };
        generator.sequence += 1;
        entry
    }

    fn recorded(&mut self, conversation: usize, entry: ConversationEntry) -> Event {
        self.conversations[conversation].entries.push(entry.clone());
        entry.recorded_in(&self.conversations[conversation].id)
    }

    /// One event of `conversation` (or, for index `CONVERSATIONS`, a custom
    /// event of the conversation that gets nothing else).
    fn event(&mut self, rng: &mut Rng, conversation: usize) -> Event {
        if conversation == CONVERSATIONS {
            return self.custom(rng, Some("conv-quiet".to_string()));
        }
        let id = self.conversations[conversation].id.clone();
        match rng.below(20) {
            0 => {
                // A new evaluation starts with its system prompt.
                let generator = &mut self.conversations[conversation];
                generator.evaluation += 1;
                generator.sequence = 0;
                generator.turn = 0;
                let mut entry = self.entry(
                    conversation,
                    Role::System,
                    Some(EventGen::text(rng, "be brief")),
                );
                entry.prompt_ns = Some("sim".to_string());
                entry.prompt_key = Some(format!("prompt-{}", rng.below(3)));
                self.recorded(conversation, entry)
            }
            1..=4 => {
                let entry = self.entry(conversation, Role::User, Some(EventGen::text(rng, "ask")));
                self.recorded(conversation, entry)
            }
            5 | 6 => {
                let mut entry = self.entry(
                    conversation,
                    Role::Assistant,
                    Some(EventGen::text(rng, "answer")),
                );
                entry.finish_reason = Some("stop".to_string());
                if rng.below(3) == 0 {
                    entry.reasoning = Some(Reasoning {
                        text: Some(EventGen::text(rng, "thinking")),
                        signature: Some(format!("sig-{}", rng.below(1000))),
                        redacted: false,
                    });
                }
                self.conversations[conversation].turn += 1;
                self.recorded(conversation, entry)
            }
            7 | 8 => {
                let mut entry = self.entry(conversation, Role::Assistant, None);
                let evaluation_id = entry.evaluation_id.clone();
                for _ in 0..1 + rng.below(3) {
                    let call_id = format!("call-{}", self.next_call);
                    self.next_call += 1;
                    entry.tool_calls.push(ToolCall {
                        call_id: call_id.clone(),
                        name: "search".to_string(),
                        arguments: format!("{{\"q\":\"{}\"}}", rng.below(100)),
                        status: ToolStatus::Pending,
                        started_at: None,
                        ended_at: None,
                        error: None,
                    });
                    self.conversations[conversation]
                        .open_calls
                        .push((evaluation_id.clone(), call_id));
                }
                entry.finish_reason = Some("tool_calls".to_string());
                self.conversations[conversation].turn += 1;
                self.recorded(conversation, entry)
            }
            9 | 10 => {
                let at = self.time();
                let generator = &mut self.conversations[conversation];
                let (evaluation_id, call_id) =
                    if generator.open_calls.is_empty() || rng.below(8) == 0 {
                        // A status for a call not (yet) known.
                        let evaluation = format!("{}-eval-{}", id, generator.evaluation);
                        (evaluation, format!("ghost-{}", rng.below(4)))
                    } else {
                        let pick = rng.below(generator.open_calls.len() as u64) as usize;
                        generator.open_calls[pick].clone()
                    };
                let status = match rng.below(5) {
                    0 => ToolStatus::Pending,
                    1 | 2 => ToolStatus::Running,
                    3 => ToolStatus::Completed,
                    _ => ToolStatus::Failed,
                };
                let mut change = ToolStatusChanged::new(&id, &evaluation_id, &call_id, status, at);
                if status == ToolStatus::Failed {
                    change.error = Some("tool crashed".to_string());
                }
                change.resumed = rng.below(6) == 0;
                Event::ToolStatus(change)
            }
            11 | 12 => {
                let generator = &mut self.conversations[conversation];
                let (evaluation_id, call_id) = if generator.open_calls.is_empty() {
                    (
                        self.evaluation_id(conversation),
                        format!("ghost-{}", rng.below(4)),
                    )
                } else {
                    let pick = rng.below(generator.open_calls.len() as u64) as usize;
                    generator.open_calls.remove(pick)
                };
                let mut entry = self.entry(
                    conversation,
                    Role::Tool,
                    Some(EventGen::text(rng, "result")),
                );
                entry.evaluation_id = evaluation_id;
                entry.tool_call_id = Some(call_id);
                entry.tool_name = Some("search".to_string());
                entry.is_error = rng.below(5) == 0;
                self.recorded(conversation, entry)
            }
            13 => {
                // A duplicate: the same message id again (content changed
                // or not): recording it twice is a no-op.
                let generator = &self.conversations[conversation];
                if generator.entries.is_empty() {
                    return self.custom(rng, Some(id));
                }
                let pick = rng.below(generator.entries.len() as u64) as usize;
                let mut entry = generator.entries[pick].clone();
                if rng.below(2) == 0 {
                    entry.content = Some("changed on the second recording".to_string());
                }
                entry.recorded_in(&id)
            }
            14 => {
                let mut entries: Vec<ConversationEntry> = self.conversations[conversation]
                    .entries
                    .iter()
                    .filter(|_| rng.below(3) != 0)
                    .cloned()
                    .collect();
                if rng.below(2) == 0 {
                    let entry = self.entry(
                        conversation,
                        Role::User,
                        Some(EventGen::text(rng, "summary")),
                    );
                    self.conversations[conversation].entries.push(entry.clone());
                    entries.push(entry);
                }
                let at = self.time();
                Event::MessagesReplaced(MessagesReplaced {
                    conversation_id: id,
                    entries,
                    at,
                })
            }
            15 => {
                let at = self.time();
                Event::HistoryCurated(HistoryCurated {
                    conversation_id: id,
                    strategy: format!("sliding_window({})", 1 + rng.below(9)),
                    original_count: rng.below(50),
                    curated_count: rng.below(10),
                    at,
                    prompt_name: Some("planner".into()),
                    session_id: None,
                })
            }
            16 => self.custom(rng, None),
            _ => self.custom(rng, Some(id)),
        }
    }

    fn custom(&mut self, rng: &mut Rng, conversation_id: Option<String>) -> Event {
        if rng.below(4) == 0 {
            let payload = (0..rng.below(40)).map(|_| rng.next_u64() as u8).collect();
            return Event::Custom(CustomEvent {
                kind: "note".to_string(),
                conversation_id,
                payload,
            });
        }
        Event::Custom(CustomEvent {
            kind: "counter".to_string(),
            conversation_id,
            payload: (1 + rng.below(1000)).to_le_bytes().to_vec(),
        })
    }

    /// A batch of 1-4 events, mostly of one conversation.
    fn batch(&mut self, rng: &mut Rng, count: u64) -> Vec<Event> {
        let mut conversation = rng.below(CONVERSATIONS as u64 + 1) as usize;
        (0..count)
            .map(|_| {
                if rng.below(4) == 0 {
                    conversation = rng.below(CONVERSATIONS as u64 + 1) as usize;
                }
                self.event(rng, conversation)
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// The model.

#[derive(Debug)]
struct Batch {
    start: Lsn,
    events: Vec<Event>,
}

/// The batches the store committed, in LSN order, and what is promised.
#[derive(Debug)]
struct Model {
    batches: Vec<Batch>,
    /// Every LSN below this survives a power loss.
    durable_end: Lsn,
    /// Every LSN below this survives a process crash (unless the writer is
    /// poisoned: it then cuts what was not durable).
    written_end: Lsn,
}

impl Model {
    fn new() -> Model {
        Model {
            batches: Vec::new(),
            durable_end: 1,
            written_end: 1,
        }
    }

    fn end(&self) -> Lsn {
        self.batches
            .last()
            .map_or(1, |batch| batch.start + batch.events.len() as Lsn)
    }

    fn push(&mut self, events: Vec<Event>) -> Lsn {
        let start = self.end();
        self.batches.push(Batch { start, events });
        start
    }

    fn is_boundary(&self, end: Lsn) -> bool {
        end == 1
            || self
                .batches
                .iter()
                .any(|batch| batch.start + batch.events.len() as Lsn == end)
    }

    /// (batch index, index in the batch) of `lsn`.
    fn locate(&self, lsn: Lsn) -> Option<(usize, usize)> {
        let index = self.batches.partition_point(|batch| batch.start <= lsn);
        let batch = self.batches.get(index.checked_sub(1)?)?;
        let offset = (lsn - batch.start) as usize;
        (offset < batch.events.len()).then_some((index - 1, offset))
    }

    fn events_below(&self, end: Lsn) -> Vec<(&Event, Lsn)> {
        self.batches
            .iter()
            .flat_map(|batch| {
                batch
                    .events
                    .iter()
                    .enumerate()
                    .map(move |(offset, event)| (event, batch.start + offset as Lsn))
            })
            .take_while(|(_, lsn)| *lsn < end)
            .collect()
    }

    /// Keeps the first `end - 1` events: what the store recovered.
    fn truncate(&mut self, end: Lsn) {
        self.batches
            .retain(|batch| batch.start + batch.events.len() as Lsn <= end);
        self.durable_end = end;
        self.written_end = end;
    }
}

// ---------------------------------------------------------------------------
// The simulation.

#[derive(Debug, Default)]
struct Totals {
    seeds: u64,
    steps: u64,
    power_losses: u64,
    process_crashes: u64,
    snapshot_crashes: u64,
    compaction_crashes: u64,
    open_crashes: u64,
    reopens: u64,
    faults_injected: u64,
    faults_fired: u64,
    poisonings: u64,
    appends_acknowledged: u64,
    appends_refused: u64,
    snapshots: u64,
    snapshots_failed: u64,
    compactions: u64,
    segments_removed: u64,
    snapshot_probes: u64,
    probe_skips: u64,
    probe_refusals: u64,
    blob_fallbacks: u64,
    events_checked: u64,
    acknowledged_events_checked: u64,
    records_lost: u64,
    errors_after_commit: u64,
    opens_over_holes: u64,
    snapshot_directory_syncs: u64,
    sealed_segment_syncs: u64,
}

fn add(totals: &mut Totals, seed: &Totals) {
    totals.steps += seed.steps;
    totals.power_losses += seed.power_losses;
    totals.process_crashes += seed.process_crashes;
    totals.snapshot_crashes += seed.snapshot_crashes;
    totals.compaction_crashes += seed.compaction_crashes;
    totals.open_crashes += seed.open_crashes;
    totals.reopens += seed.reopens;
    totals.faults_injected += seed.faults_injected;
    totals.faults_fired += seed.faults_fired;
    totals.poisonings += seed.poisonings;
    totals.appends_acknowledged += seed.appends_acknowledged;
    totals.appends_refused += seed.appends_refused;
    totals.snapshots += seed.snapshots;
    totals.snapshots_failed += seed.snapshots_failed;
    totals.compactions += seed.compactions;
    totals.segments_removed += seed.segments_removed;
    totals.snapshot_probes += seed.snapshot_probes;
    totals.probe_skips += seed.probe_skips;
    totals.probe_refusals += seed.probe_refusals;
    totals.blob_fallbacks += seed.blob_fallbacks;
    totals.events_checked += seed.events_checked;
    totals.acknowledged_events_checked += seed.acknowledged_events_checked;
    totals.records_lost += seed.records_lost;
    totals.errors_after_commit += seed.errors_after_commit;
    totals.opens_over_holes += seed.opens_over_holes;
    totals.snapshot_directory_syncs += seed.snapshot_directory_syncs;
    totals.sealed_segment_syncs += seed.sealed_segment_syncs;
}

/// Store options of one open.
#[derive(Debug, Clone, Copy)]
struct Config {
    retention: Retention,
    snapshots_kept: usize,
    snapshot_every_events: Option<u64>,
}

/// How the disk a store is opened on came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Image {
    /// A power loss: every byte on it is durable.
    PowerLoss,
    /// A process crash: what was not durable before may still be lost by a
    /// power loss during recovery; every LSN below this was durable.
    ProcessCrash(Lsn),
}

/// The snapshot damage of a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    RemoveAll,
    GarbleAll,
    GarbleNewest,
    NewestBlob,
}

/// What a check of an open store may tolerate.
#[derive(Debug, Clone, Copy, Default)]
struct Tolerate {
    /// A conversation read may fail with `SnapshotRestore` (a damaged blob
    /// and no log to fall back to).
    blob_restore_errors: bool,
    /// Skipped snapshots are expected (the probe damaged them).
    damaged_snapshots: bool,
    /// The store was not just opened (a live check): what it holds need not
    /// be durable yet.
    live: bool,
}

struct Sim {
    seed: u64,
    rng: Rng,
    storage: SimStorage,
    store: Option<Store>,
    config: Config,
    model: Model,
    events: EventGen,
    /// A fault is armed on the current storage (it may have fired).
    armed: Option<Fault>,
    /// Faults the current storage had fired when it became current.
    fired_base: u64,
    /// A failed snapshot may have left its file renamed into place without
    /// the directory fsync that makes the name durable.
    undurable_snapshot: bool,
    totals: Totals,
}

fn durability_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Sync => "Sync",
        Durability::Group => "Group",
        Durability::None => "None",
        Durability::Periodic(_) => "Periodic",
    }
}

fn kinds(events: &[Event]) -> String {
    events
        .iter()
        .map(|event| {
            format!(
                "{}@{}",
                event.type_name(),
                event.conversation_id().unwrap_or("-")
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A short description of how two slices differ.
fn slice_difference(actual: &ConversationSlice, expected: &ConversationSlice) -> String {
    format!(
        "store: {} entries, last LSN {}, {} anomalies, {} unknown statuses, {} curations; \
         fold: {} entries, last LSN {}, {} anomalies, {} unknown statuses, {} curations\n  store: {:?}\n  fold:  {:?}",
        actual.len(),
        actual.last_lsn(),
        actual.anomalies().len(),
        actual.unknown_statuses().len(),
        actual.curations().len(),
        expected.len(),
        expected.last_lsn(),
        expected.anomalies().len(),
        expected.unknown_statuses().len(),
        expected.curations().len(),
        actual
            .recorded()
            .iter()
            .map(|recorded| (recorded.lsn, recorded.entry.message_id.as_u128() as u32))
            .collect::<Vec<_>>(),
        expected
            .recorded()
            .iter()
            .map(|recorded| (recorded.lsn, recorded.entry.message_id.as_u128() as u32))
            .collect::<Vec<_>>(),
    )
}

/// Segment files of a disk: (first LSN, one past the last valid LSN).
fn segment_layout(storage: &SimStorage) -> Vec<(Lsn, Lsn)> {
    let mut segments: Vec<(Lsn, PathBuf)> = storage
        .list_dir(Path::new(STORE))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|name| Some((parse_segment_file_name(&name)?, Path::new(STORE).join(name))))
        .collect();
    segments.sort();
    let last = segments.len().saturating_sub(1);
    segments
        .iter()
        .enumerate()
        .map(|(index, (first, path))| {
            let bytes = storage.file_bytes(path).unwrap_or_default();
            let next = scan_segment(&bytes, index == last).map_or(*first, |scan| scan.next_lsn);
            (*first, next)
        })
        .collect()
}

/// Where the segments of a layout do not follow each other: (end of one,
/// start of the next). Compaction removes segments one by one, and a crash
/// may keep a later removal and forget an earlier one.
fn layout_gaps(layout: &[(Lsn, Lsn)]) -> Vec<(Lsn, Lsn)> {
    layout
        .windows(2)
        .filter(|pair| pair[0].1 != pair[1].0)
        .map(|pair| (pair[0].1, pair[1].0))
        .collect()
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let storage = SimStorage::new(rng.next_u64());
        storage.set_stale_reuse(rng.below(2) == 0);
        let config = Sim::random_config(&mut rng);
        Sim {
            seed,
            rng,
            storage,
            store: None,
            config,
            model: Model::new(),
            events: EventGen::new(),
            armed: None,
            fired_base: 0,
            undurable_snapshot: false,
            totals: Totals::default(),
        }
    }

    fn random_config(rng: &mut Rng) -> Config {
        Config {
            retention: if rng.below(3) == 0 {
                Retention::KeepAll
            } else {
                Retention::DeleteCoveredBySnapshot
            },
            snapshots_kept: 1 + rng.below(3) as usize,
            snapshot_every_events: {
                let every = (rng.below(3) == 0).then(|| 8 + rng.below(40));
                // Drawn and unused since `LogOptions::pipelined` was
                // removed: keeps every seed's random stream as it was.
                let _ = rng.below(2);
                every
            },
        }
    }

    fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.rng.below(denominator) < numerator
    }

    fn options(&self, storage: &SimStorage) -> StoreOptions {
        StoreOptions::new()
            .log(
                LogOptions::new()
                    .storage(Arc::new(storage.clone()))
                    .segment_bytes_max(SEGMENT_BYTES_MAX),
            )
            .snapshot_every_events(self.config.snapshot_every_events)
            .snapshot_every_bytes(None)
            .retention(self.config.retention)
            .snapshots_kept(self.config.snapshots_kept)
    }

    fn open_on(&self, storage: &SimStorage) -> convlog::Result<Store> {
        StoreBuilder::new(STORE)
            .options(self.options(storage))
            .reducer(TallyReducer)
            .open()
    }

    fn store(&self) -> &Store {
        self.store
            .as_ref()
            .expect("the store is open between steps")
    }

    fn fired(&self) -> u64 {
        self.storage.stats().faults_fired
    }

    /// Replaces the disk (by a crashed one), counting the faults the old
    /// one fired.
    fn set_storage(&mut self, storage: SimStorage) {
        let fired = self.storage.stats().faults_fired;
        self.totals.faults_fired += fired.saturating_sub(self.fired_base);
        self.fired_base = storage.stats().faults_fired;
        self.storage = storage;
        self.armed = None;
    }

    fn durability(&mut self) -> Durability {
        match self.rng.below(10) {
            0..=2 => Durability::Sync,
            3..=4 => Durability::Group,
            _ => Durability::None,
        }
    }

    /// Opens the store on the current storage, with new random options. An
    /// open that fails because an armed fault fired is retried once the
    /// faults are cleared; any other failure is a bug.
    fn open(&mut self) -> Check<Store> {
        self.config = Sim::random_config(&mut self.rng);
        let fired = self.fired();
        match self.open_on(&self.storage) {
            Ok(store) => Ok(store),
            Err(error) => {
                ensure!(
                    self.fired() > fired || self.armed.is_some(),
                    "check 3: the open failed with no fault armed: {error}"
                );
                trace(format!("    open failed by the injected fault: {error}"));
                self.storage.clear_faults();
                self.armed = None;
                self.open_on(&self.storage)
                    .map_err(|error| format!("check 3: open failed after clearing faults: {error}"))
            }
        }
    }

    /// Checks an open store against the model: the recovered end lies
    /// between `required_end` and everything appended, at a batch boundary;
    /// the log holds exactly the model's events there, frame by frame; every
    /// conversation and the host slice equal the folds of that prefix.
    /// Returns the recovered end (the store's next LSN).
    fn check_store(
        &mut self,
        store: &Store,
        disk: &SimStorage,
        required_end: Lsn,
        tolerate: Tolerate,
    ) -> Check<Lsn> {
        let log = store.log();
        let end = log.next_lsn();
        let appended_end = self.model.end();
        if end < required_end {
            self.totals.records_lost += required_end - end;
            return Err(format!(
                "check 1: LSNs {end}..{required_end} were acknowledged durable but are lost \
                 (store recovered {} events; open report {:?})",
                end - 1,
                store.open_report()
            ));
        }
        ensure!(
            end <= appended_end,
            "check 2: the store recovered {} events but only {} were appended",
            end - 1,
            appended_end - 1
        );
        ensure!(
            self.model.is_boundary(end),
            "check 2: the recovered end {end} splits a batch (not all-or-nothing)"
        );
        ensure!(
            tolerate.live || log.durable_lsn() >= end,
            "check 4: recovery left LSNs {}..{end} not durable",
            log.durable_lsn()
        );

        // The log itself: exactly the model's events, one frame per batch.
        // A crash in the middle of a compaction can leave a hole (the removal
        // of a later segment kept, of an earlier one forgotten): the log then
        // reads only from the segment after the last hole. A library gap
        // (see `a_crash_during_compaction_can_leave_a_hole_in_the_log`),
        // tolerated unless CONVLOG_SIM_STORE_STRICT is set.
        let gaps = layout_gaps(&segment_layout(disk));
        let mut first = log.first_lsn();
        if let Some(&(hole_start, after)) = gaps.last() {
            ensure!(
                !strict(),
                "check 3: the log has a hole: LSNs {hole_start}..{after} are gone but the log starts at LSN {first} (CONVLOG_SIM_STORE_STRICT)"
            );
            let snapshot_lsn = store.stats().snapshot_lsn;
            ensure!(
                snapshot_lsn.is_some_and(|lsn| lsn >= after),
                "check 3: the log has a hole at LSNs {hole_start}..{after} that the snapshot in use ({snapshot_lsn:?}) does not cover"
            );
            if !tolerate.live {
                self.totals.opens_over_holes += 1;
            }
            first = first.max(after);
        }
        let mut expected_lsn = first;
        let mut frame: Option<Position> = None;
        for record in log.iter_from(first) {
            let record = record.map_err(|error| {
                format!(
                    "check 3: reading the log failed at LSN {expected_lsn}: {error} (segments: {:?})",
                    segment_layout(disk)
                )
            })?;
            ensure!(
                record.lsn == expected_lsn,
                "check 2: LSN {} follows LSN {}",
                record.lsn,
                expected_lsn - 1
            );
            ensure!(
                record.lsn < end,
                "check 2: the log holds LSN {} past its end {end}",
                record.lsn
            );
            let event = codec::decode_event(&record.payload).map_err(|reason| {
                format!("check 3: LSN {} does not decode: {reason}", record.lsn)
            })?;
            let (batch, offset) = self
                .model
                .locate(record.lsn)
                .ok_or_else(|| format!("check 2: LSN {} was never appended", record.lsn))?;
            ensure!(
                event == self.model.batches[batch].events[offset],
                "check 2: LSN {} holds {} of {:?}, not the {} of {:?} appended there",
                record.lsn,
                event.type_name(),
                event.conversation_id(),
                self.model.batches[batch].events[offset].type_name(),
                self.model.batches[batch].events[offset].conversation_id()
            );
            if offset == 0 {
                ensure!(
                    frame != Some(record.position),
                    "check 2: LSN {} starts a batch inside another batch's frame",
                    record.lsn
                );
                frame = Some(record.position);
            } else {
                ensure!(
                    frame == Some(record.position),
                    "check 2: batch at LSN {} is split across frames",
                    self.model.batches[batch].start
                );
            }
            expected_lsn += 1;
        }
        ensure!(
            expected_lsn == end,
            "check 2: the log can read LSNs {first}..{expected_lsn} but its next LSN is {end}"
        );

        // Conversations: snapshot + tail equals the pure fold of the prefix.
        let prefix = self.model.events_below(end);
        let mut ids: BTreeSet<&str> = BTreeSet::new();
        for (event, _) in &prefix {
            if let Some(id) = event.conversation_id() {
                ids.insert(id);
            }
        }
        let store_ids = store.conversation_ids();
        for id in &store_ids {
            ensure!(
                ids.contains(id.as_str()),
                "check 2: the store lists conversation {id:?}, which has no event below LSN {end}"
            );
        }
        let mut fallbacks = 0;
        for id in &ids {
            let expected = conversation::fold(id, prefix.iter().copied());
            match store.conversation(id) {
                Ok(slice) => ensure!(
                    slice == expected,
                    "check 2: conversation {id:?} read from the store differs from the fold of LSNs 1..{end}: {}",
                    slice_difference(&slice, &expected)
                ),
                // A conversation with only custom events has an empty fold:
                // whether it is listed depends on whether a snapshot (which
                // keeps only conversations with entries) came since.
                Err(Error::ConversationNotFound { .. }) if expected.last_lsn() == 0 => {}
                Err(Error::SnapshotRestore { .. }) if tolerate.blob_restore_errors => {
                    fallbacks += 1;
                }
                // The fallback reads the log from its first LSN, into the hole.
                Err(Error::Corrupted { .. }) if tolerate.blob_restore_errors && !gaps.is_empty() => {
                    fallbacks += 1;
                }
                Err(error) => {
                    return Err(format!(
                        "check 2: reading conversation {id:?} failed: {error}"
                    ))
                }
            }
            if expected.last_lsn() > 0 {
                ensure!(
                    store_ids.iter().any(|listed| listed == id),
                    "check 2: conversation {id:?} has entries but is not listed"
                );
            }
        }
        self.totals.blob_fallbacks += fallbacks;
        let expected = tally_of(prefix.iter().copied());
        match store.slice::<TallyReducer>() {
            Ok(tally) => ensure!(
                tally == expected,
                "check 2: the host slice differs from the reducer folded over LSNs 1..{end}: store {tally:?}, fold {expected:?}"
            ),
            // A failed fsync took back events the host slice had folded: it
            // is refused until a reopen rebuilds it from the log.
            Err(Error::Poisoned { .. }) if store.log().is_poisoned() => {}
            Err(error) => return Err(format!("check 2: the host slice is not served: {error}")),
        }

        // Snapshots skipped on the main line: only ones the log outgrew.
        if !tolerate.damaged_snapshots {
            for (path, reason) in &store.open_report().skipped_snapshots {
                ensure!(
                    reason.contains("the log now starts at"),
                    "check 3: snapshot {} was skipped although no one damaged it: {reason}",
                    path.display()
                );
            }
        }
        // Snapshot + tail: the open replayed exactly the events after it.
        if !tolerate.live {
            let report = store.open_report();
            let from = report.snapshot.as_ref().map_or(1, |(_, lsn)| *lsn);
            ensure!(
                report.replayed_events == end - from,
                "check 2: the open replayed {} events after LSN {from}, but the log holds {}",
                report.replayed_events,
                end - from
            );
        }
        self.totals.events_checked += end - 1;
        self.totals.acknowledged_events_checked += required_end - 1;
        Ok(end)
    }

    /// Checks the open store without a reopen (live reads after appends,
    /// snapshots and compactions).
    fn check_live(&mut self) -> Check {
        let store = self.store.take().expect("the store is open");
        let result = if store.log().is_poisoned() {
            Ok(())
        } else {
            let end = self.model.end();
            let live = Tolerate {
                live: true,
                ..Tolerate::default()
            };
            let result = self.check_store(&store, &self.storage.clone(), end, live);
            result.and_then(|recovered| {
                ensure!(recovered == end, "live: next LSN {recovered}, model {end}");
                Ok(())
            })
        };
        self.store = Some(store);
        result.map_err(|error| format!("live check: {error}"))
    }

    /// Opens a store on a crashed disk and checks it, then checks that
    /// opening again, a power loss right after the open and a power cut in
    /// the middle of the open all give the same store.
    fn recover(&mut self, image: SimStorage, required_end: Lsn, kind: Image) -> Check {
        if let Image::ProcessCrash(_) = kind {
            self.sync_sealed_segments(&image)?;
        }
        let spare = self.chance(1, 3).then(|| image.process_crash());
        self.set_storage(image);
        if kind == Image::PowerLoss {
            // Every name on a power-loss image is durable.
            self.undurable_snapshot = false;
        }
        let mut store = self.open()?;
        self.sync_snapshot_directory()?;
        let end = self.check_store(
            &store,
            &self.storage.clone(),
            required_end,
            Tolerate::default(),
        )?;
        trace(format!(
            "    recovered {} events (required {}), snapshot {:?}, replayed {}, torn tail {}",
            end - 1,
            required_end - 1,
            store.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
            store.open_report().replayed_events,
            store.open_report().recovery.torn_tail.is_some()
        ));
        self.model.truncate(end);
        if self.chance(1, 3) {
            drop(store);
            store = self.open()?;
            let again = self
                .check_store(&store, &self.storage.clone(), end, Tolerate::default())
                .map_err(|error| format!("check 4 (second open): {error}"))?;
            ensure!(
                again == end,
                "check 4: a second open recovered {} events, the first {}",
                again - 1,
                end - 1
            );
        }
        if self.chance(1, 4) {
            let crashed = self.storage.crash(self.rng.next_u64());
            self.totals.power_losses += 1;
            drop(store);
            self.set_storage(crashed);
            store = self.open()?;
            let again = self
                .check_store(&store, &self.storage.clone(), end, Tolerate::default())
                .map_err(|error| format!("check 4 (power loss right after the open): {error}"))?;
            ensure!(
                again == end,
                "check 4: a power loss right after the open left {} events, the open recovered {}",
                again - 1,
                end - 1
            );
            trace("    power loss right after the open: same store".to_string());
        }
        if let Some(spare) = spare {
            // A power cut in the middle of the open, then a power loss or a
            // process crash, then an open that must give the same store.
            let operations = self.rng.below(10);
            spare.power_cut_after(operations);
            let interrupted = self.open_on(&spare);
            let opened = interrupted.is_ok();
            let power_loss = self.chance(1, 2);
            let crashed = if power_loss {
                spare.crash(self.rng.next_u64())
            } else {
                spare.process_crash()
            };
            drop(interrupted);
            self.totals.open_crashes += 1;
            let again = self.open_on(&crashed).map_err(|error| {
                format!("check 4: open after a power cut during the open (after {operations} operations) failed: {error}")
            })?;
            let minimum = match kind {
                Image::PowerLoss => end,
                Image::ProcessCrash(durable_end) => durable_end,
            };
            let recovered = self
                .check_store(&again, &crashed, minimum, Tolerate::default())
                .map_err(|error| {
                    format!("check 4 (power cut during the open after {operations} operations): {error}")
                })?;
            if kind == Image::PowerLoss || !power_loss {
                ensure!(
                    recovered == end,
                    "check 4: a power cut during the open (after {operations} operations) left {} events, an uninterrupted open {}",
                    recovered - 1,
                    end - 1
                );
            }
            trace(format!(
                "    power cut during the open after {operations} operations (that open {}), then {}: {} events",
                if opened { "succeeded" } else { "failed" },
                if power_loss { "power loss" } else { "process crash" },
                recovered - 1
            ));
        }
        self.store = Some(store);
        self.totals.reopens += 1;
        Ok(())
    }

    /// After a failed snapshot: whether a snapshot file newer than the one
    /// the store uses is in place (its name may not be durable).
    fn note_failed_snapshot(&mut self) {
        let newest = snapshot::list(&self.storage, Path::new(STORE))
            .ok()
            .and_then(|found| found.first().map(|(lsn, _)| *lsn));
        let used = self.store().stats().snapshot_lsn;
        if newest > used {
            self.undurable_snapshot = true;
            trace(format!(
                "    snapshot file at LSN {newest:?} is in place, the store uses {used:?}"
            ));
        }
    }

    /// Library gap (see `a_snapshot_left_by_a_failed_write_is_made_durable_before_compaction`):
    /// a snapshot renamed into place whose directory fsync failed (or whose
    /// writer died first) is used by the next open, and compaction then
    /// deletes the segments it covers, while a power loss can still forget
    /// its name. Unless CONVLOG_SIM_STORE_STRICT is set, the test fsyncs the
    /// snapshot directory after such an open (what the library should do).
    fn sync_snapshot_directory(&mut self) -> Check {
        if !self.undurable_snapshot || strict() {
            return Ok(());
        }
        let dir = Path::new(STORE).join(snapshot::SNAPSHOT_DIR);
        if self.storage.exists(&dir) {
            self.storage
                .sync_dir(&dir)
                .map_err(|error| format!("the test's fsync of {}: {error}", dir.display()))?;
            self.totals.snapshot_directory_syncs += 1;
            trace("    (test) fsynced the snapshot directory".to_string());
        }
        self.undurable_snapshot = false;
        Ok(())
    }

    /// Library gap (see `recovery_after_a_poisoned_writer_fsyncs_the_segment_it_seals`):
    /// when the previous writer was poisoned and died before cutting what it
    /// had not fsynced, recovery starts a fresh segment after the last one
    /// without fsyncing it, so a later power loss can tear the middle of the
    /// log (the open then fails with `Corrupted`) or lose events recovery
    /// already served. Unless CONVLOG_SIM_STORE_STRICT is set, the test
    /// fsyncs the segments of such a process-crash image before the open.
    fn sync_sealed_segments(&mut self, image: &SimStorage) -> Check {
        let marker = Path::new(STORE).join(POISONED_MARKER);
        if strict() || !image.exists(&marker) {
            return Ok(());
        }
        for name in image.list_dir(Path::new(STORE)).unwrap_or_default() {
            if parse_segment_file_name(&name).is_some() {
                let path = Path::new(STORE).join(name);
                image
                    .open_write(&path)
                    .and_then(|file| file.sync_all())
                    .map_err(|error| format!("the test's fsync of {}: {error}", path.display()))?;
            }
        }
        self.totals.sealed_segment_syncs += 1;
        trace("    (test) fsynced the segments of a poisoned writer's image".to_string());
        Ok(())
    }

    /// What survives a power loss now: the model's promises and the log's
    /// own durable watermark.
    fn power_loss_required(&self) -> Check<Lsn> {
        let claimed = self.store().log().durable_lsn();
        ensure!(
            claimed <= self.model.end(),
            "check 1: the log claims LSNs up to {claimed} durable, but only {} were appended",
            self.model.end() - 1
        );
        Ok(self.model.durable_end.max(claimed))
    }

    /// What survives a process crash now.
    fn process_crash_required(&self) -> Check<Lsn> {
        let durable = self.power_loss_required()?;
        Ok(if self.store().log().is_poisoned() {
            durable
        } else {
            self.model.written_end.max(durable)
        })
    }

    /// An error from an operation: fine only if an injected fault fired
    /// during it, or it is `Poisoned` from a writer poisoned before.
    fn explained(&self, error: &Error, fired: bool, was_poisoned: bool, what: &str) -> Check {
        ensure!(
            fired || (was_poisoned && matches!(error, Error::Poisoned { .. })),
            "check 5: {what} failed with no fault firing (armed: {:?}, poisoned: {was_poisoned}): {error}",
            self.armed
        );
        Ok(())
    }

    fn step_append(&mut self, count: u64) -> Check {
        let durability = self.durability();
        let api = self.rng.below(5);
        if api == 4 {
            return self.append_batches(count);
        }
        self.append(count, durability, api)
    }

    /// Appends `count` batches of 1-3 new events with one call of
    /// `Store::append_batches` (one durable commit): every batch it
    /// acknowledges is durable, a refused one is refused for a fault (the
    /// writer is poisoned), and none is acknowledged after one of its
    /// group was refused.
    fn append_batches(&mut self, count: u64) -> Check {
        let batches: Vec<Vec<Event>> = (0..count)
            .map(|_| {
                let events = 1 + self.rng.below(3);
                self.events.batch(&mut self.rng, events)
            })
            .collect();
        let store = self.store();
        let was_poisoned = store.log().is_poisoned();
        let tally_before = store.slice::<TallyReducer>().ok().map(|tally| tally.events);
        let fired = self.fired();
        let refs: Vec<&[Event]> = batches.iter().map(Vec::as_slice).collect();
        let results = store.append_batches(&refs);
        // As in `append`: the automatic snapshot finishes first.
        let snapshots_failed = store.automatic_snapshots().1;
        store.wait_for_snapshots();
        let snapshot_failed = store.automatic_snapshots().1 > snapshots_failed;
        let fired = self.fired() > fired;
        trace(format!(
            "  append_batches [{}] -> {:?}",
            batches
                .iter()
                .map(|batch| kinds(batch))
                .collect::<Vec<_>>()
                .join(" | "),
            results
                .iter()
                .map(|result| result.as_ref().map_err(|error| error.to_string()))
                .collect::<Vec<_>>()
        ));
        if snapshot_failed {
            trace(format!(
                "    automatic snapshot failed: {:?}",
                self.store().last_snapshot_error()
            ));
            self.note_failed_snapshot();
        }
        let mut refused = false;
        let mut folded = 0;
        for (events, result) in batches.into_iter().zip(results) {
            match result {
                Ok(lsns) => {
                    let count = events.len() as Lsn;
                    ensure!(
                        !was_poisoned && !refused,
                        "check 5: append_batches acknowledged LSNs {lsns:?} on a poisoned store or after refusing an earlier batch of the group"
                    );
                    ensure!(
                        lsns.start == self.model.end() && lsns.end - lsns.start == count,
                        "check 2: a batch of {count} of a group got LSNs {lsns:?} where {} was next",
                        self.model.end()
                    );
                    self.model.push(events);
                    self.model.written_end = lsns.end;
                    self.model.durable_end = lsns.end;
                    folded += count;
                    self.totals.appends_acknowledged += 1;
                }
                Err(error) => {
                    self.explained(&error, fired, was_poisoned, "a batch of append_batches")?;
                    refused = true;
                    self.totals.appends_refused += 1;
                }
            }
        }
        let store = self.store();
        let poisoned = store.log().is_poisoned();
        ensure!(
            !refused || poisoned,
            "check 5: append_batches refused a batch but the writer is not poisoned"
        );
        // `None` once a failed fsync took back folded events.
        let tally_after = store.slice::<TallyReducer>().ok().map(|tally| tally.events);
        ensure!(
            tally_after.is_none() || tally_after == tally_before.map(|events| events + folded),
            "check 2: append_batches folded {folded} events, but the host slice went from {tally_before:?} to {tally_after:?}"
        );
        if poisoned && !was_poisoned {
            self.totals.poisonings += 1;
            trace("    poisoned".to_string());
        }
        Ok(())
    }

    /// Appends a batch of `count` new events through one of the append
    /// calls (`api` 0: one event, 1: `append`, else `append_with`).
    fn append(&mut self, count: u64, durability: Durability, api: u64) -> Check {
        let events = self.events.batch(&mut self.rng, count);
        let store = self.store();
        let was_poisoned = store.log().is_poisoned();
        let tally_before = store.slice::<TallyReducer>().ok().map(|tally| tally.events);
        let fired = self.fired();
        let description = kinds(&events);
        let (result, durability) = match api {
            0 if count == 1 => (store.append(&events[..1]), Durability::Group),
            1 => (store.append(&events), Durability::Group),
            _ => (
                store.append_with(&events, AppendOptions::new().durability(durability)),
                durability,
            ),
        };
        // An automatic snapshot the append asked for runs on the store's
        // background thread: let it finish before anything else touches
        // the simulated disk, so the run stays a function of its seed.
        let snapshots_failed = store.automatic_snapshots().1;
        store.wait_for_snapshots();
        let snapshot_failed = store.automatic_snapshots().1 > snapshots_failed;
        let fired = self.fired() > fired;
        trace(format!(
            "  append {} x{count} [{description}] -> {:?}",
            durability_name(durability),
            result.as_ref().map_err(|error| error.to_string())
        ));
        if snapshot_failed {
            trace(format!(
                "    automatic snapshot failed: {:?}",
                self.store().last_snapshot_error()
            ));
            self.note_failed_snapshot();
        }
        match result {
            Ok(lsns) => {
                ensure!(
                    !was_poisoned,
                    "check 5: a poisoned store acknowledged LSNs {lsns:?}"
                );
                ensure!(
                    lsns.start == self.model.end() && lsns.end - lsns.start == count,
                    "check 2: a batch of {count} got LSNs {lsns:?} where {} was next",
                    self.model.end()
                );
                self.model.push(events);
                self.model.written_end = lsns.end;
                if durability != Durability::None {
                    self.model.durable_end = lsns.end;
                }
                self.totals.appends_acknowledged += 1;
            }
            Err(error) => {
                self.explained(&error, fired, was_poisoned, "an append")?;
                let store = self.store();
                let poisoned = store.log().is_poisoned();
                // `None` once a failed fsync took back folded events.
                let tally_after = store.slice::<TallyReducer>().ok().map(|tally| tally.events);
                if tally_before.is_some()
                    && tally_after == tally_before.map(|events| events + count)
                {
                    // The batch was committed and folded, and then the
                    // automatic snapshot failed: the append reports an error
                    // although the batch is in the log (durably so under
                    // Sync and Group).
                    ensure!(
                        !strict(),
                        "check 5: the append failed ({error}) although its batch was committed (CONVLOG_SIM_STORE_STRICT)"
                    );
                    self.totals.errors_after_commit += 1;
                    let start = self.model.push(events);
                    let end = start + count;
                    if durability != Durability::None {
                        self.model.durable_end = end;
                        self.model.written_end = end;
                    } else if !poisoned {
                        self.model.written_end = end;
                    }
                    trace(format!(
                        "    the batch was committed at LSNs {start}..{end} before the error (poisoned: {poisoned})"
                    ));
                    self.note_failed_snapshot();
                } else {
                    ensure!(
                        tally_after.is_none() || tally_after == tally_before,
                        "check 2: a refused batch of {count} changed the host slice from {tally_before:?} to {tally_after:?}"
                    );
                    ensure!(
                        poisoned,
                        "check 5: an append was refused but the writer is not poisoned: {error}"
                    );
                    self.totals.appends_refused += 1;
                }
                if poisoned && !was_poisoned {
                    self.totals.poisonings += 1;
                    trace("    poisoned".to_string());
                }
            }
        }
        Ok(())
    }

    fn step_sync(&mut self) -> Check {
        let store = self.store();
        let was_poisoned = store.log().is_poisoned();
        let fired = self.fired();
        let result = store.sync();
        let fired = self.fired() > fired;
        trace(format!(
            "  sync -> {:?}",
            result.as_ref().map_err(|error| error.to_string())
        ));
        match result {
            Ok(()) => {
                ensure!(!was_poisoned, "check 5: a poisoned store synced");
                self.model.durable_end = self.model.end();
                self.model.written_end = self.model.end();
            }
            Err(error) => {
                self.explained(&error, fired, was_poisoned, "a sync")?;
                ensure!(
                    self.store().log().is_poisoned(),
                    "check 5: a failed sync left the writer unpoisoned"
                );
                if !was_poisoned {
                    self.totals.poisonings += 1;
                }
            }
        }
        Ok(())
    }

    fn step_snapshot(&mut self) -> Check {
        let store = self.store();
        let was_poisoned = store.log().is_poisoned();
        let fired = self.fired();
        let result = store.snapshot();
        let fired = self.fired() > fired;
        trace(format!(
            "  snapshot -> {:?}",
            result
                .as_ref()
                .map(|info| (info.lsn, info.conversations))
                .map_err(|error| error.to_string())
        ));
        match result {
            Ok(info) => {
                ensure!(!was_poisoned, "check 5: a poisoned store wrote a snapshot");
                ensure!(
                    info.lsn == self.model.end(),
                    "a snapshot at LSN {} where the log ends before LSN {}",
                    info.lsn,
                    self.model.end()
                );
                ensure!(
                    self.storage.exists(&info.path),
                    "the snapshot {} is not on the disk",
                    info.path.display()
                );
                ensure!(
                    self.store().stats().snapshot_lsn == Some(info.lsn),
                    "the store does not use the snapshot it just wrote"
                );
                let prefix = self.model.events_below(info.lsn);
                let ids: BTreeSet<&str> = prefix
                    .iter()
                    .filter_map(|(event, _)| event.conversation_id())
                    .collect();
                let with_entries = ids
                    .iter()
                    .filter(|id| conversation::fold(id, prefix.iter().copied()).last_lsn() > 0)
                    .count();
                ensure!(
                    info.conversations == with_entries,
                    "the snapshot at LSN {} holds {} conversations, the fold has {with_entries} with events",
                    info.lsn,
                    info.conversations
                );
                // A snapshot syncs the log first.
                self.model.durable_end = self.model.end();
                self.model.written_end = self.model.end();
                self.totals.snapshots += 1;
            }
            Err(error) => {
                self.explained(&error, fired, was_poisoned, "a snapshot")?;
                self.note_failed_snapshot();
                self.totals.snapshots_failed += 1;
                if !was_poisoned && self.store().log().is_poisoned() {
                    self.totals.poisonings += 1;
                }
            }
        }
        Ok(())
    }

    fn step_compact(&mut self) -> Check {
        let store = self.store();
        let was_poisoned = store.log().is_poisoned();
        let snapshot_lsn = store.stats().snapshot_lsn;
        let first_before = store.log().first_lsn();
        let fired = self.fired();
        let result = store.compact();
        let fired = self.fired() > fired;
        trace(format!(
            "  compact ({:?}, snapshot at {snapshot_lsn:?}) -> {:?}",
            self.config.retention,
            result
                .as_ref()
                .map(|report| report.removed.len())
                .map_err(|error| error.to_string())
        ));
        match result {
            Ok(report) => {
                if self.config.retention == Retention::KeepAll || snapshot_lsn.is_none() {
                    ensure!(
                        report.removed.is_empty() && report.note.is_some(),
                        "compaction removed {} segments under {:?} with snapshot {snapshot_lsn:?}",
                        report.removed.len(),
                        self.config.retention
                    );
                }
                for path in &report.removed {
                    ensure!(
                        !self.storage.exists(path),
                        "compaction reported {} removed, but it is still there",
                        path.display()
                    );
                }
                let first = self.store().log().first_lsn();
                if !report.removed.is_empty() {
                    ensure!(
                        first > first_before && Some(first) <= snapshot_lsn,
                        "after compaction the log starts at LSN {first} (before {first_before}, snapshot {snapshot_lsn:?})"
                    );
                }
                self.totals.compactions += 1;
                self.totals.segments_removed += report.removed.len() as u64;
            }
            Err(error) => self.explained(&error, fired, was_poisoned, "a compaction")?,
        }
        Ok(())
    }

    fn step_inject(&mut self) {
        let fault = match self.rng.below(6) {
            0 => Fault::WriteEio {
                nth: 1 + self.rng.below(4),
            },
            1 | 2 => Fault::FsyncEio {
                nth: 1 + self.rng.below(4),
            },
            3 => Fault::CreateEio {
                nth: 1 + self.rng.below(2),
            },
            4 => Fault::RenameEio {
                nth: 1 + self.rng.below(2),
            },
            _ => Fault::DiskFull {
                free_bytes: self.rng.below(8000),
            },
        };
        trace(format!("  inject {fault:?}"));
        self.storage.inject(fault);
        self.armed = Some(fault);
        self.totals.faults_injected += 1;
    }

    /// Drops the store (a clean close syncs) and opens it again.
    fn step_reopen(&mut self) -> Check {
        let poisoned = self.store().log().is_poisoned();
        let durable = self.power_loss_required()?;
        let fired = self.fired();
        drop(self.store.take());
        let failed_on_close = self.fired() > fired;
        if self.chance(1, 2)
            || matches!(self.armed, Some(Fault::DiskFull { .. }))
            || (self.undurable_snapshot && !strict())
        {
            // (The test's own fsync of the snapshot directory after the
            // open must not meet an armed fault.)
            self.storage.clear_faults();
            self.armed = None;
        }
        let required_end = if poisoned || failed_on_close {
            durable
        } else {
            self.model.written_end.max(durable)
        };
        trace(format!(
            "  reopen (poisoned: {poisoned}, close failed: {failed_on_close}) requires {}",
            required_end - 1
        ));
        let store = self.open()?;
        self.sync_snapshot_directory()?;
        let end = self.check_store(
            &store,
            &self.storage.clone(),
            required_end,
            Tolerate::default(),
        )?;
        self.model.truncate(end);
        self.store = Some(store);
        self.totals.reopens += 1;
        Ok(())
    }

    fn step_power_loss(&mut self) -> Check {
        if !self.store().log().is_poisoned() && self.chance(1, 2) {
            // Leave an unsynced tail for the crash to tear.
            for _ in 0..1 + self.rng.below(4) {
                let count = 1 + self.rng.below(4);
                self.append(count, Durability::None, 2)?;
                if self.store().log().is_poisoned() {
                    // A fault fired; the power loss comes anyway.
                    break;
                }
            }
        }
        self.power_loss("power loss")
    }

    /// A power loss now: crash the disk, drop the store, recover.
    fn power_loss(&mut self, what: &str) -> Check {
        let crash_seed = self.rng.next_u64();
        let image = self.storage.crash(crash_seed);
        self.totals.power_losses += 1;
        let required_end = self.power_loss_required()?;
        trace(format!(
            "  {what} (crash seed {crash_seed}, {} unsynced operations) requires {}",
            self.storage.unsynced_operations(),
            required_end - 1
        ));
        drop(self.store.take());
        self.recover(image, required_end, Image::PowerLoss)
    }

    /// A process crash now: copy the disk as the next process finds it.
    fn process_crash(&mut self, what: &str) -> Check {
        let image = self.storage.process_crash();
        self.totals.process_crashes += 1;
        let required_end = self.process_crash_required()?;
        let durable_end = self.power_loss_required()?;
        trace(format!("  {what} requires {}", required_end - 1));
        drop(self.store.take());
        self.recover(image, required_end, Image::ProcessCrash(durable_end))
    }

    /// The power fails (or the process dies) in the middle of a snapshot.
    fn step_crash_in_snapshot(&mut self) -> Check {
        for _ in 0..self.rng.below(3) {
            let count = 1 + self.rng.below(4);
            self.step_append(count)?;
        }
        let operations = self.rng.below(12);
        self.storage.power_cut_after(operations);
        let result = self.store().snapshot();
        trace(format!(
            "  snapshot with a power cut after {operations} operations -> {:?}",
            result
                .as_ref()
                .map(|info| info.lsn)
                .map_err(|error| error.to_string())
        ));
        if result.is_ok() {
            self.model.durable_end = self.model.end();
            self.model.written_end = self.model.end();
        } else {
            self.note_failed_snapshot();
        }
        self.totals.snapshot_crashes += 1;
        if self.chance(1, 2) {
            self.power_loss("power loss during the snapshot")
        } else {
            self.process_crash("process crash during the snapshot")
        }
    }

    /// The power fails (or the process dies) in the middle of a compaction.
    fn step_crash_in_compaction(&mut self) -> Check {
        if self.store().stats().snapshot_lsn.is_none() || self.chance(1, 2) {
            for _ in 0..self.rng.below(6) {
                let count = 1 + self.rng.below(4);
                self.step_append(count)?;
            }
            self.step_snapshot()?;
        }
        let operations = self.rng.below(5);
        self.storage.power_cut_after(operations);
        let result = self.store().compact();
        trace(format!(
            "  compact ({:?}) with a power cut after {operations} operations -> {:?}",
            self.config.retention,
            result
                .as_ref()
                .map(|report| report.removed.len())
                .map_err(|error| error.to_string())
        ));
        self.totals.compaction_crashes += 1;
        if self.chance(2, 3) {
            self.power_loss("power loss during the compaction")
        } else {
            self.process_crash("process crash during the compaction")
        }
    }

    /// On a copy of the disk (as the next process would find it), removes or
    /// damages snapshots and opens the store there. What the open must do:
    /// skip a damaged snapshot for an older one or the log; fall back to the
    /// log for a damaged conversation blob; refuse with `SnapshotRestore`
    /// when no usable snapshot is left and the log no longer starts at 1.
    fn probe_snapshots(&mut self) -> Check {
        let copy = self.storage.process_crash();
        let snapshots = snapshot::list(&copy, Path::new(STORE))
            .map_err(|error| format!("listing snapshots failed: {error}"))?;
        if snapshots.is_empty() {
            return Ok(());
        }
        let required_end = self.process_crash_required()?;
        let damage = match self.rng.below(4) {
            0 => Damage::RemoveAll,
            1 => Damage::GarbleAll,
            2 => Damage::GarbleNewest,
            _ => Damage::NewestBlob,
        };
        let mut damaged: Vec<PathBuf> = Vec::new();
        for (index, (_, path)) in snapshots.iter().enumerate() {
            let io = |error: std::io::Error| format!("damaging {}: {error}", path.display());
            match damage {
                Damage::RemoveAll => copy.remove_file(path).map_err(io)?,
                Damage::GarbleAll | Damage::GarbleNewest
                    if index == 0 || damage == Damage::GarbleAll =>
                {
                    // The header or the directory: the load fails.
                    let bytes = copy.file_bytes(path).unwrap_or_default();
                    let directory_offset = bytes.get(24..32).map_or(0, |field| {
                        u64::from_le_bytes(field.try_into().expect("8 bytes"))
                    });
                    let offset = if self.chance(1, 2) || directory_offset as usize >= bytes.len() {
                        self.rng.below(48)
                    } else {
                        directory_offset + self.rng.below(bytes.len() as u64 - directory_offset)
                    };
                    let byte = bytes.get(offset as usize).copied().unwrap_or(0)
                        ^ (1 + self.rng.below(255) as u8);
                    let file = copy.open_write(path).map_err(io)?;
                    file.write_all_at(&[byte], offset).map_err(io)?;
                    damaged.push(path.clone());
                }
                Damage::NewestBlob if index == 0 => {
                    let bytes = copy.file_bytes(path).unwrap_or_default();
                    let directory_offset = bytes.get(24..32).map_or(0, |field| {
                        u64::from_le_bytes(field.try_into().expect("8 bytes"))
                    });
                    if directory_offset > 48 && directory_offset as usize <= bytes.len() {
                        let offset = 48 + self.rng.below(directory_offset - 48);
                        let byte = bytes[offset as usize] ^ 0x5a;
                        let file = copy.open_write(path).map_err(io)?;
                        file.write_all_at(&[byte], offset).map_err(io)?;
                    }
                }
                _ => {}
            }
        }
        let layout = segment_layout(&copy);
        let gaps = layout_gaps(&layout);
        let first_lsn = layout.first().map_or(1, |segment| segment.0);
        let log_end = layout.last().map_or(1, |segment| segment.1);
        // Snapshots the open can use: loadable, within the log.
        let usable: Vec<Lsn> = match damage {
            Damage::RemoveAll | Damage::GarbleAll => Vec::new(),
            Damage::GarbleNewest => snapshots.iter().skip(1).map(|(lsn, _)| *lsn).collect(),
            Damage::NewestBlob => snapshots.iter().map(|(lsn, _)| *lsn).collect(),
        }
        .into_iter()
        .filter(|lsn| (first_lsn..=log_end).contains(lsn))
        .collect();
        let chosen = usable.first().copied();
        let gap_free_from_chosen = gaps
            .iter()
            .all(|(_, next_first)| chosen.is_some_and(|lsn| *next_first <= lsn));
        let must_open = match chosen {
            Some(_) => gap_free_from_chosen,
            None => first_lsn == 1 && gaps.is_empty(),
        };
        let must_refuse = chosen.is_none() && first_lsn > 1 && gaps.is_empty();
        self.totals.snapshot_probes += 1;
        let description = format!(
            "probe {damage:?} of {} snapshots {:?} (log starts at {first_lsn}, gaps {gaps:?}, usable {usable:?})",
            snapshots.len(),
            snapshots.iter().map(|(lsn, _)| *lsn).collect::<Vec<_>>()
        );
        let opened = self.open_on(&copy);
        trace(format!(
            "  {description} -> {:?}",
            opened
                .as_ref()
                .map(|store| store.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn))
                .map_err(|error| error.to_string())
        ));
        match opened {
            Ok(store) => {
                ensure!(
                    !must_refuse,
                    "check 3: {description}: the open succeeded, though every usable snapshot is gone and the log starts at LSN {first_lsn}"
                );
                let report = store.open_report().clone();
                for path in &damaged {
                    ensure!(
                        report.skipped_snapshots.iter().any(|(skipped, _)| skipped == path),
                        "check 3: {description}: the damaged snapshot {} was not reported skipped ({:?})",
                        path.display(),
                        report.skipped_snapshots
                    );
                    ensure!(
                        report.snapshot.as_ref().map(|(used, _)| used) != Some(path),
                        "check 3: {description}: the damaged snapshot {} was used",
                        path.display()
                    );
                }
                if !damaged.is_empty() {
                    self.totals.probe_skips += 1;
                }
                let tolerate = Tolerate {
                    blob_restore_errors: damage == Damage::NewestBlob
                        && (first_lsn > 1 || !gaps.is_empty()),
                    damaged_snapshots: true,
                    live: false,
                };
                self.check_store(&store, &copy, required_end, tolerate)
                    .map_err(|error| format!("{description}: {error}"))?;
            }
            Err(error) => {
                ensure!(
                    !must_open,
                    "check 3: {description}: the open failed, though the log covers what the snapshots held: {error}"
                );
                let refused_for_snapshots = matches!(error, Error::SnapshotRestore { .. });
                let gap_damage = matches!(error, Error::Corrupted { .. }) && !gaps.is_empty();
                ensure!(
                    refused_for_snapshots || gap_damage,
                    "check 3: {description}: the open failed with something other than SnapshotRestore: {error}"
                );
                self.totals.probe_refusals += 1;
            }
        }
        Ok(())
    }

    fn step(&mut self) -> Check {
        if self.store().log().is_poisoned() {
            // Every append and sync is refused until the store is reopened.
            return match self.rng.below(8) {
                0 | 1 => {
                    let count = 1 + self.rng.below(4);
                    self.step_append(count)
                }
                2 => self.step_sync(),
                3 => self.step_snapshot(),
                4 => self.step_power_loss(),
                5 => self.step_process_crash(),
                _ => self.step_reopen(),
            };
        }
        match self.rng.below(100) {
            0..=24 => self.step_append(1),
            25..=44 => {
                let count = 2 + self.rng.below(3);
                self.step_append(count)
            }
            45..=50 => self.step_sync(),
            51..=58 => self.step_snapshot(),
            59..=64 => self.step_compact(),
            65..=68 => self.step_reopen(),
            69..=75 => self.step_power_loss(),
            76..=78 => self.step_process_crash(),
            79..=81 => self.step_crash_in_snapshot(),
            82..=84 => self.step_crash_in_compaction(),
            85..=87 => self.probe_snapshots(),
            88..=90 => self.check_live(),
            _ => {
                if self.armed.is_none() {
                    self.step_inject();
                    Ok(())
                } else {
                    let count = 1 + self.rng.below(4);
                    self.step_append(count)
                }
            }
        }
    }

    fn step_process_crash(&mut self) -> Check {
        self.process_crash("process crash")
    }

    fn run(&mut self, steps: usize) -> Check {
        let parent = Path::new("/sim");
        self.storage
            .create_dir_all(parent)
            .map_err(|error| error.to_string())?;
        self.storage
            .sync_dir(Path::new("/"))
            .map_err(|error| error.to_string())?;
        trace(format!(
            "seed {}: {steps} steps, first options {:?}",
            self.seed, self.config
        ));
        let store = self.open()?;
        self.check_store(&store, &self.storage.clone(), 1, Tolerate::default())?;
        self.store = Some(store);
        for step in 0..steps {
            STEP.with(|at| *at.borrow_mut() = step);
            self.totals.steps += 1;
            self.step()
                .map_err(|error| format!("step {step}: {error}"))?;
        }
        // Finally: a clean reopen with no faults, then a power loss.
        STEP.with(|at| *at.borrow_mut() = steps);
        self.storage.clear_faults();
        self.armed = None;
        self.step_reopen()
            .map_err(|error| format!("final reopen: {error}"))?;
        self.check_live()
            .map_err(|error| format!("final live check: {error}"))?;
        self.power_loss("final power loss")
            .map_err(|error| format!("final power loss: {error}"))?;
        self.set_storage(self.storage.clone());
        drop(self.store.take());
        Ok(())
    }
}

fn run_seed(seed: u64, totals: &mut Totals) -> Result<(), String> {
    TRACE.with(|trace| trace.borrow_mut().clear());
    STEP.with(|at| *at.borrow_mut() = 0);
    let outcome = std::panic::catch_unwind(|| {
        let mut sim = Sim::new(seed);
        let steps = 40 + sim.rng.below(40) as usize;
        let result = sim.run(steps);
        (result, sim.totals)
    });
    let failure = match outcome {
        Ok((Ok(()), seed_totals)) => {
            add(totals, &seed_totals);
            totals.seeds += 1;
            return Ok(());
        }
        Ok((Err(error), seed_totals)) => {
            totals.records_lost += seed_totals.records_lost;
            error
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
                .unwrap_or_default();
            let step = STEP.with(|at| *at.borrow());
            format!("step {step}: panicked: {message}")
        }
    };
    let operations = TRACE.with(|trace| trace.borrow().join("\n"));
    Err(format!(
        "store crash simulation failed: seed {seed}, {failure}\n\
         operations of this seed:\n{operations}\n\
         reproduce with: CONVLOG_SIM_STORE_SEED={seed} cargo test --test crash_sim_store -- --nocapture"
    ))
}

#[test]
fn random_store_operations_crashes_and_faults_keep_every_promise() {
    let started = Instant::now();
    let single = std::env::var("CONVLOG_SIM_STORE_SEED")
        .ok()
        .and_then(|seed| seed.parse::<u64>().ok());
    let seeds: Vec<u64> = match single {
        Some(seed) => vec![seed],
        None => (0..env_number("CONVLOG_SIM_STORE_SEEDS", SEEDS_DEFAULT)).collect(),
    };
    let mut totals = Totals::default();
    let mut failures = Vec::new();
    for &seed in &seeds {
        if let Err(failure) = run_seed(seed, &mut totals) {
            if failures.is_empty() {
                eprintln!("{failure}");
            } else {
                eprintln!("{}", failure.lines().next().unwrap_or_default());
            }
            failures.push(seed);
        }
        if single.is_some() {
            TRACE.with(|trace| eprintln!("{}", trace.borrow().join("\n")));
        }
    }
    eprintln!(
        "crash_sim_store: {} seeds, {} steps in {:.1?}: {} power losses, {} process crashes, \
         crashes during {} snapshots, {} compactions and {} opens; {} faults injected ({} fired, \
         {} writers poisoned); {} appends acknowledged, {} refused; {} snapshots ({} failed), \
         {} compactions removed {} segments; {} snapshot probes ({} skipped damage, {} refused \
         to open, {} blob fallbacks refused); {} events checked ({} durably acknowledged), \
         records lost: {}; library gaps met{}: {} appends failed after commit, {} opens over a \
         compaction hole, {} snapshot directories and {} poisoned writers' segments fsynced by \
         the test",
        totals.seeds,
        totals.steps,
        started.elapsed(),
        totals.power_losses,
        totals.process_crashes,
        totals.snapshot_crashes,
        totals.compaction_crashes,
        totals.open_crashes,
        totals.faults_injected,
        totals.faults_fired,
        totals.poisonings,
        totals.appends_acknowledged,
        totals.appends_refused,
        totals.snapshots,
        totals.snapshots_failed,
        totals.compactions,
        totals.segments_removed,
        totals.snapshot_probes,
        totals.probe_skips,
        totals.probe_refusals,
        totals.blob_fallbacks,
        totals.events_checked,
        totals.acknowledged_events_checked,
        totals.records_lost,
        if strict() { " (strict)" } else { "" },
        totals.errors_after_commit,
        totals.opens_over_holes,
        totals.snapshot_directory_syncs,
        totals.sealed_segment_syncs,
    );
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed: {failures:?} (the first failure is printed above with its operations)",
        failures.len(),
        seeds.len()
    );
    assert_eq!(totals.records_lost, 0);
}

// ---------------------------------------------------------------------------
// Library gaps this simulation found, now fixed. Each test shows one
// deterministically and guards against its return.

fn regression_disk(seed: u64) -> SimStorage {
    let storage = SimStorage::new(seed);
    storage.create_dir_all(Path::new("/sim")).unwrap();
    storage.sync_dir(Path::new("/")).unwrap();
    storage
}

fn regression_store(storage: &SimStorage, options: StoreOptions) -> convlog::Result<Store> {
    StoreBuilder::new(STORE)
        .options(
            options.log(
                LogOptions::new()
                    .storage(Arc::new(storage.clone()))
                    .segment_bytes_max(SEGMENT_BYTES_MAX),
            ),
        )
        .reducer(TallyReducer)
        .open()
}

fn compacting() -> StoreOptions {
    StoreOptions::new().retention(Retention::DeleteCoveredBySnapshot)
}

/// Appends `count` user messages of about 200 bytes, one per batch, under Sync.
fn fill(store: &Store, events: &mut EventGen, count: usize) {
    for _ in 0..count {
        let entry = events.entry(0, Role::User, Some("words ".repeat(30)));
        let event = events.recorded(0, entry);
        store
            .append_with(&[event], AppendOptions::new().durability(Durability::Sync))
            .unwrap();
    }
}

/// `Log::remove_segments_before` removes the covered segments one by one
/// and fsyncs the directory once at the end. A power loss before that fsync
/// may keep the removal of a later segment and forget an earlier one's (the
/// ALICE model reorders unsynced directory operations): the log is left with
/// a hole. The next open does not notice (it checks covered segments by
/// header only), `first_lsn()` is still 1, and reading the log from there
/// fails with `Corrupted` ("segment ends before LSN .. but the next segment
/// starts at LSN .."): `verify`, `dump`, an export of the whole log, and the
/// fallback for a damaged snapshot blob all fail on a healthy store.
/// Fsyncing the directory after each removal (oldest first) leaves only a
/// suffix of the log, whatever the crash keeps.
#[test]
fn a_crash_during_compaction_can_leave_a_hole_in_the_log() {
    let storage = regression_disk(11);
    let store = regression_store(&storage, compacting()).unwrap();
    fill(&store, &mut EventGen::new(), 80);
    store.snapshot().unwrap();
    assert!(
        segment_layout(&storage).len() >= 4,
        "{:?}",
        segment_layout(&storage)
    );
    // Two removals reach the page cache, then the power fails.
    storage.power_cut_after(2);
    assert!(store.compact().is_err());
    let mut holes = Vec::new();
    for seed in 0..64 {
        let crashed = storage.crash(seed);
        let reopened = regression_store(&crashed, compacting()).unwrap();
        let first = reopened.log().first_lsn();
        let read: convlog::Result<Vec<_>> = reopened.log().iter_from(first).collect();
        if let Err(error) = read {
            holes.push((
                seed,
                layout_gaps(&segment_layout(&crashed)),
                error.to_string(),
            ));
        }
    }
    drop(store);
    assert!(
        holes.is_empty(),
        "after a power loss during compaction the log cannot be read from its first LSN \
         (crash seed, holes, error): {holes:?}"
    );
}

/// `snapshot::write` renames the snapshot into place and then fsyncs the
/// snapshot directory; when that fsync fails (or the process dies before
/// it), `Store::snapshot` returns an error but the file stays under its
/// final name, which is not durable. The next open loads it (it is the
/// newest), and `compact()` deletes the segments it covers and fsyncs the
/// store directory, making the deletion durable while the snapshot's name
/// still is not: a power loss forgets the snapshot, and the store no longer
/// opens (`SnapshotRestore`: "no usable snapshot, and the log was compacted"),
/// though every event was acknowledged under Sync. `Store::open` (or
/// `compact`) should fsync the snapshot directory before relying on what
/// it lists.
#[test]
fn a_snapshot_left_by_a_failed_write_is_made_durable_before_compaction() {
    let storage = regression_disk(12);
    let mut events = EventGen::new();
    {
        let store = regression_store(&storage, compacting()).unwrap();
        fill(&store, &mut events, 60);
        store.snapshot().unwrap();
        fill(&store, &mut events, 30);
        // The snapshot's fsyncs: its file (1), then its directory (2).
        storage.inject(Fault::FsyncEio { nth: 2 });
        let error = store.snapshot().unwrap_err();
        assert!(
            error.to_string().contains("fsync snapshot directory"),
            "{error}"
        );
    }
    storage.clear_faults();
    let store = regression_store(&storage, compacting()).unwrap();
    assert_eq!(
        store.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(91),
        "the open uses the snapshot whose write failed"
    );
    assert!(!store.compact().unwrap().removed.is_empty());
    let mut refused = Vec::new();
    for seed in 0..64 {
        if let Err(error) = regression_store(&storage.crash(seed), compacting()) {
            refused.push((seed, error.to_string()));
        }
    }
    drop(store);
    assert!(
        refused.is_empty(),
        "90 events acknowledged under Sync, yet after a power loss the store does not open \
         (crash seed, error): {refused:?}"
    );
}

/// A poisoned writer leaves its `POISONED` marker and then cuts what it had
/// not fsynced. If it dies in between (here: the power is cut for it after
/// the marker), the next open finds the marker and starts a fresh segment
/// after the last one, serving the unsynced frame it found there, but fsyncs
/// only the new segment (`recovery::recover`): the old one, now sealed,
/// keeps unsynced writes (or an unsynced truncation). A later power loss can
/// then drop or tear them: the sealed segment ends early or holds damage,
/// and the open fails with `Corrupted` (events the previous open served are
/// gone too). Recovery should fsync the old last segment before it creates
/// the new one. (Since the marker records where the writer cuts, the open
/// no longer serves that frame; it still makes the cut durable before it
/// seals the segment.)
#[test]
fn recovery_after_a_poisoned_writer_fsyncs_the_segment_it_seals() {
    use convlog::log::Log;
    let storage = regression_disk(13);
    let options = |storage: &SimStorage| {
        LogOptions::new()
            .storage(Arc::new(storage.clone()))
            .segment_bytes_max(SEGMENT_BYTES_MAX)
    };
    let log = Log::open(STORE, options(&storage)).unwrap();
    for index in 0..5u8 {
        log.append_with(&[[index; 100]], Durability::Sync).unwrap();
    }
    log.append_with(&[[9; 100]], Durability::None).unwrap();
    // The fsync fails (operation 1), the marker is created, written,
    // fsynced and its directory fsynced (2-5); the truncation never happens.
    storage.inject(Fault::FsyncEio { nth: 1 });
    storage.power_cut_after(5);
    assert!(matches!(log.sync(), Err(Error::Poisoned { .. })));
    let image = storage.process_crash();
    drop(log);
    let recovered = Log::open(STORE, options(&image)).unwrap();
    let served = recovered.next_lsn();
    drop(recovered);
    let mut broken = Vec::new();
    for seed in 0..64 {
        match Log::open(STORE, options(&image.crash(seed))) {
            Ok(log) => {
                let read: convlog::Result<Vec<_>> = log.iter_from(1).collect();
                if log.next_lsn() != served || read.is_err() {
                    broken.push((
                        seed,
                        format!("{} events, read {:?}", log.next_lsn() - 1, read.err()),
                    ));
                }
            }
            Err(error) => broken.push((seed, error.to_string())),
        }
    }
    assert!(
        broken.is_empty(),
        "recovery served {} events; after a power loss (crash seed, what opened): {broken:?}",
        served - 1
    );
}

/// When an append crosses `snapshot_every_events`, `Store::append_with`
/// commits the batch (durably under Sync), folds it, and then writes the
/// automatic snapshot in the same call; if that fails (EIO or a full disk on
/// the snapshot file, or its log fsync), the append returns the snapshot's
/// error. The caller sees a failed append whose batch is in the store and
/// comes back after a reopen, and a retry records it twice (custom events
/// are then counted twice by host reducers). The append should report its
/// LSNs (the snapshot failure logged, or retried later).
#[test]
fn an_append_whose_automatic_snapshot_fails_reports_its_lsns() {
    let storage = regression_disk(14);
    let options = || StoreOptions::new().snapshot_every_events(Some(3));
    let mut events = EventGen::new();
    let store = regression_store(&storage, options()).unwrap();
    fill(&store, &mut events, 2);
    storage.inject(Fault::CreateEio { nth: 1 });
    let entry = events.entry(0, Role::User, Some("the third".to_string()));
    let event = events.recorded(0, entry);
    let result = store.append_with(&[event], AppendOptions::new().durability(Durability::Sync));
    assert_eq!(store.log().next_lsn(), 4, "the batch is in the log");
    assert_eq!(
        store.slice::<TallyReducer>().unwrap().events,
        3,
        "and folded"
    );
    drop(store);
    let store = regression_store(&storage.crash(1), options()).unwrap();
    assert_eq!(
        store.conversation("conv-0").unwrap().len(),
        3,
        "and durable"
    );
    assert!(
        result.is_ok(),
        "the append failed although its batch is durably in the store: {result:?}"
    );
}

/// Reads the store on `storage` from its first LSN after a plain reopen and
/// after each of 32 power losses; returns what failed (crash seed or `None`
/// for the reopen, error).
fn unreadable_after_reopen(storage: &SimStorage) -> Vec<(Option<u64>, String)> {
    let mut failures = Vec::new();
    let images = std::iter::once((None, storage.process_crash()))
        .chain((0..32).map(|seed| (Some(seed), storage.crash(seed))));
    for (seed, image) in images {
        let read = regression_store(&image, compacting()).and_then(|store| {
            let first = store.log().first_lsn();
            store
                .log()
                .iter_from(first)
                .collect::<convlog::Result<Vec<_>>>()
        });
        if let Err(error) = read {
            failures.push((
                seed,
                format!("{error} (holes {:?})", layout_gaps(&segment_layout(&image))),
            ));
        }
    }
    failures
}

/// A compaction fails at the directory fsync after its first removal.
/// `Log::remove_segments_before` had taken every covered segment out of the
/// reader view before removing any, so the segments after the failure stayed
/// on disk but out of the view: no later compaction removed them, and the
/// next one removed the newer segments after them and made that durable. The
/// log then had a hole between the forgotten segments and the rest, and the
/// next open failed with `Corrupted` ("segment ends before LSN .. but the
/// next segment starts at LSN .."). The segments a failed compaction did not
/// remove go back into the view.
#[test]
fn a_compaction_after_a_failed_one_leaves_no_hole_in_the_log() {
    let storage = regression_disk(15);
    let mut events = EventGen::new();
    let store = regression_store(&storage, compacting()).unwrap();
    fill(&store, &mut events, 80);
    store.snapshot().unwrap();
    assert!(
        segment_layout(&storage).len() >= 4,
        "{:?}",
        segment_layout(&storage)
    );
    storage.inject(Fault::FsyncEio { nth: 1 });
    let error = store.compact().unwrap_err();
    assert!(
        error.to_string().contains("fsync store directory"),
        "{error}"
    );
    storage.clear_faults();
    fill(&store, &mut events, 80);
    store.snapshot().unwrap();
    store.compact().unwrap();
    let first = store.log().first_lsn();
    let read: convlog::Result<Vec<_>> = store.log().iter_from(first).collect();
    assert!(read.is_ok(), "{read:?}");
    drop(store);
    let failures = unreadable_after_reopen(&storage);
    assert!(
        failures.is_empty(),
        "after a compaction that followed a failed one, the log cannot be read from its first \
         LSN in {} of 33 images; the first (crash seed, error): {:?}",
        failures.len(),
        failures.first()
    );
}

/// After a compaction's directory fsync failed, the removal before it is not
/// durable. The next compaction removes a later segment; a power loss before
/// its directory fsync may keep that removal and forget the earlier one (the
/// crash model reorders unsynced directory operations): a hole. The next
/// compaction first retries the directory fsync the failed one owes.
#[test]
fn a_compaction_after_a_failed_directory_fsync_first_makes_the_removal_durable() {
    let storage = regression_disk(16);
    let mut events = EventGen::new();
    let store = regression_store(&storage, compacting()).unwrap();
    fill(&store, &mut events, 80);
    store.snapshot().unwrap();
    storage.inject(Fault::FsyncEio { nth: 1 });
    assert!(store.compact().is_err());
    storage.clear_faults();
    // No append in between: a roll's directory fsync would make the
    // earlier removal durable anyway. One more operation, then the power fails: the next removal (or the
    // owed fsync) reaches the page cache.
    storage.power_cut_after(1);
    assert!(store.compact().is_err());
    drop(store);
    let failures = unreadable_after_reopen(&storage);
    assert!(
        failures.is_empty(),
        "after a power loss during a compaction that followed a failed one, the log cannot \
         be read from its first LSN in {} of 33 images; the first (crash seed, error): {:?}",
        failures.len(),
        failures.first()
    );
}

/// A poisoned writer leaves its `POISONED` marker, truncates the active
/// segment to its last fsynced byte, and fsyncs the truncation. If it dies
/// before that fsync (here: the power is cut for it after the truncation),
/// the truncation is not durable. An open of that disk serves what it finds
/// (the truncated segment), but a power loss before the open made that
/// durable (or with no open at all) may undo the truncation: the frames the
/// writer refused, and reported as taken back (`Log::taken_back_from`), come
/// back, and two recoveries of the same disk disagree. The marker records
/// where the writer cut, and recovery cuts there whatever the crash kept.
#[test]
fn recovery_after_a_poisoned_writer_cuts_where_it_cut() {
    use convlog::log::Log;
    let storage = regression_disk(17);
    let options = |storage: &SimStorage| {
        LogOptions::new()
            .storage(Arc::new(storage.clone()))
            .segment_bytes_max(SEGMENT_BYTES_MAX)
    };
    let log = Log::open(STORE, options(&storage)).unwrap();
    for index in 0..5u8 {
        log.append_with(&[[index; 100]], Durability::Sync).unwrap();
    }
    log.append_with(&[[8; 100]], Durability::None).unwrap();
    log.append_with(&[[9; 100], [10; 100]], Durability::None)
        .unwrap();
    // The fsync fails (operation 1), the marker is created, written,
    // fsynced and its directory fsynced (2-5), the segment is truncated (6);
    // the fsync of the truncation never happens.
    storage.inject(Fault::FsyncEio { nth: 1 });
    storage.power_cut_after(6);
    assert!(matches!(log.sync(), Err(Error::Poisoned { .. })));
    assert_eq!(log.taken_back_from(), Some(6));
    let image = storage.process_crash();
    drop(log);
    let served = Log::open(STORE, options(&image.process_crash()))
        .unwrap()
        .next_lsn();
    assert_eq!(served, 6, "the uninterrupted open serves the truncated log");
    let mut differ = Vec::new();
    for operations in 0..8 {
        for seed in 0..64 {
            let spare = image.process_crash();
            spare.power_cut_after(operations);
            drop(Log::open(STORE, options(&spare)));
            match Log::open(STORE, options(&spare.crash(seed))) {
                Ok(log) => {
                    let read: convlog::Result<Vec<_>> = log.iter_from(1).collect();
                    if log.next_lsn() != served || read.is_err() {
                        differ.push((
                            operations,
                            seed,
                            format!("{} events, read {:?}", log.next_lsn() - 1, read.err()),
                        ));
                    }
                }
                Err(error) => differ.push((operations, seed, error.to_string())),
            }
        }
    }
    assert!(
        differ.is_empty(),
        "an open served {} events; after a power cut during an open of the same disk and a \
         power loss, {} of 512 opens differ; the first (operations before the cut, crash \
         seed, what opened): {:?}",
        served - 1,
        differ.len(),
        differ.first()
    );
}
