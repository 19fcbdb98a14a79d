//! Checking a tamper-evident store: the frames against the key (or the
//! digest chain alone against the public key) and the log against the
//! newest checkpoint given.

use std::path::{Path, PathBuf};

use super::{
    body_digest, chain_digest, tag_with, Checkpoint, Digest, PublicKey, TamperKey, TamperKind,
    GENESIS_DIGEST,
};
use crate::error::{Error, Result};
use crate::log::format::{self, FrameDecode, FrameTrailer, StoreId, SEGMENT_HEADER_BYTES};
use crate::log::recovery::{self, read_whole};
use crate::log::{segment, Lsn};
use crate::storage::FileSystem;

/// What [`verify`] established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TamperReport {
    /// The log's structural report (checksums, links, identity).
    pub log: crate::log::VerifyReport,
    /// Frames whose tag the key authenticated (0 without the secret key).
    pub frames_authenticated: u64,
    /// Snapshot files whose keyed tag the key authenticated (0 without the
    /// secret key: a public key cannot check them).
    pub snapshots_authenticated: usize,
    /// The key epochs the log's frames use, each with the first LSN it
    /// tagged, in log order (a rotation is an epoch change).
    pub epochs: Vec<(u32, Lsn)>,
    /// The checkpoint the log was checked against: its LSN.
    pub checkpoint_lsn: Option<Lsn>,
    /// Whether the frames were checked with the secret key (every frame
    /// authenticated) or only with public keys (the digest chain up to the
    /// checkpoint).
    pub keyed: bool,
}

/// One frame of the log, as found.
struct Entry {
    segment: PathBuf,
    offset: u64,
    size: u64,
    store_id: StoreId,
    first_lsn: Lsn,
    event_count: u32,
    events: Digest,
    trailer: Option<FrameTrailer>,
}

/// Checks the store at `dir`: first every checksum and link (accidental
/// damage fails with `Error::Corrupted`, as `convlog verify` does), then,
/// with `key`, every frame's tag, LSN and chain digest, and against
/// `checkpoint` (signature checked with `public`, or the key's public
/// half), that the log reaches the checkpoint's LSN with the signed digest
/// there. Evidence of tampering fails with `Error::Tampered`, naming the
/// kind and where.
///
/// With `public` alone (no secret key), the frames' tags cannot be checked:
/// what is proven is that the log up to the checkpoint's LSN is exactly the
/// one the writer signed (anyone can recompute the digest chain, so an edit
/// with the digests recomputed passes the per-frame checks but not the
/// checkpoint). Events after the checkpoint are not authenticated.
pub fn verify(
    dir: impl AsRef<Path>,
    key: Option<&TamperKey>,
    public: Option<&PublicKey>,
    checkpoint: Option<&Checkpoint>,
) -> Result<TamperReport> {
    let dir = dir.as_ref();
    let storage = FileSystem;
    let log = recovery::verify(&storage, dir)?;
    let public = match (public, key) {
        (Some(public), _) => public.clone(),
        (None, Some(key)) => key.public(),
        (None, None) => {
            return Err(Error::InvalidOption {
                option: "tamper verify",
                reason: "give the secret key file, or a public key file with a checkpoint"
                    .to_string(),
            })
        }
    };
    let entries = read_entries(dir, log.next_lsn)?;
    let last_segment = segment::list(&storage, dir)?
        .segments
        .last()
        .map(|segment| segment.path.clone())
        .unwrap_or_else(|| dir.to_path_buf());
    let end_offset = entries.last().map_or(SEGMENT_HEADER_BYTES as u64, |entry| {
        entry.offset + entry.size
    });
    let place = Place {
        dir,
        last_segment: &last_segment,
        end_offset,
    };
    if let Some(checkpoint) = checkpoint {
        check_checkpoint(&place, &log, &public, checkpoint)?;
    }
    let walked = check_frames(&place, &entries, key, checkpoint)?;
    if let Some(checkpoint) = checkpoint {
        check_reaches(&place, &log, &entries, checkpoint, walked.checkpoint_digest)?;
    }
    let snapshots_authenticated = match key {
        Some(key) => check_snapshots(&place, key)?,
        None => 0,
    };
    Ok(TamperReport {
        log,
        snapshots_authenticated,
        frames_authenticated: walked.authenticated,
        epochs: walked.epochs,
        checkpoint_lsn: checkpoint.map(|checkpoint| checkpoint.lsn),
        keyed: key.is_some(),
    })
}

