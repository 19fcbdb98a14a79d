//! Reducers: pure folds of events into slices.
//!
//! The built-in conversation fold lives in [`crate::conversation`] and runs
//! on demand, per conversation. Hosts register their own reducers (usually
//! over [`crate::model::CustomEvent`]s) when opening a store; their slices
//! are kept in memory, folded in LSN order as events are appended or
//! replayed, persisted in snapshots, and can be observed.
//!
//! A reducer must be pure and deterministic: no I/O, no clock, no
//! randomness. Snapshot + tail replay must equal a full replay.
//!
//! A reducer (or an observer) that panics does not take the store down with
//! it: the panic is caught and the store is poisoned with
//! [`Error::ReducerPanicked`], naming the reducer and the LSN. Host slices are
//! then no longer served and appends are refused until the store is reopened
//! (with a fixed reducer: a deterministic reducer panics again on replay, and
//! the open fails with the same error).

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;
use crate::error::Error;
use crate::log::Lsn;
use crate::model::Event;

/// A pure fold of events into a typed slice.
///
/// ```
/// use convlog::model::Event;
/// use convlog::reducer::Reducer;
///
/// /// Counts custom "tokens" events across all conversations.
/// struct TokenCounter;
///
/// impl Reducer for TokenCounter {
///     type Slice = u64;
///     fn name(&self) -> &str {
///         "token-counter/v1"
///     }
///     fn apply(&self, total: &mut u64, event: &Event, _lsn: u64) {
///         if let Event::Custom(custom) = event {
///             if custom.kind == "tokens" && custom.payload.len() == 8 {
///                 *total += u64::from_le_bytes(custom.payload[..8].try_into().unwrap());
///             }
///         }
///     }
/// }
/// ```
pub trait Reducer: Send + Sync + 'static {
    /// The state this reducer folds into.
    type Slice: Default + Clone + Send + Sync + Serialize + DeserializeOwned + 'static;

    /// A stable name: snapshots store the slice under it. Change it (e.g. add
    /// a version suffix) when the slice's shape changes; the slice is then
    /// rebuilt by replaying the log.
    fn name(&self) -> &str;

    /// Folds `event` (at `lsn`) into `slice`.
    fn apply(&self, slice: &mut Self::Slice, event: &Event, lsn: Lsn);
}

/// A slice with its type erased.
pub(crate) type AnySlice = dyn Any + Send + Sync;

/// A callback run after a slice changed: the slice, the event, its LSN.
pub(crate) type Observer = Arc<dyn Fn(&AnySlice, &Event, Lsn) + Send + Sync>;

/// A reducer with its type erased, so a store can hold several.
pub(crate) trait ErasedReducer: Send + Sync {
    fn name(&self) -> &str;
    fn new_slice(&self) -> Arc<AnySlice>;
    /// Folds `event` into `slice`, copying the slice first if anyone else
    /// (an observer notification or a snapshot) still holds it.
    fn apply(&self, slice: &mut Arc<AnySlice>, event: &Event, lsn: Lsn);
    fn encode(&self, slice: &AnySlice) -> Result<Vec<u8>, String>;
    fn decode(&self, bytes: &[u8]) -> Result<Arc<AnySlice>, String>;
}

struct Erased<R>(R);

impl<R: Reducer> ErasedReducer for Erased<R> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn new_slice(&self) -> Arc<AnySlice> {
        Arc::new(R::Slice::default())
    }

    fn apply(&self, slice: &mut Arc<AnySlice>, event: &Event, lsn: Lsn) {
        if Arc::get_mut(slice).is_none() {
            let copy = slice
                .downcast_ref::<R::Slice>()
                .expect("a host slot holds its reducer's slice type")
                .clone();
            *slice = Arc::new(copy);
        }
        let slice = Arc::get_mut(slice)
            .expect("copied above when shared")
            .downcast_mut::<R::Slice>()
            .expect("a host slot holds its reducer's slice type");
        self.0.apply(slice, event, lsn);
    }

    fn encode(&self, slice: &AnySlice) -> Result<Vec<u8>, String> {
        let slice = slice
            .downcast_ref::<R::Slice>()
            .expect("a host slot holds its reducer's slice type");
        codec::encode_value(slice)
    }

    fn decode(&self, bytes: &[u8]) -> Result<Arc<AnySlice>, String> {
        codec::decode_value::<R::Slice>(bytes).map(|slice| Arc::new(slice) as Arc<AnySlice>)
    }
}

/// Erases a reducer's type.
pub(crate) fn erase<R: Reducer>(reducer: R) -> Box<dyn ErasedReducer> {
    Box::new(Erased(reducer))
}

/// A registered reducer, its slice and its observers.
///
/// The slice is shared copy-on-write: observer notifications waiting for
/// dispatch and snapshots being encoded hold the version they were given,
/// while folding goes on.
pub(crate) struct HostSlot {
    pub(crate) reducer: Arc<dyn ErasedReducer>,
    pub(crate) name: Arc<str>,
    pub(crate) slice: Arc<AnySlice>,
    /// Replaced (not mutated) when an observer is added, so a notification
    /// keeps the observers registered when its event was folded.
    pub(crate) observers: Arc<Vec<Observer>>,
}

impl HostSlot {
    pub(crate) fn new(reducer: Box<dyn ErasedReducer>) -> HostSlot {
        let slice = reducer.new_slice();
        let name = Arc::from(reducer.name());
        HostSlot {
            reducer: Arc::from(reducer),
            name,
            slice,
            observers: Arc::new(Vec::new()),
        }
    }

    /// Folds `event` into the slice. A panicking reducer is caught and
    /// reported as [`Error::ReducerPanicked`]; its slice is then unusable.
    pub(crate) fn apply(&mut self, event: &Event, lsn: Lsn) -> Result<(), Error> {
        let (reducer, slice) = (&self.reducer, &mut self.slice);
        std::panic::catch_unwind(AssertUnwindSafe(|| reducer.apply(slice, event, lsn))).map_err(
            |payload| Error::ReducerPanicked {
                reducer: self.name.to_string(),
                observer: false,
                lsn,
                message: panic_message(payload.as_ref()),
            },
        )
    }
}

/// The text of a caught panic.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a text message".to_string()
    }
}
