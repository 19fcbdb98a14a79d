//! `convlog demo`: an agent host runs the agent runner (`convlog-agent`)
//! with a scripted model, is killed with SIGKILL in the middle of a batch of
//! parallel tool calls, and a new host's runner carries on from the store:
//! it re-runs only the unfinished call, finishes the evaluation, and the
//! provider request messages are rebuilt from the store.
//!
//! The model and the tools are scripted: no network.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use convlog::model::{ConversationEntry, Role, ToolCall, ToolStatus};
use convlog::provider::{self, Provider, RenderOptions};
use convlog::resume::{PromptIdentity, ResumeOptions, ResumeState};
use convlog::store::{Store, StoreOptions};
use convlog::{Error, Result};
use convlog_agent::client::{BoxFuture, DeltaSink};
use convlog_agent::{
    FunctionTool, ModelClient, ModelError, ModelReply, ModelRequest, RunEvent, RunOutcome, Runner,
    RunnerOptions, StopReason, ToolContext, ToolError, Toolset,
};
use serde::Deserialize;

use crate::shell::Failure;

const CONVERSATION: &str = "trip-planner";
const CITIES: [&str; 3] = ["paris", "rome", "oslo"];
/// The worker's tool for this city hangs, so the kill lands mid-batch.
const SLOW_CITY: &str = "oslo";
/// How long the demo waits for the worker's fast calls to be recorded
/// before it kills it anyway.
const KILL_WAIT: Duration = Duration::from_secs(120);

fn default_demo_dir() -> PathBuf {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or_default();
    std::env::temp_dir()
        .join("convlog-demo")
        .join(format!("store-{stamp}-{}", std::process::id()))
}

fn io_error(operation: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io {
        operation,
        path,
        source,
    }
}

fn prompt() -> PromptIdentity {
    PromptIdentity {
        namespace: Some("travel".into()),
        key: Some("planner".into()),
    }
}

/// The scripted model: asks for the weather of every city the last user
/// message names, all at once, then answers from the results it was shown.
struct ScriptedModel;

fn scripted_reply(view: &[ConversationEntry]) -> ConversationEntry {
    let last_user = view
        .iter()
        .rposition(|entry| entry.role == Role::User)
        .unwrap_or(0);
    let asked = view[last_user]
        .content
        .clone()
        .unwrap_or_default()
        .to_lowercase();
    let results: Vec<String> = view[last_user..]
        .iter()
        .filter(|entry| entry.role == Role::Tool)
        .filter_map(|entry| entry.content.clone())
        .collect();
    if results.is_empty() {
        let calls = CITIES
            .iter()
            .filter(|city| asked.contains(*city))
            .map(|city| {
                ToolCall::new(
                    format!("call_{city}"),
                    "weather",
                    format!("{{\"city\":\"{city}\"}}"),
                )
            });
        let mut entry = ConversationEntry::assistant_calling("", 0, calls);
        entry.content = Some("Let me check the weather.".into());
        entry.finish_reason = Some("tool_calls".into());
        return entry;
    }
    let mut entry = ConversationEntry::assistant(
        "",
        0,
        format!(
            "Here is the weekend weather: {}. Pack accordingly.",
            results.join("; ")
        ),
    );
    entry.finish_reason = Some("stop".into());
    entry
}

impl ModelClient for ScriptedModel {
    fn provider(&self) -> Provider {
        Provider::OpenAiChat
    }

    fn describe(&self) -> String {
        "the demo's scripted model".into()
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        _sink: Option<DeltaSink<'a>>,
    ) -> BoxFuture<'a, std::result::Result<ModelReply, ModelError>> {
        let entry = scripted_reply(request.entries);
        Box::pin(async move { Ok(ModelReply { entry, usage: None }) })
    }
}

#[derive(Deserialize)]
struct City {
    city: String,
}

fn weather(city: &str) -> String {
    match city {
        "paris" => "paris: 18C, light rain".into(),
        "rome" => "rome: 24C, sunny".into(),
        "oslo" => "oslo: 9C, windy".into(),
        other => format!("{other}: unknown"),
    }
}

/// The weather tool; in the worker, the slow city's call never returns
/// (the demo kills the process while it runs). Counts its runs.
fn weather_tool(worker: bool, runs: Arc<AtomicUsize>) -> FunctionTool {
    FunctionTool::typed(
        "weather",
        "The weekend weather of a city",
        serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        move |city: City, _context: ToolContext| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                if worker && city.city == SLOW_CITY {
                    // The host dies here: the demo kills this process.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Ok::<String, ToolError>(weather(&city.city))
            }
        },
    )
}

