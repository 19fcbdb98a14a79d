//! `convlog demo`: a writer process is killed in the middle of its work; the
//! store is reopened and every acknowledged append is found again.
//!
//! The worker plays an agent host recording tool calls: four threads, one
//! conversation each, record every call as one atomic batch (the assistant
//! entry requesting it, its running status, its result) with group commit,
//! printing every acknowledgement. The demo kills it with SIGKILL, reopens
//! the store, and checks the log against those acknowledgements.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use convlog::log::LogOptions;
use convlog::model::{ConversationEntry, Role, Timestamp, ToolCall, ToolStatus, ToolStatusChanged};
use convlog::store::{Store, StoreOptions};
use convlog::{Error, Event, Result};

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
        "2. Started a worker process (pid {}) with {WORKER_THREADS} threads recording tool calls;\n   each call is one atomic batch (assistant request, running status, result), group-committed.",
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

    let store = Store::open(&dir, StoreOptions::default())?;
    let log = store.log();
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
        let event = convlog::codec::decode_event(&record.payload).map_err(|reason| {
            Error::UndecodableEvent {
                lsn: record.lsn,
                reason,
            }
        })?;
        records.insert(record.lsn, event);
        recovered += 1;
    }
    for (lsn, payload) in &acknowledged {
        if records.get(lsn) != Some(payload) {
            missing.push(*lsn);
        }
    }
    println!(
        "5. The log holds {recovered} events (LSN 1..={}): every one of the {} acknowledged\n   events is there, identical; {} more were written but not yet acknowledged.",
        log.next_lsn() - 1,
        acknowledged.len(),
        recovered.saturating_sub(acknowledged.len() as u64)
    );
    if !missing.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "acknowledged events missing after recovery: LSNs {missing:?}"
        )));
    }
    let conversation = store.conversation(&conversation_id(0))?;
    println!(
        "6. Conversation {:?} folds back to {} entries; its last tool call is {}.",
        conversation.conversation_id(),
        conversation.len(),
        conversation
            .recorded()
            .iter()
            .rev()
            .find_map(|recorded| recorded.entry.tool_calls.first())
            .map_or("none", |call| call.status.as_str())
    );
    let mut note = ConversationEntry::new(
        "demo-resume",
        0,
        Role::System,
        Some("host restarted; resuming".into()),
    );
    note.created_at = Timestamp::now();
    let resumed = store.append_one(note.recorded_in(&conversation_id(0)))?;
    println!("7. A new writer continues the same store: appended LSN {resumed}.");
    drop(store);

    let verified = convlog::store::verify(&dir, &mut |_| {})?;
    println!(
        "8. verify: {} segment(s), {} events in {} atomic batches, {} conversations, {} bytes; every checksum good, every event decodes.",
        verified.log.segments, verified.log.events, verified.log.frames, verified.conversations, verified.log.bytes
    );
    println!("\nThe store stays at {} for you to inspect:", dir.display());
    println!("  cargo run --release -- verify {}", dir.display());
    Ok(())
}

fn parse_acknowledgements(lines: &[String]) -> BTreeMap<u64, Event> {
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
        for (offset, event) in tool_call_batch(thread, call).into_iter().enumerate() {
            acknowledged.insert(first + offset as u64, event);
        }
    }
    acknowledged
}

fn conversation_id(thread: usize) -> String {
    format!("demo-agent-{thread}")
}

/// The three events a worker thread records for one tool call, built
/// deterministically so the parent can rebuild what was acknowledged.
fn tool_call_batch(thread: usize, call: usize) -> [Event; 3] {
    let conversation = conversation_id(thread);
    let call_id = format!("call_{thread}_{call}");
    let at = Timestamp(1_795_000_000_000_000 + call as i64 * 1000);
    let identity =
        |kind: u128| uuid::Uuid::from_u128((kind << 96) | ((thread as u128) << 64) | call as u128);
    let mut assistant = ConversationEntry::new("demo-eval", 2 * call as u64, Role::Assistant, None);
    assistant.message_id = identity(1);
    assistant.created_at = at;
    assistant.turn = call as u32 + 1;
    assistant.tool_calls.push(ToolCall {
        call_id: call_id.clone(),
        name: "weather".into(),
        arguments: "{\"city\":\"Paris\"}".into(),
        status: ToolStatus::Pending,
        started_at: None,
        ended_at: None,
        error: None,
    });
    let running = Event::ToolStatus(ToolStatusChanged::new(
        &conversation,
        "demo-eval",
        &call_id,
        ToolStatus::Running,
        at,
    ));
    let mut result = ConversationEntry::new(
        "demo-eval",
        2 * call as u64 + 1,
        Role::Tool,
        Some("weather in Paris: 18C, light rain. ".repeat(1 + call % 8)),
    );
    result.message_id = identity(2);
    result.created_at = at;
    result.turn = call as u32 + 1;
    result.tool_call_id = Some(call_id);
    result.tool_name = Some("weather".into());
    [
        assistant.recorded_in(&conversation),
        running,
        result.recorded_in(&conversation),
    ]
}

/// The worker: records tool calls until killed, printing acknowledgements.
pub fn worker(store: &Path) -> Result<()> {
    let log = Arc::new(Store::open(
        store,
        StoreOptions {
            log: LogOptions {
                segment_bytes_max: 1024 * 1024,
                ..LogOptions::default()
            },
            ..StoreOptions::default()
        },
    )?);
    let threads: Vec<_> = (0..WORKER_THREADS)
        .map(|thread| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || -> Result<()> {
                for call in 0.. {
                    let lsns = log.append(tool_call_batch(thread, call).to_vec())?;
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
