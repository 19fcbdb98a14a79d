//! Compaction when over a token limit: prune old tool outputs
//! first, then replace the oldest part by a summary the host supplies.
//! Compose them in that order: `Composed::new().then(ToolPruning::new(n))
//! .then(SummaryPlaceholder::new(n, summary))`.

use super::coherence::cut_at;
use super::tokens::{newest_fitting_cut, ApproximateTokens, TokenEstimator};
use super::{CurationContext, HistoryManager};
use crate::error::{Error, Result};
use crate::model::{ConversationEntry, Role, Timestamp};

/// What [`ToolPruning`] puts in place of a pruned tool output by default.
pub const DEFAULT_PRUNED_PLACEHOLDER: &str = "[tool output pruned to save context]";

/// When the history costs more than `token_limit` tokens, replaces the
/// outputs of the oldest tool results by a short placeholder, oldest first,
/// until it fits or only the newest `keep_recent` results are left whole.
///
/// The result entries stay (with their call ids), so pairing is untouched;
/// only their content shrinks. A result is replaced only when that makes it
/// cheaper. Under the limit, the history is returned unchanged; if pruning
/// is not enough, the output is still over the limit (compose with
/// [`SummaryPlaceholder`] or [`super::TokenBudget`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPruning<E = ApproximateTokens> {
    token_limit: u64,
    keep_recent: usize,
    placeholder: String,
    estimator: E,
}

impl ToolPruning<ApproximateTokens> {
    /// Prunes above `token_limit` tokens (default estimator), keeping the
    /// newest 2 results whole, with [`DEFAULT_PRUNED_PLACEHOLDER`].
    pub fn new(token_limit: u64) -> ToolPruning<ApproximateTokens> {
        ToolPruning::with_estimator(token_limit, ApproximateTokens::default())
    }
}

impl<E: TokenEstimator> ToolPruning<E> {
    /// Prunes above `token_limit` tokens counted by `estimator`.
    pub fn with_estimator(token_limit: u64, estimator: E) -> ToolPruning<E> {
        ToolPruning {
            token_limit,
            keep_recent: 2,
            placeholder: DEFAULT_PRUNED_PLACEHOLDER.to_string(),
            estimator,
        }
    }

    /// Leaves the newest `keep_recent` tool results whole.
    pub fn keep_recent(mut self, keep_recent: usize) -> ToolPruning<E> {
        self.keep_recent = keep_recent;
        self
    }

    /// Puts `placeholder` in place of a pruned output.
    pub fn placeholder(mut self, placeholder: impl Into<String>) -> ToolPruning<E> {
        self.placeholder = placeholder.into();
        self
    }
}

impl<E: TokenEstimator> HistoryManager for ToolPruning<E> {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        _context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        let mut total = self.estimator.estimate_all(entries);
        let mut curated = entries.to_vec();
        if total <= self.token_limit {
            return curated;
        }
        let results: Vec<usize> = (0..curated.len())
            .filter(|&index| curated[index].role == Role::Tool)
            .collect();
        let prunable = results.len().saturating_sub(self.keep_recent);
        for &index in &results[..prunable] {
            if total <= self.token_limit {
                break;
            }
            let before = self.estimator.estimate(&curated[index]);
            let pruned = ConversationEntry {
                content: Some(self.placeholder.clone()),
                ..curated[index].clone()
            };
            let after = self.estimator.estimate(&pruned);
            if after < before {
                curated[index] = pruned;
                total -= before - after;
            }
        }
        curated
    }

    fn strategy(&self) -> String {
        format!(
            "tool_pruning({}, keep_recent={})",
            self.token_limit, self.keep_recent
        )
    }
}

