//! The writer: group commit under concurrency, the one-writer lock, limits,
//! and poisoning after an I/O failure.

mod common;

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{read_all, small_segments};
use convlog::log::format::{BATCH_EVENTS_MAX, EVENT_BYTES_MAX};
use convlog::log::{Durability, Log, LogOptions};
use convlog::storage::StorageFile;
use convlog::Error;

fn concurrent_appends(options: LogOptions, threads: usize, per_thread: usize) {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(dir.path(), options.clone()).unwrap());
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut acknowledged = Vec::new();
                for index in 0..per_thread {
                    let payload = format!("thread {thread} event {index} ").repeat(1 + index % 5);
                    if index % 7 == 0 {
                        let batch = [payload.clone(), format!("{payload} second")];
                        let lsns = log.append(&batch).unwrap();
                        assert_eq!(lsns.end - lsns.start, 2);
                        acknowledged.push((lsns.start, batch[0].clone()));
                        acknowledged.push((lsns.start + 1, batch[1].clone()));
                    } else {
                        acknowledged
                            .push((log.append(&[payload.as_bytes()]).unwrap().start, payload));
                    }
                }
                acknowledged
            })
        })
        .collect();
    let mut expected = BTreeMap::new();
    for handle in handles {
        for (lsn, payload) in handle.join().unwrap() {
            assert!(
                expected.insert(lsn, payload).is_none(),
                "LSN {lsn} acknowledged twice"
            );
        }
    }
    // Every acknowledged append is durable when acknowledged.
    assert_eq!(log.durable_lsn(), log.next_lsn());
    let stats = log.writer_stats();
    drop(log);

    let records = read_all(dir.path());
    assert_eq!(
        records.len(),
        expected.len(),
        "no extra and no missing records"
    );
    for (record, (lsn, payload)) in records.iter().zip(&expected) {
        assert_eq!(record.lsn, *lsn, "gap-free LSNs from 1");
        assert_eq!(&record.payload, payload.as_bytes());
    }
    assert_eq!(records.first().map(|record| record.lsn), Some(1));
    assert!(stats.syncs >= 1 && stats.syncs <= stats.frames);
    // Reopening finds the same log, cleanly.
    let reopened = Log::open(dir.path(), options).unwrap();
    assert_eq!(reopened.recovery_report().torn_tail, None);
    assert_eq!(reopened.next_lsn(), expected.len() as u64 + 1);
}

#[test]
fn concurrent_group_appends_are_all_readable_without_gaps_or_duplicates() {
    concurrent_appends(LogOptions::default(), 8, 300);
}

#[test]
fn concurrent_group_appends_across_segment_rolls() {
    concurrent_appends(small_segments(), 8, 200);
}

/// Appenders of every durability and `sync()` callers at once, across
/// rolls: each is woken only by the completion it waits for (or to lead the
/// next commit), so a missed wake-up would hang here.
#[test]
fn concurrent_appends_of_every_durability_and_syncs_all_complete() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(dir.path(), small_segments()).unwrap());
    let policies = [
        Durability::Group,
        Durability::Sync,
        Durability::None,
        Durability::Periodic(Duration::from_millis(5)),
    ];
    let handles: Vec<_> = (0..16)
        .map(|thread| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut acknowledged = Vec::new();
                for index in 0..100 {
                    let payload = format!("thread {thread} event {index} ").repeat(1 + index % 9);
                    let durability = policies[(thread + index) % policies.len()];
                    let lsns = log.append_with(&[payload.as_bytes()], durability).unwrap();
                    if matches!(durability, Durability::Group | Durability::Sync) {
                        assert!(
                            log.durable_lsn() >= lsns.end,
                            "{durability:?} acknowledged before durable"
                        );
                    }
                    if index % 10 == 9 {
                        log.sync().unwrap();
                        assert!(log.durable_lsn() >= lsns.end);
                    }
                    acknowledged.push((lsns.start, payload));
                }
                acknowledged
            })
        })
        .collect();
    let mut expected = BTreeMap::new();
    for handle in handles {
        for (lsn, payload) in handle.join().unwrap() {
            assert!(expected.insert(lsn, payload).is_none(), "LSN {lsn} twice");
        }
    }
    log.sync().unwrap();
    assert_eq!(log.durable_lsn(), log.next_lsn());
    assert!(
        log.writer_stats().rolls > 0,
        "the test crosses segment rolls"
    );
    drop(log);
    let records = read_all(dir.path());
    assert_eq!(records.len(), expected.len());
    for (record, (lsn, payload)) in records.iter().zip(&expected) {
        assert_eq!(record.lsn, *lsn);
        assert_eq!(&record.payload, payload.as_bytes());
    }
}

