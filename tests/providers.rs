//! Provider messages: golden files per provider, a property test over random
//! conversations cut at random crash points, round trips, and non-JSON
//! arguments.
//!
//! Golden files live in `tests/golden/<provider>/<scenario>.json` (the
//! request body under `PendingCalls::Drop`) and, when the synthetic-error
//! mode renders differently, `<scenario>.synthetic_error.json`. Regenerate
//! them with `CONVLOG_BLESS=1 cargo test --test providers` and review the
//! diff against each provider's API rules.

use std::path::PathBuf;

use convlog::model::{ConversationEntry, Reasoning, Role, Timestamp, ToolCall, ToolStatus};
use convlog::provider::{
    self, render, rules, to_entries, PendingCalls, Provider, RenderOptions, RenderedRequest,
    INTERRUPTED_TEXT, RAW_ARGUMENTS_KEY, REASONING_MORE_KEY, REASONING_SOURCE_KEY,
};
use proptest::prelude::*;
use serde_json::{json, Value};
use uuid::Uuid;

// ---------------------------------------------------------------- builders

const EVALUATION: &str = "eval-1";

fn entry(sequence: u64, role: Role, content: Option<&str>) -> ConversationEntry {
    let mut entry = ConversationEntry::new(EVALUATION, sequence, role, content.map(str::to_string));
    entry.message_id = Uuid::from_u128(u128::from(sequence) + 1);
    entry.created_at = Timestamp(1_780_000_000_000_000 + sequence as i64);
    entry
}

fn system(sequence: u64, text: &str) -> ConversationEntry {
    entry(sequence, Role::System, Some(text))
}

fn user(sequence: u64, text: &str) -> ConversationEntry {
    entry(sequence, Role::User, Some(text))
}

fn call(call_id: &str, name: &str, arguments: &str, status: ToolStatus) -> ToolCall {
    ToolCall {
        call_id: call_id.into(),
        name: name.into(),
        arguments: arguments.into(),
        status,
        started_at: None,
        ended_at: None,
        error: None,
    }
}

fn assistant(sequence: u64, text: Option<&str>, calls: Vec<ToolCall>) -> ConversationEntry {
    let mut entry = entry(sequence, Role::Assistant, text);
    entry.tool_calls = calls;
    entry
}

fn result(
    sequence: u64,
    call_id: &str,
    name: &str,
    content: &str,
    is_error: bool,
) -> ConversationEntry {
    let mut entry = entry(sequence, Role::Tool, Some(content));
    entry.tool_call_id = Some(call_id.into());
    entry.tool_name = Some(name.into());
    entry.is_error = is_error;
    entry
}

fn options(pending: PendingCalls) -> RenderOptions {
    RenderOptions::new().pending(pending)
}

fn rendered(
    provider: Provider,
    entries: &[ConversationEntry],
    options: &RenderOptions,
) -> RenderedRequest {
    let request = render(provider, entries, options).expect("renders");
    if let Err(broken) = rules::check(provider, &request) {
        panic!(
            "{provider} rule broken: {broken}\n{}",
            serde_json::to_string_pretty(&request.body()).unwrap()
        );
    }
    request
}

// --------------------------------------------------------------- scenarios

fn parallel_calls() -> Vec<ConversationEntry> {
    vec![
        system(0, "You are a travel assistant."),
        user(1, "What is the weather and the local time in Paris?"),
        assistant(
            2,
            Some("Let me check both."),
            vec![
                call(
                    "call_weather",
                    "weather",
                    r#"{"city":"Paris"}"#,
                    ToolStatus::Completed,
                ),
                call(
                    "call_time",
                    "local_time",
                    r#"{"tz":"Europe/Paris"}"#,
                    ToolStatus::Completed,
                ),
            ],
        ),
        result(3, "call_weather", "weather", "18°C, cloudy", false),
        result(4, "call_time", "local_time", "14:05", false),
        assistant(
            5,
            Some("It is 18°C and cloudy in Paris, and 14:05 local time."),
            vec![],
        ),
    ]
}

fn failed_tool() -> Vec<ConversationEntry> {
    let mut failed = call(
        "call_read",
        "read_file",
        r#"{"path":"config.json"}"#,
        ToolStatus::Failed,
    );
    failed.error = Some("ENOENT: no such file or directory".into());
    vec![
        system(0, "You are a coding agent."),
        user(1, "Show me config.json"),
        assistant(2, None, vec![failed]),
        result(
            3,
            "call_read",
            "read_file",
            "ENOENT: no such file or directory",
            true,
        ),
        assistant(4, Some("config.json does not exist."), vec![]),
    ]
}

fn reasoning_with_signatures() -> Vec<ConversationEntry> {
    let mut first = assistant(
        2,
        Some("I'll look it up."),
        vec![call(
            "toolu_01",
            "search",
            r#"{"q":"tallest building"}"#,
            ToolStatus::Completed,
        )],
    );
    first.reasoning = Some(Reasoning {
        text: Some("The user wants a fact; one search is enough.".into()),
        signature: Some("EqQBCkYIBxgCKkBsignature".into()),
        redacted: false,
    });
    first.metadata.insert(
        REASONING_MORE_KEY.into(),
        json!([{"text": null, "signature": "EmwKAhgBEgyredacted", "redacted": true}]).to_string(),
    );
    first
        .metadata
        .insert(REASONING_SOURCE_KEY.into(), "anthropic".into());
    let mut second = assistant(4, Some("The Burj Khalifa, at 828 m."), vec![]);
    second.reasoning = Some(Reasoning {
        text: Some("The result names the Burj Khalifa.".into()),
        signature: None,
        redacted: false,
    });
    vec![
        system(0, "Answer with facts."),
        user(1, "Which is the tallest building?"),
        first,
        result(3, "toolu_01", "search", "Burj Khalifa, 828 m", false),
        second,
    ]
}

