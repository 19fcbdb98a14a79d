//! `convlog.MessageControl`: contexts with an owner and a public flag,
//! validated `add_messages` / `set_messages`, and generation through a
//! Python callable (docs/history.md). Its errors are the message-control
//! exceptions, whose messages are the fixed texts.

use std::sync::Arc;

use convlog::control::{
    AddAiMessage, ContextInfo, ControlMessage, Generation, MessageControl, Principal,
};
use convlog::model::ConversationEntry;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyRange};
use serde_json::{json, Value};

use crate::api::{self, PyHistoryManager};
use crate::convert;
use crate::errors;
use crate::keys::CheckpointFeed;
use crate::store::SequenceCache;

fn principal(user: Option<String>) -> Principal {
    match user {
        Some(id) => Principal::user(id),
        None => Principal::Anonymous,
    }
}

fn info_value(info: &ContextInfo) -> Value {
    json!({
        "context_id": info.context_id,
        "owner": info.owner,
        "public": info.public,
        "created_lsn": info.created_lsn,
    })
}

/// Message-control messages (`{"sender": "human", "message": ...}`,
/// `{"type": "tool_call", ...}`, `{"type": "tool_response", ...}`) from
/// Python; `InvalidEventError` naming `messages[i]` otherwise.
fn messages_from_py(py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<Vec<ControlMessage>> {
    let items: Vec<Bound<'_, PyAny>> = messages
        .try_iter()
        .map_err(|_| errors::invalid_argument("messages: expected a list of messages".to_string()))?
        .collect::<PyResult<_>>()?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let path = format!("messages[{index}]");
            let fail = |field: String, reason: String| {
                errors::invalid_event(py, format!("{field}: {reason}"), Some(index), None, reason)
            };
            let value = convert::to_value(item, &path, None, 0)
                .map_err(|fault| fail(fault.field, fault.reason))?;
            serde_json::from_value::<ControlMessage>(value)
                .map_err(|error| fail(path.clone(), error.to_string()))
        })
        .collect()
}

fn messages_to_py(py: Python<'_>, messages: &[ControlMessage]) -> PyResult<Py<PyList>> {
    let list = PyList::empty(py);
    for message in messages {
        let value = serde_json::to_value(message)
            .map_err(|error| errors::invalid_argument(format!("message: {error}")))?;
        list.append(convert::to_py(py, &value)?)?;
    }
    Ok(list.unbind())
}

/// `{"lsns": range, "entries": [...]}` of an add or set.
fn applied_to_py(
    py: Python<'_>,
    lsns: std::ops::Range<u64>,
    entries: &[ConversationEntry],
) -> PyResult<Py<PyAny>> {
    let dict = PyDict::new(py);
    dict.set_item(
        "lsns",
        PyRange::new(py, lsns.start as isize, lsns.end as isize)?,
    )?;
    dict.set_item("entries", api::entries_to_py(py, entries)?)?;
    Ok(dict.into_any().unbind())
}

fn generation_to_py(py: Python<'_>, generation: &Generation) -> PyResult<Py<PyAny>> {
    let dict = PyDict::new(py);
    dict.set_item("context_id", &generation.context_id)?;
    dict.set_item("response", &generation.response)?;
    dict.set_item("saved_ai_messages", generation.saved_ai_messages)?;
    dict.set_item("generated", api::entries_to_py(py, &generation.generated)?)?;
    dict.set_item(
        "generated_messages",
        messages_to_py(py, &generation.generated_messages())?,
    )?;
    dict.set_item(
        "model_view",
        api::entries_to_py(py, &generation.model_view)?,
    )?;
    dict.set_item("stored", api::entries_to_py(py, &generation.stored)?)?;
    Ok(dict.into_any().unbind())
}

/// A host model given as a Python callable: it gets the entries the model
/// is shown (dicts) and returns the entries one generation produced
/// (dicts in the entry JSON form). An exception it raises becomes
/// `GenerationFailedError` with the exception's text.
struct PyGenerator {
    callable: Py<PyAny>,
    /// The Python exception raised by the callable, re-raised as the cause.
    raised: Option<PyErr>,
}

impl convlog::control::Generator for PyGenerator {
    fn generate(&mut self, view: &[ConversationEntry]) -> Result<Vec<ConversationEntry>, String> {
        if api::manager_failed() {
            // The history manager raised: the model is not run, nothing
            // generated is saved, and the manager's error is raised.
            return Err("the history manager failed".to_string());
        }
        Python::attach(|py| {
            let run = || -> PyResult<Vec<ConversationEntry>> {
                let shown = api::entries_to_py(py, view)?;
                let produced = self.callable.bind(py).call1((shown,))?;
                api::entries_from_py(py, &produced)
            };
            run().map_err(|error| {
                let text = error.to_string();
                self.raised = Some(error);
                text
            })
        })
    }
}

