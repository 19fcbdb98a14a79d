//! Gemini generateContent: bodies built, recorded replies read, streams
//! assembled to what the whole reply gives.

use convlog::{Provider, RenderOptions};
use serde_json::{json, Value};

use super::*;
use crate::client::wire::Frame;
use crate::client::wire_support::testing::{
    assert_valid_body, config, continued, history, merged, normalise, pieces, reasoning, request,
    run_stream, sse, tools,
};
use crate::client::{ApiKind, ModelErrorKind, Usage};

/// Every top-level field of a generateContent request this wire may send.
const FIELDS: &[&str] = &[
    "contents",
    "system_instruction",
    "tools",
    "generationConfig",
];

fn gemini() -> ClientConfig {
    config(
        ApiKind::Gemini,
        "gemini-2.5-flash",
        "https://generativelanguage.googleapis.com/v1beta",
    )
}

fn usage_metadata(prompt: u64, candidates: u64, thoughts: u64) -> Value {
    json!({"promptTokenCount": prompt, "candidatesTokenCount": candidates, "thoughtsTokenCount": thoughts,
           "totalTokenCount": prompt + candidates + thoughts,
           "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]})
}

fn reply(parts: Value, finish: &str, usage: Value) -> Value {
    json!({
        "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": finish, "index": 0}],
        "usageMetadata": usage,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "mJ4ZaJ7XLqGZ1MkPt-PkiQ4"
    })
}

fn text_reply() -> Value {
    reply(
        json!([{"text": "Paris: sunny, 18°C. Rome: clear, 22°C."}]),
        "STOP",
        usage_metadata(12, 14, 0),
    )
}

fn tools_reply() -> Value {
    reply(
        json!([
            {"text": "Checking both."},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "CiQB0e2Kb3Gd8kYq3iqV0t7hNnKc3bTq2yR9l3O1H2Q4JX0xLs8="},
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome", "unit": "c"}}}
        ]),
        "STOP",
        usage_metadata(80, 31, 120),
    )
}

fn thinking_reply() -> Value {
    reply(
        json!([
            {"text": "**Planning the answer**\nThe user wants Paris — «quick».", "thought": true},
            {"text": "It is 18°C in Paris.", "thoughtSignature": "Cs4BAdHtim9vZ3Vj0x5kQ2x8b1X2Lq0Yw=="}
        ]),
        "STOP",
        usage_metadata(20, 9, 64),
    )
}

fn ids_reply() -> Value {
    reply(
        json!([
            {"functionCall": {"id": "fc_a1", "name": "get_time", "args": {}}},
            {"functionCall": {"id": "fc_b2", "name": "get_weather", "args": {"city": "Rome"}}}
        ]),
        "STOP",
        usage_metadata(30, 10, 0),
    )
}

/// The `alt=sse` chunks Gemini streams for `whole`: text cut every `size`
/// characters (a signature on the last piece of its part, or, with
/// `trailing_signature`, on an empty text part after it), each call whole,
/// the finish reason and full usage on the last chunk.
fn chunks(whole: &Value, size: usize, trailing_signature: bool) -> Vec<Frame> {
    let candidate = &whole["candidates"][0];
    let mut parts: Vec<Value> = Vec::new();
    for part in candidate["content"]["parts"].as_array().unwrap() {
        let Some(text) = part.get("text").and_then(Value::as_str) else {
            parts.push(part.clone());
            continue;
        };
        let thought = part.get("thought").is_some();
        let texts = pieces(text, size);
        let count = texts.len();
        for (at, piece) in texts.into_iter().enumerate() {
            let mut piece = json!({"text": piece});
            if thought {
                piece["thought"] = json!(true);
            }
            if at + 1 == count && !trailing_signature {
                if let Some(signature) = part.get("thoughtSignature") {
                    piece["thoughtSignature"] = signature.clone();
                }
            }
            parts.push(piece);
        }
        if trailing_signature {
            if let Some(signature) = part.get("thoughtSignature") {
                parts.push(json!({"text": "", "thoughtSignature": signature}));
            }
        }
    }
    let count = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(at, part)| {
            let mut chunk = json!({
                "candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}],
                "usageMetadata": usage_metadata(whole["usageMetadata"]["promptTokenCount"].as_u64().unwrap(), at as u64, 0),
                "modelVersion": "gemini-2.5-flash",
                "responseId": "mJ4ZaJ7XLqGZ1MkPt-PkiQ4"
            });
            if at + 1 == count {
                chunk["candidates"][0]["finishReason"] = candidate["finishReason"].clone();
                chunk["usageMetadata"] = whole["usageMetadata"].clone();
            }
            sse(&chunk)
        })
        .collect()
}

#[test]
fn url_and_headers() {
    let mut config = gemini();
    assert_eq!(
        GeminiWire.url(&config, false),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    );
    config.model = "models/gemini-2.5-pro".to_string();
    assert_eq!(
        GeminiWire.url(&config, true),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        GeminiWire.headers(&config),
        vec![("x-goog-api-key".to_string(), "sk-test".to_string())]
    );
    config.api_key = None;
    assert!(GeminiWire.headers(&config).is_empty());
    assert_eq!(GeminiWire.framing(), Framing::Sse);
}

