//! The server on loopback, with a scripted fake upstream speaking OpenAI
//! Chat Completions and, when the MCP Python SDK is there, the agent
//! crate's real MCP tool server.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use convlog_server::config::hash_token;
use convlog_server::{Config, Server};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub const ALICE: &str = "alice-token";
pub const BOB: &str = "bob-token";

/// The fake upstream: answers each `POST /v1/chat/completions` with the
/// next scripted reply (a 500 when none is left) and keeps every request.
#[derive(Clone, Default)]
pub struct Upstream {
    pub replies: Arc<Mutex<VecDeque<Value>>>,
    pub requests: Arc<Mutex<Vec<Value>>>,
    pub url: String,
    /// When set, each answer waits for a permit (`release`).
    pub gate: Arc<Mutex<Option<Arc<tokio::sync::Semaphore>>>>,
    /// Signalled on each request received.
    pub received: Arc<tokio::sync::Notify>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let mut upstream = Upstream::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        upstream.url = format!("http://{}/v1", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(upstream.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        upstream
    }

    /// Scripts the next answers.
    pub fn push(&self, messages: impl IntoIterator<Item = Value>) {
        self.replies.lock().unwrap().extend(messages);
    }

    /// From now on, answers wait for [`Upstream::release`].
    pub fn hold(&self) -> Arc<tokio::sync::Semaphore> {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        *self.gate.lock().unwrap() = Some(Arc::clone(&gate));
        gate
    }

    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

async fn complete(
    State(upstream): State<Upstream>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    upstream.requests.lock().unwrap().push(body);
    upstream.received.notify_one();
    let gate = upstream.gate.lock().unwrap().clone();
    if let Some(gate) = gate {
        gate.acquire().await.unwrap().forget();
    }
    let Some(message) = upstream.replies.lock().unwrap().pop_front() else {
        return (
            StatusCode::BAD_REQUEST,
            Json(
                json!({"error": {"message": "no scripted reply left", "type": "invalid_request_error"}}),
            ),
        );
    };
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    (
        StatusCode::OK,
        Json(json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "fake",
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })),
    )
}

/// An assistant text answer.
pub fn text(content: &str) -> Value {
    json!({"role": "assistant", "content": content})
}

/// An assistant message calling tools `(id, name, arguments)`.
pub fn calls(calls: &[(&str, &str, &str)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls})
}

/// Whether the MCP Python SDK is importable (else the MCP parts are
/// skipped, saying so).
pub fn mcp_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !ok {
        eprintln!("SKIPPED the MCP tool: python3 cannot import mcp (pip install 'mcp==2.3.0')");
    }
    ok
}

pub fn mcp_script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../agent/tests/mcp/server.py")
        .display()
        .to_string()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The test configuration: agent `assistant` on `upstream` (with the MCP
/// tools when `mcp`), alice by hash, bob by variable.
pub fn config_text(upstream: &str, mcp: bool) -> String {
    let mut text = format!(
        r#"
[[agents]]
id = "assistant"
provider = "openai-compatible"
model = "fake"
base_url = "{upstream}"
max_steps = 4
"#
    );
    if mcp {
        text.push_str(&format!(
            "[[agents.mcp]]\ncommand = \"python3\"\nargs = [{:?}]\n",
            mcp_script()
        ));
    }
    text.push_str(&format!(
        r#"
[[users]]
id = "alice"
token_sha256 = "{}"

[[users]]
id = "bob"
token_env = "BOB_TOKEN"
"#,
        hex(&hash_token(ALICE))
    ));
    text
}

pub struct TestServer {
    pub url: String,
    pub address: SocketAddr,
    pub upstream: Upstream,
    pub http: reqwest::Client,
    pub dir: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), String>>>,
}

impl TestServer {
    pub async fn start(mcp: bool) -> TestServer {
        let upstream = Upstream::start().await;
        let dir = tempfile::tempdir().unwrap();
        TestServer::start_with(upstream, dir, mcp, "").await
    }

    /// A server on the store in `dir` (kept from an earlier server), with
    /// `upstream`, and `extra` configuration lines before the agents.
    pub async fn start_with(
        upstream: Upstream,
        dir: tempfile::TempDir,
        mcp: bool,
        extra: &str,
    ) -> TestServer {
        TestServer::start_keyed(upstream, dir, mcp, extra, None).await
    }

    /// [`TestServer::start_with`] on an encrypted store: `key_file` is
    /// what `CONVLOG_KEY_FILE` names.
    pub async fn start_keyed(
        upstream: Upstream,
        dir: tempfile::TempDir,
        mcp: bool,
        extra: &str,
        key_file: Option<String>,
    ) -> TestServer {
        let text = format!("{extra}\n{}", config_text(&upstream.url, mcp));
        let config = Config::parse(&text).unwrap();
        let server = Server::open(&dir.path().join("store"), &config, |name| match name {
            "BOB_TOKEN" => Some(BOB.to_string()),
            "CONVLOG_KEY_FILE" => key_file.clone(),
            _ => None,
        })
        .await
        .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(listener, async move {
            let _ = stop.await;
        }));
        TestServer {
            url: format!("http://{address}"),
            address,
            upstream,
            http: reqwest::Client::new(),
            dir,
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    /// A request with `token` (none when `None`) and a JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    pub async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.call(Method::GET, path, Some(token), None).await
    }

    /// A POST whose JSON body is `body` as written (a body `Value` cannot
    /// hold, such as a key given twice).
    pub async fn post_text(&self, path: &str, token: &str, body: &str) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    /// Creates context `id` for alice; returns its body.
    pub async fn create(&self, id: &str) -> Value {
        let (status, body) = self
            .post(
                "/contexts",
                ALICE,
                json!({"agent_id": "assistant", "context_id": id}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body
    }

    /// The stored messages of alice's context `id`.
    pub async fn messages(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/contexts/{id}"), ALICE).await;
        assert_eq!(status, 200, "{body}");
        body["messages"].clone()
    }

    /// Asks the server to shut down (it stops accepting).
    pub fn request_stop(&mut self) {
        let _ = self.shutdown.take().unwrap().send(());
    }

    /// Waits for the server to have stopped.
    pub async fn stopped(mut self) -> tempfile::TempDir {
        self.task.take().unwrap().await.unwrap().unwrap();
        self.dir
    }

    pub async fn stop(mut self) -> tempfile::TempDir {
        self.request_stop();
        self.stopped().await
    }
}
