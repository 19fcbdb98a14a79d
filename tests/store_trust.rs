//! A store never serves what its log does not hold, whoever touches its
//! files: snapshots bound to their store and log prefix, segments bound to
//! their store and to each other, the verdicts of `verify` and of opening,
//! and old-format stores refused with a way out (issue 10, defects 2, 4, 5).
//! The command line's case is in `crates/cli/tests/store_trust.rs`.

mod common;

use std::path::{Path, PathBuf};

use common::segment_paths;
use convlog::conversation::{self, ConversationSlice};
use convlog::log::format::SEGMENT_MAGIC;
use convlog::model::{ConversationEntry, Event, Role, Timestamp};
use convlog::storage::FileSystem;
use convlog::store::snapshot::{self, SnapshotMismatch, SnapshotRejection};
use convlog::store::{Retention, Store, StoreOptions};
use convlog::Error;

fn options() -> StoreOptions {
    StoreOptions::new().segment_bytes_max(4096)
}

fn compacting() -> StoreOptions {
    options().retention(Retention::DeleteCoveredBySnapshot)
}

fn said(conversation: &str, sequence: u64, text: &str) -> Event {
    let mut entry = ConversationEntry::new("e", sequence, Role::User, Some(text.to_string()));
    entry.created_at = Timestamp(1_000_000 + sequence as i64);
    entry.recorded_in(conversation)
}

fn texts(slice: &ConversationSlice) -> Vec<String> {
    slice
        .entries()
        .map(|entry| entry.content.clone().unwrap_or_default())
        .collect()
}

/// The conversation as a pure fold of every event the log holds.
fn fold_of_log(dir: &Path, conversation_id: &str) -> ConversationSlice {
    let events: Vec<(Event, u64)> = common::read_all(dir)
        .into_iter()
        .map(|record| {
            (
                convlog::codec::decode_event(&record.payload).unwrap(),
                record.lsn,
            )
        })
        .collect();
    conversation::fold(
        conversation_id,
        events.iter().map(|(event, lsn)| (event, *lsn)),
    )
}

fn append(dir: &Path, events: Vec<Event>) {
    let store = Store::open(dir, options()).unwrap();
    for event in events {
        store.append(&[event]).unwrap();
    }
}