fn consecutive_user_messages() -> Vec<ConversationEntry> {
    vec![
        system(0, "You are helpful."),
        user(1, "Here is my question:"),
        user(2, "what is 2 + 2?"),
        assistant(3, Some("4."), vec![]),
        user(4, "And 3 + 3?"),
    ]
}

/// The host died after the model asked for two calls and before any result
/// was recorded; the assistant turn has no text, so dropping the calls drops
/// the turn.
fn crash_before_any_result() -> Vec<ConversationEntry> {
    vec![
        system(0, "You are a travel assistant."),
        user(1, "Book a table and a taxi."),
        assistant(
            2,
            None,
            vec![
                call(
                    "call_table",
                    "book_table",
                    r#"{"time":"19:00"}"#,
                    ToolStatus::Running,
                ),
                call(
                    "call_taxi",
                    "book_taxi",
                    r#"{"time":"18:30"}"#,
                    ToolStatus::Pending,
                ),
            ],
        ),
    ]
}

/// The host died between two results of one batch of three calls.
fn crash_between_results() -> Vec<ConversationEntry> {
    vec![
        system(0, "You are a travel assistant."),
        user(1, "Weather in Paris, Rome and Oslo?"),
        assistant(
            2,
            Some("Checking all three."),
            vec![
                call(
                    "call_paris",
                    "weather",
                    r#"{"city":"Paris"}"#,
                    ToolStatus::Completed,
                ),
                call(
                    "call_rome",
                    "weather",
                    r#"{"city":"Rome"}"#,
                    ToolStatus::Running,
                ),
                call(
                    "call_oslo",
                    "weather",
                    r#"{"city":"Oslo"}"#,
                    ToolStatus::Pending,
                ),
            ],
        ),
        result(3, "call_paris", "weather", "18°C", false),
    ]
}

fn scenarios() -> Vec<(&'static str, Vec<ConversationEntry>)> {
    vec![
        ("parallel_calls", parallel_calls()),
        ("failed_tool", failed_tool()),
        ("reasoning_with_signatures", reasoning_with_signatures()),
        ("consecutive_user_messages", consecutive_user_messages()),
        ("crash_before_any_result", crash_before_any_result()),
        ("crash_between_results", crash_between_results()),
    ]
}

// ----------------------------------------------------------------- goldens

fn golden(name: &str, actual: &Value) {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "golden", name]
        .iter()
        .collect();
    if std::env::var_os("CONVLOG_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_string_pretty(actual).unwrap() + "\n").unwrap();
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "golden file {} is missing; run with CONVLOG_BLESS=1",
            path.display()
        )
    });
    let expected: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        &expected,
        actual,
        "golden {name} differs; got:\n{}",
        serde_json::to_string_pretty(actual).unwrap()
    );
}

#[test]
fn golden_files_per_provider() {
    for (scenario, entries) in scenarios() {
        for provider in Provider::ALL {
            let dropped = rendered(provider, &entries, &options(PendingCalls::Drop));
            let synthetic = rendered(provider, &entries, &options(PendingCalls::SyntheticError));
            golden(&format!("{provider}/{scenario}.json"), &dropped.body());
            let synthetic_name = format!("{provider}/{scenario}.synthetic_error.json");
            if synthetic.body() != dropped.body() {
                golden(&synthetic_name, &synthetic.body());
            } else {
                let path: PathBuf = [
                    env!("CARGO_MANIFEST_DIR"),
                    "tests",
                    "golden",
                    &synthetic_name,
                ]
                .iter()
                .collect();
                assert!(!path.exists(), "stale golden {synthetic_name}");
            }
        }
    }
}

#[test]
fn unfinished_calls_are_dropped_by_default_and_answered_with_errors_on_request() {
    for provider in Provider::ALL {
        // Crash between two results: the finished call stays, the two
        // unfinished ones are dropped (the assistant turn keeps its text).
        let entries = crash_between_results();
        let dropped = rendered(provider, &entries, &RenderOptions::default());
        assert_eq!(dropped.unfinished_calls, ["call_rome", "call_oslo"]);
        assert_eq!(rules::tool_call_count(&dropped), 1, "{provider}");
        let synthetic = rendered(provider, &entries, &options(PendingCalls::SyntheticError));
        assert_eq!(synthetic.unfinished_calls, ["call_rome", "call_oslo"]);
        assert_eq!(rules::tool_call_count(&synthetic), 3, "{provider}");
        let text = synthetic.body().to_string();
        assert_eq!(
            text.matches(INTERRUPTED_TEXT).count(),
            2,
            "{provider}: {text}"
        );

        // Crash before any result, no text: the whole assistant turn goes.
        let entries = crash_before_any_result();
        let dropped = rendered(provider, &entries, &RenderOptions::default());
        assert_eq!(rules::tool_call_count(&dropped), 0);
        assert!(
            !dropped.body().to_string().contains("book_"),
            "{provider}: no trace of the dropped calls"
        );
        let synthetic = rendered(provider, &entries, &options(PendingCalls::SyntheticError));
        assert_eq!(rules::tool_call_count(&synthetic), 2);
    }
}

#[test]
fn failed_results_carry_the_error_flag_where_the_provider_has_one() {
    let entries = failed_tool();
    let anthropic = rendered(Provider::Anthropic, &entries, &RenderOptions::default());
    assert_eq!(
        anthropic.messages[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "call_read",
               "content": "ENOENT: no such file or directory", "is_error": true})
    );
    let gemini = rendered(Provider::Gemini, &entries, &RenderOptions::default());
    assert_eq!(
        gemini.messages[2]["parts"][0]["functionResponse"]["response"],
        json!({"error": "ENOENT: no such file or directory"})
    );
    // A failed call whose result entry was never written still gets its
    // error text as the result.
    let without_entry: Vec<ConversationEntry> = entries
        .into_iter()
        .filter(|entry| entry.role != Role::Tool)
        .collect();
    let anthropic = rendered(
        Provider::Anthropic,
        &without_entry,
        &RenderOptions::default(),
    );
    assert_eq!(anthropic.messages[2]["content"][0]["is_error"], json!(true));
    assert!(anthropic.unfinished_calls.is_empty());
}

