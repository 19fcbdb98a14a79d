//! Snapshot files: checksummed, compacted checkpoints of every slice.
//!
//! ```text
//! snapshots/<lsn:020>.snap
//! +------------------+---------------------------+--------------------+
//! | header (72 B)    | conversation blobs ...    | directory          |
//! +------------------+---------------------------+--------------------+
//! ```
//!
//! The header names the snapshot LSN (every event below it is folded in),
//! the store it belongs to and the chain value of the last frame it covers
//! (which ties it to one exact log prefix), and where the directory is,
//! with its checksum. A snapshot is used only after
//! [`check_against_log`] found it bound to the log it is opened with. The directory lists each
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
use crate::log::format::{self, StoreId, STORE_ID_BYTES};
use crate::log::recovery;
use crate::log::{Binding, Lsn};
use crate::storage::{Storage, StorageFile};

/// Directory of snapshot files inside a store.
pub const SNAPSHOT_DIR: &str = "snapshots";
/// Magic bytes at the start of every snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"CVLOGSNP";
/// The snapshot format version this build writes (and the newest it
/// reads): version 4, whose header's former reserved field holds the byte
/// offset of the last frame the snapshot covers (replay starts after it);
/// its slices hold the `history_curated` bodies of event codec version 2,
/// as version 3's do.
pub const SNAPSHOT_VERSION: u32 = 4;

/// The first snapshot format version whose header holds the offset of the
/// last frame covered (in versions 2 and 3 the field is reserved, 0).
pub const SNAPSHOT_VERSION_LAST_FRAME: u32 = 4;
/// The oldest snapshot format version this build reads: version 2, the same
/// file with curations in their codec version 1 form (decoded with
/// `prompt_name` and `session_id` `None`).
pub const SNAPSHOT_VERSION_MIN: u32 = 2;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const HEADER_BYTES_OFFSET: usize = VERSION_OFFSET + 4;
const LSN_OFFSET: usize = HEADER_BYTES_OFFSET + 4;
const STORE_ID_OFFSET: usize = LSN_OFFSET + 8;
const CHAIN_OFFSET: usize = STORE_ID_OFFSET + STORE_ID_BYTES;
/// Version 4: `last_frame_offset`; versions 2 and 3: reserved (0).
const LAST_FRAME_OFFSET: usize = CHAIN_OFFSET + 4;
const DIRECTORY_OFFSET_OFFSET: usize = LAST_FRAME_OFFSET + 4;
const DIRECTORY_BYTES_OFFSET: usize = DIRECTORY_OFFSET_OFFSET + 8;
const DIRECTORY_CRC_OFFSET: usize = DIRECTORY_BYTES_OFFSET + 8;
const HEADER_CRC_OFFSET: usize = DIRECTORY_CRC_OFFSET + 4;
/// Size of the snapshot header.
pub const SNAPSHOT_HEADER_BYTES: usize = HEADER_CRC_OFFSET + 4;
const _: () = assert!(SNAPSHOT_HEADER_BYTES == 72);

/// Largest snapshot directory this build reads.
pub const SNAPSHOT_DIRECTORY_BYTES_MAX: u64 = 1 << 30;

/// Where one conversation's slice is in a snapshot file.
///
/// On-disk format: field order is part of the snapshot format (stored in
/// this order, without names: docs/format.md section 13); do not reorder,
/// insert or remove fields. `codec`'s golden tests pin the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobLocation {
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub bytes: u64,
    /// CRC-32 of the blob.
    pub crc: u32,
}

/// The snapshot directory: every conversation's blob, then every host
/// slice.
///
/// On-disk format: field order is part of the snapshot format (stored in
/// this order, without names: docs/format.md section 13); do not reorder,
/// insert or remove fields. `codec`'s golden tests pin the bytes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Directory {
    conversations: Vec<(String, BlobLocation)>,
    host_slices: Vec<(String, Vec<u8>)>,
}

