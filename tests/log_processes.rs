//! Real processes: a writer killed with SIGKILL at random moments, a reader
//! in another process following a writer, and the lock across processes.
//!
//! Each test re-runs this test binary as a child, selecting one test by name
//! and a role through `CONVLOG_TEST_ROLE` (see `common::spawn_role`).

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{env_number, read_all, role, spawn_role, writable_segment_maps, Rng};
use convlog::log::{Durability, Log, LogOptions, LogReader};
use convlog::Error;

/// Payload of event `index` of batch `batch` (of `size` events).
fn kill_payload(batch: &str, index: usize, size: usize) -> Vec<u8> {
    format!("{batch}:{index}/{size}:")
        .repeat(1 + index % 3)
        .into_bytes()
}

/// Opens the log at `dir`, waiting while it is `Locked`: a store lock this
/// test process held a moment ago (`check_recovered_log`) can outlive the
/// handle briefly, in a child that another test thread forked and that has
/// not yet reached `exec` (which closes the inherited descriptor).
fn open_when_unlocked(dir: &std::path::Path, options: LogOptions) -> Log {
    let mut attempts = 0;
    loop {
        match Log::open(dir, options.clone()) {
            Err(Error::Locked { .. }) if attempts < OPEN_LOCKED_ATTEMPTS => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            result => return result.unwrap(),
        }
    }
}

/// How often `open_when_unlocked` tries (10 ms apart).
const OPEN_LOCKED_ATTEMPTS: u32 = 1000;

fn store_from_env() -> PathBuf {
    PathBuf::from(std::env::var("CONVLOG_TEST_STORE").unwrap())
}

