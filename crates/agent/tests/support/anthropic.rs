//! Anthropic Messages bodies for the fake server: whole messages, the SSE
//! event sequence the API streams for them, error bodies.

use serde_json::{json, Value};

use super::{pieces, Reply};

/// A `text` content block.
pub fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// A `thinking` content block with its signature.
pub fn thinking(thinking: &str, signature: &str) -> Value {
    json!({"type": "thinking", "thinking": thinking, "signature": signature})
}

/// A `tool_use` content block.
pub fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

/// A whole Messages response holding `content`; `stop_reason` is
/// `tool_use` when a block calls a tool, `end_turn` otherwise; usage 25 in
/// (plus 3 cache-creation and 100 cache-read), 14 out.
pub fn message(content: Vec<Value>) -> Value {
    let stop_reason = if content.iter().any(|block| block["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    json!({
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {"input_tokens": 25, "cache_creation_input_tokens": 3,
                  "cache_read_input_tokens": 100, "output_tokens": 14, "service_tier": "standard"},
    })
}

/// A 200 reply with [`message`] of `content`.
pub fn reply(content: Vec<Value>) -> Reply {
    Reply::json(200, message(content))
}

/// The events Anthropic streams for the whole `message`: `message_start`
/// (usage so far), a `ping`, per block its start, deltas of `size`
/// characters (a thinking block's signature as a last `signature_delta`, a
/// tool's input as `input_json_delta` pieces after an empty one) and stop,
/// then `message_delta` (stop reason, output tokens) and `message_stop`.
pub fn events(message: &Value, size: usize) -> Vec<Value> {
    let usage = &message["usage"];
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(1);
    let mut events = vec![
        json!({"type": "message_start", "message": {
            "id": message["id"], "type": "message", "role": "assistant", "content": [],
            "model": message["model"], "stop_reason": null, "stop_sequence": null,
            "usage": start_usage}}),
        json!({"type": "ping"}),
    ];
    for (index, block) in message["content"].as_array().unwrap().iter().enumerate() {
        let delta =
            |delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
        let start = |block: Value| json!({"type": "content_block_start", "index": index, "content_block": block});
        match block["type"].as_str().unwrap() {
            "text" => {
                events.push(start(json!({"type": "text", "text": ""})));
                for piece in pieces(block["text"].as_str().unwrap(), size) {
                    events.push(delta(json!({"type": "text_delta", "text": piece})));
                }
            }
            "thinking" => {
                events.push(start(json!({"type": "thinking", "thinking": ""})));
                for piece in pieces(block["thinking"].as_str().unwrap(), size) {
                    events.push(delta(json!({"type": "thinking_delta", "thinking": piece})));
                }
                events.push(delta(
                    json!({"type": "signature_delta", "signature": block["signature"]}),
                ));
            }
            "tool_use" => {
                events.push(start(json!({"type": "tool_use", "id": block["id"],
                    "name": block["name"], "input": {}})));
                events.push(delta(
                    json!({"type": "input_json_delta", "partial_json": ""}),
                ));
                for piece in pieces(&block["input"].to_string(), size) {
                    events.push(delta(
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
            }
            _ => events.push(start(block.clone())),
        }
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    events.push(json!({"type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
        "usage": {"output_tokens": usage["output_tokens"]}}));
    events.push(json!({"type": "message_stop"}));
    events
}

/// An SSE reply of `events` (each with its `event:` name), in pieces of
/// `piece_size` bytes.
pub fn stream(events: &[Value], piece_size: usize) -> Reply {
    Reply::typed_sse(events, piece_size)
}

/// An error body: `{"type": "error", "error": {"type": kind, "message"}}`.
pub fn error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message},
           "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"})
}
