//! Hostile and careless input: numbers at their limits, over-long lines,
//! odd timestamps, byte order marks, unknown fields, and what the error
//! texts say about them, through the `convlog` command. (The library's
//! case, the `Locked` error text, is in the root's `tests/hostile_input.rs`.)

use std::process::{Command, Stdio};

use convlog::model::{Timestamp, SEQUENCE_MAX, TURN_MAX};
use serde_json::Value;

mod common;

use common::{path_arg as path, run_convlog as run, segment_paths, stderr, stdout};

fn recorded(extra_entry: &str, created_at: Option<&str>) -> String {
    let created = created_at.map_or(String::new(), |at| format!(r#""created_at":"{at}","#));
    format!(
        r#"{{"type":"conversation_recorded","conversation_id":"c",{created}"entry":{{"evaluation_id":"e","role":"user","content":"hi"{extra_entry}}}}}"#
    )
}

fn append(dir: &std::path::Path, input: &[u8]) -> std::process::Output {
    run(&["append", path(dir)], input)
}

#[test]
fn sequence_and_turn_over_their_maxima_are_refused_naming_the_maximum() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let line = recorded(r#","sequence":18446744073709551615"#, None);
    let output = append(&store, format!("{line}\n").as_bytes());
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("entry.sequence") && error.contains("SEQUENCE_MAX"),
        "{error}"
    );

    let line = recorded(r#","turn":4294967295"#, None);
    let output = append(&store, format!("{line}\n").as_bytes());
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("entry.turn") && error.contains("TURN_MAX"),
        "{error}"
    );

    // At the maxima the next sequence and turn are numbers, not 0.
    let line = format!(
        r#"{{"type":"conversation_recorded","conversation_id":"c","entry":{{"evaluation_id":"e","role":"assistant","content":"hi","sequence":{SEQUENCE_MAX},"turn":{TURN_MAX}}}}}"#
    );
    let output = append(&store, format!("{line}\n").as_bytes());
    assert!(output.status.success(), "{}", stderr(&output));
    let output = run(&["resume", path(&store), "--conversation", "c"], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let state: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(state["next_sequence"], SEQUENCE_MAX + 1);
    assert_eq!(state["next_turn"], u64::from(TURN_MAX) + 1);

    // An entry past them, numbered by the store, is refused, not wrapped.
    let line = recorded("", None);
    let output = append(&store, format!("{line}\n").as_bytes());
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("SEQUENCE_MAX"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_over_long_line_is_refused_by_number_without_stopping_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let limit = convlog::log::format::BATCH_BYTES_MAX;
    let mut input = vec![b'x'; limit + 1];
    input.push(b'\n');
    input.extend_from_slice(recorded("", None).as_bytes());
    input.push(b'\n');
    let output = append(&store, &input);
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("line 1: longer than") && error.contains("INPUT_LINE_BYTES_MAX"),
        "{error}"
    );
    assert_eq!(stdout(&output).trim(), "1", "line 2 is appended");
    assert!(error.contains("(line 1)"), "{error}");
}

#[test]
fn timestamps_say_what_is_wrong_and_accept_lowercase_t_and_z() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    for (at, expected) in [
        ("1969-12-31T23:59:59Z", "year 1969 is before 1970"),
        ("2026-06-30T23:59:60Z", "leap second"),
        (
            "2026-02-30T00:00:00Z",
            "day 30 is out of range 01-28 for 2026-02",
        ),
        ("2026-13-01T00:00:00Z", "month 13 is out of range"),
        ("2026-01-01T24:00:00Z", "hour 24 is out of range"),
    ] {
        let output = append(&store, format!("{}\n", recorded("", Some(at))).as_bytes());
        assert!(!output.status.success(), "{at} is refused");
        let error = stderr(&output);
        assert!(
            error.contains("created_at") && error.contains(expected),
            "{at}: {error}"
        );
        assert!(!error.contains("numeric component"), "{error}");
    }
    let output = append(
        &store,
        format!("{}\n", recorded("", Some("2026-01-01t00:00:00.5z"))).as_bytes(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        Timestamp::parse_rfc3339("2026-01-01t00:00:00.5z"),
        Timestamp::parse_rfc3339("2026-01-01T00:00:00.5Z")
    );
}

#[test]
fn a_byte_order_mark_before_the_first_line_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let mut input = b"\xEF\xBB\xBF".to_vec();
    input.extend_from_slice(format!("{}\n", recorded("", None)).as_bytes());
    let output = append(&store, &input);
    assert!(output.status.success(), "{}", stderr(&output));

    let context = dir.path().join("ctx");
    let created = run(
        &[
            "create-context",
            path(&context),
            "--conversation",
            "k",
            "--public",
        ],
        b"",
    );
    assert!(created.status.success(), "{}", stderr(&created));
    let output = run(
        &["add-messages", path(&context), "--conversation", "k"],
        b"\xEF\xBB\xBF[{\"sender\":\"human\",\"message\":\"hi\"}]",
    );
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn add_messages_refuses_unknown_fields_and_duplicate_call_ids() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let created = run(
        &[
            "create-context",
            path(&store),
            "--conversation",
            "k",
            "--public",
        ],
        b"",
    );
    assert!(created.status.success(), "{}", stderr(&created));
    let add = |input: &str| {
        run(
            &["add-messages", path(&store), "--conversation", "k"],
            input.as_bytes(),
        )
    };

    let output =
        add(r#"[{"sender":"human","message":"hi"},{"sender":"ai","message":"x","mesage":"typo"}]"#);
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("message [1]") && error.contains("unknown field `mesage`"),
        "{error}"
    );
    let output = add(
        r#"[{"type":"tool_call","tool_call_id":"d","tool_name":"t","tool_imput":{}},{"type":"tool_response","tool_call_id":"d","tool_output":"o"}]"#,
    );
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("message [0]") && error.contains("unknown field `tool_imput`"),
        "{error}"
    );

    let output = add(
        r#"[{"type":"tool_call","tool_call_id":"d","tool_name":"t"},{"type":"tool_call","tool_call_id":"d","tool_name":"t"},{"type":"tool_response","tool_call_id":"d","tool_output":"o"}]"#,
    );
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("Tool call IDs used by two open tool calls: ['d']"),
        "{error}"
    );
    assert!(
        !error.contains("without corresponding responses"),
        "{error}"
    );
}

