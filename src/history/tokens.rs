//! Token estimation and the token budget manager.

use super::coherence::{coherent_cuts, cut_at};
use super::{CurationContext, HistoryManager};
use crate::model::{ConversationEntry, Role};

/// Estimates how many tokens an entry costs a provider.
///
/// Implement it with the provider's tokenizer when exact counts matter; it
/// must be deterministic.
pub trait TokenEstimator: Send + Sync {
    /// Tokens `entry` costs, overhead included.
    fn estimate(&self, entry: &ConversationEntry) -> u64;

    /// Tokens `entries` cost together.
    fn estimate_all(&self, entries: &[ConversationEntry]) -> u64 {
        entries.iter().map(|entry| self.estimate(entry)).sum()
    }
}

impl<E: TokenEstimator + ?Sized> TokenEstimator for &E {
    fn estimate(&self, entry: &ConversationEntry) -> u64 {
        (**self).estimate(entry)
    }
}

/// The default estimate: one token per `bytes_per_token` bytes of text
/// (rounded up), plus `message_overhead` tokens per entry and
/// `call_overhead` per tool call.
///
/// The text is the content, the reasoning text and signature, and each
/// call's id, name and arguments, and the tool name of a result. Four bytes
/// per token is the usual rule of thumb for English with GPT- and
/// Claude-style tokenizers; the overheads stand for role markers and the
/// structure a provider wraps around each message and call.
///
/// A builder, so a new setting never breaks a host: start from `new()` (the
/// defaults) and chain a setter per setting, each named as the field it
/// sets; the fields stay public for reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApproximateTokens {
    /// Bytes of UTF-8 text per token (at least 1).
    pub bytes_per_token: u64,
    /// Tokens added for every entry.
    pub message_overhead: u64,
    /// Tokens added for every tool call.
    pub call_overhead: u64,
}

impl Default for ApproximateTokens {
    fn default() -> ApproximateTokens {
        ApproximateTokens {
            bytes_per_token: 4,
            message_overhead: 4,
            call_overhead: 8,
        }
    }
}

impl ApproximateTokens {
    /// 4 bytes per token, 4 tokens per entry, 8 per tool call.
    pub fn new() -> ApproximateTokens {
        ApproximateTokens::default()
    }

    /// Sets the bytes of UTF-8 text per token (0 counts as 1).
    pub fn bytes_per_token(mut self, bytes_per_token: u64) -> ApproximateTokens {
        self.bytes_per_token = bytes_per_token;
        self
    }

    /// Sets the tokens added for every entry.
    pub fn message_overhead(mut self, message_overhead: u64) -> ApproximateTokens {
        self.message_overhead = message_overhead;
        self
    }

    /// Sets the tokens added for every tool call.
    pub fn call_overhead(mut self, call_overhead: u64) -> ApproximateTokens {
        self.call_overhead = call_overhead;
        self
    }
}

impl TokenEstimator for ApproximateTokens {
    fn estimate(&self, entry: &ConversationEntry) -> u64 {
        let text_bytes = |text: Option<&str>| text.map_or(0, str::len) as u64;
        let mut bytes =
            text_bytes(entry.content.as_deref()) + text_bytes(entry.tool_name.as_deref());
        if let Some(reasoning) = &entry.reasoning {
            bytes +=
                text_bytes(reasoning.text.as_deref()) + text_bytes(reasoning.signature.as_deref());
        }
        for call in &entry.tool_calls {
            bytes += (call.call_id.len() + call.name.len() + call.arguments.len()) as u64;
        }
        bytes.div_ceil(self.bytes_per_token.max(1))
            + self.message_overhead
            + self.call_overhead * entry.tool_calls.len() as u64
    }
}

/// Keeps the newest entries that fit a token budget, with every system
/// entry, which always counts against the budget.
///
/// The kept entries are the longest suffix of the history (plus the system
/// entries before it) that fits and starts at a coherent cut: a tool batch
/// (an assistant entry and its results) is kept whole or not at all. The
/// suffix is contiguous: an older, smaller entry is never kept once a newer
/// one was dropped. When the system entries alone exceed the budget, they
/// are all that is kept (over budget: they are never dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBudget<E = ApproximateTokens> {
    budget: u64,
    estimator: E,
}

impl TokenBudget<ApproximateTokens> {
    /// A budget of `budget` tokens with the default estimator.
    pub fn new(budget: u64) -> TokenBudget<ApproximateTokens> {
        TokenBudget {
            budget,
            estimator: ApproximateTokens::default(),
        }
    }
}

impl<E: TokenEstimator> TokenBudget<E> {
    /// A budget of `budget` tokens counted by `estimator`.
    pub fn with_estimator(budget: u64, estimator: E) -> TokenBudget<E> {
        TokenBudget { budget, estimator }
    }

    /// The budget, in tokens.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The estimator.
    pub fn estimator(&self) -> &E {
        &self.estimator
    }
}

/// The first coherent cut whose kept entries cost at most `limit` tokens
/// beyond `reserved` (`entries.len()` when none does): every system entry
/// counts wherever it stands.
pub(crate) fn newest_fitting_cut(
    entries: &[ConversationEntry],
    estimator: &dyn TokenEstimator,
    reserved: u64,
    limit: u64,
) -> usize {
    let costs: Vec<u64> = entries
        .iter()
        .map(|entry| estimator.estimate(entry))
        .collect();
    let system: u64 = entries
        .iter()
        .zip(&costs)
        .filter(|(entry, _)| entry.role == Role::System)
        .map(|(_, cost)| cost)
        .sum();
    // suffix[p]: tokens of the non-system entries from p on.
    let mut suffix = vec![0u64; entries.len() + 1];
    for position in (0..entries.len()).rev() {
        let cost = if entries[position].role == Role::System {
            0
        } else {
            costs[position]
        };
        suffix[position] = suffix[position + 1].saturating_add(cost);
    }
    let cuts = coherent_cuts(entries);
    (0..=entries.len())
        .find(|&cut| {
            cuts[cut] && system.saturating_add(reserved).saturating_add(suffix[cut]) <= limit
        })
        .unwrap_or(entries.len())
}

impl<E: TokenEstimator> HistoryManager for TokenBudget<E> {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        _context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        let cut = newest_fitting_cut(entries, &self.estimator, 0, self.budget);
        cut_at(entries, cut)
    }

    fn strategy(&self) -> String {
        format!("token_budget({})", self.budget)
    }
}
