//! Consistent copies of a store, taken beside a running writer.
//!
//! [`backup`] copies a store's segments up to an LSN it makes durable, and
//! the snapshots that belong to exactly that log prefix, into a new
//! directory; then it verifies the copy. It takes no lock: the writer keeps
//! appending, snapshotting and compacting while the copy is made.
//!
//! How the copy stays consistent:
//! - Every segment file and snapshot file is opened before anything is
//!   read, so a compaction or snapshot rotation that deletes one meanwhile
//!   does not take its bytes away (an open file outlives its name).
//! - The last segment is copied up to its length when the copy started,
//!   after an `fdatasync` of the source file, and cut back to its last whole
//!   frame: the copy ends at an LSN that is durable in the source too.
//! - A snapshot is kept only if it proves it belongs to the copied log (the
//!   same checks as opening a store); a compacted log needs one.
//! - An encrypted store's key table is copied after the segments (every key
//!   their events use is in it; docs/erasure.md).
//! - The copy is written into `DEST.partial`, fsynced, verified, and only
//!   then renamed to `DEST`, so a `DEST` that exists is a whole backup.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::log::recovery::{self, ScanEnd};
use crate::log::{segment, Lsn};
use crate::storage::{FileSystem, Storage, StorageFile};
use crate::store::snapshot;

/// Bytes copied per read.
const COPY_CHUNK_BYTES: usize = 1 << 20;
/// How often the segment listing is retried when a compaction removes a
/// listed segment before it could be opened.
const LISTING_ATTEMPTS_MAX: usize = 16;
/// Suffix of the directory a backup is written into before it is complete.
pub const PARTIAL_SUFFIX: &str = ".partial";

/// What [`backup`] copied.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupReport {
    /// The backup directory.
    pub dest: PathBuf,
    /// The first LSN in the backup's log.
    pub first_lsn: Lsn,
    /// Every event below this LSN is in the backup (and was durable in the
    /// source when the copy was taken); none at or above it.
    pub next_lsn: Lsn,
    /// Segment files copied.
    pub segments: usize,
    /// Snapshot files copied (each checked against the copied log).
    pub snapshots: Vec<(PathBuf, Lsn)>,
    /// Source snapshots left out, and why (newer than the copy, damaged,
    /// or not of this log).
    pub skipped_snapshots: Vec<(PathBuf, String)>,
    /// Bytes written.
    pub bytes: u64,
}

/// Copies the store at `source` into the new directory `dest` (missing, or
/// empty), beside a running writer, and verifies the copy.
///
/// The copy holds every event acknowledged before `backup` was called, ends
/// at a frame boundary that is durable in the source, and opens as a store
/// of its own (restore it by opening it, or by backing it up again to where
/// the store should live). `progress` is told the bytes copied so far.
pub fn backup(source: &Path, dest: &Path, progress: &mut dyn FnMut(u64)) -> Result<BackupReport> {
    let storage = FileSystem;
    check_destination(&storage, source, dest)?;
    let partial = partial_path(dest);
    if storage.exists(&partial) {
        return Err(Error::BackupDestination {
            destination: dest.to_path_buf(),
            reason: format!(
                "{} holds an interrupted backup; remove it and run the backup again",
                partial.display()
            ),
        });
    }

    // Open every segment, then every snapshot, before reading anything.
    let segments = open_segments(&storage, source)?;
    let snapshots = open_snapshots(&storage, source)?;
    storage
        .create_dir_all(&partial)
        .map_err(Error::io("create backup directory", &partial))?;
    let (next_lsn, segment_bytes) = copy_segments(&storage, &segments, &partial, progress)?;
    let first_lsn = segments[0].first_lsn;
    let mut report = BackupReport {
        dest: dest.to_path_buf(),
        first_lsn,
        next_lsn,
        segments: segments.len(),
        snapshots: Vec::new(),
        skipped_snapshots: Vec::new(),
        bytes: 0,
    };
    let snapshot_bytes = copy_snapshots(&storage, &snapshots, &partial, &mut report)?;
    if first_lsn > 1 && report.snapshots.is_empty() {
        return Err(Error::SnapshotRestore {
            path: source.join(snapshot::SNAPSHOT_DIR),
            reason: format!(
                "the log starts at LSN {first_lsn} and no snapshot belongs to the copied log, so the backup could not hold the events before it{}; the partial copy is at {}",
                describe_skipped(&report.skipped_snapshots),
                partial.display()
            ),
        });
    }
    let key_table_bytes = copy_key_table(&storage, source, &partial)?;
    report.bytes = segment_bytes + snapshot_bytes + key_table_bytes;
    publish(&storage, &partial, dest)?;
    verify_copy(dest, first_lsn, next_lsn)?;
    Ok(report)
}

