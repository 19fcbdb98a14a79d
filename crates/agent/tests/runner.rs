//! The runner loop against a scripted model and counting host tools: what
//! is recorded, in which order, what is returned, and resume after a crash
//! at every point of the loop.

mod runner_support;

use std::sync::{Arc, Mutex};

use convlog::history::SlidingWindow;
use convlog::model::{ConversationEntry, Event, Role, ToolStatus};
use convlog::resume::{PromptIdentity, ResumeOptions};
use convlog::{Store, StoreOptions};
use convlog_agent::{
    RunError, RunEvent, RunOutcome, Runner, RunnerOptions, StopReason, Toolset, MODEL_CALL_FAILED,
};
use runner_support::{
    assert_no_dangling, normalise, status_error, weather_script, CountingTool, ScriptedClient,
    Shared, ROUNDS,
};

const CONVERSATION: &str = "trip";

fn open(dir: &std::path::Path) -> Arc<Store> {
    Arc::new(Store::open(dir, StoreOptions::default()).unwrap())
}

fn options() -> RunnerOptions {
    RunnerOptions::new()
        .system_prompt(Some("You report weather.".into()))
        .prompt(Some(identity("travel", "weather")))
}

fn identity(namespace: &str, key: &str) -> PromptIdentity {
    PromptIdentity {
        namespace: Some(namespace.into()),
        key: Some(key.into()),
    }
}

fn runner(
    store: &Arc<Store>,
    client: &Arc<ScriptedClient>,
    tool: &Arc<CountingTool>,
    options: RunnerOptions,
) -> Runner {
    Runner::new(
        Arc::clone(store),
        client.clone(),
        Toolset::new().with(Shared(Arc::clone(tool))),
        options,
    )
}

/// Every event of the store, in log order, with the start of its frame.
fn events(store: &Store) -> Vec<((u64, u64), Event)> {
    store
        .log()
        .iter_from(1)
        .map(|record| {
            let record = record.unwrap();
            let frame = (record.position.segment, record.position.offset);
            (frame, record.event().unwrap())
        })
        .collect()
}

fn conversation(store: &Store) -> Vec<ConversationEntry> {
    store
        .conversation(CONVERSATION)
        .unwrap()
        .entries()
        .cloned()
        .collect()
}

fn describe(event: &Event) -> String {
    match event {
        Event::ConversationRecorded(recorded) => {
            let entry = &recorded.entry;
            format!(
                "{:?}#{} calls={}",
                entry.role,
                entry.sequence,
                entry.tool_calls.len()
            )
        }
        Event::ToolStatus(change) => format!(
            "{}{}",
            change.status.as_str(),
            if change.resumed { " resumed" } else { "" }
        ),
        other => other.type_name().to_string(),
    }
}

#[tokio::test]
async fn parallel_calls_then_a_final_answer_record_every_step_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[&["paris", "rome"]]));
    let tool = Arc::new(CountingTool {
        name: "weather".into(),
        barrier: Some(Arc::new(tokio::sync::Barrier::new(2))),
        ..CountingTool::default()
    });
    let runner = runner(&store, &client, &tool, options());

    let outcome = runner.run(CONVERSATION, "Weather?").await.unwrap();

    assert_eq!(outcome.stop, StopReason::Final);
    let described: Vec<String> = events(&store)
        .iter()
        .map(|(_, event)| describe(event))
        .collect();
    // Both calls wait for each other inside the tool, so both `running`
    // statuses precede both results; each result is followed by its status.
    assert_eq!(
        described,
        [
            "System#0 calls=0",
            "User#1 calls=0",
            "Assistant#2 calls=2",
            "running",
            "running",
            described[5].as_str(),
            "completed",
            described[7].as_str(),
            "completed",
            "Assistant#5 calls=0",
        ]
    );
    let mut result_rows = [described[5].clone(), described[7].clone()];
    result_rows.sort();
    assert_eq!(result_rows, ["Tool#3 calls=0", "Tool#4 calls=0"]);
    // The result and its status share one frame (one atomic batch).
    let all = events(&store);
    for index in [5, 7] {
        assert_eq!(
            all[index].0,
            all[index + 1].0,
            "result and status in one batch"
        );
        assert_ne!(all[index - 1].0, all[index].0);
    }
    let system = &conversation(&store)[0];
    assert_eq!(system.prompt_ns.as_deref(), Some("travel"));
    assert_eq!(system.prompt_key.as_deref(), Some("weather"));
    assert_eq!(
        outcome.entries,
        conversation(&store),
        "a first run returns all it recorded"
    );
    assert_eq!(
        outcome.output(),
        Some("answer to Weather?: paris: sunny; rome: sunny")
    );
    assert!(runner_support::all_calls_finished(&outcome.entries));
    assert_eq!(outcome.usage.output_tokens, 2);

    // A second run: a new evaluation; only its entries come back; the model
    // was shown the first evaluation (without its system entry).
    let second = runner.run(CONVERSATION, "And now?").await.unwrap();
    assert_ne!(second.evaluation_id, outcome.evaluation_id);
    assert_eq!(second.entries.len(), 6);
    assert!(second
        .entries
        .iter()
        .all(|entry| entry.evaluation_id == second.evaluation_id));
    let last_request = client.requests().last().unwrap().clone();
    assert_eq!(
        last_request[0].content.as_deref(),
        Some("You report weather.")
    );
    assert_eq!(last_request[0].evaluation_id, second.evaluation_id);
    assert_eq!(
        last_request
            .iter()
            .filter(|entry| entry.role == Role::System)
            .count(),
        1
    );
    assert_eq!(last_request[1].content.as_deref(), Some("Weather?"));
    assert_no_dangling(&client.requests());
    assert_eq!(tool.total(), 4);
}

