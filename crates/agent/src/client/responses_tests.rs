//! OpenAI Responses: bodies built, recorded replies read, streams assembled
//! to what the whole reply gives.

use convlog::{Provider, RenderOptions};
use serde_json::{json, Value};

use super::*;
use crate::client::wire::Frame;
use crate::client::wire_support::testing::{
    assert_valid_body, config, continued, history, merged, normalise, pieces, reasoning, request,
    run_stream, sse, tools,
};
use crate::client::{ApiKind, ModelErrorKind, Usage};

/// Every top-level field of a Responses request this wire may send.
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

fn responses() -> ClientConfig {
    config(
        ApiKind::OpenAiResponses,
        "gpt-5-mini",
        "https://api.openai.com/v1",
    )
}

fn response(status: &str, output: Value) -> Value {
    json!({
        "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": "gpt-5-mini-2025-08-07",
        "output": output,
        "parallel_tool_calls": true,
        "store": false,
        "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 87,
                  "output_tokens_details": {"reasoning_tokens": 64}, "total_tokens": 123}
    })
}

fn message(id: &str, text: &str) -> Value {
    json!({"type": "message", "id": id, "status": "completed", "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call(id: &str, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"})
}

fn text_reply() -> Value {
    response(
        "completed",
        json!([message(
            "msg_67ccd2bf17f0819081ff3bb2cf6508e6",
            "Paris: sunny, 18°C. Rome: clear, 22°C."
        )]),
    )
}

fn tools_reply() -> Value {
    response(
        "completed",
        json!([
            message("msg_0a1", "Checking both."),
            call(
                "fc_67ca09c6bedc8190a7abfec07b1a1332",
                "call_unLAR8MvFNptuiZK6K6HCy5k",
                "get_weather",
                r#"{"city":"Paris"}"#
            ),
            call(
                "fc_67ca09c6bedc8190a7abfec07b1a1333",
                "call_Xk2pQ9rTz8mW3nB5vL7yHd1c",
                "get_weather",
                r#"{"city": "Rome", "unit": "c"}"#
            )
        ]),
    )
}

fn reasoning_item() -> Value {
    json!({"type": "reasoning", "id": "rs_6820f383d7c08191846711c5df8233bc",
           "summary": [{"type": "summary_text", "text": "**Planning**\n\nTwo cities — call the tool «twice»."},
                       {"type": "summary_text", "text": "**Done**"}],
           "encrypted_content": "gAAAAABoISQ24OyVRYbkYfukswWsWgOD-hbn2YK2FAtvJkzs7c0"})
}

fn reasoning_reply() -> Value {
    response(
        "completed",
        json!([
            reasoning_item(),
            call("fc_1", "call_time1", "get_time", "{}")
        ]),
    )
}

