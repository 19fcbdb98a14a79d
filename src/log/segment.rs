//! Segment files: names, listing and the creation protocol.

use std::path::{Path, PathBuf};

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
