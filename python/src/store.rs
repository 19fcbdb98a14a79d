//! `convlog.Store`: a store opened for writing (holding its lock) or
//! read-only (following the writer), with appends of JSON-form events and
//! reads of conversations and raw events. Every call that touches the store
//! runs with the GIL released.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use convlog::control::ContextsReducer;
use convlog::history::CurationScope;
use convlog::resume::PromptIdentity;
use convlog::{
    AppendOptions, Durability, Expect, ResumeOptions, Store, StoreBuilder, StoreOptions,
};
use std::collections::HashMap;

use convlog::model::Event;
use parking_lot::{Mutex, MutexGuard, RwLock};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyRange, PyTuple};
use serde_json::Value;

use crate::api::{self, PyHistoryManager};
use crate::control::PyMessageControl;
use crate::convert;
use crate::errors;
use crate::keys;
use crate::read::{EventFilter, EventIter, Opener, Tail};

/// The fsync interval of `durability="periodic"` when none is given, in
/// milliseconds (the CLI's default too).
pub const PERIODIC_INTERVAL_MS_DEFAULT: u64 = 100;

/// The durability named `name` (`group`, `sync`, `none`, `periodic`).
fn durability(name: &str, interval_ms: Option<u64>) -> PyResult<Durability> {
    if interval_ms.is_some() && name != "periodic" {
        return Err(errors::invalid_argument(format!(
            "interval_ms applies only to durability=\"periodic\", not {name:?}"
        )));
    }
    Ok(match name {
        "group" => Durability::Group,
        "sync" => Durability::Sync,
        "none" => Durability::None,
        "periodic" => {
            let interval = interval_ms.unwrap_or(PERIODIC_INTERVAL_MS_DEFAULT);
            if interval == 0 {
                return Err(errors::invalid_argument(
                    "interval_ms must be at least 1".to_string(),
                ));
            }
            Durability::Periodic(Duration::from_millis(interval))
        }
        other => {
            return Err(errors::invalid_argument(format!(
            "unknown durability {other:?} (expected \"group\", \"sync\", \"none\" or \"periodic\")"
        )))
        }
    })
}

/// A conversation's folded state: its entries in conversation order (in
/// the entry JSON form, each call with its current status), its evaluations
/// and the LSN of its last event (the version `expect_conversation` takes).
#[pyclass(module = "convlog._convlog", name = "Conversation", frozen)]
pub struct Conversation {
    /// The conversation's id.
    #[pyo3(get)]
    conversation_id: String,
    /// Its entries, as dicts in the entry JSON form.
    #[pyo3(get)]
    entries: Py<PyList>,
    /// Evaluation ids in order of first appearance.
    #[pyo3(get)]
    evaluations: Py<PyList>,
    /// The LSN of the conversation's last event (custom events aside).
    #[pyo3(get)]
    last_lsn: u64,
    /// What the fold found odd: dicts with `lsn`, `call_id`, `detail`.
    #[pyo3(get)]
    anomalies: Py<PyList>,
}

#[pymethods]
impl Conversation {
    fn __len__(&self, py: Python<'_>) -> usize {
        self.entries.bind(py).len()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Conversation(conversation_id={:?}, entries={}, last_lsn={})",
            self.conversation_id,
            self.entries.bind(py).len(),
            self.last_lsn
        )
    }
}

/// What a conversation read yields before it becomes Python objects
/// (computed with the GIL released).
pub struct ConversationData {
    conversation_id: String,
    entries: Vec<convlog::ConversationEntry>,
    evaluations: Vec<String>,
    last_lsn: u64,
    anomalies: Vec<Value>,
}

impl ConversationData {
    pub fn of(slice: &convlog::ConversationSlice) -> convlog::Result<ConversationData> {
        let entries = slice.entries().cloned().collect();
        let anomalies = slice
            .anomalies()
            .iter()
            .map(|anomaly| {
                serde_json::json!({
                    "lsn": anomaly.lsn, "call_id": anomaly.call_id, "detail": anomaly.detail,
                })
            })
            .collect();
        Ok(ConversationData {
            conversation_id: slice.conversation_id().to_string(),
            entries,
            evaluations: slice.evaluations().to_vec(),
            last_lsn: slice.last_lsn(),
            anomalies,
        })
    }

