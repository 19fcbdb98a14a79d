//! The text rendering of `inspect`: a timeline for a terminal or a pipe.

use std::io::{self, Write};

use super::format::{
    clock, conversation_column_width, datetime, defuse_controls, first_line, format_duration_ms,
    model_failure_facts, one_line, plural,
};
use super::timeline::{
    CallCounts, CallView, EvaluationView, MessageView, ModelFailureView, StoreOverview, Timeline,
};
use crate::model::{Role, ToolStatus};

/// How [`write_timeline_text_with`] renders.
///
/// A builder, so a new option never breaks a host: start from `new()` (the
/// defaults) and chain a setter per option, each named as the field it
/// sets; the fields stay public for reading.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TextOptions {
    /// Use ANSI colour escapes (for a terminal). Without it the output has
    /// no escape sequence at all, not even from recorded content.
    pub color: bool,
    /// Columns to fit lines into (messages and arguments are cut with `…`).
    pub width: usize,
    /// Show reasoning text (otherwise only its length).
    pub show_reasoning: bool,
}

impl Default for TextOptions {
    /// Plain, 100 columns, reasoning hidden.
    fn default() -> TextOptions {
        TextOptions {
            color: false,
            width: 100,
            show_reasoning: false,
        }
    }
}

impl TextOptions {
    /// Plain, 100 columns, reasoning hidden.
    pub fn new() -> TextOptions {
        TextOptions::default()
    }

    /// Sets whether ANSI colour escapes are used.
    pub fn color(mut self, color: bool) -> TextOptions {
        self.color = color;
        self
    }

    /// Sets the columns lines are fitted into.
    pub fn width(mut self, width: usize) -> TextOptions {
        self.width = width;
        self
    }

    /// Sets whether reasoning text is shown (otherwise only its length).
    pub fn show_reasoning(mut self, show_reasoning: bool) -> TextOptions {
        self.show_reasoning = show_reasoning;
        self
    }
}

/// Columns of the message prefix (`  12:00:00.000  #12  assistant  `).
const PREFIX: usize = 32;
/// Columns of the indent of a failed model call's URL and error lines.
const FAILURE_INDENT: usize = 6;
/// Fewest columns left for text, however narrow the width.
const TEXT_MIN: usize = 30;

/// ANSI styles, or nothing.
struct Paint {
    color: bool,
}

const BOLD: &str = "1";
const DIM: &str = "2";
const RED: &str = "31";
const GREEN: &str = "32";
const YELLOW: &str = "33";
const BLUE: &str = "34";
const MAGENTA: &str = "35";
const CYAN: &str = "36";
const BOLD_RED: &str = "1;31";
const BOLD_YELLOW: &str = "1;33";

