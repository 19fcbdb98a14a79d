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
//! use convlog::model::{ConversationEntry, Event, Timestamp, ToolCall, ToolStatus};
//! use convlog::provider::{self, Provider, RenderOptions};
//! use convlog::resume::ResumeOptions;
//! use convlog::{Store, StoreOptions};
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
//!     store.append(vec![question.recorded_in("trip"), answer.recorded_in("trip")])?;
//!     store.append_one(Event::tool_status("trip", "eval-1", "call_1", ToolStatus::Running))?;
//! } // The host dies here, before the tool returned.
//!
//! // A new host opens the store and asks what is left to do.
//! let store = Store::open(dir.path(), StoreOptions::default())?;
//! let state = store.resume("trip", &ResumeOptions::default())?;
//! let call = &state.unfinished_calls[0].call;
//! assert_eq!((call.call_id.as_str(), call.status), ("call_1", ToolStatus::Running));
//!
//! // It runs the call again (marked as a re-run) and records the result.
//! store.append_one(state.rerun_event("call_1", Timestamp::now()))?;
//! let result =
//!     ConversationEntry::tool_result("eval-1", state.next_sequence, "call_1", "weather", "18C")
//!         .with_turn(state.turn);
//! store.append_one(result.recorded_in("trip"))?;
//!
//! // The next request to OpenAI Chat, rebuilt from the store.
//! let conversation = store.conversation("trip")?;
//! let request = provider::render(
//!     Provider::OpenAiChat,
//!     conversation.entries(),
//!     &RenderOptions::default(),
//! )?;
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
//! # Modules
//!
//! | module | what a host uses it for |
//! |---|---|
//! | [`store`] | [`Store`], [`StoreOptions`], [`StoreBuilder`] (host reducers), snapshots, compaction, [`store::backup()`], [`store::verify()`] |
//! | [`model`] | the events ([`Event`]) and entries ([`ConversationEntry`]) convlog stores, and their limits |
//! | [`conversation`] | [`ConversationSlice`]: one conversation folded from its events, and its queries |
//! | [`resume`] | [`Store::resume`]: unfinished and finished calls, the next sequence and turn |
//! | [`provider`] | entries to and from OpenAI Chat, OpenAI Responses, Anthropic, Gemini and Ollama messages |
//! | [`history`] | history managers: windows, truncation, token budgets, compaction, without breaking tool pairing |
//! | [`control`] | message control: contexts with owners, validated add/set messages, previews, steering |
//! | [`audit`] | timelines of a conversation as text, JSON and HTML; following a writer |
//! | [`reducer`] | the [`reducer::Reducer`] trait for host slices folded from every event |
//! | [`json`] | the JSON line form of events (`docs/events.md`) |
//! | [`parts`] | parts-based messages (text and tool parts) to and from entries |
//! | [`error`] | the one [`Error`] type |
//! | [`log`], [`storage`], [`codec`] | the layers underneath (below) |
//!
//! # Underneath: the segment log
//!
//! The store stands on a durable segment log ([`log`]), which promises one
//! thing: what it acknowledged, you get back, exactly.
//!
//! - Appends are framed and checksummed; a batch is all-or-nothing after
//!   any crash; LSNs are gap-free.
//! - [`log::Durability`] chooses when an append is acknowledged: after its
//!   own fsync, after a shared group fsync (the default), or before any.
//! - Opening a store cuts a torn tail (logged) and fails with
//!   [`Error::Corrupted`] (segment, offset, reason) on any other damage.
//! - One writer per store ([`Error::Locked`]); any number of readers, in
//!   any process ([`log::LogReader`]).
//!
//! The byte format is in `docs/format.md`, the layers in `ARCHITECTURE.md`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod audit;
pub mod codec;
pub mod control;
pub mod conversation;
pub mod error;
pub mod history;
pub mod json;
pub mod log;
pub mod model;
pub mod parts;
pub mod provider;
pub mod reducer;
pub mod resume;
pub mod storage;
pub mod store;

pub use conversation::ConversationSlice;
pub use error::{Error, Result};
pub use log::{Durability, Log, LogOptions, LogReader, Lsn, Record};
pub use model::{ConversationEntry, Event, Role, ToolStatus};
pub use store::{Store, StoreBuilder, StoreOptions};

/// The code blocks of `README.md`, compiled and run as doctests so the
/// embedding example never goes stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The examples of `docs/embedding.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/embedding.md")]
pub struct EmbeddingDoctests;
