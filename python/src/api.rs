//! Resume, provider renders and history managers: the parts of the
//! Rust embedding API beyond appending and reading (docs/embedding.md).

use std::cell::RefCell;
use std::str::FromStr;
use std::sync::Arc;

use convlog::history::{
    self, ApproximateTokens, Composed, CurationContext, CurationScope, Passthrough, SlidingWindow,
    SummaryPlaceholder, TokenBudget, ToolPruning, ToolResultTruncator,
};
use convlog::model::{ConversationEntry, Event, Timestamp};
use convlog::provider::{DisplayName, PendingCalls, SkipReason};
use convlog::{Provider, RenderOptions, RenderedRequest};
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde_json::{json, Value};

use crate::convert;
use crate::errors;

/// The conversation id the entries of `render()` and `HistoryManager.curate()`
/// are parsed under (they are checked as a `messages_replaced` event's).
const UNSTORED_CONVERSATION: &str = "convlog.python";

/// Entries (dicts in the entry JSON form) as neutral entries, with the
/// defaults of docs/events.md filled; `InvalidEventError` naming
/// `entries[i].field` otherwise.
pub fn entries_from_py(
    py: Python<'_>,
    entries: &Bound<'_, PyAny>,
) -> PyResult<Vec<ConversationEntry>> {
    let items: Vec<Bound<'_, PyAny>> = entries
        .try_iter()
        .map_err(|_| {
            errors::invalid_event(
                py,
                "entries: expected a list of entries (dicts)".to_string(),
                None,
                None,
                "expected a list of entries (dicts)".to_string(),
            )
        })?
        .collect::<PyResult<_>>()?;
    let mut values = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let path = format!("entries[{index}]");
        values.push(convert::to_value(item, &path, None, 0).map_err(|fault| {
            errors::invalid_event(
                py,
                format!("{}: {}", fault.field, fault.reason),
                Some(index),
                Some(inner_field(&fault.field)),
                fault.reason,
            )
        })?);
    }
    let event = json!({
        "type": "messages_replaced",
        "conversation_id": UNSTORED_CONVERSATION,
        "entries": values,
    });
    let text = event.to_string();
    let parsed = py.detach(|| convlog::json::parse_line(1, &text, &mut |_, _| Ok(0)));
    match parsed {
        Ok(mut events) => match events.pop() {
            Some(Event::MessagesReplaced(replaced)) => Ok(replaced.entries),
            _ => Ok(Vec::new()),
        },
        Err(convlog::Error::InvalidLine {
            field: Some(field),
            reason,
            ..
        }) if field.starts_with("entries[") => {
            let index = field["entries[".len()..]
                .split(']')
                .next()
                .and_then(|index| index.parse::<usize>().ok());
            Err(errors::invalid_event(
                py,
                format!("{field}: {reason}"),
                index,
                Some(inner_field(&field)),
                reason,
            ))
        }
        Err(error) => Err(errors::to_py(error)),
    }
}

/// `entries[2].role` → `role`.
fn inner_field(field: &str) -> String {
    match field.split_once("].") {
        Some((_, inner)) => inner.to_string(),
        None => String::new(),
    }
}

/// Entries as a Python list of dicts.
pub fn entries_to_py(py: Python<'_>, entries: &[ConversationEntry]) -> PyResult<Py<PyList>> {
    let list = PyList::empty(py);
    for entry in entries {
        list.append(convert::entry_to_py(py, entry)?)?;
    }
    Ok(list.unbind())
}

pub fn provider(name: &str) -> PyResult<Provider> {
    Provider::from_str(name).map_err(errors::invalid_argument)
}

/// The render options of the Python keyword arguments.
pub fn render_options(
    pending: &str,
    default_system_prompt: Option<String>,
    display_name: Option<(String, String)>,
    include_reasoning: bool,
    openai_reasoning_content: bool,
) -> PyResult<RenderOptions> {
    let pending = PendingCalls::from_str(pending).map_err(errors::invalid_argument)?;
    Ok(RenderOptions::new()
        .pending(pending)
        .default_system_prompt(default_system_prompt)
        .display_name(display_name.map(|(placeholder, name)| DisplayName::new(placeholder, name)))
        .include_reasoning(include_reasoning)
        .openai_reasoning_content(openai_reasoning_content))
}

/// A rendered request as JSON: the body and what the pending-call rule did.
pub fn rendered_value(request: &RenderedRequest) -> Value {
    let skipped: Vec<Value> = request
        .skipped_results
        .iter()
        .map(|skipped| {
            json!({
                "message_id": skipped.message_id.to_string(),
                "call_id": skipped.call_id,
                "reason": match skipped.reason {
                    SkipReason::NoMatchingCall => "no_matching_call",
                    SkipReason::DuplicateResult => "duplicate_result",
                },
            })
        })
        .collect();
    json!({
        "provider": request.provider.name(),
        "body": request.body(),
        "messages": request.messages,
        "system": request.system,
        "unfinished_calls": request.unfinished_calls,
        "skipped_results": skipped,
    })
}

