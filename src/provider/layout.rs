//! The part layout of an entry, and the metadata keys the mappers use.
//!
//! A neutral entry holds one text, one reasoning and a list of calls; a
//! provider message holds an ordered list of parts (Anthropic content blocks,
//! Gemini parts, Responses items, the text and tool parts of `crate::parts`), some
//! carrying provider extras (a Gemini `thoughtSignature` on a `functionCall`
//! part, a Responses item id). When an entry's parts differ from the default
//! order (reasoning, text, calls, no extras), the layout is kept in metadata
//! under [`BLOCKS_KEY`] as a JSON array; each element is one part:
//!
//! - `{"kind": "reasoning", "index": i}`: reasoning block `i` (0 is
//!   `entry.reasoning`, `i > 0` is element `i - 1` of [`REASONING_MORE_KEY`]);
//! - `{"kind": "text", "bytes": n}`: the next `n` bytes of `entry.content`;
//! - `{"kind": "call", "call_id": id}`: the call with that id;
//!
//! and optionally `part_id` (the id of a `crate::parts` part), `thought_signature` (Gemini),
//! `item_id` (OpenAI Responses item id), `id_synthesized` (the call id was
//! generated; do not send it), `summary_bytes` (Responses summary parts).
//!
//! A layout that does not match its entry (texts not adding up to the
//! content, a call missing or out of order) is ignored and the default order
//! used: a layout can never make a call disappear.

use serde_json::{json, Map, Value};

use crate::model::{ConversationEntry, Reasoning, ToolCall};

/// Metadata key of the part layout (a JSON array, see the module docs).
pub const BLOCKS_KEY: &str = "convlog.blocks";
/// Metadata key of the reasoning blocks after the first (a JSON array of
/// `{"text", "signature", "redacted"}` objects, in order).
pub const REASONING_MORE_KEY: &str = "convlog.reasoning_more";
/// Metadata key naming the provider whose signatures the reasoning carries
/// (`anthropic`, `gemini`, `openai-responses`, ...). Signatures are echoed
/// only to that provider; absent means "trust the host".
pub const REASONING_SOURCE_KEY: &str = "convlog.reasoning_source";
/// Metadata key holding `developer` for an OpenAI developer message (a
/// system entry), so OpenAI renders it back with that role.
pub const OPENAI_ROLE_KEY: &str = "convlog.openai_role";
/// Metadata key set to `json` on a tool entry whose content is the JSON of
/// a Gemini `functionResponse.response` that was neither `{"output": text}`
/// nor `{"error": text}`; Gemini gets the object back verbatim.
pub const GEMINI_RESPONSE_KEY: &str = "convlog.gemini_response";
/// The key that wraps arguments which are not a JSON object, where a
/// provider needs an object (Anthropic `input`, Gemini `args`, Ollama
/// `arguments`): `{"_raw_arguments": "<the stored string>"}`.
pub const RAW_ARGUMENTS_KEY: &str = "_raw_arguments";

/// The arguments as a JSON object, for providers that need one.
///
/// - A JSON object: itself.
/// - Empty or only whitespace: `{}` (a call without arguments).
/// - Anything else (not JSON, or JSON that is not an object such as `[1]`
///   or `"x"`): `{"_raw_arguments": "<the string, verbatim>"}`.
///
/// The stored string is never changed; [`arguments_string`] undoes the wrap.
pub fn arguments_object(arguments: &str) -> Map<String, Value> {
    if arguments.trim().is_empty() {
        return Map::new();
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(object)) => object,
        _ => {
            let mut wrapped = Map::new();
            wrapped.insert(
                RAW_ARGUMENTS_KEY.to_string(),
                Value::String(arguments.to_string()),
            );
            wrapped
        }
    }
}

/// The arguments string for an object a provider returned: the wrapped
/// string when the object is exactly `{"_raw_arguments": "<string>"}`,
/// otherwise the object's compact JSON.
pub fn arguments_string(input: &Value) -> String {
    if let Value::Object(object) = input {
        if object.len() == 1 {
            if let Some(Value::String(raw)) = object.get(RAW_ARGUMENTS_KEY) {
                return raw.clone();
            }
        }
    }
    input.to_string()
}

/// Provider extras carried by one part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Extras {
    pub part_id: Option<String>,
    pub thought_signature: Option<String>,
    pub item_id: Option<String>,
    pub id_synthesized: bool,
    pub summary_bytes: Option<Vec<usize>>,
}