/// The events OpenAI streams for `whole`, deltas cut every `size`
/// characters.
fn events(whole: &Value, size: usize) -> Vec<Frame> {
    let mut events: Vec<Value> = Vec::new();
    let mut created = whole.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    events.push(json!({"type": "response.created", "response": created}));
    for (index, item) in whole["output"].as_array().unwrap().iter().enumerate() {
        let id = item["id"].clone();
        match item["type"].as_str().unwrap() {
            "reasoning" => {
                events.push(
                    json!({"type": "response.output_item.added", "output_index": index,
                                   "item": {"type": "reasoning", "id": id, "summary": []}}),
                );
                for (part, summary) in item["summary"].as_array().unwrap().iter().enumerate() {
                    events.push(json!({"type": "response.reasoning_summary_part.added", "item_id": id, "output_index": index, "summary_index": part, "part": {"type": "summary_text", "text": ""}}));
                    for piece in pieces(summary["text"].as_str().unwrap(), size) {
                        events.push(json!({"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": index, "summary_index": part, "delta": piece}));
                    }
                    events.push(json!({"type": "response.reasoning_summary_text.done", "item_id": id, "output_index": index, "summary_index": part, "text": summary["text"]}));
                }
            }
            "message" => {
                events.push(json!({"type": "response.output_item.added", "output_index": index,
                                   "item": {"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []}}));
                let text = item["content"][0]["text"].as_str().unwrap();
                for piece in pieces(text, size) {
                    events.push(json!({"type": "response.output_text.delta", "item_id": id, "output_index": index, "content_index": 0, "delta": piece}));
                }
                events.push(json!({"type": "response.output_text.done", "item_id": id, "output_index": index, "content_index": 0, "text": text}));
            }
            "function_call" => {
                events.push(json!({"type": "response.output_item.added", "output_index": index,
                                   "item": {"type": "function_call", "id": id, "call_id": item["call_id"], "name": item["name"], "arguments": "", "status": "in_progress"}}));
                for piece in pieces(item["arguments"].as_str().unwrap(), size) {
                    events.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": piece}));
                }
                events.push(json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "arguments": item["arguments"]}));
            }
            other => panic!("{other}"),
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    let end = if whole["status"] == "incomplete" {
        "response.incomplete"
    } else {
        "response.completed"
    };
    events.push(json!({"type": end, "response": whole}));
    events
        .iter_mut()
        .enumerate()
        .map(|(at, event)| {
            event["sequence_number"] = json!(at);
            sse(event)
        })
        .collect()
}

#[test]
fn url_and_headers() {
    let mut config = responses();
    assert_eq!(
        ResponsesWire.url(&config, true),
        "https://api.openai.com/v1/responses"
    );
    assert_eq!(
        ResponsesWire.headers(&config),
        vec![("Authorization".to_string(), "Bearer sk-test".to_string())]
    );
    config.api_key = None;
    assert!(ResponsesWire.headers(&config).is_empty());
    assert_eq!(ResponsesWire.framing(), Framing::Sse);
}

#[test]
fn body_carries_model_tools_store_and_settings() {
    let entries = history();
    let tools = tools();
    let render = RenderOptions::new();
    let plain = ResponsesWire
        .body(&responses(), &request(&entries, &[], &render), false)
        .unwrap();
    assert_valid_body(Provider::OpenAiResponses, &plain, FIELDS);
    assert_eq!(plain["model"], "gpt-5-mini");
    assert_eq!(plain["store"], false);
    assert_eq!(
        plain["input"][0],
        json!({"role": "system", "content": "You are terse."})
    );
    for absent in [
        "tools",
        "stream",
        "reasoning",
        "include",
        "max_output_tokens",
        "temperature",
    ] {
        assert!(plain.get(absent).is_none(), "{absent} in {plain}");
    }
    let mut config = reasoning(responses(), Reasoning::Effort("low".to_string()));
    config.max_tokens = Some(4000);
    config.temperature = Some(1.0);
    let body = ResponsesWire
        .body(&config, &request(&entries, &tools, &render), true)
        .unwrap();
    assert_valid_body(Provider::OpenAiResponses, &body, FIELDS);
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["max_output_tokens"], 4000);
    assert_eq!(body["temperature"], 1.0);
    assert_eq!(
        body["tools"][1],
        json!({"type": "function", "name": "get_time", "description": "Local time in a city",
               "parameters": tools[1].parameters, "strict": false})
    );
    let budget = reasoning(responses(), Reasoning::Budget(1024));
    assert!(matches!(
        ResponsesWire.body(&budget, &request(&entries, &[], &render), false).unwrap_err().kind,
        ModelErrorKind::Request(reason) if reason.contains("effort")
    ));
}

#[test]
fn parses_a_text_reply() {
    let reply = ResponsesWire.parse(&text_reply()).unwrap();
    assert_eq!(
        reply.entry.content.as_deref(),
        Some("Paris: sunny, 18°C. Rome: clear, 22°C.")
    );
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 36,
            output_tokens: 87
        })
    );
}

