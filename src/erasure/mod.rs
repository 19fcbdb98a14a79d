//! Erasure: per-conversation encryption at rest, and destroying one
//! conversation's key (docs/erasure.md).
//!
//! Opt-in: a store opened with a [`StoreKey`]
//! ([`StoreOptions::encryption`](crate::StoreOptions::encryption)) seals
//! the events of each conversation it creates with that conversation's own
//! key, and [`Store::erase`](crate::Store::erase) destroys the key.
//!
//! - The **store key** (32 bytes, a key file outside the store directory,
//!   never stored in it) seals everything key-related the store writes.
//! - Each conversation's **data key** is `k XOR s`, two independent random
//!   32-byte halves. `k` is recorded in the log, sealed under the store key,
//!   by a `convlog.key_made` event in the batch that first writes to the
//!   conversation (so the log says when the key was made). `s`, the share,
//!   lives only in the **key table** (`keys` in the store directory), one
//!   record per conversation sealed under the store key; the table also
//!   keeps a copy of `k`, so reads never depend on the log's first frames
//!   (which compaction may delete).
//! - An event of such a conversation is stored as a `custom` event of kind
//!   [`SEALED_KIND`] whose `conversation_id` is the conversation's and whose
//!   payload is `nonce (24) || XChaCha20-Poly1305(data key, nonce, the
//!   event's plain payload, aad = "convlog.sealed/1\0" || conversation id)`.
//!   Only the conversation id (and the frame's LSN, size and time of
//!   writing) stay in the clear.
//! - Erasing rewrites the key table without the conversation's record
//!   (atomically: temporary file, fsync, rename, directory fsync, then the
//!   old file's bytes are overwritten), after recording a `convlog.erased`
//!   event. Without `s`, `k` from the log says nothing about the data key
//!   (a one-time pad over it), so the content cannot be opened even with the
//!   store key and a copy of the log.

mod table;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{CustomEvent, Event, Timestamp};

pub(crate) use table::{KeyStatus, Keyring};
pub use table::{KEY_RECORD_BYTES_MAX, KEY_TABLE_FILE, KEY_TABLE_MAGIC, KEY_TABLE_VERSION};

/// The `custom` kind of a sealed event: its payload is the nonce and the
/// ciphertext of the event's plain payload.
pub const SEALED_KIND: &str = "convlog.sealed";

/// The `custom` kind recording that a conversation's key was made: its
/// payload is the key's first half `k`, sealed under the store key.
pub const KEY_MADE_KIND: &str = "convlog.key_made";

/// The `custom` kind recording an erasure: its payload is an [`Erasure`]
/// as a JSON object.
pub const ERASED_KIND: &str = "convlog.erased";

/// The name of the (empty) host slice every snapshot of an encrypted store
/// carries in its directory (`docs/format.md`, section 14.3): a writer
/// opened without the store key on a store whose key table is missing
/// sees from it that the store is encrypted, without reading the log the
/// snapshot covers, and is refused. Readers that do not know it ignore it,
/// as any host slice no reducer asks for.
pub const SNAPSHOT_MARK: &str = "convlog.encrypted/v1";

/// The custom kinds only the store writes; an append of one is refused.
pub const RESERVED_KINDS: [&str; 3] = [SEALED_KIND, KEY_MADE_KIND, ERASED_KIND];

/// Bytes of a key (the store key, a data key and its two halves).
pub const KEY_BYTES: usize = 32;

/// Bytes of an XChaCha20-Poly1305 nonce (random for every seal).
pub const NONCE_BYTES: usize = 24;

/// Bytes of a Poly1305 tag.
pub const TAG_BYTES: usize = 16;

/// Hex digits of a key file: 64 (32 bytes).
const KEY_FILE_HEX_DIGITS: usize = 2 * KEY_BYTES;

/// The associated data prefixes: each sealed thing names what it is, so a
/// ciphertext of one kind can never be opened as another.
const AAD_EVENT: &[u8] = b"convlog.sealed/1\0";
const AAD_SLICE: &[u8] = b"convlog.slice/1\0";
const AAD_KEY_MADE: &[u8] = b"convlog.key_made/1\0";

/// The store key: 32 bytes read from a key file outside the store
/// directory. It seals the key table and every conversation key the log
/// records; without it an encrypted store does not open.
///
/// Its `Debug` form never shows the bytes.
#[derive(Clone)]
pub struct StoreKey {
    cipher: Arc<XChaCha20Poly1305>,
    /// Where it was read from (for messages), if from a file.
    path: Option<PathBuf>,
}

