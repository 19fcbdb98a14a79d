//! convlog: an embedded, durable, event-sourced store for LLM agent conversations.
//!
//! An agent host records every message and every tool-call status change the
//! moment it happens. After a crash, even in the middle of a tool call,
//! convlog gives back exactly what was acknowledged, says which calls never
//! finished, and rebuilds the request for the next provider call.
//!
//! # The store
//!
//! [`Store`] is the one entry point: open a directory, append events,
//! read conversations back, resume.
//!
//! ```
//! use convlog::{
//!     render, ConversationEntry, Event, Provider, RenderOptions, ResumeOptions, Store,
//!     StoreOptions, Timestamp, ToolCall, ToolStatus,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! {
//!     let store = Store::open(dir.path(), StoreOptions::default())?;
//!
//!     // The user asks; the model answers with a tool call.
//!     let question = ConversationEntry::user("eval-1", 0, "Weather in Paris?");
//!     let weather = ToolCall::new("call_1", "weather", r#"{"city":"paris"}"#);
//!     let answer = ConversationEntry::assistant_calling("eval-1", 1, [weather]).with_turn(1);
//!     // One atomic batch, durable when `append` returns.
//!     store.append(&[question.recorded_in("trip"), answer.recorded_in("trip")])?;
//!     store.append(&[Event::tool_status("trip", "eval-1", "call_1", ToolStatus::Running)])?;
//! } // The host dies here, before the tool returned.
//!
//! // A new host opens the store and asks what is left to do.
//! let store = Store::open(dir.path(), StoreOptions::default())?;
//! let state = store.resume("trip", &ResumeOptions::default())?;
//! let call = &state.unfinished_calls[0].call;
//! assert_eq!((call.call_id.as_str(), call.status), ("call_1", ToolStatus::Running));
//!
//! // It runs the call again (marked as a re-run) and records the result.
//! store.append(&[state.rerun_event("call_1", Timestamp::now())])?;
//! let result =
//!     ConversationEntry::tool_result("eval-1", state.next_sequence, "call_1", "weather", "18C")
//!         .with_turn(state.turn);
//! store.append(&[result.recorded_in("trip")])?;
//!
//! // The next request to OpenAI Chat, rebuilt from the store.
//! let conversation = store.conversation("trip")?;
//! let request = render(Provider::OpenAiChat, conversation.entries(), &RenderOptions::default())?;
//! assert_eq!(request.messages.len(), 3); // user, assistant with its call, tool result
//! assert_eq!(request.messages[2]["role"], "tool");
//! # Ok(())
//! # }
//! ```
//!
//! `docs/embedding.md` walks through the rest of a host's day: curating the
//! history, auditing a conversation, backups. The JSON form of every event
//! is in `docs/events.md`.
//!
//! # What a host uses
//!
//! Everything above is at the crate root:
//!
//! | | |
//! |---|---|
//! | open | [`Store`], [`StoreOptions`], [`StoreBuilder`] (host reducers), [`Store::open_read_only`] (beside a writer) |
//! | record | [`Store::append`], [`Store::append_with`] ([`AppendOptions`]: durability, [`Expect`] for conditional appends); [`Event`], [`ConversationEntry`], [`ToolCall`], [`ToolStatus`] and their constructors |
//! | read | [`Store::conversation`] ([`ConversationSlice`]), [`Store::resume`] ([`ResumeState`]) |
//! | providers | [`render`] entries for OpenAI Chat, OpenAI Responses, Anthropic, Gemini, Ollama ([`Provider`]); [`ingest`] a provider's messages as entries |
//! | curate | [`HistoryManager`]s: [`SlidingWindow`], [`TokenBudget`], [`ToolResultTruncator`], [`Composed`]; [`curate_and_record`] |
//! | control | [`MessageControl`]: contexts with owners, validated add/set messages, previews, steering |
//! | fold your own | [`Reducer`], registered with [`StoreBuilder::reducer`] |
//! | errors | the one [`Error`] type |
//!
//! # Modules
//!
//! | module | more of the same, and what the root does not re-export |
//! |---|---|
//! | [`store`] | snapshots, compaction, [`store::backup()`], [`store::verify()`], [`LogView`] |
//! | [`model`] | every event and entry type, and their limits |
//! | [`conversation`] | [`ConversationSlice`] and its queries |
//! | [`resume`] | [`ResumeState`], prompt identity |
//! | [`provider`] | render options, display names, pending-call policies, per-provider rules |
//! | [`history`] | every history manager, token estimators, curation records |
//! | [`control`] | message control's messages, contexts and errors |
//! | [`audit`] | timelines of a conversation as text, JSON and HTML; following a writer |
//! | [`reducer`] | the [`Reducer`] trait |
//! | [`interop`] | a conversation as snapshot JSON in the session-snapshot shape of other agent frameworks, and back (`docs/interop.md`) |
//! | [`json`] | the JSON line form of events (`docs/events.md`) |
//! | [`parts`] | parts-based messages (text and tool parts) to and from entries |
//! | [`log`], [`storage`] | the layers underneath (below) |
//!
//! # Underneath: the segment log
//!
//! The store stands on a durable segment log ([`log`]), which promises one
//! thing: what it acknowledged, you get back, exactly.
//!
//! - Appends are framed and checksummed; a batch is all-or-nothing after
//!   any crash; LSNs are gap-free.
//! - [`Durability`] chooses when an append is acknowledged: after its
//!   own fsync, after a shared group fsync (the default), or before any.
//! - Opening a store cuts a torn tail (logged) and fails with
//!   [`Error::Corrupted`] (segment, offset, reason) on any other damage.
//! - One writer per store ([`Error::Locked`]); any number of readers, in
//!   any process ([`log::LogReader`]).
//!
//! The byte format is in `docs/format.md`, the layers in `ARCHITECTURE.md`.
//!
//! # Features
//!
//! - `testing`: the internals the crate's own tests, benches and fuzz
//!   targets use (the frame format, recovery's scanner, the event codec,
//!   the snapshot format, a simulated crash disk). Not a stable API.
#![deny(unsafe_code)]
#![warn(clippy::too_many_lines)]
#![warn(missing_docs)]

