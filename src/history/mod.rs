//! History curation: what the provider is shown, while the store keeps
//! everything.
//!
//! A [`HistoryManager`] takes the full, ordered entries of a conversation
//! and returns the curated list to send to a provider. The store is never
//! touched: curation only changes the provider's view. A host that wants an
//! audit trail of what the provider saw records a `history_curated` event
//! ([`record_curation`], [`curate_and_record`]).
//!
//! Every manager here keeps these rules (`docs/history.md` says why):
//!
//! - **System entries are kept.** Every entry with role `system` is kept,
//!   unshortened and in order; windows and budgets count only the other
//!   entries (a budget still charges the system entries' tokens).
//! - **Pairing is never broken.** Entries are dropped so that no tool
//!   result is kept without the assistant entry that called it, and no
//!   assistant entry is kept without the results of its calls that the
//!   input had. If the input is coherent ([`coherence::is_coherent`]), so
//!   is the output; a manager never adds an incoherence.
//! - **The input is not changed** (it is borrowed) and **the output is
//!   deterministic**: no clock, no randomness.
//!
//! Built in: [`Passthrough`], [`SlidingWindow`], [`ToolResultTruncator`],
//! [`Composed`], [`TokenBudget`] (with [`TokenEstimator`] and the default
//! [`ApproximateTokens`]), and the compaction policies [`ToolPruning`] and
//! [`SummaryPlaceholder`].
//!
//! ```
//! use convlog::history::{Composed, CurationContext, HistoryManager, SlidingWindow, ToolResultTruncator};
//! use convlog::model::{ConversationEntry, Role};
//!
//! let history = vec![
//!     ConversationEntry::new("eval-1", 0, Role::System, Some("Be brief.".into())),
//!     ConversationEntry::new("eval-1", 1, Role::User, Some("Hi".into())),
//!     ConversationEntry::new("eval-1", 2, Role::Assistant, Some("Hello!".into())),
//! ];
//! let manager = Composed::new()
//!     .then(ToolResultTruncator::new(1000))
//!     .then(SlidingWindow::new(1));
//! let curated = manager.curate(&history, &CurationContext::new());
//! assert_eq!(curated.len(), 2, "the system entry and the last message");
//! assert_eq!(manager.strategy(), "composed(tool_result_truncator(1000), sliding_window(1))");
//! ```

pub mod coherence;
mod compaction;
mod managers;
mod record;
mod spec;
mod tokens;

use std::sync::Arc;

use crate::conversation::ConversationSlice;
use crate::model::ConversationEntry;
use crate::store::Store;

pub use compaction::{SummaryPlaceholder, ToolPruning, DEFAULT_PRUNED_PLACEHOLDER};
pub use managers::{
    Composed, Passthrough, SlidingWindow, ToolResultTruncator, DEFAULT_TRUNCATION_SUFFIX,
};
pub use record::{
    curate_and_record, curate_and_record_with, curate_conversation, curate_conversation_with,
    curated_event, curated_event_with, record_curation, record_curation_with, Curation,
    CurationScope,
};
pub use spec::parse_curation;
pub use tokens::{ApproximateTokens, TokenBudget, TokenEstimator};

/// Curates the history a provider is shown.
///
/// Implementations must keep every system entry, never break tool call /
/// result pairing (see [`coherence`]), and be deterministic. They receive
/// the entries by reference and return a new list.
pub trait HistoryManager: Send + Sync {
    /// The curated view of `entries` (the full, ordered history).
    fn curate(
        &self,
        entries: &[ConversationEntry],
        context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry>;

    /// A short label of the strategy and its parameters, recorded in
    /// `history_curated` events (`sliding_window(50)`).
    fn strategy(&self) -> String;
}

impl<M: HistoryManager + ?Sized> HistoryManager for Box<M> {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        (**self).curate(entries, context)
    }

    fn strategy(&self) -> String {
        (**self).strategy()
    }
}

impl<M: HistoryManager + ?Sized> HistoryManager for Arc<M> {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        (**self).curate(entries, context)
    }

    fn strategy(&self) -> String {
        (**self).strategy()
    }
}

impl<M: HistoryManager + ?Sized> HistoryManager for &M {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        (**self).curate(entries, context)
    }

    fn strategy(&self) -> String {
        (**self).strategy()
    }
}

/// Read access for strategies that need more than the entries: the
/// conversation's folded slice and the store. Both are optional; the
/// built-in managers use neither.
#[derive(Debug, Clone, Copy, Default)]
pub struct CurationContext<'a> {
    conversation: Option<&'a ConversationSlice>,
    store: Option<&'a Store>,
}

impl<'a> CurationContext<'a> {
    /// A context with nothing in it.
    pub fn new() -> CurationContext<'a> {
        CurationContext::default()
    }

    /// Adds the conversation being curated.
    pub fn with_conversation(mut self, conversation: &'a ConversationSlice) -> CurationContext<'a> {
        self.conversation = Some(conversation);
        self
    }

    /// Adds the store (read it; a manager must not append).
    pub fn with_store(mut self, store: &'a Store) -> CurationContext<'a> {
        self.store = Some(store);
        self
    }

    /// The conversation being curated, if the caller gave it.
    pub fn conversation(&self) -> Option<&'a ConversationSlice> {
        self.conversation
    }

    /// The conversation id, if the caller gave the conversation.
    pub fn conversation_id(&self) -> Option<&'a str> {
        self.conversation.map(ConversationSlice::conversation_id)
    }

    /// The store, if the caller gave it.
    pub fn store(&self) -> Option<&'a Store> {
        self.store
    }
}
