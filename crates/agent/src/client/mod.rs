//! Model clients: one request to a provider's HTTP API, its reply as a
//! neutral assistant entry, streamed deltas delivered as they arrive.
//!
//! Requests are built by convlog's provider mappers ([`convlog::render`]);
//! replies are read back by them ([`convlog::ingest`]). [`HttpClient`] speaks
//! every wire format; [`ModelClient`] is the seam the runner calls, so a host
//! (or a test) can put its own model behind it.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use convlog::{ConversationEntry, Provider, RenderOptions};
use serde_json::Value;

use crate::tools::ToolSpec;

mod anthropic;
pub mod config;
mod framing;
mod gemini;
mod http;
mod ollama;
mod openai;
mod reply;
mod responses;
mod retry;
pub(crate) mod wire;
mod wire_support;

pub use http::HttpClient;

/// The request body [`HttpClient`] sends for `request` under `config`, as
/// the bytes sent (`stream` asks for a streamed answer). For a host that
/// sends requests its own way, and for measuring a client's CPU work.
pub fn request_body(
    config: &ClientConfig,
    request: &ModelRequest<'_>,
    stream: bool,
) -> Result<Vec<u8>, ModelError> {
    wire::wire_for(&config.api).body_bytes(config, request, stream)
}

/// A whole (non-streamed) answer of `api` read as [`HttpClient`] reads a
/// 2xx body: one assistant entry (placeholder evaluation id and sequence),
/// its finish reason and usage. A provider error inside the body is a
/// [`ModelErrorKind::Status`] with status 0.
pub fn read_reply(api: &ApiKind, body: &[u8]) -> Result<ModelReply, ModelError> {
    wire::wire_for(api).parse_bytes(body)
}

/// A boxed future that can move between threads.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The wire format an endpoint speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiKind {
    /// OpenAI Chat Completions (`POST {base}/chat/completions`), strict: no
    /// field OpenAI's published request types reject.
    OpenAiChat,
    /// An OpenAI-compatible Chat Completions endpoint (vLLM, GLM, DeepSeek,
    /// Ollama's `/v1`, ...), with its dialect's extras.
    OpenAiCompatible(Dialect),
    /// OpenAI Responses (`POST {base}/responses`).
    OpenAiResponses,
    /// Anthropic Messages (`POST {base}/v1/messages`).
    Anthropic,
    /// Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
    /// Ollama's native `POST {base}/api/chat` (NDJSON streaming).
    Ollama,
}

impl ApiKind {
    /// The mapper whose message shapes this wire format uses.
    pub fn provider(&self) -> Provider {
        match self {
            ApiKind::OpenAiChat | ApiKind::OpenAiCompatible(_) => Provider::OpenAiChat,
            ApiKind::OpenAiResponses => Provider::OpenAiResponses,
            ApiKind::Anthropic => Provider::Anthropic,
            ApiKind::Gemini => Provider::Gemini,
            ApiKind::Ollama => Provider::Ollama,
        }
    }
}

/// What an OpenAI-compatible server accepts beyond OpenAI's own fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dialect {
    /// Send the assistant's reasoning back as `reasoning_content` (DeepSeek,
    /// GLM, vLLM reasoning parsers accept or require it).
    pub reasoning_content: bool,
    /// Top-level fields merged into every request body (for example GLM's
    /// `{"thinking": {"type": "enabled"}}`).
    pub extra_body: BTreeMap<String, Value>,
}

/// How a client reaches one model. Its `Debug` form never shows the key.
#[derive(Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// The wire format.
    pub api: ApiKind,
    /// The model name sent in the request.
    pub model: String,
    /// Base URL (`https://api.openai.com/v1`, `http://127.0.0.1:11434`, ...);
    /// each kind has a default.
    pub base_url: String,
    /// The key; `None` sends no credentials (local servers).
    pub api_key: Option<String>,
    /// Extra headers sent with every request (after the defaults, so they
    /// win).
    pub headers: Vec<(String, String)>,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout (for a stream: the longest silence between two
    /// chunks).
    pub request_timeout: Duration,
    /// Attempts per call, the first included (retries on 429, 5xx,
    /// timeouts and connection failures; never on other 4xx).
    pub max_attempts: u32,
    /// First backoff; doubled per retry, capped by `max_backoff`; a
    /// `Retry-After` header takes precedence (capped as well).
    pub initial_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// Upper bound on output tokens, when set (Anthropic requires one: its
    /// default is used when unset).
    pub max_tokens: Option<u32>,
    /// Sampling temperature, when set.
    pub temperature: Option<f64>,
    /// Ask the model to reason: a budget in tokens where the API takes one
    /// (Anthropic thinking, Gemini thinking budget), an effort otherwise.
    pub reasoning: Option<Reasoning>,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        formatter
            .debug_struct("ClientConfig")
            .field("api", &self.api)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("headers", &header_names)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_attempts", &self.max_attempts)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("reasoning", &self.reasoning)
            .finish()
    }
}

