//! Readers and compaction, with `convlog compact` in another process: a
//! reader that loses segments to it keeps reading what it holds. The
//! library's cases are in the root's `tests/reader_compaction.rs`.

use std::path::Path;

use convlog::log::{LogReader, Lsn, Record};
use convlog::model::{ConversationEntry, Role};
use convlog::store::Retention;
use convlog::{Store, StoreOptions};

mod common;

use common::{path_arg, run_convlog, segment_paths, small_segments, stderr};

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
fn a_reader_keeps_reading_while_convlog_compact_in_another_process_deletes_segments() {
    let dir = tempfile::tempdir().unwrap();
    drop(store_with_segments(dir.path()));
    let before = segment_paths(dir.path()).len();
    let reader = LogReader::open(dir.path()).unwrap();
    let mut iter = reader.iter();
    let mut read: Vec<Record> = iter.by_ref().take(3).map(Result::unwrap).collect();

    let store = path_arg(dir.path());
    let snapshot = run_convlog(&["snapshot", store], b"");
    assert_eq!(snapshot.status.code(), Some(0), "{}", stderr(&snapshot));
    let compact = run_convlog(&["compact", store, "--delete-covered"], b"");
    assert_eq!(compact.status.code(), Some(0), "{}", stderr(&compact));
    assert!(segment_paths(dir.path()).len() < before - 2);

    read.extend(iter.map(Result::unwrap));
    assert_gap_free(&read, 1, EVENTS + 1);
}
