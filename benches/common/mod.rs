//! Shared helpers of the throughput benches: a deterministic PRNG, payload
//! pools, scratch directories on the crate's disk, a timed multi-thread
//! runner and table printing. No criterion: these are wall-clock throughput
//! measurements with threads and fsync.

// Each bench uses a subset of these helpers.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// xorshift64*: deterministic, fast, good enough for sizes and filler bytes.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `low..high`.
    pub fn range(&mut self, low: usize, high: usize) -> usize {
        low + (self.next_u64() % (high - low) as u64) as usize
    }

    /// Random-looking (incompressible) bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.fill(&mut out);
        out
    }
}

/// The realistic size mix: 80% in 200 B..1 KiB, 20% in 1 KiB..8 KiB.
pub fn realistic_size(rng: &mut XorShift) -> usize {
    if rng.next_u64() % 100 < 80 {
        rng.range(200, 1024)
    } else {
        rng.range(1024, 8 * 1024)
    }
}

/// A pool of `count` payloads with the realistic size mix.
pub fn realistic_payloads(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = XorShift::new(seed);
    (0..count)
        .map(|_| {
            let size = realistic_size(&mut rng);
            rng.bytes(size)
        })
        .collect()
}

/// A pool of `count` payloads of exactly `size` bytes.
pub fn fixed_payloads(seed: u64, count: usize, size: usize) -> Vec<Vec<u8>> {
    let mut rng = XorShift::new(seed);
    (0..count).map(|_| rng.bytes(size)).collect()
}

/// The payload thread `thread` uses for its `iteration`-th append: threads
/// walk the pool from different starting points.
pub fn pick(pool: &[Vec<u8>], thread: usize, iteration: u64) -> &[u8] {
    let index = (thread as u64).wrapping_mul(7919).wrapping_add(iteration) % pool.len() as u64;
    &pool[index as usize]
}

/// A number from the environment, or `default`.
pub fn env_f64(name: &str, default: f64) -> f64 {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
        Err(_) => default,
    }
}

/// Length of one measured phase: `CONVLOG_BENCH_SECONDS` (default 2).
pub fn phase_duration() -> Duration {
    Duration::from_secs_f64(env_f64("CONVLOG_BENCH_SECONDS", 2.0).max(0.1))
}

/// Where scratch stores go: `target/bench-tmp` of this crate (the same disk
/// as the sources), unless `CONVLOG_BENCH_DIR` says otherwise.
pub fn scratch_root() -> PathBuf {
    let root = match std::env::var_os("CONVLOG_BENCH_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .join("bench-tmp"),
    };
    std::fs::create_dir_all(&root).expect("create scratch root");
    root
}

/// A fresh scratch directory, removed when dropped.
pub fn scratch_dir(label: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{label}-"))
        .tempdir_in(scratch_root())
        .expect("create scratch directory")
}

/// What one timed phase did.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Operations completed (appends, inserts, lines).
    pub ops: u64,
    /// Payload bytes in those operations.
    pub bytes: u64,
    /// Wall time from the start signal until every thread stopped.
    pub elapsed: Duration,
    /// CPU time (user + system) of the whole process meanwhile.
    pub cpu: Duration,
}

impl Measured {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    pub fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64() / (1024.0 * 1024.0)
    }

    /// CPU used, in percent of one core (200% = both cores of a 2-core box).
    pub fn cpu_percent(&self) -> f64 {
        100.0 * self.cpu.as_secs_f64() / self.elapsed.as_secs_f64()
    }
}

/// Runs `threads` threads for `duration`. Each first builds its state with
/// `setup(thread)` (untimed), then, after a common start signal, calls
/// `op(&mut state, thread, iteration)` in a loop until told to stop; `op`
/// returns the payload bytes it handled.
pub fn run_threads<S, Setup, Op>(
    threads: usize,
    duration: Duration,
    setup: Setup,
    op: Op,
) -> Measured
where
    Setup: Fn(usize) -> S + Sync,
    Op: Fn(&mut S, usize, u64) -> usize + Sync,
{
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (stop, barrier, setup, op) = (&stop, &barrier, &setup, &op);
                std::thread::Builder::new()
                    .stack_size(512 * 1024)
                    .spawn_scoped(scope, move || {
                        let mut state = setup(thread);
                        barrier.wait();
                        let (mut ops, mut bytes) = (0u64, 0u64);
                        while !stop.load(Ordering::Relaxed) {
                            bytes += op(&mut state, thread, ops) as u64;
                            ops += 1;
                        }
                        (ops, bytes)
                    })
                    .expect("spawn bench thread")
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let cpu_start = process_cpu_time();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let (mut ops, mut bytes) = (0u64, 0u64);
        for handle in handles {
            let (thread_ops, thread_bytes) = handle.join().expect("bench thread panicked");
            ops += thread_ops;
            bytes += thread_bytes;
        }
        let elapsed = start.elapsed();
        Measured {
            ops,
            bytes,
            elapsed,
            cpu: process_cpu_time().saturating_sub(cpu_start),
        }
    })
}

/// User + system CPU time of this process so far (all threads, including
/// finished ones), from `/proc/self/stat`; zero where that is unavailable.
pub fn process_cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line, in clock ticks (100 per second).
    let Some(rest) = stat.rfind(')').map(|end| &stat[end + 1..]) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|field| field.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// `1234567.8` as `1,234,568`.
pub fn grouped(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A plain-text table printed with aligned columns.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|cell| cell.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.header.len(), "table row width");
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn print(&self) {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(String::len).collect();
        for row in &self.rows {
            for (column, cell) in row.iter().enumerate().take(columns) {
                widths[column] = widths[column].max(cell.len());
            }
        }
        let line = |cells: &[String]| {
            let rendered: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(column, cell)| {
                    if column == 0 {
                        format!("{cell:<width$}", width = widths[column])
                    } else {
                        format!("{cell:>width$}", width = widths[column])
                    }
                })
                .collect();
            println!("| {} |", rendered.join(" | "));
        };
        line(&self.header);
        let rule: Vec<String> = widths.iter().map(|width| "-".repeat(*width)).collect();
        println!("|-{}-|", rule.join("-|-"));
        for row in &self.rows {
            line(row);
        }
        println!();
    }
}

/// Prints a section heading.
pub fn section(title: &str) {
    println!("\n## {title}\n");
}
