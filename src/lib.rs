//! convlog: an embedded, durable, event-sourced store for LLM agent conversations.
//!
//! This release holds the foundation every other part stands on: the
//! durable segment log ([`log`]). What it promises is one thing: what it
//! acknowledged, you get back, exactly.
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
