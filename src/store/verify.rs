//! Checking a whole store without opening it for writing.

use std::path::{Path, PathBuf};

use super::open::{choose_snapshot, damaged_reason, no_usable_snapshot, LogSpan};
use super::snapshot;
use crate::error::{Error, Result};
use crate::log::recovery;
use crate::log::{Binding, LogReader, Lsn};

/// A checked snapshot's LSN and conversation count, or what is wrong with
/// it (damaged, another store's, or stale: not matching the log). A
/// snapshot merely superseded (it ends before the log's first LSN) whose
/// bytes check out is `Ok`.
pub type SnapshotCheck = std::result::Result<(Lsn, usize), String>;

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreVerifyReport {
    /// The log's report.
    pub log: crate::log::VerifyReport,
    /// Distinct conversations in the log.
    pub conversations: usize,
    /// Every snapshot, newest first: its file and LSN and conversation
    /// count, or what is wrong.
    pub snapshots: Vec<(PathBuf, SnapshotCheck)>,
    /// The snapshot opening the store starts from (the newest one that
    /// belongs to the log), and its LSN.
    pub chosen_snapshot: Option<(PathBuf, Lsn)>,
}

/// Checks a whole store without changing it: every record of every segment
/// (checksums, links between segments, the store identity, and that each
/// payload decodes as an event) and every snapshot (its bytes, and that it
/// belongs to this log).
///
/// Reaches the verdict [`Store::open`](super::Store::open) reaches on the same bytes: it fails
/// wherever opening fails (damage in the log, a missing segment, a log that
/// does not start at LSN 1 with no usable snapshot), and also when the
/// snapshot opening would use is needed (the log starts after LSN 1) but
/// holds a damaged conversation slice, which reading that conversation
/// would then report. It can fail where opening succeeds only on damage in
/// bytes opening does not read: the frames of sealed segments wholly
/// covered by the snapshot in use. Snapshots that are damaged, another
/// store's or stale are reported in [`StoreVerifyReport::snapshots`].
pub fn verify(dir: impl AsRef<Path>, progress: &mut dyn FnMut(u64)) -> Result<StoreVerifyReport> {
    let dir = dir.as_ref();
    let storage = crate::storage::FileSystem;
    let log = crate::log::recovery::verify_with_progress(&storage, dir, progress)?;
    let mut conversations = std::collections::HashSet::new();
    for record in LogReader::open(dir)?.iter() {
        let record = record?;
        if record.lsn >= log.next_lsn {
            break;
        }
        let event = record.event()?;
        if let Some(id) = event.conversation_id() {
            if !conversations.contains(id) {
                conversations.insert(id.to_string());
            }
        }
    }
    let frame_reader = LogReader::open(dir)?;
    let span = LogSpan {
        store_id: log.store_id,
        first_lsn: log.first_lsn,
        next_lsn: log.next_lsn,
        known_chain: None,
        binding_at: &|lsn| recovery::chain_before(&storage, dir, lsn).map(Binding::from),
        frame_at: Some(&|lsn, offset| frame_reader.frame_in_segment_of(lsn, offset)),
    };
    let mut snapshots = Vec::new();
    // Why each snapshot newer than the chosen one was passed over.
    let mut passed_over = Vec::new();
    let mut chosen: Option<(PathBuf, Lsn, SnapshotCheck)> = None;
    for (_, path) in snapshot::list(&storage, dir)? {
        let loaded = match snapshot::load(&storage, &path) {
            Ok(loaded) => loaded,
            Err(error) => {
                let reason = damaged_reason(&error);
                if chosen.is_none() {
                    passed_over.push((path.clone(), reason.clone()));
                }
                snapshots.push((path, Err(reason)));
                continue;
            }
        };
        let lsn = loaded.lsn;
        let (usable, mut rejected) = choose_snapshot(vec![loaded], &span);
        let contents = snapshot::verify(&storage, &path).map_err(|error| damaged_reason(&error));
        let checked = match rejected.pop() {
            Some((_, mismatch)) if mismatch.is_problem() => Err(mismatch.to_string()),
            Some((_, superseded)) => {
                if chosen.is_none() {
                    passed_over.push((path.clone(), superseded.to_string()));
                }
                contents
            }
            None => contents,
        };
        match &checked {
            // Passed over above, as superseded.
            _ if usable.is_none() && passed_over.last().is_some_and(|(last, _)| *last == path) => {}
            Err(reason) if chosen.is_none() && usable.is_none() => {
                passed_over.push((path.clone(), reason.clone()))
            }
            _ => {}
        }
        if usable.is_some() && chosen.is_none() {
            chosen = Some((path.clone(), lsn, checked.clone()));
        }
        snapshots.push((path, checked));
    }
    if log.first_lsn > 1 {
        match &chosen {
            None => return Err(no_usable_snapshot(
                    dir,
                    log.first_lsn,
                    true,
                    passed_over.into_iter(),
                )),
            Some((path, _, Err(reason))) => {
                return Err(Error::SnapshotRestore {
                    path: path.clone(),
                    reason: format!(
                        "{reason}; it is the snapshot opening uses, and the log starts at LSN {}, so the conversations it holds cannot be served",
                        log.first_lsn
                    ),
                })
            }
            Some(_) => {}
        }
    }
    Ok(StoreVerifyReport {
        log,
        conversations: conversations.len(),
        snapshots,
        chosen_snapshot: chosen.map(|(path, lsn, _)| (path, lsn)),
    })
}
