//! Recovery: what opening a store does to its segments, and full verification.
//!
//! The rules (see `docs/format.md`, "Recovery"):
//! - Sealed segments (all but the last) were fsynced before their successor
//!   was created, so any bad byte in them is corruption.
//! - In the last segment, the first bad frame ends the log *if* nothing after
//!   it proves it was durable: a torn tail, cut off with a logged note. A
//!   valid frame after it whose durability watermark covers the bad frame
//!   proves the bad frame had been fsynced: that is corruption.
//! - Corruption fails the open with its location unless salvage was asked
//!   for; salvage moves the damaged bytes into `quarantine/` and keeps
//!   everything before them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::log::format::{self, Frame, FrameDecode, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::log::segment::{self, SegmentFile};
use crate::log::Lsn;
use crate::storage::{SealedFile, Storage, StorageFile};

/// Name of the directory inside a store where salvage moves damaged bytes.
pub const QUARANTINE_DIR: &str = "quarantine";
/// Marker a poisoned writer leaves before truncating what it refused; the
/// next open starts a fresh segment and removes it.
pub const POISONED_MARKER: &str = "POISONED";

/// How a scan of one segment ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte after the header belongs to a valid frame.
    Clean,
    /// The segment ends in bytes that were never made durable.
    Torn {
        /// Where the torn bytes start.
        offset: u64,
        /// Why the bytes there are not a frame.
        reason: String,
    },
    /// Damage that a torn write cannot explain.
    Damaged {
        /// Where the damage starts.
        offset: u64,
        /// What check failed.
        reason: String,
    },
}

/// The result of checking every frame of one segment.
#[derive(Debug, Clone)]
pub struct SegmentScan {
    /// First LSN, from the header.
    pub first_lsn: Lsn,
    /// One past the LSN of the last valid event.
    pub next_lsn: Lsn,
    /// End offset of the last valid frame.
    pub valid_bytes: u64,
    /// Number of valid frames.
    pub frames: u64,
    /// Checksum of the last valid frame (of the header if none): the chain
    /// value the next frame must link to.
    pub chain_crc: u32,
    /// How the scan ended.
    pub end: ScanEnd,
}

/// Checks every frame of a segment's bytes.
///
/// `last` says whether this is the last segment of the log (the only one
/// that may end in a torn tail). Returns `Err((offset, reason))` when the
/// header itself is bad.
pub fn scan_segment(bytes: &[u8], last: bool) -> Result<SegmentScan, (u64, String)> {
    let header = format::decode_segment_header(bytes).map_err(|reason| (0, reason))?;
    let mut scan = SegmentScan {
        first_lsn: header.first_lsn,
        next_lsn: header.first_lsn,
        valid_bytes: SEGMENT_HEADER_BYTES as u64,
        frames: 0,
        chain_crc: header.crc,
        end: ScanEnd::Clean,
    };
    let mut offset = SEGMENT_HEADER_BYTES;
    while offset < bytes.len() {
        let problem = match format::decode_frame(&bytes[offset..]) {
            FrameDecode::Complete(frame) => {
                match frame_follows(&frame, scan.next_lsn, scan.chain_crc) {
                    Ok(()) => {
                        offset += frame.size_bytes();
                        scan.frames += 1;
                        scan.chain_crc = frame.crc;
                        scan.next_lsn = frame.end_lsn();
                        scan.valid_bytes = offset as u64;
                        continue;
                    }
                    Err(reason) => reason,
                }
            }
            FrameDecode::Incomplete { needed: None } => "frame header cut short".to_string(),
            FrameDecode::Incomplete {
                needed: Some(needed),
            } => {
                format!(
                    "frame of {needed} bytes cut short at {} bytes",
                    bytes.len() - offset
                )
            }
            FrameDecode::Invalid(reason) => reason.to_string(),
        };
        let offset = offset as u64;
        scan.end = if last && !later_frame_proves_durable(bytes, offset as usize + 1, scan.next_lsn)
        {
            ScanEnd::Torn {
                offset,
                reason: problem,
            }
        } else {
            ScanEnd::Damaged {
                offset,
                reason: problem,
            }
        };
        break;
    }
    Ok(scan)
}

