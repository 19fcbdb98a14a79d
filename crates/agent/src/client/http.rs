//! The HTTP driver: sends a wire format's request with timeouts and
//! retries, reads whole or streamed answers.
//!
//! One call: [`ClientConfig::check`] (a missing key or base URL fails here,
//! before anything is sent), the wire's body, its headers then the config's
//! extra headers (which win), then up to `max_attempts` POSTs. An attempt
//! that gets 429 or 5xx, times out or cannot connect is retried after a
//! backoff (`Retry-After` first, capped by `max_backoff`); any other 4xx is
//! final, its body kept verbatim in [`ModelErrorKind::Status`].
//!
//! Without a sink the whole body must arrive within `request_timeout`.
//! With one, the body is split into frames ([`super::framing`]) and fed to
//! the wire's assembler; each delta goes to the sink as it arrives, and
//! `request_timeout` bounds the wait for the response head and each silence
//! between two chunks. Once a stream has started (a 2xx head) it is not
//! retried: deltas may already be with the caller. A stream that ends
//! without its end frame is [`ModelErrorKind::Malformed`].
//!
//! Wire formats report errors with an empty `url` and `attempts` 0; the
//! driver fills both in. A provider error event inside a stream is reported
//! by the wire as [`ModelErrorKind::Status`] with status 0 and the event's
//! data verbatim; the driver puts in the stream's HTTP status (for a whole
//! 2xx body holding an error object, the body as received).

use std::sync::Once;
use std::time::{Duration, SystemTime};

use convlog::Provider;
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use tokio::time::{timeout, timeout_at, Instant};

use super::framing::FrameDecoder;
use super::retry::{backoff, parse_retry_after, retryable_status};
use super::wire::{wire_for, Frame, StreamAssembler, Wire};
use super::{
    BoxFuture, ClientConfig, DeltaSink, ModelClient, ModelError, ModelErrorKind, ModelReply,
    ModelRequest, StreamDelta,
};

/// How much of an unreadable body a [`ModelErrorKind::Malformed`] quotes.
pub(crate) const BODY_EXCERPT_CHARS: usize = 2000;

