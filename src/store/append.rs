//! The append path: validate, encode, order against other appends (and
//! check a conditional append's version), append one frame, index it, fold
//! it into the host slices, run the observers.

use std::ops::Range;

use super::hosts::HostPoison;
use super::{AppendOptions, Expect, Store, APPEND_RACES_MAX};
use crate::error::{Error, Result};
use crate::log::{Durability, Lsn, Position};
use crate::model::Event;

/// A batch of [`Store::append_batches`] that passed its checks, sealed.
struct Ready {
    /// Its index among the batches.
    index: usize,
    /// Its events after the key events the store puts first, when it has
    /// any (empty otherwise: the batch's own events are the events).
    with_keys: Vec<Event>,
    sealed: super::erase::Sealed,
}

impl Ready {
    /// The events of the batch as the log stores them.
    fn events<'a>(&'a self, batches: &[&'a [Event]]) -> &'a [Event] {
        if self.with_keys.is_empty() {
            batches[self.index]
        } else {
            &self.with_keys
        }
    }
}

/// A batch the log committed, for the index and the host slices.
struct Committed<'a> {
    events: &'a [Event],
    lsns: Range<Lsn>,
    position: Position,
    /// The bytes of its payloads.
    bytes: u64,
}

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
        reject_reserved(events)?;
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
        let committed = [Committed {
            events,
            lsns,
            position,
            bytes: payloads.iter().map(|payload| payload.len() as u64).sum(),
        }];
        let (indexed, due) = self.index_committed(&committed);
        if !indexed[0] {
            // A failed fsync took the batch back right after the writer
            // acknowledged it (`Durability::None`): it is not in the log.
            self.forget_taken_back();
            return Err(self.writer_error());
        }
        drop(order);
        self.fold_committed(&committed, due);
        self.announced(&sealed.announced);
        // The caller's events: the key events before them are the store's.
        let [Committed { lsns, .. }] = committed;
        Ok(lsns.start + sealed.made.len() as Lsn..lsns.end)
    }

    /// Appends each of `batches` as its own atomic batch, in order, and
    /// returns once all of them are durable, whatever the store's
    /// durability: they are made durable together, on the segment log by
    /// one durable write of the whole group (when nothing written before
    /// waits for a sync), where `Durability::None` appends and a
    /// [`Store::sync`] would take a write per batch and an `fdatasync`.
    /// For a server that gathers the batches of many requests.
    ///
    /// Each batch keeps what an append gives it: it is validated, stored
    /// as a frame of its own (so a conversation's events are not spread
    /// over frames shared with others), indexed and folded on its own,
    /// and it fails alone, with the error [`Store::append`] would give it
    /// (`InvalidEvent` naming the index within the batch, `EmptyBatch`,
    /// a limit); nothing of a failed batch is stored. A failed write or
    /// sync poisons the writer, and every batch not durable by then fails.
    /// Returns one result per batch, in order: its LSNs, or its error.
    ///
    /// ```
    /// use convlog::model::ConversationEntry;
    /// use convlog::{Error, Store, StoreOptions};
    ///
    /// # fn main() -> convlog::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), StoreOptions::default())?;
    /// let a = [ConversationEntry::user("eval-1", 0, "Hello").recorded_in("a")];
    /// let bad = [ConversationEntry::user("", 0, "no evaluation").recorded_in("b")];
    /// let c = [ConversationEntry::user("eval-1", 0, "Hi").recorded_in("c")];
    /// let results = store.append_batches(&[&a, &bad, &c]);
    /// assert_eq!(results[0].as_ref().ok(), Some(&(1..2)));
    /// assert!(matches!(results[1], Err(Error::InvalidEvent { index: 0, .. })));
    /// assert_eq!(results[2].as_ref().ok(), Some(&(2..3)));
    /// assert_eq!(store.log().durable_lsn(), 3);
    /// # Ok(()) }
    /// ```
    pub fn append_batches(&self, batches: &[&[Event]]) -> Vec<Result<Range<Lsn>>> {
        if self.log.is_read_only() || self.following_writers() {
            // A follower refuses each; a log with many writers orders each
            // append against the other writers' on its own.
            let durable = AppendOptions::new().durability(Durability::Sync);
            return batches
                .iter()
                .map(|events| self.append_with(events, durable.clone()))
                .collect();
        }
        self.forget_taken_back();
        let mut results: Vec<Option<Result<Range<Lsn>>>> = Vec::with_capacity(batches.len());
        let mut ready: Vec<Ready> = Vec::new();
        for (index, events) in batches.iter().enumerate() {
            match self
                .check_batch(events)
                .and_then(|()| self.seal_batch(events))
            {
                Ok(sealed) => {
                    let with_keys = if sealed.made.is_empty() {
                        Vec::new()
                    } else {
                        [sealed.made.as_slice(), events].concat()
                    };
                    ready.push(Ready {
                        index,
                        with_keys,
                        sealed,
                    });
                    results.push(None);
                }
                Err(error) => results.push(Some(Err(error))),
            }
        }
        if ready.is_empty() {
            return results.into_iter().flatten().collect();
        }
        // Held until every batch is indexed: see `conditional`.
        let order = self.order_unconditional(ready.iter().flat_map(|ready| ready.events(batches)));
        let payloads: Vec<&[Vec<u8>]> = ready
            .iter()
            .map(|ready| ready.sealed.payloads.as_slice())
            .collect();
        let appended = self.log.log().append_batches(&payloads);
        let mut committed = Vec::with_capacity(ready.len());
        let mut of_committed = Vec::with_capacity(ready.len());
        for (ready, appended) in ready.iter().zip(appended) {
            match appended {
                Ok((lsns, position)) => {
                    committed.push(Committed {
                        events: ready.events(batches),
                        lsns,
                        position,
                        bytes: ready.sealed.payloads.iter().map(|p| p.len() as u64).sum(),
                    });
                    of_committed.push(ready);
                }
                Err(error) => results[ready.index] = Some(Err(error)),
            }
        }
        let (indexed, due) = self.index_committed(&committed);
        drop(order);
        self.fold_committed(&committed, due);
        for ((committed, ready), indexed) in committed.iter().zip(of_committed).zip(indexed) {
            results[ready.index] = Some(if indexed {
                self.announced(&ready.sealed.announced);
                let lsns = &committed.lsns;
                Ok(lsns.start + ready.sealed.made.len() as Lsn..lsns.end)
            } else {
                // Durable commits are never taken back; checked all the same.
                self.forget_taken_back();
                Err(self.writer_error())
            });
        }
        results
            .into_iter()
            .map(|result| result.expect("every batch has its result"))
            .collect()
    }

    /// What an append checks of a batch before anything else: a batch of
    /// at least one event, none the store's own, each valid; and that the
    /// host slices still fold.
    fn check_batch(&self, events: &[Event]) -> Result<()> {
        if events.is_empty() {
            return Err(Error::EmptyBatch);
        }
        reject_reserved(events)?;
        for (index, event) in events.iter().enumerate() {
            event
                .validate()
                .map_err(|field| Error::InvalidEvent { index, field })?;
        }
        if let Some(HostPoison::Panicked { .. }) = self.host_poison.get() {
            return Err(self.host_poison_error());
        }
        Ok(())
    }

    /// Indexes batches the log committed, under one lock: returns, per
    /// batch, whether it was indexed (not taken back by a failed fsync
    /// meanwhile), and whether a snapshot is due.
    fn index_committed(&self, committed: &[Committed<'_>]) -> (Vec<bool>, bool) {
        let mut state = self.state.write();
        let mut indexed = Vec::with_capacity(committed.len());
        for batch in committed {
            if self.taken_back(batch.lsns.start) {
                indexed.push(false);
                continue;
            }
            let numbered: Vec<(Lsn, &Event)> =
                (batch.lsns.start..).zip(batch.events.iter()).collect();
            state.index_frame(&numbered, batch.position);
            state.events_since_snapshot += batch.events.len() as u64;
            state.bytes_since_snapshot += batch.bytes;
            indexed.push(true);
        }
        (indexed, self.snapshot_due(&state))
    }

    /// Folds indexed batches into the host slices (in LSN order, whoever
    /// appended before them), runs the observers, and requests a snapshot
    /// when one is `due`.
    fn fold_committed(&self, committed: &[Committed<'_>], due: bool) {
        let folded = {
            let mut ordered = self.ordered.lock();
            let mut notes = Vec::new();
            let mut folded = Ok(());
            for batch in committed {
                // Checked under the ordering lock: a take-back forgotten
                // before this point must not be folded after it.
                if self.taken_back(batch.lsns.start) {
                    continue;
                }
                // The host slices keep what they fold: the events are
                // copied only when there are host slices.
                let kept = if ordered.folds() {
                    batch.events.to_vec()
                } else {
                    Vec::new()
                };
                let count = batch.events.len() as u64;
                folded = folded.and(ordered.push(batch.lsns.start, count, kept, &mut notes));
            }
            if !notes.is_empty() {
                self.dispatch.lock().queue.extend(notes);
            }
            folded
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

/// Refuses a batch holding an event only the store writes (sealed events,
/// key records, erasures), naming the first one.
fn reject_reserved(events: &[Event]) -> Result<()> {
    let Some((index, Event::Custom(custom))) = events
        .iter()
        .enumerate()
        .find(|(_, event)| crate::erasure::is_reserved(event))
    else {
        return Ok(());
    };
    Err(Error::InvalidEvent {
        index,
        field: crate::model::InvalidField {
            field: "kind".to_string(),
            reason: format!(
                "{:?} is written by the store only (docs/erasure.md)",
                custom.kind
            ),
        },
    })
}
