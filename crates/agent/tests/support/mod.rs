//! A fake model provider for the client and runner tests: a real HTTP/1.1
//! server on `127.0.0.1:0` (std `TcpListener`, one thread per connection)
//! that answers from a scripted queue and records every request.
//!
//! ```ignore
//! mod support;
//! use support::{FakeServer, Reply};
//!
//! let server = FakeServer::start(vec![
//!     Reply::status(429, "slow down").header("Retry-After", "0"),
//!     Reply::json(200, support::openai::completion(support::openai::text("hi"))),
//! ]);
//! // ... point a client at server.url("/v1") ...
//! assert_eq!(server.requests().len(), 2);
//! assert_eq!(server.requests()[1].json()["model"], "gpt-test");
//! ```
//!
//! Wire-format neutral: a [`Reply`] is a status, headers and a body, either
//! whole (`Content-Length`), streamed (`Transfer-Encoding: chunked`, each
//! piece written and flushed on its own, optionally stalled forever or cut
//! without the last chunk), or never answered at all ([`Reply::hang`]).
//! Each request is answered by the next reply in the queue (push more with
//! [`FakeServer::push`]); when the queue is empty the server answers 418
//! with a body saying so (not retried by the client, so a test fails fast
//! and clearly). Every response closes its connection.
//!
//! Requests are recorded (method, path, headers, body, JSON body) before
//! their reply is written, so once a client call returns, every request it
//! made is in [`FakeServer::requests`].
//!
//! Format helpers live in one submodule per wire format ([`openai`],
//! [`ollama`], [`anthropic`], [`gemini`], [`responses`]), each building
//! `serde_json::Value` bodies and [`Reply`]s with [`Reply::sse`],
//! [`Reply::typed_sse`] or [`Reply::ndjson`].
#![allow(dead_code)] // each test binary uses a different part

pub mod anthropic;
pub mod gemini;
pub mod mcp_sdk;
pub mod ollama;
pub mod openai;
pub mod responses;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use serde_json::Value;

/// The largest request body the server reads.
pub const MAX_REQUEST_BODY: usize = 64 * 1024 * 1024;

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, ...
    pub method: String,
    /// The request target (`/v1/chat/completions`).
    pub path: String,
    /// Headers in order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body as sent.
    pub body: Vec<u8>,
}

impl Recorded {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Every header named `name` (any case).
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// The body as JSON (panics, saying why, when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "request body is not JSON ({error}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// One piece of a streamed body.
#[derive(Debug, Clone)]
pub enum Piece {
    /// Bytes written (as one HTTP chunk) and flushed.
    Bytes(Vec<u8>),
    /// Nothing more is written; the connection stays open until the server
    /// is dropped (a silent stream).
    Stall,
}

/// How a reply's body is sent.
#[derive(Debug, Clone)]
pub enum Body {
    /// Whole, with `Content-Length`.
    Whole(Vec<u8>),
    /// Chunked, piece by piece; `cut` drops the connection instead of
    /// writing the final empty chunk.
    Stream {
        /// The pieces.
        pieces: Vec<Piece>,
        /// Drop the connection without ending the body.
        cut: bool,
    },
    /// No response at all: the request is read and recorded, then the
    /// connection is held open until the server is dropped.
    Hang,
}

/// A scripted response.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers (`Content-Length` / `Transfer-Encoding` are added).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Body,
}

