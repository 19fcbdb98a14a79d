//! `export --format html`: one self-contained page per conversation.
//!
//! The page is a single HTML document with its CSS inline. It has no
//! script, loads no resource (a Content-Security-Policy of
//! `default-src 'none'` says so to the browser too), and links only to
//! anchors inside itself. Every piece of recorded content is HTML-escaped.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

use super::format::{
    clock, datetime, defuse_controls, first_line, format_duration_ms, model_failure_facts, plural,
};
use super::timeline::{
    CallView, EvaluationView, MessageView, ModelFailureView, Timeline, TrimmedText,
};
use crate::model::{Role, Timestamp, ToolStatus};

/// What [`write_html`] adds around the timeline.
///
/// A builder, so a new option never breaks a host: start from `new()` (the
/// defaults) and chain a setter per option, each named as the field it
/// sets; the fields stay public for reading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HtmlOptions {
    /// The page title (default: `convlog · <conversation id>`).
    pub title: Option<String>,
    /// The store the conversation was read from, shown in the page's
    /// metadata.
    pub store: Option<String>,
    /// When the page was made, shown in its metadata (the library reads no
    /// clock; the CLI passes `Timestamp::now()`).
    pub generated_at: Option<Timestamp>,
}

impl HtmlOptions {
    /// No title (the default one), no store, no time.
    pub fn new() -> HtmlOptions {
        HtmlOptions::default()
    }

    /// Sets the page title (`None`: `convlog · <conversation id>`).
    pub fn title(mut self, title: Option<String>) -> HtmlOptions {
        self.title = title;
        self
    }

    /// Sets the store shown in the page's metadata.
    pub fn store(mut self, store: Option<String>) -> HtmlOptions {
        self.store = store;
        self
    }

    /// Sets when the page was made, shown in its metadata.
    pub fn generated_at(mut self, generated_at: Option<Timestamp>) -> HtmlOptions {
        self.generated_at = generated_at;
        self
    }
}

/// Arguments longer than this many characters are folded in `<details>`.
const ARGUMENTS_INLINE_CHARS: usize = 160;

/// HTML-escapes `text` for element content and quoted attribute values;
/// control characters become visible stand-ins.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len() + text.len() / 8);
    for character in defuse_controls(text).chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            _ => escaped.push(character),
        }
    }
    escaped
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn time_tag(time: Timestamp) -> String {
    format!(
        "<time datetime=\"{}\" title=\"{}\">{}</time>",
        escape(&time.to_string()),
        escape(&datetime(time)),
        escape(&clock(time))
    )
}

fn trimmed_note(text: &TrimmedText) -> String {
    if text.truncated {
        format!(
            "<p class=\"cut\">Cut at {} of {} characters for this page.</p>",
            text.text.chars().count(),
            text.chars
        )
    } else {
        String::new()
    }
}

/// Anchors of calls and messages, so results and calls link to each other.
struct Anchors {
    calls: HashMap<(usize, String), String>,
    messages: HashMap<(usize, u64), String>,
}

impl Anchors {
    fn of(timeline: &Timeline) -> Anchors {
        let mut anchors = Anchors {
            calls: HashMap::new(),
            messages: HashMap::new(),
        };
        let mut next_call = 0;
        for (index, evaluation) in timeline.evaluations.iter().enumerate() {
            for message in evaluation.turns.iter().flat_map(|turn| &turn.messages) {
                anchors
                    .messages
                    .entry((index, message.sequence))
                    .or_insert_with(|| format!("m{}-{}", index + 1, message.sequence));
                for call in &message.tool_calls {
                    next_call += 1;
                    anchors
                        .calls
                        .entry((index, call.call_id.clone()))
                        .or_insert_with(|| format!("call-{next_call}"));
                }
            }
        }
        anchors
    }
}

/// Writes one self-contained HTML page showing `timeline`: evaluations,
/// turns and messages in order, each tool call with its status, duration
/// and error (failed calls carry the classes `call failed`, unfinished ones
/// `call unfinished`), parallel calls drawn on a shared time bar, reasoning
/// and metadata folded in `<details>`. Build the timeline with
/// [`TimelineOptions::for_html`](super::TimelineOptions::for_html) to keep
/// long messages whole.
pub fn write_html(
    out: &mut dyn Write,
    timeline: &Timeline,
    options: &HtmlOptions,
) -> io::Result<()> {
    let mut page = String::new();
    render(&mut page, timeline, options).expect("writing to a String cannot fail");
    out.write_all(page.as_bytes())
}

