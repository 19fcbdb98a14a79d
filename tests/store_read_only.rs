//! `Store::open_read_only`: reading a store beside its writer (another
//! process), following it as it appends, never writing to the directory.
//!
//! The writer runs in a child process started from this test binary (see
//! `common::spawn_role`), driven line by line over its standard input: every
//! step is acknowledged before the test reads, so nothing depends on timing.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use convlog::model::{ConversationEntry, Event, Role};
use convlog::reducer::Reducer;
use convlog::store::{Retention, Store, StoreBuilder, StoreOptions};
use convlog::Error;

use common::{role, small_segments};

fn said(conversation: &str, sequence: u64) -> Event {
    ConversationEntry::new(
        "eval",
        sequence,
        Role::User,
        Some(format!(
            "message {sequence} of {conversation}, padded to fill segments quickly"
        )),
    )
    .recorded_in(conversation)
}

fn writer_options() -> StoreOptions {
    StoreOptions::new()
        .log(small_segments())
        .retention(Retention::DeleteCoveredBySnapshot)
        .snapshots_kept(1)
}

/// Counts every event (a host reducer).
struct Counter;

impl Reducer for Counter {
    type Slice = u64;
    fn name(&self) -> &str {
        "counter/v1"
    }
    fn apply(&self, count: &mut u64, _event: &Event, _lsn: u64) {
        *count += 1;
    }
}

/// The writer role: opens the store (holding its lock) and runs commands
/// from standard input, answering each with one line.
fn run_writer() {
    let dir = PathBuf::from(std::env::var("CONVLOG_TEST_STORE").unwrap());
    let store = StoreBuilder::new(&dir)
        .options(writer_options())
        .reducer(Counter)
        .open()
        .unwrap();
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "READY").unwrap();
    stdout.flush().unwrap();
    let mut next_sequence: BTreeMap<String, u64> = BTreeMap::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["append", conversation, count] => {
                for _ in 0..count.parse::<u64>().unwrap() {
                    let sequence = next_sequence.entry(conversation.to_string()).or_insert(0);
                    store.append(&[said(conversation, *sequence)]).unwrap();
                    *sequence += 1;
                }
                format!("OK {}", store.log().next_lsn())
            }
            ["compact"] => {
                let snapshot = store.snapshot().unwrap();
                let compacted = store.compact().unwrap();
                format!("OK {} {}", snapshot.lsn, compacted.removed.len())
            }
            ["exit"] => break,
            other => panic!("unknown command {other:?}"),
        };
        writeln!(stdout, "{answer}").unwrap();
        stdout.flush().unwrap();
    }
}

/// A writer process and the pipes that drive it.
struct Writer {
    child: Child,
    input: ChildStdin,
    output: std::io::Lines<BufReader<ChildStdout>>,
}

impl Writer {
    fn start(test_name: &str, dir: &Path) -> Writer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
            .env("CONVLOG_TEST_ROLE", "writer")
            .env("CONVLOG_TEST_STORE", dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut writer = Writer {
            child,
            input,
            output,
        };
        writer.answer_to_start();
        writer
    }

    /// Skips libtest's lines up to the role's `READY`.
    fn answer_to_start(&mut self) {
        for line in self.output.by_ref() {
            if line.unwrap().trim() == "READY" {
                return;
            }
        }
        panic!("the writer exited before it was ready");
    }

    /// Sends a command; returns the words of its answer after `OK`.
    fn run(&mut self, command: &str) -> Vec<u64> {
        writeln!(self.input, "{command}").unwrap();
        self.input.flush().unwrap();
        let line = self.output.next().expect("an answer").unwrap();
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("OK"), "{command}: {line}");
        words.map(|word| word.parse().unwrap()).collect()
    }

    fn exit(mut self) {
        writeln!(self.input, "exit").unwrap();
        drop(self.input);
        assert!(self.child.wait().unwrap().success());
    }
}