fn snapshot_files(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join("snapshots"))
        .map(|entries| {
            entries
                .map(|entry| entry.unwrap().path())
                .filter(|path| {
                    path.extension()
                        .is_some_and(|extension| extension == "snap")
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Defect 2, first case: the log loses its tail after a snapshot, and new
/// events are acknowledged at the snapshot's LSNs. The snapshot no longer
/// describes the log and must not be served.
#[test]
fn a_snapshot_of_a_tail_the_log_lost_is_never_served() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), vec![said("c", 1, "A1"), said("c", 2, "A2")]);
    {
        let store = Store::open(dir.path(), options()).unwrap();
        assert_eq!(store.snapshot().unwrap().lsn, 3);
    }
    // The segment loses its tail back to A1 (a torn tail, or a restored
    // backup of the segments older than the snapshot).
    let a2 = common::read_all(dir.path())
        .into_iter()
        .find(|record| record.lsn == 2)
        .unwrap()
        .position;
    let segment = segment_paths(dir.path())[0].clone();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(a2.offset).unwrap();
    drop(file);
    // B2 and B3 are appended and acknowledged at LSNs 2 and 3, each by its
    // own process-like open (as `convlog append` does).
    append(dir.path(), vec![said("c", 2, "B2")]);
    append(dir.path(), vec![said("c", 3, "B3")]);

    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(texts(&store.conversation("c").unwrap()), ["A1", "B2", "B3"]);
    assert_eq!(
        store.conversation("c").unwrap(),
        fold_of_log(dir.path(), "c")
    );
    let report = store.open_report();
    assert_eq!(report.snapshot, None, "the stale snapshot was used");
    assert_eq!(report.skipped_snapshots.len(), 1);
    assert!(
        report.skipped_snapshots[0].1.contains("stale"),
        "{:?}",
        report.skipped_snapshots
    );
    drop(store);

    let verified = convlog::store::verify(dir.path(), &mut |_| {}).unwrap();
    let (_, checked) = &verified.snapshots[0];
    let reason = checked.as_ref().unwrap_err();
    assert!(
        reason.contains("stale: does not match the log at LSN 2"),
        "{reason}"
    );
    assert_eq!(verified.chosen_snapshot, None);
    // The function a backup or read-only open builds on says the same.
    let path = snapshot_files(dir.path())[0].clone();
    match snapshot::load_checked(&FileSystem, dir.path(), &path) {
        Err(SnapshotRejection::Mismatch(SnapshotMismatch::Stale { lsn: 3, .. })) => {}
        other => panic!("expected a stale snapshot, got {other:?}"),
    }
}

/// Defect 2, second case: a snapshot copied from another store is never
/// served, and compaction deletes nothing on its word.
#[test]
fn another_stores_snapshot_is_ignored_and_compaction_deletes_nothing_on_its_word() {
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    append(
        ours.path(),
        (0..120)
            .map(|index| said("ours", index, &"ours ".repeat(10)))
            .collect(),
    );
    append(
        theirs.path(),
        (0..60)
            .map(|index| said("theirs", index, &"theirs ".repeat(10)))
            .collect(),
    );
    let foreign = {
        let store = Store::open(theirs.path(), options()).unwrap();
        store.snapshot().unwrap()
    };
    let segments_before = segment_paths(ours.path());
    assert!(segments_before.len() > 2, "the test needs sealed segments");
    std::fs::create_dir_all(ours.path().join("snapshots")).unwrap();
    let copied = ours
        .path()
        .join("snapshots")
        .join(foreign.path.file_name().unwrap());
    std::fs::copy(&foreign.path, &copied).unwrap();

    let store = Store::open(ours.path(), compacting()).unwrap();
    let report = store.open_report();
    assert_eq!(report.snapshot, None);
    assert_eq!(report.skipped_snapshots.len(), 1);
    assert!(
        report.skipped_snapshots[0]
            .1
            .contains("not this store's snapshot"),
        "{:?}",
        report.skipped_snapshots
    );
    assert!(!store.contains_conversation("theirs"));
    let compacted = store.compact().unwrap();
    assert!(compacted.removed.is_empty(), "{compacted:?}");
    assert_eq!(segment_paths(ours.path()), segments_before);
    assert_eq!(
        store.conversation("ours").unwrap(),
        fold_of_log(ours.path(), "ours")
    );
    assert_eq!(store.conversation("ours").unwrap().len(), 120);
    drop(store);

    let verified = convlog::store::verify(ours.path(), &mut |_| {}).unwrap();
    let reason = verified.snapshots[0].1.as_ref().unwrap_err();
    assert!(reason.contains("not this store's snapshot"), "{reason}");
}

/// Defect 2, third case: a snapshot whose file name and header disagree
/// about its LSN is rejected.
#[test]
fn a_snapshot_whose_name_and_header_disagree_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    append(
        dir.path(),
        (0..10).map(|index| said("c", index, "m")).collect(),
    );
    let info = {
        let store = Store::open(dir.path(), options()).unwrap();
        store.snapshot().unwrap()
    };
    append(
        dir.path(),
        (10..20).map(|index| said("c", index, "m")).collect(),
    );
    let renamed = dir
        .path()
        .join("snapshots")
        .join(snapshot::snapshot_file_name(info.lsn + 5));
    std::fs::rename(&info.path, &renamed).unwrap();

    let store = Store::open(dir.path(), options()).unwrap();
    let report = store.open_report();
    assert_eq!(report.snapshot, None);
    assert_eq!(report.skipped_snapshots.len(), 1);
    let reason = &report.skipped_snapshots[0].1;
    assert!(
        reason.contains(&format!(
            "the file name says LSN {} but the header says LSN {}",
            info.lsn + 5,
            info.lsn
        )),
        "{reason}"
    );
    assert_eq!(
        store.conversation("c").unwrap(),
        fold_of_log(dir.path(), "c")
    );
    drop(store);
    let verified = convlog::store::verify(dir.path(), &mut |_| {}).unwrap();
    assert!(verified.snapshots[0].1.is_err());
}

