//! Small formatting helpers shared by the text, HTML and tail renderings.

use serde::Serializer;

use crate::model::Timestamp;

/// A duration in milliseconds, short and readable: `120ms`, `2.04s`,
/// `12.5s`, `3m07s`, `1h02m`. Negative durations (clock skew between
/// hosts) keep their sign.
pub fn format_duration_ms(ms: i64) -> String {
    if ms < 0 {
        return format!("-{}", format_duration_ms(ms.saturating_neg()));
    }
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=9_999 => format!("{:.2}s", ms as f64 / 1000.0),
        10_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// `2026-01-01 12:00:00.123Z` (UTC, milliseconds).
pub(crate) fn datetime(time: Timestamp) -> String {
    let full = time.to_string();
    match split_rfc3339(&full) {
        Some((date, clock)) => format!("{date} {clock}Z"),
        None => full,
    }
}

/// `12:00:00.123` (UTC, milliseconds).
pub(crate) fn clock(time: Timestamp) -> String {
    let full = time.to_string();
    match split_rfc3339(&full) {
        Some((_, clock)) => clock.to_string(),
        None => full,
    }
}

/// The date and the clock to milliseconds of `2026-01-01T12:00:00.123456Z`.
fn split_rfc3339(full: &str) -> Option<(&str, &str)> {
    let (date, rest) = full.split_once('T')?;
    let clock = rest.strip_suffix('Z')?;
    let clock = clock.get(..12).unwrap_or(clock);
    Some((date, clock))
}

/// Serializes an optional time as its RFC 3339 text (any time, even one
/// before 1970, which the model's own serializer refuses).
pub(crate) fn serialize_time<S: Serializer>(
    time: &Option<Timestamp>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match time {
        Some(time) => serializer.collect_str(time),
        None => serializer.serialize_none(),
    }
}

/// [`serialize_time`] for a time that is always there.
pub(crate) fn serialize_time_always<S: Serializer>(
    time: &Timestamp,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(time)
}

/// Replaces characters a terminal would act on (C0 and C1 controls, DEL)
/// with visible stand-ins, so recorded content cannot move the cursor,
/// change colours or retitle the window. Newlines and tabs are kept.
pub(crate) fn defuse_controls(text: &str) -> String {
    text.chars()
        .map(|character| match character {
            '\n' | '\t' => character,
            '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + character as u32).unwrap_or('\u{fffd}'),
            '\u{7f}' => '\u{2421}',
            '\u{80}'..='\u{9f}' => '\u{fffd}',
            _ => character,
        })
        .collect()
}

/// `text` on one line (whitespace runs become one space, controls are
/// defused), cut to `max_chars` characters with an ellipsis.
pub(crate) fn one_line(text: &str, max_chars: usize) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let defused = defuse_controls(&collapsed);
    cut(&defused, max_chars)
}

/// The width of the conversation-id column of a table of conversations:
/// the widest id as shown (one line, at most 40 characters), at least the
/// heading's.
pub(crate) fn conversation_column_width<'a>(ids: impl Iterator<Item = &'a str>) -> usize {
    ids.map(|id| one_line(id, 40).chars().count())
        .max()
        .unwrap_or(0)
        .max("CONVERSATION".len())
}

/// `text` cut to `max_chars` characters, the last one an ellipsis when cut.
pub(crate) fn cut(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    if max_chars == 0 {
        return String::new();
    }
    let mut kept: String = text.chars().take(max_chars - 1).collect();
    kept.push('…');
    kept
}

/// What a failed model call's head says: `HTTP 503, 2 attempts`, or `no
/// HTTP status, 1 attempt` (a timeout or a failed connection).
pub(crate) fn model_failure_facts(status: Option<u16>, attempts: u32) -> String {
    let status = status
        .map(|status| format!("HTTP {status}"))
        .unwrap_or_else(|| "no HTTP status".to_string());
    format!(
        "{status}, {}",
        plural(attempts as usize, "attempt", "attempts")
    )
}

/// The first non-blank line of an error text, on one line and cut to
/// `max_chars` characters.
pub(crate) fn first_line(text: &str, max_chars: usize) -> String {
    let line = text
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("");
    one_line(line, max_chars)
}

/// `1 call`, `3 calls`.
pub(crate) fn plural(count: usize, one: &str, many: &str) -> String {
    if count == 1 {
        format!("{count} {one}")
    } else {
        format!("{count} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration_ms(0), "0ms");
        assert_eq!(format_duration_ms(120), "120ms");
        assert_eq!(format_duration_ms(2_000), "2.00s");
        assert_eq!(format_duration_ms(12_540), "12.5s");
        assert_eq!(format_duration_ms(187_000), "3m07s");
        assert_eq!(format_duration_ms(3_720_000), "1h02m");
        assert_eq!(format_duration_ms(-5), "-5ms");
    }

    #[test]
    fn times_and_lines() {
        let time = Timestamp::parse_rfc3339("2026-01-01T12:00:00.123456Z").unwrap();
        assert_eq!(datetime(time), "2026-01-01 12:00:00.123Z");
        assert_eq!(clock(time), "12:00:00.123");
        assert_eq!(one_line("a\n  b\tc", 10), "a b c");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(defuse_controls("x\u{1b}[31my"), "x\u{241b}[31my");
        assert_eq!(cut("abc", 0), "");
    }
}
