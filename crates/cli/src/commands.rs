//! The commands over a whole store: `dump`, `verify`, `snapshot`,
//! `compact` and `stats`. Each is a few calls of the library; the JSON form
//! of events is `convlog::json`'s.

use std::io::Write;
use std::path::Path;

use convlog::json;
use convlog::log::LogReader;
use convlog::store::{Retention, StoreOptions};
use convlog::Error;

use crate::shell::{
    existing_store, lsn_range, open_store, open_store_read_only, progress_bar, row, segment_bytes,
    spinner, stdout_closed, Failure,
};

/// `convlog dump STORE`.
///
/// On an encrypted store, sealed events are printed opened with the store
/// key when given (`--key-file`, `CONVLOG_KEY_FILE`); without it, or for an
/// erased conversation, as stored (`custom` of kind `convlog.sealed`: its
/// conversation id and LSN), and a note on standard error says so.
pub fn dump(
    dir: &Path,
    from: Option<u64>,
    conversation: Option<&str>,
    key: Option<convlog::erasure::StoreKey>,
) -> Result<(), Failure> {
    let reader = LogReader::open(dir)?;
    let encrypted = convlog::erasure::is_encrypted_store(dir);
    let unsealer = match (&key, encrypted) {
        (Some(key), true) => Some(convlog::erasure::Unsealer::open(dir, key)?),
        _ => None,
    };
    let mut erased_shown = std::collections::BTreeSet::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let bar = progress_bar(segment_bytes(dir), "dumping");
    let records = match from {
        Some(lsn) => reader.iter_from(lsn),
        None => reader.iter(),
    };
    let mut last_lsn = None;
    for record in records {
        let record = match record {
            Ok(record) => record,
            Err(error) => {
                // The lines printed so far are whole, checked events; say
                // where the output stops so a pipe's reader knows it is short.
                bar.finish_and_clear();
                out.flush().or_else(stdout_closed)?;
                let printed = match last_lsn {
                    Some(lsn) => format!("the output stops after LSN {lsn}"),
                    None => "no event was printed".to_string(),
                };
                return Err(Failure(format!("{error} ({printed})")));
            }
        };
        last_lsn = Some(record.lsn);
        bar.inc(record.payload.len() as u64);
        let event = record
            .event()
            .map_err(|error| Failure(format!("store {}: {error}", dir.display())))?;
        if conversation.is_some_and(|id| event.conversation_id() != Some(id)) {
            continue;
        }
        let event = match &unsealer {
            Some(unsealer) => match unsealer.unseal(record.lsn, event) {
                Ok(convlog::erasure::Unsealed::Plain(event)) => event,
                Ok(convlog::erasure::Unsealed::Erased(event)) => {
                    if let Some(id) = event.conversation_id() {
                        erased_shown.insert(id.to_string());
                    }
                    event
                }
                Err(error) => return Err(Failure(format!("store {}: {error}", dir.display()))),
            },
            None => event,
        };
        let line = json::to_json_line(record.lsn, &event).map_err(|error| {
            Failure(format!(
                "the event at LSN {} has no JSON form: {error}",
                record.lsn
            ))
        })?;
        if let Err(error) = writeln!(out, "{line}") {
            return stdout_closed(error);
        }
    }
    bar.finish_and_clear();
    out.flush().or_else(stdout_closed)?;
    if encrypted && key.is_none() {
        eprintln!("{}", crate::audit::SEALED_NOTE);
    }
    if !erased_shown.is_empty() {
        let ids: Vec<String> = erased_shown.into_iter().collect();
        eprintln!(
            "convlog: note: erased conversations (their keys destroyed), shown sealed as stored: {}",
            ids.join(", ")
        );
    }
    Ok(())
}

/// `convlog verify STORE [--log-only] [--key KEYFILE] [--public PUBFILE]
/// [--head CHECKPOINT]`: the store's checks, then the tamper check.
pub fn verify(
    dir: &Path,
    log_only: bool,
    tamper: &crate::tamper::TamperArgs,
) -> Result<(), Failure> {
    verify_store(dir, log_only)?;
    if tamper.given() {
        crate::tamper::verify(dir, tamper)?;
    }
    Ok(())
}

/// `convlog verify STORE [--log-only]` without the tamper check.
fn verify_store(dir: &Path, log_only: bool) -> Result<(), Failure> {
    if log_only {
        let log = convlog::log::verify(dir)?;
        log_rows(dir, &log);
        let checked = if log.torn_tail.is_some() {
            "ok: every frame before the torn tail checked (payloads not decoded: --log-only)"
        } else {
            "ok: every frame checked (payloads not decoded: --log-only)"
        };
        row("result", checked);
        return Ok(());
    }
    let total: u64 = segment_bytes(dir);
    let bar = progress_bar(total, "verifying");
    let verified = convlog::store::verify(dir, &mut |checked| bar.set_position(checked));
    bar.finish_and_clear();
    let report = verified.map_err(|error| match error {
        Error::UndecodableEvent { .. } => Failure(format!(
            "{error} (a log written with the raw log API holds no convlog events: check its frames with `convlog verify --log-only`)"
        )),
        other => Failure::from(other),
    })?;
    let log = &report.log;
    log_rows(dir, log);
    row("conversations", report.conversations);
    if report.snapshots.is_empty() {
        row("snapshots", "none");
    }
    let mut damaged = Vec::new();
    for (path, checked) in &report.snapshots {
        match checked {
            Ok((lsn, conversations)) => row(
                "snapshot",
                format!(
                    "{}: LSN {lsn}, {conversations} conversation(s), ok",
                    path.display()
                ),
            ),
            Err(reason) => {
                row(
                    "snapshot",
                    format!("{}: UNUSABLE: {reason}", path.display()),
                );
                damaged.push(format!("snapshot {} is unusable: {reason}", path.display()));
            }
        }
    }
    if damaged.is_empty() {
        let checked = if log.torn_tail.is_some() {
            "ok: every record before the torn tail and every snapshot checked"
        } else {
            "ok: every record and every snapshot checked"
        };
        row("result", checked);
        return Ok(());
    }
    row(
        "result",
        format!("{} unusable snapshot(s); the log is intact", damaged.len()),
    );
    Err(Failure(format!(
        "{} (the log is intact: opening the store skips it; take a new snapshot, then delete it)",
        damaged.join("; ")
    )))
}

