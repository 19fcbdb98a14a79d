//! Append throughput of the segment log, against its physical limit and two
//! peers, in one run on one disk.
//!
//! 0. The disk: `write_all` + `fdatasync` latency by block size.
//! 1. `Durability::Sync`, one writer, against a raw `write_all` +
//!    `fdatasync` loop over the same payloads on a plain file.
//! 2. `Durability::Group` with 1/8/64/256 writer threads, against SQLite (WAL, `synchronous=FULL`, one autocommit INSERT
//!    per append; per-thread connections and one shared connection) and a
//!    JSONL file (one line + `fdatasync` per append under a mutex).
//! 3. `Durability::None`, one writer, 256-byte events: as shipped (writes
//!    into a map of the active segment, writeback started as it fills)
//!    against the same log writing with `pwrite`, and without the early
//!    writeback (a storage wrapper in this file), rounds interleaved.
//! 4. One writer, 700-byte payloads (issue 15): convlog `Sync` and `Group`
//!    against SQLite (WAL, `synchronous=FULL`) and a raw append +
//!    `fdatasync` loop, interleaved, fresh store per round, medians; beside
//!    them the raw loop writing in place (into `fallocate`d space, into
//!    zero-filled space) and through `O_DIRECT | O_DSYNC` into zero-filled
//!    space, the floors a log could build on; and the writer `Sync`
//!    committing with a write and an `fdatasync` instead of a durable direct
//!    write, into allocated space (as before prepared space) and into
//!    prepared space (a storage wrapper in this file).
//! 5. Many writers (issue 15): convlog `Group` against a naive leader group
//!    commit (one mutex, the leader takes the whole buffer, `write` +
//!    `fdatasync`, `notify_all`) and SQLite (WAL, `synchronous=FULL`, one
//!    shared connection), 700-byte payloads, fresh store per round, median
//!    of 3 interleaved rounds; CPU per durable append.
//! 6. Tamper evidence (issue 16): the same log with and without the keyed
//!    chain (`LogOptions::tamper`), `Sync` at 1 thread and `Group` at 64,
//!    700-byte payloads, fresh store per round, rounds interleaved, medians;
//!    the overhead is the ratio within the same run, beside the process's
//!    CPU per append of each and the appends per fdatasync; then the keyed
//!    hashing of one frame alone on one thread (ns per frame).
//!
//! Run with `cargo bench --bench log_append`. Environment:
//! - `CONVLOG_BENCH_SECONDS`: length of each measured phase (default 2 s);
//! - `CONVLOG_BENCH_ONLY`: a comma-separated subset of `disk`, `sync`,
//!   `group`, `none`, `one`, `many`, `tamper` (default all);
//! - `CONVLOG_BENCH_ROUNDS`: rounds of the one-writer comparison and of the
//!   `None` section (default 3);
//! - `CONVLOG_BENCH_THREADS`: the Group thread counts (default `1,8,64,256`);
//! - `CONVLOG_BENCH_MANY_THREADS`: the many-writer thread counts (default
//!   `8,64,256`);
//! - `CONVLOG_BENCH_DIR`: where scratch stores go (default `target/bench-tmp`).

mod common;

use std::error::Error;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use common::{grouped, pick, run_threads, section, Measured, Table};
use convlog::log::{Durability, Log, LogOptions, WriterStats};
use rusqlite::Connection;

const THREAD_COUNTS: [usize; 4] = [1, 8, 64, 256];
const POOL_SEED: u64 = 0x00C0_FFEE_5EED;
const POOL_PAYLOADS: usize = 4096;

type BenchResult<T> = Result<T, Box<dyn Error>>;

fn main() -> BenchResult<()> {
    let duration = common::phase_duration();
    let pool = common::realistic_payloads(POOL_SEED, POOL_PAYLOADS);
    let mean = pool.iter().map(Vec::len).sum::<usize>() as f64 / pool.len() as f64;
    println!("# convlog log_append bench");
    println!();
    println!(
        "cores: {}, phase: {:.1} s, scratch: {}",
        std::thread::available_parallelism().map_or(0, |cores| cores.get()),
        duration.as_secs_f64(),
        common::scratch_root().display()
    );
    println!(
        "payload pool: {} payloads, mean {:.0} B (80% 200 B..1 KiB, 20% 1..8 KiB, xorshift bytes)",
        pool.len(),
        mean
    );

    if selected("disk") {
        bench_disk(duration)?;
    }
    let sync = if selected("sync") {
        Some(bench_sync(&pool, duration)?)
    } else {
        None
    };
    let group = if selected("group") {
        bench_group(&pool, duration)?
    } else {
        Vec::new()
    };
    let none = if selected("none") {
        bench_none(duration)?
    } else {
        Vec::new()
    };
    if selected("one") {
        bench_one_writer(duration)?;
    }
    let many = if selected("many") {
        bench_many(duration)?
    } else {
        Vec::new()
    };
    if selected("tamper") {
        bench_tamper(duration)?;
    }
    print_summary(sync.as_ref(), &group, &none);
    print_many_summary(&many);
    Ok(())
}

// ---------------------------------------------------------------------------
// convlog phases

struct LogRun {
    measured: Measured,
    stats: WriterStats,
    /// Segment files in the store after the run, and the smallest one's size.
    segments: usize,
    smallest_segment: u64,
}

impl LogRun {
    fn records_per_fsync(&self) -> f64 {
        self.stats.frames as f64 / self.stats.syncs.max(1) as f64
    }

    /// Where a commit cycle's time goes, per commit (µs): its I/O, the gap
    /// before the next commit's I/O, and the group fill wait inside that
    /// gap; and the share of fill waits that timed out.
    fn cycle(&self) -> String {
        let commits = self.stats.syncs.max(1) as f64;
        let micros = |nanos: u64| nanos as f64 / 1e3 / commits;
        format!(
            "cycle {:.0} µs: I/O {:.0}, gap {:.0} (fill {:.0}, {:.0}% timed out)",
            self.measured.elapsed.as_secs_f64() * 1e6 / commits,
            micros(self.stats.commit_io_nanos),
            micros(self.stats.commit_gap_nanos),
            micros(self.stats.fill_wait_nanos),
            100.0 * self.stats.fill_timeouts as f64 / self.stats.fills.max(1) as f64,
        )
    }
}