/// A model behind a provider's HTTP API.
pub struct HttpClient {
    config: ClientConfig,
    wire: Box<dyn Wire>,
    /// The connection pool, or why it could not be built (reported at the
    /// first call).
    http: Result<reqwest::Client, String>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("HttpClient")
            .field("api", &self.config.api)
            .field("model", &self.config.model)
            .field("base_url", &self.config.base_url)
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client for `config`, with its own connection pool. Never fails:
    /// a config that cannot make a request (see [`ClientConfig::check`])
    /// fails each call with [`ModelErrorKind::Request`].
    pub fn new(config: ClientConfig) -> HttpClient {
        install_tls_provider();
        let wire = wire_for(&config.api);
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|error| format!("the HTTP client cannot be built: {}", chain(&error)));
        HttpClient { config, wire, http }
    }

    /// The config this client was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    async fn call(
        &self,
        request: ModelRequest<'_>,
        sink: Option<DeltaSink<'_>>,
    ) -> Result<ModelReply, ModelError> {
        let stream = sink.is_some();
        let url = self.wire.url(&self.config, stream);
        let error = |kind, attempts| ModelError {
            kind,
            attempts,
            url: url.clone(),
        };
        self.config
            .check()
            .map_err(|reason| error(ModelErrorKind::Request(reason), 0))?;
        let http = self
            .http
            .as_ref()
            .map_err(|reason| error(ModelErrorKind::Request(reason.clone()), 0))?;
        let body = self
            .wire
            .body_bytes(&self.config, &request, stream)
            .map_err(|wire_error| error(wire_error.kind, 0))?;
        let headers = self
            .headers()
            .map_err(|reason| error(ModelErrorKind::Request(reason), 0))?;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let failure = match self.attempt(http, &url, &headers, &body, sink).await {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            match failure.retry {
                Retry::After(retry_after) if attempts < self.config.max_attempts => {
                    let wait = backoff(&self.config, attempts, retry_after);
                    tracing::debug!(%url, attempts, ?wait, kind = ?failure.kind, "retrying a model call");
                    tokio::time::sleep(wait).await;
                }
                _ => return Err(error(failure.kind, attempts)),
            }
        }
    }

    /// The wire's headers, then the config's extra headers (replacing a
    /// default of the same name), after `Content-Type: application/json`.
    fn headers(&self) -> Result<HeaderMap, String> {
        let mut map = HeaderMap::new();
        map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let wire_headers = self.wire.headers(&self.config);
        for (name, value) in wire_headers.iter().chain(&self.config.headers) {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a valid header name"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("the value of header {name} is not a valid header value"))?;
            map.insert(header, value);
        }
        Ok(map)
    }

    /// One POST and its answer.
    async fn attempt(
        &self,
        http: &reqwest::Client,
        url: &str,
        headers: &HeaderMap,
        body: &[u8],
        sink: Option<DeltaSink<'_>>,
    ) -> Result<ModelReply, Failure> {
        let deadline = Instant::now() + self.config.request_timeout;
        let send = http
            .post(url)
            .headers(headers.clone())
            .body(body.to_vec())
            .send();
        let response = match timeout_at(deadline, send).await {
            Err(_) => return Err(Failure::retry(ModelErrorKind::Timeout, None)),
            Ok(Err(error)) => return Err(Failure::from_reqwest(&error)),
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        if !response.status().is_success() {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| parse_retry_after(value, SystemTime::now()));
            let body = match timeout_at(deadline, response.bytes()).await {
                Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
                Ok(Err(error)) => format!("(the error body could not be read: {})", chain(&error)),
                Err(_) => "(the error body did not arrive in time)".to_string(),
            };
            let kind = ModelErrorKind::Status { status, body };
            return Err(if retryable_status(status) {
                Failure::retry(kind, retry_after)
            } else {
                Failure::last(kind)
            });
        }
        match sink {
            Some(sink) => self.stream(response, status, sink).await,
            None => {
                let bytes = match timeout_at(deadline, response.bytes()).await {
                    Err(_) => return Err(Failure::retry(ModelErrorKind::Timeout, None)),
                    Ok(Err(error)) => return Err(Failure::from_reqwest(&error)),
                    Ok(Ok(bytes)) => bytes,
                };
                self.wire
                    .parse_bytes(&bytes)
                    .map_err(|error| match error.kind {
                        // A provider error in a 2xx body: the body as sent.
                        ModelErrorKind::Status { status: 0, .. } => {
                            Failure::last(ModelErrorKind::Status {
                                status,
                                body: String::from_utf8_lossy(&bytes).into_owned(),
                            })
                        }
                        _ => Failure::from_wire(error, status),
                    })
            }
        }
    }

    /// Reads a streamed answer, handing each delta to `sink`.
    async fn stream(
        &self,
        response: reqwest::Response,
        status: u16,
        sink: DeltaSink<'_>,
    ) -> Result<ModelReply, Failure> {
        let mut decoder = FrameDecoder::new(self.wire.framing());
        let mut assembler = self.wire.assembler();
        let mut frames = Vec::new();
        let mut body = response.bytes_stream();
        let (mut bytes_read, mut frames_read) = (0usize, 0usize);
        let malformed = |reason: String| Failure::last(ModelErrorKind::Malformed(reason));
        loop {
            let chunk = match timeout(self.config.request_timeout, body.next()).await {
                Err(_) => return Err(Failure::last(ModelErrorKind::Timeout)),
                Ok(None) => break,
                Ok(Some(Err(error))) => {
                    return Err(Failure::last(ModelErrorKind::Connect(format!(
                        "the stream broke after {bytes_read} bytes: {}",
                        chain(&error)
                    ))))
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            bytes_read += chunk.len();
            decoder.push(&chunk, &mut frames).map_err(malformed)?;
            frames_read += frames.len();
            if feed(&mut *assembler, &mut frames, sink, status)? {
                return assembler
                    .finish()
                    .map_err(|error| Failure::from_wire(error, status));
            }
        }
        decoder.finish(&mut frames).map_err(malformed)?;
        frames_read += frames.len();
        if feed(&mut *assembler, &mut frames, sink, status)? {
            return assembler
                .finish()
                .map_err(|error| Failure::from_wire(error, status));
        }
        Err(malformed(format!(
            "the stream ended before its end frame ({bytes_read} bytes, {frames_read} frames read)"
        )))
    }
}

/// Feeds `frames` to the assembler, each delta to the sink; `true` at the
/// end frame (frames after it are ignored).
fn feed(
    assembler: &mut dyn StreamAssembler,
    frames: &mut Vec<Frame>,
    sink: DeltaSink<'_>,
    status: u16,
) -> Result<bool, Failure> {
    let mut deltas: Vec<StreamDelta> = Vec::new();
    for frame in frames.drain(..) {
        let end = assembler
            .push(&frame, &mut deltas)
            .map_err(|error| Failure::from_wire(error, status))?;
        for delta in deltas.drain(..) {
            sink(&delta);
        }
        if end {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether (and when) a failed attempt may be retried.
#[derive(Debug)]
enum Retry {
    /// Final.
    No,
    /// Retry, after the server's `Retry-After` when it sent one.
    After(Option<Duration>),
}

/// A failed attempt.
#[derive(Debug)]
struct Failure {
    kind: ModelErrorKind,
    retry: Retry,
}

impl Failure {
    fn retry(kind: ModelErrorKind, retry_after: Option<Duration>) -> Failure {
        Failure {
            kind,
            retry: Retry::After(retry_after),
        }
    }

    fn last(kind: ModelErrorKind) -> Failure {
        Failure {
            kind,
            retry: Retry::No,
        }
    }

    /// A transport error: timeouts and connection failures are retried,
    /// a request that cannot be built is not.
    fn from_reqwest(error: &reqwest::Error) -> Failure {
        if error.is_timeout() {
            Failure::retry(ModelErrorKind::Timeout, None)
        } else if error.is_builder() {
            Failure::last(ModelErrorKind::Request(chain(error)))
        } else {
            Failure::retry(ModelErrorKind::Connect(chain(error)), None)
        }
    }

    /// A wire format's error; a provider error event (status 0) gets the
    /// stream's HTTP status.
    fn from_wire(error: ModelError, http_status: u16) -> Failure {
        let kind = match error.kind {
            ModelErrorKind::Status { status: 0, body } => ModelErrorKind::Status {
                status: http_status,
                body,
            },
            kind => kind,
        };
        Failure::last(kind)
    }
}

/// An error with its sources (reqwest's own message is terse).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The start of a body, for error messages.
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(BODY_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}... ({} bytes)", &text[..cut], bytes.len()),
        None if text.is_empty() => "(empty body)".to_string(),
        None => text.into_owned(),
    }
}

/// Installs rustls's ring provider as the process default, once (reqwest is
/// built without a provider of its own). A provider installed before, by
/// the host, is kept.
fn install_tls_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
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
        request: ModelRequest<'a>,
        sink: Option<DeltaSink<'a>>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.call(request, sink))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ApiKind, ModelRequest};

    #[tokio::test]
    async fn https_clients_build_and_fail_cleanly() {
        // The TLS provider is in place: building a client and calling an
        // https URL (nothing listens on port 9 of loopback) gives a
        // connection error, not a panic.
        let config = ClientConfig::new(ApiKind::OpenAiChat, "m")
            .base_url("https://127.0.0.1:9/v1")
            .api_key(Some("k".into()))
            .max_attempts(1);
        let client = HttpClient::new(config);
        assert!(client.http.is_ok(), "{:?}", client.http.as_ref().err());
        let render = convlog::RenderOptions::new();
        let request = ModelRequest {
            entries: &[],
            tools: &[],
            render: &render,
        };
        let error = client.complete(request, None).await.unwrap_err();
        assert!(matches!(error.kind, ModelErrorKind::Connect(_)), "{error}");
        assert_eq!(error.attempts, 1);
        assert_eq!(error.url, "https://127.0.0.1:9/v1/chat/completions");
    }

    #[test]
    fn excerpts_are_bounded() {
        assert_eq!(excerpt(b""), "(empty body)");
        assert_eq!(excerpt(b"<html>"), "<html>");
        let long = "x".repeat(BODY_EXCERPT_CHARS + 10);
        let cut = excerpt(long.as_bytes());
        assert!(cut.ends_with(&format!("... ({} bytes)", long.len())));
    }
}