#[test]
fn body_carries_tools_and_generation_config_not_the_model() {
    let entries = history();
    let tools = tools();
    let render = RenderOptions::new();
    let plain = GeminiWire
        .body(&gemini(), &request(&entries, &[], &render), true)
        .unwrap();
    assert_valid_body(Provider::Gemini, &plain, FIELDS);
    assert!(plain.get("generationConfig").is_none());
    assert!(plain.get("tools").is_none());
    assert_eq!(
        plain["system_instruction"],
        json!({"parts": [{"text": "You are terse."}]})
    );

    let mut config = reasoning(gemini(), Reasoning::Budget(1024));
    config.temperature = Some(0.7);
    config.max_tokens = Some(2000);
    let body = GeminiWire
        .body(&config, &request(&entries, &tools, &render), false)
        .unwrap();
    assert_valid_body(Provider::Gemini, &body, FIELDS);
    assert!(
        !body.to_string().contains("gemini-2.5-flash"),
        "model in the URL only"
    );
    assert_eq!(
        body["generationConfig"],
        json!({"temperature": 0.7, "maxOutputTokens": 2000,
               "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}})
    );
    assert_eq!(
        body["tools"],
        json!([{"functionDeclarations": [
            {"name": "get_weather", "description": "Current weather in a city", "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "nullable": true, "enum": ["c", "f"]},
                    "days": {"type": "array", "items": {"type": "integer", "minimum": 1}}
                },
                "required": ["city"]
            }},
            {"name": "get_time", "description": "Local time in a city", "parameters": {
                "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}}
            }}
        ]}])
    );
    let level = reasoning(gemini(), Reasoning::Effort("low".to_string()));
    let body = GeminiWire
        .body(&level, &request(&entries, &[], &render), false)
        .unwrap();
    assert_eq!(
        body["generationConfig"]["thinkingConfig"],
        json!({"thinkingLevel": "low", "includeThoughts": true})
    );
}

#[test]
fn schemas_keep_only_what_gemini_accepts() {
    let schema = json!({
        "$schema": "http://json-schema.org/draft-07/schema#", "$id": "x", "type": "object",
        "additionalProperties": false, "$defs": {}, "properties": {
            "additionalProperties": {"type": "string", "default": "kept: a property name, not a keyword"},
            "list": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}], "examples": [1]},
            "level": {"type": "integer", "enum": [1, 2, 3]}
        }
    });
    assert_eq!(
        gemini_schema(&schema),
        json!({"type": "object", "properties": {
            "additionalProperties": {"type": "string", "default": "kept: a property name, not a keyword"},
            "list": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
            "level": {"type": "integer", "enum": ["1", "2", "3"]}
        }})
    );
}

#[test]
fn parses_a_text_reply() {
    let reply = GeminiWire.parse(&text_reply()).unwrap();
    assert_eq!(
        reply.entry.content.as_deref(),
        Some("Paris: sunny, 18°C. Rome: clear, 22°C.")
    );
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 12,
            output_tokens: 14
        })
    );
}

#[test]
fn parses_text_and_two_parallel_calls_into_one_entry_and_sends_them_back() {
    let reply = GeminiWire.parse(&tools_reply()).unwrap();
    let entry = &reply.entry;
    assert_eq!(entry.content.as_deref(), Some("Checking both."));
    assert_eq!(entry.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 80,
            output_tokens: 151
        })
    );
    let calls: Vec<(&str, &str)> = entry
        .tool_calls
        .iter()
        .map(|call| (call.name.as_str(), call.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("get_weather", r#"{"city":"Paris"}"#),
            ("get_weather", r#"{"city":"Rome","unit":"c"}"#)
        ]
    );
    assert_ne!(entry.tool_calls[0].call_id, entry.tool_calls[1].call_id);
    // Sent back as received: the signature stays on its call, generated ids
    // are not sent, and each call is answered in order.
    let entries = continued(&reply);
    let body = GeminiWire
        .body(
            &gemini(),
            &request(&entries, &tools(), &RenderOptions::new()),
            false,
        )
        .unwrap();
    assert_valid_body(Provider::Gemini, &body, FIELDS);
    assert_eq!(
        body["contents"][1]["parts"],
        tools_reply()["candidates"][0]["content"]["parts"]
    );
    assert_eq!(
        body["contents"][2]["parts"][1]["functionResponse"]["name"],
        "get_weather"
    );
}

#[test]
fn call_ids_are_kept_when_gemini_sends_them() {
    let reply = GeminiWire.parse(&ids_reply()).unwrap();
    let ids: Vec<&str> = reply
        .entry
        .tool_calls
        .iter()
        .map(|call| call.call_id.as_str())
        .collect();
    assert_eq!(ids, vec!["fc_a1", "fc_b2"]);
    assert_eq!(reply.entry.content, None);
    let entries = continued(&reply);
    let body = GeminiWire
        .body(
            &gemini(),
            &request(&entries, &[], &RenderOptions::new()),
            false,
        )
        .unwrap();
    assert_valid_body(Provider::Gemini, &body, FIELDS);
    assert_eq!(
        body["contents"][2]["parts"][0]["functionResponse"]["id"],
        "fc_a1"
    );
}

#[test]
fn thoughts_and_signatures_are_kept_and_sent_back() {
    let reply = GeminiWire.parse(&thinking_reply()).unwrap();
    let reasoning = reply.entry.reasoning.clone().unwrap();
    assert!(reasoning
        .text
        .unwrap()
        .starts_with("**Planning the answer**"));
    assert_eq!(reply.entry.content.as_deref(), Some("It is 18°C in Paris."));
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 20,
            output_tokens: 73
        })
    );
    let entries = continued(&reply);
    let body = GeminiWire
        .body(
            &gemini(),
            &request(&entries, &[], &RenderOptions::new()),
            false,
        )
        .unwrap();
    assert_valid_body(Provider::Gemini, &body, FIELDS);
    assert_eq!(
        body["contents"][1]["parts"],
        thinking_reply()["candidates"][0]["content"]["parts"]
    );
}

