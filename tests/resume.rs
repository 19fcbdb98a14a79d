//! Resume after a crash: unfinished and finished calls, next sequence and
//! turn, prompt identity, idempotent results.

use convlog::model::{ConversationEntry, Role, Timestamp, ToolCall, ToolStatus, ToolStatusChanged};
use convlog::resume::{PromptIdentity, ResumeOptions};
use convlog::store::{Store, StoreOptions};
use convlog::{Error, Event};

fn system(evaluation: &str) -> ConversationEntry {
    let mut entry =
        ConversationEntry::new(evaluation, 0, Role::System, Some("You plan trips.".into()));
    entry.prompt_ns = Some("travel".into());
    entry.prompt_key = Some("planner".into());
    entry
}

fn user(evaluation: &str, sequence: u64, text: &str) -> ConversationEntry {
    ConversationEntry::new(evaluation, sequence, Role::User, Some(text.into()))
}

fn assistant(evaluation: &str, sequence: u64, turn: u32, calls: &[&str]) -> ConversationEntry {
    let mut entry = ConversationEntry::new(evaluation, sequence, Role::Assistant, None);
    entry.turn = turn;
    entry.tool_calls = calls
        .iter()
        .map(|call| ToolCall {
            call_id: call.to_string(),
            name: "lookup".into(),
            arguments: format!("{{\"city\":\"{call}\"}}"),
            status: ToolStatus::Pending,
            started_at: None,
            ended_at: None,
            error: None,
        })
        .collect();
    entry
}

fn result(evaluation: &str, sequence: u64, turn: u32, call: &str) -> ConversationEntry {
    let mut entry = ConversationEntry::new(
        evaluation,
        sequence,
        Role::Tool,
        Some(format!("{call}: sunny")),
    );
    entry.turn = turn;
    entry.tool_call_id = Some(call.into());
    entry.tool_name = Some("lookup".into());
    entry
}

fn running(evaluation: &str, call: &str) -> Event {
    Event::ToolStatus(ToolStatusChanged::new(
        "trip",
        evaluation,
        call,
        ToolStatus::Running,
        Timestamp::now(),
    ))
}

/// Records an evaluation up to a crash between two results of a batch.
fn crashed_store(dir: &std::path::Path) -> Store {
    let store = Store::open(dir, StoreOptions::default()).unwrap();
    for event in [
        system("e1").recorded_in("trip"),
        user("e1", 1, "Paris or Rome?").recorded_in("trip"),
        assistant("e1", 2, 1, &["paris", "rome", "oslo"]).recorded_in("trip"),
        running("e1", "paris"),
        running("e1", "rome"),
        result("e1", 3, 1, "paris").recorded_in("trip"),
    ] {
        store.append(&[event]).unwrap();
    }
    store
}

#[test]
fn a_crash_between_two_results_of_a_batch_resumes_only_the_unfinished_calls() {
    let dir = tempfile::tempdir().unwrap();
    drop(crashed_store(dir.path()));
    // The host died; a new one opens the store.
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let state = store.resume("trip", &ResumeOptions::default()).unwrap();
    assert_eq!(state.evaluation_id, "e1");
    let unfinished: Vec<(&str, ToolStatus)> = state
        .unfinished_calls
        .iter()
        .map(|call| (call.call.call_id.as_str(), call.call.status))
        .collect();
    assert_eq!(
        unfinished,
        [("rome", ToolStatus::Running), ("oslo", ToolStatus::Pending)]
    );
    assert_eq!(state.finished_calls.len(), 1);
    assert_eq!(state.finished_calls[0].call.call_id, "paris");
    assert_eq!(
        state.finished_calls[0]
            .result
            .as_ref()
            .unwrap()
            .content
            .as_deref(),
        Some("paris: sunny")
    );
    assert_eq!(state.next_sequence, 4);
    assert_eq!((state.turn, state.next_turn), (1, 2));
    assert!(!state.finished);
    assert_eq!(state.entries.len(), 4);

    // Idempotency: the stored result of a finished call is there to return.
    let stored = store.recorded_result("trip", "paris").unwrap().unwrap();
    assert_eq!(stored.content.as_deref(), Some("paris: sunny"));
    assert_eq!(store.recorded_result("trip", "rome").unwrap(), None);

    // Re-run rome (marked as resumed) and oslo, then finish the evaluation.
    store
        .append(&[state.rerun_event("rome", Timestamp::now())])
        .unwrap();
    store
        .append(&[result("e1", 4, 1, "rome").recorded_in("trip")])
        .unwrap();
    store
        .append(&[state.rerun_event("oslo", Timestamp::now())])
        .unwrap();
    store
        .append(&[result("e1", 5, 1, "oslo").recorded_in("trip")])
        .unwrap();
    let mut answer = ConversationEntry::new("e1", 6, Role::Assistant, Some("Go to Paris.".into()));
    answer.turn = 2;
    answer.finish_reason = Some("stop".into());
    store.append(&[answer.recorded_in("trip")]).unwrap();

    let done = store.resume("trip", &ResumeOptions::default()).unwrap();
    assert!(done.unfinished_calls.is_empty());
    assert_eq!(done.finished_calls.len(), 3);
    assert!(done.finished);
    assert_eq!(done.next_sequence, 7);
    let events: Vec<Event> = common_events(dir.path());
    let resumed = events
        .iter()
        .filter(|event| matches!(event, Event::ToolStatus(change) if change.resumed))
        .count();
    assert_eq!(resumed, 2, "each re-run is marked as resumed in its event");
}

