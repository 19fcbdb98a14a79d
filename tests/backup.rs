//! Backups: a consistent copy taken beside a running writer, verified, and
//! a restore that serves exactly the events up to the backup's LSN.

mod common;

use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;

use convlog::log::{LogReader, Lsn};
use convlog::model::{ConversationEntry, Event, Role, Timestamp};
use convlog::store::{backup, Retention, Store, StoreOptions};
use convlog::Error;

fn options() -> StoreOptions {
    StoreOptions::new().segment_bytes_max(4096)
}

fn message(conversation: usize, sequence: u64) -> Event {
    let mut entry = ConversationEntry::new(
        "eval-1",
        sequence,
        Role::User,
        Some(format!("message {sequence} of conversation {conversation}")),
    );
    entry.created_at = Timestamp(1_000_000 + sequence as i64);
    entry.recorded_in(&format!("ctx_{conversation}"))
}

/// Every (LSN, payload) of the store's log, read without a lock.
fn log_records(dir: &Path) -> Vec<(Lsn, Vec<u8>)> {
    LogReader::open(dir)
        .unwrap()
        .iter()
        .map(|record| record.map(|record| (record.lsn, record.payload)))
        .collect::<convlog::Result<_>>()
        .unwrap()
}

fn fill(store: &Store, events: u64) {
    for sequence in 1..=events {
        store
            .append(&[message(sequence as usize % 3, sequence)])
            .unwrap();
    }
}

#[test]
fn a_backup_restores_to_the_same_conversations() {
    let source = tempfile::tempdir().unwrap();
    let store = Store::open(source.path(), options()).unwrap();
    fill(&store, 60);
    let place = tempfile::tempdir().unwrap();
    let dest = place.path().join("copy");
    let report = backup(source.path(), &dest, &mut |_| {}).unwrap();
    assert_eq!((report.first_lsn, report.next_lsn), (1, 61));
    assert!(report.segments > 1, "small segments roll: {report:?}");
    assert!(!convlog::store::backup::partial_path(&dest).exists());

    // The restored copy verifies and opens as a store of its own.
    let verified = convlog::store::verify(&dest, &mut |_| {}).unwrap();
    assert_eq!(verified.log.next_lsn, 61);
    assert_eq!(log_records(&dest), log_records(source.path()));
    let restored = Store::open(&dest, options()).unwrap();
    for id in store.conversation_ids() {
        assert_eq!(
            restored.conversation(&id).unwrap(),
            store.conversation(&id).unwrap()
        );
    }
    // It is a store, not a view: it takes appends of its own.
    restored.append(&[message(7, 1)]).unwrap();
    assert_eq!(store.stats().next_lsn, 61, "the source is untouched");
}

#[test]
fn a_backup_beside_a_running_writer_is_an_acknowledged_prefix() {
    let source = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(source.path(), options()).unwrap());
    let (acked, acks) = mpsc::channel::<Lsn>();
    let (stop, stopped) = mpsc::channel::<()>();
    let writer = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            let mut sequence = 0;
            while stopped.try_recv().is_err() {
                sequence += 1;
                let lsns = store
                    .append(&[message(1, sequence), message(2, sequence)])
                    .unwrap();
                let _ = acked.send(lsns.end - 1);
            }
        })
    };
    // Wait (on acknowledgements, not on time) until the writer has crossed
    // a few segment rolls, then back up while it keeps appending.
    let mut last_acked = 0;
    while last_acked < 120 {
        last_acked = acks.recv().unwrap();
    }
    let place = tempfile::tempdir().unwrap();
    let dest = place.path().join("copy");
    let report = backup(source.path(), &dest, &mut |_| {}).unwrap();
    stop.send(()).unwrap();
    writer.join().unwrap();

    assert!(
        report.next_lsn > last_acked,
        "the backup holds every event acknowledged before it started ({last_acked}): {report:?}"
    );
    // Exactly the source's events below the backup's LSN, and no other.
    let source_records = log_records(source.path());
    let copied = log_records(&dest);
    assert_eq!(copied.len() as u64, report.next_lsn - 1);
    assert_eq!(copied[..], source_records[..copied.len()]);
    // A batch is never split by the backup's end (two events per batch).
    assert_eq!(copied.len() % 2, 0);
    let restored = Store::open(&dest, options()).unwrap();
    assert_eq!(restored.stats().next_lsn, report.next_lsn);
}

#[test]
fn a_compacted_store_is_backed_up_with_the_snapshot_that_covers_its_start() {
    let source = tempfile::tempdir().unwrap();
    let compacting = options().retention(Retention::DeleteCoveredBySnapshot);
    let store = Store::open(source.path(), compacting.clone()).unwrap();
    fill(&store, 80);
    store.snapshot().unwrap();
    assert!(!store.compact().unwrap().removed.is_empty());
    fill(&store, 10);
    let first_lsn = store.stats().first_lsn;
    assert!(first_lsn > 1);

    let place = tempfile::tempdir().unwrap();
    let dest = place.path().join("copy");
    let report = backup(source.path(), &dest, &mut |_| {}).unwrap();
    assert_eq!(report.first_lsn, first_lsn);
    assert_eq!(report.snapshots.len(), 1, "{report:?}");
    let restored = Store::open(&dest, compacting).unwrap();
    assert_eq!(restored.conversation_ids(), store.conversation_ids());
    for id in store.conversation_ids() {
        assert_eq!(
            restored.conversation(&id).unwrap(),
            store.conversation(&id).unwrap()
        );
    }
}

