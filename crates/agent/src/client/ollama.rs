//! The Ollama's native /api/chat (NDJSON streaming) wire format.

use serde_json::Value;

use super::wire::{Framing, StreamAssembler, Wire};
use super::{ClientConfig, ModelError, ModelReply, ModelRequest};

/// Ollama's native /api/chat (NDJSON streaming).
pub(crate) struct OllamaWire;

impl Wire for OllamaWire {
    fn url(&self, _config: &ClientConfig, _stream: bool) -> String {
        unimplemented!("OllamaWire::url")
    }

    fn headers(&self, _config: &ClientConfig) -> Vec<(String, String)> {
        unimplemented!("OllamaWire::headers")
    }

    fn body(
        &self,
        _config: &ClientConfig,
        _request: &ModelRequest<'_>,
        _stream: bool,
    ) -> Result<Value, ModelError> {
        unimplemented!("OllamaWire::body")
    }

    fn parse(&self, _body: &Value) -> Result<ModelReply, ModelError> {
        unimplemented!("OllamaWire::parse")
    }

    fn framing(&self) -> Framing {
        unimplemented!("OllamaWire::framing")
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        unimplemented!("OllamaWire::assembler")
    }
}
