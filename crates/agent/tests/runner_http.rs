//! The runner end to end over real loopback HTTP, for each wire format: the
//! real `HttpClient` against the fake provider server, a host tool, a
//! store. A turn with two parallel tool calls then a final answer, whole
//! and streamed: the recorded conversation is the expected one, every
//! request the provider received holds to its rules and carries the tool
//! results, and a failed model call is recorded, then resumed.

mod support;

use std::sync::{Arc, Mutex};

use convlog::model::{Event, Role, ToolStatus};
use convlog::{Provider, Store, StoreOptions};
use convlog_agent::tools::function::FunctionTool;
use convlog_agent::{
    ApiKind, ClientConfig, HttpClient, RunError, RunEvent, Runner, RunnerOptions, StopReason,
    StreamDelta, ToolContext, Toolset, MODEL_CALL_FAILED,
};
use serde_json::{json, Value};
use support::{anthropic, gemini, ollama, openai, responses, FakeServer, Reply};

const CONVERSATION: &str = "trip";
const QUESTION: &str = "Weather in Paris and Rome?";
const ANSWER: &str = "Paris 18C, Rome 24C.";

/// One wire format: how to reach it and how it answers.
struct Format {
    api: ApiKind,
    provider: Provider,
    /// The base URL's path on the fake server.
    base: &'static str,
    /// Every top-level request field the client may send.
    fields: &'static [&'static str],
}

fn formats() -> Vec<Format> {
    vec![
        Format {
            api: ApiKind::OpenAiChat,
            provider: Provider::OpenAiChat,
            base: "/v1",
            fields: &[
                "model",
                "messages",
                "tools",
                "stream",
                "stream_options",
                "temperature",
                "max_completion_tokens",
                "reasoning_effort",
            ],
        },
        Format {
            api: ApiKind::OpenAiResponses,
            provider: Provider::OpenAiResponses,
            base: "/v1",
            fields: &[
                "model",
                "input",
                "tools",
                "stream",
                "store",
                "include",
                "reasoning",
                "max_output_tokens",
                "temperature",
            ],
        },
        Format {
            api: ApiKind::Anthropic,
            provider: Provider::Anthropic,
            base: "",
            fields: &[
                "model",
                "messages",
                "system",
                "max_tokens",
                "tools",
                "stream",
                "temperature",
                "thinking",
            ],
        },
        Format {
            api: ApiKind::Gemini,
            provider: Provider::Gemini,
            base: "/v1beta",
            fields: &[
                "contents",
                "system_instruction",
                "tools",
                "generationConfig",
            ],
        },
        Format {
            api: ApiKind::Ollama,
            provider: Provider::Ollama,
            base: "",
            fields: &["model", "messages", "tools", "stream", "options", "think"],
        },
    ]
}

