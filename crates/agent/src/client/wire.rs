//! The seam between the HTTP driver ([`super::HttpClient`]) and each wire
//! format: how to address, build, read and stream one provider's API.
//! A wire format is pure: no I/O here, so each is tested on recorded bodies.

use serde_json::Value;

use super::reply::{malformed, request_error};
use super::{ClientConfig, ModelError, ModelReply, ModelRequest, StreamDelta};

/// One unit of a streamed response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A Server-Sent Event: its `event:` name (if any) and its `data:`
    /// lines joined with `\n`.
    Sse {
        /// The event name.
        event: Option<String>,
        /// The data.
        data: String,
    },
    /// One line of a newline-delimited JSON stream (Ollama).
    Line(String),
}

/// How a wire format frames a streamed body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `text/event-stream`.
    Sse,
    /// `application/x-ndjson`.
    Ndjson,
}

/// One provider API's wire format.
pub(crate) trait Wire: Send + Sync {
    /// The URL to POST to.
    fn url(&self, config: &ClientConfig, stream: bool) -> String;

    /// Headers for authentication and versioning (the config's own extra
    /// headers are added by the driver after these).
    fn headers(&self, config: &ClientConfig) -> Vec<(String, String)>;

    /// The request body: rendered messages plus model, tools, settings and
    /// the stream flag.
    fn body(
        &self,
        config: &ClientConfig,
        request: &ModelRequest<'_>,
        stream: bool,
    ) -> Result<Value, ModelError>;

    /// The request body as the bytes sent: by default [`Wire::body`]
    /// serialised; a format may write them directly (the same bytes) to
    /// skip building the value tree.
    fn body_bytes(
        &self,
        config: &ClientConfig,
        request: &ModelRequest<'_>,
        stream: bool,
    ) -> Result<Vec<u8>, ModelError> {
        let body = self.body(config, request, stream)?;
        serde_json::to_vec(&body)
            .map_err(|json| request_error(format!("the body cannot be written: {json}")))
    }

    /// Reads a whole (non-streamed) response body.
    fn parse(&self, body: &Value) -> Result<ModelReply, ModelError>;

    /// Reads a whole (non-streamed) response body from its bytes: by
    /// default parsed as JSON and read by [`Wire::parse`]; a format may
    /// read them directly (the same reply) to skip building the value tree.
    fn parse_bytes(&self, bytes: &[u8]) -> Result<ModelReply, ModelError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|error| {
            malformed(format!(
                "the body is not JSON ({error}): {}",
                super::http::excerpt(bytes)
            ))
        })?;
        self.parse(&value)
    }

    /// How a streamed body is framed.
    fn framing(&self) -> Framing;

    /// A fresh assembler for one streamed response.
    fn assembler(&self) -> Box<dyn StreamAssembler>;
}

/// Assembles one streamed response from its frames.
pub(crate) trait StreamAssembler: Send {
    /// Takes one frame; pushes the deltas it carried to `out`. Returns
    /// `true` when the frame ends the stream (`[DONE]`, `message_stop`,
    /// `"done": true`).
    fn push(&mut self, frame: &Frame, out: &mut Vec<StreamDelta>) -> Result<bool, ModelError>;

    /// The assembled reply, once the stream ended.
    fn finish(self: Box<Self>) -> Result<ModelReply, ModelError>;
}

/// The wire format of `api`.
pub(crate) fn wire_for(api: &super::ApiKind) -> Box<dyn Wire> {
    use super::ApiKind;
    match api {
        ApiKind::OpenAiChat | ApiKind::OpenAiCompatible(_) => {
            Box::new(super::openai::OpenAiChatWire)
        }
        ApiKind::OpenAiResponses => Box::new(super::responses::ResponsesWire),
        ApiKind::Anthropic => Box::new(super::anthropic::AnthropicWire),
        ApiKind::Gemini => Box::new(super::gemini::GeminiWire),
        ApiKind::Ollama => Box::new(super::ollama::OllamaWire),
    }
}
