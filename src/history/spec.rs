//! A one-line text form of a composition, for command lines and config
//! files: `window=50,truncate=1000,budget=100000`.

use super::{Composed, SlidingWindow, TokenBudget, ToolPruning, ToolResultTruncator};

/// Parses `key=value` pairs separated by commas into a [`Composed`] that
/// applies them in the order written:
///
/// | key | manager |
/// |---|---|
/// | `window=N` | [`SlidingWindow::new`]`(N)` |
/// | `truncate=N` | [`ToolResultTruncator::new`]`(N)` |
/// | `budget=N` | [`TokenBudget::new`]`(N)` |
/// | `prune=N` | [`ToolPruning::new`]`(N)` |
///
/// Spaces around items are ignored; an empty text is a passthrough.
///
/// ```
/// use convlog::history::{parse_curation, HistoryManager};
///
/// let manager = parse_curation("window=50, truncate=1000").unwrap();
/// assert_eq!(manager.strategy(), "composed(sliding_window(50), tool_result_truncator(1000))");
/// assert!(matches!(
///     parse_curation("window=lots"),
///     Err(convlog::Error::InvalidCuration { item, .. }) if item == "window=lots"
/// ));
/// ```
pub fn parse_curation(text: &str) -> crate::Result<Composed> {
    let mut composed = Composed::new();
    for item in text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        let invalid = |reason: String| crate::Error::InvalidCuration {
            item: item.to_string(),
            reason,
        };
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| invalid(format!("curation item {item:?} is not key=value")))?;
        let (key, value) = (key.trim(), value.trim());
        let number: u64 = value.parse().map_err(|_| {
            invalid(format!(
                "curation value of {key:?} is not a non-negative integer: {value:?}"
            ))
        })?;
        let count = usize::try_from(number)
            .map_err(|_| invalid(format!("curation value of {key:?} is too large: {value:?}")))?;
        composed = match key {
            "window" => composed.then(SlidingWindow::new(count)),
            "truncate" => composed.then(ToolResultTruncator::new(count)),
            "budget" => composed.then(TokenBudget::new(number)),
            "prune" => composed.then(ToolPruning::new(number)),
            _ => {
                return Err(invalid(format!(
                    "unknown curation key {key:?} (expected window, truncate, budget or prune)"
                )))
            }
        };
    }
    Ok(composed)
}
