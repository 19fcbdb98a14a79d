//! JSON strings written straight to bytes, for request bodies.
//!
//! [`write_str`] gives exactly the bytes `serde_json` writes for a string
//! (the same escapes: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, any other
//! byte below `0x20` as `\u00xx` in lowercase hex; nothing else escaped),
//! but looks for the bytes to escape eight at a time: a request body is
//! mostly text that needs none, and escaping byte by byte was the largest
//! single cost of rendering a request.

/// `0x01` in every byte of a word.
const LOW_BITS: u64 = 0x0101_0101_0101_0101;
/// `0x80` in every byte of a word.
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
/// Bytes below this are control characters, escaped.
const CONTROL_END: u8 = 0x20;

/// Whether any byte of `word` is zero (exact: a borrow can only reach a
/// byte above a zero one).
fn has_zero_byte(word: u64) -> bool {
    word.wrapping_sub(LOW_BITS) & !word & HIGH_BITS != 0
}

/// Whether any byte of `word` needs escaping: below `0x20`, a quote or a
/// backslash. (For "below `n`", `n` at most `0x80`, the same trick as
/// [`has_zero_byte`] is exact.)
fn needs_escape(word: u64) -> bool {
    let control = word.wrapping_sub(LOW_BITS * u64::from(CONTROL_END)) & !word & HIGH_BITS;
    control != 0
        || has_zero_byte(word ^ (LOW_BITS * u64::from(b'"')))
        || has_zero_byte(word ^ (LOW_BITS * u64::from(b'\\')))
}

/// The escape of `byte`, if it needs one: the letter after the backslash
/// (`u` for `\u00xx`).
fn escape_of(byte: u8) -> Option<u8> {
    match byte {
        b'"' => Some(b'"'),
        b'\\' => Some(b'\\'),
        0x08 => Some(b'b'),
        0x09 => Some(b't'),
        0x0A => Some(b'n'),
        0x0C => Some(b'f'),
        0x0D => Some(b'r'),
        byte if byte < CONTROL_END => Some(b'u'),
        _ => None,
    }
}

/// Appends `text` as a JSON string (quoted and escaped) to `out`.
pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) {
    const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Bytes before `start` are written; `at` is the next one to look at.
    let mut start = 0;
    let mut at = 0;
    loop {
        while let Some(chunk) = bytes.get(at..at + 8) {
            let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
            if needs_escape(word) {
                break;
            }
            at += 8;
        }
        let Some(&byte) = bytes.get(at) else {
            break;
        };
        if let Some(escape) = escape_of(byte) {
            out.extend_from_slice(&bytes[start..at]);
            if escape == b'u' {
                out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX_DIGITS[usize::from(byte >> 4)],
                    HEX_DIGITS[usize::from(byte & 0xF)],
                ]);
            } else {
                out.extend_from_slice(&[b'\\', escape]);
            }
            start = at + 1;
        }
        at += 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::write_str;

    fn written(text: &str) -> String {
        let mut out = b"[".to_vec();
        write_str(&mut out, text);
        String::from_utf8(out[1..].to_vec()).expect("UTF-8")
    }

    fn check(text: &str) {
        assert_eq!(
            written(text),
            serde_json::to_string(text).unwrap(),
            "{text:?}"
        );
    }

    /// Every byte that can stand alone in a string, at every offset of an
    /// eight-byte word and beside every other, is written as serde_json
    /// writes it.
    #[test]
    fn every_ascii_byte_is_written_as_serde_json_writes_it() {
        for byte in 0u8..0x80 {
            let character = char::from(byte);
            for before in 0..17 {
                let mut text = "a".repeat(before);
                text.push(character);
                text.push_str("tail text");
                check(&text);
            }
            for other in 0u8..0x80 {
                check(&format!("{character}{}", char::from(other)));
            }
        }
    }

    #[test]
    fn text_beyond_ascii_and_edge_lengths_are_written_as_serde_json_writes_them() {
        check("");
        for text in [
            "naïve ✓ 日本語 🦀",
            "\u{7f}\u{80}\u{9f}\u{a0}\u{2028}\u{2029}",
            "quote \" backslash \\ slash / tab \t newline \n nul \0 unit \u{1f}",
            "{\"key\":\"value\",\"nested\":[1,2,3]}",
        ] {
            for cut in 0..=text.len() {
                if text.is_char_boundary(cut) {
                    check(&text[..cut]);
                    check(&text[cut..]);
                }
            }
        }
        // A fixed pseudo-random stream (xorshift) of mixed texts.
        let alphabet: Vec<char> = "ab \"\\\n\t\u{1}\u{1f}é✓🦀/\u{7f}".chars().collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2_000 {
            let mut text = String::new();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            for shift in 0..(seed % 40) {
                text.push(alphabet[((seed >> (shift % 60)) % alphabet.len() as u64) as usize]);
            }
            check(&text);
        }
    }
}
