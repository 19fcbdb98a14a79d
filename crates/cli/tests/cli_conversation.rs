//! Black-box tests of the conversation commands of the `convlog` binary:
//! `resume`, `export`, `create-context`, `add-messages`, `set-messages`.

use std::path::Path;
use std::process::Output;

use convlog::model::ConversationEntry;
use convlog::provider::{self, rules, PendingCalls, Provider, RenderOptions, RenderedRequest};
use convlog::{Store, StoreOptions};
use serde_json::{json, Value};

mod common;

use common::{path_arg as path, run_convlog as run, stderr, stdout};

/// Asserts exit 0 and parses stdout as one JSON value.
fn json_output(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
    serde_json::from_str(&stdout(output)).expect("stdout is one JSON value")
}

/// Asserts exit 1 with exactly `convlog: error: MESSAGE` on stderr and
/// nothing on stdout.
fn assert_fails_with(output: &Output, message: &str) {
    assert_eq!(output.status.code(), Some(1), "{}", stderr(output));
    assert_eq!(stderr(output), format!("convlog: error: {message}\n"));
    assert_eq!(stdout(output), "");
}

/// `convlog append STORE` of these lines, which must succeed.
fn append(store: &Path, lines: &[String]) {
    let mut input = lines.join("\n");
    input.push('\n');
    let output = run(&["append", path(store)], input.as_bytes());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

/// `convlog dump STORE` as text, which must succeed.
fn dump(store: &Path) -> String {
    let output = run(&["dump", path(store)], b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    stdout(&output)
}

fn recorded(conversation: &str, entry: Value) -> String {
    json!({"type": "conversation_recorded", "conversation_id": conversation, "entry": entry})
        .to_string()
}

fn status(conversation: &str, evaluation: &str, call: &str, status: &str) -> String {
    json!({"type": "tool_status", "conversation_id": conversation, "evaluation_id": evaluation,
           "call_id": call, "status": status})
    .to_string()
}

fn lookup(call: &str) -> Value {
    json!({"call_id": call, "name": "lookup", "arguments": format!("{{\"city\":\"{call}\"}}")})
}

/// Conversation `trip`: an evaluation that crashed between two results of
/// a batch of three calls. `paris` has its result; `oslo` is completed but
/// its result was never recorded; `rome` is running; `nice` pending.
fn crashed_trip(store: &Path) {
    append(
        store,
        &[
            recorded(
                "trip",
                json!({"evaluation_id": "e1", "role": "system", "content": "You plan trips.",
                       "prompt_ns": "travel", "prompt_key": "planner"}),
            ),
            recorded(
                "trip",
                json!({"evaluation_id": "e1", "role": "user", "content": "Paris or Rome?"}),
            ),
            recorded(
                "trip",
                json!({"evaluation_id": "e1", "turn": 1, "role": "assistant",
                       "content": "Let me look.", "finish_reason": "tool_calls",
                       "tool_calls": [lookup("paris"), lookup("rome"), lookup("oslo"), lookup("nice")]}),
            ),
            status("trip", "e1", "paris", "running"),
            status("trip", "e1", "rome", "running"),
            recorded(
                "trip",
                json!({"evaluation_id": "e1", "turn": 1, "role": "tool", "tool_call_id": "paris",
                       "tool_name": "lookup", "content": "paris: sunny"}),
            ),
            status("trip", "e1", "oslo", "completed"),
        ],
    );
}

fn call_ids(calls: &Value) -> Vec<&str> {
    calls
        .as_array()
        .expect("a list of calls")
        .iter()
        .map(|call| call["call"]["call_id"].as_str().unwrap())
        .collect()
}

#[test]
fn resume_reports_the_unfinished_and_finished_calls_of_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    crashed_trip(&store);

    let report = json_output(&run(
        &["resume", path(&store), "--conversation", "trip"],
        b"",
    ));
    assert_eq!(report["conversation_id"], "trip");
    assert_eq!(report["evaluation_id"], "e1");
    assert_eq!(call_ids(&report["unfinished_calls"]), ["rome", "nice"]);
    assert_eq!(report["unfinished_calls"][0]["call"]["status"], "running");
    assert_eq!(report["unfinished_calls"][1]["call"]["status"], "pending");
    assert!(report["unfinished_calls"][0]["assistant_message_id"].is_string());
    assert_eq!(call_ids(&report["finished_calls"]), ["paris", "oslo"]);
    assert_eq!(
        report["finished_calls"][0]["result"]["content"],
        "paris: sunny"
    );
    assert_eq!(report["finished_calls"][1]["call"]["status"], "completed");
    assert!(report["finished_calls"][1]["result"].is_null());
    assert_eq!(report["next_sequence"], 4);
    assert_eq!(report["turn"], 1);
    assert_eq!(report["next_turn"], 2);
    assert_eq!(report["finished"], false);
    assert!(
        report.get("entries").is_none(),
        "entries only with --entries"
    );

    let report = json_output(&run(
        &[
            "resume",
            path(&store),
            "--conversation",
            "trip",
            "--evaluation",
            "e1",
            "--prompt",
            "travel/planner",
            "--entries",
        ],
        b"",
    ));
    let roles: Vec<&str> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
}

#[test]
fn resume_of_a_finished_evaluation_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    append(
        &store,
        &[
            recorded(
                "c",
                json!({"evaluation_id": "e", "role": "user", "content": "Hi"}),
            ),
            recorded(
                "c",
                json!({"evaluation_id": "e", "turn": 1, "role": "assistant", "content": "Hello"}),
            ),
        ],
    );
    let report = json_output(&run(&["resume", path(&store), "--conversation", "c"], b""));
    assert_eq!(report["finished"], true);
    assert_eq!(report["unfinished_calls"], json!([]));
    assert_eq!(report["finished_calls"], json!([]));
    assert_eq!(report["next_sequence"], 2);
}

