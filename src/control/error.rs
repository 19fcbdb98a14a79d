//! How message control prints call ids in its errors' fixed texts.
//!
//! The errors of message control are variants of [`crate::Error`]
//! (`ContextNotFound`, `NotContextOwner`, `ContextExists`,
//! `ResponsesWithoutCalls`, `ResponseBeforeCall`, `CallsWithoutResponses`,
//! `DuplicateOpenCallIds`, `AnonymousPrivateContext`, `GenerationFailed`).
//! The texts of the access and validation errors are fixed (listed in
//! `docs/history.md`) and do not change between releases; call ids are
//! listed like Python lists (`['call_1']`).

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
