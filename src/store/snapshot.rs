//! Snapshot files: checksummed, compacted checkpoints of every slice.
//!
//! ```text
//! snapshots/<lsn:020>.snap
//! +------------------+---------------------------+--------------------+
//! | header (48 B)    | conversation blobs ...    | directory          |
//! +------------------+---------------------------+--------------------+
//! ```
//!
//! The header names the snapshot LSN (every event below it is folded in)
//! and where the directory is, with its checksum. The directory lists each
//! conversation's blob (offset, length, checksum) and every host slice.
//! Opening a store reads the header and the directory only; a blob is read
//! and checked when its conversation is. `docs/format.md` has the bytes.
//!
//! A snapshot is written to a temporary file, fsynced, renamed into place
//! and the directory fsynced. Snapshots are derived data: a damaged one is
//! skipped for an older one or a replay of the log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::{Error, Result};
use crate::log::Lsn;
use crate::storage::{Storage, StorageFile};

/// Directory of snapshot files inside a store.
pub const SNAPSHOT_DIR: &str = "snapshots";
/// Magic bytes at the start of every snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"CVLOGSNP";
/// The snapshot format version this build writes and reads.
pub const SNAPSHOT_VERSION: u32 = 1;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const HEADER_BYTES_OFFSET: usize = VERSION_OFFSET + 4;
const LSN_OFFSET: usize = HEADER_BYTES_OFFSET + 4;
const DIRECTORY_OFFSET_OFFSET: usize = LSN_OFFSET + 8;
const DIRECTORY_BYTES_OFFSET: usize = DIRECTORY_OFFSET_OFFSET + 8;
const DIRECTORY_CRC_OFFSET: usize = DIRECTORY_BYTES_OFFSET + 8;
const HEADER_CRC_OFFSET: usize = DIRECTORY_CRC_OFFSET + 4;
/// Size of the snapshot header.
pub const SNAPSHOT_HEADER_BYTES: usize = HEADER_CRC_OFFSET + 4;
const _: () = assert!(SNAPSHOT_HEADER_BYTES == 48);

/// Largest snapshot directory this build reads.
pub const SNAPSHOT_DIRECTORY_BYTES_MAX: u64 = 1 << 30;

/// Where one conversation's slice is in a snapshot file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobLocation {
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub bytes: u64,
    /// CRC-32 of the blob.
    pub crc: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Directory {
    conversations: Vec<(String, BlobLocation)>,
    host_slices: Vec<(String, Vec<u8>)>,
}

/// A snapshot file whose header and directory checked out.
#[derive(Debug)]
pub struct LoadedSnapshot {
    /// The file.
    pub path: PathBuf,
    /// Every event below this LSN is folded in.
    pub lsn: Lsn,
    /// Conversation id → its blob.
    pub conversations: HashMap<String, BlobLocation>,
    /// Host reducer name → its encoded slice.
    pub host_slices: HashMap<String, Vec<u8>>,
    file: Box<dyn StorageFile>,
}

impl LoadedSnapshot {
    /// Reads and checks the blob of `conversation_id`, if the snapshot has it.
    pub fn read_blob(&self, conversation_id: &str) -> Result<Option<Vec<u8>>> {
        let Some(location) = self.conversations.get(conversation_id) else {
            return Ok(None);
        };
        let mut blob = vec![0u8; location.bytes as usize];
        let read = self
            .file
            .read_at(&mut blob, location.offset)
            .map_err(Error::io("read snapshot", &self.path))?;
        if read != blob.len() || crc32fast::hash(&blob) != location.crc {
            return Err(Error::SnapshotRestore {
                path: self.path.clone(),
                reason: format!(
                    "the slice of conversation {conversation_id:?} at offset {} fails its checksum",
                    location.offset
                ),
            });
        }
        Ok(Some(blob))
    }
}

/// The file name of the snapshot at `lsn`.
pub fn snapshot_file_name(lsn: Lsn) -> String {
    format!("{lsn:020}.snap")
}