/// Appends from `threads` threads to a fresh store for `duration`; each
/// call appends one payload from the pool, or a batch of `batch` of them.
fn run_log(
    label: &str,
    options: LogOptions,
    threads: usize,
    duration: Duration,
    pool: &[Vec<u8>],
    batch: usize,
) -> BenchResult<LogRun> {
    let dir = common::scratch_dir(label);
    let log = Log::open(dir.path(), options)?;
    let before = log.writer_stats();
    let mut measured = run_threads(
        threads,
        duration,
        |_| (),
        |_, thread, iteration| {
            if batch == 1 {
                let payload = pick(pool, thread, iteration);
                log.append(&[payload]).expect("append");
                payload.len()
            } else {
                let start = (iteration as usize * batch) % pool.len();
                let payloads: Vec<&[u8]> = (0..batch)
                    .map(|index| pool[(start + index) % pool.len()].as_slice())
                    .collect();
                log.append(&payloads).expect("append a batch");
                payloads.iter().map(|payload| payload.len()).sum()
            }
        },
    );
    let after = log.writer_stats();
    measured.ops *= batch as u64;
    let appended = log.next_lsn() - 1;
    assert_eq!(
        appended, measured.ops,
        "{label}: LSNs assigned != appends counted"
    );
    let stats = WriterStats {
        frames: after.frames - before.frames,
        writes: after.writes - before.writes,
        syncs: after.syncs - before.syncs,
        rolls: after.rolls - before.rolls,
        commit_io_nanos: after.commit_io_nanos - before.commit_io_nanos,
        commit_gap_nanos: after.commit_gap_nanos - before.commit_gap_nanos,
        fill_wait_nanos: after.fill_wait_nanos - before.fill_wait_nanos,
        fills: after.fills - before.fills,
        fill_timeouts: after.fill_timeouts - before.fill_timeouts,
    };
    drop(log);
    let mut sizes = Vec::new();
    for entry in std::fs::read_dir(dir.path())? {
        let entry = entry?;
        if entry
            .path()
            .extension()
            .is_some_and(|extension| extension == "seg")
        {
            sizes.push(entry.metadata()?.len());
        }
    }
    Ok(LogRun {
        measured,
        stats,
        segments: sizes.len(),
        smallest_segment: sizes.iter().copied().min().unwrap_or(0),
    })
}

fn log_options(durability: Durability) -> LogOptions {
    LogOptions::new().durability(durability)
}

// ---------------------------------------------------------------------------
// 0. The disk: cost of write_all + fdatasync by write size

/// Appends blocks of each size to a plain file with `write_all` +
/// `fdatasync` each: how fsync latency grows with the bytes it flushes
/// (what bounds a commit group of that size).
fn bench_disk(duration: Duration) -> BenchResult<()> {
    section("0. The disk: write_all + fdatasync of one block, by block size");
    let mut table = Table::new(&["block", "fdatasyncs/s", "µs each", "MiB/s"]);
    let mut rng = common::XorShift::new(POOL_SEED ^ 0xD15C);
    for kib in [1usize, 4, 16, 48, 96, 192] {
        let block = vec![rng.bytes(kib * 1024)];
        let measured = raw_fdatasync(&block, duration / 4)?;
        table.row(vec![
            format!("{kib} KiB"),
            grouped(measured.ops_per_sec()),
            format!("{:.0}", 1e6 / measured.ops_per_sec()),
            format!("{:.1}", measured.mib_per_sec()),
        ]);
    }
    table.print();
    Ok(())
}

// ---------------------------------------------------------------------------
// 1. Sync, one writer, against write_all + fdatasync

struct SyncResults {
    raw: Measured,
    convlog: LogRun,
}

fn raw_fdatasync(pool: &[Vec<u8>], duration: Duration) -> BenchResult<Measured> {
    let dir = common::scratch_dir("raw");
    let path = dir.path().join("raw.bin");
    let measured = run_threads(
        1,
        duration,
        |_| File::create(&path).expect("create raw file"),
        |file, thread, iteration| {
            let payload = pick(pool, thread, iteration);
            file.write_all(payload).expect("write");
            file.sync_data().expect("fdatasync");
            payload.len()
        },
    );
    assert_eq!(std::fs::metadata(&path)?.len(), measured.bytes);
    Ok(measured)
}

fn bench_sync(pool: &[Vec<u8>], duration: Duration) -> BenchResult<SyncResults> {
    section("1. Durability::Sync, one writer, vs raw write_all + fdatasync");
    let mut table = Table::new(&[
        "run",
        "appends/s",
        "MiB/s",
        "mean µs/append",
        "recs/fsync",
        "CPU %",
    ]);
    let mut best_raw: Option<Measured> = None;
    let mut best_log: Option<LogRun> = None;
    // Interleave the two so that drift on a shared machine hits both.
    for round in 1..=2 {
        let raw = raw_fdatasync(pool, duration)?;
        table.row(vec![
            format!("raw write_all+fdatasync #{round}"),
            grouped(raw.ops_per_sec()),
            format!("{:.1}", raw.mib_per_sec()),
            format!("{:.0}", 1e6 / raw.ops_per_sec()),
            "1.00".to_string(),
            format!("{:.0}", raw.cpu_percent()),
        ]);
        let run = run_log("sync", log_options(Durability::Sync), 1, duration, pool, 1)?;
        table.row(vec![
            format!("convlog Sync #{round}"),
            grouped(run.measured.ops_per_sec()),
            format!("{:.1}", run.measured.mib_per_sec()),
            format!("{:.0}", 1e6 / run.measured.ops_per_sec()),
            format!("{:.2}", run.records_per_fsync()),
            format!("{:.0}", run.measured.cpu_percent()),
        ]);
        if best_raw.is_none_or(|best| raw.ops_per_sec() > best.ops_per_sec()) {
            best_raw = Some(raw);
        }
        if best_log
            .as_ref()
            .is_none_or(|best| run.measured.ops_per_sec() > best.measured.ops_per_sec())
        {
            best_log = Some(run);
        }
    }
    table.print();
    let (raw, convlog) = (best_raw.expect("ran"), best_log.expect("ran"));
    println!(
        "best of 2: convlog Sync / raw fdatasync = {:.2}",
        convlog.measured.ops_per_sec() / raw.ops_per_sec()
    );
    Ok(SyncResults { raw, convlog })
}

// ---------------------------------------------------------------------------
// 2. Group commit against SQLite and JSONL

struct GroupRow {
    threads: usize,
    plain: LogRun,
    sqlite_per_thread: Measured,
    sqlite_shared: Measured,
    jsonl: Measured,
}

impl GroupRow {
    fn convlog_best(&self) -> f64 {
        self.plain.measured.ops_per_sec()
    }

    fn sqlite_best(&self) -> f64 {
        self.sqlite_per_thread
            .ops_per_sec()
            .max(self.sqlite_shared.ops_per_sec())
    }
}

fn sqlite_connect(path: &Path) -> rusqlite::Result<Connection> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(Duration::from_secs(60))?;
    let mode: String =
        connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    assert_eq!(mode, "wal", "SQLite refused WAL mode");
    connection.pragma_update(None, "synchronous", "FULL")?;
    let synchronous: i64 = connection.pragma_query_value(None, "synchronous", |row| row.get(0))?;
    assert_eq!(synchronous, 2, "SQLite synchronous is not FULL");
    Ok(connection)
}

const SQLITE_INSERT: &str = "INSERT INTO events (payload) VALUES (?1)";

