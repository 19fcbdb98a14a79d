//! `convlog demo`: an agent host records a conversation, is killed with
//! SIGKILL in the middle of a batch of parallel tool calls, and a new host
//! carries on from the store: it re-runs only the unfinished call, finishes
//! the evaluation, and rebuilds the provider request messages.
//!
//! The model and the tools are scripted: no network.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use convlog::model::{ConversationEntry, Role, Timestamp, ToolCall, ToolStatus, ToolStatusChanged};
use convlog::provider::{self, Provider, RenderOptions};
use convlog::resume::{PromptIdentity, ResumeOptions, ResumeState};
use convlog::store::{Store, StoreOptions};
use convlog::{Error, Event, Result};

use crate::shell::Failure;

const CONVERSATION: &str = "trip-planner";
const CITIES: [&str; 3] = ["paris", "rome", "oslo"];
/// The worker's tool for this city hangs, so the kill lands mid-batch.
const SLOW_CITY: &str = "oslo";

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

fn system(evaluation: &str) -> ConversationEntry {
    let mut entry = ConversationEntry::new(
        evaluation,
        0,
        Role::System,
        Some("You are a travel planner. Use the weather tool.".into()),
    );
    entry.prompt_ns = prompt().namespace;
    entry.prompt_key = prompt().key;
    entry
}

fn user(evaluation: &str, sequence: u64, text: &str) -> ConversationEntry {
    ConversationEntry::new(evaluation, sequence, Role::User, Some(text.into()))
}

fn weather_call(city: &str) -> ToolCall {
    ToolCall {
        call_id: format!("call_{city}"),
        name: "weather".into(),
        arguments: format!("{{\"city\":\"{city}\"}}"),
        status: ToolStatus::Pending,
        started_at: None,
        ended_at: None,
        error: None,
    }
}

/// The scripted model: asks for the weather of every city it was asked
/// about, then answers from the results.
fn scripted_model(
    history: &[ConversationEntry],
    evaluation: &str,
    sequence: u64,
    cities: &[&str],
) -> ConversationEntry {
    let results: Vec<&ConversationEntry> = history
        .iter()
        .filter(|entry| entry.role == Role::Tool && entry.evaluation_id == evaluation)
        .collect();
    let turn = history
        .iter()
        .filter(|entry| entry.role == Role::Assistant && entry.evaluation_id == evaluation)
        .count() as u32
        + 1;
    if results.is_empty() {
        let mut entry = ConversationEntry::new(
            evaluation,
            sequence,
            Role::Assistant,
            Some("Let me check the weather.".into()),
        );
        entry.turn = turn;
        entry.finish_reason = Some("tool_calls".into());
        entry.tool_calls = cities.iter().map(|city| weather_call(city)).collect();
        return entry;
    }
    let summary: Vec<String> = results
        .iter()
        .filter_map(|entry| entry.content.clone())
        .collect();
    let mut entry = ConversationEntry::new(
        evaluation,
        sequence,
        Role::Assistant,
        Some(format!(
            "Here is the weekend weather: {}. Pack accordingly.",
            summary.join("; ")
        )),
    );
    entry.turn = turn;
    entry.finish_reason = Some("stop".into());
    entry
}

fn weather(city: &str) -> String {
    match city {
        "paris" => "paris: 18C, light rain".into(),
        "rome" => "rome: 24C, sunny".into(),
        "oslo" => "oslo: 9C, windy".into(),
        other => format!("{other}: unknown"),
    }
}

fn status(evaluation: &str, call_id: &str, status: ToolStatus, resumed: bool) -> Event {
    let mut change =
        ToolStatusChanged::new(CONVERSATION, evaluation, call_id, status, Timestamp::now());
    change.resumed = resumed;
    Event::ToolStatus(change)
}

fn tool_result(
    evaluation: &str,
    call: &ToolCall,
    sequence: u64,
    turn: u32,
    content: String,
) -> Event {
    let mut entry = ConversationEntry::new(evaluation, sequence, Role::Tool, Some(content));
    entry.turn = turn;
    entry.tool_call_id = Some(call.call_id.clone());
    entry.tool_name = Some(call.name.clone());
    entry.recorded_in(CONVERSATION)
}

/// Runs one evaluation's tool batch, recording each status and result.
fn run_tools(
    store: &Store,
    evaluation: &str,
    assistant: &ConversationEntry,
    mut sequence: u64,
    worker: bool,
) -> Result<u64> {
    for call in &assistant.tool_calls {
        store.append(&[status(
            evaluation,
            &call.call_id,
            ToolStatus::Running,
            false,
        )])?;
        if worker {
            println!("running {}", call.call_id);
            std::io::stdout().flush().ok();
        }
        let city = &call.call_id["call_".len()..];
        if worker && city == SLOW_CITY {
            // The host dies here: the demo kills this process.
            std::thread::sleep(Duration::from_secs(60));
        }
        store.append(&[tool_result(
            evaluation,
            call,
            sequence,
            assistant.turn,
            weather(city),
        )])?;
        sequence += 1;
    }
    Ok(sequence)
}

