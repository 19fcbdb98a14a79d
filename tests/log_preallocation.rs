//! Segment preallocation (issue 15): the writer allocates the active
//! segment's space ahead of its frames, so a segment file's length is not
//! the end of its data. Recovery, readers and `verify` find the end by the
//! frames; every sealed segment ends at its last frame; a crash anywhere in
//! an allocation or a roll loses nothing acknowledged.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{data_end, read_all, segment_paths, small_segments, writable_segment_maps};
use convlog::log::recovery::POISONED_MARKER;
use convlog::log::{Durability, Log, LogOptions, LogReader, ReaderOptions};
use convlog::storage::sim::SimStorage;
use convlog::storage::Storage;

fn payload(index: usize) -> Vec<u8> {
    format!("event {index} ").repeat(1 + index % 5).into_bytes()
}

/// What a writer killed mid-run leaves: the active segment with space
/// allocated past its last frame (zeros), as a clean close no longer does.
fn leave_allocated_space(segment: &Path) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment)
        .unwrap();
    file.set_len(1 << 20).unwrap();
}

#[test]
fn a_reopened_log_writes_on_into_its_preallocated_space() {
    let dir = tempfile::tempdir().unwrap();
    let segment;
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        for index in 0..10 {
            log.append_with(&[payload(index)], Durability::Sync)
                .unwrap();
        }
        segment = segment_paths(dir.path())[0].clone();
        assert!(
            std::fs::metadata(&segment).unwrap().len() > data_end(&segment),
            "space is allocated ahead of the frames while the log is open"
        );
    }
    let end = data_end(&segment);
    leave_allocated_space(&segment);
    // A directory reader stops at the frames' end, quietly.
    assert_eq!(read_all(dir.path()).len(), 10);
    let report = convlog::log::verify(dir.path()).unwrap();
    assert_eq!((report.torn_tail, report.events), (None, 10));

    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    // The zeros after the frames are not a torn tail: nothing is cut and no
    // fresh segment is started.
    assert_eq!(log.recovery_report().torn_tail, None);
    assert_eq!(segment_paths(dir.path()).len(), 1);
    assert_eq!(log.append(&[b"after the reopen"]).unwrap(), 11..12);
    drop(log);
    let records = read_all(dir.path());
    assert_eq!(records.len(), 11);
    assert_eq!(records[10].payload, b"after the reopen");
    assert_eq!(records[10].position.offset, end);
}

#[test]
fn a_clean_close_gives_the_allocated_space_back() {
    let dir = tempfile::tempdir().unwrap();
    for durability in [Durability::Sync, Durability::Group, Durability::None] {
        {
            let log = Log::open(dir.path(), LogOptions::default()).unwrap();
            log.append_with(&[payload(1)], durability).unwrap();
            let segment = segment_paths(dir.path())[0].clone();
            assert!(std::fs::metadata(&segment).unwrap().len() > data_end(&segment));
        }
        let segment = segment_paths(dir.path())[0].clone();
        assert_eq!(
            std::fs::metadata(&segment).unwrap().len(),
            data_end(&segment),
            "a closed store takes the room of its frames ({durability:?})"
        );
    }
    assert_eq!(read_all(dir.path()).len(), 3);
}

#[test]
fn every_sealed_segment_ends_at_its_last_frame() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), small_segments()).unwrap();
        for index in 0..600 {
            log.append(&[payload(index)]).unwrap();
        }
        assert!(log.writer_stats().rolls > 5);
    }
    let segments = segment_paths(dir.path());
    for sealed in &segments[..segments.len() - 1] {
        assert_eq!(
            std::fs::metadata(sealed).unwrap().len(),
            data_end(sealed),
            "{}",
            sealed.display()
        );
    }
    let report = convlog::log::verify(dir.path()).unwrap();
    assert_eq!(report.events, 600);
    let log = Log::open(dir.path(), small_segments()).unwrap();
    assert_eq!(log.next_lsn(), 601);
    assert_eq!(read_all(dir.path()).len(), 600);
}