/// One autocommit INSERT per append. `shared`: one connection behind a
/// mutex; otherwise one connection per thread (WAL, busy_timeout).
fn sqlite_run(
    pool: &[Vec<u8>],
    threads: usize,
    duration: Duration,
    shared: bool,
) -> BenchResult<Measured> {
    let dir = common::scratch_dir("sqlite");
    let path = dir.path().join("events.db");
    let first = sqlite_connect(&path)?;
    first.execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)")?;
    let insert = |connection: &Connection, payload: &[u8]| {
        connection
            .prepare_cached(SQLITE_INSERT)
            .and_then(|mut statement| statement.execute([payload]))
            .expect("INSERT");
        payload.len()
    };
    let measured = if shared {
        let connection = Mutex::new(first);
        let measured = run_threads(
            threads,
            duration,
            |_| (),
            |_, thread, iteration| {
                let payload = pick(pool, thread, iteration);
                insert(&connection.lock().expect("connection mutex"), payload)
            },
        );
        let rows: u64 = connection.lock().expect("connection mutex").query_row(
            "SELECT count(*) FROM events",
            [],
            |row| row.get(0),
        )?;
        assert_eq!(rows, measured.ops, "SQLite rows != inserts counted");
        measured
    } else {
        let measured = run_threads(
            threads,
            duration,
            |_| sqlite_connect(&path).expect("open SQLite connection"),
            |connection, thread, iteration| insert(connection, pick(pool, thread, iteration)),
        );
        let rows: u64 = first.query_row("SELECT count(*) FROM events", [], |row| row.get(0))?;
        assert_eq!(rows, measured.ops, "SQLite rows != inserts counted");
        measured
    };
    Ok(measured)
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_into(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.chunks(3) {
        let word = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for index in 0..4 {
            if index <= chunk.len() {
                out.push(char::from(BASE64[(word >> (18 - 6 * index)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
}

/// One JSON line per append (payload in base64), written and fdatasynced
/// under one mutex shared by all threads.
fn jsonl_run(pool: &[Vec<u8>], threads: usize, duration: Duration) -> BenchResult<Measured> {
    let dir = common::scratch_dir("jsonl");
    let path = dir.path().join("events.jsonl");
    let file = Mutex::new(OpenOptions::new().create(true).append(true).open(&path)?);
    let measured = run_threads(
        threads,
        duration,
        |_| String::with_capacity(16 * 1024),
        |line, thread, iteration| {
            let payload = pick(pool, thread, iteration);
            line.clear();
            line.push_str(&format!(
                "{{\"thread\":{thread},\"seq\":{iteration},\"payload\":\""
            ));
            base64_into(line, payload);
            line.push_str("\"}\n");
            let mut file = file.lock().expect("jsonl mutex");
            file.write_all(line.as_bytes()).expect("write line");
            file.sync_data().expect("fdatasync");
            payload.len()
        },
    );
    let lines = std::fs::read(&path)?
        .iter()
        .filter(|byte| **byte == b'\n')
        .count() as u64;
    assert_eq!(lines, measured.ops, "JSONL lines != appends counted");
    Ok(measured)
}

fn bench_group(pool: &[Vec<u8>], duration: Duration) -> BenchResult<Vec<GroupRow>> {
    section("2. Durability::Group vs SQLite (WAL, synchronous=FULL) vs JSONL+fdatasync");
    let mut rows = Vec::new();
    for threads in thread_counts() {
        // Interleaved per thread count, so the comparison shares a time window.
        let plain = run_log(
            "group",
            log_options(Durability::Group),
            threads,
            duration,
            pool,
            1,
        )?;
        let sqlite_per_thread = sqlite_run(pool, threads, duration, false)?;
        let sqlite_shared = sqlite_run(pool, threads, duration, true)?;
        let jsonl = jsonl_run(pool, threads, duration)?;
        println!(
            "  {threads:>3} threads: convlog {} / SQLite per-thread {} / SQLite shared {} / JSONL {} appends/s",
            grouped(plain.measured.ops_per_sec()),
            grouped(sqlite_per_thread.ops_per_sec()),
            grouped(sqlite_shared.ops_per_sec()),
            grouped(jsonl.ops_per_sec()),
        );
        rows.push(GroupRow {
            threads,
            plain,
            sqlite_per_thread,
            sqlite_shared,
            jsonl,
        });
    }
    println!();
    let mut table = Table::new(&[
        "threads",
        "convlog",
        "recs/fsync",
        "SQLite per-thread conn",
        "SQLite shared conn",
        "JSONL",
        "convlog/SQLite",
        "convlog/JSONL",
    ]);
    for row in &rows {
        let best = row.convlog_best();
        table.row(vec![
            row.threads.to_string(),
            grouped(row.plain.measured.ops_per_sec()),
            format!("{:.1}", row.plain.records_per_fsync()),
            grouped(row.sqlite_per_thread.ops_per_sec()),
            grouped(row.sqlite_shared.ops_per_sec()),
            grouped(row.jsonl.ops_per_sec()),
            format!("{:.1}x", best / row.sqlite_best()),
            format!("{:.1}x", best / row.jsonl.ops_per_sec()),
        ]);
    }
    println!("appends/s; ratios use the better convlog variant over the better SQLite variant");
    table.print();
    let mut detail = Table::new(&[
        "threads",
        "system",
        "appends/s",
        "MiB/s",
        "CPU %",
        "frames",
        "writes",
        "fsyncs",
        "recs/fsync",
        "rolls",
        "segments (smallest B)",
    ]);
    for row in &rows {
        {
            let (name, run) = ("convlog Group", &row.plain);
            detail.row(vec![
                row.threads.to_string(),
                name.to_string(),
                grouped(run.measured.ops_per_sec()),
                format!("{:.1}", run.measured.mib_per_sec()),
                format!("{:.0}", run.measured.cpu_percent()),
                grouped(run.stats.frames as f64),
                grouped(run.stats.writes as f64),
                grouped(run.stats.syncs as f64),
                format!("{:.1}", run.records_per_fsync()),
                run.stats.rolls.to_string(),
                format!(
                    "{} ({})",
                    run.segments,
                    grouped(run.smallest_segment as f64)
                ),
            ]);
        }
        for (name, measured) in [
            ("SQLite per-thread conn", &row.sqlite_per_thread),
            ("SQLite shared conn", &row.sqlite_shared),
            ("JSONL + fdatasync", &row.jsonl),
        ] {
            let mut cells = vec![
                row.threads.to_string(),
                name.to_string(),
                grouped(measured.ops_per_sec()),
                format!("{:.1}", measured.mib_per_sec()),
                format!("{:.0}", measured.cpu_percent()),
            ];
            cells.extend(std::iter::repeat_n("-".to_string(), 6));
            detail.row(cells);
        }
    }
    println!("Detail (convlog columns from writer_stats(); MiB/s of payload; CPU % of one core, 200% = both)");
    detail.print();
    Ok(rows)
}

// ---------------------------------------------------------------------------
// 3. None, one writer, 256-byte events

struct NoneRow {
    name: &'static str,
    /// The median round's run.
    run: LogRun,
    /// Events/s of every round.
    rates: Vec<f64>,
    /// Per round, this row's rate over the `pwrite` row's.
    ratios: Vec<f64>,
}

/// How a `None` variant writes: what the bench's storage changes.
#[derive(Debug, Clone, Copy)]
struct WritePath {
    /// Writes with `pwrite(2)` instead of the real file system's maps.
    pwrite: bool,
    /// Ignores `start_writeback` (the writer's early writeback off).
    no_writeback: bool,
    /// Durable commits as `write_all_at` + `sync_data` (no direct write).
    no_direct: bool,
    /// No space prepared ahead of the frames (`prewrite` declined).
    no_prewrite: bool,
}

/// The real file system, with a file's writes or writeback hints changed
/// (`WritePath`): the comparison the `None` section makes in one run.
#[derive(Debug)]
struct BenchStorage {
    path: WritePath,
}

#[derive(Debug)]
struct BenchFile {
    inner: Box<dyn convlog::storage::StorageFile>,
    /// A second handle of the same file, for `pwrite`.
    file: File,
    path: WritePath,
}

impl convlog::storage::StorageFile for BenchFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.path.pwrite {
            std::os::unix::fs::FileExt::write_all_at(&self.file, buf, offset)
        } else {
            self.inner.write_all_at(buf, offset)
        }
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> std::io::Result<()> {
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn size_bytes(&self) -> std::io::Result<u64> {
        self.inner.size_bytes()
    }
    fn allocate(&self, len: u64) -> std::io::Result<()> {
        self.inner.allocate(len)
    }
    fn start_writeback(&self, offset: u64, len: u64) -> std::io::Result<()> {
        if self.path.no_writeback {
            Ok(())
        } else {
            self.inner.start_writeback(offset, len)
        }
    }
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.path.pwrite || self.path.no_direct {
            self.write_all_at(buf, offset)?;
            self.sync_data()
        } else {
            self.inner.write_durable_at(buf, offset)
        }
    }
    fn prewrite(&self, offset: u64, len: u64) -> std::io::Result<bool> {
        if self.path.no_prewrite {
            Ok(false)
        } else {
            self.inner.prewrite(offset, len)
        }
    }
}

impl BenchStorage {
    fn wrap(
        &self,
        path: &Path,
        inner: Box<dyn convlog::storage::StorageFile>,
    ) -> std::io::Result<Box<dyn convlog::storage::StorageFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(BenchFile {
            inner,
            file,
            path: self.path,
        }))
    }
}

// SAFETY: every method delegates to `FileSystem` with the same path (the
// token goes to `FileSystem::read_immutable` for the file it was made for);
// the files it returns write the same bytes at the same offsets, only by
// another system call.
#[allow(unsafe_code)]
unsafe impl convlog::storage::Storage for BenchStorage {
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        convlog::storage::FileSystem.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        convlog::storage::FileSystem.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        convlog::storage::FileSystem.exists(path)
    }
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn convlog::storage::StorageFile>> {
        let inner = convlog::storage::FileSystem.create(path)?;
        self.wrap(path, inner)
    }
    fn open_write(&self, path: &Path) -> std::io::Result<Box<dyn convlog::storage::StorageFile>> {
        let inner = convlog::storage::FileSystem.open_write(path)?;
        self.wrap(path, inner)
    }
    fn open_read(&self, path: &Path) -> std::io::Result<Box<dyn convlog::storage::StorageFile>> {
        convlog::storage::FileSystem.open_read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        convlog::storage::FileSystem.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        convlog::storage::FileSystem.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        convlog::storage::FileSystem.sync_dir(path)
    }
    fn read_immutable(
        &self,
        path: &Path,
        sealed: convlog::storage::SealedFile,
    ) -> std::io::Result<convlog::storage::SharedBytes> {
        convlog::storage::FileSystem.read_immutable(path, sealed)
    }
    fn try_lock(&self, path: &Path) -> std::io::Result<convlog::storage::LockGuard> {
        convlog::storage::FileSystem.try_lock(path)
    }
}

/// Default rounds of the `None` section.
const NONE_ROUNDS_DEFAULT: f64 = 3.0;

/// `Durability::None`, one writer, 256-byte events: convlog as shipped
/// (writes into a map of the active segment, writeback started as it
/// fills) against the same log writing with `pwrite` and without early
/// writeback, interleaved in rotated order, fresh store per round; ratios
/// are per round against the `pwrite` row.
fn bench_none(duration: Duration) -> BenchResult<Vec<NoneRow>> {
    use convlog::storage::Storage;
    section("3. Durability::None, one writer, 256-byte events");
    let pool = common::fixed_payloads(POOL_SEED ^ 0x256, 1024, 256);
    let rounds = common::env_f64("CONVLOG_BENCH_ROUNDS", NONE_ROUNDS_DEFAULT).max(1.0) as usize;
    let default_segment = LogOptions::default().segment_bytes_max;
    let options = |segment_bytes_max, path: Option<WritePath>| {
        let options = LogOptions::new()
            .durability(Durability::None)
            .segment_bytes_max(segment_bytes_max);
        match path {
            Some(path) => {
                let storage: std::sync::Arc<dyn Storage> =
                    std::sync::Arc::new(BenchStorage { path });
                options.storage(storage)
            }
            None => options,
        }
    };
    let pwrite = WritePath {
        pwrite: true,
        no_writeback: false,
        no_direct: false,
        no_prewrite: false,
    };
    let variants: [(&'static str, u64, Option<WritePath>, usize); 6] = [
        (
            "append, 64 MiB segments (default)",
            default_segment,
            None,
            1,
        ),
        (
            "append, pwrite instead of the map",
            default_segment,
            Some(pwrite),
            1,
        ),
        (
            "append, map, no early writeback",
            default_segment,
            Some(WritePath {
                pwrite: false,
                no_writeback: true,
                no_direct: false,
                no_prewrite: false,
            }),
            1,
        ),
        (
            "append, pwrite, no early writeback (before)",
            default_segment,
            Some(WritePath {
                pwrite: true,
                no_writeback: true,
                no_direct: false,
                no_prewrite: false,
            }),
            1,
        ),
        ("append, 1 GiB segments (no roll)", 1 << 30, None, 1),
        ("batch of 64, 64 MiB segments", default_segment, None, 64),
    ];
    let mut runs: Vec<Vec<LogRun>> = (0..variants.len()).map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for step in 0..variants.len() {
            let which = (step + round) % variants.len();
            let (_, segment, path, batch) = variants[which];
            let run = run_log("none", options(segment, path), 1, duration, &pool, batch)?;
            runs[which].push(run);
        }
    }
    let pwrite_rates: Vec<f64> = runs[1]
        .iter()
        .map(|run| run.measured.ops_per_sec())
        .collect();
    let mut rows = Vec::new();
    for ((name, ..), mut variant_runs) in variants.iter().zip(runs) {
        let rates: Vec<f64> = variant_runs
            .iter()
            .map(|run| run.measured.ops_per_sec())
            .collect();
        let ratios: Vec<f64> = rates
            .iter()
            .zip(&pwrite_rates)
            .map(|(ours, theirs)| ours / theirs)
            .collect();
        let (median, ..) = median_range(&rates);
        let index = rates
            .iter()
            .position(|rate| *rate == median)
            .unwrap_or(rates.len() / 2);
        rows.push(NoneRow {
            name,
            run: variant_runs.swap_remove(index),
            rates,
            ratios,
        });
    }
    let mut table = Table::new(&[
        "variant (median round)",
        "events/s median [min..max]",
        "/ pwrite row, median [min..max]",
        "MiB/s",
        "ns/event",
        "CPU %",
        "CPU ns/event",
        "writes",
        "fsyncs",
        "rolls",
    ]);
    for row in &rows {
        let (median, low, high) = median_range(&row.rates);
        let cpu_ns = row.run.measured.cpu.as_secs_f64() * 1e9 / row.run.measured.ops.max(1) as f64;
        let (ratio, ratio_low, ratio_high) = median_range(&row.ratios);
        table.row(vec![
            row.name.to_string(),
            format!("{} [{}..{}]", grouped(median), grouped(low), grouped(high)),
            format!("{ratio:.2} [{ratio_low:.2}..{ratio_high:.2}]"),
            format!("{:.1}", row.run.measured.mib_per_sec()),
            format!("{:.0}", 1e9 / row.run.measured.ops_per_sec()),
            format!("{:.0}", row.run.measured.cpu_percent()),
            format!("{cpu_ns:.0}"),
            grouped(row.run.stats.writes as f64),
            grouped(row.run.stats.syncs as f64),
            row.run.stats.rolls.to_string(),
        ]);
    }
    table.print();
    println!(
        "CPU ns/event: the process's user+system time per event (the bench's idle timer \
         thread included): what the append costs, whatever share of a core the machine gave it"
    );
    Ok(rows)
}

// ---------------------------------------------------------------------------

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

/// The writer-thread counts of the Group comparison: `CONVLOG_BENCH_THREADS`
/// (comma-separated) or 1, 8, 64, 256.
fn thread_counts() -> Vec<usize> {
    match std::env::var("CONVLOG_BENCH_THREADS") {
        Ok(list) => list
            .split(',')
            .map(|item| {
                item.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("CONVLOG_BENCH_THREADS: {item:?} is not a count"))
            })
            .collect(),
        Err(_) => THREAD_COUNTS.to_vec(),
    }
}

/// Whether `CONVLOG_BENCH_ONLY` (a comma-separated subset of `disk`,
/// `sync`, `group`, `none`, `many`; all when unset) selects `part`.
fn selected(part: &str) -> bool {
    match std::env::var("CONVLOG_BENCH_ONLY") {
        Ok(only) => only.split(',').any(|item| item.trim() == part),
        Err(_) => true,
    }
}

fn print_summary(sync: Option<&SyncResults>, group: &[GroupRow], none: &[NoneRow]) {
    let mut table = Table::new(&["target", "measured", "verdict"]);
    if let Some(sync) = sync {
        let sync_ratio = sync.convlog.measured.ops_per_sec() / sync.raw.ops_per_sec();
        table.row(vec![
            "Sync / raw fdatasync >= 0.9".to_string(),
            format!(
                "{:.2} ({} vs {} appends/s)",
                sync_ratio,
                grouped(sync.convlog.measured.ops_per_sec()),
                grouped(sync.raw.ops_per_sec())
            ),
            verdict(sync_ratio >= 0.9).to_string(),
        ]);
    }
    if let Some(row) = group.iter().find(|row| row.threads == 64) {
        let ratio = row.convlog_best() / row.sqlite_best();
        table.row(vec![
            "Group @64 threads >= 30x SQLite".to_string(),
            format!(
                "{:.1}x ({} vs {} appends/s)",
                ratio,
                grouped(row.convlog_best()),
                grouped(row.sqlite_best())
            ),
            verdict(ratio >= 30.0).to_string(),
        ]);
    }
    if let Some(row) = none.first() {
        let (rate, ..) = median_range(&row.rates);
        table.row(vec![
            "None, 256 B, one writer >= 1,000,000/s".to_string(),
            format!("{} events/s", grouped(rate)),
            verdict(rate >= 1_000_000.0).to_string(),
        ]);
    }
    if !table.is_empty() {
        section("Summary against targets");
        table.print();
    }
}

// ---------------------------------------------------------------------------
// 4. One writer, 700-byte payloads: convlog against SQLite and a raw loop

/// Payload size of the one-writer comparison (issue 15).
const ONE_WRITER_PAYLOAD_BYTES: usize = 700;
/// Default rounds of the one-writer comparison.
const ONE_WRITER_ROUNDS_DEFAULT: f64 = 3.0;

/// The median and the range of `values`.
fn median_range(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    let median = if sorted.len().is_multiple_of(2) {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    };
    (median, sorted[0], sorted[sorted.len() - 1])
}

/// One writer, one durable append at a time, 700-byte payloads: convlog
/// `Sync` and `Group` (each a fresh store per round) against SQLite WAL
/// `synchronous=FULL` (one autocommit INSERT per append) and a raw loop
/// that appends each payload to a growing file and `fdatasync`s it; for
/// reference, the same raw loop writing in place into a file allocated
/// ahead (what convlog's preallocated segments do, without the log). The
/// order of the five rotates from round to round, so drift on a shared
/// machine hits all of them alike.
fn bench_one_writer(duration: Duration) -> BenchResult<()> {
    section("4. One writer, 700-byte payloads: convlog vs SQLite WAL FULL vs raw append+fdatasync");
    let pool = common::fixed_payloads(POOL_SEED ^ 0x0700, POOL_PAYLOADS, ONE_WRITER_PAYLOAD_BYTES);
    let rounds =
        common::env_f64("CONVLOG_BENCH_ROUNDS", ONE_WRITER_ROUNDS_DEFAULT).max(1.0) as usize;
    let names = [
        "convlog Sync",
        "convlog Group",
        "SQLite WAL FULL",
        "raw append+fdatasync",
        "raw in place (allocated)",
        "raw in place (zero-filled)",
        "raw O_DIRECT|O_DSYNC (zero-filled)",
        "convlog Sync, write+fdatasync, allocated",
        "convlog Sync, write+fdatasync, prepared",
    ];
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut header = vec!["round"];
    header.extend(names);
    header.push("fsyncs/append (Sync)");
    let mut per_round = Table::new(&header);
    for round in 0..rounds {
        let mut values = [0.0; 9];
        let mut sync_fsyncs = 0.0;
        for step in 0..names.len() {
            let which = (step + round) % names.len();
            values[which] = match which {
                0 | 1 => {
                    let durability = if which == 0 {
                        Durability::Sync
                    } else {
                        Durability::Group
                    };
                    let run = run_log("one", log_options(durability), 1, duration, &pool, 1)?;
                    if which == 0 {
                        sync_fsyncs = run.stats.syncs as f64 / run.measured.ops.max(1) as f64;
                    }
                    run.measured.ops_per_sec()
                }
                2 => sqlite_run(&pool, 1, duration, true)?.ops_per_sec(),
                3 => raw_fdatasync(&pool, duration)?.ops_per_sec(),
                4 => raw_in_place(&pool, duration)?.ops_per_sec(),
                5 => raw_zero_filled(&pool, duration, false)?.ops_per_sec(),
                6 => raw_zero_filled(&pool, duration, true)?.ops_per_sec(),
                _ => {
                    // The same writer committing with a write and an
                    // fdatasync instead of a durable direct write, into
                    // allocated space (as before prepared space) or into
                    // prepared space (the bench's storage).
                    let storage: std::sync::Arc<dyn convlog::storage::Storage> =
                        std::sync::Arc::new(BenchStorage {
                            path: WritePath {
                                pwrite: false,
                                no_writeback: false,
                                no_direct: true,
                                no_prewrite: which == 7,
                            },
                        });
                    let options = log_options(Durability::Sync).storage(storage);
                    run_log("one", options, 1, duration, &pool, 1)?
                        .measured
                        .ops_per_sec()
                }
            };
        }
        for (figure, value) in figures.iter_mut().zip(values) {
            figure.push(value);
        }
        let mut row = vec![format!("#{}", round + 1)];
        row.extend(values.iter().map(|value| grouped(*value)));
        row.push(format!("{sync_fsyncs:.2}"));
        per_round.row(row);
    }
    per_round.print();
    println!();
    let mut table = Table::new(&[
        "run",
        "appends/s median [min..max]",
        "/ SQLite (median of rounds)",
        "/ raw append (median of rounds)",
    ]);
    for (index, name) in names.iter().enumerate() {
        let (median, low, high) = median_range(&figures[index]);
        let ratio = |peer: usize| {
            let ratios: Vec<f64> = figures[index]
                .iter()
                .zip(&figures[peer])
                .map(|(ours, theirs)| ours / theirs)
                .collect();
            let (median, low, high) = median_range(&ratios);
            format!("{median:.2} [{low:.2}..{high:.2}]")
        };
        table.row(vec![
            name.to_string(),
            format!("{} [{}..{}]", grouped(median), grouped(low), grouped(high)),
            ratio(2),
            ratio(3),
        ]);
    }
    table.print();
    println!("targets (issue 15): convlog Sync and Group >= 1.2x SQLite and >= 1.1x raw append");
    Ok(())
}

/// Bytes the in-place raw loop allocates ahead (more than a phase writes).
const RAW_IN_PLACE_BYTES: u64 = 64 * 1024 * 1024;

/// `pwrite` + `fdatasync` of each payload into a file whose space was
/// allocated (and the allocation fsynced) before the clock started.
fn raw_in_place(pool: &[Vec<u8>], duration: Duration) -> BenchResult<Measured> {
    use convlog::storage::{FileSystem, Storage};
    let dir = common::scratch_dir("raw-in-place");
    let path = dir.path().join("raw.bin");
    let measured = run_threads(
        1,
        duration,
        |_| {
            let file = FileSystem.create(&path).expect("create raw file");
            file.allocate(RAW_IN_PLACE_BYTES).expect("allocate");
            file.sync_all().expect("fsync the allocation");
            (file, 0u64)
        },
        |(file, offset), thread, iteration| {
            let payload = pick(pool, thread, iteration);
            file.write_all_at(payload, *offset).expect("write");
            file.sync_data().expect("fdatasync");
            *offset += payload.len() as u64;
            payload.len()
        },
    );
    Ok(measured)
}

/// The block a direct write covers: writes with `O_DIRECT` must start and end
/// on the device's logical block boundaries (at most 4 KiB on this disk).
const DIRECT_BLOCK_BYTES: usize = 4096;

/// Writes each payload into space written with zeros (and fsynced) before
/// the clock started, so no write changes the file's size or its extents:
/// with `direct` false by `pwrite` + `fdatasync`; with `direct` true through
/// a descriptor opened `O_DIRECT | O_DSYNC`, rewriting the aligned block(s)
/// the payload lands in from an aligned image of the file's tail (a log
/// would do the same: the acknowledged bytes of the tail block are written
/// again unchanged, so a torn block write cannot alter them).
fn raw_zero_filled(pool: &[Vec<u8>], duration: Duration, direct: bool) -> BenchResult<Measured> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let dir = common::scratch_dir("raw-zero-filled");
    let path = dir.path().join("raw.bin");
    let largest = pool.iter().map(Vec::len).max().unwrap_or(0);
    let measured = run_threads(
        1,
        duration,
        |_| {
            let mut file = File::create(&path).expect("create raw file");
            let zeros = vec![0u8; 1 << 20];
            for _ in 0..RAW_IN_PLACE_BYTES / zeros.len() as u64 {
                file.write_all(&zeros).expect("zero-fill");
            }
            file.sync_all().expect("fsync the zero-fill");
            let mut options = OpenOptions::new();
            options.write(true);
            if direct {
                options.custom_flags(libc::O_DIRECT | libc::O_DSYNC);
            }
            let file = options.open(&path).expect("open for writing");
            // An anonymous map is page-aligned, as O_DIRECT wants its buffers.
            let image = memmap2::MmapMut::map_anon(2 * DIRECT_BLOCK_BYTES + largest)
                .expect("map an aligned buffer");
            (file, image, 0u64)
        },
        |(file, image, offset), thread, iteration| {
            let payload = pick(pool, thread, iteration);
            if !direct {
                file.write_all_at(payload, *offset).expect("write");
                file.sync_data().expect("fdatasync");
                *offset += payload.len() as u64;
                return payload.len();
            }
            let block = DIRECT_BLOCK_BYTES as u64;
            let start = *offset / block * block;
            let within = (*offset - start) as usize;
            let end = within + payload.len();
            image[within..end].copy_from_slice(payload);
            let written = end.div_ceil(DIRECT_BLOCK_BYTES) * DIRECT_BLOCK_BYTES;
            file.write_all_at(&image[..written], start)
                .expect("direct write");
            // Keep the new tail block at the front of the image.
            let keep_from = end / DIRECT_BLOCK_BYTES * DIRECT_BLOCK_BYTES;
            image.copy_within(keep_from..written, 0);
            image[written - keep_from..written].fill(0);
            *offset += payload.len() as u64;
            payload.len()
        },
    );
    Ok(measured)
}

// ---------------------------------------------------------------------------
// 5. Many writers: convlog Group vs a naive group commit vs SQLite

const MANY_THREAD_COUNTS: [usize; 3] = [8, 64, 256];
const MANY_PAYLOAD_BYTES: usize = 700;
const MANY_ROUNDS: usize = 3;

/// The simplest leader group commit: appenders copy a length-prefixed
/// payload into one buffer under one mutex; whoever finds no leader takes
/// the whole buffer, writes it and fdatasyncs it outside the mutex, then
/// publishes and wakes every waiter with `notify_all` (std's `Mutex` and
/// `Condvar`). No checksums, no LSNs, no readers: the peer any group commit
/// must beat.
struct NaiveGroupCommit {
    state: Mutex<NaiveState>,
    done: Condvar,
    file: File,
}

struct NaiveState {
    pending: Vec<u8>,
    /// Appends copied into the buffer so far.
    appended: u64,
    /// Appends written and fdatasynced.
    durable: u64,
    leading: bool,
    /// Bytes written (the next write's offset).
    written_bytes: u64,
}

impl NaiveGroupCommit {
    fn create(path: &Path) -> BenchResult<NaiveGroupCommit> {
        Ok(NaiveGroupCommit {
            state: Mutex::new(NaiveState {
                pending: Vec::new(),
                appended: 0,
                durable: 0,
                leading: false,
                written_bytes: 0,
            }),
            done: Condvar::new(),
            file: File::create(path)?,
        })
    }

    fn append(&self, payload: &[u8]) {
        use std::os::unix::fs::FileExt;
        let mut state = self.state.lock().expect("naive mutex");
        state
            .pending
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        state.pending.extend_from_slice(payload);
        state.appended += 1;
        let mine = state.appended;
        loop {
            if state.durable >= mine {
                return;
            }
            if !state.leading {
                state.leading = true;
                let buffer = std::mem::take(&mut state.pending);
                let end = state.appended;
                let offset = state.written_bytes;
                drop(state);
                self.file
                    .write_all_at(&buffer, offset)
                    .expect("naive write");
                self.file.sync_data().expect("naive fdatasync");
                state = self.state.lock().expect("naive mutex");
                state.written_bytes = offset + buffer.len() as u64;
                state.durable = end;
                state.leading = false;
                self.done.notify_all();
                continue;
            }
            state = self.done.wait(state).expect("naive condvar");
        }
    }
}

fn naive_run(pool: &[Vec<u8>], threads: usize, duration: Duration) -> BenchResult<Measured> {
    let dir = common::scratch_dir("naive");
    let path = dir.path().join("naive.bin");
    let naive = NaiveGroupCommit::create(&path)?;
    let measured = run_threads(
        threads,
        duration,
        |_| (),
        |_, thread, iteration| {
            let payload = pick(pool, thread, iteration);
            naive.append(payload);
            payload.len()
        },
    );
    let state = naive.state.lock().expect("naive mutex");
    assert_eq!(
        state.durable, measured.ops,
        "naive: durable != appends counted"
    );
    assert_eq!(
        std::fs::metadata(&path)?.len(),
        measured.bytes + 4 * measured.ops
    );
    Ok(measured)
}

/// The median of `values` by `key` (an odd count).
fn median_by<T: Copy>(values: &[T], key: impl Fn(&T) -> f64) -> T {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| key(a).total_cmp(&key(b)));
    sorted[sorted.len() / 2]
}

