//! `convlog inspect`, `convlog tail` and `convlog export --format html` on
//! the store `convlog demo` leaves.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn convlog(args: &[&str], store: &Path) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_convlog"));
    let (subcommand, rest) = args.split_first().expect("a subcommand");
    command.arg(subcommand).arg(store).args(rest);
    command.output().expect("run convlog")
}

fn demo_store(dir: &Path) -> PathBuf {
    let store = dir.join("store");
    let output = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args(["demo", "--dir"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    store
}

#[test]
fn inspect_tail_and_html_export_read_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = demo_store(dir.path());

    let overview = convlog(&["inspect"], &store);
    let text = String::from_utf8_lossy(&overview.stdout);
    assert!(overview.status.success());
    assert!(
        text.contains("trip-planner") && text.contains("UNFINISHED"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "piped output is plain: {text:?}");

    let timeline = convlog(&["inspect", "--conversation", "trip-planner"], &store);
    let text = String::from_utf8_lossy(&timeline.stdout);
    assert!(
        text.contains("call_oslo") && text.contains("resumed"),
        "{text}"
    );
    let colored = convlog(
        &[
            "inspect",
            "--conversation",
            "trip-planner",
            "--color",
            "always",
        ],
        &store,
    );
    assert!(String::from_utf8_lossy(&colored.stdout).contains('\u{1b}'));

    let json = convlog(
        &["inspect", "--conversation", "trip-planner", "--json"],
        &store,
    );
    let value: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("inspect --json is JSON");
    assert!(value.to_string().contains("call_oslo"));

    let tail = convlog(&["tail", "-n", "2", "--json"], &store);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[1]["lsn"].as_u64(),
        Some(lines[0]["lsn"].as_u64().unwrap() + 1)
    );

    let page = convlog(
        &[
            "export",
            "--conversation",
            "trip-planner",
            "--format",
            "html",
        ],
        &store,
    );
    assert!(
        page.status.success(),
        "{}",
        String::from_utf8_lossy(&page.stderr)
    );
    let html = String::from_utf8_lossy(&page.stdout);
    assert!(
        html.to_ascii_lowercase().starts_with("<!doctype html"),
        "{}",
        &html[..80]
    );
    assert!(html.contains("call_oslo") && !html.contains("https://"));

    let conflict = convlog(
        &[
            "export",
            "--conversation",
            "trip-planner",
            "--format",
            "html",
            "--pending",
            "error",
        ],
        &store,
    );
    assert_eq!(conflict.status.code(), Some(2));
    let missing = convlog(&["inspect", "--conversation", "nope"], &store);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope"));
}