fn render(page: &mut String, timeline: &Timeline, options: &HtmlOptions) -> std::fmt::Result {
    let anchors = Anchors::of(timeline);
    let title = options
        .title
        .clone()
        .unwrap_or_else(|| format!("convlog · {}", timeline.conversation_id));
    writeln!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <meta name=\"generator\" content=\"convlog {}\">\n<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n<div class=\"page\">",
        env!("CARGO_PKG_VERSION"),
        escape(&title),
        CSS
    )?;
    header(page, timeline, options)?;
    attention(page, timeline, &anchors)?;
    if timeline.evaluations.len() > 1 {
        page.push_str("<nav class=\"toc\"><span class=\"toc-label\">Evaluations</span>");
        for (index, evaluation) in timeline.evaluations.iter().enumerate() {
            let state = evaluation_state(evaluation).0;
            write!(
                page,
                "<a href=\"#eval-{}\"><span class=\"dot {state}\"></span>{}</a>",
                index + 1,
                escape(&evaluation.evaluation_id)
            )?;
        }
        page.push_str("</nav>\n");
    }
    page.push_str("<main>\n");
    for (index, evaluation) in timeline.evaluations.iter().enumerate() {
        evaluation_section(page, timeline, index, evaluation, &anchors)?;
    }
    if timeline.evaluations.is_empty() {
        page.push_str("<p class=\"empty\">This conversation has no messages.</p>\n");
    }
    page.push_str("</main>\n");
    if !timeline.curations.is_empty() {
        page.push_str("<section class=\"panel\"><h2>History curations</h2><table class=\"grid\"><tr><th>LSN</th><th>When</th><th>Strategy</th><th>Messages</th><th>Prompt</th><th>Session</th></tr>");
        for curation in &timeline.curations {
            write!(
                page,
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{} → {} sent</td><td>{}</td><td>{}</td></tr>",
                curation.lsn,
                escape(&datetime(curation.at)),
                escape(&curation.strategy),
                curation.original_count,
                curation.curated_count,
                escape(curation.prompt_name.as_deref().unwrap_or("")),
                escape(curation.session_id.as_deref().unwrap_or(""))
            )?;
        }
        page.push_str("</table></section>\n");
    }
    if !timeline.failed_model_calls_apart.is_empty() {
        page.push_str(
            "<section class=\"panel\"><h2>Failed model calls outside the evaluations shown</h2>\n",
        );
        for failure in &timeline.failed_model_calls_apart {
            if let Some(details) = &failure.failure {
                write!(
                    page,
                    "<p class=\"sub\">Evaluation <code>{}</code></p>",
                    escape(&details.evaluation_id)
                )?;
            }
            failure_card(page, failure)?;
        }
        page.push_str("</section>\n");
    }
    writeln!(
        page,
        "<footer>Exported by convlog {} · one self-contained page: no scripts, nothing loaded from the network.</footer>\n</div>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION")
    )
}

fn stat(page: &mut String, value: &str, label: &str, class: &str) -> std::fmt::Result {
    write!(
        page,
        "<div class=\"stat {class}\"><b>{}</b><span>{}</span></div>",
        escape(value),
        escape(label)
    )
}

fn header(page: &mut String, timeline: &Timeline, options: &HtmlOptions) -> std::fmt::Result {
    writeln!(
        page,
        "<header class=\"top\">\n<div class=\"eyebrow\">convlog · conversation audit</div>\n<h1>{}</h1>",
        escape(&timeline.conversation_id)
    )?;
    if let (Some(first), Some(last)) = (timeline.first_at, timeline.last_at) {
        writeln!(
            page,
            "<p class=\"when\">{} → {}</p>",
            escape(&datetime(first)),
            escape(&datetime(last))
        )?;
    }
    page.push_str("<div class=\"stats\">");
    stat(page, &timeline.entries.to_string(), "messages", "")?;
    stat(
        page,
        &timeline.evaluations.len().to_string(),
        "evaluations",
        "",
    )?;
    stat(page, &timeline.calls.total.to_string(), "tool calls", "")?;
    let calls = &timeline.calls;
    stat(page, &calls.completed.to_string(), "completed", "")?;
    stat(
        page,
        &calls.failed.to_string(),
        "failed",
        if calls.failed > 0 { "bad" } else { "" },
    )?;
    stat(
        page,
        &calls.unfinished.to_string(),
        "unfinished",
        if calls.unfinished > 0 { "warn" } else { "" },
    )?;
    if calls.resumed > 0 {
        stat(page, &calls.resumed.to_string(), "resumed", "")?;
    }
    if timeline.failed_model_calls > 0 {
        stat(
            page,
            &timeline.failed_model_calls.to_string(),
            "failed model calls",
            "bad",
        )?;
    }
    if let Some(ms) = timeline.duration_ms {
        stat(page, &format_duration_ms(ms), "wall time", "")?;
    }
    page.push_str("</div>\n");
    page.push_str(
        "<details class=\"about\"><summary>About this export</summary><table class=\"kv\">",
    );
    let mut row = |key: &str, value: String| {
        let _ = write!(page, "<tr><th>{}</th><td>{value}</td></tr>", escape(key));
    };
    row(
        "Conversation",
        format!("<code>{}</code>", escape(&timeline.conversation_id)),
    );
    if let Some(store) = &options.store {
        row("Store", format!("<code>{}</code>", escape(store)));
    }
    row("Last LSN", timeline.last_lsn.to_string());
    if let Some(first) = timeline.first_at {
        row("First message", escape(&first.to_string()));
    }
    if let Some(last) = timeline.last_at {
        row("Last activity", escape(&last.to_string()));
    }
    row(
        "Resumed flags",
        match timeline.resumed_visible_from {
            Some(1) => "known for every call".to_string(),
            Some(lsn) => format!("known for calls recorded at or after LSN {lsn}"),
            None => "not known (built from a folded slice alone)".to_string(),
        },
    );
    if let Some(at) = options.generated_at {
        row("Exported", escape(&datetime(at)));
    }
    row("Durations", "a call's <i>started → ended</i> times when recorded, else from the request (assistant message) to its result".to_string());
    page.push_str("</table></details>\n</header>\n");
    Ok(())
}