impl Extras {
    fn write(&self, object: &mut Map<String, Value>) {
        if let Some(part_id) = &self.part_id {
            object.insert("part_id".into(), json!(part_id));
        }
        if let Some(signature) = &self.thought_signature {
            object.insert("thought_signature".into(), json!(signature));
        }
        if let Some(item_id) = &self.item_id {
            object.insert("item_id".into(), json!(item_id));
        }
        if self.id_synthesized {
            object.insert("id_synthesized".into(), json!(true));
        }
        if let Some(bytes) = &self.summary_bytes {
            object.insert("summary_bytes".into(), json!(bytes));
        }
    }

    fn read(object: &Map<String, Value>) -> Option<Extras> {
        let text = |key: &str| -> Option<Option<String>> {
            match object.get(key) {
                None => Some(None),
                Some(Value::String(text)) => Some(Some(text.clone())),
                Some(_) => None,
            }
        };
        let summary_bytes = match object.get("summary_bytes") {
            None => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|item| item.as_u64().and_then(|n| usize::try_from(n).ok()))
                    .collect::<Option<Vec<usize>>>()?,
            ),
            Some(_) => return None,
        };
        Some(Extras {
            part_id: text("part_id")?,
            thought_signature: text("thought_signature")?,
            item_id: text("item_id")?,
            id_synthesized: match object.get("id_synthesized") {
                None => false,
                Some(Value::Bool(flag)) => *flag,
                Some(_) => return None,
            },
            summary_bytes,
        })
    }
}

/// What one part of the layout refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlockRef {
    Reasoning(usize),
    Text(usize),
    Call(String),
}

/// One part of the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub what: BlockRef,
    pub extras: Extras,
}

impl Block {
    fn to_json(&self) -> Value {
        let mut object = Map::new();
        match &self.what {
            BlockRef::Reasoning(index) => {
                object.insert("kind".into(), json!("reasoning"));
                object.insert("index".into(), json!(index));
            }
            BlockRef::Text(bytes) => {
                object.insert("kind".into(), json!("text"));
                object.insert("bytes".into(), json!(bytes));
            }
            BlockRef::Call(call_id) => {
                object.insert("kind".into(), json!("call"));
                object.insert("call_id".into(), json!(call_id));
            }
        }
        self.extras.write(&mut object);
        Value::Object(object)
    }

    fn from_json(value: &Value) -> Option<Block> {
        let object = value.as_object()?;
        let number = |key: &str| {
            object
                .get(key)?
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
        };
        let what = match object.get("kind")?.as_str()? {
            "reasoning" => BlockRef::Reasoning(number("index")?),
            "text" => BlockRef::Text(number("bytes")?),
            "call" => BlockRef::Call(object.get("call_id")?.as_str()?.to_string()),
            _ => return None,
        };
        Some(Block {
            what,
            extras: Extras::read(object)?,
        })
    }
}

/// Every reasoning block of the entry: `entry.reasoning`, then those under
/// [`REASONING_MORE_KEY`] (ignored if unreadable).
pub(crate) fn reasoning_blocks(entry: &ConversationEntry) -> Vec<Reasoning> {
    let Some(first) = &entry.reasoning else {
        return Vec::new();
    };
    let mut blocks = vec![first.clone()];
    if let Some(more) = entry.metadata.get(REASONING_MORE_KEY) {
        if let Ok(more) = serde_json::from_str::<Vec<Reasoning>>(more) {
            blocks.extend(more);
        }
    }
    blocks
}

/// The default layout: every reasoning block, the text (if any), the calls.
pub(crate) fn default_blocks(entry: &ConversationEntry) -> Vec<Block> {
    let mut blocks: Vec<Block> = (0..reasoning_blocks(entry).len())
        .map(|index| Block {
            what: BlockRef::Reasoning(index),
            extras: Extras::default(),
        })
        .collect();
    if let Some(content) = entry.content.as_deref().filter(|text| !text.is_empty()) {
        blocks.push(Block {
            what: BlockRef::Text(content.len()),
            extras: Extras::default(),
        });
    }
    blocks.extend(entry.tool_calls.iter().map(|call| Block {
        what: BlockRef::Call(call.call_id.clone()),
        extras: Extras::default(),
    }));
    blocks
}

