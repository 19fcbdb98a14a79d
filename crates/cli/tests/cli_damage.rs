//! The read commands of the `convlog` binary on a damaged or compacted
//! store: exit 1 with the located error on stderr, never exit 0 with part
//! of the log.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use convlog::log::LogReader;

mod common;

use common::{path_arg as path, run_convlog as run, stderr, stdout};

/// Events in the store, one frame each.
const EVENTS: usize = 200;

fn user_line(index: usize) -> String {
    format!(
        r#"{{"type":"conversation_recorded","conversation_id":"ctx_1","entry":{{"evaluation_id":"eval-1","role":"user","content":"message number {index} with some padding text"}}}}"#
    )
}

/// A store of `EVENTS` events appended by `convlog append`, with one byte
/// flipped in the middle of the frame of LSN 100; returns the segment and
/// the frame's offset.
fn damaged_store(store: &Path) -> (PathBuf, u64) {
    let input: String = (0..EVENTS).map(|index| user_line(index) + "\n").collect();
    let output = run(&["append", path(store)], input.as_bytes());
    assert_eq!(output.status.code(), Some(0), "append: {}", stderr(&output));
    let records: Vec<_> = LogReader::open(store)
        .unwrap()
        .iter()
        .collect::<convlog::Result<_>>()
        .unwrap();
    assert_eq!(records.len(), EVENTS);
    let (damaged, next) = (&records[99], &records[100]);
    assert_eq!(damaged.position.segment, next.position.segment);
    let segment = store.join(convlog::log::segment::segment_file_name(
        damaged.position.segment,
    ));
    let start = damaged.position.offset;
    let middle = start + (next.position.offset - start) / 2;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&segment)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, middle).unwrap();
    file.write_all_at(&[byte[0] ^ 0xff], middle).unwrap();
    (segment, start)
}

fn assert_fails_at(output: &Output, command: &str, segment: &Path, offset: u64) {
    let text = stderr(output);
    assert_eq!(output.status.code(), Some(1), "{command}: {text}");
    let located = format!(
        "segment {} is corrupted at offset {offset}",
        segment.display()
    );
    assert!(text.contains(&located), "{command}: {text}");
}

#[test]
fn read_commands_exit_1_with_the_located_error_on_a_damaged_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (segment, offset) = damaged_store(&store);
    let store = path(&store);

    let verify = run(&["verify", store], b"");
    assert_fails_at(&verify, "verify", &segment, offset);

    // dump prints the events before the damage, then says where it stopped.
    let dump = run(&["dump", store], b"");
    assert_fails_at(&dump, "dump", &segment, offset);
    assert_eq!(stdout(&dump).lines().count(), 99);
    assert!(
        stderr(&dump).contains("the output stops after LSN 99"),
        "{}",
        stderr(&dump)
    );

    // The rest print nothing at all.
    for args in [
        vec!["inspect", store],
        vec!["inspect", store, "--conversation", "ctx_1"],
        vec!["tail", store],
        vec!["tail", store, "-n", "5", "--json"],
        vec![
            "export",
            store,
            "--conversation",
            "ctx_1",
            "--format",
            "html",
        ],
        vec![
            "export",
            store,
            "--conversation",
            "ctx_1",
            "--format",
            "jsonl",
        ],
    ] {
        let output = run(&args, b"");
        let command = args.join(" ");
        assert_fails_at(&output, &command, &segment, offset);
        assert_eq!(stdout(&output), "", "{command} printed output");
    }
}

#[test]
fn the_documented_migration_fails_instead_of_copying_part_of_a_damaged_store() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old");
    damaged_store(&old);
    let dump = run(&["dump", path(&old)], b"");
    assert_eq!(dump.status.code(), Some(1), "{}", stderr(&dump));
    // What `set -o pipefail; convlog dump old | convlog append new` sees:
    // the append succeeds with what came through, the pipeline fails.
    let new = dir.path().join("new");
    let append = run(&["append", path(&new)], &dump.stdout);
    assert_eq!(append.status.code(), Some(0), "{}", stderr(&append));
    assert_eq!(stdout(&append).lines().count(), 99);
}

#[test]
fn dump_from_an_lsn_compaction_deleted_names_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    {
        let options = convlog::StoreOptions::new()
            .segment_bytes_max(4096)
            .retention(convlog::store::Retention::DeleteCoveredBySnapshot);
        let writer = convlog::Store::open(&store, options).unwrap();
        for index in 0..100 {
            let entry = convlog::ConversationEntry::new(
                "eval-1",
                index,
                convlog::Role::User,
                Some(format!("message number {index} with some padding text")),
            );
            writer.append(&[entry.recorded_in("ctx_1")]).unwrap();
        }
        writer.snapshot().unwrap();
        assert!(!writer.compact().unwrap().removed.is_empty());
    }
    let first_lsn = LogReader::open(&store)
        .unwrap()
        .iter()
        .next()
        .unwrap()
        .unwrap()
        .lsn;
    assert!(first_lsn > 2);

    let dump = run(&["dump", path(&store), "--from", "2"], b"");
    assert_eq!(dump.status.code(), Some(1), "{}", stderr(&dump));
    let expected = format!(
        "the events from LSN 2 to {} are no longer in the log: compaction deleted their segments",
        first_lsn - 1
    );
    assert!(stderr(&dump).contains(&expected), "{}", stderr(&dump));
    assert_eq!(stdout(&dump), "");

    // Without --from, dump starts where the log starts.
    let all = run(&["dump", path(&store)], b"");
    assert_eq!(all.status.code(), Some(0), "{}", stderr(&all));
    assert_eq!(stdout(&all).lines().count() as u64, 101 - first_lsn);
}
