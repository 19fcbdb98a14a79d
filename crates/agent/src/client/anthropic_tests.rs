//! Anthropic Messages: bodies built, recorded replies read, streams
//! assembled to what the whole reply gives.

use convlog::provider::PendingCalls;
use convlog::{Provider, RenderOptions};
use serde_json::{json, Value};

use super::*;
use crate::client::wire::Frame;
use crate::client::wire_support::testing::{
    assert_valid_body, config, continued, history, merged, normalise, pieces, reasoning, request,
    run_stream, sse, tools,
};
use crate::client::{ApiKind, ModelErrorKind, Usage};

/// Every top-level field the Messages API takes that this wire may send.
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

fn anthropic() -> ClientConfig {
    config(
        ApiKind::Anthropic,
        "claude-sonnet-4-5",
        "https://api.anthropic.com/",
    )
}

fn text_reply() -> Value {
    json!({
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "Paris: sunny, 18°C. Rome: clear, 22°C."}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {"input_tokens": 25, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 100, "output_tokens": 14, "service_tier": "standard"}
    })
}

fn tools_reply() -> Value {
    json!({
        "id": "msg_01Aq9w938a90dw8q",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "text", "text": "I'll check both cities."},
            {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_01B7x9pQ3mKc2eXw4Lr8TnZv", "name": "get_weather", "input": {"city": "Rome", "unit": "c", "days": [1, 2]}}
        ],
        "stop_reason": "tool_use",
        "stop_sequence": null,
        "usage": {"input_tokens": 310, "output_tokens": 96}
    })
}

fn thinking_reply() -> Value {
    json!({
        "id": "msg_01Thk",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "thinking", "thinking": "The user wants two cities; call the tool twice — «Paris» then «Rome».", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/Kq8Nm2s=="},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP=="},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_01Th1", "name": "get_time", "input": {}}
        ],
        "stop_reason": "tool_use",
        "stop_sequence": null,
        "usage": {"input_tokens": 50, "output_tokens": 210}
    })
}

fn error_reply() -> Value {
    json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"})
}

/// The stream Anthropic sends for `message`, deltas cut every `size`
/// characters.
fn events(message: &Value, size: usize) -> Vec<Frame> {
    let usage = &message["usage"];
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(1);
    let mut frames = vec![
        sse(&json!({"type": "message_start", "message": {
            "id": message["id"], "type": "message", "role": "assistant", "content": [],
            "model": message["model"], "stop_reason": null, "stop_sequence": null, "usage": start_usage}})),
        sse(&json!({"type": "ping"})),
    ];
    for (index, block) in message["content"].as_array().unwrap().iter().enumerate() {
        let delta = |delta: Value| {
            sse(&json!({"type": "content_block_delta", "index": index, "delta": delta}))
        };
        match block["type"].as_str().unwrap() {
            "text" => {
                frames.push(sse(&json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
                for piece in pieces(block["text"].as_str().unwrap(), size) {
                    frames.push(delta(json!({"type": "text_delta", "text": piece})));
                }
            }
            "thinking" => {
                frames.push(sse(&json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}})));
                for piece in pieces(block["thinking"].as_str().unwrap(), size) {
                    frames.push(delta(json!({"type": "thinking_delta", "thinking": piece})));
                }
                frames.push(delta(
                    json!({"type": "signature_delta", "signature": block["signature"]}),
                ));
            }
            "redacted_thinking" => {
                frames.push(sse(
                    &json!({"type": "content_block_start", "index": index, "content_block": block}),
                ));
            }
            "tool_use" => {
                frames.push(sse(&json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})));
                frames.push(delta(
                    json!({"type": "input_json_delta", "partial_json": ""}),
                ));
                for piece in pieces(&block["input"].to_string(), size) {
                    frames.push(delta(
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
            }
            other => panic!("{other}"),
        }
        frames.push(sse(&json!({"type": "content_block_stop", "index": index})));
    }
    frames.push(sse(&json!({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null}, "usage": {"output_tokens": usage["output_tokens"]}})));
    frames.push(sse(&json!({"type": "message_stop"})));
    frames
}

