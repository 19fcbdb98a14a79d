//! Read-side throughput of the segment log on a ~1 GiB store with the page
//! cache warm: `verify`, `Log::open` (recovery), and a full `LogReader`
//! scan that reads every payload.
//!
//! Run with `cargo bench --bench log_scan`. `CONVLOG_BENCH_SCAN_MIB` sets
//! the store size (default 1024); `CONVLOG_BENCH_SECONDS` the minimum time
//! spent repeating each measurement (default 2 s); `CONVLOG_BENCH_DIR`
//! where the scratch store goes (default `target/bench-tmp`).

mod common;

use std::error::Error;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{grouped, section, Table, XorShift};
use convlog::log::{format, verify, Durability, Log, LogOptions, LogReader};

type BenchResult<T> = Result<T, Box<dyn Error>>;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const BATCH: usize = 64;

/// What the build phase put in the store.
struct Built {
    events: u64,
    payload_bytes: u64,
    file_bytes: u64,
    segments: usize,
    elapsed: Duration,
}

fn build(dir: &Path, target_bytes: u64) -> BenchResult<Built> {
    // ~1 KiB payloads: 512..1536 B, random-looking bytes.
    let mut rng = XorShift::new(0x5CA7_1234);
    let pool: Vec<Vec<u8>> = (0..4096)
        .map(|_| {
            let size = rng.range(512, 1536);
            rng.bytes(size)
        })
        .collect();
    let options = LogOptions::new().durability(Durability::None);
    let start = Instant::now();
    let log = Log::open(dir, options)?;
    let (mut events, mut payload_bytes, mut estimated_bytes) = (0u64, 0u64, 0u64);
    let mut next = 0usize;
    while estimated_bytes < target_bytes {
        let batch: Vec<&[u8]> = (0..BATCH)
            .map(|index| pool[(next + index) % pool.len()].as_slice())
            .collect();
        next = (next + 7 * BATCH + 1) % pool.len();
        log.append(&batch)?;
        events += BATCH as u64;
        payload_bytes += batch
            .iter()
            .map(|payload| payload.len() as u64)
            .sum::<u64>();
        estimated_bytes += format::frame_bytes(&batch) as u64;
    }
    let segments = 1 + log.writer_stats().rolls as usize;
    drop(log); // fsyncs the last segment
    let elapsed = start.elapsed();
    let file_bytes = segment_bytes(dir)?;
    Ok(Built {
        events,
        payload_bytes,
        file_bytes,
        segments,
        elapsed,
    })
}