#[test]
fn resume_fails_on_a_prompt_mismatch_naming_both_identities() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    crashed_trip(&store);

    let output = run(
        &[
            "resume",
            path(&store),
            "--conversation",
            "trip",
            "--prompt",
            "travel/booker",
        ],
        b"",
    );
    assert_fails_with(
        &output,
        r#"conversation "trip", evaluation "e1" was started with prompt travel/planner, not travel/booker"#,
    );
    let output = run(
        &[
            "resume",
            path(&store),
            "--conversation",
            "trip",
            "--prompt",
            "-/-",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("travel/planner, not -/-"));

    let output = run(&["resume", path(&store), "--conversation", "nowhere"], b"");
    assert_fails_with(
        &output,
        r#"conversation "nowhere" does not exist in the store"#,
    );
    let output = run(
        &[
            "resume",
            path(&store),
            "--conversation",
            "trip",
            "--evaluation",
            "e9",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains(r#"has no evaluation "e9""#));
}

/// `convlog export STORE --conversation CONVERSATION --format FORMAT ARGS`.
fn export(store: &Path, conversation: &str, format: &str, args: &[&str]) -> Output {
    let mut all = vec![
        "export",
        path(store),
        "--conversation",
        conversation,
        "--format",
        format,
    ];
    all.extend_from_slice(args);
    run(&all, b"")
}

/// The request a body printed by `export` holds, for the rule checkers.
fn request_of(provider: Provider, body: &Value) -> RenderedRequest {
    let messages = body[provider.messages_field()]
        .as_array()
        .unwrap_or_else(|| panic!("{provider}: no {} list", provider.messages_field()))
        .clone();
    let system = provider
        .system_field()
        .and_then(|field| body.get(field).cloned());
    let known: Vec<&str> = [Some(provider.messages_field()), provider.system_field()]
        .into_iter()
        .flatten()
        .collect();
    for key in body.as_object().unwrap().keys() {
        assert!(
            known.contains(&key.as_str()),
            "{provider}: unexpected {key}"
        );
    }
    RenderedRequest {
        provider,
        messages,
        system,
        unfinished_calls: Vec::new(),
        skipped_results: Vec::new(),
    }
}

/// The library's rendering of the stored conversation.
fn library_render(
    store: &Path,
    conversation: &str,
    provider: Provider,
    pending: PendingCalls,
) -> Value {
    let store = Store::open(store, StoreOptions::default()).unwrap();
    let slice = store.conversation(conversation).unwrap();
    let options = RenderOptions::new().pending(pending);
    provider::render(provider, slice.entries(), &options)
        .unwrap()
        .body()
}

#[test]
fn export_renders_a_valid_request_for_every_provider_in_both_pending_modes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    crashed_trip(&store);
    // A second evaluation: consecutive user messages and a failed tool.
    append(
        &store,
        &[
            recorded(
                "trip",
                json!({"evaluation_id": "e2", "role": "user", "content": "Also Oslo?"}),
            ),
            recorded(
                "trip",
                json!({"evaluation_id": "e2", "role": "user", "content": "And be quick."}),
            ),
            recorded(
                "trip",
                json!({"evaluation_id": "e2", "turn": 1, "role": "assistant",
                       "tool_calls": [lookup("bergen")]}),
            ),
            recorded(
                "trip",
                json!({"evaluation_id": "e2", "turn": 1, "role": "tool", "tool_call_id": "bergen",
                       "tool_name": "lookup", "content": "timeout", "is_error": true}),
            ),
            recorded(
                "trip",
                json!({"evaluation_id": "e2", "turn": 2, "role": "assistant", "content": "Oslo is cold."}),
            ),
        ],
    );
    for provider in Provider::ALL {
        for (flags, pending, calls) in [
            (vec![], PendingCalls::Drop, 3),
            (vec!["--pending", "drop"], PendingCalls::Drop, 3),
            (vec!["--pending", "error"], PendingCalls::SyntheticError, 5),
        ] {
            let output = export(&store, "trip", provider.name(), &flags);
            let body = json_output(&output);
            let request = request_of(provider, &body);
            if let Err(broken) = rules::check(provider, &request) {
                panic!("{provider} {flags:?}: {broken}\n{body:#}");
            }
            assert_eq!(
                rules::tool_call_count(&request),
                calls,
                "{provider} {flags:?}: paris, oslo and bergen are sent; rome and nice only when answered\n{body:#}"
            );
            let text = body.to_string();
            assert_eq!(
                text.contains(provider::INTERRUPTED_TEXT),
                pending == PendingCalls::SyntheticError,
                "{provider} {flags:?}: unfinished calls answered only with --pending error"
            );
            assert!(
                stderr(&output).contains("rome, nice"),
                "{provider}: the note names the unfinished calls: {}",
                stderr(&output)
            );
            assert_eq!(
                body,
                library_render(&store, "trip", provider, pending),
                "{provider} {flags:?}: the CLI prints the library's body"
            );
        }
    }
}

#[test]
fn export_jsonl_prints_the_stored_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    crashed_trip(&store);
    let output = export(&store, "trip", "jsonl", &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let printed: Vec<ConversationEntry> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is an entry"))
        .collect();
    let store = Store::open(&store, StoreOptions::default()).unwrap();
    let stored: Vec<ConversationEntry> = store
        .conversation("trip")
        .unwrap()
        .entries()
        .cloned()
        .collect();
    assert_eq!(printed, stored);
    assert_eq!(printed.len(), 4);
}

#[test]
fn export_curate_shrinks_the_export_and_leaves_the_store_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut lines = vec![recorded(
        "long",
        json!({"evaluation_id": "e", "role": "system", "content": "Be brief."}),
    )];
    for index in 0..20 {
        lines.push(recorded(
            "long",
            json!({"evaluation_id": "e", "role": "user", "content": format!("question {index}")}),
        ));
        lines.push(recorded(
            "long",
            json!({"evaluation_id": "e", "turn": index + 1, "role": "assistant", "tool_calls": [lookup(&format!("call_{index}"))]}),
        ));
        lines.push(recorded(
            "long",
            json!({"evaluation_id": "e", "turn": index + 1, "role": "tool",
                   "tool_call_id": format!("call_{index}"), "tool_name": "lookup",
                   "content": "x".repeat(500)}),
        ));
    }
    append(&store, &lines);
    let before = dump(&store);

    let full = json_output(&export(&store, "long", "openai", &[]));
    assert_eq!(full["messages"].as_array().unwrap().len(), 61);
    let curated = json_output(&export(
        &store,
        "long",
        "openai",
        &["--curate", "window=4,truncate=100"],
    ));
    let messages = curated["messages"].as_array().unwrap();
    assert!(
        messages.len() < 6,
        "system and at most 4 others: {curated:#}"
    );
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages.last().unwrap()["role"], "tool");
    assert!(
        messages.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .chars()
            .count()
            <= 100
    );
    rules::check(
        Provider::OpenAiChat,
        &request_of(Provider::OpenAiChat, &curated),
    )
    .unwrap();
    for provider in Provider::ALL {
        let body = json_output(&export(
            &store,
            "long",
            provider.name(),
            &["--curate", "window=50,truncate=1000,budget=2000"],
        ));
        rules::check(provider, &request_of(provider, &body))
            .unwrap_or_else(|broken| panic!("{provider}: {broken}"));
    }

    let lines = export(&store, "long", "jsonl", &["--curate", "window=3"]);
    assert_eq!(lines.status.code(), Some(0), "{}", stderr(&lines));
    let roles: Vec<String> = stdout(&lines)
        .lines()
        .map(|line| {
            let entry: Value = serde_json::from_str(line).unwrap();
            entry["role"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);

    assert_eq!(dump(&store), before, "export appends nothing");
}

#[test]
fn export_usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    crashed_trip(&store);
    for args in [
        vec!["--format", "html", "--pending", "error"],
        vec!["--format", "html", "--curate", "window=5"],
        vec!["--format", "openai", "--pending", "keep"],
        vec!["--format", "jsonl", "--pending", "error"],
        vec!["--format", "openai", "--curate", "window=lots"],
        vec!["--format", "openai", "--curate", "frobnicate=3"],
    ] {
        let mut all = vec!["export", path(&store), "--conversation", "trip"];
        all.extend_from_slice(&args);
        let output = run(&all, b"");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let output = run(&["export", path(&store), "--format", "openai"], b"");
    assert_eq!(output.status.code(), Some(2), "--conversation is required");
    let output = run(&["export", path(&store), "--conversation", "trip"], b"");
    assert_eq!(output.status.code(), Some(2), "--format is required");
    let output = export(&store, "nowhere", "openai", &[]);
    assert_fails_with(
        &output,
        r#"conversation "nowhere" does not exist in the store"#,
    );
}

/// A store with context `ctx_1` owned by alice (private).
fn store_with_context(dir: &Path) -> std::path::PathBuf {
    let store = dir.join("store");
    let info = json_output(&run(
        &[
            "create-context",
            path(&store),
            "--conversation",
            "ctx_1",
            "--as",
            "alice",
        ],
        b"",
    ));
    assert_eq!(
        info,
        json!({"context_id": "ctx_1", "owner": "alice", "public": false, "created_lsn": 1})
    );
    store
}

fn add_messages(store: &Path, user: &str, messages: &Value) -> Output {
    run(
        &[
            "add-messages",
            path(store),
            "--conversation",
            "ctx_1",
            "--as",
            user,
        ],
        messages.to_string().as_bytes(),
    )
}

fn set_messages(store: &Path, user: &str, messages: &Value) -> Output {
    run(
        &[
            "set-messages",
            path(store),
            "--conversation",
            "ctx_1",
            "--as",
            user,
        ],
        messages.to_string().as_bytes(),
    )
}

fn manual_tool_interaction() -> Value {
    json!([
        {"sender": "human", "message": "Search for user data"},
        {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "database_search",
         "tool_input": {"table": "users", "query": "active"}},
        {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "Found 100 active users"},
        {"sender": "ai", "message": "There are 100 active users."}
    ])
}

#[test]
fn add_messages_appends_the_list_and_prints_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_context(dir.path());
    let messages = manual_tool_interaction();
    let updated = json_output(&add_messages(&store, "alice", &messages));
    assert_eq!(updated["context_id"], "ctx_1");
    assert_eq!(updated["owner"], "alice");
    assert_eq!(updated["public"], false);
    assert_eq!(updated["lsns"], json!([2, 3, 4, 5]));
    assert_eq!(updated["messages"], messages);

    // The seed's request body works too, and continues the conversation.
    let more =
        json!({"context_id": "ctx_1", "messages": [{"sender": "human", "message": "Thanks"}]});
    let updated = json_output(&add_messages(&store, "alice", &more));
    assert_eq!(updated["lsns"], json!([6]));
    assert_eq!(updated["messages"].as_array().unwrap().len(), 5);

    let entries: Vec<Value> = stdout(&export(&store, "ctx_1", "jsonl", &[]))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let sequences: Vec<u64> = entries
        .iter()
        .map(|entry| entry["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, [0, 1, 2, 3, 4]);
    assert!(entries
        .iter()
        .all(|entry| entry["evaluation_id"] == entries[0]["evaluation_id"]));
    assert_eq!(entries[1]["tool_calls"][0]["name"], "database_search");
}

#[test]
fn add_messages_rejects_each_broken_rule_with_the_seed_wording_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_context(dir.path());
    let before = dump(&store);
    for (messages, error) in [
        (
            json!([{"type": "tool_response", "tool_call_id": "call_123", "tool_output": "x"}]),
            "Tool responses found without corresponding tool calls: ['call_123']",
        ),
        (
            json!([
                {"sender": "human", "message": "hi"},
                {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "x"},
                {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "t", "tool_input": {}}
            ]),
            "Tool response with ID 'call_1' appears before its corresponding tool call",
        ),
        (
            json!([
                {"sender": "human", "message": "hi"},
                {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "t", "tool_input": {}},
                {"type": "tool_call", "tool_call_id": "call_2", "tool_name": "t", "tool_input": {}},
                {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "x"}
            ]),
            "Tool calls found without corresponding responses: ['call_2']",
        ),
    ] {
        assert_fails_with(&add_messages(&store, "alice", &messages), error);
        assert_fails_with(&set_messages(&store, "alice", &messages), error);
        assert_eq!(dump(&store), before, "nothing appended for {error}");
    }
}

#[test]
fn malformed_message_lists_fail_naming_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_context(dir.path());
    let before = dump(&store);
    for (input, expected) in [
        (
            &b"[{\"sender\": \"human\""[..],
            "standard input: invalid JSON: ",
        ),
        (
            br#"[{"sender": "human", "message": "ok"}, {"sender": "robot", "message": "x"}]"#,
            "standard input: message [1]: unknown variant `robot`",
        ),
        (
            br#"[{"type": "tool_response", "tool_call_id": "c"}]"#,
            "standard input: message [0]: missing field `tool_output`",
        ),
        (br#""hello""#, "standard input: expected a JSON array"),
        (
            br#"{"context_id": "ctx_2", "messages": []}"#,
            r#"standard input: context_id "ctx_2" differs from --conversation "ctx_1""#,
        ),
    ] {
        let output = run(
            &[
                "add-messages",
                path(&store),
                "--conversation",
                "ctx_1",
                "--as",
                "alice",
            ],
            input,
        );
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        assert!(
            stderr(&output).starts_with(&format!("convlog: error: {expected}")),
            "{}",
            stderr(&output)
        );
    }
    assert_eq!(dump(&store), before);
}

#[test]
fn set_messages_replaces_and_the_old_events_stay_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_context(dir.path());
    json_output(&add_messages(&store, "alice", &manual_tool_interaction()));
    let before = dump(&store);

    let fresh = json!([
        {"sender": "system", "message": "This is a fresh conversation"},
        {"sender": "human", "message": "Hello, starting over"}
    ]);
    let updated = json_output(&set_messages(&store, "alice", &fresh));
    assert_eq!(updated["lsns"], json!([6]), "one messages_replaced event");
    assert_eq!(updated["messages"], fresh);

    let after = dump(&store);
    assert!(after.starts_with(&before), "the old events stay in the log");
    let added: Vec<Value> = after[before.len()..]
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0]["type"], "messages_replaced");
    assert!(before.contains("Found 100 active users"));

    let entries = stdout(&export(&store, "ctx_1", "jsonl", &[]));
    assert_eq!(
        entries.lines().count(),
        2,
        "the conversation holds the new list"
    );
    assert!(!entries.contains("Found 100 active users"));
}

