//! Generations with `save_ai_messages` recorded step by step: each step is
//! in the store as it happens, `events` lists the tools' status changes,
//! calls only the client can run are saved pending and completed with
//! add-messages + invoke, a shutdown stops a run where it stands and the
//! next invoke (or the next start with `resume_on_start`) carries it on.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{calls, text, TestServer, ALICE};

fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

/// How long a wait for an observable state may take before the test
/// fails (a bound against hanging, not a timing assumption: the states
/// waited for happen whatever the load).
const STATE_WAIT_MAX: Duration = Duration::from_secs(120);

/// Polls `check` until it holds (bounded by [`STATE_WAIT_MAX`]).
async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < STATE_WAIT_MAX, "never saw: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `tool_status` events of an answer: (call id, status, resumed).
fn statuses(body: &Value) -> Vec<(String, String, bool)> {
    body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| {
            assert_eq!(event["type"], "tool_status", "{event}");
            assert!(event["lsn"].as_u64().unwrap() > 0, "{event}");
            (
                event["call_id"].as_str().unwrap().to_string(),
                event["status"].as_str().unwrap().to_string(),
                event["resumed"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_saved_chat_records_each_step_as_it_happens_and_lists_its_tool_events() {
    if !support::mcp_available() {
        return;
    }
    let server = TestServer::start(true).await;
    server.create("ctx_1").await;
    server.upstream.push([
        calls(&[("call_1", "add", r#"{"a":2,"b":3}"#)]),
        text("The sum is 5."),
    ]);
    let gate = server.upstream.hold();
    let received = server.upstream.received.notified();
    let url = format!("{}/chat", server.url);
    let http = server.http.clone();
    let chat = tokio::spawn(async move {
        let response = http
            .post(url)
            .bearer_auth(ALICE)
            .json(&json!({"context_id": "ctx_1", "message": "2+3?"}))
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    });
    received.await;
    // At the first model call: the human message is stored already.
    assert_eq!(
        server.messages("ctx_1").await,
        json!([{"sender": "human", "message": "2+3?"}])
    );
    let received = server.upstream.received.notified();
    gate.add_permits(1);
    received.await;
    // At the second model call: the call and its result are stored, before
    // the generation has ended.
    assert_eq!(
        server.messages("ctx_1").await,
        json!([
            {"sender": "human", "message": "2+3?"},
            {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "add", "tool_input": {"a": 2, "b": 3}},
            {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "5"},
        ])
    );
    gate.add_permits(1);
    let (status, body) = chat.await.unwrap();
    assert_eq!(status, 200, "{body}");
    // The answer's shape is the document's.
    let mut keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "events",
            "generated_messages",
            "response",
            "saved_ai_messages"
        ]
    );
    assert_eq!(body["response"], "The sum is 5.");
    assert_eq!(body["saved_ai_messages"], true);
    assert_eq!(
        body["generated_messages"],
        json!([
            {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "add", "tool_input": {"a": 2, "b": 3}},
            {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "5"},
            {"sender": "ai", "message": "The sum is 5."},
        ])
    );
    assert_eq!(
        statuses(&body),
        [
            ("call_1".to_string(), "running".to_string(), false),
            ("call_1".to_string(), "completed".to_string(), false),
        ]
    );
    assert_eq!(server.messages("ctx_1").await.as_array().unwrap().len(), 4);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_saved_chat_saves_calls_only_the_client_can_run_pending_and_invoke_continues() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    server
        .upstream
        .push([calls(&[("call_9", "client_side", r#"{"q":"x"}"#)])]);
    let (status, body) = server
        .post(
            "/chat",
            ALICE,
            json!({"context_id": "ctx_1", "message": "Look it up"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let call = json!({"type": "tool_call", "tool_call_id": "call_9", "tool_name": "client_side", "tool_input": {"q": "x"}});
    assert_eq!(
        body,
        json!({"response": "", "saved_ai_messages": true, "generated_messages": [call], "events": []})
    );
    // Saved, pending.
    let human = json!({"sender": "human", "message": "Look it up"});
    assert_eq!(server.messages("ctx_1").await, json!([human, call]));
    let (status, resume) = server.get("/contexts/ctx_1/resume", ALICE).await;
    assert_eq!(status, 200);
    assert_eq!(resume["unfinished_calls"][0]["call"]["status"], "pending");

    // A new message while the call is unanswered is refused, nothing saved.
    let (status, body) = server
        .post(
            "/chat",
            ALICE,
            json!({"context_id": "ctx_1", "message": "Hello?"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        error(&body).contains("unfinished tool calls: ['call_9']"),
        "{body}"
    );
    assert_eq!(server.messages("ctx_1").await, json!([human, call]));

    // The client answers it and invokes: the generation goes on.
    let answer =
        json!({"type": "tool_response", "tool_call_id": "call_9", "tool_output": "found it"});
    let (status, context) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_1", "messages": [answer]}),
        )
        .await;
    assert_eq!(status, 200, "{context}");
    server.upstream.push([text("It says: found it.")]);
    let (status, body) = server
        .post("/chat/invoke", ALICE, json!({"context_id": "ctx_1"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "It says: found it.");
    assert_eq!(
        body["generated_messages"],
        json!([{"sender": "ai", "message": "It says: found it."}])
    );
    let last = server.upstream.requests().pop().unwrap();
    assert!(last["messages"].to_string().contains("found it"), "{last}");
    let ai = json!({"sender": "ai", "message": "It says: found it."});
    assert_eq!(
        server.messages("ctx_1").await,
        json!([human, call, answer, ai])
    );
    // Answered: invoke answers again, as message control's invoke does.
    server.upstream.push([text("Still found.")]);
    let (status, body) = server
        .post("/chat/invoke", ALICE, json!({"context_id": "ctx_1"}))
        .await;
    assert_eq!(
        (status, body["response"].clone()),
        (200, json!("Still found."))
    );
    assert_eq!(server.messages("ctx_1").await.as_array().unwrap().len(), 5);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn steering_is_shown_and_not_stored_and_each_generation_has_its_own_step_budget() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    // The test agent allows 4 model calls per generation; eight answers in
    // a row keep working (the budget is per generation, not per context).
    for round in 0..8 {
        server.upstream.push([text(&format!("answer {round}"))]);
        let (status, body) = server
            .post(
                "/chat/add-ai-message",
                ALICE,
                json!({"context_id": "ctx_1", "prompt": format!("steer {round}"), "save_system_message": false}),
            )
            .await;
        assert_eq!(status, 200, "round {round}: {body}");
        assert_eq!(body["response"], format!("answer {round}"));
        let request = server.upstream.requests().pop().unwrap();
        let shown = request["messages"].as_array().unwrap();
        assert_eq!(
            shown.last().unwrap()["content"],
            format!("steer {round}"),
            "{request}"
        );
    }
    let stored = server.messages("ctx_1").await;
    assert_eq!(stored.as_array().unwrap().len(), 8);
    assert!(!stored.to_string().contains("steer"), "{stored}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_stops_a_saved_run_where_it_stands_and_the_next_invoke_carries_it_on() {
    let mut server = TestServer::start(false).await;
    server.create("ctx_1").await;
    server.upstream.push([text("finished")]);
    let gate = server.upstream.hold();
    let received = server.upstream.received.notified();
    let url = format!("{}/chat", server.url);
    let http = server.http.clone();
    let chat = tokio::spawn(async move {
        let response = http
            .post(url)
            .bearer_auth(ALICE)
            .json(&json!({"context_id": "ctx_1", "message": "hello"}))
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    });
    received.await;
    // The run is at the upstream: shut down. It is stopped at once.
    server.request_stop();
    let (status, body) = chat.await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        error(&body).contains("POST /chat/invoke carries it on"),
        "{body}"
    );
    let upstream = server.upstream.clone();
    let dir = server.stopped().await;
    // Resumable: the human message is stored, unanswered.
    let server = TestServer::start_with(upstream, dir, false, "").await;
    assert_eq!(
        server.messages("ctx_1").await,
        json!([{"sender": "human", "message": "hello"}])
    );
    gate.add_permits(1);
    let (status, body) = server
        .post("/chat/invoke", ALICE, json!({"context_id": "ctx_1"}))
        .await;
    assert_eq!(
        (status, body["response"].clone()),
        (200, json!("finished")),
        "{body}"
    );
    assert_eq!(
        server.messages("ctx_1").await,
        json!([{"sender": "human", "message": "hello"}, {"sender": "ai", "message": "finished"}])
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_on_start_carries_on_a_run_stopped_at_the_model_and_leaves_unanswered_contexts_alone(
) {
    let mut server = TestServer::start(false).await;
    for id in ["ctx_1", "ctx_2", "ctx_3"] {
        server.create(id).await;
    }
    // ctx_3: a generation that ended normally.
    server.upstream.push([text("three")]);
    let (status, body) = server
        .post(
            "/chat",
            ALICE,
            json!({"context_id": "ctx_3", "message": "hi"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // ctx_2: a message a client left unanswered on purpose (no generation).
    let (status, body) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_2", "messages": [{"sender": "human", "message": "later"}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // ctx_1: a run stopped while the upstream model has its request.
    // Two replies and two permits: the stopped request's handler may still
    // take one of each when the gate opens.
    server.upstream.push([text("finished"), text("finished")]);
    let gate = server.upstream.hold();
    let url = format!("{}/chat", server.url);
    let http = server.http.clone();
    let chat = tokio::spawn(async move {
        http.post(url)
            .bearer_auth(ALICE)
            .json(&json!({"context_id": "ctx_1", "message": "hello"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    // (Not `received`: ctx_3's request left it notified.)
    let upstream = server.upstream.clone();
    wait_until("ctx_1's request at the upstream", || {
        let count = upstream.requests().len();
        async move { count == 2 }
    })
    .await;
    server.request_stop();
    assert_eq!(chat.await.unwrap(), 503);
    let upstream = server.upstream.clone();
    let dir = server.stopped().await;

    let server =
        TestServer::start_with(upstream.clone(), dir, false, "resume_on_start = true").await;
    gate.add_permits(2);
    wait_until("ctx_1 carried on at start", || async {
        server.messages("ctx_1").await.as_array().unwrap().len() == 2
    })
    .await;
    assert_eq!(
        server.messages("ctx_1").await,
        json!([{"sender": "human", "message": "hello"}, {"sender": "ai", "message": "finished"}])
    );
    let dir = server.stop().await;
    // Only ctx_1 was carried on: the upstream saw one request for it after
    // the restart, and none for ctx_2 or ctx_3.
    let last_users: Vec<Value> = upstream
        .requests()
        .iter()
        .map(|request| request["messages"].as_array().unwrap().last().unwrap()["content"].clone())
        .collect();
    assert_eq!(last_users, [json!("hi"), json!("hello"), json!("hello")]);
    // No generation is left open, so a later start carries nothing on.
    let store = convlog::store::StoreBuilder::new(dir.path().join("store"))
        .reducer(convlog_server::meta::GenerationsReducer)
        .open_read_only()
        .unwrap();
    let open = store
        .slice::<convlog_server::meta::GenerationsReducer>()
        .unwrap();
    assert_eq!(open.contexts().count(), 0);
    let server = TestServer::start_with(upstream, dir, false, "resume_on_start = true").await;
    assert_eq!(
        server.messages("ctx_2").await,
        json!([{"sender": "human", "message": "later"}])
    );
    assert_eq!(
        server.messages("ctx_3").await,
        json!([{"sender": "human", "message": "hi"}, {"sender": "ai", "message": "three"}])
    );
    server.stop().await;
}

/// A release file the `wait_file` tool waits for.
fn wait_call(id: &str, release: &Path) -> Value {
    let arguments = json!({"path": release.display().to_string()}).to_string();
    calls(&[(id, "wait_file", &arguments)])
}

/// Whether alice's context `id` has a call whose `running` status is
/// recorded (the tool has been started).
async fn tool_running(server: &TestServer, id: &str) -> bool {
    let (status, resume) = server.get(&format!("/contexts/{id}/resume"), ALICE).await;
    status == 200
        && resume["unfinished_calls"]
            .as_array()
            .is_some_and(|calls| calls.iter().any(|call| call["call"]["status"] == "running"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_stopped_in_a_tool_call_reruns_only_that_call_on_invoke_or_at_start() {
    if !support::mcp_available() {
        return;
    }
    let release_dir = tempfile::tempdir().unwrap();
    let release = release_dir.path().join("release");
    let mut server = TestServer::start(true).await;
    for id in ["ctx_1", "ctx_2"] {
        server.create(id).await;
    }
    // ctx_1: one call that finishes, then one that blocks; ctx_2: one that
    // blocks. Each reply is taken in the order the requests arrive.
    server.upstream.push([
        calls(&[("call_a", "add", r#"{"a":1,"b":1}"#)]),
        wait_call("call_c", &release),
    ]);
    let http = server.http.clone();
    let url = format!("{}/chat", server.url);
    let running = tokio::spawn(async move {
        http.post(url)
            .bearer_auth(ALICE)
            .json(&json!({"context_id": "ctx_1", "message": "go"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    wait_until("ctx_1's wait_file call running", || {
        tool_running(&server, "ctx_1")
    })
    .await;
    // ctx_2 waits in its own tool.
    server.upstream.push([wait_call("call_d", &release)]);
    let http = server.http.clone();
    let url = format!("{}/chat", server.url);
    let running_2 = tokio::spawn(async move {
        http.post(url)
            .bearer_auth(ALICE)
            .json(&json!({"context_id": "ctx_2", "message": "wait"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    wait_until("ctx_2's wait_file call running", || {
        tool_running(&server, "ctx_2")
    })
    .await;
    let before_1 = server.messages("ctx_1").await;
    let before_2 = server.messages("ctx_2").await;
    server.request_stop();
    assert_eq!(running.await.unwrap(), 503);
    assert_eq!(running_2.await.unwrap(), 503);
    let upstream = server.upstream.clone();
    let dir = server.stopped().await;

    // Restarted without resume_on_start: every step is there; invoke
    // re-runs only the unfinished call, marked resumed.
    let server = TestServer::start_with(upstream.clone(), dir, true, "").await;
    assert_eq!(server.messages("ctx_1").await, before_1);
    assert_eq!(server.messages("ctx_2").await, before_2);
    std::fs::write(&release, "released").unwrap();
    upstream.push([text("done 1")]);
    let (status, body) = server
        .post("/chat/invoke", ALICE, json!({"context_id": "ctx_1"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "done 1");
    assert_eq!(
        statuses(&body),
        [
            ("call_c".to_string(), "running".to_string(), true),
            ("call_c".to_string(), "completed".to_string(), false),
        ]
    );
    let messages = server.messages("ctx_1").await;
    let outputs: Vec<&Value> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["type"] == "tool_response")
        .collect();
    assert_eq!(outputs.len(), 2, "each call answered once: {messages}");
    assert_eq!(outputs[0]["tool_output"], "2");
    assert_eq!(outputs[1]["tool_output"], "released");
    let upstream = server.upstream.clone();
    let dir = server.stop().await;

    // Restarted with resume_on_start: ctx_2 is carried on by itself.
    upstream.push([text("done 2")]);
    let server = TestServer::start_with(upstream, dir, true, "resume_on_start = true").await;
    wait_until("ctx_2 carried on at start", || async {
        server
            .messages("ctx_2")
            .await
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            == &json!({"sender": "ai", "message": "done 2"})
    })
    .await;
    let messages = server.messages("ctx_2").await;
    assert_eq!(
        messages,
        json!([
            {"sender": "human", "message": "wait"},
            {"type": "tool_call", "tool_call_id": "call_d", "tool_name": "wait_file", "tool_input": {"path": release.display().to_string()}},
            {"type": "tool_response", "tool_call_id": "call_d", "tool_output": "released"},
            {"sender": "ai", "message": "done 2"},
        ])
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_generation_of_a_context_in_flight_is_refused() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    server.upstream.push([text("first")]);
    let gate = server.upstream.hold();
    let received = server.upstream.received.notified();
    let http = server.http.clone();
    let url = format!("{}/chat", server.url);
    let first = tokio::spawn(async move {
        http.post(url)
            .bearer_auth(ALICE)
            .json(&json!({"context_id": "ctx_1", "message": "one"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    received.await;
    let (status, body) = server
        .post(
            "/chat",
            ALICE,
            json!({"context_id": "ctx_1", "message": "two"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        error(&body).contains("is generating for another request"),
        "{body}"
    );
    gate.add_permits(1);
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(
        server.messages("ctx_1").await,
        json!([{"sender": "human", "message": "one"}, {"sender": "ai", "message": "first"}])
    );
    server.stop().await;
}