#[test]
fn a_segment_sealed_after_a_poisoned_writer_ends_at_its_last_frame() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        for index in 0..5 {
            log.append(&[payload(index)]).unwrap();
        }
    }
    // What a poisoned writer that could not truncate leaves: its marker,
    // and the segment with its preallocated space.
    std::fs::write(dir.path().join(POISONED_MARKER), b"").unwrap();
    let first = segment_paths(dir.path())[0].clone();
    leave_allocated_space(&first);
    assert!(std::fs::metadata(&first).unwrap().len() > data_end(&first));
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        assert_eq!(segment_paths(dir.path()).len(), 2, "a fresh segment");
        log.append(&[b"next"]).unwrap();
    }
    assert_eq!(std::fs::metadata(&first).unwrap().len(), data_end(&first));
    // The sealed segment checks clean on the next open and in verify.
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(log.next_lsn(), 7);
    assert_eq!(convlog::log::verify(dir.path()).unwrap().events, 6);
}

const SIM_DIR: &str = "/store";
const SIM_SEGMENT_BYTES: u64 = 4096;

fn sim_disk(seed: u64) -> SimStorage {
    let storage = SimStorage::new(seed);
    storage.create_dir_all(Path::new(SIM_DIR)).unwrap();
    storage.sync_dir(Path::new("/")).unwrap();
    storage
}

fn sim_options(storage: &SimStorage) -> LogOptions {
    LogOptions::new()
        .segment_bytes_max(SIM_SEGMENT_BYTES)
        .durability(Durability::Sync)
        .storage(Arc::new(storage.clone()))
}

fn sim_records(storage: &SimStorage) -> Vec<Vec<u8>> {
    let options = ReaderOptions::new().storage(Arc::new(storage.clone()));
    LogReader::open_with(SIM_DIR, options)
        .unwrap()
        .iter()
        .map(|record| record.unwrap().payload)
        .collect()
}

/// A power cut at every mutating operation of the appends around a roll
/// (the allocation of the segment's space, the frames and their fdatasyncs, the
/// cut of the space past the last frame, the creation of the next segment
/// and its first allocation), then a power loss with several fates for the
/// unsynced operations: every acknowledged event survives, in order, the
/// log opens and verifies, and goes on.
#[test]
fn a_power_cut_anywhere_around_a_roll_keeps_every_acknowledged_event() {
    /// Appends after the power cut is armed: enough to cross a roll.
    const APPENDS_AFTER: usize = 20;
    /// Arm the cut once the active segment has this little room left.
    const ROOM_BYTES: u64 = 250;
    let mut cuts_exercised = 0;
    for cut in 0..40u64 {
        let storage = sim_disk(cut);
        let mut acknowledged = Vec::new();
        let mut refused = Vec::new();
        {
            let log = Log::open(SIM_DIR, sim_options(&storage)).unwrap();
            // Append until the first roll, then until the second segment
            // is nearly full.
            let mut index = 0;
            loop {
                let segments = sim_segments(&storage);
                let active = storage.file_bytes(segments.last().unwrap()).unwrap();
                let end = convlog::log::recovery::scan_segment(&active, true)
                    .unwrap()
                    .valid_bytes;
                if segments.len() == 2 && end + ROOM_BYTES > SIM_SEGMENT_BYTES {
                    break;
                }
                let next = payload(index);
                log.append(&[&next]).unwrap();
                acknowledged.push(next);
                index += 1;
            }
            // Cut the power `cut` operations from here and append through
            // the next roll.
            storage.power_cut_after(cut);
            let rolls = log.writer_stats().rolls;
            for extra in 0..APPENDS_AFTER {
                let next = payload(index + extra);
                match log.append(&[&next]) {
                    Ok(_) => acknowledged.push(next),
                    Err(_) => {
                        refused.push(next);
                        break;
                    }
                }
                if log.writer_stats().rolls > rolls + 1 {
                    break;
                }
            }
        }
        if storage.is_powered_off() {
            cuts_exercised += 1;
        }
        for crash_seed in 0..8 {
            let crashed = storage.crash(crash_seed * 1000 + cut);
            let log = Log::open(SIM_DIR, sim_options(&crashed))
                .unwrap_or_else(|error| panic!("cut {cut} seed {crash_seed}: {error}"));
            let records: Vec<Vec<u8>> = log
                .iter_from(1)
                .map(|record| record.unwrap().payload)
                .collect();
            assert!(
                records.len() >= acknowledged.len(),
                "cut {cut} seed {crash_seed}: {} records, {} acknowledged",
                records.len(),
                acknowledged.len()
            );
            assert_eq!(records[..acknowledged.len()], acknowledged[..]);
            // Only the refused append may have reached the disk beyond them.
            assert!(records.len() <= acknowledged.len() + refused.len());
            log.append(&[b"after the crash"]).unwrap();
            drop(log);
            let records = sim_records(&crashed);
            assert_eq!(records.last().unwrap(), b"after the crash");
            // Every sealed segment ends at its last frame.
            let segments = sim_segments(&crashed);
            for sealed in &segments[..segments.len() - 1] {
                let bytes = crashed.file_bytes(sealed).unwrap();
                let scan = convlog::log::recovery::scan_segment(&bytes, false).unwrap();
                assert_eq!(
                    scan.valid_bytes,
                    bytes.len() as u64,
                    "cut {cut} seed {crash_seed}: {}",
                    sealed.display()
                );
            }
        }
    }
    assert!(
        cuts_exercised > 10,
        "the power cuts fell inside the appends"
    );
}

