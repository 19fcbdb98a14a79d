//! `convlog backup`: a consistent, verified copy of a store beside its writer.

use std::path::Path;

use crate::shell::{self, Failure};

pub fn backup(store: &Path, dest: &Path) -> Result<(), Failure> {
    shell::existing_store(store)?;
    let bar = shell::progress_bar(shell::segment_bytes(store), "copying");
    let report = convlog::store::backup(store, dest, &mut |copied| bar.set_position(copied));
    bar.finish_and_clear();
    let report = report?;
    shell::row("backup", report.dest.display());
    shell::row(
        "LSN range",
        format!(
            "{} ({} events)",
            shell::lsn_range(report.first_lsn, report.next_lsn),
            report.next_lsn - report.first_lsn
        ),
    );
    shell::row(
        "segments",
        format!("{} ({} bytes copied)", report.segments, report.bytes),
    );
    if report.snapshots.is_empty() {
        shell::row("snapshots", "none");
    }
    for (path, lsn) in &report.snapshots {
        shell::row("snapshot", format!("{} (LSN {lsn})", path.display()));
    }
    for (path, reason) in &report.skipped_snapshots {
        shell::row("left out", format!("{}: {reason}", path.display()));
    }
    shell::row("result", "ok: copied, then verified");
    Ok(())
}