fn range_of<T>(values: &[T], key: impl Fn(&T) -> f64) -> String {
    let keys: Vec<f64> = values.iter().map(key).collect();
    let min = keys.iter().copied().fold(f64::INFINITY, f64::min);
    let max = keys.iter().copied().fold(0.0, f64::max);
    format!("[{}..{}]", grouped(min), grouped(max))
}

/// CPU µs of the whole process per completed append.
fn cpu_micros_per_op(measured: &Measured) -> f64 {
    measured.cpu.as_secs_f64() * 1e6 / measured.ops.max(1) as f64
}

#[derive(Clone, Copy)]
struct ManyRound {
    convlog: Measured,
    stats: WriterStats,
    naive: Measured,
    sqlite: Measured,
}

struct ManyRow {
    threads: usize,
    rounds: Vec<ManyRound>,
}

impl ManyRow {
    fn convlog(&self) -> ManyRound {
        median_by(&self.rounds, |round| round.convlog.ops_per_sec())
    }
    fn naive(&self) -> Measured {
        median_by(&self.rounds, |round| round.naive.ops_per_sec()).naive
    }
    fn sqlite(&self) -> Measured {
        median_by(&self.rounds, |round| round.sqlite.ops_per_sec()).sqlite
    }
}

fn many_thread_counts() -> Vec<usize> {
    match std::env::var("CONVLOG_BENCH_MANY_THREADS") {
        Ok(list) => list
            .split(',')
            .map(|item| {
                item.trim().parse().unwrap_or_else(|_| {
                    panic!("CONVLOG_BENCH_MANY_THREADS: {item:?} is not a count")
                })
            })
            .collect(),
        Err(_) => MANY_THREAD_COUNTS.to_vec(),
    }
}

