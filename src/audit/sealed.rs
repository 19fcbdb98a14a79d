//! The structure of an encrypted store read without its store key
//! (`convlog inspect` without `--key-file`; docs/erasure.md): what the log
//! holds in the clear, and nothing of what is sealed.
//!
//! Without the key, a sealed event shows its conversation id, its LSN and
//! its size; its kind, evaluation and content are sealed. The store's own
//! key events are in the clear by design: `convlog.key_made` (when a
//! conversation's key was made; the key half in it is sealed) and
//! `convlog.erased` (who erased which conversation, when). Events recorded
//! in the clear (before the store was encrypted) show their kind and
//! evaluation, never their content. The log is read directly, as `convlog
//! tail` reads it: no lock, nothing written, no key table needed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;

use super::format::{conversation_column_width, one_line, plural};
use crate::codec;
use crate::erasure::{Erasure, ERASED_KIND, KEY_MADE_KIND, SEALED_KIND};
use crate::error::Result;
use crate::log::{LogReader, Lsn};
use crate::model::{Event, Timestamp};

/// What a sealed overview says of itself, in its text and JSON forms.
pub const SEALED_OVERVIEW_NOTE: &str = "the store is encrypted and was read without its store key: structure only (conversation ids, LSNs, sizes, key events, erasures); the kinds, evaluations and content of sealed events need the store key (--key-file FILE or CONVLOG_KEY_FILE)";

/// The structure of an encrypted store, read without its store key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SealedOverview {
    /// The store directory, as given.
    pub store: String,
    /// What this view is and is not ([`SEALED_OVERVIEW_NOTE`]).
    pub note: String,
    /// The first LSN of the log (events before it were compacted away
    /// and are not counted here).
    pub first_lsn: Lsn,
    /// One past the last event read.
    pub next_lsn: Lsn,
    /// The conversations, sorted by id (only the one asked for, when one
    /// was).
    pub conversations: Vec<SealedConversation>,
    /// Events that belong to no conversation.
    pub events_without_conversation: u64,
}

/// One conversation as the log shows it without the store key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SealedConversation {
    /// The conversation id (in the clear: the index finds frames by it).
    pub conversation_id: String,
    /// `"sealed"` (its events need the key), `"clear"` (recorded before
    /// the store was encrypted), `"erased"` (its key destroyed).
    pub state: &'static str,
    /// Its events, the store's key events (`convlog.key_made`,
    /// `convlog.erased`) not counted.
    pub events: u64,
    /// Sealed events among them.
    pub sealed_events: u64,
    /// Bytes the events take in the log (sealed: with nonce and tag).
    pub bytes: u64,
    /// Its first and last LSN in the log, key events included.
    pub first_lsn: Lsn,
    /// See `first_lsn`.
    pub last_lsn: Lsn,
    /// Evaluations, when every event is in the clear; `None` when some are
    /// sealed (the evaluation is sealed with the content).
    pub evaluations: Option<usize>,
    /// Counts of the kinds of its events in the clear (`conversation_recorded`,
    /// `tool_status`, ...); sealed events are counted in `sealed_events`.
    pub kinds_in_the_clear: BTreeMap<&'static str, u64>,
    /// The LSN of its `convlog.key_made` event, if the log holds it.
    pub key_made_lsn: Option<Lsn>,
    /// Its erasure, if the log records one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub erasure: Option<SealedErasure>,
    /// Every event, when this conversation was asked for alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub event_list: Vec<SealedEvent>,
}

/// An erasure, as the log records it (in the clear).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SealedErasure {
    /// The LSN of the `convlog.erased` event.
    pub lsn: Lsn,
    /// Who asked for it.
    pub by: String,
    /// When the store recorded it.
    pub at: Timestamp,
}

/// One event of a conversation, without the store key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SealedEvent {
    /// Its LSN.
    pub lsn: Lsn,
    /// `"sealed"`, a store key event's kind (`convlog.key_made`,
    /// `convlog.erased`), or the kind of an event in the clear.
    pub kind: String,
    /// Its bytes in the log.
    pub bytes: u64,
}

#[derive(Default)]
struct Tally {
    events: u64,
    sealed: u64,
    bytes: u64,
    first_lsn: Lsn,
    last_lsn: Lsn,
    evaluations: BTreeSet<String>,
    kinds: BTreeMap<&'static str, u64>,
    key_made_lsn: Option<Lsn>,
    erasure: Option<SealedErasure>,
    list: Vec<SealedEvent>,
}

