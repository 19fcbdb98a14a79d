//! Provider messages, both directions: neutral [`ConversationEntry`]s to the
//! request messages of OpenAI Chat Completions, OpenAI Responses, Anthropic
//! Messages, Google Gemini and Ollama ([`render`]), and provider messages back
//! to neutral entries ([`to_entries`]).
//!
//! Rendering never produces what a provider's API would reject: the rules of
//! each API are written as checkers in [`rules`], and the tests (golden files
//! and a property test over random conversations cut at random crash points)
//! hold every rendered request to them. `docs/providers.md` has the mapping
//! tables; in short:
//!
//! - A tool call without a recorded result (pending or running at a crash) is
//!   never sent dangling: by default it is left out of its assistant message
//!   ([`PendingCalls::Drop`]); optionally it is answered with a synthetic
//!   error result ([`PendingCalls::SyntheticError`]).
//! - Results are placed right after the assistant message holding their
//!   calls, in call order: one tool message each for OpenAI and Ollama, one
//!   user message of `tool_result` blocks for Anthropic, one user content of
//!   `functionResponse` parts for Gemini.
//! - Arguments that are not a JSON object are stored verbatim; where a
//!   provider needs an object they are wrapped as
//!   `{"_raw_arguments": "<the string>"}` ([`arguments_object`]).
//! - Reasoning (with its signature) is passed back where the provider
//!   accepts it; signatures only to the provider that made them.

mod anthropic;
mod build;
mod gemini;
mod json_text;
mod layout;
mod ollama;
mod openai;
mod plan;
mod responses;
pub mod rules;

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::model::{ConversationEntry, Timestamp};

pub use anthropic::tool_use_id as anthropic_tool_use_id;
pub use layout::{
    arguments_object, arguments_string, BLOCKS_KEY, GEMINI_RESPONSE_KEY, OPENAI_ROLE_KEY,
    RAW_ARGUMENTS_KEY, REASONING_MORE_KEY, REASONING_SOURCE_KEY,
};

/// Result text sent for an unfinished call (pending or running, no result)
/// under [`PendingCalls::SyntheticError`].
pub const INTERRUPTED_TEXT: &str = "tool call was interrupted before it finished";

/// Result text sent for a call whose status says completed but whose result
/// entry was never recorded (in both pending modes: the call ran, so it is
/// not unfinished).
pub const RESULT_NOT_RECORDED_TEXT: &str =
    "tool call finished but its result was not recorded before the interruption";

/// Result text for a failed call with neither a result entry nor an error text.
pub const FAILED_WITHOUT_ERROR_TEXT: &str = "tool call failed";

/// Text of the user turn inserted when an Anthropic or Gemini history would
/// otherwise start with the model's turn (both APIs want a user turn first).
pub const LEADING_USER_TEXT: &str = "(conversation continues)";

/// A provider API convlog renders for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI Chat Completions `messages`.
    OpenAiChat,
    /// OpenAI Responses `input` items.
    OpenAiResponses,
    /// Anthropic Messages `messages` and `system`.
    Anthropic,
    /// Google Gemini `contents` and `system_instruction`.
    Gemini,
    /// Ollama `/api/chat` `messages`.
    Ollama,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 5] = [
        Provider::OpenAiChat,
        Provider::OpenAiResponses,
        Provider::Anthropic,
        Provider::Gemini,
        Provider::Ollama,
    ];

    /// The name used on the command line and in metadata: `openai`,
    /// `openai-responses`, `anthropic`, `gemini`, `ollama`.
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAiChat => "openai",
            Provider::OpenAiResponses => "openai-responses",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::Ollama => "ollama",
        }
    }

    /// The request body field that holds the message list.
    pub fn messages_field(self) -> &'static str {
        match self {
            Provider::OpenAiChat | Provider::Anthropic | Provider::Ollama => "messages",
            Provider::OpenAiResponses => "input",
            Provider::Gemini => "contents",
        }
    }

    /// The request body field that holds the system prompt, for providers
    /// that keep it outside the message list.
    pub fn system_field(self) -> Option<&'static str> {
        match self {
            Provider::Anthropic => Some("system"),
            Provider::Gemini => Some("system_instruction"),
            Provider::OpenAiChat | Provider::OpenAiResponses | Provider::Ollama => None,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

impl FromStr for Provider {
    type Err = String;

    fn from_str(text: &str) -> Result<Provider, String> {
        Provider::ALL
            .into_iter()
            .find(|provider| provider.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown provider {text:?} (expected one of: openai, openai-responses, anthropic, gemini, ollama)"
                )
            })
    }
}