/// What ties a snapshot to one exact prefix of one store's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotBinding {
    /// The identity of the store the snapshot was taken of.
    pub store_id: StoreId,
    /// The chain value of the log just before the snapshot's LSN: the
    /// checksum of the frame ending at `lsn - 1` (see
    /// [`recovery::chain_before`]).
    pub chain: u32,
}

/// A snapshot file whose header and directory checked out.
#[derive(Debug)]
pub struct LoadedSnapshot {
    /// The file.
    pub path: PathBuf,
    /// Its format version (`SNAPSHOT_VERSION_MIN..=SNAPSHOT_VERSION`).
    pub version: u32,
    /// Every event below this LSN is folded in.
    pub lsn: Lsn,
    /// The store and log prefix it was taken of.
    pub binding: SnapshotBinding,
    /// Conversation id → its blob.
    pub conversations: HashMap<String, BlobLocation>,
    /// Host reducer name → its encoded slice.
    pub host_slices: HashMap<String, Vec<u8>>,
    /// Byte offset of the last frame it covers (the one ending at
    /// `lsn - 1`) in the segment holding LSN `lsn - 1`: where replay can
    /// start, once checked against the log. `None` when not recorded
    /// (snapshot versions 2 and 3, a log other than the segment log, or a
    /// snapshot at LSN 1).
    pub last_frame_offset: Option<u32>,
    /// That frame, found in the log where `last_frame_offset` says and
    /// checked (set when the snapshot is chosen on open).
    pub(crate) last_frame: Option<crate::log::FrameSummary>,
    file: Box<dyn StorageFile>,
}

