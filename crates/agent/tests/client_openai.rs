//! The OpenAI Chat (strict and compatible) client against the fake provider
//! over real loopback HTTP: requests as sent, replies as read, streaming,
//! retries, errors.

mod support;

use std::time::Duration;

use convlog::model::Reasoning as ReasoningBlock;
use convlog::{ConversationEntry, RenderOptions, Role};
use convlog_agent::client::{ModelErrorKind, Reasoning, Usage};
use convlog_agent::{
    ApiKind, ClientConfig, Dialect, HttpClient, ModelClient, ModelError, ModelReply, ModelRequest,
    StreamDelta, ToolSpec,
};
use serde_json::{json, Value};
use support::{openai, FakeServer, Reply};

/// A strict OpenAI client of `server`, key `sk-test`, fast retries.
fn strict(server: &FakeServer) -> ClientConfig {
    ClientConfig::new(ApiKind::OpenAiChat, "gpt-test")
        .base_url(server.url("/v1"))
        .api_key(Some("sk-test".into()))
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(1))
}

fn compatible(server: &FakeServer, dialect: Dialect) -> ClientConfig {
    ClientConfig::new(ApiKind::OpenAiCompatible(dialect), "glm-test")
        .base_url(server.url("/v1"))
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(1))
}

fn weather_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "weather".into(),
            description: "Current weather of a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        },
        ToolSpec {
            name: "time".into(),
            description: "Local time of a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        },
    ]
}

async fn call(
    config: ClientConfig,
    entries: &[ConversationEntry],
    tools: &[ToolSpec],
    deltas: Option<&support::Deltas>,
) -> Result<ModelReply, ModelError> {
    let client = HttpClient::new(config);
    let render = RenderOptions::new();
    let request = ModelRequest {
        entries,
        tools,
        render: &render,
    };
    match deltas {
        Some(deltas) => {
            let sink = deltas.sink();
            client.complete(request, Some(&sink)).await
        }
        None => client.complete(request, None).await,
    }
}

const TWO_CALLS: [(&str, &str, &str); 2] = [
    ("call_a", "weather", r#"{"city":"Paris"}"#),
    ("call_b", "time", r#"{"city":"Tōkyō"}"#),
];

#[tokio::test]
async fn a_text_reply() {
    let server = FakeServer::start(vec![openai::reply(openai::text("Hello there."))]);
    let reply = call(strict(&server), &support::conversation("Hi"), &[], None)
        .await
        .unwrap();
    assert_eq!(reply.entry.role, Role::Assistant);
    assert_eq!(reply.entry.content.as_deref(), Some("Hello there."));
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("stop"));
    assert!(reply.entry.tool_calls.is_empty());
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 11,
            output_tokens: 7
        })
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(
        request.json(),
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi"},
            ],
            "stream": false,
        })
    );
}

#[tokio::test]
async fn a_reply_with_two_parallel_tool_calls() {
    let server = FakeServer::start(vec![openai::reply(openai::tool_calls(&TWO_CALLS))]);
    let tools = weather_tools();
    let config = strict(&server)
        .temperature(Some(0.5))
        .max_tokens(Some(256))
        .reasoning(Some(Reasoning::Effort("low".into())));
    let reply = call(
        config,
        &support::conversation("Paris and Tokyo?"),
        &tools,
        None,
    )
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
    assert_eq!(calls, TWO_CALLS);
    assert_eq!(reply.entry.content, None);
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("tool_calls"));
    let body = server.requests()[0].json();
    assert_eq!(
        body["tools"],
        json!([
            {"type": "function", "function": {"name": "weather", "description": "Current weather of a city",
                "parameters": tools[0].parameters}},
            {"type": "function", "function": {"name": "time", "description": "Local time of a city",
                "parameters": tools[1].parameters}},
        ])
    );
    assert_eq!(body["temperature"], json!(0.5));
    assert_eq!(body["max_completion_tokens"], json!(256));
    assert_eq!(
        body.get("max_tokens"),
        None,
        "strict OpenAI takes max_completion_tokens"
    );
    assert_eq!(body["reasoning_effort"], json!("low"));
}

