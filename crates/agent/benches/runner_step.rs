//! The agent runner's own overhead per step, with a model that answers at
//! once: what a host pays on top of the provider's round trip.
//!
//! One *run* is one `Runner::run` of a new evaluation: the user input, a
//! model turn with one call of a trivial host tool, the tool's result, a
//! final answer. That is two model calls, the *steps*; figures are per
//! step (a run's time / 2). Each run starts on a conversation holding
//! `N` prior entries (earlier evaluations of the same shape), since the
//! view the model is shown is rebuilt from the whole conversation each
//! step; every run gets a conversation of its own, so `N` stays fixed.
//!
//! Clients (both speak OpenAI Chat):
//! - `local`: an in-process model with zero latency that does a real
//!   client's CPU work: renders the request with `convlog::render`,
//!   serialises the body to bytes, parses a canned OpenAI response and
//!   reads its message with `convlog::ingest`;
//! - `http`: the real `HttpClient` against a loopback HTTP/1.1 server in
//!   this program (std `TcpListener`, a thread per connection, keep-alive)
//!   that answers canned OpenAI Chat JSON at once.
//!
//! Recorders:
//! - `convlog none` / `convlog group`: the runner over a `Store`, appends
//!   with `Durability::None` or the store's default (group commit, one
//!   fsync per append since nothing else writes); the two write to stores
//!   of their own;
//! - `naive none` / `naive fdatasync`: a hand-written loop with the same
//!   client, the same rendering and the same tool, recording each message
//!   as one JSON line appended to a file (then `fdatasync` in the durable
//!   variant), its history in memory.
//!
//! Run with `cargo bench -p convlog-agent --bench runner_step`.
//! Environment: `CONVLOG_BENCH_ROUNDS` (default 5), `CONVLOG_BENCH_RUNS`
//! (runs per variant, case and round; default 20),
//! `CONVLOG_BENCH_LENGTHS` (default `10,50,200`), `CONVLOG_BENCH_SUB_STEPS`
//! (0 skips the sub-steps section, e.g. under a profiler), `CONVLOG_BENCH_DIR`
//! (scratch, default `target/bench-tmp`), `CONVLOG_BENCH_ONLY`
//! (comma-separated subset of the variant names with `-` for spaces, e.g.
//! `local-convlog-none`; default all).

use std::error::Error;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convlog::{ConversationEntry, Durability, Provider, RenderOptions, Role, Store, StoreOptions};
use convlog_agent::client::{
    BoxFuture, DeltaSink, ModelClient, ModelError, ModelReply, ModelRequest,
};
use convlog_agent::tools::FunctionTool;
use convlog_agent::{
    ApiKind, ClientConfig, HttpClient, Runner, RunnerOptions, ToolContext, ToolSpec, Toolset,
};
use serde_json::{json, Value};

type BenchResult<T> = Result<T, Box<dyn Error>>;

/// The provider round trip the overhead is compared with.
const ROUND_TRIP: Duration = Duration::from_millis(1);
/// Entries a seeding run adds (system, user, assistant, tool, assistant).
const ENTRIES_PER_RUN: usize = 5;
/// The run shapes measured: tool rounds per run (model calls: one more).
/// The marginal cost of a step is the difference between the two over the
/// difference of their model calls.
const SHAPES: [u64; 2] = [1, 5];
const MODEL: &str = "bench-model";
const TOOL: &str = "lookup";

/// A render-time system prompt of realistic size (~600 bytes), the same for
/// the runner and the naive loop.
fn system_prompt() -> String {
    "You are a careful assistant working in a software project. Use the tools \
     you are given when a question needs facts you do not have; call one tool \
     at a time and wait for its result. Answer briefly, cite the tool results \
     you used, and say so when a tool failed instead of guessing. "
        .repeat(2)
}

/// Tool rounds per run: the model calls the tool while the entries after
/// the last user entry hold fewer results than this.
static TOOL_ROUNDS: AtomicU64 = AtomicU64::new(1);

/// Whether the model answers now, given the results it was shown since the
/// last user entry.
fn answers_now(results_since_input: usize) -> bool {
    results_since_input as u64 >= TOOL_ROUNDS.load(Ordering::Relaxed)
}

/// Call ids unique across the whole program (the local model and the
/// server share it), so no two evaluations of a conversation reuse one.
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// The canned OpenAI Chat completions, built once: the final answer, and a
/// tool call split around its call id. Building a reply is the provider's
/// work, not the client's: answering costs the fake provider a string
/// concatenation, so the local figures hold only the client's side.
struct CannedReplies {
    final_answer: String,
    call_head: String,
    call_tail: String,
}

const CALL_ID_MARK: &str = "CALL_ID_MARK";

