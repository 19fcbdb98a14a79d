//! The Anthropic Messages client against the fake provider over real
//! loopback HTTP: requests as sent (path, headers, body held to convlog's
//! rules), whole and streamed replies, thinking sent back, errors.

mod support;

use std::time::Duration;

use convlog::{Provider, Role};
use convlog_agent::client::{ModelErrorKind, Reasoning, Usage};
use convlog_agent::{ApiKind, ClientConfig, StreamDelta};
use serde_json::{json, Value};
use support::{anthropic, complete, FakeServer, Reply};

/// Every top-level field of a Messages request this client may send.
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "tools",
    "stream",
    "temperature",
    "thinking",
];

const SIGNATURE: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/Kq8Nm2s==";

fn config(server: &FakeServer) -> ClientConfig {
    ClientConfig::with_env(ApiKind::Anthropic, "claude-test", |_| None)
        .base_url(server.url(""))
        .api_key(Some("sk-ant-test".into()))
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(1))
}

fn two_calls() -> Vec<Value> {
    vec![
        anthropic::text("I'll check both cities."),
        anthropic::tool_use(
            "toolu_01A09q90qw90lq917835lq9",
            "weather",
            json!({"city": "Paris"}),
        ),
        anthropic::tool_use(
            "toolu_01B7x9pQ3mKc2eXw4Lr8TnZv",
            "time",
            json!({"city": "Tōkyō"}),
        ),
    ]
}

fn thinking_calls() -> Vec<Value> {
    let mut content = vec![anthropic::thinking(
        "Two cities — «Paris» and «Tōkyō»: call both tools at once.",
        SIGNATURE,
    )];
    content.extend(two_calls().into_iter().skip(1));
    content
}

fn assert_headers(request: &support::Recorded) {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None);
    assert_eq!(request.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn a_text_reply_and_the_request_sent() {
    let server = FakeServer::start(vec![anthropic::reply(vec![anthropic::text(
        "Hello there.",
    )])]);
    let reply = complete(config(&server), &support::conversation("Hi"), &[], None)
        .await
        .unwrap();
    assert_eq!(reply.entry.role, Role::Assistant);
    assert_eq!(reply.entry.content.as_deref(), Some("Hello there."));
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("stop"));
    assert_eq!(reply.entry.reasoning, None);
    assert!(reply.entry.tool_calls.is_empty());
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 128,
            output_tokens: 14
        })
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_headers(&requests[0]);
    let body = requests[0].json();
    support::assert_valid_body(Provider::Anthropic, &body, FIELDS);
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["max_tokens"], 4096, "the API requires max_tokens");
    assert_eq!(body["system"], "You are terse.");
    assert_eq!(body["messages"].as_array().unwrap().len(), 1);
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body.get("stream"), None);
    assert_eq!(body.get("tools"), None, "no empty tools list");
    assert_eq!(body.get("thinking"), None);
}

