//! The basic managers: passthrough, sliding window, tool result truncation,
//! composition.

use super::coherence::{coherent_cuts, cut_at, first_coherent_cut};
use super::{CurationContext, HistoryManager};
use crate::model::{ConversationEntry, Role};

/// What [`ToolResultTruncator`] appends to a shortened result by default.
pub const DEFAULT_TRUNCATION_SUFFIX: &str = "\n... [truncated]";

/// Returns the entries unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Passthrough;

impl HistoryManager for Passthrough {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        _context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        entries.to_vec()
    }

    fn strategy(&self) -> String {
        "passthrough".to_string()
    }
}

/// Keeps every system entry and at most the last `window` other entries,
/// cut at a coherent boundary: when the window would start inside a tool
/// batch (after an assistant entry, before some of its results), it starts
/// after the batch instead, so the window may hold fewer than `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    window: usize,
}

impl SlidingWindow {
    /// A window of `window` non-system entries.
    pub fn new(window: usize) -> SlidingWindow {
        SlidingWindow { window }
    }

    /// The window size.
    pub fn window(&self) -> usize {
        self.window
    }
}

impl HistoryManager for SlidingWindow {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        _context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        // Count non-system entries from the end to find where the window starts.
        let mut kept = 0;
        let mut start = entries.len();
        while start > 0 {
            let is_system = entries[start - 1].role == Role::System;
            if !is_system && kept == self.window {
                break;
            }
            kept += usize::from(!is_system);
            start -= 1;
        }
        if start == 0 {
            return entries.to_vec();
        }
        let cut = first_coherent_cut(&coherent_cuts(entries), start);
        cut_at(entries, cut)
    }

    fn strategy(&self) -> String {
        format!("sliding_window({})", self.window)
    }
}

/// Shortens tool results longer than `max_length` characters (Unicode
/// scalar values) to exactly `max_length`: the first
/// `max_length - suffix length` characters, then the suffix. A suffix
/// longer than `max_length` is itself cut to `max_length`. Other entries,
/// and the structure, are unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResultTruncator {
    max_length: usize,
    suffix: String,
}

impl ToolResultTruncator {
    /// Truncates to `max_length` characters with [`DEFAULT_TRUNCATION_SUFFIX`].
    pub fn new(max_length: usize) -> ToolResultTruncator {
        ToolResultTruncator {
            max_length,
            suffix: DEFAULT_TRUNCATION_SUFFIX.to_string(),
        }
    }

    /// Uses `suffix` instead of the default.
    pub fn with_suffix(mut self, suffix: impl Into<String>) -> ToolResultTruncator {
        self.suffix = suffix.into();
        self
    }

    /// The longest result kept whole, in characters.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// What a shortened result ends with.
    pub fn suffix(&self) -> &str {
        &self.suffix
    }
}

/// `text` cut to `max_length` characters ending with `suffix`, or `None`
/// when it already fits.
pub(crate) fn truncate_text(text: &str, max_length: usize, suffix: &str) -> Option<String> {
    if text.chars().count() <= max_length {
        return None;
    }
    let suffix_length = suffix.chars().count();
    if suffix_length >= max_length {
        return Some(suffix.chars().take(max_length).collect());
    }
    let mut shortened: String = text.chars().take(max_length - suffix_length).collect();
    shortened.push_str(suffix);
    Some(shortened)
}

impl HistoryManager for ToolResultTruncator {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        _context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        entries
            .iter()
            .map(|entry| {
                let shortened = entry
                    .content
                    .as_deref()
                    .filter(|_| entry.role == Role::Tool)
                    .and_then(|content| truncate_text(content, self.max_length, &self.suffix));
                match shortened {
                    Some(content) => ConversationEntry {
                        content: Some(content),
                        ..entry.clone()
                    },
                    None => entry.clone(),
                }
            })
            .collect()
    }

    fn strategy(&self) -> String {
        format!("tool_result_truncator({})", self.max_length)
    }
}

/// Applies managers in order, each to the previous one's output. With no
/// managers it is a passthrough.
#[derive(Default, Clone)]
pub struct Composed {
    managers: Vec<std::sync::Arc<dyn HistoryManager>>,
}

impl std::fmt::Debug for Composed {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Composed")
            .field("strategy", &self.strategy())
            .finish()
    }
}

impl Composed {
    /// An empty composition.
    pub fn new() -> Composed {
        Composed::default()
    }

    /// Appends `manager`: it runs after the ones already added.
    pub fn then(mut self, manager: impl HistoryManager + 'static) -> Composed {
        self.managers.push(std::sync::Arc::new(manager));
        self
    }

    /// Appends an already boxed manager.
    pub fn then_boxed(mut self, manager: Box<dyn HistoryManager>) -> Composed {
        self.managers.push(std::sync::Arc::from(manager));
        self
    }

    /// How many managers it chains.
    pub fn len(&self) -> usize {
        self.managers.len()
    }

    /// Whether it chains none.
    pub fn is_empty(&self) -> bool {
        self.managers.is_empty()
    }
}

impl HistoryManager for Composed {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        let mut managers = self.managers.iter();
        let Some(first) = managers.next() else {
            return entries.to_vec();
        };
        let mut curated = first.curate(entries, context);
        for manager in managers {
            curated = manager.curate(&curated, context);
        }
        curated
    }

    fn strategy(&self) -> String {
        let parts: Vec<String> = self
            .managers
            .iter()
            .map(|manager| manager.strategy())
            .collect();
        format!("composed({})", parts.join(", "))
    }
}