fn bench_many(duration: Duration) -> BenchResult<Vec<ManyRow>> {
    section("5. Many writers: convlog Group vs naive group commit vs SQLite (WAL, FULL, shared conn), 700 B");
    let pool = common::fixed_payloads(POOL_SEED ^ 0x700, 1024, MANY_PAYLOAD_BYTES);
    let mut rows = Vec::new();
    for threads in many_thread_counts() {
        let mut rounds = Vec::new();
        for round in 1..=MANY_ROUNDS {
            // Interleaved, a fresh store / file / database each: drift on a
            // shared machine hits all three.
            let convlog = run_log(
                "many",
                LogOptions::new().durability(Durability::Group),
                threads,
                duration,
                &pool,
                1,
            )?;
            let naive = naive_run(&pool, threads, duration)?;
            let sqlite = sqlite_run(&pool, threads, duration, true)?;
            println!(
                "  {threads:>3} threads, round {round}: convlog {} ({:.1} recs/fsync, {:.1} CPU µs/append; {}) / naive {} ({:.1} CPU µs/append) / SQLite {} appends/s",
                grouped(convlog.measured.ops_per_sec()),
                convlog.records_per_fsync(),
                cpu_micros_per_op(&convlog.measured),
                convlog.cycle(),
                grouped(naive.ops_per_sec()),
                cpu_micros_per_op(&naive),
                grouped(sqlite.ops_per_sec()),
            );
            rounds.push(ManyRound {
                convlog: convlog.measured,
                stats: convlog.stats,
                naive,
                sqlite,
            });
        }
        rows.push(ManyRow { threads, rounds });
    }
    println!();
    let mut table = Table::new(&[
        "threads",
        "convlog",
        "naive group commit",
        "SQLite",
        "convlog/naive",
        "convlog/SQLite",
        "recs/fsync",
        "CPU µs/append convlog",
        "naive",
    ]);
    for row in &rows {
        let convlog = row.convlog();
        let (naive, sqlite) = (row.naive(), row.sqlite());
        table.row(vec![
            row.threads.to_string(),
            format!(
                "{} {}",
                grouped(convlog.convlog.ops_per_sec()),
                range_of(&row.rounds, |round| round.convlog.ops_per_sec())
            ),
            format!(
                "{} {}",
                grouped(naive.ops_per_sec()),
                range_of(&row.rounds, |round| round.naive.ops_per_sec())
            ),
            format!(
                "{} {}",
                grouped(sqlite.ops_per_sec()),
                range_of(&row.rounds, |round| round.sqlite.ops_per_sec())
            ),
            format!("{:.2}", convlog.convlog.ops_per_sec() / naive.ops_per_sec()),
            format!(
                "{:.1}",
                convlog.convlog.ops_per_sec() / sqlite.ops_per_sec()
            ),
            format!(
                "{:.1}",
                convlog.stats.frames as f64 / convlog.stats.syncs.max(1) as f64
            ),
            format!("{:.1}", cpu_micros_per_op(&convlog.convlog)),
            format!("{:.1}", cpu_micros_per_op(&naive)),
        ]);
    }
    println!("appends/s, median of {MANY_ROUNDS} rounds [min..max]; ratios of the medians; CPU = process user+system time / appends, of the median round");
    table.print();
    Ok(rows)
}

