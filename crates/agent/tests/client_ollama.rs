//! The Ollama `/api/chat` client against the fake provider over real
//! loopback HTTP: the request as sent, whole and NDJSON-streamed replies,
//! errors.

mod support;

use std::time::Duration;

use convlog::{ConversationEntry, RenderOptions, Role};
use convlog_agent::client::{ModelErrorKind, Reasoning, Usage};
use convlog_agent::{
    ApiKind, ClientConfig, HttpClient, ModelClient, ModelError, ModelReply, ModelRequest,
    StreamDelta, ToolSpec,
};
use serde_json::{json, Value};
use support::{ollama, FakeServer, Reply};

fn config(server: &FakeServer) -> ClientConfig {
    ClientConfig::with_env(ApiKind::Ollama, "llama-test", |_| None)
        .base_url(server.url(""))
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(1))
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

fn two_calls() -> [(&'static str, Value); 2] {
    [
        ("weather", json!({"city": "Paris"})),
        ("time", json!({"city": "Tōkyō", "utc": false})),
    ]
}

#[tokio::test]
async fn the_default_address_and_no_key() {
    let config = ClientConfig::with_env(ApiKind::Ollama, "llama", |_| None);
    assert_eq!(config.base_url, "http://127.0.0.1:11434");
    assert_eq!(config.api_key, None);
    assert_eq!(config.check(), Ok(()));
}

#[tokio::test]
async fn a_text_reply_and_the_request_sent() {
    let server = FakeServer::start(vec![ollama::reply(ollama::text("Hello."))]);
    let tools = vec![ToolSpec {
        name: "weather".into(),
        description: "Current weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }];
    let config = config(&server)
        .temperature(Some(0.2))
        .max_tokens(Some(100))
        .reasoning(Some(Reasoning::Effort("high".into())));
    let reply = call(config, &support::conversation("Hi"), &tools, None)
        .await
        .unwrap();
    assert_eq!(reply.entry.role, Role::Assistant);
    assert_eq!(reply.entry.content.as_deref(), Some("Hello."));
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 11,
            output_tokens: 7
        })
    );
    let request = &server.requests()[0];
    assert_eq!(request.path, "/api/chat");
    assert_eq!(request.header("authorization"), None);
    assert_eq!(
        request.json(),
        json!({
            "model": "llama-test",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi"},
            ],
            "tools": [{"type": "function", "function": {"name": "weather",
                "description": "Current weather", "parameters": tools[0].parameters}}],
            "stream": false,
            "options": {"temperature": 0.2, "num_predict": 100},
            "think": "high",
        })
    );
}

#[tokio::test]
async fn two_parallel_tool_calls_and_thinking() {
    let mut message = ollama::tool_calls(&two_calls());
    message["thinking"] = json!("Two lookups.");
    let server = FakeServer::start(vec![ollama::reply(message)]);
    let config = config(&server).reasoning(Some(Reasoning::Budget(1024)));
    let reply = call(
        config,
        &support::conversation("Paris and Tokyo?"),
        &[],
        None,
    )
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
    assert_eq!(calls, two_calls());
    assert_ne!(
        reply.entry.tool_calls[0].call_id, reply.entry.tool_calls[1].call_id,
        "each call gets its own id"
    );
    assert_eq!(
        reply
            .entry
            .reasoning
            .as_ref()
            .and_then(|r| r.text.as_deref()),
        Some("Two lookups.")
    );
    assert_eq!(server.requests()[0].json()["think"], json!(true));
}

#[tokio::test]
async fn a_streamed_reply_equals_the_whole_one_and_delivers_deltas_in_order() {
    let [first, second] = two_calls();
    let lines = vec![
        ollama::line(json!({"role": "assistant", "content": "", "thinking": "Hm"})),
        ollama::line(json!({"role": "assistant", "content": "", "thinking": "m."})),
        ollama::line(json!({"role": "assistant", "content": "Let me "})),
        ollama::line(json!({"role": "assistant", "content": "check. ✓"})),
        ollama::line(ollama::tool_calls(std::slice::from_ref(&first))),
        ollama::line(ollama::tool_calls(std::slice::from_ref(&second))),
        ollama::done_line(),
    ];
    let mut whole = ollama::tool_calls(&two_calls());
    whole["content"] = json!("Let me check. ✓");
    whole["thinking"] = json!("Hmm.");
    let server = FakeServer::start(vec![ollama::reply(whole), ollama::stream(&lines, 5)]);
    let entries = support::conversation("Hi");
    let whole = call(config(&server), &entries, &[], None).await.unwrap();
    let deltas = support::Deltas::default();
    let streamed = call(config(&server), &entries, &[], Some(&deltas))
        .await
        .unwrap();
    assert_eq!(
        support::comparable(&streamed.entry),
        support::comparable(&whole.entry)
    );
    assert_eq!(streamed.usage, whole.usage);
    assert_eq!(
        deltas.taken(),
        [
            StreamDelta::Reasoning("Hm".into()),
            StreamDelta::Reasoning("m.".into()),
            StreamDelta::Text("Let me ".into()),
            StreamDelta::Text("check. ✓".into()),
            StreamDelta::ToolCall {
                index: 0,
                id: None,
                name: Some("weather".into()),
                arguments: first.1.to_string(),
            },
            StreamDelta::ToolCall {
                index: 1,
                id: None,
                name: Some("time".into()),
                arguments: second.1.to_string(),
            },
        ]
    );
    assert_eq!(server.requests()[1].json()["stream"], json!(true));
}

#[tokio::test]
async fn a_stream_without_its_done_line_is_malformed() {
    let lines = vec![
        ollama::line(ollama::text("Hel")),
        ollama::line(ollama::text("lo")),
    ];
    let server = FakeServer::start(vec![ollama::stream(&lines, 8)]);
    let deltas = support::Deltas::default();
    let error = call(
        config(&server),
        &support::conversation("Hi"),
        &[],
        Some(&deltas),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error.kind, ModelErrorKind::Malformed(reason) if reason.contains("stream ended before its end frame")),
        "{error}"
    );
    assert_eq!(
        deltas.taken(),
        [
            StreamDelta::Text("Hel".into()),
            StreamDelta::Text("lo".into())
        ]
    );
}

#[tokio::test]
async fn provider_errors_surface_verbatim() {
    let stream_error =
        r#"{"error":"model requires more system memory (12 GiB) than is available"}"#;
    let server = FakeServer::start(vec![
        Reply::raw(
            404,
            "application/json",
            br#"{"error":"model \"llama-test\" not found, try pulling it first"}"#.to_vec(),
        ),
        Reply::stream("application/x-ndjson", &format!("{stream_error}\n"), 16),
    ]);
    let entries = support::conversation("Hi");
    let error = call(config(&server), &entries, &[], None)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 404,
            body: r#"{"error":"model \"llama-test\" not found, try pulling it first"}"#.into()
        }
    );
    assert_eq!(error.attempts, 1);
    let error = call(
        config(&server),
        &entries,
        &[],
        Some(&support::Deltas::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.kind,
        ModelErrorKind::Status {
            status: 200,
            body: stream_error.into()
        }
    );
}

#[tokio::test]
async fn a_key_when_set_is_sent_as_a_bearer_token() {
    let server = FakeServer::start(vec![ollama::reply(ollama::text("ok"))]);
    let config = config(&server).api_key(Some("ollama-key".into()));
    call(config, &support::conversation("Hi"), &[], None)
        .await
        .unwrap();
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer ollama-key")
    );
}