/// Renders `entries` (dicts in the entry JSON form) as `provider`'s request.
#[pyfunction]
#[pyo3(signature = (provider, entries, *, pending="drop", default_system_prompt=None, display_name=None, include_reasoning=true, openai_reasoning_content=false))]
#[allow(clippy::too_many_arguments)]
pub fn render(
    py: Python<'_>,
    provider: &str,
    entries: &Bound<'_, PyAny>,
    pending: &str,
    default_system_prompt: Option<String>,
    display_name: Option<(String, String)>,
    include_reasoning: bool,
    openai_reasoning_content: bool,
) -> PyResult<Py<PyAny>> {
    let provider = self::provider(provider)?;
    let options = render_options(
        pending,
        default_system_prompt,
        display_name,
        include_reasoning,
        openai_reasoning_content,
    )?;
    let entries = entries_from_py(py, entries)?;
    let value = py
        .detach(|| convlog::render(provider, &entries, &options).map(|r| rendered_value(&r)))
        .map_err(errors::to_py)?;
    convert::to_py(py, &value)
}

/// Converts `provider`'s messages (a list, or a request body holding one)
/// into entries (dicts) to record.
#[pyfunction]
#[pyo3(signature = (provider, messages, evaluation_id, first_sequence=0, *, created_at=None))]
pub fn ingest(
    py: Python<'_>,
    provider: &str,
    messages: &Bound<'_, PyAny>,
    evaluation_id: &str,
    first_sequence: u64,
    created_at: Option<&str>,
) -> PyResult<Py<PyList>> {
    let provider = self::provider(provider)?;
    let messages = convert::to_value(messages, "messages", None, 0)
        .map_err(|fault| errors::invalid_argument(format!("{}: {}", fault.field, fault.reason)))?;
    let created_at = match created_at {
        Some(text) => Timestamp::parse_rfc3339(text)
            .map_err(|error| errors::invalid_argument(format!("created_at: {error}")))?,
        None => Timestamp::now(),
    };
    let entries = py
        .detach(|| {
            convlog::ingest(
                provider,
                &messages,
                evaluation_id,
                first_sequence,
                created_at,
            )
        })
        .map_err(errors::to_py)?;
    entries_to_py(py, &entries)
}

