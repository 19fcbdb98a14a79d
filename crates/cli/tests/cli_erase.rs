//! `convlog keygen` and `convlog erase`, and the commands on an encrypted
//! store (`CONVLOG_KEY_FILE`): docs/erasure.md.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{path_arg, stderr, stdout};

/// Runs `convlog` with `args`, `stdin`, and `CONVLOG_KEY_FILE` set to `key`
/// (or unset).
fn convlog(args: &[&str], stdin: &str, key: Option<&Path>) -> Output {
    use std::io::Write;
    let mut command = Command::new(env!("CARGO_BIN_EXE_convlog"));
    command
        .args(args)
        .env_remove("CONVLOG_LOG")
        .env_remove("CONVLOG_KEY_FILE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(key) = key {
        command.env("CONVLOG_KEY_FILE", key);
    }
    let mut child = command.spawn().expect("start convlog");
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().expect("wait for convlog")
}

fn event(conversation: &str, content: &str) -> String {
    format!(
        "{{\"type\":\"conversation_recorded\",\"conversation_id\":\"{conversation}\",\"entry\":{{\"evaluation_id\":\"e\",\"role\":\"user\",\"content\":\"{content}\"}}}}\n"
    )
}

#[test]
fn erase_makes_a_conversation_unreadable_and_says_so() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("store.key");
    let made = convlog(&["keygen", "--encryption", path_arg(&key)], "", None);
    assert!(made.status.success(), "{}", stderr(&made));
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = path_arg(&store);
    let input = event("gone", "secret one") + &event("kept", "hello");
    let appended = convlog(&["append", store], &input, Some(&key));
    assert!(appended.status.success(), "{}", stderr(&appended));

    // Without the key: a clear refusal, never garbage.
    let refused = convlog(
        &[
            "export",
            store,
            "--conversation",
            "kept",
            "--format",
            "jsonl",
        ],
        "",
        None,
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("open it with its store key"),
        "{}",
        stderr(&refused)
    );
    let no_key = convlog(&["erase", store, "--conversation", "gone"], "", None);
    assert!(
        stderr(&no_key).contains("erase needs the store key"),
        "{}",
        stderr(&no_key)
    );

    let erased = convlog(
        &["erase", store, "--conversation", "gone", "--by", "ticket 9"],
        "",
        Some(&key),
    );
    assert!(erased.status.success(), "{}", stderr(&erased));
    let report: serde_json::Value = serde_json::from_str(&stdout(&erased)).unwrap();
    assert_eq!(report["erased"], "gone");
    assert_eq!(report["by"], "ticket 9");

    for args in [
        vec![
            "export",
            store,
            "--conversation",
            "gone",
            "--format",
            "jsonl",
        ],
        vec!["resume", store, "--conversation", "gone"],
    ] {
        let output = convlog(&args, "", Some(&key));
        assert!(!output.status.success(), "{args:?}");
        assert!(
            stderr(&output).contains("\"gone\" was erased"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let kept = convlog(
        &[
            "export",
            store,
            "--conversation",
            "kept",
            "--format",
            "jsonl",
        ],
        "",
        Some(&key),
    );
    assert!(stdout(&kept).contains("hello"), "{}", stderr(&kept));
    let stats = convlog(&["stats", store], "", Some(&key));
    assert!(stdout(&stats).contains("1 (gone)"), "{}", stdout(&stats));
    let verify = convlog(&["verify", store], "", None);
    assert!(verify.status.success(), "{}", stderr(&verify));
}