/// Defect 4: a missing middle segment fails opening (and so `stats` and
/// `append`) and `verify` with an error naming where, even when a snapshot
/// covers the missing events.
#[test]
fn a_missing_middle_segment_fails_open_and_verify_even_under_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    append(
        dir.path(),
        (0..300)
            .map(|index| said("c", index, "words words"))
            .collect(),
    );
    {
        let store = Store::open(dir.path(), options()).unwrap();
        store.snapshot().unwrap();
    }
    let segments = segment_paths(dir.path());
    assert!(segments.len() > 3);
    std::fs::remove_file(&segments[1]).unwrap();
    let missing_from = |reason: &str| reason.contains("are missing");
    match Store::open(dir.path(), options()) {
        Err(Error::Corrupted {
            segment, reason, ..
        }) => {
            assert_eq!(segment, segments[0]);
            assert!(missing_from(&reason), "{reason}");
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
    match convlog::store::verify(dir.path(), &mut |_| {}) {
        Err(Error::Corrupted {
            segment, reason, ..
        }) => {
            assert_eq!(segment, segments[0]);
            assert!(missing_from(&reason), "{reason}");
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
    assert_eq!(
        segment_paths(dir.path()).len(),
        segments.len() - 1,
        "nothing changed"
    );
}

/// A segment copied in from another store is corruption naming it.
#[test]
fn a_segment_of_another_store_is_corruption_naming_it() {
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    for dir in [ours.path(), theirs.path()] {
        append(
            dir,
            (0..100)
                .map(|index| said("c", index, "words words"))
                .collect(),
        );
    }
    let (our_segments, their_segments) = (segment_paths(ours.path()), segment_paths(theirs.path()));
    assert_eq!(
        our_segments
            .iter()
            .map(|path| path.file_name())
            .collect::<Vec<_>>(),
        their_segments
            .iter()
            .map(|path| path.file_name())
            .collect::<Vec<_>>(),
        "both stores have the same layout"
    );
    std::fs::copy(&their_segments[1], &our_segments[1]).unwrap();
    for result in [
        Store::open(ours.path(), options()).map(|_| ()),
        convlog::store::verify(ours.path(), &mut |_| {}).map(|_| ()),
    ] {
        match result {
            Err(Error::Corrupted {
                segment, reason, ..
            }) => {
                assert_eq!(segment, our_segments[1]);
                assert!(reason.contains("belongs to another store"), "{reason}");
            }
            other => panic!("expected Corrupted, got {other:?}"),
        }
    }
}

/// Defect 5: with its first segment deleted and no snapshot, the store
/// cannot be opened, `verify` says so too, and neither claims the log was
/// compacted.
#[test]
fn a_store_missing_its_first_segment_fails_verify_and_open_alike() {
    let dir = tempfile::tempdir().unwrap();
    append(
        dir.path(),
        (0..200)
            .map(|index| said("c", index, "words words"))
            .collect(),
    );
    let segments = segment_paths(dir.path());
    std::fs::remove_file(&segments[0]).unwrap();
    let opened = Store::open(dir.path(), options()).map(|_| ());
    let verified = convlog::store::verify(dir.path(), &mut |_| {}).map(|_| ());
    for result in [opened, verified] {
        match result {
            Err(Error::SnapshotRestore { reason, .. }) => {
                assert!(!reason.contains("was compacted"), "{reason}");
                assert!(reason.contains("the log starts at LSN"), "{reason}");
                assert!(reason.contains("there is no snapshot"), "{reason}");
            }
            other => panic!("expected SnapshotRestore, got {other:?}"),
        }
    }
}

/// Snapshots without any segment: the log is missing, not new. Opening
/// refuses instead of starting an empty log beside them.
#[test]
fn snapshots_without_segments_are_a_missing_log() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), vec![said("c", 1, "m")]);
    Store::open(dir.path(), options())
        .unwrap()
        .snapshot()
        .unwrap();
    for segment in segment_paths(dir.path()) {
        std::fs::remove_file(segment).unwrap();
    }
    assert!(matches!(
        Store::open(dir.path(), options()),
        Err(Error::SnapshotRestore { .. })
    ));
    assert!(segment_paths(dir.path()).is_empty(), "no log was created");
    // Its LOCK file says a log was here: verify names the missing log too.
    assert!(matches!(
        convlog::store::verify(dir.path(), &mut |_| {}),
        Err(Error::LogMissing { .. })
    ));
}