/// A failed fsync with a whole group parked behind it: every parked
/// appender is woken and refused (none of their frames is durable), none
/// hangs, and nothing refused comes back on reopen.
#[test]
fn a_failed_fsync_wakes_and_refuses_every_appender_parked_behind_it() {
    const APPENDERS: u64 = 16;
    let (dir, gate, log) = gated_log();
    assert_eq!(log.append(&[b"durable"]).unwrap(), 1..2);
    let before = log.writer_stats();
    gate.set_armed(true);
    let append = |log: &Arc<Log>, durability: Durability| {
        let log = Arc::clone(log);
        std::thread::spawn(move || log.append_with(&[[7u8; 300]], durability))
    };
    let mut threads = vec![append(&log, Durability::Group)];
    gate.wait_until(|&(_, waiting)| waiting == 1);
    threads.extend((1..APPENDERS).map(|index| {
        let durability = if index % 2 == 0 {
            Durability::Sync
        } else {
            Durability::Group
        };
        append(&log, durability)
    }));
    while log.writer_stats().frames - before.frames < APPENDERS {
        std::thread::yield_now();
    }
    gate.sync_fails.store(true, Ordering::SeqCst);
    gate.set_armed(false);
    for thread in threads {
        match thread.join().unwrap() {
            Err(Error::Poisoned { cause, .. }) => {
                assert!(cause.contains("the test fails this fsync"), "{cause}")
            }
            other => panic!("expected Poisoned, got {other:?}"),
        }
    }
    assert!(log.is_poisoned());
    assert_eq!(log.taken_back_from(), Some(2));
    drop(log);
    let payloads: Vec<Vec<u8>> = read_all(dir.path())
        .into_iter()
        .map(|record| record.payload)
        .collect();
    assert_eq!(payloads, [b"durable".to_vec()]);
}

#[test]
fn concurrent_sync_appends() {
    let options = LogOptions::new().durability(Durability::Sync);
    concurrent_appends(options, 4, 100);
}

/// A new log in a temporary directory (kept alive by the first value) on
/// the gated storage, with its gate unarmed.
fn gated_log() -> (tempfile::TempDir, Arc<Gate>, Arc<Log>) {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let options = LogOptions::new().storage(Arc::new(common::Hooked(GatedSync {
        gate: Arc::clone(&gate),
    })));
    let log = Arc::new(Log::open(dir.path(), options).unwrap());
    (dir, gate, log)
}

/// A storage whose segment fsyncs can be held at a gate: the test decides
/// when an fsync in flight finishes, so what queues up behind it does not
/// depend on how fast this machine is.
#[derive(Debug)]
struct GatedSync {
    gate: Arc<Gate>,
}

#[derive(Debug, Default)]
struct Gate {
    /// (armed, fsyncs waiting at the gate)
    state: std::sync::Mutex<(bool, u64)>,
    changed: std::sync::Condvar,
    /// The same for segment writes: (armed, writes waiting, writes fail).
    writes: std::sync::Mutex<(bool, u64, bool)>,
    writes_changed: std::sync::Condvar,
    /// Fsyncs fail once released from the gate.
    sync_fails: std::sync::atomic::AtomicBool,
}

impl Gate {
    fn wait_until(&self, mut ready: impl FnMut(&(bool, u64)) -> bool) {
        let mut state = self.state.lock().unwrap();
        while !ready(&state) {
            state = self.changed.wait(state).unwrap();
        }
    }

