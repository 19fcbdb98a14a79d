//! The errors of message control, with fixed texts that clients match on.

/// What a message-control operation can fail with. The `Display` texts of
/// the access and validation errors are fixed (listed in
/// `docs/history.md`) and do not change between releases; call ids are listed like Python lists (`['call_1']`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// No context with this id was created.
    #[error("Context with id: {context_id} does not exist")]
    NotFound {
        /// The id asked for.
        context_id: String,
    },

    /// The context is private and the acting principal is not its owner
    /// (or the operation is reserved to the owner).
    #[error("Context does not belong to user")]
    NotOwner {
        /// The context.
        context_id: String,
    },

    /// A context with this id was already created.
    #[error("Context with id: {context_id} already exists")]
    AlreadyExists {
        /// The id.
        context_id: String,
    },

    /// Tool responses name calls that neither the list nor the conversation
    /// has open.
    #[error("Tool responses found without corresponding tool calls: {}", python_list(.call_ids))]
    ResponsesWithoutCalls {
        /// Their call ids, in list order.
        call_ids: Vec<String>,
    },

    /// A tool response comes before the call it answers.
    #[error("Tool response with ID '{call_id}' appears before its corresponding tool call")]
    ResponseBeforeCall {
        /// The first such call id.
        call_id: String,
    },

    /// Tool calls of the list that no later response in it answers.
    #[error("Tool calls found without corresponding responses: {}", python_list(.call_ids))]
    CallsWithoutResponses {
        /// Their call ids, in list order.
        call_ids: Vec<String>,
    },

    /// A call id that another call still open (unanswered) already uses, in
    /// the list or in the conversation: a response could not tell the two
    /// calls apart. (Checked before the three pairing rules.)
    #[error("Tool call IDs used by two open tool calls: {} (each tool call needs its own ID until it is answered)", python_list(.call_ids))]
    DuplicateCallIds {
        /// The repeated call ids, in list order of their second use.
        call_ids: Vec<String>,
    },

    /// A request that can never be valid (for example both a message and a
    /// prompt, or neither).
    #[error("{0}")]
    InvalidRequest(String),

    /// The host's model failed; what was saved before it ran stays saved.
    #[error("generation failed: {0}")]
    Generation(String),

    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] crate::Error),
}

/// `ids` as Python prints a list of strings: `['a', 'b']`.
pub(crate) fn python_list(ids: &[String]) -> String {
    let items: Vec<String> = ids.iter().map(|id| python_repr(id)).collect();
    format!("[{}]", items.join(", "))
}

/// A string as Python's `repr` prints it: single quotes unless the text has
/// a single quote and no double quote.
fn python_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for character in text.chars() {
        match character {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            _ if character == quote => {
                out.push('\\');
                out.push(character);
            }
            _ if character.is_control() => out.push_str(&format!("\\x{:02x}", character as u32)),
            _ => out.push(character),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_print_like_python() {
        let ids = |items: &[&str]| {
            items
                .iter()
                .map(|item| item.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(python_list(&ids(&["call_123"])), "['call_123']");
        assert_eq!(python_list(&ids(&["a", "b"])), "['a', 'b']");
        assert_eq!(python_list(&ids(&[])), "[]");
        assert_eq!(python_list(&ids(&["it's"])), "[\"it's\"]");
        assert_eq!(python_list(&ids(&["a'\"b"])), "['a\\'\"b']");
        assert_eq!(
            python_list(&ids(&["back\\slash\n"])),
            "['back\\\\slash\\n']"
        );
    }
}
