//! Splitting a streamed response body into [`Frame`]s: Server-Sent Events
//! (`text/event-stream`) or newline-delimited JSON (Ollama).
//!
//! The decoder takes the body in chunks cut anywhere (inside a line, inside
//! a UTF-8 character, between the `\r` and `\n` of a line end) and yields
//! each frame once it is complete. SSE follows the WHATWG parsing rules:
//! lines end with CRLF, LF or CR; `:` starts a comment; `data:` lines of one
//! event are joined with `\n`; one leading space of a value is dropped; an
//! event is dispatched at a blank line, and only if it has data; `id` and
//! `retry` are ignored. One leniency: at the end of the body, a last line
//! without its line end and an event without its blank line are still
//! delivered (servers that close right after `data: [DONE]`).

use super::wire::{Frame, Framing};

/// Incremental frame decoder for one streamed body.
#[derive(Debug)]
pub(crate) struct FrameDecoder {
    framing: Framing,
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The last chunk ended with `\r`: a `\n` starting the next one belongs
    /// to that line end.
    skip_lf: bool,
    /// SSE: the current event's name.
    event: Option<String>,
    /// SSE: the current event's data lines, each followed by `\n`.
    data: String,
    /// Lines read, for error messages.
    lines: u64,
}

impl FrameDecoder {
    /// A decoder for a body framed as `framing`.
    pub(crate) fn new(framing: Framing) -> FrameDecoder {
        FrameDecoder {
            framing,
            line: Vec::new(),
            skip_lf: false,
            event: None,
            data: String::new(),
            lines: 0,
        }
    }

    /// Takes the next chunk of the body; pushes the frames it completed.
    pub(crate) fn push(&mut self, chunk: &[u8], out: &mut Vec<Frame>) -> Result<(), String> {
        for &byte in chunk {
            if self.skip_lf {
                self.skip_lf = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' => self.end_line(out)?,
                b'\r' => {
                    self.end_line(out)?;
                    self.skip_lf = true;
                }
                _ => self.line.push(byte),
            }
        }
        Ok(())
    }

    /// The body ended: pushes a last line without its line end and (SSE) a
    /// last event without its blank line.
    pub(crate) fn finish(&mut self, out: &mut Vec<Frame>) -> Result<(), String> {
        if !self.line.is_empty() {
            self.end_line(out)?;
        }
        if self.framing == Framing::Sse {
            self.dispatch(out);
        }
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<Frame>) -> Result<(), String> {
        self.lines += 1;
        let bytes = std::mem::take(&mut self.line);
        let mut line = String::from_utf8(bytes)
            .map_err(|error| format!("line {} of the stream is not UTF-8 ({error})", self.lines))?;
        if self.lines == 1 && line.starts_with('\u{feff}') {
            line.drain(..'\u{feff}'.len_utf8());
        }
        match self.framing {
            Framing::Ndjson => {
                if !line.trim().is_empty() {
                    out.push(Frame::Line(line));
                }
            }
            Framing::Sse => self.sse_line(&line, out),
        }
        Ok(())
    }

    fn sse_line(&mut self, line: &str, out: &mut Vec<Frame>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<Frame>) {
        let event = self.event.take().filter(|name| !name.is_empty());
        let mut data = std::mem::take(&mut self.data);
        // Each data line added its value and a `\n`: no line, no event.
        if data.pop().is_some() {
            out.push(Frame::Sse { event, data });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(event: Option<&str>, data: &str) -> Frame {
        Frame::Sse {
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    /// Decodes `body` cut into chunks at every `step` bytes.
    fn decode(framing: Framing, body: &[u8], step: usize) -> Result<Vec<Frame>, String> {
        let mut decoder = FrameDecoder::new(framing);
        let mut out = Vec::new();
        for chunk in body.chunks(step) {
            decoder.push(chunk, &mut out)?;
        }
        decoder.finish(&mut out)?;
        Ok(out)
    }

    /// Every cut of `body` gives `expected`.
    fn assert_all_cuts(framing: Framing, body: &str, expected: &[Frame]) {
        for step in 1..=body.len().max(1) {
            assert_eq!(
                decode(framing, body.as_bytes(), step).unwrap(),
                expected,
                "step {step} of {body:?}"
            );
        }
    }

    #[test]
    fn sse_events_with_every_line_end_and_cut() {
        let expected = [
            sse(None, "{\"a\":1}"),
            sse(Some("message_stop"), "x\ny"),
            sse(None, "[DONE]"),
        ];
        for end in ["\n", "\r\n", "\r"] {
            let body = format!(
                ": keep-alive{end}data: {{\"a\":1}}{end}{end}event: message_stop{end}data: x{end}data:y{end}id: 7{end}retry: 10{end}{end}data: [DONE]{end}{end}"
            );
            assert_all_cuts(Framing::Sse, &body, &expected);
        }
    }

    #[test]
    fn sse_edge_cases() {
        // No trailing line end at the end of the body.
        assert_all_cuts(
            Framing::Sse,
            "data: a\n\ndata: [DONE]",
            &[sse(None, "a"), sse(None, "[DONE]")],
        );
        // An event name without data dispatches nothing; an empty data line does.
        assert_all_cuts(Framing::Sse, "event: ping\n\ndata:\n\n", &[sse(None, "")]);
        // Only one leading space is dropped; a colon-less line is a field name.
        assert_all_cuts(Framing::Sse, "data:  two\ndata\n\n", &[sse(None, " two\n")]);
        // A byte order mark and a multi-byte character cut anywhere.
        assert_all_cuts(
            Framing::Sse,
            "\u{feff}data: h\u{e9}llo \u{1f600}\n\n",
            &[sse(None, "h\u{e9}llo \u{1f600}")],
        );
        let error = decode(Framing::Sse, b"data: \xff\n\n", 64).unwrap_err();
        assert!(
            error.contains("line 1") && error.contains("UTF-8"),
            "{error}"
        );
    }

    #[test]
    fn ndjson_lines() {
        let line = |text: &str| Frame::Line(text.to_string());
        assert_all_cuts(
            Framing::Ndjson,
            "{\"a\":1}\r\n\n{\"b\":2}\n{\"done\":true}",
            &[
                line("{\"a\":1}"),
                line("{\"b\":2}"),
                line("{\"done\":true}"),
            ],
        );
    }
}