/// What to do with tool calls that never finished (no result entry, status
/// pending or running) — the calls a crash left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PendingCalls {
    /// Leave them out of the rebuilt assistant message (only completed calls
    /// are sent); an
    /// assistant message left with no text and no calls is left out too.
    #[default]
    Drop,
    /// Keep them and answer each with an error result ([`INTERRUPTED_TEXT`]).
    SyntheticError,
}

impl FromStr for PendingCalls {
    type Err = String;

    /// `drop`, or `error` (also `synthetic-error`), as the CLI's `--pending`.
    fn from_str(text: &str) -> Result<PendingCalls, String> {
        match text {
            "drop" => Ok(PendingCalls::Drop),
            "error" | "synthetic-error" => Ok(PendingCalls::SyntheticError),
            other => Err(format!(
                "unknown pending-call mode {other:?} (expected drop or error)"
            )),
        }
    }
}

/// A name to put into the default system prompt in place of a placeholder
/// ("You are Wolo" becomes "You are CodeHelper"). Built with
/// [`DisplayName::new`]; the fields stay public for reading.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DisplayName {
    /// The text to replace (every occurrence), e.g. `Wolo`.
    pub placeholder: String,
    /// What replaces it, e.g. `CodeHelper`.
    pub name: String,
}

impl DisplayName {
    /// Replaces every `placeholder` (e.g. `Wolo`) by `name` (e.g.
    /// `CodeHelper`).
    pub fn new(placeholder: impl Into<String>, name: impl Into<String>) -> DisplayName {
        DisplayName {
            placeholder: placeholder.into(),
            name: name.into(),
        }
    }
}

/// How [`render`] rebuilds a request: a builder, so a new option never
/// breaks a host.
///
/// Start from [`RenderOptions::new`] (the defaults) and chain a setter per
/// option, each named as the field it sets; the fields stay public for
/// reading.
///
/// ```
/// use convlog::provider::{DisplayName, PendingCalls, RenderOptions};
///
/// let options = RenderOptions::new()
///     .pending(PendingCalls::SyntheticError)
///     .default_system_prompt(Some("You are Wolo.".to_string()))
///     .display_name(Some(DisplayName::new("Wolo", "CodeHelper")));
/// assert!(options.include_reasoning);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenderOptions {
    /// Unfinished calls: dropped (default) or answered with an error.
    pub pending: PendingCalls,
    /// Injected as the system prompt when the entries hold no system entry
    /// with text.
    pub default_system_prompt: Option<String>,
    /// Replacement applied to the injected default system prompt only.
    pub display_name: Option<DisplayName>,
    /// Pass reasoning back where the provider accepts it (default true).
    pub include_reasoning: bool,
    /// OpenAI Chat only: write an assistant's reasoning text as
    /// `reasoning_content`, for OpenAI-compatible servers that accept or
    /// require it. OpenAI itself rejects the field (default false).
    pub openai_reasoning_content: bool,
}

impl Default for RenderOptions {
    fn default() -> RenderOptions {
        RenderOptions {
            pending: PendingCalls::Drop,
            default_system_prompt: None,
            display_name: None,
            include_reasoning: true,
            openai_reasoning_content: false,
        }
    }
}

impl RenderOptions {
    /// The defaults: unfinished calls dropped, no default system prompt, no
    /// display name, reasoning included.
    pub fn new() -> RenderOptions {
        RenderOptions::default()
    }

    /// Sets what happens to unfinished calls.
    pub fn pending(mut self, pending: PendingCalls) -> RenderOptions {
        self.pending = pending;
        self
    }

    /// Sets the system prompt injected when the entries hold no system
    /// entry with text.
    pub fn default_system_prompt(mut self, default_system_prompt: Option<String>) -> RenderOptions {
        self.default_system_prompt = default_system_prompt;
        self
    }

    /// Sets the replacement applied to the injected default system prompt.
    pub fn display_name(mut self, display_name: Option<DisplayName>) -> RenderOptions {
        self.display_name = display_name;
        self
    }