#[test]
fn thinking_blocks_are_passed_back_verbatim_in_order_with_their_signatures() {
    let request = rendered(
        Provider::Anthropic,
        &reasoning_with_signatures(),
        &RenderOptions::default(),
    );
    assert_eq!(request.system, Some(json!("Answer with facts.")));
    assert_eq!(
        request.messages[1]["content"],
        json!([
            {"type": "thinking", "thinking": "The user wants a fact; one search is enough.",
             "signature": "EqQBCkYIBxgCKkBsignature"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgyredacted"},
            {"type": "text", "text": "I'll look it up."},
            {"type": "tool_use", "id": "toolu_01", "name": "search", "input": {"q": "tallest building"}},
        ])
    );
    // Reasoning without a signature cannot go back to Anthropic.
    assert_eq!(
        request.messages[3]["content"],
        json!("The Burj Khalifa, at 828 m.")
    );
    // Anthropic's signatures never go to Gemini; the thought text does.
    let gemini = rendered(
        Provider::Gemini,
        &reasoning_with_signatures(),
        &RenderOptions::default(),
    );
    assert!(!gemini.body().to_string().contains("EqQBCkYIBx"));
    assert_eq!(
        gemini.messages[1]["parts"][0],
        json!({"text": "The user wants a fact; one search is enough.", "thought": true})
    );
    let without = RenderOptions::new().include_reasoning(false);
    for provider in Provider::ALL {
        let request = rendered(provider, &reasoning_with_signatures(), &without);
        let text = request.body().to_string();
        assert!(!text.contains("one search is enough"), "{provider}: {text}");
    }
}

#[test]
fn a_default_system_prompt_is_injected_with_the_display_name() {
    let entries = vec![user(1, "hi")];
    let options = RenderOptions::new()
        .default_system_prompt(Some(
            "You are Wolo, an AI coding agent. Wolo is terse.".into(),
        ))
        .display_name(Some(provider::DisplayName::new("Wolo", "CodeHelper")));
    let expected = "You are CodeHelper, an AI coding agent. CodeHelper is terse.";
    let openai = rendered(Provider::OpenAiChat, &entries, &options);
    assert_eq!(
        openai.messages[0],
        json!({"role": "system", "content": expected})
    );
    let anthropic = rendered(Provider::Anthropic, &entries, &options);
    assert_eq!(anthropic.system, Some(json!(expected)));
    let gemini = rendered(Provider::Gemini, &entries, &options);
    assert_eq!(gemini.system, Some(json!({"parts": [{"text": expected}]})));
    // A recorded system entry wins and is not rewritten.
    let with_system = vec![system(0, "You are Wolo."), user(1, "hi")];
    let openai = rendered(Provider::OpenAiChat, &with_system, &options);
    assert_eq!(openai.messages[0]["content"], json!("You are Wolo."));
    assert_eq!(openai.messages.len(), 2);
}

#[test]
fn a_history_that_starts_with_the_model_gets_a_leading_user_turn() {
    let entries = vec![
        system(0, "s"),
        assistant(1, Some("Welcome back."), vec![]),
        user(2, "thanks"),
    ];
    let anthropic = rendered(Provider::Anthropic, &entries, &RenderOptions::default());
    assert_eq!(
        anthropic.messages[0],
        json!({"role": "user", "content": provider::LEADING_USER_TEXT})
    );
    let gemini = rendered(Provider::Gemini, &entries, &RenderOptions::default());
    assert_eq!(
        gemini.messages[0],
        json!({"role": "user", "parts": [{"text": provider::LEADING_USER_TEXT}]})
    );
}

#[test]
fn orphan_and_duplicate_results_are_skipped_and_reported() {
    let entries = vec![
        user(1, "go"),
        result(2, "ghost", "t", "orphan", false),
        assistant(3, None, vec![call("a", "t", "{}", ToolStatus::Completed)]),
        result(4, "a", "t", "first", false),
        result(5, "a", "t", "second", false),
    ];
    for provider in Provider::ALL {
        let request = rendered(provider, &entries, &RenderOptions::default());
        let reasons: Vec<_> = request
            .skipped_results
            .iter()
            .map(|skipped| (skipped.call_id.clone().unwrap(), skipped.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                ("ghost".to_string(), provider::SkipReason::NoMatchingCall),
                ("a".to_string(), provider::SkipReason::DuplicateResult)
            ]
        );
        let text = request.body().to_string();
        assert!(text.contains("first") && !text.contains("second") && !text.contains("orphan"));
    }
}

#[test]
fn a_call_id_in_two_assistant_entries_is_an_error() {
    let entries = vec![
        assistant(1, None, vec![call("a", "t", "{}", ToolStatus::Completed)]),
        assistant(2, None, vec![call("a", "t", "{}", ToolStatus::Completed)]),
    ];
    let error = render(Provider::OpenAiChat, &entries, &RenderOptions::default()).unwrap_err();
    assert!(
        matches!(error, convlog::Error::DuplicateCallId { ref call_id, first_sequence: 1, second_sequence: 2 } if call_id == "a")
    );
}

#[test]
fn a_completed_call_without_a_recorded_result_is_answered_not_dropped() {
    let entries = vec![
        user(1, "go"),
        assistant(
            2,
            None,
            vec![call("a", "send_email", "{}", ToolStatus::Completed)],
        ),
    ];
    for provider in Provider::ALL {
        let request = rendered(provider, &entries, &RenderOptions::default());
        assert_eq!(rules::tool_call_count(&request), 1, "{provider}");
        assert!(
            request.unfinished_calls.is_empty(),
            "the call ran; it is not re-run"
        );
        assert!(request
            .body()
            .to_string()
            .contains(provider::RESULT_NOT_RECORDED_TEXT));
    }
}

#[test]
fn anthropic_call_ids_are_made_valid_consistently() {
    let entries = vec![
        user(1, "go"),
        assistant(
            2,
            None,
            vec![call("call.1:x", "t", "{}", ToolStatus::Completed)],
        ),
        result(3, "call.1:x", "t", "ok", false),
    ];
    let request = rendered(Provider::Anthropic, &entries, &RenderOptions::default());
    let id = provider::anthropic_tool_use_id("call.1:x").into_owned();
    assert!(id.starts_with("call_1_x_"));
    assert_eq!(request.messages[1]["content"][0]["id"], json!(id));
    assert_eq!(request.messages[2]["content"][0]["tool_use_id"], json!(id));
    assert_eq!(provider::anthropic_tool_use_id("toolu_01-a"), "toolu_01-a");
}

#[test]
fn a_gemini_signature_recorded_without_text_goes_on_the_first_call_or_the_last_part() {
    let mut with_calls = assistant(
        2,
        Some("Checking."),
        vec![
            call("a", "weather", "{}", ToolStatus::Completed),
            call("b", "weather", "{}", ToolStatus::Completed),
        ],
    );
    with_calls.reasoning = Some(Reasoning {
        text: None,
        signature: Some("gsig".into()),
        redacted: false,
    });
    let entries = vec![
        user(1, "go"),
        with_calls.clone(),
        result(3, "a", "weather", "1", false),
        result(4, "b", "weather", "2", false),
    ];
    let request = rendered(Provider::Gemini, &entries, &RenderOptions::default());
    let parts = &request.messages[1]["parts"];
    assert_eq!(parts[0], json!({"text": "Checking."}));
    assert_eq!(parts[1]["thoughtSignature"], json!("gsig"));
    assert!(
        parts[2].get("thoughtSignature").is_none(),
        "only the first call"
    );

    let mut text_only = assistant(2, Some("Done."), vec![]);
    text_only.reasoning = with_calls.reasoning.clone();
    let request = rendered(
        Provider::Gemini,
        &[user(1, "go"), text_only],
        &RenderOptions::default(),
    );
    assert_eq!(
        request.messages[1]["parts"],
        json!([{"text": "Done.", "thoughtSignature": "gsig"}])
    );

    // The signature of a dropped call moves to the first call that is sent.
    let mut crashed = with_calls;
    crashed.reasoning = None;
    crashed.tool_calls[0].status = ToolStatus::Running;
    crashed.metadata.insert(
        provider::BLOCKS_KEY.into(),
        json!([{"kind": "text", "bytes": 9},
               {"kind": "call", "call_id": "a", "thought_signature": "first"},
               {"kind": "call", "call_id": "b"}])
        .to_string(),
    );
    let entries = vec![
        user(1, "go"),
        crashed,
        result(4, "b", "weather", "2", false),
    ];
    let request = rendered(Provider::Gemini, &entries, &RenderOptions::default());
    let parts = &request.messages[1]["parts"];
    assert_eq!(parts[1]["functionCall"]["id"], json!("b"));
    assert_eq!(parts[1]["thoughtSignature"], json!("first"));
}

#[test]
fn a_parts_message_keeps_its_part_boundaries_where_the_provider_has_parts() {
    use convlog::parts::{self, Part, PartsMessage};
    let message = PartsMessage {
        role: Role::Assistant,
        parts: vec![
            Part::Text {
                id: "text_1".into(),
                text: "First, ".into(),
            },
            Part::Tool {
                id: "tool_1".into(),
                call_id: "call_1".into(),
                tool: "read".into(),
                input: r#"{"path":"a"}"#.into(),
                status: ToolStatus::Completed,
                output: Some("contents".into()),
            },
            Part::Text {
                id: "text_2".into(),
                text: "then done.".into(),
            },
            Part::Tool {
                id: "tool_2".into(),
                call_id: "call_2".into(),
                tool: "write".into(),
                input: "{}".into(),
                status: ToolStatus::Pending,
                output: None,
            },
        ],
        finished: false,
    };
    let mut entries = vec![user(0, "go")];
    entries.extend(parts::to_entries(&message, EVALUATION, 1, 1, Timestamp(1)));
    let anthropic = rendered(Provider::Anthropic, &entries, &RenderOptions::default());
    assert_eq!(
        anthropic.messages[1]["content"],
        json!([
            {"type": "text", "text": "First, "},
            {"type": "tool_use", "id": "call_1", "name": "read", "input": {"path": "a"}},
            {"type": "text", "text": "then done."},
        ]),
        "the pending tool part is dropped, the text parts stay apart"
    );
    let openai = rendered(Provider::OpenAiChat, &entries, &RenderOptions::default());
    assert_eq!(openai.messages[1]["content"], json!("First, then done."));
    assert_eq!(openai.unfinished_calls, ["call_2"]);
}

// ------------------------------------------------------ non-JSON arguments

#[test]
fn arguments_that_are_not_json_are_wrapped_where_an_object_is_needed() {
    let raw = "{city: Rome";
    let entries = vec![
        user(1, "go"),
        assistant(
            2,
            None,
            vec![call("call_1", "weather", raw, ToolStatus::Completed)],
        ),
        result(3, "call_1", "weather", "21°C", false),
    ];
    let wrapped = json!({ RAW_ARGUMENTS_KEY: raw });
    let body = |provider| rendered(provider, &entries, &RenderOptions::default());
    assert_eq!(
        body(Provider::OpenAiChat).messages[1]["tool_calls"][0]["function"]["arguments"],
        json!(raw)
    );
    assert_eq!(
        body(Provider::OpenAiResponses).messages[1]["arguments"],
        json!(raw)
    );
    assert_eq!(
        body(Provider::Anthropic).messages[1]["content"][0]["input"],
        wrapped
    );
    assert_eq!(
        body(Provider::Gemini).messages[1]["parts"][0]["functionCall"]["args"],
        wrapped
    );
    assert_eq!(
        body(Provider::Ollama).messages[1]["tool_calls"][0]["function"]["arguments"],
        wrapped
    );
    // The stored string survives every provider and back, unchanged.
    for provider in Provider::ALL {
        let back = to_entries(
            provider,
            &body(provider).body(),
            EVALUATION,
            1,
            Timestamp(0),
        )
        .unwrap();
        let assistant = back
            .iter()
            .find(|entry| entry.role == Role::Assistant)
            .unwrap();
        assert_eq!(assistant.tool_calls[0].arguments, raw, "{provider}");
        assert_eq!(assistant.tool_calls[0].status, ToolStatus::Completed);
    }
    // JSON that is not an object is wrapped too; empty arguments are `{}`.
    let object = |arguments: &str| Value::Object(provider::arguments_object(arguments));
    assert_eq!(object("[1,2]"), json!({ RAW_ARGUMENTS_KEY: "[1,2]" }));
    assert_eq!(object(""), json!({}));
}

// ------------------------------------------------- strict OpenAI Chat format

#[test]
fn openai_chat_sends_reasoning_content_only_when_the_dialect_asks_for_it() {
    // OpenAI's published request types forbid `reasoning_content` on an
    // assistant message (strict endpoints answer HTTP 400): the default
    // rendering never writes it; `openai_reasoning_content(true)` does, for
    // OpenAI-compatible servers that want it.
    let entries = reasoning_with_signatures();
    let strict = rendered(Provider::OpenAiChat, &entries, &RenderOptions::default());
    for message in &strict.messages {
        assert!(
            message.get("reasoning_content").is_none(),
            "strict OpenAI Chat carries reasoning_content: {message}"
        );
    }
    let dialect = render(
        Provider::OpenAiChat,
        &entries,
        &RenderOptions::new().openai_reasoning_content(true),
    )
    .unwrap();
    assert_eq!(
        dialect.messages[2]["reasoning_content"],
        json!("The user wants a fact; one search is enough.")
    );
    assert_eq!(
        dialect.messages[4]["reasoning_content"],
        json!("The result names the Burj Khalifa.")
    );
    // Redacted blocks have no text to send, and `include_reasoning(false)`
    // wins over the dialect.
    let off = render(
        Provider::OpenAiChat,
        &entries,
        &RenderOptions::new()
            .openai_reasoning_content(true)
            .include_reasoning(false),
    )
    .unwrap();
    assert!(off
        .messages
        .iter()
        .all(|message| message.get("reasoning_content").is_none()));
    // The rule checker holds the strict format to OpenAI's keys.
    let broken = rules::check(Provider::OpenAiChat, &dialect).unwrap_err();
    assert!(broken.contains("reasoning_content"), "{broken}");
}

// ------------------------------------------------------------- round trips

/// provider → neutral → provider is the identity on what the provider has.
fn round_trip(provider: Provider, sample: Value) -> Vec<ConversationEntry> {
    round_trip_with(provider, sample, &RenderOptions::default())
}

fn round_trip_with(
    provider: Provider,
    sample: Value,
    options: &RenderOptions,
) -> Vec<ConversationEntry> {
    let entries = to_entries(provider, &sample, EVALUATION, 0, Timestamp(5)).expect("converts");
    let request = render(provider, &entries, options).expect("renders");
    assert_eq!(
        request.body(),
        sample,
        "{provider} round trip changed the messages:\n{}",
        serde_json::to_string_pretty(&request.body()).unwrap()
    );
    for (index, entry) in entries.iter().enumerate() {
        assert_eq!(entry.sequence, index as u64);
        assert_eq!(entry.evaluation_id, EVALUATION);
    }
    entries
}

fn roles(entries: &[ConversationEntry]) -> Vec<Role> {
    entries.iter().map(|entry| entry.role).collect()
}

#[test]
fn openai_chat_round_trip() {
    // `reasoning_content` is the OpenAI-compatible dialect's field (GLM,
    // DeepSeek): it comes back only when the dialect asks for it.
    let entries = round_trip_with(
        Provider::OpenAiChat,
        json!({"messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "developer", "content": "Use metric units."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": null, "reasoning_content": "Two lookups.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{city: Rome"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18°C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "error: bad arguments"},
            {"role": "assistant", "content": "Paris is 18°C; Rome failed."},
        ]}),
        &RenderOptions::new().openai_reasoning_content(true),
    );
    use Role::*;
    assert_eq!(
        roles(&entries),
        [System, System, User, Assistant, Tool, Tool, Assistant]
    );
    assert_eq!(entries[3].content, None);
    assert_eq!(
        entries[3].reasoning.as_ref().unwrap().text.as_deref(),
        Some("Two lookups.")
    );
    assert_eq!(entries[3].tool_calls[1].arguments, "{city: Rome");
    assert_eq!(entries[4].tool_name.as_deref(), Some("weather"));
    assert_eq!(entries[3].turn, 1);
    assert_eq!(entries[6].turn, 2);
}