/// The stored layout, if there is one and it matches the entry.
fn stored_blocks(entry: &ConversationEntry) -> Option<Vec<Block>> {
    let text = entry.metadata.get(BLOCKS_KEY)?;
    let Value::Array(items) = serde_json::from_str::<Value>(text).ok()? else {
        return None;
    };
    let blocks = items
        .iter()
        .map(Block::from_json)
        .collect::<Option<Vec<Block>>>()?;
    matches_entry(&blocks, entry).then_some(blocks)
}

/// A layout matches its entry when its texts tile the content exactly (on
/// character boundaries), every reasoning block appears once, and every call
/// appears once, in the entry's call order.
fn matches_entry(blocks: &[Block], entry: &ConversationEntry) -> bool {
    let content = entry.content.as_deref().unwrap_or("");
    let reasoning_count = reasoning_blocks(entry).len();
    let mut offset = 0usize;
    let mut reasoning_seen = vec![false; reasoning_count];
    let mut calls = entry.tool_calls.iter();
    for block in blocks {
        match &block.what {
            BlockRef::Text(bytes) => {
                let Some(end) = offset.checked_add(*bytes) else {
                    return false;
                };
                if end > content.len() || !content.is_char_boundary(end) {
                    return false;
                }
                offset = end;
            }
            BlockRef::Reasoning(index) => {
                match reasoning_seen.get_mut(*index) {
                    Some(seen @ false) => *seen = true,
                    _ => return false,
                };
            }
            BlockRef::Call(call_id) => match calls.next() {
                Some(call) if call.call_id == *call_id => {}
                _ => return false,
            },
        }
    }
    offset == content.len() && reasoning_seen.iter().all(|seen| *seen) && calls.next().is_none()
}

/// Stores `blocks` as the entry's layout unless they are the default.
pub(crate) fn store_blocks(entry: &mut ConversationEntry, blocks: &[Block]) {
    if blocks == default_blocks(entry).as_slice() {
        entry.metadata.remove(BLOCKS_KEY);
        return;
    }
    let json = Value::Array(blocks.iter().map(Block::to_json).collect());
    entry
        .metadata
        .insert(BLOCKS_KEY.to_string(), json.to_string());
}

