//! Read side of the conversation store (issue 3, "Scale" and "Snapshots"),
//! against SQLite holding the same data, in one run on one disk.
//!
//! 1. Read-and-fold latency (`Store::conversation`) of one 200-entry
//!    conversation in stores of 1k, 10k and 100k other conversations. The
//!    target's appends are spread evenly through the log, between the other
//!    conversations' appends, as a host serving many conversations would
//!    write them. Measured with no snapshot (every frame from the log) and
//!    after `Store::snapshot` (the slice from the snapshot file). All stores
//!    stay open and are read in interleaved rounds, so that the load of a
//!    shared machine falls on all of them alike. A fourth store holds the
//!    smallest store's events in 64-event frames shared between
//!    conversations (`mixed`).
//! 2. The same events in SQLite (one row per event: `lsn INTEGER PRIMARY
//!    KEY, conversation_id, payload` with the bytes of
//!    `convlog::codec::encode_event`, an index on `conversation_id`, WAL):
//!    select one conversation's rows ordered by LSN, decode each payload and
//!    fold them with `convlog::conversation::fold`.
//! 3. Memory after open of the largest store: the index's own estimate
//!    (`StoreStats::index_bytes`) and the RSS growth of a fresh child process
//!    around `Store::open`, per stored event.
//! 4. Open time of a ~1 GiB store with a recent snapshot (and a small tail
//!    after it), once with the snapshot late in a nearly full active segment
//!    and once just after a segment roll, and without a snapshot (full
//!    replay), warm cache.
//! 5. Adversarial orders (issue 10): one conversation of n entries recorded
//!    with descending sequences, with a new evaluation per entry, and with
//!    every tool result before its call (against ascending sequences):
//!    the in-memory fold (`conversation::fold`) and the read-and-fold
//!    from a store (`Store::conversation`, no snapshot). O(n log n): the
//!    time per entry stays nearly flat as n doubles.
//!
//! Run with `cargo bench --bench store_read`. Environment:
//! - `CONVLOG_BENCH_SIZES`: the store sizes in conversations besides the
//!   target (default `1000,10000,100000`);
//! - `CONVLOG_BENCH_READS`: reads per latency measurement (default 2000;
//!   each measurement also stops after `CONVLOG_BENCH_SECONDS`, default 2 s);
//! - `CONVLOG_BENCH_STORE_MIB`: size of the open-time store (default 1024);
//! - `CONVLOG_BENCH_ONLY`: a comma-separated subset of `read`, `mixed`,
//!   `open`, `adversarial` (default all);
//! - `CONVLOG_BENCH_ADVERSARIAL`: the entry counts of the adversarial orders
//!   (default `30000,60000`);
//! - `CONVLOG_BENCH_DIR`: where scratch stores go (default `target/bench-tmp`).

mod common;

use std::collections::VecDeque;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{grouped, section, Table, XorShift};
use convlog::codec;
use convlog::conversation::{self, ConversationSlice};
use convlog::log::{Durability, Lsn};
use convlog::model::{
    ConversationEntry, Event, Reasoning, Role, Timestamp, ToolCall, ToolStatus, ToolStatusChanged,
};
use convlog::store::{AppendOptions, Store, StoreOptions};
use rusqlite::Connection;
use uuid::Uuid;

type BenchResult<T> = Result<T, Box<dyn Error>>;

const MIB: f64 = 1024.0 * 1024.0;
const TARGET: &str = "conv-target";
const TARGET_ENTRIES: usize = 200;
/// Conversations in progress at once while building (their appends interleave).
const WAVE: usize = 64;
/// Events per frame in the mixed-batch store.
const MIXED_BATCH: usize = 64;
const CHILD_ENV: &str = "CONVLOG_BENCH_CHILD_OPEN";
/// LSNs the read-from-an-LSN measurement starts at, per store.
const SEEK_READS: usize = 400;
const SQL_READ: &str = "SELECT lsn, payload FROM events WHERE conversation_id = ?1 ORDER BY lsn";

fn main() -> BenchResult<()> {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        return child_open(Path::new(&dir));
    }
    let sizes = env_list("CONVLOG_BENCH_SIZES", &[1_000, 10_000, 100_000]);
    let reads = common::env_f64("CONVLOG_BENCH_READS", 2000.0).max(10.0) as usize;
    let budget = common::phase_duration();
    let store_mib = common::env_f64("CONVLOG_BENCH_STORE_MIB", 1024.0).max(1.0);
    let started = Instant::now();

    println!("# convlog store_read bench");
    println!();
    println!(
        "cores: {}, scratch: {}, reads per measurement: {} (at most {:.1} s each)",
        std::thread::available_parallelism().map_or(0, |cores| cores.get()),
        common::scratch_root().display(),
        reads,
        budget.as_secs_f64()
    );
    println!(
        "target: {TARGET_ENTRIES} entries (system, user, assistant with 1-3 parallel tool calls, \
         running/completed statuses, results 200 B - 4 KiB); other conversations: 6-10 entries, \
         results 200 B - 2 KiB; {WAVE} conversations in progress at a time"
    );

    let (reads_table, memory) = if selected("read") || selected("mixed") {
        bench_reads(&sizes, reads, budget)?
    } else {
        (Vec::new(), None)
    };
    let open = if selected("open") {
        section("Open-time store");
        Some(bench_open((store_mib * MIB) as u64)?)
    } else {
        None
    };

    print_summary(&reads_table, memory.as_ref(), open.as_ref());
    if selected("adversarial") {
        let sizes = env_list("CONVLOG_BENCH_ADVERSARIAL", &[30_000, 60_000]);
        bench_adversarial(&sizes)?;
    }
    println!("total bench time: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn selected(phase: &str) -> bool {
    match std::env::var("CONVLOG_BENCH_ONLY") {
        Ok(only) => only.split(',').any(|name| name.trim() == phase),
        Err(_) => true,
    }
}

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(value) => value
            .split(',')
            .map(|item| {
                item.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}={value:?} is not a list of numbers"))
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

// ---------------------------------------------------------------------------
// Realistic conversations

const WORDS: &[&str] = &[
    "the", "tool", "returned", "file", "search", "result", "function", "value", "error", "line",
    "config", "agent", "model", "user", "request", "data", "index", "query", "page", "build",
    "test", "passed", "failed", "module", "import", "struct", "field", "parse", "json", "read",
];
const TOOLS: &[&str] = &["read_file", "search", "run_shell", "http_get", "write_file"];

/// The shape of one kind of conversation.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// System prompt length range (bytes).
    system: (usize, usize),
    /// Tool result length range (bytes).
    result: (usize, usize),
    /// Tool rounds per evaluation.
    rounds: (usize, usize),
}

