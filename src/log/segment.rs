//! Segment files: names, listing and the creation protocol.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::log::format::{self, SEGMENT_HEADER_BYTES};
use crate::log::Lsn;
use crate::storage::{Storage, StorageFile};

/// Extension of segment files.
pub const SEGMENT_EXTENSION: &str = "seg";
/// Suffix of files being created; never part of the log.
pub const TEMPORARY_SUFFIX: &str = ".tmp";
/// Digits of the zero-padded first LSN in a segment file name.
const SEGMENT_NAME_DIGITS: usize = 20;
/// How far ahead of the frames the active segment's space is allocated, at
/// most: the writer allocates the segment in steps of this size, up to
/// `LogOptions::segment_bytes_max`, so that a commit's `fdatasync` writes
/// data into space the file already has and carries no size change (but
/// the first after each step, which makes the step's allocation durable).
pub const PREALLOCATION_STEP_BYTES: u64 = 1 << 20;
/// Once a segment takes durable commits, a background thread prepares its
/// space ahead of the frames (`StorageFile::prewrite`: allocated, written
/// with zeros, made durable) in chunks of this size, so that a commit
/// writes into blocks the file system has already written and converts no
/// unwritten extent. Chunks end on multiples of this size (the first one
/// starts where the writer's claim ends).
pub const PREWRITE_CHUNK_BYTES: u64 = 1 << 20;
/// The writer claims the segment's space up to its writes' end rounded up
/// to a multiple of this (at least any page size, and a multiple of
/// `storage::DIRECT_BLOCK_BYTES`), so the preparing thread never writes
/// into a page the writer's bytes share.
pub const PREWRITE_CLAIM_BYTES: u64 = 64 * 1024;
/// How far past the frames the background thread prepares space.
pub const PREWRITE_AHEAD_BYTES: u64 = 4 << 20;

/// Under `Durability::None` and `Periodic`, the writer starts the
/// writeback of the active segment's written bytes whenever this many have
/// accumulated since the last start (or a quarter of
/// `LogOptions::segment_bytes_max`, if smaller), up to one step behind the
/// last write, so that the fdatasync that seals a full segment finds at
/// most two steps left to write instead of the whole segment, under the
/// writer's mutex.
pub const WRITEBACK_STEP_BYTES: u64 = 4 << 20;
/// Writeback is started up to a multiple of this (a page), one step behind
/// the last write.
pub const WRITEBACK_ALIGN_BYTES: u64 = 4096;

/// The writeback step for segments of at most `segment_bytes_max` bytes
/// (see [`WRITEBACK_STEP_BYTES`]).
pub(crate) fn writeback_step(segment_bytes_max: u64) -> u64 {
    WRITEBACK_STEP_BYTES.min(segment_bytes_max / 4).max(1)
}

/// The file name of the segment whose first LSN is `first_lsn`.
pub fn segment_file_name(first_lsn: Lsn) -> String {
    format!(
        "{first_lsn:0width$}.{SEGMENT_EXTENSION}",
        width = SEGMENT_NAME_DIGITS
    )
}

/// The first LSN encoded in a segment file name, if `name` is one.
pub fn parse_segment_file_name(name: &str) -> Option<Lsn> {
    let stem = name.strip_suffix(".seg")?;
    if stem.len() != SEGMENT_NAME_DIGITS || !stem.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// A segment file found in the store directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFile {
    /// First LSN, from the file name (checked against the header on read).
    pub first_lsn: Lsn,
    /// Full path.
    pub path: PathBuf,
}

/// What the store directory holds.
#[derive(Debug, Default)]
pub struct DirectoryListing {
    /// Segments in LSN order.
    pub segments: Vec<SegmentFile>,
    /// Leftover temporary files from an interrupted creation.
    pub temporary: Vec<PathBuf>,
}

