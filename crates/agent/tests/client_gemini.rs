//! The Gemini generateContent client against the fake provider over real
//! loopback HTTP: requests as sent (path, key header, body held to
//! convlog's rules), whole and `alt=sse` streamed replies, thought
//! signatures sent back, errors.

mod support;

use std::time::Duration;

use convlog::{Provider, Role};
use convlog_agent::client::{ModelErrorKind, Reasoning, Usage};
use convlog_agent::{ApiKind, ClientConfig, StreamDelta};
use serde_json::{json, Value};
use support::{gemini, FakeServer, Reply};

/// Every top-level field of a generateContent request this client may send.
const FIELDS: &[&str] = &[
    "contents",
    "system_instruction",
    "tools",
    "generationConfig",
];

const SIGNATURE: &str = "CiQB0e2Kb3Gd8kYq3iqV0t7hNnKc3bTq2yR9l3O1H2Q4JX0xLs8=";

fn config(server: &FakeServer) -> ClientConfig {
    ClientConfig::with_env(ApiKind::Gemini, "gemini-test", |_| None)
        .base_url(server.url("/v1beta"))
        .api_key(Some("AIza-test".into()))
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(1))
}

fn two_calls() -> Vec<Value> {
    vec![
        gemini::function_call("weather", json!({"city": "Paris"})),
        gemini::function_call("time", json!({"city": "Tōkyō"})),
    ]
}

/// A thought, then the two calls, the first carrying the signature (as
/// Gemini puts it on the first call of a turn).
fn thinking_calls() -> Vec<Value> {
    let calls = two_calls();
    vec![
        gemini::thought("**Two cities**\nCall both tools — «Paris», «Tōkyō»."),
        gemini::signed(calls[0].clone(), SIGNATURE),
        calls[1].clone(),
    ]
}

fn assert_headers(request: &support::Recorded, stream: bool) {
    assert_eq!(request.method, "POST");
    let path = if stream {
        "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    } else {
        "/v1beta/models/gemini-test:generateContent"
    };
    assert_eq!(request.path, path);
    assert_eq!(request.header("x-goog-api-key"), Some("AIza-test"));
    assert_eq!(request.header("authorization"), None);
    assert_eq!(request.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn a_text_reply_and_the_request_sent() {
    let server = FakeServer::start(vec![gemini::reply(vec![gemini::text("Hello there.")])]);
    let reply = support::complete(config(&server), &support::conversation("Hi"), &[], None)
        .await
        .unwrap();
    assert_eq!(reply.entry.role, Role::Assistant);
    assert_eq!(reply.entry.content.as_deref(), Some("Hello there."));
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("stop"));
    assert!(reply.entry.tool_calls.is_empty());
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 12,
            output_tokens: 39
        })
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_headers(&requests[0], false);
    let body = requests[0].json();
    support::assert_valid_body(Provider::Gemini, &body, FIELDS);
    assert_eq!(body.get("model"), None, "the model is in the URL");
    assert_eq!(
        body["system_instruction"]["parts"][0]["text"],
        "You are terse."
    );
    assert_eq!(
        body["contents"],
        json!([{"role": "user", "parts": [{"text": "Hi"}]}])
    );
    assert_eq!(body.get("tools"), None);
    assert_eq!(body.get("generationConfig"), None);
}