/// The store being checked, and where its log ends.
struct Place<'a> {
    dir: &'a Path,
    last_segment: &'a Path,
    end_offset: u64,
}

impl Place<'_> {
    fn tampered(
        &self,
        kind: TamperKind,
        lsn: Lsn,
        segment: &Path,
        offset: u64,
        detail: String,
    ) -> Error {
        Error::Tampered {
            store: self.dir.to_path_buf(),
            kind,
            lsn,
            segment: segment.to_path_buf(),
            offset,
            detail,
        }
    }
}

/// Every snapshot file's keyed tag (`crate::store::snapshot::check_tag`):
/// a snapshot edited, even with its checksums recomputed, or one without a
/// tag, is `SnapshotChanged`. Returns how many were checked.
fn check_snapshots(place: &Place<'_>, key: &TamperKey) -> Result<usize> {
    let storage = FileSystem;
    let listed = crate::store::snapshot::list(&storage, place.dir)?;
    for (lsn, path) in &listed {
        if let Err((offset, reason)) = crate::store::snapshot::check_tag(&storage, path, key) {
            return Err(place.tampered(
                TamperKind::SnapshotChanged,
                *lsn,
                path,
                offset,
                format!(
                    "the snapshot covering the events before LSN {lsn} is not the one the writer wrote: {reason}"
                ),
            ));
        }
    }
    Ok(listed.len())
}

/// A checkpoint's signature and identity: they say which store this is
/// meant to be.
fn check_checkpoint(
    place: &Place<'_>,
    log: &crate::log::VerifyReport,
    public: &PublicKey,
    checkpoint: &Checkpoint,
) -> Result<()> {
    if let Err(reason) = public.check(checkpoint) {
        return Err(place.tampered(
            TamperKind::ForgedCheckpoint,
            checkpoint.lsn,
            place.last_segment,
            place.end_offset,
            format!(
                "the checkpoint covering LSN {} is not genuine: {reason}",
                checkpoint.lsn
            ),
        ));
    }
    if checkpoint.store_id != log.store_id {
        return Err(place.tampered(
            TamperKind::IdentityChanged,
            log.first_lsn,
            place.last_segment,
            0,
            format!(
                "the segments carry store identity {}, the checkpoint was signed for {}: this is another store, or its identity was rewritten",
                format::store_id_hex(&log.store_id),
                format::store_id_hex(&checkpoint.store_id)
            ),
        ));
    }
    if log.first_lsn > 1 && checkpoint.lsn < log.first_lsn {
        return Err(Error::InvalidOption {
            option: "tamper checkpoint",
            reason: format!(
                "the checkpoint covers up to LSN {}, and compaction removed the log's frames up to LSN {}: give a newer checkpoint",
                checkpoint.lsn,
                log.first_lsn - 1
            ),
        });
    }
    Ok(())
}

/// What walking the frames established.
struct Walked {
    authenticated: u64,
    epochs: Vec<(u32, Lsn)>,
    /// The chain digest at the checkpoint's LSN, if a frame ends there.
    checkpoint_digest: Option<Digest>,
}

