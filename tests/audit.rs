//! The audit views: timeline model, text and HTML renderings, store
//! overview, and tail following a writer in another process.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{role, spawn_role};
use convlog::audit::{
    self, AuditView, DurationSource, HtmlOptions, TailFormat, TailOptions, TailStart, TailStop,
    TextOptions, Timeline, TimelineOptions,
};
use convlog::model::{
    ConversationEntry, Event, HistoryCurated, Reasoning, Role, Timestamp, ToolCall, ToolStatus,
    ToolStatusChanged,
};
use convlog::store::{Retention, StoreOptions};
use convlog::{ConversationSlice, Store};

const CONVERSATION: &str = "ctx_weather";

fn at(ms: i64) -> Timestamp {
    let base = Timestamp::parse_rfc3339("2026-03-01T09:00:00Z").unwrap();
    Timestamp(base.0 + ms * 1000)
}

fn entry(
    evaluation: &str,
    sequence: u64,
    turn: u32,
    role: Role,
    content: &str,
    ms: i64,
) -> ConversationEntry {
    let mut entry = ConversationEntry::new(evaluation, sequence, role, Some(content.to_string()));
    entry.turn = turn;
    entry.created_at = at(ms);
    entry
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        call_id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
        status: ToolStatus::Pending,
        started_at: None,
        ended_at: None,
        error: None,
    }
}

fn result(
    evaluation: &str,
    sequence: u64,
    call_id: &str,
    tool: &str,
    content: &str,
    is_error: bool,
    ms: i64,
) -> ConversationEntry {
    let mut entry = entry(evaluation, sequence, 1, Role::Tool, content, ms);
    entry.tool_call_id = Some(call_id.into());
    entry.tool_name = Some(tool.into());
    entry.is_error = is_error;
    entry
}

fn status(evaluation: &str, call_id: &str, status: ToolStatus, ms: i64) -> Event {
    Event::ToolStatus(ToolStatusChanged::new(
        CONVERSATION,
        evaluation,
        call_id,
        status,
        at(ms),
    ))
}

/// A hostile user message: markup, an image from the network, terminal escapes.
const HOSTILE: &str = "What's the weather in Paris and Rome? <script>alert('x')</script> \
     <img src=\"http://evil.example/x.png\"> & \"quotes\" \u{1b}[2J\u{1b}]0;pwned\u{7}";

