//! `convlog backup` beside a `convlog append` that keeps running in another
//! process, and the restore of the copy.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::{path_arg, run_convlog, stderr, stdout};

fn event_line(index: u64) -> String {
    format!(
        r#"{{"type":"conversation_recorded","conversation_id":"ctx_{}","entry":{{"evaluation_id":"eval-1","sequence":{},"role":"user","content":"message {index}"}}}}"#,
        index % 4,
        index + 1
    )
}

#[test]
fn backup_beside_a_running_append_copies_every_acknowledged_event_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut writer = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args(["append", path_arg(&store)])
        .env_remove("CONVLOG_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut input = writer.stdin.take().unwrap();
    let mut acks = BufReader::new(writer.stdout.take().unwrap()).lines();
    let mut last_acked = 0;
    for index in 0..50 {
        writeln!(input, "{}", event_line(index)).unwrap();
        input.flush().unwrap();
        last_acked = acks.next().unwrap().unwrap().trim().parse::<u64>().unwrap();
    }
    assert_eq!(last_acked, 50);

    // The writer still holds the store (its stdin is open) while the backup runs.
    let backup = dir.path().join("backup");
    let output = run_convlog(&["backup", path_arg(&store), path_arg(&backup)], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = stdout(&output);
    assert!(printed.contains("1..=50 (50 events)"), "{printed}");
    assert!(printed.contains("ok: copied, then verified"), "{printed}");

    // The writer carries on after the backup.
    for index in 50..60 {
        writeln!(input, "{}", event_line(index)).unwrap();
        input.flush().unwrap();
        acks.next().unwrap().unwrap();
    }
    drop(input);
    assert!(writer.wait().unwrap().success());

    // The backup verifies and holds exactly the first 50 events.
    let output = run_convlog(&["verify", path_arg(&backup)], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let source = stdout(&run_convlog(&["dump", path_arg(&store)], b""));
    let copied = stdout(&run_convlog(&["dump", path_arg(&backup)], b""));
    let source: Vec<&str> = source.lines().collect();
    let copied: Vec<&str> = copied.lines().collect();
    assert_eq!(source.len(), 60);
    assert_eq!(copied, source[..50]);

    // Restore: the backup backed up again to where a store should live.
    let restored = dir.path().join("restored");
    let output = run_convlog(&["backup", path_arg(&backup), path_arg(&restored)], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let output = run_convlog(
        &[
            "export",
            path_arg(&restored),
            "--conversation",
            "ctx_1",
            "--format",
            "jsonl",
        ],
        b"",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output).lines().count(),
        13,
        "ctx_1 holds events 1, 5, …, 49"
    );

    // A second backup into the same place is refused, naming what is there.
    let output = run_convlog(&["backup", path_arg(&store), path_arg(&backup)], b"");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("is not empty"),
        "{}",
        stderr(&output)
    );
}
