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

use std::any::Any;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;
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

type AnySlice = dyn Any + Send + Sync;

/// A callback run after a slice changed: the slice, the event, its LSN.
pub(crate) type Observer = Box<dyn Fn(&AnySlice, &Event, Lsn) + Send + Sync>;

/// A reducer with its type erased, so a store can hold several.
pub(crate) trait ErasedReducer: Send + Sync {
    fn name(&self) -> &str;
    fn new_slice(&self) -> Box<AnySlice>;
    fn apply(&self, slice: &mut AnySlice, event: &Event, lsn: Lsn);
    fn encode(&self, slice: &AnySlice) -> Result<Vec<u8>, String>;
    fn decode(&self, bytes: &[u8]) -> Result<Box<AnySlice>, String>;
}

struct Erased<R>(R);

impl<R: Reducer> ErasedReducer for Erased<R> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn new_slice(&self) -> Box<AnySlice> {
        Box::new(R::Slice::default())
    }

    fn apply(&self, slice: &mut AnySlice, event: &Event, lsn: Lsn) {
        let slice = slice
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

    fn decode(&self, bytes: &[u8]) -> Result<Box<AnySlice>, String> {
        codec::decode_value::<R::Slice>(bytes).map(|slice| Box::new(slice) as Box<AnySlice>)
    }
}

/// Erases a reducer's type.
pub(crate) fn erase<R: Reducer>(reducer: R) -> Box<dyn ErasedReducer> {
    Box::new(Erased(reducer))
}

/// A registered reducer, its slice and its observers.
pub(crate) struct HostSlot {
    pub(crate) reducer: Box<dyn ErasedReducer>,
    pub(crate) slice: Box<AnySlice>,
    pub(crate) observers: Vec<Observer>,
}

impl HostSlot {
    pub(crate) fn new(reducer: Box<dyn ErasedReducer>) -> HostSlot {
        let slice = reducer.new_slice();
        HostSlot {
            reducer,
            slice,
            observers: Vec::new(),
        }
    }

    pub(crate) fn apply(&mut self, event: &Event, lsn: Lsn) {
        self.reducer.apply(self.slice.as_mut(), event, lsn);
        for observer in &self.observers {
            observer(self.slice.as_ref(), event, lsn);
        }
    }
}