fn attention(page: &mut String, timeline: &Timeline, anchors: &Anchors) -> std::fmt::Result {
    let mut items = Vec::new();
    for (index, evaluation) in timeline.evaluations.iter().enumerate() {
        for message in evaluation.turns.iter().flat_map(|turn| &turn.messages) {
            for call in &message.tool_calls {
                let anchor = &anchors.calls[&(index, call.call_id.clone())];
                if call.status == ToolStatus::Failed {
                    let error = call
                        .error
                        .as_ref()
                        .map(|error| {
                            format!(" — {}", escape(&super::format::one_line(&error.text, 140)))
                        })
                        .unwrap_or_default();
                    items.push(format!(
                        "<li class=\"bad\"><a href=\"#{anchor}\"><b>{}</b> <code>{}</code> failed</a> in <code>{}</code>{error}</li>",
                        escape(&call.name),
                        escape(&call.call_id),
                        escape(&evaluation.evaluation_id)
                    ));
                } else if call.unfinished {
                    items.push(format!(
                        "<li class=\"warn\"><a href=\"#{anchor}\"><b>{}</b> <code>{}</code> unfinished</a> ({}, no result) in <code>{}</code> — a resume would run it again</li>",
                        escape(&call.name),
                        escape(&call.call_id),
                        call.status.as_str(),
                        escape(&evaluation.evaluation_id)
                    ));
                }
            }
        }
    }
    let failures = timeline
        .evaluations
        .iter()
        .flat_map(|evaluation| &evaluation.failed_model_calls)
        .chain(&timeline.failed_model_calls_apart);
    for failure in failures {
        items.push(failure_attention(failure));
    }
    for anomaly in &timeline.anomalies {
        items.push(format!(
            "<li class=\"bad\">Anomaly at LSN {}: call <code>{}</code>: {}</li>",
            anomaly.lsn,
            escape(&anomaly.call_id),
            escape(&anomaly.detail)
        ));
    }
    for status in &timeline.unknown_statuses {
        items.push(format!(
            "<li class=\"warn\">LSN {}: status <b>{}</b> for call <code>{}</code> of <code>{}</code>, which no assistant message requested{}</li>",
            status.lsn,
            status.status.as_str(),
            escape(&status.call_id),
            escape(&status.evaluation_id),
            status
                .error
                .as_deref()
                .map(|error| format!(" — {}", escape(&super::format::one_line(error, 140))))
                .unwrap_or_default()
        ));
    }
    if items.is_empty() {
        return Ok(());
    }
    writeln!(
        page,
        "<section class=\"attention\"><h2>Needs attention</h2><ul>{}</ul></section>",
        items.join("")
    )
}

/// The "Needs attention" item of a failed model call, linking to its card.
fn failure_attention(view: &ModelFailureView) -> String {
    match &view.failure {
        Some(failure) => format!(
            "<li class=\"bad\"><a href=\"#{}\">Model call failed</a> ({}) in <code>{}</code> — {}</li>",
            failure_anchor(view),
            escape(&model_failure_facts(failure.status, failure.attempts)),
            escape(&failure.evaluation_id),
            escape(&first_line(&failure.error.text, 140))
        ),
        None => format!(
            "<li class=\"bad\"><a href=\"#{}\">Model call failed</a>, its event unreadable — {}</li>",
            failure_anchor(view),
            escape(&super::format::one_line(view.unreadable.as_deref().unwrap_or(""), 140))
        ),
    }
}

fn failure_anchor(view: &ModelFailureView) -> String {
    format!("model-failure-{}", view.lsn)
}