#[test]
fn warnings_on_a_pipe_carry_no_colour_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let output = append(&store, format!("{}\n", recorded("", None)).as_bytes());
    assert!(output.status.success(), "{}", stderr(&output));
    // A torn tail: the open warns about cutting it.
    let segment = segment_paths(&store).pop().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend_from_slice(b"torn tail bytes");
    std::fs::write(&segment, bytes).unwrap();
    // `snapshot` opens the store as its writer, which cuts the tail (the
    // read-only commands leave it to the writer).
    let output = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args(["snapshot", path(&store)])
        .env("CONVLOG_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let error = stderr(&output);
    assert!(
        error.contains("WARN") && error.contains("torn tail"),
        "{error}"
    );
    assert!(
        !error.contains('\u{1b}'),
        "no ANSI escapes on a pipe: {error:?}"
    );
}

#[test]
fn add_messages_after_the_highest_sequence_is_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let created = run(
        &[
            "create-context",
            path(&store),
            "--conversation",
            "k",
            "--public",
        ],
        b"",
    );
    assert!(created.status.success(), "{}", stderr(&created));
    let line = format!(
        r#"{{"type":"conversation_recorded","conversation_id":"k","entry":{{"evaluation_id":"e","role":"user","content":"hi","sequence":{SEQUENCE_MAX}}}}}"#
    );
    let output = append(&store, format!("{line}\n").as_bytes());
    assert!(output.status.success(), "{}", stderr(&output));
    let output = run(
        &["add-messages", path(&store), "--conversation", "k"],
        br#"[{"sender":"human","message":"one"},{"sender":"ai","message":"two"}]"#,
    );
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("SEQUENCE_MAX"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn add_messages_stops_reading_at_the_input_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let created = run(
        &[
            "create-context",
            path(&store),
            "--conversation",
            "k",
            "--public",
        ],
        b"",
    );
    assert!(created.status.success(), "{}", stderr(&created));
    let mut input = br#"[{"sender":"human","message":""#.to_vec();
    input.resize(convlog::log::format::BATCH_BYTES_MAX + 1, b'x');
    input.extend_from_slice(br#""}]"#);
    let output = run(
        &["add-messages", path(&store), "--conversation", "k"],
        &input,
    );
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("longer than") && error.contains("INPUT_LINE_BYTES_MAX"),
        "{error}"
    );
}

/// Regression: `convlog stats STORE | head -1` panicked ("failed printing to
/// stdout: Broken pipe") once the reader went away. Every command that
/// prints ends quietly when its standard output is closed, as `dump` does.
#[test]
fn commands_end_quietly_when_their_reader_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store_arg = store.to_str().unwrap();
    let line = r#"{"type":"conversation_recorded","conversation_id":"c","entry":{"evaluation_id":"e","role":"user","content":"hi"}}"#;
    let appended = common::run_convlog(&["append", store_arg], format!("{line}\n").as_bytes());
    assert!(appended.status.success(), "{appended:?}");
    for args in [
        vec!["stats", store_arg],
        vec!["verify", store_arg],
        vec!["dump", store_arg],
        vec!["resume", store_arg, "--conversation", "c"],
    ] {
        // The reader of the pipe is closed before the command writes.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_convlog"))
            .args(&args)
            .env_remove("CONVLOG_LOG")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && !stderr.contains("panicked"),
            "convlog {args:?} with its reader gone: {:?}, stderr: {stderr}",
            output.status
        );
    }
}