#[test]
fn a_read_only_store_follows_a_writer_in_another_process() {
    if role().as_deref() == Some("writer") {
        run_writer();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut writer = Writer::start(
        "a_read_only_store_follows_a_writer_in_another_process",
        dir.path(),
    );
    // The writer holds the lock: a second writer is refused, a reader is not.
    assert!(matches!(
        Store::open(dir.path(), StoreOptions::default()),
        Err(Error::Locked { .. })
    ));
    let reader = StoreBuilder::new(dir.path())
        .reducer(Counter)
        .open_read_only()
        .unwrap();
    assert!(reader.is_read_only());
    assert!(reader.conversation_ids().is_empty());
    let observed = Arc::new(AtomicU64::new(0));
    {
        let observed = Arc::clone(&observed);
        reader.observe::<Counter>(move |_, _, lsn| observed.store(lsn, Ordering::SeqCst));
    }

    assert_eq!(writer.run("append a 3"), vec![4]);
    // Every read catches up first.
    assert_eq!(reader.conversation("a").unwrap().len(), 3);
    assert_eq!(writer.run("append b 2"), vec![6]);
    assert_eq!(reader.refresh().unwrap(), 6);
    assert_eq!(reader.conversation_ids(), vec!["a", "b"]);
    assert_eq!(reader.slice::<Counter>().unwrap(), 5);
    assert_eq!(observed.load(Ordering::SeqCst), 5, "observers follow too");
    let stats = reader.stats();
    assert_eq!((stats.next_lsn, stats.conversations), (6, 2));
    let resumed = reader.resume("b", &Default::default()).unwrap();
    assert_eq!(resumed.entries.len(), 2);
    assert_eq!(resumed.next_sequence, 2);

    // Nothing that writes.
    for (operation, result) in [
        ("append", reader.append(&[said("a", 9)]).map(|_| ())),
        ("snapshot", reader.snapshot().map(|_| ())),
        ("compact", reader.compact().map(|_| ())),
        ("sync", reader.sync()),
    ] {
        match result {
            Err(Error::ReadOnly {
                operation: refused,
                store,
            }) => {
                assert_eq!((refused, store.as_path()), (operation, dir.path()));
            }
            other => panic!("{operation} on a read-only store: {other:?}"),
        }
    }

    // Enough to fill several segments, then a snapshot and a compaction
    // that deletes segments the reader indexed.
    writer.run("append a 120");
    assert_eq!(reader.conversation("a").unwrap().len(), 123);
    let compacted = writer.run("compact");
    let (snapshot_lsn, removed) = (compacted[0], compacted[1]);
    assert!(removed > 0, "compaction removed segments");
    writer.run("append a 1");
    // The read needs frames that are gone: it starts again from the
    // writer's new snapshot.
    let conversation = reader.conversation("a").unwrap();
    assert_eq!(conversation.len(), 124);
    assert_eq!(reader.stats().snapshot_lsn, Some(snapshot_lsn));
    assert_eq!(reader.conversation("b").unwrap().len(), 2);
    assert_eq!(reader.slice::<Counter>().unwrap(), 126);
    writer.exit();
}

/// Every file in `dir` (recursively) with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.insert(path.clone(), Vec::new());
                pending.push(path);
            } else {
                found.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    found
}

#[test]
fn a_read_only_store_writes_nothing_and_starts_where_the_writer_would() {
    let dir = tempfile::tempdir().unwrap();
    let writer_report = {
        let writer = StoreBuilder::new(dir.path())
            .options(writer_options())
            .reducer(Counter)
            .open()
            .unwrap();
        for sequence in 0..40 {
            writer.append(&[said("a", sequence)]).unwrap();
        }
        writer.snapshot().unwrap();
        for sequence in 40..45 {
            writer.append(&[said("a", sequence)]).unwrap();
        }
        writer.append(&[said("b", 0)]).unwrap();
        drop(writer);
        // What a writer's open starts from (then let go of the lock).
        let reopened = StoreBuilder::new(dir.path())
            .options(writer_options())
            .reducer(Counter)
            .open()
            .unwrap();
        reopened.open_report().clone()
    };
    // A leftover of an interrupted snapshot: a writer's open removes it, a
    // reader must not.
    std::fs::write(
        dir.path()
            .join("snapshots")
            .join("00000000000000000099.snap.tmp"),
        b"partial",
    )
    .unwrap();
    let before = files(dir.path());

    let reader = StoreBuilder::new(dir.path())
        .reducer(Counter)
        .open_read_only()
        .unwrap();
    assert_eq!(reader.open_report().snapshot, writer_report.snapshot);
    assert_eq!(
        reader.open_report().replayed_events,
        writer_report.replayed_events
    );
    assert_eq!(reader.conversation("a").unwrap().len(), 45);
    assert_eq!(
        reader
            .resume("b", &Default::default())
            .unwrap()
            .entries
            .len(),
        1
    );
    assert_eq!(reader.slice::<Counter>().unwrap(), 46);
    assert_eq!(reader.stats().conversations, 2);
    assert_eq!(reader.refresh().unwrap(), 47);
    assert!(reader.snapshot().is_err());
    assert!(reader.compact().is_err());
    drop(reader);

    assert_eq!(files(dir.path()), before, "the directory is unchanged");
}