/// Child role: appends durable batches from 4 threads until killed, printing
/// `ACK <first_lsn> <batch id> <size>` after each acknowledgement.
fn run_appender() {
    let options = LogOptions::new().segment_bytes_max(64 * 1024);
    let log = Arc::new(open_when_unlocked(&store_from_env(), options));
    let cycle = std::env::var("CONVLOG_TEST_CYCLE").unwrap();
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let log = Arc::clone(&log);
            let cycle = cycle.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::new(thread as u64 + 1);
                for counter in 0.. {
                    let batch = format!("c{cycle}t{thread}n{counter}");
                    let size = 1 + rng.below(4) as usize;
                    let payloads: Vec<Vec<u8>> = (0..size)
                        .map(|index| kill_payload(&batch, index, size))
                        .collect();
                    let durability = if counter % 2 == 0 {
                        Durability::Group
                    } else {
                        Durability::Sync
                    };
                    let lsns = log.append_with(&payloads, durability).unwrap();
                    let mut stdout = std::io::stdout().lock();
                    writeln!(stdout, "ACK {} {batch} {size}", lsns.start).unwrap();
                    stdout.flush().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// Recovers the store at `dir` as the next writer would and checks the
/// whole log: LSNs gap-free, every `acknowledged` event (LSN -> batch id,
/// index, size) there with its bytes, batches all-or-nothing.
fn check_recovered_log(
    dir: &std::path::Path,
    acknowledged: &BTreeMap<u64, (String, usize, usize)>,
    cycle: u64,
    seed: u64,
) {
    let log = open_when_unlocked(dir, LogOptions::default());
    let records: Vec<_> = log.iter_from(1).map(|record| record.unwrap()).collect();
    drop(log);
    for (position, record) in records.iter().enumerate() {
        assert_eq!(
            record.lsn,
            position as u64 + 1,
            "cycle {cycle}: LSNs are gap-free"
        );
    }
    for (lsn, (batch, index, size)) in acknowledged {
        let record = records
            .get(*lsn as usize - 1)
            .unwrap_or_else(|| panic!("cycle {cycle} seed {seed}: acknowledged LSN {lsn} lost"));
        assert_eq!(
            record.payload,
            kill_payload(batch, *index, *size),
            "cycle {cycle}: LSN {lsn}"
        );
    }
    // Batches are all-or-nothing: parse each record's batch header.
    let mut position = 0;
    while position < records.len() {
        let text = String::from_utf8(records[position].payload.clone()).unwrap();
        let mut parts = text.split(':');
        let batch = parts.next().unwrap();
        let size: usize = parts
            .next()
            .unwrap()
            .split('/')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        for index in 0..size {
            let record = records
                .get(position + index)
                .unwrap_or_else(|| panic!("cycle {cycle}: batch {batch} is cut short"));
            assert_eq!(
                record.payload,
                kill_payload(batch, index, size),
                "cycle {cycle}: batch {batch}"
            );
        }
        position += size;
    }
}

#[test]
fn sigkill_at_random_moments_never_loses_an_acknowledged_append() {
    if role().as_deref() == Some("appender") {
        run_appender();
        return;
    }
    let cycles = env_number("CONVLOG_KILL_CYCLES", 100);
    let seed = env_number("CONVLOG_KILL_SEED", 0x5eed);
    eprintln!("kill test: {cycles} cycles, seed {seed} (CONVLOG_KILL_CYCLES / CONVLOG_KILL_SEED)");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    // LSN -> (batch id, index, size) for every acknowledged event.
    let mut acknowledged: BTreeMap<u64, (String, usize, usize)> = BTreeMap::new();
    let mut total_kills = 0;
    for cycle in 0..cycles {
        let env = vec![
            ("CONVLOG_TEST_STORE", dir.path().display().to_string()),
            ("CONVLOG_TEST_CYCLE", cycle.to_string()),
        ];
        let mut child = spawn_role(
            "sigkill_at_random_moments_never_loses_an_acknowledged_append",
            "appender",
            &env,
        );
        let stdout = child.stdout.take().unwrap();
        // Read acknowledgements on a thread while the child runs.
        let (first_ack, acked) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("ACK ") {
                    if lines.is_empty() {
                        let _ = first_ack.send(());
                    }
                    lines.push(line);
                }
            }
            lines
        });
        // Every fourth cycle kills only after the child acknowledged
        // something, so the test checks acknowledged appends however slow
        // this machine is; the others kill at any moment (during open too).
        if cycle % 4 == 3 {
            let _ = acked.recv();
        }
        std::thread::sleep(Duration::from_millis(5 + rng.below(60)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        total_kills += 1;
        for line in reader.join().unwrap() {
            let fields: Vec<&str> = line.split(' ').collect();
            // A line cut by the kill is not a whole acknowledgement.
            if fields.len() != 4 {
                continue;
            }
            let (Ok(first), Ok(size)) = (fields[1].parse::<u64>(), fields[3].parse::<usize>())
            else {
                continue;
            };
            for index in 0..size {
                acknowledged.insert(first + index as u64, (fields[2].to_string(), index, size));
            }
        }

        check_recovered_log(dir.path(), &acknowledged, cycle, seed);
    }
    assert_eq!(total_kills, cycles);
    assert!(
        !acknowledged.is_empty(),
        "the children acknowledged nothing"
    );
    eprintln!(
        "kill test: {total_kills} kills, {} acknowledged events checked, 0 lost",
        acknowledged.len()
    );
}

/// Child role: appends under `Durability::None` (the default durability
/// here) from 2 threads until killed, printing `ACK <first_lsn> <batch id>
/// <size>` after each acknowledgement. Before the threads start it prints
/// `MAPPED <n>`: how many segments it holds writable maps of after its
/// first append (the active one, on Linux).
fn run_none_appender() {
    let dir = store_from_env();
    let options = LogOptions::new()
        .durability(Durability::None)
        .segment_bytes_max(64 * 1024);
    let log = Arc::new(open_when_unlocked(&dir, options));
    let cycle = std::env::var("CONVLOG_TEST_CYCLE").unwrap();
    let first = format!("c{cycle}first");
    let lsns = log.append(&[kill_payload(&first, 0, 1)]).unwrap();
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "ACK {} {first} 1", lsns.start).unwrap();
        writeln!(
            stdout,
            "MAPPED {}",
            writable_segment_maps("self", &dir).len()
        )
        .unwrap();
        stdout.flush().unwrap();
    }
    let threads: Vec<_> = (0..2)
        .map(|thread| {
            let log = Arc::clone(&log);
            let cycle = cycle.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::new(thread as u64 + 7);
                for counter in 0.. {
                    let batch = format!("c{cycle}t{thread}n{counter}");
                    let size = 1 + rng.below(3) as usize;
                    let payloads: Vec<Vec<u8>> = (0..size)
                        .map(|index| kill_payload(&batch, index, size))
                        .collect();
                    let lsns = log.append(&payloads).unwrap();
                    let mut stdout = std::io::stdout().lock();
                    writeln!(stdout, "ACK {} {batch} {size}", lsns.start).unwrap();
                    stdout.flush().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// Issue 15: under `Durability::None` an append is acknowledged once its
/// frame is in the operating system's page cache, written through a
/// writable shared map of the active segment (on Linux): a process killed
/// with SIGKILL at any moment loses nothing it acknowledged.
#[test]
fn sigkill_never_loses_an_acknowledged_none_append() {
    if role().as_deref() == Some("none_appender") {
        run_none_appender();
        return;
    }
    let cycles = (env_number("CONVLOG_KILL_CYCLES", 100) / 4).max(1);
    let seed = env_number("CONVLOG_KILL_SEED", 0x5eed);
    eprintln!("None kill test: {cycles} cycles, seed {seed}");
    let mut rng = Rng::new(seed ^ 0x404e);
    let dir = tempfile::tempdir().unwrap();
    let mut acknowledged: BTreeMap<u64, (String, usize, usize)> = BTreeMap::new();
    for cycle in 0..cycles {
        let env = vec![
            ("CONVLOG_TEST_STORE", dir.path().display().to_string()),
            ("CONVLOG_TEST_CYCLE", cycle.to_string()),
        ];
        let mut child = spawn_role(
            "sigkill_never_loses_an_acknowledged_none_append",
            "none_appender",
            &env,
        );
        let stdout = child.stdout.take().unwrap();
        let (mapped_tx, mapped_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(count) = line.strip_prefix("MAPPED ") {
                    let _ = mapped_tx.send(count.parse::<usize>().ok());
                } else if line.starts_with("ACK ") {
                    lines.push(line);
                }
            }
            lines
        });
        // Kill only once the child has appended and reported its maps (a
        // dead child reports nothing: the test then fails below).
        let mapped = mapped_rx.recv().ok().flatten();
        std::thread::sleep(Duration::from_millis(rng.below(40)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        if cfg!(target_os = "linux") {
            assert_eq!(
                mapped,
                Some(1),
                "cycle {cycle}: the child writes through a map of its active segment"
            );
        }
        for line in reader.join().unwrap() {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() != 4 {
                continue;
            }
            let (Ok(first), Ok(size)) = (fields[1].parse::<u64>(), fields[3].parse::<usize>())
            else {
                continue;
            };
            for index in 0..size {
                acknowledged.insert(first + index as u64, (fields[2].to_string(), index, size));
            }
        }
        check_recovered_log(dir.path(), &acknowledged, cycle, seed);
    }
    let segments = common::segment_paths(dir.path()).len();
    eprintln!(
        "None kill test: {cycles} kills, {} acknowledged events checked, {segments} segments, 0 lost",
        acknowledged.len()
    );
}

#[test]
fn a_reader_in_another_process_follows_a_writer() {
    if role().as_deref() == Some("follower") {
        let expected = env_number("CONVLOG_TEST_EXPECTED", 0);
        let reader = LogReader::open(store_from_env()).unwrap();
        let mut iter = reader.iter_from(1);
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "READY").unwrap();
        stdout.flush().unwrap();
        // A guard against hanging, not a speed requirement.
        let deadline = Instant::now() + Duration::from_secs(900);
        let mut seen = 0;
        while seen < expected && Instant::now() < deadline {
            if let Some(record) = iter.wait_next(Duration::from_millis(200)) {
                let record = record.unwrap();
                writeln!(
                    stdout,
                    "GOT {} {}",
                    record.lsn,
                    String::from_utf8(record.payload).unwrap()
                )
                .unwrap();
                stdout.flush().unwrap();
                seen += 1;
            }
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), common::small_segments()).unwrap();
    log.append(&[b"before the reader started"]).unwrap();
    let count = 300u64;
    let mut child = spawn_role(
        "a_reader_in_another_process_follows_a_writer",
        "follower",
        &[
            ("CONVLOG_TEST_STORE", dir.path().display().to_string()),
            ("CONVLOG_TEST_EXPECTED", count.to_string()),
        ],
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("follower exited early").unwrap();
        if line == "READY" {
            break;
        }
    }
    for index in 1..count {
        log.append(&[format!("event {index}")
            .repeat(1 + index as usize % 20)
            .as_bytes()])
            .unwrap();
        if index % 50 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let got: Vec<String> = lines
        .map_while(Result::ok)
        .filter(|line| line.starts_with("GOT "))
        .collect();
    child.wait().unwrap();
    assert_eq!(got.len() as u64, count, "the follower saw every record");
    assert!(
        common::segment_paths(dir.path()).len() > 3,
        "the follower crossed segment rolls"
    );
    for (index, line) in got.iter().enumerate() {
        let expected = if index == 0 {
            "before the reader started".to_string()
        } else {
            format!("event {index}").repeat(1 + index % 20)
        };
        assert_eq!(line, &format!("GOT {} {expected}", index + 1));
    }
}

#[test]
fn a_second_writer_in_another_process_gets_locked() {
    if role().as_deref() == Some("second-writer") {
        let outcome = match Log::open(store_from_env(), LogOptions::default()) {
            Err(Error::Locked { path }) => format!("LOCKED {}", path.display()),
            Err(other) => format!("ERROR {other}"),
            Ok(_) => "OPENED".to_string(),
        };
        println!("{outcome}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.append(&[b"held"]).unwrap();
    let run_child = || {
        let child = spawn_role(
            "a_second_writer_in_another_process_gets_locked",
            "second-writer",
            &[("CONVLOG_TEST_STORE", dir.path().display().to_string())],
        );
        let output = child.wait_with_output().unwrap();
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .find(|line| {
                line.starts_with("LOCKED")
                    || line.starts_with("OPENED")
                    || line.starts_with("ERROR")
            })
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(run_child(), format!("LOCKED {}", dir.path().display()));
    // Readers need no lock, even while the writer holds it.
    assert_eq!(read_all(dir.path()).len(), 1);
    drop(log);
    assert_eq!(run_child(), "OPENED");
}