impl Paint {
    fn paint(&self, style: &str, text: &str) -> String {
        if self.color && !text.is_empty() {
            format!("\x1b[{style}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn role(&self, role: Role) -> String {
        let (name, style) = match role {
            Role::System => ("system", MAGENTA),
            Role::User => ("user", CYAN),
            Role::Assistant => ("assistant", GREEN),
            Role::Tool => ("tool", BLUE),
        };
        self.paint(style, &format!("{name:<9}"))
    }
}

/// Writes the timeline of one conversation as text: ANSI colours when
/// `color` (the CLI passes whether stdout is a terminal), plain otherwise.
pub fn write_timeline_text(
    out: &mut dyn Write,
    timeline: &Timeline,
    color: bool,
) -> io::Result<()> {
    write_timeline_text_with(
        out,
        timeline,
        &TextOptions {
            color,
            ..TextOptions::default()
        },
    )
}

fn counts_text(calls: &CallCounts, paint: &Paint) -> String {
    if calls.total == 0 {
        return "no tool calls".to_string();
    }
    let mut parts = vec![format!("{} completed", calls.completed)];
    if calls.failed > 0 {
        parts.push(paint.paint(BOLD_RED, &format!("{} failed", calls.failed)));
    }
    if calls.unfinished > 0 {
        parts.push(paint.paint(BOLD_YELLOW, &format!("{} unfinished", calls.unfinished)));
    }
    if calls.resumed > 0 {
        parts.push(format!("{} resumed", calls.resumed));
    }
    format!(
        "{} ({})",
        plural(calls.total, "tool call", "tool calls"),
        parts.join(", ")
    )
}

/// [`write_timeline_text`] with every option.
pub fn write_timeline_text_with(
    out: &mut dyn Write,
    timeline: &Timeline,
    options: &TextOptions,
) -> io::Result<()> {
    let paint = Paint {
        color: options.color,
    };
    let text_width = options.width.saturating_sub(PREFIX).max(TEXT_MIN);
    write_timeline_head(out, timeline, &paint)?;
    for (index, evaluation) in timeline.evaluations.iter().enumerate() {
        let position = (index + 1, timeline.evaluations.len());
        write_evaluation(out, evaluation, position, options, &paint, text_width)?;
    }
    write_kept_apart(out, timeline, options, &paint, text_width)
}

/// The conversation's id, counts, times and call totals.
fn write_timeline_head(out: &mut dyn Write, timeline: &Timeline, paint: &Paint) -> io::Result<()> {
    writeln!(
        out,
        "{} {}",
        paint.paint(BOLD, "conversation"),
        paint.paint(BOLD, &one_line(&timeline.conversation_id, 200))
    )?;
    let mut facts = vec![
        plural(timeline.entries, "entry", "entries"),
        plural(timeline.evaluations.len(), "evaluation", "evaluations"),
        format!("last LSN {}", timeline.last_lsn),
    ];
    if let (Some(first), Some(last)) = (timeline.first_at, timeline.last_at) {
        facts.push(format!(
            "{} → {}{}",
            datetime(first),
            clock(last),
            timeline
                .duration_ms
                .map(|ms| format!(" ({})", format_duration_ms(ms)))
                .unwrap_or_default()
        ));
    }
    writeln!(out, "  {}", facts.join(" · "))?;
    let mut counts = counts_text(&timeline.calls, paint);
    if timeline.failed_model_calls > 0 {
        counts.push_str(" · ");
        counts.push_str(&paint.paint(
            BOLD_RED,
            &plural(
                timeline.failed_model_calls,
                "failed model call",
                "failed model calls",
            ),
        ));
    }
    writeln!(out, "  {counts}")?;
    Ok(())
}

/// One evaluation (number `position.0` of `position.1`): its head line,
/// then its turns and their messages.
fn write_evaluation(
    out: &mut dyn Write,
    evaluation: &EvaluationView,
    position: (usize, usize),
    options: &TextOptions,
    paint: &Paint,
    text_width: usize,
) -> io::Result<()> {
    writeln!(out)?;
    let mut head = vec![format!(
        "{} {}",
        paint.paint(BOLD, &format!("evaluation {}/{}", position.0, position.1)),
        paint.paint(BOLD, &one_line(&evaluation.evaluation_id, 200))
    )];
    if evaluation.prompt_ns.is_some() || evaluation.prompt_key.is_some() {
        head.push(format!(
            "prompt {}/{}",
            one_line(evaluation.prompt_ns.as_deref().unwrap_or("-"), 80),
            one_line(evaluation.prompt_key.as_deref().unwrap_or("-"), 80)
        ));
    }
    if let Some(first) = evaluation.first_at {
        head.push(format!("started {}", datetime(first)));
    }
    if let Some(ms) = evaluation.duration_ms {
        head.push(format_duration_ms(ms));
    }
    head.push(if evaluation.finished {
        paint.paint(GREEN, "finished")
    } else if evaluation.calls.unfinished > 0 {
        paint.paint(BOLD_YELLOW, "unfinished")
    } else {
        paint.paint(YELLOW, "open")
    });
    if !evaluation.failed_model_calls.is_empty() {
        head.push(paint.paint(
            BOLD_RED,
            &plural(
                evaluation.failed_model_calls.len(),
                "failed model call",
                "failed model calls",
            ),
        ));
    }
    writeln!(out, "{}", head.join(" · "))?;
    // Each failed model call goes after the messages recorded before it.
    let mut failures = evaluation.failed_model_calls.iter().peekable();
    for turn in &evaluation.turns {
        writeln!(
            out,
            "  {}",
            paint.paint(DIM, &format!("turn {}", turn.turn))
        )?;
        for message in &turn.messages {
            while let Some(failure) = failures.next_if(|failure| failure.lsn < message.lsn) {
                write_model_failure(out, failure, options, paint)?;
            }
            write_message(out, message, options, paint, text_width)?;
        }
    }
    for failure in failures {
        write_model_failure(out, failure, options, paint)?;
    }
    Ok(())
}

/// A failed model call, in its evaluation or apart:
///
/// ```text
///   LSN 9  model call failed at turn 2 (HTTP 503, 2 attempts) · openai via fake
///       https://api.example/v1/chat: upstream overloaded
/// ```
fn write_model_failure(
    out: &mut dyn Write,
    view: &ModelFailureView,
    options: &TextOptions,
    paint: &Paint,
) -> io::Result<()> {
    let indent = " ".repeat(FAILURE_INDENT);
    // The error lines use the whole width after their indent.
    let text_width = options.width.saturating_sub(FAILURE_INDENT).max(TEXT_MIN);
    let Some(failure) = &view.failure else {
        return writeln!(
            out,
            "  LSN {}  {} {}",
            view.lsn,
            paint.paint(BOLD_RED, "model call failed, event unreadable:"),
            one_line(view.unreadable.as_deref().unwrap_or(""), text_width)
        );
    };
    let mut from = Vec::new();
    if !failure.provider.is_empty() {
        from.push(one_line(&failure.provider, 40));
    }
    if !failure.client.is_empty() {
        from.push(format!("client {}", one_line(&failure.client, 60)));
    }
    writeln!(
        out,
        "  LSN {}  {} at turn {} ({}){}",
        view.lsn,
        paint.paint(BOLD_RED, "model call failed"),
        failure.turn,
        model_failure_facts(failure.status, failure.attempts),
        if from.is_empty() {
            String::new()
        } else {
            format!(" · {}", from.join(" · "))
        }
    )?;
    if !failure.url.is_empty() {
        writeln!(out, "{indent}{}", one_line(&failure.url, text_width))?;
    }
    let error = first_line(&failure.error.text, text_width);
    let more = if failure.error.truncated || failure.error.text.lines().count() > 1 {
        paint.paint(
            DIM,
            &format!(
                " ({})",
                plural(failure.error.chars, "character", "characters")
            ),
        )
    } else {
        String::new()
    };
    writeln!(out, "{indent}{}{more}", paint.paint(RED, &error))
}

/// What the fold kept apart from the evaluations: anomalies, statuses for
/// unknown calls, history curations, failed model calls no evaluation
/// holds.
fn write_kept_apart(
    out: &mut dyn Write,
    timeline: &Timeline,
    options: &TextOptions,
    paint: &Paint,
    text_width: usize,
) -> io::Result<()> {
    if !timeline.anomalies.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{}",
            paint.paint(BOLD_RED, "anomalies (conflicting statuses kept out)")
        )?;
        for anomaly in &timeline.anomalies {
            writeln!(
                out,
                "  LSN {}  call {}: {}",
                anomaly.lsn,
                one_line(&anomaly.call_id, 80),
                one_line(&anomaly.detail, options.width)
            )?;
        }
    }
    if !timeline.unknown_statuses.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{}",
            paint.paint(BOLD_YELLOW, "statuses for calls no assistant entry has")
        )?;
        for status in &timeline.unknown_statuses {
            let error = status
                .error
                .as_deref()
                .map(|error| format!(": {}", one_line(error, text_width)))
                .unwrap_or_default();
            writeln!(
                out,
                "  LSN {}  {}  evaluation {} call {} {}{}{}",
                status.lsn,
                clock(status.at),
                one_line(&status.evaluation_id, 80),
                one_line(&status.call_id, 80),
                status.status.as_str(),
                if status.resumed { " (resumed)" } else { "" },
                error
            )?;
        }
    }
    if !timeline.curations.is_empty() {
        writeln!(out)?;
        writeln!(out, "{}", paint.paint(BOLD, "history curations"))?;
        for curation in &timeline.curations {
            writeln!(
                out,
                "  LSN {}  {}  {}: {} → {} messages sent",
                curation.lsn,
                datetime(curation.at),
                one_line(&curation.strategy, 80),
                curation.original_count,
                curation.curated_count
            )?;
            let scope = curation.scope_suffix();
            if !scope.is_empty() {
                writeln!(out, "      {}", one_line(&scope, 80))?;
            }
        }
    }
    if !timeline.failed_model_calls_apart.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{}",
            paint.paint(BOLD_RED, "failed model calls outside the evaluations shown")
        )?;
        for failure in &timeline.failed_model_calls_apart {
            if let Some(details) = &failure.failure {
                writeln!(out, "  evaluation {}", one_line(&details.evaluation_id, 80))?;
            }
            write_model_failure(out, failure, options, paint)?;
        }
    }
    Ok(())
}

