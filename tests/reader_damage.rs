//! Readers and damage: a read that stops before the writer's durable end at
//! a frame that fails its checks is `Error::Corrupted` (segment, offset),
//! never a quiet end of the log; a torn tail (nothing proves it durable)
//! still ends a read quietly, as recovery would cut it.
//!
//! Damage is placed between two frames' start offsets found through the
//! library (`Record::position`), never from the segment header's layout.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use convlog::log::Log;
use convlog::log::{LogOptions, LogReader, Record};
use convlog::{Durability, Error};

mod common;

use common::{segment_paths, small_segments};

/// Events appended one per frame.
const EVENTS: u64 = 200;

fn payload(index: u64) -> Vec<u8> {
    format!("event {index:04} with a little padding to give frames some size").into_bytes()
}

/// A store of `EVENTS` single-event frames appended with `durability`.
fn store_with_events(dir: &Path, options: LogOptions, durability: Durability) {
    let log = Log::open(dir, options).unwrap();
    for index in 0..EVENTS {
        log.append_with(&[payload(index)], durability).unwrap();
    }
}

fn records(dir: &Path) -> Vec<Record> {
    LogReader::open(dir)
        .unwrap()
        .iter()
        .collect::<convlog::Result<_>>()
        .unwrap()
}

/// Flips one byte of `path` at `offset`.
fn flip_byte(path: &Path, offset: u64) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, offset).unwrap();
    byte[0] ^= 0xff;
    file.write_all_at(&byte, offset).unwrap();
    file.sync_all().unwrap();
}

/// Flips a byte in the middle of the frame holding `lsn` (which must be
/// followed by another frame in the same segment); returns its segment
/// path and start offset.
fn damage_frame(dir: &Path, lsn: u64) -> (std::path::PathBuf, u64) {
    let all = records(dir);
    let record = &all[(lsn - all[0].lsn) as usize];
    let next = &all[(lsn - all[0].lsn) as usize + 1];
    assert_eq!(
        record.position.segment, next.position.segment,
        "the test needs the next frame in the same segment"
    );
    let path = dir.join(convlog::log::segment::segment_file_name(
        record.position.segment,
    ));
    let start = record.position.offset;
    flip_byte(&path, start + (next.position.offset - start) / 2);
    (path, start)
}

/// Reads the whole log; returns the records before the first error and the
/// error.
fn read_until_error(reader: &LogReader) -> (Vec<Record>, Option<Error>) {
    let mut iter = reader.iter();
    let mut good = Vec::new();
    for item in iter.by_ref() {
        match item {
            Ok(record) => good.push(record),
            Err(error) => {
                assert!(
                    iter.next().is_none(),
                    "the iterator ends after reporting {error}"
                );
                return (good, Some(error));
            }
        }
    }
    (good, None)
}

fn assert_corrupted_at(error: Option<Error>, path: &Path, offset: u64) {
    match error {
        Some(Error::Corrupted {
            segment,
            offset: at,
            reason,
        }) => {
            assert_eq!(segment, path, "{reason}");
            assert_eq!(at, offset, "{reason}");
        }
        other => panic!(
            "expected Corrupted at {} offset {offset}, got {other:?}",
            path.display()
        ),
    }
}

#[test]
fn a_directory_read_stops_with_a_located_error_at_damage_in_the_last_segment() {
    let dir = tempfile::tempdir().unwrap();
    store_with_events(dir.path(), LogOptions::default(), Durability::Sync);
    assert_eq!(segment_paths(dir.path()).len(), 1);
    let (path, offset) = damage_frame(dir.path(), 100);

    // Verify and recovery call this corruption (later frames prove the
    // damaged one was durable) ...
    assert!(matches!(
        convlog::log::verify(dir.path()),
        Err(Error::Corrupted { .. })
    ));
    // ... and so does a read, after returning exactly the events before it.
    let reader = LogReader::open(dir.path()).unwrap();
    let (good, error) = read_until_error(&reader);
    assert_eq!(good.len(), 99);
    assert_eq!(good.last().unwrap().lsn, 99);
    assert_corrupted_at(error, &path, offset);

    // Reading from an LSN past the damage meets it on the way.
    let from_later: Vec<_> = reader.iter_from(150).collect();
    assert_eq!(from_later.len(), 1);
    assert!(matches!(from_later[0], Err(Error::Corrupted { offset: at, .. }) if at == offset));
}

