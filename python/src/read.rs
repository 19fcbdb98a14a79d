//! Reading raw events: `Store.events()` (what the log holds now) and
//! `Store.tail()` (follows the writer, waiting for its next events), on
//! the segment log and on any other log a store runs on (a JetStream
//! stream). An encrypted store's sealed events are opened on the way out.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convlog::log::{LogCursor, LogIter};
use convlog::model::Event;
use convlog::Store;
use parking_lot::Mutex;
use pyo3::prelude::*;

use crate::convert;
use crate::errors;

/// Events read per release of the GIL by `Store.events()`.
pub const EVENTS_BATCH: usize = 256;

/// The shortest wait between two checks for signals (Ctrl-C) in `tail()`.
pub const TAIL_POLL_MIN: Duration = Duration::from_millis(1);

/// The longest wait between two checks for signals in `tail()`, whatever
/// `poll_interval` says, so Ctrl-C is seen within it.
pub const TAIL_POLL_MAX: Duration = Duration::from_millis(500);

/// Which events a read keeps: one conversation's, and (when `kinds` is
/// given) only custom events of those kinds.
#[derive(Clone, Debug)]
pub struct EventFilter {
    conversation_id: Option<String>,
    kinds: Option<HashSet<String>>,
}

impl EventFilter {
    pub fn new(conversation_id: Option<String>, kinds: Option<Vec<String>>) -> EventFilter {
        EventFilter {
            conversation_id,
            kinds: kinds.map(|kinds| kinds.into_iter().collect()),
        }
    }

    /// Whether the event is of the conversation asked for (any, without
    /// one). Sealed events carry their conversation id in the clear, so
    /// this is asked before opening them.
    pub fn keeps_conversation(&self, event: &Event) -> bool {
        match &self.conversation_id {
            Some(id) => event.conversation_id() == Some(id.as_str()),
            None => true,
        }
    }

    pub fn keeps(&self, event: &Event) -> bool {
        if !self.keeps_conversation(event) {
            return false;
        }
        match (&self.kinds, event) {
            (None, _) => true,
            (Some(kinds), Event::Custom(custom)) => kinds.contains(&custom.kind),
            (Some(_), _) => false,
        }
    }
}

/// Opens an encrypted store's sealed events as they are read
/// (`Store::unseal_event`): a read returns the events as appended. An
/// erased conversation's events stay as stored (sealed: their key is
/// destroyed), as `convlog tail` and `convlog dump` show them.
#[derive(Clone)]
pub struct Opener {
    /// The store, when it is encrypted; `None`: events are returned as read.
    store: Option<Arc<Store>>,
}

impl Opener {
    pub fn new(store: &Arc<Store>) -> Opener {
        Opener {
            store: store.is_encrypted().then(|| store.clone()),
        }
    }

    /// The event at `lsn` in its plain form.
    pub fn open(&self, lsn: u64, event: Event) -> convlog::Result<Event> {
        match &self.store {
            Some(store) if convlog::erasure::is_sealed(&event) => {
                let stored = event.clone();
                match store.unseal_event(lsn, event) {
                    Err(convlog::Error::Erased { .. }) => Ok(stored),
                    opened => opened,
                }
            }
            _ => Ok(event),
        }
    }

    /// The next record's event if `filter` keeps it (opened), else `None`.
    fn kept(
        &self,
        filter: &EventFilter,
        record: convlog::log::Record,
    ) -> convlog::Result<Option<(u64, Event)>> {
        let event = record.event()?;
        if !filter.keeps_conversation(&event) {
            return Ok(None);
        }
        let event = self.open(record.lsn, event)?;
        Ok(filter.keeps(&event).then_some((record.lsn, event)))
    }
}

struct IterState {
    cursor: Box<dyn LogCursor>,
    buffer: VecDeque<(u64, Event)>,
    /// An error met after events still in the buffer: raised after them.
    pending_error: Option<convlog::Error>,
    done: bool,
}

/// The events of `Store.events()`: `(lsn, event)` in LSN order, up to the
/// end of the log when it was reached.
#[pyclass(module = "convlog._convlog", name = "EventIter", frozen)]
pub struct EventIter {
    state: Mutex<IterState>,
    filter: EventFilter,
    opener: Opener,
}

impl EventIter {
    pub fn new(cursor: Box<dyn LogCursor>, filter: EventFilter, opener: Opener) -> EventIter {
        EventIter {
            state: Mutex::new(IterState {
                cursor,
                buffer: VecDeque::new(),
                pending_error: None,
                done: false,
            }),
            filter,
            opener,
        }
    }

    fn fill(&self, state: &mut IterState) {
        while state.buffer.len() < EVENTS_BATCH && !state.done {
            let record = match state.cursor.next() {
                None => {
                    state.done = true;
                    break;
                }
                Some(Err(error)) => {
                    state.pending_error = Some(error);
                    state.done = true;
                    break;
                }
                Some(Ok(record)) => record,
            };
            match self.opener.kept(&self.filter, record) {
                Ok(Some(item)) => state.buffer.push_back(item),
                Ok(None) => {}
                Err(error) => {
                    state.pending_error = Some(error);
                    state.done = true;
                }
            }
        }
    }
}