impl fmt::Debug for StoreKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("StoreKey")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl StoreKey {
    /// A store key from its 32 bytes (a host that keeps keys elsewhere, in
    /// a KMS or a secret store).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> StoreKey {
        StoreKey {
            cipher: Arc::new(XChaCha20Poly1305::new(Key::from_slice(&bytes))),
            path: None,
        }
    }

    /// Reads a key file: 64 hexadecimal digits (a trailing newline is
    /// allowed). Refuses a file that its group or others may read or write
    /// (Unix mode bits `0o077`), naming the file and its mode.
    pub fn from_file(path: impl AsRef<Path>) -> Result<StoreKey> {
        let path = path.as_ref();
        let invalid = |reason: String| Error::KeyFile {
            path: path.to_path_buf(),
            reason,
        };
        let metadata = std::fs::metadata(path).map_err(Error::io("read the key file", path))?;
        if !metadata.is_file() {
            return Err(invalid("it is not a regular file".to_string()));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(invalid(format!(
                    "its mode is {mode:o}: group or others may read it; make it readable by its owner only (chmod 600)"
                )));
            }
        }
        let text = std::fs::read_to_string(path).map_err(Error::io("read the key file", path))?;
        let digits = text.trim_end_matches(['\n', '\r']);
        if digits.len() != KEY_FILE_HEX_DIGITS {
            return Err(invalid(format!(
                "it holds {} characters; a key file holds {KEY_FILE_HEX_DIGITS} hexadecimal digits",
                digits.len()
            )));
        }
        let mut bytes = [0u8; KEY_BYTES];
        for (index, byte) in bytes.iter_mut().enumerate() {
            let pair = &digits[2 * index..2 * index + 2];
            *byte = u8::from_str_radix(pair, 16).map_err(|_| {
                invalid(format!(
                    "{pair:?} at character {} is not a hexadecimal byte",
                    2 * index + 1
                ))
            })?;
        }
        let mut key = StoreKey::from_bytes(bytes);
        bytes.fill(0);
        key.path = Some(path.to_path_buf());
        Ok(key)
    }

    /// Makes a new random key file at `path` (which must not exist),
    /// readable and writable by its owner only, fsynced; returns the key.
    pub fn generate_file(path: impl AsRef<Path>) -> Result<StoreKey> {
        let path = path.as_ref();
        let mut bytes = random_key();
        let mut text = String::with_capacity(KEY_FILE_HEX_DIGITS + 1);
        for byte in bytes {
            text.push_str(&format!("{byte:02x}"));
        }
        text.push('\n');
        let mut open = std::fs::OpenOptions::new();
        open.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            open.mode(0o600);
        }
        let mut file = open
            .open(path)
            .map_err(Error::io("create the key file", path))?;
        use std::io::Write;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(Error::io("write the key file", path))?;
        let mut key = StoreKey::from_bytes(bytes);
        bytes.fill(0);
        key.path = Some(path.to_path_buf());
        Ok(key)
    }

    /// The file the key was read from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub(crate) fn cipher(&self) -> &XChaCha20Poly1305 {
        &self.cipher
    }
}

/// An erasure, as the `convlog.erased` event records it (a JSON object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Erasure {
    /// The conversation erased.
    pub conversation_id: String,
    /// Who asked for it (an operator, a ticket: the caller's words).
    pub by: String,
    /// When the store recorded it.
    pub at: Timestamp,
}

impl Erasure {
    /// The erasure an event records: `None` when it is not a
    /// `convlog.erased` event; `Some(Err(reason))` for one whose payload is
    /// not an erasure object.
    pub fn from_event(event: &Event) -> Option<std::result::Result<Erasure, String>> {
        match event {
            Event::Custom(custom) if custom.kind == ERASED_KIND => Some(
                serde_json::from_slice(&custom.payload)
                    .map_err(|error| format!("the payload is not a {ERASED_KIND} object: {error}")),
            ),
            _ => None,
        }
    }

    pub(crate) fn to_event(&self) -> Event {
        Event::Custom(CustomEvent {
            kind: ERASED_KIND.to_string(),
            conversation_id: Some(self.conversation_id.clone()),
            payload: serde_json::to_vec(self).expect("an Erasure always serializes"),
        })
    }
}

/// What [`Store::erase`](crate::Store::erase) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErasureReport {
    /// The erasure recorded (or found, when it was erased before).
    pub erasure: Option<Erasure>,
    /// The LSN of the `convlog.erased` event this call appended; `None`
    /// when the conversation was erased already.
    pub lsn: Option<crate::Lsn>,
}