impl Reply {
    /// `status` with a JSON body.
    pub fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: Body::Whole(body.to_string().into_bytes()),
        }
    }

    /// `status` with a plain-text body (error bodies, malformed answers).
    pub fn status(status: u16, body: impl Into<String>) -> Reply {
        Reply::raw(status, "text/plain", body.into().into_bytes())
    }

    /// `status` with `content_type` and these exact bytes.
    pub fn raw(status: u16, content_type: &str, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: Body::Whole(body),
        }
    }

    /// A 200 streamed body: `text` written in pieces of `piece_size` bytes
    /// (cut anywhere, UTF-8 characters included).
    pub fn stream(content_type: &str, text: &str, piece_size: usize) -> Reply {
        let pieces = text
            .as_bytes()
            .chunks(piece_size.max(1))
            .map(|piece| Piece::Bytes(piece.to_vec()))
            .collect();
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: Body::Stream { pieces, cut: false },
        }
    }

    /// A 200 `text/event-stream` of one `data:` event per item of `data`
    /// (each JSON value written compactly, each string as is), in pieces
    /// of `piece_size` bytes.
    pub fn sse(data: &[Value], piece_size: usize) -> Reply {
        Reply::stream("text/event-stream", &sse_text(data), piece_size)
    }

    /// A 200 `text/event-stream` of one event per item of `events`, each
    /// named by its own `type` field (`event: message_start` then `data:
    /// {...}`, as Anthropic and OpenAI Responses send them), in pieces of
    /// `piece_size` bytes.
    pub fn typed_sse(events: &[Value], piece_size: usize) -> Reply {
        let text: String = events
            .iter()
            .map(|event| match event.get("type").and_then(Value::as_str) {
                Some(name) => format!("event: {name}\ndata: {event}\n\n"),
                None => format!("data: {event}\n\n"),
            })
            .collect();
        Reply::stream("text/event-stream", &text, piece_size)
    }

    /// A 200 `application/x-ndjson` of one line per value, in pieces of
    /// `piece_size` bytes.
    pub fn ndjson(lines: &[Value], piece_size: usize) -> Reply {
        let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
        Reply::stream("application/x-ndjson", &text, piece_size)
    }

    /// Never answers.
    pub fn hang() -> Reply {
        Reply {
            status: 0,
            headers: Vec::new(),
            body: Body::Hang,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// A streamed reply that stalls (silent, connection open) after its
    /// pieces.
    pub fn then_stall(mut self) -> Reply {
        if let Body::Stream { pieces, .. } = &mut self.body {
            pieces.push(Piece::Stall);
        }
        self
    }

    /// A streamed reply whose connection is dropped after its pieces,
    /// without the chunked body's end.
    pub fn then_cut(mut self) -> Reply {
        if let Body::Stream { cut, .. } = &mut self.body {
            *cut = true;
        }
        self
    }
}

/// `text` cut every `size` characters.
pub fn pieces(text: &str, size: usize) -> Vec<String> {
    let characters: Vec<char> = text.chars().collect();
    characters
        .chunks(size.max(1))
        .map(|piece| piece.iter().collect())
        .collect()
}

/// SSE text with one `data:` event per item (JSON compact, strings as is).
pub fn sse_text(data: &[Value]) -> String {
    data.iter()
        .map(|item| match item {
            Value::String(text) => format!("data: {text}\n\n"),
            other => format!("data: {other}\n\n"),
        })
        .collect()
}

#[derive(Default)]
struct State {
    queue: VecDeque<Reply>,
    requests: Vec<Recorded>,
    stopped: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when the server stops (hanging connections end).
    stopped: Condvar,
}

/// The running server; stops (and ends hanging connections) when dropped.
pub struct FakeServer {
    address: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeServer {
    /// Starts a server answering with `replies`, in order.
    pub fn start(replies: Vec<Reply>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: replies.into(),
                ..State::default()
            }),
            stopped: Condvar::new(),
        });
        let accept_shared = Arc::clone(&shared);
        thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_shared.state.lock().unwrap().stopped {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&accept_shared);
                thread::spawn(move || serve(stream, &shared));
            }
        });
        FakeServer { address, shared }
    }

    /// `http://127.0.0.1:PORT` followed by `path` (e.g. `/v1`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Adds replies at the end of the queue.
    pub fn push(&self, reply: Reply) {
        self.shared.state.lock().unwrap().queue.push_back(reply);
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state.lock().unwrap().requests.clone()
    }

    /// Replies not used yet.
    pub fn remaining(&self) -> usize {
        self.shared.state.lock().unwrap().queue.len()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.shared.state.lock().unwrap().stopped = true;
        self.shared.stopped.notify_all();
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.address);
    }
}