/// Checks that a valid frame is the one expected next.
pub(crate) fn frame_follows(
    frame: &Frame<'_>,
    expected_lsn: Lsn,
    chain_crc: u32,
) -> Result<(), String> {
    if frame.previous_crc != chain_crc {
        return Err(format!(
            "frame at LSN {} does not chain to the frame before it (links to {:#010x}, expected {chain_crc:#010x}): stale bytes of an earlier write",
            frame.first_lsn, frame.previous_crc
        ));
    }
    if frame.first_lsn != expected_lsn {
        return Err(format!(
            "frame starts at LSN {} where LSN {expected_lsn} was expected",
            frame.first_lsn
        ));
    }
    if frame.durable_lsn > frame.first_lsn {
        return Err(format!(
            "frame durability watermark {} is past its own first LSN {}",
            frame.durable_lsn, frame.first_lsn
        ));
    }
    Ok(())
}

/// Whether any valid frame at or after `from` was written when LSN
/// `damaged_lsn` was already durable.
///
/// Every frame records the writer's durability watermark. Damage that only
/// a crash explains lies in bytes that were never fsynced, and every frame
/// written after them carries a watermark at or below them. A frame whose
/// watermark is above the damaged LSN proves the damaged bytes had been
/// fsynced: they were acknowledged, and losing them is corruption.
pub(crate) fn later_frame_proves_durable(bytes: &[u8], from: usize, damaged_lsn: Lsn) -> bool {
    let mut position = from;
    while position + FRAME_HEADER_BYTES <= bytes.len() {
        let window = &bytes[position..];
        let first_lsn = u64::from_le_bytes(window[8..16].try_into().unwrap_or_default());
        let durable_lsn = u64::from_le_bytes(window[16..24].try_into().unwrap_or_default());
        if durable_lsn > damaged_lsn && first_lsn >= durable_lsn {
            if let FrameDecode::Complete(_) = format::decode_frame(window) {
                return true;
            }
        }
        position += 1;
    }
    false
}

/// What happened to the log when it was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments found.
    pub segments: usize,
    /// The next LSN the log will assign.
    pub next_lsn: Lsn,
    /// A torn tail that was cut off: segment, offset, bytes dropped.
    pub torn_tail: Option<TornTail>,
    /// Damage that salvage moved aside (only with salvage on).
    pub salvaged: Option<Salvage>,
    /// Leftover temporary files from an interrupted segment creation, removed.
    pub temporary_files_removed: usize,
}

/// A torn tail cut off by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment that ended in it.
    pub segment: PathBuf,
    /// Where the cut was made.
    pub offset: u64,
    /// How many bytes were dropped.
    pub bytes_dropped: u64,
    /// Why the bytes at the cut are not a frame.
    pub reason: String,
}

/// Damage that salvage moved into the quarantine directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvage {
    /// The damaged segment.
    pub segment: PathBuf,
    /// Where the damage starts.
    pub offset: u64,
    /// What check failed.
    pub reason: String,
    /// Files now in the quarantine directory (the damaged segment's original
    /// bytes and every later segment).
    pub quarantined: Vec<PathBuf>,
}

/// The state recovery hands to the writer.
#[derive(Debug)]
pub struct Recovered {
    /// Sealed segments, in LSN order.
    pub sealed: Vec<SegmentFile>,
    /// The last segment, open for writing.
    pub active: SegmentFile,
    /// Its file handle.
    pub active_file: Arc<dyn StorageFile>,
    /// Its valid length.
    pub active_bytes: u64,
    /// Chain value the next frame in it links to.
    pub active_chain_crc: u32,
    /// What recovery did.
    pub report: RecoveryReport,
}

