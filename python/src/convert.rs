//! Conversions between Python objects and the JSON form of events and
//! entries (docs/events.md), done by hand so the Rust side sees exactly the
//! JSON the CLI reads and the Python side gets plain dicts and lists.

use base64::Engine;
use convlog::model::{ConversationEntry, Event, Role, Timestamp};
use pyo3::exceptions::PyOverflowError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// Nesting deeper than this in an event is refused (a cycle, or a value no
/// event holds): the limit keeps a self-referencing dict from recursing
/// without end.
pub const NESTING_DEPTH_MAX: usize = 64;

/// Why a Python value has no JSON form, with the path of the value.
pub struct Unconvertible {
    /// Field path inside the value (`entry.tool_calls[0].status`).
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A Python value (dict, list, tuple, str, int, float, bool, None) as JSON.
/// `bytes` are refused except where `allow_bytes_at` names the field: there
/// they become standard base64 (a custom event's `payload`).
pub fn to_value(
    object: &Bound<'_, PyAny>,
    path: &str,
    allow_bytes_at: Option<&str>,
    depth: usize,
) -> Result<Value, Unconvertible> {
    let fail = |reason: String| Unconvertible {
        field: path.to_string(),
        reason,
    };
    if depth > NESTING_DEPTH_MAX {
        return Err(fail(format!(
            "nested more than {NESTING_DEPTH_MAX} levels deep (NESTING_DEPTH_MAX): no event field is"
        )));
    }
    if object.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(flag) = object.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if let Ok(text) = object.cast::<PyString>() {
        let text = text
            .to_str()
            .map_err(|error| fail(format!("a string that is not valid UTF-8: {error}")))?;
        return Ok(Value::String(text.to_string()));
    }
    if object.cast::<PyInt>().is_ok() {
        if let Ok(number) = object.extract::<u64>() {
            return Ok(Value::Number(number.into()));
        }
        if let Ok(number) = object.extract::<i64>() {
            return Ok(Value::Number(number.into()));
        }
        return Err(fail(format!(
            "the integer {} does not fit in 64 bits",
            object.str().map(|s| s.to_string()).unwrap_or_default()
        )));
    }
    if let Ok(number) = object.cast::<PyFloat>() {
        let number = number.value();
        return Number::from_f64(number)
            .map(Value::Number)
            .ok_or_else(|| fail(format!("{number} has no JSON form")));
    }
    if let Ok(dict) = object.cast::<PyDict>() {
        let mut map = Map::new();
        for (key, item) in dict.iter() {
            let key: String = match key.cast::<PyString>() {
                Ok(key) => key.to_string(),
                Err(_) => {
                    return Err(fail(format!(
                        "a dict key must be a string, found {}",
                        type_name(&key)
                    )))
                }
            };
            let field = join(path, &key);
            let value = to_value(&item, &field, allow_bytes_at, depth + 1)?;
            map.insert(key, value);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(list) = object.cast::<PyList>() {
        return list
            .iter()
            .enumerate()
            .map(|(index, item)| {
                to_value(
                    &item,
                    &format!("{path}[{index}]"),
                    allow_bytes_at,
                    depth + 1,
                )
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    if let Ok(tuple) = object.cast::<PyTuple>() {
        return tuple
            .iter()
            .enumerate()
            .map(|(index, item)| {
                to_value(
                    &item,
                    &format!("{path}[{index}]"),
                    allow_bytes_at,
                    depth + 1,
                )
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    if let Ok(bytes) = object.cast::<PyBytes>() {
        if allow_bytes_at == Some(path) {
            return Ok(Value::String(
                base64::engine::general_purpose::STANDARD.encode(bytes.as_bytes()),
            ));
        }
        return Err(fail(
            "bytes are accepted only as a custom event's payload; give text as str".to_string(),
        ));
    }
    Err(fail(format!(
        "expected a JSON value (dict, list, str, int, float, bool or None), found {}",
        type_name(object)
    )))
}

fn type_name(object: &Bound<'_, PyAny>) -> String {
    object
        .get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "an object".to_string())
}

/// JSON as Python objects: dicts, lists, str, int, float, bool, None.
pub fn to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any().unbind(),
        Value::Number(number) => {
            if let Some(number) = number.as_u64() {
                number.into_pyobject(py)?.into_any().unbind()
            } else if let Some(number) = number.as_i64() {
                number.into_pyobject(py)?.into_any().unbind()
            } else if let Some(number) = number.as_f64() {
                PyFloat::new(py, number).into_any().unbind()
            } else {
                return Err(PyOverflowError::new_err(format!(
                    "the number {number} has no Python form"
                )));
            }
        }
        Value::String(text) => PyString::new(py, text).into_any().unbind(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, to_py(py, item)?)?;
            }
            dict.into_any().unbind()
        }
    })
}

/// An event as a dict in its JSON form (docs/events.md), with a custom
/// event's payload as `bytes` (the JSON form holds it as base64). Recorded
/// entries and custom events, most of a log, are built directly.
pub fn event_to_py(py: Python<'_>, lsn: u64, event: &Event) -> PyResult<Py<PyAny>> {
    let dict = PyDict::new(py);
    match event {
        Event::ConversationRecorded(recorded) => {
            dict.set_item(intern!(py, "type"), intern!(py, "conversation_recorded"))?;
            dict.set_item(intern!(py, "conversation_id"), &recorded.conversation_id)?;
            dict.set_item(intern!(py, "session_id"), recorded.session_id.as_deref())?;
            dict.set_item(intern!(py, "created_at"), time_text(recorded.created_at)?)?;
            dict.set_item(intern!(py, "entry"), entry_to_py(py, &recorded.entry)?)?;
        }
        Event::Custom(custom) => {
            dict.set_item(intern!(py, "type"), intern!(py, "custom"))?;
            dict.set_item(intern!(py, "kind"), &custom.kind)?;
            dict.set_item(
                intern!(py, "conversation_id"),
                custom.conversation_id.as_deref(),
            )?;
            dict.set_item(intern!(py, "payload"), PyBytes::new(py, &custom.payload))?;
        }
        other => {
            let value = serde_json::to_value(other).map_err(|error| {
                crate::errors::to_py(convlog::Error::JsonEncode {
                    lsn,
                    reason: error.to_string(),
                })
            })?;
            return to_py(py, &value);
        }
    }
    Ok(dict.into_any().unbind())
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn time_text(at: Timestamp) -> PyResult<String> {
    if at.0 < 0 {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "times before 1970 have no RFC 3339 form here",
        ));
    }
    Ok(at.to_string())
}

/// An entry as a dict in the entry JSON form, built directly (the same
/// keys and values as its serde form, without a `serde_json::Value` in
/// between: reads of long conversations spend their time here).
pub fn entry_to_py(py: Python<'_>, entry: &ConversationEntry) -> PyResult<Py<PyAny>> {
    let dict = PyDict::new(py);
    dict.set_item(intern!(py, "message_id"), entry.message_id.to_string())?;
    dict.set_item(intern!(py, "evaluation_id"), &entry.evaluation_id)?;
    dict.set_item(intern!(py, "sequence"), entry.sequence)?;
    dict.set_item(intern!(py, "turn"), entry.turn)?;
    dict.set_item(intern!(py, "role"), role_name(entry.role))?;
    dict.set_item(intern!(py, "content"), entry.content.as_deref())?;
    let reasoning = match &entry.reasoning {
        Some(reasoning) => {
            let item = PyDict::new(py);
            item.set_item(intern!(py, "text"), reasoning.text.as_deref())?;
            item.set_item(intern!(py, "signature"), reasoning.signature.as_deref())?;
            item.set_item(intern!(py, "redacted"), reasoning.redacted)?;
            item.into_any().unbind()
        }
        None => py.None(),
    };
    dict.set_item(intern!(py, "reasoning"), reasoning)?;
    let calls = PyList::empty(py);
    for call in &entry.tool_calls {
        let item = PyDict::new(py);
        item.set_item(intern!(py, "call_id"), &call.call_id)?;
        item.set_item(intern!(py, "name"), &call.name)?;
        item.set_item(intern!(py, "arguments"), &call.arguments)?;
        item.set_item(intern!(py, "status"), call.status.as_str())?;
        item.set_item(
            intern!(py, "started_at"),
            call.started_at.map(time_text).transpose()?,
        )?;
        item.set_item(
            intern!(py, "ended_at"),
            call.ended_at.map(time_text).transpose()?,
        )?;
        item.set_item(intern!(py, "error"), call.error.as_deref())?;
        calls.append(item)?;
    }
    dict.set_item(intern!(py, "tool_calls"), calls)?;
    dict.set_item(intern!(py, "tool_call_id"), entry.tool_call_id.as_deref())?;
    dict.set_item(intern!(py, "tool_name"), entry.tool_name.as_deref())?;
    dict.set_item(intern!(py, "is_error"), entry.is_error)?;
    dict.set_item(intern!(py, "finish_reason"), entry.finish_reason.as_deref())?;
    dict.set_item(intern!(py, "prompt_ns"), entry.prompt_ns.as_deref())?;
    dict.set_item(intern!(py, "prompt_key"), entry.prompt_key.as_deref())?;
    dict.set_item(intern!(py, "created_at"), time_text(entry.created_at)?)?;
    let metadata = PyDict::new(py);
    for (key, value) in &entry.metadata {
        metadata.set_item(key, value)?;
    }
    dict.set_item(intern!(py, "metadata"), metadata)?;
    Ok(dict.into_any().unbind())
}
