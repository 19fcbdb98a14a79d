//! The only `unsafe` code in convlog: read-only memory maps of sealed
//! segments, writable maps of the active segment's allocated space, and
//! `sync_file_range(2)`.
//!
//! See `UNSAFE.md` at the repository root for the whole argument.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;

/// A read-only map of a whole sealed segment file.
pub(super) struct SealedMap {
    map: memmap2::Mmap,
}

impl AsRef<[u8]> for SealedMap {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

/// Maps `file` read-only.
///
/// Only called through [`super::Storage::read_immutable`], whose contract is
/// that the file is a sealed segment.
///
/// # Safety (why this function is safe to call)
///
/// A memory map is sound only if no one changes or shrinks the mapped bytes
/// while the map lives: a change breaks Rust's aliasing rules for the `&[u8]`
/// we hand out, and a truncation turns a later access into `SIGBUS`.
/// convlog maps only *sealed* segments, and never modifies a sealed segment
/// in place:
///
/// - the writer appends only to the last (active) segment, and a segment is
///   sealed only after it was written, fsynced and its successor created;
/// - recovery truncates only the last segment, which is read with positioned
///   reads (`StorageFile::read_at`), never mapped;
/// - salvage replaces a damaged segment by writing a new file and renaming
///   it over the old name, so an existing map keeps the old inode intact;
/// - compaction removes whole files, which leaves existing maps valid.
///
/// What convlog cannot rule out is another program writing into the store
/// directory. That is outside the contract documented in `docs/format.md`
/// ("assumptions"), exactly as it is for any database file.
pub(super) fn map_sealed_file(file: &File) -> io::Result<SealedMap> {
    // SAFETY: the file is a sealed segment (see the function docs): convlog
    // never writes to, truncates or extends it while it may be mapped, so
    // the mapped bytes stay valid and unchanged for the map's lifetime.
    let map = unsafe { memmap2::MmapOptions::new().map(file)? };
    // Whole-file sequential scans dominate reads of sealed segments.
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(SealedMap { map })
}

/// A writable shared map (`MAP_SHARED`, `PROT_READ | PROT_WRITE`) of space
/// that `fallocate(2)` reserved in the file being written: the active
/// segment's write path (`RealFile::write_all_at`). A store into a shared
/// file mapping lands in the file's page cache at once, exactly where a
/// `pwrite` would have put it: every reader (`pread`, another process) sees
/// it, a crash of this process keeps it, and `fdatasync` makes it durable.
/// It saves one system call per write.
///
/// The map never hands out a reference to its memory: bytes go in with a
/// raw copy (`copy_in`), so no `&[u8]`/`&mut [u8]` can alias memory that
/// changes. What remains is the kernel's side: touching a mapped page the
/// file no longer has (it was truncated), or that the kernel cannot back
/// (an I/O error reading it in, no space to allocate it), raises `SIGBUS`
/// instead of returning an error. See `UNSAFE.md`, "The write maps".
#[cfg(target_os = "linux")]
pub(super) struct AllocatedMap {
    /// File offset of the first mapped byte.
    start: u64,
    map: memmap2::MmapRaw,
}

#[cfg(target_os = "linux")]
impl AllocatedMap {
    /// Maps `len` bytes of `file` from `start`. The caller has just
    /// reserved that space with `fallocate` (so the file is at least
    /// `start + len` long and its blocks exist), and drops the map before it
    /// shrinks the file (`RealFile::set_len`).
    pub(super) fn new(file: &File, start: u64, len: u64) -> io::Result<AllocatedMap> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "map too long"))?;
        let map = memmap2::MmapOptions::new()
            .offset(start)
            .len(len)
            .map_raw(file)?;
        // The writer fills it front to back: larger read-ahead batches
        // for the page faults (measured cheaper per write than the default
        // and than `Random`).
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(AllocatedMap { start, map })
    }

    /// The file offsets the map covers.
    pub(super) fn range(&self) -> std::ops::Range<u64> {
        self.start..self.start + self.map.len() as u64
    }

    /// Copies `bytes` to file offset `offset`.
    ///
    /// # Panics
    ///
    /// If `offset..offset + bytes.len()` is not inside `range()`.
    pub(super) fn copy_in(&self, bytes: &[u8], offset: u64) {
        let range = self.range();
        assert!(
            offset >= range.start && offset + bytes.len() as u64 <= range.end,
            "write of {} bytes at {offset} outside the mapped {range:?}",
            bytes.len()
        );
        let at = (offset - range.start) as usize;
        // SAFETY: `at + bytes.len() <= self.map.len()` (checked above), so
        // the destination is inside the live mapping, and `bytes` (ordinary
        // memory the caller borrows) cannot overlap a map only this struct
        // knows. No Rust reference to the mapped memory exists, so the copy
        // aliases nothing. The mapped range is inside the file (the space
        // was allocated before it was mapped, and `RealFile::set_len` drops
        // every map before it shrinks the file), so the pages exist; what
        // convlog cannot rule out (another program truncating the file, an
        // I/O error) raises SIGBUS, not undefined behaviour (`UNSAFE.md`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.as_mut_ptr().add(at),
                bytes.len(),
            );
        }
    }
}

/// Starts writeback of the dirty pages of `file` in `offset..offset + len`
/// without waiting for it (`sync_file_range(2)` with
/// `SYNC_FILE_RANGE_WRITE`). Makes nothing durable: it only lets a later
/// `fdatasync` find less to write.
#[cfg(target_os = "linux")]
pub(super) fn start_writeback(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "range too large",
        ));
    };
    // SAFETY: a plain system call on a file descriptor `file` keeps open
    // for the duration of the call; it reads and writes no memory of ours.
    let result = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