/// Message control over a store (`Store.message_control()`).
#[pyclass(module = "convlog._convlog", name = "MessageControl", frozen)]
pub struct PyMessageControl {
    control: Arc<MessageControl>,
    /// The store's sequence cache: message control writes contexts' entries
    /// with sequences of its own, so each call forgets its context there.
    sequences: Arc<Mutex<SequenceCache>>,
    /// The store's checkpoint callable, handed what a write signed.
    feed: CheckpointFeed,
}

impl PyMessageControl {
    pub fn new(
        store: Arc<convlog::Store>,
        history: Option<PyHistoryManager>,
        sequences: Arc<Mutex<SequenceCache>>,
        feed: CheckpointFeed,
    ) -> PyMessageControl {
        let mut control = MessageControl::new(store);
        if let Some(history) = history {
            control = control.with_history_manager(history.manager);
        }
        PyMessageControl {
            control: Arc::new(control),
            sequences,
            feed,
        }
    }

    /// Forgets the context's cached sequences (after a call that may have
    /// written to it, whether or not it succeeded), and hands the
    /// checkpoints the write signed to the store's callable.
    fn wrote(&self, py: Python<'_>, context_id: &str) -> PyResult<()> {
        self.sequences.lock().forget(context_id);
        self.feed.deliver(py)
    }

    fn generate_with(
        &self,
        py: Python<'_>,
        context_id: &str,
        generator: Py<PyAny>,
        run: impl FnOnce(&MessageControl, &mut PyGenerator) -> convlog::Result<Generation> + Send,
    ) -> PyResult<Py<PyAny>> {
        let mut generator = PyGenerator {
            callable: generator,
            raised: None,
        };
        api::take_manager_error();
        let result = py.detach(|| run(&self.control, &mut generator));
        let delivered = self.wrote(py, context_id);
        if let Some(error) = api::take_manager_error() {
            return Err(error);
        }
        match result {
            Ok(generation) => {
                delivered?;
                generation_to_py(py, &generation)
            }
            Err(error) => {
                let raised = errors::to_py(error);
                if let Some(cause) = generator.raised.take() {
                    raised.set_cause(py, Some(cause));
                }
                Err(raised)
            }
        }
    }
}

macro_rules! released {
    ($py:expr, $body:expr) => {
        $py.detach(|| $body).map_err(errors::to_py)
    };
}

/// `released!` for a call that may write to `context_id`.
macro_rules! writing {
    ($self:expr, $py:expr, $context_id:expr, $body:expr) => {{
        let result = $py.detach(|| $body).map_err(errors::to_py);
        let delivered = $self.wrote($py, $context_id);
        result.and_then(|value| delivered.map(|()| value))
    }};
}

#[pymethods]
impl PyMessageControl {
    /// Creates a context owned by `principal` (a user id; None is
    /// anonymous, which may create public contexts only).
    #[pyo3(signature = (principal, context_id, public=false))]
    fn create_context(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
        public: bool,
    ) -> PyResult<Py<PyAny>> {
        let who = self::principal(principal);
        let info = released!(py, self.control.create_context(&who, context_id, public));
        let delivered = self.feed.deliver(py);
        let info = info?;
        delivered?;
        convert::to_py(py, &info_value(&info))
    }

    /// The context's metadata, if `principal` may use it.
    fn context(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
    ) -> PyResult<Py<PyAny>> {
        let who = self::principal(principal);
        let info = released!(py, self.control.context(&who, context_id))?;
        convert::to_py(py, &info_value(&info))
    }

    /// Every context's metadata, in creation order.
    fn contexts(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let registry = released!(py, self.control.registry())?;
        let mut infos: Vec<&ContextInfo> = registry.contexts().collect();
        infos.sort_by_key(|info| info.created_lsn);
        let values: Vec<Value> = infos.into_iter().map(info_value).collect();
        convert::to_py(py, &Value::Array(values))
    }

    /// Makes the context public or private; only its owner may.
    fn set_public(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
        public: bool,
    ) -> PyResult<Py<PyAny>> {
        let who = self::principal(principal);
        let info = released!(py, self.control.set_public(&who, context_id, public));
        let delivered = self.feed.deliver(py);
        let info = info?;
        delivered?;
        convert::to_py(py, &info_value(&info))
    }