fn canned_replies() -> &'static CannedReplies {
    static REPLIES: std::sync::OnceLock<CannedReplies> = std::sync::OnceLock::new();
    REPLIES.get_or_init(|| {
        let completion = |message: Value, finish_reason: &str| {
            json!({
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
                "usage": {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140}
            })
            .to_string()
        };
        let final_answer = completion(
            json!({
                "role": "assistant",
                "content": "The value of k is 42, according to the lookup tool. \
                            Nothing else in the project depends on it, so changing it \
                            is safe; the tests that read it are listed in its docs.",
                "refusal": null
            }),
            "stop",
        );
        let call = completion(
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": CALL_ID_MARK,
                    "type": "function",
                    "function": {"name": TOOL, "arguments": "{\"key\":\"k\"}"}
                }]
            }),
            "tool_calls",
        );
        let (head, tail) = call
            .split_once(CALL_ID_MARK)
            .expect("the mark is in the reply");
        CannedReplies {
            final_answer,
            call_head: head.to_string(),
            call_tail: tail.to_string(),
        }
    })
}

/// A canned OpenAI Chat completion: a tool call (with a call id unique in
/// the program), or the final answer.
fn canned_response(final_answer: bool) -> String {
    let replies = canned_replies();
    if final_answer {
        return replies.final_answer.clone();
    }
    let id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
    let mut reply = String::with_capacity(replies.call_head.len() + replies.call_tail.len() + 21);
    reply.push_str(&replies.call_head);
    reply.push_str(&format!("call_{id:016}"));
    reply.push_str(&replies.call_tail);
    reply
}

/// The OpenAI Chat client configuration the local model builds bodies
/// with (as `HttpClient` would).
fn local_config() -> &'static ClientConfig {
    static CONFIG: std::sync::OnceLock<ClientConfig> = std::sync::OnceLock::new();
    CONFIG.get_or_init(|| ClientConfig::new(ApiKind::OpenAiChat, MODEL))
}

/// The request body as `HttpClient` builds it for OpenAI Chat, as bytes
/// (the same function).
fn request_body(request: &ModelRequest<'_>) -> Result<Vec<u8>, ModelError> {
    convlog_agent::client::request_body(local_config(), request, false)
}

/// A completion's bytes read as `HttpClient` reads them (the same
/// function): parsed, the message of `choices[0]` through
/// `convlog::ingest`.
fn read_reply(bytes: &[u8]) -> Result<ModelReply, ModelError> {
    convlog_agent::client::read_reply(&ApiKind::OpenAiChat, bytes)
}

/// Time spent in the local model's CPU work, summed.
#[derive(Default)]
struct ClientTimes {
    calls: AtomicU64,
    render_ns: AtomicU64,
    ingest_ns: AtomicU64,
    request_bytes: AtomicU64,
}

/// The zero-latency in-process model: answers a tool call when the last
/// entry shown is not a tool result, else the final answer.
struct LocalModel {
    times: ClientTimes,
}

impl ModelClient for LocalModel {
    fn provider(&self) -> Provider {
        Provider::OpenAiChat
    }

    fn describe(&self) -> String {
        "in-process zero-latency OpenAI Chat model".into()
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        _sink: Option<DeltaSink<'a>>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let start = Instant::now();
            let body = request_body(&request)?;
            std::hint::black_box(&body);
            let rendered = Instant::now();
            let since_input = request
                .entries
                .iter()
                .rev()
                .take_while(|entry| entry.role != Role::User)
                .filter(|entry| entry.role == Role::Tool)
                .count();
            let final_answer = answers_now(since_input);
            let reply = read_reply(canned_response(final_answer).as_bytes())?;
            let times = &self.times;
            times.calls.fetch_add(1, Ordering::Relaxed);
            times
                .render_ns
                .fetch_add(nanos(rendered - start), Ordering::Relaxed);
            times
                .ingest_ns
                .fetch_add(nanos(rendered.elapsed()), Ordering::Relaxed);
            times
                .request_bytes
                .fetch_add(body.len() as u64, Ordering::Relaxed);
            Ok(reply)
        })
    }
}

/// CPU time and run-queue wait of every thread of this process so far, in
/// ns, from `/proc/self/task/*/schedstat` (Linux; zeros elsewhere). The
/// wait is time a thread was ready to run but had no CPU.
fn scheduler_ns() -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (0, 0);
    };
    let mut totals = (0, 0);
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let mut fields = text.split_whitespace().map(|field| field.parse::<u64>());
        if let (Some(Ok(cpu)), Some(Ok(wait))) = (fields.next(), fields.next()) {
            totals.0 += cpu;
            totals.1 += wait;
        }
    }
    totals
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A loopback HTTP/1.1 server answering every POST with a canned
/// completion at once; returns its base URL.
fn spawn_server() -> BenchResult<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = serve(stream);
            });
        }
    });
    Ok(format!("http://{address}/v1"))
}