/// The model's two replies in `format`: two parallel `weather` calls, then
/// the answer; streamed when `stream`.
fn replies(format: &Format, stream: bool) -> [Reply; 2] {
    let paris = json!({"city": "paris"});
    let rome = json!({"city": "rome"});
    match format.provider {
        Provider::OpenAiChat => {
            let calls = [
                ("call_p", "weather", r#"{"city":"paris"}"#),
                ("call_r", "weather", r#"{"city":"rome"}"#),
            ];
            if stream {
                let mut chunks = openai::tool_call_chunks(&calls, 5);
                chunks.push(openai::usage_chunk());
                let mut answer = openai::text_chunks(&["Paris 18C", ", Rome 24C."]);
                answer.push(openai::usage_chunk());
                [openai::stream(&chunks, 7), openai::stream(&answer, 7)]
            } else {
                [
                    openai::reply(openai::tool_calls(&calls)),
                    openai::reply(openai::text(ANSWER)),
                ]
            }
        }
        Provider::OpenAiResponses => {
            let calls = vec![
                responses::function_call("fc_1", "call_p", "weather", &paris.to_string()),
                responses::function_call("fc_2", "call_r", "weather", &rome.to_string()),
            ];
            let answer = vec![responses::message("msg_1", ANSWER)];
            if stream {
                let calls = responses::response("completed", calls);
                let answer = responses::response("completed", answer);
                [
                    responses::stream(&responses::events(&calls, 5), 7),
                    responses::stream(&responses::events(&answer, 5), 7),
                ]
            } else {
                [responses::reply(calls), responses::reply(answer)]
            }
        }
        Provider::Anthropic => {
            let calls = vec![
                anthropic::tool_use("toolu_p", "weather", paris),
                anthropic::tool_use("toolu_r", "weather", rome),
            ];
            let answer = vec![anthropic::text(ANSWER)];
            if stream {
                [
                    anthropic::stream(&anthropic::events(&anthropic::message(calls), 5), 7),
                    anthropic::stream(&anthropic::events(&anthropic::message(answer), 5), 7),
                ]
            } else {
                [anthropic::reply(calls), anthropic::reply(answer)]
            }
        }
        Provider::Gemini => {
            let calls = vec![
                gemini::function_call("weather", paris),
                gemini::function_call("weather", rome),
            ];
            let answer = vec![gemini::text(ANSWER)];
            if stream {
                [
                    gemini::stream(&gemini::chunks(&gemini::response(calls), 5), 7),
                    gemini::stream(&gemini::chunks(&gemini::response(answer), 5), 7),
                ]
            } else {
                [gemini::reply(calls), gemini::reply(answer)]
            }
        }
        Provider::Ollama => {
            let calls = ollama::tool_calls(&[("weather", paris), ("weather", rome)]);
            let answer = ollama::text(ANSWER);
            if stream {
                [
                    ollama::stream(&[ollama::line(calls), ollama::done_line()], 7),
                    ollama::stream(&[ollama::line(answer), ollama::done_line()], 7),
                ]
            } else {
                [ollama::reply(calls), ollama::reply(answer)]
            }
        }
    }
}

fn weather_tool() -> FunctionTool {
    FunctionTool::new(
        "weather",
        "Current weather of a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |arguments: String, _context: ToolContext| async move {
            let arguments: Value = serde_json::from_str(&arguments).map_err(|error| {
                convlog_agent::ToolError(format!("arguments are not JSON: {error}"))
            })?;
            Ok(match arguments["city"].as_str() {
                Some("paris") => "18C".to_string(),
                Some("rome") => "24C".to_string(),
                other => format!("no station for {other:?}"),
            })
        },
    )
}

fn runner(format: &Format, server: &FakeServer, store: &Arc<Store>) -> Runner {
    let config = ClientConfig::new(format.api.clone(), "model-test")
        .base_url(server.url(format.base))
        .api_key(Some("test-key".into()))
        .max_attempts(2)
        .initial_backoff(std::time::Duration::ZERO);
    Runner::new(
        Arc::clone(store),
        Arc::new(HttpClient::new(config)),
        Toolset::new().with(weather_tool()),
        RunnerOptions::new().system_prompt(Some("You report weather.".into())),
    )
}

/// An entry as (role, text, calls with their status, is_error).
type Row = (Role, Option<String>, Vec<(String, ToolStatus)>, bool);

/// The conversation as rows.
fn rows(store: &Store) -> Vec<Row> {
    let conversation = store.conversation(CONVERSATION).unwrap();
    conversation
        .entries()
        .map(|entry| {
            let calls = entry
                .tool_calls
                .iter()
                .map(|call| (call.arguments.replace(' ', ""), call.status))
                .collect();
            (entry.role, entry.content.clone(), calls, entry.is_error)
        })
        .collect()
}

fn expected() -> Vec<Row> {
    let call = |city: &str| (format!(r#"{{"city":"{city}"}}"#), ToolStatus::Completed);
    vec![
        (
            Role::System,
            Some("You report weather.".into()),
            vec![],
            false,
        ),
        (Role::User, Some(QUESTION.into()), vec![], false),
        (
            Role::Assistant,
            None,
            vec![call("paris"), call("rome")],
            false,
        ),
        (Role::Tool, Some("18C".into()), vec![], false),
        (Role::Tool, Some("24C".into()), vec![], false),
        (Role::Assistant, Some(ANSWER.into()), vec![], false),
    ]
}

/// The rows with an assistant's empty text read as none (some formats
/// carry `""` beside tool calls).
fn without_empty_text(mut rows: Vec<Row>) -> Vec<Row> {
    for row in &mut rows {
        if row.1.as_deref() == Some("") {
            row.1 = None;
        }
    }
    rows
}

/// The second request carries both results, and every request holds to
/// the provider's rules.
fn check_requests(format: &Format, server: &FakeServer) {
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        2,
        "{}: one request per model call",
        format.provider
    );
    for request in &requests {
        support::assert_valid_body(format.provider, &request.json(), format.fields);
    }
    let second = requests[1].json().to_string();
    for result in ["18C", "24C"] {
        assert!(
            second.contains(result),
            "{}: the second request carries the result {result}: {second}",
            format.provider
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_wire_format_runs_a_tool_turn_to_the_answer_and_records_it() {
    for format in formats() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
        let server = FakeServer::start(replies(&format, false).into());
        let outcome = runner(&format, &server, &store)
            .run(CONVERSATION, QUESTION)
            .await
            .unwrap_or_else(|error| panic!("{}: {error}", format.provider));
        assert_eq!(outcome.stop, StopReason::Final, "{}", format.provider);
        assert_eq!(outcome.output(), Some(ANSWER), "{}", format.provider);
        assert_eq!(
            without_empty_text(rows(&store)),
            expected(),
            "{}",
            format.provider
        );
        check_requests(&format, &server);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_wire_format_streams_the_same_turn_with_deltas_and_steps_in_order() {
    for format in formats() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
        let server = FakeServer::start(replies(&format, true).into());
        let seen: Mutex<Vec<RunEvent>> = Mutex::new(Vec::new());
        let observer = |event: &RunEvent| {
            if !matches!(event, RunEvent::Recorded { .. }) {
                seen.lock().unwrap().push(event.clone());
            }
        };
        let outcome = runner(&format, &server, &store)
            .run_stream(CONVERSATION, QUESTION, &observer)
            .await
            .unwrap_or_else(|error| panic!("{}: {error}", format.provider));
        assert_eq!(outcome.output(), Some(ANSWER), "{}", format.provider);
        assert_eq!(
            without_empty_text(rows(&store)),
            expected(),
            "{}",
            format.provider
        );
        check_requests(&format, &server);

        let seen = seen.into_inner().unwrap();
        let text: String = seen
            .iter()
            .filter_map(|event| match event {
                RunEvent::Delta(StreamDelta::Text(text)) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            text, ANSWER,
            "{}: the text arrived as deltas",
            format.provider
        );
        // The steps: the calling reply recorded, both tools started, both
        // finished, then the answer recorded after its last delta.
        let steps: Vec<&str> = seen
            .iter()
            .filter_map(|event| match event {
                RunEvent::AssistantRecorded(_) => Some("assistant"),
                RunEvent::ToolStarted { .. } => Some("started"),
                RunEvent::ToolFinished(_) => Some("finished"),
                _ => None,
            })
            .collect();
        assert_eq!(steps[0], "assistant", "{}", format.provider);
        assert_eq!(steps.last(), Some(&"assistant"), "{}", format.provider);
        assert_eq!(steps.len(), 6, "{}: {steps:?}", format.provider);
        let last_delta = seen
            .iter()
            .rposition(|event| matches!(event, RunEvent::Delta(_)))
            .unwrap();
        assert!(
            matches!(seen[last_delta + 1], RunEvent::AssistantRecorded(_)),
            "{}",
            format.provider
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_model_call_is_recorded_with_the_body_verbatim_and_resume_finishes() {
    const BODY: &str = r#"{"error":{"message":"The server had an error","type":"server_error"}}"#;
    let format = &formats()[0];
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
    let [calls, answer] = replies(format, false);
    // The first call succeeds; the second fails on both attempts.
    let server = FakeServer::start(vec![
        calls,
        Reply::status(500, BODY),
        Reply::status(503, BODY),
    ]);
    let runner = runner(format, &server, &store);

    let error = runner.run(CONVERSATION, QUESTION).await.unwrap_err();
    let RunError::Model { error, .. } = &error else {
        panic!("expected a model error, got {error:?}");
    };
    assert!(error.to_string().contains(BODY), "verbatim: {error}");
    assert_eq!(error.attempts, 2);
    let failures: Vec<Value> = store
        .log()
        .iter_from(1)
        .filter_map(|record| match record.unwrap().event().unwrap() {
            Event::Custom(custom) if custom.kind == MODEL_CALL_FAILED => {
                Some(serde_json::from_slice(&custom.payload).unwrap())
            }
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 1, "one failure recorded");
    assert_eq!(failures[0]["status"], 503);
    assert!(failures[0]["error"].as_str().unwrap().contains(BODY));
    // The tools had run and their results are kept.
    assert_eq!(rows(&store).len(), 5);

    // The provider is back: resume asks the model again and finishes,
    // without running a tool again.
    server.push(answer);
    let outcome = runner.resume(CONVERSATION).await.unwrap();
    assert_eq!(outcome.output(), Some(ANSWER));
    assert_eq!(without_empty_text(rows(&store)), expected());
    let last = server.requests().last().unwrap().json().to_string();
    assert!(last.contains("18C") && last.contains("24C"));
}