#[test]
fn url_and_headers() {
    let mut config = anthropic();
    assert_eq!(
        AnthropicWire.url(&config, true),
        "https://api.anthropic.com/v1/messages"
    );
    assert_eq!(
        AnthropicWire.headers(&config),
        vec![
            ("x-api-key".to_string(), "sk-test".to_string()),
            (
                "anthropic-version".to_string(),
                ANTHROPIC_VERSION.to_string()
            ),
        ]
    );
    config.api_key = None;
    assert_eq!(
        AnthropicWire.headers(&config),
        vec![("anthropic-version".to_string(), "2023-06-01".to_string())]
    );
    assert_eq!(AnthropicWire.framing(), Framing::Sse);
}

#[test]
fn body_carries_model_settings_and_tools() {
    let entries = history();
    let tools = tools();
    let render = RenderOptions::new();
    let mut config = anthropic();
    config.temperature = Some(0.2);
    let body = AnthropicWire
        .body(&config, &request(&entries, &tools, &render), false)
        .unwrap();
    assert_valid_body(Provider::Anthropic, &body, FIELDS);
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["system"], "You are terse.");
    assert!(body.get("stream").is_none());
    assert!(body.get("thinking").is_none());
    assert_eq!(
        body["tools"][0],
        json!({"name": "get_weather", "description": "Current weather in a city", "input_schema": tools[0].parameters})
    );
    let streamed = AnthropicWire
        .body(&config, &request(&entries, &[], &render), true)
        .unwrap();
    assert_eq!(streamed["stream"], true);
    assert!(streamed.get("tools").is_none(), "no empty tools list");
}

#[test]
fn thinking_budget_and_its_rules() {
    let entries = history();
    let render = RenderOptions::new();
    let body_for =
        |config: &ClientConfig| AnthropicWire.body(config, &request(&entries, &[], &render), false);
    let thinking = reasoning(anthropic(), Reasoning::Budget(2048));
    let body = body_for(&thinking).unwrap();
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(body["max_tokens"], 2048 + DEFAULT_MAX_TOKENS);
    assert_valid_body(Provider::Anthropic, &body, FIELDS);

    let mut enough = thinking.clone();
    enough.max_tokens = Some(8000);
    assert_eq!(body_for(&enough).unwrap()["max_tokens"], 8000);

    let request_error = |config: &ClientConfig| match body_for(config) {
        Err(ModelError {
            kind: ModelErrorKind::Request(reason),
            ..
        }) => reason,
        other => panic!("expected a request error, got {other:?}"),
    };
    let mut too_small = thinking.clone();
    too_small.max_tokens = Some(2048);
    assert!(request_error(&too_small).contains("must exceed the thinking budget (2048)"));
    let low = reasoning(anthropic(), Reasoning::Budget(512));
    assert!(request_error(&low).contains("below the API's minimum of 1024"));
    let mut hot = thinking.clone();
    hot.temperature = Some(0.5);
    assert!(request_error(&hot).contains("temperature"));
    let effort = reasoning(anthropic(), Reasoning::Effort("high".to_string()));
    assert!(request_error(&effort).contains("thinking budget"));
}

#[test]
fn parses_a_text_reply() {
    let reply = AnthropicWire.parse(&text_reply()).unwrap();
    assert_eq!(reply.entry.role, convlog::Role::Assistant);
    assert_eq!(
        reply.entry.content.as_deref(),
        Some("Paris: sunny, 18°C. Rome: clear, 22°C.")
    );
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("stop"));
    assert!(reply.entry.tool_calls.is_empty());
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 128,
            output_tokens: 14
        })
    );
}

#[test]
fn parses_text_and_two_parallel_tool_calls_into_one_entry() {
    let reply = AnthropicWire.parse(&tools_reply()).unwrap();
    let entry = &reply.entry;
    assert_eq!(entry.content.as_deref(), Some("I'll check both cities."));
    assert_eq!(entry.finish_reason.as_deref(), Some("tool_calls"));
    let calls: Vec<(&str, &str, &str)> = entry
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
        vec![
            (
                "toolu_01A09q90qw90lq917835lq9",
                "get_weather",
                r#"{"city":"Paris"}"#
            ),
            (
                "toolu_01B7x9pQ3mKc2eXw4Lr8TnZv",
                "get_weather",
                r#"{"city":"Rome","days":[1,2],"unit":"c"}"#
            ),
        ]
    );
}