    fn set_armed(&self, armed: bool) {
        self.state.lock().unwrap().0 = armed;
        self.changed.notify_all();
    }

    /// Holds segment writes at the gate (`armed`), or fails them (`fail`).
    fn set_writes(&self, armed: bool, fail: bool) {
        let mut writes = self.writes.lock().unwrap();
        (writes.0, writes.2) = (armed, fail);
        self.writes_changed.notify_all();
    }

    fn wait_until_writes_wait(&self, count: u64) {
        let mut writes = self.writes.lock().unwrap();
        while writes.1 != count {
            writes = self.writes_changed.wait(writes).unwrap();
        }
    }
}

#[derive(Debug)]
struct GatedFile {
    inner: Box<dyn StorageFile>,
    gate: Arc<Gate>,
}

impl StorageFile for GatedFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        {
            let mut writes = self.gate.writes.lock().unwrap();
            if writes.2 {
                return Err(io::Error::other("the test fails this write"));
            }
            writes.1 += 1;
            self.gate.writes_changed.notify_all();
            while writes.0 {
                writes = self.gate.writes_changed.wait(writes).unwrap();
            }
            writes.1 -= 1;
        }
        self.inner.write_all_at(buf, offset)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        {
            let mut state = self.gate.state.lock().unwrap();
            state.1 += 1;
            self.gate.changed.notify_all();
            while state.0 {
                state = self.gate.changed.wait(state).unwrap();
            }
            state.1 -= 1;
        }
        if self.gate.sync_fails.load(Ordering::SeqCst) {
            return Err(io::Error::other("the test fails this fsync"));
        }
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn size_bytes(&self) -> io::Result<u64> {
        self.inner.size_bytes()
    }
}

impl common::FsHooks for GatedSync {
    fn wrap_written(&self, inner: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        Box::new(GatedFile {
            inner,
            gate: Arc::clone(&self.gate),
        })
    }
}

/// Arms the gate, starts `appenders` appenders of one `payload` event each
/// and returns, with the gate still armed, their threads (each yielding its
/// event's LSN) and when the first of them was seen held inside its fsync:
/// from then on every other appender frames its event and waits behind
/// that fsync, and this returns once all of them have.
fn queue_behind_a_held_fsync(
    log: &Arc<Log>,
    gate: &Gate,
    appenders: u64,
    payload: Vec<u8>,
) -> (Vec<std::thread::JoinHandle<u64>>, std::time::Instant) {
    let frames_before = log.writer_stats().frames;
    gate.set_armed(true);
    let append = || {
        let (log, payload) = (Arc::clone(log), payload.clone());
        std::thread::spawn(move || log.append(&[payload]).unwrap().start)
    };
    let mut threads = vec![append()];
    gate.wait_until(|&(_, waiting)| waiting == 1);
    let held_from = std::time::Instant::now();
    threads.extend((1..appenders).map(|_| append()));
    while log.writer_stats().frames - frames_before < appenders {
        std::thread::yield_now();
    }
    (threads, held_from)
}

/// Group commit, shown without relying on timing: the first appender's
/// fsync is held at a gate until every other appender has queued its frame;
/// then the whole queue must go out in one write and one fsync.
#[test]
fn group_commit_shares_fsyncs_between_concurrent_appenders() {
    const APPENDERS: u64 = 32;
    let (_dir, gate, log) = gated_log();
    let before = log.writer_stats();
    let (threads, _) = queue_behind_a_held_fsync(&log, &gate, APPENDERS, vec![7u8; 300]);
    gate.set_armed(false);
    let mut lsns: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    lsns.sort_unstable();
    assert_eq!(lsns, (1..=APPENDERS).collect::<Vec<_>>());
    let stats = log.writer_stats();
    assert_eq!(stats.frames - before.frames, APPENDERS);
    assert_eq!(
        (stats.writes - before.writes, stats.syncs - before.syncs),
        (2, 2),
        "the 31 appenders queued behind the held fsync share one write and one fsync: {stats:?}"
    );
}