/// Copies an encrypted store's key table (docs/erasure.md), after the
/// segments: every key the copied events use was in the table before they
/// were appended, and an erasure since is in the copy too. The table is
/// replaced only by a rename, so one read sees one whole version of it.
/// The store key is not copied: it never lies in the store directory.
fn copy_key_table(storage: &dyn Storage, source: &Path, partial: &Path) -> Result<u64> {
    let from = source.join(crate::erasure::KEY_TABLE_FILE);
    let bytes = match std::fs::read(&from) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(Error::io("read the key table", &from)(error)),
    };
    let to = partial.join(crate::erasure::KEY_TABLE_FILE);
    let out = storage
        .create(&to)
        .map_err(Error::io("create backup file", &to))?;
    out.write_all_at(&bytes, 0)
        .and_then(|()| out.sync_all())
        .map_err(Error::io("write backup file", &to))?;
    Ok(bytes.len() as u64)
}

/// Copies the opened `segments` into `partial`: the sealed ones whole, the
/// last one up to its length now (made durable in the source first) and cut
/// back to its last whole frame. Returns one past the last LSN copied, and
/// the bytes copied.
fn copy_segments(
    storage: &dyn Storage,
    segments: &[Opened],
    partial: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<(Lsn, u64)> {
    let (last, sealed) = segments
        .split_last()
        .expect("open_segments returns at least one");
    // Everything written to the last segment so far becomes durable in the
    // source; the copy takes no byte written after this point.
    let last_bytes = last
        .file
        .size_bytes()
        .map_err(Error::io("read size of segment", &last.path))?;
    last.file
        .sync_data()
        .map_err(Error::io("fsync source segment", &last.path))?;
    let mut copied = 0u64;
    for segment in sealed {
        let length = segment
            .file
            .size_bytes()
            .map_err(Error::io("read size of segment", &segment.path))?;
        copied += copy_file(
            storage,
            segment,
            &partial.join(segment.name()),
            length,
            &mut |bytes| progress(copied + bytes),
        )?;
    }
    let last_copy = partial.join(last.name());
    copied += copy_file(storage, last, &last_copy, last_bytes, &mut |bytes| {
        progress(copied + bytes)
    })?;
    let next_lsn = cut_to_last_frame(storage, &last_copy)?;
    Ok((next_lsn, copied))
}

/// Copies each opened snapshot that could cover the copied log (it ends at
/// `report.next_lsn`) into `partial`, and keeps those that prove they
/// belong to it; the others are listed in `report`. Returns the bytes
/// copied.
fn copy_snapshots(
    storage: &dyn Storage,
    snapshots: &[Opened],
    partial: &Path,
    report: &mut BackupReport,
) -> Result<u64> {
    let next_lsn = report.next_lsn;
    let snapshot_dir = partial.join(snapshot::SNAPSHOT_DIR);
    let mut copied = 0;
    for source_snapshot in snapshots {
        if source_snapshot.first_lsn > next_lsn {
            report.skipped_snapshots.push((
                source_snapshot.path.clone(),
                format!(
                    "covers events up to LSN {}, past the backup's end (LSN {next_lsn})",
                    source_snapshot.first_lsn
                ),
            ));
            continue;
        }
        if !storage.exists(&snapshot_dir) {
            storage
                .create_dir_all(&snapshot_dir)
                .map_err(Error::io("create backup directory", &snapshot_dir))?;
        }
        let length = source_snapshot
            .file
            .size_bytes()
            .map_err(Error::io("read size of snapshot", &source_snapshot.path))?;
        let copy = snapshot_dir.join(source_snapshot.name());
        copied += copy_file(storage, source_snapshot, &copy, length, &mut |_| {})?;
        match check_snapshot(storage, partial, &copy) {
            Ok(lsn) => report.snapshots.push((
                report
                    .dest
                    .join(snapshot::SNAPSHOT_DIR)
                    .join(source_snapshot.name()),
                lsn,
            )),
            Err(reason) => {
                storage
                    .remove_file(&copy)
                    .map_err(Error::io("remove unusable snapshot copy", &copy))?;
                report
                    .skipped_snapshots
                    .push((source_snapshot.path.clone(), reason));
            }
        }
    }
    Ok(copied)
}

/// Makes the copy's names durable, then renames `partial` to `dest`: the
/// rename that makes the backup exist.
fn publish(storage: &dyn Storage, partial: &Path, dest: &Path) -> Result<()> {
    let snapshot_dir = partial.join(snapshot::SNAPSHOT_DIR);
    if storage.exists(&snapshot_dir) {
        storage
            .sync_dir(&snapshot_dir)
            .map_err(Error::io("fsync backup snapshot directory", &snapshot_dir))?;
    }
    storage
        .sync_dir(partial)
        .map_err(Error::io("fsync backup directory", partial))?;
    storage
        .rename(partial, dest)
        .map_err(Error::io("rename backup into place", dest))?;
    let parent = parent_of(dest);
    storage
        .sync_dir(&parent)
        .map_err(Error::io("fsync parent of backup", &parent))
}

/// The copy must open as a store and hold exactly `first_lsn..next_lsn`,
/// with every snapshot verifying.
fn verify_copy(dest: &Path, first_lsn: Lsn, next_lsn: Lsn) -> Result<()> {
    let verified = crate::store::verify(dest, &mut |_| {})?;
    if (verified.log.first_lsn, verified.log.next_lsn) != (first_lsn, next_lsn) {
        return Err(Error::BackupVerify {
            destination: dest.to_path_buf(),
            reason: format!(
                "it holds LSNs {}..{}, not the {first_lsn}..{next_lsn} that was copied",
                verified.log.first_lsn, verified.log.next_lsn
            ),
        });
    }
    if let Some((path, Err(reason))) = verified.snapshots.iter().find(|(_, check)| check.is_err()) {
        return Err(Error::BackupVerify {
            destination: dest.to_path_buf(),
            reason: format!("its snapshot {} does not verify: {reason}", path.display()),
        });
    }
    Ok(())
}

/// The directory a backup of `dest` is written into before it is complete.
pub fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest
        .file_name()
        .map(|name| name.to_os_string())
        .unwrap_or_else(|| "backup".into());
    name.push(PARTIAL_SUFFIX);
    dest.with_file_name(name)
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn describe_skipped(skipped: &[(PathBuf, String)]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    let reasons: Vec<String> = skipped
        .iter()
        .map(|(path, reason)| format!("{}: {reason}", path.display()))
        .collect();
    format!(" ({})", reasons.join("; "))
}

/// The destination must be new (or an empty directory) and outside the
/// source store.
fn check_destination(storage: &dyn Storage, source: &Path, dest: &Path) -> Result<()> {
    if storage.exists(dest) {
        let names = storage
            .list_dir(dest)
            .map_err(Error::io("list backup destination", dest))?;
        if !names.is_empty() {
            let mut shown: Vec<&str> = names.iter().map(String::as_str).take(3).collect();
            shown.sort_unstable();
            return Err(Error::BackupDestination {
                destination: dest.to_path_buf(),
                reason: format!(
                    "it is not empty (it holds {}{}); a backup goes into a new or empty directory",
                    shown.join(", "),
                    if names.len() > 3 { ", …" } else { "" }
                ),
            });
        }
    }
    let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    if absolute(dest).starts_with(absolute(source)) {
        return Err(Error::BackupDestination {
            destination: dest.to_path_buf(),
            reason: format!("it is inside the store {}", source.display()),
        });
    }
    Ok(())
}

/// An open source file and its first LSN (segment) or LSN (snapshot).
struct Opened {
    first_lsn: Lsn,
    path: PathBuf,
    file: Box<dyn StorageFile>,
}

impl Opened {
    fn name(&self) -> &std::ffi::OsStr {
        self.path.file_name().expect("listed files have names")
    }
}

/// Opens every segment of the store, in LSN order. A compaction may remove
/// the oldest between listing and opening: then the listing is taken again.
fn open_segments(storage: &dyn Storage, source: &Path) -> Result<Vec<Opened>> {
    'listing: for _ in 0..LISTING_ATTEMPTS_MAX {
        let listing = segment::list(storage, source)?;
        if listing.segments.is_empty() {
            return Err(Error::NotAStore {
                path: source.to_path_buf(),
            });
        }
        let mut opened = Vec::with_capacity(listing.segments.len());
        for found in listing.segments {
            match storage.open_read(&found.path) {
                Ok(file) => opened.push(Opened {
                    first_lsn: found.first_lsn,
                    path: found.path,
                    file,
                }),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue 'listing,
                Err(error) => return Err(Error::io("open segment", &found.path)(error)),
            }
        }
        return Ok(opened);
    }
    Err(Error::BackupSourceChanging {
        store: source.to_path_buf(),
        attempts: LISTING_ATTEMPTS_MAX,
    })
}

