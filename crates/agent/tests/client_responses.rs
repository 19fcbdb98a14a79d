//! The OpenAI Responses client against the fake provider over real loopback
//! HTTP: requests as sent (path, Bearer key, body held to convlog's rules),
//! whole and streamed replies, reasoning items sent back, failures.

mod support;

use std::time::Duration;

use convlog::{Provider, Role};
use convlog_agent::client::{ModelErrorKind, Reasoning, Usage};
use convlog_agent::{ApiKind, ClientConfig, StreamDelta};
use serde_json::{json, Value};
use support::{responses, FakeServer, Reply};

/// Every top-level field of a Responses request this client may send.
const FIELDS: &[&str] = &[
    "model",
    "input",
    "tools",
    "stream",
    "store",
    "include",
    "reasoning",
    "max_output_tokens",
    "temperature",
];

const ENCRYPTED: &str = "gAAAAABoISQ24OyVRYbkYfukswWsWgOD-hbn2YK2FAtvJkzs7c0";

fn config(server: &FakeServer) -> ClientConfig {
    ClientConfig::with_env(ApiKind::OpenAiResponses, "gpt-test", |_| None)
        .base_url(server.url("/v1"))
        .api_key(Some("sk-test".into()))
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(1))
}

fn two_calls() -> Vec<Value> {
    vec![
        responses::function_call(
            "fc_67ca09c6bedc8190a7abfec07b1a1332",
            "call_unLAR8MvFNptuiZK6K6HCy5k",
            "weather",
            r#"{"city":"Paris"}"#,
        ),
        responses::function_call(
            "fc_67ca09c6bedc8190a7abfec07b1a1333",
            "call_Xk2pQ9rTz8mW3nB5vL7yHd1c",
            "time",
            r#"{"city":"Tōkyō"}"#,
        ),
    ]
}

fn reasoning_calls() -> Vec<Value> {
    let mut output = vec![responses::reasoning(
        "rs_6820f383d7c08191846711c5df8233bc",
        &[
            "**Planning**\n\nTwo cities — call both «tools».",
            "**Done**",
        ],
        ENCRYPTED,
    )];
    output.extend(two_calls());
    output
}

fn assert_headers(request: &support::Recorded) {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(request.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn a_text_reply_and_the_request_sent() {
    let server = FakeServer::start(vec![responses::reply(vec![responses::message(
        "msg_67ccd2bf17f0819081ff3bb2cf6508e6",
        "Hello there.",
    )])]);
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
            input_tokens: 36,
            output_tokens: 87
        })
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_headers(&requests[0]);
    let body = requests[0].json();
    support::assert_valid_body(Provider::OpenAiResponses, &body, FIELDS);
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(
        body["store"],
        json!(false),
        "the conversation lives in convlog"
    );
    assert_eq!(body.get("stream"), None);
    assert_eq!(body.get("tools"), None);
    assert_eq!(body.get("reasoning"), None);
    assert_eq!(body.get("include"), None);
    let input = body["input"].as_array().unwrap();
    assert_eq!(input.len(), 2);
    assert_eq!(input[1]["role"], "user");
}