/// Every frame: its trailer is there, its tag authentic (with the key),
/// written for this LSN, and the digest chain reproduces its digest.
fn check_frames(
    place: &Place<'_>,
    entries: &[Entry],
    key: Option<&TamperKey>,
    checkpoint: Option<&Checkpoint>,
) -> Result<Walked> {
    let mut digest = GENESIS_DIGEST;
    let mut previous_epoch: Option<u32> = None;
    let mut walked = Walked {
        authenticated: 0,
        epochs: Vec::new(),
        checkpoint_digest: checkpoint.filter(|c| c.lsn == 0).map(|_| GENESIS_DIGEST),
    };
    for (index, entry) in entries.iter().enumerate() {
        let lsn = entry.first_lsn;
        let at =
            |kind, detail: String| place.tampered(kind, lsn, &entry.segment, entry.offset, detail);
        let Some(trailer) = entry.trailer else {
            return Err(at(
                TamperKind::Stripped,
                format!(
                    "the frame carries no tamper trailer (its segment is format version {}): tamper evidence was removed, or the store was never tamper-evident",
                    format::FORMAT_VERSION_PLAIN
                ),
            ));
        };
        let recomputed = if index == 0 && lsn > 1 {
            // The frames before were compacted away: the chain resumes from
            // the frame's own digest, which only its tag vouches for.
            trailer.digest
        } else {
            chain_digest(
                &digest,
                &entry.store_id,
                lsn,
                entry.event_count,
                &entry.events,
            )
        };
        let genuine = match key {
            Some(key) => authentic(key, &trailer, previous_epoch, lsn)?,
            None => true,
        };
        let fits = trailer.auth_lsn == lsn && trailer.digest == recomputed;
        if !genuine || !fits {
            return Err(classify(
                entries,
                index,
                &trailer,
                genuine,
                key.is_some(),
                at,
            ));
        }
        if let Some(previous) = previous_epoch.filter(|&previous| trailer.key_epoch < previous) {
            return Err(at(
                TamperKind::RetiredKey,
                format!(
                    "the frame is tagged with the key of epoch {}, but the log had rotated to epoch {previous} before it",
                    trailer.key_epoch
                ),
            ));
        }
        if previous_epoch != Some(trailer.key_epoch) {
            walked.epochs.push((trailer.key_epoch, lsn));
        }
        previous_epoch = Some(trailer.key_epoch);
        walked.authenticated += u64::from(key.is_some());
        digest = recomputed;
        let end = lsn + u64::from(entry.event_count);
        if checkpoint.is_some_and(|checkpoint| checkpoint.lsn + 1 == end) {
            walked.checkpoint_digest = Some(digest);
        }
    }
    Ok(walked)
}

/// Whether the key authenticates a frame's trailer (the tag over its
/// epoch, LSN and digest; at a rotation, the previous epoch's key too).
fn authentic(
    key: &TamperKey,
    trailer: &FrameTrailer,
    previous_epoch: Option<u32>,
    lsn: Lsn,
) -> Result<bool> {
    let Some(epoch_key) = key.key(trailer.key_epoch) else {
        return Err(Error::InvalidOption {
            option: "tamper key file",
            reason: format!(
                "the frame at LSN {lsn} is tagged with the key of epoch {}, which the key file does not hold (it holds epochs {:?}); give the newest key file, which keeps every older key",
                trailer.key_epoch,
                key.epochs()
            ),
        });
    };
    let rotated_from = previous_epoch
        .filter(|&epoch| epoch != trailer.key_epoch)
        .and_then(|epoch| key.key(epoch));
    let expected = tag_with(epoch_key, rotated_from, trailer.auth_lsn, &trailer.digest);
    Ok(constant_time_eq(&expected, &trailer.tag) && trailer.reserved == 0)
}