/// Whether `event` is a custom event of a kind only the store writes.
pub fn is_reserved(event: &Event) -> bool {
    matches!(event, Event::Custom(custom) if RESERVED_KINDS.contains(&custom.kind.as_str()))
}

/// Whether `event` is the store's own key bookkeeping (a
/// `convlog.key_made` event: a conversation's key half, sealed under the
/// store key). It is part of the log, for audits of the log itself
/// (`convlog dump`, `tail`), but not of the conversation: the server never
/// sends it to clients, and reads of the conversation never show it.
pub fn is_key_bookkeeping(event: &Event) -> bool {
    matches!(event, Event::Custom(custom) if custom.kind == KEY_MADE_KIND)
}

/// Whether `event` is a sealed event (its plain form needs the key).
pub fn is_sealed(event: &Event) -> bool {
    matches!(event, Event::Custom(custom) if custom.kind == SEALED_KIND)
}

/// 32 random bytes from the operating system.
pub(crate) fn random_key() -> [u8; KEY_BYTES] {
    let mut bytes = [0u8; KEY_BYTES];
    fill_random(&mut bytes);
    bytes
}

pub(crate) fn fill_random(bytes: &mut [u8]) {
    // The OS RNG failing (no getrandom(2), no /dev/urandom) leaves no safe
    // way to make a key or a nonce.
    getrandom::fill(bytes).expect("the operating system's random number generator failed");
}

fn aad(prefix: &[u8], conversation_id: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(prefix.len() + conversation_id.len());
    aad.extend_from_slice(prefix);
    aad.extend_from_slice(conversation_id.as_bytes());
    aad
}

/// `nonce || ciphertext` of `plaintext` under `cipher`, with a fresh
/// random nonce.
pub(crate) fn seal(cipher: &XChaCha20Poly1305, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
    let mut nonce = [0u8; NONCE_BYTES];
    fill_random(&mut nonce);
    let sealed = cipher
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .expect("XChaCha20-Poly1305 seals any message under 256 GiB");
    let mut out = Vec::with_capacity(NONCE_BYTES + sealed.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    out
}

/// Opens what [`seal`] made; `None` when it does not open (another key,
/// another associated data, or changed bytes).
pub(crate) fn open(cipher: &XChaCha20Poly1305, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
    if sealed.len() < NONCE_BYTES + TAG_BYTES {
        return None;
    }
    let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
    cipher
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: ciphertext,
                aad,
            },
        )
        .ok()
}

/// One conversation's key: the data key `k XOR s` and its halves.
pub(crate) struct ConversationKey {
    pub(crate) half: [u8; KEY_BYTES],
    pub(crate) share: [u8; KEY_BYTES],
    cipher: XChaCha20Poly1305,
}

impl Drop for ConversationKey {
    fn drop(&mut self) {
        self.half.fill(0);
        self.share.fill(0);
    }
}

impl ConversationKey {
    pub(crate) fn new(half: [u8; KEY_BYTES], share: [u8; KEY_BYTES]) -> ConversationKey {
        let mut data = [0u8; KEY_BYTES];
        for (index, byte) in data.iter_mut().enumerate() {
            *byte = half[index] ^ share[index];
        }
        let cipher = XChaCha20Poly1305::new(Key::from_slice(&data));
        data.fill(0);
        ConversationKey {
            half,
            share,
            cipher,
        }
    }

    pub(crate) fn random() -> ConversationKey {
        ConversationKey::new(random_key(), random_key())
    }

    /// The sealed form of `event` (of `conversation_id`): a `custom` event
    /// of kind [`SEALED_KIND`], encoded as a log payload.
    pub(crate) fn seal_event(&self, conversation_id: &str, event: &Event) -> Vec<u8> {
        let plain = crate::codec::encode_event(event);
        let payload = seal(&self.cipher, &aad(AAD_EVENT, conversation_id), &plain);
        crate::codec::encode_event(&Event::Custom(CustomEvent {
            kind: SEALED_KIND.to_string(),
            conversation_id: Some(conversation_id.to_string()),
            payload,
        }))
    }

    /// The event a sealed event holds, or why it does not open.
    pub(crate) fn open_event(
        &self,
        conversation_id: &str,
        lsn: crate::Lsn,
        sealed: &CustomEvent,
    ) -> Result<Event> {
        let plain = open(
            &self.cipher,
            &aad(AAD_EVENT, conversation_id),
            &sealed.payload,
        )
        .ok_or_else(|| Error::UndecodableEvent {
            lsn,
            reason: format!(
                "the sealed event of conversation {conversation_id:?} does not open with its key (changed bytes, or moved from another conversation or store)"
            ),
        })?;
        let event = crate::codec::decode_event_at(lsn, &plain)?;
        if event.conversation_id() != Some(conversation_id) || is_sealed(&event) {
            return Err(Error::UndecodableEvent {
                lsn,
                reason: format!(
                    "the sealed event of conversation {conversation_id:?} holds an event of another conversation"
                ),
            });
        }
        Ok(event)
    }

