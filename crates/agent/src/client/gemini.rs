//! The Gemini generateContent / streamGenerateContent wire format.

use serde_json::Value;

use super::wire::{Framing, StreamAssembler, Wire};
use super::{ClientConfig, ModelError, ModelReply, ModelRequest};

/// Gemini generateContent / streamGenerateContent.
pub(crate) struct GeminiWire;

impl Wire for GeminiWire {
    fn url(&self, _config: &ClientConfig, _stream: bool) -> String {
        unimplemented!("GeminiWire::url")
    }

    fn headers(&self, _config: &ClientConfig) -> Vec<(String, String)> {
        unimplemented!("GeminiWire::headers")
    }

    fn body(
        &self,
        _config: &ClientConfig,
        _request: &ModelRequest<'_>,
        _stream: bool,
    ) -> Result<Value, ModelError> {
        unimplemented!("GeminiWire::body")
    }

    fn parse(&self, _body: &Value) -> Result<ModelReply, ModelError> {
        unimplemented!("GeminiWire::parse")
    }

    fn framing(&self) -> Framing {
        unimplemented!("GeminiWire::framing")
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        unimplemented!("GeminiWire::assembler")
    }
}
