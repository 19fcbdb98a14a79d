//! `convlog demo`: a writer process is killed in the middle of its work; the
//! store is reopened and every acknowledged append is found again.
//!
//! The worker plays an agent host recording tool calls: four threads each
//! record "tool call started" / "tool result" pairs as atomic batches with
//! group commit, printing every acknowledgement. The demo kills it with
//! SIGKILL, reopens the store, and checks the log against those
//! acknowledgements.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use convlog::log::{Log, LogOptions};
use convlog::{Error, Result};

const WORKER_THREADS: usize = 4;
const RUN_BEFORE_KILL: Duration = Duration::from_millis(400);

fn default_demo_dir() -> PathBuf {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or_default();
    std::env::temp_dir()
        .join("convlog-demo")
        .join(format!("store-{stamp}-{}", std::process::id()))
}

fn io_error(operation: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io {
        operation,
        path,
        source,
    }
}

/// The parent: starts the worker, kills it, recovers, checks, reports.
pub fn run(dir: Option<PathBuf>) -> Result<()> {
    let dir = dir.unwrap_or_else(default_demo_dir);
    if dir.exists() {
        return Err(Error::InvalidArgument(format!(
            "{} already exists; the demo wants a new directory (pass another --dir)",
            dir.display()
        )));
    }
    println!("convlog demo: a writer is killed mid-run, and nothing it acknowledged is lost.\n");
    println!("1. Store: {}", dir.display());

    let executable = std::env::current_exe().map_err(io_error("find own executable", &dir))?;
    let mut child = Command::new(executable)
        .arg("demo-worker")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(io_error("start demo worker for", &dir))?;
    println!(
        "2. Started a worker process (pid {}) with {WORKER_THREADS} threads recording tool calls;\n   each call is one atomic batch (call started + result), group-committed.",
        child.id()
    );
    let stdout = child.stdout.take().expect("stdout is piped");
    let collector = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(std::result::Result::ok)
            .collect::<Vec<String>>()
    });
    std::thread::sleep(RUN_BEFORE_KILL);
    child
        .kill()
        .map_err(io_error("kill demo worker for", &dir))?;
    let status = child
        .wait()
        .map_err(io_error("wait for demo worker of", &dir))?;
    let acknowledged = parse_acknowledgements(&collector.join().unwrap_or_default());
    println!(
        "3. Killed it with SIGKILL after {} ms ({status}); it had acknowledged {} events,\n   the last at LSN {}. Batches in flight at the kill were never acknowledged.",
        RUN_BEFORE_KILL.as_millis(),
        acknowledged.len(),
        acknowledged.keys().next_back().copied().unwrap_or(0)
    );

    let log = Log::open(&dir, LogOptions::default())?;
    let report = log.recovery_report().clone();
    match &report.torn_tail {
        Some(torn) => println!(
            "4. Reopened the store. Recovery cut a torn tail: {} bytes at offset {} of {}.",
            torn.bytes_dropped,
            torn.offset,
            torn.segment.display()
        ),
        None => println!(
            "4. Reopened the store. Recovery found {} segment(s) and a clean tail (no torn write).",
            report.segments
        ),
    }
    let mut recovered = 0u64;
    let mut missing = Vec::new();
    let mut records = BTreeMap::new();
    for record in log.iter_from(1) {
        let record = record?;
        records.insert(record.lsn, record.payload);
        recovered += 1;
    }
    for (lsn, payload) in &acknowledged {
        if records.get(lsn) != Some(payload) {
            missing.push(*lsn);
        }
    }
    println!(
        "5. The log holds {recovered} events (LSN 1..={}): every one of the {} acknowledged\n   events is there, byte for byte; {} more were written but not yet acknowledged.",
        log.next_lsn() - 1,
        acknowledged.len(),
        recovered.saturating_sub(acknowledged.len() as u64)
    );
    if !missing.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "acknowledged events missing after recovery: LSNs {missing:?}"
        )));
    }
    let resumed = log.append(b"{\"note\":\"host restarted; resuming unfinished tool calls\"}")?;
    println!("6. A new writer continues the same log: appended LSN {resumed}.");
    drop(log);

    let verified = convlog::log::verify(&dir)?;
    println!(
        "7. verify: {} segment(s), {} events in {} atomic batches, {} bytes, every checksum good.",
        verified.segments, verified.events, verified.frames, verified.bytes
    );
    println!("\nThe store stays at {} for you to inspect:", dir.display());
    println!("  cargo run --release -- verify {}", dir.display());
    Ok(())
}

fn parse_acknowledgements(lines: &[String]) -> BTreeMap<u64, Vec<u8>> {
    let mut acknowledged = BTreeMap::new();
    for line in lines {
        // "ACK <first lsn> <thread> <call>"; a line cut by the kill is skipped.
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() != 4 || fields[0] != "ACK" {
            continue;
        }
        let (Ok(first), Ok(thread), Ok(call)) = (
            fields[1].parse::<u64>(),
            fields[2].parse::<usize>(),
            fields[3].parse::<usize>(),
        ) else {
            continue;
        };
        for (offset, payload) in tool_call_batch(thread, call).into_iter().enumerate() {
            acknowledged.insert(first + offset as u64, payload);
        }
    }
    acknowledged
}

/// The two events a worker thread records for one tool call.
fn tool_call_batch(thread: usize, call: usize) -> [Vec<u8>; 2] {
    let call_id = format!("call_{thread}_{call}");
    let started =
        format!("{{\"type\":\"tool_status\",\"call_id\":\"{call_id}\",\"status\":\"running\"}}");
    let result = format!(
        "{{\"type\":\"tool_result\",\"call_id\":\"{call_id}\",\"content\":\"{}\"}}",
        "weather in Paris: 18C, light rain. ".repeat(1 + call % 8)
    );
    [started.into_bytes(), result.into_bytes()]
}

/// The worker: records tool calls until killed, printing acknowledgements.
pub fn worker(store: &Path) -> Result<()> {
    let log = Arc::new(Log::open(
        store,
        LogOptions {
            segment_bytes_max: 1024 * 1024,
            ..LogOptions::default()
        },
    )?);
    let threads: Vec<_> = (0..WORKER_THREADS)
        .map(|thread| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || -> Result<()> {
                for call in 0.. {
                    let lsns = log.append_batch(&tool_call_batch(thread, call))?;
                    let mut stdout = std::io::stdout().lock();
                    // A closed pipe means the parent is gone: stop quietly.
                    if writeln!(stdout, "ACK {} {thread} {call}", lsns.start)
                        .and_then(|()| stdout.flush())
                        .is_err()
                    {
                        return Ok(());
                    }
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| Error::InvalidArgument("a worker thread panicked".to_string()))??;
    }
    Ok(())
}