impl Tally {
    /// Counts the event at `lsn` (its stored `payload`) of this
    /// conversation, listing it when `listed`: a sealed event by its size
    /// only, a key event by its kind (and an erasure's who and when), an
    /// event in the clear by its kind and evaluation, never its content.
    fn observe(&mut self, lsn: Lsn, payload: &[u8], listed: bool) -> Result<()> {
        self.last_lsn = lsn;
        let bytes = payload.len() as u64;
        let kind = match codec::custom_kind(payload) {
            Some(SEALED_KIND) => {
                self.events += 1;
                self.sealed += 1;
                self.bytes += bytes;
                "sealed".to_string()
            }
            Some(KEY_MADE_KIND) => {
                self.key_made_lsn.get_or_insert(lsn);
                KEY_MADE_KIND.to_string()
            }
            Some(ERASED_KIND) => {
                let event = codec::decode_event_at(lsn, payload)?;
                if let Some(Ok(erasure)) = Erasure::from_event(&event) {
                    self.erasure.get_or_insert(SealedErasure {
                        lsn,
                        by: erasure.by,
                        at: erasure.at,
                    });
                }
                ERASED_KIND.to_string()
            }
            _ => {
                let event = codec::decode_event_at(lsn, payload)?;
                self.events += 1;
                self.bytes += bytes;
                *self.kinds.entry(event.type_name()).or_default() += 1;
                match &event {
                    Event::ConversationRecorded(recorded) => {
                        self.evaluations
                            .insert(recorded.entry.evaluation_id.clone());
                    }
                    Event::ToolStatus(status) => {
                        self.evaluations.insert(status.evaluation_id.clone());
                    }
                    _ => {}
                }
                event.type_name().to_string()
            }
        };
        if listed {
            self.list.push(SealedEvent { lsn, kind, bytes });
        }
        Ok(())
    }
}

impl SealedOverview {
    /// Reads the log of the store at `dir` (no lock, no key, nothing
    /// written): every conversation, or only `only` when given. Fails as
    /// a [`LogReader`] does (`NotAStore`, `Corrupted` with segment and
    /// offset), and with `UndecodableEvent` (its LSN) on a payload that is
    /// not an event; `ConversationNotFound` when `only` has no event.
    pub fn read(dir: impl AsRef<Path>, only: Option<&str>) -> Result<SealedOverview> {
        let dir = dir.as_ref();
        let reader = LogReader::open(dir)?;
        let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
        let mut without = 0;
        let mut first_lsn = None;
        let mut next_lsn = 1;
        for record in reader.iter() {
            let record = record?;
            first_lsn.get_or_insert(record.lsn);
            next_lsn = record.lsn + 1;
            let Some(id) = codec::peek_conversation_id(&record.payload) else {
                without += 1;
                continue;
            };
            if only.is_some_and(|only| only != id) {
                continue;
            }
            let tally = tallies.entry(id.to_string()).or_insert_with(|| Tally {
                first_lsn: record.lsn,
                ..Tally::default()
            });
            tally.observe(record.lsn, &record.payload, only.is_some())?;
        }
        if let Some(only) = only.filter(|only| !tallies.contains_key(*only)) {
            return Err(crate::Error::ConversationNotFound {
                conversation_id: only.to_string(),
            });
        }
        let conversations = tallies
            .into_iter()
            .map(|(conversation_id, tally)| SealedConversation {
                conversation_id,
                state: if tally.erasure.is_some() {
                    "erased"
                } else if tally.sealed > 0 || tally.key_made_lsn.is_some() {
                    "sealed"
                } else {
                    "clear"
                },
                events: tally.events,
                sealed_events: tally.sealed,
                bytes: tally.bytes,
                first_lsn: tally.first_lsn,
                last_lsn: tally.last_lsn,
                evaluations: (tally.sealed == 0).then_some(tally.evaluations.len()),
                kinds_in_the_clear: tally.kinds,
                key_made_lsn: tally.key_made_lsn,
                erasure: tally.erasure,
                event_list: tally.list,
            })
            .collect();
        Ok(SealedOverview {
            store: dir.display().to_string(),
            note: SEALED_OVERVIEW_NOTE.to_string(),
            first_lsn: first_lsn.unwrap_or(next_lsn),
            next_lsn,
            conversations,
            events_without_conversation: without,
        })
    }
}