/// Item: after `snapshot && compact --delete-covered`, the older snapshot
/// kept beside the newer one is superseded, not a problem: no warning, and
/// `verify` calls it fine.
#[test]
fn a_superseded_snapshot_kept_after_compaction_is_not_reported() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), compacting()).unwrap();
        for round in 0..2u64 {
            for index in 0..150u64 {
                store
                    .append(&[said("c", round * 150 + index, "words words")])
                    .unwrap();
            }
            store.snapshot().unwrap();
        }
        assert!(!store.compact().unwrap().removed.is_empty());
    }
    assert_eq!(snapshot_files(dir.path()).len(), 2);
    let store = Store::open(dir.path(), compacting()).unwrap();
    assert_eq!(store.open_report().skipped_snapshots, Vec::new());
    assert_eq!(
        store.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(301)
    );
    assert_eq!(store.conversation("c").unwrap().len(), 300);
    // Compaction at a boundary already compacted is a no-op, not an error.
    assert!(store.compact().unwrap().removed.is_empty());
    drop(store);
    let verified = convlog::store::verify(dir.path(), &mut |_| {}).unwrap();
    assert!(
        verified
            .snapshots
            .iter()
            .all(|(_, checked)| checked.is_ok()),
        "{:?}",
        verified.snapshots
    );
    assert_eq!(
        verified.chosen_snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(301)
    );
}

/// A compacted store whose only covering snapshot is stale cannot be
/// opened: what it would serve is not what the log was.
#[test]
fn a_compacted_store_whose_snapshot_is_swapped_for_a_stale_one_fails_alike() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), compacting()).unwrap();
    for index in 0..150u64 {
        store.append(&[said("c", index, "words words")]).unwrap();
    }
    let info = store.snapshot().unwrap();
    let original = std::fs::read(&info.path).unwrap();
    assert!(!store.compact().unwrap().removed.is_empty());
    drop(store);
    // Another store with the same identity cannot be made by hand, but a
    // snapshot header whose chain value is off by one bit stands for a
    // snapshot of another prefix of this store (its checksum redone).
    let mut stale = original.clone();
    stale[40] ^= 1;
    let crc = crc32fast::hash(&stale[..68]);
    stale[68..72].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&info.path, &stale).unwrap();
    let opened = Store::open(dir.path(), compacting()).map(|_| ());
    let verified = convlog::store::verify(dir.path(), &mut |_| {}).map(|_| ());
    for result in [opened, verified] {
        match result {
            Err(Error::SnapshotRestore { reason, .. }) => {
                assert!(reason.contains("stale"), "{reason}")
            }
            other => panic!("expected SnapshotRestore, got {other:?}"),
        }
    }
    std::fs::write(&info.path, &original).unwrap();
    let store = Store::open(dir.path(), compacting()).unwrap();
    assert_eq!(store.conversation("c").unwrap().len(), 150);
}

/// A hand-written segment of format version 1 (a 32-byte header: magic,
/// version, header size, first LSN, salt, CRC-32).
fn version_1_segment() -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(&SEGMENT_MAGIC);
    header.extend_from_slice(&1u32.to_le_bytes());
    header.extend_from_slice(&32u32.to_le_bytes());
    header.extend_from_slice(&1u64.to_le_bytes());
    header.extend_from_slice(&0x5691_9defu32.to_le_bytes());
    let crc = crc32fast::hash(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(header.len(), 32);
    header
}

/// An old-format store is refused, by opening and by `verify`, with an
/// error that says what was found and how to migrate; nothing is changed.
#[test]
fn a_version_1_store_is_refused_with_a_way_to_migrate() {
    for frames in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let segment = dir.path().join("00000000000000000001.seg");
        let mut bytes = version_1_segment();
        if frames {
            // A version 1 frame of one event after the header.
            let mut frame = Vec::new();
            convlog::log::format::encode_frame(&mut frame, 1, 1, 0x0, &[b"hi".as_slice()]);
            bytes.extend_from_slice(&frame);
        }
        std::fs::write(&segment, &bytes).unwrap();
        for result in [
            Store::open(dir.path(), options()).map(|_| ()),
            convlog::store::verify(dir.path(), &mut |_| {}).map(|_| ()),
        ] {
            match result {
                Err(error @ Error::UnsupportedVersion { .. }) => {
                    let Error::UnsupportedVersion {
                        path,
                        version,
                        supported,
                    } = &error
                    else {
                        unreachable!()
                    };
                    assert_eq!((path, *version, *supported), (&segment, 1, 2));
                    let message = error.to_string();
                    assert!(message.contains("uses format version 1"), "{message}");
                    assert!(message.contains("convlog dump"), "{message}");
                    assert!(message.contains("convlog append"), "{message}");
                }
                other => panic!("expected UnsupportedVersion, got {other:?}"),
            }
        }
        assert_eq!(
            std::fs::read(&segment).unwrap(),
            bytes,
            "the file was left as it was"
        );
        assert_eq!(segment_paths(dir.path()), [segment]);
    }
}