    /// Every stored entry of the context (dicts in the entry JSON form).
    fn entries(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
    ) -> PyResult<Py<PyList>> {
        let who = self::principal(principal);
        let entries = released!(py, self.control.entries(&who, context_id))?;
        api::entries_to_py(py, &entries)
    }

    /// Every stored message of the context as message-control messages.
    fn messages(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
    ) -> PyResult<Py<PyList>> {
        let who = self::principal(principal);
        let messages = released!(py, self.control.messages(&who, context_id))?;
        messages_to_py(py, &messages)
    }

    /// Appends `messages` atomically after validating them against the
    /// stored conversation; returns `{"lsns": range, "entries": [...]}`.
    fn add_messages(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
        messages: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let who = self::principal(principal);
        let messages = messages_from_py(py, messages)?;
        let applied = writing!(
            self,
            py,
            context_id,
            self.control.add_messages(&who, context_id, &messages)
        )?;
        applied_to_py(py, applied.lsns, &applied.entries)
    }

    /// Replaces every message of the context atomically (one
    /// `messages_replaced` event; the old ones stay in the log).
    fn set_messages(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
        messages: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let who = self::principal(principal);
        let messages = messages_from_py(py, messages)?;
        let applied = writing!(
            self,
            py,
            context_id,
            self.control.set_messages(&who, context_id, &messages)
        )?;
        applied_to_py(py, applied.lsns, &applied.entries)
    }

    /// `add_messages` with neutral entries (dicts), kept as given.
    fn add_entries(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
        entries: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let who = self::principal(principal);
        let entries = api::entries_from_py(py, entries)?;
        let applied = writing!(
            self,
            py,
            context_id,
            self.control.add_entries(&who, context_id, entries)
        )?;
        applied_to_py(py, applied.lsns, &applied.entries)
    }

    /// `set_messages` with neutral entries (dicts), kept as given.
    fn set_entries(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
        entries: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let who = self::principal(principal);
        let entries = api::entries_from_py(py, entries)?;
        let applied = writing!(
            self,
            py,
            context_id,
            self.control.set_entries(&who, context_id, entries)
        )?;
        applied_to_py(py, applied.lsns, &applied.entries)
    }

    /// Saves the human `message`, then generates with `generator` (a
    /// callable: entries shown → entries produced); the generated messages
    /// are saved when `save_ai_messages`.
    #[pyo3(signature = (principal, context_id, message, generator, save_ai_messages=true))]
    fn chat(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
        message: &str,
        generator: Py<PyAny>,
        save_ai_messages: bool,
    ) -> PyResult<Py<PyAny>> {
        let who = self::principal(principal);
        self.generate_with(py, context_id, generator, |control, generator| {
            control.chat(&who, context_id, message, save_ai_messages, generator)
        })
    }

    /// Generates from the stored history (curated by the history manager,
    /// if any) followed by the temporary `steering` system messages.
    #[pyo3(signature = (principal, context_id, generator, steering=Vec::new(), save_ai_messages=true))]
    fn generate(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
        generator: Py<PyAny>,
        steering: Vec<String>,
        save_ai_messages: bool,
    ) -> PyResult<Py<PyAny>> {
        let who = self::principal(principal);
        self.generate_with(py, context_id, generator, |control, generator| {
            control.generate(&who, context_id, &steering, save_ai_messages, generator)
        })
    }

    /// Saves an AI message as is (`message`), or generates from a `prompt`
    /// (saved as a system message first when `save_system_message`).
    #[pyo3(signature = (principal, context_id, generator, *, message=None, prompt=None, save_system_message=false, save_ai_messages=true))]
    #[allow(clippy::too_many_arguments)]
    fn add_ai_message(
        &self,
        py: Python<'_>,
        principal: Option<String>,
        context_id: &str,
        generator: Py<PyAny>,
        message: Option<String>,
        prompt: Option<String>,
        save_system_message: bool,
        save_ai_messages: bool,
    ) -> PyResult<Py<PyAny>> {
        let request = match (message, prompt) {
            (Some(message), None) => AddAiMessage::Message(message),
            (None, Some(prompt)) => AddAiMessage::Prompt {
                prompt,
                save_system_message,
                save_ai_messages,
            },
            _ => {
                return Err(errors::invalid_argument(
                    "add_ai_message takes exactly one of message= and prompt=".to_string(),
                ))
            }
        };
        let who = self::principal(principal);
        self.generate_with(py, context_id, generator, |control, generator| {
            control.add_ai_message(&who, context_id, request, generator)
        })
    }
}