fn write_message(
    out: &mut dyn Write,
    message: &MessageView,
    options: &TextOptions,
    paint: &Paint,
    text_width: usize,
) -> io::Result<()> {
    let indent = " ".repeat(PREFIX);
    let mut first_line = match (&message.answers_call, message.role) {
        (Some(call_id), Role::Tool) => {
            let tool = message
                .tool_name
                .as_deref()
                .map(|name| format!(" {}", one_line(name, 40)))
                .unwrap_or_default();
            let answer = format!("← {}{tool}", one_line(call_id, 40));
            if message.is_error {
                format!("{} {}", answer, paint.paint(BOLD_RED, "error"))
            } else {
                answer
            }
        }
        _ => String::new(),
    };
    let used = first_line.chars().count() + 2;
    match &message.content {
        Some(content) if !content.text.trim().is_empty() => {
            let body = one_line(&content.text, text_width.saturating_sub(used).max(10));
            let body = if message.is_error {
                paint.paint(RED, &body)
            } else {
                body
            };
            if !first_line.is_empty() {
                first_line.push_str(": ");
            }
            first_line.push_str(&body);
        }
        _ if message.tool_calls.is_empty() && first_line.is_empty() => {
            first_line.push_str(&paint.paint(DIM, "(no content)"));
        }
        _ => {}
    }
    // Reasoning, then the calls' heading, each on its own line; the first
    // of them moves up to the message line when the message has no text.
    let mut details = Vec::new();
    if let Some(reasoning) = &message.reasoning {
        let line = match (&reasoning.text, options.show_reasoning) {
            (Some(text), true) => format!("reasoning: {}", one_line(&text.text, text_width - 11)),
            (Some(text), false) => format!("reasoning: {} chars (hidden)", text.chars),
            (None, _) if reasoning.redacted => "reasoning: redacted".to_string(),
            (None, _) => "reasoning: signature only".to_string(),
        };
        details.push(paint.paint(DIM, &line));
    }
    if let Some(reason) = &message.finish_reason {
        // `tool_calls` is implied by the calls, `stop` by the answer.
        if reason != "stop" && (reason != "tool_calls" || message.tool_calls.is_empty()) {
            details.push(paint.paint(YELLOW, &format!("finish reason: {}", one_line(reason, 40))));
        }
    }
    match message.tool_calls.len() {
        0 => {}
        1 => details.push(paint.paint(DIM, "1 tool call:")),
        count => details.push(paint.paint(DIM, &format!("{count} tool calls in parallel:"))),
    }
    if first_line.is_empty() && !details.is_empty() {
        first_line = details.remove(0);
    }
    let seq = format!("#{}", message.sequence);
    let line = format!(
        "  {}  {}  {}  {}",
        paint.paint(DIM, &format!("{:<12}", clock(message.created_at))),
        paint.paint(DIM, &format!("{seq:>3}")),
        paint.role(message.role),
        first_line
    );
    writeln!(out, "{}", line.trim_end())?;
    for detail in details {
        writeln!(out, "{indent}{detail}")?;
    }
    for call in &message.tool_calls {
        write_call(out, call, paint, &indent, text_width)?;
    }
    Ok(())
}