fn sim_segments(storage: &SimStorage) -> Vec<PathBuf> {
    let mut names: Vec<String> = storage
        .list_dir(Path::new(SIM_DIR))
        .unwrap()
        .into_iter()
        .filter(|name| name.ends_with(".seg"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| Path::new(SIM_DIR).join(name))
        .collect()
}

/// Issue 15, `None` at the disk's limit: on the real file system the
/// frames go into a writable shared map of the active segment's allocated
/// space (no system call per append). Readers see them before any fsync,
/// no sealed segment stays mapped, and a reopened segment is mapped again
/// from its start.
#[test]
fn none_appends_go_through_a_map_of_the_active_segment_only() {
    let dir = tempfile::tempdir().unwrap();
    let options = || {
        LogOptions::new()
            .durability(Durability::None)
            .segment_bytes_max(64 * 1024)
    };
    let canonical = |paths: Vec<PathBuf>| -> Vec<PathBuf> {
        paths
            .iter()
            .map(|path| path.canonicalize().unwrap())
            .collect()
    };
    let log = Log::open(dir.path(), options()).unwrap();
    let mut expected = Vec::new();
    for index in 0..4000 {
        log.append(&[payload(index)]).unwrap();
        expected.push(payload(index));
    }
    let segments = canonical(segment_paths(dir.path()));
    assert!(segments.len() >= 3, "the appends rolled: {segments:?}");
    if cfg!(target_os = "linux") {
        assert_eq!(
            writable_segment_maps("self", dir.path()),
            segments[segments.len() - 1..],
            "only the active segment is mapped for writing"
        );
    }
    // Nothing synced since the last roll: a reader reads it all anyway.
    let records: Vec<Vec<u8>> = read_all(dir.path())
        .into_iter()
        .map(|record| record.payload)
        .collect();
    assert_eq!(records, expected);
    drop(log);
    assert!(writable_segment_maps("self", dir.path()).is_empty());

    let log = Log::open(dir.path(), options()).unwrap();
    if cfg!(target_os = "linux") {
        assert_eq!(
            writable_segment_maps("self", dir.path()),
            segments[segments.len() - 1..],
            "a reopened active segment is mapped at once"
        );
    }
    log.append(&[b"after the reopen"]).unwrap();
    expected.push(b"after the reopen".to_vec());
    drop(log);
    let records: Vec<Vec<u8>> = read_all(dir.path())
        .into_iter()
        .map(|record| record.payload)
        .collect();
    assert_eq!(records, expected);
    assert!(convlog::log::verify(dir.path())
        .unwrap()
        .torn_tail
        .is_none());
}

/// Under `None` the writer starts the active segment's writeback as it
/// fills (so the fdatasync that seals it finds little left); durable
/// appends fdatasync as they go and start none.
#[test]
fn none_appends_start_writeback_as_the_segment_fills_durable_ones_do_not() {
    for durability in [Durability::None, Durability::Sync, Durability::Group] {
        let storage = sim_disk(3);
        let log = Log::open(SIM_DIR, sim_options(&storage).durability(durability)).unwrap();
        for index in 0..300 {
            log.append(&[payload(index)]).unwrap();
        }
        let rolls = log.writer_stats().rolls;
        drop(log);
        let hints = storage.stats().writeback_hints;
        assert!(rolls >= 3, "{durability:?}: {rolls} rolls");
        if durability == Durability::None {
            // A quarter of a 4 KiB segment per hint, a quarter behind the
            // last write: at least one per segment filled.
            assert!(
                hints >= rolls,
                "{durability:?}: {hints} hints, {rolls} rolls"
            );
        } else {
            assert_eq!(hints, 0, "{durability:?}");
        }
        assert_eq!(sim_records(&storage).len(), 300);
    }
}

/// Durable commits on the real file system: a background thread prepares
/// the active segment's space ahead of the frames (the file grows past the
/// writer's own 1 MiB allocation steps, with zeros), the commits are direct
/// writes that readers in the process and from the directory see, the
/// segment rolls with its prepared space cut, and a clean close cuts the
/// active one too.
#[test]
fn durable_commits_write_into_space_prepared_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let options = || LogOptions::new().segment_bytes_max(6 << 20);
    let frame = |index: usize| {
        let mut bytes = vec![(index % 251) as u8 | 1; 700];
        bytes[..8].copy_from_slice(&(index as u64).to_le_bytes());
        bytes
    };
    let mut appended = 0;
    {
        let log = Log::open(dir.path(), options()).unwrap();
        let segment = segment_paths(dir.path())[0].clone();
        // Wait on the state the thread leaves, not on time: the file
        // reaches past the writer's own allocation step.
        let mut prepared = false;
        while !prepared {
            assert!(
                appended < 10_000,
                "no space was prepared ahead of the frames"
            );
            log.append_with(&[frame(appended)], Durability::Sync)
                .unwrap();
            appended += 1;
            let length = std::fs::metadata(&segment).unwrap().len();
            prepared = length >= data_end(&segment) + (2 << 20);
        }
        let bytes = std::fs::read(&segment).unwrap();
        let end = data_end(&segment) as usize;
        assert!(
            bytes[end..].iter().all(|&byte| byte == 0),
            "prepared space is zeros"
        );
        // The newest frame, read back in the process right after its commit.
        let last = log.reader().iter().last().unwrap().unwrap();
        assert_eq!(last.payload, frame(appended - 1));
        while log.writer_stats().rolls == 0 {
            log.append_with(&[frame(appended)], Durability::Group)
                .unwrap();
            appended += 1;
        }
        let sealed = segment_paths(dir.path())[0].clone();
        assert_eq!(std::fs::metadata(&sealed).unwrap().len(), data_end(&sealed));
        for _ in 0..10 {
            log.append_with(&[frame(appended)], Durability::Sync)
                .unwrap();
            appended += 1;
        }
    }
    for segment in segment_paths(dir.path()) {
        assert_eq!(
            std::fs::metadata(&segment).unwrap().len(),
            data_end(&segment)
        );
    }
    let records = read_all(dir.path());
    assert_eq!(records.len(), appended);
    for (index, record) in records.iter().enumerate() {
        assert_eq!(record.payload, frame(index), "record {index}");
    }
}