/// The commit-cycle counters (`WriterStats::commit_io_nanos` and the
/// rest) account for where a cycle's time goes: a commit held inside its
/// fsync by the test counts at least the time it was held as I/O; the
/// time from its end to the next commit's I/O counts as the gap, the
/// group fill wait inside it; and a lone appender never waits to fill.
#[test]
fn commit_cycle_counters_account_for_the_time_a_commit_is_held() {
    const APPENDERS: u64 = 8;
    let (_dir, gate, log) = gated_log();
    let before = log.writer_stats();
    let (threads, held_from) = queue_behind_a_held_fsync(&log, &gate, APPENDERS, vec![5u8; 200]);
    let held = held_from.elapsed();
    gate.set_armed(false);
    for thread in threads {
        thread.join().unwrap();
    }
    let stats = log.writer_stats();
    assert_eq!(stats.syncs - before.syncs, 2, "{stats:?}");
    let io = Duration::from_nanos(stats.commit_io_nanos - before.commit_io_nanos);
    assert!(
        io >= held,
        "the held commit's I/O is counted: {io:?} counted, held {held:?}"
    );
    // Two commits: one gap between them. The second commit's leader may
    // have held its write back for the first appender to append again
    // (it released it), which it never does here: at most one fill, and
    // its wait lies inside the gap.
    let gap = stats.commit_gap_nanos - before.commit_gap_nanos;
    assert!(gap > 0, "{stats:?}");
    assert!(stats.fills - before.fills <= 1, "{stats:?}");
    assert!(
        stats.fill_wait_nanos - before.fill_wait_nanos <= gap,
        "{stats:?}"
    );
    // A lone appender never waits to fill: its own frame is the one
    // arrival its last commit released (after its first commit, whose
    // leader may still wait for the appenders the burst above released).
    log.append(&[[0xAA; 100]]).unwrap();
    let stats = log.writer_stats();
    for index in 0..20u8 {
        log.append(&[[index; 100]]).unwrap();
    }
    let lone = log.writer_stats();
    assert_eq!(lone.fills, stats.fills, "{lone:?}");
    assert_eq!(lone.syncs - stats.syncs, 20, "{lone:?}");
    assert!(lone.fill_timeouts <= lone.fills);
}

#[test]
fn a_second_writer_in_the_same_process_gets_locked() {
    let dir = tempfile::tempdir().unwrap();
    let first = Log::open(dir.path(), LogOptions::default()).unwrap();
    match Log::open(dir.path(), LogOptions::default()) {
        Err(Error::Locked { path }) => assert_eq!(path, dir.path()),
        other => panic!("expected Locked, got {other:?}"),
    }
    let message = Log::open(dir.path(), LogOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        message.contains(&dir.path().display().to_string()),
        "{message}"
    );
    drop(first);
    Log::open(dir.path(), LogOptions::default()).expect("the lock is released on drop");
}