/// Snapshot files in the store, newest first.
pub fn list(storage: &dyn Storage, dir: &Path) -> Result<Vec<(Lsn, PathBuf)>> {
    let snapshots = dir.join(SNAPSHOT_DIR);
    if !storage.exists(&snapshots) {
        return Ok(Vec::new());
    }
    let mut found: Vec<(Lsn, PathBuf)> = storage
        .list_dir(&snapshots)
        .map_err(Error::io("list snapshot directory", &snapshots))?
        .into_iter()
        .filter_map(|name| {
            let stem = name.strip_suffix(".snap")?;
            (stem.len() == 20).then_some(())?;
            Some((stem.parse().ok()?, snapshots.join(&name)))
        })
        .collect();
    found.sort_by_key(|(lsn, _)| std::cmp::Reverse(*lsn));
    Ok(found)
}

/// Writes a snapshot durably: blobs from `conversations` (id, encoded
/// slice), then the directory with the host slices, then the header.
pub fn write(
    storage: &dyn Storage,
    dir: &Path,
    lsn: Lsn,
    conversations: impl Iterator<Item = Result<(String, Vec<u8>)>>,
    host_slices: Vec<(String, Vec<u8>)>,
) -> Result<PathBuf> {
    let snapshots = dir.join(SNAPSHOT_DIR);
    if !storage.exists(&snapshots) {
        storage
            .create_dir_all(&snapshots)
            .map_err(Error::io("create snapshot directory", &snapshots))?;
        storage
            .sync_dir(dir)
            .map_err(Error::io("fsync store directory", dir))?;
    }
    let path = snapshots.join(snapshot_file_name(lsn));
    let temporary = snapshots.join(format!("{}.tmp", snapshot_file_name(lsn)));
    let file = storage
        .create(&temporary)
        .map_err(Error::io("create snapshot", &temporary))?;
    let mut directory = Directory {
        conversations: Vec::new(),
        host_slices,
    };
    let mut offset = SNAPSHOT_HEADER_BYTES as u64;
    let mut buffer = Vec::with_capacity(1 << 20);
    let mut buffer_offset = offset;
    for conversation in conversations {
        let (id, blob) = conversation?;
        directory.conversations.push((
            id,
            BlobLocation {
                offset,
                bytes: blob.len() as u64,
                crc: crc32fast::hash(&blob),
            },
        ));
        offset += blob.len() as u64;
        buffer.extend_from_slice(&blob);
        if buffer.len() >= 1 << 20 {
            file.write_all_at(&buffer, buffer_offset)
                .map_err(Error::io("write snapshot", &temporary))?;
            buffer_offset += buffer.len() as u64;
            buffer.clear();
        }
    }
    let directory_bytes =
        codec::encode_value(&directory).map_err(|reason| Error::SnapshotRestore {
            path: temporary.clone(),
            reason: format!("cannot encode the snapshot directory: {reason}"),
        })?;
    buffer.extend_from_slice(&directory_bytes);
    file.write_all_at(&buffer, buffer_offset)
        .map_err(Error::io("write snapshot", &temporary))?;
    let header = encode_header(lsn, offset, &directory_bytes);
    file.write_all_at(&header, 0)
        .map_err(Error::io("write snapshot header", &temporary))?;
    file.sync_all()
        .map_err(Error::io("fsync snapshot", &temporary))?;
    storage
        .rename(&temporary, &path)
        .map_err(Error::io("rename snapshot into place", &path))?;
    storage
        .sync_dir(&snapshots)
        .map_err(Error::io("fsync snapshot directory", &snapshots))?;
    Ok(path)
}