#[tokio::test]
async fn two_parallel_tool_calls_and_their_results_sent_back() {
    let server = FakeServer::start(vec![
        gemini::reply(two_calls()),
        gemini::reply(vec![gemini::text("Sunny; 9 pm.")]),
    ]);
    let tools = support::weather_tools();
    let entries = support::conversation("Paris and Tokyo?");
    let config = || config(&server).temperature(Some(0.5)).max_tokens(Some(256));
    let reply = support::complete(config(), &entries, &tools, None)
        .await
        .unwrap();
    let calls: Vec<(&str, Value)> = reply
        .entry
        .tool_calls
        .iter()
        .map(|call| {
            (
                call.name.as_str(),
                serde_json::from_str(&call.arguments).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("weather", json!({"city": "Paris"})),
            ("time", json!({"city": "Tōkyō"}))
        ]
    );
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("tool_calls"));

    let next = support::continued(&entries, &reply, |name| format!("{name}: ok"));
    let answer = support::complete(config(), &next, &tools, None)
        .await
        .unwrap();
    assert_eq!(answer.entry.content.as_deref(), Some("Sunny; 9 pm."));

    let requests = server.requests();
    for request in &requests {
        assert_headers(request, false);
        let body = request.json();
        support::assert_valid_body(Provider::Gemini, &body, FIELDS);
        assert_eq!(
            body["tools"],
            json!([{"functionDeclarations": [
                {"name": "weather", "description": "Current weather of a city",
                 "parameters": tools[0].parameters},
                {"name": "time", "description": "Local time of a city",
                 "parameters": tools[1].parameters},
            ]}])
        );
        assert_eq!(
            body["generationConfig"],
            json!({"temperature": 0.5, "maxOutputTokens": 256})
        );
    }
    let contents = requests[1].json()["contents"].clone();
    assert_eq!(contents.as_array().unwrap().len(), 3);
    assert_eq!(contents[1], json!({"role": "model", "parts": two_calls()}));
    assert_eq!(contents[2]["role"], "user");
    let responses: Vec<(&str, &Value)> = contents[2]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|part| {
            (
                part["functionResponse"]["name"].as_str().unwrap(),
                &part["functionResponse"]["response"],
            )
        })
        .collect();
    assert_eq!(responses.len(), 2);
    assert_eq!(responses[0].0, "weather");
    assert_eq!(responses[1].0, "time");
    assert!(
        responses[0].1.to_string().contains("weather: ok"),
        "{contents}"
    );
}