    /// The event an encoded sealed event (`payload`, a log payload of kind
    /// [`SEALED_KIND`]) holds, opened in place in `scratch`: no copy of the
    /// sealed bytes into an event, no allocation per event once the
    /// scratch buffer has grown. `Ok(None)` when `payload` is not a sealed
    /// event (the caller decodes it as usual).
    pub(crate) fn open_payload(
        &self,
        conversation_id: &str,
        lsn: crate::Lsn,
        payload: &[u8],
        scratch: &mut OpenScratch,
    ) -> Result<Option<Event>> {
        use chacha20poly1305::aead::AeadInPlace;
        let Some((id, sealed)) = crate::codec::custom_payload_of(payload, SEALED_KIND) else {
            return Ok(None);
        };
        let refused = |reason: &str| Error::UndecodableEvent {
            lsn,
            reason: format!("the sealed event of conversation {conversation_id:?} {reason}"),
        };
        if id != Some(conversation_id) {
            return Err(refused("names another conversation"));
        }
        if sealed.len() < NONCE_BYTES + TAG_BYTES {
            return Err(refused("is too short to be sealed"));
        }
        if scratch.aad.is_empty() || scratch.conversation_id != conversation_id {
            scratch.aad = aad(AAD_EVENT, conversation_id);
            scratch.conversation_id = conversation_id.to_string();
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
        scratch.buffer.clear();
        scratch.buffer.extend_from_slice(ciphertext);
        self.cipher
            .decrypt_in_place(XNonce::from_slice(nonce), &scratch.aad, &mut scratch.buffer)
            .map_err(|_| {
                refused("does not open with its key (changed bytes, or moved from another conversation or store)")
            })?;
        let event = crate::codec::decode_event_at(lsn, &scratch.buffer)?;
        if event.conversation_id() != Some(conversation_id) || is_sealed(&event) {
            return Err(refused("holds an event of another conversation"));
        }
        Ok(Some(event))
    }

    /// A snapshot slice blob, sealed: `[1] || nonce || ciphertext`.
    pub(crate) fn seal_slice(&self, conversation_id: &str, blob: &[u8]) -> Vec<u8> {
        let mut out = vec![SEALED_SLICE_VERSION];
        out.extend(seal(&self.cipher, &aad(AAD_SLICE, conversation_id), blob));
        out
    }

    /// The plain blob of a sealed slice, or why not.
    pub(crate) fn open_slice(
        &self,
        conversation_id: &str,
        sealed: &[u8],
    ) -> std::result::Result<Vec<u8>, String> {
        match sealed.split_first() {
            Some((&SEALED_SLICE_VERSION, rest)) => {
                open(&self.cipher, &aad(AAD_SLICE, conversation_id), rest).ok_or_else(|| {
                    "the sealed slice does not open with the conversation's key".to_string()
                })
            }
            Some((version, _)) => Err(format!("sealed slice version {version} is not supported")),
            None => Err("the sealed slice is empty".to_string()),
        }
    }

    /// The `convlog.key_made` event recording this key's first half,
    /// sealed under the store key.
    pub(crate) fn key_made_event(&self, store: &StoreKey, conversation_id: &str) -> Event {
        Event::Custom(CustomEvent {
            kind: KEY_MADE_KIND.to_string(),
            conversation_id: Some(conversation_id.to_string()),
            payload: seal(
                store.cipher(),
                &aad(AAD_KEY_MADE, conversation_id),
                &self.half,
            ),
        })
    }
}

/// Opens the sealed events of a store read from its log directly (the
/// audit views, `convlog tail` and `convlog dump`), with the store key and
/// the key table, without opening the store: no lock, nothing written.
///
/// A key table a writer grows meanwhile is read again when an event names
/// a conversation it does not know yet.
#[derive(Debug)]
pub struct Unsealer {
    keyring: Keyring,
}

/// What [`Unsealer::unseal`] made of an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Unsealed {
    /// The event in its plain form: a sealed event opened, any other event
    /// as it was.
    Plain(Event),
    /// A sealed event of an erased conversation: its key is destroyed, so
    /// it stays sealed (as stored).
    Erased(Event),
}