/// Two evaluations: the first with three parallel calls (one completed,
/// one failed, one never finished), the second resumed and finished.
fn events() -> Vec<Event> {
    let mut system = entry(
        "eval-1",
        0,
        0,
        Role::System,
        "You are a weather assistant.",
        0,
    );
    system.prompt_ns = Some("weather".into());
    system.prompt_key = Some("v2".into());
    let user = entry("eval-1", 1, 0, Role::User, HOSTILE, 10);
    let mut assistant = entry(
        "eval-1",
        2,
        1,
        Role::Assistant,
        "I'll check both cities.",
        1000,
    );
    assistant.reasoning = Some(Reasoning {
        text: Some("Two cities: call get_weather twice, in parallel, and look for news.".into()),
        signature: Some("sig-abc".into()),
        redacted: false,
    });
    assistant.finish_reason = Some("tool_calls".into());
    assistant.metadata = BTreeMap::from([("provider".to_string(), "openai".to_string())]);
    assistant.tool_calls = vec![
        call("call_paris", "get_weather", r#"{"city":"Paris"}"#),
        call("call_rome", "get_weather", r#"{"city":"Rome"}"#),
        call("call_news", "search", r#"{"q":"Paris news"}"#),
    ];

    let mut second_assistant = entry("eval-2", 1, 1, Role::Assistant, "", 10_500);
    second_assistant.content = None;
    second_assistant.tool_calls = vec![
        call("call_forecast", "forecast", r#"{"city":"Paris","days":1}"#),
        call("call_quick", "get_weather", r#"{"city":"Nice"}"#),
    ];
    let mut rerun = ToolStatusChanged::new(
        CONVERSATION,
        "eval-2",
        "call_forecast",
        ToolStatus::Running,
        at(10_600),
    );
    rerun.resumed = true;
    let mut answer = entry(
        "eval-2",
        4,
        2,
        Role::Assistant,
        "Tomorrow: 20°C in Paris.",
        11_000,
    );
    answer.finish_reason = Some("stop".into());

    vec![
        system.recorded_in(CONVERSATION),
        user.recorded_in(CONVERSATION),
        assistant.recorded_in(CONVERSATION),
        status("eval-1", "call_paris", ToolStatus::Running, 1010),
        status("eval-1", "call_rome", ToolStatus::Running, 1010),
        status("eval-1", "call_news", ToolStatus::Running, 1020),
        result(
            "eval-1",
            3,
            "call_paris",
            "get_weather",
            "18°C and sunny",
            false,
            1130,
        )
        .recorded_in(CONVERSATION),
        result(
            "eval-1",
            4,
            "call_rome",
            "get_weather",
            "upstream timeout after 2s",
            true,
            3010,
        )
        .recorded_in(CONVERSATION),
        // A conflicting final status (kept out, reported) and one for a call nobody requested.
        status("eval-1", "call_rome", ToolStatus::Completed, 3020),
        status("eval-1", "call_ghost", ToolStatus::Running, 3030),
        entry("eval-2", 0, 0, Role::User, "And tomorrow?", 10_000).recorded_in(CONVERSATION),
        second_assistant.recorded_in(CONVERSATION),
        Event::ToolStatus(rerun),
        result(
            "eval-2",
            2,
            "call_quick",
            "get_weather",
            "22°C",
            false,
            10_700,
        )
        .recorded_in(CONVERSATION),
        result(
            "eval-2",
            3,
            "call_forecast",
            "forecast",
            "20°C",
            false,
            10_900,
        )
        .recorded_in(CONVERSATION),
        answer.recorded_in(CONVERSATION),
        Event::HistoryCurated(HistoryCurated {
            conversation_id: CONVERSATION.into(),
            strategy: "sliding_window(50)".into(),
            original_count: 9,
            curated_count: 9,
            at: at(11_001),
            prompt_name: Some("travel/planner".into()),
            session_id: Some("sess-42".into()),
        }),
        entry("eval-1", 0, 0, Role::User, "another conversation", 20_000).recorded_in("ctx_other"),
    ]
}

fn store_with_events(dir: &Path) -> Store {
    let store = Store::open(dir, StoreOptions::default()).unwrap();
    for event in events() {
        store.append(&[event]).unwrap();
    }
    store
}

fn fixture() -> (tempfile::TempDir, Timeline) {
    let dir = tempfile::tempdir().unwrap();
    drop(store_with_events(dir.path()));
    let view = AuditView::open(dir.path(), None).unwrap();
    let timeline = view
        .timeline(CONVERSATION, &TimelineOptions::default())
        .unwrap();
    (dir, timeline)
}

fn text_of(write: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::new();
    write(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn the_timeline_shows_parallel_failed_and_unfinished_calls() {
    let (_dir, timeline) = fixture();
    assert_eq!(timeline.conversation_id, CONVERSATION);
    assert_eq!(timeline.entries, 10);
    let evaluations: Vec<&str> = timeline
        .evaluations
        .iter()
        .map(|evaluation| evaluation.evaluation_id.as_str())
        .collect();
    assert_eq!(evaluations, ["eval-1", "eval-2"]);

    let first = &timeline.evaluations[0];
    assert_eq!(
        first.turns.iter().map(|turn| turn.turn).collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(
        (first.prompt_ns.as_deref(), first.prompt_key.as_deref()),
        (Some("weather"), Some("v2"))
    );
    assert!(!first.finished, "a call of eval-1 never finished");
    assert!(timeline.evaluations[1].finished);

    let assistant = &first.turns[1].messages[0];
    assert_eq!(assistant.role, Role::Assistant);
    assert_eq!(assistant.tool_calls.len(), 3, "a parallel batch of three");
    assert!(assistant.reasoning.as_ref().unwrap().signed);

    let paris = timeline.call("call_paris").unwrap();
    assert_eq!(paris.status, ToolStatus::Completed);
    assert_eq!(paris.duration_ms, Some(120));
    assert_eq!(paris.duration_from, Some(DurationSource::StatusTimes));
    assert_eq!(paris.result.as_ref().unwrap().sequence, 3);
    assert!(!paris.unfinished);
    assert_eq!(paris.resumed, Some(false));

    let rome = timeline.call("call_rome").unwrap();
    assert_eq!(rome.status, ToolStatus::Failed);
    assert_eq!(rome.duration_ms, Some(2000));
    assert_eq!(
        rome.error.as_ref().unwrap().text,
        "upstream timeout after 2s"
    );
    assert_eq!(rome.anomalies.len(), 1, "{:?}", rome.anomalies);
    assert!(rome.anomalies[0].contains("already failed"));

    let news = timeline.call("call_news").unwrap();
    assert_eq!(news.status, ToolStatus::Running);
    assert!(news.unfinished);
    assert_eq!(news.duration_ms, None);
    assert!(news.result.is_none());

    let forecast = timeline.call("call_forecast").unwrap();
    assert_eq!(forecast.resumed, Some(true));
    assert_eq!(
        forecast.duration_ms,
        Some(300),
        "running 10.600 → result 10.900"
    );
    let quick = timeline.call("call_quick").unwrap();
    assert_eq!(
        quick.duration_ms,
        Some(200),
        "request 10.500 → result 10.700"
    );
    assert_eq!(quick.duration_from, Some(DurationSource::EntryTimes));

    let calls = timeline.calls;
    assert_eq!(
        (
            calls.total,
            calls.completed,
            calls.failed,
            calls.unfinished,
            calls.resumed
        ),
        (5, 3, 1, 1, 1)
    );
    assert_eq!(timeline.anomalies.len(), 1);
    assert_eq!(timeline.unknown_statuses.len(), 1);
    assert_eq!(timeline.unknown_statuses[0].call_id, "call_ghost");
    assert_eq!(timeline.curations.len(), 1);
    assert_eq!(
        timeline.curations[0].prompt_name.as_deref(),
        Some("travel/planner")
    );
    assert_eq!(timeline.curations[0].session_id.as_deref(), Some("sess-42"));
    assert_eq!(timeline.resumed_visible_from, Some(1));
    assert_eq!(timeline.duration_ms, Some(11_000));
}

#[test]
fn a_timeline_from_a_slice_or_a_store_agrees_with_the_read_only_view() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_events(dir.path());
    let options = TimelineOptions::default();
    let from_store = Timeline::from_store(&store, CONVERSATION, &options).unwrap();
    let slice = store.conversation(CONVERSATION).unwrap();
    let from_slice = Timeline::from_slice(&slice, &options);
    assert_eq!(
        from_slice.call("call_forecast").unwrap().resumed,
        None,
        "a slice alone does not say"
    );
    assert_eq!(from_slice.resumed_visible_from, None);
    drop(store);
    let view = AuditView::open(dir.path(), Some(CONVERSATION)).unwrap();
    assert_eq!(
        view.conversation_ids().collect::<Vec<_>>(),
        [CONVERSATION],
        "only the conversation asked for is folded"
    );
    assert_eq!(view.timeline(CONVERSATION, &options).unwrap(), from_store);
    assert!(matches!(
        view.timeline("nope", &options),
        Err(convlog::Error::ConversationNotFound { .. })
    ));
}

#[test]
fn the_timeline_serializes_as_json_and_trims_long_text() {
    let mut events = events();
    let long = "word ".repeat(1000);
    events.push(entry("eval-3", 0, 0, Role::User, &long, 30_000).recorded_in(CONVERSATION));
    let slice = convlog::conversation::fold(CONVERSATION, events.iter().zip(1..));
    let timeline = Timeline::from_slice(&slice, &TimelineOptions::default());
    let last = timeline.messages().last().unwrap().content.clone().unwrap();
    assert!(last.truncated);
    assert_eq!(last.chars, 5000);
    assert_eq!(last.text.chars().count(), audit::TEXT_CHARS_DEFAULT);
    assert!(last.text.ends_with('…'));
    let whole = Timeline::from_slice(&slice, &TimelineOptions::full());
    assert!(
        !whole
            .messages()
            .last()
            .unwrap()
            .content
            .as_ref()
            .unwrap()
            .truncated
    );

    let json = text_of(|out| audit::write_json(out, &timeline).unwrap());
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["conversation_id"], CONVERSATION);
    let calls = &value["evaluations"][0]["turns"][1]["messages"][0]["tool_calls"];
    assert_eq!(calls[1]["call_id"], "call_rome");
    assert_eq!(calls[1]["status"], "failed");
    assert_eq!(calls[1]["duration_ms"], 2000);
    assert_eq!(calls[1]["started_at"], "2026-03-01T09:00:01.010000Z");
    assert_eq!(calls[2]["unfinished"], true);
    assert_eq!(calls[0]["duration_from"], "status_times");
    assert_eq!(value["calls"]["failed"], 1);
}

#[test]
fn text_is_plain_without_colour_and_coloured_with_it() {
    let (_dir, timeline) = fixture();
    let plain = text_of(|out| audit::write_timeline_text(out, &timeline, false).unwrap());
    println!("{plain}");
    assert!(
        !plain.contains('\u{1b}'),
        "no escape at all when plain, not even from content"
    );
    for expected in [
        "conversation ctx_weather",
        "evaluation 1/2 eval-1",
        "prompt weather/v2",
        "turn 1",
        "3 tool calls in parallel",
        "✓ completed",
        "120ms",
        "✗ FAILED",
        "2.00s",
        "error: upstream timeout after 2s",
        "… UNFINISHED",
        "running since 09:00:01.020; no result, a resume re-runs it",
        "↻ resumed",
        "anomaly: LSN 9: call already failed",
        "call_ghost",
        "sliding_window(50): 9 → 9 messages sent\n      (prompt travel/planner, session sess-42)",
        "5 tool calls (3 completed, 1 failed, 1 unfinished, 1 resumed)",
        "reasoning: 67 chars (hidden)",
        "#1  assistant  2 tool calls in parallel:",
    ] {
        assert!(plain.contains(expected), "missing {expected:?}");
    }
    let user_line = plain
        .lines()
        .find(|line| line.contains("What's the weather"))
        .unwrap();
    assert!(
        user_line.ends_with('…'),
        "long messages are cut: {user_line}"
    );
    for line in plain.lines() {
        assert!(line.chars().count() <= 100, "over 100 columns: {line}");
    }
    assert!(plain.lines().all(|line| line == line.trim_end()));
    let wide = text_of(|out| {
        let options = TextOptions::new().width(400);
        audit::write_timeline_text_with(out, &timeline, &options).unwrap()
    });
    assert!(
        wide.contains("\u{241b}[2J\u{241b}]0;pwned\u{2407}"),
        "escapes in content are shown, defused"
    );

    let colored = text_of(|out| {
        audit::write_timeline_text_with(
            out,
            &timeline,
            &TextOptions::new().color(true).show_reasoning(true),
        )
        .unwrap()
    });
    assert!(colored.contains("\u{1b}[1;31m✗ FAILED"));
    assert!(colored.contains("\u{1b}[1;33m… UNFINISHED"));
    assert!(colored.contains("reasoning: Two cities"));
    assert!(
        !colored.contains("\u{1b}[2J") && !colored.contains("\u{1b}]0;"),
        "recorded escapes are defused even in colour"
    );
}

#[test]
fn the_overview_lists_every_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_events(dir.path());
    let from_store = audit::StoreOverview::from_store(&store).unwrap();
    drop(store);
    let overview = AuditView::open(dir.path(), None).unwrap().overview();
    assert_eq!(overview.conversations.len(), 2);
    assert_eq!(overview.next_lsn, 19);
    let weather = &overview.conversations[1];
    assert_eq!(weather.conversation_id, CONVERSATION);
    assert_eq!(
        (weather.entries, weather.evaluations, weather.calls.failed),
        (10, 2, 1)
    );
    assert_eq!(weather.calls.unfinished, 1);
    assert_eq!(weather.calls.resumed, 1);
    assert_eq!(
        from_store.conversations[1].calls.resumed, 0,
        "not counted from a store"
    );
    assert_eq!(from_store.conversations[1].calls.unfinished, 1);

    let plain = text_of(|out| audit::write_overview_text(out, &overview, false).unwrap());
    println!("{plain}");
    assert!(!plain.contains('\u{1b}'));
    assert!(plain.contains("2 conversations"));
    let row = plain
        .lines()
        .find(|line| line.starts_with(CONVERSATION))
        .unwrap();
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&columns[..6], [CONVERSATION, "10", "2", "5", "1", "1"]);
    assert!(row.contains("1 anomaly"));
    let colored = text_of(|out| audit::write_overview_text(out, &overview, true).unwrap());
    assert!(colored.contains("\u{1b}[1;31m"));
}

#[test]
fn the_read_only_view_uses_a_snapshot_when_the_log_was_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let options = || {
        StoreOptions::new()
            .segment_bytes_max(4096)
            .retention(Retention::DeleteCoveredBySnapshot)
    };
    let store = Store::open(dir.path(), options()).unwrap();
    for event in events() {
        store.append(&[event]).unwrap();
    }
    for index in 0..60u64 {
        let filler = entry("eval-9", index, 0, Role::User, &"x".repeat(200), 40_000);
        store.append(&[filler.recorded_in("ctx_filler")]).unwrap();
    }
    store.snapshot().unwrap();
    assert!(!store.compact().unwrap().removed.is_empty());
    store
        .append(&[status("eval-1", "call_news", ToolStatus::Failed, 50_000)])
        .unwrap();
    let expected = Timeline::from_slice(
        &store.conversation(CONVERSATION).unwrap(),
        &TimelineOptions::default(),
    );
    drop(store);

    let view = AuditView::open(dir.path(), None).unwrap();
    assert!(view.first_lsn() > 1);
    assert!(view.overview().snapshot_lsn.is_some());
    let timeline = view
        .timeline(CONVERSATION, &TimelineOptions::default())
        .unwrap();
    assert_eq!(
        timeline.calls.unfinished, 0,
        "the failed status after the snapshot"
    );
    assert_eq!(
        timeline.call("call_news").unwrap().status,
        ToolStatus::Failed
    );
    assert_eq!(
        timeline.call("call_forecast").unwrap().resumed,
        None,
        "its events were compacted away"
    );
    assert_eq!(
        timeline.evaluations,
        expected
            .evaluations
            .iter()
            .cloned()
            .map(|mut evaluation| {
                for call in evaluation
                    .turns
                    .iter_mut()
                    .flat_map(|turn| turn.messages.iter_mut())
                    .flat_map(|message| message.tool_calls.iter_mut())
                {
                    call.resumed = None;
                }
                evaluation
            })
            .collect::<Vec<_>>()
    );
}

fn html_of(timeline: &Timeline) -> String {
    text_of(|out| {
        audit::write_html(
            out,
            timeline,
            &HtmlOptions::new().store(Some("/tmp/store <1>".into())),
        )
        .unwrap()
    })
}

/// The values of every `name="..."` attribute in `html`.
fn attribute_values<'a>(html: &'a str, name: &str) -> Vec<&'a str> {
    let needle = format!(" {name}=\"");
    html.match_indices(&needle)
        .map(|(index, _)| {
            let rest = &html[index + needle.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

#[test]
fn html_is_self_contained_escaped_and_marks_failed_calls() {
    let (_dir, timeline) = fixture();
    let html = html_of(&timeline);
    let lowered = html.to_lowercase();

    // Hostile content is text, never markup.
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(html.contains("&lt;img src=&quot;http://evil.example/x.png&quot;&gt;"));
    assert!(!lowered.contains("<script"), "no script element at all");
    assert!(
        !lowered.contains("<img") && !lowered.contains("<link") && !lowered.contains("<iframe")
    );
    assert!(!html.contains('\u{1b}'));
    assert!(html.contains("/tmp/store &lt;1&gt;"));
    assert!(html.contains("<td>travel/planner</td><td>sess-42</td>"));

    // Nothing is loaded: no src attribute, links only to anchors in the page.
    assert!(attribute_values(&html, "src").is_empty());
    let hrefs = attribute_values(&html, "href");
    assert!(!hrefs.is_empty());
    assert!(hrefs.iter().all(|href| href.starts_with('#')), "{hrefs:?}");
    for href in &hrefs {
        assert!(
            html.contains(&format!(" id=\"{}\"", &href[1..])),
            "{href} points inside the page"
        );
    }
    assert!(!lowered.contains("url("), "no CSS fetches");
    assert!(!lowered.contains("@import"));
    assert!(html.contains("default-src 'none'"));

    // Calls: statuses, durations, failure highlighted, unfinished marked.
    assert_eq!(html.matches("class=\"call failed\"").count(), 1);
    assert!(html.contains("class=\"call running unfinished\""));
    assert!(
        html.contains("class=\"call running resumed\"")
            || html.contains("class=\"call completed resumed\"")
    );
    assert!(html.contains(">120ms<") && html.contains(">2.00s<"));
    assert!(html.contains("upstream timeout after 2s"));
    assert!(html.contains("<details class=\"reasoning\"><summary>Reasoning"));
    assert!(html.contains("Needs attention"));
    assert!(html.contains("3 tool calls, run in parallel"));
    assert!(html.contains("metadata · provider"));

    // Not a single fetchable URL in a page made of ordinary content.
    let mut calm = timeline.clone();
    for evaluation in &mut calm.evaluations {
        for message in evaluation
            .turns
            .iter_mut()
            .flat_map(|turn| turn.messages.iter_mut())
        {
            if let Some(content) = &mut message.content {
                content.text = content.text.replace("http://evil.example/x.png", "x.png");
            }
        }
    }
    let calm = html_of(&calm).to_lowercase();
    assert!(!calm.contains("http://") && !calm.contains("https://"));
}

#[test]
fn an_empty_conversation_still_makes_a_page_and_a_timeline() {
    let slice = ConversationSlice::new("<empty>");
    let timeline = Timeline::from_slice(&slice, &TimelineOptions::default());
    let html = html_of(&timeline);
    assert!(html.contains("&lt;empty&gt;"));
    assert!(html.contains("no messages"));
    let text = text_of(|out| audit::write_timeline_text(out, &timeline, false).unwrap());
    assert!(text.contains("no tool calls"));
}

// ---------------------------------------------------------------- tail

/// A `Write` that notes when each line arrives.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<(Instant, String)>>>, Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut pending = self.1.lock().unwrap();
        pending.extend_from_slice(bytes);
        while let Some(end) = pending.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8(line).unwrap().trim_end().to_string();
            self.0.lock().unwrap().push((Instant::now(), line));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const WRITER_EVENTS: u64 = 24;

fn store_from_env() -> PathBuf {
    PathBuf::from(std::env::var("CONVLOG_TEST_STORE").unwrap())
}

/// Child role: appends `WRITER_EVENTS` events, 10 ms apart; after the first
/// half it waits until the parent's tail has printed them (the parent then
/// creates the file `CONVLOG_TEST_GO`).
fn run_writer() {
    let store = Store::open(store_from_env(), StoreOptions::default()).unwrap();
    let go = PathBuf::from(std::env::var("CONVLOG_TEST_GO").unwrap());
    for index in 0..WRITER_EVENTS {
        if index == WRITER_EVENTS / 2 {
            let waited = Instant::now();
            while !go.exists() {
                assert!(
                    waited.elapsed() < Duration::from_secs(900),
                    "the tail never printed the first half"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let event = if index % 3 == 2 {
            status(
                "eval-1",
                &format!("call_{index}"),
                ToolStatus::Running,
                index as i64,
            )
        } else {
            entry(
                "eval-1",
                index,
                0,
                Role::User,
                &format!("message {index}"),
                index as i64,
            )
            .recorded_in(CONVERSATION)
        };
        store.append(&[event]).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn tail_follows_a_writer_in_another_process() {
    if role().as_deref() == Some("writer") {
        run_writer();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Create the store (its first segment) so the reader can open it.
    drop(Store::open(dir.path(), StoreOptions::default()).unwrap());
    let go = dir.path().join("go");
    let mut child = spawn_role(
        "tail_follows_a_writer_in_another_process",
        "writer",
        &[
            ("CONVLOG_TEST_STORE", dir.path().display().to_string()),
            ("CONVLOG_TEST_GO", go.display().to_string()),
        ],
    );
    let mut lines = Lines::default();
    let printed = lines.0.clone();
    // Only a guard against hanging forever: the test never depends on
    // how fast the writer or this tail runs.
    let deadline = Instant::now() + Duration::from_secs(900);
    // Asked after every event: once the first half was printed, let the
    // writer append the second half, which tail must then wait for.
    let mut should_stop = || {
        if printed.lock().unwrap().len() as u64 >= WRITER_EVENTS / 2 && !go.exists() {
            std::fs::write(&go, b"go").unwrap();
        }
        Instant::now() >= deadline
    };
    let report = audit::tail(
        dir.path(),
        &mut lines,
        &TailOptions::new()
            .start(TailStart::Beginning)
            .follow(true)
            .format(TailFormat::Json)
            .max_events(Some(WRITER_EVENTS))
            .poll_interval(Duration::from_millis(50)),
        &mut should_stop,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success());
    assert_eq!(report.stop, TailStop::MaxEvents);
    assert_eq!(report.printed, WRITER_EVENTS);
    assert_eq!(report.next_lsn, WRITER_EVENTS + 1);

    let lines = lines.0.lock().unwrap().clone();
    assert_eq!(lines.len() as u64, WRITER_EVENTS);
    for (expected_lsn, (_, line)) in (1..).zip(&lines) {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(value["lsn"], expected_lsn);
        let kind = if expected_lsn % 3 == 0 {
            "tool_status"
        } else {
            "conversation_recorded"
        };
        assert_eq!(value["type"], kind, "{line}");
    }
    // Followed: the second half did not exist until the first was printed.
    assert!(go.exists());
}

#[test]
fn tail_without_follow_prints_what_is_written_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    drop(store_with_events(dir.path()));
    let mut out = Vec::new();
    let report = audit::tail(
        dir.path(),
        &mut out,
        &TailOptions::new().start(TailStart::Beginning),
        &mut || false,
    )
    .unwrap();
    assert_eq!((report.printed, report.stop), (18, TailStop::EndOfLog));
    let text = String::from_utf8(out).unwrap();
    println!("{text}");
    assert!(!text.contains('\u{1b}'));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[2].contains("eval-1 #2 assistant: I'll check both cities. → get_weather(call_paris), get_weather(call_rome), search(call_news)"));
    assert!(lines[7].contains("← call_rome get_weather ERROR: upstream timeout"));
    assert!(lines[12].contains("call call_forecast → running (resumed)"));
    assert!(lines[16].contains(
        "history curated by sliding_window(50): 9 → 9 messages sent, prompt travel/planner, session sess-42"
    ));

    // The last two events of one conversation, as summaries in colour.
    let mut out = Vec::new();
    let report = audit::tail(
        dir.path(),
        &mut out,
        &TailOptions::new()
            .start(TailStart::Last(2))
            .conversation(Some(CONVERSATION.into()))
            .format(TailFormat::Summary { color: true }),
        &mut || false,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(report.printed, 2);
    assert_eq!(report.next_lsn, 19);
    assert!(text.contains("\u{1b}["));
    assert!(text.lines().next().unwrap().contains("Tomorrow"));
}

#[test]
fn tail_from_the_end_follows_a_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(store_with_events(dir.path()));
    // The writer starts only once tail has found the end and is following
    // (its first `should_stop` call), so no event can land before "the end"
    // however slowly this thread runs.
    let following = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let writer = {
        let store = Arc::clone(&store);
        let following = Arc::clone(&following);
        std::thread::spawn(move || {
            let (started, wake) = &*following;
            let mut started = started.lock().unwrap();
            while !*started {
                started = wake.wait(started).unwrap();
            }
            drop(started);
            for index in 0..5 {
                let noise =
                    entry("eval-7", index, 0, Role::User, "noise", 0).recorded_in("ctx_noise");
                let late = entry("eval-7", index, 0, Role::User, "late", 0).recorded_in("ctx_late");
                store.append(&[noise, late]).unwrap();
            }
        })
    };
    let mut out = Vec::new();
    let report = audit::tail_reader(
        &store.log().reader().unwrap(),
        &mut out,
        &TailOptions::new()
            .start(TailStart::End)
            .follow(true)
            .conversation(Some("ctx_late".into()))
            .format(TailFormat::Json)
            .max_events(Some(5))
            .poll_interval(Duration::from_millis(20)),
        &mut || {
            let (started, wake) = &*following;
            *started.lock().unwrap() = true;
            wake.notify_all();
            false
        },
    )
    .unwrap();
    writer.join().unwrap();
    assert_eq!((report.printed, report.stop), (5, TailStop::MaxEvents));
    let text = String::from_utf8(out).unwrap();
    let lsns: Vec<u64> = text
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(value["conversation_id"], "ctx_late");
            value["lsn"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(
        lsns,
        [20, 22, 24, 26, 28],
        "only new events, of one conversation"
    );

    // Following stops after an idle spell.
    let report = audit::tail_reader(
        &store.log().reader().unwrap(),
        &mut Vec::new(),
        &TailOptions::new()
            .start(TailStart::Lsn(19))
            .follow(true)
            .idle_timeout(Some(Duration::from_millis(200))),
        &mut || false,
    )
    .unwrap();
    assert_eq!((report.printed, report.stop), (10, TailStop::Idle));
}

const FAILED_BODY: &str = "https://api.example/v1/chat answered HTTP 503 (after 2 attempt(s)): {\"error\":\"<b>busy</b>\"}\nretry later";

/// A conversation whose first model call failed then succeeded on resume,
/// with a damaged failure event, one naming an evaluation the conversation
/// has no message of, and a host's own custom event.
fn store_with_failed_model_calls(dir: &Path) -> Store {
    let store = Store::open(dir, StoreOptions::default()).unwrap();
    let mut failure = convlog::model::ModelCallFailed::new(CONVERSATION, "eval-1", 1, FAILED_BODY);
    failure.provider = "openai".into();
    failure.client = "fake-client".into();
    failure.url = "https://api.example/v1/chat".into();
    failure.attempts = 2;
    failure.status = Some(503);
    let elsewhere = convlog::model::ModelCallFailed::new(CONVERSATION, "eval-gone", 0, "timed out");
    let events = [
        entry("eval-1", 0, 0, Role::User, "Weather in Paris?", 0).recorded_in(CONVERSATION),
        failure.to_event(),
        Event::Custom(convlog::model::CustomEvent {
            kind: "budget".into(),
            conversation_id: Some(CONVERSATION.into()),
            payload: vec![1, 2, 3],
        }),
        Event::Custom(convlog::model::CustomEvent {
            kind: convlog::model::MODEL_CALL_FAILED.into(),
            conversation_id: Some(CONVERSATION.into()),
            payload: b"{\"status\": \"teapot\"}".to_vec(),
        }),
        elsewhere.to_event(),
        entry("eval-1", 1, 1, Role::Assistant, "Sunny, 21C.", 5_000).recorded_in(CONVERSATION),
    ];
    for event in events {
        store.append(&[event]).unwrap();
    }
    store
}

#[test]
fn a_failed_model_call_shows_in_its_evaluation_in_every_view() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_failed_model_calls(dir.path());
    let from_store =
        Timeline::from_store(&store, CONVERSATION, &TimelineOptions::default()).unwrap();
    let slice = store.conversation(CONVERSATION).unwrap();
    drop(store);
    let view = AuditView::open(dir.path(), None).unwrap();
    let timeline = view
        .timeline(CONVERSATION, &TimelineOptions::default())
        .unwrap();
    assert_eq!(timeline, from_store);

    // The model: one failure in eval-1 at LSN 2, two apart.
    assert_eq!(timeline.failed_model_calls, 3);
    let placed = &timeline.evaluations[0].failed_model_calls;
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].lsn, 2);
    let details = placed[0].failure.as_ref().unwrap();
    assert_eq!(
        (details.status, details.attempts, details.turn),
        (Some(503), 2, 1)
    );
    assert_eq!(details.client, "fake-client");
    assert_eq!(details.error.text, FAILED_BODY);
    let apart = &timeline.failed_model_calls_apart;
    assert_eq!(apart.len(), 2);
    assert_eq!(apart[0].lsn, 4);
    assert!(apart[0].failure.is_none());
    let reason = apart[0].unreadable.as_deref().unwrap();
    assert!(
        reason.contains("not a convlog.model_call_failed object"),
        "{reason}"
    );
    assert_eq!(
        apart[1].failure.as_ref().unwrap().evaluation_id,
        "eval-gone"
    );
    // A slice alone has no events to read them from.
    assert_eq!(
        Timeline::from_slice(&slice, &TimelineOptions::default()).failed_model_calls,
        0
    );
    // Long errors are cut like other text fields.
    let cut = view
        .timeline(CONVERSATION, &TimelineOptions::new().text_chars(Some(20)))
        .unwrap();
    let error = &cut.evaluations[0].failed_model_calls[0]
        .failure
        .as_ref()
        .unwrap()
        .error;
    assert!(error.truncated && error.text.chars().count() == 20);
    assert_eq!(error.chars, FAILED_BODY.chars().count());

    // Text: in place between the question and the answer, with the count.
    let text = text_of(|out| audit::write_timeline_text(out, &timeline, false).unwrap());
    println!("{text}");
    assert!(
        text.contains("no tool calls · 3 failed model calls"),
        "{text}"
    );
    let question = text.find("Weather in Paris?").unwrap();
    let failed = text
        .find("LSN 2  model call failed at turn 1 (HTTP 503, 2 attempts) · openai · client fake-client")
        .expect("the failure line");
    let answer = text.find("Sunny, 21C.").unwrap();
    assert!(question < failed && failed < answer, "{text}");
    assert!(text.contains("https://api.example/v1/chat answered HTTP 503 (after 2 attempt(s)): {\"error\":\"<b>busy</b>\"}"));
    assert!(
        !text.contains("retry later"),
        "only the first line of the error"
    );
    assert!(text.contains("failed model calls outside the evaluations shown"));
    assert!(text.contains("LSN 4  model call failed, event unreadable: the payload (20 bytes)"));
    assert!(text.contains(
        "evaluation eval-gone\n  LSN 5  model call failed at turn 0 (no HTTP status, 1 attempt)"
    ));
    assert!(!text.contains("budget"), "other custom kinds stay out");

    // JSON.
    let json = text_of(|out| audit::write_json(out, &timeline).unwrap());
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["failed_model_calls"], 3);
    let failure = &value["evaluations"][0]["failed_model_calls"][0];
    assert_eq!(failure["lsn"], 2);
    assert_eq!(failure["failure"]["status"], 503);
    assert_eq!(failure["failure"]["attempts"], 2);
    assert_eq!(failure["failure"]["client"], "fake-client");
    assert_eq!(failure["failure"]["error"]["text"], FAILED_BODY);
    assert!(failure["unreadable"].is_null());
    assert!(value["failed_model_calls_apart"][0]["unreadable"].is_string());

    // HTML: a card in the evaluation, between the messages, escaped, and
    // an item under "Needs attention".
    let html = html_of(&timeline);
    let card = html.find("id=\"model-failure-2\"").expect("the card");
    let question = html.find("Weather in Paris?").unwrap();
    let answer = html.find("Sunny, 21C.").unwrap();
    assert!(question < card && card < answer);
    assert!(html.contains("HTTP 503, 2 attempts"));
    assert!(html.contains("&lt;b&gt;busy&lt;/b&gt;"));
    assert!(!html.contains("<b>busy"));
    assert!(html.contains("fake-client"));
    assert!(html.contains("<a href=\"#model-failure-2\">Model call failed</a>"));
    assert!(html.contains("id=\"model-failure-4\""));
    assert!(html.contains("<span class=\"badge bad\">unreadable</span>"));
    assert!(html.contains("<span class=\"badge bad\">1 failed model call</span>"));
    assert!(!html.contains("budget"));

    // The overview counts them.
    let overview = view.overview();
    assert_eq!(overview.conversations[0].failed_model_calls, 3);
    assert_eq!(overview.failed_model_calls, 3);
    let text = text_of(|out| audit::write_overview_text(out, &overview, false).unwrap());
    assert!(
        text.contains("no tool calls · 3 failed model calls"),
        "{text}"
    );
}

#[test]
fn tail_summarizes_a_failed_model_call() {
    let dir = tempfile::tempdir().unwrap();
    drop(store_with_failed_model_calls(dir.path()));
    let mut out = Vec::new();
    audit::tail(
        dir.path(),
        &mut out,
        &TailOptions::new().start(TailStart::Beginning),
        &mut || false,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    println!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].ends_with(
        "eval-1 model call failed (HTTP 503, 2 attempts): https://api.example/v1/chat answered HTTP 503 (after 2 attempt(s)): {\"error\":\"<b>busy</b>\"}"
    ), "{}", lines[1]);
    assert!(lines[2].ends_with("custom budget: 3 bytes"), "{}", lines[2]);
    assert!(
        lines[3].contains("model call failed (unreadable): the payload (20 bytes)"),
        "{}",
        lines[3]
    );
    assert!(
        lines[4].ends_with("eval-gone model call failed (no HTTP status, 1 attempt): timed out")
    );
}

#[test]
fn the_documented_failed_model_call_example_reads() {
    let docs = include_str!("../docs/events.md");
    let line = docs
        .lines()
        .find(|line| line.contains("\"kind\": \"convlog.model_call_failed\""))
        .expect("docs/events.md shows a failed model call");
    let events = convlog::json::parse_line(1, line, &mut |_, _| Ok(0)).unwrap();
    let failure = convlog::model::ModelCallFailed::from_event(&events[0])
        .expect("its kind")
        .expect("its payload");
    assert_eq!(failure.status, Some(503));
    assert_eq!(failure.attempts, 2);
}