/// The card of a failed model call: status, attempts, provider, client,
/// URL and the error text whole (as far as the timeline kept it).
fn failure_card(page: &mut String, view: &ModelFailureView) -> std::fmt::Result {
    write!(
        page,
        "<article class=\"msg error model-failure\" id=\"{}\">\n<div class=\"msg-head\"><span class=\"role\">model call failed</span><span class=\"seq\">LSN {}</span>",
        failure_anchor(view),
        view.lsn
    )?;
    let Some(failure) = &view.failure else {
        writeln!(
            page,
            "<span class=\"badge bad\">unreadable</span></div>\n<div class=\"text\">{}</div>\n</article>",
            escape(view.unreadable.as_deref().unwrap_or(""))
        )?;
        return Ok(());
    };
    writeln!(
        page,
        "<span class=\"answers\">turn {}</span><span class=\"badge bad\">{}</span></div>",
        failure.turn,
        escape(&model_failure_facts(failure.status, failure.attempts))
    )?;
    page.push_str("<table class=\"kv\">");
    for (key, value) in [
        ("Provider", &failure.provider),
        ("Client", &failure.client),
        ("URL", &failure.url),
    ] {
        if !value.is_empty() {
            write!(
                page,
                "<tr><th>{key}</th><td><code>{}</code></td></tr>",
                escape(value)
            )?;
        }
    }
    writeln!(
        page,
        "</table>\n<div class=\"text\">{}</div>{}\n</article>",
        escape(&failure.error.text),
        trimmed_note(&failure.error)
    )
}

/// (CSS class, label) of an evaluation's state.
fn evaluation_state(evaluation: &EvaluationView) -> (&'static str, &'static str) {
    if evaluation.finished {
        ("ok", "finished")
    } else if evaluation.calls.unfinished > 0 {
        ("warn", "unfinished calls")
    } else {
        ("open", "open")
    }
}

fn evaluation_section(
    page: &mut String,
    timeline: &Timeline,
    index: usize,
    evaluation: &EvaluationView,
    anchors: &Anchors,
) -> std::fmt::Result {
    let (state_class, state_label) = evaluation_state(evaluation);
    write!(
        page,
        "<section class=\"evaluation\" id=\"eval-{}\">\n<div class=\"eval-head\"><h2><span class=\"muted\">Evaluation {} of {}</span> <code>{}</code></h2><span class=\"badge {state_class}\">{state_label}</span>",
        index + 1,
        index + 1,
        timeline.evaluations.len(),
        escape(&evaluation.evaluation_id)
    )?;
    if evaluation.calls.failed > 0 {
        write!(
            page,
            "<span class=\"badge bad\">{}</span>",
            plural(evaluation.calls.failed, "failed call", "failed calls")
        )?;
    }
    if !evaluation.failed_model_calls.is_empty() {
        write!(
            page,
            "<span class=\"badge bad\">{}</span>",
            plural(
                evaluation.failed_model_calls.len(),
                "failed model call",
                "failed model calls"
            )
        )?;
    }
    page.push_str("</div>\n<p class=\"sub\">");
    let mut facts = Vec::new();
    if evaluation.prompt_ns.is_some() || evaluation.prompt_key.is_some() {
        facts.push(format!(
            "prompt <code>{}/{}</code>",
            escape(evaluation.prompt_ns.as_deref().unwrap_or("-")),
            escape(evaluation.prompt_key.as_deref().unwrap_or("-"))
        ));
    }
    if let Some(first) = evaluation.first_at {
        facts.push(format!("started {}", escape(&datetime(first))));
    }
    if let Some(ms) = evaluation.duration_ms {
        facts.push(format!("took {}", format_duration_ms(ms)));
    }
    facts.push(plural(evaluation.entries, "message", "messages"));
    facts.push(plural(evaluation.turns.len(), "turn", "turns"));
    facts.push(plural(evaluation.calls.total, "tool call", "tool calls"));
    page.push_str(&facts.join(" · "));
    page.push_str("</p>\n");
    // Each failed model call goes after the messages recorded before it.
    let mut failures = evaluation.failed_model_calls.iter().peekable();
    for turn in &evaluation.turns {
        writeln!(
            page,
            "<div class=\"turn\"><div class=\"turn-label\">Turn {}</div>",
            turn.turn
        )?;
        for message in &turn.messages {
            while let Some(failure) = failures.next_if(|failure| failure.lsn < message.lsn) {
                failure_card(page, failure)?;
            }
            message_card(page, index, message, anchors)?;
        }
        page.push_str("</div>\n");
    }
    if failures.peek().is_some() {
        page.push_str("<div class=\"turn\"><div class=\"turn-label\">Model calls after the last message</div>\n");
        for failure in failures {
            failure_card(page, failure)?;
        }
        page.push_str("</div>\n");
    }
    page.push_str("</section>\n");
    Ok(())
}

