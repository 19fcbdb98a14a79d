//! The live event stream (`GET /contexts/{id}/events/stream`, Server-Sent
//! Events) and the metrics, over real loopback HTTP: events appended by
//! other requests arrive in order, a reconnect resumes after its last
//! event, authorization, the per-user limit, a dropped connection freeing
//! its slot, and shutdown ending open streams.

mod support;

use std::sync::Arc;
use std::time::Duration;

use convlog_server::stream::Streams;
use convlog_server::{Config, Server};
use serde_json::{json, Value};
use support::{config_text, Upstream, ALICE, BOB};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Long enough for anything a loaded two-core machine does here; only
/// stops a broken test from hanging (no assertion is about speed).
const DEADLINE: Duration = Duration::from_secs(20);

struct Served {
    url: String,
    upstream: Upstream,
    http: reqwest::Client,
    streams: Arc<Streams>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), String>>,
    _dir: tempfile::TempDir,
}

impl Served {
    /// A server whose configuration ends with `extra` (e.g. `[limits]`).
    async fn start(extra: &str) -> Served {
        let upstream = Upstream::start().await;
        let dir = tempfile::tempdir().unwrap();
        let text = format!("{}\n{extra}", config_text(&upstream.url, false));
        let config = Config::parse(&text).unwrap();
        let server = Server::open(&dir.path().join("store"), &config, |name| {
            (name == "BOB_TOKEN").then(|| BOB.to_string())
        })
        .await
        .unwrap();
        let streams = Arc::clone(server.streams());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(listener, async move {
            let _ = stopped.await;
        }));
        Served {
            url,
            upstream,
            http: reqwest::Client::new(),
            streams,
            stop: Some(stop),
            task,
            _dir: dir,
        }
    }

    async fn post(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    async fn create(&self, id: &str, public: bool) {
        let (status, body) = self
            .post(
                "/contexts",
                ALICE,
                json!({"agent_id": "assistant", "context_id": id, "public": public}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }

    /// Appends user messages `texts` to `id` as one batch; their LSNs.
    async fn append(&self, id: &str, texts: &[&str]) -> (u64, u64) {
        let events: Vec<Value> = texts
            .iter()
            .map(|text| {
                json!({"type": "conversation_recorded", "conversation_id": id,
                    "entry": {"evaluation_id": "e1", "role": "user", "content": text}})
            })
            .collect();
        let (status, body) = self
            .post(
                &format!("/contexts/{id}/events"),
                ALICE,
                json!({ "events": events }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        (
            body["first_lsn"].as_u64().unwrap(),
            body["last_lsn"].as_u64().unwrap(),
        )
    }

    async fn open(
        &self,
        id: &str,
        token: Option<&str>,
        query: &str,
        last_event_id: Option<&str>,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .get(format!("{}/contexts/{id}/events/stream{query}", self.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        request.send().await.unwrap()
    }

    async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Waits until `open` streams are open (a dropped client's slot is
    /// freed once the server notices the connection closed).
    async fn wait_open(&self, open: usize) {
        let wait = async {
            while self.streams.open() != open {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .unwrap_or_else(|_| panic!("{} streams open, not {open}", self.streams.open()));
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
struct Sse {
    id: Option<u64>,
    event: Option<String>,
    data: String,
}

/// Reads Server-Sent Events off a response, skipping comments.
struct Reader {
    response: reqwest::Response,
    buffer: String,
    comments: usize,
}

impl Reader {
    fn new(response: reqwest::Response) -> Reader {
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Reader {
            response,
            buffer: String::new(),
            comments: 0,
        }
    }

    /// The next event, `None` when the stream ended.
    async fn next(&mut self) -> Option<Sse> {
        // Keep-alive comments do not extend it.
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = Sse {
                    id: None,
                    event: None,
                    data: String::new(),
                };
                let mut fields = false;
                for line in block.lines() {
                    if line.starts_with(':') {
                        self.comments += 1;
                    } else if let Some(id) = line.strip_prefix("id: ") {
                        event.id = Some(id.parse().unwrap());
                        fields = true;
                    } else if let Some(name) = line.strip_prefix("event: ") {
                        event.event = Some(name.to_string());
                        fields = true;
                    } else if let Some(data) = line.strip_prefix("data: ") {
                        event.data.push_str(data);
                        fields = true;
                    }
                }
                if fields {
                    return Some(event);
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .expect("an event or the stream's end")
                .unwrap()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The next `n` events.
    async fn take(&mut self, n: usize) -> Vec<Sse> {
        let mut events = Vec::new();
        for _ in 0..n {
            events.push(self.next().await.expect("the stream goes on"));
        }
        events
    }
}

fn data(event: &Sse) -> Value {
    serde_json::from_str(&event.data).unwrap()
}

fn content(event: &Sse) -> String {
    data(event)["entry"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn appended_events_arrive_in_order_and_a_reconnect_resumes_after_its_last() {
    let server = Served::start("").await;
    server.create("ctx_a", false).await;
    server.create("ctx_b", false).await;
    let mut stream = Reader::new(server.open("ctx_a", Some(ALICE), "", None).await);
    // What is already there: the context's creation (two custom events).
    let created = stream.take(2).await;
    assert_eq!(data(&created[0])["kind"], "convlog.context.created");
    assert_eq!(data(&created[1])["kind"], "convlog.server.context");
    assert_eq!(created[0].id.unwrap() + 1, created[1].id.unwrap());
    // Appended by other requests while the stream waits; another
    // context's events are not sent.
    server.append("ctx_b", &["elsewhere"]).await;
    let (first, last) = server.append("ctx_a", &["one", "two"]).await;
    assert_eq!(last, first + 1);
    server.append("ctx_b", &["elsewhere again"]).await;
    let (third, _) = server.append("ctx_a", &["three"]).await;
    let events = stream.take(3).await;
    assert_eq!(
        events
            .iter()
            .map(|event| event.id.unwrap())
            .collect::<Vec<_>>(),
        vec![first, first + 1, third]
    );
    assert_eq!(
        events.iter().map(content).collect::<Vec<_>>(),
        ["one", "two", "three"]
    );
    for event in &events {
        let value = data(event);
        assert_eq!(value["type"], "conversation_recorded");
        assert_eq!(value["conversation_id"], "ctx_a");
        assert_eq!(value["lsn"].as_u64(), event.id);
    }
    drop(stream);

    // A reconnect after "one" (inside its batch): "two" and "three", then
    // what comes next; nothing twice, nothing missed.
    let mut resumed = Reader::new(
        server
            .open("ctx_a", Some(ALICE), "", Some(&first.to_string()))
            .await,
    );
    let again = resumed.take(2).await;
    assert_eq!(
        again.iter().map(content).collect::<Vec<_>>(),
        ["two", "three"]
    );
    let (four, _) = server.append("ctx_a", &["four"]).await;
    let next = resumed.next().await.unwrap();
    assert_eq!((next.id, content(&next)), (Some(four), "four".to_string()));

    // `from` does the same for a client that cannot set headers; `limit`
    // ends the stream.
    let mut bounded = Reader::new(
        server
            .open(
                "ctx_a",
                Some(ALICE),
                &format!("?from={third}&limit=1"),
                None,
            )
            .await,
    );
    let only = bounded.next().await.unwrap();
    assert_eq!(only.id, Some(four));
    assert_eq!(bounded.next().await, None, "limit=1 ends the stream");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_are_authorized_like_reading_the_context() {
    let server = Served::start("").await;
    server.create("private", false).await;
    server.create("shared", true).await;
    let error = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        (status, body["error"].as_str().unwrap().to_string())
    };
    let (status, message) = error(server.open("private", None, "", None).await).await;
    assert_eq!(status, 401, "{message}");
    let (status, message) = error(server.open("private", Some("wrong"), "", None).await).await;
    assert_eq!((status, message.as_str()), (401, "Invalid bearer token"));
    let (status, message) = error(server.open("private", Some(BOB), "", None).await).await;
    assert_eq!(
        (status, message.as_str()),
        (403, "Context does not belong to user")
    );
    let (status, message) = error(server.open("nope", Some(ALICE), "", None).await).await;
    assert_eq!(
        (status, message.as_str()),
        (404, "Context with id: nope does not exist")
    );
    let (status, message) = error(server.open("private", Some(ALICE), "", Some("abc")).await).await;
    assert_eq!(status, 400);
    assert!(
        message.contains("Last-Event-ID must be an LSN"),
        "{message}"
    );
    let (status, message) =
        error(server.open("private", Some(ALICE), "?from=-1", None).await).await;
    assert_eq!(status, 400);
    assert!(message.contains("from must be an LSN"), "{message}");
    let (status, message) =
        error(server.open("private", Some(ALICE), "?limit=0", None).await).await;
    assert_eq!(status, 400);
    assert!(
        message.contains("limit must be a whole number"),
        "{message}"
    );
    let (status, message) =
        error(server.open("private", Some(ALICE), "?since=3", None).await).await;
    assert_eq!(status, 400);
    assert!(
        message.contains("Unknown query parameter \"since\""),
        "{message}"
    );
    assert_eq!(server.streams.open(), 0, "no rejected request holds a slot");

    // A public context: anyone authenticated may follow it.
    let mut stream = Reader::new(server.open("shared", Some(BOB), "?limit=3", None).await);
    server.append("shared", &["hello"]).await;
    let events = stream.take(3).await;
    assert_eq!(content(&events[2]), "hello");
    assert_eq!(stream.next().await, None);

    // Made private while bob follows it: bob's stream ends at its next
    // wake-up, with an error event saying why.
    let mut stream = Reader::new(server.open("shared", Some(BOB), "", None).await);
    stream.take(3).await;
    let response = server
        .http
        .patch(format!("{}/contexts/shared", server.url))
        .bearer_auth(ALICE)
        .json(&json!({"public": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    server.append("shared", &["secret"]).await;
    let last = stream.next().await.unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    assert_eq!(last.data, "Context does not belong to user");
    assert_eq!(stream.next().await, None);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_per_user_limit_answers_429_and_a_dropped_connection_frees_its_slot() {
    let server = Served::start("[limits]\nstreams_per_user = 2\n").await;
    server.create("ctx_l", true).await;
    let first = Reader::new(server.open("ctx_l", Some(ALICE), "", None).await);
    let mut second = Reader::new(server.open("ctx_l", Some(ALICE), "", None).await);
    let refused = server.open("ctx_l", Some(ALICE), "", None).await;
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["error"],
        "Too many event streams: user \"alice\" has 2 open, the limit is 2; close one first"
    );
    // The limit is per user.
    let bobs = Reader::new(server.open("ctx_l", Some(BOB), "", None).await);
    assert_eq!(server.streams.open(), 3);
    assert!(
        server
            .metrics()
            .await
            .contains("\nconvlog_server_streams_open 3\n"),
        "the gauge counts them"
    );

    // The client goes away without a word: its slot comes back.
    drop(first);
    server.wait_open(2).await;
    let mut third = Reader::new(server.open("ctx_l", Some(ALICE), "", None).await);
    // Both live streams still follow the context.
    let (lsn, _) = server.append("ctx_l", &["after the drop"]).await;
    second.take(2).await;
    third.take(2).await;
    assert_eq!(second.next().await.unwrap().id, Some(lsn));
    assert_eq!(third.next().await.unwrap().id, Some(lsn));
    drop((second, third, bobs));
    server.wait_open(0).await;
    assert!(server
        .metrics()
        .await
        .contains("\nconvlog_server_streams_open 0\n"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_streams_get_keep_alive_comments() {
    let server = Served::start("[limits]\nstream_keepalive_seconds = 1\n").await;
    server.create("ctx_k", false).await;
    let mut stream = Reader::new(server.open("ctx_k", Some(ALICE), "", None).await);
    stream.take(2).await;
    // Nothing is appended: what arrives next is a keep-alive comment,
    // then the event once it comes.
    while stream.comments == 0 {
        let chunk = tokio::time::timeout(DEADLINE, stream.response.chunk())
            .await
            .expect("a keep-alive comment")
            .unwrap()
            .unwrap();
        stream.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        assert!(stream.buffer.starts_with(":"), "{}", stream.buffer);
        if stream.buffer.contains("\n\n") {
            stream.buffer.clear();
            stream.comments += 1;
        }
    }
    let (lsn, _) = server.append("ctx_k", &["late"]).await;
    assert_eq!(stream.next().await.unwrap().id, Some(lsn));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_ends_open_streams_instead_of_waiting_for_them() {
    let server = Served::start("").await;
    server.create("ctx_s", false).await;
    let mut stream = Reader::new(server.open("ctx_s", Some(ALICE), "", None).await);
    stream.take(2).await;
    // The stream is idle, following; the server is told to stop: the
    // stream ends (the server does not sit out its shutdown grace, 30 s,
    // on it) and the server stops.
    let streams = Arc::clone(&server.streams);
    tokio::time::timeout(DEADLINE, async {
        server.stop().await;
        assert_eq!(stream.next().await, None);
    })
    .await
    .expect("shutdown ends the open stream");
    assert_eq!(streams.open(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_run_is_followed_as_it_is_recorded() {
    let server = Served::start("").await;
    server.create("ctx_c", false).await;
    let mut stream = Reader::new(server.open("ctx_c", Some(ALICE), "", None).await);
    stream.take(2).await;
    // The runner appends the turn: the human message, then the answer.
    server.upstream.push([support::text("Hello!")]);
    let (status, body) = server
        .post(
            "/chat",
            ALICE,
            json!({"context_id": "ctx_c", "message": "Hi"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut seen = Vec::new();
    while !seen.iter().any(|text| text == "Hello!") {
        let event = stream.next().await.unwrap();
        if data(&event)["type"] == "conversation_recorded" {
            seen.push(content(&event));
        }
    }
    assert_eq!(seen, ["Hi", "Hello!"]);
    server.stop().await;
}

fn sample(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_appends_fsyncs_and_streams() {
    let server = Served::start("").await;
    server.create("ctx_m", false).await;
    let before = server.metrics().await;
    server.append("ctx_m", &["a", "b"]).await;
    server.append("ctx_m", &["c"]).await;
    let mut stream = Reader::new(server.open("ctx_m", Some(ALICE), "?limit=5", None).await);
    stream.take(5).await;
    assert_eq!(stream.next().await, None);
    let after = server.metrics().await;
    // Two batches, each acknowledged durable: at least one fsync each
    // (the log syncs every batch by default; nothing else appends here).
    assert_eq!(
        sample(&after, "convlog_store_appends_total"),
        sample(&before, "convlog_store_appends_total") + 2
    );
    assert!(
        sample(&after, "convlog_store_fsyncs_total")
            >= sample(&before, "convlog_store_fsyncs_total") + 2,
        "{before}\n{after}"
    );
    assert_eq!(
        sample(&after, "convlog_store_events"),
        sample(&before, "convlog_store_events") + 3
    );
    assert_eq!(sample(&after, "convlog_server_streams_opened_total"), 1);
    assert_eq!(sample(&after, "convlog_server_stream_events_total"), 5);
    server.wait_open(0).await;
    assert_eq!(
        sample(&server.metrics().await, "convlog_server_streams_open"),
        0
    );
    server.stop().await;
}