#[tokio::test]
async fn the_step_limit_stops_after_running_the_last_tools_and_holds_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[&["a"], &["b"], &["c"], &["d"]]));
    let tool = CountingTool::new("weather");
    let runner = runner(&store, &client, &tool, options().max_steps(2));

    let outcome = runner.run(CONVERSATION, "Go").await.unwrap();
    assert_eq!(outcome.stop, StopReason::StepLimit { max_steps: 2 });
    assert_eq!(client.requests().len(), 2);
    assert_eq!(tool.total(), 2, "the last response's tools ran");
    assert_eq!(outcome.entries.last().unwrap().role, Role::Tool);

    let again = runner.resume(CONVERSATION).await.unwrap();
    assert_eq!(again.stop, StopReason::StepLimit { max_steps: 2 });
    assert!(again.entries.is_empty());
    assert_eq!(client.requests().len(), 2);

    // A runner with a higher limit carries the same evaluation on.
    let more = runner_with(&store, &client, &tool, options().max_steps(10));
    let done = more.resume(CONVERSATION).await.unwrap();
    assert_eq!(done.stop, StopReason::Final);
    assert_eq!(done.evaluation_id, outcome.evaluation_id);
    assert_no_dangling(&client.requests());
}

fn runner_with(
    store: &Arc<Store>,
    client: &Arc<ScriptedClient>,
    tool: &Arc<CountingTool>,
    options: RunnerOptions,
) -> Runner {
    runner(store, client, tool, options)
}

#[tokio::test]
async fn a_call_to_an_unknown_tool_is_returned_pending_then_answered_and_continued() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(|view: &[ConversationEntry]| {
        let answered = view.iter().any(|entry| entry.role == Role::Tool);
        if answered {
            let results: Vec<String> = view
                .iter()
                .filter(|entry| entry.role == Role::Tool)
                .map(|entry| entry.content.clone().unwrap_or_default())
                .collect();
            return Ok(ConversationEntry::assistant("", 0, results.join(" + ")));
        }
        Ok(ConversationEntry::assistant_calling(
            "",
            0,
            [
                convlog::ToolCall::new("call_weather", "weather", r#"{"city":"oslo"}"#),
                convlog::ToolCall::new("call_ask", "ask_user", r#"{"question":"when?"}"#),
            ],
        ))
    });
    let tool = CountingTool::new("weather");
    let runner = runner(&store, &client, &tool, options());

    let outcome = runner.run(CONVERSATION, "Plan").await.unwrap();
    let StopReason::PendingCalls(pending) = &outcome.stop else {
        panic!("expected pending calls, got {:?}", outcome.stop);
    };
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].call_id, "call_ask");
    assert_eq!(pending[0].status, ToolStatus::Pending);
    assert_eq!(tool.total(), 1, "the known tool ran");

    // Resuming without an answer stops again, doing nothing.
    let waiting = runner.resume(CONVERSATION).await.unwrap();
    assert!(matches!(waiting.stop, StopReason::PendingCalls(_)));
    assert!(waiting.entries.is_empty());
    assert_eq!(client.requests().len(), 1);

    let answer = runner
        .answer_call(CONVERSATION, "call_ask", Ok("tomorrow".into()))
        .await
        .unwrap();
    assert_eq!(
        answer.sequence, 4,
        "placed after its call (assistant #2, position 1)"
    );
    let error = runner
        .answer_call(CONVERSATION, "call_ask", Ok("again".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RunError::NoSuchPendingCall { .. }),
        "{error}"
    );

    let done = runner.resume(CONVERSATION).await.unwrap();
    assert_eq!(done.stop, StopReason::Final);
    assert_eq!(done.evaluation_id, outcome.evaluation_id);
    assert_eq!(done.output(), Some("oslo: sunny + tomorrow"));
    assert_eq!(tool.total(), 1, "the finished call never ran again");
    assert_no_dangling(&client.requests());

    let finished = runner.resume(CONVERSATION).await.unwrap();
    assert_eq!(finished.stop, StopReason::AlreadyFinished);
    assert!(finished.entries.is_empty());
}

