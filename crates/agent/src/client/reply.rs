//! Pieces every wire format shares: its errors (the driver fills in the URL
//! and attempt count), reading one provider message into the reply's
//! assistant entry through convlog's mappers, and usage counts.

use convlog::{ConversationEntry, Provider, Role, Timestamp};
use serde_json::Value;

use super::{ModelError, ModelErrorKind, ModelReply, Usage};

/// The evaluation id of a reply's entry until the runner places it.
pub(crate) const PLACEHOLDER_EVALUATION_ID: &str = "";

/// An error of a wire format (the driver fills in `url` and `attempts`).
pub(crate) fn wire_error(kind: ModelErrorKind) -> ModelError {
    ModelError {
        kind,
        attempts: 0,
        url: String::new(),
    }
}

/// The answer cannot be read: `reason` says what was wrong.
pub(crate) fn malformed(reason: impl Into<String>) -> ModelError {
    wire_error(ModelErrorKind::Malformed(reason.into()))
}

/// The request cannot be built.
pub(crate) fn request_error(reason: impl Into<String>) -> ModelError {
    wire_error(ModelErrorKind::Request(reason.into()))
}

/// A provider error reported inside a 2xx answer (an `error` object, an
/// error event of a stream): its text verbatim, as a status error whose
/// status (0 here) the driver replaces with the answer's HTTP status.
pub(crate) fn provider_error(text: impl Into<String>) -> ModelError {
    wire_error(ModelErrorKind::Status {
        status: 0,
        body: text.into(),
    })
}

/// Parses one frame's JSON, saying which frame failed.
pub(crate) fn frame_json(text: &str, what: &str) -> Result<Value, ModelError> {
    serde_json::from_str(text).map_err(|error| {
        let mut shown: String = text.chars().take(200).collect();
        if shown.len() < text.len() {
            shown.push_str("...");
        }
        malformed(format!("{what} is not JSON ({error}): {shown}"))
    })
}

/// The reply for one provider `message` (the assistant message as the
/// provider wrote it), read by convlog's `provider` mapper: exactly one
/// assistant entry, with `finish_reason` set.
pub(crate) fn assistant_reply(
    provider: Provider,
    message: Value,
    finish_reason: Option<String>,
    usage: Option<Usage>,
) -> Result<ModelReply, ModelError> {
    let mut entries = convlog::ingest(
        provider,
        // Moved in: `json!([message])` would copy it through `to_value`.
        &Value::Array(vec![message]),
        PLACEHOLDER_EVALUATION_ID,
        0,
        Timestamp::now(),
    )
    .map_err(|error| malformed(format!("the assistant message cannot be read: {error}")))?;
    if entries.len() != 1 || entries[0].role != Role::Assistant {
        return Err(malformed(format!(
            "the reply gave {} entries, not one assistant entry",
            entries.len()
        )));
    }
    let mut entry: ConversationEntry = entries.remove(0);
    entry.finish_reason = finish_reason;
    Ok(ModelReply { entry, usage })
}

/// Usage from two counters of `object` (`prompt_tokens` and
/// `completion_tokens`, `prompt_eval_count` and `eval_count`, ...); `None`
/// when neither is there.
pub(crate) fn usage_from(object: Option<&Value>, input: &str, output: &str) -> Option<Usage> {
    let object = object?;
    let input_tokens = object.get(input).and_then(Value::as_u64);
    let output_tokens = object.get(output).and_then(Value::as_u64);
    if input_tokens.is_none() && output_tokens.is_none() {
        return None;
    }
    Some(Usage {
        input_tokens: input_tokens.unwrap_or(0),
        output_tokens: output_tokens.unwrap_or(0),
    })
}