fn runner(store: Arc<Store>, worker: bool, runs: Arc<AtomicUsize>) -> Runner {
    Runner::new(
        store,
        Arc::new(ScriptedModel),
        Toolset::new().with(weather_tool(worker, runs)),
        RunnerOptions::new()
            .system_prompt(Some(
                "You are a travel planner. Use the weather tool.".into(),
            ))
            .prompt(Some(prompt())),
    )
}

fn say(line: &str) {
    println!("{line}");
    std::io::stdout().flush().ok();
}

/// The first host: one whole evaluation, then a second one that it does not
/// live to finish. Each line it prints comes after what it says was
/// recorded.
pub fn worker(dir: &Path) -> std::result::Result<(), Failure> {
    let store = Arc::new(Store::open(dir, StoreOptions::default())?);
    let runner = runner(store, true, Arc::default());
    let observer = |event: &RunEvent| match event {
        RunEvent::AssistantRecorded(entry) if !entry.tool_calls.is_empty() => {
            say(&format!("model asked for {} tools", entry.tool_calls.len()));
        }
        RunEvent::ToolStarted { call, .. } => say(&format!("running {}", call.call_id)),
        _ => {}
    };
    crate::chat::runtime()?.block_on(async {
        let first = runner
            .run(CONVERSATION, "Is it warm in Rome this weekend?")
            .await
            .map_err(|error| Failure(error.to_string()))?;
        say(&format!("evaluation {} finished", first.evaluation_id));
        runner
            .run_stream(
                CONVERSATION,
                "Plan a weekend: weather in Paris, Rome and Oslo?",
                &observer,
            )
            .await
            .map_err(|error| Failure(error.to_string()))?;
        Ok(())
    })
}

/// The demonstration: start the first host, kill it mid-batch, carry on.
pub fn run(dir: Option<PathBuf>) -> std::result::Result<(), Failure> {
    let dir = dir.unwrap_or_else(default_demo_dir);
    if dir.exists() {
        return Err(Failure(format!(
            "{} already exists; the demo wants a new directory (pass another --dir)",
            dir.display()
        )));
    }
    println!(
        "convlog demo: an agent host dies in the middle of a tool batch; a new one carries on.\n"
    );
    println!("Store: {}\n", dir.display());
    kill_worker_mid_batch(&dir)?;
    let state = report_resume(&Store::open_read_only(&dir, StoreOptions::default())?)?;
    let evaluation = finish_evaluation(&dir, &state)?;
    print_requests(
        &Store::open_read_only(&dir, StoreOptions::default())?,
        &evaluation,
    )?;
    print_verified(&dir)?;
    Ok(())
}

/// Steps 1 and 2: runs [`worker`] in a child process and kills it with
/// SIGKILL while the slow call of its parallel batch runs (once the other
/// calls' results are recorded, which it watches the store for).
fn kill_worker_mid_batch(dir: &Path) -> Result<()> {
    let executable = std::env::current_exe().map_err(io_error("find own executable", dir))?;
    let mut child = Command::new(executable)
        .arg("demo-worker")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(io_error("start demo worker for", dir))?;
    println!(
        "1. A host process (pid {}) runs the agent runner with a scripted model.",
        child.id()
    );
    println!("   Every message and every tool status is recorded the moment it happens.");
    let lines = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut first = true;
    for line in lines.lines() {
        let line = line.map_err(io_error("read demo worker output from", dir))?;
        match line.as_str() {
            text if text.starts_with("evaluation ") => {
                println!("   - the first evaluation: one weather call for Rome, answered.");
                first = false;
            }
            text if text.starts_with("model asked") && !first => {
                println!("   - the second evaluation: the {text} in parallel: Paris, Rome, Oslo.")
            }
            text if text.starts_with("running ") && !first => {
                let call = &text["running ".len()..];
                println!("   - running {call}");
                if call == format!("call_{SLOW_CITY}") {
                    fast_calls_recorded(dir);
                    break;
                }
            }
            _ => {}
        }
    }
    child
        .kill()
        .map_err(io_error("kill demo worker for", dir))?;
    child
        .wait()
        .map_err(io_error("wait for demo worker of", dir))?;
    println!("\n2. Killed the host with SIGKILL while call_{SLOW_CITY} was running.\n");
    Ok(())
}

