//! Host reducers: their slices, folded strictly in LSN order; the
//! observers notified after each folded event; and the poison that stops
//! serving them when a reducer or observer panics or the writer takes back
//! events they folded.

use std::any::TypeId;
use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;

use super::{Store, StoreCore};
use crate::error::{Error, Result};
use crate::log::Lsn;
use crate::model::Event;
use crate::reducer::{self, AnySlice, ErasedReducer, HostSlot, Observer, Reducer};

/// Host slices, folded strictly in LSN order.
pub(super) struct Ordered {
    pub(super) next_lsn: Lsn,
    /// Batches waiting for an earlier one, by first LSN: how many events,
    /// and the events themselves when there are host slices to fold them.
    pub(super) pending: BTreeMap<Lsn, (u64, Vec<Event>)>,
    pub(super) hosts: Vec<(TypeId, HostSlot)>,
    /// Set when the host slices stopped being folded (the store's host
    /// poison says why); nothing more is folded or observed.
    pub(super) stopped: bool,
}

impl Ordered {
    /// Host slots to fold from `next_lsn` on.
    pub(super) fn new(next_lsn: Lsn, hosts: Vec<(TypeId, HostSlot)>) -> Ordered {
        Ordered {
            next_lsn,
            pending: BTreeMap::new(),
            hosts,
            stopped: false,
        }
    }

    /// Whether there are host slices to fold events into: without them a
    /// batch is only counted, and its events need not be kept.
    pub(super) fn folds(&self) -> bool {
        !self.hosts.is_empty() && !self.stopped
    }

    /// Folds every batch that is next in LSN order into the host slices, and
    /// queues the observer notifications in `notes`. `count` is the batch's
    /// number of events; `events` may be empty when nothing folds
    /// ([`Ordered::folds`]). A panicking reducer stops all folding and is
    /// returned.
    pub(super) fn push(
        &mut self,
        first_lsn: Lsn,
        count: u64,
        events: Vec<Event>,
        notes: &mut Vec<Notification>,
    ) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.pending.insert(first_lsn, (count, events));
        let observed = self
            .hosts
            .iter()
            .any(|(_, slot)| !slot.observers.is_empty());
        while let Some((count, events)) = self.pending.remove(&self.next_lsn) {
            if events.is_empty() {
                self.next_lsn += count;
                continue;
            }
            for event in events {
                let lsn = self.next_lsn;
                // Shared with the notifications only when someone observes.
                let (shared, owned) = if observed {
                    (Some(Arc::new(event)), None)
                } else {
                    (None, Some(event))
                };
                let event: &Event = match (&shared, &owned) {
                    (Some(shared), _) => shared,
                    (None, owned) => owned.as_ref().expect("one of the two is set"),
                };
                for (_, slot) in &mut self.hosts {
                    if let Err(error) = slot.apply(event, lsn) {
                        self.stopped = true;
                        self.pending.clear();
                        return Err(error);
                    }
                    if let (Some(shared), false) = (&shared, slot.observers.is_empty()) {
                        notes.push(Notification {
                            reducer: Arc::clone(&slot.name),
                            slice: Arc::clone(&slot.slice),
                            event: Arc::clone(shared),
                            lsn,
                            observers: Arc::clone(&slot.observers),
                        });
                    }
                }
                self.next_lsn += 1;
            }
        }
        Ok(())
    }
}

/// A host slot, with its reducer's initial slice, for each reducer.
pub(super) fn host_slots(
    reducers: Vec<(TypeId, Box<dyn ErasedReducer>)>,
) -> Vec<(TypeId, HostSlot)> {
    reducers
        .into_iter()
        .map(|(type_id, reducer)| (type_id, HostSlot::new(reducer)))
        .collect()
}

/// One folded event for the observers of one reducer: the slice as it was
/// right after the event (shared copy-on-write with the live slice).
pub(super) struct Notification {
    pub(super) reducer: Arc<str>,
    pub(super) slice: Arc<AnySlice>,
    pub(super) event: Arc<Event>,
    pub(super) lsn: Lsn,
    pub(super) observers: Arc<Vec<Observer>>,
}