/// One keep-alive connection: requests until the client closes it.
fn serve(stream: TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let mut line = String::new();
    let mut body = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut length = 0;
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
        let answer = canned_response(answers_now(results_since_input(&body)));
        write!(
            writer,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        )?;
        writer.flush()?;
    }
}

/// The tool results after the last user message of a compact OpenAI Chat
/// body (no text in this bench holds a `"role":` key).
fn results_since_input(body: &[u8]) -> usize {
    let user = b"\"role\":\"user\"";
    let tool = b"\"role\":\"tool\"";
    let start = body
        .windows(user.len())
        .rposition(|window| window == user)
        .unwrap_or(0);
    body[start..]
        .windows(tool.len())
        .filter(|window| window == tool)
        .count()
}

fn lookup_tool() -> FunctionTool {
    FunctionTool::new(
        TOOL,
        "Looks a key up in the project's settings.",
        json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
        |_arguments, _context| async { Ok("k = 42 (set in settings.toml, line 12)".to_string()) },
    )
}

fn runner_options(durability: Option<Durability>) -> RunnerOptions {
    RunnerOptions::new()
        .default_system_prompt(Some(system_prompt()))
        .durability(durability)
}

fn render_options() -> RenderOptions {
    RenderOptions::new().default_system_prompt(Some(system_prompt()))
}

const INPUT: &str = "What is the value of k in the settings, and is it safe to change?";

#[derive(Clone, Copy, PartialEq)]
enum Recorder {
    ConvlogNone,
    ConvlogGroup,
    NaiveNone,
    NaiveSync,
}

impl Recorder {
    const ALL: [Recorder; 4] = [
        Recorder::ConvlogNone,
        Recorder::ConvlogGroup,
        Recorder::NaiveNone,
        Recorder::NaiveSync,
    ];

    fn name(self) -> &'static str {
        match self {
            Recorder::ConvlogNone => "convlog none",
            Recorder::ConvlogGroup => "convlog group",
            Recorder::NaiveNone => "naive none",
            Recorder::NaiveSync => "naive fdatasync",
        }
    }

    fn durability(self) -> Option<Durability> {
        match self {
            Recorder::ConvlogNone => Some(Durability::None),
            _ => None,
        }
    }
}

/// One measured variant: a client and a recorder, with what it runs on.
/// What one measurement runs: `rounds` tool rounds per run on a
/// conversation of `length` prior entries.
#[derive(Clone, Copy, Debug)]
struct Case {
    length: usize,
    rounds: u64,
}

impl Case {
    /// Model calls per run.
    fn steps(self) -> u64 {
        self.rounds + 1
    }

    /// Entries a run records: system, user, an assistant entry and a
    /// result per round, the final answer.
    fn entries(self) -> usize {
        usize::try_from(2 * self.rounds + 3).expect("small")
    }
}

/// One measured variant: a client and a recorder, with what it runs on.
struct Variant {
    client_name: &'static str,
    recorder: Recorder,
    client: Arc<dyn ModelClient>,
    local: Option<Arc<LocalModel>>,
    runner: Runner,
    /// Per case: conversations seeded with its length, unused yet.
    fresh: Vec<Vec<String>>,
    /// Per case: the naive loop's history and file.
    naive: Vec<(Vec<ConversationEntry>, File)>,
    /// Per case, per round: microseconds per run.
    results: Vec<Vec<f64>>,
    /// Per case: CPU ns and run-queue wait ns of all threads, summed.
    scheduler: Vec<(u64, u64)>,
    /// Per case: the local model's render ns, ingest ns, calls and request
    /// bytes, summed.
    client_cpu: Vec<(u64, u64, u64, u64)>,
}

impl Variant {
    fn name(&self) -> String {
        format!("{} {}", self.client_name, self.recorder.name())
    }

