//! Gemini `generateContent` bodies for the fake server: whole responses,
//! the `alt=sse` chunks of `streamGenerateContent`, error bodies.

use serde_json::{json, Value};

use super::Reply;

/// A text part.
pub fn text(text: &str) -> Value {
    json!({"text": text})
}

/// A thought (reasoning summary) part.
pub fn thought(text: &str) -> Value {
    json!({"text": text, "thought": true})
}

/// A `functionCall` part (Gemini 2.x sends no call id).
pub fn function_call(name: &str, args: Value) -> Value {
    json!({"functionCall": {"name": name, "args": args}})
}

/// `part` carrying a `thoughtSignature`.
pub fn signed(mut part: Value, signature: &str) -> Value {
    part["thoughtSignature"] = json!(signature);
    part
}

/// `usageMetadata`: 12 prompt, 9 candidate and `thoughts` thought tokens.
pub fn usage(thoughts: u64) -> Value {
    json!({"promptTokenCount": 12, "candidatesTokenCount": 9, "thoughtsTokenCount": thoughts,
           "totalTokenCount": 21 + thoughts,
           "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12}]})
}

/// A whole response whose one candidate holds `parts`, `finishReason`
/// `STOP`, usage with 30 thought tokens.
pub fn response(parts: Vec<Value>) -> Value {
    json!({
        "candidates": [{"content": {"parts": parts, "role": "model"},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage(30),
        "modelVersion": "gemini-test",
        "responseId": "mJ4ZaJ7XLqGZ1MkPt-PkiQ4",
    })
}

/// A 200 reply with [`response`] of `parts`.
pub fn reply(parts: Vec<Value>) -> Reply {
    Reply::json(200, response(parts))
}

/// The chunks Gemini streams for `whole`: each text part cut every `size`
/// characters (a signature on its last piece), each call whole, one part
/// per chunk; the finish reason and the full usage on the last chunk.
pub fn chunks(whole: &Value, size: usize) -> Vec<Value> {
    let candidate = &whole["candidates"][0];
    let mut parts: Vec<Value> = Vec::new();
    for part in candidate["content"]["parts"].as_array().unwrap() {
        let Some(text) = part.get("text").and_then(Value::as_str) else {
            parts.push(part.clone());
            continue;
        };
        let texts = super::pieces(text, size);
        let count = texts.len();
        for (at, piece) in texts.into_iter().enumerate() {
            let mut piece = json!({"text": piece});
            if part.get("thought").is_some() {
                piece["thought"] = json!(true);
            }
            if let (true, Some(signature)) = (at + 1 == count, part.get("thoughtSignature")) {
                piece["thoughtSignature"] = signature.clone();
            }
            parts.push(piece);
        }
    }
    let count = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(at, part)| {
            let mut chunk = json!({
                "candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}],
                "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
                "modelVersion": "gemini-test",
                "responseId": "mJ4ZaJ7XLqGZ1MkPt-PkiQ4",
            });
            if at + 1 == count {
                chunk["candidates"][0]["finishReason"] = candidate["finishReason"].clone();
                chunk["usageMetadata"] = whole["usageMetadata"].clone();
            }
            chunk
        })
        .collect()
}

/// An `alt=sse` reply of `chunks` (`data:` lines, CRLF line ends as
/// Google sends them; no end event), in pieces of `piece_size` bytes.
pub fn stream(chunks: &[Value], piece_size: usize) -> Reply {
    let text: String = chunks
        .iter()
        .map(|chunk| format!("data: {chunk}\r\n\r\n"))
        .collect();
    Reply::stream("text/event-stream", &text, piece_size)
}

/// An error body: `{"error": {"code", "message", "status"}}`.
pub fn error(code: u16, status: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message, "status": status}})
}