/// Options that change what recovery does.
#[derive(Debug, Clone, Copy)]
pub struct RecoveryOptions {
    /// Keep what precedes damage instead of failing (moves the rest aside).
    pub salvage: bool,
    /// Sealed segments whose events all precede this LSN are checked by
    /// header only (a snapshot covers them); later ones frame by frame.
    pub full_check_from_lsn: Lsn,
}

/// Opens the segments of the store at `dir` for writing, repairing a torn
/// tail. Creates the first segment of an empty store.
pub fn recover(storage: &dyn Storage, dir: &Path, options: RecoveryOptions) -> Result<Recovered> {
    let listing = segment::list(storage, dir)?;
    let mut report = RecoveryReport::default();
    for temporary in &listing.temporary {
        storage
            .remove_file(temporary)
            .map_err(Error::io("remove leftover temporary file", temporary))?;
        report.temporary_files_removed += 1;
    }
    let mut segments = listing.segments;
    if segments.is_empty() {
        let (file, handle, header_crc) = segment::create(storage, dir, 1)?;
        report.segments = 1;
        report.next_lsn = 1;
        return Ok(Recovered {
            sealed: Vec::new(),
            active: file,
            active_file: Arc::from(handle),
            active_bytes: SEGMENT_HEADER_BYTES as u64,
            active_chain_crc: header_crc,
            report,
        });
    }

    let originally_last = segments.last().map(|segment| segment.first_lsn);
    // Sealed segments: header always, frames when not covered by a snapshot.
    for index in 0..segments.len() - 1 {
        let next_first_lsn = segments[index + 1].first_lsn;
        let checked = check_sealed(storage, &segments[index], next_first_lsn, options)?;
        if let Err((offset, reason)) = checked {
            if !options.salvage {
                return Err(Error::Corrupted {
                    segment: segments[index].path.clone(),
                    offset,
                    reason,
                });
            }
            let salvage = salvage_from(storage, dir, &mut segments, index, offset, reason)?;
            report.salvaged = Some(salvage);
            break;
        }
    }

    // The last segment: cut a torn tail, or fail on (or salvage) damage.
    // A segment that salvage exposed as the last one was sealed before:
    // readers may map it, so it is never truncated in place, and any bad
    // byte in it is damage, not a torn tail.
    let (active_bytes, next_lsn, active_chain_crc) = loop {
        let last = segments.last().cloned().expect("segments is not empty");
        let bytes = read_whole(storage, &last.path)?;
        check_version(&last.path, &bytes)?;
        let was_sealed = report.salvaged.is_some() && originally_last != Some(last.first_lsn);
        let scan = match scan_segment(&bytes, !was_sealed) {
            Ok(scan) if scan.first_lsn != last.first_lsn => Err((
                0,
                format!(
                    "header names first LSN {} but the file name says {}",
                    scan.first_lsn, last.first_lsn
                ),
            )),
            other => other,
        };
        let damage = match scan {
            Ok(scan) => match scan.end {
                ScanEnd::Clean => break (scan.valid_bytes, scan.next_lsn, scan.chain_crc),
                ScanEnd::Torn { offset, reason } => {
                    cut_torn_tail(storage, &last.path, &bytes, offset, reason, &mut report)?;
                    break (scan.valid_bytes, scan.next_lsn, scan.chain_crc);
                }
                ScanEnd::Damaged { offset, reason } => (offset, reason),
            },
            Err(damage) => damage,
        };
        let (offset, reason) = damage;
        if !options.salvage || report.salvaged.is_some() {
            return Err(Error::Corrupted {
                segment: last.path.clone(),
                offset,
                reason,
            });
        }
        let index = segments.len() - 1;
        report.salvaged = Some(salvage_from(
            storage,
            dir,
            &mut segments,
            index,
            offset,
            reason,
        )?);
    };

    let (mut active_bytes, mut active_chain_crc) = (active_bytes, active_chain_crc);
    let poisoned_marker = dir.join(POISONED_MARKER);
    let previous_writer_poisoned = storage.exists(&poisoned_marker);
    let (active, active_file): (SegmentFile, Arc<dyn StorageFile>) =
        if report.torn_tail.is_some() || previous_writer_poisoned {
            // New frames never go where cut or refused bytes were: a file system that
            // exposes freed or unwritten blocks after a crash could otherwise
            // show the cut frames again, chained and numbered as if new. Start
            // a fresh segment (new salt) at the next LSN; when the cut left the
            // segment empty, this replaces it under the same name.
            let last = segments.pop().expect("segments is not empty");
            // What the previous writer left unsynced (it may have died before
            // truncating) is served from now on: make it durable before it
            // is sealed behind the fresh segment.
            storage
                .open_write(&last.path)
                .and_then(|file| file.sync_all())
                .map_err(Error::io("fsync segment before sealing it", &last.path))?;
            let (created, handle, header_crc) = segment::create(storage, dir, next_lsn)?;
            if created.first_lsn != last.first_lsn {
                segments.push(last);
            }
            active_bytes = SEGMENT_HEADER_BYTES as u64;
            active_chain_crc = header_crc;
            if previous_writer_poisoned {
                storage
                    .remove_file(&poisoned_marker)
                    .map_err(Error::io("remove poisoned marker", &poisoned_marker))?;
            }
            (created, Arc::from(handle))
        } else {
            let active = segments.pop().expect("segments is not empty");
            let handle = storage
                .open_write(&active.path)
                .map_err(Error::io("open segment for writing", &active.path))?;
            (active, Arc::from(handle))
        };
    // The previous writer may have died before fsyncing what it wrote (under
    // None or Periodic) or before fsyncing the directory entry of its newest
    // segment. Make both durable now: the writer starts by counting every
    // recovered record as durable, and new frames carry that watermark.
    active_file
        .sync_all()
        .map_err(Error::io("fsync recovered segment", &active.path))?;
    storage
        .sync_dir(dir)
        .map_err(Error::io("fsync store directory", dir))?;
    report.segments = segments.len() + 1;
    report.next_lsn = next_lsn;
    Ok(Recovered {
        sealed: segments,
        active,
        active_file,
        active_bytes,
        active_chain_crc,
        report,
    })
}