#[tokio::test]
async fn a_new_run_after_a_pending_call_never_shows_the_model_the_dangling_call() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(|view: &[ConversationEntry]| {
        if view
            .last()
            .is_some_and(|entry| entry.content.as_deref() == Some("first"))
        {
            Ok(ConversationEntry::assistant_calling(
                "",
                0,
                [convlog::ToolCall::new("call_x", "unknown_tool", "{}")],
            ))
        } else {
            Ok(ConversationEntry::assistant("", 0, "ok"))
        }
    });
    let tool = CountingTool::new("weather");
    let runner = runner(&store, &client, &tool, options());
    let first = runner.run(CONVERSATION, "first").await.unwrap();
    assert!(matches!(first.stop, StopReason::PendingCalls(_)));
    let second = runner.run(CONVERSATION, "second").await.unwrap();
    assert_eq!(second.stop, StopReason::Final);
    assert_no_dangling(&client.requests());
    let shown = client.requests().last().unwrap().clone();
    assert!(
        shown.iter().all(|entry| entry.tool_calls.is_empty()),
        "the call-only assistant entry of the first evaluation is left out"
    );
}

#[tokio::test]
async fn a_failed_model_call_is_recorded_and_returned_verbatim_and_resume_retries() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let body = r#"{"error":{"message":"Rate limit reached for gpt-4o","type":"requests"}}"#;
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let script = weather_script(&[&["paris"]]);
    let switch = Arc::clone(&failing);
    let client = ScriptedClient::new(move |view: &[ConversationEntry]| {
        if switch.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(status_error(429, body));
        }
        script(view)
    });
    let tool = CountingTool::new("weather");
    let runner = runner(&store, &client, &tool, options());

    let error = runner.run(CONVERSATION, "Weather?").await.unwrap_err();
    let RunError::Model {
        error: model_error,
        evaluation_id,
        ..
    } = &error
    else {
        panic!("expected a model error, got {error:?}");
    };
    assert!(error.to_string().contains(body), "{error}");
    assert_eq!(model_error.attempts, 3);
    let recorded: Vec<Event> = events(&store).into_iter().map(|(_, event)| event).collect();
    let Some(Event::Custom(custom)) = recorded.last() else {
        panic!("expected the failure event last, got {recorded:?}");
    };
    assert_eq!(custom.kind, MODEL_CALL_FAILED);
    assert_eq!(custom.conversation_id.as_deref(), Some(CONVERSATION));
    let payload: serde_json::Value = serde_json::from_slice(&custom.payload).unwrap();
    assert_eq!(payload["evaluation_id"], evaluation_id.as_str());
    assert_eq!(payload["status"], 429);
    assert_eq!(payload["attempts"], 3);
    assert_eq!(payload["provider"], "openai");
    assert_eq!(payload["client"], "scripted test model");
    assert_eq!(payload["error"], model_error.to_string());
    assert!(payload["error"].as_str().unwrap().contains(body));
    // The core reads it back, and the audit shows it in its evaluation.
    let failure = convlog::model::ModelCallFailed::from_event(recorded.last().unwrap())
        .expect("a failed model call")
        .expect("its payload reads");
    assert_eq!((failure.status, failure.attempts), (Some(429), 3));
    let timeline =
        convlog::audit::Timeline::from_store(&store, CONVERSATION, &Default::default()).unwrap();
    assert_eq!(timeline.failed_model_calls, 1);
    let evaluation = timeline
        .evaluations
        .iter()
        .find(|evaluation| evaluation.evaluation_id == *evaluation_id)
        .unwrap();
    assert_eq!(evaluation.failed_model_calls.len(), 1);

    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    let done = runner.resume(CONVERSATION).await.unwrap();
    assert_eq!(done.stop, StopReason::Final);
    assert_eq!(&done.evaluation_id, evaluation_id);
    assert_eq!(done.entries.len(), 3, "assistant, result, answer");
}

#[tokio::test]
async fn the_history_manager_curates_what_the_model_sees_and_the_curation_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[&["paris"]]));
    let tool = CountingTool::new("weather");
    let manager: Arc<dyn convlog::history::HistoryManager> = Arc::new(SlidingWindow::new(2));
    let runner = runner(
        &store,
        &client,
        &tool,
        options()
            .history_manager(Some(manager))
            .session_id(Some("host-session-7".into())),
    );

    runner.run(CONVERSATION, "one").await.unwrap();
    runner.run(CONVERSATION, "two").await.unwrap();

    let requests = client.requests();
    // First evaluation: [system, user] (no change), [system, user, assistant,
    // tool] -> window 2. Second: 4 earlier + user, and so on.
    assert!(requests.iter().all(|request| request.len() <= 3));
    assert_eq!(requests[0].len(), 2);
    let curations: Vec<convlog::model::HistoryCurated> = events(&store)
        .into_iter()
        .filter_map(|(_, event)| match event {
            Event::HistoryCurated(curated) => Some(curated),
            _ => None,
        })
        .collect();
    assert_eq!(curations.len(), 3, "recorded only when the view changed");
    assert!(curations
        .iter()
        .all(|curated| curated.strategy == "sliding_window(2)"
            && curated.curated_count == 3
            && curated.original_count > 3
            && curated.prompt_name.as_deref() == Some("travel/weather")
            && curated.session_id.as_deref() == Some("host-session-7")));
    assert_no_dangling(&requests);
}