fn common_events(dir: &std::path::Path) -> Vec<Event> {
    drop(Store::open(dir, StoreOptions::default()));
    convlog::log::LogReader::open(dir)
        .unwrap()
        .iter()
        .map(|record| convlog::codec::decode_event(&record.unwrap().payload).unwrap())
        .collect()
}

#[test]
fn a_crash_before_any_tool_result_leaves_every_call_unfinished() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    store.append(&[system("e1").recorded_in("trip")]).unwrap();
    store
        .append(&[assistant("e1", 1, 1, &["a", "b"]).recorded_in("trip")])
        .unwrap();
    let state = store.resume("trip", &ResumeOptions::default()).unwrap();
    assert_eq!(state.unfinished_calls.len(), 2);
    assert!(state.finished_calls.is_empty());
    assert_eq!(state.next_sequence, 2);
}

#[test]
fn a_failed_call_is_finished_and_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    store
        .append(&[assistant("e1", 1, 1, &["a"]).recorded_in("trip")])
        .unwrap();
    let mut failed =
        ToolStatusChanged::new("trip", "e1", "a", ToolStatus::Failed, Timestamp::now());
    failed.error = Some("timeout".into());
    store.append(&[Event::ToolStatus(failed)]).unwrap();
    let state = store.resume("trip", &ResumeOptions::default()).unwrap();
    assert!(state.unfinished_calls.is_empty());
    assert_eq!(state.finished_calls[0].call.status, ToolStatus::Failed);
    assert_eq!(state.finished_calls[0].result, None);
}

#[test]
fn resume_picks_the_latest_evaluation_unless_told_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let store = crashed_store(dir.path());
    store.append(&[system("e2").recorded_in("trip")]).unwrap();
    store
        .append(&[user("e2", 1, "And Oslo?").recorded_in("trip")])
        .unwrap();
    let latest = store.resume("trip", &ResumeOptions::default()).unwrap();
    assert_eq!(latest.evaluation_id, "e2");
    assert!(latest.unfinished_calls.is_empty());
    let older = store
        .resume(
            "trip",
            &ResumeOptions::new().evaluation_id(Some("e1".into())),
        )
        .unwrap();
    assert_eq!(older.unfinished_calls.len(), 2);
    let unknown = ResumeOptions::new().evaluation_id(Some("e9".into()));
    assert!(matches!(
        store.resume("trip", &unknown),
        Err(Error::EvaluationNotFound { ref conversation_id, ref evaluation_id })
            if conversation_id == "trip" && evaluation_id == "e9"
    ));
}

#[test]
fn resuming_with_another_prompt_fails_with_both_identities() {
    let dir = tempfile::tempdir().unwrap();
    let store = crashed_store(dir.path());
    let same = ResumeOptions::new().prompt(Some(PromptIdentity {
        namespace: Some("travel".into()),
        key: Some("planner".into()),
    }));
    store.resume("trip", &same).unwrap();
    let other = ResumeOptions::new().prompt(Some(PromptIdentity {
        namespace: Some("travel".into()),
        key: Some("booker".into()),
    }));
    let error = store.resume("trip", &other).unwrap_err();
    assert!(matches!(error, Error::PromptMismatch { .. }));
    let message = error.to_string();
    assert!(
        message.contains("travel/planner") && message.contains("travel/booker"),
        "{message}"
    );
    assert!(matches!(
        store.resume("nowhere", &ResumeOptions::default()),
        Err(Error::ConversationNotFound { .. })
    ));
}

#[test]
fn the_agent_resume_example_runs_to_the_end() {
    // `cargo test` builds examples next to the test binaries' directory.
    let deps = std::env::current_exe().unwrap();
    let example = deps
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("agent_resume");
    let output = std::process::Command::new(&example)
        .output()
        .unwrap_or_else(|error| panic!("run {}: {error}", example.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("unfinished (run again): call_oslo [running]"),
        "{stdout}"
    );
    assert!(stdout.contains("none run twice"), "{stdout}");
}
