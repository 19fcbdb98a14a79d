//! Readers and compaction: a reader that loses segments to compaction keeps
//! reading what it holds (mapped sealed segments, the open last segment), and
//! reports events it can no longer reach as `Error::Compacted` naming the
//! LSNs that are gone. Never a raw I/O error, never a silent skip.
//!
//! Every test is deterministic: the reader is stopped at a known point,
//! segments are deleted, and the reader continues. The case with
//! `convlog compact` in another process is in
//! `crates/cli/tests/reader_compaction.rs`.

use std::path::Path;

use convlog::log::Log;
use convlog::log::{LogReader, Lsn, Record};
use convlog::model::{ConversationEntry, Role};
use convlog::store::Retention;
use convlog::{Error, Store, StoreOptions};

mod common;

use common::{segment_paths, small_segments};

/// The events appended to the store by `store_with_segments`.
const EVENTS: u64 = 120;

fn entry(index: u64) -> convlog::Event {
    ConversationEntry::new(
        "eval-1",
        index,
        Role::User,
        Some(format!(
            "message {index} padded to make segments roll quickly"
        )),
    )
    .recorded_in("ctx_1")
}

fn store_options() -> StoreOptions {
    StoreOptions::new()
        .log(small_segments())
        .retention(Retention::DeleteCoveredBySnapshot)
}

/// A store of `EVENTS` events over many small segments.
fn store_with_segments(dir: &Path) -> Store {
    let store = Store::open(dir, store_options()).unwrap();
    for index in 0..EVENTS {
        store.append(&[entry(index)]).unwrap();
    }
    assert!(segment_paths(dir).len() > 4, "small segments roll");
    store
}

fn assert_gap_free(records: &[Record], from: Lsn, to: Lsn) {
    let lsns: Vec<Lsn> = records.iter().map(|record| record.lsn).collect();
    assert_eq!(lsns, (from..to).collect::<Vec<_>>());
}

#[test]
fn a_directory_reader_keeps_reading_segments_compaction_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_segments(dir.path());
    let reader = LogReader::open(dir.path()).unwrap();
    let mut iter = reader.iter();
    let mut read: Vec<Record> = iter.by_ref().take(3).map(Result::unwrap).collect();

    store.snapshot().unwrap();
    let removed = store.compact().unwrap().removed;
    assert!(
        removed.len() > 2,
        "compaction deleted segments the reader has not reached"
    );
    assert!(removed.iter().all(|path| !path.exists()));

    read.extend(iter.map(Result::unwrap));
    assert_gap_free(&read, 1, EVENTS + 1);
}

#[test]
fn the_writers_reader_keeps_reading_segments_compaction_deletes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), small_segments()).unwrap();
        for _ in 0..EVENTS {
            log.append(&[[b'x'; 200]]).unwrap();
        }
    }
    // Reopened: no reader of this writer has mapped a segment yet.
    let log = Log::open(dir.path(), small_segments()).unwrap();
    let mut iter = log.reader().iter();
    let mut read: Vec<Record> = iter.by_ref().take(3).map(Result::unwrap).collect();

    let removed = log.remove_segments_before(log.next_lsn()).unwrap();
    assert!(removed.len() > 2);
    assert!(removed.iter().all(|path| !path.exists()));

    read.extend(iter.map(Result::unwrap));
    assert_gap_free(&read, 1, EVENTS + 1);
}

/// Appends 300-byte events until the log has `segments` segment files.
fn fill_until_segments(log: &Log, dir: &Path, segments: usize) {
    while segment_paths(dir).len() < segments {
        log.append(&[[b'x'; 300]]).unwrap();
    }
}

#[test]
fn a_reader_keeps_reading_its_last_segment_after_it_is_sealed_and_deleted() {
    for writers_reader in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_segments()).unwrap();
        log.append(&[b"first"]).unwrap();
        let reader = if writers_reader {
            log.reader()
        } else {
            LogReader::open(dir.path()).unwrap()
        };
        let mut iter = reader.iter();
        let mut read: Vec<Record> = iter.by_ref().map(Result::unwrap).collect();
        assert_eq!(read.len(), 1);

        // The writer fills the segment the reader is in, rolls, and
        // compaction deletes that segment before the reader saw the rest.
        let first_segment = log.first_lsn();
        fill_until_segments(&log, dir.path(), 2);
        let end = log.next_lsn();
        let removed = log.remove_segments_before(end).unwrap();
        assert_eq!(
            removed,
            vec![dir
                .path()
                .join(convlog::log::segment::segment_file_name(first_segment))]
        );

        read.extend(iter.map(Result::unwrap));
        assert_gap_free(&read, 1, end);
    }
}

#[test]
fn a_reader_reports_the_gap_when_segments_it_never_held_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_segments()).unwrap();
    log.append(&[b"first"]).unwrap();
    let reader = LogReader::open(dir.path()).unwrap();
    let mut iter = reader.iter();
    assert_eq!(iter.by_ref().count(), 1);

    // Two rolls: the segment after the reader's is sealed and deleted
    // without the reader ever listing it.
    fill_until_segments(&log, dir.path(), 3);
    let paths = segment_paths(dir.path());
    let last_first_lsn: Lsn = paths[2]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let second_first_lsn: Lsn = paths[1]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    log.remove_segments_before(last_first_lsn).unwrap();
    assert_eq!(segment_paths(dir.path()).len(), 1);

    // The rest of the reader's own segment, then the gap, named.
    let rest: Vec<_> = iter.by_ref().collect();
    let (error, events) = rest.split_last().unwrap();
    assert!(events.iter().all(Result::is_ok));
    assert_eq!(events.len() as Lsn, second_first_lsn - 2);
    match error {
        Err(Error::Compacted {
            store,
            first_missing,
            next_present,
        }) => {
            assert_eq!(store, dir.path());
            assert_eq!(*first_missing, second_first_lsn);
            assert_eq!(*next_present, last_first_lsn);
        }
        other => panic!("expected Error::Compacted, got {other:?}"),
    }
    assert!(iter.next().is_none(), "the iterator ends after the gap");
}

#[test]
fn reading_from_before_a_compacted_start_is_a_gap_and_iter_starts_where_the_log_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_segments(dir.path());
    // Readers opened, iterators created but not started.
    let reader = LogReader::open(dir.path()).unwrap();
    let from_one = reader.iter_from(1);
    let from_start = reader.iter();
    let writers_from_one = store.log().reader().unwrap().iter_from(1);

    store.snapshot().unwrap();
    store.compact().unwrap();
    let first_lsn = store.log().first_lsn();
    assert!(first_lsn > 1);

    for iter in [from_one, writers_from_one] {
        let items: Vec<_> = iter.collect();
        assert_eq!(items.len(), 1, "only the error");
        match &items[0] {
            Err(Error::Compacted {
                first_missing,
                next_present,
                ..
            }) => assert_eq!((*first_missing, *next_present), (1, first_lsn)),
            other => panic!("expected Error::Compacted, got {other:?}"),
        }
    }
    let records: Vec<Record> = from_start.map(Result::unwrap).collect();
    assert_gap_free(&records, first_lsn, EVENTS + 1);
    let message = Error::Compacted {
        store: dir.path().to_path_buf(),
        first_missing: 1,
        next_present: first_lsn,
    }
    .to_string();
    assert!(
        message.contains(&format!("from LSN 1 to {}", first_lsn - 1)),
        "{message}"
    );
}