#[test]
fn openai_responses_round_trip() {
    let entries = round_trip(
        Provider::OpenAiResponses,
        json!({"input": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"type": "reasoning", "id": "rs_1", "summary": [
                {"type": "summary_text", "text": "**Plan**"},
                {"type": "summary_text", "text": "Two lookups."},
            ], "encrypted_content": "gAAAAABencrypted"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "weather", "arguments": "{\"city\":\"Rome\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "18°C"},
            {"type": "function_call_output", "call_id": "call_2", "output": "21°C"},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Paris 18°C, Rome 21°C.", "annotations": []}]},
            {"role": "user", "content": "Thanks"},
        ]}),
    );
    let reasoning = entries[2].reasoning.as_ref().unwrap();
    assert_eq!(reasoning.text.as_deref(), Some("**Plan**\n\nTwo lookups."));
    assert_eq!(reasoning.signature.as_deref(), Some("gAAAAABencrypted"));
    assert_eq!(entries[2].tool_calls.len(), 2);
    assert!(entries[2]
        .tool_calls
        .iter()
        .all(|call| call.status == ToolStatus::Completed));
}

#[test]
fn anthropic_round_trip() {
    let entries = round_trip(
        Provider::Anthropic,
        json!({"system": "You are terse.", "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Two lookups.", "signature": "EqQBCkYIBx"},
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_02", "name": "weather", "input": {"_raw_arguments": "{city: Rome"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18°C"},
                {"type": "tool_result", "tool_use_id": "toolu_02", "content": "bad arguments", "is_error": true},
                {"type": "text", "text": "Also, be brief."},
            ]},
            {"role": "assistant", "content": "Paris 18°C; Rome failed."},
            {"role": "user", "content": [
                {"type": "text", "text": "First part. "},
                {"type": "text", "text": "Second part."},
            ]},
        ]}),
    );
    use Role::*;
    assert_eq!(
        roles(&entries),
        [System, User, Assistant, Tool, Tool, User, Assistant, User]
    );
    let thinking = &entries[2];
    assert_eq!(
        thinking.reasoning,
        Some(Reasoning {
            text: Some("Two lookups.".into()),
            signature: Some("EqQBCkYIBx".into()),
            redacted: false
        })
    );
    assert_eq!(thinking.metadata[REASONING_SOURCE_KEY], "anthropic");
    assert_eq!(thinking.tool_calls[1].arguments, "{city: Rome");
    assert!(entries[4].is_error);
    assert_eq!(thinking.tool_calls[1].status, ToolStatus::Failed);
    assert_eq!(
        entries[7].content.as_deref(),
        Some("First part. Second part.")
    );
}