/// Reads one request, records it, writes the next scripted reply, closes.
fn serve(stream: TcpStream, shared: &Shared) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(clone) => clone,
        Err(_) => return,
    });
    let Some(request) = read_request(&mut reader) else {
        return;
    };
    let reply = {
        let mut state = shared.state.lock().unwrap();
        if state.stopped {
            return;
        }
        let number = state.requests.len() + 1;
        state.requests.push(request);
        state.queue.pop_front().unwrap_or_else(|| {
            Reply::status(
                418,
                format!("fake server: no scripted reply left for request {number}"),
            )
        })
    };
    let mut stream = stream;
    let _ = write_reply(&mut stream, &reply, shared);
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Recorded> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    let body = if header("transfer-encoding").is_some_and(|value| value.contains("chunked")) {
        read_chunked(reader)?
    } else {
        let length: usize = header("content-length").map_or(Some(0), |value| value.parse().ok())?;
        if length > MAX_REQUEST_BODY {
            return None;
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        body
    };
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size).ok()?;
        let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        if body.len() + size > MAX_REQUEST_BODY {
            return None;
        }
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

/// Blocks until the server stops.
fn wait_for_stop(shared: &Shared) {
    let mut state = shared.state.lock().unwrap();
    while !state.stopped {
        state = shared.stopped.wait(state).unwrap();
    }
}

fn write_reply(stream: &mut TcpStream, reply: &Reply, shared: &Shared) -> std::io::Result<()> {
    if let Body::Hang = reply.body {
        wait_for_stop(shared);
        return Ok(());
    }
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("Connection: close\r\n");
    match &reply.body {
        Body::Whole(body) => {
            head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            stream.write_all(head.as_bytes())?;
            stream.write_all(body)?;
            stream.flush()
        }
        Body::Stream { pieces, cut } => {
            head.push_str("Transfer-Encoding: chunked\r\n\r\n");
            stream.write_all(head.as_bytes())?;
            stream.flush()?;
            for piece in pieces {
                match piece {
                    Piece::Bytes(bytes) if bytes.is_empty() => {}
                    Piece::Bytes(bytes) => {
                        stream.write_all(format!("{:x}\r\n", bytes.len()).as_bytes())?;
                        stream.write_all(bytes)?;
                        stream.write_all(b"\r\n")?;
                        stream.flush()?;
                    }
                    Piece::Stall => {
                        wait_for_stop(shared);
                        return Ok(());
                    }
                }
            }
            if *cut {
                return stream.shutdown(std::net::Shutdown::Both);
            }
            stream.write_all(b"0\r\n\r\n")?;
            stream.flush()
        }
        Body::Hang => Ok(()),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        418 => "I'm a teapot",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Entries for a request: a system prompt and one user message.
pub fn conversation(user: &str) -> Vec<convlog::ConversationEntry> {
    use convlog::{ConversationEntry, Role};
    vec![
        ConversationEntry::new("eval-1", 0, Role::System, Some("You are terse.".into())),
        ConversationEntry::new("eval-1", 1, Role::User, Some(user.into())),
    ]
}

/// Collects streamed deltas, in arrival order.
#[derive(Default)]
pub struct Deltas(Mutex<Vec<convlog_agent::StreamDelta>>);

impl Deltas {
    /// The sink to hand to `ModelClient::complete`.
    pub fn sink(&self) -> impl Fn(&convlog_agent::StreamDelta) + Send + Sync + '_ {
        move |delta| self.0.lock().unwrap().push(delta.clone())
    }

    /// What arrived so far.
    pub fn taken(&self) -> Vec<convlog_agent::StreamDelta> {
        self.0.lock().unwrap().clone()
    }
}

/// An entry with its per-run values (message id, time, call ids the mapper
/// generated) replaced, so two replies with the same content compare equal.
pub fn comparable(entry: &convlog::ConversationEntry) -> Value {
    let mut text = serde_json::to_string(entry).unwrap();
    for (index, call) in entry.tool_calls.iter().enumerate() {
        text = text.replace(&call.call_id, &format!("call-{index}"));
    }
    let mut value: Value = serde_json::from_str(&text).unwrap();
    value["message_id"] = Value::Null;
    value["created_at"] = Value::Null;
    value
}

/// Holds a recorded request body to convlog's own rules for `provider`
/// (`convlog::provider::rules`, on its messages and system field) and its
/// top-level fields to `allowed` (the API's documented request fields).
pub fn assert_valid_body(provider: convlog::Provider, body: &Value, allowed: &[&str]) {
    use convlog::provider::rules;
    let object = body.as_object().expect("the request body is an object");
    for key in object.keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "{provider} request carries {key:?}, not one of its API's fields: {body}"
        );
    }
    let messages = object
        .get(provider.messages_field())
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no {} list: {body}", provider.messages_field()));
    let system = provider.system_field().and_then(|field| object.get(field));
    let checked = match provider {
        convlog::Provider::OpenAiChat => rules::check_openai_chat(messages),
        convlog::Provider::OpenAiResponses => rules::check_openai_responses(messages),
        convlog::Provider::Anthropic => rules::check_anthropic(system, messages),
        convlog::Provider::Gemini => rules::check_gemini(system, messages),
        convlog::Provider::Ollama => rules::check_ollama(messages),
    };
    checked.unwrap_or_else(|error| panic!("{provider} rules: {error}: {body}"));
}

