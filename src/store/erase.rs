//! Encryption at rest and erasure in the store (docs/erasure.md): sealing
//! a batch on the way in, opening events and snapshot slices on the way
//! out, and [`Store::erase`].

use std::sync::Arc;

use super::{Store, StoreCore};
use crate::codec;
use crate::erasure::{
    self, ConversationKey, Erasure, ErasureReport, KeyStatus, Keyring, ERASED_KIND, SEALED_KIND,
};
use crate::error::{Error, Result};
use crate::log::{Durability, Lsn};
use crate::model::{Event, Timestamp};

/// What the append path writes for a batch: the `convlog.key_made` events
/// of keys made for it (first in the batch), then every payload (theirs
/// first), and the conversations whose key events they are.
pub(super) struct Sealed {
    pub(super) made: Vec<Event>,
    pub(super) payloads: Vec<Vec<u8>>,
    pub(super) announced: Vec<String>,
}

/// Refuses to open a store with its store key when its key table is
/// missing but its log holds encrypted conversations (a `convlog.key_made`
/// or `convlog.sealed` event): the table held their keys, and a writer
/// would otherwise start a new, empty one beside them. The log is scanned
/// only when a key is given and the table is missing (the first open of a
/// store being encrypted, or a lost table); each frame's kind is peeked,
/// nothing decoded.
pub(super) fn refuse_lost_key_table(
    backend: &super::backend::Backend,
    key: Option<&erasure::StoreKey>,
) -> Result<()> {
    let path = backend.dir().join(erasure::KEY_TABLE_FILE);
    if key.is_none() || backend.storage().exists(&path) {
        return Ok(());
    }
    let log = backend.log();
    for record in log.read_from(log.first_lsn()) {
        let record = record?;
        let kind = codec::custom_kind(&record.payload);
        if kind == Some(SEALED_KIND) || kind == Some(erasure::KEY_MADE_KIND) {
            let id = codec::peek_conversation_id(&record.payload).unwrap_or_default();
            return Err(Error::Encryption {
                store: backend.dir().to_path_buf(),
                reason: format!(
                    "its key table {} is missing, but the log holds encrypted conversations (conversation {id:?} at LSN {}): the table holds their keys, and without it their content cannot be read by anyone. Put the store's `keys` file back (a backup of the store carries it: `convlog backup` and `store::backup` copy it); the store was not opened, so no new, empty table was made",
                    path.display(),
                    record.lsn
                ),
            });
        }
    }
    Ok(())
}

/// Refuses to open a store for writing without a store key when what the
/// open read shows it encrypted (its key table must be missing, or the
/// open without a key would have been refused already): such a writer
/// would record new events, of its sealed conversations too, in the clear.
/// What shows it costs nothing more than the open: the snapshot it starts
/// from carries [`erasure::SNAPSHOT_MARK`] when a store with a key wrote
/// it, and the replay after it sees every store-written key event.
pub(super) fn refuse_keyless_writer(
    backend: &super::backend::Backend,
    seen: Option<super::open::EncryptionSeen>,
) -> Result<()> {
    use super::open::EncryptionSeen;
    let Some(seen) = seen else {
        return Ok(());
    };
    let evidence = match seen {
        EncryptionSeen::Snapshot { lsn } => {
            format!("its snapshot at LSN {lsn} was written by the store opened with its store key")
        }
        EncryptionSeen::Event { lsn, id } => {
            format!("its log holds encrypted conversations (conversation {id:?} at LSN {lsn})")
        }
    };
    let table = backend.dir().join(erasure::KEY_TABLE_FILE);
    Err(Error::Encryption {
        store: backend.dir().to_path_buf(),
        reason: format!(
            "the store is encrypted ({evidence}) but was opened for writing without its store key, and its key table {} is missing: a writer without the key would record events in the clear beside the sealed ones. Put the store's `keys` file back and open it with its store key (--key-file FILE or CONVLOG_KEY_FILE; StoreOptions::encryption); reading without the key (a read-only open, `convlog tail`, `dump`, `inspect`) shows its structure. Nothing was written",
            table.display()
        ),
    })
}

impl StoreCore {
    fn keyring(&self) -> Option<&Keyring> {
        self.log.keyring.as_ref()
    }

