//! Live calls to the real providers, one short conversation each: a
//! streamed text turn, then a tool-call turn whose result is sent back for
//! a final answer, all through [`HttpClient`].
//!
//! Each runs only when its provider's key variable is set (Ollama: when
//! `OLLAMA_HOST` is set or `CONVLOG_LIVE_OLLAMA=1`); otherwise it prints
//! `skipped: OPENAI_API_KEY is not set` (etc.) and passes. Models come from
//! `CONVLOG_LIVE_*_MODEL`, defaulting to the constants below.
//!
//! ```text
//! OPENAI_API_KEY=... cargo test -p convlog-agent --test live -- --nocapture
//! ```

mod support;

use std::time::Duration;

use convlog::{ConversationEntry, Role};
use convlog_agent::client::config::{
    ANTHROPIC_API_KEY_VAR, GEMINI_API_KEY_VARS, OLLAMA_HOST_VAR, OPENAI_API_KEY_VAR,
};
use convlog_agent::{ApiKind, ClientConfig, StreamDelta, ToolSpec};
use serde_json::{json, Value};

/// OpenAI Chat and Responses model unless `CONVLOG_LIVE_OPENAI_MODEL` is set.
const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
/// Anthropic model unless `CONVLOG_LIVE_ANTHROPIC_MODEL` is set.
const DEFAULT_ANTHROPIC_MODEL: &str = "claude-haiku-4-5";
/// Gemini model unless `CONVLOG_LIVE_GEMINI_MODEL` is set.
const DEFAULT_GEMINI_MODEL: &str = "gemini-2.5-flash";
/// Ollama model (one that can call tools) unless `CONVLOG_LIVE_OLLAMA_MODEL`
/// is set.
const DEFAULT_OLLAMA_MODEL: &str = "llama3.2";

/// Set to `1` to run the Ollama test at the default address without
/// `OLLAMA_HOST`.
const LIVE_OLLAMA_VAR: &str = "CONVLOG_LIVE_OLLAMA";

/// Output tokens per live call: the answers are short, but thinking models
/// (Gemini 2.5 thinks by default) spend output tokens on reasoning first,
/// and a reply cut off inside its reasoning has no answer.
const LIVE_MAX_TOKENS: u32 = 2048;
/// Per-request timeout of a live call.
const LIVE_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

/// The model from `variable`, else `default`.
fn model(variable: &str, default: &str) -> String {
    env(variable).unwrap_or_else(|| default.to_string())
}

/// A config for `api` and `model` (key and address from the environment),
/// or `None` after printing why the test is skipped.
fn live_config(api: ApiKind, model: String, keys: &[&str]) -> Option<ClientConfig> {
    if !keys.iter().any(|name| env(name).is_some()) {
        println!("skipped: {} is not set", keys.join(" or "));
        return None;
    }
    Some(
        ClientConfig::new(api, model)
            .max_tokens(Some(LIVE_MAX_TOKENS))
            .request_timeout(LIVE_REQUEST_TIMEOUT),
    )
}

fn weather_tool() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "get_weather".into(),
        description: "The current weather of a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string",
            "description": "The city name"}}, "required": ["city"]}),
    }]
}

/// A streamed text turn, then a tool call answered and a final answer.
async fn converse(config: ClientConfig) {
    println!(
        "live: {:?} {} at {}",
        config.api, config.model, config.base_url
    );
    let entries = vec![
        ConversationEntry::new(
            "live",
            0,
            Role::System,
            Some("You are a terse assistant.".into()),
        ),
        ConversationEntry::new(
            "live",
            1,
            Role::User,
            Some("Reply with the single word: pong".into()),
        ),
    ];
    let deltas = support::Deltas::default();
    let reply = support::complete(config.clone(), &entries, &[], Some(&deltas))
        .await
        .unwrap_or_else(|error| panic!("the text turn failed: {error}"));
    let text = reply.entry.content.clone().unwrap_or_default();
    println!("text turn: {text:?}, usage {:?}", reply.usage);
    assert!(text.to_lowercase().contains("pong"), "{:?}", reply.entry);
    let streamed: String = deltas
        .taken()
        .iter()
        .filter_map(|delta| match delta {
            StreamDelta::Text(piece) => Some(piece.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, text, "the deltas make up the recorded text");

    let tools = weather_tool();
    let entries = vec![
        entries[0].clone(),
        ConversationEntry::new(
            "live",
            1,
            Role::User,
            Some("What is the weather in Paris? Use the get_weather tool.".into()),
        ),
    ];
    let reply = support::complete(config.clone(), &entries, &tools, None)
        .await
        .unwrap_or_else(|error| panic!("the tool-call turn failed: {error}"));
    println!("tool turn: {:?}", reply.entry.tool_calls);
    let call = reply
        .entry
        .tool_calls
        .first()
        .unwrap_or_else(|| panic!("no tool call: {:?}", reply.entry));
    assert_eq!(call.name, "get_weather");
    let arguments: Value = serde_json::from_str(&call.arguments).expect("JSON arguments");
    assert!(
        arguments["city"]
            .as_str()
            .is_some_and(|city| city.to_lowercase().contains("paris")),
        "{arguments}"
    );
    let next = support::continued(&entries, &reply, |_| "Sunny, 18 degrees Celsius.".into());
    let answer = support::complete(config, &next, &tools, None)
        .await
        .unwrap_or_else(|error| panic!("the answer after the tool result failed: {error}"));
    let text = answer.entry.content.clone().unwrap_or_default();
    println!("final answer: {text:?}");
    assert!(!text.trim().is_empty(), "{:?}", answer.entry);
}

#[tokio::test]
async fn openai_chat() {
    let model = model("CONVLOG_LIVE_OPENAI_MODEL", DEFAULT_OPENAI_MODEL);
    if let Some(config) = live_config(ApiKind::OpenAiChat, model, &[OPENAI_API_KEY_VAR]) {
        converse(config).await;
    }
}

#[tokio::test]
async fn openai_responses() {
    let model = model("CONVLOG_LIVE_OPENAI_MODEL", DEFAULT_OPENAI_MODEL);
    if let Some(config) = live_config(ApiKind::OpenAiResponses, model, &[OPENAI_API_KEY_VAR]) {
        converse(config).await;
    }
}

#[tokio::test]
async fn anthropic() {
    let model = model("CONVLOG_LIVE_ANTHROPIC_MODEL", DEFAULT_ANTHROPIC_MODEL);
    if let Some(config) = live_config(ApiKind::Anthropic, model, &[ANTHROPIC_API_KEY_VAR]) {
        converse(config).await;
    }
}

#[tokio::test]
async fn gemini() {
    let model = model("CONVLOG_LIVE_GEMINI_MODEL", DEFAULT_GEMINI_MODEL);
    if let Some(config) = live_config(ApiKind::Gemini, model, &GEMINI_API_KEY_VARS) {
        converse(config).await;
    }
}

#[tokio::test]
async fn ollama() {
    if env(OLLAMA_HOST_VAR).is_none() && env(LIVE_OLLAMA_VAR).as_deref() != Some("1") {
        println!("skipped: neither {OLLAMA_HOST_VAR} nor {LIVE_OLLAMA_VAR}=1 is set");
        return;
    }
    let model = model("CONVLOG_LIVE_OLLAMA_MODEL", DEFAULT_OLLAMA_MODEL);
    let config = ClientConfig::new(ApiKind::Ollama, model)
        .max_tokens(Some(LIVE_MAX_TOKENS))
        .request_timeout(LIVE_REQUEST_TIMEOUT);
    converse(config).await;
}