fn message_card(
    page: &mut String,
    evaluation: usize,
    message: &MessageView,
    anchors: &Anchors,
) -> std::fmt::Result {
    let role = role_name(message.role);
    let error_class = if message.is_error { " error" } else { "" };
    write!(
        page,
        "<article class=\"msg {role}{error_class}\" id=\"{}\">\n<div class=\"msg-head\"><span class=\"role\">{role}</span><span class=\"seq\">#{}</span>",
        anchors.messages[&(evaluation, message.sequence)],
        message.sequence
    )?;
    if let Some(call_id) = &message.answers_call {
        let target = anchors
            .calls
            .get(&(evaluation, call_id.clone()))
            .map(|anchor| format!("<a href=\"#{anchor}\"><code>{}</code></a>", escape(call_id)))
            .unwrap_or_else(|| format!("<code>{}</code> (unknown call)", escape(call_id)));
        let tool = message
            .tool_name
            .as_deref()
            .map(|name| format!("<b>{}</b> ", escape(name)))
            .unwrap_or_default();
        write!(
            page,
            "<span class=\"answers\">result of {tool}{target}</span>"
        )?;
        if message.is_error {
            page.push_str("<span class=\"badge bad\">error</span>");
        }
    }
    writeln!(
        page,
        "<span class=\"grow\"></span>{}</div>",
        time_tag(message.created_at)
    )?;

    if let Some(reasoning) = &message.reasoning {
        let summary = match &reasoning.text {
            Some(text) => format!(
                "Reasoning · {}",
                plural(text.chars, "character", "characters")
            ),
            None if reasoning.redacted => "Reasoning · redacted by the provider".to_string(),
            None => "Reasoning · signature only".to_string(),
        };
        write!(
            page,
            "<details class=\"reasoning\"><summary>{}</summary>",
            escape(&summary)
        )?;
        if let Some(text) = &reasoning.text {
            write!(
                page,
                "<div class=\"text\">{}</div>{}",
                escape(&text.text),
                trimmed_note(text)
            )?;
        }
        page.push_str("</details>\n");
    }
    match &message.content {
        Some(content) if !content.text.is_empty() => writeln!(
            page,
            "<div class=\"text\">{}</div>{}",
            escape(&content.text),
            trimmed_note(content)
        )?,
        _ if message.tool_calls.is_empty() => {
            page.push_str("<div class=\"text none\">(no content)</div>\n")
        }
        _ => {}
    }
    if !message.tool_calls.is_empty() {
        calls_block(page, evaluation, message, anchors)?;
    }
    metadata(page, message)?;
    page.push_str("</article>\n");
    Ok(())
}

/// A call's span on the batch's time bar: (start, end, end known).
fn call_span(message: &MessageView, call: &CallView) -> (Timestamp, Option<Timestamp>) {
    let start = call.started_at.unwrap_or(message.created_at);
    let end = call
        .ended_at
        .or(call.result.as_ref().map(|result| result.created_at));
    (start, end)
}

/// The tool calls an assistant message made, as one block: a heading, then
/// each call ([`call_block`]) on the batch's shared time bar.
fn calls_block(
    page: &mut String,
    evaluation: usize,
    message: &MessageView,
    anchors: &Anchors,
) -> std::fmt::Result {
    let calls = &message.tool_calls;
    let heading = if calls.len() > 1 {
        format!("{} tool calls, run in parallel", calls.len())
    } else {
        "1 tool call".to_string()
    };
    writeln!(
        page,
        "<div class=\"calls\"><div class=\"calls-head\">{heading}</div>"
    )?;
    // The batch's time bar runs from the request to the last known end.
    let origin = message.created_at;
    let mut horizon = origin;
    for call in calls {
        let (start, end) = call_span(message, call);
        horizon = horizon.max(start).max(end.unwrap_or(start));
    }
    let total = origin.millis_until(horizon);
    for call in calls {
        call_block(page, evaluation, message, call, anchors, total)?;
    }
    page.push_str("</div>\n");
    Ok(())
}

/// One call: its status row, its span on a time bar `total` milliseconds
/// long (none when 0), its arguments and error, and notes.
fn call_block(
    page: &mut String,
    evaluation: usize,
    message: &MessageView,
    call: &CallView,
    anchors: &Anchors,
    total: i64,
) -> std::fmt::Result {
    call_row(page, evaluation, call, anchors)?;
    if total > 0 {
        call_bar(page, message, call, total)?;
    }
    call_text(page, call)?;
    call_notes(page, evaluation, call, anchors)?;
    page.push_str("</div>\n");
    Ok(())
}

/// Opens a call's block with its row: status, name, id, resumed badge and
/// duration.
fn call_row(
    page: &mut String,
    evaluation: usize,
    call: &CallView,
    anchors: &Anchors,
) -> std::fmt::Result {
    let mut classes = vec!["call", call.status.as_str()];
    if call.unfinished {
        classes.push("unfinished");
    }
    if call.resumed == Some(true) {
        classes.push("resumed");
    }
    let label = if call.unfinished {
        format!("unfinished · {}", call.status.as_str())
    } else {
        call.status.as_str().to_string()
    };
    let duration = call
        .duration_ms
        .map(format_duration_ms)
        .unwrap_or_else(|| "—".to_string());
    let duration_title = match call.duration_from {
        Some(super::timeline::DurationSource::StatusTimes) => "from started to ended",
        Some(super::timeline::DurationSource::EntryTimes) => "from the request to its result",
        Some(super::timeline::DurationSource::RequestToEnd) => "from the request to its end",
        None => "no end recorded",
    };
    write!(
        page,
        "<div class=\"{}\" id=\"{}\">\n<div class=\"call-row\"><span class=\"status\">{label}</span><span class=\"name\">{}</span><code class=\"cid\">{}</code>",
        classes.join(" "),
        anchors.calls[&(evaluation, call.call_id.clone())],
        escape(&call.name),
        escape(&call.call_id)
    )?;
    if call.resumed == Some(true) {
        page.push_str("<span class=\"badge info\">resumed</span>");
    }
    writeln!(
        page,
        "<span class=\"grow\"></span><span class=\"dur\" title=\"{duration_title}\">{duration}</span></div>"
    )?;
    Ok(())
}