    /// The host slice every snapshot of an encrypted store carries
    /// ([`erasure::SNAPSHOT_MARK`], empty): it says "encrypted" to a
    /// writer opened later without the key (docs/format.md, 14.3).
    pub(super) fn encryption_mark(&self) -> Option<(String, Vec<u8>)> {
        self.keyring()
            .map(|_| (erasure::SNAPSHOT_MARK.to_string(), Vec::new()))
    }

    /// Every conversation erased or being erased, sorted.
    pub(super) fn erased_ids(&self) -> Vec<String> {
        self.keyring().map(Keyring::erased).unwrap_or_default()
    }

    /// What the key table says of `conversation_id` (always `Plain` for a
    /// store opened without a key).
    pub(super) fn key_status(&self, conversation_id: &str) -> KeyStatus {
        match self.keyring() {
            Some(keyring) => keyring.status(conversation_id),
            None => KeyStatus::Plain,
        }
    }

    /// The key to read `conversation_id` with: `None` for a conversation in
    /// the clear; `Error::Erased` for an erased one.
    pub(super) fn read_key(&self, conversation_id: &str) -> Result<Option<Arc<ConversationKey>>> {
        match self.key_status(conversation_id) {
            KeyStatus::Plain => Ok(None),
            KeyStatus::Sealed(key) => Ok(Some(key)),
            KeyStatus::Erased => Err(Error::Erased {
                conversation_id: conversation_id.to_string(),
            }),
        }
    }

    /// A decoded event of `conversation_id` as the fold takes it: a sealed
    /// one opened with `key`; an erasure stops the read.
    pub(super) fn open_event(
        &self,
        key: Option<&ConversationKey>,
        conversation_id: &str,
        lsn: Lsn,
        event: Event,
    ) -> Result<Event> {
        let Event::Custom(custom) = &event else {
            return Ok(event);
        };
        if custom.kind == SEALED_KIND {
            let Some(key) = key else {
                let table = self.log.dir().join(erasure::KEY_TABLE_FILE);
                let why = if !self.log.storage().exists(&table) {
                    format!(
                        "the store's key table {} is missing (deleted, or not copied with the store): it holds the conversation keys; put it back from a backup of the store",
                        table.display()
                    )
                } else if self.keyring().is_none() {
                    "the store was opened without its store key".to_string()
                } else {
                    format!(
                        "the key table {} has no key for it (a table from another store, or one put back from before the conversation began?)",
                        table.display()
                    )
                };
                return Err(Error::UndecodableEvent {
                    lsn,
                    reason: format!(
                        "the event of conversation {conversation_id:?} is sealed and cannot be opened: {why}"
                    ),
                });
            };
            return key.open_event(conversation_id, lsn, custom);
        }
        if custom.kind == ERASED_KIND {
            // The key table of a copy made before the erasure may still hold
            // the key: the log's word stops the read all the same.
            return Err(Error::Erased {
                conversation_id: conversation_id.to_string(),
            });
        }
        Ok(event)
    }

    /// The snapshot blob of a slice: sealed with the conversation's key
    /// when it has one; `None` for a conversation erased meanwhile.
    pub(super) fn seal_slice(&self, conversation_id: &str, blob: Vec<u8>) -> Option<Vec<u8>> {
        match self.key_status(conversation_id) {
            KeyStatus::Plain => Some(blob),
            KeyStatus::Sealed(key) => Some(key.seal_slice(conversation_id, &blob)),
            KeyStatus::Erased => None,
        }
    }

    /// The plain blob of a slice read from a snapshot.
    pub(super) fn open_slice(
        &self,
        key: Option<&ConversationKey>,
        conversation_id: &str,
        blob: Vec<u8>,
    ) -> std::result::Result<Vec<u8>, String> {
        match key {
            Some(key) => key.open_slice(conversation_id, &blob),
            None => Ok(blob),
        }
    }

