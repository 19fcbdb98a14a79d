//! The OpenAI Responses wire format.

use serde_json::Value;

use super::wire::{Framing, StreamAssembler, Wire};
use super::{ClientConfig, ModelError, ModelReply, ModelRequest};

/// OpenAI Responses.
pub(crate) struct ResponsesWire;

impl Wire for ResponsesWire {
    fn url(&self, _config: &ClientConfig, _stream: bool) -> String {
        unimplemented!("ResponsesWire::url")
    }

    fn headers(&self, _config: &ClientConfig) -> Vec<(String, String)> {
        unimplemented!("ResponsesWire::headers")
    }

    fn body(
        &self,
        _config: &ClientConfig,
        _request: &ModelRequest<'_>,
        _stream: bool,
    ) -> Result<Value, ModelError> {
        unimplemented!("ResponsesWire::body")
    }

    fn parse(&self, _body: &Value) -> Result<ModelReply, ModelError> {
        unimplemented!("ResponsesWire::parse")
    }

    fn framing(&self) -> Framing {
        unimplemented!("ResponsesWire::framing")
    }

    fn assembler(&self) -> Box<dyn StreamAssembler> {
        unimplemented!("ResponsesWire::assembler")
    }
}