    pub fn into_py(self, py: Python<'_>) -> PyResult<Conversation> {
        let entries = PyList::empty(py);
        for entry in &self.entries {
            entries.append(convert::entry_to_py(py, entry)?)?;
        }
        let anomalies = PyList::empty(py);
        for anomaly in &self.anomalies {
            anomalies.append(convert::to_py(py, anomaly)?)?;
        }
        Ok(Conversation {
            conversation_id: self.conversation_id,
            entries: entries.unbind(),
            evaluations: PyList::new(py, &self.evaluations)?.unbind(),
            last_lsn: self.last_lsn,
            anomalies: anomalies.unbind(),
        })
    }
}

/// The most conversations whose next sequences [`SequenceCache`] keeps; past
/// it the cache starts again empty.
pub const SEQUENCE_CACHE_CONVERSATIONS_MAX: usize = 10_000;

/// The next free sequence of each evaluation of the conversations that
/// appends leaving sequences to the store have asked about, so such an
/// append folds a conversation once, not at every append (folding costs
/// what the conversation holds). Kept up to date by every append of this
/// `Store` (and dropped for a conversation message control writes to); an
/// entry that another path may have changed is dropped, never trusted.
#[derive(Default)]
pub struct SequenceCache {
    conversations: HashMap<String, HashMap<String, u64>>,
}

impl SequenceCache {
    /// The next sequence of `evaluation_id` in `conversation_id` (0 when
    /// either is new), folding the conversation on a miss.
    fn next(
        &mut self,
        store: &Store,
        conversation_id: &str,
        evaluation_id: &str,
    ) -> Result<u64, String> {
        if !self.conversations.contains_key(conversation_id) {
            let next = match store.conversation(conversation_id) {
                Ok(slice) => slice
                    .evaluations()
                    .iter()
                    .map(|evaluation| (evaluation.clone(), slice.next_sequence(evaluation)))
                    .collect(),
                // An erased conversation has no sequences to read: the
                // append itself then fails with `Erased`, as it should.
                Err(
                    convlog::Error::ConversationNotFound { .. } | convlog::Error::Erased { .. },
                ) => HashMap::new(),
                Err(error) => return Err(error.to_string()),
            };
            if self.conversations.len() >= SEQUENCE_CACHE_CONVERSATIONS_MAX {
                self.conversations.clear();
            }
            self.conversations.insert(conversation_id.to_string(), next);
        }
        Ok(self.conversations[conversation_id]
            .get(evaluation_id)
            .copied()
            .unwrap_or(0))
    }

    /// Takes in the sequences of an appended batch.
    fn appended(&mut self, events: &[Event]) {
        for event in events {
            match event {
                Event::ConversationRecorded(recorded) => {
                    if let Some(next) = self.conversations.get_mut(&recorded.conversation_id) {
                        let floor = next
                            .entry(recorded.entry.evaluation_id.clone())
                            .or_insert(0);
                        *floor = (*floor).max(recorded.entry.sequence.saturating_add(1));
                    }
                }
                Event::MessagesReplaced(replaced) => {
                    self.conversations.remove(&replaced.conversation_id);
                }
                _ => {}
            }
        }
    }

    /// Forgets a conversation (written by another path).
    pub fn forget(&mut self, conversation_id: &str) {
        self.conversations.remove(conversation_id);
    }
}