fn write_call(
    out: &mut dyn Write,
    call: &CallView,
    paint: &Paint,
    indent: &str,
    text_width: usize,
) -> io::Result<()> {
    let (icon, label, style) = match (call.status, call.unfinished) {
        (ToolStatus::Completed, _) => ("✓", "completed".to_string(), GREEN),
        (ToolStatus::Failed, _) => ("✗", "FAILED".to_string(), BOLD_RED),
        (_, true) => ("…", "UNFINISHED".to_string(), BOLD_YELLOW),
        (status, false) => ("…", status.as_str().to_string(), YELLOW),
    };
    let duration = call
        .duration_ms
        .map(format_duration_ms)
        .unwrap_or_else(|| "—".to_string());
    let head = format!(
        "{icon} {label:<10} {duration:>7}  {} {}",
        one_line(&call.name, 40),
        one_line(&call.call_id, 40)
    );
    let resumed_width = if call.resumed == Some(true) { 11 } else { 0 };
    let room = text_width.saturating_sub(head.chars().count() + 2 + resumed_width);
    let arguments = if room >= 8 {
        format!("  {}", one_line(&call.arguments.text, room))
    } else {
        String::new()
    };
    let resumed = if call.resumed == Some(true) {
        paint.paint(CYAN, "  ↻ resumed")
    } else {
        String::new()
    };
    writeln!(
        out,
        "{indent}{}{}{resumed}",
        paint.paint(style, &head),
        paint.paint(DIM, &arguments)
    )?;
    let detail_indent = format!("{indent}    ");
    if let Some(error) = &call.error {
        writeln!(
            out,
            "{detail_indent}{}",
            paint.paint(
                RED,
                &format!("error: {}", one_line(&error.text, text_width - 11))
            )
        )?;
    }
    if call.unfinished {
        let since = match call.started_at {
            Some(at) => format!("{} since {}", call.status.as_str(), clock(at)),
            None => format!("{}, never started", call.status.as_str()),
        };
        writeln!(
            out,
            "{detail_indent}{}",
            paint.paint(
                YELLOW,
                &one_line(
                    &format!("{since}; no result, a resume re-runs it"),
                    text_width.saturating_sub(4),
                ),
            )
        )?;
    }
    for anomaly in &call.anomalies {
        writeln!(
            out,
            "{detail_indent}{}",
            paint.paint(
                BOLD_RED,
                &one_line(&format!("anomaly: {anomaly}"), text_width.saturating_sub(4))
            )
        )?;
    }
    Ok(())
}