#[test]
fn a_read_only_open_of_what_is_not_a_store_fails_and_creates_nothing() {
    let parent = tempfile::tempdir().unwrap();
    let missing = parent.path().join("missing");
    assert!(matches!(
        Store::open_read_only(&missing, StoreOptions::default()),
        Err(Error::NotAStore { path }) if path == missing
    ));
    assert!(!missing.exists(), "nothing was created");

    let empty = parent.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(
        Store::open_read_only(&empty, StoreOptions::default()),
        Err(Error::NotAStore { .. })
    ));
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);

    let other = parent.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"not a store").unwrap();
    let before = files(&other);
    assert!(matches!(
        Store::open_read_only(&other, StoreOptions::default()),
        Err(Error::NotAStore { .. })
    ));
    assert_eq!(files(&other), before);
}

/// When the writer compacted away what the reader needed and no snapshot
/// can stand in for it (removed by hand), the read fails; it never serves
/// a partial conversation.
#[test]
fn a_read_only_store_reports_what_compaction_took_when_nothing_stands_in() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), writer_options()).unwrap();
    for sequence in 0..60 {
        writer.append(&[said("a", sequence)]).unwrap();
    }
    let reader = Store::open_read_only(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(reader.conversation("a").unwrap().len(), 60);
    let snapshot = writer.snapshot().unwrap();
    assert!(!writer.compact().unwrap().removed.is_empty());
    std::fs::remove_file(&snapshot.path).unwrap();
    match reader.conversation("a") {
        Err(Error::SnapshotRestore { .. } | Error::Compacted { .. }) => {}
        other => panic!("expected the read to fail, got {other:?}"),
    }
}

/// The real file system, counting how often a directory is listed.
#[derive(Debug, Default)]
struct ListingCounter {
    listings: AtomicU64,
}

impl common::FsHooks for ListingCounter {
    fn on_list_dir(&self, _path: &Path) {
        self.listings.fetch_add(1, Ordering::SeqCst);
    }
}

/// Regression: a read-only store listed the store directory (and opened
/// segments again) for every frame it read, so reading a conversation of
/// N frames cost N directory listings (the audit view, which reads every
/// conversation this way, got 2.5-3.5 times slower). Frames of segments a
/// listing already found are read without listing again.
#[test]
fn a_read_only_store_reads_frames_without_listing_the_directory_for_each() {
    const FRAMES: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    {
        let writer = Store::open(dir.path(), StoreOptions::new().log(small_segments())).unwrap();
        for sequence in 0..FRAMES {
            writer.append(&[said("long", sequence)]).unwrap();
        }
    }
    assert!(
        common::segment_paths(dir.path()).len() > 2,
        "the frames span segments"
    );
    let counter = Arc::new(common::Hooked(ListingCounter::default()));
    let reader =
        Store::open_read_only(dir.path(), StoreOptions::new().storage(counter.clone())).unwrap();
    let before = counter.0.listings.load(Ordering::SeqCst);
    let conversation = reader.conversation("long").unwrap();
    let listings = counter.0.listings.load(Ordering::SeqCst) - before;
    assert_eq!(conversation.len() as u64, FRAMES);
    // Catching up with the writer lists the directory once or twice; the
    // frames add nothing.
    assert!(listings <= 4, "{listings} listings to read {FRAMES} frames");
}

/// `Store::next_lsn` answers what `stats().next_lsn` does without walking
/// the index: a follower first catches up with what its writer appended.
#[test]
fn next_lsn_is_the_stats_one_and_a_follower_catches_up_first() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), StoreOptions::default()).unwrap();
    writer.append(&[said("a", 0), said("a", 1)]).unwrap();
    let reader = Store::open_read_only(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(reader.next_lsn(), 3);
    writer.append(&[said("b", 0)]).unwrap();
    writer.append(&[said("a", 2)]).unwrap();
    assert_eq!(writer.next_lsn(), 5);
    assert_eq!(writer.next_lsn(), writer.stats().next_lsn);
    // Without reading anything else first.
    assert_eq!(reader.next_lsn(), 5);
    assert_eq!(reader.stats().next_lsn, 5);
}
