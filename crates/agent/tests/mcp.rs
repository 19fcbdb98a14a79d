//! MCP tools against a real MCP server process: `tests/mcp/server.py`, a
//! small server on the MCP Python SDK (`pip install 'mcp==2.3.0'`).
//!
//! When `python3` cannot `import mcp`, the tests that need the server say
//! they skipped and why, unless `CONVLOG_REQUIRE_MCP=1` (set by CI once it
//! installed the SDK), when they fail. `CONVLOG_PYTHON` names another
//! interpreter. No test depends on timing: the timeout test's tool sleeps
//! an hour, and waits for something to happen are bounded only to turn a
//! defect into a failure rather than a hang.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use convlog_agent::tools::{McpError, McpServer, McpServerOptions, Tool, ToolContext, Toolset};
use serde_json::json;
use support::mcp_sdk::{available as sdk_available, python, server_script};

/// Bounds waits that would otherwise hang on a defect.
const GENEROUS: Duration = Duration::from_secs(60);

/// The test server, or `None` (skipped) without the SDK.
async fn server(test: &str) -> Option<McpServer> {
    server_with(test, McpServerOptions::new()).await
}

async fn server_with(test: &str, options: McpServerOptions) -> Option<McpServer> {
    if !sdk_available(test) {
        return None;
    }
    let script = server_script();
    Some(
        McpServer::spawn_with(&python(), [script.as_os_str()], options)
            .await
            .expect("the test MCP server starts"),
    )
}

fn context() -> ToolContext {
    ToolContext {
        conversation_id: "conversation".to_owned(),
        evaluation_id: "evaluation".to_owned(),
        call_id: "call".to_owned(),
        resumed: false,
    }
}

async fn call(toolset: &Toolset, name: &str, arguments: &str) -> Result<String, String> {
    toolset
        .call(name, arguments, &context())
        .await
        .map_err(|error| error.0)
}