/// Lists the segments of the store at `dir`, in LSN order.
pub fn list(storage: &dyn Storage, dir: &Path) -> Result<DirectoryListing> {
    let names = storage
        .list_dir(dir)
        .map_err(Error::io("list store directory", dir))?;
    let mut listing = DirectoryListing::default();
    for name in names {
        if let Some(first_lsn) = parse_segment_file_name(&name) {
            listing.segments.push(SegmentFile {
                first_lsn,
                path: dir.join(&name),
            });
        } else if name
            .strip_suffix(TEMPORARY_SUFFIX)
            .is_some_and(|stem| parse_segment_file_name(stem).is_some())
        {
            listing.temporary.push(dir.join(&name));
        }
    }
    listing.segments.sort_by_key(|segment| segment.first_lsn);
    Ok(listing)
}

/// Creates the segment whose first LSN is `first_lsn`, durably.
///
/// The header is written to a temporary file, fsynced, renamed to the final
/// name and the directory fsynced, so a segment with a final name always has
/// a whole header on disk. `link` names the store and the chain value of
/// the log just before `first_lsn`. Returns the open file and the header's
/// checksum (the chain value the first frame links to).
pub fn create(
    storage: &dyn Storage,
    dir: &Path,
    first_lsn: Lsn,
    link: format::SegmentLink,
) -> Result<(SegmentFile, Box<dyn StorageFile>, u32)> {
    let path = dir.join(segment_file_name(first_lsn));
    let temporary = dir.join(format!(
        "{}{TEMPORARY_SUFFIX}",
        segment_file_name(first_lsn)
    ));
    let file = storage
        .create(&temporary)
        .map_err(Error::io("create segment", &temporary))?;
    let salt = uuid::Uuid::new_v4().as_u128() as u32;
    let header = format::encode_segment_header(first_lsn, link, salt);
    let header_crc = format::decode_segment_header(&header)
        .expect("a freshly encoded header decodes")
        .crc;
    file.write_all_at(&header, 0)
        .map_err(Error::io("write segment header", &temporary))?;
    file.sync_all()
        .map_err(Error::io("fsync new segment", &temporary))?;
    storage
        .rename(&temporary, &path)
        .map_err(Error::io("rename new segment into place", &path))?;
    storage
        .sync_dir(dir)
        .map_err(Error::io("fsync store directory", dir))?;
    debug_assert_eq!(file.size_bytes().ok(), Some(SEGMENT_HEADER_BYTES as u64));
    Ok((SegmentFile { first_lsn, path }, file, header_crc))
}

/// The active segment as the writer writes it: a write that would end past
/// the space allocated so far first allocates the next step
/// ([`PREALLOCATION_STEP_BYTES`], up to `limit`), so the frames land in
/// space the file already has. The allocation is not fsynced on its own:
/// the next `fdatasync` of the file makes it durable with the data written
/// into it (the size is needed to read that data back), once per step, and
/// under `Durability::None` no fsync enters the write path.
///
/// Bytes past the last frame are zeros (allocated, not yet written): the
/// file's length is no longer the end of its data. Recovery and readers
/// find the end by the frames (see `docs/format.md`).
///
/// Space ahead of the frames is also *prepared* (written with zeros, made
/// durable) by a background thread once the segment takes durable writes
/// (`write_durable_at`); see [`PREWRITE_CHUNK_BYTES`]. The thread writes
/// only in chunks above every byte the writer wrote or is writing, and is
/// stopped (its chunk in progress finished) before the file is cut or the
/// handle dropped.
pub(crate) struct PreallocatedFile {
    inner: Arc<dyn StorageFile>,
    path: PathBuf,
    /// Allocate up to this length at most (the segment size limit).
    limit: u64,
    /// The length allocated so far (the file's length when wrapped).
    allocated: Arc<Mutex<u64>>,
    /// The space preparation shared with its thread.
    prewrite: Arc<Prewrite>,
}

