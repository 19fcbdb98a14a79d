//! Audit views of a store: a conversation's timeline as text, JSON or one
//! self-contained HTML page, an overview of every conversation, and a tail
//! that follows a writer in another process.
//!
//! Everything here reads; nothing writes to the store. The pieces:
//!
//! - [`Timeline`]: one conversation as evaluations → turns → messages, with
//!   every tool call's status, duration, error and resumed flag, plus the
//!   fold's anomalies and statuses for unknown calls. It is `Serialize`
//!   (the `--json` form). Build it from a [`ConversationSlice`]
//!   ([`Timeline::from_slice`]), from a [`Store`] ([`Timeline::from_store`]),
//!   or from a store directory without taking the writer's lock
//!   ([`AuditView::open`], over [`Store::open_read_only`]).
//! - [`StoreOverview`]: one row per conversation (entries, evaluations,
//!   calls, failed and unfinished calls).
//! - Rendering: [`write_timeline_text`] and [`write_overview_text`] (ANSI
//!   colours only when asked), [`write_json`], and [`write_html`] (inline
//!   CSS, no scripts, no external resources, every piece of content
//!   escaped).
//! - [`SealedOverview`]: an encrypted store read without its store key:
//!   its structure (conversation ids, LSNs, sizes, key events, erasures),
//!   nothing sealed.
//! - [`tail()`]: prints events as JSON lines or one-line summaries as they
//!   are appended, following the log with [`crate::log::LogIter::wait_next`].
//!
//! `docs/audit.md` shows what each view looks like and how to read it.
//!
//! ```
//! # fn main() -> convlog::Result<()> {
//! use convlog::audit::{self, Timeline, TimelineOptions};
//! use convlog::model::{ConversationEntry, Role};
//! use convlog::{Store, StoreOptions};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path(), StoreOptions::default())?;
//! let question = ConversationEntry::new("eval-1", 0, Role::User, Some("Weather in Paris?".into()));
//! store.append(&[question.recorded_in("ctx_1")])?;
//!
//! let timeline = Timeline::from_store(&store, "ctx_1", &TimelineOptions::default())?;
//! let mut text = Vec::new();
//! audit::write_timeline_text(&mut text, &timeline, false).unwrap();
//! assert!(String::from_utf8(text).unwrap().contains("Weather in Paris?"));
//! # Ok(())
//! # }
//! ```
//!
//! [`ConversationSlice`]: crate::ConversationSlice
//! [`Store`]: crate::Store
//! [`Store::open_read_only`]: crate::Store::open_read_only

mod format;
mod html;
mod sealed;
mod source;
mod tail;
mod text;
mod timeline;

pub use format::format_duration_ms;
pub use html::{write_html, HtmlOptions};
pub use sealed::{
    write_sealed_overview_text, SealedConversation, SealedErasure, SealedEvent, SealedOverview,
    SEALED_OVERVIEW_NOTE,
};
pub use source::AuditView;
pub use tail::{
    event_summary, tail, tail_reader, tail_with_key, TailFormat, TailOptions, TailReport,
    TailStart, TailStop,
};
pub use text::{write_overview_text, write_timeline_text, write_timeline_text_with, TextOptions};
pub use timeline::{
    AnomalyView, CallCounts, CallView, ConversationSummary, CurationView, DurationSource,
    EvaluationView, MessageView, ModelFailureDetails, ModelFailureView, ReasoningView, ResultRef,
    ResumedCalls, StatusView, StoreOverview, Timeline, TimelineOptions, TrimmedText, TurnView,
    TEXT_CHARS_DEFAULT, TEXT_CHARS_HTML,
};

/// Writes `value` (a [`Timeline`] or a [`StoreOverview`]) as pretty JSON
/// followed by a newline: the `--json` form of `inspect`.
pub fn write_json<T: serde::Serialize + ?Sized>(
    out: &mut dyn std::io::Write,
    value: &T,
) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(std::io::Error::other)?;
    out.write_all(b"\n")
}