    fn is_convlog(&self) -> bool {
        matches!(
            self.recorder,
            Recorder::ConvlogNone | Recorder::ConvlogGroup
        )
    }
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn scratch_root() -> PathBuf {
    std::env::var_os("CONVLOG_BENCH_DIR").map_or_else(
        || {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            root.canonicalize().unwrap_or(root).join("target/bench-tmp")
        },
        PathBuf::from,
    )
}

fn median(values: &[f64]) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

fn main() -> BenchResult<()> {
    let rounds = env_number("CONVLOG_BENCH_ROUNDS", 5).max(1);
    let runs = env_number("CONVLOG_BENCH_RUNS", 20).max(1);
    RUNS.store(runs as u64, Ordering::Relaxed);
    let lengths: Vec<usize> = std::env::var("CONVLOG_BENCH_LENGTHS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![10, 50, 200]);
    let only: Option<Vec<String>> = std::env::var("CONVLOG_BENCH_ONLY").ok().map(|list| {
        list.split(',')
            .map(|name| name.trim().to_string())
            .collect()
    });
    let cases: Vec<Case> = SHAPES
        .iter()
        .flat_map(|&tool_rounds| {
            lengths.iter().map(move |&length| Case {
                length,
                rounds: tool_rounds,
            })
        })
        .collect();
    std::fs::create_dir_all(scratch_root())?;
    let scratch = tempfile::tempdir_in(scratch_root())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;

    println!("# convlog-agent runner_step bench");
    println!();
    println!(
        "cores: {}, rounds: {rounds}, runs per variant, case and round: {runs}, \
         lengths: {lengths:?}, tool rounds per run: {SHAPES:?}, scratch: {}",
        std::thread::available_parallelism().map_or(0, |cores| cores.get()),
        scratch.path().display()
    );

    // The `none` recorders and the durable ones write to stores of their
    // own: a host picks one durability for a store, and writes into a file
    // whose pages another writer's fsync is flushing can wait for that
    // flush, which is not what `none` costs.
    let store = Arc::new(Store::open(
        scratch.path().join("store"),
        StoreOptions::default(),
    )?);
    let durable_store = Arc::new(Store::open(
        scratch.path().join("durable-store"),
        StoreOptions::default(),
    )?);
    let base_url = spawn_server()?;
    let tools = Toolset::new().with(lookup_tool());
    let seeder = Runner::new(
        Arc::clone(&store),
        Arc::new(LocalModel {
            times: ClientTimes::default(),
        }),
        tools.clone(),
        runner_options(Some(Durability::None)),
    );
    let durable_seeder = Runner::new(
        Arc::clone(&durable_store),
        Arc::new(LocalModel {
            times: ClientTimes::default(),
        }),
        tools.clone(),
        runner_options(Some(Durability::None)),
    );

    let mut variants = Vec::new();
    for client_name in ["local", "http"] {
        for recorder in Recorder::ALL {
            let wanted = format!("{client_name} {}", recorder.name()).replace(' ', "-");
            if only.as_ref().is_some_and(|only| !only.contains(&wanted)) {
                continue;
            }
            let (client, local): (Arc<dyn ModelClient>, _) = if client_name == "local" {
                let local = Arc::new(LocalModel {
                    times: ClientTimes::default(),
                });
                (local.clone(), Some(local))
            } else {
                let config = ClientConfig::new(ApiKind::OpenAiChat, MODEL)
                    .base_url(base_url.clone())
                    .api_key(Some("bench".into()))
                    .max_attempts(1);
                (Arc::new(HttpClient::new(config)), None)
            };
            let runner = Runner::new(
                Arc::clone(if recorder == Recorder::ConvlogGroup {
                    &durable_store
                } else {
                    &store
                }),
                Arc::clone(&client),
                tools.clone(),
                runner_options(recorder.durability()),
            );
            variants.push(Variant {
                client_name,
                recorder,
                client,
                local,
                runner,
                fresh: Vec::new(),
                naive: Vec::new(),
                results: vec![Vec::new(); cases.len()],
                client_cpu: vec![(0, 0, 0, 0); cases.len()],
                scheduler: vec![(0, 0); cases.len()],
            });
        }
    }

    // Seeding: every convlog run gets its own conversation of N entries;
    // the naive loop gets the entries of one such conversation.
    let seeding = Instant::now();
    let mut conversations = 0usize;
    TOOL_ROUNDS.store(1, Ordering::Relaxed);
    for (index, case) in cases.iter().enumerate() {
        let template = format!("template-{}", case.length);
        if store.conversation(&template).is_err() {
            runtime.block_on(seed(&seeder, &template, case.length))?;
        }
        let history: Vec<ConversationEntry> =
            store.conversation(&template)?.entries().cloned().collect();
        for variant in &mut variants {
            let mut ids = Vec::new();
            if variant.is_convlog() {
                let seeder = if variant.recorder == Recorder::ConvlogGroup {
                    &durable_seeder
                } else {
                    &seeder
                };
                for run in 0..rounds * runs {
                    let id = format!("{}-{index}-{run}", variant.name().replace(' ', "-"));
                    runtime.block_on(seed(seeder, &id, case.length))?;
                    ids.push(id);
                    conversations += 1;
                }
                ids.reverse();
            }
            variant.fresh.push(ids);
            let path = scratch.path().join(format!(
                "{}-{index}.jsonl",
                variant.name().replace(' ', "-")
            ));
            let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
            for entry in &history {
                file.write_all(&jsonl(entry)?)?;
            }
            file.sync_data()?;
            variant.naive.push((history.clone(), file));
        }
    }
    store.sync()?;
    durable_store.sync()?;
    println!(
        "seeded {conversations} conversations in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );

    sub_steps(&runtime, &store, &lengths, &tools)?;

    for round in 0..rounds {
        for (index, case) in cases.iter().enumerate() {
            TOOL_ROUNDS.store(case.rounds, Ordering::Relaxed);
            for variant in &mut variants {
                // The slices the runner kept of another case's conversations
                // would be dropped inside this case's timing.
                variant.runner.forget_kept();
                let micros = runtime.block_on(measure(variant, index, *case, runs, &tools))?;
                variant.results[index].push(micros);
            }
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }

    report(&variants, &cases, &lengths);
    in_a_row(&runtime, &store, &scratch, &tools, rounds)?;
    Ok(())
}

/// A host continuing one conversation: runs of one tool round (two model
/// calls) in a row on the same conversation, which grows by five entries a
/// run, from N = 10. The same runner does every run (it keeps the folded
/// conversation between runs), a new runner each run (reads it from the
/// store every run), and the naive loop with its history in memory.
fn in_a_row(
    runtime: &tokio::runtime::Runtime,
    store: &Arc<Store>,
    scratch: &tempfile::TempDir,
    tools: &Toolset,
    rounds: usize,
) -> BenchResult<()> {
    let turns = env_number("CONVLOG_BENCH_IN_A_ROW", 40);
    if turns == 0 {
        return Ok(());
    }
    TOOL_ROUNDS.store(1, Ordering::Relaxed);
    let client: Arc<dyn ModelClient> = Arc::new(LocalModel {
        times: ClientTimes::default(),
    });
    let new_runner = || {
        Runner::new(
            Arc::clone(store),
            Arc::clone(&client),
            tools.clone(),
            runner_options(Some(Durability::None)),
        )
    };
    let seeder = new_runner();
    let steps = (turns * 2) as f64;
    let mut kept = Vec::new();
    let mut fresh = Vec::new();
    let mut naive = Vec::new();
    for round in 0..rounds {
        let start_kept = format!("in-a-row-kept-{round}");
        let start_fresh = format!("in-a-row-fresh-{round}");
        runtime.block_on(seed(&seeder, &start_kept, 10))?;
        runtime.block_on(seed(&seeder, &start_fresh, 10))?;
        let history: Vec<ConversationEntry> = store
            .conversation(&start_kept)?
            .entries()
            .cloned()
            .collect();

        let runner = new_runner();
        let start = Instant::now();
        for _ in 0..turns {
            runtime.block_on(runner.run(&start_kept, INPUT))?;
        }
        kept.push(start.elapsed().as_secs_f64() * 1e6 / steps);

        let start = Instant::now();
        for _ in 0..turns {
            runtime.block_on(new_runner().run(&start_fresh, INPUT))?;
        }
        fresh.push(start.elapsed().as_secs_f64() * 1e6 / steps);

        let path = scratch.path().join(format!("in-a-row-{round}.jsonl"));
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        let mut history = history;
        let start = Instant::now();
        for _ in 0..turns {
            runtime.block_on(naive_run(&*client, tools, &mut history, &mut file, false))?;
        }
        naive.push(start.elapsed().as_secs_f64() * 1e6 / steps);
    }
    let show = |times: &[f64]| {
        let low = times.iter().cloned().fold(f64::INFINITY, f64::min);
        let high = times.iter().cloned().fold(0.0, f64::max);
        format!(
            "{:.1} [{low:.1}..{high:.1}] ({:.1}%)",
            median(times),
            median(times) / (ROUND_TRIP.as_secs_f64() * 1e6) * 100.0
        )
    };
    println!();
    println!(
        "## {turns} runs in a row on one conversation (N = 10 to {}), µs per step, \
         median of {rounds} rounds [min..max] (% of a 1 ms round trip)",
        10 + 5 * turns
    );
    println!();
    println!("| variant | µs per step |");
    println!("|---|---|");
    println!(
        "| local convlog none, one runner (kept conversation) | {} |",
        show(&kept)
    );
    println!(
        "| local convlog none, a new runner each run | {} |",
        show(&fresh)
    );
    println!("| local naive none | {} |", show(&naive));
    println!();
    println!(
        "ratios: kept / naive {:.2}, new runner / naive {:.2}",
        median(&kept) / median(&naive),
        median(&fresh) / median(&naive)
    );
    Ok(())
}

/// Median µs of `work` over `samples` calls.
fn time_median(samples: usize, mut work: impl FnMut()) -> f64 {
    let times: Vec<f64> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            work();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    median(&times)
}

/// What the pieces of a step cost alone, in a tight loop on one thread
/// (caches warm, no hand-off between threads).
fn sub_steps(
    runtime: &tokio::runtime::Runtime,
    store: &Store,
    lengths: &[usize],
    tools: &Toolset,
) -> BenchResult<()> {
    const SAMPLES: usize = 500;
    if env_number("CONVLOG_BENCH_SUB_STEPS", 1) == 0 {
        return Ok(());
    }
    println!();
    println!("## sub-steps alone (median of {SAMPLES}, µs)");
    println!();
    let hop = runtime.block_on(async {
        let mut times = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let start = Instant::now();
            tokio::task::spawn_blocking(|| ()).await.expect("no panic");
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        median(&times)
    });
    let tool = runtime.block_on(async {
        let context = ToolContext {
            conversation_id: "c".into(),
            evaluation_id: "e".into(),
            call_id: "call".into(),
            resumed: false,
        };
        let mut times = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let start = Instant::now();
            let output = tools.call(TOOL, "{\"key\":\"k\"}", &context).await;
            std::hint::black_box(output.expect("the tool answers"));
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        median(&times)
    });
    let tool_reply = canned_response(false);
    let final_reply = canned_response(true);
    let ingest = time_median(SAMPLES, || {
        std::hint::black_box(read_reply(tool_reply.as_bytes()).expect("reads"));
        std::hint::black_box(read_reply(final_reply.as_bytes()).expect("reads"));
    }) / 2.0;
    println!(
        "spawn_blocking round trip (one per store append or read of the runner): {hop:.1}; \
         Toolset::call of the trivial tool: {tool:.1}; parse + ingest of a reply: {ingest:.1}"
    );
    let specs = tools.specs();
    let render = render_options();
    for &length in lengths {
        let template = format!("template-{length}");
        let slice = store.conversation(&template)?;
        let entries: Vec<ConversationEntry> = slice.entries().cloned().collect();
        let read = time_median(SAMPLES / 5, || {
            std::hint::black_box(store.conversation(&template).expect("seeded"));
        });
        let clone = time_median(SAMPLES, || {
            std::hint::black_box(slice.entries().cloned().collect::<Vec<_>>());
        });
        let state = time_median(SAMPLES, || {
            let last = slice.evaluations().last().expect("seeded");
            std::hint::black_box(convlog::ResumeState::from_slice(&slice, last));
        });
        let request = ModelRequest {
            entries: &entries,
            tools: &specs,
            render: &render,
        };
        let body = time_median(SAMPLES, || {
            std::hint::black_box(request_body(&request).expect("renders"));
        });
        println!(
            "N = {length}: Store::conversation {read:.1}; cloning its entries {clone:.1}; \
             ResumeState::from_slice {state:.1}; render + serialise the request {body:.1}"
        );
    }
    Ok(())
}

/// Fills conversation `id` with `length` entries (whole evaluations of one
/// tool round).
async fn seed(seeder: &Runner, id: &str, length: usize) -> BenchResult<()> {
    for _ in 0..length.div_ceil(ENTRIES_PER_RUN) {
        seeder.run(id, INPUT).await?;
    }
    Ok(())
}

fn jsonl(entry: &ConversationEntry) -> BenchResult<Vec<u8>> {
    let mut line = serde_json::to_vec(entry)?;
    line.push(b'\n');
    Ok(line)
}

/// `runs` runs of `variant` on case `index`: microseconds per run.
async fn measure(
    variant: &mut Variant,
    index: usize,
    case: Case,
    runs: usize,
    tools: &Toolset,
) -> BenchResult<f64> {
    let counters = |local: &LocalModel| {
        let times = &local.times;
        [
            times.render_ns.load(Ordering::Relaxed),
            times.ingest_ns.load(Ordering::Relaxed),
            times.calls.load(Ordering::Relaxed),
            times.request_bytes.load(Ordering::Relaxed),
        ]
    };
    let before = variant.local.as_deref().map(counters);
    let scheduled = scheduler_ns();
    let start = Instant::now();
    Profiled(Box::pin(async {
        if variant.is_convlog() {
            for _ in 0..runs {
                let id = variant.fresh[index].pop().ok_or("out of conversations")?;
                let outcome = variant.runner.run(&id, INPUT).await?;
                assert_eq!(outcome.entries.len(), case.entries(), "{id}");
            }
        } else {
            let sync = variant.recorder == Recorder::NaiveSync;
            let (history, file) = &mut variant.naive[index];
            let length = history.len();
            for _ in 0..runs {
                naive_run(&*variant.client, tools, history, file, sync).await?;
                assert_eq!(history.len() - length, case.entries() - 1);
                history.truncate(length);
            }
        }
        BenchResult::Ok(())
    }))
    .await?;
    let elapsed = start.elapsed();
    let after = scheduler_ns();
    let slot = &mut variant.scheduler[index];
    slot.0 += after.0.saturating_sub(scheduled.0);
    slot.1 += after.1.saturating_sub(scheduled.1);
    if let (Some(local), Some(before)) = (variant.local.as_deref(), before) {
        let after = counters(local);
        let slot = &mut variant.client_cpu[index];
        slot.0 += after[0] - before[0];
        slot.1 += after[1] - before[1];
        slot.2 += after[2] - before[2];
        slot.3 += after[3] - before[3];
    }
    Ok(elapsed.as_secs_f64() * 1e6 / runs as f64)
}

/// The measured runs as a future of their own whose `poll` is never
/// inlined, so a profiler can count only them (work in the runner's task:
/// a spawned tool task runs elsewhere):
/// `valgrind --tool=callgrind --toggle-collect='*Profiled*' ...` with
/// `CONVLOG_BENCH_SUB_STEPS=0 CONVLOG_BENCH_IN_A_ROW=0`.
struct Profiled<'a>(std::pin::Pin<Box<dyn std::future::Future<Output = BenchResult<()>> + 'a>>);

impl std::future::Future for Profiled<'_> {
    type Output = BenchResult<()>;

    #[inline(never)]
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<BenchResult<()>> {
        self.0.as_mut().poll(context)
    }
}

/// The hand-written loop: the same steps, each message one JSON line.
async fn naive_run(
    client: &dyn ModelClient,
    tools: &Toolset,
    history: &mut Vec<ConversationEntry>,
    file: &mut File,
    sync: bool,
) -> BenchResult<()> {
    let evaluation_id = format!("eval-{}", uuid::Uuid::new_v4().simple());
    let specs: Vec<ToolSpec> = tools.specs();
    let render = render_options();
    let mut record =
        |history: &mut Vec<ConversationEntry>, entry: ConversationEntry| -> BenchResult<()> {
            file.write_all(&jsonl(&entry)?)?;
            if sync {
                file.sync_data()?;
            }
            history.push(entry);
            Ok(())
        };
    let mut sequence = 0;
    record(
        history,
        ConversationEntry::user(evaluation_id.as_str(), sequence, INPUT),
    )?;
    let mut turn = 0;
    loop {
        let request = ModelRequest {
            entries: history,
            tools: &specs,
            render: &render,
        };
        let mut entry = client.complete(request, None).await?.entry;
        sequence += 1;
        turn += 1;
        entry.evaluation_id.clone_from(&evaluation_id);
        entry.sequence = sequence;
        entry.turn = turn;
        let calls = entry.tool_calls.clone();
        record(history, entry)?;
        if calls.is_empty() {
            return Ok(());
        }
        for call in calls {
            let context = ToolContext {
                conversation_id: "naive".into(),
                evaluation_id: evaluation_id.clone(),
                call_id: call.call_id.clone(),
                resumed: false,
            };
            let output = tools
                .call(&call.name, &call.arguments, &context)
                .await
                .map_err(|error| error.0)?;
            sequence += 1;
            let result = ConversationEntry::tool_result(
                evaluation_id.as_str(),
                sequence,
                &call.call_id,
                &call.name,
                output,
            )
            .with_turn(turn);
            record(history, result)?;
        }
    }
}

/// Runs per variant, case and round (set once in `main`).
static RUNS: AtomicU64 = AtomicU64::new(1);

/// Median µs per run of `variant`'s case `index`.
fn run_micros(variant: &Variant, index: usize) -> f64 {
    median(&variant.results[index])
}

fn report(variants: &[Variant], cases: &[Case], lengths: &[usize]) {
    let round_trip = ROUND_TRIP.as_secs_f64() * 1e6;
    let index_of = |length: usize, rounds: u64| {
        cases
            .iter()
            .position(|case| case.length == length && case.rounds == rounds)
            .expect("measured")
    };
    let header = |title: &str| {
        println!();
        println!("## {title}");
        println!();
        let mut row = "| variant |".to_string();
        for length in lengths {
            row.push_str(&format!(" N = {length} |"));
        }
        println!("{row}");
        println!("|---|{}", "---|".repeat(lengths.len()));
    };
    for &rounds in &SHAPES {
        header(&format!(
            "µs per step, runs of {rounds} tool round(s) ({} model calls): median of rounds \
             [min..max] (% of a 1 ms round trip)",
            rounds + 1
        ));
        for variant in variants {
            let mut row = format!("| {} |", variant.name());
            for &length in lengths {
                let index = index_of(length, rounds);
                let steps = cases[index].steps() as f64;
                let per_step: Vec<f64> = variant.results[index]
                    .iter()
                    .map(|run| run / steps)
                    .collect();
                let min = per_step.iter().copied().fold(f64::INFINITY, f64::min);
                let max = per_step.iter().copied().fold(0.0, f64::max);
                let middle = median(&per_step);
                row.push_str(&format!(
                    " {middle:.1} [{min:.1}..{max:.1}] ({:.1}%) |",
                    middle / round_trip * 100.0
                ));
            }
            println!("{row}");
        }
    }

    let (small, large) = (SHAPES[0], SHAPES[SHAPES.len() - 1]);
    let marginal = |variant: &Variant, length: usize| {
        let (short, long) = (index_of(length, small), index_of(length, large));
        (run_micros(variant, long) - run_micros(variant, short))
            / (cases[long].steps() - cases[short].steps()) as f64
    };
    header(&format!(
        "marginal µs per step (runs of {large} minus runs of {small} tool rounds, over the \
         extra model calls) and fixed µs per run (a run of {small} round minus its steps)"
    ));
    for variant in variants {
        let mut row = format!("| {} |", variant.name());
        for &length in lengths {
            let step = marginal(variant, length);
            let short = index_of(length, small);
            let fixed = run_micros(variant, short) - step * cases[short].steps() as f64;
            row.push_str(&format!(
                " step {step:.1} ({:.1}%), run {fixed:.1} |",
                step / round_trip * 100.0
            ));
        }
        println!("{row}");
    }

    header(&format!(
        "CPU µs per step of all threads (server included for http) / run-queue wait µs per \
         step, runs of {small} tool round(s), summed over rounds"
    ));
    for variant in variants {
        let mut row = format!("| {} |", variant.name());
        for &length in lengths {
            let index = index_of(length, small);
            let steps = (variant.results[index].len() as u64 * cases[index].steps()) as f64;
            let runs_per_round = RUNS.load(Ordering::Relaxed) as f64;
            let (cpu, wait) = variant.scheduler[index];
            let per_step = |ns: u64| ns as f64 / 1e3 / (steps * runs_per_round);
            row.push_str(&format!(
                " CPU {:.1} / wait {:.1} |",
                per_step(cpu),
                per_step(wait)
            ));
        }
        println!("{row}");
    }

    println!();
    println!("## ratios convlog / naive (same client; medians per step, then marginal)");
    println!();
    for (client, convlog, naive) in [
        ("local", Recorder::ConvlogNone, Recorder::NaiveNone),
        ("local", Recorder::ConvlogGroup, Recorder::NaiveSync),
        ("http", Recorder::ConvlogNone, Recorder::NaiveNone),
        ("http", Recorder::ConvlogGroup, Recorder::NaiveSync),
    ] {
        let find = |recorder| {
            variants
                .iter()
                .find(|variant| variant.client_name == client && variant.recorder == recorder)
        };
        let (Some(ours), Some(theirs)) = (find(convlog), find(naive)) else {
            continue;
        };
        let ratios: Vec<String> = lengths
            .iter()
            .map(|&length| {
                let shape: Vec<String> = SHAPES
                    .iter()
                    .map(|&rounds| {
                        let index = index_of(length, rounds);
                        format!("{:.2}", run_micros(ours, index) / run_micros(theirs, index))
                    })
                    .collect();
                format!(
                    "N = {length}: {} / marginal {:.2}",
                    shape.join(", "),
                    marginal(ours, length) / marginal(theirs, length)
                )
            })
            .collect();
        println!(
            "{client} {} / {}: {}",
            convlog.name(),
            naive.name(),
            ratios.join("; ")
        );
    }

    println!();
    println!("## the local model's CPU work per model call (inside every local figure)");
    println!();
    for variant in variants.iter().filter(|variant| variant.local.is_some()) {
        let cpu: Vec<String> = lengths
            .iter()
            .map(|&length| {
                let (render, ingest, calls, bytes) = variant.client_cpu[index_of(length, small)];
                let calls = calls.max(1) as f64;
                format!(
                    "N = {length}: render+serialise {:.1} µs ({:.0} B), parse+ingest {:.1} µs",
                    render as f64 / calls / 1e3,
                    bytes as f64 / calls,
                    ingest as f64 / calls / 1e3
                )
            })
            .collect();
        println!("{}: {}", variant.name(), cpu.join("; "));
    }
}
