//! The key table (`keys` in the store directory): each encrypted
//! conversation's key record, sealed under the store key; the erased
//! conversations; the erasures begun and not yet finished.
//! docs/format.md, "Key table", specifies the bytes.
//!
//! A new key is appended as a record and fsynced before the batch that
//! uses it is appended to the log. An erasure first appends an `erasing`
//! record (fsynced), then the store records the erasure in the log, then
//! the table is rewritten whole without the key (temporary file, fsync,
//! rename, directory fsync) and the old file's bytes are overwritten with
//! zeros through a handle opened before the rename.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::{open, seal, ConversationKey, StoreKey, KEY_BYTES, NONCE_BYTES, TAG_BYTES};
use crate::conversation::HashMap;
use crate::error::{Error, Result};
use crate::storage::{Storage, StorageFile};

/// The key table's file name, in the store directory.
pub const KEY_TABLE_FILE: &str = "keys";

/// The key table's first 8 bytes.
pub const KEY_TABLE_MAGIC: [u8; 8] = *b"CVLOGKEY";

/// The key table format this build writes and reads.
pub const KEY_TABLE_VERSION: u32 = 1;

/// Most bytes one key table record's body may have (a conversation id is at
/// most 256 bytes: `ID_BYTES_MAX`); a longer length is damage.
pub const KEY_RECORD_BYTES_MAX: usize = 1024;

/// The temporary file a rewrite writes before renaming it over the table.
const KEY_TABLE_TEMP: &str = "keys.tmp";

/// magic (8) | version (4) | check nonce (24) | check tag (16) | crc32 (4).
const HEADER_BYTES: usize = 8 + 4 + NONCE_BYTES + TAG_BYTES + 4;

/// A record's head: body length (4) | crc32 of the body (4).
const RECORD_HEAD_BYTES: usize = 8;

const AAD_CHECK: &[u8] = b"convlog.keys.check/1";
const AAD_RECORD: &[u8] = b"convlog.keys.record/1";

const RECORD_KEY: u8 = 1;
const RECORD_ERASED: u8 = 2;
const RECORD_ERASING: u8 = 3;

/// What the key table says of a conversation.
pub(crate) enum KeyStatus {
    /// No key: its events are stored in the clear (an unencrypted store, or
    /// a conversation recorded before the store was encrypted).
    Plain,
    /// Its events are sealed with this key.
    Sealed(Arc<ConversationKey>),
    /// Erased (or being erased): its key is gone.
    Erased,
}

#[derive(Default)]
struct Table {
    keys: HashMap<String, Arc<ConversationKey>>,
    erased: HashSet<String>,
    erasing: HashSet<String>,
    /// Bytes of the file that hold whole records (where the next goes).
    len: u64,
}