    /// Encodes a batch, sealing the events of encrypted conversations and
    /// making (and recording, fsynced) the key of each conversation the
    /// batch creates.
    pub(super) fn seal_batch(&self, events: &[Event]) -> Result<Sealed> {
        let Some(keyring) = self.keyring() else {
            return Ok(Sealed {
                made: Vec::new(),
                payloads: events.iter().map(codec::encode_event).collect(),
                announced: Vec::new(),
            });
        };
        let mut made = Vec::new();
        let mut announced: Vec<String> = Vec::new();
        let mut payloads = Vec::with_capacity(events.len() + 1);
        for event in events {
            let Some(id) = event
                .conversation_id()
                .filter(|_| !erasure::is_reserved(event))
            else {
                payloads.push(codec::encode_event(event));
                continue;
            };
            let key = match keyring.status(id) {
                KeyStatus::Sealed(key) => Some(key),
                KeyStatus::Erased => {
                    return Err(Error::Erased {
                        conversation_id: id.to_string(),
                    })
                }
                KeyStatus::Plain => self.make_key(keyring, id)?,
            };
            match key {
                Some(key) => {
                    if keyring.unannounced(id) && !announced.iter().any(|known| known == id) {
                        made.push(key.key_made_event(keyring.store_key(), id));
                        announced.push(id.to_string());
                    }
                    payloads.push(key.seal_event(id, event));
                }
                None => payloads.push(codec::encode_event(event)),
            }
        }
        if !made.is_empty() {
            let mut all: Vec<Vec<u8>> = made.iter().map(codec::encode_event).collect();
            all.append(&mut payloads);
            payloads = all;
        }
        Ok(Sealed {
            made,
            payloads,
            announced,
        })
    }

    /// The key of a conversation the key table has none for: made now, or
    /// `None` for a conversation recorded in the clear before the store
    /// was encrypted (it stays in the clear).
    fn make_key(&self, keyring: &Keyring, id: &str) -> Result<Option<Arc<ConversationKey>>> {
        let _one_at_a_time = keyring.changing.lock();
        match keyring.status(id) {
            KeyStatus::Sealed(key) => return Ok(Some(key)),
            KeyStatus::Erased => {
                return Err(Error::Erased {
                    conversation_id: id.to_string(),
                })
            }
            KeyStatus::Plain => {}
        }
        if self.recorded_in_the_clear(id) {
            return Ok(None);
        }
        keyring.make(id).map(Some)
    }

    /// Whether `id` has events recorded before the store was encrypted.
    fn recorded_in_the_clear(&self, id: &str) -> bool {
        self.forget_taken_back();
        let state = self.state.read();
        state.index.contains_key(id)
            || state
                .snapshot
                .as_ref()
                .is_some_and(|loaded| loaded.conversations.contains_key(id))
    }

    /// After a batch with key events is appended: they are in the log.
    pub(super) fn announced(&self, ids: &[String]) {
        if let Some(keyring) = self.keyring() {
            for id in ids {
                keyring.mark_announced(id);
            }
        }
    }