impl LoadedSnapshot {
    /// Decodes a conversation's blob (from [`LoadedSnapshot::read_blob`])
    /// in this snapshot's format version.
    pub fn decode_slice(
        &self,
        blob: &[u8],
    ) -> std::result::Result<crate::conversation::ConversationSlice, String> {
        crate::conversation::decode_snapshot_slice(self.version, blob)
    }

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
            return Err(Error::SnapshotDamaged {
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

/// The LSN a snapshot file name announces, if `name` is one.
pub fn parse_snapshot_file_name(name: &str) -> Option<Lsn> {
    let stem = name.strip_suffix(".snap")?;
    if stem.len() != 20 || !stem.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
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
        .filter_map(|name| Some((parse_snapshot_file_name(&name)?, snapshots.join(&name))))
        .collect();
    found.sort_by_key(|(lsn, _)| std::cmp::Reverse(*lsn));
    Ok(found)
}

/// Writes a snapshot durably: blobs from `conversations` (id, encoded
/// slice), then the directory with the host slices, then the header.
///
/// `last_frame_offset`: the byte offset of the frame ending at `lsn - 1` in
/// its segment, if known (see [`LoadedSnapshot::last_frame_offset`]).
#[cfg(any(test, feature = "testing"))]
pub fn write(
    storage: &dyn Storage,
    dir: &Path,
    lsn: Lsn,
    binding: SnapshotBinding,
    last_frame_offset: Option<u32>,
    conversations: impl Iterator<Item = Result<(String, Vec<u8>)>>,
    host_slices: Vec<(String, Vec<u8>)>,
) -> Result<PathBuf> {
    write_tagged(
        storage,
        dir,
        lsn,
        binding,
        last_frame_offset,
        conversations,
        host_slices,
        None,
    )
}

/// [`write`], and with `key` (a tamper-evident store, `docs/tamper.md`)
/// the file ends in a keyed tag
/// ([`SNAPSHOT_TAG_BYTES`](crate::tamper::SNAPSHOT_TAG_BYTES)) over every
/// byte before it, which [`check_tag`] checks.
#[allow(clippy::too_many_arguments)]
pub fn write_tagged(
    storage: &dyn Storage,
    dir: &Path,
    lsn: Lsn,
    binding: SnapshotBinding,
    last_frame_offset: Option<u32>,
    conversations: impl Iterator<Item = Result<(String, Vec<u8>)>>,
    host_slices: Vec<(String, Vec<u8>)>,
    key: Option<&crate::tamper::TamperKey>,
) -> Result<PathBuf> {
    // The digest of the bytes between the header and the tag, as written.
    let mut body = key.map(|_| blake3::Hasher::new());
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
        if let Some(body) = body.as_mut() {
            body.update(&blob);
        }
        buffer.extend_from_slice(&blob);
        if buffer.len() >= 1 << 20 {
            file.write_all_at(&buffer, buffer_offset)
                .map_err(Error::io("write snapshot", &temporary))?;
            buffer_offset += buffer.len() as u64;
            buffer.clear();
        }
    }
    let directory_bytes =
        codec::encode_value(&directory).map_err(|reason| Error::SnapshotWrite {
            path: temporary.clone(),
            reason: format!("cannot encode the snapshot directory: {reason}"),
        })?;
    buffer.extend_from_slice(&directory_bytes);
    let header = encode_header(lsn, binding, last_frame_offset, offset, &directory_bytes);
    if let (Some(key), Some(mut body)) = (key, body) {
        body.update(&directory_bytes);
        buffer.extend_from_slice(&key.snapshot_tag(&header, body.finalize().as_bytes()));
    }
    file.write_all_at(&buffer, buffer_offset)
        .map_err(Error::io("write snapshot", &temporary))?;
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

fn encode_header(
    lsn: Lsn,
    binding: SnapshotBinding,
    last_frame_offset: Option<u32>,
    directory_offset: u64,
    directory: &[u8],
) -> [u8; SNAPSHOT_HEADER_BYTES] {
    let mut header = [0u8; SNAPSHOT_HEADER_BYTES];
    header[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&SNAPSHOT_MAGIC);
    header[VERSION_OFFSET..HEADER_BYTES_OFFSET].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    header[HEADER_BYTES_OFFSET..LSN_OFFSET]
        .copy_from_slice(&(SNAPSHOT_HEADER_BYTES as u32).to_le_bytes());
    header[LSN_OFFSET..STORE_ID_OFFSET].copy_from_slice(&lsn.to_le_bytes());
    header[STORE_ID_OFFSET..CHAIN_OFFSET].copy_from_slice(&binding.store_id);
    header[CHAIN_OFFSET..LAST_FRAME_OFFSET].copy_from_slice(&binding.chain.to_le_bytes());
    // 0: not recorded (a frame never starts at offset 0, the segment header's).
    header[LAST_FRAME_OFFSET..DIRECTORY_OFFSET_OFFSET]
        .copy_from_slice(&last_frame_offset.unwrap_or(0).to_le_bytes());
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
    let damaged = |reason: String| Error::SnapshotDamaged {
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
    if !(SNAPSHOT_VERSION_MIN..=SNAPSHOT_VERSION).contains(&version) {
        return Err(damaged(format!(
            "snapshot format version {version} is not supported (this build reads {SNAPSHOT_VERSION_MIN} to {SNAPSHOT_VERSION})"
        )));
    }
    if crc32fast::hash(&header[..HEADER_CRC_OFFSET]) != field_u32(&header, HEADER_CRC_OFFSET) {
        return Err(damaged("header checksum mismatch".into()));
    }
    let header_bytes = field_u32(&header, HEADER_BYTES_OFFSET);
    if header_bytes as usize != SNAPSHOT_HEADER_BYTES {
        return Err(damaged(format!(
            "header size {header_bytes} is not {SNAPSHOT_HEADER_BYTES}"
        )));
    }
    let last_frame_offset = field_u32(&header, LAST_FRAME_OFFSET);
    if version < SNAPSHOT_VERSION_LAST_FRAME && last_frame_offset != 0 {
        return Err(damaged(format!(
            "header reserved field is {last_frame_offset:#010x}, not 0"
        )));
    }
    let lsn = field_u64(&header, LSN_OFFSET);
    if lsn == 0 {
        return Err(damaged("snapshot LSN is 0 (LSNs start at 1)".into()));
    }
    let named = path
        .file_name()
        .and_then(|name| parse_snapshot_file_name(&name.to_string_lossy()));
    if let Some(named) = named.filter(|named| *named != lsn) {
        return Err(damaged(format!(
            "the file name says LSN {named} but the header says LSN {lsn}"
        )));
    }
    let mut store_id = [0u8; STORE_ID_BYTES];
    store_id.copy_from_slice(&header[STORE_ID_OFFSET..CHAIN_OFFSET]);
    let binding = SnapshotBinding {
        store_id,
        chain: field_u32(&header, CHAIN_OFFSET),
    };
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
        version,
        lsn,
        binding,
        conversations,
        host_slices: directory.host_slices.into_iter().collect(),
        last_frame_offset: (last_frame_offset != 0).then_some(last_frame_offset),
        last_frame: None,
        file,
    })
}

/// Checks a snapshot file's keyed tag with `key` (`docs/tamper.md`):
/// `Err((offset, reason))` when the file carries none, or one that does
/// not authenticate every byte before it (an edit, even with every CRC
/// recomputed). Reads the whole file.
pub fn check_tag(
    storage: &dyn Storage,
    path: &Path,
    key: &crate::tamper::TamperKey,
) -> std::result::Result<(), (u64, String)> {
    use crate::tamper::SNAPSHOT_TAG_BYTES;
    let unreadable = |error: std::io::Error| (0, format!("it cannot be read: {error}"));
    let file = storage.open_read(path).map_err(unreadable)?;
    let size = file.size_bytes().map_err(unreadable)?;
    let mut header = [0u8; SNAPSHOT_HEADER_BYTES];
    if size < SNAPSHOT_HEADER_BYTES as u64
        || file.read_at(&mut header, 0).map_err(unreadable)? != SNAPSHOT_HEADER_BYTES
    {
        return Err((0, "its header is cut short".to_string()));
    }
    let tag_offset = field_u64(&header, DIRECTORY_OFFSET_OFFSET)
        .checked_add(field_u64(&header, DIRECTORY_BYTES_OFFSET))
        .filter(|end| *end >= SNAPSHOT_HEADER_BYTES as u64 && *end <= size)
        .ok_or_else(|| {
            (
                0,
                "its header places the directory outside the file".to_string(),
            )
        })?;
    if size != tag_offset + SNAPSHOT_TAG_BYTES as u64 {
        let reason = if size == tag_offset {
            "it carries no keyed tag after its directory".to_string()
        } else {
            format!(
                "it is {size} bytes: its directory ends at byte {tag_offset}, which a keyed tag of {SNAPSHOT_TAG_BYTES} bytes must follow to the end"
            )
        };
        return Err((tag_offset, reason));
    }
    let mut body = blake3::Hasher::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut at = SNAPSHOT_HEADER_BYTES as u64;
    while at < tag_offset {
        let want = chunk.len().min((tag_offset - at) as usize);
        let read = file.read_at(&mut chunk[..want], at).map_err(unreadable)?;
        if read == 0 {
            return Err((at, "it is cut short".to_string()));
        }
        body.update(&chunk[..read]);
        at += read as u64;
    }
    let mut trailer = [0u8; SNAPSHOT_TAG_BYTES];
    if file.read_at(&mut trailer, tag_offset).map_err(unreadable)? != SNAPSHOT_TAG_BYTES {
        return Err((tag_offset, "its keyed tag is cut short".to_string()));
    }
    key.check_snapshot_tag(&header, body.finalize().as_bytes(), &trailer)
        .map_err(|reason| (tag_offset, reason))
}

/// Checks a snapshot completely: header, directory, and every blob (which
/// must decode as a conversation slice).
pub fn verify(storage: &dyn Storage, path: &Path) -> Result<(Lsn, usize)> {
    let snapshot = load(storage, path)?;
    for id in snapshot.conversations.keys() {
        let blob = snapshot.read_blob(id)?.expect("listed in the directory");
        snapshot
            .decode_slice(&blob)
            .map_err(|reason| Error::SnapshotDamaged {
                path: path.to_path_buf(),
                reason: format!("the slice of conversation {id:?} does not decode: {reason}"),
            })?;
    }
    Ok((snapshot.lsn, snapshot.conversations.len()))
}

/// Why a snapshot that reads well cannot stand in for the log it is
/// opened with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotMismatch {
    /// It was taken of another store: its identity is not the log's.
    ForeignStore {
        /// The identity in the snapshot.
        snapshot: StoreId,
        /// The identity in the log's segment headers.
        store: StoreId,
    },
    /// It covers events the log does not hold (the log lost its tail, or
    /// was restored from an older copy).
    PastEnd {
        /// The snapshot's LSN.
        lsn: Lsn,
        /// One past the log's last event.
        log_next_lsn: Lsn,
    },
    /// The log holds other events than the snapshot was taken of: the
    /// frame ending just before its LSN is not the one it covers.
    Stale {
        /// The snapshot's LSN.
        lsn: Lsn,
        /// The chain value the snapshot carries.
        snapshot_chain: u32,
        /// What the log holds there (`None`: no batch ends there).
        log_chain: Option<u32>,
    },
    /// It ends before the log's first LSN, so it cannot be checked against
    /// the log: a newer snapshot superseded it, or it is useless. Not a
    /// problem in itself.
    BeforeStart {
        /// The snapshot's LSN.
        lsn: Lsn,
        /// The log's first LSN.
        log_first_lsn: Lsn,
    },
    /// The log could not be read where the check needed it.
    Unreadable(String),
    /// The place it says its last frame is at does not hold that frame
    /// (the frame ending just before its LSN, with its chain value).
    LastFrame {
        /// The snapshot's LSN.
        lsn: Lsn,
        /// The byte offset it names.
        offset: u32,
        /// What is there instead.
        found: String,
    },
}

impl SnapshotMismatch {
    /// Whether this is a problem to report (everything except a snapshot
    /// merely superseded by the log's start).
    pub fn is_problem(&self) -> bool {
        !matches!(self, SnapshotMismatch::BeforeStart { .. })
    }
}

impl std::fmt::Display for SnapshotMismatch {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotMismatch::ForeignStore { snapshot, store } => write!(
                formatter,
                "not this store's snapshot: it belongs to store {}, this store is {}",
                format::store_id_hex(snapshot),
                format::store_id_hex(store)
            ),
            SnapshotMismatch::PastEnd { lsn, log_next_lsn } => write!(
                formatter,
                "stale: covers events up to LSN {} but the log ends before LSN {log_next_lsn}",
                lsn - 1
            ),
            SnapshotMismatch::Stale {
                lsn,
                snapshot_chain,
                log_chain: Some(log_chain),
            } => write!(
                formatter,
                "stale: does not match the log at LSN {} (the snapshot covers a batch with checksum {snapshot_chain:#010x}, the log holds {log_chain:#010x} there: the log was rewritten after the snapshot was taken)",
                lsn - 1
            ),
            SnapshotMismatch::Stale { lsn, .. } => write!(
                formatter,
                "stale: does not match the log at LSN {}: no batch of the log ends there",
                lsn - 1
            ),
            SnapshotMismatch::BeforeStart { lsn, log_first_lsn } => write!(
                formatter,
                "superseded: ends at LSN {lsn}, before the log's first LSN {log_first_lsn}"
            ),
            SnapshotMismatch::LastFrame { lsn, offset, found } => write!(
                formatter,
                "does not match the log: it says the batch ending at LSN {} starts at byte {offset} of its segment, but {found}",
                lsn - 1
            ),
            SnapshotMismatch::Unreadable(reason) => {
                write!(formatter, "cannot be checked against the log: {reason}")
            }
        }
    }
}