#[test]
fn thinking_with_signatures_is_kept_and_sent_back() {
    let reply = AnthropicWire.parse(&thinking_reply()).unwrap();
    let reasoning = reply.entry.reasoning.clone().unwrap();
    assert!(reasoning
        .text
        .unwrap()
        .starts_with("The user wants two cities"));
    assert!(reasoning.signature.unwrap().starts_with("EqQBCgIYAhIM"));
    assert_eq!(reply.entry.tool_calls[0].arguments, "{}");
    // The next request sends both thinking blocks back, signed, before the
    // text and the call, and answers the call.
    let entries = continued(&reply);
    let render = RenderOptions::new().pending(PendingCalls::Drop);
    let body = AnthropicWire
        .body(&anthropic(), &request(&entries, &tools(), &render), false)
        .unwrap();
    assert_valid_body(Provider::Anthropic, &body, FIELDS);
    assert_eq!(body["messages"][1]["content"], thinking_reply()["content"]);
    assert_eq!(
        body["messages"][2]["content"][0]["tool_use_id"],
        "toolu_01Th1"
    );
}

#[test]
fn an_error_body_is_the_providers_error_verbatim() {
    let err = AnthropicWire.parse(&error_reply()).unwrap_err();
    assert_eq!(
        err.kind,
        ModelErrorKind::Status {
            status: 0,
            body: error_reply().to_string()
        }
    );
    let invalid = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}});
    match AnthropicWire.parse(&invalid).unwrap_err().kind {
        ModelErrorKind::Status { status: 0, body } => {
            assert!(body.contains("max_tokens: Field required"))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        AnthropicWire
            .parse(&json!({"type": "message"}))
            .unwrap_err()
            .kind,
        ModelErrorKind::Malformed(_)
    ));
}

#[test]
fn streams_assemble_to_the_whole_reply() {
    for body in [text_reply(), tools_reply(), thinking_reply()] {
        let whole = AnthropicWire.parse(&body).unwrap();
        for size in [1, 3, 7, 1000] {
            let frames = events(&body, size);
            let (deltas, streamed) =
                run_stream(AnthropicWire.assembler(), &frames, Some(frames.len() - 1));
            assert_eq!(
                normalise(&streamed.unwrap()),
                normalise(&whole),
                "size {size}: {body}"
            );
            let (text, thinking, calls) = merged(&deltas);
            assert_eq!(Some(text).filter(|t| !t.is_empty()), whole.entry.content);
            assert_eq!(
                Some(thinking).filter(|t| !t.is_empty()),
                whole.entry.reasoning.as_ref().and_then(|r| r.text.clone())
            );
            let expected: Vec<(Option<String>, Option<String>, String)> = body["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|block| block["type"] == "tool_use")
                .map(|block| {
                    (
                        block["id"].as_str().map(String::from),
                        block["name"].as_str().map(String::from),
                        block["input"].to_string(),
                    )
                })
                .collect();
            assert_eq!(calls, expected);
        }
    }
}

#[test]
fn a_recorded_stream_reads_as_the_documentation_shows() {
    let recorded = [
        (
            Some("message_start"),
            r#"{"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-20250514", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}"#,
        ),
        (
            Some("content_block_start"),
            r#"{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}"#,
        ),
        (Some("ping"), r#"{"type": "ping"}"#),
        (
            Some("content_block_delta"),
            r#"{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}"#,
        ),
        (
            Some("content_block_delta"),
            r#"{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}"#,
        ),
        (
            Some("content_block_stop"),
            r#"{"type": "content_block_stop", "index": 0}"#,
        ),
        (
            Some("message_delta"),
            r#"{"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}"#,
        ),
        (Some("message_stop"), r#"{"type": "message_stop"}"#),
    ];
    let frames: Vec<Frame> = recorded
        .iter()
        .map(|(event, data)| Frame::Sse {
            event: event.map(String::from),
            data: data.to_string(),
        })
        .collect();
    let (deltas, reply) = run_stream(AnthropicWire.assembler(), &frames, Some(7));
    let reply = reply.unwrap();
    assert_eq!(
        deltas,
        vec![
            StreamDelta::Text("Hello".into()),
            StreamDelta::Text("!".into())
        ]
    );
    assert_eq!(reply.entry.content.as_deref(), Some("Hello!"));
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 25,
            output_tokens: 15
        })
    );
}