    /// Whether the log after the snapshot holds an erasure of `id`.
    fn erasure_in_log(&self, id: &str) -> Result<bool> {
        let positions: Vec<_> = {
            let state = self.state.read();
            state
                .index
                .get(id)
                .map(|entries| {
                    entries
                        .iter()
                        .map(|entry| state.unpack(entry.packed))
                        .collect()
                })
                .unwrap_or_default()
        };
        for position in positions {
            for record in self.log.log().read_batch(position)? {
                if codec::custom_kind(&record.payload) == Some(ERASED_KIND)
                    && codec::peek_conversation_id(&record.payload) == Some(id)
                {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}

impl Store {
    /// Finishes erasures a crash interrupted (the key table records them
    /// begun): records the erasure in the log if it is not there yet, and
    /// destroys the key.
    pub(super) fn finish_erasures(&self) -> Result<()> {
        let Some(keyring) = self.keyring() else {
            return Ok(());
        };
        for id in keyring.unfinished_erasures() {
            let _one_at_a_time = keyring.changing.lock();
            if !self.erasure_in_log(&id)? {
                let erasure = Erasure {
                    conversation_id: id.clone(),
                    by: "convlog (finishing an interrupted erasure)".to_string(),
                    at: Timestamp::now(),
                };
                self.append_checked(&[erasure.to_event()], Durability::Sync, None)?;
            }
            keyring.finish_erasure(&id)?;
            tracing::info!(conversation = %id, "finished an interrupted erasure");
        }
        Ok(())
    }

    /// Erases a conversation of an encrypted store: destroys its key, so
    /// its content can never be read again, by anyone, from this store, its
    /// log or a copy of either made from now on (docs/erasure.md says what
    /// copies made before keep). `by` says who asked (recorded).
    ///
    /// In order, each step durable before the next: the key table records
    /// the erasure begun (from here on the conversation reads as erased,
    /// even after a crash); the log records a `convlog.erased` event (who,
    /// when, which conversation); the key table is rewritten without the
    /// key. A crash between steps is finished when the store next opens.
    ///
    /// Reads of the conversation then fail with [`Error::Erased`], and
    /// appends to it too. Erasing it again reports the earlier erasure
    /// done (`lsn: None`). Fails with [`Error::Encryption`] on a store
    /// opened without a store key or a conversation recorded in the clear,
    /// and [`Error::ConversationNotFound`] for one never recorded.
    ///
    /// ```
    /// use convlog::erasure::StoreKey;
    /// use convlog::model::ConversationEntry;
    /// use convlog::{Error, Store, StoreOptions};
    ///
    /// # fn main() -> convlog::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let options = StoreOptions::new().encryption(Some(StoreKey::from_bytes([7; 32])));
    /// let store = Store::open(dir.path(), options)?;
    /// store.append(&[ConversationEntry::user("eval-1", 0, "my address is ...").recorded_in("ctx")])?;
    /// store.erase("ctx", "ticket 4711")?;
    /// assert!(matches!(store.conversation("ctx"), Err(Error::Erased { .. })));
    /// # Ok(()) }
    /// ```
    pub fn erase(&self, conversation_id: &str, by: &str) -> Result<ErasureReport> {
        self.log.writer("erase")?;
        let Some(keyring) = self.core.keyring() else {
            return Err(Error::Encryption {
                store: self.log.dir().to_path_buf(),
                reason: format!(
                    "cannot erase conversation {conversation_id:?}: the store was opened without a store key (erasure needs an encrypted store)"
                ),
            });
        };
        let _one_at_a_time = keyring.changing.lock();
        match keyring.status(conversation_id) {
            KeyStatus::Erased => {
                drop(_one_at_a_time);
                // An erasure a crash interrupted is finished on open; one
                // done is reported as done.
                return Ok(ErasureReport {
                    erasure: None,
                    lsn: None,
                });
            }
            KeyStatus::Plain if self.core.recorded_in_the_clear(conversation_id) => {
                return Err(Error::Encryption {
                    store: self.log.dir().to_path_buf(),
                    reason: format!(
                        "cannot erase conversation {conversation_id:?}: it was recorded in the clear, before the store was encrypted, and has no key to destroy"
                    ),
                })
            }
            KeyStatus::Plain => {
                return Err(Error::ConversationNotFound {
                    conversation_id: conversation_id.to_string(),
                })
            }
            KeyStatus::Sealed(_) => {}
        }
        keyring.begin_erasure(conversation_id)?;
        let erasure = Erasure {
            conversation_id: conversation_id.to_string(),
            by: by.to_string(),
            at: Timestamp::now(),
        };
        let lsns = self.append_checked(&[erasure.to_event()], Durability::Sync, None)?;
        keyring.finish_erasure(conversation_id)?;
        Ok(ErasureReport {
            erasure: Some(erasure),
            lsn: Some(lsns.start),
        })
    }

    /// Whether the store was opened with a store key (its new
    /// conversations are sealed).
    pub fn is_encrypted(&self) -> bool {
        self.core.keyring().is_some()
    }

    /// The conversations erased (or being erased), sorted.
    pub fn erased_conversations(&self) -> Vec<String> {
        self.core.erased_ids()
    }

    /// Whether `conversation_id` was erased.
    pub fn is_erased(&self, conversation_id: &str) -> bool {
        matches!(self.core.key_status(conversation_id), KeyStatus::Erased)
    }

    /// An event read from the log (`lsn` is its LSN) in its plain form: a
    /// sealed event (a `custom` event of kind [`SEALED_KIND`]) opened with
    /// its conversation's key; any other event as it is. For readers of the
    /// raw log ([`Store::log`]) of an encrypted store.
    ///
    /// Fails with [`Error::Erased`] for an event of an erased conversation,
    /// and with [`Error::UndecodableEvent`] (its LSN) for one that does not
    /// open: changed bytes, or a store opened without its store key.
    pub fn unseal_event(&self, lsn: Lsn, event: Event) -> Result<Event> {
        let id = match &event {
            Event::Custom(custom) if custom.kind == SEALED_KIND => {
                match custom.conversation_id.as_deref() {
                    Some(id) => id.to_string(),
                    None => {
                        return Err(Error::UndecodableEvent {
                            lsn,
                            reason: "a sealed event without a conversation id".to_string(),
                        })
                    }
                }
            }
            _ => return Ok(event),
        };
        let key = self.core.read_key(&id)?;
        self.core.open_event(key.as_deref(), &id, lsn, event)
    }
}