/// Whether process `pid` is running (not gone, not a zombie).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Waits (bounded by [`GENEROUS`]) until `pid` has stopped running.
async fn ended(pid: u32) -> bool {
    let deadline = tokio::time::Instant::now() + GENEROUS;
    while running(pid) {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test]
async fn lists_the_servers_tools_with_their_schemas() {
    let Some(server) = server("lists_the_servers_tools_with_their_schemas").await else {
        return;
    };
    let specs = server.list_tools().await.unwrap();
    let names: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
    for name in ["add", "echo", "fail", "slow", "meet", "picture", "exit"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let add = specs.iter().find(|spec| spec.name == "add").unwrap();
    assert_eq!(add.description, "Adds two integers.");
    assert_eq!(add.parameters["type"], "object");
    assert_eq!(add.parameters["properties"]["a"]["type"], "integer");
    assert_eq!(add.parameters["properties"]["b"]["type"], "integer");
    assert_eq!(add.parameters["required"], json!(["a", "b"]));

    let toolset = Toolset::new().with_mcp(&server);
    assert_eq!(toolset.len(), specs.len());
    let mut listed = specs.clone();
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(
        toolset.specs(),
        listed,
        "the toolset offers the server's specs"
    );
    assert_eq!(server.tools().len(), specs.len());
}

#[tokio::test]
async fn a_tool_name_no_provider_accepts_is_offered_portable_and_called_by_its_own() {
    let Some(server) = server("a_tool_name_no_provider_accepts_is_offered_portable").await else {
        return;
    };
    let toolset = Toolset::new().with_mcp(&server);
    let names: Vec<String> = toolset.specs().into_iter().map(|spec| spec.name).collect();
    assert!(names.contains(&"files_read".to_string()), "{names:?}");
    assert!(
        names
            .iter()
            .all(|name| convlog_agent::tools::is_portable_tool_name(name)),
        "{names:?}"
    );
    assert_eq!(
        call(&toolset, "files_read", r#"{"path": "a.txt"}"#).await,
        Ok("read a.txt".to_owned())
    );
}

#[tokio::test]
async fn the_calls_context_reaches_the_server_in_its_meta() {
    let Some(server) = server("the_calls_context_reaches_the_server_in_its_meta").await else {
        return;
    };
    let toolset = Toolset::new().with_mcp(&server);
    let context = ToolContext {
        conversation_id: "trip".into(),
        evaluation_id: "eval-7".into(),
        call_id: "call_42".into(),
        resumed: true,
    };
    let meta = toolset.call("call_meta", "{}", &context).await.unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&meta).unwrap(),
        json!({
            "convlog/call_id": "call_42",
            "convlog/conversation_id": "trip",
            "convlog/evaluation_id": "eval-7",
            "convlog/resumed": true
        })
    );
}

#[tokio::test]
async fn calls_tools_and_renders_their_content() {
    let Some(server) = server("calls_tools_and_renders_their_content").await else {
        return;
    };
    let toolset = Toolset::new().with_mcp(&server);
    assert_eq!(
        call(&toolset, "add", r#"{"a": 2, "b": 40}"#).await,
        Ok("42".to_owned())
    );
    let text = "line one\nline two — ünïcode \"quoted\"";
    let arguments = json!({ "text": text }).to_string();
    assert_eq!(
        call(&toolset, "echo", &arguments).await,
        Ok(text.to_owned())
    );
    assert_eq!(
        call(&toolset, "picture", "").await,
        Ok("[image/png, 4 bytes]".to_owned()),
        "non-text content is described; empty arguments count as {{}}"
    );
}

#[tokio::test]
async fn errors_map_to_tool_errors() {
    let Some(server) = server("errors_map_to_tool_errors").await else {
        return;
    };
    let toolset = Toolset::new().with_mcp(&server);
    let error = call(&toolset, "fail", r#"{"message": "the disk is full"}"#)
        .await
        .unwrap_err();
    assert!(
        error.contains("the disk is full"),
        "isError carries its text: {error}"
    );

    let error = call(&toolset, "add", r#"{"a": "two", "b": 3}"#)
        .await
        .unwrap_err();
    assert!(
        error.contains("add"),
        "arguments the server rejects: {error}"
    );

    let error = call(&toolset, "add", "{a: 2}").await.unwrap_err();
    assert!(error.contains("are not valid JSON"), "{error}");
    let error = call(&toolset, "add", "[2, 3]").await.unwrap_err();
    assert!(
        error.contains("must be a JSON object, not an array"),
        "{error}"
    );

    // With the server shut down, bad arguments still get the argument
    // error: they never reach the server.
    server.shutdown().await;
    let error = call(&toolset, "add", "[2, 3]").await.unwrap_err();
    assert!(error.contains("must be a JSON object"), "{error}");
    let error = call(&toolset, "add", r#"{"a": 1, "b": 2}"#)
        .await
        .unwrap_err();
    assert!(error.contains("is gone: it was shut down"), "{error}");
}

#[tokio::test]
async fn a_call_that_outlives_the_timeout_fails_and_the_server_carries_on() {
    let Some(server) =
        server("a_call_that_outlives_the_timeout_fails_and_the_server_carries_on").await
    else {
        return;
    };
    let toolset = Toolset::new()
        .with_mcp(&server)
        .timeout(Duration::from_secs(1));
    let error = call(&toolset, "slow", r#"{"seconds": 3600}"#)
        .await
        .unwrap_err();
    assert_eq!(error, "tool `slow` timed out after 1 s");
    let toolset = toolset.timeout(GENEROUS);
    assert_eq!(
        call(&toolset, "echo", r#"{"text": "still here"}"#).await,
        Ok("still here".to_owned())
    );
}

#[tokio::test]
async fn a_server_that_exits_fails_the_call_and_every_later_one_saying_it_is_gone() {
    let Some(server) =
        server("a_server_that_exits_fails_the_call_and_every_later_one_saying_it_is_gone").await
    else {
        return;
    };
    let pid = server.pid().unwrap();
    let toolset = Toolset::new().with_mcp(&server).timeout(GENEROUS);
    let error = call(&toolset, "exit", r#"{"code": 3}"#).await.unwrap_err();
    assert!(error.contains("MCP server `"), "{error}");
    assert!(
        error.contains("is gone: it exited (exit status: 3)"),
        "{error}"
    );
    assert!(
        error.contains("its last standard error: server exiting with code 3"),
        "{error}"
    );
    let error = call(&toolset, "echo", r#"{"text": "anyone?"}"#)
        .await
        .unwrap_err();
    assert!(
        error.contains("is gone: it exited (exit status: 3)"),
        "{error}"
    );
    let error = server.list_tools().await.unwrap_err();
    assert!(error.to_string().contains("is gone"), "{error}");
    assert!(!running(pid));
}

#[tokio::test]
async fn two_calls_at_once_on_one_server() {
    let Some(server) = server("two_calls_at_once_on_one_server").await else {
        return;
    };
    // `meet` returns once both calls are in progress on the server: one
    // after the other, the first would time out.
    let toolset = Toolset::new().with_mcp(&server).timeout(GENEROUS);
    let arguments = r#"{"meeting": "m", "parties": 2}"#;
    let calls = [
        ("meet", arguments, context()),
        ("add", r#"{"a": 1, "b": 1}"#, context()),
        ("meet", arguments, context()),
    ];
    let results = toolset.call_all(&calls).await;
    assert_eq!(
        results
            .into_iter()
            .map(|result| result.map_err(|error| error.0))
            .collect::<Vec<_>>(),
        vec![
            Ok("met 2 at m".to_owned()),
            Ok("2".to_owned()),
            Ok("met 2 at m".to_owned())
        ]
    );
}

#[tokio::test]
async fn dropping_the_server_kills_the_child_once_no_tool_holds_it() {
    let Some(server) = server("dropping_the_server_kills_the_child_once_no_tool_holds_it").await
    else {
        return;
    };
    let pid = server.pid().unwrap();
    let toolset = Toolset::new().with_mcp(&server).timeout(GENEROUS);
    assert_eq!(
        call(&toolset, "process_id", "{}").await,
        Ok(pid.to_string())
    );

    drop(server);
    assert!(running(pid), "the toolset's tools still use the server");
    assert_eq!(
        call(&toolset, "add", r#"{"a": 1, "b": 2}"#).await,
        Ok("3".to_owned())
    );

    drop(toolset);
    assert!(
        ended(pid).await,
        "the child {pid} is killed with its last handle"
    );

    // A server busy with a call (its tool sleeping) is killed too.
    let busy = McpServer::spawn(&python(), [server_script().as_os_str()])
        .await
        .unwrap();
    let pid = busy.pid().unwrap();
    let slow = Arc::new(
        busy.tools()
            .into_iter()
            .find(|tool| tool.spec().name == "slow")
            .unwrap(),
    );
    let calling = {
        let slow = Arc::clone(&slow);
        tokio::spawn(async move { slow.call(r#"{"seconds": 3600}"#, &context()).await })
    };
    drop(busy);
    calling.abort();
    let _ = calling.await;
    drop(slow);
    assert!(ended(pid).await, "the busy child {pid} is killed");
}

#[tokio::test]
async fn the_processes_a_server_started_end_with_it() {
    let Some(server) = server("the_processes_a_server_started_end_with_it").await else {
        return;
    };
    let toolset = Toolset::new().with_mcp(&server).timeout(GENEROUS);
    let helper: u32 = call(&toolset, "start_helper", "{}")
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(running(helper));
    drop(toolset);
    drop(server);
    assert!(
        ended(helper).await,
        "the helper {helper} is killed with its server"
    );

    // A server that exits by itself takes its helpers along.
    let exiting = McpServer::spawn(&python(), [server_script().as_os_str()])
        .await
        .unwrap();
    let toolset = Toolset::new().with_mcp(&exiting).timeout(GENEROUS);
    let helper: u32 = call(&toolset, "start_helper", "{}")
        .await
        .unwrap()
        .parse()
        .unwrap();
    let error = call(&toolset, "exit", r#"{"code": 0}"#).await.unwrap_err();
    assert!(error.contains("is gone"), "{error}");
    assert!(
        ended(helper).await,
        "the helper {helper} ends with its exited server"
    );
}

#[tokio::test]
async fn environment_working_directory_and_prefix_options() {
    let directory = tempfile::tempdir().unwrap();
    let options = McpServerOptions::new()
        .env("CONVLOG_MCP_TEST", "from the options")
        .current_dir(directory.path());
    let Some(server) =
        server_with("environment_working_directory_and_prefix_options", options).await
    else {
        return;
    };
    let toolset = Toolset::new()
        .with_mcp_prefixed(&server, "py_")
        .timeout(GENEROUS);
    assert!(toolset.get("add").is_none());
    assert_eq!(
        call(
            &toolset,
            "py_environment",
            r#"{"name": "CONVLOG_MCP_TEST"}"#
        )
        .await,
        Ok("from the options".to_owned())
    );
    let reported = call(&toolset, "py_working_directory", "{}").await.unwrap();
    assert_eq!(
        Path::new(&reported).canonicalize().unwrap(),
        directory.path().canonicalize().unwrap()
    );
    assert_eq!(
        call(&toolset, "py_add", r#"{"a": 1, "b": 2}"#).await,
        Ok("3".to_owned())
    );
    let tool = server.tools_prefixed("py_").remove(0);
    assert!(tool.spec().name.starts_with("py_"));
    assert_eq!(format!("py_{}", tool.remote_name()), tool.spec().name);
}

#[tokio::test]
async fn a_command_that_is_not_an_mcp_server_fails_to_start_saying_why() {
    let error = McpServer::spawn("/nonexistent/convlog-mcp-server", ["--stdio"])
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Spawn { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .starts_with("cannot start MCP server `/nonexistent/convlog-mcp-server --stdio`"),
        "{error}"
    );

    let error = McpServer::spawn("sh", ["-c", "echo no such database >&2; exit 2"])
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Startup { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("exit status: 2"), "{message}");
    assert!(
        message.contains("its last standard error: no such database"),
        "{message}"
    );

    // A process that never answers the handshake: the startup timeout.
    let options = McpServerOptions::new().startup_timeout(Duration::from_millis(500));
    let error = McpServer::spawn_with("sleep", ["3600"], options)
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("did not answer the handshake and list its tools within 0.5 s"),
        "{message}"
    );
    assert!(
        message.contains("it was shut down"),
        "the process is killed: {message}"
    );
}