/// Checks that `snapshot` belongs to the log of the store at `dir`: the
/// same store identity (`store_id`, see [`recovery::store_identity`]), and
/// the log's chain value just before the snapshot's LSN equal to the one
/// the snapshot carries. `known_chain` is an (LSN, chain value) the caller
/// already read from the log (recovery reports one), used instead of
/// reading it again when the LSN matches.
///
/// This is the one test that decides whether a snapshot may stand in for
/// the events below its LSN (on open, in `verify`, before compaction).
pub fn check_against_log(
    storage: &dyn Storage,
    dir: &Path,
    snapshot: &LoadedSnapshot,
    store_id: &StoreId,
    known_chain: Option<(Lsn, u32)>,
) -> std::result::Result<(), SnapshotMismatch> {
    check_binding(snapshot, store_id, known_chain, &|lsn| {
        recovery::chain_before(storage, dir, lsn).map(Binding::from)
    })
}

/// [`check_against_log`] for any log: `binding_at` answers what the log
/// holds just before an LSN ([`EventLog::binding_at`](crate::log::EventLog::binding_at)).
pub fn check_binding(
    snapshot: &LoadedSnapshot,
    store_id: &StoreId,
    known_chain: Option<(Lsn, u32)>,
    binding_at: &dyn Fn(Lsn) -> Result<Binding>,
) -> std::result::Result<(), SnapshotMismatch> {
    if snapshot.binding.store_id != *store_id {
        return Err(SnapshotMismatch::ForeignStore {
            snapshot: snapshot.binding.store_id,
            store: *store_id,
        });
    }
    let lsn = snapshot.lsn;
    let at = match known_chain {
        Some((known_lsn, chain)) if known_lsn == lsn => Binding::Found(chain),
        _ => binding_at(lsn).map_err(|error| SnapshotMismatch::Unreadable(error.to_string()))?,
    };
    match at {
        Binding::Found(chain) if chain == snapshot.binding.chain => Ok(()),
        Binding::Found(chain) => Err(SnapshotMismatch::Stale {
            lsn,
            snapshot_chain: snapshot.binding.chain,
            log_chain: Some(chain),
        }),
        Binding::InsideBatch { .. } => Err(SnapshotMismatch::Stale {
            lsn,
            snapshot_chain: snapshot.binding.chain,
            log_chain: None,
        }),
        Binding::PastEnd { next_lsn } => Err(SnapshotMismatch::PastEnd {
            lsn,
            log_next_lsn: next_lsn,
        }),
        Binding::BeforeStart { first_lsn } => Err(SnapshotMismatch::BeforeStart {
            lsn,
            log_first_lsn: first_lsn,
        }),
    }
}