#[test]
fn limits_are_checked_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.append(&[b"kept"]).unwrap();

    let too_big = vec![0u8; EVENT_BYTES_MAX + 1];
    match log.append(&[&too_big]) {
        Err(Error::LimitExceeded {
            constant, actual, ..
        }) => {
            assert_eq!(constant, "EVENT_BYTES_MAX");
            assert_eq!(actual, too_big.len() as u64);
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    let too_many = vec![b"x".as_slice(); BATCH_EVENTS_MAX + 1];
    assert!(matches!(
        log.append(&too_many),
        Err(Error::LimitExceeded {
            constant: "BATCH_EVENTS_MAX",
            ..
        })
    ));
    let empty: [&[u8]; 0] = [];
    assert!(matches!(log.append(&empty), Err(Error::EmptyBatch)));
    let five_big = vec![vec![0u8; EVENT_BYTES_MAX]; 5];
    assert!(matches!(
        log.append(&five_big),
        Err(Error::LimitExceeded {
            constant: "BATCH_BYTES_MAX",
            ..
        })
    ));
    assert!(!log.is_poisoned(), "bad input does not poison the writer");
    assert_eq!(log.append(&[b"still fine"]).unwrap(), 2..3);
    drop(log);
    let payloads: Vec<_> = read_all(dir.path())
        .into_iter()
        .map(|record| record.payload)
        .collect();
    assert_eq!(payloads, [b"kept".to_vec(), b"still fine".to_vec()]);

    let bad_segment = LogOptions::new().segment_bytes_max(10);
    let error = Log::open(tempfile::tempdir().unwrap().path(), bad_segment).unwrap_err();
    assert!(error.to_string().contains("SEGMENT_BYTES_MIN"), "{error}");
}

#[test]
fn a_frame_larger_than_a_segment_gets_a_segment_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_segments()).unwrap();
    log.append(&[b"small"]).unwrap();
    let big = vec![42u8; 20_000];
    log.append(&[&big]).unwrap();
    log.append(&[b"small again"]).unwrap();
    drop(log);
    let records = read_all(dir.path());
    assert_eq!(records[1].payload, big);
    assert_eq!(common::segment_paths(dir.path()).len(), 3);
}

#[test]
fn periodic_and_none_appends_become_durable_on_sync_and_on_close() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions::new().durability(Durability::Periodic(Duration::from_millis(5)));
    let log = Log::open(dir.path(), options).unwrap();
    assert_eq!(log.periodic_sync_interval(), Some(Duration::from_millis(5)));
    let lsn = log.append(&[b"periodic"]).unwrap().start;
    // The background thread syncs it, however long a loaded machine takes.
    wait_until_durable(&log, lsn);
    let none = log.append_with(&[b"none"], Durability::None).unwrap().start;
    assert!(
        log.durable_lsn() <= none,
        "a None append is acknowledged before it is durable"
    );
    log.sync().unwrap();
    assert_eq!(log.durable_lsn(), none + 1);
}

/// Waits, with no time limit, until `lsn` is durable: only a sync that
/// nobody but the periodic thread issues can end the wait.
fn wait_until_durable(log: &Log, lsn: u64) {
    while log.durable_lsn() <= lsn {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_periodic_append_on_a_log_with_another_default_is_synced_by_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.append(&[b"group"]).unwrap();
    let syncs = log.writer_stats().syncs;
    let lsn = log
        .append_with(
            &[b"periodic"],
            Durability::Periodic(Duration::from_millis(1)),
        )
        .unwrap()
        .start;
    wait_until_durable(&log, lsn);
    assert!(log.writer_stats().syncs > syncs);
}

#[test]
fn the_periodic_thread_starts_at_the_first_periodic_append_and_runs_at_the_shortest_interval() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.append_with(&[b"none"], Durability::None).unwrap();
    assert_eq!(log.periodic_sync_interval(), None);
    let hour = Duration::from_secs(3600);
    log.append_with(&[b"hourly"], Durability::Periodic(hour))
        .unwrap();
    assert_eq!(log.periodic_sync_interval(), Some(hour));
    // A longer interval does not slow it down ...
    log.append_with(&[b"daily"], Durability::Periodic(24 * hour))
        .unwrap();
    assert_eq!(log.periodic_sync_interval(), Some(hour));
    // ... a shorter one speeds it up at once, even mid-wait.
    let lsn = log
        .append_with(
            &[b"often".as_slice()],
            Durability::Periodic(Duration::from_millis(1)),
        )
        .unwrap()
        .start;
    assert_eq!(log.periodic_sync_interval(), Some(Duration::from_millis(1)));
    wait_until_durable(&log, lsn);
}

#[test]
fn a_periodic_positioned_append_as_the_store_makes_is_synced_by_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let lsns = log
        .append_with(
            &[b"store event".as_slice()],
            Durability::Periodic(Duration::from_millis(1)),
        )
        .unwrap();
    assert_eq!(log.periodic_sync_interval(), Some(Duration::from_millis(1)));
    wait_until_durable(&log, lsns.start);
}