/// The store, its LSN range and snapshot, and the totals.
fn write_overview_head(
    out: &mut dyn Write,
    overview: &StoreOverview,
    paint: &Paint,
) -> io::Result<()> {
    writeln!(
        out,
        "{} {}",
        paint.paint(BOLD, "store"),
        defuse_controls(&overview.store)
    )?;
    let range = if overview.next_lsn > overview.first_lsn {
        format!("LSN {}..={}", overview.first_lsn, overview.next_lsn - 1)
    } else {
        "no events".to_string()
    };
    let snapshot = overview
        .snapshot_lsn
        .map(|lsn| format!(" · snapshot at LSN {lsn}"))
        .unwrap_or_default();
    writeln!(
        out,
        "  {range}{snapshot} · {} · {}{}",
        plural(
            overview.conversations.len(),
            "conversation",
            "conversations"
        ),
        counts_text(&overview.calls, paint),
        if overview.failed_model_calls > 0 {
            format!(
                " · {}",
                paint.paint(
                    BOLD_RED,
                    &plural(
                        overview.failed_model_calls,
                        "failed model call",
                        "failed model calls"
                    )
                )
            )
        } else {
            String::new()
        }
    )?;
    Ok(())
}

/// Writes the overview of a store: one line per conversation with its
/// entries, evaluations, calls, failed and unfinished calls, and last
/// activity. ANSI colours when `color`.
pub fn write_overview_text(
    out: &mut dyn Write,
    overview: &StoreOverview,
    color: bool,
) -> io::Result<()> {
    let paint = Paint { color };
    write_overview_head(out, overview, &paint)?;
    if !overview.erased.is_empty() {
        let ids: Vec<String> = overview.erased.iter().map(|id| one_line(id, 40)).collect();
        writeln!(
            out,
            "  {} {}",
            paint.paint(
                BOLD_RED,
                &format!(
                    "{} (keys destroyed, content unreadable):",
                    plural(ids.len(), "erased conversation", "erased conversations")
                )
            ),
            ids.join(", ")
        )?;
    }
    if overview.conversations.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    let id_width = conversation_column_width(
        overview
            .conversations
            .iter()
            .map(|row| row.conversation_id.as_str()),
    );
    writeln!(
        out,
        "{}",
        paint.paint(
            DIM,
            &format!(
                "{:<id_width$}  {:>7}  {:>5}  {:>5}  {:>6}  {:>10}  {:<24}  {:>8}",
                "CONVERSATION",
                "ENTRIES",
                "EVALS",
                "CALLS",
                "FAILED",
                "UNFINISHED",
                "LAST ACTIVITY",
                "LAST LSN"
            )
        )
    )?;
    for row in &overview.conversations {
        let failed = format!("{:>6}", row.calls.failed);
        let unfinished = format!("{:>10}", row.calls.unfinished);
        let mut notes = Vec::new();
        if row.anomalies > 0 {
            notes.push(plural(row.anomalies, "anomaly", "anomalies"));
        }
        if row.unknown_statuses > 0 {
            notes.push(plural(
                row.unknown_statuses,
                "unknown-call status",
                "unknown-call statuses",
            ));
        }
        if row.failed_model_calls > 0 {
            notes.push(plural(
                row.failed_model_calls,
                "failed model call",
                "failed model calls",
            ));
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!("  {}", paint.paint(YELLOW, &notes.join(", ")))
        };
        writeln!(
            out,
            "{:<id_width$}  {:>7}  {:>5}  {:>5}  {}  {}  {:<24}  {:>8}{notes}",
            one_line(&row.conversation_id, 40),
            row.entries,
            row.evaluations,
            row.calls.total,
            if row.calls.failed > 0 {
                paint.paint(BOLD_RED, &failed)
            } else {
                failed
            },
            if row.calls.unfinished > 0 {
                paint.paint(BOLD_YELLOW, &unfinished)
            } else {
                unfinished
            },
            row.last_at.map(datetime).unwrap_or_else(|| "-".to_string()),
            row.last_lsn,
        )?;
    }
    Ok(())
}
