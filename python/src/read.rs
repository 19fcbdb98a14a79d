//! Reading raw events: `Store.events()` (what the log holds now) and
//! `Store.tail()` (follows the writer, waiting for its next events).

use std::collections::{HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convlog::log::{LogCursor, LogIter, LogReader};
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

    pub fn keeps(&self, event: &Event) -> bool {
        if let Some(id) = &self.conversation_id {
            if event.conversation_id() != Some(id.as_str()) {
                return false;
            }
        }
        match (&self.kinds, event) {
            (None, _) => true,
            (Some(kinds), Event::Custom(custom)) => kinds.contains(&custom.kind),
            (Some(_), _) => false,
        }
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
}

impl EventIter {
    pub fn new(cursor: Box<dyn LogCursor>, filter: EventFilter) -> EventIter {
        EventIter {
            state: Mutex::new(IterState {
                cursor,
                buffer: VecDeque::new(),
                pending_error: None,
                done: false,
            }),
            filter,
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
            match record.event() {
                Ok(event) if self.filter.keeps(&event) => {
                    state.buffer.push_back((record.lsn, event));
                }
                Ok(_) => {}
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

/// `Store.tail()`: follows the log, waiting for the writer's next events.
#[pyclass(module = "convlog._convlog", name = "Tail", frozen)]
pub struct Tail {
    iter: Mutex<LogIter>,
    filter: EventFilter,
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
        dir: &Path,
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
        let (iter, start) = py
            .detach(|| -> convlog::Result<(LogIter, u64)> {
                let reader = match store.log().reader() {
                    Some(reader) => reader,
                    None => LogReader::open(dir)?,
                };
                let start = match from_lsn {
                    Some(lsn) => lsn.max(store.log().first_lsn()).max(1),
                    None => store.refresh()?,
                };
                Ok((reader.iter_from(start), start))
            })
            .map_err(errors::to_py)?;
        Ok(Tail {
            iter: Mutex::new(iter),
            filter,
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
                    let mut iter = self.iter.lock();
                    loop {
                        let Some(record) = iter.wait_next(wait) else {
                            return Ok(None);
                        };
                        let record = record?;
                        self.next_lsn.store(record.lsn + 1, Ordering::Relaxed);
                        let event = record.event()?;
                        if self.filter.keeps(&event) {
                            return Ok(Some((record.lsn, event)));
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