#[tokio::test]
async fn thoughts_and_their_signature_are_recorded_and_sent_back() {
    let server = FakeServer::start(vec![
        gemini::reply(thinking_calls()),
        gemini::reply(vec![gemini::text("Sunny; 9 pm.")]),
    ]);
    let tools = support::weather_tools();
    let entries = support::conversation("Paris and Tokyo?");
    let config = || config(&server).reasoning(Some(Reasoning::Budget(1024)));
    let reply = support::complete(config(), &entries, &tools, None)
        .await
        .unwrap();
    let reasoning = reply.entry.reasoning.clone().expect("thought recorded");
    assert_eq!(
        reasoning.text.as_deref(),
        Some("**Two cities**\nCall both tools — «Paris», «Tōkyō».")
    );
    assert_eq!(reply.entry.tool_calls.len(), 2);
    assert!(
        serde_json::to_string(&reply.entry)
            .unwrap()
            .contains(SIGNATURE),
        "the signature is recorded: {:?}",
        reply.entry
    );

    let next = support::continued(&entries, &reply, |name| format!("{name}: ok"));
    support::complete(config(), &next, &tools, None)
        .await
        .unwrap();
    let requests = server.requests();
    for request in &requests {
        let body = request.json();
        support::assert_valid_body(Provider::Gemini, &body, FIELDS);
        assert_eq!(
            body["generationConfig"],
            json!({"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}})
        );
    }
    // The model's content goes back as it came: the thought, then the
    // signature on the first call, where Gemini checks it.
    let model = requests[1].json()["contents"][1].clone();
    assert_eq!(model, json!({"role": "model", "parts": thinking_calls()}));
}

/// The deltas [`gemini::chunks`] gives for `parts` cut every `size`
/// characters.
fn expected_deltas(parts: &[Value], size: usize) -> Vec<StreamDelta> {
    let mut deltas = Vec::new();
    let mut calls = 0;
    for part in parts {
        if let Some(call) = part.get("functionCall") {
            deltas.push(StreamDelta::ToolCall {
                index: calls,
                id: None,
                name: Some(call["name"].as_str().unwrap().into()),
                arguments: call["args"].to_string(),
            });
            calls += 1;
            continue;
        }
        let pieces = support::pieces(part["text"].as_str().unwrap(), size);
        if part.get("thought").is_some() {
            deltas.extend(pieces.into_iter().map(StreamDelta::Reasoning));
        } else {
            deltas.extend(pieces.into_iter().map(StreamDelta::Text));
        }
    }
    deltas
}

#[tokio::test]
async fn a_streamed_reply_equals_the_whole_one_and_delivers_deltas_in_order() {
    let entries = support::conversation("Paris and Tokyo?");
    let tools = support::weather_tools();
    let thought_then_text = vec![
        gemini::thought("Greet — «warmly»."),
        gemini::signed(gemini::text("Hello, wörld! 👋"), SIGNATURE),
    ];
    for parts in [
        vec![gemini::text("Hello, wörld! 👋")],
        two_calls(),
        thinking_calls(),
        thought_then_text,
    ] {
        let whole = gemini::response(parts.clone());
        let server = FakeServer::start(vec![
            Reply::json(200, whole.clone()),
            // Pieces of 7 bytes: events, CRLFs and characters cut anywhere.
            gemini::stream(&gemini::chunks(&whole, 4), 7),
        ]);
        let config = config(&server);
        let whole_reply = support::complete(config.clone(), &entries, &tools, None)
            .await
            .unwrap();
        let deltas = support::Deltas::default();
        let streamed = support::complete(config, &entries, &tools, Some(&deltas))
            .await
            .unwrap();
        assert_eq!(
            support::comparable(&streamed.entry),
            support::comparable(&whole_reply.entry)
        );
        assert_eq!(streamed.usage, whole_reply.usage);
        assert_eq!(deltas.taken(), expected_deltas(&parts, 4));
        let requests = server.requests();
        assert_headers(&requests[0], false);
        assert_headers(&requests[1], true);
        assert_eq!(
            requests[0].body, requests[1].body,
            "no stream flag in the body"
        );
        support::assert_valid_body(Provider::Gemini, &requests[1].json(), FIELDS);
    }
}

#[tokio::test]
async fn a_429_resource_exhausted_honours_retry_after_and_keeps_its_body() {
    let exhausted = gemini::error(
        429,
        "RESOURCE_EXHAUSTED",
        "Resource has been exhausted (e.g. check quota).",
    )
    .to_string();
    let limited = || {
        Reply::raw(429, "application/json", exhausted.clone().into_bytes())
            .header("Retry-After", "0")
    };
    let server = FakeServer::start(vec![
        limited(),
        gemini::reply(vec![gemini::text("ok")]),
        limited(),
        limited(),
    ]);
    // The backoff of its own is an hour: only `Retry-After: 0` lets the
    // retry happen now (the guard turns a regression into a failure).
    let config = || {
        config(&server)
            .initial_backoff(Duration::from_secs(3600))
            .max_backoff(Duration::from_secs(3600))
    };
    let entries = support::conversation("Hi");
    let reply = tokio::time::timeout(
        Duration::from_secs(600),
        support::complete(config(), &entries, &[], None),
    )
    .await
    .expect("Retry-After: 0 was not honoured")
    .unwrap();
    assert_eq!(reply.entry.content.as_deref(), Some("ok"));
    let error = tokio::time::timeout(
        Duration::from_secs(600),
        support::complete(config().max_attempts(2), &entries, &[], None),
    )
    .await
    .expect("Retry-After: 0 was not honoured")
    .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 429,
            body: exhausted
        }
    );
    assert_eq!(error.attempts, 2);
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn a_400_and_an_error_chunk_in_a_stream_surface_verbatim() {
    let invalid = gemini::error(
        400,
        "INVALID_ARGUMENT",
        "Invalid JSON payload received. Unknown name \"additionalProperties\"",
    );
    let unavailable = gemini::error(503, "UNAVAILABLE", "The model is overloaded.");
    let mut chunks = gemini::chunks(&gemini::response(vec![gemini::text("Hello")]), 2);
    chunks.truncate(1);
    chunks.push(unavailable.clone());
    let server = FakeServer::start(vec![
        Reply::raw(400, "application/json", invalid.to_string().into_bytes()),
        gemini::stream(&chunks, 16),
    ]);
    let entries = support::conversation("Hi");
    let error = support::complete(config(&server), &entries, &[], None)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 400,
            body: invalid.to_string()
        }
    );
    assert_eq!(error.attempts, 1);
    let deltas = support::Deltas::default();
    let error = support::complete(config(&server), &entries, &[], Some(&deltas))
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 200,
            body: unavailable.to_string()
        }
    );
    assert_eq!(deltas.taken(), [StreamDelta::Text("He".into())]);
}

#[tokio::test]
async fn a_stream_that_ends_before_its_finish_reason_is_malformed() {
    let mut chunks = gemini::chunks(&gemini::response(vec![gemini::text("Hello")]), 2);
    chunks.pop(); // the chunk with the finish reason
    let server = FakeServer::start(vec![gemini::stream(&chunks, 16)]);
    let deltas = support::Deltas::default();
    let error = support::complete(
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
    assert_eq!(
        deltas.taken(),
        [
            StreamDelta::Text("He".into()),
            StreamDelta::Text("ll".into())
        ]
    );
}
