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
use crate::log::format::{
    self, Frame, FrameDecode, SegmentHeader, SegmentLink, StoreId, BATCH_BYTES_MAX,
    FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};
use crate::log::segment::{self, SegmentFile};
use crate::log::Lsn;
use crate::storage::{SealedFile, Storage, StorageFile};

/// Name of the directory inside a store where salvage moves damaged bytes.
pub const QUARANTINE_DIR: &str = "quarantine";
/// Marker a poisoned writer leaves before truncating what it refused; the
/// next open starts a fresh segment and removes it. It records where the
/// writer cuts (`poisoned_marker_record`), so that every open cuts there
/// even when a crash undid the writer's truncation.
pub const POISONED_MARKER: &str = "POISONED";

/// What a poisoned writer writes into its marker: the first LSN of its
/// active segment and the segment's durable length (where it cuts), then a
/// CRC-32 of those two numbers, as one line of text:
/// `"cut <first_lsn> <bytes> <crc32 in hex>\n"`.
pub(crate) fn poisoned_marker_record(first_lsn: Lsn, durable_bytes: u64) -> Vec<u8> {
    let fields = format!("cut {first_lsn} {durable_bytes}");
    let crc = crc32fast::hash(fields.as_bytes());
    format!("{fields} {crc:08x}\n").into_bytes()
}

