//! convlog's errors as Python exceptions. The classes live in
//! `convlog/_errors.py` (a hierarchy under `ConvlogError`, some also
//! `ValueError`s or `KeyError`s); this maps each `convlog::Error` variant to
//! its class, its message (the Rust error's text) and the variant's fields as
//! attributes.

use std::path::Path;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use pyo3::IntoPyObjectExt;

/// The Python module that defines the exception classes.
const ERRORS_MODULE: &str = "convlog._errors";

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let module = ERRORS.get_or_try_init(py, || {
        py.import(ERRORS_MODULE).map(|module| module.unbind())
    })?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// An exception of class `name` from `convlog._errors`, with `message` and
/// the attributes `fields` (set on the instance) plus `kind`.
pub fn raise(
    py: Python<'_>,
    name: &str,
    kind: &str,
    message: String,
    fields: &[(&str, Py<PyAny>)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = class(py, name)?;
        let instance = class.call1((message.clone(),))?;
        instance.setattr("kind", kind)?;
        for (field, value) in fields {
            instance.setattr(*field, value)?;
        }
        Ok(PyErr::from_value(instance))
    };
    build().unwrap_or_else(|error| error)
}

fn path(py: Python<'_>, path: &Path) -> Py<PyAny> {
    path.to_string_lossy()
        .into_owned()
        .into_pyobject(py)
        .map(|value| value.into_any().unbind())
        .unwrap_or_else(|_| py.None())
}

fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, value: T) -> Py<PyAny> {
    value
        .into_bound_py_any(py)
        .map(Bound::unbind)
        .unwrap_or_else(|_| py.None())
}

/// The Python exception for a convlog error.
pub fn to_py(error: convlog::Error) -> PyErr {
    Python::attach(|py| to_py_with(py, error))
}