#[test]
fn access_errors_use_the_seed_wording_and_append_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_context(dir.path());
    let before = dump(&store);
    let hello = json!([{"sender": "human", "message": "hello"}]);
    assert_fails_with(
        &add_messages(&store, "bob", &hello),
        "Context does not belong to user",
    );
    assert_fails_with(
        &set_messages(&store, "bob", &hello),
        "Context does not belong to user",
    );
    let anonymous = run(
        &["add-messages", path(&store), "--conversation", "ctx_1"],
        hello.to_string().as_bytes(),
    );
    assert_fails_with(&anonymous, "Context does not belong to user");
    for command in ["add-messages", "set-messages"] {
        let output = run(
            &[
                command,
                path(&store),
                "--conversation",
                "ctx_404",
                "--as",
                "alice",
            ],
            hello.to_string().as_bytes(),
        );
        assert_fails_with(&output, "Context with id: ctx_404 does not exist");
    }
    let again = run(
        &[
            "create-context",
            path(&store),
            "--conversation",
            "ctx_1",
            "--as",
            "bob",
        ],
        b"",
    );
    assert_fails_with(&again, "Context with id: ctx_1 already exists");
    assert_eq!(dump(&store), before);

    // A public context: anyone may add, with or without --as.
    let info = json_output(&run(
        &[
            "create-context",
            path(&store),
            "--conversation",
            "ctx_pub",
            "--public",
        ],
        b"",
    ));
    assert_eq!(info["owner"], Value::Null);
    assert_eq!(info["public"], true);
    for args in [vec!["--as", "bob"], vec![]] {
        let mut all = vec!["add-messages", path(&store), "--conversation", "ctx_pub"];
        all.extend(args);
        json_output(&run(&all, hello.to_string().as_bytes()));
    }
    let without_owner = run(
        &["create-context", path(&store), "--conversation", "ctx_x"],
        b"",
    );
    assert_eq!(
        without_owner.status.code(),
        Some(2),
        "no --as needs --public"
    );
}

