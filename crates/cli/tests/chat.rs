//! `convlog chat` and `convlog resume --continue`: the real binary against
//! the agent crate's fake OpenAI-compatible server, with real MCP tool
//! servers (`crates/agent/tests/mcp/server.py`, on the MCP Python SDK).
//!
//! The tests that need the MCP server skip, saying so, when `python3`
//! cannot `import mcp`, unless `CONVLOG_REQUIRE_MCP=1`, when they fail.
//! `CONVLOG_PYTHON` names another interpreter. No test depends on timing:
//! the kill test polls the store for the state it waits for, and its
//! bound only turns a defect into a failure instead of a hang.

#[path = "../../agent/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use convlog::model::{Role, ToolStatus};
use convlog::resume::{ResumeOptions, ResumeState};
use convlog::store::StoreOptions;
use serde_json::{json, Value};
use support::mcp_sdk::{available as sdk_available, python, server_script};
use support::{openai, FakeServer, Reply};

/// Bounds waits that would otherwise hang on a defect.
const GENEROUS: Duration = Duration::from_secs(120);

/// Pause between two looks at the store while polling.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The key variables a test must not inherit.
const KEY_VARS: [&str; 4] = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
];

fn convlog() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_convlog"));
    command.env_remove("CONVLOG_LOG").stdin(Stdio::null());
    for var in KEY_VARS {
        command.env_remove(var);
    }
    command
}

fn run(args: &[&str]) -> Output {
    convlog().args(args).output().expect("run convlog")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

fn path(dir: &Path) -> &str {
    dir.to_str().expect("temporary paths are UTF-8")
}

/// `chat` against `server`'s `/v1` as an OpenAI-compatible endpoint, with
/// `extra` flags and the message last.
fn chat_args<'a>(
    store: &'a str,
    url: &'a str,
    extra: &[&'a str],
    message: &'a str,
) -> Vec<&'a str> {
    let mut args = vec![
        "chat",
        store,
        "--conversation",
        "c1",
        "--provider",
        "openai-compatible",
        "--base-url",
        url,
        "--model",
        "test-model",
    ];
    args.extend_from_slice(extra);
    args.push(message);
    args
}

/// The resume state of `c1`, read beside any writer.
fn state(store: &Path) -> ResumeState {
    let reader = convlog::Store::open_read_only(store, StoreOptions::default()).unwrap();
    reader.refresh().unwrap();
    reader.resume("c1", &ResumeOptions::new()).unwrap()
}

fn roles(state: &ResumeState) -> Vec<Role> {
    state.entries.iter().map(|entry| entry.role).collect()
}

/// The MCP test server's command line, for `--tool-server`.
fn tool_server() -> String {
    format!("'{}' '{}'", python(), server_script().display())
}

#[test]
fn a_text_turn_needs_no_key_and_is_printed_and_recorded() {
    let server = FakeServer::start(vec![openai::reply(openai::text("Hello\nthere"))]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("new-store");
    let url = server.url("/v1");
    let output = run(&chat_args(
        path(&store),
        &url,
        &["--system", "Be brief.", "--prompt", "demo/greeter"],
        "Hi!",
    ));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let printed = text(&output.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[0], "system [demo/greeter]: Be brief.");
    assert_eq!(lines[1], "user: Hi!");
    assert_eq!(lines[2], "assistant: Hello\\nthere");
    assert!(
        lines[3].starts_with("stop: final answer (evaluation eval-"),
        "{printed}"
    );
    assert_eq!(lines.len(), 4, "{printed}");

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("authorization"), None, "no key is sent");
    let body = requests[0].json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["messages"][0]["content"], "Be brief.");
    assert_eq!(body["messages"][1]["content"], "Hi!");

    let recorded = state(&store);
    assert!(recorded.finished);
    assert_eq!(
        roles(&recorded),
        [Role::System, Role::User, Role::Assistant]
    );
    assert_eq!(recorded.entries[0].prompt_ns.as_deref(), Some("demo"));
    assert_eq!(recorded.entries[2].content.as_deref(), Some("Hello\nthere"));
}