/// A store's keys in memory, and its key table on disk.
pub(crate) struct Keyring {
    store_key: StoreKey,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    path: PathBuf,
    writable: bool,
    table: RwLock<Table>,
    /// Held while a key is made or an erasure runs: one at a time.
    pub(crate) changing: Mutex<()>,
    /// Keys made whose `convlog.key_made` event is not in the log yet (the
    /// batch that was to carry it failed): the next batch carries it.
    unannounced: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Keyring")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Keyring {
    /// The keyring of the store in `dir`: `None` for a store without a key
    /// table opened without a key. A store with a key table opened without
    /// its key, or with another key, is refused. A writer opening a store
    /// with a key and no table creates the table.
    pub(crate) fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        key: Option<&StoreKey>,
        writable: bool,
    ) -> Result<Option<Keyring>> {
        let path = dir.join(KEY_TABLE_FILE);
        let exists = storage.exists(&path);
        let Some(key) = key else {
            if exists {
                return Err(Error::Encryption {
                    store: dir.to_path_buf(),
                    reason: format!(
                        "the store is encrypted (it has a key table, {}): open it with its store key",
                        path.display()
                    ),
                });
            }
            return Ok(None);
        };
        if let Some(key_path) = key.path() {
            refuse_key_inside(dir, key_path)?;
        }
        let keyring = Keyring {
            store_key: key.clone(),
            storage,
            dir: dir.to_path_buf(),
            path,
            writable,
            table: RwLock::new(Table::default()),
            changing: Mutex::new(()),
            unannounced: Mutex::new(HashSet::new()),
        };
        if exists {
            let table = keyring.load(writable)?;
            *keyring.table.write() = table;
        } else if writable {
            keyring
                .storage
                .create_dir_all(dir)
                .map_err(Error::io("create the store directory", dir))?;
            let len = keyring.rewrite(&Table::default())?;
            keyring.table.write().len = len;
        }
        Ok(Some(keyring))
    }

    pub(crate) fn store_key(&self) -> &StoreKey {
        &self.store_key
    }

    fn damaged(&self, reason: String) -> Error {
        Error::Encryption {
            store: self.dir.clone(),
            reason: format!("key table {}: {reason}", self.path.display()),
        }
    }

    /// Reads the table; a writer cuts a torn last record off.
    fn load(&self, writable: bool) -> Result<Table> {
        let file = self
            .storage
            .open_read(&self.path)
            .map_err(Error::io("open the key table", &self.path))?;
        let size = file
            .size_bytes()
            .map_err(Error::io("read the key table", &self.path))?;
        let mut bytes = vec![0u8; size as usize];
        read_exact_at(file.as_ref(), &mut bytes)
            .map_err(Error::io("read the key table", &self.path))?;
        let (table, whole) = self.parse(&bytes)?;
        if whole < size && writable {
            tracing::warn!(path = %self.path.display(), cut = size - whole, "cutting a torn record off the key table");
            let file = self
                .storage
                .open_write(&self.path)
                .map_err(Error::io("open the key table", &self.path))?;
            file.set_len(whole)
                .and_then(|()| file.sync_all())
                .map_err(Error::io("truncate the key table", &self.path))?;
        }
        Ok(table)
    }

    /// The table `bytes` hold, and how many bytes are whole records.
    fn parse(&self, bytes: &[u8]) -> Result<(Table, u64)> {
        if bytes.len() < HEADER_BYTES {
            return Err(self.damaged(format!(
                "{} bytes, shorter than its {HEADER_BYTES}-byte header",
                bytes.len()
            )));
        }
        let header = &bytes[..HEADER_BYTES];
        if header[..8] != KEY_TABLE_MAGIC {
            return Err(self.damaged("it does not start with CVLOGKEY".to_string()));
        }
        let stored_crc = u32::from_le_bytes(header[HEADER_BYTES - 4..].try_into().unwrap());
        if crc32fast::hash(&header[..HEADER_BYTES - 4]) != stored_crc {
            return Err(self.damaged("its header checksum does not match".to_string()));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().unwrap());
        if version != KEY_TABLE_VERSION {
            return Err(self.damaged(format!(
                "format version {version} is not supported (this build reads {KEY_TABLE_VERSION})"
            )));
        }
        if open(
            self.store_key.cipher(),
            AAD_CHECK,
            &header[12..HEADER_BYTES - 4],
        )
        .is_none()
        {
            return Err(Error::Encryption {
                store: self.dir.clone(),
                reason: "the store key given is not this store's key (its key table does not open with it)".to_string(),
            });
        }
        let mut table = Table::default();
        let mut offset = HEADER_BYTES;
        while offset < bytes.len() {
            let rest = &bytes[offset..];
            let torn = |what: &str| {
                tracing::warn!(offset, reason = what, "the key table ends in a torn record");
            };
            if rest.len() < RECORD_HEAD_BYTES {
                torn("a short record head");
                break;
            }
            let body_len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(rest[4..8].try_into().unwrap());
            let end = RECORD_HEAD_BYTES + body_len;
            // Only the last record can be torn (each is fsynced before the
            // next is written), and it is at most one record long: a
            // problem that far from the end is damage, never cut silently.
            let in_tail = rest.len() <= RECORD_HEAD_BYTES + KEY_RECORD_BYTES_MAX;
            // A zero-filled tail has a matching checksum (of nothing): a
            // body too short to be sealed is not whole either.
            let whole = (NONCE_BYTES + TAG_BYTES..=KEY_RECORD_BYTES_MAX).contains(&body_len)
                && end <= rest.len()
                && crc32fast::hash(&rest[RECORD_HEAD_BYTES..end]) == crc;
            if !whole {
                if in_tail {
                    torn("a last record that is not whole");
                    break;
                }
                return Err(self.damaged(format!(
                    "the record at offset {offset} is damaged (its length or checksum does not match)"
                )));
            }
            let body = &rest[RECORD_HEAD_BYTES..end];
            let Some(plain) = open(self.store_key.cipher(), AAD_RECORD, body) else {
                if in_tail && end == rest.len() {
                    torn("a last record that does not open");
                    break;
                }
                return Err(self.damaged(format!(
                    "the record at offset {offset} does not open with the store key (changed bytes)"
                )));
            };
            self.apply(&mut table, &plain, offset)?;
            offset += end;
        }
        table.len = offset as u64;
        Ok((table, offset as u64))
    }

    fn apply(&self, table: &mut Table, plain: &[u8], offset: usize) -> Result<()> {
        let bad = || self.damaged(format!("the record at offset {offset} is malformed"));
        let (&kind, rest) = plain.split_first().ok_or_else(bad)?;
        if rest.len() < 2 {
            return Err(bad());
        }
        let id_len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
        let rest = &rest[2..];
        if rest.len() < id_len {
            return Err(bad());
        }
        let id = std::str::from_utf8(&rest[..id_len])
            .map_err(|_| bad())?
            .to_string();
        let rest = &rest[id_len..];
        match kind {
            RECORD_KEY if rest.len() == 2 * KEY_BYTES => {
                let half: [u8; KEY_BYTES] = rest[..KEY_BYTES].try_into().unwrap();
                let share: [u8; KEY_BYTES] = rest[KEY_BYTES..].try_into().unwrap();
                table
                    .keys
                    .insert(id, Arc::new(ConversationKey::new(half, share)));
            }
            RECORD_ERASED if rest.is_empty() => {
                table.keys.remove(&id);
                table.erasing.remove(&id);
                table.erased.insert(id);
            }
            RECORD_ERASING if rest.is_empty() => {
                table.erasing.insert(id);
            }
            _ => return Err(bad()),
        }
        Ok(())
    }

    /// A record's bytes: head and sealed body.
    fn record(&self, kind: u8, id: &str, key: Option<&ConversationKey>) -> Vec<u8> {
        let mut plain = vec![kind];
        plain.extend_from_slice(&(id.len() as u16).to_le_bytes());
        plain.extend_from_slice(id.as_bytes());
        if let Some(key) = key {
            plain.extend_from_slice(&key.half);
            plain.extend_from_slice(&key.share);
        }
        let body = seal(self.store_key.cipher(), AAD_RECORD, &plain);
        plain.fill(0);
        let mut out = Vec::with_capacity(RECORD_HEAD_BYTES + body.len());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    fn header(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES);
        out.extend_from_slice(&KEY_TABLE_MAGIC);
        out.extend_from_slice(&KEY_TABLE_VERSION.to_le_bytes());
        out.extend(seal(self.store_key.cipher(), AAD_CHECK, &[]));
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Appends a record and fsyncs it.
    fn append_record(&self, table: &mut Table, record: &[u8]) -> Result<()> {
        let file = self
            .storage
            .open_write(&self.path)
            .map_err(Error::io("open the key table", &self.path))?;
        file.write_all_at(record, table.len)
            .and_then(|()| file.sync_data())
            .map_err(Error::io("append to the key table", &self.path))?;
        table.len += record.len() as u64;
        Ok(())
    }

    /// Writes `table` whole: temporary file, fsync, rename over the table,
    /// directory fsync; then zeros over the old file's bytes.
    fn rewrite(&self, table: &Table) -> Result<u64> {
        let mut bytes = self.header();
        let mut ids: Vec<&String> = table.keys.keys().collect();
        ids.sort();
        for id in ids {
            bytes.extend(self.record(RECORD_KEY, id, Some(&table.keys[id])));
        }
        let mut erased: Vec<&String> = table.erased.iter().collect();
        erased.sort();
        for id in erased {
            bytes.extend(self.record(RECORD_ERASED, id, None));
        }
        let mut erasing: Vec<&String> = table.erasing.iter().collect();
        erasing.sort();
        for id in erasing {
            bytes.extend(self.record(RECORD_ERASING, id, None));
        }
        let temp = self.dir.join(KEY_TABLE_TEMP);
        let old = self.storage.open_write(&self.path).ok();
        let file = self
            .storage
            .create(&temp)
            .map_err(Error::io("create", &temp))?;
        file.write_all_at(&bytes, 0)
            .and_then(|()| file.sync_all())
            .map_err(Error::io("write", &temp))?;
        drop(file);
        self.storage
            .rename(&temp, &self.path)
            .map_err(Error::io("rename into place", &self.path))?;
        self.storage
            .sync_dir(&self.dir)
            .map_err(Error::io("sync the directory of", &self.path))?;
        if let Some(old) = old {
            // The old table's inode is unlinked now; its bytes still held
            // the erased key. Overwrite them (best effort: a copy-on-write
            // file system or an SSD may keep the old blocks; docs/erasure.md).
            if let Ok(size) = old.size_bytes() {
                let zeros = vec![0u8; size as usize];
                if let Err(error) = old.write_all_at(&zeros, 0).and_then(|()| old.sync_data()) {
                    tracing::warn!(path = %self.path.display(), %error, "could not overwrite the old key table's bytes");
                }
            }
        }
        Ok(bytes.len() as u64)
    }

    /// What the table says of `conversation_id`. A read-only opener reads
    /// the table again when it has grown (its writer made keys since).
    pub(crate) fn status(&self, conversation_id: &str) -> KeyStatus {
        if let Some(status) = self.known(conversation_id) {
            return status;
        }
        if !self.writable && self.reload_if_grown() {
            if let Some(status) = self.known(conversation_id) {
                return status;
            }
        }
        KeyStatus::Plain
    }

    fn known(&self, conversation_id: &str) -> Option<KeyStatus> {
        let table = self.table.read();
        if table.erased.contains(conversation_id) || table.erasing.contains(conversation_id) {
            return Some(KeyStatus::Erased);
        }
        table
            .keys
            .get(conversation_id)
            .map(|key| KeyStatus::Sealed(Arc::clone(key)))
    }

    /// Reads the table again if its size changed (read-only openers).
    pub(crate) fn reload_if_grown(&self) -> bool {
        let size = self
            .storage
            .open_read(&self.path)
            .and_then(|file| file.size_bytes())
            .unwrap_or(0);
        if size == self.table.read().len || size == 0 {
            return false;
        }
        match self.load(false) {
            Ok(table) => {
                *self.table.write() = table;
                true
            }
            Err(error) => {
                tracing::warn!(%error, "could not read the key table again");
                false
            }
        }
    }

    /// Makes and records (fsynced) a key for `conversation_id`. The caller
    /// holds [`Keyring::changing`] and checked it has none.
    pub(crate) fn make(&self, conversation_id: &str) -> Result<Arc<ConversationKey>> {
        let key = Arc::new(ConversationKey::random());
        let record = self.record(RECORD_KEY, conversation_id, Some(&key));
        let mut table = self.table.write();
        self.append_record(&mut table, &record)?;
        table
            .keys
            .insert(conversation_id.to_string(), Arc::clone(&key));
        self.unannounced.lock().insert(conversation_id.to_string());
        Ok(key)
    }

    /// Whether the key of `conversation_id` was made by this store and its
    /// `convlog.key_made` event is not in the log yet.
    pub(crate) fn unannounced(&self, conversation_id: &str) -> bool {
        self.unannounced.lock().contains(conversation_id)
    }

    /// The `convlog.key_made` event of `conversation_id` is in the log.
    pub(crate) fn mark_announced(&self, conversation_id: &str) {
        self.unannounced.lock().remove(conversation_id);
    }

    /// Records (fsynced) that erasing `conversation_id` has begun: from now
    /// on it reads as erased, even after a crash.
    pub(crate) fn begin_erasure(&self, conversation_id: &str) -> Result<()> {
        let record = self.record(RECORD_ERASING, conversation_id, None);
        let mut table = self.table.write();
        self.append_record(&mut table, &record)?;
        table.erasing.insert(conversation_id.to_string());
        Ok(())
    }

    /// Destroys `conversation_id`'s key: rewrites the table without it,
    /// recording it erased.
    pub(crate) fn finish_erasure(&self, conversation_id: &str) -> Result<()> {
        let mut table = self.table.write();
        let mut next = Table {
            keys: table.keys.clone(),
            erased: table.erased.clone(),
            erasing: table.erasing.clone(),
            len: 0,
        };
        next.keys.remove(conversation_id);
        next.erasing.remove(conversation_id);
        next.erased.insert(conversation_id.to_string());
        next.len = self.rewrite(&next)?;
        *table = next;
        Ok(())
    }

    /// Erasures begun and not finished (a crash came between).
    pub(crate) fn unfinished_erasures(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.table.read().erasing.iter().cloned().collect();
        ids.sort();
        ids
    }

    /// Every conversation erased or being erased, sorted.
    pub(crate) fn erased(&self) -> Vec<String> {
        if !self.writable {
            self.reload_if_grown();
        }
        let table = self.table.read();
        let mut ids: Vec<String> = table
            .erased
            .iter()
            .chain(table.erasing.iter())
            .cloned()
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }
}