#[tokio::test]
async fn a_streamed_reply_equals_the_whole_one_and_delivers_deltas_in_order() {
    let pieces = ["Hel", "lo, ", "wörld", "!"];
    let text_chunks = openai::text_chunks(&pieces);
    let call_chunks = openai::tool_call_chunks(&TWO_CALLS, 5);
    let server = FakeServer::start(vec![
        openai::reply(openai::text("Hello, wörld!")),
        // Pieces of 7 bytes: events, lines and characters cut anywhere.
        openai::stream(&text_chunks, 7),
        openai::reply(openai::tool_calls(&TWO_CALLS)),
        openai::stream(&call_chunks, 3),
    ]);
    let entries = support::conversation("Hi");
    for expected_deltas in [
        pieces
            .iter()
            .map(|piece| StreamDelta::Text(piece.to_string()))
            .collect::<Vec<_>>(),
        call_deltas(),
    ] {
        let whole = call(strict(&server), &entries, &[], None).await.unwrap();
        let deltas = support::Deltas::default();
        let streamed = call(strict(&server), &entries, &[], Some(&deltas))
            .await
            .unwrap();
        assert_eq!(
            support::comparable(&streamed.entry),
            support::comparable(&whole.entry)
        );
        assert_eq!(streamed.usage, whole.usage);
        assert_eq!(deltas.taken(), expected_deltas);
    }
    let requests = server.requests();
    assert_eq!(requests[0].json()["stream"], json!(false));
    assert_eq!(requests[0].json().get("stream_options"), None);
    assert_eq!(requests[1].json()["stream"], json!(true));
    assert_eq!(
        requests[1].json()["stream_options"],
        json!({"include_usage": true})
    );
}

/// The deltas of [`TWO_CALLS`] streamed in pieces of 5 characters.
fn call_deltas() -> Vec<StreamDelta> {
    let mut deltas = Vec::new();
    for (index, (id, name, arguments)) in TWO_CALLS.iter().enumerate() {
        deltas.push(StreamDelta::ToolCall {
            index,
            id: Some(id.to_string()),
            name: Some(name.to_string()),
            arguments: String::new(),
        });
        let characters: Vec<char> = arguments.chars().collect();
        for part in characters.chunks(5) {
            deltas.push(StreamDelta::ToolCall {
                index,
                id: None,
                name: None,
                arguments: part.iter().collect(),
            });
        }
    }
    deltas
}

#[tokio::test]
async fn compatible_servers_stream_reasoning_under_either_name() {
    for field in ["reasoning_content", "reasoning"] {
        let chunks = vec![
            openai::chunk(json!({"role": "assistant", field: "Think"}), None),
            openai::chunk(json!({field: "ing."}), None),
            openai::chunk(json!({"content": "Done."}), Some("stop")),
        ];
        let whole = openai::text("Done.");
        let mut whole = whole.as_object().unwrap().clone();
        whole.insert(field.into(), json!("Thinking."));
        let server = FakeServer::start(vec![
            Reply::json(200, openai::completion(Value::Object(whole))),
            openai::stream(&chunks, 4),
        ]);
        let entries = support::conversation("Hi");
        let config = || compatible(&server, Dialect::new().reasoning_content(true));
        let whole = call(config(), &entries, &[], None).await.unwrap();
        let deltas = support::Deltas::default();
        let streamed = call(config(), &entries, &[], Some(&deltas)).await.unwrap();
        assert_eq!(
            whole
                .entry
                .reasoning
                .as_ref()
                .and_then(|r| r.text.as_deref()),
            Some("Thinking."),
            "{field}"
        );
        assert_eq!(
            support::comparable(&streamed.entry),
            support::comparable(&whole.entry)
        );
        assert_eq!(
            deltas.taken(),
            [
                StreamDelta::Reasoning("Think".into()),
                StreamDelta::Reasoning("ing.".into()),
                StreamDelta::Text("Done.".into()),
            ]
        );
        // No usage chunk was sent: the reply says so.
        assert_eq!(streamed.usage, None);
    }
}

