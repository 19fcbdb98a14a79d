//! The HTTP driver: sends a wire format's request with timeouts and
//! retries, reads whole or streamed answers.

use convlog::Provider;

use super::wire::{wire_for, Wire};
use super::{
    BoxFuture, ClientConfig, DeltaSink, ModelClient, ModelError, ModelReply, ModelRequest,
};

/// A model behind a provider's HTTP API.
pub struct HttpClient {
    config: ClientConfig,
    wire: Box<dyn Wire>,
}

impl HttpClient {
    /// A client for `config`.
    pub fn new(config: ClientConfig) -> HttpClient {
        let wire = wire_for(&config.api);
        HttpClient { config, wire }
    }
}

impl ModelClient for HttpClient {
    fn provider(&self) -> Provider {
        self.config.api.provider()
    }

    fn describe(&self) -> String {
        format!(
            "{} {} at {}",
            self.provider(),
            self.config.model,
            self.config.base_url
        )
    }

    fn complete<'a>(
        &'a self,
        _request: ModelRequest<'a>,
        _sink: Option<DeltaSink<'a>>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        let _ = &self.wire;
        unimplemented!("HttpClient::complete")
    }
}