/// Checks one sealed segment; `Ok(Err(..))` is damage at an offset.
fn check_sealed(
    storage: &dyn Storage,
    segment: &SegmentFile,
    next_first_lsn: Lsn,
    options: RecoveryOptions,
) -> Result<Result<(), (u64, String)>> {
    let bytes = storage
        .read_immutable(&segment.path, SealedFile::assert_sealed())
        .map_err(Error::io("read segment", &segment.path))?;
    let bytes: &[u8] = (*bytes).as_ref();
    check_version(&segment.path, bytes)?;
    let header_lsn = match format::decode_segment_header(bytes) {
        Ok(header) => header.first_lsn,
        Err(reason) => return Ok(Err((0, reason))),
    };
    if header_lsn != segment.first_lsn {
        return Ok(Err((
            0,
            format!(
                "header names first LSN {header_lsn} but the file name says {}",
                segment.first_lsn
            ),
        )));
    }
    if next_first_lsn <= options.full_check_from_lsn {
        return Ok(Ok(()));
    }
    let scan = match scan_segment(bytes, false) {
        Ok(scan) => scan,
        Err(damage) => return Ok(Err(damage)),
    };
    if let ScanEnd::Damaged { offset, reason } | ScanEnd::Torn { offset, reason } = scan.end {
        return Ok(Err((offset, reason)));
    }
    if scan.next_lsn != next_first_lsn {
        return Ok(Err((
            scan.valid_bytes,
            format!(
                "segment ends before LSN {} but the next segment starts at LSN {next_first_lsn}",
                scan.next_lsn
            ),
        )));
    }
    Ok(Ok(()))
}

/// Fails with `Error::UnsupportedVersion` for a segment of another format
/// version: that is not damage, and salvage must never move it away.
fn check_version(path: &Path, bytes: &[u8]) -> Result<()> {
    match format::foreign_segment_version(bytes) {
        Some(version) => Err(Error::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            supported: format::FORMAT_VERSION,
        }),
        None => Ok(()),
    }
}

