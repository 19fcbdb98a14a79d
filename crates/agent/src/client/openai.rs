//! The OpenAI Chat Completions (strict) and OpenAI-compatible endpoints (with their dialect) wire format.

use serde_json::Value;

use super::wire::{Framing, StreamAssembler, Wire};
use super::{ClientConfig, ModelError, ModelReply, ModelRequest};

/// OpenAI Chat Completions (strict) and OpenAI-compatible endpoints (with their dialect).
pub(crate) struct OpenAiChatWire;

impl Wire for OpenAiChatWire {
    fn url(&self, _config: &ClientConfig, _stream: bool) -> String {
        unimplemented!("OpenAiChatWire::url")
    }

    fn headers(&self, _config: &ClientConfig) -> Vec<(String, String)> {
        unimplemented!("OpenAiChatWire::headers")
    }

    fn body(
        &self,
        _config: &ClientConfig,
        _request: &ModelRequest<'_>,
        _stream: bool,
    ) -> Result<Value, ModelError> {
        unimplemented!("OpenAiChatWire::body")
    }

    fn parse(&self, _body: &Value) -> Result<ModelReply, ModelError> {
        unimplemented!("OpenAiChatWire::parse")
    }

    fn framing(&self) -> Framing {
        unimplemented!("OpenAiChatWire::framing")
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        unimplemented!("OpenAiChatWire::assembler")
    }
}