#[test]
fn parses_text_and_two_parallel_calls_into_one_entry_and_sends_them_back() {
    let reply = ResponsesWire.parse(&tools_reply()).unwrap();
    let entry = &reply.entry;
    assert_eq!(entry.content.as_deref(), Some("Checking both."));
    assert_eq!(entry.finish_reason.as_deref(), Some("tool_calls"));
    let calls: Vec<(&str, &str)> = entry
        .tool_calls
        .iter()
        .map(|call| (call.call_id.as_str(), call.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("call_unLAR8MvFNptuiZK6K6HCy5k", r#"{"city":"Paris"}"#),
            (
                "call_Xk2pQ9rTz8mW3nB5vL7yHd1c",
                r#"{"city": "Rome", "unit": "c"}"#
            )
        ]
    );
    let entries = continued(&reply);
    let body = ResponsesWire
        .body(
            &responses(),
            &request(&entries, &tools(), &RenderOptions::new()),
            false,
        )
        .unwrap();
    assert_valid_body(Provider::OpenAiResponses, &body, FIELDS);
    let input = body["input"].as_array().unwrap();
    assert_eq!(input[2]["id"], "msg_0a1");
    assert_eq!(input[3]["id"], "fc_67ca09c6bedc8190a7abfec07b1a1332");
    assert_eq!(
        input[4]["arguments"], r#"{"city": "Rome", "unit": "c"}"#,
        "verbatim"
    );
    assert_eq!(input[5]["call_id"], "call_unLAR8MvFNptuiZK6K6HCy5k");
}

#[test]
fn reasoning_items_with_encrypted_content_are_kept_and_sent_back() {
    let reply = ResponsesWire.parse(&reasoning_reply()).unwrap();
    let reasoning = reply.entry.reasoning.clone().unwrap();
    assert_eq!(
        reasoning.text.as_deref(),
        Some("**Planning**\n\nTwo cities — call the tool «twice».\n\n**Done**")
    );
    assert!(reasoning.signature.unwrap().starts_with("gAAAAABoISQ24"));
    let entries = continued(&reply);
    let body = ResponsesWire
        .body(
            &responses(),
            &request(&entries, &[], &RenderOptions::new()),
            false,
        )
        .unwrap();
    assert_valid_body(Provider::OpenAiResponses, &body, FIELDS);
    assert_eq!(body["input"][2], reasoning_item());
    assert_eq!(body["input"][3]["call_id"], "call_time1");

    // Raw reasoning text (which the mapper does not take) is dropped; the
    // summary and encrypted content stay.
    let mut raw = reasoning_item();
    raw["content"] = json!([{"type": "reasoning_text", "text": "step one"}]);
    let with_raw = response(
        "completed",
        json!([raw, call("fc_1", "call_time1", "get_time", "{}")]),
    );
    assert_eq!(
        normalise(&ResponsesWire.parse(&with_raw).unwrap()),
        normalise(&reply)
    );
}

#[test]
fn incomplete_refused_failed_and_error_bodies() {
    let mut incomplete = response("incomplete", json!([message("msg_1", "Paris is")]));
    incomplete["incomplete_details"] = json!({"reason": "max_output_tokens"});
    let reply = ResponsesWire.parse(&incomplete).unwrap();
    assert_eq!(reply.entry.content.as_deref(), Some("Paris is"));
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("length"));

    let refusal = response(
        "completed",
        json!([{"type": "message", "id": "msg_r", "status": "completed", "role": "assistant",
        "content": [{"type": "refusal", "refusal": "I can't help with that."}]}]),
    );
    let reply = ResponsesWire.parse(&refusal).unwrap();
    assert_eq!(
        reply.entry.content.as_deref(),
        Some("I can't help with that.")
    );
    assert_eq!(reply.entry.finish_reason.as_deref(), Some("content_filter"));

    let mut failed = response("failed", json!([]));
    failed["error"] =
        json!({"code": "server_error", "message": "The model failed to generate a response."});
    assert_eq!(
        ResponsesWire.parse(&failed).unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: failed.to_string()
        }
    );
    let error = json!({"error": {"message": "Rate limit reached for gpt-5-mini", "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
    assert_eq!(
        ResponsesWire.parse(&error).unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: error.to_string()
        }
    );
    let queued = response("queued", json!([]));
    assert!(matches!(
        ResponsesWire.parse(&queued).unwrap_err().kind,
        ModelErrorKind::Malformed(_)
    ));
}

#[test]
fn streams_assemble_to_the_whole_reply() {
    let mut incomplete = response("incomplete", json!([message("msg_1", "Paris is")]));
    incomplete["incomplete_details"] = json!({"reason": "max_output_tokens"});
    for whole in [text_reply(), tools_reply(), reasoning_reply(), incomplete] {
        let parsed = ResponsesWire.parse(&whole).unwrap();
        for size in [1, 3, 8, 1000] {
            let frames = events(&whole, size);
            let (deltas, streamed) =
                run_stream(ResponsesWire.assembler(), &frames, Some(frames.len() - 1));
            assert_eq!(
                normalise(&streamed.unwrap()),
                normalise(&parsed),
                "size {size}: {whole}"
            );
            let (text, thinking, calls) = merged(&deltas);
            assert_eq!(Some(text).filter(|t| !t.is_empty()), parsed.entry.content);
            assert_eq!(
                Some(thinking).filter(|t| !t.is_empty()),
                parsed.entry.reasoning.as_ref().and_then(|r| r.text.clone())
            );
            let expected: Vec<(Option<String>, Option<String>, String)> = parsed
                .entry
                .tool_calls
                .iter()
                .map(|call| {
                    (
                        Some(call.call_id.clone()),
                        Some(call.name.clone()),
                        call.arguments.clone(),
                    )
                })
                .collect();
            assert_eq!(calls, expected);
        }
    }
}

#[test]
fn a_completed_event_without_output_takes_the_items_streamed() {
    let whole = tools_reply();
    let mut frames = events(&whole, 5);
    let mut bare = whole.clone();
    bare["output"] = json!([]);
    *frames.last_mut().unwrap() = sse(&json!({"type": "response.completed", "response": bare}));
    let (_, streamed) = run_stream(ResponsesWire.assembler(), &frames, Some(frames.len() - 1));
    assert_eq!(
        normalise(&streamed.unwrap()),
        normalise(&ResponsesWire.parse(&whole).unwrap())
    );
}

#[test]
fn a_completed_response_that_disagrees_with_its_deltas_is_malformed() {
    let whole = tools_reply();
    let mut frames = events(&whole, 5);
    let mut other = whole.clone();
    other["output"][1]["arguments"] = json!(r#"{"city":"Lyon"}"#);
    *frames.last_mut().unwrap() = sse(&json!({"type": "response.completed", "response": other}));
    let (_, streamed) = run_stream(ResponsesWire.assembler(), &frames, Some(frames.len() - 1));
    assert!(
        matches!(streamed.unwrap_err().kind, ModelErrorKind::Malformed(reason) if reason.contains("Lyon"))
    );
}

#[test]
fn failed_error_and_cut_streams_are_errors() {
    let mut frames = events(&text_reply(), 5);
    frames.pop();
    let (_, cut) = run_stream(ResponsesWire.assembler(), &frames, None);
    assert!(
        matches!(cut.unwrap_err().kind, ModelErrorKind::Malformed(reason) if reason.contains("before response.completed"))
    );

    let mut failed = response("failed", json!([]));
    failed["error"] =
        json!({"code": "server_error", "message": "The model failed to generate a response."});
    let event = json!({"type": "response.failed", "sequence_number": 9, "response": failed});
    frames.push(sse(&event));
    let (_, reply) = run_stream(ResponsesWire.assembler(), &frames, None);
    assert_eq!(
        reply.unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: event.to_string()
        }
    );
    let error = json!({"type": "error", "sequence_number": 2, "code": "rate_limit_exceeded", "message": "Rate limit reached", "param": null});
    let (_, reply) = run_stream(ResponsesWire.assembler(), &[sse(&error)], None);
    assert_eq!(
        reply.unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: error.to_string()
        }
    );
}

