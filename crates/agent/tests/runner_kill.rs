//! Real processes: an agent (the runner, a scripted model, slow tools with
//! a side effect) killed with SIGKILL at random points and resumed by a new
//! process, until its evaluation ends.
//!
//! The child is this test binary again (`CONVLOG_RUNNER_ROLE=agent`). It
//! opens the store, starts the evaluation (or resumes it when the
//! conversation exists) and prints a progress line `P ...` at every step:
//! each assistant entry recorded, each tool started, each side effect made
//! durable (the tool appends its call id to an effects file and fsyncs it
//! before returning), each tool result recorded, and `P FINAL` at the end.
//! The parent kills it right after the k-th progress line, k drawn from a
//! seeded generator (`CONVLOG_RUNNER_KILL_SEED`), 1 to
//! `KILLS_PER_CYCLE_MAX` times per cycle, then lets a last child finish.
//! After every kill it records which calls have a result in the store and
//! how many side effects each has made; at the end it checks:
//!
//! 1. no call whose result was recorded ever ran again (its effect count
//!    never grows after a check saw its result);
//! 2. every call ran, and at most once more per kill;
//! 3. the final conversation equals an uninterrupted run's (ids and times
//!    left out).
//!
//! `CONVLOG_RUNNER_KILL_CYCLES=N` runs N cycles (default 20). The model is
//! `runner_support::weather_script` behind the `ModelClient` trait: a
//! parameter, so the same test can drive an HTTP fake provider.

mod runner_support;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use convlog::model::ConversationEntry;
use convlog::{Store, StoreOptions};
use convlog_agent::client::BoxFuture;
use convlog_agent::{
    ModelClient, RunEvent, Runner, RunnerOptions, StopReason, Tool, ToolContext, ToolError,
    ToolSpec, Toolset,
};
use runner_support::{normalise, weather_script, weather_text, ScriptedClient, ROUNDS};

const CONVERSATION: &str = "killed-trip";
const INPUT: &str = "Weather in seven cities?";
const TEST_NAME: &str = "agent_child";
/// Kills per cycle, at most (then a last child runs to the end).
const KILLS_PER_CYCLE_MAX: u64 = 3;
/// Progress lines of an uninterrupted run: 3 assistant entries, 3 lines
/// per call (started, effect, finished) for 5 calls, `FINAL`.
const PROGRESS_LINES: u64 = 3 + 5 * 3 + 1;

/// The model every process uses: deterministic, a function of what it is
/// shown (swap for a fake HTTP provider's client here).
fn model() -> Arc<dyn ModelClient> {
    ScriptedClient::new(weather_script(&ROUNDS))
}

fn options() -> RunnerOptions {
    RunnerOptions::new().system_prompt(Some("You report weather.".into()))
}

/// A slow tool whose side effect is a line in the effects file, durable
/// before it returns.
struct SlowWeather {
    effects: PathBuf,
    /// Print a progress line per effect (in the child).
    report: bool,
}

impl Tool for SlowWeather {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "weather".into(),
            description: "The weather of a city, slowly.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let pause = 1 + context.call_id.len() as u64 % 7;
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let effects = self.effects.clone();
            let line = format!("{}\n", context.call_id);
            tokio::task::spawn_blocking(move || {
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(effects)?;
                file.write_all(line.as_bytes())?;
                file.sync_all()
            })
            .await
            .expect("effect task")
            .map_err(|error| ToolError(format!("effect not written: {error}")))?;
            if self.report {
                progress(&format!("effect {}", context.call_id));
            }
            Ok(weather_text(arguments))
        })
    }
}

fn progress(line: &str) {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "P {line}").unwrap();
    stdout.flush().unwrap();
}

/// Child role: run or resume the evaluation to its end.
#[test]
fn agent_child() {
    if std::env::var("CONVLOG_RUNNER_ROLE").as_deref() != Ok("agent") {
        return;
    }
    println!();
    std::panic::set_hook(Box::new(|info| {
        println!("FAIL panic: {info}");
        std::process::exit(3);
    }));
    let dir = PathBuf::from(std::env::var("CONVLOG_RUNNER_STORE").unwrap());
    let effects = PathBuf::from(std::env::var("CONVLOG_RUNNER_EFFECTS").unwrap());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let store = Arc::new(Store::open(&dir, StoreOptions::default()).unwrap());
        let tools = Toolset::new().with(SlowWeather {
            effects,
            report: true,
        });
        let runner = Runner::new(Arc::clone(&store), model(), tools, options());
        let observer = |event: &RunEvent| match event {
            RunEvent::AssistantRecorded(entry) => {
                progress(&format!("assistant {}", entry.sequence))
            }
            RunEvent::ToolStarted { call, .. } => progress(&format!("started {}", call.call_id)),
            RunEvent::ToolFinished(entry) => progress(&format!(
                "finished {}",
                entry.tool_call_id.as_deref().unwrap_or_default()
            )),
            _ => {}
        };
        let outcome = if store.contains_conversation(CONVERSATION) {
            runner
                .resume_with(CONVERSATION, convlog::ResumeOptions::new(), Some(&observer))
                .await
        } else {
            runner.run_stream(CONVERSATION, INPUT, &observer).await
        }
        .unwrap();
        assert!(
            matches!(
                outcome.stop,
                StopReason::Final | StopReason::AlreadyFinished
            ),
            "{:?}",
            outcome.stop
        );
        progress("FINAL");
    });
}