#[test]
fn gemini_round_trip() {
    let entries = round_trip(
        Provider::Gemini,
        json!({"system_instruction": {"parts": [{"text": "You are terse."}]}, "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
            {"role": "model", "parts": [
                {"text": "Two lookups.", "thought": true},
                {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "CiQBsig"},
                {"functionCall": {"name": "weather", "args": {"city": "Rome"}}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "weather", "response": {"output": "18°C"}}},
                {"functionResponse": {"name": "weather", "response": {"error": "timeout"}}},
            ]},
            {"role": "model", "parts": [
                {"text": "Paris 18°C; Rome timed out."},
                {"text": "", "thoughtSignature": "CiQCsig"},
            ]},
            {"role": "user", "parts": [{"text": "Look up row 7"}]},
            {"role": "model", "parts": [
                {"functionCall": {"id": "fc-7", "name": "lookup", "args": {"id": 7}}, "thoughtSignature": "CiQDsig"},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": "fc-7", "name": "lookup", "response": {"name": "x", "rows": [1, 2]}}},
            ]},
        ]}),
    );
    use Role::*;
    assert_eq!(
        roles(&entries),
        [System, User, Assistant, Tool, Tool, Assistant, User, Assistant, Tool]
    );
    let model = &entries[2];
    assert_eq!(model.tool_calls[0].name, "weather");
    assert_eq!(
        entries[3].tool_call_id.as_deref(),
        Some(model.tool_calls[0].call_id.as_str())
    );
    assert_eq!(
        entries[4].tool_call_id.as_deref(),
        Some(model.tool_calls[1].call_id.as_str())
    );
    assert!(entries[4].is_error);
    assert_eq!(entries[8].tool_call_id.as_deref(), Some("fc-7"));
    assert_eq!(
        entries[8].content.as_deref(),
        Some(r#"{"name":"x","rows":[1,2]}"#)
    );
}