#[test]
fn errors_blocks_and_safety_stops_are_the_providers_words_verbatim() {
    let quota = json!({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}});
    assert_eq!(
        GeminiWire.parse(&quota).unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: quota.to_string()
        }
    );
    let safety = json!({"candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": [
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]}],
        "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}});
    assert_eq!(
        GeminiWire.parse(&safety).unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: safety.to_string()
        }
    );
    let blocked = json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 9}});
    assert_eq!(
        GeminiWire.parse(&blocked).unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: blocked.to_string()
        }
    );
    let truncated = reply(
        json!([{"text": "Par"}]),
        "MAX_TOKENS",
        usage_metadata(5, 1, 0),
    );
    assert_eq!(
        GeminiWire
            .parse(&truncated)
            .unwrap()
            .entry
            .finish_reason
            .as_deref(),
        Some("length")
    );
}

#[test]
fn streams_assemble_to_the_whole_reply() {
    for whole in [text_reply(), tools_reply(), thinking_reply(), ids_reply()] {
        let parsed = GeminiWire.parse(&whole).unwrap();
        for (size, trailing) in [(1, false), (4, true), (9, false), (1000, true)] {
            let frames = chunks(&whole, size, trailing);
            let (deltas, streamed) =
                run_stream(GeminiWire.assembler(), &frames, Some(frames.len() - 1));
            assert_eq!(
                normalise(&streamed.unwrap()),
                normalise(&parsed),
                "size {size}: {whole}"
            );
            let (text, thoughts, calls) = merged(&deltas);
            assert_eq!(Some(text).filter(|t| !t.is_empty()), parsed.entry.content);
            assert_eq!(
                Some(thoughts).filter(|t| !t.is_empty()),
                parsed.entry.reasoning.as_ref().and_then(|r| r.text.clone())
            );
            let expected: Vec<(Option<String>, Option<String>, String)> = whole["candidates"][0]
                ["content"]["parts"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|part| part.get("functionCall"))
                .map(|call| {
                    (
                        call["id"].as_str().map(String::from),
                        call["name"].as_str().map(String::from),
                        call["args"].to_string(),
                    )
                })
                .collect();
            assert_eq!(calls, expected);
        }
    }
}

#[test]
fn a_stream_without_a_finish_reason_or_with_an_error_is_an_error() {
    let mut frames = chunks(&text_reply(), 5, false);
    frames.pop();
    let (_, reply) = run_stream(GeminiWire.assembler(), &frames, None);
    match reply.unwrap_err().kind {
        ModelErrorKind::Malformed(reason) => assert!(reason.contains("finishReason")),
        other => panic!("{other:?}"),
    }
    let overloaded = json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}});
    frames.push(sse(&overloaded));
    let (_, reply) = run_stream(GeminiWire.assembler(), &frames, None);
    assert_eq!(
        reply.unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: overloaded.to_string()
        }
    );
    let safety = json!({"candidates": [{"finishReason": "SAFETY", "index": 0}]});
    let (_, reply) = run_stream(GeminiWire.assembler(), &[sse(&safety)], Some(0));
    assert_eq!(
        reply.unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: safety.to_string()
        }
    );
}

#[test]
fn a_stream_error_chunk_is_kept_as_sent() {
    let data = r#"{"error": {"code": 503,   "message": "The model is overloaded.", "status": "UNAVAILABLE"}}"#;
    let frames = [Frame::Sse {
        event: None,
        data: data.to_string(),
    }];
    let (_, reply) = run_stream(GeminiWire.assembler(), &frames, None);
    assert_eq!(
        reply.unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: data.to_string()
        }
    );
}
