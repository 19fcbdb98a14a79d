//! The append path: validate, encode, order against other appends (and
//! check a conditional append's version), append one frame, index it, fold
//! it into the host slices, run the observers.

use std::ops::Range;

use super::hosts::HostPoison;
use super::{AppendOptions, Expect, Store, APPEND_RACES_MAX};
use crate::error::{Error, Result};
use crate::log::{Durability, Lsn};
use crate::model::Event;

impl Store {
    /// Appends events as one atomic batch with the store's durability;
    /// returns their LSNs. Every event is validated first: on a bad one
    /// nothing is appended and the error names the event and field.
    ///
    /// Shorthand for [`Store::append_with`] with [`AppendOptions::new`].
    pub fn append(&self, events: &[Event]) -> Result<Range<Lsn>> {
        self.append_with(events, AppendOptions::new())
    }

    /// Appends events as one atomic batch, like [`Store::append`], with
    /// per-call settings: a durability other than the store's, and a
    /// condition ([`Expect`]).
    ///
    /// With a condition, the batch is appended only if the conversation
    /// (or the store) is still at the version it names; otherwise nothing
    /// is appended and the error is [`Error::Conflict`], naming the
    /// expected and the actual version. The check and the append are
    /// atomic against every other append of the store, conditional or not:
    /// none can come between them. Checking a conversation costs a read of
    /// it (like [`Store::conversation`]), and appends to that conversation
    /// wait meanwhile; other conversations' appends go on.
    /// [`Expect::Store`] waits for every append in flight and holds all
    /// others until it is written.
    ///
    /// ```
    /// use convlog::model::ConversationEntry;
    /// use convlog::{AppendOptions, Error, Expect, Store, StoreOptions};
    ///
    /// # fn main() -> convlog::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), StoreOptions::default())?;
    /// store.append(&[ConversationEntry::user("eval-1", 0, "Hello").recorded_in("ctx")])?;
    ///
    /// // Read, decide, append only if nobody appended meanwhile.
    /// let read = store.conversation("ctx")?;
    /// let unchanged = || AppendOptions::new().expect(Expect::conversation("ctx", read.last_lsn()));
    /// let answer = ConversationEntry::assistant("eval-1", 1, "Hi!");
    /// store.append_with(&[answer.recorded_in("ctx")], unchanged())?;
    ///
    /// // The version read before that append is stale now.
    /// let late = ConversationEntry::assistant("eval-1", 1, "Hey");
    /// match store.append_with(&[late.recorded_in("ctx")], unchanged()) {
    ///     Err(Error::Conflict { expected, actual, .. }) => assert_eq!((expected, actual), (1, 2)),
    ///     other => panic!("expected a conflict, got {other:?}"),
    /// }
    /// assert_eq!(store.conversation("ctx")?.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn append_with(&self, events: &[Event], options: AppendOptions) -> Result<Range<Lsn>> {
        let durability = options.durability.unwrap_or_else(|| self.log.durability());
        // Sealed events, key records and erasures are the store's own.
        if let Some((index, Event::Custom(custom))) = events
            .iter()
            .enumerate()
            .find(|(_, event)| crate::erasure::is_reserved(event))
        {
            return Err(Error::InvalidEvent {
                index,
                field: crate::model::InvalidField {
                    field: "kind".to_string(),
                    reason: format!(
                        "{:?} is written by the store only (docs/erasure.md)",
                        custom.kind
                    ),
                },
            });
        }
        self.append_checked(events, durability, options.expect.as_ref())
    }

    pub(super) fn append_checked(
        &self,
        events: &[Event],
        durability: Durability,
        expect: Option<&Expect>,
    ) -> Result<Range<Lsn>> {
        let log = self.log.writer("append")?;
        if events.is_empty() {
            return Err(Error::EmptyBatch);
        }
        for (index, event) in events.iter().enumerate() {
            event
                .validate()
                .map_err(|field| Error::InvalidEvent { index, field })?;
        }
        self.forget_taken_back();
        if let Some(HostPoison::Panicked { .. }) = self.host_poison.get() {
            return Err(self.host_poison_error());
        }
        // An encrypted store seals the batch, and puts the key events of
        // the conversations it creates first in it (docs/erasure.md).
        let sealed = self.seal_batch(events)?;
        let all_events;
        let events = if sealed.made.is_empty() {
            events
        } else {
            all_events = [sealed.made.as_slice(), events].concat();
            all_events.as_slice()
        };
        let payloads = sealed.payloads;
        // Held until the batch is indexed: see `conditional`.
        let mut order = self.order_append(events, expect)?;
        let mut races = 0;
        let (lsns, position) = loop {
            match log.append(&payloads, durability) {
                // Another writer of the log appended first (only a log with
                // many writers says so): nothing was stored. Catch up and
                // check the condition again (`order_append`), then retry.
                Err(Error::Conflict {
                    conversation_id: None,
                    ..
                }) if self.following_writers() && races < APPEND_RACES_MAX => {
                    races += 1;
                    drop(order);
                    order = self.order_append(events, expect)?;
                }
                other => break other?,
            }
        };
        if self.following_writers() {
            return Ok(self.appended_among_writers(lsns, &sealed.made, &sealed.announced, order));
        }
        let bytes: u64 = payloads.iter().map(|payload| payload.len() as u64).sum();
        let due = {
            let mut state = self.state.write();
            if self.taken_back(lsns.start) {
                // A failed fsync took the batch back right after the writer
                // acknowledged it (`Durability::None`): it is not in the log.
                drop(state);
                self.forget_taken_back();
                return Err(self.writer_error());
            }
            let numbered: Vec<(Lsn, &Event)> = (lsns.start..).zip(events.iter()).collect();
            state.index_frame(&numbered, position);
            state.events_since_snapshot += events.len() as u64;
            state.bytes_since_snapshot += bytes;
            self.snapshot_due(&state)
        };
        drop(order);
        let folded = {
            let mut ordered = self.ordered.lock();
            // Checked under the ordering lock: a take-back forgotten before
            // this point must not be folded after it.
            if self.taken_back(lsns.start) {
                Ok(())
            } else {
                let mut notes = Vec::new();
                // The host slices keep what they fold: the events are copied
                // only when there are host slices.
                let kept = if ordered.folds() {
                    events.to_vec()
                } else {
                    Vec::new()
                };
                let folded = ordered.push(lsns.start, events.len() as u64, kept, &mut notes);
                if !notes.is_empty() {
                    self.dispatch.lock().queue.extend(notes);
                }
                folded
            }
        };
        if let Err(error) = folded {
            // The batch is committed: the append reports its LSNs (a caller
            // would retry and record it twice); the next append and every
            // host slice read report the panic.
            self.poison_hosts(error);
        }
        // Observers run here, after the ordering lock is released.
        self.dispatch_observers();
        if due {
            // The batch is committed whatever happens to the snapshot, which
            // the background thread writes; this append does not wait for it.
            self.request_snapshot();
        }
        self.announced(&sealed.announced);
        // The caller's events: the key events before them are the store's.
        Ok(lsns.start + sealed.made.len() as Lsn..lsns.end)
    }

    /// Whether the events or bytes appended since the last snapshot reach
    /// `snapshot_every_events` or `snapshot_every_bytes`.
    fn snapshot_due(&self, state: &super::index::State) -> bool {
        self.options
            .snapshot_every_events
            .is_some_and(|every| state.events_since_snapshot >= every)
            || self
                .options
                .snapshot_every_bytes
                .is_some_and(|every| state.bytes_since_snapshot >= every)
    }

    /// Whether this store is a writer that follows its log: a log with
    /// many writers ([`EventLog::many_writers`](crate::log::EventLog::many_writers)).
    fn following_writers(&self) -> bool {
        self.log.follow.is_some() && !self.log.is_read_only()
    }

    /// After an append to a log with many writers: indexes and folds the
    /// log up to the batch's end by following it (other writers' batches
    /// before it, then the batch itself, in LSN order), then what every
    /// append does after.
    fn appended_among_writers(
        &self,
        lsns: Range<Lsn>,
        made: &[Event],
        announced: &[String],
        order: super::conditional::AppendOrder<'_>,
    ) -> Range<Lsn> {
        let caught_up = self.catch_up_to(lsns.end);
        drop(order);
        if let Err(error) = caught_up {
            // The batch is committed: the append reports its LSNs (a caller
            // would retry and record it twice); the next read catches up
            // and reports the error if it persists.
            tracing::warn!(store = %self.log.dir().display(), error = %error, "an appended batch could not be indexed yet");
        }
        let due = self.snapshot_due(&self.state.read());
        self.dispatch_observers();
        if due {
            self.request_snapshot();
        }
        self.announced(announced);
        lsns.start + made.len() as Lsn..lsns.end
    }
}
