//! The exported HTML page, loaded in a real browser: headless Chromium
//! (Debian's `chromium` package) parses it, and `--dump-dom` shows what it
//! built: the messages, the failed call's class and status, the durations,
//! and hostile content as text.
//!
//! Without `/usr/bin/chromium` the test prints a note and passes, unless
//! `CONVLOG_REQUIRE_CHROMIUM` is set (CI sets it after installing chromium).
//! `CONVLOG_CHROMIUM=/path` uses another binary (or, pointing nowhere,
//! exercises the absent case).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use convlog::audit::{self, HtmlOptions, Timeline, TimelineOptions};
use convlog::model::{
    ConversationEntry, Event, Reasoning, Role, Timestamp, ToolCall, ToolStatus, ToolStatusChanged,
};

const CHROMIUM_DEFAULT: &str = "/usr/bin/chromium";
const CONVERSATION: &str = "ctx_browser";
/// How long Chromium may take to load and dump the page.
/// A guard against a hung browser, not a speed requirement.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(900);

fn at(ms: i64) -> Timestamp {
    let base = Timestamp::parse_rfc3339("2026-03-01T09:00:00Z").unwrap();
    Timestamp(base.0 + ms * 1000)
}

fn entry(
    sequence: u64,
    turn: u32,
    role: Role,
    content: Option<&str>,
    ms: i64,
) -> ConversationEntry {
    let mut entry = ConversationEntry::new("eval-1", sequence, role, content.map(str::to_string));
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

fn result(sequence: u64, call_id: &str, content: &str, is_error: bool, ms: i64) -> Event {
    let mut entry = entry(sequence, 1, Role::Tool, Some(content), ms);
    entry.tool_call_id = Some(call_id.into());
    entry.tool_name = Some("get_weather".into());
    entry.is_error = is_error;
    entry.recorded_in(CONVERSATION)
}

fn running(call_id: &str, ms: i64) -> Event {
    Event::ToolStatus(ToolStatusChanged::new(
        CONVERSATION,
        "eval-1",
        call_id,
        ToolStatus::Running,
        at(ms),
    ))
}

/// A conversation with parallel calls: one completed, one failed, one
/// never finished; a hostile user message; reasoning; a long answer.
fn timeline() -> Timeline {
    let user = entry(
        1,
        0,
        Role::User,
        Some("Compare Paris and Rome <script>document.title='pwned'</script> & tell me"),
        10,
    );
    let mut assistant = entry(2, 1, Role::Assistant, Some("Checking both cities."), 1000);
    assistant.reasoning = Some(Reasoning {
        text: Some("SECRET-REASONING: call the tool twice in parallel.".into()),
        signature: None,
        redacted: false,
    });
    assistant.tool_calls = vec![
        call("call_paris", "get_weather", r#"{"city":"Paris"}"#),
        call("call_rome", "get_weather", r#"{"city":"Rome"}"#),
        call("call_news", "search", r#"{"q":"news"}"#),
    ];
    let events = [
        entry(0, 0, Role::System, Some("You are a weather assistant."), 0)
            .recorded_in(CONVERSATION),
        user.recorded_in(CONVERSATION),
        assistant.recorded_in(CONVERSATION),
        running("call_paris", 1010),
        running("call_rome", 1010),
        running("call_news", 1020),
        result(3, "call_paris", "18°C and sunny", false, 1130),
        result(4, "call_rome", "upstream timeout after 2s", true, 3010),
    ];
    let slice = convlog::conversation::fold(CONVERSATION, events.iter().zip(1..));
    Timeline::from_slice(&slice, &TimelineOptions::for_html())
}

fn write_page(dir: &Path) -> PathBuf {
    let path = dir.join("conversation.html");
    let mut page = Vec::new();
    audit::write_html(&mut page, &timeline(), &HtmlOptions::default()).unwrap();
    std::fs::write(&path, page).unwrap();
    path
}

fn chromium_path() -> PathBuf {
    std::env::var_os("CONVLOG_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CHROMIUM_DEFAULT))
}

/// Runs headless Chromium with `extra` arguments on `page`; returns stdout.
fn chromium(page: &Path, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(chromium_path())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    });
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium exited with {status}");
            break;
        }
        if started.elapsed() > CHROMIUM_TIMEOUT {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("chromium did not finish within {CHROMIUM_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

fn chromium_available() -> bool {
    let chromium = chromium_path();
    if chromium.exists() {
        return true;
    }
    let required = std::env::var_os("CONVLOG_REQUIRE_CHROMIUM").is_some();
    eprintln!(
        "NOTE: {} is absent, so the exported page was NOT loaded in a browser \
         (install Debian's `chromium` package to run this test){}",
        chromium.display(),
        if required {
            "; CONVLOG_REQUIRE_CHROMIUM is set, so this is a failure"
        } else {
            ""
        }
    );
    assert!(
        !required,
        "CONVLOG_REQUIRE_CHROMIUM is set but {} does not exist",
        chromium.display()
    );
    false
}

#[test]
fn chromium_renders_the_exported_page() {
    if !chromium_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = write_page(dir.path());
    let dom = chromium(&page, &["--dump-dom"]);
    assert!(dom.contains("</html>"), "no DOM dumped:\n{dom}");

    // The page's own title, not one a script set.
    assert!(dom.contains("<title>convlog · ctx_browser</title>"));
    // The messages, with hostile markup as text and no script element.
    assert!(dom.contains("You are a weather assistant."));
    assert!(dom.contains(
        "Compare Paris and Rome &lt;script&gt;document.title='pwned'&lt;/script&gt; &amp; tell me"
    ));
    assert!(!dom.to_lowercase().contains("<script"));
    assert!(dom.contains("Checking both cities."));
    assert!(dom.contains("18°C and sunny"));

    // Calls: the failed one with its class, status and error; durations.
    let failed = dom
        .find("<div class=\"call failed\"")
        .expect("the failed call keeps its class");
    let failed_call = &dom[failed..failed + dom[failed..].find("</div>\n</div>").unwrap_or(2000)];
    assert!(
        failed_call.contains("<span class=\"status\">failed</span>"),
        "{failed_call}"
    );
    assert!(failed_call.contains("call_rome"));
    assert!(failed_call.contains(">2.00s<"));
    assert!(dom.contains("upstream timeout after 2s"));
    assert!(dom.contains(">120ms<"));
    assert!(dom.contains("<div class=\"call running unfinished\""));
    assert!(dom.contains("<span class=\"status\">unfinished · running</span>"));
    assert!(dom.contains("3 tool calls, run in parallel"));

    // Reasoning is there, folded.
    let reasoning = dom.find("<details class=\"reasoning\">").unwrap();
    assert!(dom[reasoning..].contains("SECRET-REASONING"));
    assert!(!dom[reasoning..reasoning + 40].contains(" open"));
}

#[test]
fn chromium_takes_a_screenshot_of_the_page() {
    if !chromium_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = write_page(dir.path());
    let png = dir.path().join("page.png");
    chromium(
        &page,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1200,900",
            "--hide-scrollbars",
        ],
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"), "a PNG was written");
    assert!(
        bytes.len() > 10_000,
        "the page drew something ({} bytes)",
        bytes.len()
    );
    // CONVLOG_SCREENSHOT=/tmp/page.png keeps the screenshot, and the page
    // beside it (/tmp/page.html), to look at.
    if let Some(keep) = std::env::var_os("CONVLOG_SCREENSHOT").map(PathBuf::from) {
        std::fs::copy(&png, &keep).unwrap();
        std::fs::copy(&page, keep.with_extension("html")).unwrap();
    }
}