#[tokio::test]
async fn run_stream_delivers_deltas_and_steps_as_they_happen() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[&["paris", "rome"]]));
    let tool = CountingTool::new("weather");
    let runner = runner(&store, &client, &tool, options());
    let seen: Mutex<Vec<RunEvent>> = Mutex::new(Vec::new());
    let batches: Mutex<Vec<(u64, usize)>> = Mutex::new(Vec::new());
    let observer = |event: &RunEvent| match event {
        RunEvent::Recorded { first_lsn, events } => {
            batches.lock().unwrap().push((*first_lsn, events.len()));
        }
        event => seen.lock().unwrap().push(event.clone()),
    };
    let outcome = runner
        .run_stream(CONVERSATION, "Weather now", &observer)
        .await
        .unwrap();
    assert_eq!(outcome.stop, StopReason::Final);
    // Every batch recorded: system + user, the calling reply, two running
    // statuses, two results with their statuses, the answer. The two calls
    // record from tasks of their own, so their batches may be delivered in
    // either order: ordered by LSN here, they do not overlap.
    let mut batches = batches.into_inner().unwrap();
    batches.sort_unstable();
    let mut sizes: Vec<usize> = batches.iter().map(|(_, len)| *len).collect();
    sizes[2..6].sort_unstable();
    assert_eq!(sizes, [2, 1, 1, 1, 2, 2, 1], "{batches:?}");
    assert!(batches
        .windows(2)
        .all(|pair| pair[1].0 >= pair[0].0 + pair[0].1 as u64));
    let seen = seen.into_inner().unwrap();
    let kinds: Vec<&str> = seen
        .iter()
        .map(|event| match event {
            RunEvent::Delta(_) => "delta",
            RunEvent::AssistantRecorded(_) => "assistant",
            RunEvent::ToolStarted { .. } => "started",
            RunEvent::ToolFinished(_) => "finished",
            _ => "other",
        })
        .collect();
    let first_assistant = kinds.iter().position(|kind| *kind == "assistant").unwrap();
    assert!(kinds[..first_assistant].iter().all(|kind| *kind == "delta"));
    assert!(
        first_assistant > 0,
        "deltas come before the entry is recorded"
    );
    assert_eq!(kinds.iter().filter(|kind| **kind == "started").count(), 2);
    assert_eq!(kinds.iter().filter(|kind| **kind == "finished").count(), 2);
    let last = kinds.iter().rposition(|kind| *kind == "finished").unwrap();
    assert_eq!(kinds[kinds.len() - 1], "assistant");
    assert!(kinds[last + 1..kinds.len() - 1]
        .iter()
        .all(|kind| *kind == "delta"));
    let text: String = seen
        .iter()
        .skip(last)
        .filter_map(|event| match event {
            RunEvent::Delta(convlog_agent::StreamDelta::Text(text)) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(Some(text.as_str()), outcome.output());
}

#[tokio::test]
async fn resume_with_another_prompt_identity_is_a_prompt_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(|_: &[ConversationEntry]| Err(status_error(500, "down")));
    let tool = CountingTool::new("weather");
    let runner = runner(&store, &client, &tool, options());
    runner.run(CONVERSATION, "Weather?").await.unwrap_err();

    let other = runner_with(
        &store,
        &client,
        &tool,
        options().prompt(Some(identity("travel", "other"))),
    );
    let error = other.resume(CONVERSATION).await.unwrap_err();
    assert!(
        matches!(
            error,
            RunError::Store(convlog::Error::PromptMismatch { .. })
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("travel/other"), "{error}");
    let explicit = runner
        .resume_with(
            CONVERSATION,
            ResumeOptions::new().prompt(Some(identity("x", "y"))),
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(
        explicit,
        RunError::Store(convlog::Error::PromptMismatch { .. })
    ));
}

/// The uninterrupted run: two rounds of parallel calls, then an answer.
async fn uninterrupted(dir: &std::path::Path) -> (Arc<Store>, RunOutcome) {
    let store = open(dir);
    let client = ScriptedClient::new(weather_script(&ROUNDS));
    let tool = CountingTool::new("weather");
    let runner = runner(&store, &client, &tool, options());
    let outcome = runner
        .run(CONVERSATION, "Weather everywhere?")
        .await
        .unwrap();
    assert_eq!(outcome.stop, StopReason::Final);
    (store, outcome)
}

/// The store's events grouped in their atomic batches (frames).
fn batches(store: &Store) -> Vec<Vec<Event>> {
    let mut batches: Vec<((u64, u64), Vec<Event>)> = Vec::new();
    for (frame, event) in events(store) {
        match batches.last_mut() {
            Some((last, events)) if *last == frame => events.push(event),
            _ => batches.push((frame, vec![event])),
        }
    }
    batches.into_iter().map(|(_, events)| events).collect()
}

#[tokio::test]
async fn a_crash_after_any_batch_resumes_to_the_uninterrupted_conversation() {
    let reference_dir = tempfile::tempdir().unwrap();
    let (reference, _) = uninterrupted(reference_dir.path()).await;
    let expected = normalise(&conversation(&reference));
    let batches = batches(&reference);
    assert_eq!(
        batches.len(),
        1 + 1 + 3 * 2 + 1 + 2 * 2 + 1,
        "every step its own batch"
    );

    // A crash leaves a prefix of the batches (each is atomic): the model
    // call in flight, between a response and its first tool, in the middle
    // of a parallel batch, after the last result, after the answer.
    for cut in 1..=batches.len() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        for batch in &batches[..cut] {
            store.append(batch).unwrap();
        }
        let before = store.resume(CONVERSATION, &ResumeOptions::new()).unwrap();
        let completed: Vec<String> = before
            .finished_calls
            .iter()
            .map(|finished| finished.call.call_id.clone())
            .collect();
        let running: Vec<String> = before
            .unfinished_calls
            .iter()
            .filter(|unfinished| unfinished.call.status == ToolStatus::Running)
            .map(|unfinished| unfinished.call.call_id.clone())
            .collect();

        let client = ScriptedClient::new(weather_script(&ROUNDS));
        let tool = CountingTool::new("weather");
        let runner = runner(&store, &client, &tool, options());
        let outcome = runner.resume(CONVERSATION).await.unwrap();

        assert_eq!(
            normalise(&conversation(&store)),
            expected,
            "cut after batch {cut}"
        );
        let executions = tool.executions();
        for call_id in &completed {
            assert!(
                !executions.contains_key(call_id),
                "cut {cut}: {call_id} ran again"
            );
        }
        assert!(
            executions.values().all(|count| *count == 1),
            "cut {cut}: {executions:?}"
        );
        let mut resumed = tool.resumed.lock().unwrap().clone();
        resumed.sort();
        let mut running = running.clone();
        running.sort();
        assert_eq!(
            resumed, running,
            "cut {cut}: exactly the started calls run as resumed"
        );
        let rerun_marks = events(&store)
            .into_iter()
            .filter(|(_, event)| matches!(event, Event::ToolStatus(change) if change.resumed))
            .count();
        assert_eq!(rerun_marks, running.len(), "cut {cut}");
        assert_no_dangling(&client.requests());
        if cut == batches.len() {
            assert_eq!(outcome.stop, StopReason::AlreadyFinished);
            assert!(outcome.entries.is_empty());
            assert!(client.requests().is_empty());
        } else {
            assert_eq!(outcome.stop, StopReason::Final, "cut {cut}");
        }
    }
}