fn print_many_summary(rows: &[ManyRow]) {
    if rows.is_empty() {
        return;
    }
    let mut table = Table::new(&["target", "measured", "verdict"]);
    for row in rows {
        let ratio = row.convlog().convlog.ops_per_sec() / row.naive().ops_per_sec();
        table.row(vec![
            format!("Group @{} threads >= 1.2x naive group commit", row.threads),
            format!("{ratio:.2}x"),
            verdict(ratio >= 1.2).to_string(),
        ]);
        if row.threads == 64 {
            let ratio = row.convlog().convlog.ops_per_sec() / row.sqlite().ops_per_sec();
            table.row(vec![
                "Group @64 threads >= 25x SQLite".to_string(),
                format!("{ratio:.1}x"),
                verdict(ratio >= 25.0).to_string(),
            ]);
            let cpu = cpu_micros_per_op(&row.convlog().convlog);
            table.row(vec![
                "CPU per durable append @64 <= 10 µs".to_string(),
                format!("{cpu:.1} µs"),
                verdict(cpu <= 10.0).to_string(),
            ]);
        }
    }
    section("Summary, many writers (issue 15)");
    table.print();
}

// ---------------------------------------------------------------------------
// 6. Tamper evidence: the keyed chain's cost on the write path

/// Rounds of the tamper comparison unless `CONVLOG_BENCH_ROUNDS` says.
const TAMPER_ROUNDS_DEFAULT: f64 = 3.0;
/// Writer threads of the `Group` comparison.
const TAMPER_GROUP_THREADS: usize = 64;