#[test]
fn reasoning_without_encrypted_content_is_not_sent_back_under_store_false() {
    // A reasoning model called without an effort: its reasoning item has no
    // encrypted content, which `store: false` cannot look up by id.
    let mut bare = reasoning_item();
    bare.as_object_mut().unwrap().remove("encrypted_content");
    let mut signed = reasoning_item();
    signed["id"] = json!("rs_signed");
    let first = response(
        "completed",
        json!([
            bare,
            message("msg_1", "Checking."),
            call("fc_1", "call_time1", "get_time", "{}")
        ]),
    );
    let reply = ResponsesWire.parse(&first).unwrap();
    let mut entries = continued(&reply);
    // A later turn whose reasoning did come with encrypted content keeps it.
    let second = response(
        "completed",
        json!([signed.clone(), message("msg_2", "It is noon.")]),
    );
    let mut later = ResponsesWire.parse(&second).unwrap().entry;
    later.evaluation_id = "e1".to_string();
    later.sequence = 4;
    later.turn = 2;
    entries.push(later);
    let body = ResponsesWire
        .body(
            &responses(),
            &request(&entries, &[], &RenderOptions::new()),
            false,
        )
        .unwrap();
    assert_valid_body(Provider::OpenAiResponses, &body, FIELDS);
    let input = body["input"].as_array().unwrap();
    assert_eq!(
        input[2..],
        [
            json!({"role": "assistant", "content": "Checking."}),
            json!({"type": "function_call", "call_id": "call_time1", "name": "get_time", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "call_time1", "output": "18C"}),
            signed,
            json!({"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "It is noon.", "annotations": []}]}),
        ]
    );
}

#[test]
fn a_stream_error_event_is_kept_as_sent() {
    let data = r#"{"type":"error","sequence_number":1,"code":"server_error","message":"An error occurred.",   "param":null}"#;
    let frames = [Frame::Sse {
        event: Some("error".to_string()),
        data: data.to_string(),
    }];
    let (_, reply) = run_stream(ResponsesWire.assembler(), &frames, None);
    assert_eq!(
        reply.unwrap_err().kind,
        ModelErrorKind::Status {
            status: 0,
            body: data.to_string()
        }
    );
}