#[tokio::test]
async fn a_429_with_retry_after_zero_is_retried_at_once() {
    let server = FakeServer::start(vec![
        Reply::status(429, "rate limited").header("Retry-After", "0"),
        openai::reply(openai::text("ok")),
    ]);
    // The backoff of its own is an hour: only `Retry-After: 0` lets the
    // retry happen now. The guard turns a regression into a failure rather
    // than an hour's hang.
    let config = strict(&server)
        .initial_backoff(Duration::from_secs(3600))
        .max_backoff(Duration::from_secs(3600));
    let reply = tokio::time::timeout(
        Duration::from_secs(600),
        call(config, &support::conversation("Hi"), &[], None),
    )
    .await
    .expect("Retry-After: 0 was not honoured (the backoff is an hour)")
    .unwrap();
    assert_eq!(reply.entry.content.as_deref(), Some("ok"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);
}

#[tokio::test]
async fn a_500_twice_then_success() {
    let server = FakeServer::start(vec![
        Reply::status(500, "boom 1"),
        Reply::status(503, "boom 2"),
        openai::reply(openai::text("ok")),
    ]);
    let reply = call(strict(&server), &support::conversation("Hi"), &[], None)
        .await
        .unwrap();
    assert_eq!(reply.entry.content.as_deref(), Some("ok"));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn retries_stop_at_max_attempts_with_the_last_body() {
    let server = FakeServer::start(vec![
        Reply::status(500, "first"),
        Reply::status(502, "second"),
        Reply::status(500, "third"),
        openai::reply(openai::text("never reached")),
    ]);
    let config = strict(&server).max_attempts(3);
    let error = call(config, &support::conversation("Hi"), &[], None)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 500,
            body: "third".into()
        }
    );
    assert_eq!(error.attempts, 3);
    assert_eq!(error.url, server.url("/v1/chat/completions"));
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.remaining(), 1);
}

#[tokio::test]
async fn a_400_is_not_retried_and_its_body_is_kept_verbatim() {
    let body = r#"{"error": {"message": "Unrecognized request argument supplied: reasoning_content", "type": "invalid_request_error", "param": null, "code": null}}"#;
    let server = FakeServer::start(vec![
        Reply::raw(400, "application/json", body.as_bytes().to_vec()),
        openai::reply(openai::text("never reached")),
    ]);
    let error = call(strict(&server), &support::conversation("Hi"), &[], None)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 400,
            body: body.into()
        }
    );
    assert_eq!(error.attempts, 1);
    assert_eq!(server.requests().len(), 1);
    assert!(error.to_string().contains("HTTP 400"), "{error}");
    assert!(error.to_string().contains(body), "{error}");
}