fn bench_tamper(duration: Duration) -> BenchResult<()> {
    section("6. Tamper evidence: appends/s with and without the keyed chain, 700-byte payloads");
    let pool = common::fixed_payloads(POOL_SEED ^ 0x0716, POOL_PAYLOADS, ONE_WRITER_PAYLOAD_BYTES);
    let rounds = common::env_f64("CONVLOG_BENCH_ROUNDS", TAMPER_ROUNDS_DEFAULT).max(1.0) as usize;
    let key = || convlog::tamper::TamperKey::from_seed([0x16; 32]);
    let cases = [
        ("Sync, 1 thread", Durability::Sync, 1),
        ("Group, 64 threads", Durability::Group, TAMPER_GROUP_THREADS),
    ];
    let mut table = Table::new(&[
        "case",
        "plain appends/s",
        "tamper-evident appends/s",
        "tamper/plain",
        "CPU µs/append plain",
        "CPU µs/append keyed",
        "keyed - plain CPU µs",
        "appends/fdatasync plain, keyed",
    ]);
    for (name, durability, threads) in cases {
        // Per round: [plain, keyed] runs.
        let mut runs: Vec<[LogRun; 2]> = Vec::new();
        for round in 0..rounds {
            let mut pair: [Option<LogRun>; 2] = [None, None];
            for step in 0..2 {
                let which = (step + round) % 2;
                let mut options = log_options(durability);
                if which == 1 {
                    options = options.tamper(convlog::tamper::TamperOptions::new(key()));
                }
                pair[which] = Some(run_log("tamper", options, threads, duration, &pool, 1)?);
            }
            let [Some(plain), Some(keyed)] = pair else {
                unreachable!("both runs of the round were made")
            };
            runs.push([plain, keyed]);
        }
        let per_round =
            |value: &dyn Fn(&[LogRun; 2]) -> f64| -> Vec<f64> { runs.iter().map(value).collect() };
        let count = |values: &[f64]| {
            let (median, low, high) = median_range(values);
            format!("{} [{}..{}]", grouped(median), grouped(low), grouped(high))
        };
        let fraction = |values: &[f64], digits: usize| {
            let (median, low, high) = median_range(values);
            format!("{median:.digits$} [{low:.digits$}..{high:.digits$}]")
        };
        let rate = |run: &LogRun| run.measured.ops_per_sec();
        let cpu = |run: &LogRun| cpu_micros_per_op(&run.measured);
        let (plain_group, _, _) = median_range(&per_round(&|[plain, _]| plain.records_per_fsync()));
        let (keyed_group, _, _) = median_range(&per_round(&|[_, keyed]| keyed.records_per_fsync()));
        table.row(vec![
            name.to_string(),
            count(&per_round(&|[plain, _]| rate(plain))),
            count(&per_round(&|[_, keyed]| rate(keyed))),
            fraction(&per_round(&|[plain, keyed]| rate(keyed) / rate(plain)), 3),
            fraction(&per_round(&|[plain, _]| cpu(plain)), 2),
            fraction(&per_round(&|[_, keyed]| cpu(keyed)), 2),
            fraction(&per_round(&|[plain, keyed]| cpu(keyed) - cpu(plain)), 2),
            format!("{plain_group:.1}, {keyed_group:.1}"),
        ]);
    }
    table.print();
    println!();
    println!(
        "median [min..max] of {rounds} interleaved rounds; ratios and differences are per round, same run; \
         CPU is the whole process's (user + system) per completed append"
    );
    println!();
    keyed_work_alone(&pool[0], rounds);
    Ok(())
}