#[pymethods]
impl EventIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<(u64, Py<PyAny>)>> {
        let next = py.detach(|| {
            let mut state = self.state.lock();
            if state.buffer.is_empty() {
                self.fill(&mut state);
            }
            match state.buffer.pop_front() {
                Some(item) => Ok(Some(item)),
                None => match state.pending_error.take() {
                    Some(error) => Err(error),
                    None => Ok(None),
                },
            }
        });
        match next.map_err(errors::to_py)? {
            Some((lsn, event)) => Ok(Some((lsn, convert::event_to_py(py, lsn, &event)?))),
            None => Ok(None),
        }
    }
}

/// What a tail reads: the segment log's own reader, which wakes as soon
/// as the writer's next frame is written; or the cursor of any other log
/// (a JetStream stream), asked again every poll interval.
enum Source {
    Segment(Box<LogIter>),
    Cursor(Box<dyn LogCursor>),
}

impl Source {
    /// The next record, waiting up to `wait` for one.
    fn wait_next(&mut self, wait: Duration) -> Option<convlog::Result<convlog::log::Record>> {
        match self {
            Source::Segment(iter) => iter.wait_next(wait),
            Source::Cursor(cursor) => {
                if let Some(record) = cursor.next() {
                    return Some(record);
                }
                // The cursor follows its log: after `None`, a later `next`
                // returns what was appended since.
                std::thread::sleep(wait);
                cursor.next()
            }
        }
    }
}

/// `Store.tail()`: follows the log, waiting for the writer's next events.
#[pyclass(module = "convlog._convlog", name = "Tail", frozen)]
pub struct Tail {
    source: Mutex<Source>,
    filter: EventFilter,
    opener: Opener,
    idle_timeout: Option<Duration>,
    poll_interval: Duration,
    next_lsn: AtomicU64,
    /// Keeps the store open while the tail reads through its writer.
    _store: Arc<Store>,
}

fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        errors::invalid_argument(format!(
            "{name} must be a number of seconds, at least 0, found {value}"
        ))
    })
}

impl Tail {
    pub fn open(
        py: Python<'_>,
        store: &Arc<Store>,
        from_lsn: Option<u64>,
        filter: EventFilter,
        idle_timeout: Option<f64>,
        poll_interval: f64,
    ) -> PyResult<Tail> {
        let idle_timeout = idle_timeout
            .map(|value| seconds("idle_timeout", value))
            .transpose()?;
        let poll_interval =
            seconds("poll_interval", poll_interval)?.clamp(TAIL_POLL_MIN, TAIL_POLL_MAX);
        let (source, start) = py
            .detach(|| -> convlog::Result<(Source, u64)> {
                let start = match from_lsn {
                    Some(lsn) => lsn.max(store.log().first_lsn()).max(1),
                    None => store.refresh()?,
                };
                let source = match store.log().reader() {
                    Some(reader) => Source::Segment(Box::new(reader.iter_from(start))),
                    None => Source::Cursor(store.log().iter_from(start)),
                };
                Ok((source, start))
            })
            .map_err(errors::to_py)?;
        Ok(Tail {
            source: Mutex::new(source),
            filter,
            opener: Opener::new(store),
            idle_timeout,
            poll_interval,
            next_lsn: AtomicU64::new(start),
            _store: store.clone(),
        })
    }
}

#[pymethods]
impl Tail {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next event the filter keeps, waiting for the writer; stops
    /// (`StopIteration`) after `idle_timeout` seconds without one.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<(u64, Py<PyAny>)>> {
        let started = Instant::now();
        loop {
            let remaining = self
                .idle_timeout
                .map(|idle| idle.saturating_sub(started.elapsed()));
            let wait = match remaining {
                Some(remaining) if remaining.is_zero() => return Ok(None),
                Some(remaining) => remaining.min(self.poll_interval),
                None => self.poll_interval,
            };
            let found = py
                .detach(|| -> convlog::Result<Option<(u64, Event)>> {
                    let mut source = self.source.lock();
                    loop {
                        let Some(record) = source.wait_next(wait) else {
                            return Ok(None);
                        };
                        let record = record?;
                        self.next_lsn.store(record.lsn + 1, Ordering::Relaxed);
                        if let Some(kept) = self.opener.kept(&self.filter, record)? {
                            return Ok(Some(kept));
                        }
                    }
                })
                .map_err(errors::to_py)?;
            if let Some((lsn, event)) = found {
                return Ok(Some((lsn, convert::event_to_py(py, lsn, &event)?)));
            }
            py.check_signals()?;
        }
    }

    /// One past the LSN of the last event read (kept or not).
    #[getter]
    fn next_lsn(&self) -> u64 {
        self.next_lsn.load(Ordering::Relaxed)
    }
}