/// The first host: one whole evaluation, then a second one that it does not
/// live to finish.
pub fn worker(dir: &Path) -> Result<()> {
    let store = Store::open(dir, StoreOptions::default())?;
    // Evaluation 1: one tool call, answered.
    let history = vec![
        system("eval-1"),
        user("eval-1", 1, "Is it warm in Rome this weekend?"),
    ];
    for entry in &history {
        store.append(&[entry.clone().recorded_in(CONVERSATION)])?;
    }
    let ask = scripted_model(&history, "eval-1", 2, &["rome"]);
    store.append(&[ask.clone().recorded_in(CONVERSATION)])?;
    let next = run_tools(&store, "eval-1", &ask, 3, false)?;
    let history = store
        .resume(CONVERSATION, &ResumeOptions::default())?
        .entries;
    store
        .append(&[scripted_model(&history, "eval-1", next, &["rome"]).recorded_in(CONVERSATION)])?;
    println!("evaluation eval-1 finished");
    std::io::stdout().flush().ok();

    // Evaluation 2: three parallel calls.
    let history = vec![
        system("eval-2"),
        user(
            "eval-2",
            1,
            "Plan a weekend: weather in Paris, Rome and Oslo?",
        ),
    ];
    for entry in &history {
        store.append(&[entry.clone().recorded_in(CONVERSATION)])?;
    }
    let ask = scripted_model(&history, "eval-2", 2, &CITIES);
    store.append(&[ask.clone().recorded_in(CONVERSATION)])?;
    println!("model asked for {} tools in parallel", ask.tool_calls.len());
    run_tools(&store, "eval-2", &ask, 3, true)?;
    Ok(())
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
    let store = Store::open(&dir, StoreOptions::default())?;
    let state = report_resume(&store)?;
    let evaluation = finish_evaluation(&store, &state)?;
    print_requests(&store, &evaluation)?;
    drop(store);
    print_verified(&dir)?;
    Ok(())
}

/// Steps 1 and 2: runs [`worker`] in a child process and kills it with
/// SIGKILL while the slow call of its parallel batch runs.
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
        "1. A host process (pid {}) runs a scripted agent. Every message and every",
        child.id()
    );
    println!("   tool status is recorded the moment it happens (group commit, durable).");
    let lines = BufReader::new(child.stdout.take().expect("stdout is piped"));
    for line in lines.lines() {
        let line = line.map_err(io_error("read demo worker output from", dir))?;
        match line.as_str() {
            "evaluation eval-1 finished" => {
                println!("   - evaluation eval-1: one weather call for Rome, answered.")
            }
            text if text.starts_with("model asked") => {
                println!("   - evaluation eval-2: the {text}: Paris, Rome, Oslo.")
            }
            text if text.starts_with("running ") => {
                println!("   - running {}", &text["running ".len()..]);
                if text.ends_with(SLOW_CITY) {
                    break;
                }
            }
            _ => {}
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    child
        .kill()
        .map_err(io_error("kill demo worker for", dir))?;
    child
        .wait()
        .map_err(io_error("wait for demo worker of", dir))?;
    println!("\n2. Killed the host with SIGKILL while call_{SLOW_CITY} was running.\n");
    Ok(())
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

/// Steps 4 and 5: re-runs the unfinished calls, records the model's answer;
/// returns the finished evaluation's id.
fn finish_evaluation(store: &Store, state: &ResumeState) -> std::result::Result<String, Failure> {
    let mut sequence = state.next_sequence;
    let ask = state
        .entries
        .iter()
        .rev()
        .find(|entry| entry.role == Role::Assistant && !entry.tool_calls.is_empty())
        .cloned()
        .ok_or_else(|| Failure("the evaluation has no tool batch".into()))?;
    for unfinished in &state.unfinished_calls {
        store.append(&[state.rerun_event(&unfinished.call.call_id, Timestamp::now())])?;
        let city = &unfinished.call.call_id["call_".len()..];
        store.append(&[tool_result(
            &state.evaluation_id,
            &unfinished.call,
            sequence,
            ask.turn,
            weather(city),
        )])?;
        println!(
            "4. Re-ran {} (its status event is marked resumed) and recorded its result.",
            unfinished.call.call_id
        );
        sequence += 1;
    }
    let history = store
        .resume(CONVERSATION, &ResumeOptions::default())?
        .entries;
    let answer = scripted_model(&history, &state.evaluation_id, sequence, &CITIES);
    println!(
        "5. The model answers: \"{}\"",
        answer.content.as_deref().unwrap_or_default()
    );
    store.append(&[answer.recorded_in(CONVERSATION)])?;
    let done = store.resume(CONVERSATION, &ResumeOptions::default())?;
    println!(
        "   {} is finished: {} entries, {} tool calls, none run twice.\n",
        done.evaluation_id,
        done.entries.len(),
        done.finished_calls.len()
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