/// The writer's and the preparing thread's claims on a segment's space.
#[derive(Debug, Default)]
struct PrewriteState {
    /// The writer writes below this (its writes' ends, rounded up to a
    /// multiple of `PREWRITE_CLAIM_BYTES`): the thread never writes there.
    claimed: u64,
    /// The thread prepared the space below this (or the writer claimed it).
    prepared: u64,
    /// The chunk the thread is writing now.
    busy: Option<(u64, u64)>,
    /// The thread runs (started at the first durable write).
    started: bool,
    /// The thread must stop (the file is being cut, or dropped).
    stop: bool,
}

#[derive(Debug, Default)]
struct Prewrite {
    state: Mutex<PrewriteState>,
    changed: parking_lot::Condvar,
}

impl std::fmt::Debug for PreallocatedFile {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PreallocatedFile")
            .field("path", &self.path)
            .field("limit", &self.limit)
            .field("allocated", &*self.allocated.lock())
            .finish_non_exhaustive()
    }
}

impl PreallocatedFile {
    /// Wraps the active segment `inner` at `path`, allocating up to `limit`.
    pub(crate) fn new(
        inner: Arc<dyn StorageFile>,
        path: PathBuf,
        limit: u64,
    ) -> io::Result<PreallocatedFile> {
        let allocated = inner.size_bytes()?;
        // Reserve what the file already has (a reopened segment's space
        // past its frames): the real file system then writes into it
        // through a map (`storage::FileSystem`), not only after the next
        // step. Failure is not an error: writes then go as they are.
        if let Err(error) = inner.allocate(allocated) {
            tracing::debug!(segment = %path.display(), error = %error, "could not reserve the segment's space");
        }
        Ok(PreallocatedFile {
            inner,
            path,
            limit,
            allocated: Arc::new(Mutex::new(allocated)),
            prewrite: Arc::new(Prewrite::default()),
        })
    }

    /// Claims the space up to `end` for the writer: waits for the chunk the
    /// thread is preparing there, if any, and keeps the thread above it.
    /// With `durable`, starts the thread if it does not run yet.
    fn claim(&self, end: u64, durable: bool) {
        let claim = end.div_ceil(PREWRITE_CLAIM_BYTES) * PREWRITE_CLAIM_BYTES;
        let mut state = self.prewrite.state.lock();
        while state.busy.is_some_and(|(from, _)| from < claim) {
            self.prewrite.changed.wait(&mut state);
        }
        if claim > state.claimed {
            state.claimed = claim;
            state.prepared = state.prepared.max(claim);
            self.prewrite.changed.notify_all();
        }
        if durable && !state.started && !state.stop {
            state.started = true;
            let prewrite = Arc::clone(&self.prewrite);
            let inner = Arc::clone(&self.inner);
            let allocated = Arc::clone(&self.allocated);
            let limit = self.limit;
            let path = self.path.clone();
            let spawned = std::thread::Builder::new()
                .name("convlog-prewrite".into())
                .spawn(move || prepare_ahead(&prewrite, inner.as_ref(), &allocated, limit, &path));
            if let Err(error) = spawned {
                tracing::debug!(error = %error, "could not start the thread that prepares segment space");
            }
        }
    }

    /// Stops the preparing thread (waiting for its chunk in progress): from
    /// now on nothing writes into the file but the writer.
    pub(crate) fn stop_preparing(&self) {
        let mut state = self.prewrite.state.lock();
        state.stop = true;
        self.prewrite.changed.notify_all();
        while state.busy.is_some() {
            self.prewrite.changed.wait(&mut state);
        }
    }

