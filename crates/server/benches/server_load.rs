//! Load on loopback: `CONNECTIONS` clients appending one event per request
//! to a context each (`POST /contexts/{id}/events`), against in-process
//! `Store::append` with `Durability::Group` from as many threads, in the
//! same run; then `/chat` turns against a zero-latency fake upstream. Run
//! by hand (`cargo bench -p convlog-server --bench server_load`); results
//! in docs/performance.md. Every loop is bounded in count, and the whole
//! run in time.
//!
//! `SERVER_LOAD_SERVE_SECONDS=N` instead serves the same contexts for N
//! seconds (at most `RUN_LIMIT`) without generating load, for a load
//! generator in another process (`wrk`, docs/performance.md); it prints
//! the URL, then the server's CPU time per append it served.
//!
//! `SERVER_LOAD_INPROC_SECONDS=N` runs only the in-process peer, each of its
//! `CONNECTIONS` threads appending for N seconds (at most `RUN_LIMIT`, and
//! at most `INPROC_APPENDS_MAX` appends each), so that it can be set beside
//! a load generator's run of the same length (`serve_append.sh`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::{Json, Router};
use convlog::store::{Store, StoreOptions};
use convlog::Durability;
use convlog_server::config::hash_token;
use convlog_server::{Config, Server};
use serde_json::{json, Value};
use tokio::net::TcpListener;

const CONNECTIONS: usize = 256;
/// Appends per connection (and per thread in-process) per round.
const APPENDS_EACH: usize = 40;
/// `/chat` requests per connection per round (CHAT_CONNECTIONS of them).
const CHATS_EACH: usize = 20;
const CHAT_CONNECTIONS: usize = 32;
/// Rounds, unless `SERVER_LOAD_ROUNDS` says otherwise (e.g. 1 under a profiler).
const ROUNDS: usize = 3;
/// Appends per thread of a timed in-process run, at most.
const INPROC_APPENDS_MAX: usize = 1_000_000;
/// The whole run stops here, whatever is left.
const RUN_LIMIT: Duration = Duration::from_secs(600);

fn event(context: &str, n: usize) -> Value {
    json!({"type": "conversation_recorded", "conversation_id": context,
           "entry": {"evaluation_id": "eval-load", "sequence": n, "role": "user", "content": "x".repeat(200)}})
}

/// CPU time (user + system) this process used so far, all threads.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses): utime is
    // the 14th field of the line, stime the 15th, in clock ticks.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // USER_HZ is 100 on Linux.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// CPU time of this process's live threads whose name starts with