/// `entries` continued by `reply`'s assistant entry (placed after them, its
/// calls completed) and one result per call (`result(name)` as content):
/// the history of the next request of a tool loop.
pub fn continued(
    entries: &[convlog::ConversationEntry],
    reply: &convlog_agent::ModelReply,
    result: impl Fn(&str) -> String,
) -> Vec<convlog::ConversationEntry> {
    use convlog::{ConversationEntry, Role, ToolStatus};
    let mut history = entries.to_vec();
    let evaluation = entries
        .first()
        .map_or("eval-1".to_string(), |entry| entry.evaluation_id.clone());
    let mut sequence = entries.last().map_or(0, |entry| entry.sequence + 1);
    let mut assistant = reply.entry.clone();
    assistant.evaluation_id = evaluation.clone();
    assistant.sequence = sequence;
    assistant.turn = 1;
    for call in &mut assistant.tool_calls {
        call.status = ToolStatus::Completed;
    }
    let calls = assistant.tool_calls.clone();
    history.push(assistant);
    for call in calls {
        sequence += 1;
        let mut answer =
            ConversationEntry::new(&evaluation, sequence, Role::Tool, Some(result(&call.name)));
        answer.tool_call_id = Some(call.call_id.clone());
        answer.tool_name = Some(call.name.clone());
        answer.turn = 1;
        history.push(answer);
    }
    history
}

/// One call of an [`convlog_agent::HttpClient`] for `config` over `entries`
/// and `tools`: streamed into `deltas` when given, whole otherwise.
pub async fn complete(
    config: convlog_agent::ClientConfig,
    entries: &[convlog::ConversationEntry],
    tools: &[convlog_agent::ToolSpec],
    deltas: Option<&Deltas>,
) -> Result<convlog_agent::ModelReply, convlog_agent::ModelError> {
    use convlog_agent::ModelClient;
    let client = convlog_agent::HttpClient::new(config);
    let render = convlog::RenderOptions::new();
    let request = convlog_agent::ModelRequest {
        entries,
        tools,
        render: &render,
    };
    match deltas {
        Some(deltas) => {
            let sink = deltas.sink();
            client.complete(request, Some(&sink)).await
        }
        None => client.complete(request, None).await,
    }
}

/// Two tools: `weather` and `time`, each taking a city.
pub fn weather_tools() -> Vec<convlog_agent::ToolSpec> {
    use serde_json::json;
    vec![
        convlog_agent::ToolSpec {
            name: "weather".into(),
            description: "Current weather of a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}),
        },
        convlog_agent::ToolSpec {
            name: "time".into(),
            description: "Local time of a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        },
    ]
}
