//! One writer per store, whatever happens to the `LOCK` file's name: an
//! operator who deletes it as a "stale lock", or replaces it, lets no second
//! writer in, in this process or another (the writer locks the store
//! directory itself). The `convlog append` case is in
//! `crates/cli/tests/operator_lock.rs`.

mod common;

use std::path::{Path, PathBuf};

use common::{read_all, role, spawn_role};
use convlog::log::{Log, LogOptions, LOCK_FILE_NAME};
use convlog::storage::sim::SimStorage;
use convlog::{Error, Store, StoreOptions};

/// What operators do to the lock file while a writer holds the store.
#[derive(Debug, Clone, Copy)]
enum LockFileFate {
    /// `rm STORE/LOCK`.
    Deleted,
    /// `rm STORE/LOCK && touch STORE/LOCK`.
    Recreated,
    /// `mv STORE/LOCK STORE/LOCK.old`.
    RenamedAway,
}

const FATES: [LockFileFate; 3] = [
    LockFileFate::Deleted,
    LockFileFate::Recreated,
    LockFileFate::RenamedAway,
];

fn apply(fate: LockFileFate, store: &Path) {
    let lock = store.join(LOCK_FILE_NAME);
    match fate {
        LockFileFate::Deleted => std::fs::remove_file(&lock).unwrap(),
        LockFileFate::Recreated => {
            std::fs::remove_file(&lock).unwrap();
            std::fs::File::create(&lock).unwrap();
        }
        LockFileFate::RenamedAway => std::fs::rename(&lock, store.join("LOCK.old")).unwrap(),
    }
}

fn store_from_env() -> PathBuf {
    PathBuf::from(std::env::var("CONVLOG_TEST_STORE").unwrap())
}

/// Runs the child role of `test` against `store`; returns the line it
/// printed: `LOCKED <path>`, `OPENED` or `ERROR <message>`.
fn second_writer_in_another_process(test: &str, store: &Path) -> String {
    let child = spawn_role(
        test,
        "second-writer",
        &[("CONVLOG_TEST_STORE", store.display().to_string())],
    );
    let output = child.wait_with_output().unwrap();
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .find(|line| {
            line.starts_with("LOCKED") || line.starts_with("OPENED") || line.starts_with("ERROR")
        })
        .unwrap_or_default()
        .to_string()
}

/// Retries `attempt` while it reports the store still locked after its
/// holder dropped it. Other tests of this binary spawn processes at the same
/// time: a child between fork and exec still holds a copy of every
/// descriptor, the lock's among them, for a moment. Not a speed requirement:
/// the number of attempts is a guard against a lock that is never released.
fn after_release<T>(mut attempt: impl FnMut() -> Option<T>) -> T {
    for _ in 0..RELEASE_ATTEMPTS_MAX {
        if let Some(done) = attempt() {
            return done;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "the store stayed locked after its writer was dropped ({RELEASE_ATTEMPTS_MAX} attempts)"
    );
}

const RELEASE_ATTEMPTS_MAX: usize = 3000;

/// Child role: try to open the store as a second writer.
fn try_second_writer() {
    let outcome = match Log::open(store_from_env(), LogOptions::default()) {
        Err(Error::Locked { path }) => format!("LOCKED {}", path.display()),
        Err(other) => format!("ERROR {other}"),
        Ok(log) => {
            // Leave a trace, as the second `convlog append` of the report did.
            log.append(&[b"second writer"]).unwrap();
            "OPENED".to_string()
        }
    };
    println!("{outcome}");
}

#[test]
fn removing_the_lock_file_lets_no_second_writer_in_from_another_process() {
    const TEST: &str = "removing_the_lock_file_lets_no_second_writer_in_from_another_process";
    if role().as_deref() == Some("second-writer") {
        try_second_writer();
        return;
    }
    for fate in FATES {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        log.append(&[b"held"]).unwrap();
        apply(fate, dir.path());
        assert_eq!(
            second_writer_in_another_process(TEST, dir.path()),
            format!("LOCKED {}", dir.path().display()),
            "{fate:?}"
        );
        log.append(&[b"still the only writer"]).unwrap();
        drop(log);
        let payloads: Vec<Vec<u8>> = read_all(dir.path())
            .into_iter()
            .map(|record| record.payload)
            .collect();
        assert_eq!(
            payloads,
            [b"held".to_vec(), b"still the only writer".to_vec()],
            "{fate:?}"
        );
        // Once the holder is gone, the next writer gets in (and the lock
        // file is there again).
        assert_eq!(
            after_release(|| {
                let outcome = second_writer_in_another_process(TEST, dir.path());
                (!outcome.starts_with("LOCKED")).then_some(outcome)
            }),
            "OPENED",
            "{fate:?}"
        );
        assert!(dir.path().join(LOCK_FILE_NAME).exists(), "{fate:?}");
    }
}

#[test]
fn removing_the_lock_file_lets_no_second_writer_in_within_the_process() {
    for fate in FATES {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        apply(fate, dir.path());
        match Log::open(dir.path(), LogOptions::default()) {
            Err(Error::Locked { path }) => assert_eq!(path, dir.path(), "{fate:?}"),
            other => panic!("{fate:?}: expected Locked, got {other:?}"),
        }
        match Store::open(dir.path(), StoreOptions::default()) {
            Err(Error::Locked { path }) => assert_eq!(path, dir.path(), "{fate:?}"),
            other => panic!("{fate:?}: expected Locked, got {other:?}"),
        }
        drop(log);
        after_release(|| match Log::open(dir.path(), LogOptions::default()) {
            Err(Error::Locked { .. }) => None,
            other => Some(other.expect("the lock is released on drop")),
        });
    }
}

#[test]
fn the_simulated_storage_keeps_one_writer_when_the_lock_file_goes() {
    let storage = SimStorage::new(7);
    let options = LogOptions::new().storage(std::sync::Arc::new(storage.clone()));
    let store = PathBuf::from("/store");
    let log = Log::open(&store, options.clone()).unwrap();
    use convlog::storage::Storage;
    storage.remove_file(&store.join(LOCK_FILE_NAME)).unwrap();
    match Log::open(&store, options.clone()) {
        Err(Error::Locked { path }) => assert_eq!(path, store),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(log);
    Log::open(&store, options).expect("the lock is released on drop");
}