/// Frames hashed per round by [`keyed_work_alone`].
const TAMPER_ALONE_FRAMES: usize = 200_000;

/// The keyed chain's hashing for a one-event frame, alone on this thread:
/// what it costs in CPU, apart from the writer and the scheduler. The same
/// hashes over the same sizes as the writer: SHA-256 of the event's length
/// prefix and bytes fed to an incremental hasher, the chain step
/// (`tamper::chain_digest`), and a keyed BLAKE3 of the tag's 64 bytes
/// (domain, epoch, LSN, digest). Prints the min and median ns per frame of
/// `rounds` rounds, each part's rounds interleaved with the others'.
fn keyed_work_alone(payload: &[u8], rounds: usize) {
    use std::hint::black_box;
    use std::time::Instant;

    let events_digest = |payload: &[u8]| -> [u8; 32] {
        use sha2::Digest as _;
        let mut hasher = sha2::Sha256::new();
        hasher.update((payload.len() as u32).to_le_bytes());
        hasher.update(payload);
        hasher.finalize().into()
    };
    let tag_key = [0x16; 32];
    let tag = |digest: &[u8; 32]| -> u8 {
        let mut input = [0u8; 64];
        input[32..].copy_from_slice(digest);
        blake3::keyed_hash(&tag_key, &input).as_bytes()[0]
    };
    let chain =
        |events: &[u8; 32]| convlog::tamper::chain_digest(&[1; 32], &[2; 16], 77, 1, events);
    type Part<'a> = (&'static str, Box<dyn Fn() -> u8 + 'a>);
    let parts: [Part; 4] = [
        (
            "events' digest",
            Box::new(|| events_digest(black_box(payload))[0]),
        ),
        ("chain step", Box::new(|| chain(black_box(&[3; 32]))[0])),
        ("tag", Box::new(|| tag(black_box(&[4; 32])))),
        (
            "the three, one frame",
            Box::new(|| tag(&chain(&events_digest(black_box(payload))))),
        ),
    ];
    let mut nanos: Vec<Vec<f64>> = vec![Vec::new(); parts.len()];
    for _ in 0..rounds {
        for (index, (_, part)) in parts.iter().enumerate() {
            let start = Instant::now();
            let mut sink = 0u8;
            for _ in 0..TAMPER_ALONE_FRAMES {
                sink ^= part();
            }
            black_box(sink);
            nanos[index].push(start.elapsed().as_nanos() as f64 / TAMPER_ALONE_FRAMES as f64);
        }
    }
    let mut table = Table::new(&[
        "keyed work alone, one thread",
        "min ns/frame",
        "median ns/frame",
    ]);
    for ((name, _), values) in parts.iter().zip(&nanos) {
        let (median, low, _) = median_range(values);
        table.row(vec![name.to_string(), grouped(low), grouped(median)]);
    }
    table.print();
    println!();
    println!(
        "{} B payload, {TAMPER_ALONE_FRAMES} frames per round, {rounds} rounds",
        payload.len()
    );
}