#[test]
fn a_conversation_recorded_by_append_becomes_a_context() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    crashed_trip(&store);
    json_output(&run(
        &[
            "create-context",
            path(&store),
            "--conversation",
            "trip",
            "--as",
            "alice",
        ],
        b"",
    ));
    // Answer the two open calls of the crash; the list may answer calls
    // that are stored and still open.
    let answers = json!([
        {"type": "tool_response", "tool_call_id": "rome", "tool_output": "rome: rain"},
        {"type": "tool_response", "tool_call_id": "nice", "tool_output": "nice: sun"},
        {"sender": "ai", "message": "Paris."}
    ]);
    let output = run(
        &[
            "add-messages",
            path(&store),
            "--conversation",
            "trip",
            "--as",
            "alice",
        ],
        answers.to_string().as_bytes(),
    );
    json_output(&output);
    let report = json_output(&run(
        &["resume", path(&store), "--conversation", "trip"],
        b"",
    ));
    assert_eq!(report["unfinished_calls"], json!([]));
    assert_eq!(report["finished"], true);
    assert_eq!(report["next_sequence"], 7);
}

#[test]
fn conversation_commands_on_a_missing_store_fail_without_creating_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    for args in [
        vec!["resume", path(&missing), "--conversation", "c"],
        vec![
            "export",
            path(&missing),
            "--conversation",
            "c",
            "--format",
            "openai",
        ],
        vec![
            "add-messages",
            path(&missing),
            "--conversation",
            "c",
            "--as",
            "a",
        ],
        vec![
            "set-messages",
            path(&missing),
            "--conversation",
            "c",
            "--as",
            "a",
        ],
    ] {
        let output = run(&args, b"[]");
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let errors = stderr(&output);
        assert!(errors.starts_with("convlog: error: "), "{errors}");
        assert!(errors.contains("missing"), "names the store: {errors}");
        assert!(!missing.exists(), "{args:?} created the store");
    }
}