#[test]
fn json_prints_the_new_entries_and_the_stop_as_json_lines() {
    let server = FakeServer::start(vec![
        openai::reply(openai::text("first")),
        openai::reply(openai::text("second")),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = server.url("/v1");
    let first = run(&chat_args(path(&store), &url, &[], "one"));
    assert!(first.status.success(), "{}", text(&first.stderr));
    let output = run(&chat_args(path(&store), &url, &["--json"], "two"));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let lines: Vec<Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    // Only the second evaluation's entries: system, user, assistant.
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[0]["role"], "system");
    assert_eq!(lines[1]["role"], "user");
    assert_eq!(lines[1]["content"], "two");
    assert_eq!(lines[2]["role"], "assistant");
    assert_eq!(lines[2]["content"], "second");
    assert_eq!(lines[3]["stop"], "final");
    assert_eq!(lines[3]["evaluation_id"], lines[2]["evaluation_id"]);
    assert_eq!(lines[3]["input_tokens"], 11);
    // The second request showed the model the first evaluation too.
    let body = server.requests()[1].json();
    let contents: Vec<&Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| &message["content"])
        .collect();
    assert!(contents.contains(&&json!("first")), "{body}");
}

#[test]
fn stream_prints_the_text_deltas() {
    let chunks = openai::text_chunks(&["Hel", "lo, ", "wor", "ld"]);
    let server = FakeServer::start(vec![openai::stream(&chunks, 7)]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = server.url("/v1");
    let output = run(&chat_args(path(&store), &url, &["--stream"], "Say hello"));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let printed = text(&output.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[0], "user: Say hello", "{printed}");
    assert_eq!(lines[1], "assistant: Hello, world", "{printed}");
    assert!(lines[2].starts_with("stop: final answer"), "{printed}");
    assert_eq!(lines.len(), 3, "{printed}");
    assert_eq!(server.requests()[0].json()["stream"], true);
    assert_eq!(
        state(&store).entries[2].content.as_deref(),
        Some("Hello, world")
    );
}

#[test]
fn a_stream_cut_short_ends_its_line_and_fails() {
    let chunks = openai::text_chunks(&["Half ", "an answer"]);
    // The role chunk and the first piece, then the connection drops.
    let cut = Reply::sse(&chunks[..2], 9).then_cut();
    let server = FakeServer::start(vec![cut]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = server.url("/v1");
    let output = run(&chat_args(path(&store), &url, &["--stream"], "Hi"));
    assert_eq!(output.status.code(), Some(1));
    let printed = text(&output.stdout);
    assert!(
        printed.starts_with("user: Hi\nassistant: Half "),
        "{printed}"
    );
    assert!(
        printed.ends_with('\n'),
        "the streamed line is ended: {printed:?}"
    );
    let error = text(&output.stderr);
    assert!(
        error.starts_with("convlog: error: model call failed"),
        "{error}"
    );
    // Nothing but the input was recorded: resume --continue calls again.
    assert_eq!(roles(&state(&store)), [Role::System, Role::User]);
}

#[test]
fn a_provider_error_body_is_shown_verbatim_and_fails() {
    let body = r#"{"error":{"message":"model 'test-model' not found, try pulling it first","type":"api_error"}}"#;
    let server = FakeServer::start(vec![Reply::raw(400, "application/json", body.into())]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = server.url("/v1");
    let output = run(&chat_args(path(&store), &url, &[], "Hi"));
    assert_eq!(output.status.code(), Some(1));
    let error = text(&output.stderr);
    assert!(error.starts_with("convlog: error: "), "{error}");
    assert!(error.contains(body), "{error}");
    assert!(error.contains("HTTP 400"), "{error}");
    assert_eq!(server.requests().len(), 1, "a 400 is not retried");
    // The input and the failed call are recorded.
    let recorded = state(&store);
    assert_eq!(roles(&recorded), [Role::System, Role::User]);
}

#[test]
fn configuration_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let base = |provider: &'static str| {
        vec![
            "chat",
            path(&store),
            "--conversation",
            "c1",
            "--provider",
            provider,
            "--model",
            "m",
            "Hi",
        ]
    };
    // A hosted API without its key: names the variable, records nothing.
    for (provider, var) in [
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("gemini", "GEMINI_API_KEY"),
    ] {
        let output = run(&base(provider));
        assert_eq!(output.status.code(), Some(1), "{provider}");
        let error = text(&output.stderr);
        assert!(error.contains(var), "{provider}: {error}");
        assert!(
            !store.exists(),
            "nothing is created for a bad configuration"
        );
    }
    // An unknown provider is a usage error listing the known ones.
    let output = run(&base("mistral"));
    assert_eq!(output.status.code(), Some(2));
    let error = text(&output.stderr);
    assert!(error.contains("unknown provider \"mistral\""), "{error}");
    assert!(error.contains("openai-compatible"), "{error}");
    // No model: a usage error.
    let output = run(&[
        "chat",
        path(&store),
        "--conversation",
        "c1",
        "--provider",
        "ollama",
        "Hi",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("--model is required"));
    // openai-compatible without a base URL.
    let output = run(&base("openai-compatible"));
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("--base-url"));
    // A bad tool server command line.
    let mut args = base("ollama");
    args.splice(2..2, ["--tool-server", "python3 'unclosed"]);
    let output = run(&args);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("quote is not closed"));
}