fn segment_bytes(dir: &Path) -> BenchResult<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry
            .path()
            .extension()
            .is_some_and(|extension| extension == "seg")
        {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

/// Runs `pass` repeatedly: at least 3 times and for at least `duration`
/// in all (at most 50 passes). `pass` returns the time it measured; the
/// sorted times are returned.
fn repeat(
    duration: Duration,
    mut pass: impl FnMut() -> BenchResult<Duration>,
) -> BenchResult<Vec<Duration>> {
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 3 || (start.elapsed() < duration && times.len() < 50) {
        times.push(pass()?);
    }
    times.sort();
    Ok(times)
}

/// Times `work` alone.
fn timed(work: impl FnOnce() -> BenchResult<()>) -> BenchResult<Duration> {
    let began = Instant::now();
    work()?;
    Ok(began.elapsed())
}

struct Row {
    name: &'static str,
    times: Vec<Duration>,
    bytes: u64,
    note: String,
}

impl Row {
    fn median(&self) -> Duration {
        self.times[self.times.len() / 2]
    }

    fn gib_per_sec(&self, time: Duration) -> f64 {
        self.bytes as f64 / GIB / time.as_secs_f64()
    }
}

fn main() -> BenchResult<()> {
    let duration = common::phase_duration();
    let target_mib = common::env_f64("CONVLOG_BENCH_SCAN_MIB", 1024.0);
    let target_bytes = (target_mib * 1024.0 * 1024.0) as u64;
    println!("# convlog log_scan bench");
    println!();
    println!(
        "cores: {}, store: {target_mib:.0} MiB, min time per measurement: {:.1} s, scratch: {}",
        std::thread::available_parallelism().map_or(0, |cores| cores.get()),
        duration.as_secs_f64(),
        common::scratch_root().display()
    );

    let scratch = common::scratch_dir("scan");
    let dir = scratch.path().join("store");
    let built = build(&dir, target_bytes)?;
    section("Build (Durability::None, batches of 64 x ~1 KiB)");
    println!(
        "{} events, {:.1} MiB payload, {:.1} MiB in {} segments, built in {:.2} s ({:.2} GiB/s, {} events/s, incl. final fsync)",
        grouped(built.events as f64),
        built.payload_bytes as f64 / 1024.0 / 1024.0,
        built.file_bytes as f64 / 1024.0 / 1024.0,
        built.segments,
        built.elapsed.as_secs_f64(),
        built.file_bytes as f64 / GIB / built.elapsed.as_secs_f64(),
        grouped(built.events as f64 / built.elapsed.as_secs_f64()),
    );

    // Warm the page cache (and check the store) before anything is timed.
    let report = verify(&dir)?;
    assert_eq!(
        report.events, built.events,
        "verify counted other events than were appended"
    );
    assert_eq!(report.bytes, built.file_bytes);
    assert!(report.torn_tail.is_none(), "a clean store has no torn tail");
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "seg") {
            segments.push(path);
        }
    }

    let mut rows = Vec::new();

    // Reference: copy every segment file out of the page cache into one
    // reused, already-faulted buffer (the memory-copy limit of a read path).
    let largest = segments
        .iter()
        .map(|path| std::fs::metadata(path).map(|metadata| metadata.len()))
        .collect::<Result<Vec<u64>, _>>()?
        .into_iter()
        .max()
        .unwrap_or(0);
    let mut buffer = vec![1u8; largest as usize];
    let times = repeat(duration, || {
        let mut total = 0u64;
        let time = timed(|| {
            for path in &segments {
                let mut file = File::open(path)?;
                let length = file.metadata()?.len() as usize;
                file.read_exact(&mut buffer[..length])?;
                total += length as u64;
            }
            Ok(())
        })?;
        assert_eq!(total, built.file_bytes);
        Ok(time)
    })?;
    rows.push(Row {
        name: "reference: read(2) every segment into one buffer",
        times,
        bytes: built.file_bytes,
        note: String::new(),
    });

    // (a) verify.
    let times = repeat(duration, || {
        let mut events = 0;
        let time = timed(|| {
            events = verify(&dir)?.events;
            Ok(())
        })?;
        assert_eq!(events, built.events);
        Ok(time)
    })?;
    rows.push(Row {
        name: "(a) verify(dir)",
        times,
        bytes: built.file_bytes,
        note: format!("{} frames", grouped(report.frames as f64)),
    });

    // (b) Log::open: recovery scans every sealed segment and the last one.
    let mut reopened_segments = 0;
    let times = repeat(duration, || {
        let began = Instant::now();
        let log = Log::open(&dir, LogOptions::default())?;
        let time = began.elapsed();
        assert_eq!(log.next_lsn(), built.events + 1);
        reopened_segments = log.recovery_report().segments;
        drop(log); // not timed
        Ok(time)
    })?;
    rows.push(Row {
        name: "(b) Log::open (recovery)",
        times,
        bytes: built.file_bytes,
        note: format!("{reopened_segments} segments"),
    });

    // (c) Full scan reading every payload.
    let times = repeat(duration, || {
        let (mut events, mut bytes) = (0u64, 0u64);
        let time = timed(|| {
            for record in LogReader::open(&dir)?.iter() {
                let record = record?;
                events += 1;
                bytes += record.payload.len() as u64;
            }
            Ok(())
        })?;
        assert_eq!((events, bytes), (built.events, built.payload_bytes));
        Ok(time)
    })?;
    let scan_events = built.events;
    let scan_median = times[times.len() / 2];
    rows.push(Row {
        name: "(c) LogReader::open(dir)?.iter() (every payload)",
        times,
        bytes: built.file_bytes,
        note: format!(
            "{} events/s",
            grouped(scan_events as f64 / scan_median.as_secs_f64())
        ),
    });

    section("Read throughput, page cache warm (GiB/s of segment bytes)");
    let mut table = Table::new(&[
        "measurement",
        "passes",
        "median s",
        "median GiB/s",
        "best GiB/s",
        "worst GiB/s",
        "note",
    ]);
    for row in &rows {
        table.row(vec![
            row.name.to_string(),
            row.times.len().to_string(),
            format!("{:.3}", row.median().as_secs_f64()),
            format!("{:.2}", row.gib_per_sec(row.median())),
            format!("{:.2}", row.gib_per_sec(row.times[0])),
            format!("{:.2}", row.gib_per_sec(row.times[row.times.len() - 1])),
            row.note.clone(),
        ]);
    }
    table.print();

    section("Summary against targets");
    let mut summary = Table::new(&["target", "measured (median)", "verdict"]);
    for (target, row) in [
        ("verify >= 1 GiB/s", &rows[1]),
        ("Log::open >= 1 GiB/s", &rows[2]),
    ] {
        let rate = row.gib_per_sec(row.median());
        summary.row(vec![
            target.to_string(),
            format!("{rate:.2} GiB/s"),
            if rate >= 1.0 { "met" } else { "MISSED" }.to_string(),
        ]);
    }
    summary.row(vec![
        "full LogReader scan (no target)".to_string(),
        format!("{:.2} GiB/s", rows[3].gib_per_sec(rows[3].median())),
        "-".to_string(),
    ]);
    summary.print();
    Ok(())
}