#[allow(clippy::too_many_lines)]
fn to_py_with(py: Python<'_>, error: convlog::Error) -> PyErr {
    use convlog::Error as E;
    let message = error.to_string();
    match error {
        E::Locked { path: dir } => raise(
            py,
            "LockedError",
            "Locked",
            format!(
                "store {} is locked by another writer (another process, or another open Store in this one): one process writes a store at a time. Read beside the writer with convlog.Store.open(path, read_only=True) (refresh() and tail() follow its appends) and send writes to the one writer process; see docs/python.md, \"Many processes\"",
                dir.display()
            ),
            &[("path", path(py, &dir))],
        ),
        E::Corrupted {
            segment,
            offset,
            reason,
        } => raise(
            py,
            "CorruptedError",
            "Corrupted",
            message,
            &[
                ("segment", path(py, &segment)),
                ("offset", obj(py, offset)),
                ("reason", obj(py, reason)),
            ],
        ),
        E::Tampered {
            store,
            kind,
            lsn,
            segment,
            offset,
            detail,
        } => raise(
            py,
            "TamperedError",
            "Tampered",
            message,
            &[
                ("path", path(py, &store)),
                // The kind of tampering by its Rust name (`Truncated`);
                // `.kind` is the error variant's, as on every error.
                ("tamper_kind", obj(py, format!("{kind:?}"))),
                ("description", obj(py, kind.to_string())),
                ("lsn", obj(py, lsn)),
                ("segment", path(py, &segment)),
                ("offset", obj(py, offset)),
                ("detail", obj(py, detail)),
            ],
        ),
        E::Erased { conversation_id } => raise(
            py,
            "ErasedError",
            "Erased",
            message,
            &[("conversation_id", obj(py, conversation_id))],
        ),
        E::KeyFile { path: file, reason } => raise(
            py,
            "KeyFileError",
            "KeyFile",
            message,
            &[("path", path(py, &file)), ("reason", obj(py, reason))],
        ),
        E::Encryption { store, reason } => raise(
            py,
            "EncryptionError",
            "Encryption",
            message,
            &[("path", path(py, &store)), ("reason", obj(py, reason))],
        ),
        E::UndecodableEvent { lsn, reason } => raise(
            py,
            "UndecodableEventError",
            "UndecodableEvent",
            message,
            &[("lsn", obj(py, lsn)), ("reason", obj(py, reason))],
        ),
        E::ConversationNotFound { conversation_id } => raise(
            py,
            "ConversationNotFoundError",
            "ConversationNotFound",
            message,
            &[("conversation_id", obj(py, conversation_id))],
        ),
        E::EvaluationNotFound {
            conversation_id,
            evaluation_id,
        } => raise(
            py,
            "EvaluationNotFoundError",
            "EvaluationNotFound",
            message,
            &[
                ("conversation_id", obj(py, conversation_id)),
                ("evaluation_id", obj(py, evaluation_id)),
            ],
        ),
        E::PromptMismatch {
            conversation_id,
            evaluation_id,
            recorded,
            requested,
        } => raise(
            py,
            "PromptMismatchError",
            "PromptMismatch",
            message,
            &[
                ("conversation_id", obj(py, conversation_id)),
                ("evaluation_id", obj(py, evaluation_id)),
                ("recorded", obj(py, recorded)),
                ("requested", obj(py, requested)),
            ],
        ),
        E::Conflict {
            store,
            conversation_id,
            expected,
            actual,
        } => raise(
            py,
            "ConflictError",
            "Conflict",
            message,
            &[
                ("path", path(py, &store)),
                ("conversation_id", obj(py, conversation_id)),
                ("expected", obj(py, expected)),
                ("actual", obj(py, actual)),
            ],
        ),
        E::InvalidEvent { index, field } => {
            let text = format!("events[{index}].{}: {}", field.field, field.reason);
            invalid_event(py, text, Some(index), Some(field.field), field.reason)
        }
        E::InvalidLine { field, reason, .. } => {
            // The native side always parses a batch (a JSON array), so the
            // field path starts with the event's index: `[1].entry.role`.
            let (index, inner) = split_index(field.as_deref());
            let text = match &field {
                Some(field) => format!("events{field}: {reason}"),
                None => format!("events: {reason}"),
            };
            invalid_event(py, text, index, inner, reason)
        }
        E::EmptyBatch => invalid_event(py, message.clone(), None, None, message),
        E::LimitExceeded {
            what,
            actual,
            limit,
            constant,
        } => raise(
            py,
            "LimitExceededError",
            "LimitExceeded",
            message,
            &[
                ("what", obj(py, what)),
                ("actual", obj(py, actual)),
                ("limit", obj(py, limit)),
                ("constant", obj(py, constant)),
            ],
        ),
        E::ReadOnly { store, operation } => raise(
            py,
            "ReadOnlyError",
            "ReadOnly",
            message,
            &[("path", path(py, &store)), ("operation", obj(py, operation))],
        ),
        E::NotAStore { path: dir } => raise(
            py,
            "NotAStoreError",
            "NotAStore",
            message,
            &[("path", path(py, &dir))],
        ),
        E::InvalidOption { option, reason } => raise(
            py,
            "InvalidOptionError",
            "InvalidOption",
            message,
            &[("option", obj(py, option)), ("reason", obj(py, reason))],
        ),
        E::InvalidCuration { item, reason } => raise(
            py,
            "InvalidOptionError",
            "InvalidCuration",
            message,
            &[("option", obj(py, item)), ("reason", obj(py, reason))],
        ),
        E::Compacted {
            store,
            first_missing,
            next_present,
        } => raise(
            py,
            "CompactedError",
            "Compacted",
            message,
            &[
                ("path", path(py, &store)),
                ("first_missing", obj(py, first_missing)),
                ("next_present", obj(py, next_present)),
            ],
        ),
        E::ProviderMalformed {
            provider,
            path: at,
            reason,
        } => raise(
            py,
            "ProviderFormatError",
            "ProviderMalformed",
            message,
            &[
                ("provider", obj(py, provider.name())),
                ("field", obj(py, at)),
                ("reason", obj(py, reason)),
            ],
        ),
        E::ProviderUnsupported {
            provider,
            path: at,
            what,
        } => raise(
            py,
            "ProviderFormatError",
            "ProviderUnsupported",
            message,
            &[
                ("provider", obj(py, provider.name())),
                ("field", obj(py, at)),
                ("reason", obj(py, what)),
            ],
        ),
        E::DuplicateCallId {
            call_id,
            first_sequence,
            second_sequence,
        } => raise(
            py,
            "DuplicateCallIdError",
            "DuplicateCallId",
            message,
            &[
                ("call_id", obj(py, call_id)),
                ("first_sequence", obj(py, first_sequence)),
                ("second_sequence", obj(py, second_sequence)),
            ],
        ),
        E::ContextNotFound { context_id } => raise(
            py,
            "ContextNotFoundError",
            "ContextNotFound",
            message,
            &[("context_id", obj(py, context_id))],
        ),
        E::NotContextOwner { context_id } => raise(
            py,
            "NotContextOwnerError",
            "NotContextOwner",
            message,
            &[("context_id", obj(py, context_id))],
        ),
        E::ContextExists { context_id } => raise(
            py,
            "ContextExistsError",
            "ContextExists",
            message,
            &[("context_id", obj(py, context_id))],
        ),
        E::AnonymousPrivateContext { context_id } => raise(
            py,
            "AnonymousPrivateContextError",
            "AnonymousPrivateContext",
            message,
            &[("context_id", obj(py, context_id))],
        ),
        E::ResponsesWithoutCalls { call_ids } => raise(
            py,
            "ResponsesWithoutCallsError",
            "ResponsesWithoutCalls",
            message,
            &[("call_ids", obj(py, call_ids))],
        ),
        E::ResponseBeforeCall { call_id } => raise(
            py,
            "ResponseBeforeCallError",
            "ResponseBeforeCall",
            message,
            &[("call_id", obj(py, call_id))],
        ),
        E::CallsWithoutResponses { call_ids } => raise(
            py,
            "CallsWithoutResponsesError",
            "CallsWithoutResponses",
            message,
            &[("call_ids", obj(py, call_ids))],
        ),
        E::DuplicateOpenCallIds { call_ids } => raise(
            py,
            "DuplicateOpenCallIdsError",
            "DuplicateOpenCallIds",
            message,
            &[("call_ids", obj(py, call_ids))],
        ),
        E::GenerationFailed { context_id, reason } => raise(
            py,
            "GenerationFailedError",
            "GenerationFailed",
            message,
            &[
                ("context_id", obj(py, context_id)),
                ("reason", obj(py, reason)),
            ],
        ),
        E::Io {
            operation,
            path: file,
            source,
        } => raise(
            py,
            "StoreIOError",
            "Io",
            message,
            &[
                ("path", path(py, &file)),
                ("operation", obj(py, operation)),
                ("errno", obj(py, source.raw_os_error())),
            ],
        ),
        other => {
            let kind = variant_name(&other);
            raise(py, "ConvlogError", &kind, message, &[])
        }
    }
}