#[test]
fn a_store_held_by_another_writer_is_refused() {
    let server = FakeServer::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let _writer = convlog::Store::open(&store, StoreOptions::default()).unwrap();
    let url = server.url("/v1");
    let output = run(&chat_args(path(&store), &url, &[], "Hi"));
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("locked by another writer"),
        "{}",
        text(&output.stderr)
    );
    assert!(server.requests().is_empty());
}

#[test]
fn resume_continue_refuses_an_unknown_conversation_and_a_prompt_mismatch() {
    let server = FakeServer::start(vec![openai::reply(openai::text("hi"))]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = server.url("/v1");
    let output = run(&chat_args(path(&store), &url, &["--prompt", "a/b"], "Hi"));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let resume = |conversation: &str, extra: &[&str]| {
        let mut args = vec![
            "resume",
            path(&store),
            "--conversation",
            conversation,
            "--continue",
            "--provider",
            "openai-compatible",
            "--base-url",
            &url,
            "--model",
            "test-model",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let output = resume("nope", &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("nope"),
        "{}",
        text(&output.stderr)
    );
    let output = resume("c1", &["--prompt", "a/other"]);
    assert_eq!(output.status.code(), Some(1));
    let error = text(&output.stderr);
    assert!(
        error.contains("a/b") && error.contains("a/other"),
        "{error}"
    );
    // A finished evaluation: nothing to do, no model call.
    let output = resume("c1", &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).starts_with("stop: evaluation eval-"),
        "{}",
        text(&output.stdout)
    );
    assert!(text(&output.stdout).contains("already finished"));
    assert_eq!(server.requests().len(), 1);
    // The model options apply only with --continue.
    let output = run(&[
        "resume",
        path(&store),
        "--conversation",
        "c1",
        "--provider",
        "ollama",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("--provider applies only with --continue"));
}

#[test]
fn a_tool_call_runs_on_an_mcp_server_then_the_answer_is_recorded() {
    if !sdk_available("a_tool_call_runs_on_an_mcp_server_then_the_answer_is_recorded") {
        return;
    }
    let server = FakeServer::start(vec![
        openai::reply(openai::tool_calls(&[("call-1", "add", r#"{"a":2,"b":3}"#)])),
        openai::reply(openai::text("2 + 3 = 5")),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = server.url("/v1");
    let tools = tool_server();
    let output = run(&chat_args(
        path(&store),
        &url,
        &["--tool-server", &tools],
        "What is 2 + 3?",
    ));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let printed = text(&output.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(
        lines[2], r#"assistant: call add({"a":2,"b":3}) [call-1] completed"#,
        "{printed}"
    );
    assert_eq!(lines[3], "tool add [call-1]: 5", "{printed}");
    assert_eq!(lines[4], "assistant: 2 + 3 = 5", "{printed}");
    assert!(lines[5].starts_with("stop: final answer"), "{printed}");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first = requests[0].json();
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .expect("tools are offered")
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"add"), "{offered:?}");
    let second = requests[1].json();
    let last = second["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool");
    assert_eq!(last["tool_call_id"], "call-1");
    assert_eq!(last["content"], "5");

    let recorded = state(&store);
    assert!(recorded.finished);
    assert_eq!(
        roles(&recorded),
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ]
    );
}

#[test]
fn stream_prints_tool_calls_and_results_as_they_happen() {
    if !sdk_available("stream_prints_tool_calls_and_results_as_they_happen") {
        return;
    }
    let calls = openai::tool_call_chunks(&[("call-1", "add", r#"{"a":40,"b":2}"#)], 4);
    let answer = openai::text_chunks(&["The answer ", "is 42."]);
    let server = FakeServer::start(vec![openai::stream(&calls, 9), openai::stream(&answer, 9)]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = server.url("/v1");
    let tools = tool_server();
    let output = run(&chat_args(
        path(&store),
        &url,
        &["--stream", "--tool-server", &tools],
        "40 + 2?",
    ));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let printed = text(&output.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[0], "user: 40 + 2?", "{printed}");
    assert_eq!(
        lines[1], r#"assistant: call add({"a":40,"b":2}) [call-1]"#,
        "{printed}"
    );
    assert_eq!(lines[2], "tool add [call-1]: 42", "{printed}");
    assert_eq!(lines[3], "assistant: The answer is 42.", "{printed}");
    assert!(lines[4].starts_with("stop: final answer"), "{printed}");
    assert_eq!(lines.len(), 5, "{printed}");
}

/// Polls the store until `done` holds of the state of `c1`.
fn wait_for(store: &Path, what: &str, done: impl Fn(&ResumeState) -> bool) {
    let started = Instant::now();
    loop {
        if store.exists() {
            if let Ok(reader) = convlog::Store::open_read_only(store, StoreOptions::default()) {
                if reader.refresh().is_ok() {
                    if let Ok(state) = reader.resume("c1", &ResumeOptions::new()) {
                        if done(&state) {
                            return;
                        }
                    }
                }
            }
        }
        assert!(
            started.elapsed() < GENEROUS,
            "waited {GENEROUS:?} for {what}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn call_status(state: &ResumeState, call_id: &str) -> Option<ToolStatus> {
    state
        .entries
        .iter()
        .flat_map(|entry| &entry.tool_calls)
        .find(|call| call.call_id == call_id)
        .map(|call| call.status)
}

#[test]
fn a_killed_chat_is_finished_by_resume_continue_without_rerunning_a_completed_call() {
    let test = "a_killed_chat_is_finished_by_resume_continue_without_rerunning_a_completed_call";
    if sdk_available(test) {
        kill_then_continue(false);
    }
}

#[test]
fn a_streamed_resume_continue_marks_the_call_it_runs_again() {
    if sdk_available("a_streamed_resume_continue_marks_the_call_it_runs_again") {
        kill_then_continue(true);
    }
}

/// `chat` SIGKILLed while an MCP tool runs (after its sibling call
/// completed), then `resume` (the report) and `resume --continue` (with
/// `--stream` when `stream`).
fn kill_then_continue(stream: bool) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let notes: PathBuf = dir.path().join("notes.txt");
    let gate: PathBuf = dir.path().join("gate.txt");
    let note_args = json!({"path": notes, "text": "noted"}).to_string();
    let wait_args = json!({"path": gate}).to_string();
    let server = FakeServer::start(vec![
        openai::reply(openai::tool_calls(&[
            ("note-1", "note", &note_args),
            ("wait-1", "wait_file", &wait_args),
        ])),
        if stream {
            openai::stream(&openai::text_chunks(&["all ", "done"]), 5)
        } else {
            openai::reply(openai::text("all done"))
        },
    ]);
    let url = server.url("/v1");
    let tools = tool_server();
    let mut child = convlog()
        .args(chat_args(
            path(&store),
            &url,
            &["--tool-server", &tools],
            "Note it, then wait.",
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start convlog chat");
    wait_for(&store, "note-1 completed and wait-1 running", |state| {
        call_status(state, "note-1") == Some(ToolStatus::Completed)
            && call_status(state, "wait-1") == Some(ToolStatus::Running)
    });
    assert_eq!(server.requests().len(), 1);
    child.kill().expect("SIGKILL convlog chat");
    child.wait().unwrap();

    // Without --continue: the report, as before.
    let output = run(&["resume", path(&store), "--conversation", "c1"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["finished"], false);
    assert_eq!(report["unfinished_calls"][0]["call"]["call_id"], "wait-1");
    assert_eq!(report["unfinished_calls"][0]["call"]["status"], "running");
    assert_eq!(report["finished_calls"][0]["call"]["call_id"], "note-1");
    assert!(report.get("entries").is_none());

    std::fs::write(&gate, "gate open").unwrap();
    let stream_flag = if stream { "--stream" } else { "--max-steps=8" };
    let output = run(&[
        "resume",
        path(&store),
        "--conversation",
        "c1",
        "--continue",
        "--provider",
        "openai-compatible",
        "--base-url",
        &url,
        "--model",
        "test-model",
        "--tool-server",
        &tools,
        stream_flag,
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let printed = text(&output.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(
        lines[0], "tool wait_file [wait-1] (resumed): gate open",
        "{printed}"
    );
    assert_eq!(lines[1], "assistant: all done", "{printed}");
    assert!(lines[2].starts_with("stop: final answer"), "{printed}");
    assert_eq!(lines.len(), 3, "{printed}");

    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "noted\n",
        "the completed call did not run again"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].json()["messages"].clone();
    let results: Vec<&Value> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| &message["content"])
        .collect();
    assert_eq!(results, [&json!("noted"), &json!("gate open")]);

    let recorded = state(&store);
    assert!(recorded.finished);
    assert_eq!(
        roles(&recorded),
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert_eq!(recorded.entries[5].content.as_deref(), Some("all done"));
}