/// Reads a whole file into memory with positioned reads.
pub(crate) fn read_whole(storage: &dyn Storage, path: &Path) -> Result<Vec<u8>> {
    let file = storage
        .open_read(path)
        .map_err(Error::io("open segment", path))?;
    let length = file.size_bytes().map_err(Error::io("stat segment", path))?;
    let mut bytes = vec![0u8; length as usize];
    let read = file
        .read_at(&mut bytes, 0)
        .map_err(Error::io("read segment", path))?;
    bytes.truncate(read);
    Ok(bytes)
}

fn cut_torn_tail(
    storage: &dyn Storage,
    path: &Path,
    bytes: &[u8],
    offset: u64,
    reason: String,
    report: &mut RecoveryReport,
) -> Result<()> {
    let bytes_dropped = bytes.len() as u64 - offset;
    let file = storage
        .open_write(path)
        .map_err(Error::io("open segment to cut its torn tail", path))?;
    file.set_len(offset)
        .map_err(Error::io("truncate torn tail", path))?;
    file.sync_all()
        .map_err(Error::io("fsync after cutting torn tail", path))?;
    tracing::warn!(
        segment = %path.display(),
        offset,
        bytes_dropped,
        reason = %reason,
        "cut a torn tail left by an interrupted write (never acknowledged as durable)"
    );
    report.torn_tail = Some(TornTail {
        segment: path.to_path_buf(),
        offset,
        bytes_dropped,
        reason,
    });
    Ok(())
}

/// Moves the damage in `segments[index]` at `offset` and every later segment
/// into the quarantine directory, keeping the bytes before the damage.
fn salvage_from(
    storage: &dyn Storage,
    dir: &Path,
    segments: &mut Vec<SegmentFile>,
    index: usize,
    offset: u64,
    reason: String,
) -> Result<Salvage> {
    let quarantine = dir.join(QUARANTINE_DIR);
    storage
        .create_dir_all(&quarantine)
        .map_err(Error::io("create quarantine directory", &quarantine))?;
    let damaged = segments[index].clone();
    let mut quarantined = Vec::new();

    // Keep a copy of the damaged segment as it was, and make the copy
    // durable before touching the original.
    let original = read_whole(storage, &damaged.path)?;
    let copy = unique_quarantine_path(storage, &quarantine, &damaged.path);
    write_durably(storage, &copy, &original)?;
    quarantined.push(copy);
    for later in &segments[index + 1..] {
        let target = unique_quarantine_path(storage, &quarantine, &later.path);
        storage
            .rename(&later.path, &target)
            .map_err(Error::io("move segment into quarantine", &later.path))?;
        quarantined.push(target);
    }
    storage
        .sync_dir(&quarantine)
        .map_err(Error::io("fsync quarantine directory", &quarantine))?;
    storage
        .sync_dir(dir)
        .map_err(Error::io("fsync store directory", dir))?;
    segments.truncate(index + 1);

    // Replace the damaged segment by its valid prefix: write a new file and
    // rename it over, never truncate a file another reader may have mapped.
    let keep_prefix = offset >= SEGMENT_HEADER_BYTES as u64;
    if keep_prefix {
        let temporary = damaged
            .path
            .with_extension(format!("seg{}", segment::TEMPORARY_SUFFIX));
        write_durably(storage, &temporary, &original[..offset as usize])?;
        storage
            .rename(&temporary, &damaged.path)
            .map_err(Error::io("replace damaged segment", &damaged.path))?;
    } else {
        storage
            .remove_file(&damaged.path)
            .map_err(Error::io("remove damaged segment", &damaged.path))?;
        segments.pop();
    }
    storage
        .sync_dir(dir)
        .map_err(Error::io("fsync store directory", dir))?;
    if segments.is_empty() {
        let (file, _, _) = segment::create(storage, dir, damaged.first_lsn)?;
        segments.push(file);
    }
    tracing::warn!(
        segment = %damaged.path.display(),
        offset,
        reason = %reason,
        quarantined = quarantined.len(),
        "salvage: kept the log up to the damage and moved the rest into quarantine"
    );
    Ok(Salvage {
        segment: damaged.path,
        offset,
        reason,
        quarantined,
    })
}