thread_local! {
    /// The exception a Python history manager raised (or the pairing it
    /// broke) during the native call running on this thread: the call
    /// raises it when it returns. Managers run on the calling thread (the
    /// GIL is released, the thread is the same).
    static MANAGER_ERROR: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Whether a Python history manager failed in the current native call.
pub fn manager_failed() -> bool {
    MANAGER_ERROR.with(|error| error.borrow().is_some())
}

/// The error a Python history manager left for the current native call.
pub fn take_manager_error() -> Option<PyErr> {
    MANAGER_ERROR.with(|error| error.borrow_mut().take())
}

/// Raises what a Python history manager left, if anything, else `value`.
pub fn after_managers<T>(value: T) -> PyResult<T> {
    match take_manager_error() {
        Some(error) => Err(error),
        None => Ok(value),
    }
}

/// A history manager written in Python: a callable from the entries (dicts)
/// to the curated entries. It must keep the rules every manager keeps
/// (docs/history.md): a result that breaks tool-call pairing of a coherent
/// input is refused with `ValueError`.
struct CallableManager {
    callable: Py<PyAny>,
    strategy: String,
}

impl history::HistoryManager for CallableManager {
    fn curate(
        &self,
        entries: &[ConversationEntry],
        _context: &CurationContext<'_>,
    ) -> Vec<ConversationEntry> {
        if manager_failed() {
            return entries.to_vec();
        }
        let curated = Python::attach(|py| -> PyResult<Vec<ConversationEntry>> {
            let shown = entries_to_py(py, entries)?;
            let produced = self.callable.bind(py).call1((shown,))?;
            let curated = entries_from_py(py, &produced)?;
            if history::coherence::is_coherent(entries) {
                if let Some(broken) = history::coherence::incoherences(&curated).first() {
                    return Err(errors::invalid_argument(format!(
                        "history manager {:?} broke tool-call pairing: {broken} (a manager keeps every call with its result)",
                        self.strategy
                    )));
                }
            }
            Ok(curated)
        });
        match curated {
            Ok(curated) => curated,
            Err(error) => {
                MANAGER_ERROR.with(|slot| *slot.borrow_mut() = Some(error));
                entries.to_vec()
            }
        }
    }

    fn strategy(&self) -> String {
        self.strategy.clone()
    }
}

/// A history manager: chooses what the provider is shown, never breaking a
/// tool call from its result, never touching the store (docs/history.md).
#[pyclass(module = "convlog._convlog", name = "HistoryManager", frozen)]
#[derive(Clone)]
pub struct PyHistoryManager {
    pub manager: Arc<dyn history::HistoryManager>,
}

impl PyHistoryManager {
    fn of(manager: impl history::HistoryManager + 'static) -> PyHistoryManager {
        PyHistoryManager {
            manager: Arc::new(manager),
        }
    }
}

#[pymethods]
impl PyHistoryManager {
    /// Keeps every entry.
    #[staticmethod]
    fn passthrough() -> PyHistoryManager {
        PyHistoryManager::of(Passthrough)
    }

    /// The system entries and the last `window` other entries (widened so
    /// no call loses its result).
    #[staticmethod]
    fn sliding_window(window: usize) -> PyHistoryManager {
        PyHistoryManager::of(SlidingWindow::new(window))
    }

    /// Tool results cut to `max_length` characters, ending with `suffix`.
    #[staticmethod]
    #[pyo3(signature = (max_length, suffix=None))]
    fn tool_result_truncator(max_length: usize, suffix: Option<String>) -> PyHistoryManager {
        let mut manager = ToolResultTruncator::new(max_length);
        if let Some(suffix) = suffix {
            manager = manager.with_suffix(suffix);
        }
        PyHistoryManager::of(manager)
    }

    /// The newest entries that fit `budget` tokens (approximate count).
    #[staticmethod]
    fn token_budget(budget: u64) -> PyHistoryManager {
        PyHistoryManager::of(TokenBudget::new(budget))
    }

    /// Over `token_limit` tokens, older tool outputs become a placeholder.
    #[staticmethod]
    #[pyo3(signature = (token_limit, keep_recent=None, placeholder=None))]
    fn tool_pruning(
        token_limit: u64,
        keep_recent: Option<usize>,
        placeholder: Option<String>,
    ) -> PyHistoryManager {
        let mut manager: ToolPruning<ApproximateTokens> = ToolPruning::new(token_limit);
        if let Some(keep_recent) = keep_recent {
            manager = manager.keep_recent(keep_recent);
        }
        if let Some(placeholder) = placeholder {
            manager = manager.placeholder(placeholder);
        }
        PyHistoryManager::of(manager)
    }

    /// Over `token_limit` tokens, older entries are replaced by a system
    /// entry holding `text`.
    #[staticmethod]
    fn summary_placeholder(token_limit: u64, text: String) -> PyHistoryManager {
        PyHistoryManager::of(SummaryPlaceholder::new(token_limit, text))
    }

    /// The managers applied in order.
    #[staticmethod]
    #[pyo3(signature = (*managers))]
    fn composed(managers: Vec<PyHistoryManager>) -> PyHistoryManager {
        let mut composed = Composed::new();
        for manager in managers {
            composed = composed.then(manager.manager.clone());
        }
        PyHistoryManager::of(composed)
    }

    /// A manager written in Python: `curate(entries) -> entries` (dicts in
    /// the entry JSON form); `strategy` is the label recorded for it.
    #[staticmethod]
    fn custom(strategy: String, curate: Py<PyAny>) -> PyHistoryManager {
        PyHistoryManager::of(CallableManager {
            callable: curate,
            strategy,
        })
    }

    /// The one-line form: `window=50,truncate=1000,budget=100000,prune=N`.
    #[staticmethod]
    fn parse(spec: &str) -> PyResult<PyHistoryManager> {
        history::parse_curation(spec)
            .map(PyHistoryManager::of)
            .map_err(errors::to_py)
    }

    /// The label recorded in `history_curated` events.
    #[getter]
    fn strategy(&self) -> String {
        self.manager.strategy()
    }

    /// The curated view of `entries` (dicts in the entry JSON form).
    fn curate(&self, py: Python<'_>, entries: &Bound<'_, PyAny>) -> PyResult<Py<PyList>> {
        let entries = entries_from_py(py, entries)?;
        take_manager_error();
        let curated = py.detach(|| self.manager.curate(&entries, &CurationContext::new()));
        after_managers(())?;
        entries_to_py(py, &curated)
    }

    fn __repr__(&self) -> String {
        format!("HistoryManager({})", self.manager.strategy())
    }
}

/// Curates a stored conversation; with `record`, records the
/// `history_curated` event (`lsn` is its LSN, else None) unless a Python
/// manager failed (the caller raises its error).
pub fn curate_stored(
    store: &convlog::Store,
    conversation_id: &str,
    manager: &dyn history::HistoryManager,
    record: bool,
    scope: &CurationScope,
) -> convlog::Result<(Vec<ConversationEntry>, String, usize, Option<u64>)> {
    let slice = store.conversation(conversation_id)?;
    let entries: Vec<ConversationEntry> = slice.entries().cloned().collect();
    let context = CurationContext::new()
        .with_store(store)
        .with_conversation(&slice);
    let curated = manager.curate(&entries, &context);
    let strategy = manager.strategy();
    let lsn = if record && !manager_failed() {
        Some(history::record_curation_with(
            store,
            conversation_id,
            &strategy,
            entries.len(),
            curated.len(),
            scope,
        )?)
    } else {
        None
    };
    Ok((curated, strategy, entries.len(), lsn))
}
