//! A store is created only in a missing or empty directory: opening a
//! writer on a directory of unrelated files refuses, naming what is there,
//! unless the caller asks for it (`LogOptions::create_in_nonempty_dir`,
//! `--create-in-nonempty`). A directory that already is a store opens as
//! before. The `convlog` command's cases are in
//! `crates/cli/tests/store_creation.rs`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use convlog::log::{Log, LogOptions, DIRECTORY_ENTRIES_LISTED_MAX};
use convlog::storage::sim::SimStorage;
use convlog::storage::Storage;
use convlog::{Error, Store, StoreOptions};

/// A directory holding `names` as small files.
fn directory_with(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        std::fs::write(dir.path().join(name), b"not convlog").unwrap();
    }
    dir
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn a_directory_of_other_files_is_not_turned_into_a_store() {
    let dir = directory_with(&["notes.txt", "photo.jpg"]);
    let error = Log::open(dir.path(), LogOptions::default()).unwrap_err();
    match &error {
        Error::DirectoryNotEmpty {
            path,
            entries,
            total,
        } => {
            assert_eq!(path, dir.path());
            assert_eq!(entries, &["notes.txt", "photo.jpg"]);
            assert_eq!(*total, 2);
        }
        other => panic!("expected DirectoryNotEmpty, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("\"notes.txt\", \"photo.jpg\""),
        "{message}"
    );
    assert!(message.contains("not empty"), "{message}");
    // Nothing was written: no lock file, no segment.
    assert_eq!(entries(dir.path()), ["notes.txt", "photo.jpg"]);

    assert!(matches!(
        Store::open(dir.path(), StoreOptions::default()),
        Err(Error::DirectoryNotEmpty { .. })
    ));
    assert_eq!(entries(dir.path()), ["notes.txt", "photo.jpg"]);
}

#[test]
fn the_refusal_names_a_few_entries_and_counts_the_rest() {
    let names: Vec<String> = (0..DIRECTORY_ENTRIES_LISTED_MAX + 3)
        .map(|index| format!("file-{index}"))
        .collect();
    let dir = directory_with(&names.iter().map(String::as_str).collect::<Vec<_>>());
    std::fs::create_dir(dir.path().join("a-subdirectory")).unwrap();
    let error = Log::open(dir.path(), LogOptions::default()).unwrap_err();
    let Error::DirectoryNotEmpty { entries, total, .. } = &error else {
        panic!("expected DirectoryNotEmpty, got {error:?}");
    };
    assert_eq!(entries.len(), DIRECTORY_ENTRIES_LISTED_MAX);
    assert_eq!(entries[0], "a-subdirectory");
    assert_eq!(*total, DIRECTORY_ENTRIES_LISTED_MAX + 4);
    assert!(error.to_string().contains(" and 4 more"), "{error}");
}

#[test]
fn the_option_creates_the_store_among_other_files() {
    let dir = directory_with(&["notes.txt"]);
    let options = LogOptions::new().create_in_nonempty_dir(true);
    let log = Log::open(dir.path(), options).unwrap();
    log.append(&[b"kept"]).unwrap();
    drop(log);
    // Now it is a store: it opens without the option, the file untouched.
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(log.next_lsn(), 2);
    assert_eq!(
        std::fs::read(dir.path().join("notes.txt")).unwrap(),
        b"not convlog"
    );
}

#[test]
fn missing_and_empty_directories_and_existing_stores_open() {
    let dir = tempfile::tempdir().unwrap();
    // Missing, several levels deep.
    let nested = dir.path().join("a/b/store");
    Log::open(&nested, LogOptions::default()).unwrap();
    // Empty and existing (the usual fresh temporary directory).
    let empty = tempfile::tempdir().unwrap();
    Store::open(empty.path(), StoreOptions::default()).unwrap();
    // A store someone dropped a file into still opens, events intact.
    let store = tempfile::tempdir().unwrap();
    let log = Log::open(store.path(), LogOptions::default()).unwrap();
    log.append(&[b"one"]).unwrap();
    drop(log);
    std::fs::write(store.path().join("README"), b"do not touch").unwrap();
    assert_eq!(
        Log::open(store.path(), LogOptions::default())
            .unwrap()
            .next_lsn(),
        2
    );
}

#[test]
fn a_directory_with_any_store_entry_counts_as_a_store() {
    // What an interrupted creation or a salvage can leave behind. (`LOCK` is
    // written only after the first segment is durable: a `LOCK` without
    // segments is a deleted log, refused below.)
    for leftover in [
        "POISONED",
        "00000000000000000001.seg.tmp",
        "snapshots",
        "quarantine",
    ] {
        let dir = directory_with(&["notes.txt"]);
        let path = dir.path().join(leftover);
        if leftover == "snapshots" || leftover == "quarantine" {
            std::fs::create_dir(&path).unwrap();
        } else {
            std::fs::write(&path, b"").unwrap();
        }
        let log = Log::open(dir.path(), LogOptions::default())
            .unwrap_or_else(|error| panic!("{leftover}: {error}"));
        assert_eq!(log.next_lsn(), 1, "{leftover}");
    }
}

#[test]
fn a_lock_file_without_segments_is_a_deleted_log_not_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    drop(Log::open(dir.path(), LogOptions::default()).unwrap());
    for segment in std::fs::read_dir(dir.path()).unwrap() {
        let path = segment.unwrap().path();
        if path.extension().is_some_and(|extension| extension == "seg") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let error = Log::open(dir.path(), LogOptions::default()).unwrap_err();
    assert!(matches!(error, Error::LogMissing { .. }), "{error}");
    let verified = convlog::log::verify(dir.path()).unwrap_err();
    assert_eq!(
        verified.to_string(),
        error.to_string(),
        "open and verify agree"
    );
    assert!(
        !dir.path().join("00000000000000000001.seg").exists(),
        "nothing was created over the deleted log"
    );
}

#[test]
fn the_check_runs_on_any_storage() {
    let storage = SimStorage::new(3);
    let store = PathBuf::from("/data");
    storage.create_dir_all(&store).unwrap();
    storage.create(&store.join("unrelated.db")).unwrap();
    let options = LogOptions::new().storage(Arc::new(storage.clone()));
    assert!(matches!(
        Log::open(&store, options.clone()),
        Err(Error::DirectoryNotEmpty { .. })
    ));
    assert_eq!(storage.list_dir(&store).unwrap(), ["unrelated.db"]);
    Log::open(&store, options.create_in_nonempty_dir(true)).unwrap();
}
