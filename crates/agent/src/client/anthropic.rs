//! The Anthropic Messages wire format.

use serde_json::Value;

use super::wire::{Framing, StreamAssembler, Wire};
use super::{ClientConfig, ModelError, ModelReply, ModelRequest};

/// Anthropic Messages.
pub(crate) struct AnthropicWire;

impl Wire for AnthropicWire {
    fn url(&self, _config: &ClientConfig, _stream: bool) -> String {
        unimplemented!("AnthropicWire::url")
    }

    fn headers(&self, _config: &ClientConfig) -> Vec<(String, String)> {
        unimplemented!("AnthropicWire::headers")
    }

    fn body(
        &self,
        _config: &ClientConfig,
        _request: &ModelRequest<'_>,
        _stream: bool,
    ) -> Result<Value, ModelError> {
        unimplemented!("AnthropicWire::body")
    }

    fn parse(&self, _body: &Value) -> Result<ModelReply, ModelError> {
        unimplemented!("AnthropicWire::parse")
    }

    fn framing(&self) -> Framing {
        unimplemented!("AnthropicWire::framing")
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        unimplemented!("AnthropicWire::assembler")
    }
}