#[tokio::test]
async fn malformed_bodies_say_what_was_wrong() {
    let server = FakeServer::start(vec![
        Reply::raw(200, "application/json", br#"{"choices": [{"mess"#.to_vec()),
        Reply::json(200, json!({"id": "x", "object": "chat.completion"})),
        Reply::json(
            200,
            openai::completion(json!({"role": "assistant", "content": 42})),
        ),
    ]);
    let entries = support::conversation("Hi");
    let expectations = [
        "the body is not JSON",
        "no choices[0]",
        "the assistant message cannot be read",
    ];
    for expected in expectations {
        let error = call(strict(&server), &entries, &[], None)
            .await
            .unwrap_err();
        match &error.kind {
            ModelErrorKind::Malformed(reason) => {
                assert!(reason.contains(expected), "{reason:?} lacks {expected:?}")
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
        assert_eq!(error.attempts, 1, "a malformed answer is not retried");
    }
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_stream_cut_before_done_is_malformed() {
    let chunks = openai::text_chunks(&["Hel", "lo"]);
    let server = FakeServer::start(vec![
        // Ends cleanly, but without `data: [DONE]`.
        Reply::sse(&chunks, 9),
        // The connection drops in the middle of the body.
        Reply::sse(&chunks[..2], 9).then_cut(),
    ]);
    let entries = support::conversation("Hi");
    let deltas = support::Deltas::default();
    let error = call(strict(&server), &entries, &[], Some(&deltas))
        .await
        .unwrap_err();
    match &error.kind {
        ModelErrorKind::Malformed(reason) => {
            assert!(
                reason.contains("stream ended before its end frame"),
                "{reason}"
            )
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    assert_eq!(error.attempts, 1);
    // What arrived was delivered before the stream broke.
    assert_eq!(
        deltas.taken(),
        [
            StreamDelta::Text("Hel".into()),
            StreamDelta::Text("lo".into())
        ]
    );
    let error = call(
        strict(&server),
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

#[tokio::test]
async fn an_error_event_inside_a_stream_surfaces_verbatim() {
    let event = r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}"#;
    let chunks = vec![
        openai::chunk(json!({"role": "assistant", "content": "Hi"}), None),
        Value::String(event.into()),
    ];
    let server = FakeServer::start(vec![Reply::sse(&chunks, 64)]);
    let error = call(
        strict(&server),
        &support::conversation("Hi"),
        &[],
        Some(&support::Deltas::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 200,
            body: event.into()
        }
    );
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_after_each_attempt() {
    let server = FakeServer::start(vec![Reply::hang(), Reply::hang()]);
    let config = strict(&server)
        .request_timeout(Duration::from_millis(200))
        .max_attempts(2);
    let error = call(config, &support::conversation("Hi"), &[], None)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Timeout);
    assert_eq!(error.attempts, 2);
}

#[tokio::test]
async fn a_stream_that_falls_silent_times_out_after_its_deltas() {
    let chunks = openai::text_chunks(&["Hel", "lo"]);
    let server = FakeServer::start(vec![Reply::sse(&chunks[..2], 64).then_stall()]);
    // The timeout must not fire before the head and first chunk, written at
    // once, arrive, even on a loaded machine: a generous one (the test
    // waits it out once), and a single attempt so that the outcome is a
    // timeout however long the machine takes.
    let config = strict(&server)
        .request_timeout(Duration::from_secs(10))
        .max_attempts(1);
    let deltas = support::Deltas::default();
    let error = call(config, &support::conversation("Hi"), &[], Some(&deltas))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Timeout);
    assert_eq!(error.attempts, 1, "a started stream is not retried");
    assert_eq!(deltas.taken(), [StreamDelta::Text("Hel".into())]);
}

/// A history whose assistant turn carries reasoning.
fn history_with_reasoning() -> Vec<ConversationEntry> {
    let mut entries = support::conversation("What is 2+2?");
    let mut answer = ConversationEntry::new("eval-1", 2, Role::Assistant, Some("4".into()));
    answer.turn = 1;
    answer.reasoning = Some(ReasoningBlock {
        text: Some("2+2 is 4.".into()),
        signature: None,
        redacted: false,
    });
    entries.push(answer);
    entries.push(ConversationEntry::new(
        "eval-1",
        3,
        Role::User,
        Some("And 3+3?".into()),
    ));
    entries
}

#[tokio::test]
async fn strict_bodies_never_carry_reasoning_content_while_a_dialect_may() {
    let server = FakeServer::start(vec![
        openai::reply(openai::text("6")),
        openai::reply(openai::text("6")),
        openai::reply(openai::text("6")),
    ]);
    let entries = history_with_reasoning();
    call(strict(&server).max_tokens(Some(64)), &entries, &[], None)
        .await
        .unwrap();
    let dialect = Dialect::new()
        .reasoning_content(true)
        .extra("thinking", json!({"type": "enabled"}));
    call(
        compatible(&server, dialect).max_tokens(Some(64)),
        &entries,
        &[],
        None,
    )
    .await
    .unwrap();
    call(compatible(&server, Dialect::new()), &entries, &[], None)
        .await
        .unwrap();
    let requests = server.requests();
    let assistant = |index: usize| requests[index].json()["messages"][2].clone();
    let strict_body = requests[0].json();
    assert_eq!(assistant(0), json!({"role": "assistant", "content": "4"}));
    assert!(!requests[0]
        .body
        .windows(17)
        .any(|w| w == b"reasoning_content"));
    assert_eq!(strict_body["max_completion_tokens"], json!(64));
    assert_eq!(strict_body.get("thinking"), None);
    let dialect_body = requests[1].json();
    assert_eq!(
        assistant(1),
        json!({"role": "assistant", "content": "4", "reasoning_content": "2+2 is 4."})
    );
    assert_eq!(dialect_body["thinking"], json!({"type": "enabled"}));
    assert_eq!(dialect_body["max_tokens"], json!(64));
    assert_eq!(dialect_body.get("max_completion_tokens"), None);
    // A compatible endpoint without the dialect flag gets no reasoning either.
    assert_eq!(assistant(2), json!({"role": "assistant", "content": "4"}));
    // No key configured for the compatible endpoint: no credentials sent.
    assert_eq!(requests[1].header("authorization"), None);
}

#[tokio::test]
async fn extra_headers_are_sent_and_win_over_the_defaults() {
    let server = FakeServer::start(vec![
        openai::reply(openai::text("ok")),
        openai::reply(openai::text("ok")),
    ]);
    let entries = support::conversation("Hi");
    let config = strict(&server)
        .header("X-Title", "convlog")
        .header("HTTP-Referer", "https://example.invalid/app");
    call(config, &entries, &[], None).await.unwrap();
    let config = strict(&server).header("Authorization", "Bearer from-a-header");
    call(config, &entries, &[], None).await.unwrap();
    let requests = server.requests();
    assert_eq!(requests[0].header("x-title"), Some("convlog"));
    assert_eq!(
        requests[0].header("http-referer"),
        Some("https://example.invalid/app")
    );
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(
        requests[1].headers_named("authorization"),
        ["Bearer from-a-header"]
    );
}

#[tokio::test]
async fn the_key_comes_from_its_variable_and_its_absence_is_named() {
    let server = FakeServer::start(vec![openai::reply(openai::text("ok"))]);
    let entries = support::conversation("Hi");
    let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-from-env".to_string());
    let config =
        ClientConfig::with_env(ApiKind::OpenAiChat, "gpt-test", env).base_url(server.url("/v1"));
    call(config, &entries, &[], None).await.unwrap();
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer sk-from-env")
    );
    let config = ClientConfig::with_env(ApiKind::OpenAiChat, "gpt-test", |_| None)
        .base_url(server.url("/v1"));
    let error = call(config, &entries, &[], None).await.unwrap_err();
    match &error.kind {
        ModelErrorKind::Request(reason) => assert!(reason.contains("OPENAI_API_KEY"), "{reason}"),
        other => panic!("expected Request, got {other:?}"),
    }
    assert_eq!(error.attempts, 0);
    let config = ClientConfig::with_env(ApiKind::OpenAiCompatible(Dialect::new()), "m", |_| None);
    let error = call(config, &entries, &[], None).await.unwrap_err();
    assert!(
        matches!(&error.kind, ModelErrorKind::Request(reason) if reason.contains("base URL")),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1, "nothing sent without a key");
}

#[tokio::test]
async fn a_stream_with_crlf_comments_and_no_final_line_end_is_read() {
    let chunks = openai::text_chunks(&["Hi", " there"]);
    let mut text = String::from(": OPENROUTER PROCESSING\r\n\r\n");
    for chunk in &chunks {
        text.push_str(&format!("event: message\r\ndata: {chunk}\r\n\r\n"));
    }
    text.push_str("data: [DONE]");
    let server = FakeServer::start(vec![
        Reply::stream("text/event-stream", &text, 1),
        openai::reply(openai::text("Hi there")),
    ]);
    let entries = support::conversation("Hi");
    let deltas = support::Deltas::default();
    let streamed = call(strict(&server), &entries, &[], Some(&deltas))
        .await
        .unwrap();
    let whole = call(strict(&server), &entries, &[], None).await.unwrap();
    assert_eq!(
        support::comparable(&streamed.entry),
        support::comparable(&whole.entry)
    );
    assert_eq!(
        deltas.taken(),
        [
            StreamDelta::Text("Hi".into()),
            StreamDelta::Text(" there".into())
        ]
    );
}

#[tokio::test]
async fn an_error_status_before_a_stream_starts_is_retried() {
    let chunks = openai::text_chunks(&["ok"]);
    let server = FakeServer::start(vec![
        Reply::status(503, "overloaded"),
        openai::stream(&chunks, 16),
    ]);
    let deltas = support::Deltas::default();
    let reply = call(
        strict(&server),
        &support::conversation("Hi"),
        &[],
        Some(&deltas),
    )
    .await
    .unwrap();
    assert_eq!(reply.entry.content.as_deref(), Some("ok"));
    assert_eq!(deltas.taken(), [StreamDelta::Text("ok".into())]);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn connection_failures_are_retried() {
    // A port just freed on 127.0.0.2, where no fake server of a parallel
    // test (they bind 127.0.0.1) can take it: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.2:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = ClientConfig::new(ApiKind::OpenAiChat, "gpt-test")
        .base_url(format!("http://127.0.0.2:{port}/v1"))
        .api_key(Some("sk-test".into()))
        .max_attempts(3)
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(1));
    let error = call(config, &support::conversation("Hi"), &[], None)
        .await
        .unwrap_err();
    assert!(matches!(error.kind, ModelErrorKind::Connect(_)), "{error}");
    assert_eq!(error.attempts, 3);
}

#[tokio::test]
async fn error_objects_in_a_2xx_answer_and_unreadable_chunks() {
    let body = r#"{"error": {"message": "context length exceeded", "code": 400}}"#;
    let server = FakeServer::start(vec![
        Reply::raw(200, "application/json", body.as_bytes().to_vec()),
        Reply::sse(&[Value::String("{not json".into())], 64),
    ]);
    let entries = support::conversation("Hi");
    let error = call(strict(&server), &entries, &[], None)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 200,
            body: body.into()
        }
    );
    let error = call(
        strict(&server),
        &entries,
        &[],
        Some(&support::Deltas::default()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error.kind, ModelErrorKind::Malformed(reason)
            if reason.contains("a stream chunk is not JSON") && reason.contains("{not json")),
        "{error}"
    );
}