/// `Poisoned` of `Poisoned { .. }`: the variant's name, from its Debug form.
fn variant_name(error: &convlog::Error) -> String {
    let debug = format!("{error:?}");
    debug
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or("Error")
        .to_string()
}

/// `[1].entry.role` → (1, `entry.role`); `[1]` → (1, None).
fn split_index(field: Option<&str>) -> (Option<usize>, Option<String>) {
    let Some(field) = field else {
        return (None, None);
    };
    let Some(rest) = field.strip_prefix('[') else {
        return (None, Some(field.to_string()));
    };
    let Some((index, inner)) = rest.split_once(']') else {
        return (None, Some(field.to_string()));
    };
    let Ok(index) = index.parse::<usize>() else {
        return (None, Some(field.to_string()));
    };
    let inner = inner.strip_prefix('.').unwrap_or(inner);
    (Some(index), (!inner.is_empty()).then(|| inner.to_string()))
}

/// `InvalidEventError`: bad input, nothing of the batch stored.
pub fn invalid_event(
    py: Python<'_>,
    message: String,
    index: Option<usize>,
    field: Option<String>,
    reason: String,
) -> PyErr {
    raise(
        py,
        "InvalidEventError",
        "InvalidEvent",
        format!("{message} (nothing of the batch was stored)"),
        &[
            ("index", obj(py, index)),
            ("field", obj(py, field)),
            ("reason", obj(py, reason)),
        ],
    )
}

/// `ValueError`-like bad arguments (an unknown provider, durability).
pub fn invalid_argument(message: String) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(message)
}

/// The error raised by any call on a closed store.
pub fn closed(py: Python<'_>, store: &Path) -> PyErr {
    raise(
        py,
        "StoreClosedError",
        "Closed",
        format!("store {} is closed", store.display()),
        &[("path", path(py, store))],
    )
}