fn read_exact_at(file: &dyn StorageFile, buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let read = file.read_at(&mut buf[done..], done as u64)?;
        if read == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file ended early",
            ));
        }
        done += read;
    }
    Ok(())
}

/// Refuses a key file inside the store directory: whoever copies the
/// store would copy its key.
fn refuse_key_inside(dir: &Path, key_path: &Path) -> Result<()> {
    let (Ok(dir), Ok(key)) = (dir.canonicalize(), key_path.canonicalize()) else {
        return Ok(());
    };
    if key.starts_with(&dir) {
        return Err(Error::KeyFile {
            path: key_path.to_path_buf(),
            reason: format!(
                "it lies inside the store directory {}: keep the store key outside it, or a copy of the store carries its key",
                dir.display()
            ),
        });
    }
    Ok(())
}

impl Keyring {
    /// `event` as host slices fold it: a sealed event of a conversation
    /// whose key is here, opened; anything else as it is (an erased
    /// conversation's events stay sealed).
    pub(crate) fn open_for_hosts(
        &self,
        event: crate::model::Event,
        lsn: crate::Lsn,
    ) -> crate::model::Event {
        let opened = match &event {
            crate::model::Event::Custom(custom) if custom.kind == super::SEALED_KIND => {
                let id = custom.conversation_id.as_deref();
                match id.map(|id| (id, self.status(id))) {
                    Some((id, KeyStatus::Sealed(key))) => key.open_event(id, lsn, custom).ok(),
                    _ => None,
                }
            }
            _ => None,
        };
        opened.unwrap_or(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::sim::SimStorage;

    fn keyring(storage: &SimStorage) -> Keyring {
        Keyring::open(
            Arc::new(storage.clone()),
            Path::new("/store"),
            Some(&StoreKey::from_bytes([3; KEY_BYTES])),
            true,
        )
        .unwrap()
        .unwrap()
    }

    fn file(storage: &SimStorage) -> Vec<u8> {
        let file = storage.open_read(Path::new("/store/keys")).unwrap();
        let mut bytes = vec![0; file.size_bytes().unwrap() as usize];
        read_exact_at(file.as_ref(), &mut bytes).unwrap();
        bytes
    }

    /// After an erasure the table's file holds neither half of the key, in
    /// the clear or sealed as before (its record is gone, not marked), and
    /// a reopened table knows the conversation as erased.
    #[test]
    fn erasure_leaves_no_record_of_the_key() {
        let storage = SimStorage::new(1);
        let keys = keyring(&storage);
        let gone = keys.make("gone").unwrap();
        let kept = keys.make("kept").unwrap();
        let sealed_records = file(&storage)[HEADER_BYTES..].to_vec();
        keys.begin_erasure("gone").unwrap();
        assert!(matches!(keys.status("gone"), KeyStatus::Erased));
        keys.finish_erasure("gone").unwrap();
        let after = file(&storage);
        for secret in [&gone.half[..], &gone.share[..]] {
            assert!(!after.windows(KEY_BYTES).any(|window| window == secret));
        }
        // No record of before survives (each is sealed under a new nonce).
        for record in sealed_records.chunks(32) {
            assert!(!after.windows(record.len()).any(|window| window == record));
        }
        let reopened = keyring(&storage);
        assert!(matches!(reopened.status("gone"), KeyStatus::Erased));
        let KeyStatus::Sealed(again) = reopened.status("kept") else {
            panic!("the other key is kept");
        };
        assert_eq!((again.half, again.share), (kept.half, kept.share));
        assert!(reopened.unfinished_erasures().is_empty());
        assert_eq!(reopened.erased(), ["gone"]);
    }

    #[test]
    fn damage_before_the_last_record_is_refused_with_its_offset() {
        let storage = SimStorage::new(2);
        let keys = keyring(&storage);
        for index in 0..20 {
            keys.make(&format!("conversation-{index}")).unwrap();
        }
        let mut bytes = file(&storage);
        bytes[HEADER_BYTES + 20] ^= 1;
        let out = storage.open_write(Path::new("/store/keys")).unwrap();
        out.write_all_at(&bytes, 0).unwrap();
        let error = Keyring::open(
            Arc::new(storage.clone()),
            Path::new("/store"),
            Some(&StoreKey::from_bytes([3; KEY_BYTES])),
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains(&format!("record at offset {HEADER_BYTES}")),
            "{error}"
        );
    }
}
