//! Conditional appends: append only if a conversation (or the store) is
//! still at the version the caller read.
//!
//! Every append holds the store's `appending` lock shared and the stripe
//! lock of each conversation it touches shared, from before its LSNs are
//! assigned until its frame is indexed. A conditional append takes the lock
//! it checks exclusively instead: it waits for every append in flight on
//! that conversation (or, for [`Expect::Store`], on the store) to be
//! indexed, blocks new ones, checks the version and appends. No other
//! append of the store, conditional or not, can come between the check and
//! the append. (All appenders of a store are in one process: the store's
//! lock admits one writer.)
//!
//! On a log with many writers ([`EventLog::many_writers`], e.g. a JetStream
//! stream several hosts append to) the locks order this store's appends
//! only; the log orders every writer's: each append is a compare-and-set
//! on the log's end, so it lands only right after the last batch this
//! store's handle knows of. A conditional append catches the index up with
//! that end (other writers' batches included) under its locks before it
//! checks, and when the log then refuses the batch because another writer
//! got there first, the append catches up and checks again
//! ([`APPEND_RACES_MAX`] times at most): the version it checked is the
//! version the batch lands on, whichever process appends.
//!
//! [`EventLog::many_writers`]: crate::log::EventLog::many_writers

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use parking_lot::{RwLockReadGuard, RwLockWriteGuard};

use super::{StoreCore, APPEND_STRIPES};
use crate::error::{Error, Result};
use crate::log::Lsn;
use crate::model::Event;

/// The version a conditional append ([`AppendOptions::expect`](super::AppendOptions::expect))
/// expects; anything else is [`Error::Conflict`] and nothing is appended.
///
/// A conversation's version is the LSN of its last event,
/// [`ConversationSlice::last_lsn`](crate::ConversationSlice::last_lsn) of
/// the slice the caller read (0 for a conversation with no event yet).
/// Custom events do not change it (they are not folded into the slice).
/// The store's version is its next LSN
/// ([`LogView::next_lsn`](super::LogView::next_lsn)): any append changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Expect {
    /// The conversation's last event is still at this LSN.
    Conversation {
        /// The conversation.
        conversation_id: String,
        /// `ConversationSlice::last_lsn` as read (0: no event yet).
        last_lsn: Lsn,
    },
    /// Nothing was appended to the store since its next LSN was read.
    Store {
        /// The store's next LSN as read.
        next_lsn: Lsn,
    },
}

impl Expect {
    /// Expects `conversation_id` to be at `last_lsn`
    /// (`ConversationSlice::last_lsn`; 0 for a conversation with no event).
    pub fn conversation(conversation_id: impl Into<String>, last_lsn: Lsn) -> Expect {
        Expect::Conversation {
            conversation_id: conversation_id.into(),
            last_lsn,
        }
    }

    /// Expects the store's next LSN to be `next_lsn`.
    pub fn store(next_lsn: Lsn) -> Expect {
        Expect::Store { next_lsn }
    }
}

/// How many times an append to a log with many writers
/// ([`EventLog::many_writers`](crate::log::EventLog::many_writers)) is
/// tried again after another writer appended first, before it fails with
/// the last [`Error::Conflict`] (the store's version moved each time; the
/// store stays usable). Each lost race means another writer's append went
/// through, so the store as a whole always makes progress.
pub const APPEND_RACES_MAX: usize = 64;

/// How many reads a store following its log makes, at most, to see events
/// the log has acknowledged (see `StoreCore::catch_up_to`).
const CATCH_UP_TRIES_MAX: usize = 100;

/// The pause between two such reads.
const CATCH_UP_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// A lock held shared or exclusively.
enum Held<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

/// The locks an append holds until its frame is indexed.
pub(super) struct AppendOrder<'a> {
    _held: Vec<Held<'a>>,
}

fn stripe_of(conversation_id: &str) -> usize {
    let mut hasher = DefaultHasher::new();
    conversation_id.hash(&mut hasher);
    (hasher.finish() % APPEND_STRIPES as u64) as usize
}