#[test]
fn a_snapshot_of_a_compacted_store_that_is_gone_fails_the_backup_without_leaving_a_backup() {
    let source = tempfile::tempdir().unwrap();
    let compacting = options().retention(Retention::DeleteCoveredBySnapshot);
    {
        let store = Store::open(source.path(), compacting).unwrap();
        fill(&store, 80);
        store.snapshot().unwrap();
        store.compact().unwrap();
    }
    for entry in std::fs::read_dir(source.path().join("snapshots")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let place = tempfile::tempdir().unwrap();
    let dest = place.path().join("copy");
    let error = backup(source.path(), &dest, &mut |_| {}).unwrap_err();
    assert!(matches!(error, Error::SnapshotRestore { .. }), "{error}");
    assert!(error.to_string().contains("no snapshot belongs"), "{error}");
    assert!(!dest.exists(), "no backup exists unless it is whole");
}

#[test]
fn a_backup_goes_only_into_a_new_or_empty_directory_outside_the_store() {
    let source = tempfile::tempdir().unwrap();
    fill(&Store::open(source.path(), options()).unwrap(), 5);
    let place = tempfile::tempdir().unwrap();

    let busy = place.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("notes.txt"), b"mine").unwrap();
    let error = backup(source.path(), &busy, &mut |_| {}).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("is not empty (it holds notes.txt)"),
        "{error}"
    );
    assert_eq!(std::fs::read(busy.join("notes.txt")).unwrap(), b"mine");

    let inside = source.path().join("backup");
    let error = backup(source.path(), &inside, &mut |_| {}).unwrap_err();
    assert!(error.to_string().contains("is inside the store"), "{error}");
    assert!(!inside.exists());

    let empty = place.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(
        backup(source.path(), &empty, &mut |_| {}).unwrap().next_lsn,
        6
    );

    let interrupted = place.path().join("again");
    std::fs::create_dir(convlog::store::backup::partial_path(&interrupted)).unwrap();
    let error = backup(source.path(), &interrupted, &mut |_| {}).unwrap_err();
    assert!(
        error.to_string().contains("holds an interrupted backup"),
        "{error}"
    );

    let nothing = place.path().join("nothing");
    std::fs::create_dir(&nothing).unwrap();
    let error = backup(&nothing, &place.path().join("out"), &mut |_| {}).unwrap_err();
    assert!(matches!(error, Error::NotAStore { .. }), "{error}");
}

#[test]
fn a_torn_write_at_the_end_of_the_source_is_not_copied() {
    let source = tempfile::tempdir().unwrap();
    fill(&Store::open(source.path(), options()).unwrap(), 5);
    // A write in flight: half a frame after the last whole one, in the
    // space the writer allocated ahead of its frames (or at the end of the
    // file if there is none).
    let last = common::segment_paths(source.path()).pop().unwrap();
    let mut bytes = std::fs::read(&last).unwrap();
    let whole = convlog::log::recovery::scan_segment(&bytes, true)
        .unwrap()
        .valid_bytes as usize;
    if bytes.len() < whole + 30 {
        bytes.resize(whole + 30, 0);
    }
    bytes.copy_within(whole - 40..whole - 10, whole);
    std::fs::write(&last, &bytes).unwrap();

    let place = tempfile::tempdir().unwrap();
    let dest = place.path().join("copy");
    let report = backup(source.path(), &dest, &mut |_| {}).unwrap();
    assert_eq!(report.next_lsn, 6);
    let copy = common::segment_paths(&dest).pop().unwrap();
    assert_eq!(std::fs::metadata(copy).unwrap().len(), whole as u64);
    let verified = convlog::store::verify(&dest, &mut |_| {}).unwrap();
    assert_eq!(verified.log.torn_tail, None);
}

#[test]
fn a_snapshot_of_another_store_is_left_out_of_the_backup() {
    let other = tempfile::tempdir().unwrap();
    let foreign = {
        let store = Store::open(other.path(), options()).unwrap();
        fill(&store, 10);
        store.snapshot().unwrap().path
    };
    let source = tempfile::tempdir().unwrap();
    fill(&Store::open(source.path(), options()).unwrap(), 30);
    let planted = source
        .path()
        .join("snapshots")
        .join(foreign.file_name().unwrap());
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    std::fs::copy(&foreign, &planted).unwrap();

    let place = tempfile::tempdir().unwrap();
    let dest = place.path().join("copy");
    let report = backup(source.path(), &dest, &mut |_| {}).unwrap();
    assert!(report.snapshots.is_empty(), "{report:?}");
    let (path, reason) = &report.skipped_snapshots[0];
    assert_eq!(path, &planted);
    assert!(reason.contains("not this store's snapshot"), "{reason}");
    assert!(!dest
        .join("snapshots")
        .join(foreign.file_name().unwrap())
        .exists());
    let verified = convlog::store::verify(&dest, &mut |_| {}).unwrap();
    assert!(verified.snapshots.is_empty());
}