/// The (segment first LSN, durable length) a poisoned marker records;
/// `None` for an empty marker (older versions, or a writer that died before
/// its record was durable) or one whose record does not check.
fn parse_poisoned_marker(bytes: &[u8]) -> Option<(Lsn, u64)> {
    let line = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let (fields, crc) = line.rsplit_once(' ')?;
    if u32::from_str_radix(crc, 16).ok()? != crc32fast::hash(fields.as_bytes()) || crc.len() != 8 {
        return None;
    }
    let mut parts = fields.split(' ');
    let (Some("cut"), Some(first_lsn), Some(bytes), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some((first_lsn.parse().ok()?, bytes.parse().ok()?))
}

/// The cut a poisoned writer's marker in `dir` records, if the marker
/// exists and its record checks.
fn poisoned_cut(storage: &dyn Storage, dir: &Path) -> Option<(Lsn, u64)> {
    let marker = dir.join(POISONED_MARKER);
    if !storage.exists(&marker) {
        return None;
    }
    match read_whole(storage, &marker) {
        Ok(bytes) => parse_poisoned_marker(&bytes),
        Err(error) => {
            tracing::warn!(marker = %marker.display(), %error, "could not read the poisoned marker; recovery keeps every valid frame");
            None
        }
    }
}

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
    /// The frames end at `offset` and every byte after it is zero: space
    /// the writer allocated ahead of its frames and has not written yet
    /// (only in the last segment; a sealed segment ends at its data).
    Unused {
        /// Where the frames end and the unused space starts.
        offset: u64,
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
    /// The store identity in the header.
    pub store_id: StoreId,
    /// The header's link to the log before this segment (read by the
    /// crate's tests and fuzz targets).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub prev_chain: u32,
    /// The chain value of the log at the end of the valid frames: the last
    /// valid frame's checksum, or `prev_chain` if there is none. The next
    /// segment's header must carry it as its `prev_chain`.
    pub link_out: u32,
    /// The chain value just before LSN `probe` (see [`scan_segment_probe`]),
    /// when the valid frames of this segment reach it.
    pub probe_chain: Option<u32>,
    /// How the scan ended.
    pub end: ScanEnd,
    /// A tamper-evident (version 4) segment: every frame carries a trailer.
    pub keyed: bool,
    /// The trailer of the last valid frame (tamper-evident segments only).
    pub last_trailer: Option<format::FrameTrailer>,
}

/// Checks every frame of a segment's bytes.
///
/// `last` says whether this is the last segment of the log (the only one
/// that may end in a torn tail). Returns `Err((offset, reason))` when the
/// header itself is bad.
pub fn scan_segment(bytes: &[u8], last: bool) -> Result<SegmentScan, (u64, String)> {
    scan_segment_probe(bytes, last, 0)
}

/// [`scan_segment`], also noting the chain value of the log just before
/// LSN `probe` (the header's `prev_chain` if the segment starts there, or
/// the checksum of the valid frame that ends at `probe - 1`).
pub fn scan_segment_probe(
    bytes: &[u8],
    last: bool,
    probe: Lsn,
) -> Result<SegmentScan, (u64, String)> {
    let header = format::decode_segment_header(bytes).map_err(|reason| (0, reason))?;
    let mut scan = SegmentScan {
        first_lsn: header.first_lsn,
        next_lsn: header.first_lsn,
        valid_bytes: SEGMENT_HEADER_BYTES as u64,
        frames: 0,
        chain_crc: header.crc,
        store_id: header.store_id,
        prev_chain: header.prev_chain,
        link_out: header.prev_chain,
        probe_chain: (probe == header.first_lsn).then_some(header.prev_chain),
        end: ScanEnd::Clean,
        keyed: header.keyed,
        last_trailer: None,
    };
    let mut offset = SEGMENT_HEADER_BYTES;
    while offset < bytes.len() {
        let problem = match format::decode_frame(&bytes[offset..]) {
            FrameDecode::Complete(frame) => {
                match frame_follows(&frame, scan.next_lsn, scan.chain_crc)
                    .and_then(|()| trailer_matches(&frame, header.keyed))
                {
                    Ok(()) => {
                        offset += frame.size_bytes();
                        scan.frames += 1;
                        scan.last_trailer = frame.trailer();
                        scan.chain_crc = frame.crc;
                        scan.link_out = frame.crc;
                        scan.next_lsn = frame.end_lsn();
                        scan.valid_bytes = offset as u64;
                        if scan.next_lsn == probe {
                            scan.probe_chain = Some(frame.crc);
                        }
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
        if last && bytes[offset..].iter().all(|&byte| byte == 0) {
            // Nothing was ever written here (or nothing that was reached the
            // disk): preallocated space, not a torn tail.
            scan.end = ScanEnd::Unused {
                offset: offset as u64,
            };
            break;
        }
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

/// Checks that a frame carries a trailer exactly when its segment is
/// tamper-evident (version 4).
pub(crate) fn trailer_matches(frame: &Frame<'_>, keyed: bool) -> std::result::Result<(), String> {
    match (keyed, frame.trailer_bytes.is_empty()) {
        (true, true) => {
            Err("frame carries no trailer in a tamper-evident (version 4) segment".to_string())
        }
        (false, false) => Err("frame carries a trailer in a version 2 segment".to_string()),
        _ => Ok(()),
    }
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
        if durable_lsn == 0 {
            // No frame starts here (its watermark would be above
            // `damaged_lsn`). Skip a run of zeros, such as preallocated
            // space, at once: the next candidate is the first position whose
            // watermark bytes hold the next non-zero byte.
            match window[16..].iter().position(|&byte| byte != 0) {
                Some(zeros) => position += zeros.saturating_sub(7).max(1),
                None => return false,
            }
            continue;
        }
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
    /// The store's identity (from its segment headers; chosen at random
    /// when this open created the store).
    pub store_id: StoreId,
    /// The chain value of the log just before `full_check_from_lsn`, when
    /// recovery saw a batch boundary there (a snapshot at that LSN must
    /// carry it).
    pub chain_before_full_check: Option<u32>,
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
    /// Whether the store's last segment is tamper-evident (version 4).
    pub keyed: bool,
    /// The trailer of the log's last frame when it is in the segment new
    /// frames go to (a tamper-evident log whose active segment holds no
    /// frame yet finds it in an earlier segment).
    pub last_trailer: Option<format::FrameTrailer>,
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
    /// Create a new store's first segment tamper-evident (version 4).
    pub keyed: bool,
}

/// A directory with no segment but a `LOCK` file once held a log: `LOCK` is
/// written only after the first segment is durable, so its segments were
/// deleted. Opening it as a new, empty store would serve nothing where
/// events were acknowledged; `open` and `verify` both refuse it.
fn check_log_not_lost(storage: &dyn Storage, dir: &Path) -> Result<()> {
    if storage.exists(&dir.join(crate::log::LOCK_FILE_NAME)) {
        return Err(Error::LogMissing {
            path: dir.to_path_buf(),
        });
    }
    Ok(())
}

/// Opens the segments of the store at `dir` for writing, repairing a torn
/// tail. Creates the first segment of an empty store.
///
/// The steps: remove leftover temporary files; check every sealed segment
/// (salvaging the first damage when asked); scan the last segment, cutting
/// a torn tail; choose the segment new frames go to (a fresh one after a
/// cut or a poisoned writer); make what was found durable.
pub fn recover(storage: &dyn Storage, dir: &Path, options: RecoveryOptions) -> Result<Recovered> {
    let listing = segment::list(storage, dir)?;
    let mut report = RecoveryReport::default();
    remove_temporary_files(storage, &listing.temporary, &mut report)?;
    if listing.segments.is_empty() {
        return create_first_segment(storage, dir, options, report);
    }
    let mut recovery = Recovery {
        storage,
        dir,
        options,
        originally_last: listing.segments.last().map(|segment| segment.first_lsn),
        poisoned_cut: poisoned_cut(storage, dir),
        segments: listing.segments,
        store_id: None,
        report,
    };
    recovery.check_sealed_segments()?;
    let last = recovery.recover_last_segment()?;
    let store_id = recovery
        .store_id
        .expect("the last segment's header was read");
    if recovery.report.salvaged.is_some() {
        // The probe may have come from bytes salvage moved aside.
        recovery.report.chain_before_full_check = None;
    }
    let active = recovery.open_active(store_id, &last)?;
    // The previous writer may have died before fsyncing what it wrote (under
    // None or Periodic) or before fsyncing the directory entry of its newest
    // segment. Make both durable now: the writer starts by counting every
    // recovered record as durable, and new frames carry that watermark.
    active
        .handle
        .sync_all()
        .map_err(Error::io("fsync recovered segment", &active.file.path))?;
    storage
        .sync_dir(dir)
        .map_err(Error::io("fsync store directory", dir))?;
    let Recovery {
        segments,
        mut report,
        ..
    } = recovery;
    report.segments = segments.len() + 1;
    report.next_lsn = last.next_lsn;
    report.store_id = store_id;
    Ok(Recovered {
        sealed: segments,
        active: active.file,
        active_file: active.handle,
        active_bytes: active.bytes,
        active_chain_crc: active.chain_crc,
        keyed: last.keyed,
        last_trailer: (active.bytes > SEGMENT_HEADER_BYTES as u64)
            .then_some(last.last_trailer)
            .flatten(),
        report,
    })
}

/// Removes the `.seg.tmp` files an interrupted segment creation or salvage
/// left behind.
fn remove_temporary_files(
    storage: &dyn Storage,
    temporary: &[PathBuf],
    report: &mut RecoveryReport,
) -> Result<()> {
    for path in temporary {
        storage
            .remove_file(path)
            .map_err(Error::io("remove leftover temporary file", path))?;
        report.temporary_files_removed += 1;
    }
    Ok(())
}

/// An empty directory (or one that never held a log): the first segment of
/// a new store, with a new identity.
fn create_first_segment(
    storage: &dyn Storage,
    dir: &Path,
    options: RecoveryOptions,
    mut report: RecoveryReport,
) -> Result<Recovered> {
    check_log_not_lost(storage, dir)?;
    let store_id = format::new_store_id();
    let link = SegmentLink {
        store_id,
        prev_chain: format::GENESIS_CHAIN,
        keyed: options.keyed,
    };
    let (file, handle, header_crc) = segment::create(storage, dir, 1, link)?;
    report.segments = 1;
    report.next_lsn = 1;
    report.store_id = store_id;
    report.chain_before_full_check =
        (options.full_check_from_lsn == 1).then_some(format::GENESIS_CHAIN);
    Ok(Recovered {
        sealed: Vec::new(),
        active: file,
        active_file: Arc::from(handle),
        active_bytes: SEGMENT_HEADER_BYTES as u64,
        active_chain_crc: header_crc,
        keyed: options.keyed,
        last_trailer: None,
        report,
    })
}

/// Recovery of a store that has segments, as it goes.
struct Recovery<'a> {
    storage: &'a dyn Storage,
    dir: &'a Path,
    options: RecoveryOptions,
    /// The segments, in LSN order; salvage removes the damaged ones.
    segments: Vec<SegmentFile>,
    /// The first LSN of the last segment as listed, before any salvage.
    originally_last: Option<Lsn>,
    /// The store's identity: every segment must carry the first one's.
    store_id: Option<StoreId>,
    /// Where a poisoned previous writer cut (segment first LSN, length):
    /// what follows was refused, whether or not its truncation survived.
    poisoned_cut: Option<(Lsn, u64)>,
    report: RecoveryReport,
}

/// What the scan of the last segment found: where its valid frames end.
struct LastSegment {
    valid_bytes: u64,
    next_lsn: Lsn,
    /// Chain value the next frame in it links to.
    chain_crc: u32,
    /// The chain value a following segment links to.
    link_out: u32,
    /// Whether the segment is tamper-evident.
    keyed: bool,
    /// Its last valid frame's trailer.
    last_trailer: Option<format::FrameTrailer>,
}

/// The segment new frames go to.
struct Active {
    file: SegmentFile,
    handle: Arc<dyn StorageFile>,
    bytes: u64,
    chain_crc: u32,
}

impl Recovery<'_> {
    /// Sealed segments: header, identity and the link to the next segment
    /// always; frames when not covered by a snapshot. The first damage
    /// fails, or with salvage, moves it and everything after it aside.
    fn check_sealed_segments(&mut self) -> Result<()> {
        let (storage, options) = (self.storage, self.options);
        for index in 0..self.segments.len() - 1 {
            let next = read_header(storage, &self.segments[index + 1])?;
            let checked = check_sealed(
                storage,
                &self.segments[index],
                &self.segments[index + 1],
                next.as_ref().ok(),
                &mut self.store_id,
                options,
                &mut self.report.chain_before_full_check,
            )?;
            if let Err((offset, reason)) = checked {
                if !options.salvage {
                    return Err(Error::Corrupted {
                        segment: self.segments[index].path.clone(),
                        offset,
                        reason,
                    });
                }
                let link =
                    salvage_link(storage, &self.segments[index], self.store_id, options.keyed)?;
                let salvage = salvage_from(
                    storage,
                    self.dir,
                    &mut self.segments,
                    index,
                    offset,
                    reason,
                    link,
                )?;
                self.report.salvaged = Some(salvage);
                break;
            }
        }
        Ok(())
    }

    /// The last segment: cut a torn tail, or fail on (or salvage) damage.
    /// A segment that salvage exposed as the last one was sealed before:
    /// readers may map it, so it is never truncated in place, and any bad
    /// byte in it is damage, not a torn tail.
    fn recover_last_segment(&mut self) -> Result<LastSegment> {
        loop {
            let last = self
                .segments
                .last()
                .cloned()
                .expect("segments is not empty");
            let (offset, reason) = match self.scan_last(&last)? {
                Ok(found) => return Ok(found),
                Err(damage) => damage,
            };
            if !self.options.salvage || self.report.salvaged.is_some() {
                return Err(Error::Corrupted {
                    segment: last.path.clone(),
                    offset,
                    reason,
                });
            }
            let index = self.segments.len() - 1;
            let link = salvage_link(self.storage, &last, self.store_id, self.options.keyed)?;
            self.report.salvaged = Some(salvage_from(
                self.storage,
                self.dir,
                &mut self.segments,
                index,
                offset,
                reason,
                link,
            )?);
            if self.store_id.is_none() {
                self.store_id = Some(link.store_id);
            }
        }
    }

    /// Scans segment `last` as the last one: where its frames end (after
    /// cutting a torn tail), or the damage in it (offset, reason).
    fn scan_last(
        &mut self,
        last: &SegmentFile,
    ) -> Result<std::result::Result<LastSegment, (u64, String)>> {
        let mut bytes = read_whole(self.storage, &last.path)?;
        check_version(&last.path, &bytes)?;
        if let Some((first_lsn, cut)) = self.poisoned_cut {
            if first_lsn == last.first_lsn
                && cut >= SEGMENT_HEADER_BYTES as u64
                && cut < bytes.len() as u64
            {
                // The previous writer refused everything past `cut` (and
                // may have died before its truncation was durable): serve
                // none of it, as every other open of this disk would not.
                // Sealing the segment (`open_active`) cuts the file there.
                bytes.truncate(cut as usize);
            }
        }
        let was_sealed =
            self.report.salvaged.is_some() && self.originally_last != Some(last.first_lsn);
        let scan = match scan_segment_probe(&bytes, !was_sealed, self.options.full_check_from_lsn) {
            Ok(scan) if scan.first_lsn != last.first_lsn => {
                return Ok(Err((
                    0,
                    format!(
                        "header names first LSN {} but the file name says {}",
                        scan.first_lsn, last.first_lsn
                    ),
                )))
            }
            Ok(scan) if self.store_id.is_some_and(|known| known != scan.store_id) => {
                return Ok(Err((
                    0,
                    foreign_identity(&scan.store_id, &self.store_id.unwrap_or_default()),
                )))
            }
            Ok(scan) => scan,
            Err(damage) => return Ok(Err(damage)),
        };
        self.store_id.get_or_insert(scan.store_id);
        if scan.probe_chain.is_some() {
            self.report.chain_before_full_check = scan.probe_chain;
        }
        let found = LastSegment {
            valid_bytes: scan.valid_bytes,
            next_lsn: scan.next_lsn,
            chain_crc: scan.chain_crc,
            link_out: scan.link_out,
            keyed: scan.keyed,
            last_trailer: scan.last_trailer,
        };
        match scan.end {
            // Preallocated space after the frames stays: the writer goes on
            // writing into it.
            ScanEnd::Clean | ScanEnd::Unused { .. } => Ok(Ok(found)),
            ScanEnd::Torn { offset, reason } => {
                cut_torn_tail(
                    self.storage,
                    &last.path,
                    &bytes,
                    offset,
                    reason,
                    &mut self.report,
                )?;
                Ok(Ok(found))
            }
            ScanEnd::Damaged { offset, reason } => Ok(Err((offset, reason))),
        }
    }

    /// The segment new frames go to: the last one, or a fresh one after a
    /// torn tail was cut or the previous writer was poisoned. Takes it off
    /// `segments`, which keeps the sealed ones.
    fn open_active(&mut self, store_id: StoreId, last: &LastSegment) -> Result<Active> {
        let (storage, dir) = (self.storage, self.dir);
        let poisoned_marker = dir.join(POISONED_MARKER);
        let previous_writer_poisoned = storage.exists(&poisoned_marker);
        if self.report.torn_tail.is_none() && !previous_writer_poisoned {
            let active = self.segments.pop().expect("segments is not empty");
            let handle = storage
                .open_write(&active.path)
                .map_err(Error::io("open segment for writing", &active.path))?;
            return Ok(Active {
                file: active,
                handle: Arc::from(handle),
                bytes: last.valid_bytes,
                chain_crc: last.chain_crc,
            });
        }
        // New frames never go where cut or refused bytes were: a file system that
        // exposes freed or unwritten blocks after a crash could otherwise
        // show the cut frames again, chained and numbered as if new. Start
        // a fresh segment (new salt) at the next LSN; when the cut left the
        // segment empty, this replaces it under the same name.
        let old = self.segments.pop().expect("segments is not empty");
        // What the previous writer left unsynced (it may have died before
        // truncating) is served from now on: make it durable before it
        // is sealed behind the fresh segment, and cut the space it had
        // allocated past its frames: a sealed segment ends at its data.
        let old_file = storage
            .open_write(&old.path)
            .map_err(Error::io("open segment before sealing it", &old.path))?;
        segment::trim_to_data(old_file.as_ref(), last.valid_bytes)
            .and_then(|()| old_file.sync_all())
            .map_err(Error::io("fsync segment before sealing it", &old.path))?;
        drop(old_file);
        let link = SegmentLink {
            store_id,
            prev_chain: last.link_out,
            keyed: last.keyed,
        };
        let (created, handle, header_crc) = segment::create(storage, dir, last.next_lsn, link)?;
        if created.first_lsn != old.first_lsn {
            self.segments.push(old);
        }
        if previous_writer_poisoned {
            storage
                .remove_file(&poisoned_marker)
                .map_err(Error::io("remove poisoned marker", &poisoned_marker))?;
        }
        Ok(Active {
            file: created,
            handle: Arc::from(handle),
            bytes: SEGMENT_HEADER_BYTES as u64,
            chain_crc: header_crc,
        })
    }
}

/// The identity and link a segment salvage may have to create in place of
/// `damaged`: the store's known identity (a new one if no header could be
/// read), and the damaged segment's own link when its header is readable.
fn salvage_link(
    storage: &dyn Storage,
    damaged: &SegmentFile,
    store_id: Option<StoreId>,
    keyed: bool,
) -> Result<SegmentLink> {
    let header = read_header(storage, damaged)?.ok();
    Ok(SegmentLink {
        store_id: store_id
            .or(header.map(|header| header.store_id))
            .unwrap_or_else(format::new_store_id),
        prev_chain: header.map_or(format::GENESIS_CHAIN, |header| header.prev_chain),
        keyed: header.map_or(keyed, |header| header.keyed),
    })
}

/// The reason given for a segment of another store.
fn foreign_identity(found: &StoreId, expected: &StoreId) -> String {
    format!(
        "segment belongs to another store: its header carries store identity {}, the store's earlier segments {}",
        format::store_id_hex(found),
        format::store_id_hex(expected)
    )
}

/// Reads and decodes a segment's header only; `Ok(Err(..))` is damage.
fn read_header(
    storage: &dyn Storage,
    segment: &SegmentFile,
) -> Result<Result<SegmentHeader, (u64, String)>> {
    let file = storage
        .open_read(&segment.path)
        .map_err(Error::io("open segment", &segment.path))?;
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    let read = file
        .read_at(&mut header, 0)
        .map_err(Error::io("read segment header", &segment.path))?;
    check_version(&segment.path, &header[..read])?;
    Ok(match format::decode_segment_header(&header[..read]) {
        Ok(decoded) if decoded.first_lsn != segment.first_lsn => Err((
            0,
            format!(
                "header names first LSN {} but the file name says {}",
                decoded.first_lsn, segment.first_lsn
            ),
        )),
        Ok(decoded) => Ok(decoded),
        Err(reason) => Err((0, reason)),
    })
}

/// The identity of the store at `dir`, from its first segment's header.
pub fn store_identity(storage: &dyn Storage, dir: &Path) -> Result<StoreId> {
    let segments = segment::list(storage, dir)?.segments;
    let first = segments.first().ok_or_else(|| Error::NotAStore {
        path: dir.to_path_buf(),
    })?;
    read_header(storage, first)?
        .map(|header| header.store_id)
        .map_err(|(offset, reason)| Error::Corrupted {
            segment: first.path.clone(),
            offset,
            reason,
        })
}

/// Checks that a sealed segment whose valid frames end before `end_lsn`
/// with chain value `link_out` is followed by `next` (`next_header`, when
/// it decodes): the next segment starts at that LSN and links to that
/// chain value. `Err` is the damage, located at the end of the segment.
fn check_link(
    end_offset: u64,
    end_lsn: Lsn,
    link_out: u32,
    next: &SegmentFile,
    next_header: Option<&SegmentHeader>,
    store_id: Option<StoreId>,
) -> Result<(), (u64, String)> {
    let next_name = next
        .path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    if end_lsn < next.first_lsn {
        return Err((
            end_offset,
            format!(
                "segment ends before LSN {end_lsn} but the next segment starts at LSN {} ({next_name}): the events {end_lsn}..{} are missing (a segment file between them was removed or lost)",
                next.first_lsn,
                next.first_lsn - 1
            ),
        ));
    }
    if end_lsn > next.first_lsn {
        return Err((
            end_offset,
            format!(
                "segment ends before LSN {end_lsn} but the next segment starts at LSN {} ({next_name}): the segments overlap",
                next.first_lsn
            ),
        ));
    }
    // A next segment of another store is reported as such when it is
    // checked itself.
    if let Some(header) = next_header.filter(|header| Some(header.store_id) == store_id) {
        if header.prev_chain != link_out {
            return Err((
                end_offset,
                format!(
                    "the next segment ({next_name}) links to chain value {:#010x} but this segment ends with {link_out:#010x}: one of them is from another copy or version of the log",
                    header.prev_chain
                ),
            ));
        }
    }
    Ok(())
}

/// Whether the sealed segment `bytes` ends in a frame that ends exactly at
/// LSN `end_lsn` (exclusive) and has checksum `link_out`, found from the
/// end of the file without reading the segment's other frames.
fn ends_with_link(bytes: &[u8], header: &SegmentHeader, end_lsn: Lsn, link_out: u32) -> bool {
    if bytes.len() == SEGMENT_HEADER_BYTES {
        return header.first_lsn == end_lsn && header.prev_chain == link_out;
    }
    let wanted = link_out.to_le_bytes();
    let lowest = bytes
        .len()
        .saturating_sub(FRAME_HEADER_BYTES + BATCH_BYTES_MAX)
        .max(SEGMENT_HEADER_BYTES);
    let Some(highest) = bytes.len().checked_sub(FRAME_HEADER_BYTES) else {
        return false;
    };
    (lowest..=highest).rev().any(|start| {
        bytes[start..start + 4] == wanted
            && matches!(
                format::decode_frame(&bytes[start..]),
                FrameDecode::Complete(frame)
                    if start + frame.size_bytes() == bytes.len()
                        && frame.end_lsn() == end_lsn
                        && frame.first_lsn >= header.first_lsn
            )
    })
}

/// Checks one sealed segment and its link to the next; `Ok(Err(..))` is
/// damage at an offset.
fn check_sealed(
    storage: &dyn Storage,
    segment: &SegmentFile,
    next: &SegmentFile,
    next_header: Option<&SegmentHeader>,
    store_id: &mut Option<StoreId>,
    options: RecoveryOptions,
    probe_chain: &mut Option<u32>,
) -> Result<Result<(), (u64, String)>> {
    let bytes = storage
        .read_immutable(&segment.path, SealedFile::assert_sealed())
        .map_err(Error::io("read segment", &segment.path))?;
    let bytes: &[u8] = (*bytes).as_ref();
    check_version(&segment.path, bytes)?;
    let header = match format::decode_segment_header(bytes) {
        Ok(header) => header,
        Err(reason) => return Ok(Err((0, reason))),
    };
    if header.first_lsn != segment.first_lsn {
        return Ok(Err((
            0,
            format!(
                "header names first LSN {} but the file name says {}",
                header.first_lsn, segment.first_lsn
            ),
        )));
    }
    match store_id {
        Some(known) if *known != header.store_id => {
            return Ok(Err((0, foreign_identity(&header.store_id, known))))
        }
        Some(_) => {}
        None => *store_id = Some(header.store_id),
    }
    if header.first_lsn == options.full_check_from_lsn {
        *probe_chain = Some(header.prev_chain);
    }
    if next.first_lsn <= options.full_check_from_lsn {
        // Covered by a snapshot: the frames are not read, but the segment
        // must still end where the next one starts, in the frame the next
        // header links to. Found from the end of the file.
        if let Some(next_header) = next_header.filter(|next| next.store_id == header.store_id) {
            if ends_with_link(bytes, &header, next.first_lsn, next_header.prev_chain) {
                return Ok(Ok(()));
            }
        } else {
            // The next header is damaged: reported when it is checked.
            return Ok(Ok(()));
        }
        // Something is wrong: a full scan says exactly what.
    }
    let scan = match scan_segment_probe(bytes, false, options.full_check_from_lsn) {
        Ok(scan) => scan,
        Err(damage) => return Ok(Err(damage)),
    };
    if let ScanEnd::Damaged { offset, reason } | ScanEnd::Torn { offset, reason } = scan.end {
        return Ok(Err((offset, reason)));
    }
    if scan.probe_chain.is_some() {
        *probe_chain = scan.probe_chain;
    }
    Ok(check_link(
        scan.valid_bytes,
        scan.next_lsn,
        scan.link_out,
        next,
        next_header,
        *store_id,
    ))
}

/// Fails with `Error::UnsupportedVersion` for a segment of another format
/// version: that is not damage, and salvage must never move it away.
fn check_version(path: &Path, bytes: &[u8]) -> Result<()> {
    match format::foreign_segment_version(bytes) {
        Some(version) => Err(Error::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            // The nearest version this build reads: an older store is told
            // about version 2 (its migration target), a newer one about 3.
            supported: if version < format::FORMAT_VERSION_PLAIN {
                format::FORMAT_VERSION_PLAIN
            } else {
                format::FORMAT_VERSION
            },
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
    link: SegmentLink,
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
        let (file, _, _) = segment::create(storage, dir, damaged.first_lsn, link)?;
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
    /// Of [`VerifyReport::bytes`], the space allocated ahead of the frames
    /// at the end of the last segment and not written yet: zeros a writer
    /// that is still open (or was killed) holds for its next appends; a
    /// clean close gives them back. The log's frames take
    /// `bytes - unused_bytes`.
    pub unused_bytes: u64,
    /// LSN of the first event (the first segment's first LSN).
    pub first_lsn: Lsn,
    /// One past the LSN of the last valid event.
    pub next_lsn: Lsn,
    /// A torn tail at the end of the last segment (what a crash leaves; an
    /// open by the writer cuts it).
    pub torn_tail: Option<(PathBuf, u64)>,
    /// The store's identity, carried by every segment header.
    pub store_id: StoreId,
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
        check_log_not_lost(storage, dir)?;
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
    // The previous segment: its path and where its valid frames end.
    let mut previous: Option<(PathBuf, SegmentScan)> = None;
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
        if scan.first_lsn != segment.first_lsn {
            return Err(corrupted(
                0,
                format!(
                    "header names first LSN {} but the file name says {}",
                    scan.first_lsn, segment.first_lsn
                ),
            ));
        }
        match &previous {
            None => report.store_id = scan.store_id,
            Some((previous_path, previous_scan)) => {
                if scan.store_id != report.store_id {
                    return Err(corrupted(
                        0,
                        foreign_identity(&scan.store_id, &report.store_id),
                    ));
                }
                let header = format::decode_segment_header(bytes).ok();
                check_link(
                    previous_scan.valid_bytes,
                    previous_scan.next_lsn,
                    previous_scan.link_out,
                    segment,
                    header.as_ref(),
                    Some(report.store_id),
                )
                .map_err(|(offset, reason)| Error::Corrupted {
                    segment: previous_path.clone(),
                    offset,
                    reason,
                })?;
            }
        }
        match &scan.end {
            ScanEnd::Clean => {}
            ScanEnd::Unused { offset } => {
                report.unused_bytes = (bytes.len() as u64).saturating_sub(*offset)
            }
            ScanEnd::Torn { offset, .. } => {
                report.torn_tail = Some((segment.path.clone(), *offset))
            }
            ScanEnd::Damaged { offset, reason } => return Err(corrupted(*offset, reason.clone())),
        }
        report.frames += scan.frames;
        report.events += scan.next_lsn - scan.first_lsn;
        report.bytes += bytes.len() as u64;
        report.next_lsn = scan.next_lsn;
        progress(report.bytes);
        previous = Some((segment.path.clone(), scan));
    }
    Ok(report)
}

/// What the log holds just before an LSN: what a snapshot at that LSN must
/// carry to belong to this log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainAt {
    /// The chain value of the log just before the LSN: the checksum of the
    /// frame that ends there, or the `prev_chain` of the segment that
    /// starts there.
    Found(u32),
    /// The log starts after the LSN: the frame before it is gone.
    BeforeStart {
        /// The log's first LSN.
        first_lsn: Lsn,
    },
    /// The log ends before the LSN.
    PastEnd {
        /// One past the log's last valid event.
        next_lsn: Lsn,
    },
    /// The LSN falls inside a batch: no frame ends just before it.
    InsideBatch {
        /// The first LSN of the frame holding it.
        frame_first_lsn: Lsn,
        /// One past the frame's last LSN.
        frame_end_lsn: Lsn,
    },
}

/// The chain value of the log at `dir` just before LSN `lsn`: the checksum
/// of the frame ending at `lsn - 1`. Reads one segment header when a
/// segment starts at `lsn`, otherwise the frames of the segment holding
/// `lsn - 1` up to it (checking each). Safe beside a writer: only complete
/// frames below `lsn` are needed. Damage on the way is `Error::Corrupted`.
pub fn chain_before(storage: &dyn Storage, dir: &Path, lsn: Lsn) -> Result<ChainAt> {
    let segments = segment::list(storage, dir)?.segments;
    let Some(first) = segments.first() else {
        return Err(Error::NotAStore {
            path: dir.to_path_buf(),
        });
    };
    if lsn < first.first_lsn {
        return Ok(ChainAt::BeforeStart {
            first_lsn: first.first_lsn,
        });
    }
    let index = segments
        .iter()
        .rposition(|segment| segment.first_lsn <= lsn)
        .expect("the first segment starts at or before lsn");
    let holder = &segments[index];
    let corrupted = |(offset, reason): (u64, String)| Error::Corrupted {
        segment: holder.path.clone(),
        offset,
        reason,
    };
    if holder.first_lsn == lsn {
        let header = read_header(storage, holder)?.map_err(corrupted)?;
        return Ok(ChainAt::Found(header.prev_chain));
    }
    let last = index + 1 == segments.len();
    let bytes = read_whole(storage, &holder.path)?;
    check_version(&holder.path, &bytes)?;
    let header = format::decode_segment_header(&bytes).map_err(|reason| corrupted((0, reason)))?;
    if header.first_lsn != holder.first_lsn {
        return Err(corrupted((
            0,
            format!(
                "header names first LSN {} but the file name says {}",
                header.first_lsn, holder.first_lsn
            ),
        )));
    }
    let mut offset = SEGMENT_HEADER_BYTES;
    let mut next_lsn = header.first_lsn;
    let mut chain = header.crc;
    loop {
        let problem = match format::decode_frame(&bytes[offset..]) {
            FrameDecode::Complete(frame) => match frame_follows(&frame, next_lsn, chain) {
                Ok(()) => {
                    if frame.end_lsn() == lsn {
                        return Ok(ChainAt::Found(frame.crc));
                    }
                    if frame.end_lsn() > lsn {
                        return Ok(ChainAt::InsideBatch {
                            frame_first_lsn: frame.first_lsn,
                            frame_end_lsn: frame.end_lsn(),
                        });
                    }
                    offset += frame.size_bytes();
                    next_lsn = frame.end_lsn();
                    chain = frame.crc;
                    continue;
                }
                Err(reason) => reason,
            },
            FrameDecode::Incomplete { .. } if offset == bytes.len() => {
                "the segment ends here".to_string()
            }
            FrameDecode::Incomplete { .. } => "frame cut short".to_string(),
            FrameDecode::Invalid(reason) => reason.to_string(),
        };
        // The end of the last segment (or of what is written so far) ends
        // the log; anywhere else the frames had to reach `lsn`.
        if last {
            return Ok(ChainAt::PastEnd { next_lsn });
        }
        return Err(corrupted((
            offset as u64,
            format!(
                "{problem}, before LSN {lsn} that the next segment's name promises this segment holds"
            ),
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A poisoned marker's record reads back; an empty, torn or altered one
    /// reads as no record (recovery then keeps every valid frame).
    #[test]
    fn a_poisoned_marker_record_reads_back_and_a_damaged_one_is_ignored() {
        let record = poisoned_marker_record(35, 3910);
        assert_eq!(parse_poisoned_marker(&record), Some((35, 3910)));
        assert_eq!(parse_poisoned_marker(b""), None);
        for length in 0..record.len() {
            assert_eq!(parse_poisoned_marker(&record[..length]), None, "{length}");
        }
        let altered = String::from_utf8(record.clone())
            .unwrap()
            .replace("3910", "3911");
        assert_eq!(parse_poisoned_marker(altered.as_bytes()), None);
    }

    /// The skip over zero runs finds a proving frame wherever it starts
    /// after them, and none where there is none.
    #[test]
    fn a_proving_frame_after_a_run_of_zeros_is_found_at_any_offset() {
        let mut frame = Vec::new();
        format::encode_frame(&mut frame, 10, 9, 0x1234_5678, &[b"payload".as_slice()]);
        for zeros in 0..80 {
            let mut bytes = vec![0u8; zeros];
            bytes.extend_from_slice(&frame);
            bytes.extend_from_slice(&[0u8; 100]);
            assert!(later_frame_proves_durable(&bytes, 0, 3), "{zeros} zeros");
            assert!(!later_frame_proves_durable(&bytes, 0, 9), "{zeros} zeros");
            assert!(
                !later_frame_proves_durable(&bytes, zeros + 1, 3),
                "{zeros} zeros"
            );
        }
        assert!(!later_frame_proves_durable(&[0u8; 4096], 0, 1));
    }
}