#[test]
fn stream_errors_and_cut_streams_are_errors() {
    let mut frames = events(&tools_reply(), 4);
    frames.truncate(5);
    frames.push(sse(&error_reply()));
    let (_, reply) = run_stream(AnthropicWire.assembler(), &frames, None);
    assert_eq!(
        reply.unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: error_reply().to_string()
        }
    );
    let mut cut = events(&text_reply(), 4);
    cut.pop();
    let (_, reply) = run_stream(AnthropicWire.assembler(), &cut, None);
    match reply.unwrap_err().kind {
        ModelErrorKind::Malformed(reason) => assert!(reason.contains("before message_stop")),
        other => panic!("{other:?}"),
    }
    let bad_json = [
        events(&text_reply(), 4)[0].clone(),
        sse(
            &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}}),
        ),
        sse(
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": "}}),
        ),
        sse(&json!({"type": "content_block_stop", "index": 0})),
    ];
    let (_, reply) = run_stream(AnthropicWire.assembler(), &bad_json, None);
    assert!(
        matches!(reply.unwrap_err().kind, ModelErrorKind::Malformed(reason) if reason.contains("not JSON"))
    );
}

#[test]
fn thinking_is_not_switched_on_in_the_middle_of_a_tool_loop() {
    let render = RenderOptions::new();
    let thinking = reasoning(anthropic(), Reasoning::Budget(2048));
    // The calls came without thinking (another model, or thinking off):
    // the API refuses thinking for the request that answers them.
    let plain = continued(&AnthropicWire.parse(&tools_reply()).unwrap());
    let body = AnthropicWire
        .body(&thinking, &request(&plain, &[], &render), false)
        .unwrap();
    assert_valid_body(Provider::Anthropic, &body, FIELDS);
    assert!(body.get("thinking").is_none(), "{body}");
    // Calls made with thinking: it goes on, its blocks sent back first.
    let signed = continued(&AnthropicWire.parse(&thinking_reply()).unwrap());
    let body = AnthropicWire
        .body(&thinking, &request(&signed, &[], &render), false)
        .unwrap();
    assert_eq!(body["thinking"]["budget_tokens"], 2048);
    assert_eq!(body["messages"][1]["content"][0]["type"], "thinking");
    // The same history rendered without reasoning: thinking left off again.
    let no_reasoning = RenderOptions::new().include_reasoning(false);
    let body = AnthropicWire
        .body(&thinking, &request(&signed, &[], &no_reasoning), false)
        .unwrap();
    assert!(body.get("thinking").is_none(), "{body}");
    // A new user turn after a finished answer starts a new assistant turn.
    // (A user text merged into the message of tool results is still counted
    // as the loop: leaving thinking off is valid either way.)
    let mut next = continued(&AnthropicWire.parse(&text_reply()).unwrap());
    let mut user = convlog::ConversationEntry::new(
        "e1",
        3,
        convlog::Role::User,
        Some("And tomorrow?".to_string()),
    );
    user.turn = 1;
    next.push(user);
    let body = AnthropicWire
        .body(&thinking, &request(&next, &[], &render), false)
        .unwrap();
    assert_eq!(body["thinking"]["type"], "enabled");
}

#[test]
fn a_stream_error_event_is_kept_as_sent() {
    let data =
        r#"{"type": "error",  "error": {"message": "Overloaded", "type": "overloaded_error"}}"#;
    let frames = [
        events(&text_reply(), 4)[0].clone(),
        Frame::Sse {
            event: Some("error".to_string()),
            data: data.to_string(),
        },
    ];
    let (_, reply) = run_stream(AnthropicWire.assembler(), &frames, None);
    assert_eq!(
        reply.unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: data.to_string()
        }
    );
}