/// One part of an entry, resolved for rendering.
#[derive(Debug, Clone)]
pub(crate) enum Piece<'a> {
    Reasoning(Reasoning, Extras),
    Text(&'a str, Extras),
    Call(&'a ToolCall, Extras),
}

/// The layout of a parts message (`crate::parts`, metadata
/// `convlog.parts`): its text parts and tool parts in order, with their part
/// ids, after the reasoning blocks.
fn parts_blocks(entry: &ConversationEntry) -> Option<Vec<Block>> {
    let text = entry.metadata.get(crate::parts::PARTS_METADATA_KEY)?;
    let Value::Array(items) = serde_json::from_str::<Value>(text).ok()? else {
        return None;
    };
    let mut blocks: Vec<Block> = (0..reasoning_blocks(entry).len())
        .map(|index| Block {
            what: BlockRef::Reasoning(index),
            extras: Extras::default(),
        })
        .collect();
    for item in &items {
        let extras = Extras {
            part_id: item.get("id").and_then(Value::as_str).map(str::to_string),
            ..Extras::default()
        };
        let what = match item.get("type")?.as_str()? {
            "text" => BlockRef::Text(usize::try_from(item.get("bytes")?.as_u64()?).ok()?),
            "tool" => BlockRef::Call(item.get("call_id")?.as_str()?.to_string()),
            _ => return None,
        };
        blocks.push(Block { what, extras });
    }
    matches_entry(&blocks, entry).then_some(blocks)
}

/// The entry's parts in order: its stored layout ([`BLOCKS_KEY`], else a
/// parts-message layout) if it matches, otherwise the default order. The
/// flag says whether a stored layout was used.
pub(crate) fn pieces(entry: &ConversationEntry) -> (Vec<Piece<'_>>, bool) {
    let (blocks, from_layout) = match stored_blocks(entry).or_else(|| parts_blocks(entry)) {
        Some(blocks) => (blocks, true),
        None => (default_blocks(entry), false),
    };
    let reasoning = reasoning_blocks(entry);
    let content = entry.content.as_deref().unwrap_or("");
    let mut offset = 0;
    let pieces = blocks
        .into_iter()
        .filter_map(|block| match block.what {
            BlockRef::Reasoning(index) => Some(Piece::Reasoning(
                reasoning.get(index)?.clone(),
                block.extras,
            )),
            BlockRef::Text(bytes) => {
                let text = &content[offset..offset + bytes];
                offset += bytes;
                Some(Piece::Text(text, block.extras))
            }
            BlockRef::Call(call_id) => entry
                .tool_calls
                .iter()
                .find(|call| call.call_id == call_id)
                .map(|call| Piece::Call(call, block.extras)),
        })
        .collect();
    (pieces, from_layout)
}

/// Whether a signature recorded on this entry may be echoed to `provider`:
/// when the entry names no source, or names this one.
pub(crate) fn signature_allowed(entry: &ConversationEntry, provider: super::Provider) -> bool {
    entry
        .metadata
        .get(REASONING_SOURCE_KEY)
        .is_none_or(|source| source == provider.name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;

    #[test]
    fn arguments_that_are_not_an_object_are_wrapped_verbatim() {
        assert_eq!(
            Value::Object(arguments_object(r#"{"q": "paris"}"#)),
            json!({"q": "paris"})
        );
        assert_eq!(Value::Object(arguments_object("  ")), json!({}));
        for raw in [
            "{not json",
            "[1, 2]",
            "\"x\"",
            "null",
            "{\"a\": 1} trailing",
        ] {
            let wrapped = Value::Object(arguments_object(raw));
            assert_eq!(wrapped, json!({ RAW_ARGUMENTS_KEY: raw }), "{raw}");
            assert_eq!(arguments_string(&wrapped), raw, "the wrap is undone");
        }
        assert_eq!(arguments_string(&json!({"q": "paris"})), r#"{"q":"paris"}"#);
        assert_eq!(
            arguments_string(&json!({RAW_ARGUMENTS_KEY: "x", "other": 1})),
            r#"{"_raw_arguments":"x","other":1}"#,
            "only the exact wrap is undone"
        );
    }

    fn entry_with(content: &str, calls: &[&str]) -> ConversationEntry {
        let mut entry = ConversationEntry::new("e", 1, Role::Assistant, Some(content.into()));
        entry.tool_calls = calls
            .iter()
            .map(|id| ToolCall {
                call_id: id.to_string(),
                name: "t".into(),
                arguments: "{}".into(),
                status: Default::default(),
                started_at: None,
                ended_at: None,
                error: None,
            })
            .collect();
        entry
    }

    fn text(bytes: usize) -> Block {
        Block {
            what: BlockRef::Text(bytes),
            extras: Extras::default(),
        }
    }

    fn call(id: &str) -> Block {
        Block {
            what: BlockRef::Call(id.into()),
            extras: Extras::default(),
        }
    }

    #[test]
    fn a_layout_that_does_not_match_its_entry_is_ignored() {
        let mut entry = entry_with("héllo", &["a", "b"]);
        let good = [text(1), call("a"), text(5), call("b")];
        store_blocks(&mut entry, &good);
        let (parts, from_layout) = pieces(&entry);
        assert!(from_layout);
        assert!(matches!(parts[0], Piece::Text("h", _)));
        assert!(matches!(parts[2], Piece::Text("éllo", _)));

        for bad in [
            vec![text(2), call("a"), text(4), call("b")], // inside 'é'
            vec![text(6), call("a")],                     // call b missing
            vec![text(6), call("b"), call("a")],          // calls out of order
            vec![text(5), call("a"), call("b")],          // text short
            vec![text(6), call("a"), call("a"), call("b")],
        ] {
            store_blocks(&mut entry, &bad);
            let (parts, from_layout) = pieces(&entry);
            assert!(!from_layout, "{bad:?}");
            assert_eq!(parts.len(), 3, "default: text and both calls");
        }
        entry
            .metadata
            .insert(BLOCKS_KEY.into(), "not json at all".into());
        assert!(!pieces(&entry).1);
    }

    #[test]
    fn the_default_layout_is_not_stored() {
        let mut entry = entry_with("hi", &["a"]);
        store_blocks(&mut entry, &[text(2), call("a")]);
        assert!(!entry.metadata.contains_key(BLOCKS_KEY));
    }
}