const TARGET_SHAPE: Shape = Shape {
    system: (1024, 2048),
    result: (200, 4096),
    rounds: (2, 8),
};
const OTHER_SHAPE: Shape = Shape {
    system: (300, 800),
    result: (200, 2048),
    rounds: (1, 3),
};

/// A deterministic event generator (fixed ids, times and text).
struct Generator {
    rng: XorShift,
    clock: i64,
}

impl Generator {
    fn new(seed: u64) -> Generator {
        Generator {
            rng: XorShift::new(seed),
            clock: 1_780_000_000_000_000,
        }
    }

    fn between(&mut self, (low, high): (usize, usize)) -> usize {
        self.rng.range(low, high + 1)
    }

    fn text(&mut self, len: usize) -> String {
        let mut text = String::with_capacity(len + 16);
        while text.len() < len {
            text.push_str(WORDS[self.rng.range(0, WORDS.len())]);
            text.push(' ');
        }
        text.truncate(len);
        text
    }

    fn tick(&mut self) -> Timestamp {
        self.clock += self.rng.range(1_000, 3_000_000) as i64;
        Timestamp(self.clock)
    }

    fn entry(
        &mut self,
        evaluation: &str,
        sequence: u64,
        turn: u32,
        role: Role,
        content: Option<String>,
    ) -> ConversationEntry {
        let mut entry = ConversationEntry::new(evaluation, sequence, role, content);
        entry.message_id = Uuid::from_u64_pair(self.rng.next_u64(), self.rng.next_u64());
        entry.turn = turn;
        entry.created_at = self.tick();
        entry
    }

    /// One conversation of exactly `entries` entries, as the appends a host
    /// makes: each entry on its own, the running statuses of a parallel
    /// tool batch together, and each call's completion with its result.
    fn conversation(&mut self, id: &str, entries: usize, shape: Shape) -> Vec<Vec<Event>> {
        let mut appends = Vec::new();
        let mut left = entries;
        let mut evaluation = 0;
        let mut call_number = 0;
        while left > 0 {
            let eval = format!("{id}/eval-{evaluation}");
            evaluation += 1;
            let (mut sequence, mut turn) = (0u64, 0u32);
            let system = self.between(shape.system);
            let content = Some(self.text(system));
            let mut entry = self.entry(&eval, sequence, turn, Role::System, content);
            entry.prompt_ns = Some("bench".into());
            entry.prompt_key = Some("agent-v1".into());
            appends.push(vec![entry.recorded_in(id)]);
            left -= 1;
            sequence += 1;
            if left == 0 {
                break;
            }
            let user = self.between((50, 500));
            let content = Some(self.text(user));
            let entry = self.entry(&eval, sequence, turn, Role::User, content);
            appends.push(vec![entry.recorded_in(id)]);
            left -= 1;
            sequence += 1;
            let rounds = self.between(shape.rounds);
            for _ in 0..rounds {
                if left < 2 {
                    break;
                }
                let calls = self.between((1, 3)).min(left - 1);
                let mut assistant = self.entry(&eval, sequence, turn, Role::Assistant, None);
                sequence += 1;
                assistant.finish_reason = Some("tool_calls".into());
                if self.rng.next_u64() % 10 < 3 {
                    let len = self.between((200, 800));
                    let signature = self.text(120);
                    assistant.reasoning = Some(Reasoning {
                        text: Some(self.text(len)),
                        signature: Some(signature),
                        redacted: false,
                    });
                }
                for _ in 0..calls {
                    let name = TOOLS[self.rng.range(0, TOOLS.len())];
                    let len = self.between((30, 250));
                    let arguments = format!("{{\"query\": \"{}\", \"limit\": 10}}", self.text(len));
                    assistant.tool_calls.push(ToolCall {
                        call_id: format!("call_{call_number:08}"),
                        name: name.into(),
                        arguments,
                        status: ToolStatus::Pending,
                        started_at: None,
                        ended_at: None,
                        error: None,
                    });
                    call_number += 1;
                }
                let calls: Vec<(String, String)> = assistant
                    .tool_calls
                    .iter()
                    .map(|call| (call.call_id.clone(), call.name.clone()))
                    .collect();
                appends.push(vec![assistant.recorded_in(id)]);
                left -= 1;
                let running = calls
                    .iter()
                    .map(|(call_id, _)| {
                        let at = self.tick();
                        Event::ToolStatus(ToolStatusChanged::new(
                            id,
                            &eval,
                            call_id,
                            ToolStatus::Running,
                            at,
                        ))
                    })
                    .collect();
                appends.push(running);
                for (call_id, name) in calls {
                    let failed = self.rng.next_u64().is_multiple_of(20);
                    let len = self.between(shape.result);
                    let content = Some(self.text(len));
                    let mut result = self.entry(&eval, sequence, turn, Role::Tool, content);
                    sequence += 1;
                    result.tool_call_id = Some(call_id.clone());
                    result.tool_name = Some(name);
                    result.is_error = failed;
                    let mut status = ToolStatusChanged::new(
                        id,
                        &eval,
                        &call_id,
                        if failed {
                            ToolStatus::Failed
                        } else {
                            ToolStatus::Completed
                        },
                        result.created_at,
                    );
                    if failed {
                        status.error = result.content.clone();
                    }
                    appends.push(vec![Event::ToolStatus(status), result.recorded_in(id)]);
                    left -= 1;
                }
                turn += 1;
            }
            if left > 0 {
                let len = self.between((100, 1024));
                let content = Some(self.text(len));
                let mut last = self.entry(&eval, sequence, turn, Role::Assistant, content);
                last.finish_reason = Some("stop".into());
                appends.push(vec![last.recorded_in(id)]);
                left -= 1;
            }
        }
        appends
    }
}

// ---------------------------------------------------------------------------
// Phases 1-3: read-and-fold latency, SQLite, memory

#[derive(Debug, Clone)]
struct Latency {
    samples: usize,
    p50: Duration,
    p99: Duration,
}

/// Latency samples of one kind of read, gathered over several rounds.
#[derive(Debug, Default)]
struct Samples(Vec<Duration>);

impl Samples {
    /// Times up to `count` calls of `read`, stopping early once `budget` is
    /// spent (after at least 5 calls).
    fn run(
        &mut self,
        count: usize,
        budget: Duration,
        mut read: impl FnMut() -> BenchResult<()>,
    ) -> BenchResult<()> {
        let start = Instant::now();
        let mut done = 0;
        while done < count && (done < 5 || start.elapsed() < budget) {
            let begin = Instant::now();
            read()?;
            self.0.push(begin.elapsed());
            done += 1;
        }
        Ok(())
    }