fn encode_header(lsn: Lsn, directory_offset: u64, directory: &[u8]) -> [u8; SNAPSHOT_HEADER_BYTES] {
    let mut header = [0u8; SNAPSHOT_HEADER_BYTES];
    header[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&SNAPSHOT_MAGIC);
    header[VERSION_OFFSET..HEADER_BYTES_OFFSET].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    header[HEADER_BYTES_OFFSET..LSN_OFFSET]
        .copy_from_slice(&(SNAPSHOT_HEADER_BYTES as u32).to_le_bytes());
    header[LSN_OFFSET..DIRECTORY_OFFSET_OFFSET].copy_from_slice(&lsn.to_le_bytes());
    header[DIRECTORY_OFFSET_OFFSET..DIRECTORY_BYTES_OFFSET]
        .copy_from_slice(&directory_offset.to_le_bytes());
    header[DIRECTORY_BYTES_OFFSET..DIRECTORY_CRC_OFFSET]
        .copy_from_slice(&(directory.len() as u64).to_le_bytes());
    header[DIRECTORY_CRC_OFFSET..HEADER_CRC_OFFSET]
        .copy_from_slice(&crc32fast::hash(directory).to_le_bytes());
    let crc = crc32fast::hash(&header[..HEADER_CRC_OFFSET]);
    header[HEADER_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    header
}

fn field_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

fn field_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

/// Reads and checks a snapshot's header and directory.
pub fn load(storage: &dyn Storage, path: &Path) -> Result<LoadedSnapshot> {
    let damaged = |reason: String| Error::SnapshotRestore {
        path: path.to_path_buf(),
        reason,
    };
    let file = storage
        .open_read(path)
        .map_err(Error::io("open snapshot", path))?;
    let mut header = [0u8; SNAPSHOT_HEADER_BYTES];
    let read = file
        .read_at(&mut header, 0)
        .map_err(Error::io("read snapshot", path))?;
    if read < SNAPSHOT_HEADER_BYTES {
        return Err(damaged("header cut short".into()));
    }
    if header[MAGIC_OFFSET..VERSION_OFFSET] != SNAPSHOT_MAGIC {
        return Err(damaged("bad magic (not a convlog snapshot)".into()));
    }
    let version = field_u32(&header, VERSION_OFFSET);
    if version != SNAPSHOT_VERSION {
        return Err(damaged(format!(
            "snapshot format version {version} is not supported (this build reads {SNAPSHOT_VERSION})"
        )));
    }
    if crc32fast::hash(&header[..HEADER_CRC_OFFSET]) != field_u32(&header, HEADER_CRC_OFFSET) {
        return Err(damaged("header checksum mismatch".into()));
    }
    let lsn = field_u64(&header, LSN_OFFSET);
    let directory_offset = field_u64(&header, DIRECTORY_OFFSET_OFFSET);
    let directory_bytes = field_u64(&header, DIRECTORY_BYTES_OFFSET);
    if directory_bytes > SNAPSHOT_DIRECTORY_BYTES_MAX {
        return Err(damaged(format!(
            "directory of {directory_bytes} bytes is over the limit"
        )));
    }
    let mut directory = vec![0u8; directory_bytes as usize];
    let read = file
        .read_at(&mut directory, directory_offset)
        .map_err(Error::io("read snapshot", path))?;
    if read != directory.len() {
        return Err(damaged("directory cut short".into()));
    }
    if crc32fast::hash(&directory) != field_u32(&header, DIRECTORY_CRC_OFFSET) {
        return Err(damaged("directory checksum mismatch".into()));
    }
    let directory: Directory = codec::decode_value(&directory).map_err(damaged)?;
    let conversations: HashMap<String, BlobLocation> =
        directory.conversations.into_iter().collect();
    for (id, location) in &conversations {
        if location.offset < SNAPSHOT_HEADER_BYTES as u64
            || location.offset + location.bytes > directory_offset
        {
            return Err(damaged(format!(
                "blob of conversation {id:?} lies outside the blob area"
            )));
        }
    }
    Ok(LoadedSnapshot {
        path: path.to_path_buf(),
        lsn,
        conversations,
        host_slices: directory.host_slices.into_iter().collect(),
        file,
    })
}

/// Checks a snapshot completely: header, directory, and every blob (which
/// must decode as a conversation slice).
pub fn verify(storage: &dyn Storage, path: &Path) -> Result<(Lsn, usize)> {
    let snapshot = load(storage, path)?;
    for id in snapshot.conversations.keys() {
        let blob = snapshot.read_blob(id)?.expect("listed in the directory");
        codec::decode_value::<crate::conversation::ConversationSlice>(&blob).map_err(|reason| {
            Error::SnapshotRestore {
                path: path.to_path_buf(),
                reason: format!("the slice of conversation {id:?} does not decode: {reason}"),
            }
        })?;
    }
    Ok((snapshot.lsn, snapshot.conversations.len()))
}