/// The log reaches the checkpoint's LSN, with the signed digest there.
fn check_reaches(
    place: &Place<'_>,
    log: &crate::log::VerifyReport,
    entries: &[Entry],
    checkpoint: &Checkpoint,
    checkpoint_digest: Option<Digest>,
) -> Result<()> {
    let last_lsn = log.next_lsn - 1;
    if checkpoint.lsn > last_lsn {
        return Err(place.tampered(
            TamperKind::Truncated,
            last_lsn + 1,
            place.last_segment,
            place.end_offset,
            format!(
                "the log ends at LSN {last_lsn} but the checkpoint covers up to LSN {}: events {}..={} are missing (the tail was cut, or an older copy of the store was put back)",
                checkpoint.lsn,
                last_lsn + 1,
                checkpoint.lsn
            ),
        ));
    }
    if checkpoint_digest != Some(checkpoint.digest) {
        let (segment, offset) = entries
            .iter()
            .find(|entry| entry.first_lsn + u64::from(entry.event_count) > checkpoint.lsn)
            .map_or(
                (place.last_segment.to_path_buf(), place.end_offset),
                |entry| (entry.segment.clone(), entry.offset),
            );
        return Err(place.tampered(
            TamperKind::RolledBack,
            checkpoint.lsn,
            &segment,
            offset,
            format!(
                "the log's history up to LSN {} is not the one the checkpoint signed: it was rolled back and written again, or rewritten with its digests recomputed",
                checkpoint.lsn
            ),
        ));
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Names what a frame that does not fit its place shows.
fn classify(
    entries: &[Entry],
    index: usize,
    trailer: &FrameTrailer,
    genuine: bool,
    keyed: bool,
    at: impl Fn(TamperKind, String) -> Error,
) -> Error {
    let entry = &entries[index];
    let lsn = entry.first_lsn;
    let next_auth = entries
        .get(index + 1)
        .and_then(|next| next.trailer)
        .map(|next| next.auth_lsn);
    if !genuine {
        if next_auth == Some(lsn) {
            return at(
                TamperKind::Inserted,
                "a frame the key did not tag was inserted here: the frame after it was written as this LSN, and the frames after were renumbered".to_string(),
            );
        }
        return at(
            TamperKind::Forged,
            "the frame's tag does not authenticate it with the key: it was forged or its trailer altered (or it comes from a store with another key)".to_string(),
        );
    }
    if trailer.auth_lsn > lsn {
        let missing = format!("events {lsn}..={}", trailer.auth_lsn - 1);
        if entries[index + 1..]
            .iter()
            .any(|later| later.trailer.is_some_and(|later| later.auth_lsn == lsn))
        {
            return at(
                TamperKind::Reordered,
                format!(
                    "the frame written as LSN {} stands at LSN {lsn}, and the frame written as LSN {lsn} comes later",
                    trailer.auth_lsn
                ),
            );
        }
        return at(
            TamperKind::Deleted,
            format!(
                "the frame written as LSN {} stands at LSN {lsn}: {missing} were removed and the frames after renumbered",
                trailer.auth_lsn
            ),
        );
    }
    if trailer.auth_lsn < lsn {
        let copy_here = entries.iter().any(|other| {
            other.first_lsn == trailer.auth_lsn
                && other
                    .trailer
                    .is_some_and(|other| other.digest == trailer.digest)
        });
        return at(
            TamperKind::Replayed,
            format!(
                "the frame written as LSN {} appears again at LSN {lsn} ({})",
                trailer.auth_lsn,
                if copy_here {
                    "a copy of that frame of this store, perhaps of another conversation"
                } else {
                    "from an older history of this store, or another store with the same key"
                }
            ),
        );
    }
    // Written for this LSN, but the chain does not reproduce its digest.
    if next_auth == Some(lsn) {
        return at(
            TamperKind::Inserted,
            "a frame was inserted here: the frame after it was written as this LSN".to_string(),
        );
    }
    at(
        TamperKind::ContentChanged,
        format!(
            "the frame's events (or the store identity or history before it) are not the ones the writer {}: the digest chain does not reproduce its digest",
            if keyed { "tagged" } else { "chained" }
        ),
    )
}

/// Every valid frame of the log below `next_lsn`, with its events' digest.
fn read_entries(dir: &Path, next_lsn: Lsn) -> Result<Vec<Entry>> {
    let storage = FileSystem;
    let mut entries = Vec::new();
    for file in segment::list(&storage, dir)?.segments {
        let bytes = read_whole(&storage, &file.path)?;
        let header = format::decode_segment_header(&bytes).map_err(|reason| Error::Corrupted {
            segment: file.path.clone(),
            offset: 0,
            reason,
        })?;
        let mut offset = SEGMENT_HEADER_BYTES;
        while offset < bytes.len() {
            let FrameDecode::Complete(frame) = format::decode_frame(&bytes[offset..]) else {
                break;
            };
            if frame.first_lsn >= next_lsn {
                break;
            }
            entries.push(Entry {
                segment: file.path.clone(),
                offset: offset as u64,
                size: frame.size_bytes() as u64,
                store_id: header.store_id,
                first_lsn: frame.first_lsn,
                event_count: frame.event_count,
                events: body_digest(frame.body),
                trailer: frame.trailer(),
            });
            offset += frame.size_bytes();
        }
    }
    Ok(entries)
}