/// Opens every snapshot file of the store, newest first. One deleted
/// between listing and opening was superseded: it is left out.
fn open_snapshots(storage: &dyn Storage, source: &Path) -> Result<Vec<Opened>> {
    let mut opened = Vec::new();
    for (lsn, path) in snapshot::list(storage, source)? {
        match storage.open_read(&path) {
            Ok(file) => opened.push(Opened {
                first_lsn: lsn,
                path,
                file,
            }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(Error::io("open snapshot", &path)(error)),
        }
    }
    Ok(opened)
}

/// Copies the first `length` bytes of `from` to the new file `to`, fsynced.
fn copy_file(
    storage: &dyn Storage,
    from: &Opened,
    to: &Path,
    length: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let out = storage
        .create(to)
        .map_err(Error::io("create backup file", to))?;
    let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
    let mut offset = 0u64;
    while offset < length {
        let want = (length - offset).min(COPY_CHUNK_BYTES as u64) as usize;
        let read = from
            .file
            .read_at(&mut buffer[..want], offset)
            .map_err(Error::io("read", &from.path))?;
        if read == 0 {
            break; // The file is shorter than it was: copy what is there.
        }
        out.write_all_at(&buffer[..read], offset)
            .map_err(Error::io("write backup file", to))?;
        offset += read as u64;
        progress(offset);
    }
    out.sync_all().map_err(Error::io("fsync backup file", to))?;
    Ok(offset)
}

/// Cuts the copied last segment back to its last whole frame (a write in
/// flight when the copy was taken) and returns the LSN after it.
fn cut_to_last_frame(storage: &dyn Storage, path: &Path) -> Result<Lsn> {
    let file = storage
        .open_write(path)
        .map_err(Error::io("open backup segment", path))?;
    let length = file
        .size_bytes()
        .map_err(Error::io("read size of backup segment", path))?;
    let mut bytes = vec![0u8; length as usize];
    let read = file
        .read_at(&mut bytes, 0)
        .map_err(Error::io("read backup segment", path))?;
    bytes.truncate(read);
    let scan =
        recovery::scan_segment(&bytes, true).map_err(|(offset, reason)| Error::Corrupted {
            segment: path.to_path_buf(),
            offset,
            reason,
        })?;
    if let ScanEnd::Damaged { offset, reason } = scan.end {
        return Err(Error::Corrupted {
            segment: path.to_path_buf(),
            offset,
            reason,
        });
    }
    if scan.valid_bytes < bytes.len() as u64 {
        file.set_len(scan.valid_bytes)
            .map_err(Error::io("cut backup segment", path))?;
        file.sync_all()
            .map_err(Error::io("fsync backup segment", path))?;
    }
    Ok(scan.next_lsn)
}

/// Whether the copied snapshot at `path` belongs to the copied log in
/// `dir` (the checks opening a store makes: its store identity and the chain
/// value of the last frame it covers) and reads whole: its LSN, or why not.
fn check_snapshot(
    storage: &dyn Storage,
    dir: &Path,
    path: &Path,
) -> std::result::Result<Lsn, String> {
    let loaded =
        snapshot::load_checked(storage, dir, path).map_err(|rejection| rejection.to_string())?;
    snapshot::verify(storage, path).map_err(|error| error.to_string())?;
    Ok(loaded.lsn)
}