#[test]
fn conversation_usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = path(&store);
    for args in [
        vec!["resume", store],
        vec![
            "resume",
            store,
            "--conversation",
            "c",
            "--prompt",
            "planner",
        ],
        vec![
            "resume",
            store,
            "--conversation",
            "c",
            "--prompt",
            "travel/",
        ],
        vec!["add-messages", store],
        vec!["set-messages", store, "--as"],
        vec!["create-context", store, "--conversation"],
    ] {
        let output = run(&args, b"");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    assert!(
        !Path::new(store).exists(),
        "no usage error touches the store"
    );
}

#[test]
fn every_conversation_subcommand_help_shows_an_example() {
    for command in [
        "resume",
        "export",
        "create-context",
        "add-messages",
        "set-messages",
    ] {
        let output = run(&[command, "--help"], b"");
        assert_eq!(output.status.code(), Some(0), "{command}");
        let help = stdout(&output);
        assert!(help.contains("Example"), "{command} --help:\n{help}");
        assert!(
            help.contains(&format!("convlog {command} ./my-store --conversation")),
            "{command} --help:\n{help}"
        );
    }
    let help = stdout(&run(&["add-messages", "--help"], b""));
    assert!(help.contains("never\ncreates one") || help.contains("never creates one"));
}

/// Appends `count` user entries to conversation `filler` through the
/// library with 4 KiB segments, so the log rolls to new segments.
fn fill_with_small_segments(store: &Path, count: u64) {
    let options = StoreOptions::new().segment_bytes_max(4096);
    let store = Store::open(store, options).unwrap();
    for index in 0..count {
        let entry = ConversationEntry::new(
            "e",
            index,
            convlog::Role::User,
            Some(format!("filler {index}: {}", "lorem ipsum ".repeat(20))),
        );
        store.append(&[entry.recorded_in("filler")]).unwrap();
    }
}

#[test]
fn contexts_survive_a_snapshot_and_compaction_by_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    fill_with_small_segments(&store, 30);
    json_output(&run(
        &[
            "create-context",
            path(&store),
            "--conversation",
            "ctx_1",
            "--as",
            "alice",
        ],
        b"",
    ));
    fill_with_small_segments(&store, 60);
    for args in [
        vec!["snapshot", path(&store)],
        vec!["compact", path(&store), "--delete-covered"],
    ] {
        let output = run(&args, b"");
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
    assert!(
        !dump(&store).contains("convlog.context.created"),
        "the segment holding the context event was compacted away"
    );
    let updated = json_output(&add_messages(
        &store,
        "alice",
        &json!([{"sender": "human", "message": "still mine"}]),
    ));
    assert_eq!(updated["owner"], "alice");
    assert_fails_with(
        &add_messages(&store, "bob", &json!([])),
        "Context does not belong to user",
    );
}