fn spawn_agent(store: &Path, effects: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env("CONVLOG_RUNNER_ROLE", "agent")
        .env("CONVLOG_RUNNER_STORE", store)
        .env("CONVLOG_RUNNER_EFFECTS", effects)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Runs a child until its `kill_after`-th progress line (then SIGKILL) or
/// its end; true when it finished the evaluation.
fn run_agent(store: &Path, effects: &Path, kill_after: Option<u64>) -> bool {
    let mut child = spawn_agent(store, effects);
    let stdout = child.stdout.take().unwrap();
    let mut seen = 0;
    let mut finished = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        assert!(!line.starts_with("FAIL"), "child failed: {line}");
        let Some(step) = line.strip_prefix("P ") else {
            continue;
        };
        seen += 1;
        if step == "FINAL" {
            finished = true;
        }
        if kill_after == Some(seen) {
            child.kill().unwrap();
            break;
        }
    }
    let status = child.wait().unwrap();
    if kill_after.is_none() {
        assert!(status.success(), "the last child failed: {status}");
        assert!(finished, "the last child did not finish");
    }
    finished
}

fn effect_counts(effects: &Path) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    if let Ok(text) = std::fs::read_to_string(effects) {
        for line in text.lines() {
            *counts.entry(line.to_string()).or_default() += 1;
        }
    }
    counts
}

fn entries(store: &Store) -> Vec<ConversationEntry> {
    store
        .conversation(CONVERSATION)
        .unwrap()
        .entries()
        .cloned()
        .collect()
}

/// A small seeded generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The uninterrupted run's conversation, in this process.
fn reference() -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store =
            Arc::new(Store::open(dir.path().join("store"), StoreOptions::default()).unwrap());
        let tools = Toolset::new().with(SlowWeather {
            effects,
            report: false,
        });
        let runner = Runner::new(Arc::clone(&store), model(), tools, options());
        let outcome = runner.run(CONVERSATION, INPUT).await.unwrap();
        assert_eq!(outcome.stop, StopReason::Final);
        normalise(&entries(&store))
    })
}

#[test]
fn sigkill_at_random_points_resumes_to_the_uninterrupted_conversation() {
    if std::env::var("CONVLOG_RUNNER_ROLE").is_ok() {
        return;
    }
    let expected = reference();
    let seed = env_number("CONVLOG_RUNNER_KILL_SEED", 0x5eed_2026);
    let cycles = env_number("CONVLOG_RUNNER_KILL_CYCLES", 20);
    let mut rng = Rng(seed | 1);
    let mut kills_total = 0;
    let mut reruns_total = 0;
    for cycle in 0..cycles {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("store");
        let effects = dir.path().join("effects");
        // call id -> effect count when a check first saw its result.
        let mut completed_at: BTreeMap<String, usize> = BTreeMap::new();
        let kills = 1 + rng.below(KILLS_PER_CYCLE_MAX);
        let mut finished = false;
        for _ in 0..kills {
            let kill_after = 1 + rng.below(PROGRESS_LINES);
            finished = run_agent(&store_dir, &effects, Some(kill_after));
            kills_total += 1;
            let counts = effect_counts(&effects);
            if store_dir.exists() {
                let store = Store::open(&store_dir, StoreOptions::default()).unwrap();
                if store.contains_conversation(CONVERSATION) {
                    for entry in entries(&store) {
                        if let Some(call_id) = entry.tool_call_id {
                            let count = counts.get(&call_id).copied().unwrap_or(0);
                            completed_at.entry(call_id).or_insert(count);
                        }
                    }
                }
            }
            if finished {
                break;
            }
        }
        if !finished {
            run_agent(&store_dir, &effects, None);
        }
        let store = Store::open(&store_dir, StoreOptions::default()).unwrap();
        assert_eq!(
            normalise(&entries(&store)),
            expected,
            "cycle {cycle} (seed {seed:#x})"
        );
        let counts = effect_counts(&effects);
        for (call_id, count) in &completed_at {
            assert_eq!(
                counts[call_id], *count,
                "cycle {cycle}: {call_id} ran again after its result was recorded"
            );
        }
        let calls: usize = ROUNDS.iter().map(|round| round.len()).sum();
        assert_eq!(
            counts.len(),
            calls,
            "cycle {cycle}: every call ran: {counts:?}"
        );
        assert!(
            counts.values().all(|count| (*count as u64) <= 1 + kills),
            "cycle {cycle}: {counts:?}"
        );
        reruns_total += counts.values().filter(|count| **count > 1).count();
    }
    assert!(kills_total >= cycles);
    eprintln!(
        "{cycles} cycles, {kills_total} kills, {reruns_total} calls run again \
         (killed after their effect, before their result was recorded)"
    );
}