/// A tool that fails, panics or never finishes, by its city.
struct Unruly;

impl convlog_agent::Tool for Unruly {
    fn spec(&self) -> convlog_agent::ToolSpec {
        convlog_agent::ToolSpec {
            name: "weather".into(),
            description: "Unreliable.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        _context: &'a convlog_agent::ToolContext,
    ) -> convlog_agent::client::BoxFuture<'a, Result<String, convlog_agent::ToolError>> {
        Box::pin(async move {
            if arguments.contains("fail") {
                return Err(convlog_agent::ToolError("station offline".into()));
            }
            if arguments.contains("panic") {
                panic!("sensor exploded");
            }
            if arguments.contains("hang") {
                std::future::pending::<()>().await;
            }
            Ok("fine".into())
        })
    }
}

/// Time is paused (tokio's test clock): the 20 ms timeout elapses only when
/// nothing else can run (no task ready, no store append in flight), so only
/// the call that never finishes can hit it, however loaded the machine is.
/// With the real clock, a call that finishes at once could still time out
/// if its task was not scheduled within 20 ms.
#[tokio::test(start_paused = true)]
async fn failing_panicking_and_hanging_tools_fail_their_calls_and_the_loop_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[&["fail", "panic", "hang", "ok"]]));
    let runner = Runner::new(
        Arc::clone(&store),
        client.clone(),
        Toolset::new()
            .with(Unruly)
            .timeout(std::time::Duration::from_millis(20)),
        options().session_id(Some("session-7".into())),
    );
    let outcome = runner.run(CONVERSATION, "Go").await.unwrap();
    assert_eq!(outcome.stop, StopReason::Final);
    let results: Vec<(bool, String)> = outcome
        .entries
        .iter()
        .filter(|entry| entry.role == Role::Tool)
        .map(|entry| (entry.is_error, entry.content.clone().unwrap()))
        .collect();
    assert_eq!(
        results,
        [
            (true, "station offline".to_string()),
            (true, "tool `weather` panicked: sensor exploded".to_string()),
            (true, "tool `weather` timed out after 0.02 s".to_string()),
            (false, "fine".to_string()),
        ]
    );
    let calls = &outcome.entries[2].tool_calls;
    let statuses: Vec<ToolStatus> = calls.iter().map(|call| call.status).collect();
    assert_eq!(
        statuses,
        [
            ToolStatus::Failed,
            ToolStatus::Failed,
            ToolStatus::Failed,
            ToolStatus::Completed
        ]
    );
    assert_eq!(calls[0].error.as_deref(), Some("station offline"));
    let slice = store.conversation(CONVERSATION).unwrap();
    assert!(slice.anomalies().is_empty(), "result and status agree");
    for (_, event) in events(&store) {
        if let Event::ConversationRecorded(recorded) = event {
            assert_eq!(recorded.session_id.as_deref(), Some("session-7"));
        }
    }
}

/// Records the tokio task each call of `weather` ran in, then behaves as
/// [`Unruly`].
struct TaskNoting(Mutex<Vec<Option<tokio::task::Id>>>);