/// Writes `overview` as text: a head saying it is the structure only, the
/// erased conversations, one row per conversation, and the events of a
/// conversation asked for alone.
pub fn write_sealed_overview_text(
    out: &mut dyn Write,
    overview: &SealedOverview,
) -> io::Result<()> {
    writeln!(out, "store {}", overview.store)?;
    writeln!(out, "  note: {}", overview.note)?;
    // Written as the other audit views write a range: inclusive.
    let range = if overview.next_lsn > overview.first_lsn {
        format!("LSN {}..={}", overview.first_lsn, overview.next_lsn - 1)
    } else {
        format!("empty (the next LSN is {})", overview.next_lsn)
    };
    writeln!(
        out,
        "  log: {range} ({}), {} without a conversation",
        plural(
            overview.next_lsn.saturating_sub(overview.first_lsn) as usize,
            "event",
            "events"
        ),
        overview.events_without_conversation
    )?;
    let erased: Vec<&SealedConversation> = overview
        .conversations
        .iter()
        .filter(|row| row.erasure.is_some())
        .collect();
    if !erased.is_empty() {
        writeln!(
            out,
            "  {} (keys destroyed, content unreadable):",
            plural(erased.len(), "erased conversation", "erased conversations")
        )?;
        for row in erased {
            if let Some(erasure) = &row.erasure {
                writeln!(
                    out,
                    "    {} at LSN {}, by {}",
                    one_line(&row.conversation_id, 40),
                    erasure.lsn,
                    one_line(&erasure.by, 80)
                )?;
            }
        }
    }
    if overview.conversations.is_empty() {
        return Ok(());
    }
    let id_width = conversation_column_width(
        overview
            .conversations
            .iter()
            .map(|row| row.conversation_id.as_str()),
    );
    writeln!(out)?;
    writeln!(
        out,
        "{:<id_width$}  {:<6}  {:>6}  {:>6}  {:>10}  {:>9}  {:>8}  {:>5}",
        "CONVERSATION", "STATE", "EVENTS", "SEALED", "BYTES", "FIRST LSN", "LAST LSN", "EVALS"
    )?;
    for row in &overview.conversations {
        let evaluations = row
            .evaluations
            .map_or_else(|| "?".to_string(), |count| count.to_string());
        writeln!(
            out,
            "{:<id_width$}  {:<6}  {:>6}  {:>6}  {:>10}  {:>9}  {:>8}  {:>5}",
            one_line(&row.conversation_id, 40),
            row.state,
            row.events,
            row.sealed_events,
            row.bytes,
            row.first_lsn,
            row.last_lsn,
            evaluations
        )?;
    }
    for row in overview
        .conversations
        .iter()
        .filter(|row| !row.event_list.is_empty())
    {
        writeln!(out)?;
        writeln!(out, "{:>10}  {:>8}  KIND", "LSN", "BYTES")?;
        for event in &row.event_list {
            writeln!(out, "{:>10}  {:>8}  {}", event.lsn, event.bytes, event.kind)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::erasure::StoreKey;
    use crate::model::ConversationEntry;
    use crate::{Store, StoreOptions};

    /// Without the key: ids, LSNs, sizes, states and the erasure, and
    /// nothing of the content; a conversation recorded in the clear shows
    /// its kinds and evaluations.
    #[test]
    fn the_structure_of_an_encrypted_store_shows_no_content() {
        let dir = tempfile::tempdir().unwrap();
        {
            let plain = Store::open(dir.path(), StoreOptions::new()).unwrap();
            plain
                .append(&[ConversationEntry::user("e1", 0, "clear words").recorded_in("old")])
                .unwrap();
        }
        let key = StoreKey::from_bytes([3; 32]);
        let store = Store::open(dir.path(), StoreOptions::new().encryption(Some(key))).unwrap();
        for (id, text) in [("kept", "secret one"), ("gone", "secret two")] {
            store
                .append(&[
                    ConversationEntry::user("e1", 0, text).recorded_in(id),
                    ConversationEntry::user("e2", 0, text).recorded_in(id),
                ])
                .unwrap();
        }
        store.erase("gone", "ticket 9").unwrap();
        drop(store);

        let overview = SealedOverview::read(dir.path(), None).unwrap();
        let states: Vec<(&str, &str, u64, Option<usize>)> = overview
            .conversations
            .iter()
            .map(|row| {
                (
                    row.conversation_id.as_str(),
                    row.state,
                    row.events,
                    row.evaluations,
                )
            })
            .collect();
        assert_eq!(
            states,
            [
                ("gone", "erased", 2, None),
                ("kept", "sealed", 2, None),
                ("old", "clear", 1, Some(1)),
            ]
        );
        let kept = &overview.conversations[1];
        assert_eq!((kept.first_lsn, kept.last_lsn), (2, 4));
        assert_eq!(kept.key_made_lsn, Some(2));
        assert_eq!(kept.sealed_events, 2);
        let gone = &overview.conversations[0];
        assert_eq!(gone.erasure.as_ref().unwrap().by, "ticket 9");
        assert_eq!(gone.erasure.as_ref().unwrap().lsn, 8);
        let mut text = Vec::new();
        write_sealed_overview_text(&mut text, &overview).unwrap();
        let text = String::from_utf8(text).unwrap();
        let json = serde_json::to_string(&overview).unwrap();
        for shown in [&text, &json] {
            assert!(!shown.contains("secret"), "{shown}");
            assert!(!shown.contains("clear words"), "{shown}");
            assert!(shown.contains("structure only"), "{shown}");
        }
        assert!(text.contains("1 erased conversation"), "{text}");

        let one = SealedOverview::read(dir.path(), Some("kept")).unwrap();
        assert_eq!(one.conversations.len(), 1);
        let kinds: Vec<&str> = one.conversations[0]
            .event_list
            .iter()
            .map(|event| event.kind.as_str())
            .collect();
        assert_eq!(kinds, [KEY_MADE_KIND, "sealed", "sealed"]);
        assert!(matches!(
            SealedOverview::read(dir.path(), Some("never")),
            Err(crate::Error::ConversationNotFound { .. })
        ));
    }
}
