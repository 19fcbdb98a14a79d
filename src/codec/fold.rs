//! The two bodies the conversation fold reads most, decoded by hand:
//! `conversation_recorded` and `tool_status` (docs/format.md section 12).
//!
//! Decoding them through serde and bincode costs a visitor call per field
//! and a reader call per varint; reading a conversation decodes every one
//! of its events, so this reader walks the bytes directly. It accepts
//! exactly what bincode 2.0.1's standard configuration accepts for these
//! layouts (the same varint markers per integer width, a byte string of 16
//! bytes for a UUID, `0`/`1` for a bool or an option's tag, UTF-8 text,
//! nothing left over) and gives the same values: whenever it decodes a
//! body, `decode_event` gives the same event, and whenever `decode_event`
//! decodes one, so does it (`tests::the_fold_decode_is_decode_event`
//! checks both on every prefix and altered byte of each kind). It answers
//! `None` where bincode fails, and the caller decodes again with
//! `decode_event` to say why.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{FoldEvent, ToolStatusRef};
use crate::model::{ConversationEntry, Reasoning, Role, Timestamp, ToolCall, ToolStatus};

/// The varint markers (docs/format.md section 12): a first byte up to
/// `SINGLE_BYTE_MAX` is the value; these announce a `u16`, `u32`, `u64`
/// little-endian value after them.
const SINGLE_BYTE_MAX: u8 = 250;
const U16_MARKER: u8 = 251;
const U32_MARKER: u8 = 252;
const U64_MARKER: u8 = 253;

/// Bytes of a UUID's byte string.
const UUID_BYTES: usize = 16;

/// The fewest bytes one encoded tool call takes (three empty strings, a
/// status, two absent times, an absent error): bounds what a damaged count
/// can make the reader reserve.
const TOOL_CALL_BYTES_MIN: usize = 7;