#[test]
fn a_directory_read_of_a_damaged_sealed_segment_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    store_with_events(dir.path(), small_segments(), Durability::Sync);
    let paths = segment_paths(dir.path());
    assert!(paths.len() > 3, "small segments roll");
    let (path, offset) = damage_frame(dir.path(), 3);
    assert_eq!(path, paths[0]);
    let (good, error) = read_until_error(&LogReader::open(dir.path()).unwrap());
    assert_eq!(good.len(), 2);
    assert_corrupted_at(error, &path, offset);
}

#[test]
fn a_torn_tail_still_ends_a_directory_read_quietly() {
    let dir = tempfile::tempdir().unwrap();
    store_with_events(dir.path(), LogOptions::default(), Durability::Sync);
    let path = segment_paths(dir.path()).pop().unwrap();
    let all = records(dir.path());

    // Half a frame at the end: what a crash mid-write leaves.
    let last = all.last().unwrap().position.offset;
    let length = common::data_end(&path);
    let mut frame = vec![0u8; (length - last) as usize];
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.read_exact_at(&mut frame, last).unwrap();
    file.write_all_at(&frame[..frame.len() / 2], length)
        .unwrap();
    assert_eq!(records(dir.path()).len() as u64, EVENTS);

    // A damaged last frame: nothing after it proves it was durable.
    flip_byte(&path, last + (length - last) / 2);
    let (good, error) = read_until_error(&LogReader::open(dir.path()).unwrap());
    assert!(error.is_none(), "{error:?}");
    assert_eq!(good.len() as u64, EVENTS - 1);
    let report = convlog::log::verify(dir.path()).unwrap();
    assert_eq!(report.torn_tail, Some((path, last)));
}

#[test]
fn damage_no_later_frame_proves_durable_ends_a_read_where_verify_sees_a_torn_tail() {
    // Under Durability::None nothing is fsynced before close, so every
    // frame carries the watermark of the open: after damage, the frames
    // that follow prove nothing, and recovery would cut the log there.
    let dir = tempfile::tempdir().unwrap();
    store_with_events(dir.path(), LogOptions::default(), Durability::None);
    let (path, offset) = damage_frame(dir.path(), 100);
    let report = convlog::log::verify(dir.path()).unwrap();
    assert_eq!(report.torn_tail, Some((path, offset)));
    let (good, error) = read_until_error(&LogReader::open(dir.path()).unwrap());
    assert!(error.is_none(), "{error:?}");
    assert_eq!(good.len(), 99);
}

#[test]
fn the_writers_own_reader_reports_damage_below_the_published_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    for index in 0..EVENTS {
        log.append(&[payload(index)]).unwrap();
    }
    let (path, offset) = damage_frame(dir.path(), 100);
    let (good, error) = read_until_error(&log.reader());
    assert_eq!(good.len(), 99);
    assert_corrupted_at(error, &path, offset);
}

#[test]
fn a_directory_follower_reads_every_frame_of_a_live_writer_without_false_alarms() {
    // The follower races the writer: it sees frames half written and
    // segments rolling. Whatever it sees, it must neither report damage
    // nor skip anything. No timing is assumed: it reads until it has all.
    const FOLLOWED: u64 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(dir.path(), small_segments()).unwrap());
    let reader = LogReader::open(dir.path()).unwrap();
    let writer = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            for index in 0..FOLLOWED {
                // Batches of varying size; Group and None durability mix
                // frames whose watermarks do and do not cover earlier ones.
                let count = 1 + index % 3;
                let batch: Vec<Vec<u8>> = (0..count).map(|_| payload(index)).collect();
                let durability = if index % 2 == 0 {
                    Durability::Group
                } else {
                    Durability::None
                };
                log.append_with(&batch, durability).unwrap();
            }
        })
    };
    let total: u64 = (0..FOLLOWED).map(|index| 1 + index % 3).sum();
    let mut iter = reader.iter();
    let mut next = 1;
    while next <= total {
        match iter.wait_next(std::time::Duration::from_millis(50)) {
            Some(Ok(record)) => {
                assert_eq!(record.lsn, next, "no event is skipped or repeated");
                next += 1;
            }
            Some(Err(error)) => panic!("false alarm at LSN {next}: {error}"),
            None => {}
        }
    }
    writer.join().unwrap();
}
