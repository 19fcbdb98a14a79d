//! A store is created only in a missing or empty directory, through the
//! `convlog` command: `append` and `create-context` refuse a directory of
//! unrelated files, naming what is there, unless told
//! (`--create-in-nonempty`). The library's cases are in the root's
//! `tests/store_creation.rs`.

mod common;

use std::path::Path;

use common::{path_arg, run_convlog, stderr};

const EVENT: &str = r#"{"type":"conversation_recorded","conversation_id":"ctx_1","entry":{"evaluation_id":"eval-1","role":"user","content":"hello"}}"#;

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
fn convlog_append_refuses_a_directory_of_other_files_unless_told() {
    let dir = directory_with(&["notes.txt"]);
    let input = format!("{EVENT}\n");
    let output = run_convlog(&["append", path_arg(dir.path())], input.as_bytes());
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(message.contains("\"notes.txt\""), "{message}");
    assert!(message.contains("--create-in-nonempty"), "{message}");
    assert_eq!(entries(dir.path()), ["notes.txt"]);

    let output = run_convlog(
        &["append", path_arg(dir.path()), "--create-in-nonempty"],
        input.as_bytes(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // From then on it is a store.
    let output = run_convlog(&["append", path_arg(dir.path())], input.as_bytes());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(common::read_all(dir.path()).len(), 2);
}

#[test]
fn convlog_create_context_refuses_a_directory_of_other_files_unless_told() {
    let dir = directory_with(&["notes.txt"]);
    let args = [
        "create-context",
        path_arg(dir.path()),
        "--conversation",
        "ctx_1",
        "--public",
    ];
    let output = run_convlog(&args, b"");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--create-in-nonempty"),
        "{}",
        stderr(&output)
    );
    assert_eq!(entries(dir.path()), ["notes.txt"]);
    let mut told = args.to_vec();
    told.push("--create-in-nonempty");
    let output = run_convlog(&told, b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}