/// Whether the worker's second evaluation has recorded every result but
/// the slow city's, whose call runs (read beside the writer); waits for
/// it up to [`KILL_WAIT`] once the slow call started.
fn fast_calls_recorded(dir: &Path) -> bool {
    let started = std::time::Instant::now();
    loop {
        let ready = Store::open_read_only(dir, StoreOptions::default())
            .and_then(|store| store.resume(CONVERSATION, &ResumeOptions::default()))
            .is_ok_and(|state| {
                state.unfinished_calls.len() == 1
                    && state.unfinished_calls[0].call.call_id == format!("call_{SLOW_CITY}")
                    && state.unfinished_calls[0].call.status == ToolStatus::Running
                    && state.finished_calls.len() == CITIES.len() - 1
            });
        if ready || started.elapsed() > KILL_WAIT {
            return ready;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Step 3: what the new host finds it has to do.
fn report_resume(store: &Store) -> Result<ResumeState> {
    let state = store.resume(CONVERSATION, &ResumeOptions::new().prompt(Some(prompt())))?;
    println!(
        "3. A new host opens the store and resumes {} (prompt {} checked):",
        state.evaluation_id,
        prompt()
    );
    for finished in &state.finished_calls {
        let result = finished
            .result
            .as_ref()
            .and_then(|entry| entry.content.as_deref())
            .unwrap_or("-");
        println!(
            "   - {} finished ({}): \"{result}\" (kept, not run again)",
            finished.call.call_id,
            finished.call.status.as_str()
        );
    }
    for unfinished in &state.unfinished_calls {
        println!(
            "   - {} never finished ({}): will run again",
            unfinished.call.call_id,
            unfinished.call.status.as_str()
        );
    }
    println!(
        "   next sequence {}, next turn {}\n",
        state.next_sequence, state.next_turn
    );
    Ok(state)
}

/// Steps 4 and 5: a new runner resumes the evaluation: re-runs the
/// unfinished call, asks the model, records its answer; returns the
/// finished evaluation's id.
fn finish_evaluation(dir: &Path, state: &ResumeState) -> std::result::Result<String, Failure> {
    let store = Arc::new(Store::open(dir, StoreOptions::default())?);
    let runs = Arc::new(AtomicUsize::new(0));
    let runner = runner(Arc::clone(&store), false, Arc::clone(&runs));
    let observer = |event: &RunEvent| match event {
        RunEvent::ToolStarted { call, resumed } => println!(
            "4. Re-running {}{}; its result is recorded with its status.",
            call.call_id,
            if *resumed {
                " (its running event is marked resumed)"
            } else {
                ""
            }
        ),
        RunEvent::AssistantRecorded(entry) => println!(
            "5. The model answers: \"{}\"",
            entry.content.as_deref().unwrap_or_default()
        ),
        _ => {}
    };
    let outcome: RunOutcome = crate::chat::runtime()?
        .block_on(runner.resume_with(
            CONVERSATION,
            ResumeOptions::new().prompt(Some(prompt())),
            Some(&observer),
        ))
        .map_err(|error| Failure(error.to_string()))?;
    if outcome.stop != StopReason::Final {
        return Err(Failure(format!(
            "the resumed evaluation stopped: {:?}",
            outcome.stop
        )));
    }
    let done = store.resume(CONVERSATION, &ResumeOptions::default())?;
    let reran = runs.load(Ordering::SeqCst);
    println!(
        "   {} is finished: {} entries, {} tool calls; this host ran {reran} of them, {}.\n",
        done.evaluation_id,
        done.entries.len(),
        done.finished_calls.len(),
        if reran == state.unfinished_calls.len() {
            "none run twice"
        } else {
            "SOME RUN TWICE"
        }
    );
    Ok(done.evaluation_id)
}

/// Steps 6 and 7: the evaluation rebuilt as two providers' requests.
fn print_requests(store: &Store, evaluation: &str) -> Result<()> {
    let conversation = store.conversation(CONVERSATION)?;
    let entries: Vec<ConversationEntry> = conversation
        .evaluation(evaluation)
        .into_iter()
        .cloned()
        .collect();
    for (number, provider) in [(6, Provider::OpenAiChat), (7, Provider::Anthropic)] {
        let request = provider::render(provider, &entries, &RenderOptions::default())?;
        println!(
            "{number}. The {} request rebuilt from the store:",
            provider.name()
        );
        let body = serde_json::to_string_pretty(&request.body()).unwrap_or_default();
        for line in body.lines() {
            println!("   {line}");
        }
        println!();
    }
    Ok(())
}

/// Step 8: the whole store checked, and where it stays.
fn print_verified(dir: &Path) -> Result<()> {
    let verified = convlog::store::verify(dir, &mut |_| {})?;
    println!(
        "8. verify: {} segment(s), {} events in {} atomic batches, {} conversation(s), {} bytes;",
        verified.log.segments,
        verified.log.events,
        verified.log.frames,
        verified.conversations,
        verified.log.bytes
    );
    println!("   every checksum is good and every event decodes.\n");
    println!("The store stays at {} for you to look at:", dir.display());
    println!("  cargo run --release -- dump {}", dir.display());
    println!("  cargo run --release -- verify {}", dir.display());
    Ok(())
}