/// A call's span on its batch's time bar, `total` milliseconds from the
/// request.
fn call_bar(
    page: &mut String,
    message: &MessageView,
    call: &CallView,
    total: i64,
) -> std::fmt::Result {
    let origin = message.created_at;
    let (start, end) = call_span(message, call);
    let left = origin.millis_until(start) as f64 / total as f64 * 100.0;
    let right = match end {
        Some(end) => origin.millis_until(end) as f64 / total as f64 * 100.0,
        None => 100.0,
    };
    let left = left.clamp(0.0, 100.0);
    let width = (right.clamp(0.0, 100.0) - left).max(0.8);
    let open = if end.is_none() { " open" } else { "" };
    writeln!(
        page,
        "<div class=\"bar\" title=\"started +{} after the request\"><span class=\"fill{open}\" style=\"margin-left:{left:.2}%;width:{width:.2}%\"></span></div>",
        format_duration_ms(origin.millis_until(start))
    )?;
    Ok(())
}

/// A call's arguments (folded when long) and error text.
fn call_text(page: &mut String, call: &CallView) -> std::fmt::Result {
    let arguments = &call.arguments;
    if arguments.chars <= ARGUMENTS_INLINE_CHARS && !arguments.text.contains('\n') {
        writeln!(
            page,
            "<div class=\"args\"><span class=\"k\">arguments</span> <code>{}</code></div>",
            escape(&arguments.text)
        )?;
    } else {
        writeln!(
            page,
            "<details class=\"args\"><summary><span class=\"k\">arguments</span> {}</summary><pre>{}</pre>{}</details>",
            plural(arguments.chars, "character", "characters"),
            escape(&arguments.text),
            trimmed_note(arguments)
        )?;
    }
    if let Some(error) = &call.error {
        writeln!(
            page,
            "<div class=\"error-text\"><span class=\"k\">error</span> {}</div>{}",
            escape(&error.text),
            trimmed_note(error)
        )?;
    }
    Ok(())
}

/// The notes under a call: when it ran, its result, why it is unfinished,
/// its anomalies.
fn call_notes(
    page: &mut String,
    evaluation: usize,
    call: &CallView,
    anchors: &Anchors,
) -> std::fmt::Result {
    let mut notes = Vec::new();
    if let (Some(start), Some(end)) = (call.started_at, call.ended_at) {
        notes.push(format!("ran {} → {}", time_tag(start), time_tag(end)));
    } else if let Some(start) = call.started_at {
        notes.push(format!("started {}", time_tag(start)));
    }
    if let Some(result) = &call.result {
        let target = anchors
            .messages
            .get(&(evaluation, result.sequence))
            .map(|anchor| format!("<a href=\"#{anchor}\">#{}</a>", result.sequence))
            .unwrap_or_else(|| format!("#{}", result.sequence));
        notes.push(format!("result {target} at LSN {}", result.lsn));
    }
    if call.unfinished {
        notes.push(
            "no result recorded: the host stopped before it finished, and a resume would run it again"
                .to_string(),
        );
    }
    for anomaly in &call.anomalies {
        notes.push(format!(
            "<span class=\"bad-text\">anomaly: {}</span>",
            escape(anomaly)
        ));
    }
    if !notes.is_empty() {
        writeln!(page, "<div class=\"note\">{}</div>", notes.join(" · "))?;
    }
    Ok(())
}

fn metadata(page: &mut String, message: &MessageView) -> std::fmt::Result {
    write!(
        page,
        "<details class=\"meta\"><summary>details</summary><table class=\"kv\"><tr><th>message id</th><td><code>{}</code></td></tr><tr><th>LSN</th><td>{}</td></tr><tr><th>created</th><td>{}</td></tr><tr><th>turn</th><td>{}</td></tr>",
        escape(&message.message_id),
        message.lsn,
        escape(&message.created_at.to_string()),
        message.turn
    )?;
    let mut row = |key: &str, value: &str| {
        let _ = write!(
            page,
            "<tr><th>{}</th><td><code>{}</code></td></tr>",
            escape(key),
            escape(value)
        );
    };
    if let Some(reason) = &message.finish_reason {
        row("finish reason", reason);
    }
    if let Some(ns) = &message.prompt_ns {
        row("prompt namespace", ns);
    }
    if let Some(key) = &message.prompt_key {
        row("prompt key", key);
    }
    if let Some(reasoning) = &message.reasoning {
        if reasoning.signed {
            row("reasoning", "signed (signature kept for the provider)");
        }
    }
    for (key, value) in &message.metadata {
        row(&format!("metadata · {key}"), value);
    }
    page.push_str("</table></details>\n");
    Ok(())
}

