//! `convlog export --format snapshot-json` and `convlog import`: a
//! conversation goes out as snapshot JSON (docs/interop.md) and comes back
//! the same; bad documents and refused imports exit 1 with what and where,
//! and record nothing; flag misuse exits 2.

mod common;

use std::path::Path;
use std::process::Output;

use common::{path_arg, run_convlog, stderr, stdout};
use serde_json::Value;

/// Events of one conversation: a call completed by its result, one failed
/// with an error, one left running by a crash.
const EVENTS: &str = r#"{"type":"conversation_recorded","conversation_id":"trip","entry":{"evaluation_id":"e1","sequence":0,"role":"system","content":"You plan trips.","prompt_ns":"trips","prompt_key":"planner","created_at":"2026-05-01T10:00:00Z"}}
{"type":"conversation_recorded","conversation_id":"trip","entry":{"evaluation_id":"e1","sequence":1,"role":"user","content":"Paris?","created_at":"2026-05-01T10:00:01Z"}}
{"type":"conversation_recorded","conversation_id":"trip","entry":{"evaluation_id":"e1","sequence":2,"role":"assistant","turn":1,"reasoning":{"text":"look it up"},"tool_calls":[{"call_id":"c1","name":"weather","arguments":"{}"},{"call_id":"c2","name":"book","arguments":"{}"},{"call_id":"c3","name":"mail","arguments":"{}"}],"created_at":"2026-05-01T10:00:02Z"}}
{"type":"tool_status","conversation_id":"trip","evaluation_id":"e1","call_id":"c1","status":"running","at":"2026-05-01T10:00:03Z"}
{"type":"tool_status","conversation_id":"trip","evaluation_id":"e1","call_id":"c2","status":"failed","error":"no seats","at":"2026-05-01T10:00:04Z"}
{"type":"tool_status","conversation_id":"trip","evaluation_id":"e1","call_id":"c3","status":"running","at":"2026-05-01T10:00:05Z"}
{"type":"conversation_recorded","conversation_id":"trip","entry":{"evaluation_id":"e1","sequence":3,"role":"tool","turn":1,"tool_call_id":"c1","tool_name":"weather","content":"18C","created_at":"2026-05-01T10:00:06Z"}}
"#;

fn store_with_events(dir: &Path, name: &str) -> String {
    let store = dir.join(name);
    let output = run_convlog(&["append", path_arg(&store)], EVENTS.as_bytes());
    assert!(output.status.success(), "append: {}", stderr(&output));
    path_arg(&store).to_string()
}

fn export(store: &str, conversation: &str, format: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "export",
        store,
        "--conversation",
        conversation,
        "--format",
        format,
    ];
    args.extend_from_slice(extra);
    run_convlog(&args, b"")
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        stderr(&output)
    );
    stdout(&output)
}

fn failed(output: &Output, code: i32) -> String {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(output),
        stderr(output)
    );
    stderr(output)
}

#[test]
fn snapshot_json_round_trips_through_import() {
    let dir = tempfile::tempdir().unwrap();
    let source = store_with_events(dir.path(), "source");
    let document = ok(export(&source, "trip", "snapshot-json", &[]));
    let parsed: Value = serde_json::from_str(&document).expect("one JSON document");
    assert_eq!(parsed["version"], "1");
    assert_eq!(parsed["slices"][0]["items"].as_array().unwrap().len(), 4);
    let file = dir.path().join("trip.json");
    std::fs::write(&file, &document).unwrap();

    let target = dir.path().join("target");
    let printed = ok(run_convlog(
        &["import", path_arg(&target), path_arg(&file)],
        b"",
    ));
    for expected in [
        "conversation     trip",
        "mode             new conversation",
        "entries          4",
        "status events    4",
        "evaluations      1 (e1)",
        "unfinished calls c3 (latest evaluation e1)",
    ] {
        assert!(printed.contains(expected), "{expected:?} in:\n{printed}");
    }
    // The same entries, statuses, times and reasoning included.
    let before = ok(export(&source, "trip", "jsonl", &[]));
    let after = ok(export(path_arg(&target), "trip", "jsonl", &[]));
    assert_eq!(after, before);
    assert!(after.contains("no seats") && after.contains("look it up"));
}

#[test]
fn import_reads_standard_input_into_a_named_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let source = store_with_events(dir.path(), "source");
    let document = ok(export(&source, "trip", "snapshot-json", &[]));
    let target = dir.path().join("target");
    let printed = ok(run_convlog(
        &["import", path_arg(&target), "-", "--conversation", "copy"],
        document.as_bytes(),
    ));
    assert!(printed.contains("conversation     copy"), "{printed}");
    let copied = ok(export(path_arg(&target), "copy", "jsonl", &[]));
    assert_eq!(copied.lines().count(), 4);
}