/// Reads values off the front of a body.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(first)
    }

    fn take(&mut self, count: usize) -> Option<&'a [u8]> {
        if count > self.bytes.len() {
            return None;
        }
        let (taken, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Some(taken)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    /// A `u64` varint (any of the four forms).
    fn u64(&mut self) -> Option<u64> {
        match self.byte()? {
            value @ 0..=SINGLE_BYTE_MAX => Some(u64::from(value)),
            U16_MARKER => Some(u64::from(u16::from_le_bytes(self.array()?))),
            U32_MARKER => Some(u64::from(u32::from_le_bytes(self.array()?))),
            U64_MARKER => Some(u64::from_le_bytes(self.array()?)),
            _ => None,
        }
    }

    /// A `u32` varint: bincode refuses the `u64` form for a `u32`, even
    /// when the value would fit.
    fn u32(&mut self) -> Option<u32> {
        match self.byte()? {
            value @ 0..=SINGLE_BYTE_MAX => Some(u32::from(value)),
            U16_MARKER => Some(u32::from(u16::from_le_bytes(self.array()?))),
            U32_MARKER => Some(u32::from_le_bytes(self.array()?)),
            _ => None,
        }
    }

    /// A length or count.
    fn count(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }

    /// An `i64`: zigzag over the `u64` varint.
    fn i64(&mut self) -> Option<i64> {
        let zigzag = self.u64()?;
        let magnitude = (zigzag >> 1) as i64;
        Some(if zigzag & 1 == 0 {
            magnitude
        } else {
            !magnitude
        })
    }

    fn time(&mut self) -> Option<Timestamp> {
        self.i64().map(Timestamp)
    }

    fn bool(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// An option's tag: `Some(false)` for none, `Some(true)` for some.
    fn tag(&mut self) -> Option<bool> {
        self.bool()
    }

    fn str(&mut self) -> Option<&'a str> {
        let len = self.count()?;
        std::str::from_utf8(self.take(len)?).ok()
    }

    fn string(&mut self) -> Option<String> {
        self.str().map(str::to_string)
    }

    fn option_str(&mut self) -> Option<Option<&'a str>> {
        if self.tag()? {
            self.str().map(Some)
        } else {
            Some(None)
        }
    }

    fn option_string(&mut self) -> Option<Option<String>> {
        Some(self.option_str()?.map(str::to_string))
    }

    fn option_time(&mut self) -> Option<Option<Timestamp>> {
        if self.tag()? {
            self.time().map(Some)
        } else {
            Some(None)
        }
    }

    fn uuid(&mut self) -> Option<Uuid> {
        if self.count()? != UUID_BYTES {
            return None;
        }
        Some(Uuid::from_bytes(self.array()?))
    }

    fn role(&mut self) -> Option<Role> {
        match self.u32()? {
            0 => Some(Role::System),
            1 => Some(Role::User),
            2 => Some(Role::Assistant),
            3 => Some(Role::Tool),
            _ => None,
        }
    }

    fn status(&mut self) -> Option<ToolStatus> {
        match self.u32()? {
            0 => Some(ToolStatus::Pending),
            1 => Some(ToolStatus::Running),
            2 => Some(ToolStatus::Completed),
            3 => Some(ToolStatus::Failed),
            _ => None,
        }
    }

    fn reasoning(&mut self) -> Option<Reasoning> {
        Some(Reasoning {
            text: self.option_string()?,
            signature: self.option_string()?,
            redacted: self.bool()?,
        })
    }

    fn tool_call(&mut self) -> Option<ToolCall> {
        Some(ToolCall {
            call_id: self.string()?,
            name: self.string()?,
            arguments: self.string()?,
            status: self.status()?,
            started_at: self.option_time()?,
            ended_at: self.option_time()?,
            error: self.option_string()?,
        })
    }

    fn entry(&mut self) -> Option<ConversationEntry> {
        let message_id = self.uuid()?;
        let evaluation_id = self.string()?;
        let sequence = self.u64()?;
        let turn = self.u32()?;
        let role = self.role()?;
        let content = self.option_string()?;
        let reasoning = if self.tag()? {
            Some(self.reasoning()?)
        } else {
            None
        };
        let calls = self.count()?;
        let mut tool_calls = Vec::with_capacity(calls.min(self.bytes.len() / TOOL_CALL_BYTES_MIN));
        for _ in 0..calls {
            tool_calls.push(self.tool_call()?);
        }
        let tool_call_id = self.option_string()?;
        let tool_name = self.option_string()?;
        let is_error = self.bool()?;
        let finish_reason = self.option_string()?;
        let prompt_ns = self.option_string()?;
        let prompt_key = self.option_string()?;
        let created_at = self.time()?;
        let mut metadata = BTreeMap::new();
        for _ in 0..self.count()? {
            // A key given twice keeps its last value, as a map decoded by
            // serde does.
            metadata.insert(self.string()?, self.string()?);
        }
        Some(ConversationEntry {
            message_id,
            evaluation_id,
            sequence,
            turn,
            role,
            content,
            reasoning,
            tool_calls,
            tool_call_id,
            tool_name,
            is_error,
            finish_reason,
            prompt_ns,
            prompt_key,
            created_at,
            metadata,
        })
    }

    /// The value read, if the body ends right after it.
    fn whole<T>(mut self, read: impl FnOnce(&mut Reader<'a>) -> Option<T>) -> Option<T> {
        let value = read(&mut self)?;
        self.bytes.is_empty().then_some(value)
    }
}

/// A `conversation_recorded` body: its conversation id (borrowed) and its
/// entry; the session id and recording time are checked and dropped.
pub(super) fn recorded(body: &[u8]) -> Option<FoldEvent<'_>> {
    Reader { bytes: body }.whole(|reader| {
        let conversation_id = reader.str()?;
        let _session_id = reader.option_str()?;
        let _created_at = reader.time()?;
        let entry = reader.entry()?;
        Some(FoldEvent::Recorded {
            conversation_id,
            entry,
        })
    })
}

/// A `tool_status` body, borrowed.
pub(super) fn status(body: &[u8]) -> Option<FoldEvent<'_>> {
    Reader { bytes: body }.whole(|reader| {
        Some(FoldEvent::Status(ToolStatusRef {
            conversation_id: reader.str()?,
            evaluation_id: reader.str()?,
            call_id: reader.str()?,
            status: reader.status()?,
            at: reader.time()?,
            error: reader.option_str()?,
            resumed: reader.bool()?,
        }))
    })
}

/// The string a body starts with, read as bincode reads a `&str` (the rest
/// of the body unchecked): the conversation id of the kinds that hold it
/// first (`conversation_recorded`, `tool_status`, `messages_replaced`,
/// `history_curated`; `peek_conversation_id`). The model structs keep
/// `conversation_id` first (a comment on each says so);
/// `tests::the_peeked_id_is_the_decoded_one` checks this against every kind.
pub(super) fn leading_str(body: &[u8]) -> Option<&str> {
    Reader { bytes: body }.str()
}
