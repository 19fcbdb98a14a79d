//! When to retry a model call and how long to wait: exponential backoff
//! from [`ClientConfig::initial_backoff`], a `Retry-After` header (seconds
//! or an HTTP-date) taking precedence, both capped by
//! [`ClientConfig::max_backoff`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ClientConfig;

/// Whether an HTTP status is worth another attempt: 429 and every 5xx.
pub(crate) fn retryable_status(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// The wait before retry number `retry` (1 for the first retry):
/// `retry_after` when the server sent one, else the initial backoff doubled
/// per earlier retry; capped by the config's `max_backoff` either way.
pub(crate) fn backoff(
    config: &ClientConfig,
    retry: u32,
    retry_after: Option<Duration>,
) -> Duration {
    let wait = retry_after.unwrap_or_else(|| {
        let doublings = retry.saturating_sub(1).min(31);
        config
            .initial_backoff
            .checked_mul(1u32 << doublings)
            .unwrap_or(config.max_backoff)
    });
    wait.min(config.max_backoff)
}

/// Reads a `Retry-After` value: delay seconds, or an HTTP-date (IMF-fixdate,
/// RFC 850 or asctime form) measured from `now` (a date in the past means
/// no wait). `None` when it is neither.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = parse_http_date(value)?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// An HTTP-date in any of its three forms: `Sun, 06 Nov 1994 08:49:37 GMT`,
/// `Sunday, 06-Nov-94 08:49:37 GMT`, `Sun Nov  6 08:49:37 1994`. In each,
/// the numeric tokens come day first, then year.
fn parse_http_date(text: &str) -> Option<SystemTime> {
    let tokens: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',' || c == '-')
        .filter(|token| !token.is_empty())
        .collect();
    let mut month = None;
    let mut time = None;
    let mut numbers = Vec::new();
    for token in &tokens {
        let lower = token.to_ascii_lowercase();
        if let Some(index) = MONTHS.iter().position(|name| *name == lower) {
            month = Some(index as u32 + 1);
        } else if token.contains(':') {
            time = Some(*token);
        } else if token.bytes().all(|b| b.is_ascii_digit()) {
            numbers.push(token.parse::<i64>().ok()?);
        }
    }
    let (month, time) = (month?, time?);
    let [day, year] = numbers[..] else {
        return None;
    };
    let year = match year {
        0..=69 => year + 2000,
        70..=99 => year + 1900,
        _ => year,
    };
    let mut clock = time.split(':').map(|part| part.parse::<i64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    if clock.next().is_some() || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day as u32);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    let seconds = u64::try_from(seconds).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ApiKind;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06 08:49:37 UTC
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        for form in [
            "Sun, 06 Nov 1994 08:50:07 GMT",
            "Sunday, 06-Nov-94 08:50:07 GMT",
            "Sun Nov  6 08:50:07 1994",
        ] {
            assert_eq!(
                parse_retry_after(form, now),
                Some(Duration::from_secs(30)),
                "{form}"
            );
        }
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 25:00:00 GMT", now),
            None
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let config = ClientConfig::new(ApiKind::Ollama, "m")
            .initial_backoff(Duration::from_millis(100))
            .max_backoff(Duration::from_millis(350));
        assert_eq!(backoff(&config, 1, None), Duration::from_millis(100));
        assert_eq!(backoff(&config, 2, None), Duration::from_millis(200));
        assert_eq!(backoff(&config, 3, None), Duration::from_millis(350));
        assert_eq!(backoff(&config, 40, None), Duration::from_millis(350));
        assert_eq!(
            backoff(&config, 1, Some(Duration::from_secs(9))),
            Duration::from_millis(350)
        );
        assert_eq!(backoff(&config, 3, Some(Duration::ZERO)), Duration::ZERO);
        assert!(retryable_status(429) && retryable_status(500) && retryable_status(503));
        assert!(!retryable_status(400) && !retryable_status(404) && !retryable_status(200));
    }
}