impl StoreCore {
    /// Takes the locks that order an append of `events` against every
    /// other append of the store and, with `expect`, checks the version
    /// under them: `Error::Conflict` when it moved.
    pub(super) fn order_append(
        &self,
        events: &[Event],
        expect: Option<&Expect>,
    ) -> Result<AppendOrder<'_>> {
        let mut held = Vec::new();
        if let Some(Expect::Store { next_lsn }) = expect {
            held.push(Held::Exclusive(self.appending.write()));
            self.catch_up_with_other_writers()?;
            // No append is in flight: every assigned LSN is indexed.
            let actual = self.log.next_lsn();
            if actual != *next_lsn {
                return Err(self.conflict(None, *next_lsn, actual));
            }
            return Ok(AppendOrder { _held: held });
        }
        held.push(Held::Shared(self.appending.read()));
        let expected = match expect {
            Some(Expect::Conversation {
                conversation_id,
                last_lsn,
            }) => Some((
                conversation_id.as_str(),
                stripe_of(conversation_id),
                *last_lsn,
            )),
            _ => None,
        };
        let mut stripes: Vec<usize> = events
            .iter()
            .filter_map(Event::conversation_id)
            .map(stripe_of)
            .chain(expected.map(|(_, stripe, _)| stripe))
            .collect();
        // One order for every appender: no two can wait on each other.
        stripes.sort_unstable();
        stripes.dedup();
        for stripe in stripes {
            if expected.is_some_and(|(_, expected_stripe, _)| expected_stripe == stripe) {
                held.push(Held::Exclusive(self.stripes[stripe].write()));
            } else {
                held.push(Held::Shared(self.stripes[stripe].read()));
            }
        }
        if expected.is_some() {
            self.catch_up_with_other_writers()?;
        }
        if let Some((conversation_id, _, last_lsn)) = expected {
            // Every append touching the conversation is indexed by now. On
            // a log with many writers another may have compacted what the
            // index points into: the read starts again from the newest
            // snapshot then, as every read does.
            let actual = self
                .follow_read(|| self.fold_conversation(conversation_id, None))?
                .map_or(0, |slice| slice.last_lsn());
            if actual != last_lsn {
                return Err(self.conflict(Some(conversation_id), last_lsn, actual));
            }
        }
        Ok(AppendOrder { _held: held })
    }

    /// Takes the locks that order an unconditional append of `events`
    /// (of one batch or of several appended together) against every other
    /// append of the store: each stripe once, in the one order.
    pub(super) fn order_unconditional<'e>(
        &self,
        events: impl IntoIterator<Item = &'e Event>,
    ) -> AppendOrder<'_> {
        let mut held = vec![Held::Shared(self.appending.read())];
        let mut stripes: Vec<usize> = events
            .into_iter()
            .filter_map(Event::conversation_id)
            .map(stripe_of)
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        held.extend(
            stripes
                .into_iter()
                .map(|stripe| Held::Shared(self.stripes[stripe].read())),
        );
        AppendOrder { _held: held }
    }

    /// On a log with many writers: indexes every batch up to the end the
    /// log's handle knows of (other writers' included), so a version
    /// checked next is the one an append lands on. Nothing to do on a log
    /// with one writer, whose appends the store indexes itself.
    fn catch_up_with_other_writers(&self) -> Result<()> {
        if self.log.is_read_only() || self.log.follow.is_none() {
            return Ok(());
        }
        self.catch_up_to(self.log.log().next_lsn())
    }

    /// Catches a following store up until it has indexed every event below
    /// `lsn` (acknowledged, so visible; a read that does not show it yet is
    /// tried again, [`CATCH_UP_TRIES_MAX`] times at most).
    pub(super) fn catch_up_to(&self, lsn: Lsn) -> Result<()> {
        for _ in 0..CATCH_UP_TRIES_MAX {
            match self.catch_up_until(lsn) {
                // Another writer compacted what this store still needed:
                // start again from the newest snapshot, as reads do.
                Err(Error::Compacted { .. }) => self.follow_read(|| Ok(()))?,
                other => other?,
            }
            if self.log.next_lsn() >= lsn {
                return Ok(());
            }
            std::thread::sleep(CATCH_UP_PAUSE);
        }
        Err(Error::Io {
            operation: "catch up with",
            path: self.log.dir().to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the log acknowledged events up to LSN {lsn} but reading it shows them only up to {} after {CATCH_UP_TRIES_MAX} tries (CATCH_UP_TRIES_MAX)",
                    self.log.next_lsn()
                ),
            ),
        })
    }

    fn conflict(&self, conversation_id: Option<&str>, expected: Lsn, actual: Lsn) -> Error {
        Error::Conflict {
            store: self.log.dir().to_path_buf(),
            conversation_id: conversation_id.map(str::to_string),
            expected,
            actual,
        }
    }
}