const CSS: &str = r#"
:root {
  color-scheme: light dark;
  --bg: #f6f7f9; --card: #ffffff; --ink: #1d2330; --muted: #667085; --line: #e3e6eb;
  --system: #8e6bbf; --user: #2f6fd6; --assistant: #1a8f5a; --tool: #b7791f;
  --ok: #1a8f5a; --ok-bg: #e7f6ee; --bad: #c9372c; --bad-bg: #fdecea; --warn: #b26a00; --warn-bg: #fff4e0;
  --info: #3457d5; --info-bg: #e9eefc; --code-bg: #f0f2f5;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #14171c; --card: #1c2027; --ink: #e6e8ec; --muted: #98a1b0; --line: #2c323c;
    --ok-bg: #15342a; --bad-bg: #3a1d1b; --warn-bg: #3a2c12; --info-bg: #1d2747; --code-bg: #262b33;
    --ok: #4cc38a; --bad: #ff6b5e; --warn: #f0a93b; --info: #8aa4ff;
  }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
.page { max-width: 980px; margin: 0 auto; padding: 28px 20px 48px; }
code, pre, .cid, .dur, time, .seq { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 0.86em; }
code { background: var(--code-bg); padding: 1px 5px; border-radius: 4px; overflow-wrap: anywhere; }
a { color: var(--info); text-decoration: none; }
a:hover { text-decoration: underline; }
h1 { font-size: 1.7em; margin: 2px 0 4px; overflow-wrap: anywhere; }
h2 { font-size: 1.15em; margin: 0; }
.muted, .eyebrow, .sub, .when, footer, .turn-label, .note { color: var(--muted); }
.eyebrow { text-transform: uppercase; letter-spacing: .08em; font-size: .75em; font-weight: 600; }
.when { margin: 0 0 14px; }
.top { background: var(--card); border: 1px solid var(--line); border-radius: 12px; padding: 20px 22px; }
.stats { display: flex; flex-wrap: wrap; gap: 10px; }
.stat { border: 1px solid var(--line); border-radius: 10px; padding: 8px 14px; min-width: 92px; }
.stat b { display: block; font-size: 1.35em; }
.stat span { color: var(--muted); font-size: .85em; }
.stat.bad { border-color: var(--bad); background: var(--bad-bg); }
.stat.bad b { color: var(--bad); }
.stat.warn { border-color: var(--warn); background: var(--warn-bg); }
.stat.warn b { color: var(--warn); }
details > summary { cursor: pointer; color: var(--muted); }
details.about { margin-top: 14px; font-size: .9em; }
table.kv { border-collapse: collapse; margin-top: 6px; }
table.kv th { text-align: left; font-weight: 500; color: var(--muted); padding: 2px 14px 2px 0; vertical-align: top; white-space: nowrap; }
table.kv td { padding: 2px 0; overflow-wrap: anywhere; }
.attention { margin-top: 18px; background: var(--card); border: 1px solid var(--line); border-left: 4px solid var(--bad); border-radius: 12px; padding: 14px 20px; }
.attention ul { margin: 8px 0 0; padding-left: 20px; }
.attention li { margin: 3px 0; }
.attention li.bad::marker { color: var(--bad); }
.attention li.warn::marker { color: var(--warn); }
.toc { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin-top: 18px; }
.toc-label { color: var(--muted); font-size: .85em; margin-right: 4px; }
.toc a { background: var(--card); border: 1px solid var(--line); border-radius: 999px; padding: 3px 12px; font-size: .88em; color: var(--ink); }
.dot { display: inline-block; width: 8px; height: 8px; border-radius: 50%; margin-right: 6px; background: var(--muted); }
.dot.ok { background: var(--ok); } .dot.warn { background: var(--warn); }
.evaluation { margin-top: 28px; }
.eval-head { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; }
.sub { margin: 4px 0 12px; font-size: .9em; }
.badge { display: inline-block; font-size: .75em; font-weight: 600; padding: 2px 9px; border-radius: 999px; border: 1px solid currentColor; }
.badge.ok { color: var(--ok); background: var(--ok-bg); }
.badge.bad { color: var(--bad); background: var(--bad-bg); }
.badge.warn { color: var(--warn); background: var(--warn-bg); }
.badge.open { color: var(--muted); }
.badge.info { color: var(--info); background: var(--info-bg); }
.turn { position: relative; margin: 0 0 6px 8px; padding: 4px 0 4px 20px; border-left: 2px solid var(--line); }
.turn-label { font-size: .78em; font-weight: 600; text-transform: uppercase; letter-spacing: .06em; margin: 2px 0 6px -4px; }
.msg { position: relative; background: var(--card); border: 1px solid var(--line); border-left: 4px solid var(--muted); border-radius: 10px; padding: 10px 14px; margin: 0 0 10px; }
.msg::before { content: ""; position: absolute; left: -33px; top: 16px; width: 12px; height: 12px; border-radius: 50%; background: var(--bg); border: 2px solid var(--muted); }
.msg.system { border-left-color: var(--system); } .msg.system::before { border-color: var(--system); }
.msg.user { border-left-color: var(--user); } .msg.user::before { border-color: var(--user); }
.msg.assistant { border-left-color: var(--assistant); } .msg.assistant::before { border-color: var(--assistant); }
.msg.tool { border-left-color: var(--tool); } .msg.tool::before { border-color: var(--tool); }
.msg.error { border-left-color: var(--bad); background: var(--bad-bg); } .msg.error::before { border-color: var(--bad); }
.msg.model-failure .role { color: var(--bad); }
.msg-head { display: flex; flex-wrap: wrap; gap: 8px; align-items: baseline; font-size: .88em; margin-bottom: 4px; }
.role { font-weight: 700; text-transform: uppercase; letter-spacing: .05em; font-size: .85em; }
.msg.system .role { color: var(--system); } .msg.user .role { color: var(--user); }
.msg.assistant .role { color: var(--assistant); } .msg.tool .role { color: var(--tool); }
.seq, time { color: var(--muted); }
.grow { flex: 1; }
.answers { color: var(--muted); }
.text { white-space: pre-wrap; overflow-wrap: anywhere; max-height: 30em; overflow: auto; }
.text.none { color: var(--muted); font-style: italic; }
.cut { color: var(--warn); font-size: .82em; margin: 4px 0 0; }
details.reasoning { margin: 2px 0 8px; padding: 6px 10px; border-radius: 8px; background: var(--code-bg); }
details.reasoning .text { margin-top: 6px; font-size: .93em; }
details.meta { margin-top: 8px; font-size: .82em; }
.calls { margin-top: 10px; }
.calls-head { font-size: .8em; font-weight: 600; color: var(--muted); text-transform: uppercase; letter-spacing: .05em; margin-bottom: 6px; }
.call { border: 1px solid var(--line); border-radius: 8px; padding: 8px 12px; margin-bottom: 8px; }
.call-row { display: flex; flex-wrap: wrap; align-items: center; gap: 8px; }
.call .status { font-size: .75em; font-weight: 700; text-transform: uppercase; letter-spacing: .04em; padding: 2px 8px; border-radius: 999px; background: var(--code-bg); color: var(--muted); }
.call .name { font-weight: 600; }
.call .dur { font-weight: 600; }
.call.completed .status { background: var(--ok-bg); color: var(--ok); }
.call.failed { border-color: var(--bad); background: var(--bad-bg); box-shadow: inset 4px 0 0 var(--bad); }
.call.failed .status { background: var(--bad); color: #fff; }
.call.failed .dur { color: var(--bad); }
.call.unfinished { border: 1px dashed var(--warn); background: var(--warn-bg); box-shadow: inset 4px 0 0 var(--warn); }
.call.unfinished .status { background: var(--warn); color: #fff; }
.bar { height: 6px; border-radius: 3px; background: var(--code-bg); margin: 8px 0 6px; overflow: hidden; }
.bar .fill { display: block; height: 100%; border-radius: 3px; background: var(--ok); }
.call.failed .bar .fill { background: var(--bad); }
.call.running .bar .fill, .call.pending .bar .fill { background: var(--warn); }
.call .bar .fill.open { background: repeating-linear-gradient(45deg, var(--warn) 0 6px, transparent 6px 10px); }
.args { font-size: .9em; margin-top: 4px; }
.args pre { white-space: pre-wrap; overflow-wrap: anywhere; background: var(--code-bg); padding: 8px; border-radius: 6px; max-height: 20em; overflow: auto; margin: 6px 0 0; }
.k { color: var(--muted); font-size: .82em; text-transform: uppercase; letter-spacing: .05em; margin-right: 4px; }
.error-text { margin-top: 6px; color: var(--bad); white-space: pre-wrap; overflow-wrap: anywhere; font-weight: 500; }
.error-text .k { color: var(--bad); }
.note { font-size: .82em; margin-top: 6px; }
.bad-text { color: var(--bad); }
.panel { margin-top: 28px; background: var(--card); border: 1px solid var(--line); border-radius: 12px; padding: 14px 20px; }
table.grid { border-collapse: collapse; width: 100%; font-size: .9em; margin-top: 8px; }
table.grid th, table.grid td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); }
.empty { color: var(--muted); font-style: italic; }
footer { margin-top: 36px; font-size: .8em; text-align: center; }
@media print { .text, .args pre { max-height: none; overflow: visible; } }
"#;