fn unique_quarantine_path(storage: &dyn Storage, quarantine: &Path, original: &Path) -> PathBuf {
    let name = original
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "segment".to_string());
    let mut candidate = quarantine.join(&name);
    let mut counter = 1;
    while storage.exists(&candidate) {
        candidate = quarantine.join(format!("{name}.{counter}"));
        counter += 1;
    }
    candidate
}

fn write_durably(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<()> {
    let file = storage.create(path).map_err(Error::io("create", path))?;
    file.write_all_at(bytes, 0)
        .map_err(Error::io("write", path))?;
    file.sync_all().map_err(Error::io("fsync", path))?;
    Ok(())
}

/// What `verify` found in a whole store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segment files.
    pub segments: usize,
    /// Valid frames (atomic batches).
    pub frames: u64,
    /// Valid events.
    pub events: u64,
    /// Bytes in all segment files.
    pub bytes: u64,
    /// LSN of the first event (the first segment's first LSN).
    pub first_lsn: Lsn,
    /// One past the LSN of the last valid event.
    pub next_lsn: Lsn,
    /// A torn tail at the end of the last segment (what a crash leaves; an
    /// open by the writer cuts it).
    pub torn_tail: Option<(PathBuf, u64)>,
}

/// Checks every frame of every segment of the store at `dir` without
/// changing anything. Fails with `Error::Corrupted` at the first damage.
pub fn verify(storage: &dyn Storage, dir: &Path) -> Result<VerifyReport> {
    verify_with_progress(storage, dir, &mut |_| {})
}

/// [`verify`], calling `progress` with the bytes checked after each segment.
pub fn verify_with_progress(
    storage: &dyn Storage,
    dir: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<VerifyReport> {
    let segments = segment::list(storage, dir)?.segments;
    if segments.is_empty() {
        return Err(Error::NotAStore {
            path: dir.to_path_buf(),
        });
    }
    let mut report = VerifyReport {
        segments: segments.len(),
        first_lsn: segments[0].first_lsn,
        next_lsn: segments[0].first_lsn,
        ..VerifyReport::default()
    };
    for (index, segment) in segments.iter().enumerate() {
        let last = index + 1 == segments.len();
        let bytes = if last {
            Arc::new(read_whole(storage, &segment.path)?) as crate::storage::SharedBytes
        } else {
            storage
                .read_immutable(&segment.path, SealedFile::assert_sealed())
                .map_err(Error::io("read segment", &segment.path))?
        };
        let bytes: &[u8] = (*bytes).as_ref();
        check_version(&segment.path, bytes)?;
        let corrupted = |offset, reason| Error::Corrupted {
            segment: segment.path.clone(),
            offset,
            reason,
        };
        let scan =
            scan_segment(bytes, last).map_err(|(offset, reason)| corrupted(offset, reason))?;
        if scan.first_lsn != segment.first_lsn || scan.first_lsn != report.next_lsn {
            return Err(corrupted(
                0,
                format!(
                    "segment starts at LSN {} (file name {}) where LSN {} was expected",
                    scan.first_lsn, segment.first_lsn, report.next_lsn
                ),
            ));
        }
        match scan.end {
            ScanEnd::Clean => {}
            ScanEnd::Torn { offset, .. } => report.torn_tail = Some((segment.path.clone(), offset)),
            ScanEnd::Damaged { offset, reason } => return Err(corrupted(offset, reason)),
        }
        report.frames += scan.frames;
        report.events += scan.next_lsn - scan.first_lsn;
        report.bytes += bytes.len() as u64;
        report.next_lsn = scan.next_lsn;
        progress(report.bytes);
    }
    Ok(report)
}