#[tokio::test]
async fn two_parallel_tool_calls_and_their_results_sent_back() {
    let server = FakeServer::start(vec![
        anthropic::reply(two_calls()),
        anthropic::reply(vec![anthropic::text("Sunny; 9 pm.")]),
    ]);
    let tools = support::weather_tools();
    let entries = support::conversation("Paris and Tokyo?");
    let config = || config(&server).temperature(Some(0.5)).max_tokens(Some(256));
    let reply = complete(config(), &entries, &tools, None).await.unwrap();
    let calls: Vec<(&str, &str, Value)> = reply
        .entry
        .tool_calls
        .iter()
        .map(|call| {
            let arguments = serde_json::from_str(&call.arguments).unwrap();
            (call.call_id.as_str(), call.name.as_str(), arguments)
        })
        .collect();
    assert_eq!(
        calls,
        [
            (
                "toolu_01A09q90qw90lq917835lq9",
                "weather",
                json!({"city": "Paris"})
            ),
            (
                "toolu_01B7x9pQ3mKc2eXw4Lr8TnZv",
                "time",
                json!({"city": "Tōkyō"})
            ),
        ]
    );
    assert_eq!(
        reply.entry.content.as_deref(),
        Some("I'll check both cities.")
    );
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("tool_calls"));

    let next = support::continued(&entries, &reply, |name| format!("{name}: ok"));
    let answer = complete(config(), &next, &tools, None).await.unwrap();
    assert_eq!(answer.entry.content.as_deref(), Some("Sunny; 9 pm."));

    let requests = server.requests();
    for request in &requests {
        assert_headers(request);
        let body = request.json();
        support::assert_valid_body(Provider::Anthropic, &body, FIELDS);
        assert_eq!(
            body["tools"],
            json!([
                {"name": "weather", "description": "Current weather of a city",
                 "input_schema": tools[0].parameters},
                {"name": "time", "description": "Local time of a city",
                 "input_schema": tools[1].parameters},
            ])
        );
        assert_eq!(body["temperature"], json!(0.5));
        assert_eq!(body["max_tokens"], json!(256));
    }
    let messages = requests[1].json()["messages"].clone();
    assert_eq!(messages.as_array().unwrap().len(), 3);
    assert_eq!(messages[1]["role"], "assistant");
    let kinds: Vec<&str> = messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|block| block["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["text", "tool_use", "tool_use"]);
    assert_eq!(messages[1]["content"][1], two_calls()[1]);
    assert_eq!(messages[1]["content"][2], two_calls()[2]);
    assert_eq!(messages[2]["role"], "user");
    let results: Vec<(&str, &str)> = messages[2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|block| {
            assert_eq!(block["type"], "tool_result");
            (
                block["tool_use_id"].as_str().unwrap(),
                block["content"]
                    .as_str()
                    .or_else(|| block["content"][0]["text"].as_str())
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            ("toolu_01A09q90qw90lq917835lq9", "weather: ok"),
            ("toolu_01B7x9pQ3mKc2eXw4Lr8TnZv", "time: ok")
        ]
    );
}

#[tokio::test]
async fn thinking_with_its_signature_is_recorded_and_sent_back() {
    let server = FakeServer::start(vec![
        anthropic::reply(thinking_calls()),
        anthropic::reply(vec![anthropic::text("Sunny; 9 pm.")]),
    ]);
    let tools = support::weather_tools();
    let entries = support::conversation("Paris and Tokyo?");
    let config = || config(&server).reasoning(Some(Reasoning::Budget(2048)));
    let reply = complete(config(), &entries, &tools, None).await.unwrap();
    let reasoning = reply.entry.reasoning.clone().expect("thinking recorded");
    assert_eq!(
        reasoning.text.as_deref(),
        Some("Two cities — «Paris» and «Tōkyō»: call both tools at once.")
    );
    assert_eq!(reasoning.signature.as_deref(), Some(SIGNATURE));
    assert_eq!(reply.entry.tool_calls.len(), 2);

    let next = support::continued(&entries, &reply, |name| format!("{name}: ok"));
    complete(config(), &next, &tools, None).await.unwrap();
    let requests = server.requests();
    for request in &requests {
        let body = request.json();
        support::assert_valid_body(Provider::Anthropic, &body, FIELDS);
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(body["max_tokens"], json!(2048 + 4096));
    }
    let assistant = requests[1].json()["messages"][1].clone();
    assert_eq!(assistant["role"], "assistant");
    // The thinking block first, with its signature, as the API requires in
    // a tool loop with thinking on.
    assert_eq!(assistant["content"][0], thinking_calls()[0]);
    assert_eq!(assistant["content"][1], thinking_calls()[1]);
    assert_eq!(assistant["content"][2], thinking_calls()[2]);
}

/// The deltas [`anthropic::events`] gives for `content` cut every `size`
/// characters.
fn expected_deltas(content: &[Value], size: usize) -> Vec<StreamDelta> {
    let mut deltas = Vec::new();
    let mut calls = 0;
    for block in content {
        match block["type"].as_str().unwrap() {
            "text" => deltas.extend(
                support::pieces(block["text"].as_str().unwrap(), size)
                    .into_iter()
                    .map(StreamDelta::Text),
            ),
            "thinking" => deltas.extend(
                support::pieces(block["thinking"].as_str().unwrap(), size)
                    .into_iter()
                    .map(StreamDelta::Reasoning),
            ),
            "tool_use" => {
                deltas.push(StreamDelta::ToolCall {
                    index: calls,
                    id: Some(block["id"].as_str().unwrap().into()),
                    name: Some(block["name"].as_str().unwrap().into()),
                    arguments: String::new(),
                });
                for piece in support::pieces(&block["input"].to_string(), size) {
                    deltas.push(StreamDelta::ToolCall {
                        index: calls,
                        id: None,
                        name: None,
                        arguments: piece,
                    });
                }
                calls += 1;
            }
            other => panic!("{other}"),
        }
    }
    deltas
}

#[tokio::test]
async fn a_streamed_reply_equals_the_whole_one_and_delivers_deltas_in_order() {
    let entries = support::conversation("Paris and Tokyo?");
    let tools = support::weather_tools();
    for content in [
        vec![anthropic::text("Hello, wörld! 👋")],
        two_calls(),
        thinking_calls(),
    ] {
        let whole = anthropic::message(content.clone());
        let server = FakeServer::start(vec![
            Reply::json(200, whole.clone()),
            // Pieces of 7 bytes: events, lines and characters cut anywhere.
            anthropic::stream(&anthropic::events(&whole, 4), 7),
        ]);
        let config = config(&server).reasoning(Some(Reasoning::Budget(1024)));
        let whole_reply = complete(config.clone(), &entries, &tools, None)
            .await
            .unwrap();
        let deltas = support::Deltas::default();
        let streamed = complete(config, &entries, &tools, Some(&deltas))
            .await
            .unwrap();
        assert_eq!(
            support::comparable(&streamed.entry),
            support::comparable(&whole_reply.entry)
        );
        assert_eq!(streamed.usage, whole_reply.usage);
        assert_eq!(deltas.taken(), expected_deltas(&content, 4));
        let requests = server.requests();
        assert_eq!(requests[0].json().get("stream"), None);
        assert_eq!(requests[1].json()["stream"], json!(true));
        for request in &requests {
            assert_headers(request);
            support::assert_valid_body(Provider::Anthropic, &request.json(), FIELDS);
        }
    }
}

#[tokio::test]
async fn a_400_error_body_is_kept_verbatim_and_not_retried() {
    let body = anthropic::error(
        "invalid_request_error",
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`.",
    )
    .to_string();
    let server = FakeServer::start(vec![
        Reply::raw(400, "application/json", body.clone().into_bytes()),
        anthropic::reply(vec![anthropic::text("never reached")]),
    ]);
    let error = complete(config(&server), &support::conversation("Hi"), &[], None)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Status { status: 400, body });
    assert_eq!(error.attempts, 1);
    assert_eq!(error.url, server.url("/v1/messages"));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_529_overloaded_is_retried_and_its_body_kept_when_retries_run_out() {
    let overloaded = anthropic::error("overloaded_error", "Overloaded").to_string();
    let server = FakeServer::start(vec![
        Reply::raw(529, "application/json", overloaded.clone().into_bytes()),
        anthropic::reply(vec![anthropic::text("ok")]),
        Reply::raw(529, "application/json", overloaded.clone().into_bytes()),
        Reply::raw(529, "application/json", overloaded.clone().into_bytes()),
    ]);
    let entries = support::conversation("Hi");
    let reply = complete(config(&server), &entries, &[], None)
        .await
        .unwrap();
    assert_eq!(reply.entry.content.as_deref(), Some("ok"));
    let error = complete(config(&server).max_attempts(2), &entries, &[], None)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 529,
            body: overloaded
        }
    );
    assert_eq!(error.attempts, 2);
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[0].body, requests[1].body);
}

#[tokio::test]
async fn an_error_event_inside_a_stream_surfaces_verbatim() {
    let whole = anthropic::message(vec![anthropic::text("Hello")]);
    let mut events = anthropic::events(&whole, 2);
    let error = anthropic::error("overloaded_error", "Overloaded");
    events.truncate(4); // message_start, ping, the text block's start, "He"
    events.push(error.clone());
    let server = FakeServer::start(vec![anthropic::stream(&events, 16)]);
    let deltas = support::Deltas::default();
    let failure = complete(
        config(&server),
        &support::conversation("Hi"),
        &[],
        Some(&deltas),
    )
    .await
    .unwrap_err();
    assert_eq!(
        failure.kind,
        ModelErrorKind::Status {
            status: 200,
            body: error.to_string()
        }
    );
    assert_eq!(failure.attempts, 1, "a started stream is not retried");
    assert_eq!(deltas.taken(), [StreamDelta::Text("He".into())]);
}

#[tokio::test]
async fn a_stream_that_ends_before_message_stop_is_malformed() {
    let whole = anthropic::message(vec![anthropic::text("Hello")]);
    let mut events = anthropic::events(&whole, 2);
    events.pop(); // message_stop
    let server = FakeServer::start(vec![anthropic::stream(&events, 16)]);
    let deltas = support::Deltas::default();
    let error = complete(
        config(&server),
        &support::conversation("Hi"),
        &[],
        Some(&deltas),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error.kind, ModelErrorKind::Malformed(reason)
            if reason.contains("stream ended before its end frame")),
        "{error}"
    );
    assert_eq!(error.attempts, 1);
    let texts: Vec<StreamDelta> = ["He", "ll", "o"]
        .iter()
        .map(|piece| StreamDelta::Text(piece.to_string()))
        .collect();
    assert_eq!(deltas.taken(), texts, "what arrived was delivered");
}