#[test]
fn a_zero_periodic_interval_is_refused_per_append() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let error = log
        .append_with(&[b"never"], Durability::Periodic(Duration::ZERO))
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::InvalidOption {
                option: "durability",
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(log.next_lsn(), 1, "nothing was appended");
    assert_eq!(log.periodic_sync_interval(), None);
}

/// A storage that fails the n-th `sync_data` (counted across all files).
#[derive(Debug)]
struct FailingSync {
    syncs_left: Arc<AtomicU64>,
}

#[derive(Debug)]
struct FailingFile {
    inner: Box<dyn StorageFile>,
    syncs_left: Arc<AtomicU64>,
}

impl StorageFile for FailingFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        let left = self.syncs_left.fetch_sub(1, Ordering::SeqCst);
        if left == 1 {
            return Err(io::Error::other("injected EIO on fdatasync"));
        }
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn size_bytes(&self) -> io::Result<u64> {
        self.inner.size_bytes()
    }
}

impl common::FsHooks for FailingSync {
    fn wrap_written(&self, file: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        Box::new(FailingFile {
            inner: file,
            syncs_left: Arc::clone(&self.syncs_left),
        })
    }
}

#[test]
fn a_failed_fsync_poisons_the_writer_and_what_it_refused_never_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let syncs_left = Arc::new(AtomicU64::new(4));
    let options = LogOptions::new().storage(Arc::new(common::Hooked(FailingSync {
        syncs_left: Arc::clone(&syncs_left),
    })));
    let log = Log::open(dir.path(), options).unwrap();
    let mut acknowledged = Vec::new();
    let failure = loop {
        let payload = format!("event {}", acknowledged.len());
        match log.append(&[payload.as_bytes()]) {
            Ok(lsns) => acknowledged.push((lsns.start, payload)),
            Err(error) => break error,
        }
    };
    assert!(failure.to_string().contains("injected EIO"), "{failure}");
    assert!(log.is_poisoned());
    // Never retry and then acknowledge: every later append and sync fails.
    syncs_left.store(u64::MAX, Ordering::SeqCst);
    for _ in 0..3 {
        match log.append(&[b"after the failure"]) {
            Err(Error::Poisoned { store, cause }) => {
                assert_eq!(store, dir.path());
                assert!(cause.contains("injected EIO"), "{cause}");
            }
            other => panic!("expected Poisoned, got {other:?}"),
        }
    }
    assert!(matches!(log.sync(), Err(Error::Poisoned { .. })));
    drop(log);

    // Reopened: exactly what was acknowledged, nothing refused.
    let reopened = Log::open(dir.path(), LogOptions::default()).unwrap();
    let records: Vec<_> = reopened
        .iter_from(1)
        .map(|record| record.unwrap())
        .collect();
    let got: Vec<(u64, String)> = records
        .into_iter()
        .map(|record| (record.lsn, String::from_utf8(record.payload).unwrap()))
        .collect();
    assert_eq!(got, acknowledged);
    assert_eq!(
        reopened.append(&[b"after reopen"]).unwrap().start,
        acknowledged.len() as u64 + 1
    );
}