pub mod audit;
#[cfg(feature = "testing")]
pub mod codec;
#[cfg(not(feature = "testing"))]
pub(crate) mod codec;
pub mod control;
pub mod conversation;
pub mod erasure;
pub mod error;
pub mod history;
pub mod interop;
pub mod json;
pub mod log;
pub mod model;
pub mod parts;
pub mod provider;
pub mod reducer;
pub mod resume;
pub mod storage;
pub mod store;
pub mod tamper;

pub use control::MessageControl;
pub use conversation::ConversationSlice;
pub use error::{Error, Result};
pub use history::{
    curate_and_record, Composed, HistoryManager, SlidingWindow, TokenBudget, ToolResultTruncator,
};
pub use log::{Durability, Lsn};
pub use model::{ConversationEntry, Event, Role, Timestamp, ToolCall, ToolStatus};
pub use provider::{render, to_entries as ingest, Provider, RenderOptions, RenderedRequest};
pub use reducer::Reducer;
pub use resume::{EvaluationState, ResumeOptions, ResumeState};
pub use store::{AppendOptions, Expect, LogView, Retention, Store, StoreBuilder, StoreOptions};

/// The code blocks of `README.md`, compiled and run as doctests so the
/// embedding example never goes stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The examples of `docs/embedding.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/embedding.md")]
pub struct EmbeddingDoctests;

/// The example of `docs/erasure.md`, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../docs/erasure.md")]
pub struct ErasureDoctests;

/// The example of `docs/interop.md`, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../docs/interop.md")]
pub struct InteropDoctests;