/// Why a snapshot file cannot be used with a store's log.
#[derive(Debug)]
pub enum SnapshotRejection {
    /// The file itself fails its checks (header, directory, name).
    Damaged(Error),
    /// It reads well but does not belong to this log.
    Mismatch(SnapshotMismatch),
}

impl std::fmt::Display for SnapshotRejection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotRejection::Damaged(Error::SnapshotDamaged { reason, .. }) => {
                write!(formatter, "damaged: {reason}")
            }
            SnapshotRejection::Damaged(error) => write!(formatter, "damaged: {error}"),
            SnapshotRejection::Mismatch(mismatch) => mismatch.fmt(formatter),
        }
    }
}

/// Loads the snapshot at `path` and checks it against the log of the store
/// at `dir` (its header and directory, its identity, and its chain value):
/// the snapshot, ready to use, or why not. Reads the blobs only when they
/// are used; [`verify`] checks them all.
pub fn load_checked(
    storage: &dyn Storage,
    dir: &Path,
    path: &Path,
) -> std::result::Result<LoadedSnapshot, SnapshotRejection> {
    let loaded = load(storage, path).map_err(SnapshotRejection::Damaged)?;
    let store_id = recovery::store_identity(storage, dir).map_err(|error| {
        SnapshotRejection::Mismatch(SnapshotMismatch::Unreadable(error.to_string()))
    })?;
    check_against_log(storage, dir, &loaded, &store_id, None)
        .map_err(SnapshotRejection::Mismatch)?;
    Ok(loaded)
}