/// `prefix` (threads that already exited are not counted).
fn threads_cpu(prefix: &str) -> Duration {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map_or("", |(_, name)| name);
        if !name.starts_with(prefix) {
            continue;
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |index: usize| {
            fields
                .get(index)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        ticks += field(11) + field(12);
    }
    Duration::from_millis(ticks * 10)
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn fake_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let app = Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            Json(json!({"id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Runs `each` requests on each of `connections` clients; (requests/s, latencies).
async fn drive(
    connections: usize,
    each: usize,
    request: impl Fn(usize, usize) -> reqwest::RequestBuilder + Send + Sync + 'static,
    deadline: Instant,
) -> (f64, Vec<Duration>) {
    let request = Arc::new(request);
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|c| {
            let request = Arc::clone(&request);
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(each);
                for n in 0..each {
                    if Instant::now() > deadline {
                        break;
                    }
                    let sent = Instant::now();
                    let response = request(c, n).send().await.unwrap();
                    assert!(response.status().is_success(), "{}", response.status());
                    response.bytes().await.unwrap();
                    latencies.push(sent.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    (all.len() as f64 / elapsed, all)
}

/// The in-process peer: `CONNECTIONS` threads appending to a conversation
/// each, `APPENDS_EACH` appends per thread, or until `until` if given.
fn in_process(dir: &std::path::Path, round: usize, until: Option<Instant>) -> (f64, Vec<Duration>) {
    let store = Arc::new(
        Store::open(
            dir.join(format!("inproc-{round}")),
            StoreOptions::new().durability(Durability::Group),
        )
        .unwrap(),
    );
    let started = Instant::now();
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let context = format!("ctx_{t}");
                let mut latencies = Vec::with_capacity(APPENDS_EACH);
                for n in 0..until.map_or(APPENDS_EACH, |_| INPROC_APPENDS_MAX) {
                    if until.is_some_and(|until| Instant::now() >= until) {
                        break;
                    }
                    let events = convlog::json::parse_line(
                        1,
                        &event(&context, n).to_string(),
                        &mut |_, _| Ok(0),
                    )
                    .unwrap();
                    let sent = Instant::now();
                    store.append(&events).unwrap();
                    latencies.push(sent.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for thread in threads {
        all.extend(thread.join().unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    (all.len() as f64 / elapsed, all)
}

/// Serves for `duration` while another process generates the load; then
/// prints how many appends the server acknowledged and the process's CPU
/// time per append (the process is the server alone: this runtime's client
/// is idle meanwhile).
async fn serve_only(url: &str, duration: Duration, client: &reqwest::Client) {
    // Events, not batches: the server may store the batches of requests
    // that arrive together as one (one event per request here).
    let appended = || async {
        let metrics = client.get(format!("{url}/metrics")).send().await.unwrap();
        let text = metrics.text().await.unwrap();
        text.lines()
            .filter(|line| line.starts_with("convlog_store_events "))
            .filter_map(|line| line.split_whitespace().last()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    println!(
        "serving {url} for {} s (token load-token, contexts ctx_0..ctx_{})",
        duration.as_secs(),
        CONNECTIONS - 1
    );
    let (before, cpu) = (appended().await, process_cpu());
    tokio::time::sleep(duration).await;
    let (after, cpu) = (appended().await, process_cpu() - cpu);
    let appends = after - before;
    println!(
        "served {appends:.0} appends, server CPU {:.0} us/append, load: {}",
        cpu.as_secs_f64() * 1e6 / appends.max(1.0),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}

fn main() {
    if let Ok(value) = std::env::var("SERVER_LOAD_INPROC_SECONDS") {
        let seconds = match value.parse::<u64>() {
            Ok(seconds) if seconds >= 1 => seconds,
            _ => {
                eprintln!("SERVER_LOAD_INPROC_SECONDS: {value:?} is not a whole number of seconds, 1 or more");
                std::process::exit(2);
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let cpu = process_cpu();
        let until = Instant::now() + Duration::from_secs(seconds).min(RUN_LIMIT);
        let (rate, local) = in_process(dir.path(), 0, Some(until));
        let cpu = (process_cpu() - cpu).as_secs_f64() * 1e6 / local.len() as f64;
        println!("in-process appends/s | p50 | p99 | CPU us/append");
        println!(
            "in-process | {rate:.0} | {} | {} | {cpu:.0}",
            ms(percentile(&local, 0.5)),
            ms(percentile(&local, 0.99)),
        );
        return;
    }
    // The server on a runtime of its own (threads `server-*`), the load
    // generator on another (`client-*`): a profile (`perf report --sort
    // comm`) then tells whose CPU time is whose.
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("server")
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("client")
        .build()
        .unwrap();
    let deadline = Instant::now() + RUN_LIMIT;
    let dir = tempfile::tempdir().unwrap();
    let token = "load-token";
    let url = server_runtime.block_on(async {
        let upstream = fake_upstream().await;
        let hash: String = hash_token(token).iter().map(|b| format!("{b:02x}")).collect();
        let config = Config::parse(&format!(
            "[[agents]]\nid = \"a\"\nprovider = \"openai-compatible\"\nmodel = \"fake\"\nbase_url = \"{upstream}\"\n\n[[users]]\nid = \"load\"\ntoken_sha256 = \"{hash}\"\n"
        ))
        .unwrap();
        let server = Server::open(&dir.path().join("store"), &config, |_| None).await.unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(server.serve(listener, std::future::pending()));
        url
    });
    runtime.block_on(async {
        let client = reqwest::Client::builder().pool_max_idle_per_host(CONNECTIONS).build().unwrap();
        for c in 0..CONNECTIONS.max(CHAT_CONNECTIONS) {
            let response = client.post(format!("{url}/contexts")).bearer_auth(token)
                .json(&json!({"agent_id": "a", "context_id": format!("ctx_{c}")})).send().await.unwrap();
            assert_eq!(response.status(), 201);
        }
        println!("load: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
        if let Some(seconds) = std::env::var("SERVER_LOAD_SERVE_SECONDS")
            .ok()
            .and_then(|seconds| seconds.parse::<u64>().ok())
        {
            serve_only(&url, Duration::from_secs(seconds).min(RUN_LIMIT), &client).await;
            return;
        }
        println!("round | HTTP appends/s | p50 | p99 | CPU us/append | in-process Group appends/s | p50 | p99 | CPU us/append | ratio | /chat turns/s | p50 | p99");
        let rounds = std::env::var("SERVER_LOAD_ROUNDS")
            .ok()
            .and_then(|rounds| rounds.parse().ok())
            .unwrap_or(ROUNDS);
        for round in 0..rounds {
            let base = round * APPENDS_EACH;
            let (client2, url2) = (client.clone(), url.clone());
            let cpu = process_cpu();
            let (server_cpu, client_cpu) = (threads_cpu("server"), threads_cpu("client"));
            let (http_rate, http) = drive(CONNECTIONS, APPENDS_EACH, move |c, n| {
                client2.post(format!("{url2}/contexts/ctx_{c}/events")).bearer_auth(token)
                    .json(&json!({"events": [event(&format!("ctx_{c}"), base + n)]}))
            }, deadline).await;
            let http_cpu = (process_cpu() - cpu).as_secs_f64() * 1e6 / http.len() as f64;
            let per_append = |d: Duration| d.as_secs_f64() * 1e6 / http.len() as f64;
            let split = format!(
                "server threads {:.0} us, client threads {:.0} us",
                per_append(threads_cpu("server").saturating_sub(server_cpu)),
                per_append(threads_cpu("client").saturating_sub(client_cpu)),
            );
            let path = dir.path().to_path_buf();
            let cpu = process_cpu();
            let (local_rate, local) = tokio::task::spawn_blocking(move || in_process(&path, round, None)).await.unwrap();
            let local_cpu = (process_cpu() - cpu).as_secs_f64() * 1e6 / local.len() as f64;
            let (client3, url3) = (client.clone(), url.clone());
            let (chat_rate, chat) = drive(CHAT_CONNECTIONS, CHATS_EACH, move |c, _| {
                client3.post(format!("{url3}/chat")).bearer_auth(token)
                    .json(&json!({"context_id": format!("ctx_{c}"), "message": "hi"}))
            }, deadline).await;
            println!(
                "{round} | {http_rate:.0} | {} | {} | {http_cpu:.0} | {local_rate:.0} | {} | {} | {local_cpu:.0} | {:.2} | {chat_rate:.0} | {} | {}",
                ms(percentile(&http, 0.5)), ms(percentile(&http, 0.99)),
                ms(percentile(&local, 0.5)), ms(percentile(&local, 0.99)),
                http_rate / local_rate,
                ms(percentile(&chat, 0.5)), ms(percentile(&chat, 0.99)),
            );
            println!("  HTTP CPU per append by thread: {split}");
        }
        println!("load: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
    });
    drop(runtime);
    server_runtime.shutdown_timeout(Duration::from_secs(1));
}