/// Observer notifications waiting to run, in LSN order. One thread at a
/// time runs them (`running`), with no store lock held.
#[derive(Default)]
pub(super) struct Dispatch {
    pub(super) queue: VecDeque<Notification>,
    pub(super) running: bool,
}

/// Why the store stopped serving host slices.
#[derive(Debug, Clone)]
pub(super) enum HostPoison {
    /// A reducer or an observer panicked: appends are refused too.
    Panicked {
        reducer: String,
        observer: bool,
        lsn: Lsn,
        message: String,
    },
    /// The poisoned writer took back events from this LSN on, after the
    /// host slices had folded some of them.
    TakenBack { from_lsn: Lsn },
}

impl Store {
    /// A copy of host reducer `R`'s slice, with every event folded that is
    /// next in LSN order. Panics if `R` was not registered.
    ///
    /// Fails with [`Error::ReducerPanicked`] once a reducer or observer has
    /// panicked, and with [`Error::Poisoned`] once a failed fsync took back
    /// events the host slices had folded: the slices are then no longer
    /// what the log holds (reopen the store to rebuild them).
    pub fn slice<R: Reducer>(&self) -> Result<R::Slice> {
        self.follow_read(|| Ok(()))?;
        self.forget_taken_back();
        let ordered = self.ordered.lock();
        if self.host_poison.get().is_some() {
            drop(ordered);
            return Err(self.host_poison_error());
        }
        let (_, slot) = ordered
            .hosts
            .iter()
            .find(|(type_id, _)| *type_id == TypeId::of::<R>())
            .expect("reducer was registered with StoreBuilder::reducer");
        Ok(slot
            .slice
            .downcast_ref::<R::Slice>()
            .expect("a host slot holds its reducer's slice type")
            .clone())
    }

    /// Calls `observer` after every event folded into `R`'s slice from now
    /// on, in LSN order, with the slice as it was right after that event.
    /// Panics if `R` was not registered.
    ///
    /// Observers run after the store's locks are released, on the thread of
    /// an appender (usually the one whose append folded the event; when
    /// appenders race, one of them runs every pending notification before
    /// its append returns). The observers of a store never run
    /// concurrently. An observer may call back into the store (`slice`,
    /// `conversation`, even `append`: the events it appends are observed
    /// after it returns). A panicking observer poisons the store like a
    /// panicking reducer ([`Error::ReducerPanicked`]).
    pub fn observe<R: Reducer>(
        &self,
        observer: impl Fn(&R::Slice, &Event, Lsn) + Send + Sync + 'static,
    ) {
        let mut ordered = self.ordered.lock();
        let (_, slot) = ordered
            .hosts
            .iter_mut()
            .find(|(type_id, _)| *type_id == TypeId::of::<R>())
            .expect("reducer was registered with StoreBuilder::reducer");
        let observer: Observer = Arc::new(move |slice: &AnySlice, event: &Event, lsn: Lsn| {
            let slice = slice
                .downcast_ref::<R::Slice>()
                .expect("a host slot holds its reducer's slice type");
            observer(slice, event, lsn);
        });
        let mut observers = Vec::clone(&slot.observers);
        observers.push(observer);
        slot.observers = Arc::new(observers);
    }

    /// Whether host slices are served and appends accepted: the error a
    /// panicking reducer or observer, or a poisoned writer, left behind.
    pub fn health(&self) -> Result<()> {
        self.forget_taken_back();
        if self.host_poison.get().is_some() {
            return Err(self.host_poison_error());
        }
        if self.log.is_poisoned() {
            return Err(self.writer_error());
        }
        Ok(())
    }
}

impl StoreCore {
    /// Whether the poisoned writer took back the event at `lsn`.
    pub(super) fn taken_back(&self, lsn: Lsn) -> bool {
        self.log.taken_back_from().is_some_and(|from| lsn >= from)
    }