/// Frames an fsync made durable are acknowledged even when the next write
/// fails: the write's appender is refused and poisons the writer, the
/// fsync's appenders (woken when it completes) are not. (With the former
/// `pipelined` option this was a regression found by the crash simulation,
/// seed 719; without pipelining the write waits for the fsync.) Every step
/// is held at a gate, so nothing depends on timing.
#[test]
fn frames_an_fsync_made_durable_are_acknowledged_though_the_next_write_failed() {
    let (dir, gate, log) = gated_log();
    let frames_before = log.writer_stats().frames;
    let append = |payload: &'static [u8], durability: Durability| {
        let log = Arc::clone(&log);
        std::thread::spawn(move || log.append_with(&[payload], durability))
    };
    // `a` is being written (held); `x` and `y` queue behind that write.
    gate.set_writes(true, false);
    let a = append(b"a", Durability::None);
    gate.wait_until_writes_wait(1);
    let x = append(b"x", Durability::Group);
    let y = append(b"y", Durability::Group);
    while log.writer_stats().frames - frames_before < 3 {
        std::thread::yield_now();
    }
    // `a` is written, then `x` and `y` in one write; one of their appenders
    // leads the fsync of all three (held), the other waits for it.
    gate.set_armed(true);
    gate.set_writes(false, false);
    gate.wait_until(|&(_, waiting)| waiting == 1);
    // `c` queues behind that fsync; its write will fail.
    gate.set_writes(false, true);
    let c = append(b"c", Durability::None);
    while log.writer_stats().frames - frames_before < 4 {
        std::thread::yield_now();
    }
    gate.set_armed(false);
    assert!(matches!(c.join().unwrap(), Err(Error::Poisoned { .. })));
    assert!(log.is_poisoned());
    assert_eq!(a.join().unwrap().unwrap(), 1..2);
    let x = x.join().unwrap();
    let y = y.join().unwrap();
    assert!(
        x.is_ok() && y.is_ok(),
        "both frames are durable, so both are acknowledged: x {x:?}, y {y:?}"
    );
    drop(log);
    let mut payloads: Vec<Vec<u8>> = read_all(dir.path())
        .into_iter()
        .map(|record| record.payload)
        .collect();
    payloads[1..].sort();
    assert_eq!(payloads, [b"a".to_vec(), b"x".to_vec(), b"y".to_vec()]);
}

/// Durable appenders parked behind an fsync wait together on their pending
/// buffer's gate, and the gate follows the buffer: here a `None` appender
/// with a lower LSN leads the next commit and only writes the buffer, so
/// the group's frames are written but not durable. Each `Group` appender
/// must still return only once its frame is durable, and none may be left
/// parked: the next fsync (led by the group's first appender) opens the
/// gate. A gate lost on the way would hang this test.
#[test]
fn a_group_written_by_a_none_leader_is_acknowledged_by_the_next_fsync() {
    const GROUP: u64 = 8;
    let (_dir, gate, log) = gated_log();
    let before = log.writer_stats();
    let append = |payload: Vec<u8>, durability: Durability| {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let lsns = log.append_with(&[payload], durability).unwrap();
            // Read at once: a `Group` append returns durable or not at all.
            (lsns, log.durable_lsn())
        })
    };
    let wait_for_frames = |count: u64| {
        while log.writer_stats().frames - before.frames < count {
            std::thread::yield_now();
        }
    };
    // The first appender's fsync is held at the gate.
    gate.set_armed(true);
    let first = append(b"first".to_vec(), Durability::Group);
    gate.wait_until(|&(_, waiting)| waiting == 1);
    // Behind it: a `None` appender (the lowest LSN waiting), then a group.
    let none = append(b"none".to_vec(), Durability::None);
    wait_for_frames(2);
    let group: Vec<_> = (0..GROUP)
        .map(|index| {
            let thread = append(format!("group {index}").into_bytes(), Durability::Group);
            wait_for_frames(3 + index);
            thread
        })
        .collect();
    gate.set_armed(false);
    let (lsns, durable) = first.join().unwrap();
    assert!(durable >= lsns.end);
    assert_eq!(none.join().unwrap().0, 2..3);
    let mut acknowledged = Vec::new();
    for thread in group {
        let (lsns, durable) = thread.join().unwrap();
        assert!(
            durable >= lsns.end,
            "a Group append at {lsns:?} returned with durable LSN {durable}"
        );
        acknowledged.push(lsns.start);
    }
    acknowledged.sort_unstable();
    assert_eq!(acknowledged, (3..3 + GROUP).collect::<Vec<_>>());
    let stats = log.writer_stats();
    assert_eq!(
        (stats.writes - before.writes, stats.syncs - before.syncs),
        (2, 2),
        "the first append's write and fsync, then the `None` leader's write of \
         the rest, then one fsync for the group: {stats:?}"
    );
}
