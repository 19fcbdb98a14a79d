//! Host tools: `FunctionTool`, `Toolset::call` (unknown names, timeouts,
//! panics, cancellation) and `Toolset::call_all` (concurrent, in order).
//! No test depends on timing: a tool that must time out waits forever, and
//! the concurrency test would deadlock (and fail by the toolset's generous
//! timeout) if the calls ran one after another.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use convlog_agent::tools::{parse_arguments, FunctionTool, Tool, ToolContext, ToolError, Toolset};
use serde_json::json;
use tokio::sync::{oneshot, Barrier};

/// Bounds a test that would otherwise hang on a defect.
const GENEROUS: Duration = Duration::from_secs(60);

fn context(call_id: &str) -> ToolContext {
    ToolContext {
        conversation_id: "conversation".to_owned(),
        evaluation_id: "evaluation".to_owned(),
        call_id: call_id.to_owned(),
        resumed: false,
    }
}

fn object_schema() -> serde_json::Value {
    json!({"type": "object", "properties": {}})
}

fn echo() -> FunctionTool {
    FunctionTool::new(
        "echo",
        "Returns its arguments and call id",
        object_schema(),
        |arguments: String, context: ToolContext| async move {
            Ok(format!("{arguments} from {}", context.call_id))
        },
    )
}

#[derive(serde::Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

/// `add`, counting how often its function ran.
fn add(calls: Arc<AtomicUsize>) -> FunctionTool {
    FunctionTool::typed(
        "add",
        "Adds two integers",
        json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]
        }),
        move |add: Add, _context: ToolContext| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok((add.a + add.b).to_string()) }
        },
    )
}