/// Converts a list of event dicts into the JSON text of one batch, or the
/// `InvalidEventError` naming the event and field.
pub fn batch_text(py: Python<'_>, events: &Bound<'_, PyAny>) -> PyResult<String> {
    if events.cast::<PyDict>().is_ok() {
        return Err(errors::invalid_event(
            py,
            "events: expected a list of events (dicts), found one dict: wrap it in a list"
                .to_string(),
            None,
            None,
            "expected a list of events, found a dict".to_string(),
        ));
    }
    let items: Vec<Bound<'_, PyAny>> = if let Ok(list) = events.cast::<PyList>() {
        list.iter().collect()
    } else if let Ok(tuple) = events.cast::<PyTuple>() {
        tuple.iter().collect()
    } else {
        events
            .try_iter()
            .map_err(|_| {
                let found = events
                    .get_type()
                    .name()
                    .map(|name| name.to_string())
                    .unwrap_or_default();
                errors::invalid_event(
                    py,
                    format!("events: expected a list of events (dicts), found {found}"),
                    None,
                    None,
                    format!("expected a list of events, found {found}"),
                )
            })?
            .collect::<PyResult<Vec<_>>>()?
    };
    let mut values = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        if item.cast::<PyDict>().is_err() {
            let found = item
                .get_type()
                .name()
                .map(|name| name.to_string())
                .unwrap_or_default();
            return Err(errors::invalid_event(
                py,
                format!("events[{index}]: expected an event (a dict), found {found}"),
                Some(index),
                None,
                format!("expected an event (a dict), found {found}"),
            ));
        }
        let value = convert::to_value(item, "", Some("payload"), 0).map_err(|fault| {
            errors::invalid_event(
                py,
                format!("events[{index}].{}: {}", fault.field, fault.reason),
                Some(index),
                Some(fault.field.clone()),
                fault.reason,
            )
        })?;
        values.push(value);
    }
    serde_json::to_string(&Value::Array(values))
        .map_err(|error| errors::invalid_argument(format!("events: {error}")))
}

/// A read of one conversation's raw events (`events`, `tail`) fails with
/// `ErasedError` when that conversation was erased, as its other reads do
/// (reads of the whole log show an erased conversation's events sealed).
fn refuse_erased(store: &Store, conversation_id: Option<&str>) -> PyResult<()> {
    match conversation_id {
        Some(id) if store.is_erased(id) => Err(errors::to_py(convlog::Error::Erased {
            conversation_id: id.to_string(),
        })),
        _ => Ok(()),
    }
}

/// Opens the JetStream store at `url` (`nats://host:port[,host:port...]/STORE`,
/// docs/scale-out.md) with its snapshots in the store's bucket and the
/// contexts reducer; the replica count of a new store from
/// `CONVLOG_NATS_REPLICAS`.
#[cfg(feature = "nats")]
fn open_url(url: &str, options: StoreOptions, read_only: bool) -> convlog::Result<Store> {
    refuse_keys_on_url(url, &options)?;
    let nats = convlog_nats::options_from_env()?;
    convlog_nats::open_store_shared_with(url, options, nats, read_only, |builder| {
        builder.reducer(ContextsReducer)
    })
}

/// Encryption at rest and tamper evidence need the segment log: refused
/// on a store URL, as the CLI refuses them.
#[cfg(feature = "nats")]
fn refuse_keys_on_url(url: &str, options: &StoreOptions) -> convlog::Result<()> {
    if options.encryption.is_some() {
        return Err(convlog::Error::InvalidOption {
            option: "key_file",
            reason: format!(
                "{url}: encryption at rest (a store key) is not supported on a JetStream store yet"
            ),
        });
    }
    if options.log.tamper.is_some() {
        return Err(convlog::Error::InvalidOption {
            option: "tamper_key_file",
            reason: format!(
                "{url}: tamper evidence (a tamper key) is not supported on a JetStream store yet"
            ),
        });
    }
    Ok(())
}

/// Without the `nats` feature a store URL is refused.
#[cfg(not(feature = "nats"))]
fn open_url(url: &str, _options: StoreOptions, _read_only: bool) -> convlog::Result<Store> {
    Err(convlog::Error::InvalidOption {
        option: "path",
        reason: format!(
            "{url:?} is a store URL, but this build of the convlog package has no JetStream support (the `nats` feature of python/Cargo.toml)"
        ),
    })
}

