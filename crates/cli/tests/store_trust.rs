//! A store never serves what its log does not hold, seen through the
//! `convlog` command: snapshots the command line takes and compaction keeps
//! raise no false warnings, and another store's snapshot fails `verify`,
//! named. The library's cases are in the root's `tests/store_trust.rs`.

mod common;

use std::path::{Path, PathBuf};

use common::segment_paths;
use convlog::model::{ConversationEntry, Event, Role, Timestamp};
use convlog::store::snapshot;
use convlog::store::{Store, StoreOptions};

fn options() -> StoreOptions {
    StoreOptions::new().segment_bytes_max(4096)
}

fn said(conversation: &str, sequence: u64, text: &str) -> Event {
    let mut entry = ConversationEntry::new("e", sequence, Role::User, Some(text.to_string()));
    entry.created_at = Timestamp(1_000_000 + sequence as i64);
    entry.recorded_in(conversation)
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

/// The same through the command line: after `snapshot` and
/// `compact --delete-covered`, later commands print no warning about the
/// kept older snapshot, and `verify` passes; a snapshot of another store
/// makes `verify` fail, naming it.
#[test]
fn the_cli_warns_only_about_real_snapshot_problems() {
    let dir = tempfile::tempdir().unwrap();
    let store_arg = common::path_arg(dir.path());
    // Snapshots taken by the command line, which registers its own reducers.
    for round in 0..2u64 {
        append(
            dir.path(),
            (0..150u64)
                .map(|index| said("c", round * 150 + index, "words words"))
                .collect(),
        );
        let taken = common::run_convlog(&["snapshot", store_arg], b"");
        assert!(taken.status.success(), "{}", common::stderr(&taken));
    }
    let compacted = common::run_convlog(&["compact", store_arg, "--delete-covered"], b"");
    assert!(compacted.status.success(), "{}", common::stderr(&compacted));
    assert_eq!(snapshot_files(dir.path()).len(), 2);
    assert_ne!(
        segment_paths(dir.path())[0].file_name().unwrap(),
        "00000000000000000001.seg",
        "compaction removed the first segments"
    );
    for args in [["stats", store_arg], ["verify", store_arg]] {
        let output = common::run_convlog(&args, b"");
        assert!(
            output.status.success(),
            "{args:?}: {}",
            common::stderr(&output)
        );
        assert!(
            !common::stderr(&output).contains("skipping unusable snapshot"),
            "{args:?}: {}",
            common::stderr(&output)
        );
    }

    let theirs = tempfile::tempdir().unwrap();
    append(theirs.path(), vec![said("theirs", 1, "m")]);
    let foreign = Store::open(theirs.path(), options())
        .unwrap()
        .snapshot()
        .unwrap();
    let copied = dir
        .path()
        .join("snapshots")
        .join(snapshot::snapshot_file_name(400));
    let mut bytes = std::fs::read(&foreign.path).unwrap();
    // Named and numbered for this store's log, so only its identity differs.
    bytes[16..24].copy_from_slice(&400u64.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..68]);
    bytes[68..72].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&copied, &bytes).unwrap();
    let output = common::run_convlog(&["verify", store_arg], b"");
    assert!(!output.status.success());
    let said_so = format!("{}{}", common::stdout(&output), common::stderr(&output));
    assert!(said_so.contains("not this store's snapshot"), "{said_so}");
}