    /// Makes the index and the host slices forget whatever the writer took
    /// back after a failed fsync (frames acknowledged under
    /// `Durability::None` but never made durable): index entries at or
    /// after the cut are dropped, pending folds and observer notifications
    /// of them discarded, and host slices that already folded some of them
    /// are no longer served (`Error::Poisoned`; a reopen rebuilds them from
    /// what the log holds). Every read and append calls this first, so none
    /// sees the index or a host slice ahead of the log.
    pub(super) fn forget_taken_back(&self) {
        let Some(from) = self.log.taken_back_from() else {
            return;
        };
        if self.forgotten_from.load(Ordering::Acquire) == from {
            return;
        }
        {
            let mut state = self.state.write();
            for entries in state.index.values_mut() {
                entries.retain(|entry| entry.lsn < from);
            }
            state.index.retain(|_, entries| !entries.is_empty());
        }
        {
            let mut ordered = self.ordered.lock();
            ordered.pending.retain(|lsn, _| *lsn < from);
            if ordered.next_lsn > from {
                ordered.stopped = true;
                let _ = self
                    .host_poison
                    .set(HostPoison::TakenBack { from_lsn: from });
            }
            self.dispatch.lock().queue.retain(|note| note.lsn < from);
        }
        self.forgotten_from.store(from, Ordering::Release);
    }

    /// The poisoned writer's error.
    pub(super) fn writer_error(&self) -> Error {
        match self.log.sync() {
            Err(error) => error,
            Ok(()) => Error::Poisoned {
                store: self.log.dir().to_path_buf(),
                cause: "the writer took back events it had not made durable".to_string(),
            },
        }
    }

    /// Why host slices are not served.
    pub(super) fn host_poison_error(&self) -> Error {
        match self.host_poison.get() {
            Some(HostPoison::Panicked {
                reducer,
                observer,
                lsn,
                message,
            }) => Error::ReducerPanicked {
                reducer: reducer.clone(),
                observer: *observer,
                lsn: *lsn,
                message: message.clone(),
            },
            Some(HostPoison::TakenBack { from_lsn }) => match self.writer_error() {
                Error::Poisoned { store, cause } => Error::Poisoned {
                    store,
                    cause: format!(
                        "{cause}; the host slices had folded events from LSN {from_lsn} on, which the writer took back"
                    ),
                },
                other => other,
            },
            None => unreachable!("asked why the host slices are poisoned when they are not"),
        }
    }

    /// Stops serving host slices after a reducer or observer panicked.
    pub(super) fn poison_hosts(&self, error: Error) {
        tracing::error!(store = %self.log.dir().display(), error = %error, "host reducer panicked; the store is poisoned");
        if let Error::ReducerPanicked {
            reducer,
            observer,
            lsn,
            message,
        } = error
        {
            let _ = self.host_poison.set(HostPoison::Panicked {
                reducer,
                observer,
                lsn,
                message,
            });
        }
        self.ordered.lock().stopped = true;
        self.dispatch.lock().queue.clear();
    }

    /// Runs queued observer notifications, in LSN order, with no store lock
    /// held. One thread runs them at a time: a caller that finds another
    /// running returns (that one runs what this caller queued).
    pub(super) fn dispatch_observers(&self) {
        let mut dispatch = self.dispatch.lock();
        if dispatch.running {
            return;
        }
        dispatch.running = true;
        loop {
            let batch = std::mem::take(&mut dispatch.queue);
            if batch.is_empty() || self.host_poison.get().is_some() {
                dispatch.queue.clear();
                dispatch.running = false;
                return;
            }
            let panicked = MutexGuard::unlocked(&mut dispatch, || {
                for note in batch {
                    for observer in note.observers.iter() {
                        let call = || observer(note.slice.as_ref(), &note.event, note.lsn);
                        if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(call)) {
                            return Some(Error::ReducerPanicked {
                                reducer: note.reducer.to_string(),
                                observer: true,
                                lsn: note.lsn,
                                message: reducer::panic_message(payload.as_ref()),
                            });
                        }
                    }
                }
                None
            });
            if let Some(error) = panicked {
                dispatch.running = false;
                drop(dispatch);
                self.poison_hosts(error);
                return;
            }
        }
    }
}