/// A snapshot of format version 1 in a current store is skipped as such.
#[test]
fn a_version_1_snapshot_is_skipped_with_its_version_named() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), vec![said("c", 1, "m")]);
    let info = Store::open(dir.path(), options())
        .unwrap()
        .snapshot()
        .unwrap();
    let mut bytes = std::fs::read(&info.path).unwrap();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&info.path, &bytes).unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(store.open_report().snapshot, None);
    let reason = &store.open_report().skipped_snapshots[0].1;
    assert!(
        reason.contains("snapshot format version 1 is not supported"),
        "{reason}"
    );
}

/// New segments (rolls, and the fresh segment after a cut torn tail) carry
/// the store identity and link to the segment before them: the store
/// verifies, and a snapshot at every kind of boundary is accepted.
#[test]
fn rolls_and_fresh_segments_keep_the_identity_and_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    append(
        dir.path(),
        (0..100)
            .map(|index| said("c", index, "words words"))
            .collect(),
    );
    // A torn tail: garbage after the last frame.
    let last = segment_paths(dir.path()).last().unwrap().clone();
    let mut bytes = std::fs::read(&last).unwrap();
    bytes.extend_from_slice(&[0xAB; 40]);
    std::fs::write(&last, &bytes).unwrap();
    {
        let store = Store::open(dir.path(), options()).unwrap();
        assert!(store.open_report().recovery.torn_tail.is_some());
        // The snapshot sits exactly at the start of the fresh segment.
        store.snapshot().unwrap();
        store.append(&[said("c", 100, "after")]).unwrap();
    }
    let verified = convlog::store::verify(dir.path(), &mut |_| {}).unwrap();
    assert!(verified
        .snapshots
        .iter()
        .all(|(_, checked)| checked.is_ok()));
    let ids: std::collections::HashSet<_> = segment_paths(dir.path())
        .iter()
        .map(|path| std::fs::read(path).unwrap()[24..40].to_vec())
        .collect();
    assert_eq!(ids.len(), 1, "one store identity in every segment header");
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(
        store.open_report().snapshot.as_ref().map(|(_, lsn)| *lsn),
        Some(101)
    );
    assert_eq!(
        store.conversation("c").unwrap(),
        fold_of_log(dir.path(), "c")
    );
}

/// The audit view (`convlog inspect`) of a compacted store takes its
/// snapshot on the same terms: another store's newer snapshot is passed
/// over for the store's own.
#[test]
fn the_audit_view_of_a_compacted_store_ignores_another_stores_snapshot() {
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    {
        let store = Store::open(ours.path(), compacting()).unwrap();
        for index in 0..150u64 {
            store.append(&[said("ours", index, "words words")]).unwrap();
        }
        store.snapshot().unwrap();
        assert!(!store.compact().unwrap().removed.is_empty());
        for index in 150..200u64 {
            store.append(&[said("ours", index, "words words")]).unwrap();
        }
    }
    append(
        theirs.path(),
        (0..180).map(|index| said("theirs", index, "w")).collect(),
    );
    let foreign = Store::open(theirs.path(), options())
        .unwrap()
        .snapshot()
        .unwrap();
    std::fs::copy(
        &foreign.path,
        ours.path()
            .join("snapshots")
            .join(foreign.path.file_name().unwrap()),
    )
    .unwrap();
    let view = convlog::audit::AuditView::open(ours.path(), None).unwrap();
    assert_eq!(view.conversation_ids().collect::<Vec<_>>(), ["ours"]);
    assert_eq!(view.slice("ours").unwrap().len(), 200);
}