    /// Sets whether reasoning is passed back where the provider accepts it.
    pub fn include_reasoning(mut self, include_reasoning: bool) -> RenderOptions {
        self.include_reasoning = include_reasoning;
        self
    }

    /// Sets whether OpenAI Chat messages carry `reasoning_content` (for an
    /// OpenAI-compatible dialect that accepts it).
    pub fn openai_reasoning_content(mut self, openai_reasoning_content: bool) -> RenderOptions {
        self.openai_reasoning_content = openai_reasoning_content;
        self
    }
}

/// Why a tool result entry was left out of a rendered request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// No assistant entry of its evaluation holds the call it answers.
    NoMatchingCall,
    /// The call already has an earlier result.
    DuplicateResult,
}

/// A tool result entry that could not be placed without orphaning it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedResult {
    /// The result entry.
    pub message_id: Uuid,
    /// The call it claims to answer.
    pub call_id: Option<String>,
    /// Why it was left out.
    pub reason: SkipReason,
}

/// A rebuilt request: the message list and the top-level fields the provider
/// needs, plus a report of what the pending-call rule did.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedRequest {
    /// The provider rendered for.
    pub provider: Provider,
    /// The message list: `messages` (OpenAI Chat, Anthropic, Ollama),
    /// `input` (OpenAI Responses) or `contents` (Gemini).
    pub messages: Vec<Value>,
    /// Anthropic `system` or Gemini `system_instruction`, when there is a
    /// system prompt; always `None` for providers whose system prompt is a
    /// message.
    pub system: Option<Value>,
    /// Calls that never finished (pending or running, no result entry — the
    /// set `crate::resume` reports as unfinished), in history order:
    /// dropped under [`PendingCalls::Drop`], answered with an error under
    /// [`PendingCalls::SyntheticError`]. A resuming host re-runs these.
    pub unfinished_calls: Vec<String>,
    /// Result entries left out because they would have been orphans.
    pub skipped_results: Vec<SkippedResult>,
}

impl RenderedRequest {
    /// The request body fields as one object: `{"messages": [...]}`,
    /// `{"input": [...]}`, `{"system": ..., "messages": [...]}` or
    /// `{"system_instruction": ..., "contents": [...]}`. Merge in the model,
    /// tools and settings before sending.
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        if let (Some(field), Some(system)) = (self.provider.system_field(), &self.system) {
            body.insert(field.to_string(), system.clone());
        }
        body.insert(
            self.provider.messages_field().to_string(),
            Value::Array(self.messages.clone()),
        );
        Value::Object(body)
    }
}

/// Rebuilds `provider`'s request messages from neutral entries, given in
/// conversation order (e.g. `ConversationSlice::entries()` or one evaluation).
///
/// Render the whole history, including a new user entry, rather than
/// appending to a rendered list: Anthropic and Gemini merge consecutive
/// same-role turns, which an appended message would break.
pub fn render<'a>(
    provider: Provider,
    entries: impl IntoIterator<Item = &'a ConversationEntry>,
    options: &RenderOptions,
) -> crate::Result<RenderedRequest> {
    let entries: Vec<&ConversationEntry> = entries.into_iter().collect();
    let plan = plan::plan(&entries, options)?;
    let (messages, system) = match provider {
        Provider::OpenAiChat => (openai::render(&plan, options), None),
        Provider::OpenAiResponses => (responses::render(&plan, options), None),
        Provider::Anthropic => anthropic::render(&plan, options),
        Provider::Gemini => gemini::render(&plan, options),
        Provider::Ollama => (ollama::render(&plan, options), None),
    };
    Ok(RenderedRequest {
        provider,
        messages,
        system,
        unfinished_calls: plan.unfinished_calls,
        skipped_results: plan.skipped_results,
    })
}

/// What [`render_json`] reports beside the message list it wrote: the
/// fields of [`RenderedRequest`] other than `messages`.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedJson {
    /// The provider rendered for.
    pub provider: Provider,
    /// Anthropic `system` or Gemini `system_instruction`, as in
    /// [`RenderedRequest::system`].
    pub system: Option<Value>,
    /// As [`RenderedRequest::unfinished_calls`].
    pub unfinished_calls: Vec<String>,
    /// As [`RenderedRequest::skipped_results`].
    pub skipped_results: Vec<SkippedResult>,
}