    /// Allocates the step that holds `end`. A failed allocation (a full
    /// disk, a file system without it) is not an error: the write then
    /// extends the file itself, as without preallocation, and fails on its
    /// own if the disk is full.
    fn allocate_through(&self, end: u64) -> io::Result<()> {
        let mut allocated = self.allocated.lock();
        if end <= *allocated {
            return Ok(());
        }
        let target = end
            .div_ceil(PREALLOCATION_STEP_BYTES)
            .saturating_mul(PREALLOCATION_STEP_BYTES)
            .min(self.limit);
        if target < end {
            // A frame larger than the segment size limit: written as is.
            return Ok(());
        }
        if let Err(error) = self.inner.allocate(target) {
            tracing::debug!(segment = %self.path.display(), error = %error, "could not preallocate segment space; appending");
            return Ok(());
        }
        *allocated = target;
        Ok(())
    }
}

impl Drop for PreallocatedFile {
    fn drop(&mut self) {
        self.stop_preparing();
    }
}

/// The preparing thread: keeps the space from the writer's claim to
/// [`PREWRITE_AHEAD_BYTES`] past it prepared, one chunk at a time, until
/// stopped, the segment's limit is reached, or the storage has nothing to
/// gain (or fails: the writer then allocates as without it).
fn prepare_ahead(
    prewrite: &Prewrite,
    inner: &dyn StorageFile,
    allocated: &Mutex<u64>,
    limit: u64,
    path: &std::path::Path,
) {
    let mut state = prewrite.state.lock();
    loop {
        if state.stop {
            return;
        }
        let target = state
            .claimed
            .saturating_add(PREWRITE_AHEAD_BYTES)
            .min(limit);
        if state.prepared >= target {
            if state.prepared >= limit {
                return;
            }
            prewrite.changed.wait(&mut state);
            continue;
        }
        let from = state.prepared;
        let to = ((from / PREWRITE_CHUNK_BYTES + 1) * PREWRITE_CHUNK_BYTES).min(limit);
        state.busy = Some((from, to));
        let result = parking_lot::MutexGuard::unlocked(&mut state, || {
            let result = inner.prewrite(from, to - from);
            if let Ok(true) = result {
                let mut allocated = allocated.lock();
                *allocated = (*allocated).max(to);
            }
            result
        });
        state.busy = None;
        state.prepared = state.prepared.max(to);
        prewrite.changed.notify_all();
        match result {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                tracing::debug!(segment = %path.display(), error = %error, "could not prepare segment space; allocating as the frames come");
                return;
            }
        }
    }
}

impl StorageFile for PreallocatedFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.claim(offset + buf.len() as u64, false);
        self.allocate_through(offset + buf.len() as u64)?;
        self.inner.write_all_at(buf, offset)
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.claim(offset + buf.len() as u64, true);
        self.allocate_through(offset + buf.len() as u64)?;
        self.inner.write_durable_at(buf, offset)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        // The file is cut (sealed, or after a poisoning): nothing else may
        // write into it.
        self.stop_preparing();
        let mut allocated = self.allocated.lock();
        let result = self.inner.set_len(len);
        // Whatever happened, allocate again before writing past `len`.
        *allocated = (*allocated).min(len);
        result
    }

    fn size_bytes(&self) -> io::Result<u64> {
        self.inner.size_bytes()
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }

    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.start_writeback(offset, len)
    }
}

/// Cuts the space allocated past a segment's last frame (`data_end`) and
/// makes the cut durable: a segment is sealed (gets a successor) only once
/// its file ends at its data, so every sealed segment does, as before
/// preallocation. The frames must be durable already; this changes only
/// the length.
pub(crate) fn trim_to_data(file: &dyn StorageFile, data_end: u64) -> io::Result<()> {
    if file.size_bytes()? > data_end {
        file.set_len(data_end)?;
        file.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_and_parse() {
        assert_eq!(segment_file_name(1), "00000000000000000001.seg");
        assert_eq!(
            parse_segment_file_name(&segment_file_name(u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(parse_segment_file_name("1.seg"), None);
        assert_eq!(
            parse_segment_file_name("00000000000000000001.seg.tmp"),
            None
        );
        assert!(segment_file_name(9) < segment_file_name(10));
    }
}
