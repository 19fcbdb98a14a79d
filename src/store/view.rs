//! Read-only access to a store's log for hosts.

use std::path::Path;

use parking_lot::RwLock;

use super::backend::Backend;
use super::index::State;
use crate::log::{Durability, LogCursor, LogReader, Lsn, RecoveryReport};

/// Read-only access to a store's log: positions, durability, readers.
///
/// What [`Store::log`](super::Store::log) gives hosts. It has nothing that appends: every event
/// goes through [`Store::append`](super::Store::append), which indexes it and folds it into the
/// host slices. An event appended beside the store would reach neither.
///
/// ```compile_fail,E0599
/// # let dir = tempfile::tempdir().unwrap();
/// let store = convlog::Store::open(dir.path(), convlog::StoreOptions::default()).unwrap();
/// store.log().append(b"not an event"); // no such method: the view cannot append
/// ```
#[derive(Clone, Copy)]
pub struct LogView<'a> {
    pub(super) log: &'a Backend,
    /// The store's index, whose seek points let a read start near an LSN.
    pub(super) state: &'a RwLock<State>,
}

impl std::fmt::Debug for LogView<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.log.fmt(formatter)
    }
}

impl LogView<'_> {
    /// The store directory.
    pub fn dir(&self) -> &Path {
        self.log.dir()
    }

    /// The first LSN still in the log (1 unless segments were removed).
    pub fn first_lsn(&self) -> Lsn {
        self.log.first_lsn()
    }

    /// The LSN the next appended event will get. For a read-only store:
    /// one past the last event it has read (see [`Store::refresh`](super::Store::refresh)).
    pub fn next_lsn(&self) -> Lsn {
        self.log.next_lsn()
    }

    /// Every event with an LSN below this one is durable. A read-only
    /// store cannot tell: it reports what it has read.
    pub fn durable_lsn(&self) -> Lsn {
        self.log.durable_lsn()
    }

    /// One past the last event readers can see now.
    pub fn visible_next_lsn(&self) -> Lsn {
        self.log.visible_next_lsn()
    }

    /// Whether an I/O failure has stopped the writer (reopen the store).
    pub fn is_poisoned(&self) -> bool {
        self.log.is_poisoned()
    }

    /// The durability appends get by default.
    pub fn durability(&self) -> Durability {
        self.log.durability()
    }

    /// What recovery did when the store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        self.log.recovery_report()
    }

    /// Counters of the writer's work since open.
    pub fn writer_stats(&self) -> crate::log::WriterStats {
        self.log.writer_stats()
    }

    /// The segment log's own reader, which sees events as soon as they are
    /// written (and can be cloned, and read from any LSN or frame); `None`
    /// for a store opened on another log
    /// ([`Store::open_on`](super::Store::open_on)): read it with
    /// [`LogView::iter_from`], which works on every log.
    pub fn reader(&self) -> Option<LogReader> {
        self.log.reader()
    }

    /// The events with LSN `lsn` and above, in LSN order, on whatever log
    /// the store runs on; the cursor follows the log as it grows.
    ///
    /// On a writer's segment log, the read starts at the nearest frame the
    /// store indexed before `lsn` (at most about 64 KiB before it), not at
    /// the start of the segment holding it.
    pub fn iter_from(&self, lsn: Lsn) -> Box<dyn LogCursor> {
        let seek = self.state.read().seek_point(lsn);
        if let (Some((end, position)), Some(reader)) = (seek, self.log.reader()) {
            if !self.log.is_read_only() && lsn >= self.log.first_lsn() {
                // The frame is checked where it is; if it cannot be (its
                // segment was compacted away), read as any reader does.
                if let Ok(frame) = reader.frame_in_segment_of(end - 1, position.offset) {
                    if frame.end_lsn == end && frame.position == position {
                        return Box::new(reader.iter_from_after(lsn, frame));
                    }
                }
            }
        }
        self.log.log().read_from(lsn)
    }
}