/// A convlog store: the event log, conversations folded from it, and
/// snapshots. See docs/python.md.
#[pyclass(module = "convlog._convlog", name = "Store", frozen)]
pub struct PyStore {
    dir: PathBuf,
    read_only: bool,
    /// Where the writer publishes its checkpoints (`checkpoint_file`):
    /// `close()` signs a last one there.
    checkpoint_file: Option<PathBuf>,
    /// The host's callable for checkpoints (`on_checkpoint`), handed the
    /// ones a call made when it returns.
    feed: keys::CheckpointFeed,
    inner: RwLock<Option<Arc<Store>>>,
    /// Held by appends that leave a sequence for the store to fill, from
    /// reading the next sequence until the batch is appended, so two such
    /// appends of one evaluation never get the same sequence; taken briefly
    /// after other appends to keep the cache up to date.
    sequences: Arc<Mutex<SequenceCache>>,
}

impl PyStore {
    /// The open store, or `StoreClosedError`.
    pub fn store(&self, py: Python<'_>) -> PyResult<Arc<Store>> {
        self.inner
            .read()
            .clone()
            .ok_or_else(|| errors::closed(py, &self.dir))
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

#[pymethods]
impl PyStore {
    /// Opens (creating if need be) the store at `path`; with `key_file`
    /// an encrypted store (docs/erasure.md), with `tamper_key_file` a
    /// tamper-evident one (docs/tamper.md).
    #[staticmethod]
    #[pyo3(signature = (path, durability="group", read_only=false, *, interval_ms=None, snapshot_every_events=None, key_file=None, tamper_key_file=None, checkpoint_file=None, checkpoint_every_events=None, on_checkpoint=None))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        durability: &str,
        read_only: bool,
        interval_ms: Option<u64>,
        snapshot_every_events: Option<u64>,
        key_file: Option<PathBuf>,
        tamper_key_file: Option<PathBuf>,
        checkpoint_file: Option<PathBuf>,
        checkpoint_every_events: Option<u64>,
        on_checkpoint: Option<Py<PyAny>>,
    ) -> PyResult<PyStore> {
        if let Some(callable) = &on_checkpoint {
            if !callable.bind(py).is_callable() {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "on_checkpoint must be a callable taking the checkpoint dict",
                ));
            }
        }
        let mut options =
            StoreOptions::new().durability(self::durability(durability, interval_ms)?);
        if snapshot_every_events.is_some() {
            options = options.snapshot_every_events(snapshot_every_events);
        }
        let tamper = keys::TamperArgs {
            key_file: tamper_key_file,
            checkpoint_file: checkpoint_file.clone(),
            checkpoint_every_events,
            on_checkpoint: on_checkpoint.is_some(),
        };
        let feed = keys::CheckpointFeed::new(on_checkpoint, checkpoint_file.clone());
        let dir = path.clone();
        let is_url = dir.to_str().is_some_and(|text| text.starts_with("nats://"));
        let store = py
            .detach(|| -> convlog::Result<Store> {
                let options = options
                    .encryption(keys::store_key(key_file.as_deref())?)
                    .tamper(
                        tamper
                            .options(read_only)?
                            .map(|options| feed.attach(options)),
                    );
                if is_url {
                    return open_url(&dir.to_string_lossy(), options, read_only);
                }
                // Every store registers the contexts reducer, as the CLI's
                // do, so message control works on any of them.
                let builder = StoreBuilder::new(&dir)
                    .options(options)
                    .reducer(ContextsReducer);
                if read_only {
                    builder.open_read_only()
                } else {
                    builder.open()
                }
            })
            .map_err(errors::to_py)?;
        Ok(PyStore {
            dir: path,
            read_only,
            checkpoint_file,
            feed,
            inner: RwLock::new(Some(Arc::new(store))),
            sequences: Arc::new(Mutex::new(SequenceCache::default())),
        })
    }

    /// Closes the store: releases the writer's lock (once no call in another
    /// thread still uses it). Idempotent.
    ///
    /// A tamper-evident store opened with `checkpoint_file` or
    /// `on_checkpoint` signs a last checkpoint first, covering everything
    /// appended (as the CLI does when a command ends); if that fails, the
    /// store is closed all the same and the error raised.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.inner.write().take();
        let sign = (self.checkpoint_file.is_some() || self.feed.is_some()) && !self.read_only;
        let closed = py
            .detach(move || -> convlog::Result<()> {
                let signed = match &store {
                    Some(store) if sign && store.is_tamper_evident() => {
                        store.checkpoint().map(drop)
                    }
                    _ => Ok(()),
                };
                drop(store);
                signed
            })
            .map_err(errors::to_py);
        let delivered = self.feed.deliver(py);
        closed.and(delivered)
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().is_none()
    }

    /// The store directory, as given to `open`.
    #[getter]
    fn path(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }

    /// Whether the store was opened read-only.
    #[getter]
    fn read_only(&self) -> bool {
        self.read_only
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the store; exceptions propagate.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "convlog.Store({:?}{}{})",
            self.dir.display().to_string(),
            if self.read_only {
                ", read_only=True"
            } else {
                ""
            },
            if self.inner.read().is_none() {
                ", closed"
            } else {
                ""
            }
        )
    }

    /// Appends `events` (dicts in the JSON form of docs/events.md) as one
    /// atomic batch; returns the LSNs it got as a `range`.
    #[pyo3(signature = (events, expect_conversation=None))]
    fn append<'py>(
        &self,
        py: Python<'py>,
        events: &Bound<'py, PyAny>,
        expect_conversation: Option<(String, u64)>,
    ) -> PyResult<Bound<'py, PyRange>> {
        let store = self.store(py)?;
        let text = batch_text(py, events)?;
        let lsns = py
            .detach(|| {
                let mut held: Option<MutexGuard<'_, SequenceCache>> = None;
                let events =
                    convlog::json::parse_line(1, &text, &mut |conversation, evaluation| {
                        held.get_or_insert_with(|| self.sequences.lock()).next(
                            &store,
                            conversation,
                            evaluation,
                        )
                    })?;
                let mut options = AppendOptions::new();
                if let Some((conversation_id, last_lsn)) = expect_conversation {
                    options = options.expect(Expect::conversation(conversation_id, last_lsn));
                }
                let lsns = store.append_with(&events, options)?;
                held.get_or_insert_with(|| self.sequences.lock())
                    .appended(&events);
                Ok(lsns)
            })
            .map_err(errors::to_py);
        let delivered = self.feed.deliver(py);
        let lsns = lsns?;
        delivered?;
        PyRange::new(py, lsns.start as isize, lsns.end as isize)
    }

    /// The conversation's folded state; `ConversationNotFoundError` if no
    /// event of it was ever recorded.
    fn conversation(&self, py: Python<'_>, conversation_id: &str) -> PyResult<Conversation> {
        let store = self.store(py)?;
        let data = py
            .detach(|| ConversationData::of(&store.conversation(conversation_id)?))
            .map_err(errors::to_py)?;
        data.into_py(py)
    }

    /// Whether any event of the conversation was recorded.
    fn contains_conversation(&self, py: Python<'_>, conversation_id: &str) -> PyResult<bool> {
        let store = self.store(py)?;
        Ok(py.detach(|| store.contains_conversation(conversation_id)))
    }

    /// Every conversation's id, sorted.
    fn conversation_ids(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let store = self.store(py)?;
        let mut ids = py.detach(|| store.conversation_ids());
        ids.sort();
        Ok(ids)
    }

    /// The events from `from_lsn` on, in LSN order, as `(lsn, event)`.
    #[pyo3(signature = (from_lsn=0, *, conversation_id=None, kinds=None))]
    fn events(
        &self,
        py: Python<'_>,
        from_lsn: u64,
        conversation_id: Option<String>,
        kinds: Option<Vec<String>>,
    ) -> PyResult<EventIter> {
        let store = self.store(py)?;
        refuse_erased(&store, conversation_id.as_deref())?;
        let filter = EventFilter::new(conversation_id, kinds);
        let cursor = py.detach(|| {
            let first = store.log().first_lsn();
            store.log().iter_from(from_lsn.max(first).max(1))
        });
        Ok(EventIter::new(cursor, filter, Opener::new(&store)))
    }

    /// The event at `lsn`; `EventNotFoundError` (a `KeyError`) if the log
    /// holds none there.
    fn event(&self, py: Python<'_>, lsn: u64) -> PyResult<Py<PyAny>> {
        let store = self.store(py)?;
        let found = py
            .detach(|| -> convlog::Result<Option<Event>> {
                if lsn == 0 {
                    return Ok(None);
                }
                let mut cursor = store.log().iter_from(lsn);
                match cursor.next() {
                    Some(record) => {
                        let record = record?;
                        if record.lsn != lsn {
                            return Ok(None);
                        }
                        // An erased conversation's event: `Erased`.
                        Ok(Some(store.unseal_event(lsn, record.event()?)?))
                    }
                    None => Ok(None),
                }
            })
            .map_err(errors::to_py)?;
        match found {
            Some(event) => convert::event_to_py(py, lsn, &event),
            None => Err(errors::raise(
                py,
                "EventNotFoundError",
                "EventNotFound",
                format!("store {} holds no event at LSN {lsn}", self.dir.display()),
                &[("lsn", lsn.into_pyobject(py)?.into_any().unbind())],
            )),
        }
    }

    /// Follows the log: an iterator of `(lsn, event)` that waits for the
    /// writer's next events (see docs/python.md).
    #[pyo3(signature = (from_lsn=None, *, conversation_id=None, kinds=None, idle_timeout=None, poll_interval=0.05))]
    fn tail(
        &self,
        py: Python<'_>,
        from_lsn: Option<u64>,
        conversation_id: Option<String>,
        kinds: Option<Vec<String>>,
        idle_timeout: Option<f64>,
        poll_interval: f64,
    ) -> PyResult<Tail> {
        let store = self.store(py)?;
        refuse_erased(&store, conversation_id.as_deref())?;
        Tail::open(
            py,
            &store,
            from_lsn,
            EventFilter::new(conversation_id, kinds),
            idle_timeout,
            poll_interval,
        )
    }

    /// The LSN the next event will get (read-only: one past the last event
    /// read so far).
    #[getter]
    fn next_lsn(&self, py: Python<'_>) -> PyResult<u64> {
        let store = self.store(py)?;
        Ok(store.log().next_lsn())
    }

    /// Makes every acknowledged event durable (for `durability="none"`).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.store(py)?;
        py.detach(|| store.sync()).map_err(errors::to_py)
    }

    /// Read-only store: catches up with what the writer appended; returns
    /// the next LSN. A writer returns its next LSN.
    fn refresh(&self, py: Python<'_>) -> PyResult<u64> {
        let store = self.store(py)?;
        py.detach(|| store.refresh()).map_err(errors::to_py)
    }

    /// What a host needs to resume an evaluation (the latest one unless
    /// `evaluation_id`): its entries, the calls to run again
    /// (`unfinished_calls`), the ones never to run again (`finished_calls`,
    /// with their results), `next_sequence`, `turn`, `next_turn`, `finished`.
    /// With `prompt=(namespace, key)`, the evaluation's system entry must
    /// carry that prompt identity, or `PromptMismatchError`.
    #[pyo3(signature = (conversation_id, *, evaluation_id=None, prompt=None))]
    fn resume(
        &self,
        py: Python<'_>,
        conversation_id: &str,
        evaluation_id: Option<String>,
        prompt: Option<(Option<String>, Option<String>)>,
    ) -> PyResult<Py<PyAny>> {
        let store = self.store(py)?;
        let options = ResumeOptions::new()
            .evaluation_id(evaluation_id)
            .prompt(prompt.map(|(namespace, key)| PromptIdentity { namespace, key }));
        let value = py
            .detach(|| {
                let state = store.resume(conversation_id, &options)?;
                serde_json::to_value(&state).map_err(|error| convlog::Error::JsonEncode {
                    lsn: 0,
                    reason: error.to_string(),
                })
            })
            .map_err(errors::to_py)?;
        convert::to_py(py, &value)
    }

    /// The recorded result entry of call `call_id`, or None: a host about
    /// to re-run a mutating tool returns this instead of acting twice.
    fn recorded_result(
        &self,
        py: Python<'_>,
        conversation_id: &str,
        call_id: &str,
    ) -> PyResult<Py<PyAny>> {
        let store = self.store(py)?;
        let entry = py
            .detach(|| store.recorded_result(conversation_id, call_id))
            .map_err(errors::to_py)?;
        match entry {
            Some(entry) => Ok(api::entries_to_py(py, &[entry])?
                .bind(py)
                .get_item(0)?
                .unbind()),
            None => Ok(py.None()),
        }
    }

    /// Renders the conversation (one evaluation's entries with
    /// `evaluation_id`) as `provider`'s request: `{"provider", "body",
    /// "messages", "system", "unfinished_calls", "skipped_results"}`. With
    /// `history`, the entries are curated first (and, with
    /// `record_curation`, a `history_curated` event records what was shown).
    #[pyo3(signature = (conversation_id, provider, *, evaluation_id=None, history=None, record_curation=false, pending="drop", default_system_prompt=None, display_name=None, include_reasoning=true, openai_reasoning_content=false))]
    #[allow(clippy::too_many_arguments)]
    fn render(
        &self,
        py: Python<'_>,
        conversation_id: &str,
        provider: &str,
        evaluation_id: Option<String>,
        history: Option<PyHistoryManager>,
        record_curation: bool,
        pending: &str,
        default_system_prompt: Option<String>,
        display_name: Option<(String, String)>,
        include_reasoning: bool,
        openai_reasoning_content: bool,
    ) -> PyResult<Py<PyAny>> {
        let store = self.store(py)?;
        let provider = api::provider(provider)?;
        let options = api::render_options(
            pending,
            default_system_prompt,
            display_name,
            include_reasoning,
            openai_reasoning_content,
        )?;
        api::take_manager_error();
        let value = py
            .detach(|| -> convlog::Result<Value> {
                let mut entries: Vec<convlog::ConversationEntry> = match &history {
                    Some(manager) => {
                        api::curate_stored(
                            &store,
                            conversation_id,
                            manager.manager.as_ref(),
                            record_curation,
                            &CurationScope::new(),
                        )?
                        .0
                    }
                    None => store
                        .conversation(conversation_id)?
                        .entries()
                        .cloned()
                        .collect(),
                };
                if let Some(evaluation_id) = &evaluation_id {
                    entries.retain(|entry| &entry.evaluation_id == evaluation_id);
                }
                let request = convlog::render(provider, &entries, &options)?;
                Ok(api::rendered_value(&request))
            })
            .map_err(errors::to_py);
        let delivered = self.feed.deliver(py);
        let value = api::after_managers(value)??;
        delivered?;
        convert::to_py(py, &value)
    }

    /// Curates the stored conversation with `manager`; with `record` (the
    /// default) records a `history_curated` event. Returns `{"entries",
    /// "strategy", "original_count", "curated_count", "lsn"}`.
    #[pyo3(signature = (conversation_id, manager, *, record=true, prompt_name=None, session_id=None))]
    fn curate(
        &self,
        py: Python<'_>,
        conversation_id: &str,
        manager: PyHistoryManager,
        record: bool,
        prompt_name: Option<String>,
        session_id: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let store = self.store(py)?;
        let mut scope = CurationScope::new();
        if let Some(prompt_name) = prompt_name {
            scope = scope.prompt_name(prompt_name);
        }
        if let Some(session_id) = session_id {
            scope = scope.session_id(session_id);
        }
        api::take_manager_error();
        let curated = py
            .detach(|| {
                api::curate_stored(
                    &store,
                    conversation_id,
                    manager.manager.as_ref(),
                    record,
                    &scope,
                )
            })
            .map_err(errors::to_py);
        let delivered = self.feed.deliver(py);
        let (entries, strategy, original_count, lsn) = api::after_managers(curated)??;
        delivered?;
        let dict = PyDict::new(py);
        dict.set_item("curated_count", entries.len())?;
        dict.set_item("entries", api::entries_to_py(py, &entries)?)?;
        dict.set_item("strategy", strategy)?;
        dict.set_item("original_count", original_count)?;
        dict.set_item("lsn", lsn)?;
        Ok(dict.into_any().unbind())
    }

    /// Message control over this store (contexts, validated adds and sets,
    /// generation), curating what the model is shown with `history`.
    #[pyo3(signature = (history=None))]
    fn message_control(
        &self,
        py: Python<'_>,
        history: Option<PyHistoryManager>,
    ) -> PyResult<PyMessageControl> {
        Ok(PyMessageControl::new(
            self.store(py)?,
            history,
            self.sequences.clone(),
            self.feed.clone(),
        ))
    }

    /// Writes a snapshot now; returns its LSN.
    fn snapshot(&self, py: Python<'_>) -> PyResult<u64> {
        let store = self.store(py)?;
        py.detach(|| store.snapshot().map(|info| info.lsn))
            .map_err(errors::to_py)
    }

    /// Erases a conversation of an encrypted store (docs/erasure.md):
    /// records who asked (`by`) in a `convlog.erased` event, then destroys
    /// the conversation's key, so its content can never be read again.
    /// Returns `{"conversation_id", "by", "at", "lsn", "erased_before"}`
    /// (`lsn` None and `erased_before` True when it was erased already).
    fn erase(&self, py: Python<'_>, conversation_id: &str, by: &str) -> PyResult<Py<PyAny>> {
        let characters = by.chars().count();
        if characters > keys::ERASE_BY_CHARS_MAX {
            return Err(errors::to_py(convlog::Error::LimitExceeded {
                what: "characters of the erasure's `by`",
                actual: characters as u64,
                limit: keys::ERASE_BY_CHARS_MAX as u64,
                constant: "ERASE_BY_CHARS_MAX",
            }));
        }
        let store = self.store(py)?;
        let report = py
            .detach(|| store.erase(conversation_id, by))
            .map_err(errors::to_py);
        self.sequences.lock().forget(conversation_id);
        let delivered = self.feed.deliver(py);
        let report = report?;
        delivered?;
        let value = match (&report.erasure, report.lsn) {
            (Some(erasure), Some(lsn)) => serde_json::json!({
                "conversation_id": erasure.conversation_id,
                "by": erasure.by,
                "at": erasure.at,
                "lsn": lsn,
                "erased_before": false,
            }),
            _ => serde_json::json!({
                "conversation_id": conversation_id,
                "by": null,
                "at": null,
                "lsn": null,
                "erased_before": true,
            }),
        };
        convert::to_py(py, &value)
    }

    /// Whether the store was opened with a store key (`key_file`): its
    /// new conversations are sealed, and `erase` works.
    #[getter]
    fn encrypted(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.store(py)?.is_encrypted())
    }

    /// The conversations erased (or being erased), sorted.
    fn erased_conversations(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let store = self.store(py)?;
        Ok(py.detach(|| store.erased_conversations()))
    }

    /// Whether `conversation_id` was erased.
    fn is_erased(&self, py: Python<'_>, conversation_id: &str) -> PyResult<bool> {
        let store = self.store(py)?;
        Ok(py.detach(|| store.is_erased(conversation_id)))
    }

    /// Whether this store is a tamper-evident store written here (one
    /// `checkpoint()` can sign).
    #[getter]
    fn tamper_evident(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.store(py)?.is_tamper_evident())
    }

    /// Signs a checkpoint now (docs/tamper.md): makes everything appended
    /// durable, publishes it to `checkpoint_file` if one was given, and
    /// returns it: `{"lsn", "epoch", "store_id", "digest", "text", "path"}`.
    fn checkpoint(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let store = self.store(py)?;
        let checkpoint = py.detach(|| store.checkpoint()).map_err(errors::to_py);
        let delivered = self.feed.deliver(py);
        let checkpoint = checkpoint?;
        delivered?;
        convert::to_py(
            py,
            &keys::checkpoint_value(&checkpoint, self.checkpoint_file.as_deref()),
        )
    }
}
