//! OpenAI Responses bodies for the fake server: whole responses, the SSE
//! event sequence of a streamed one, failures.

use serde_json::{json, Value};

use super::Reply;

/// An assistant `message` output item with one `output_text` part.
pub fn message(id: &str, text: &str) -> Value {
    json!({"type": "message", "id": id, "status": "completed", "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

/// A `function_call` output item.
pub fn function_call(id: &str, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": arguments, "status": "completed"})
}

/// A `reasoning` output item with summary parts and encrypted content.
pub fn reasoning(id: &str, summary: &[&str], encrypted_content: &str) -> Value {
    let summary: Vec<Value> = summary
        .iter()
        .map(|text| json!({"type": "summary_text", "text": text}))
        .collect();
    json!({"type": "reasoning", "id": id, "summary": summary,
           "encrypted_content": encrypted_content})
}

/// A whole response of `status` holding `output`; usage 36 in, 87 out.
pub fn response(status: &str, output: Vec<Value>) -> Value {
    json!({
        "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
        "object": "response",
        "created_at": 1_741_476_542,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": "gpt-test-2025-08-07",
        "output": output,
        "parallel_tool_calls": true,
        "store": false,
        "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 64},
                  "total_tokens": 123},
    })
}

/// A 200 reply with a completed [`response`] of `output`.
pub fn reply(output: Vec<Value>) -> Reply {
    Reply::json(200, response("completed", output))
}

/// The events OpenAI streams for the whole response `whole`: created,
/// in_progress, per item its `output_item.added`, deltas of `size`
/// characters (summary text, output text, call arguments) and
/// `output_item.done`, then `response.completed` with the whole response;
/// each with its `sequence_number`.
pub fn events(whole: &Value, size: usize) -> Vec<Value> {
    let pieces = |text: &str| super::pieces(text, size);
    let mut started = whole.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    let mut events = vec![
        json!({"type": "response.created", "response": started}),
        json!({"type": "response.in_progress", "response": started}),
    ];
    for (index, item) in whole["output"].as_array().unwrap().iter().enumerate() {
        let id = item["id"].clone();
        match item["type"].as_str().unwrap() {
            "reasoning" => {
                events.push(
                    json!({"type": "response.output_item.added", "output_index": index,
                    "item": {"type": "reasoning", "id": id, "summary": []}}),
                );
                for (part, summary) in item["summary"].as_array().unwrap().iter().enumerate() {
                    events.push(json!({"type": "response.reasoning_summary_part.added",
                        "item_id": id, "output_index": index, "summary_index": part,
                        "part": {"type": "summary_text", "text": ""}}));
                    for piece in pieces(summary["text"].as_str().unwrap()) {
                        events.push(json!({"type": "response.reasoning_summary_text.delta",
                            "item_id": id, "output_index": index, "summary_index": part,
                            "delta": piece}));
                    }
                    events.push(json!({"type": "response.reasoning_summary_text.done",
                        "item_id": id, "output_index": index, "summary_index": part,
                        "text": summary["text"]}));
                    events.push(json!({"type": "response.reasoning_summary_part.done",
                        "item_id": id, "output_index": index, "summary_index": part,
                        "part": summary}));
                }
            }
            "message" => {
                events.push(
                    json!({"type": "response.output_item.added", "output_index": index,
                    "item": {"type": "message", "id": id, "status": "in_progress",
                             "role": "assistant", "content": []}}),
                );
                events.push(json!({"type": "response.content_part.added", "item_id": id,
                    "output_index": index, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []}}));
                let text = item["content"][0]["text"].as_str().unwrap();
                for piece in pieces(text) {
                    events.push(json!({"type": "response.output_text.delta", "item_id": id,
                        "output_index": index, "content_index": 0, "delta": piece}));
                }
                events.push(json!({"type": "response.output_text.done", "item_id": id,
                    "output_index": index, "content_index": 0, "text": text}));
                events.push(json!({"type": "response.content_part.done", "item_id": id,
                    "output_index": index, "content_index": 0, "part": item["content"][0]}));
            }
            "function_call" => {
                events.push(
                    json!({"type": "response.output_item.added", "output_index": index,
                    "item": {"type": "function_call", "id": id, "call_id": item["call_id"],
                             "name": item["name"], "arguments": "", "status": "in_progress"}}),
                );
                for piece in pieces(item["arguments"].as_str().unwrap()) {
                    events.push(json!({"type": "response.function_call_arguments.delta",
                        "item_id": id, "output_index": index, "delta": piece}));
                }
                events.push(json!({"type": "response.function_call_arguments.done",
                    "item_id": id, "output_index": index, "arguments": item["arguments"]}));
            }
            other => panic!("no events for a {other} item"),
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    events.push(json!({"type": "response.completed", "response": whole}));
    numbered(events)
}

/// `events` with their `sequence_number`s.
pub fn numbered(mut events: Vec<Value>) -> Vec<Value> {
    for (at, event) in events.iter_mut().enumerate() {
        event["sequence_number"] = json!(at);
    }
    events
}

/// The `response.failed` event of a response that failed with `code`.
pub fn failed(code: &str, message: &str) -> Value {
    let mut response = response("failed", Vec::new());
    response["error"] = json!({"code": code, "message": message});
    response["usage"] = Value::Null;
    json!({"type": "response.failed", "response": response})
}

/// An SSE reply of `events` (each with its `event:` name), in pieces of
/// `piece_size` bytes.
pub fn stream(events: &[Value], piece_size: usize) -> Reply {
    Reply::typed_sse(events, piece_size)
}
