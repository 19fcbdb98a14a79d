//! An agent loop that records every step in convlog, is killed with SIGKILL
//! in the middle of a tool batch, and carries on after a restart: it re-runs
//! only the calls that never finished and never repeats a finished one.
//!
//! The model is scripted (no network). Run it with:
//!
//! ```sh
//! cargo run --example agent_resume
//! ```

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use convlog::model::{ConversationEntry, Role, Timestamp, ToolCall, ToolStatus};
use convlog::resume::ResumeOptions;
use convlog::store::{Store, StoreOptions};
use convlog::Event;

const CONVERSATION: &str = "trip-planning";
const EVALUATION: &str = "eval-1";
const CITIES: [&str; 3] = ["paris", "rome", "oslo"];

/// The scripted model: asks for the weather of three cities, then answers.
fn scripted_model(history: &[ConversationEntry], sequence: u64) -> ConversationEntry {
    let results: Vec<&ConversationEntry> = history
        .iter()
        .filter(|entry| entry.role == Role::Tool)
        .collect();
    if results.len() < CITIES.len() {
        let calls = CITIES.iter().map(|city| {
            let arguments = format!("{{\"city\":\"{city}\"}}");
            ToolCall::new(format!("call_{city}"), "weather", arguments)
        });
        let mut entry =
            ConversationEntry::assistant(EVALUATION, sequence, "Let me check.").with_turn(1);
        entry.tool_calls.extend(calls);
        entry.finish_reason = Some("tool_calls".into());
        return entry;
    }
    let summary: Vec<String> = results
        .iter()
        .filter_map(|entry| entry.content.clone())
        .collect();
    let text = format!("Here is the weather: {}.", summary.join("; "));
    let mut entry = ConversationEntry::assistant(EVALUATION, sequence, text).with_turn(2);
    entry.finish_reason = Some("stop".into());
    entry
}

/// The tool: slow for Oslo, so the worker is killed while it runs.
fn weather(city: &str) -> String {
    if city == "oslo" {
        std::thread::sleep(Duration::from_secs(30));
    }
    format!("{city}: 18C")
}

fn tool_result(call: &ToolCall, sequence: u64, output: String) -> Event {
    ConversationEntry::tool_result(EVALUATION, sequence, &call.call_id, &call.name, output)
        .with_turn(1)
        .recorded_in(CONVERSATION)
}

/// First run: records every step until the process is killed.
fn worker(dir: &Path) -> convlog::Result<()> {
    let store = Store::open(dir, StoreOptions::default())?;
    let mut system = ConversationEntry::system(EVALUATION, 0, "You report weather.");
    system.prompt_ns = Some("demo".into());
    system.prompt_key = Some("weather".into());
    store.append(&[system.clone().recorded_in(CONVERSATION)])?;
    let user = ConversationEntry::user(EVALUATION, 1, "Weather in Paris, Rome, Oslo?");
    store.append(&[user.clone().recorded_in(CONVERSATION)])?;
    let assistant = scripted_model(&[system, user], 2);
    store.append(&[assistant.clone().recorded_in(CONVERSATION)])?;
    for (sequence, call) in (3..).zip(&assistant.tool_calls) {
        let running =
            Event::tool_status(CONVERSATION, EVALUATION, &call.call_id, ToolStatus::Running);
        store.append(&[running])?;
        println!("running {}", call.call_id);
        std::io::stdout().flush().ok();
        let city = &call.call_id["call_".len()..];
        let output = weather(city);
        store.append(&[tool_result(call, sequence, output)])?;
    }
    Ok(())
}

fn main() -> convlog::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--worker" {
        return worker(Path::new(&args[2]));
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("convlog-agent-resume-{}", std::process::id()));
    println!("store: {}", dir.display());

    // 1. The first host process runs until it is in the middle of the batch.
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .arg("--worker")
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start worker");
    let lines = BufReader::new(child.stdout.take().expect("piped stdout"));
    for line in lines.lines() {
        let line = line.expect("worker output");
        println!("worker: {line}");
        if line == "running call_oslo" {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    child.kill().expect("kill worker");
    child.wait().expect("reap worker");
    println!("killed the worker with SIGKILL while call_oslo was running\n");

    // 2. A new host opens the store and asks what is left to do.
    let store = Store::open(&dir, StoreOptions::default())?;
    let state = store.resume(CONVERSATION, &ResumeOptions::default())?;
    for finished in &state.finished_calls {
        println!(
            "finished (kept, not run again): {} -> {:?}",
            finished.call.call_id,
            finished
                .result
                .as_ref()
                .and_then(|entry| entry.content.as_deref())
        );
    }
    for unfinished in &state.unfinished_calls {
        println!(
            "unfinished (run again): {} [{}]",
            unfinished.call.call_id,
            unfinished.call.status.as_str()
        );
    }
    assert_eq!(state.unfinished_calls.len(), 1, "only oslo was cut off");

    // 3. Re-run only the unfinished calls, marked as resumed.
    let mut sequence = state.next_sequence;
    for unfinished in &state.unfinished_calls {
        store.append(&[state.rerun_event(&unfinished.call.call_id, Timestamp::now())])?;
        let output = format!("{}: 9C", &unfinished.call.call_id["call_".len()..]);
        store.append(&[tool_result(&unfinished.call, sequence, output)])?;
        sequence += 1;
    }

    // 4. Continue the loop: the model sees every result and answers.
    let history = store
        .resume(CONVERSATION, &ResumeOptions::default())?
        .entries;
    let answer = scripted_model(&history, sequence);
    println!("\nmodel: {}", answer.content.as_deref().unwrap_or_default());
    store.append(&[answer.recorded_in(CONVERSATION)])?;
    let done = store.resume(CONVERSATION, &ResumeOptions::default())?;
    assert!(done.finished && done.unfinished_calls.is_empty());
    println!(
        "evaluation finished: {} entries, {} calls, none run twice",
        done.entries.len(),
        done.finished_calls.len()
    );
    Ok(())
}