/// The summary rows of a log check.
fn log_rows(dir: &Path, log: &convlog::log::VerifyReport) {
    row("store", dir.display());
    row("segments", log.segments);
    row("frames", format!("{} (atomic batches)", log.frames));
    row("events", log.events);
    if log.unused_bytes > 0 {
        row(
            "bytes",
            format!(
                "{} ({} of frames; {} allocated ahead by the writer, unused)",
                log.bytes,
                log.bytes - log.unused_bytes,
                log.unused_bytes
            ),
        );
    } else {
        row("bytes", log.bytes);
    }
    row("LSN range", lsn_range(log.first_lsn, log.next_lsn));
    match &log.torn_tail {
        Some((segment, offset)) => row(
            "tail",
            format!(
                "torn at {}:{offset} (unsynced bytes a crash left; the next writer cuts them)",
                segment.display()
            ),
        ),
        None => row("tail", "clean"),
    }
}

/// `convlog snapshot STORE`.
pub fn snapshot(dir: &Path) -> Result<(), Failure> {
    existing_store(dir)?;
    let store = open_store(dir, StoreOptions::default())?;
    let bar = spinner("writing snapshot");
    let info = store.snapshot();
    bar.finish_and_clear();
    let info = info?;
    row("snapshot", info.path.display());
    row(
        "lsn",
        format!("{} (every event below it is in the snapshot)", info.lsn),
    );
    row("conversations", info.conversations);
    Ok(())
}

/// `convlog compact STORE [--delete-covered]`.
pub fn compact(dir: &Path, delete_covered: bool) -> Result<(), Failure> {
    existing_store(dir)?;
    let retention = if delete_covered {
        Retention::DeleteCoveredBySnapshot
    } else {
        Retention::KeepAll
    };
    let store = open_store(dir, StoreOptions::new().retention(retention))?;
    let bar = spinner("compacting");
    let report = store.compact();
    bar.finish_and_clear();
    let report = report?;
    for path in &report.removed {
        row("removed", path.display());
    }
    if report.removed.is_empty() {
        let mut note = report
            .note
            .unwrap_or_else(|| "no segment could be removed".to_string());
        if !delete_covered {
            note.push_str(
                "; pass --delete-covered to delete the segments the newest snapshot covers",
            );
        }
        row("removed", format!("nothing: {note}"));
    } else {
        row("removed", format!("{} segment(s)", report.removed.len()));
    }
    Ok(())
}

/// The zeros allocated ahead of the frames at the end of the segment at
/// `path` (the active segment of a writer that is open or was killed).
fn unused_tail_bytes(path: &Path) -> Result<u64, Failure> {
    let bytes = std::fs::read(path)
        .map_err(|error| Failure(format!("read {}: {error}", path.display())))?;
    Ok(convlog::log::unused_tail_bytes(&bytes))
}

/// `convlog stats STORE`.
pub fn stats(dir: &Path) -> Result<(), Failure> {
    existing_store(dir)?;
    let store = open_store_read_only(dir)?;
    let stats = store.stats();
    let segments = convlog::log::segment_files(dir)?;
    let mut bytes = 0u64;
    for segment in &segments {
        bytes += std::fs::metadata(&segment.path)
            .map_err(|error| Failure(format!("stat {}: {error}", segment.path.display())))?
            .len();
    }
    // A writer that is open (or was killed) holds space allocated ahead of
    // its frames at the end of the last segment: zeros, not log. Counted
    // apart, so "bytes per event" is the log's and not the allocation's.
    let unused = match segments.last() {
        Some(last) => unused_tail_bytes(&last.path)?,
        None => 0,
    };
    let bytes_of_frames = bytes - unused;
    let events = stats.next_lsn.saturating_sub(stats.first_lsn);
    row("store", dir.display());
    if unused > 0 {
        row(
            "segments",
            format!(
                "{} ({bytes} bytes: {bytes_of_frames} of frames, {unused} allocated ahead by the writer, unused)",
                segments.len()
            ),
        );
    } else {
        row("segments", format!("{} ({bytes} bytes)", segments.len()));
    }
    row("LSN range", lsn_range(stats.first_lsn, stats.next_lsn));
    row("events", events);
    row("conversations", stats.conversations);
    if store.is_encrypted() {
        let erased = store.erased_conversations();
        row("encryption", "per conversation (docs/erasure.md)");
        row(
            "erased",
            if erased.is_empty() {
                "none".to_string()
            } else {
                format!("{} ({})", erased.len(), erased.join(", "))
            },
        );
    }
    row(
        "snapshot LSN",
        stats
            .snapshot_lsn
            .map_or_else(|| "none".to_string(), |lsn| lsn.to_string()),
    );
    row(
        "index",
        format!(
            "{} entries, {} bytes (in memory)",
            stats.index_entries, stats.index_bytes
        ),
    );
    if events > 0 {
        row(
            "bytes per event",
            format!(
                "{:.1} (bytes of frames / events)",
                bytes_of_frames as f64 / events as f64
            ),
        );
    } else {
        row("bytes per event", "- (no events)");
    }
    Ok(())
}