/// Renders like [`render`], but appends the message list to `out` as
/// compact JSON: exactly the bytes `serde_json::to_vec` gives for
/// `Value::Array(render(..)?.messages)`, keys sorted as in a
/// `serde_json::Map`. For a client that sends the list in a request body,
/// this skips building the value tree (OpenAI Chat is written directly;
/// the other providers are rendered and serialised). On an error nothing
/// is written.
pub fn render_json<'a>(
    provider: Provider,
    entries: impl IntoIterator<Item = &'a ConversationEntry>,
    options: &RenderOptions,
    out: &mut Vec<u8>,
) -> crate::Result<RenderedJson> {
    let entries: Vec<&ConversationEntry> = entries.into_iter().collect();
    let plan = plan::plan(&entries, options)?;
    let serialise = |messages: Vec<Value>, out: &mut Vec<u8>| {
        serde_json::to_writer(out, &messages).expect("writing JSON to a Vec cannot fail")
    };
    let system = match provider {
        Provider::OpenAiChat => {
            openai::write(&plan, options, out);
            None
        }
        Provider::OpenAiResponses => {
            serialise(responses::render(&plan, options), out);
            None
        }
        Provider::Anthropic => {
            let (messages, system) = anthropic::render(&plan, options);
            serialise(messages, out);
            system
        }
        Provider::Gemini => {
            let (messages, system) = gemini::render(&plan, options);
            serialise(messages, out);
            system
        }
        Provider::Ollama => {
            serialise(ollama::render(&plan, options), out);
            None
        }
    };
    Ok(RenderedJson {
        provider,
        system,
        unfinished_calls: plan.unfinished_calls,
        skipped_results: plan.skipped_results,
    })
}

/// Converts provider messages to neutral entries, a whole list (or request
/// body) at a time.
///
/// `messages` is either the message list (`messages`, `input` or `contents`)
/// or a request body object holding it, whose system field (`system`,
/// `system_instruction`, `instructions`) is converted too. Entries get
/// `evaluation_id`, consecutive sequences from `first_sequence`, `created_at`
/// and fresh message ids; `turn` counts assistant entries within the list
/// (the first assistant entry and what follows it have turn 1): add the
/// evaluation's current turn if the list continues one.
///
/// A call answered within the list gets status completed or failed, as the
/// store's fold would give it; an unanswered call stays pending. Calls
/// without provider ids (Gemini without `id`, Ollama) get a generated id, and
/// their results are paired by tool name in call order.
pub fn to_entries(
    provider: Provider,
    messages: &Value,
    evaluation_id: &str,
    first_sequence: u64,
    created_at: Timestamp,
) -> crate::Result<Vec<ConversationEntry>> {
    let mut builder = build::Builder::new(provider, evaluation_id, first_sequence, created_at);
    match provider {
        Provider::OpenAiChat => openai::to_entries(messages, &mut builder)?,
        Provider::OpenAiResponses => responses::to_entries(messages, &mut builder)?,
        Provider::Anthropic => anthropic::to_entries(messages, &mut builder)?,
        Provider::Gemini => gemini::to_entries(messages, &mut builder)?,
        Provider::Ollama => ollama::to_entries(messages, &mut builder)?,
    }
    Ok(builder.finish())
}

/// Whether a text counts as content: present and not only whitespace
/// (the content requirement; Anthropic also rejects blank text blocks).
pub(crate) fn has_text(text: Option<&str>) -> bool {
    text.is_some_and(|text| !text.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for provider in Provider::ALL {
            assert_eq!(provider.name().parse::<Provider>(), Ok(provider));
        }
        assert!("openai-chat".parse::<Provider>().is_err());
        assert_eq!("drop".parse::<PendingCalls>(), Ok(PendingCalls::Drop));
        assert_eq!(
            "error".parse::<PendingCalls>(),
            Ok(PendingCalls::SyntheticError)
        );
        assert!("keep".parse::<PendingCalls>().is_err());
    }

    #[test]
    fn the_body_names_the_provider_fields() {
        let request = RenderedRequest {
            provider: Provider::Gemini,
            messages: vec![],
            system: Some(serde_json::json!({"parts": [{"text": "s"}]})),
            unfinished_calls: vec![],
            skipped_results: vec![],
        };
        assert_eq!(
            request.body(),
            serde_json::json!({"system_instruction": {"parts": [{"text": "s"}]}, "contents": []})
        );
    }
}
