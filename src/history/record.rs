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

/// Who a curation was for: the prompt name and the session id a
/// `history_curated` event records (both optional; the seed's
/// `HistoryCurated.prompt_name` and `session_id`). Start from
/// [`CurationScope::new`] (neither) and chain the setters.
///
/// ```
/// use convlog::history::{curated_event_with, CurationScope};
/// use convlog::model::{Event, Timestamp};
///
/// let scope = CurationScope::new().prompt_name("travel/planner").session_id("sess-42");
/// let event = curated_event_with("chat", "sliding_window(50)", 80, 50, Timestamp(0), &scope);
/// let Event::HistoryCurated(curated) = event else { unreachable!() };
/// assert_eq!(curated.prompt_name.as_deref(), Some("travel/planner"));
/// assert_eq!(curated.session_id.as_deref(), Some("sess-42"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CurationScope {
    /// The prompt the request was built for (a label: at most
    /// `LABEL_BYTES_MAX` bytes are recorded).
    pub prompt_name: Option<String>,
    /// The session the request belongs to (an id: 1 to `ID_BYTES_MAX`
    /// bytes, checked when the event is appended).
    pub session_id: Option<String>,
}

impl CurationScope {
    /// Neither a prompt name nor a session id.
    pub fn new() -> CurationScope {
        CurationScope::default()
    }

    /// Sets the prompt name.
    pub fn prompt_name(mut self, prompt_name: impl Into<String>) -> CurationScope {
        self.prompt_name = Some(prompt_name.into());
        self
    }

    /// Sets the session id.
    pub fn session_id(mut self, session_id: impl Into<String>) -> CurationScope {
        self.session_id = Some(session_id.into());
        self
    }
}

/// `text` cut to at most `LABEL_BYTES_MAX` bytes, at a character boundary.
fn label(text: &str) -> String {
    let mut end = text.len().min(LABEL_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// A `history_curated` event without a prompt name or session id
/// ([`curated_event_with`] and an empty scope).
pub fn curated_event(
    conversation_id: &str,
    strategy: &str,
    original_count: usize,
    curated_count: usize,
    at: Timestamp,
) -> Event {
    curated_event_with(
        conversation_id,
        strategy,
        original_count,
        curated_count,
        at,
        &CurationScope::new(),
    )
}

/// A `history_curated` event recording `scope`'s prompt name and session
/// id. A strategy label or prompt name longer than `LABEL_BYTES_MAX` is cut
/// (at a character boundary) to fit.
pub fn curated_event_with(
    conversation_id: &str,
    strategy: &str,
    original_count: usize,
    curated_count: usize,
    at: Timestamp,
    scope: &CurationScope,
) -> Event {
    Event::HistoryCurated(HistoryCurated {
        conversation_id: conversation_id.to_string(),
        strategy: label(strategy),
        original_count: original_count as u64,
        curated_count: curated_count as u64,
        at,
        prompt_name: scope.prompt_name.as_deref().map(label),
        session_id: scope.session_id.clone(),
    })
}

/// Appends a `history_curated` event (now) and returns its LSN. The
/// conversation's entries are untouched. [`record_curation_with`] records a
/// prompt name and session id too.
pub fn record_curation(
    store: &Store,
    conversation_id: &str,
    strategy: &str,
    original_count: usize,
    curated_count: usize,
) -> Result<Lsn> {
    record_curation_with(
        store,
        conversation_id,
        strategy,
        original_count,
        curated_count,
        &CurationScope::new(),
    )
}

/// [`record_curation`] with `scope`'s prompt name and session id.
pub fn record_curation_with(
    store: &Store,
    conversation_id: &str,
    strategy: &str,
    original_count: usize,
    curated_count: usize,
    scope: &CurationScope,
) -> Result<Lsn> {
    store
        .append(&[curated_event_with(
            conversation_id,
            strategy,
            original_count,
            curated_count,
            Timestamp::now(),
            scope,
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
    curate_and_record_with(
        store,
        conversation_id,
        entries,
        manager,
        &CurationScope::new(),
    )
}

/// [`curate_and_record`], recording `scope`'s prompt name and session id.
pub fn curate_and_record_with(
    store: &Store,
    conversation_id: &str,
    entries: &[ConversationEntry],
    manager: &dyn HistoryManager,
    scope: &CurationScope,
) -> Result<Curation> {
    curate_in(
        store,
        conversation_id,
        entries,
        manager,
        CurationContext::new().with_store(store),
        scope,
    )
}

/// Curates the whole stored history of `conversation_id` with `manager`
/// (the conversation and the store in the context) and records it.
pub fn curate_conversation(
    store: &Store,
    conversation_id: &str,
    manager: &dyn HistoryManager,
) -> Result<Curation> {
    curate_conversation_with(store, conversation_id, manager, &CurationScope::new())
}

/// [`curate_conversation`], recording `scope`'s prompt name and session id.
pub fn curate_conversation_with(
    store: &Store,
    conversation_id: &str,
    manager: &dyn HistoryManager,
    scope: &CurationScope,
) -> Result<Curation> {
    let slice = store.conversation(conversation_id)?;
    let entries: Vec<ConversationEntry> = slice.entries().cloned().collect();
    let context = CurationContext::new()
        .with_store(store)
        .with_conversation(&slice);
    curate_in(store, conversation_id, &entries, manager, context, scope)
}

fn curate_in(
    store: &Store,
    conversation_id: &str,
    entries: &[ConversationEntry],
    manager: &dyn HistoryManager,
    context: CurationContext<'_>,
    scope: &CurationScope,
) -> Result<Curation> {
    let curated = manager.curate(entries, &context);
    let strategy = manager.strategy();
    let lsn = record_curation_with(
        store,
        conversation_id,
        &strategy,
        entries.len(),
        curated.len(),
        scope,
    )?;
    Ok(Curation {
        entries: curated,
        strategy,
        original_count: entries.len(),
        lsn,
    })
}