#[test]
fn type_name_and_documented_only_shape_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let source = store_with_events(dir.path(), "source");
    let document = ok(export(
        &source,
        "trip",
        "snapshot-json",
        &[
            "--type-name",
            "myhost.session:InnerMessage",
            "--documented-only",
        ],
    ));
    let parsed: Value = serde_json::from_str(&document).unwrap();
    assert_eq!(
        parsed["slices"][0]["slice_type"],
        "myhost.session:InnerMessage"
    );
    assert_eq!(
        parsed["slices"][0]["item_type"],
        "myhost.session:InnerMessage"
    );
    assert!(!document.contains("\"convlog\""), "{document}");
    // The running call c3 is pending in the documented shape.
    assert_eq!(
        parsed["slices"][0]["items"][2]["tool_calls"][2]["status"],
        "pending"
    );
    assert_eq!(
        parsed["slices"][0]["items"][2]["tool_calls"][1]["status"],
        "failed"
    );
    // Without the extension the document names no conversation.
    let file = dir.path().join("plain.json");
    std::fs::write(&file, &document).unwrap();
    let target = dir.path().join("target");
    let output = run_convlog(&["import", path_arg(&target), path_arg(&file)], b"");
    let error = failed(&output, 1);
    assert!(error.contains("names no conversation"), "{error}");
    ok(run_convlog(
        &[
            "import",
            path_arg(&target),
            path_arg(&file),
            "--conversation",
            "plain",
        ],
        b"",
    ));
}

#[test]
fn a_bad_document_exits_1_naming_the_field_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let source = store_with_events(dir.path(), "source");
    let document = ok(export(&source, "trip", "snapshot-json", &[]));
    let mut parsed: Value = serde_json::from_str(&document).unwrap();
    parsed["slices"][0]["items"][2]["tool_calls"][0]["status"] = Value::from("done");
    let file = dir.path().join("bad.json");
    std::fs::write(&file, serde_json::to_string(&parsed).unwrap()).unwrap();
    let target = dir.path().join("target");
    let output = run_convlog(&["import", path_arg(&target), path_arg(&file)], b"");
    let error = failed(&output, 1);
    assert!(
        error.contains("bad.json")
            && error.contains("slices[0].items[2].tool_calls[0].status")
            && error.contains("\"done\" is not a call status")
            && error.contains("nothing was imported"),
        "{error}"
    );
    assert!(!target.exists(), "no store was created");

    let missing = dir.path().join("missing.json");
    let output = run_convlog(&["import", path_arg(&target), path_arg(&missing)], b"");
    assert!(failed(&output, 1).contains("missing.json"));

    let output = run_convlog(&["import", path_arg(&target), "-"], b"{\"slices\": [");
    assert!(failed(&output, 1).contains("not JSON"));
}

#[test]
fn import_into_a_conversation_with_events_needs_merge_or_replace() {
    let dir = tempfile::tempdir().unwrap();
    let source = store_with_events(dir.path(), "source");
    let document = ok(export(&source, "trip", "snapshot-json", &[]));
    let file = dir.path().join("trip.json");
    std::fs::write(&file, &document).unwrap();
    let before = ok(run_convlog(&["dump", &source], b""));

    let output = run_convlog(&["import", &source, path_arg(&file)], b"");
    let error = failed(&output, 1);
    assert!(
        error.contains("already holds 4 message(s)") && error.contains("--merge"),
        "{error}"
    );
    assert_eq!(
        ok(run_convlog(&["dump", &source], b"")),
        before,
        "nothing appended"
    );

    // A merge of the same document adds no message.
    let entries = ok(export(&source, "trip", "jsonl", &[]));
    let printed = ok(run_convlog(
        &["import", &source, path_arg(&file), "--merge"],
        b"",
    ));
    assert!(printed.contains("mode             merge"), "{printed}");
    assert_eq!(ok(export(&source, "trip", "jsonl", &[])), entries);

    // Replace: the conversation holds the document's messages only.
    let other = dir.path().join("other");
    let user = r#"{"type":"conversation_recorded","conversation_id":"trip","entry":{"evaluation_id":"old","sequence":0,"role":"user","content":"forget me"}}"#;
    ok(run_convlog(&["append", path_arg(&other)], user.as_bytes()));
    ok(run_convlog(
        &["import", path_arg(&other), path_arg(&file), "--replace"],
        b"",
    ));
    assert_eq!(ok(export(path_arg(&other), "trip", "jsonl", &[])), entries);
}

#[test]
fn flag_misuse_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let source = store_with_events(dir.path(), "source");
    for extra in [
        vec!["--format", "openai", "--type-name", "a:B"],
        vec!["--format", "jsonl", "--documented-only"],
        vec!["--format", "snapshot-json", "--pending", "error"],
    ] {
        let mut args = vec!["export", source.as_str(), "--conversation", "trip"];
        args.extend(extra.iter().copied());
        let output = run_convlog(&args, b"");
        failed(&output, 2);
    }
    let output = run_convlog(&["import", &source, "-", "--merge", "--replace"], b"");
    failed(&output, 2);
}
