//! Recording what a provider was shown: `history_curated` events.

use crate::error::Result;
use crate::log::Lsn;
use crate::model::{ConversationEntry, Event, HistoryCurated, Timestamp, LABEL_BYTES_MAX};
use crate::store::Store;

use super::{CurationContext, HistoryManager};

/// A curated view and the event that recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Curation {
    /// What to send to the provider.
    pub entries: Vec<ConversationEntry>,
    /// The manager's strategy label, as recorded.
    pub strategy: String,
    /// How many entries the full history had.
    pub original_count: usize,
    /// LSN of the `history_curated` event.
    pub lsn: Lsn,
}

/// A `history_curated` event. A strategy label longer than
/// `LABEL_BYTES_MAX` is cut (at a character boundary) to fit.
pub fn curated_event(
    conversation_id: &str,
    strategy: &str,
    original_count: usize,
    curated_count: usize,
    at: Timestamp,
) -> Event {
    let mut end = strategy.len().min(LABEL_BYTES_MAX);
    while !strategy.is_char_boundary(end) {
        end -= 1;
    }
    Event::HistoryCurated(HistoryCurated {
        conversation_id: conversation_id.to_string(),
        strategy: strategy[..end].to_string(),
        original_count: original_count as u64,
        curated_count: curated_count as u64,
        at,
    })
}

/// Appends a `history_curated` event (now) and returns its LSN. The
/// conversation's entries are untouched.
pub fn record_curation(
    store: &Store,
    conversation_id: &str,
    strategy: &str,
    original_count: usize,
    curated_count: usize,
) -> Result<Lsn> {
    store
        .append(&[curated_event(
            conversation_id,
            strategy,
            original_count,
            curated_count,
            Timestamp::now(),
        )])
        .map(|lsns| lsns.start)
}

/// Curates `entries` (the history of `conversation_id`, or any part of it a
/// host sends) with `manager`, the store in the context, and records it.
pub fn curate_and_record(
    store: &Store,
    conversation_id: &str,
    entries: &[ConversationEntry],
    manager: &dyn HistoryManager,
) -> Result<Curation> {
    curate_in(
        store,
        conversation_id,
        entries,
        manager,
        CurationContext::new().with_store(store),
    )
}

/// Curates the whole stored history of `conversation_id` with `manager`
/// (the conversation and the store in the context) and records it.
pub fn curate_conversation(
    store: &Store,
    conversation_id: &str,
    manager: &dyn HistoryManager,
) -> Result<Curation> {
    let slice = store.conversation(conversation_id)?;
    let entries: Vec<ConversationEntry> = slice.entries().cloned().collect();
    let context = CurationContext::new()
        .with_store(store)
        .with_conversation(&slice);
    curate_in(store, conversation_id, &entries, manager, context)
}

fn curate_in(
    store: &Store,
    conversation_id: &str,
    entries: &[ConversationEntry],
    manager: &dyn HistoryManager,
    context: CurationContext<'_>,
) -> Result<Curation> {
    let curated = manager.curate(entries, &context);
    let strategy = manager.strategy();
    let lsn = record_curation(
        store,
        conversation_id,
        &strategy,
        entries.len(),
        curated.len(),
    )?;
    Ok(Curation {
        entries: curated,
        strategy,
        original_count: entries.len(),
        lsn,
    })
}