impl Unsealer {
    /// The unsealer of the store in `dir`: fails when it has no key table
    /// (`Error::Encryption`: not an encrypted store, or the table is
    /// missing), or the key is not the store's.
    pub fn open(dir: impl AsRef<Path>, key: &StoreKey) -> Result<Unsealer> {
        let dir = dir.as_ref();
        let storage: Arc<dyn crate::storage::Storage> = Arc::new(crate::storage::FileSystem);
        let path = dir.join(KEY_TABLE_FILE);
        if !storage.exists(&path) {
            return Err(Error::Encryption {
                store: dir.to_path_buf(),
                reason: format!(
                    "no key table {}: the store is not encrypted, or its key table is missing",
                    path.display()
                ),
            });
        }
        let keyring = Keyring::open(storage, dir, Some(key), false)?
            .expect("a key was given, so a keyring is made");
        Ok(Unsealer { keyring })
    }

    /// `event` (at `lsn`) opened: see [`Unsealed`]. Fails with
    /// `UndecodableEvent` (its LSN) for a sealed event that does not open
    /// (changed bytes, or no key for its conversation in the table).
    pub fn unseal(&self, lsn: crate::Lsn, event: Event) -> Result<Unsealed> {
        let Event::Custom(custom) = &event else {
            return Ok(Unsealed::Plain(event));
        };
        if custom.kind != SEALED_KIND {
            return Ok(Unsealed::Plain(event));
        }
        let Some(id) = custom.conversation_id.as_deref() else {
            return Err(Error::UndecodableEvent {
                lsn,
                reason: "a sealed event without a conversation id".to_string(),
            });
        };
        match self.keyring.status(id) {
            KeyStatus::Sealed(key) => key.open_event(id, lsn, custom).map(Unsealed::Plain),
            KeyStatus::Erased => Ok(Unsealed::Erased(event)),
            KeyStatus::Plain => Err(Error::UndecodableEvent {
                lsn,
                reason: format!(
                    "the event of conversation {id:?} is sealed, and the key table has no key for it"
                ),
            }),
        }
    }

    /// Whether `conversation_id` was erased.
    pub fn is_erased(&self, conversation_id: &str) -> bool {
        matches!(self.keyring.status(conversation_id), KeyStatus::Erased)
    }

    /// Every conversation erased (or being erased), sorted.
    pub fn erased(&self) -> Vec<String> {
        self.keyring.erased()
    }
}

/// Whether the store in `dir` is encrypted (it has a key table).
pub fn is_encrypted_store(dir: impl AsRef<Path>) -> bool {
    dir.as_ref().join(KEY_TABLE_FILE).exists()
}

/// What opening sealed events in place reuses from one event to the next
/// of a read: the associated data of its conversation and the buffer the
/// ciphertext is opened in.
#[derive(Default)]
pub(crate) struct OpenScratch {
    conversation_id: String,
    aad: Vec<u8>,
    buffer: Vec<u8>,
}

impl Drop for OpenScratch {
    fn drop(&mut self) {
        // The buffer held plaintext.
        self.buffer.fill(0);
    }
}

/// The version byte of a sealed snapshot slice.
const SEALED_SLICE_VERSION: u8 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConversationEntry;

    #[test]
    fn a_sealed_event_opens_only_in_its_conversation() {
        let key = ConversationKey::random();
        let event = ConversationEntry::user("e", 0, "secret words").recorded_in("a");
        let payload = key.seal_event("a", &event);
        assert!(!payload.windows(6).any(|window| window == b"secret"));
        let Event::Custom(sealed) = crate::codec::decode_event(&payload).unwrap() else {
            panic!("a sealed event is a custom event");
        };
        assert_eq!(sealed.conversation_id.as_deref(), Some("a"));
        assert_eq!(key.open_event("a", 1, &sealed).unwrap(), event);
        let moved = key.open_event("b", 1, &sealed).unwrap_err().to_string();
        assert!(moved.contains("does not open"), "{moved}");
        let other = ConversationKey::random();
        assert!(other.open_event("a", 1, &sealed).is_err());
    }

    #[test]
    fn the_data_key_needs_both_halves() {
        let key = ConversationKey::random();
        let event = ConversationEntry::user("e", 0, "x").recorded_in("a");
        let Event::Custom(sealed) =
            crate::codec::decode_event(&key.seal_event("a", &event)).unwrap()
        else {
            panic!()
        };
        let half_only = ConversationKey::new(key.half, [0; KEY_BYTES]);
        assert!(half_only.open_event("a", 1, &sealed).is_err());
        let share_only = ConversationKey::new([0; KEY_BYTES], key.share);
        assert!(share_only.open_event("a", 1, &sealed).is_err());
    }
}
