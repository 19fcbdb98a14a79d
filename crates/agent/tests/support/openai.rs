//! OpenAI Chat Completions bodies for the fake server: whole answers and
//! SSE streams of chunks.

use serde_json::{json, Value};

use super::Reply;

/// An assistant message with text.
pub fn text(content: &str) -> Value {
    json!({"role": "assistant", "content": content, "refusal": null})
}

/// An assistant message with tool calls `(id, name, arguments)` and no text.
pub fn tool_calls(calls: &[(&str, &str, &str)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls})
}

/// A whole completion holding `message`; the finish reason is `tool_calls`
/// when it has calls, `stop` otherwise; usage 11 in, 7 out.
pub fn completion(message: Value) -> Value {
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    })
}

/// A 200 reply with [`completion`] of `message`.
pub fn reply(message: Value) -> Reply {
    Reply::json(200, completion(message))
}

/// One stream chunk with `delta` (and `finish_reason`).
pub fn chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    })
}

/// The usage chunk sent last when `stream_options.include_usage` is set.
pub fn usage_chunk() -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    })
}

/// The chunks OpenAI streams for a text answer given as `pieces`.
pub fn text_chunks(pieces: &[&str]) -> Vec<Value> {
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        None,
    )];
    chunks.extend(
        pieces
            .iter()
            .map(|piece| chunk(json!({"content": piece}), None)),
    );
    chunks.push(chunk(json!({}), Some("stop")));
    chunks.push(usage_chunk());
    chunks
}

/// The chunks OpenAI streams for tool calls `(id, name, arguments)`: per
/// call its id and name, then its arguments in pieces of `piece` chars.
pub fn tool_call_chunks(calls: &[(&str, &str, &str)], piece: usize) -> Vec<Value> {
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": null}), None)];
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        chunks.push(chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
        let characters: Vec<char> = arguments.chars().collect();
        for part in characters.chunks(piece.max(1)) {
            let part: String = part.iter().collect();
            chunks.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]}),
                None,
            ));
        }
    }
    chunks.push(chunk(json!({}), Some("tool_calls")));
    chunks.push(usage_chunk());
    chunks
}

/// An SSE reply of `chunks` ended by `data: [DONE]`, in pieces of
/// `piece_size` bytes.
pub fn stream(chunks: &[Value], piece_size: usize) -> Reply {
    let mut data = chunks.to_vec();
    data.push(Value::String("[DONE]".into()));
    Reply::sse(&data, piece_size)
}
