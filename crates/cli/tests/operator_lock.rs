//! One writer per store, whatever happens to the `LOCK` file's name, seen
//! through the `convlog` command: a second `convlog append` stays locked out
//! while the first runs, after an operator deleted, recreated or renamed
//! `LOCK`. The library's cases are in the root's `tests/operator_lock.rs`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{path_arg, read_all, run_convlog, stderr};
use convlog::log::LOCK_FILE_NAME;

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

/// `convlog append STORE` running with its standard input open: it holds
/// the store until its input ends.
struct RunningAppend {
    child: Child,
    lsns: BufReader<std::process::ChildStdout>,
}

const EVENT: &str = r#"{"type":"conversation_recorded","conversation_id":"ctx_1","entry":{"evaluation_id":"eval-1","role":"user","content":"hello"}}"#;

impl RunningAppend {
    fn start(store: &Path) -> RunningAppend {
        let mut child = Command::new(env!("CARGO_BIN_EXE_convlog"))
            .args(["append", path_arg(store)])
            .env_remove("CONVLOG_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start convlog append");
        let lsns = BufReader::new(child.stdout.take().unwrap());
        RunningAppend { child, lsns }
    }

    /// Appends one event and waits for its LSN (so the store is open).
    fn append(&mut self) -> u64 {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{EVENT}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.lsns.read_line(&mut line).unwrap();
        line.trim().parse().expect("append prints an LSN")
    }

    fn finish(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the first append failed: {status}");
    }
}

#[test]
fn a_second_convlog_append_is_locked_out_after_the_lock_file_is_removed() {
    for fate in FATES {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let mut first = RunningAppend::start(&store);
        assert_eq!(first.append(), 1);
        apply(fate, &store);
        let second = run_convlog(
            &["append", path_arg(&store)],
            format!("{EVENT}\n").as_bytes(),
        );
        assert_eq!(
            second.status.code(),
            Some(1),
            "{fate:?}: {}",
            stderr(&second)
        );
        assert!(
            stderr(&second).contains("is locked by another writer"),
            "{fate:?}: {}",
            stderr(&second)
        );
        assert_eq!(first.append(), 2, "{fate:?}");
        first.finish();
        let verify = run_convlog(&["verify", path_arg(&store)], b"");
        assert_eq!(
            verify.status.code(),
            Some(0),
            "{fate:?}: {}",
            stderr(&verify)
        );
        assert_eq!(read_all(&store).len(), 2, "{fate:?}");
    }
}