    fn latency(&self) -> Latency {
        let mut samples = self.0.clone();
        samples.sort();
        let percentile = |p: usize| samples[((samples.len() * p) / 100).min(samples.len() - 1)];
        Latency {
            samples: samples.len(),
            p50: percentile(50),
            p99: percentile(99),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Proc {
    vm_rss_kib: u64,
    rss_anon_kib: u64,
    rss_file_kib: u64,
}

fn proc_status() -> Proc {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    Proc {
        vm_rss_kib: field("VmRSS:"),
        rss_anon_kib: field("RssAnon:"),
        rss_file_kib: field("RssFile:"),
    }
}

/// Runs in a fresh child process: opens the store once and prints what it
/// cost in memory.
fn child_open(dir: &Path) -> BenchResult<()> {
    let before = proc_status();
    let start = Instant::now();
    let store = Store::open(dir, StoreOptions::default())?;
    let open = start.elapsed();
    let after = proc_status();
    let stats = store.stats();
    println!(
        "CHILD {} {} {} {} {} {} {} {} {} {}",
        stats.next_lsn - 1,
        stats.index_entries,
        stats.index_bytes,
        after.vm_rss_kib.saturating_sub(before.vm_rss_kib),
        after.rss_anon_kib.saturating_sub(before.rss_anon_kib),
        after.rss_file_kib.saturating_sub(before.rss_file_kib),
        open.as_micros(),
        store.open_report().replayed_events,
        u8::from(store.open_report().snapshot.is_some()),
        stats.conversations,
    );
    Ok(())
}

/// What a child open reported.
#[derive(Debug, Clone)]
struct OpenMemory {
    events: u64,
    index_entries: u64,
    index_bytes: u64,
    vm_rss_growth: u64,
    anon_growth: u64,
    file_growth: u64,
    open: Duration,
    replayed: u64,
    from_snapshot: bool,
    conversations: u64,
}

fn open_in_child(dir: &Path) -> BenchResult<OpenMemory> {
    let output = Command::new(std::env::current_exe()?)
        .env(CHILD_ENV, dir)
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("CHILD "))
        .ok_or_else(|| {
            format!(
                "child open failed: {}{}",
                stdout,
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    let numbers: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    Ok(OpenMemory {
        events: numbers[0],
        index_entries: numbers[1],
        index_bytes: numbers[2],
        vm_rss_growth: numbers[3] * 1024,
        anon_growth: numbers[4] * 1024,
        file_growth: numbers[5] * 1024,
        open: Duration::from_micros(numbers[6]),
        replayed: numbers[7],
        from_snapshot: numbers[8] == 1,
        conversations: numbers[9],
    })
}

#[derive(Debug, Clone)]
struct MemoryResult {
    others: usize,
    tail: OpenMemory,
    snapshot: OpenMemory,
}

#[derive(Debug, Clone)]
struct ReadResult {
    others: usize,
    mixed: Option<usize>,
    events: u64,
    target_events: u64,
    target_frames: u64,
    store_bytes: u64,
    sqlite_bytes: u64,
    build: Duration,
    snapshot_time: Duration,
    tail: Latency,
    snapshot: Latency,
    sqlite: Latency,
    /// Decoding the target's payloads, already in memory.
    decode: Latency,
    /// Folding the target's events, already decoded.
    fold: Latency,
    segments: usize,
    /// Target events in the last (active, read with `pread`) segment.
    target_in_active: u64,
}

fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => dir_bytes(&entry.path()),
            _ => entry.metadata().map_or(0, |metadata| metadata.len()),
        })
        .sum()
}

fn sqlite_open(path: &Path) -> rusqlite::Result<Connection> {
    let connection = Connection::open(path)?;
    let mode: String =
        connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    assert_eq!(mode.to_lowercase(), "wal", "SQLite did not switch to WAL");
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(connection)
}

/// Appends `batch` to the store and the same encoded events to SQLite.
fn record(
    store: &Store,
    insert: &mut rusqlite::Statement<'_>,
    batch: Vec<Event>,
) -> BenchResult<()> {
    let rows: Vec<(String, Vec<u8>)> = batch
        .iter()
        .map(|event| {
            (
                event.conversation_id().unwrap_or_default().to_string(),
                codec::encode_event(event),
            )
        })
        .collect();
    let lsns = store.append_with(&batch, AppendOptions::new().durability(Durability::None))?;
    for (lsn, (id, payload)) in lsns.zip(rows) {
        insert.execute(rusqlite::params![lsn as i64, id, payload])?;
    }
    Ok(())
}

/// Builds the store and the SQLite database: `others` conversations in waves
/// of `WAVE` (their appends in random order, each conversation's in its own
/// order), with the target's appends spread evenly over the whole run. With
/// `mixed`, consecutive events are gathered into frames of that many events
/// regardless of conversation.
fn build_read_store(
    dir: &Path,
    db_path: &Path,
    others: usize,
    mixed: Option<usize>,
) -> BenchResult<(u64, u64, u64)> {
    let store = Store::open(dir, StoreOptions::new().durability(Durability::None))?;
    let connection = sqlite_open(db_path)?;
    connection.execute_batch(
        "CREATE TABLE events (lsn INTEGER PRIMARY KEY, conversation_id TEXT NOT NULL, payload BLOB NOT NULL);
         CREATE INDEX events_conversation ON events (conversation_id);",
    )?;
    let mut insert = connection
        .prepare("INSERT INTO events (lsn, conversation_id, payload) VALUES (?1, ?2, ?3)")?;

    // The same target in every store; the others differ per store.
    let target = Generator::new(0x7A46_E700).conversation(TARGET, TARGET_ENTRIES, TARGET_SHAPE);
    let mut generator = Generator::new(0x5EED_0003 + others as u64);
    let target_events: u64 = target.iter().map(|batch| batch.len() as u64).sum();
    let target_appends = target.len();
    let mut target: VecDeque<Vec<Event>> = target.into();
    let waves = others.div_ceil(WAVE).max(1);
    let mut pending: Vec<Event> = Vec::new();
    let mut emit = |batch: Vec<Event>, insert: &mut rusqlite::Statement<'_>| -> BenchResult<()> {
        match mixed {
            None => record(&store, insert, batch),
            Some(size) => {
                pending.extend(batch);
                if pending.len() >= size {
                    record(&store, insert, std::mem::take(&mut pending))?;
                }
                Ok(())
            }
        }
    };
    let mut events = target_events;
    for wave in 0..waves {
        connection.execute_batch("BEGIN")?;
        let first = wave * WAVE;
        let mut scripts: Vec<VecDeque<Vec<Event>>> = (first..(first + WAVE).min(others))
            .map(|number| {
                let entries = generator.between((6, 10));
                let id = format!("conv-{number:06}");
                generator.conversation(&id, entries, OTHER_SHAPE).into()
            })
            .collect();
        let wave_appends: usize = scripts.iter().map(VecDeque::len).sum();
        events += scripts
            .iter()
            .flatten()
            .map(|batch| batch.len() as u64)
            .sum::<u64>();
        // The target appends due in this wave, at evenly spaced points of it.
        let due = target_appends * (wave + 1) / waves - target_appends * wave / waves;
        let mut injected = 0;
        let mut done = 0;
        while !scripts.is_empty() || injected < due {
            while injected < due
                && (scripts.is_empty() || done >= (injected + 1) * wave_appends / (due + 1))
            {
                let batch = target.pop_front().expect("target appends left");
                emit(batch, &mut insert)?;
                injected += 1;
            }
            if scripts.is_empty() {
                break;
            }
            let pick = generator.rng.range(0, scripts.len());
            let batch = scripts[pick].pop_front().expect("scripts are not empty");
            if scripts[pick].is_empty() {
                scripts.swap_remove(pick);
            }
            emit(batch, &mut insert)?;
            done += 1;
        }
        connection.execute_batch("COMMIT")?;
    }
    assert!(target.is_empty(), "every target append was made");
    if !pending.is_empty() {
        connection.execute_batch("BEGIN")?;
        record(&store, &mut insert, std::mem::take(&mut pending))?;
        connection.execute_batch("COMMIT")?;
    }
    drop(insert);
    store.sync()?;
    connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
    let frames = match mixed {
        None => target_appends as u64,
        Some(_) => 0,
    };
    Ok((events, target_events, frames))
}

fn read_sqlite(connection: &Connection) -> BenchResult<ConversationSlice> {
    let mut statement = connection.prepare_cached(SQL_READ)?;
    let mut rows = statement.query([TARGET])?;
    let mut events: Vec<(Event, Lsn)> = Vec::with_capacity(400);
    while let Some(row) = rows.next()? {
        let lsn: i64 = row.get(0)?;
        let event = codec::decode_event(row.get_ref(1)?.as_blob()?)?;
        events.push((event, lsn as Lsn));
    }
    Ok(conversation::fold(
        TARGET,
        events.iter().map(|(event, lsn)| (event, *lsn)),
    ))
}

/// A built store and database, open, with the samples taken from them.
struct ReadStore {
    others: usize,
    mixed: Option<usize>,
    _scratch: tempfile::TempDir,
    dir: PathBuf,
    events: u64,
    target_events: u64,
    target_frames: u64,
    store_bytes: u64,
    sqlite_bytes: u64,
    segments: usize,
    target_in_active: u64,
    build: Duration,
    snapshot_time: Duration,
    store: Option<Store>,
    connection: Connection,
    payloads: Vec<(Lsn, Vec<u8>)>,
    decoded: Vec<(Event, Lsn)>,
    tail: Samples,
    snapshot: Samples,
    sqlite: Samples,
    decode: Samples,
    fold: Samples,
}

impl ReadStore {
    fn label(&self) -> String {
        match self.mixed {
            None => format!("{} conversations", grouped(self.others as f64)),
            Some(size) => format!(
                "{} conversations, mixed {size}-event frames",
                grouped(self.others as f64)
            ),
        }
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("the store is open")
    }
}

fn build_one(others: usize, mixed: Option<usize>) -> BenchResult<ReadStore> {
    let scratch = common::scratch_dir("store-read");
    let dir = scratch.path().join("store");
    let db_path = scratch.path().join("sqlite.db");
    let start = Instant::now();
    let (events, target_events, target_frames) = build_read_store(&dir, &db_path, others, mixed)?;
    let build = start.elapsed();
    let store_bytes = dir_bytes(&dir);
    let sqlite_bytes = dir_bytes(scratch.path()) - store_bytes;
    let segment_lsns: Vec<Lsn> = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".seg")?.parse().ok()
        })
        .collect();
    let active_from = segment_lsns.iter().copied().max().unwrap_or(1);
    let connection = sqlite_open(&db_path)?;
    let payloads: Vec<(Lsn, Vec<u8>)> = connection
        .prepare(SQL_READ)?
        .query_map([TARGET], |row| {
            Ok((row.get::<_, i64>(0)? as Lsn, row.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    let decoded: Vec<(Event, Lsn)> = payloads
        .iter()
        .map(|(lsn, payload)| codec::decode_event(payload).map(|event| (event, *lsn)))
        .collect::<Result<_, _>>()?;
    let target = ReadStore {
        others,
        mixed,
        dir,
        events,
        target_events,
        target_frames,
        store_bytes,
        sqlite_bytes,
        segments: segment_lsns.len(),
        target_in_active: payloads
            .iter()
            .filter(|(lsn, _)| *lsn >= active_from)
            .count() as u64,
        build,
        snapshot_time: Duration::ZERO,
        store: None,
        connection,
        payloads,
        decoded,
        tail: Samples::default(),
        snapshot: Samples::default(),
        sqlite: Samples::default(),
        decode: Samples::default(),
        fold: Samples::default(),
        _scratch: scratch,
    };
    println!(
        "{}: built {} events ({:.0} MiB log in {} segments, {:.0} MiB SQLite) in {:.1} s",
        target.label(),
        grouped(events as f64),
        store_bytes as f64 / MIB,
        target.segments,
        sqlite_bytes as f64 / MIB,
        build.as_secs_f64()
    );
    Ok(target)
}

const ROUNDS: usize = 10;

/// Phases 1-3: builds every store, then measures them in interleaved rounds
/// (every store and every kind of read in each round), so that the load of
/// the shared machine falls on all of them alike.
fn bench_reads(
    sizes: &[usize],
    reads: usize,
    budget: Duration,
) -> BenchResult<(Vec<ReadResult>, Option<MemoryResult>)> {
    section("Building the read stores");
    let mut stores = Vec::new();
    if selected("read") {
        for &others in sizes {
            stores.push(build_one(others, None)?);
        }
    }
    if selected("mixed") {
        let others = sizes.iter().copied().min().unwrap_or(1000);
        stores.push(build_one(others, Some(MIXED_BATCH))?);
    }
    let largest = stores
        .iter()
        .enumerate()
        .filter(|(_, store)| store.mixed.is_none())
        .max_by_key(|(_, store)| store.others)
        .map(|(index, _)| index);
    // Memory after open, in a fresh process, before this one opens the store.
    let tail_memory = match largest {
        Some(index) => Some(open_in_child(&stores[index].dir)?),
        None => None,
    };
    for store in &mut stores {
        store.store = Some(Store::open(&store.dir, StoreOptions::default())?);
        let from_store = store.store().conversation(TARGET)?;
        let from_sqlite = read_sqlite(&store.connection)?;
        assert_eq!(
            from_store.len(),
            TARGET_ENTRIES,
            "the target has its entries"
        );
        assert!(
            from_store == from_sqlite,
            "store and SQLite fold the same slice"
        );
        assert!(from_store.anomalies().is_empty() && from_store.unknown_statuses().is_empty());
    }
    if let Some(store) = stores.first() {
        let plan: Vec<String> = store
            .connection
            .prepare(&format!("EXPLAIN QUERY PLAN {SQL_READ}"))?
            .query_map([TARGET], |row| row.get::<_, String>(3))?
            .collect::<Result<_, _>>()?;
        println!("SQLite plan: {}", plan.join("; "));
    }

    section("Reading (no snapshot), interleaved rounds");
    let per_round = reads.div_ceil(ROUNDS);
    let round_budget = budget / ROUNDS as u32;
    for round in 0..ROUNDS {
        for store in &mut stores {
            let warm = if round == 0 { 20 } else { 0 };
            let (reader, connection) = (store.store.as_ref().expect("open"), &store.connection);
            let read_store = || {
                std::hint::black_box(reader.conversation(TARGET)?);
                Ok(())
            };
            Samples::default().run(warm, Duration::MAX, read_store)?;
            store.tail.run(per_round, round_budget, read_store)?;
            let read_sql = || {
                std::hint::black_box(read_sqlite(connection)?);
                Ok(())
            };
            Samples::default().run(warm, Duration::MAX, read_sql)?;
            store.sqlite.run(per_round, round_budget, read_sql)?;
            let payloads = &store.payloads;
            store.decode.run(per_round, round_budget, || {
                for (_, payload) in payloads {
                    std::hint::black_box(codec::decode_event(payload)?);
                }
                Ok(())
            })?;
            let decoded = &store.decoded;
            store.fold.run(per_round, round_budget, || {
                std::hint::black_box(conversation::fold(
                    TARGET,
                    decoded.iter().map(|(event, lsn)| (event, *lsn)),
                ));
                Ok(())
            })?;
        }
    }
    for store in &stores {
        let (tail, sqlite) = (store.tail.latency(), store.sqlite.latency());
        println!(
            "{}: convlog p50 {} p99 {} ({} reads); SQLite p50 {} p99 {} ({} reads); in memory: decode p50 {}, fold p50 {}",
            store.label(),
            micros(tail.p50),
            micros(tail.p99),
            tail.samples,
            micros(sqlite.p50),
            micros(sqlite.p99),
            sqlite.samples,
            micros(store.decode.latency().p50),
            micros(store.fold.latency().p50),
        );
    }

    // Reading the log from an LSN (issue 15): `LogView::iter_from` starts
    // at the store's nearest seek point; the segment log's own reader
    // (`LogReader::iter_from`) scans from the start of the segment holding
    // the LSN. Same LSNs, same run: the first event of each.
    section("Reading the log from an LSN (first event), seek point vs segment scan");
    for store in stores.iter().filter(|store| store.mixed.is_none()) {
        let reader = store.store();
        let log_reader = reader.log().reader().expect("the segment log");
        let next = reader.log().next_lsn();
        let lsns: Vec<Lsn> = (0..SEEK_READS as u64)
            .map(|index| 1 + (index * 7919 * (next - 1) / SEEK_READS as u64) % (next - 1))
            .collect();
        let (mut seek, mut scan) = (Samples::default(), Samples::default());
        for &lsn in &lsns {
            seek.run(1, Duration::MAX, || {
                let first = reader.log().iter_from(lsn).next().expect("an event")?;
                assert_eq!(first.lsn, lsn);
                Ok(())
            })?;
            scan.run(1, Duration::MAX, || {
                let first = log_reader.iter_from(lsn).next().expect("an event")?;
                assert_eq!(first.lsn, lsn);
                Ok(())
            })?;
        }
        let (seek, scan) = (seek.latency(), scan.latency());
        println!(
            "{}: iter_from(lsn) first event p50 {} p99 {}; segment scan p50 {} p99 {} ({} LSNs)",
            store.label(),
            micros(seek.p50),
            micros(seek.p99),
            micros(scan.p50),
            micros(scan.p99),
            seek.samples
        );
    }

    section("Snapshots, then reading from them, interleaved rounds");
    for store in &mut stores {
        let before = store.store().conversation(TARGET)?;
        let start = Instant::now();
        let info = store.store().snapshot()?;
        store.snapshot_time = start.elapsed();
        println!(
            "{}: snapshot of {} conversations at LSN {} in {:.2} s",
            store.label(),
            info.conversations,
            info.lsn,
            store.snapshot_time.as_secs_f64()
        );
        assert!(
            store.store().conversation(TARGET)? == before,
            "the snapshot slice is the same"
        );
    }
    for round in 0..ROUNDS {
        for store in &mut stores {
            let reader = store.store.as_ref().expect("open");
            let read = || {
                std::hint::black_box(reader.conversation(TARGET)?);
                Ok(())
            };
            if round == 0 {
                Samples::default().run(20, Duration::MAX, read)?;
            }
            store.snapshot.run(per_round, round_budget, read)?;
        }
    }
    for store in &stores {
        let snapshot = store.snapshot.latency();
        println!(
            "{}: convlog from snapshot p50 {} p99 {} ({} reads)",
            store.label(),
            micros(snapshot.p50),
            micros(snapshot.p99),
            snapshot.samples
        );
    }

    for store in &mut stores {
        store.store = None;
    }
    let memory = match (largest, tail_memory) {
        (Some(index), Some(tail)) => Some(MemoryResult {
            others: stores[index].others,
            tail,
            snapshot: open_in_child(&stores[index].dir)?,
        }),
        _ => None,
    };
    let results = stores
        .iter()
        .map(|store| ReadResult {
            others: store.others,
            mixed: store.mixed,
            events: store.events,
            target_events: store.target_events,
            target_frames: store.target_frames,
            store_bytes: store.store_bytes,
            sqlite_bytes: store.sqlite_bytes,
            build: store.build,
            snapshot_time: store.snapshot_time,
            tail: store.tail.latency(),
            snapshot: store.snapshot.latency(),
            sqlite: store.sqlite.latency(),
            decode: store.decode.latency(),
            fold: store.fold.latency(),
            segments: store.segments,
            target_in_active: store.target_in_active,
        })
        .collect();
    Ok((results, memory))
}

// ---------------------------------------------------------------------------
// Phase 4: open time

#[derive(Debug, Clone)]
struct OpenCase {
    label: String,
    /// Bytes of the last (active) segment, which open scans in full.
    active_bytes: u64,
    times: Vec<Duration>,
    replayed: u64,
    /// Whether the < 100 ms target applies.
    targeted: bool,
}

#[derive(Debug, Clone)]
struct OpenResult {
    conversations: usize,
    events: u64,
    log_bytes: u64,
    snapshot_bytes: u64,
    segments: usize,
    build: Duration,
    snapshot_times: Vec<Duration>,
    tail_events: u64,
    cases: Vec<OpenCase>,
}

fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// The number of segment files and the size of the last one.
fn segments(dir: &Path) -> BenchResult<(usize, u64)> {
    let mut found: Vec<(Lsn, u64)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(lsn) = name.strip_suffix(".seg").and_then(|stem| stem.parse().ok()) {
            found.push((lsn, entry.metadata()?.len()));
        }
    }
    found.sort();
    Ok((found.len(), found.last().map_or(0, |(_, bytes)| *bytes)))
}

/// Builds the open-time store: waves of 16 conversations of 200 entries in
/// progress together, each append up to 64 consecutive events of one of
/// them, until `done` says stop (checked between appends).
struct Filler {
    generator: Generator,
    conversations: usize,
    events: u64,
    payload_bytes: u64,
}

impl Filler {
    fn fill(&mut self, store: &Store, mut done: impl FnMut(&Filler) -> bool) -> BenchResult<()> {
        const OPEN_WAVE: usize = 16;
        const CHUNK: usize = 64;
        while !done(self) {
            let first = self.conversations;
            let mut scripts: Vec<VecDeque<Vec<Event>>> = (first..first + OPEN_WAVE)
                .map(|number| {
                    let id = format!("big-{number:06}");
                    let events: Vec<Event> = self
                        .generator
                        .conversation(&id, TARGET_ENTRIES, TARGET_SHAPE)
                        .into_iter()
                        .flatten()
                        .collect();
                    let mut chunks = VecDeque::new();
                    let mut events = events.into_iter().peekable();
                    while events.peek().is_some() {
                        chunks.push_back(events.by_ref().take(CHUNK).collect());
                    }
                    chunks
                })
                .collect();
            self.conversations += OPEN_WAVE;
            while !scripts.is_empty() {
                let pick = self.generator.rng.range(0, scripts.len());
                let batch: Vec<Event> = scripts[pick].pop_front().expect("not empty");
                if scripts[pick].is_empty() {
                    scripts.swap_remove(pick);
                }
                self.events += batch.len() as u64;
                self.payload_bytes += batch
                    .iter()
                    .map(|event| codec::encode_event(event).len() as u64)
                    .sum::<u64>();
                store.append_with(&batch, AppendOptions::new().durability(Durability::None))?;
            }
        }
        Ok(())
    }

    /// A small tail: 8 conversations of 50 entries, appended the way a host
    /// does (one entry or tool batch per append).
    fn tail(&mut self, store: &Store, tag: &str) -> BenchResult<u64> {
        let mut events = 0;
        for number in 0..8 {
            let id = format!("tail-{tag}-{number}");
            for batch in self.generator.conversation(&id, 50, TARGET_SHAPE) {
                events += batch.len() as u64;
                store.append_with(&batch, AppendOptions::new().durability(Durability::None))?;
            }
        }
        self.conversations += 8;
        self.events += events;
        Ok(events)
    }
}

fn open_none(dir: &Path) -> BenchResult<Store> {
    Ok(Store::open(
        dir,
        StoreOptions::new().durability(Durability::None),
    )?)
}

/// Opens the store `count` times after a warm-up; the times, the events the
/// last open replayed, and whether it started from a snapshot.
fn opens(dir: &Path, count: usize) -> BenchResult<(Vec<Duration>, u64, bool)> {
    let mut times = Vec::new();
    let mut last = (0, false);
    for attempt in 0..=count {
        let start = Instant::now();
        let store = Store::open(dir, StoreOptions::default())?;
        let elapsed = start.elapsed();
        let report = store.open_report();
        last = (report.replayed_events, report.snapshot.is_some());
        drop(store);
        if attempt > 0 {
            times.push(elapsed);
        }
    }
    Ok((times, last.0, last.1))
}

fn bench_open(target_bytes: u64) -> BenchResult<OpenResult> {
    let scratch = common::scratch_dir("store-open");
    let dir = scratch.path().join("store");
    let mut filler = Filler {
        generator: Generator::new(0x0BE4_1234),
        conversations: 0,
        events: 0,
        payload_bytes: 0,
    };
    let mut cases = Vec::new();
    let mut snapshot_times = Vec::new();
    let mut tail_events = 0;

    // Case 1: about the target size, stopping once the last (active)
    // segment holds at least 56 MiB, so that the snapshot lies late in a
    // nearly full active segment: the worst case for open, which scans it.
    let store = open_none(&dir)?;
    let start = Instant::now();
    let almost = target_bytes.saturating_sub(8 << 20);
    let late = almost.min(56 << 20);
    filler.fill(&store, |_| {
        segments(&dir).is_ok_and(|(_, active)| dir_bytes(&dir) >= almost && active >= late)
    })?;
    store.sync()?;
    let build = start.elapsed();
    let start = Instant::now();
    store.snapshot()?;
    snapshot_times.push(start.elapsed());
    tail_events += filler.tail(&store, "a")?;
    store.sync()?;
    drop(store);
    let (count, active_bytes) = segments(&dir)?;
    println!(
        "built {} conversations, {} events, {:.0} MiB of payload, {:.0} MiB of log in {} segments in {:.1} s; snapshot {:.1} s",
        filler.conversations,
        grouped(filler.events as f64),
        filler.payload_bytes as f64 / MIB,
        dir_bytes(&dir) as f64 / MIB - dir_bytes(&dir.join("snapshots")) as f64 / MIB,
        count,
        build.as_secs_f64(),
        snapshot_times[0].as_secs_f64()
    );
    let (times, replayed, from_snapshot) = opens(&dir, 9)?;
    assert!(from_snapshot, "the open used the snapshot");
    println!(
        "open, snapshot near the end of a {:.0} MiB active segment: median {} (replayed {replayed} events)",
        active_bytes as f64 / MIB,
        millis(median(&times))
    );
    cases.push(OpenCase {
        label: "recent snapshot + tail, late in the active segment".into(),
        active_bytes,
        times,
        replayed,
        targeted: true,
    });

    // Case 2: appends until the next segment roll, a new snapshot and a
    // tail: the active segment is small.
    let store = open_none(&dir)?;
    let rolled_from = segments(&dir)?.0;
    filler.fill(&store, |_| {
        segments(&dir).map_or(true, |(count, _)| count > rolled_from)
    })?;
    store.sync()?;
    let start = Instant::now();
    store.snapshot()?;
    snapshot_times.push(start.elapsed());
    tail_events += filler.tail(&store, "b")?;
    store.sync()?;
    drop(store);
    let (segment_count, active_bytes) = segments(&dir)?;
    let (times, replayed, from_snapshot) = opens(&dir, 9)?;
    assert!(from_snapshot, "the open used the snapshot");
    println!(
        "open, snapshot early in a {:.0} MiB active segment: median {} (replayed {replayed} events)",
        active_bytes as f64 / MIB,
        millis(median(&times))
    );
    cases.push(OpenCase {
        label: "recent snapshot + tail, just after a segment roll".into(),
        active_bytes,
        times,
        replayed,
        targeted: true,
    });

    let snapshot_bytes = dir_bytes(&dir.join("snapshots"));
    let log_bytes = dir_bytes(&dir) - snapshot_bytes;
    std::fs::remove_dir_all(dir.join("snapshots"))?;
    let (times, replayed, from_snapshot) = opens(&dir, 3)?;
    assert!(!from_snapshot);
    println!(
        "open without snapshot: median {} (replayed {replayed} events)",
        millis(median(&times))
    );
    cases.push(OpenCase {
        label: "no snapshot (full replay)".into(),
        active_bytes,
        times,
        replayed,
        targeted: false,
    });
    Ok(OpenResult {
        conversations: filler.conversations,
        events: filler.events,
        log_bytes,
        snapshot_bytes,
        segments: segment_count,
        build,
        snapshot_times,
        tail_events,
        cases,
    })
}

// ---------------------------------------------------------------------------
// Summary

fn micros(duration: Duration) -> String {
    format!("{:.0} us", duration.as_secs_f64() * 1e6)
}

fn millis(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

fn verdict(met: bool) -> String {
    if met { "met" } else { "MISSED" }.to_string()
}

fn print_summary(reads: &[ReadResult], memory: Option<&MemoryResult>, open: Option<&OpenResult>) {
    section("Summary");
    if !reads.is_empty() {
        println!("Stores (the target plus the other conversations):\n");
        let mut table = Table::new(&[
            "store",
            "events",
            "log MiB",
            "segments",
            "SQLite MiB",
            "target events/frames",
            "target events in active segment",
            "build",
            "snapshot()",
        ]);
        for result in reads {
            let frames = if result.mixed.is_some() {
                format!("{}/shared", result.target_events)
            } else {
                format!("{}/{}", result.target_events, result.target_frames)
            };
            table.row(vec![
                store_label(result),
                grouped(result.events as f64),
                format!("{:.0}", result.store_bytes as f64 / MIB),
                result.segments.to_string(),
                format!("{:.0}", result.sqlite_bytes as f64 / MIB),
                frames,
                grouped(result.target_in_active as f64),
                format!("{:.1} s", result.build.as_secs_f64()),
                millis(result.snapshot_time),
            ]);
        }
        table.print();
        println!("Read-and-fold of the {TARGET_ENTRIES}-entry target, warm cache, p50 / p99:\n");
        let mut table = Table::new(&[
            "store",
            "convlog, no snapshot",
            "convlog, from snapshot",
            "SQLite",
            "SQLite / no-snapshot p50",
            "SQLite / snapshot p50",
            "in memory: decode p50",
            "in memory: fold p50",
        ]);
        for result in reads {
            table.row(vec![
                store_label(result),
                format!("{} / {}", micros(result.tail.p50), micros(result.tail.p99)),
                format!(
                    "{} / {}",
                    micros(result.snapshot.p50),
                    micros(result.snapshot.p99)
                ),
                format!(
                    "{} / {}",
                    micros(result.sqlite.p50),
                    micros(result.sqlite.p99)
                ),
                format!("{:.2}x", ratio(result.sqlite.p50, result.tail.p50)),
                format!("{:.2}x", ratio(result.sqlite.p50, result.snapshot.p50)),
                micros(result.decode.p50),
                micros(result.fold.p50),
            ]);
        }
        table.print();
        let plain: Vec<&ReadResult> = reads
            .iter()
            .filter(|result| result.mixed.is_none())
            .collect();
        let smallest = plain.iter().min_by_key(|result| result.others);
        let largest = plain.iter().max_by_key(|result| result.others);
        if let (Some(smallest), Some(largest)) = (smallest, largest) {
            let mut table = Table::new(&["figure", "value", "target", "verdict"]);
            for (name, small, large) in [
                ("tail", &smallest.tail, &largest.tail),
                ("snapshot", &smallest.snapshot, &largest.snapshot),
                ("SQLite", &smallest.sqlite, &largest.sqlite),
            ] {
                let p50 = ratio(large.p50, small.p50);
                let p99 = ratio(large.p99, small.p99);
                let check = name != "SQLite";
                table.row(vec![
                    format!(
                        "{name}: p50 largest/smallest ({} / {} conv)",
                        grouped(largest.others as f64),
                        grouped(smallest.others as f64)
                    ),
                    format!("{p50:.2}x (p99 {p99:.2}x)"),
                    if check { "<= 1.5x" } else { "-" }.to_string(),
                    if check {
                        verdict(p50 <= 1.5)
                    } else {
                        "-".to_string()
                    },
                ]);
            }
            for (name, latency) in [("tail", &largest.tail), ("snapshot", &largest.snapshot)] {
                table.row(vec![
                    format!("{name}: p50 in the largest store"),
                    micros(latency.p50),
                    "< 1 ms".to_string(),
                    verdict(latency.p50 < Duration::from_millis(1)),
                ]);
            }
            if let Some(memory) = memory {
                for (name, open) in [
                    ("no snapshot", &memory.tail),
                    ("with snapshot", &memory.snapshot),
                ] {
                    let events = open.events.max(1) as f64;
                    table.row(vec![
                        format!(
                            "memory after open, {} store, {name}: index_bytes/event ({} entries, {} conv)",
                            grouped(memory.others as f64),
                            grouped(open.index_entries as f64),
                            grouped(open.conversations as f64),
                        ),
                        format!("{:.1} B", open.index_bytes as f64 / events),
                        "<= 32 B".to_string(),
                        verdict(open.index_bytes as f64 / events <= 32.0),
                    ]);
                    table.row(vec![
                        format!("  RSS growth around open / event (anon; VmRSS incl. mapped log)"),
                        format!(
                            "{:.1} B ({:.1} B)",
                            open.anon_growth as f64 / events,
                            open.vm_rss_growth as f64 / events
                        ),
                        "<= 32 B".to_string(),
                        verdict(open.anon_growth as f64 / events <= 32.0),
                    ]);
                    table.row(vec![
                        format!(
                            "  open time of that store (child process; {}; replayed {} events; file RSS +{:.0} MiB)",
                            if open.from_snapshot { "from the snapshot" } else { "full replay" },
                            grouped(open.replayed as f64),
                            open.file_growth as f64 / MIB
                        ),
                        millis(open.open),
                        "-".to_string(),
                        "-".to_string(),
                    ]);
                }
            }
            table.print();
        }
    }
    if let Some(open) = open {
        println!(
            "Open time, warm cache: {} conversations, {} events, {:.0} MiB of log in {} segments + {:.0} MiB snapshots \
             (first build {:.1} s; snapshot() {}; tails of {} events):\n",
            grouped(open.conversations as f64),
            grouped(open.events as f64),
            open.log_bytes as f64 / MIB,
            open.segments,
            open.snapshot_bytes as f64 / MIB,
            open.build.as_secs_f64(),
            open.snapshot_times
                .iter()
                .map(|time| format!("{:.1} s", time.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(" / "),
            open.tail_events
        );
        let mut table = Table::new(&[
            "open",
            "active segment",
            "median",
            "min",
            "max",
            "opens",
            "replayed",
            "target",
            "verdict",
        ]);
        for case in &open.cases {
            let median = median(&case.times);
            table.row(vec![
                case.label.clone(),
                format!("{:.1} MiB", case.active_bytes as f64 / MIB),
                millis(median),
                millis(*case.times.iter().min().expect("opens")),
                millis(*case.times.iter().max().expect("opens")),
                case.times.len().to_string(),
                grouped(case.replayed as f64),
                if case.targeted { "< 100 ms" } else { "-" }.to_string(),
                if case.targeted {
                    verdict(median < Duration::from_millis(100))
                } else {
                    "-".to_string()
                },
            ]);
        }
        table.print();
    }
}

fn store_label(result: &ReadResult) -> String {
    match result.mixed {
        None => format!("{} conversations", grouped(result.others as f64)),
        Some(size) => format!(
            "{} conversations, mixed {size}-event frames",
            grouped(result.others as f64)
        ),
    }
}

fn ratio(numerator: Duration, denominator: Duration) -> f64 {
    numerator.as_secs_f64() / denominator.as_secs_f64().max(1e-9)
}

/// The events of one conversation of `n` entries in an adversarial order.
fn adversarial_events(order: &str, n: usize) -> Vec<Event> {
    let text = |role, evaluation: &str, sequence: usize| {
        let mut entry = ConversationEntry::new(
            evaluation,
            sequence as u64,
            role,
            Some(format!("message {sequence}")),
        );
        entry.created_at = Timestamp(1_700_000_000_000_000 + sequence as i64);
        entry
    };
    let entries: Vec<ConversationEntry> = match order {
        "ascending sequences" => (0..n).map(|i| text(Role::User, "e", i)).collect(),
        "descending sequences" => (0..n).rev().map(|i| text(Role::User, "e", i)).collect(),
        "an evaluation per entry" => (0..n)
            .map(|i| text(Role::User, &format!("e{i}"), 0))
            .collect(),
        "results before calls" => {
            let calls = n / 2;
            let results = (0..calls).rev().map(|i| {
                let mut entry = text(Role::Tool, "e", 2 * i + 1);
                entry.tool_call_id = Some(format!("call{i}"));
                entry.tool_name = Some("search".into());
                entry
            });
            let assistants = (0..calls).rev().map(|i| {
                let mut entry = text(Role::Assistant, "e", 2 * i);
                entry.tool_calls = vec![ToolCall {
                    call_id: format!("call{i}"),
                    name: "search".into(),
                    arguments: "{}".into(),
                    status: ToolStatus::Pending,
                    started_at: None,
                    ended_at: None,
                    error: None,
                }];
                entry
            });
            results.chain(assistants).collect()
        }
        other => unreachable!("order {other}"),
    };
    entries
        .into_iter()
        .map(|entry| entry.recorded_in(TARGET))
        .collect()
}

/// Fold and read-and-fold times of one conversation in adversarial orders.
fn bench_adversarial(sizes: &[usize]) -> BenchResult<()> {
    section("Adversarial orders (fold of one conversation)");
    let orders = [
        "ascending sequences",
        "descending sequences",
        "an evaluation per entry",
        "results before calls",
    ];
    let mut table = Table::new(&[
        "order",
        "entries",
        "fold (in memory)",
        "per entry",
        "Store::conversation (no snapshot)",
        "per entry",
    ]);
    for order in orders {
        for &n in sizes {
            let events = adversarial_events(order, n);
            let started = Instant::now();
            let slice = conversation::fold(TARGET, events.iter().zip(1..));
            let fold = started.elapsed();
            assert_eq!(slice.len(), events.len());

            let scratch = common::scratch_dir("adversarial");
            let store = open_none(scratch.path())?;
            for chunk in events.chunks(1024) {
                store.append_with(chunk, AppendOptions::new().durability(Durability::None))?;
            }
            drop(store);
            let store = open_none(scratch.path())?;
            let started = Instant::now();
            let read = store.conversation(TARGET)?;
            let read_time = started.elapsed();
            assert_eq!(read, slice);
            let per = |time: Duration| format!("{:.2} us", time.as_secs_f64() * 1e6 / n as f64);
            table.row(vec![
                order.to_string(),
                grouped(n as f64),
                millis(fold),
                per(fold),
                millis(read_time),
                per(read_time),
            ]);
        }
    }
    table.print();
    Ok(())
}