#[test]
fn ollama_round_trip() {
    let entries = round_trip(
        Provider::Ollama,
        json!({"messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris and the time in Rome?"},
            {"role": "assistant", "content": "", "thinking": "Two lookups.", "tool_calls": [
                {"function": {"name": "weather", "arguments": {"city": "Paris"}}},
                {"function": {"name": "time", "arguments": {"tz": "Europe/Rome"}}},
            ]},
            {"role": "tool", "content": "18°C", "tool_name": "weather"},
            {"role": "tool", "content": "14:05", "tool_name": "time"},
            {"role": "assistant", "content": "Paris 18°C; 14:05 in Rome."},
        ]}),
    );
    assert_eq!(
        entries[3].tool_call_id.as_deref(),
        Some(entries[2].tool_calls[0].call_id.as_str())
    );
    assert_eq!(
        entries[4].tool_call_id.as_deref(),
        Some(entries[2].tool_calls[1].call_id.as_str())
    );
}

#[test]
fn a_result_that_cannot_be_paired_is_refused_with_its_path() {
    let error = to_entries(
        Provider::Gemini,
        &json!([{"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"output": "x"}}}]}]),
        EVALUATION,
        0,
        Timestamp(0),
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("contents[0].parts[0]"),
        "{error}"
    );
    let error = to_entries(
        Provider::Anthropic,
        &json!([{"role": "user", "content": [{"type": "image", "source": {}}]}]),
        EVALUATION,
        0,
        Timestamp(0),
    )
    .unwrap_err();
    assert!(
        matches!(error, convlog::Error::ProviderUnsupported { .. }),
        "{error}"
    );
}

// ----------------------------------------------------------- property test

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Completed,
    Failed,
    FailedWithoutResult,
    CompletedWithoutResult,
    Pending,
    Running,
}

#[derive(Debug, Clone)]
struct CallSpec {
    name: usize,
    arguments: usize,
    odd_id: bool,
    outcome: Outcome,
}

#[derive(Debug, Clone)]
enum StepSpec {
    System,
    User {
        blank: bool,
    },
    Assistant {
        text: Option<bool>,
        reasoning: Option<(bool, bool, bool)>,
        more_reasoning: bool,
        calls: Vec<CallSpec>,
        reverse_results: bool,
        interject: bool,
        layout: bool,
    },
    OrphanResult,
}

const NAMES: [&str; 3] = ["search", "weather", "read_file"];
const ARGUMENTS: [&str; 5] = [
    r#"{"q":"x"}"#,
    "{not json",
    "[1,2]",
    "",
    r#"{"n":1,"deep":{"a":[true]}}"#,
];

fn call_spec() -> impl Strategy<Value = CallSpec> {
    (
        0..NAMES.len(),
        0..ARGUMENTS.len(),
        prop::bool::weighted(0.2),
        prop_oneof![
            3 => Just(Outcome::Completed),
            1 => Just(Outcome::Failed),
            1 => Just(Outcome::FailedWithoutResult),
            1 => Just(Outcome::CompletedWithoutResult),
            1 => Just(Outcome::Pending),
            1 => Just(Outcome::Running),
        ],
    )
        .prop_map(|(name, arguments, odd_id, outcome)| CallSpec {
            name,
            arguments,
            odd_id,
            outcome,
        })
}

fn step_spec() -> impl Strategy<Value = StepSpec> {
    prop_oneof![
        1 => Just(StepSpec::System),
        3 => prop::bool::weighted(0.1).prop_map(|blank| StepSpec::User { blank }),
        5 => (
            prop::option::of(prop::bool::weighted(0.15)),
            prop::option::of((any::<bool>(), any::<bool>(), prop::bool::weighted(0.2))),
            prop::bool::weighted(0.2),
            prop::collection::vec(call_spec(), 0..4),
            any::<bool>(),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.3),
        )
            .prop_map(|(text, reasoning, more_reasoning, calls, reverse_results, interject, layout)| {
                StepSpec::Assistant { text, reasoning, more_reasoning, calls, reverse_results, interject, layout }
            }),
        1 => Just(StepSpec::OrphanResult),
    ]
}

/// Builds a conversation from the steps; every result is recorded after
/// its call, possibly out of order and with a user message in between.
fn build(steps: &[StepSpec], source: Option<Provider>) -> Vec<ConversationEntry> {
    let mut entries = Vec::new();
    let mut sequence = 0u64;
    let mut next = || {
        sequence += 1;
        sequence
    };
    for (step_index, step) in steps.iter().enumerate() {
        match step {
            StepSpec::System => entries.push(system(next(), "Be brief.")),
            StepSpec::User { blank } => {
                entries.push(user(next(), if *blank { "  " } else { "question?" }))
            }
            StepSpec::OrphanResult => entries.push(result(
                next(),
                "nobody-called-this",
                "search",
                "lost",
                false,
            )),
            StepSpec::Assistant {
                text,
                reasoning,
                more_reasoning,
                calls,
                reverse_results,
                interject,
                layout,
            } => {
                let content = text.map(|blank| if blank { " " } else { "Working on it." });
                let mut tool_calls = Vec::new();
                let mut results = Vec::new();
                for (call_index, spec) in calls.iter().enumerate() {
                    let call_id = if spec.odd_id {
                        format!("call.{step_index}:{call_index}")
                    } else {
                        format!("call_{step_index}_{call_index}")
                    };
                    let name = NAMES[spec.name];
                    let status = match spec.outcome {
                        Outcome::Completed | Outcome::CompletedWithoutResult => {
                            ToolStatus::Completed
                        }
                        Outcome::Failed | Outcome::FailedWithoutResult => ToolStatus::Failed,
                        Outcome::Pending => ToolStatus::Pending,
                        Outcome::Running => ToolStatus::Running,
                    };
                    let mut tool_call = call(&call_id, name, ARGUMENTS[spec.arguments], status);
                    if status == ToolStatus::Failed {
                        tool_call.error = Some("boom".into());
                    }
                    tool_calls.push(tool_call);
                    match spec.outcome {
                        Outcome::Completed => results.push((call_id, name, false)),
                        Outcome::Failed => results.push((call_id, name, true)),
                        _ => {}
                    }
                }
                let mut assistant_entry = assistant(next(), content, tool_calls);
                if let Some((has_text, has_signature, redacted)) = reasoning {
                    assistant_entry.reasoning = Some(Reasoning {
                        text: has_text.then(|| "thinking...".to_string()),
                        signature: has_signature.then(|| "sig".to_string()),
                        redacted: *redacted,
                    });
                    if *more_reasoning {
                        assistant_entry.metadata.insert(
                            REASONING_MORE_KEY.into(),
                            json!([{"text": "more", "signature": "sig2", "redacted": false}])
                                .to_string(),
                        );
                    }
                    if let Some(source) = source {
                        assistant_entry
                            .metadata
                            .insert(REASONING_SOURCE_KEY.into(), source.name().into());
                    }
                }
                if *layout {
                    // Calls before the text, each carrying a Gemini
                    // signature and an item id.
                    let mut blocks: Vec<Value> = assistant_entry
                        .tool_calls
                        .iter()
                        .map(|call| {
                            json!({"kind": "call", "call_id": call.call_id,
                                           "thought_signature": "tsig", "item_id": "fc"})
                        })
                        .collect();
                    if let Some(text) = &assistant_entry.content {
                        blocks.push(json!({"kind": "text", "bytes": text.len(), "item_id": "msg"}));
                    }
                    if assistant_entry.reasoning.is_some() {
                        for index in 0..1 + usize::from(*more_reasoning) {
                            blocks.push(
                                json!({"kind": "reasoning", "index": index, "item_id": "rs"}),
                            );
                        }
                    }
                    assistant_entry.metadata.insert(
                        provider::BLOCKS_KEY.into(),
                        Value::Array(blocks).to_string(),
                    );
                }
                entries.push(assistant_entry);
                if *reverse_results {
                    results.reverse();
                }
                for (index, (call_id, name, is_error)) in results.into_iter().enumerate() {
                    if *interject && index == 1 {
                        entries.push(user(next(), "(meanwhile)"));
                    }
                    entries.push(result(
                        next(),
                        &call_id,
                        name,
                        if is_error { "boom" } else { "done" },
                        is_error,
                    ));
                }
            }
        }
    }
    entries
}

/// What the rendered request must hold, computed from the entries alone.
fn expected_calls(entries: &[ConversationEntry], pending: PendingCalls) -> (usize, Vec<String>) {
    let mut kept = 0;
    let mut unfinished = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let answered = |call_id: &str| {
            entries[index + 1..].iter().any(|later| {
                later.role == Role::Tool && later.tool_call_id.as_deref() == Some(call_id)
            })
        };
        for call in &entry.tool_calls {
            if answered(&call.call_id) || call.status.is_finished() {
                kept += 1;
            } else {
                unfinished.push(call.call_id.clone());
                if pending == PendingCalls::SyntheticError {
                    kept += 1;
                }
            }
        }
    }
    (kept, unfinished)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random conversations, cut at a random crash point, rendered for every
    /// provider in both pending modes, always satisfy that provider's rules;
    /// no finished call is lost; and rendering is a fixed point of
    /// provider → neutral → provider.
    #[test]
    fn every_rendered_request_satisfies_its_provider_rules(
        steps in prop::collection::vec(step_spec(), 0..10),
        cut in any::<prop::sample::Index>(),
        source in prop::option::of(prop::sample::select(Provider::ALL.to_vec())),
        include_reasoning in any::<bool>(),
        default_system in any::<bool>(),
    ) {
        let full = build(&steps, source);
        let crashed = &full[..cut.index(full.len() + 1)];
        for pending in [PendingCalls::Drop, PendingCalls::SyntheticError] {
            let options = RenderOptions::new().pending(pending).include_reasoning(include_reasoning).default_system_prompt(default_system.then(|| "You are Wolo.".to_string()));
            let (kept, unfinished) = expected_calls(crashed, pending);
            for provider in Provider::ALL {
                let request = render(provider, crashed, &options).unwrap();
                assert_render_json_matches(provider, crashed, &options, &request);
                let with_reasoning = options.clone().openai_reasoning_content(true);
                let request_with_reasoning = render(provider, crashed, &with_reasoning).unwrap();
                assert_render_json_matches(provider, crashed, &with_reasoning, &request_with_reasoning);
                let body = request.body();
                if let Err(broken) = rules::check(provider, &request) {
                    prop_assert!(false, "{} {:?}: {}\n{}", provider, pending, broken,
                        serde_json::to_string_pretty(&body).unwrap());
                }
                prop_assert_eq!(rules::tool_call_count(&request), kept, "{} {:?}", provider, pending);
                prop_assert_eq!(&request.unfinished_calls, &unfinished);

                let back = to_entries(provider, &body, EVALUATION, 0, Timestamp(0));
                prop_assert!(back.is_ok(), "{} cannot read its own request: {:?}", provider, back);
                let again = render(provider, &back.unwrap(), &options).unwrap();
                prop_assert_eq!(&again.body(), &body, "{} is not a fixed point", provider);
            }
        }
    }
}

