//! Ollama `/api/chat` bodies for the fake server: whole answers and NDJSON
//! streams.

use serde_json::{json, Value};

use super::Reply;

/// An assistant message with text.
pub fn text(content: &str) -> Value {
    json!({"role": "assistant", "content": content})
}

/// An assistant message with tool calls `(name, arguments object)`.
pub fn tool_calls(calls: &[(&str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(name, arguments)| json!({"function": {"name": name, "arguments": arguments}}))
        .collect();
    json!({"role": "assistant", "content": "", "tool_calls": calls})
}

/// A whole `/api/chat` answer holding `message`: done, `stop`, 11 prompt
/// and 7 eval tokens.
pub fn response(message: Value) -> Value {
    json!({
        "model": "llama-test",
        "created_at": "2026-01-01T00:00:00Z",
        "message": message,
        "done": true,
        "done_reason": "stop",
        "total_duration": 1000,
        "prompt_eval_count": 11,
        "eval_count": 7,
    })
}

/// A 200 reply with [`response`] of `message`.
pub fn reply(message: Value) -> Reply {
    Reply::json(200, response(message))
}

/// One not-done stream line carrying `message`.
pub fn line(message: Value) -> Value {
    json!({"model": "llama-test", "created_at": "2026-01-01T00:00:00Z", "message": message, "done": false})
}

/// The last stream line.
pub fn done_line() -> Value {
    let mut last = response(json!({"role": "assistant", "content": ""}));
    last["message"] = json!({"role": "assistant", "content": ""});
    last
}

/// An NDJSON reply of `lines`, in pieces of `piece_size` bytes.
pub fn stream(lines: &[Value], piece_size: usize) -> Reply {
    Reply::ndjson(lines, piece_size)
}
