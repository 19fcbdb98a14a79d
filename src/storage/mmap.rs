//! Read-only memory maps of sealed segments: the only `unsafe` code in convlog.
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