#[tokio::test]
async fn two_parallel_tool_calls_and_their_results_sent_back() {
    let server = FakeServer::start(vec![
        responses::reply(two_calls()),
        responses::reply(vec![responses::message("msg_2", "Sunny; 9 pm.")]),
    ]);
    let tools = support::weather_tools();
    let entries = support::conversation("Paris and Tokyo?");
    let config = || config(&server).temperature(Some(0.5)).max_tokens(Some(256));
    let reply = support::complete(config(), &entries, &tools, None)
        .await
        .unwrap();
    let calls: Vec<(&str, &str, &str)> = reply
        .entry
        .tool_calls
        .iter()
        .map(|call| {
            (
                call.call_id.as_str(),
                call.name.as_str(),
                call.arguments.as_str(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            (
                "call_unLAR8MvFNptuiZK6K6HCy5k",
                "weather",
                r#"{"city":"Paris"}"#
            ),
            (
                "call_Xk2pQ9rTz8mW3nB5vL7yHd1c",
                "time",
                r#"{"city":"Tōkyō"}"#
            ),
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
        assert_headers(request);
        let body = request.json();
        support::assert_valid_body(Provider::OpenAiResponses, &body, FIELDS);
        assert_eq!(
            body["tools"],
            json!([
                {"type": "function", "name": "weather", "description": "Current weather of a city",
                 "parameters": tools[0].parameters, "strict": false},
                {"type": "function", "name": "time", "description": "Local time of a city",
                 "parameters": tools[1].parameters, "strict": false},
            ])
        );
        assert_eq!(body["temperature"], json!(0.5));
        assert_eq!(body["max_output_tokens"], json!(256));
    }
    let input = requests[1].json()["input"].clone();
    let items = input.as_array().unwrap();
    assert_eq!(items.len(), 6, "{input}");
    for (at, call) in two_calls().iter().enumerate() {
        let sent = &items[2 + at];
        assert_eq!(sent["type"], "function_call");
        assert_eq!(sent["call_id"], call["call_id"]);
        assert_eq!(sent["name"], call["name"]);
        assert_eq!(sent["arguments"], call["arguments"]);
        let output = &items[4 + at];
        assert_eq!(output["type"], "function_call_output");
        assert_eq!(output["call_id"], call["call_id"]);
        assert_eq!(
            output["output"],
            format!("{}: ok", call["name"].as_str().unwrap())
        );
    }
}

#[tokio::test]
async fn reasoning_with_encrypted_content_is_recorded_and_sent_back() {
    let server = FakeServer::start(vec![
        responses::reply(reasoning_calls()),
        responses::reply(vec![responses::message("msg_2", "Sunny; 9 pm.")]),
    ]);
    let tools = support::weather_tools();
    let entries = support::conversation("Paris and Tokyo?");
    let config = || config(&server).reasoning(Some(Reasoning::Effort("low".into())));
    let reply = support::complete(config(), &entries, &tools, None)
        .await
        .unwrap();
    let reasoning = reply.entry.reasoning.clone().expect("reasoning recorded");
    assert_eq!(
        reasoning.text.as_deref(),
        Some("**Planning**\n\nTwo cities — call both «tools».\n\n**Done**")
    );
    assert!(
        serde_json::to_string(&reply.entry)
            .unwrap()
            .contains(ENCRYPTED),
        "the encrypted content is recorded: {:?}",
        reply.entry
    );

    let next = support::continued(&entries, &reply, |name| format!("{name}: ok"));
    support::complete(config(), &next, &tools, None)
        .await
        .unwrap();
    let requests = server.requests();
    for request in &requests {
        let body = request.json();
        support::assert_valid_body(Provider::OpenAiResponses, &body, FIELDS);
        assert_eq!(
            body["reasoning"],
            json!({"effort": "low", "summary": "auto"})
        );
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["store"], json!(false));
    }
    let input = requests[1].json()["input"].clone();
    // The reasoning item goes back first, with its id, summary and
    // encrypted content (stateless: nothing is stored on OpenAI's side).
    let sent = &input[2];
    assert_eq!(sent["type"], "reasoning", "{input}");
    assert_eq!(sent["id"], "rs_6820f383d7c08191846711c5df8233bc");
    assert_eq!(sent["encrypted_content"], ENCRYPTED);
    assert_eq!(sent["summary"], reasoning_calls()[0]["summary"]);
    assert_eq!(input[3]["type"], "function_call");
    assert_eq!(input[4]["type"], "function_call");
}

/// The deltas [`responses::events`] gives for `output` cut every `size`
/// characters.
fn expected_deltas(output: &[Value], size: usize) -> Vec<StreamDelta> {
    let mut deltas = Vec::new();
    let mut calls = 0;
    for item in output {
        match item["type"].as_str().unwrap() {
            "reasoning" => {
                for (at, part) in item["summary"].as_array().unwrap().iter().enumerate() {
                    if at > 0 {
                        deltas.push(StreamDelta::Reasoning("\n\n".into()));
                    }
                    deltas.extend(
                        support::pieces(part["text"].as_str().unwrap(), size)
                            .into_iter()
                            .map(StreamDelta::Reasoning),
                    );
                }
            }
            "message" => deltas.extend(
                support::pieces(item["content"][0]["text"].as_str().unwrap(), size)
                    .into_iter()
                    .map(StreamDelta::Text),
            ),
            "function_call" => {
                deltas.push(StreamDelta::ToolCall {
                    index: calls,
                    id: Some(item["call_id"].as_str().unwrap().into()),
                    name: Some(item["name"].as_str().unwrap().into()),
                    arguments: String::new(),
                });
                for piece in support::pieces(item["arguments"].as_str().unwrap(), size) {
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
    for output in [
        vec![responses::message("msg_1", "Hello, wörld! 👋")],
        two_calls(),
        reasoning_calls(),
    ] {
        let whole = responses::response("completed", output.clone());
        let server = FakeServer::start(vec![
            Reply::json(200, whole.clone()),
            // Pieces of 7 bytes: events, lines and characters cut anywhere.
            responses::stream(&responses::events(&whole, 4), 7),
        ]);
        let config = config(&server).reasoning(Some(Reasoning::Effort("low".into())));
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
        assert_eq!(deltas.taken(), expected_deltas(&output, 4));
        let requests = server.requests();
        assert_eq!(requests[0].json().get("stream"), None);
        assert_eq!(requests[1].json()["stream"], json!(true));
        for request in &requests {
            assert_headers(request);
            support::assert_valid_body(Provider::OpenAiResponses, &request.json(), FIELDS);
        }
    }
}

#[tokio::test]
async fn a_failed_response_in_a_stream_surfaces_verbatim() {
    let whole = responses::response("completed", vec![responses::message("msg_1", "Hello")]);
    let mut events = responses::events(&whole, 2);
    // created, in_progress, item added, part added, "He"
    events.truncate(5);
    let failed = responses::failed("server_error", "The model failed to generate a response.");
    events.push(failed.clone());
    let events = responses::numbered(events);
    let server = FakeServer::start(vec![responses::stream(&events, 16)]);
    let deltas = support::Deltas::default();
    let error = support::complete(
        config(&server),
        &support::conversation("Hi"),
        &[],
        Some(&deltas),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 200,
            body: events.last().unwrap().to_string()
        }
    );
    assert_eq!(error.attempts, 1, "a started stream is not retried");
    assert_eq!(deltas.taken(), [StreamDelta::Text("He".into())]);
}

#[tokio::test]
async fn error_bodies_are_kept_verbatim() {
    let invalid = json!({"error": {"message": "Unsupported parameter: 'temperature' is not supported with this model.",
        "type": "invalid_request_error", "param": "temperature", "code": "unsupported_parameter"}})
    .to_string();
    let mut failed = responses::response("failed", Vec::new());
    failed["error"] = json!({"code": "server_error", "message": "Something went wrong."});
    let server = FakeServer::start(vec![
        Reply::raw(400, "application/json", invalid.clone().into_bytes()),
        Reply::json(200, failed.clone()),
    ]);
    let entries = support::conversation("Hi");
    let error = support::complete(config(&server), &entries, &[], None)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 400,
            body: invalid
        }
    );
    assert_eq!(error.attempts, 1);
    let error = support::complete(config(&server), &entries, &[], None)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 200,
            body: failed.to_string()
        }
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_stream_cut_before_response_completed_is_an_error() {
    let whole = responses::response("completed", vec![responses::message("msg_1", "Hello")]);
    let mut events = responses::events(&whole, 2);
    events.pop(); // response.completed
    let server = FakeServer::start(vec![
        // Ends cleanly without the terminal event.
        responses::stream(&events, 16),
        // The connection drops in the middle of the body.
        responses::stream(&events, 16).then_cut(),
    ]);
    let entries = support::conversation("Hi");
    let error = support::complete(
        config(&server),
        &entries,
        &[],
        Some(&support::Deltas::default()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error.kind, ModelErrorKind::Malformed(reason)
            if reason.contains("stream ended before its end frame")),
        "{error}"
    );
    let error = support::complete(
        config(&server),
        &entries,
        &[],
        Some(&support::Deltas::default()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error.kind, ModelErrorKind::Connect(reason) if reason.contains("stream broke")),
        "{error}"
    );
    assert_eq!(error.attempts, 1, "a started stream is not retried");
}