impl convlog_agent::Tool for TaskNoting {
    fn spec(&self) -> convlog_agent::ToolSpec {
        Unruly.spec()
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a convlog_agent::ToolContext,
    ) -> convlog_agent::client::BoxFuture<'a, Result<String, convlog_agent::ToolError>> {
        self.0.lock().unwrap().push(tokio::task::try_id());
        Box::pin(async move { Unruly.call(arguments, context).await })
    }
}

/// A call that runs alone runs in the runner's own task (no task per
/// call), with the same timeout and panic isolation as calls run side by
/// side (the test above). Every call here is alone: the timeout wraps the
/// call itself, which is polled first, so only the call that never
/// finishes can hit it, however loaded the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_call_runs_in_the_runners_task_and_still_times_out_and_survives_panics() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[&["fail"], &["panic"], &["hang"], &["ok"]]));
    let tool = Arc::new(TaskNoting(Mutex::new(Vec::new())));
    let mut tools = Toolset::new().timeout(std::time::Duration::from_millis(20));
    tools.insert(Arc::clone(&tool) as Arc<dyn convlog_agent::Tool>);
    let runner = Runner::new(Arc::clone(&store), client.clone(), tools, options());
    let run = tokio::spawn(async move {
        let outcome = runner.run(CONVERSATION, "Go").await;
        (outcome, tokio::task::id())
    });
    let (outcome, runner_task) = run.await.unwrap();
    let outcome = outcome.unwrap();
    assert_eq!(outcome.stop, StopReason::Final);
    let results: Vec<(bool, String)> = outcome
        .entries
        .iter()
        .filter(|entry| entry.role == Role::Tool)
        .map(|entry| (entry.is_error, entry.content.clone().unwrap()))
        .collect();
    assert_eq!(
        results,
        [
            (true, "station offline".to_string()),
            (true, "tool `weather` panicked: sensor exploded".to_string()),
            (true, "tool `weather` timed out after 0.02 s".to_string()),
            (false, "fine".to_string()),
        ]
    );
    let tasks = tool.0.lock().unwrap().clone();
    assert_eq!(tasks.len(), 4);
    assert!(
        tasks.iter().all(|task| *task == Some(runner_task)),
        "lone calls run in the runner's task: {tasks:?}, runner {runner_task:?}"
    );
    let slice = store.conversation(CONVERSATION).unwrap();
    assert!(slice.anomalies().is_empty(), "results and statuses agree");
}

/// Calls side by side run in tasks of their own. The timeout is long: a
/// spawned call may wait for a worker on a loaded machine, and this test
/// is about where calls run, not about timeouts (the tests above are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_side_by_side_run_in_tasks_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[&["ok", "ok2"]]));
    let tool = Arc::new(TaskNoting(Mutex::new(Vec::new())));
    let mut tools = Toolset::new().timeout(std::time::Duration::from_secs(600));
    tools.insert(Arc::clone(&tool) as Arc<dyn convlog_agent::Tool>);
    let runner = Runner::new(Arc::clone(&store), client.clone(), tools, options());
    let run = tokio::spawn(async move {
        let outcome = runner.run(CONVERSATION, "Go").await;
        (outcome, tokio::task::id())
    });
    let (outcome, runner_task) = run.await.unwrap();
    let outcome = outcome.unwrap();
    assert_eq!(outcome.stop, StopReason::Final);
    let results: Vec<(bool, String)> = outcome
        .entries
        .iter()
        .filter(|entry| entry.role == Role::Tool)
        .map(|entry| (entry.is_error, entry.content.clone().unwrap()))
        .collect();
    assert_eq!(
        results,
        [(false, "fine".to_string()), (false, "fine".to_string())]
    );
    let tasks = tool.0.lock().unwrap().clone();
    assert_eq!(tasks.len(), 2);
    assert!(
        tasks
            .iter()
            .all(|task| task.is_some() && *task != Some(runner_task)),
        "calls side by side run in tasks of their own: {tasks:?}"
    );
}

#[tokio::test]
async fn without_a_system_prompt_the_evaluation_still_starts_with_a_system_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[]));
    let tool = CountingTool::new("weather");
    let runner = runner(&store, &client, &tool, RunnerOptions::new());
    let outcome = runner.run(CONVERSATION, "Hi").await.unwrap();
    assert_eq!(outcome.stop, StopReason::Final);
    let first = &outcome.entries[0];
    assert_eq!(
        (first.role, first.sequence, first.content.as_deref()),
        (Role::System, 0, None)
    );
    assert_eq!(
        (first.prompt_ns.as_deref(), first.prompt_key.as_deref()),
        (None, None)
    );
    assert_eq!(outcome.entries.len(), 3);
}

#[tokio::test]
async fn render_options_reach_the_client_and_tools_are_offered() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[]));
    let tool = CountingTool::new("weather");
    let display = convlog::provider::DisplayName::new("Wolo", "CodeHelper");
    let runner = runner(
        &store,
        &client,
        &tool,
        RunnerOptions::new()
            .default_system_prompt(Some("You are Wolo.".into()))
            .display_name(Some(display.clone()))
            .include_reasoning(false)
            .durability(Some(convlog::Durability::None)),
    );
    runner.run(CONVERSATION, "Hi").await.unwrap();
    let render = client.renders.lock().unwrap()[0].clone();
    assert_eq!(
        render.default_system_prompt.as_deref(),
        Some("You are Wolo.")
    );
    assert_eq!(render.display_name, Some(display));
    assert!(!render.include_reasoning);
    assert_eq!(client.offered.lock().unwrap()[0], ["weather"]);
}