/// Reasoning requested from the model.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reasoning {
    /// A token budget (Anthropic `thinking.budget_tokens`, Gemini
    /// `thinkingConfig.thinkingBudget`).
    Budget(u32),
    /// An effort (`low`, `medium`, `high`; OpenAI `reasoning_effort` /
    /// Responses `reasoning.effort`).
    Effort(String),
}

/// One call to the model: the (curated) entries to show it, the tools it
/// may call, how to render.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The entries, in conversation order, system entry first.
    pub entries: &'a [ConversationEntry],
    /// The tools offered.
    pub tools: &'a [ToolSpec],
    /// Render options (default system prompt, display name, reasoning).
    pub render: &'a RenderOptions,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// One assistant entry (text, reasoning, tool calls, finish reason,
    /// provider extras in metadata). Its evaluation id, sequence and turn
    /// are placeholders: the runner places it.
    pub entry: ConversationEntry,
    /// Token usage, when the provider reported it.
    pub usage: Option<Usage>,
}

/// Token counts a provider reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub input_tokens: u64,
    /// Completion (output) tokens.
    pub output_tokens: u64,
}

/// A piece of a streamed reply, delivered as it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamDelta {
    /// More answer text.
    Text(String),
    /// More reasoning text.
    Reasoning(String),
    /// A fragment of tool call number `index` of this reply: its id and
    /// name when first seen, then pieces of its JSON arguments.
    ToolCall {
        /// Position of the call in the reply.
        index: usize,
        /// The call id, when this fragment carries it.
        id: Option<String>,
        /// The tool name, when this fragment carries it.
        name: Option<String>,
        /// A piece of the arguments.
        arguments: String,
    },
}

/// Receives streamed deltas.
pub type DeltaSink<'a> = &'a (dyn Fn(&StreamDelta) + Send + Sync);

/// Why a model call failed, after its retries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// The provider answered with an error status; `body` is its body,
    /// verbatim.
    Status {
        /// The HTTP status.
        status: u16,
        /// The response body as sent.
        body: String,
    },
    /// No answer (or a silent stream) within the timeout.
    Timeout,
    /// The connection failed.
    Connect(String),
    /// The answer could not be read as the wire format says.
    Malformed(String),
    /// The request could not be built (bad configuration, a history the
    /// mappers refuse).
    Request(String),
}

/// A failed model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelError {
    /// What went wrong on the last attempt.
    pub kind: ModelErrorKind,
    /// Attempts made.
    pub attempts: u32,
    /// The URL called.
    pub url: String,
}

impl fmt::Display for ModelError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attempts = self.attempts;
        let url = &self.url;
        match &self.kind {
            ModelErrorKind::Status { status, body } => write!(
                formatter,
                "{url} answered HTTP {status} (after {attempts} attempt(s)): {body}"
            ),
            ModelErrorKind::Timeout => write!(
                formatter,
                "{url} did not answer in time (after {attempts} attempt(s))"
            ),
            ModelErrorKind::Connect(reason) => write!(
                formatter,
                "could not connect to {url} (after {attempts} attempt(s)): {reason}"
            ),
            ModelErrorKind::Malformed(reason) => {
                write!(
                    formatter,
                    "{url} sent an answer that cannot be read: {reason}"
                )
            }
            ModelErrorKind::Request(reason) => {
                write!(formatter, "the request to {url} cannot be built: {reason}")
            }
        }
    }
}

impl std::error::Error for ModelError {}

/// A model the runner can call. [`HttpClient`] is the real one; tests and
/// hosts may script their own.
pub trait ModelClient: Send + Sync {
    /// The mapper whose formats this client speaks (for recording which
    /// provider answered and for rendering).
    fn provider(&self) -> Provider;

    /// A short description for records and errors (`openai gpt-4o at
    /// https://...`).
    fn describe(&self) -> String;

    /// Calls the model once. With a `sink`, the reply is streamed and each
    /// delta handed to it as it arrives; the returned reply is the
    /// assembled whole either way.
    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: Option<DeltaSink<'a>>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;
}