/// `render_json` writes exactly the bytes of `render`'s message list
/// serialised, and reports the same system field, unfinished calls and
/// skipped results.
fn assert_render_json_matches(
    provider: Provider,
    entries: &[ConversationEntry],
    options: &RenderOptions,
    request: &RenderedRequest,
) {
    let mut out = b"prefix".to_vec();
    let report = convlog::provider::render_json(provider, entries, options, &mut out).unwrap();
    let expected = serde_json::to_vec(&Value::Array(request.messages.clone())).unwrap();
    assert_eq!(
        &out[..6],
        b"prefix",
        "{provider}: appended, not overwritten"
    );
    assert_eq!(
        String::from_utf8_lossy(&out[6..]),
        String::from_utf8_lossy(&expected),
        "{provider}: the written messages differ from the rendered ones"
    );
    assert_eq!(report.provider, provider);
    assert_eq!(report.system, request.system, "{provider}");
    assert_eq!(
        report.unfinished_calls, request.unfinished_calls,
        "{provider}"
    );
    assert_eq!(
        report.skipped_results, request.skipped_results,
        "{provider}"
    );
}

#[test]
fn render_json_writes_the_rendered_messages_byte_for_byte() {
    for (_scenario, entries) in scenarios() {
        for provider in Provider::ALL {
            for pending in [PendingCalls::Drop, PendingCalls::SyntheticError] {
                for reasoning_content in [false, true] {
                    let options = options(pending).openai_reasoning_content(reasoning_content);
                    let request = render(provider, &entries, &options).expect("renders");
                    assert_render_json_matches(provider, &entries, &options, &request);
                }
            }
        }
    }
}

#[test]
fn golden_scenarios_survive_a_trip_through_each_provider() {
    // Entries from every provider's messages render again to the same
    // messages (the fixed point the property test checks at random).
    for (scenario, entries) in scenarios() {
        for provider in Provider::ALL {
            for pending in [PendingCalls::Drop, PendingCalls::SyntheticError] {
                let first = rendered(provider, &entries, &options(pending));
                let back =
                    to_entries(provider, &first.body(), EVALUATION, 0, Timestamp(0)).unwrap();
                let second = rendered(provider, &back, &options(pending));
                assert_eq!(second.body(), first.body(), "{scenario} via {provider}");
            }
        }
    }
}