/// A `weather` tool that tells the test it started, then waits until the
/// test lets it finish.
fn gated_weather(
    started: tokio::sync::mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Semaphore>,
) -> convlog_agent::tools::function::FunctionTool {
    convlog_agent::tools::function::FunctionTool::new(
        "weather",
        "Weather of a city",
        serde_json::json!({"type": "object"}),
        move |_arguments: String, _context: convlog_agent::ToolContext| {
            let started = started.clone();
            let release = Arc::clone(&release);
            async move {
                let _ = started.send(());
                let permit = release.acquire().await.expect("never closed");
                permit.forget();
                Ok("18C".to_string())
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_runner_on_a_conversation_in_progress_is_refused_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[&["paris"]]));
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let tools = Toolset::new().with(gated_weather(started_tx, Arc::clone(&release)));
    let first = Runner::new(Arc::clone(&store), client.clone(), tools.clone(), options());
    let second = Runner::new(Arc::clone(&store), client.clone(), tools, options());

    let running = tokio::spawn({
        let first = first.clone();
        async move { first.run(CONVERSATION, "Weather in Paris?").await }
    });
    started.recv().await.expect("the tool starts");
    let events_before = events(&store).len();

    // While the first run waits in its tool: a second run, a resume and an
    // answer of the same conversation are refused, with nothing recorded.
    let busy = |result: Result<(), RunError>| match result {
        Err(RunError::Busy { conversation_id }) => assert_eq!(conversation_id, CONVERSATION),
        other => panic!("expected Busy, got {other:?}"),
    };
    busy(second.run(CONVERSATION, "Again?").await.map(drop));
    busy(second.resume(CONVERSATION).await.map(drop));
    busy(
        second
            .answer_call(CONVERSATION, "call_17_0_paris", Ok("9C".into()))
            .await
            .map(drop),
    );
    assert_eq!(events(&store).len(), events_before, "nothing was recorded");

    // Another conversation is not held up (one permit for the first run's
    // waiting tool, one for this run's).
    release.add_permits(2);
    let other = second.run("other-trip", "Weather in Paris?").await.unwrap();
    assert_eq!(other.stop, StopReason::Final);
    let outcome = running.await.unwrap().unwrap();
    assert_eq!(outcome.stop, StopReason::Final);
    for finished in [&other, &outcome] {
        let results: Vec<(bool, Option<&str>)> = finished
            .entries
            .iter()
            .filter(|entry| entry.role == Role::Tool)
            .map(|entry| (entry.is_error, entry.content.as_deref()))
            .collect();
        assert_eq!(results, [(false, Some("18C"))], "each tool ran to its end");
    }
    // Once the first run returned, the conversation is free again.
    let again = second.resume(CONVERSATION).await.unwrap();
    assert_eq!(again.stop, StopReason::AlreadyFinished);
}

#[tokio::test]
async fn a_result_too_long_to_store_is_cut_and_recorded_so_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let client = ScriptedClient::new(weather_script(&[&["paris"]]));
    // Two-byte characters, so the cut falls inside one unless it looks for
    // a character boundary; longer than the store takes in one entry.
    let huge = "é".repeat(convlog::model::TEXT_BYTES_MAX / 2 + 3);
    let tool = convlog_agent::FunctionTool::new(
        "weather",
        "Weather of a city",
        serde_json::json!({"type": "object"}),
        move |_arguments: String, _context: convlog_agent::ToolContext| {
            let huge = huge.clone();
            async move { Ok(huge) }
        },
    );
    let runner = Runner::new(
        Arc::clone(&store),
        client.clone(),
        Toolset::new().with(tool),
        options(),
    );
    let outcome = runner.run(CONVERSATION, "Weather in Paris?").await.unwrap();
    assert_eq!(outcome.stop, StopReason::Final);
    let result = outcome
        .entries
        .iter()
        .find(|entry| entry.role == Role::Tool)
        .and_then(|entry| entry.content.clone())
        .unwrap();
    let (kept, note) = result.rsplit_once('\n').unwrap();
    assert!(kept.len() <= convlog_agent::TOOL_RESULT_BYTES_MAX);
    assert!(kept.chars().all(|c| c == 'é'));
    assert!(
        note.contains(&format!("was {} bytes", convlog::model::TEXT_BYTES_MAX + 6)),
        "{note}"
    );
    assert!(result.len() <= convlog::model::TEXT_BYTES_MAX);
}

/// The texts of a request's entries.
fn texts(view: &[ConversationEntry]) -> Vec<String> {
    view.iter()
        .map(|entry| entry.content.clone().unwrap_or_default())
        .collect()
}

