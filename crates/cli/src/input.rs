//! Reading standard input: lines bounded in length without buffering the
//! rest, and a leading byte order mark.

use std::io::BufRead;

/// Longest input line `append` reads (and the most standard input the
/// message-control commands read): one line holds one event or one atomic
/// batch, and a batch holds at most `BATCH_BYTES_MAX` encoded bytes. A
/// longer line is refused after this many bytes: the rest of it is skipped
/// unread into memory.
pub const INPUT_LINE_BYTES_MAX: usize = convlog::log::BATCH_BYTES_MAX;

/// The UTF-8 byte order mark some editors put at the start of a file.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// `bytes` without a leading UTF-8 byte order mark.
pub fn without_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes)
}

/// What [`read_line_bounded`] read.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// The input ended.
    End,
    /// A line (with its newline, if any) is in the buffer.
    Line,
    /// The line was longer than the limit: it was skipped, the buffer is empty.
    TooLong,
}

/// Reads one line into `line`, holding at most `limit` bytes of it (its
/// newline aside): the rest of a longer line is consumed and dropped, never
/// buffered.
pub fn read_line_bounded(
    input: &mut impl BufRead,
    line: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    line.clear();
    let (mut any, mut too_long) = (false, false);
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            break;
        }
        any = true;
        let newline = available.iter().position(|&byte| byte == b'\n');
        let used = newline.map_or(available.len(), |at| at + 1);
        let content = newline.map_or(used, |at| at);
        if !too_long {
            if line.len() + content > limit {
                too_long = true;
                line.clear();
                line.shrink_to_fit();
            } else {
                line.extend_from_slice(&available[..used]);
            }
        }
        input.consume(used);
        if newline.is_some() {
            break;
        }
    }
    Ok(match (any, too_long) {
        (false, _) => LineRead::End,
        (true, true) => LineRead::TooLong,
        (true, false) => LineRead::Line,
    })
}
