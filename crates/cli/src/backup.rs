//! `convlog backup`: a consistent, verified copy of a store beside its writer.

use std::path::Path;

use crate::commands::{self, Failure};

pub const BACKUP_HELP: &str = r#"Copies the store into DEST (a new or empty directory, outside the store) while its
writer keeps running: every segment up to an LSN that is made durable in the source
first, and the snapshots that check against exactly that log. The copy is written to
DEST.partial, verified, then renamed to DEST, so a DEST that exists is a whole backup.
Takes no lock.

Prints the backup's directory, its LSN range (every event below the end LSN is in it),
the segments and snapshots copied, and any snapshot left out with the reason.

Restore: stop the hosts of the store, move the damaged store aside, and back the
backup up again to where the store should live (or copy the directory); then open it.

Example:
  convlog backup ./my-store /backups/my-store-2026-11-23 && convlog verify /backups/my-store-2026-11-23"#;

pub fn backup(store: &Path, dest: &Path) -> Result<(), Failure> {
    commands::existing_store(store)?;
    let bar = commands::progress_bar(commands::segment_bytes(store), "copying");
    let report = convlog::store::backup(store, dest, &mut |copied| bar.set_position(copied));
    bar.finish_and_clear();
    let report = report?;
    commands::row("backup", report.dest.display());
    commands::row(
        "LSN range",
        format!(
            "{} ({} events)",
            commands::lsn_range(report.first_lsn, report.next_lsn),
            report.next_lsn - report.first_lsn
        ),
    );
    commands::row(
        "segments",
        format!("{} ({} bytes copied)", report.segments, report.bytes),
    );
    if report.snapshots.is_empty() {
        commands::row("snapshots", "none");
    }
    for (path, lsn) in &report.snapshots {
        commands::row("snapshot", format!("{} (LSN {lsn})", path.display()));
    }
    for (path, reason) in &report.skipped_snapshots {
        commands::row("left out", format!("{}: {reason}", path.display()));
    }
    commands::row("result", "ok: copied, then verified");
    Ok(())
}
