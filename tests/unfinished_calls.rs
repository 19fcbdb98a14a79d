//! One definition of an unfinished tool call: `resume`, the provider
//! planner and the audit timeline agree on every order a call, its status
//! and its result can be recorded in — a result recorded before its call
//! included.

use convlog::audit::{Timeline, TimelineOptions};
use convlog::conversation::{self, CallResults};
use convlog::model::{ConversationEntry, Role, Timestamp, ToolCall, ToolStatusChanged};
use convlog::provider::{self, Provider, RenderOptions};
use convlog::resume::ResumeState;
use convlog::{Event, ToolStatus};

fn user(sequence: u64) -> ConversationEntry {
    ConversationEntry::new("e1", sequence, Role::User, Some("go".into()))
}

fn call(sequence: u64, evaluation: &str) -> ConversationEntry {
    let mut entry = ConversationEntry::new(evaluation, sequence, Role::Assistant, None);
    entry.turn = 1;
    entry.tool_calls = vec![ToolCall {
        call_id: "a".into(),
        name: "search".into(),
        arguments: "{}".into(),
        status: ToolStatus::Pending,
        started_at: None,
        ended_at: None,
        error: None,
    }];
    entry
}

fn result(sequence: u64, evaluation: &str) -> ConversationEntry {
    let mut entry = ConversationEntry::new(evaluation, sequence, Role::Tool, Some("found".into()));
    entry.tool_call_id = Some("a".into());
    entry.tool_name = Some("search".into());
    entry
}

fn status(status: ToolStatus) -> Event {
    Event::ToolStatus(ToolStatusChanged::new("c", "e1", "a", status, Timestamp(1)))
}

fn recorded(entry: ConversationEntry) -> Event {
    entry.recorded_in("c")
}

/// What each of the three says about call `a` of evaluation e1.
fn verdicts(events: &[Event]) -> (bool, bool, bool) {
    let slice = conversation::fold("c", events.iter().zip(1..));
    let resume = ResumeState::from_slice(&slice, "e1");
    let resumed = resume
        .unfinished_calls
        .iter()
        .any(|unfinished| unfinished.call.call_id == "a");
    assert_ne!(
        resumed,
        resume
            .finished_calls
            .iter()
            .any(|done| done.call.call_id == "a"),
        "a call is finished or unfinished, exactly one"
    );
    let rendered = provider::render(
        Provider::OpenAiChat,
        slice.entries(),
        &RenderOptions::default(),
    )
    .unwrap();
    let planned = rendered.unfinished_calls.contains(&"a".to_string());
    let timeline = Timeline::from_slice(&slice, &TimelineOptions::default());
    let shown = timeline.call("a").unwrap().unfinished;
    (resumed, planned, shown)
}

#[test]
fn resume_planner_and_timeline_agree_in_every_order() {
    let cases: Vec<(&str, Vec<Event>, bool)> = vec![
        (
            "call then result",
            vec![
                recorded(user(0)),
                recorded(call(1, "e1")),
                recorded(result(2, "e1")),
            ],
            false,
        ),
        (
            "result recorded before its call, in conversation order too",
            vec![
                recorded(user(0)),
                recorded(result(1, "e1")),
                recorded(call(2, "e1")),
            ],
            false,
        ),
        (
            "result logged first, sequenced after its call",
            vec![
                recorded(user(0)),
                recorded(result(2, "e1")),
                recorded(call(1, "e1")),
            ],
            false,
        ),
        (
            "running, no result",
            vec![
                recorded(user(0)),
                recorded(call(1, "e1")),
                status(ToolStatus::Running),
            ],
            true,
        ),
        (
            "status running logged before its call",
            vec![
                recorded(user(0)),
                status(ToolStatus::Running),
                recorded(call(1, "e1")),
            ],
            true,
        ),
        (
            "completed status without a result",
            vec![
                recorded(user(0)),
                recorded(call(1, "e1")),
                status(ToolStatus::Completed),
            ],
            false,
        ),
        (
            "failed status logged before its call",
            vec![
                recorded(user(0)),
                status(ToolStatus::Failed),
                recorded(call(1, "e1")),
            ],
            false,
        ),
        (
            "a result of another evaluation answers nothing here",
            vec![
                recorded(user(0)),
                recorded(call(1, "e1")),
                recorded(result(0, "e2")),
            ],
            true,
        ),
    ];
    for (name, events, unfinished) in cases {
        assert_eq!(
            verdicts(&events),
            (unfinished, unfinished, unfinished),
            "{name}: (resume, planner, timeline)"
        );
    }
}

#[test]
fn a_result_recorded_before_its_call_is_sent_after_it() {
    // Unfolded entries (the call still pending): the result alone finishes it.
    let entries = [user(0), result(1, "e1"), call(2, "e1")];
    let results = CallResults::new(&entries);
    assert!(!results.is_unfinished("e1", &entries[2].tool_calls[0]));
    let rendered =
        provider::render(Provider::OpenAiChat, &entries, &RenderOptions::default()).unwrap();
    assert!(rendered.unfinished_calls.is_empty());
    assert!(
        rendered.skipped_results.is_empty(),
        "{:?}",
        rendered.skipped_results
    );
    let roles: Vec<&str> = rendered
        .messages
        .iter()
        .map(|message| message["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
    assert_eq!(rendered.messages[2]["content"], "found");

    let slice = conversation::fold(
        "c",
        entries
            .iter()
            .map(|entry| recorded(entry.clone()))
            .collect::<Vec<_>>()
            .iter()
            .zip(1..),
    );
    let resume = ResumeState::from_slice(&slice, "e1");
    assert_eq!(
        resume.finished_calls[0]
            .result
            .as_ref()
            .map(|entry| entry.sequence),
        Some(1)
    );
    let timeline = Timeline::from_slice(&slice, &TimelineOptions::default());
    let call = timeline.call("a").unwrap();
    assert_eq!(
        call.result
            .as_ref()
            .map(|result| (result.sequence, result.lsn)),
        Some((1, 2))
    );
}
