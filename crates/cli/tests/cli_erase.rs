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

/// The audit views and `dump` on an encrypted store: with `--key-file`
/// they read its content and list an erased conversation as erased;
/// without it `inspect`, `tail` and `dump` show the structure (ids, LSNs,
/// sealed) and say the content is sealed; an HTML export says the key is
/// needed.
#[test]
fn audit_views_and_dump_read_an_encrypted_store_with_its_key_and_its_structure_without() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("store.key");
    let made = convlog(&["keygen", "--encryption", path_arg(&key)], "", None);
    assert!(made.status.success(), "{}", stderr(&made));
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = path_arg(&store);
    let input = event("gone", "secret one") + &event("kept", "hello there");
    let appended = convlog(&["append", store], &input, Some(&key));
    assert!(appended.status.success(), "{}", stderr(&appended));
    let erased = convlog(&["erase", store, "--conversation", "gone"], "", Some(&key));
    assert!(erased.status.success(), "{}", stderr(&erased));
    let key_arg = path_arg(&key);

    // Without the key: inspect shows the structure, says so, and shows no
    // content.
    let inspect = convlog(&["inspect", store], "", None);
    assert!(inspect.status.success(), "{}", stderr(&inspect));
    let text = stdout(&inspect);
    assert!(
        text.contains("structure only") && text.contains("kept") && text.contains("sealed"),
        "{text}"
    );
    // The log's range is inclusive, as in every other audit view.
    assert!(text.contains("log: LSN 1..="), "{text}");
    assert!(
        text.contains("1 erased conversation") && text.contains("gone"),
        "{text}"
    );
    assert!(
        !text.contains("hello there") && !text.contains("secret one"),
        "{text}"
    );
    assert!(
        stderr(&inspect).contains("the store is encrypted")
            && stderr(&inspect).contains("--key-file"),
        "{}",
        stderr(&inspect)
    );
    let json = convlog(&["inspect", store, "--json"], "", None);
    assert!(json.status.success(), "{}", stderr(&json));
    let overview: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert!(overview["note"]
        .as_str()
        .unwrap()
        .contains("structure only"));
    let states: Vec<(&str, &str)> = overview["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["conversation_id"].as_str().unwrap(),
                row["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(states, [("gone", "erased"), ("kept", "sealed")]);
    let one = convlog(&["inspect", store, "--conversation", "kept"], "", None);
    assert!(one.status.success(), "{}", stderr(&one));
    assert!(
        stdout(&one).contains("convlog.key_made") && !stdout(&one).contains("hello there"),
        "{}",
        stdout(&one)
    );
    // An HTML page is all content: refused without the key, saying why.
    let html = convlog(
        &[
            "export",
            store,
            "--conversation",
            "kept",
            "--format",
            "html",
        ],
        "",
        None,
    );
    assert!(!html.status.success());
    assert!(
        stderr(&html).contains("the store is encrypted") && stderr(&html).contains("--key-file"),
        "{}",
        stderr(&html)
    );
    let tail = convlog(&["tail", store, "-n", "50"], "", None);
    assert!(tail.status.success(), "{}", stderr(&tail));
    let text = stdout(&tail);
    assert!(
        text.contains("kept") && text.contains("sealed (its content needs the store key)"),
        "{text}"
    );
    assert!(!text.contains("hello there"), "{text}");
    assert!(
        stderr(&tail).contains("the store is encrypted"),
        "{}",
        stderr(&tail)
    );
    let dump = convlog(&["dump", store], "", None);
    assert!(dump.status.success(), "{}", stderr(&dump));
    let text = stdout(&dump);
    assert!(
        text.contains("convlog.sealed") && text.contains("\"conversation_id\":\"kept\""),
        "{text}"
    );
    assert!(!text.contains("hello there"), "{text}");
    assert!(
        stderr(&dump).contains("the store is encrypted"),
        "{}",
        stderr(&dump)
    );

    // With it.
    let inspect = convlog(&["inspect", store, "--key-file", key_arg], "", None);
    assert!(inspect.status.success(), "{}", stderr(&inspect));
    let text = stdout(&inspect);
    assert!(
        text.contains("1 erased conversation") && text.contains("gone"),
        "{text}"
    );
    assert!(text.contains("kept"), "{text}");
    let json = convlog(
        &["inspect", store, "--json", "--key-file", key_arg],
        "",
        None,
    );
    let overview: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(overview["erased"], serde_json::json!(["gone"]));
    assert_eq!(overview["conversations"][0]["conversation_id"], "kept");
    let timeline = convlog(
        &[
            "inspect",
            store,
            "--conversation",
            "kept",
            "--key-file",
            key_arg,
        ],
        "",
        None,
    );
    assert!(
        stdout(&timeline).contains("hello there"),
        "{}",
        stderr(&timeline)
    );
    let gone = convlog(
        &[
            "inspect",
            store,
            "--conversation",
            "gone",
            "--key-file",
            key_arg,
        ],
        "",
        None,
    );
    assert!(
        stderr(&gone).contains("\"gone\" was erased"),
        "{}",
        stderr(&gone)
    );
    let html = convlog(
        &[
            "export",
            store,
            "--conversation",
            "kept",
            "--format",
            "html",
            "--key-file",
            key_arg,
        ],
        "",
        None,
    );
    assert!(stdout(&html).contains("hello there"), "{}", stderr(&html));
    let tail = convlog(
        &["tail", store, "-n", "50", "--key-file", key_arg],
        "",
        None,
    );
    let text = stdout(&tail);
    assert!(text.contains("hello there"), "{text}");
    assert!(text.contains("conversation erased"), "{text}");
    assert!(!text.contains("secret one"), "{text}");
    let dump = convlog(&["dump", store], "", Some(&key));
    let text = stdout(&dump);
    assert!(
        text.contains("hello there") && !text.contains("secret one"),
        "{text}"
    );
    assert!(
        stderr(&dump).contains("erased conversations") && stderr(&dump).contains("gone"),
        "{}",
        stderr(&dump)
    );

    // Its key table lost: inspect without the key still shows the
    // structure, and says why the content cannot be read.
    std::fs::remove_file(dir.path().join("store").join("keys")).unwrap();
    let inspect = convlog(&["inspect", store], "", None);
    assert!(inspect.status.success(), "{}", stderr(&inspect));
    assert!(
        stdout(&inspect).contains("structure only"),
        "{}",
        stdout(&inspect)
    );
    assert!(
        stderr(&inspect).contains("is missing"),
        "{}",
        stderr(&inspect)
    );
}