/// When the history costs more than `token_limit` tokens, replaces its
/// oldest part by a summary entry the host supplies.
///
/// The replaced part is the shortest prefix of non-system entries, ending
/// at a coherent cut, after which the system entries, the summary and the
/// rest fit the limit (all of them, if nothing shorter fits). System
/// entries in the replaced part are kept, before the summary. Under the
/// limit, or when there is nothing but system entries to replace, the
/// history is returned unchanged.
///
/// The summary is fixed when the manager is built (so curation stays
/// deterministic); use [`SummaryPlaceholder::replaced`] to learn which
/// entries it would stand for, summarize those, and build the manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryPlaceholder<E = ApproximateTokens> {
    token_limit: u64,
    summary: ConversationEntry,
    estimator: E,
}

impl SummaryPlaceholder<ApproximateTokens> {
    /// A summary placeholder with `text` as a system entry (evaluation
    /// `convlog-summary`, sequence 0, metadata `convlog.summary=true`),
    /// default estimator. A system entry is never dropped by a later
    /// manager, and providers accept it anywhere a system prompt may go.
    pub fn new(token_limit: u64, text: impl Into<String>) -> SummaryPlaceholder<ApproximateTokens> {
        let mut summary =
            ConversationEntry::new("convlog-summary", 0, Role::System, Some(text.into()));
        summary.created_at = Timestamp(0);
        summary
            .metadata
            .insert("convlog.summary".to_string(), "true".to_string());
        SummaryPlaceholder {
            token_limit,
            summary,
            estimator: ApproximateTokens::default(),
        }
    }
}

impl<E: TokenEstimator> SummaryPlaceholder<E> {
    /// A summary placeholder with the host's own `summary` entry. It must
    /// not be a tool result nor carry tool calls (it would break pairing).
    pub fn with_entry(
        token_limit: u64,
        summary: ConversationEntry,
        estimator: E,
    ) -> Result<SummaryPlaceholder<E>> {
        if summary.role == Role::Tool || !summary.tool_calls.is_empty() {
            return Err(Error::InvalidOption {
                option: "SummaryPlaceholder::with_entry summary",
                reason: "a summary entry must not be a tool result nor carry tool calls"
                    .to_string(),
            });
        }
        Ok(SummaryPlaceholder {
            token_limit,
            summary,
            estimator,
        })
    }

    /// The summary entry.
    pub fn summary(&self) -> &ConversationEntry {
        &self.summary
    }

    /// Where the replaced part ends (0 when nothing is replaced).
    fn cut(&self, entries: &[ConversationEntry]) -> usize {
        if self.estimator.estimate_all(entries) <= self.token_limit {
            return 0;
        }
        let reserved = self.estimator.estimate(&self.summary);
        // When nothing fits this is `entries.len()`: everything but the
        // system entries is replaced.
        let cut = newest_fitting_cut(entries, &self.estimator, reserved, self.token_limit);
        if entries[..cut]
            .iter()
            .all(|entry| entry.role == Role::System)
        {
            0
        } else {
            cut
        }
    }

    /// The non-system entries the summary would replace in `entries`
    /// (empty when curation would change nothing).
    pub fn replaced<'a>(&self, entries: &'a [ConversationEntry]) -> Vec<&'a ConversationEntry> {
        entries[..self.cut(entries)]
            .iter()
            .filter(|entry| entry.role != Role::System)
            .collect()
    }
}

impl<E: TokenEstimator> HistoryManager for SummaryPlaceholder<E> {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        _context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        let cut = self.cut(entries);
        if cut == 0 {
            return entries.to_vec();
        }
        let kept = cut_at(entries, cut);
        let systems_before = entries[..cut]
            .iter()
            .filter(|entry| entry.role == Role::System)
            .count();
        let mut curated = Vec::with_capacity(kept.len() + 1);
        curated.extend_from_slice(&kept[..systems_before]);
        curated.push(self.summary.clone());
        curated.extend_from_slice(&kept[systems_before..]);
        curated
    }

    fn strategy(&self) -> String {
        format!("summary_placeholder({})", self.token_limit)
    }
}