/// A runner keeps a conversation folded between its runs; whatever anyone
/// else writes to it — between runs, during a run, a replacement of its
/// messages — is still shown to the model in the next run, and a snapshot
/// in between changes nothing.
#[tokio::test]
async fn a_kept_conversation_never_hides_what_others_wrote_from_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // The model answers at once; while answering "during", someone else
    // writes to the conversation (once).
    let writer = Arc::clone(&store);
    let wrote_during = std::sync::atomic::AtomicBool::new(false);
    let client = ScriptedClient::new(move |view: &[ConversationEntry]| {
        let asked = view.last().and_then(|entry| entry.content.clone());
        if asked.as_deref() == Some("during")
            && !wrote_during.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            writer
                .append(&[
                    ConversationEntry::user("ev-other-2", 0, "written during a run")
                        .recorded_in(CONVERSATION),
                ])
                .unwrap();
        }
        Ok(ConversationEntry::assistant("", 0, "ok"))
    });
    let tool = CountingTool::new("weather");
    let runner = runner(&store, &client, &tool, options());
    let last_view = || texts(client.requests().last().unwrap());

    runner.run(CONVERSATION, "first").await.unwrap();
    runner.run(CONVERSATION, "second").await.unwrap();
    assert!(last_view().contains(&"first".to_string()));

    // Between runs.
    store
        .append(&[
            ConversationEntry::user("ev-other-1", 0, "written between runs")
                .recorded_in(CONVERSATION),
        ])
        .unwrap();
    runner.run(CONVERSATION, "third").await.unwrap();
    assert!(last_view().contains(&"written between runs".to_string()));

    // During a run: shown from the next run on.
    runner.run(CONVERSATION, "during").await.unwrap();
    runner.run(CONVERSATION, "after").await.unwrap();
    assert!(
        last_view().contains(&"written during a run".to_string()),
        "{:?}",
        last_view()
    );

    // A snapshot between runs: the same view as a fresh read gives.
    store.snapshot().unwrap();
    runner
        .run(CONVERSATION, "after the snapshot")
        .await
        .unwrap();
    let fresh = Runner::new(
        Arc::clone(&store),
        client.clone(),
        Toolset::new(),
        options(),
    );
    let kept_view = last_view();
    fresh
        .run(CONVERSATION, "from a fresh runner")
        .await
        .unwrap();
    let fresh_view = last_view();
    // The fresh runner shows the same, then the kept runner's last answer
    // and its own input.
    assert_eq!(fresh_view[..kept_view.len()], kept_view[..]);
    assert_eq!(fresh_view[kept_view.len()..], ["ok", "from a fresh runner"]);

    // The messages replaced: the next run shows only the replacement.
    store
        .append(&[Event::MessagesReplaced(convlog::model::MessagesReplaced {
            conversation_id: CONVERSATION.to_string(),
            entries: vec![ConversationEntry::user("ev-summary", 0, "summary so far")],
            at: convlog::Timestamp::now(),
        })])
        .unwrap();
    runner
        .run(CONVERSATION, "after the replacement")
        .await
        .unwrap();
    assert_eq!(
        last_view(),
        [
            "You report weather.",
            "summary so far",
            "after the replacement"
        ]
    );
}

/// A reply is refused, and nothing of it recorded, when one of its call ids
/// is empty, is given twice in it, or was used before in the evaluation:
/// a few calls are checked one by one, many with a set (both ways tried).
#[tokio::test]
async fn a_reply_with_an_empty_or_reused_call_id_is_refused_unrecorded() {
    use convlog::model::ToolCall;
    let many: Vec<String> = (0..40)
        .map(|n| format!("m{n}"))
        .chain(["m0".to_string()])
        .collect();
    let cases: Vec<(Vec<Vec<String>>, &str)> = vec![
        (vec![vec![String::new()]], "has an empty id"),
        (vec![vec!["a".into(), "a".into()]], "is used twice"),
        (vec![vec!["a".into()], vec!["a".into()]], "is used twice"),
        (
            vec![vec!["a".into()], many.clone()],
            "tool call id m0 is used twice",
        ),
        (
            vec![vec!["m0".into()], many[1..].to_vec()],
            "tool call id m0 is used twice",
        ),
    ];
    for (replies, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let shown = replies.clone();
        let client = ScriptedClient::new(move |view: &[ConversationEntry]| {
            let turn = view
                .iter()
                .filter(|entry| entry.role == Role::Assistant)
                .count();
            let calls: Vec<ToolCall> = shown[turn]
                .iter()
                .map(|id| ToolCall::new(id.as_str(), "weather", "{\"city\":\"paris\"}"))
                .collect();
            Ok(ConversationEntry::assistant_calling("x", 0, calls))
        });
        let tool = CountingTool::new("weather");
        let error = runner(&store, &client, &tool, options())
            .run(CONVERSATION, "Weather?")
            .await
            .unwrap_err();
        match error {
            RunError::InvalidReply { reason, .. } => {
                assert!(reason.contains(expected), "{replies:?}: {reason}")
            }
            other => panic!("{replies:?}: {other:?}"),
        }
        let recorded = conversation(&store)
            .iter()
            .filter(|entry| entry.role == Role::Assistant)
            .count();
        assert_eq!(recorded, replies.len() - 1, "{replies:?}");
    }
}