#[tokio::test]
async fn a_function_tool_gets_the_arguments_and_context_and_its_spec_is_kept() {
    let toolset = Toolset::new().with(echo());
    let result = toolset
        .call("echo", r#"{"x": 1}"#, &context("call-1"))
        .await;
    assert_eq!(result, Ok(r#"{"x": 1} from call-1"#.to_owned()));
    let spec = &toolset.specs()[0];
    assert_eq!(spec.name, "echo");
    assert_eq!(spec.description, "Returns its arguments and call id");
    assert_eq!(spec.parameters, object_schema());
}

#[tokio::test]
async fn a_typed_tool_parses_its_arguments_and_refuses_bad_ones_without_running() {
    let calls = Arc::new(AtomicUsize::new(0));
    let toolset = Toolset::new().with(add(Arc::clone(&calls)));
    let sum = toolset
        .call("add", r#"{"a": 2, "b": 3}"#, &context("c"))
        .await;
    assert_eq!(sum, Ok("5".to_owned()));
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let cases = [
        ("{a: 2}", "are not valid JSON"),
        ("[2, 3]", "must be a JSON object, not an array"),
        ("\"2 + 3\"", "must be a JSON object, not a string"),
        (
            r#"{"a": 2}"#,
            "do not fit its parameters: missing field `b`",
        ),
        (r#"{"a": "two", "b": 3}"#, "do not fit its parameters"),
        ("", "do not fit its parameters: missing field `a`"),
    ];
    for (arguments, expected) in cases {
        let error = toolset
            .call("add", arguments, &context("c"))
            .await
            .expect_err(arguments);
        assert!(
            error.0.contains("the arguments of tool `add`") && error.0.contains(expected),
            "{arguments}: {error}"
        );
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "bad arguments never run the tool"
    );
}

#[test]
fn parse_arguments_takes_objects_and_blank_text_and_quotes_what_it_refuses() {
    assert_eq!(parse_arguments("t", "  ").unwrap(), serde_json::Map::new());
    assert_eq!(
        parse_arguments("t", r#"{"k": [1]}"#).unwrap()["k"],
        json!([1])
    );
    let long = format!("[{}1]", "1, ".repeat(500));
    let error = parse_arguments("t", &long).unwrap_err();
    assert!(error.0.contains("not an array"), "{error}");
    assert!(error.0.ends_with('…'), "a long text is cut: {error}");
    assert!(error.0.len() < 400, "{error}");
    let error = parse_arguments("t", "null").unwrap_err();
    assert!(error.0.contains("not null"), "{error}");
    let error = parse_arguments("t", "{\"a\": ").unwrap_err();
    assert!(
        error.0.contains("not valid JSON (EOF while parsing"),
        "{error}"
    );
}

#[tokio::test]
async fn an_unknown_tool_is_an_error_naming_it_and_the_tools_offered() {
    let toolset = Toolset::new()
        .with(echo())
        .with(add(Arc::new(AtomicUsize::new(0))));
    let error = toolset.call("ech", "{}", &context("c")).await.unwrap_err();
    assert_eq!(
        error.0,
        "unknown tool `ech`; the tools offered are `add`, `echo`"
    );
    let error = Toolset::new()
        .call("echo", "{}", &context("c"))
        .await
        .unwrap_err();
    assert_eq!(error.0, "unknown tool `echo`: no tools are offered");
}

/// Sends on its sender when dropped.
struct DropSignal(Option<oneshot::Sender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(sender) = self.0.take() {
            let _ = sender.send(());
        }
    }
}

/// A tool that says it started, then waits forever holding a
/// [`DropSignal`] (so its cancellation is observable).
fn waits_forever(started: oneshot::Sender<()>, dropped: oneshot::Sender<()>) -> FunctionTool {
    let slots = Arc::new(Mutex::new(Some((started, dropped))));
    FunctionTool::new(
        "forever",
        "Never answers",
        object_schema(),
        move |_arguments, _context| {
            let (started, dropped) = slots.lock().unwrap().take().expect("called once");
            async move {
                let _signal = DropSignal(Some(dropped));
                let _ = started.send(());
                std::future::pending::<()>().await;
                Ok(String::new())
            }
        },
    )
}

#[tokio::test]
async fn a_call_that_outlives_the_timeout_fails_saying_so_and_is_cancelled() {
    let (started, _started) = oneshot::channel();
    let (dropped, was_dropped) = oneshot::channel();
    let toolset = Toolset::new()
        .with(waits_forever(started, dropped))
        .timeout(Duration::from_millis(250));
    let error = toolset
        .call("forever", "{}", &context("c"))
        .await
        .unwrap_err();
    assert_eq!(error.0, "tool `forever` timed out after 0.25 s");
    tokio::time::timeout(GENEROUS, was_dropped)
        .await
        .expect("the timed-out tool is cancelled")
        .expect("its future was dropped, not leaked");

    let toolset = Toolset::new().with(echo()).timeout(Duration::from_secs(2));
    assert_eq!(toolset.call_timeout(), Duration::from_secs(2));
}

#[tokio::test]
async fn dropping_a_call_cancels_the_tool() {
    let (started, has_started) = oneshot::channel();
    let (dropped, was_dropped) = oneshot::channel();
    let toolset = Toolset::new().with(waits_forever(started, dropped));
    let context = context("c");
    let call = toolset.call("forever", "{}", &context);
    tokio::select! {
        biased;
        _ = call => panic!("the tool never answers"),
        started = has_started => started.expect("the tool started"),
    }
    // `call` is dropped here.
    tokio::time::timeout(GENEROUS, was_dropped)
        .await
        .expect("the tool is cancelled with its call")
        .expect("its future was dropped");
}

#[tokio::test]
async fn a_panicking_tool_is_an_error_and_the_toolset_carries_on() {
    let toolset = Toolset::new().with(echo()).with(FunctionTool::new(
        "explode",
        "Panics",
        object_schema(),
        |arguments: String, _context| async move {
            if arguments.contains("str") {
                panic!("a static message");
            }
            panic!("boom at {arguments}");
        },
    ));
    let error = toolset
        .call("explode", "{}", &context("c"))
        .await
        .unwrap_err();
    assert_eq!(error.0, "tool `explode` panicked: boom at {}");
    let error = toolset
        .call("explode", "str", &context("c"))
        .await
        .unwrap_err();
    assert_eq!(error.0, "tool `explode` panicked: a static message");
    assert!(toolset.call("echo", "{}", &context("d")).await.is_ok());
}

/// A tool that returns only once `parties` calls of it are in progress.
fn meet(barrier: Arc<Barrier>) -> FunctionTool {
    FunctionTool::new(
        "meet",
        "Waits for the other party",
        object_schema(),
        move |arguments: String, context: ToolContext| {
            let barrier = Arc::clone(&barrier);
            async move {
                barrier.wait().await;
                Ok(format!("{} met with {arguments}", context.call_id))
            }
        },
    )
}

#[tokio::test]
async fn call_all_runs_the_calls_concurrently_and_answers_in_request_order() {
    // Each `meet` call waits until the other has started: run one after
    // the other, the first would never return (and time out).
    let toolset = Toolset::new()
        .with(meet(Arc::new(Barrier::new(2))))
        .with(echo())
        .timeout(GENEROUS);
    let calls = vec![
        ("meet".to_owned(), "1".to_owned(), context("first")),
        ("nothing".to_owned(), "{}".to_owned(), context("second")),
        ("echo".to_owned(), "e".to_owned(), context("third")),
        ("meet".to_owned(), "2".to_owned(), context("fourth")),
    ];
    let results = toolset.call_all(&calls).await;
    assert_eq!(
        results,
        vec![
            Ok("first met with 1".to_owned()),
            Err(ToolError(
                "unknown tool `nothing`; the tools offered are `echo`, `meet`".to_owned()
            )),
            Ok("e from third".to_owned()),
            Ok("fourth met with 2".to_owned()),
        ]
    );
    let borrowed: [(&str, &str, ToolContext); 0] = [];
    assert!(toolset.call_all(&borrowed).await.is_empty());
}

#[test]
fn the_futures_are_send() {
    fn is_send<T: Send>(_: &T) {}
    let toolset = Toolset::new().with(echo());
    let context = context("c");
    is_send(&toolset.call("echo", "{}", &context));
    let calls = [("echo", "{}", context.clone())];
    is_send(&toolset.call_all(&calls));
    is_send(&echo().call("{}", &context));
}
