//! Crash and fault simulation: a seeded, model-based test of the log over
//! `SimStorage`, a disk that loses, tears and reorders unsynced writes at a
//! simulated power loss and fails operations on demand.
//!
//! Each seed runs a random sequence of operations on a `Log` (single appends
//! and batches under Sync / Group / None, explicit syncs, concurrent
//! appenders, reopens with pipelining on or off) interleaved with power
//! losses, process crashes, crashes in the middle of recovery and injected
//! faults (EIO on a write, fsync, create or rename; a full disk). A model
//! keeps every attempted append and what the log promised about it, and
//! after every reopen the recovered log is checked against it:
//!
//! 1. every durably acknowledged event is there, with its bytes, at its LSN;
//! 2. the log is a prefix of what was appended: LSNs gap-free from 1, every
//!    record one that was appended at that LSN, batches all-or-nothing;
//! 3. no corrupt record is returned, and reading never fails;
//! 4. recovery is idempotent: opening again, crashing right after an open,
//!    and a power cut in the middle of recovery all give the same log;
//! 5. after a failed write or fsync every append is refused with
//!    `Error::Poisoned`, and nothing refused comes back after a reopen;
//! 6. a full disk fails appends with an error that says so, and the store
//!    reopens with nothing acknowledged lost once there is space again.
//!
//! Every fourth seed (seed % 4 == 3) runs a tamper-evident store
//! (`LogOptions::tamper`): frames carry trailers, and every reopen resumes
//! the keyed chain from the last frame and checks its tag.
//!
//! `CONVLOG_SIM_SEEDS=N` runs N seeds (default 2000); `CONVLOG_SIM_SEED=S`
//! runs seed S alone and prints its operations. `CONVLOG_SIM_STALE=1` lets
//! a crash expose stale bytes of space a truncation freed, and
//! `CONVLOG_SIM_NESTED=1` lets the log create the store's parent directory
//! too: both once found library gaps, now fixed (see the regression tests
//! at the end). A failure prints the seed,
//! the step and the operations that led there. Half the seeds have steps
//! with concurrent appenders: those replay the same operations but not
//! necessarily the same thread timing (`CONVLOG_SIM_REPEAT=N` replays the
//! seed N times); the other half replay exactly.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::{env_number, Rng};
use convlog::log::{Durability, Log, LogOptions, Lsn, Record};
use convlog::storage::sim::{Fault, SimStorage};
use convlog::storage::Storage;
use convlog::Error;

const STORE: &str = "/sim/store";
const SEGMENT_BYTES_MAX: u64 = 4096;
const PAYLOAD_BYTES_MAX: u64 = 600;
const BATCH_EVENTS_MAX: u64 = 8;
const SEEDS_DEFAULT: u64 = 2000;

type Check<T = ()> = Result<T, String>;

macro_rules! ensure {
    ($condition:expr, $($message:tt)*) => {
        if !$condition {
            return Err(format!($($message)*));
        }
    };
}

thread_local! {
    /// The operations of the running seed, printed when it fails.
    static TRACE: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    /// The running seed and step.
    static WHERE: RefCell<(u64, usize)> = const { RefCell::new((0, 0)) };
}

fn trace(line: String) {
    TRACE.with(|trace| trace.borrow_mut().push(line));
}

/// Figures summed over all seeds.
#[derive(Debug, Default)]
struct Totals {
    seeds: u64,
    steps: u64,
    power_losses: u64,
    process_crashes: u64,
    recovery_crashes: u64,
    faults_injected: u64,
    faults_fired: u64,
    poisonings: u64,
    appends_acknowledged: u64,
    appends_refused: u64,
    acknowledged_events_checked: u64,
    records_lost: u64,
    torn_tails_cut: u64,
    reopens: u64,
    concurrent_steps: u64,
    /// `start_writeback` hints the writer gave the simulated disk (under
    /// `None`, as segments fill).
    writeback_hints: u64,
    /// Durable direct writes (Sync and Group commits over a file with
    /// nothing unsynced), and how many of them a crash or an EIO tore.
    durable_writes: u64,
    durable_writes_torn: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    InFlight,
    Acked(Lsn),
    Refused,
}

#[derive(Debug)]
struct Attempt {
    payloads: Vec<Vec<u8>>,
    durability: Durability,
    /// The writer session (one per open) that attempted it.
    session: u64,
    outcome: Outcome,
}

/// What the log promised.
#[derive(Debug, Default)]
struct Model {
    attempts: Vec<Attempt>,
    /// The log as the model knows it: LSN -> (attempt, event index).
    expected: BTreeMap<Lsn, (usize, usize)>,
    /// The LSN the writer assigns next, when known (unknown once poisoned).
    next_lsn: Option<Lsn>,
    /// Every LSN below this survives a power loss.
    durable_end: Lsn,
    /// Every LSN below this was written to the operating system: it
    /// survives a process crash.
    written_end: Lsn,
    session: u64,
}

impl Model {
    fn new() -> Model {
        Model {
            next_lsn: Some(1),
            durable_end: 1,
            written_end: 1,
            ..Model::default()
        }
    }

    fn attempt(&mut self, payloads: Vec<Vec<u8>>, durability: Durability) -> usize {
        self.attempts.push(Attempt {
            payloads,
            durability,
            session: self.session,
            outcome: Outcome::InFlight,
        });
        self.attempts.len() - 1
    }

    fn acknowledged(&mut self, id: usize, start: Lsn) -> Check {
        let attempt = &mut self.attempts[id];
        ensure!(
            attempt.outcome == Outcome::InFlight,
            "attempt {id} acknowledged twice"
        );
        attempt.outcome = Outcome::Acked(start);
        let end = start + attempt.payloads.len() as u64;
        for (index, lsn) in (start..end).enumerate() {
            ensure!(
                self.expected.insert(lsn, (id, index)).is_none(),
                "LSN {lsn} acknowledged twice (attempt {id})"
            );
        }
        self.written_end = self.written_end.max(end);
        if matches!(attempt.durability, Durability::Sync | Durability::Group) {
            self.durable_end = self.durable_end.max(end);
        }
        Ok(())
    }

    fn payload(&self, lsn: Lsn) -> Option<&[u8]> {
        let (id, index) = self.expected.get(&lsn)?;
        Some(&self.attempts[*id].payloads[*index])
    }
}

/// What a concurrent appender reports, in the order it happened.
#[derive(Debug)]
enum Report {
    Acked(usize, Lsn),
    Refused(usize, Error),
    Synced(Lsn),
    SyncFailed(Error),
}

#[derive(Debug, Clone, Copy)]
enum ThreadOp {
    Append(usize),
    Sync,
}

struct Sim {
    seed: u64,
    /// A tamper-evident store (every fourth seed; drawn from the seed, not
    /// the random stream, so every seed's operations stay as they were).
    tamper: bool,
    rng: Rng,
    storage: SimStorage,
    log: Option<Log>,
    model: Model,
    /// A fault armed on the current storage that may not have fired yet.
    armed: Option<Fault>,
    poisoned: bool,
    /// Faults the current storage had fired when it became current.
    fired_base: u64,
    hints_base: u64,
    /// The disk's durable direct writes (and torn ones) counted already.
    durable_base: (u64, u64),
    /// Index of the durability mix of this writer session.
    session_bias: usize,
    /// Whether this seed has steps with concurrent appenders (the others
    /// replay exactly, thread timing included).
    threads: bool,
    totals: Totals,
}

fn durability_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Sync => "Sync",
        Durability::Group => "Group",
        Durability::None => "None",
        Durability::Periodic(_) => "Periodic",
    }
}

fn same_records(first: &[Record], second: &[Record]) -> Check {
    ensure!(
        first.len() == second.len(),
        "recovery is not idempotent: {} records, then {}",
        first.len(),
        second.len()
    );
    for (a, b) in first.iter().zip(second) {
        ensure!(
            a == b,
            "recovery is not idempotent: LSN {} at {:?} ({} bytes), then LSN {} at {:?} ({} bytes)",
            a.lsn,
            a.position,
            a.payload.len(),
            b.lsn,
            b.position,
            b.payload.len()
        );
    }
    Ok(())
}

fn read_records(log: &Log) -> Check<Vec<Record>> {
    let mut records = Vec::new();
    for (index, record) in log.iter_from(1).enumerate() {
        match record {
            Ok(record) => records.push(record),
            Err(error) => {
                return Err(format!(
                    "check 3: reading the recovered log failed after {index} records: {error}"
                ))
            }
        }
    }
    Ok(records)
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let storage = SimStorage::new(rng.next_u64());
        storage.set_stale_reuse(std::env::var("CONVLOG_SIM_STALE").is_ok());
        let threads = rng.below(2) == 0;
        Sim {
            seed,
            tamper: seed % 4 == 3,
            rng,
            storage,
            log: None,
            model: Model::new(),
            armed: None,
            poisoned: false,
            fired_base: 0,
            hints_base: 0,
            durable_base: (0, 0),
            session_bias: 0,
            threads,
            totals: Totals::default(),
        }
    }

    fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.rng.below(denominator) < numerator
    }

    fn payload(&mut self) -> Vec<u8> {
        let length = match self.rng.below(8) {
            0 => 0,
            1 | 2 => 1 + self.rng.below(16),
            _ => self.rng.below(PAYLOAD_BYTES_MAX + 1),
        };
        (0..length).map(|_| self.rng.next_u64() as u8).collect()
    }

    fn payloads(&mut self, batch: bool) -> Vec<Vec<u8>> {
        let count = if batch {
            1 + self.rng.below(BATCH_EVENTS_MAX)
        } else {
            1
        };
        (0..count).map(|_| self.payload()).collect()
    }

    /// A durability, biased per writer session: mixed, mostly None, or
    /// only None (durable through explicit syncs only).
    fn durability(&mut self) -> Durability {
        let none_percent = [40, 85, 100][self.session_bias];
        if self.rng.below(100) < none_percent {
            Durability::None
        } else if self.chance(1, 2) {
            Durability::Sync
        } else {
            Durability::Group
        }
    }

    fn options(&self, storage: &SimStorage) -> LogOptions {
        let options = LogOptions::new()
            .storage(Arc::new(storage.clone()))
            .segment_bytes_max(SEGMENT_BYTES_MAX);
        // Every reopen of a tamper-evident store resumes the keyed chain
        // from the last frame's trailer and checks its tag: a crash image
        // whose chain head does not authenticate would fail the open.
        if self.tamper {
            options.tamper(convlog::tamper::TamperOptions::new(
                convlog::tamper::TamperKey::from_seed([self.seed as u8; 32]),
            ))
        } else {
            options
        }
    }

    /// Replaces the disk (by a crashed one), counting the faults the old
    /// one fired.
    fn set_storage(&mut self, storage: SimStorage) {
        let fired = self.storage.stats().faults_fired;
        self.totals.faults_fired += fired.saturating_sub(self.fired_base);
        self.fired_base = storage.stats().faults_fired;
        let hints = self.storage.stats().writeback_hints;
        self.totals.writeback_hints += hints.saturating_sub(self.hints_base);
        self.hints_base = storage.stats().writeback_hints;
        let old = self.storage.stats();
        self.totals.durable_writes += old.durable_writes.saturating_sub(self.durable_base.0);
        self.totals.durable_writes_torn +=
            old.durable_writes_torn.saturating_sub(self.durable_base.1);
        let new = storage.stats();
        self.durable_base = (new.durable_writes, new.durable_writes_torn);
        self.storage = storage;
        self.armed = None;
    }

    fn log(&self) -> &Log {
        self.log.as_ref().expect("the log is open between steps")
    }

    /// Whether `error` is what the armed fault would cause.
    fn is_injected(&self, message: &str) -> bool {
        match self.armed {
            Some(Fault::DiskFull { .. }) => {
                message.contains("No space left on device") || message.contains("sim: injected")
            }
            Some(_) => message.contains("sim: injected EIO"),
            None => false,
        }
    }

    /// Opens the store on the current storage. An open that fails because
    /// of an armed fault is retried once the faults are cleared; any other
    /// failure (a crash image that does not open) is a bug.
    fn open(&mut self) -> Check<Log> {
        // Drawn and unused since `LogOptions::pipelined` was removed: keeps
        // every seed's random stream (and its recorded regressions) as it was.
        let _ = self.chance(1, 2);
        self.session_bias = self.rng.below(3) as usize;
        match Log::open(STORE, self.options(&self.storage)) {
            Ok(log) => Ok(log),
            Err(error) => {
                let message = error.to_string();
                ensure!(
                    matches!(error, Error::Io { .. }) && self.is_injected(&message),
                    "open failed: {message}"
                );
                trace(format!("    open failed by the injected fault: {message}"));
                self.storage.clear_faults();
                self.armed = None;
                Log::open(STORE, self.options(&self.storage))
                    .map_err(|error| format!("open failed after clearing faults: {error}"))
            }
        }
    }

    /// Checks the log just recovered against the model: what must be there
    /// (LSNs below `required_end`), what may be there, and nothing else.
    /// Then makes it the model's log.
    fn check_recovered(
        &mut self,
        log: &Log,
        required_end: Lsn,
        refused_may_appear: bool,
    ) -> Check<Vec<Record>> {
        let records = read_records(log)?;
        let end = records.len() as Lsn + 1;
        ensure!(
            log.next_lsn() == end && log.recovery_report().next_lsn == end,
            "check 2: the log holds LSNs up to {end} but next_lsn is {} (report {})",
            log.next_lsn(),
            log.recovery_report().next_lsn
        );
        if log.recovery_report().torn_tail.is_some() {
            self.totals.torn_tails_cut += 1;
        }
        if end < required_end {
            self.totals.records_lost += required_end - end;
            return Err(format!(
                "check 1: LSNs {end}..{required_end} were acknowledged (and must survive this crash) but are lost ({} records recovered; report {:?})",
                records.len(),
                log.recovery_report()
            ));
        }
        self.totals.acknowledged_events_checked += required_end - 1;

        let mut used = vec![false; self.model.attempts.len()];
        let mut expected = BTreeMap::new();
        let mut index = 0;
        while index < records.len() {
            let position = records[index].position;
            let first = records[index].lsn;
            let frame_end = records[index..]
                .iter()
                .position(|record| record.position != position)
                .map_or(records.len(), |offset| index + offset);
            let frame = &records[index..frame_end];
            for (offset, record) in frame.iter().enumerate() {
                ensure!(
                    record.lsn == index as Lsn + 1 + offset as Lsn,
                    "check 2: record {} has LSN {} (a hole or reordering)",
                    index + offset,
                    record.lsn
                );
            }
            if index > 0 {
                ensure!(
                    records[index - 1].position < position,
                    "check 2: frames out of order at LSN {first}"
                );
            }
            let id = self.identify(frame, refused_may_appear, &mut used)?;
            for (offset, record) in frame.iter().enumerate() {
                expected.insert(record.lsn, (id, offset));
            }
            index = frame_end;
        }

        self.model.expected = expected;
        self.model.next_lsn = Some(end);
        // Recovery fsyncs what it keeps: the writer counts it all durable.
        self.model.durable_end = end;
        self.model.written_end = end;
        self.model.session += 1;
        self.poisoned = false;
        Ok(records)
    }

    /// The attempt whose whole batch is `frame`, or why there is none.
    fn identify(
        &self,
        frame: &[Record],
        refused_may_appear: bool,
        used: &mut [bool],
    ) -> Check<usize> {
        let first = frame[0].lsn;
        if let Some(&(id, index)) = self.model.expected.get(&first) {
            let attempt = &self.model.attempts[id];
            ensure!(
                index == 0 && attempt.payloads.len() == frame.len(),
                "check 2: the frame at LSN {first} holds {} events but batch {id} (event {index} at that LSN) has {}: not all-or-nothing",
                frame.len(),
                attempt.payloads.len()
            );
            for (record, payload) in frame.iter().zip(&attempt.payloads) {
                ensure!(
                    &record.payload == payload,
                    "check 3: LSN {} holds {} bytes that are not the {} bytes appended there",
                    record.lsn,
                    record.payload.len(),
                    payload.len()
                );
            }
            used[id] = true;
            return Ok(id);
        }
        // Not acknowledged at a known LSN: it must be a batch of this
        // writer session whose outcome the model does not know, or (only in
        // an image taken while appenders ran) one that was refused.
        for lsn in frame.iter().map(|record| record.lsn) {
            ensure!(
                self.model.payload(lsn).is_none(),
                "check 2: LSN {lsn} belongs to another batch"
            );
        }
        let mut refused = None;
        for (id, attempt) in self.model.attempts.iter().enumerate().rev() {
            if attempt.session != self.model.session {
                break;
            }
            let matches = !used[id]
                && attempt.payloads.len() == frame.len()
                && frame
                    .iter()
                    .zip(&attempt.payloads)
                    .all(|(record, payload)| &record.payload == payload);
            if !matches {
                continue;
            }
            match attempt.outcome {
                Outcome::InFlight => {
                    used[id] = true;
                    return Ok(id);
                }
                Outcome::Refused if refused_may_appear => {
                    used[id] = true;
                    return Ok(id);
                }
                Outcome::Refused => refused = Some(id),
                Outcome::Acked(_) => {}
            }
        }
        match refused {
            Some(id) => Err(format!(
                "check 5: batch {id} was refused, yet LSNs {}..={} hold it after reopen",
                first,
                frame[frame.len() - 1].lsn
            )),
            None => Err(format!(
                "check 2/3: LSNs {}..={} ({} events, {} bytes first) were never appended there",
                first,
                frame[frame.len() - 1].lsn,
                frame.len(),
                frame[0].payload.len()
            )),
        }
    }

    /// Opens a crashed disk and checks it (checks 1-3), then checks that
    /// recovery is idempotent and crash-safe (check 4).
    ///
    /// `durable_end` is what the image keeps through a further power loss:
    /// `None` for a power-loss image (all of it), what was durable before
    /// the crash for a process-crash image (recovery fsyncs the rest, but a
    /// power loss in the middle of recovery may come first).
    fn recover(
        &mut self,
        image: SimStorage,
        required_end: Lsn,
        durable_end: Option<Lsn>,
        refused_may_appear: bool,
    ) -> Check {
        // An exact copy of the image before recovery touches it.
        let spare = self.chance(1, 2).then(|| image.process_crash());
        self.set_storage(image);
        let mut log = self.open()?;
        let records = self.check_recovered(&log, required_end, refused_may_appear)?;
        trace(format!(
            "    recovered {} events (required {}), torn tail: {:?}",
            records.len(),
            required_end - 1,
            log.recovery_report()
                .torn_tail
                .as_ref()
                .map(|torn| (torn.offset, torn.bytes_dropped))
        ));
        if self.chance(1, 2) {
            drop(log);
            log = self.open()?;
            same_records(&records, &read_records(&log)?)
                .map_err(|error| format!("check 4 (second open): {error}"))?;
        }
        if self.chance(1, 3) {
            // A power loss right after the open, before any append.
            let crashed = self.storage.crash(self.rng.next_u64());
            self.totals.power_losses += 1;
            drop(log);
            self.set_storage(crashed);
            log = self.open()?;
            same_records(&records, &read_records(&log)?)
                .map_err(|error| format!("check 4 (power loss right after open): {error}"))?;
            trace("    power loss right after the open: same log".to_string());
        }
        if let Some(spare) = spare {
            // A power loss in the middle of recovery.
            let operations = self.rng.below(8);
            spare.power_cut_after(operations);
            let interrupted = Log::open(STORE, self.options(&spare));
            let opened = interrupted.is_ok();
            drop(interrupted);
            let crashed = spare.crash(self.rng.next_u64());
            self.totals.recovery_crashes += 1;
            let again = Log::open(STORE, self.options(&crashed)).map_err(|error| {
                format!("check 4: open after a power loss during recovery (after {operations} operations) failed: {error}")
            })?;
            let again = read_records(&again)?;
            let context = |error| {
                format!(
                    "check 4 (power loss during recovery after {operations} operations): {error}"
                )
            };
            match durable_end {
                None => same_records(&records, &again).map_err(context)?,
                Some(durable_end) => {
                    let kept = again.len() as Lsn + 1;
                    ensure!(
                        kept >= durable_end,
                        "check 4: a power loss during recovery lost durable LSNs {kept}..{durable_end}"
                    );
                    same_records(&records[..again.len()], &again).map_err(context)?;
                }
            }
            trace(format!(
                "    power loss during recovery after {operations} operations (that open {}): same log",
                if opened { "succeeded" } else { "failed" }
            ));
        }
        self.log = Some(log);
        self.totals.reopens += 1;
        Ok(())
    }

    /// A refused append or sync: it must be `Error::Poisoned` with the
    /// injected cause, and the writer must stay poisoned.
    fn refused(&mut self, error: &Error) -> Check {
        let Error::Poisoned { cause, .. } = error else {
            return Err(format!("check 5: expected Error::Poisoned, got: {error}"));
        };
        if !self.poisoned {
            ensure!(
                self.is_injected(cause),
                "check 5/6: the writer failed with no matching fault armed ({:?}): {cause}",
                self.armed
            );
            if matches!(self.armed, Some(Fault::DiskFull { .. })) {
                ensure!(
                    cause.contains("No space left on device"),
                    "check 6: a full disk must say so: {cause}"
                );
            }
            self.poisoned = true;
            self.model.next_lsn = None;
            self.totals.poisonings += 1;
            trace(format!("    poisoned: {cause}"));
        }
        ensure!(
            self.log().is_poisoned(),
            "check 5: an append was refused but the writer is not poisoned"
        );
        Ok(())
    }

    fn step_append(&mut self, batch: bool) -> Check {
        let durability = self.durability();
        self.step_append_with(batch, durability)
    }

    fn step_append_with(&mut self, batch: bool, durability: Durability) -> Check {
        let payloads = self.payloads(batch);
        let count = payloads.len() as u64;
        let id = self.model.attempt(payloads, durability);
        let payloads = &self.model.attempts[id].payloads;
        let log = self.log();
        let result = if batch {
            log.append_with(payloads, durability)
        } else {
            log.append_with(&payloads[..1], durability)
        };
        trace(format!(
            "  append {} x{count} ({} bytes) -> {:?}",
            durability_name(durability),
            payloads.iter().map(Vec::len).sum::<usize>(),
            result.as_ref().map_err(|error| error.to_string())
        ));
        match result {
            Ok(lsns) => {
                ensure!(
                    !self.poisoned,
                    "check 5: a poisoned writer acknowledged LSNs {lsns:?}"
                );
                ensure!(
                    lsns.end - lsns.start == count,
                    "a batch of {count} got LSNs {lsns:?}"
                );
                if let Some(next) = self.model.next_lsn {
                    ensure!(lsns.start == next, "LSNs {lsns:?} where {next} was next");
                }
                self.model.next_lsn = Some(lsns.end);
                self.model.acknowledged(id, lsns.start)?;
                self.totals.appends_acknowledged += 1;
            }
            Err(error) => {
                self.model.attempts[id].outcome = Outcome::Refused;
                self.totals.appends_refused += 1;
                self.refused(&error)?;
            }
        }
        Ok(())
    }

    fn step_sync(&mut self) -> Check {
        let log = self.log();
        let before = log.next_lsn();
        let result = log.sync();
        trace(format!(
            "  sync (next LSN {before}) -> {:?}",
            result.as_ref().map_err(|error| error.to_string())
        ));
        match result {
            Ok(()) => {
                ensure!(!self.poisoned, "check 5: a poisoned writer synced");
                self.model.durable_end = self.model.durable_end.max(before);
            }
            Err(error) => self.refused(&error)?,
        }
        Ok(())
    }

    fn step_inject(&mut self) {
        let fault = match self.rng.below(6) {
            0 => Fault::WriteEio {
                nth: 1 + self.rng.below(4),
            },
            1 | 2 => Fault::FsyncEio {
                nth: 1 + self.rng.below(4),
            },
            3 => Fault::CreateEio { nth: 1 },
            4 => Fault::RenameEio { nth: 1 },
            _ => Fault::DiskFull {
                free_bytes: self.rng.below(6000),
            },
        };
        trace(format!("  inject {fault:?}"));
        self.storage.inject(fault);
        self.armed = Some(fault);
        self.totals.faults_injected += 1;
    }

    /// Drop the log (a clean close syncs) and open it again.
    fn step_reopen(&mut self) -> Check {
        let fired = self.storage.stats().faults_fired;
        let poisoned = self.poisoned;
        drop(self.log.take());
        let failed_on_close = self.storage.stats().faults_fired > fired;
        if failed_on_close && !matches!(self.armed, Some(Fault::DiskFull { .. })) {
            self.armed = None;
        }
        if self.chance(1, 2) {
            self.storage.clear_faults();
            self.armed = None;
        }
        // A clean close makes everything written durable, unless it fails.
        let required_end = if poisoned || failed_on_close {
            self.model.durable_end
        } else {
            self.model.written_end
        };
        trace(format!(
            "  reopen (poisoned: {poisoned}, close failed: {failed_on_close}, armed: {:?}) requires {}",
            self.armed,
            required_end - 1
        ));
        let log = self.open()?;
        self.check_recovered(&log, required_end, false)?;
        self.log = Some(log);
        self.totals.reopens += 1;
        Ok(())
    }

    fn step_power_loss(&mut self) -> Check {
        if !self.poisoned && self.chance(1, 2) {
            // Leave an unsynced tail for the crash to tear.
            for _ in 0..1 + self.rng.below(5) {
                let batch = self.chance(1, 2);
                self.step_append_with(batch, Durability::None)?;
            }
        }
        let crash_seed = self.rng.next_u64();
        let image = self.storage.crash(crash_seed);
        self.totals.power_losses += 1;
        let required_end = self.model.durable_end;
        trace(format!(
            "  power loss (crash seed {crash_seed}, {} unsynced operations) requires {}",
            self.storage.unsynced_operations(),
            required_end - 1
        ));
        drop(self.log.take());
        self.recover(image, required_end, None, false)
    }

    fn step_process_crash(&mut self) -> Check {
        let image = self.storage.process_crash();
        self.totals.process_crashes += 1;
        // Everything acknowledged was written, unless a poisoned writer cut
        // it off again.
        let required_end = if self.poisoned {
            self.model.durable_end
        } else {
            self.model.written_end
        };
        trace(format!("  process crash requires {}", required_end - 1));
        drop(self.log.take());
        let durable_end = self.model.durable_end;
        self.recover(image, required_end, Some(durable_end), false)
    }

    /// 2-4 threads append and sync at once; sometimes the power fails while
    /// they run.
    fn step_concurrent(&mut self) -> Check {
        self.totals.concurrent_steps += 1;
        let threads = 2 + self.rng.below(3) as usize;
        let mut plans = Vec::new();
        for _ in 0..threads {
            let mut plan = Vec::new();
            for _ in 0..2 + self.rng.below(8) {
                if self.chance(1, 8) {
                    plan.push(ThreadOp::Sync);
                } else {
                    let batch = self.chance(1, 3);
                    let payloads = self.payloads(batch);
                    let durability = self.durability();
                    plan.push(ThreadOp::Append(self.model.attempt(payloads, durability)));
                }
            }
            plans.push(plan);
        }
        let operations: usize = plans.iter().map(Vec::len).sum();
        let crash_after = self
            .chance(1, 3)
            .then(|| self.rng.below(operations as u64 + 1) as usize);
        let crash_seed = self.rng.next_u64();
        trace(format!(
            "  concurrent: {threads} threads, {operations} operations, power loss after {crash_after:?} reports"
        ));

        let log = Arc::new(self.log.take().expect("the log is open"));
        let reports = Arc::new(Mutex::new(Vec::new()));
        let finished = Arc::new(AtomicUsize::new(0));
        let work: Arc<Vec<(Vec<Vec<u8>>, Durability)>> = Arc::new(
            self.model
                .attempts
                .iter()
                .map(|attempt| (attempt.payloads.clone(), attempt.durability))
                .collect(),
        );
        let handles: Vec<_> = plans
            .into_iter()
            .map(|plan| {
                let log = Arc::clone(&log);
                let reports = Arc::clone(&reports);
                let finished = Arc::clone(&finished);
                let work = Arc::clone(&work);
                std::thread::spawn(move || {
                    for op in plan {
                        match op {
                            ThreadOp::Append(id) => {
                                let (payloads, durability) = &work[id];
                                let report = match log.append_with(payloads, *durability) {
                                    Ok(lsns) => Report::Acked(id, lsns.start),
                                    Err(error) => Report::Refused(id, error),
                                };
                                reports.lock().unwrap().push(report);
                            }
                            ThreadOp::Sync => {
                                let before = log.next_lsn();
                                let report = match log.sync() {
                                    Ok(()) => Report::Synced(before),
                                    Err(error) => Report::SyncFailed(error),
                                };
                                reports.lock().unwrap().push(report);
                            }
                        }
                    }
                    finished.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();

        // A power loss while they run: every report made before the image
        // was taken happened before the crash.
        let mut image = None;
        if let Some(after) = crash_after {
            loop {
                let reports = reports.lock().unwrap();
                if reports.len() >= after || finished.load(Ordering::SeqCst) == threads {
                    image = Some((self.storage.crash(crash_seed), reports.len()));
                    break;
                }
                drop(reports);
                std::thread::yield_now();
            }
        }
        for handle in handles {
            handle
                .join()
                .map_err(|_| "a concurrent appender panicked".to_string())?;
        }
        let log = Arc::try_unwrap(log).map_err(|_| "the log is still shared".to_string())?;
        self.log = Some(log);
        let reports = std::mem::take(&mut *reports.lock().unwrap());

        // Apply the reports in order; the durability requirement of the image
        // counts only those made before it was taken.
        let start_next = self.model.next_lsn;
        let mut required_at_image = self.model.durable_end;
        let mut first_acked = Lsn::MAX;
        for (index, report) in reports.iter().enumerate() {
            match report {
                Report::Acked(id, start) => {
                    self.model.acknowledged(*id, *start)?;
                    first_acked = first_acked.min(*start);
                    self.totals.appends_acknowledged += 1;
                }
                Report::Refused(id, error) => {
                    self.model.attempts[*id].outcome = Outcome::Refused;
                    self.totals.appends_refused += 1;
                    self.refused(error)?;
                }
                Report::Synced(before) => {
                    self.model.durable_end = self.model.durable_end.max(*before);
                }
                Report::SyncFailed(error) => self.refused(error)?,
            }
            if let Some((_, taken)) = &image {
                if index + 1 == *taken {
                    required_at_image = self.model.durable_end;
                }
            }
        }
        trace(format!(
            "    {} reports, {} poisoned",
            reports.len(),
            if self.poisoned { "writer" } else { "not" }
        ));
        if !self.poisoned {
            // Gap-free: the acknowledged LSNs are exactly the ones assigned.
            let next = self.log().next_lsn();
            let acked: u64 = reports
                .iter()
                .filter_map(|report| match report {
                    Report::Acked(id, _) => Some(self.model.attempts[*id].payloads.len() as u64),
                    _ => None,
                })
                .sum();
            if let Some(start) = start_next {
                ensure!(
                    next == start + acked && (acked == 0 || first_acked == start),
                    "check 2: {acked} events acknowledged from LSN {start} but next LSN is {next}"
                );
            }
            self.model.next_lsn = Some(next);
        }
        if let Some((image, _)) = image {
            self.totals.power_losses += 1;
            trace(format!(
                "    power loss while appending requires {}",
                required_at_image - 1
            ));
            drop(self.log.take());
            self.recover(image, required_at_image, None, true)?;
        }
        Ok(())
    }

    fn step(&mut self) -> Check {
        if self.poisoned {
            // Every later append and sync is refused; then reopen.
            return match self.rng.below(6) {
                0 => self.step_append(false),
                1 => self.step_sync(),
                2 => self.step_append(true),
                3 => self.step_power_loss(),
                4 => self.step_process_crash(),
                _ => self.step_reopen(),
            };
        }
        if self.threads && self.chance(3, 20) {
            return self.step_concurrent();
        }
        match self.rng.below(90) {
            0..=29 => self.step_append(false),
            30..=49 => self.step_append(true),
            50..=57 => self.step_sync(),
            58..=63 => self.step_reopen(),
            64..=73 => self.step_power_loss(),
            74..=77 => self.step_process_crash(),
            _ => {
                if self.armed.is_none() {
                    self.step_inject();
                    Ok(())
                } else {
                    self.step_append(true)
                }
            }
        }
    }

    fn run(&mut self, steps: usize) -> Check {
        // The store directory was made before (durably), or the log creates
        // it in a parent that exists, or (CONVLOG_SIM_NESTED=1) it creates
        // the parent too.
        let layouts = 2 + u64::from(std::env::var("CONVLOG_SIM_NESTED").is_ok());
        let made: &[&str] = match self.rng.below(layouts) {
            0 => &["/sim", "/sim/store"],
            1 => &["/sim"],
            _ => &[],
        };
        for dir in made {
            let dir = Path::new(dir);
            self.storage
                .create_dir_all(dir)
                .map_err(|error| error.to_string())?;
            let parent = dir.parent().expect("a parent");
            self.storage
                .sync_dir(parent)
                .map_err(|error| error.to_string())?;
        }
        trace(format!(
            "seed {}: {steps} steps, directories made before: {made:?}, concurrent steps: {}",
            self.seed, self.threads
        ));
        if self.chance(1, 6) {
            // A fault in the very first open.
            self.step_inject();
            if made.len() < 2 && self.armed == Some(Fault::FsyncEio { nth: 1 }) {
                // A failed fsync of the new store directory's parent is
                // never retried by a later open: the library gap that
                // `a_failed_fsync_of_a_new_store_directory_is_retried` shows.
                self.storage.clear_faults();
                self.armed = None;
            }
        }
        let log = self.open()?;
        self.check_recovered(&log, 1, false)?;
        self.log = Some(log);
        for step in 0..steps {
            WHERE.with(|at| *at.borrow_mut() = (self.seed, step));
            self.totals.steps += 1;
            self.step()
                .map_err(|error| format!("step {step}: {error}"))?;
        }
        // Finally: a clean reopen with space, and a power loss.
        WHERE.with(|at| at.borrow_mut().1 = steps);
        self.storage.clear_faults();
        self.armed = None;
        self.step_reopen()
            .map_err(|error| format!("final reopen: {error}"))?;
        self.step_power_loss()
            .map_err(|error| format!("final power loss: {error}"))?;
        self.set_storage(self.storage.clone());
        drop(self.log.take());
        Ok(())
    }
}

fn run_seed(seed: u64, totals: &mut Totals) {
    TRACE.with(|trace| trace.borrow_mut().clear());
    WHERE.with(|at| *at.borrow_mut() = (seed, 0));
    let outcome = std::panic::catch_unwind(|| {
        let mut sim = Sim::new(seed);
        let steps = 30 + sim.rng.below(40) as usize;
        let result = sim.run(steps);
        (result, sim.totals)
    });
    let failure = match outcome {
        Ok((Ok(()), seed_totals)) => {
            add(totals, &seed_totals);
            totals.seeds += 1;
            return;
        }
        Ok((Err(error), _)) => error,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
                .unwrap_or_default();
            let step = WHERE.with(|at| at.borrow().1);
            format!("step {step}: panicked: {message}")
        }
    };
    let operations = TRACE.with(|trace| trace.borrow().join("\n"));
    let threads = operations.contains("\n  concurrent:");
    let timing = if threads {
        "\nthis seed ran concurrent appenders: a replay does the same operations, but \
         thread timing may differ; add CONVLOG_SIM_REPEAT=200 to replay it until it fails"
    } else {
        ""
    };
    panic!(
        "crash simulation failed: seed {seed}, {failure}\n\
         operations of this seed:\n{operations}\n\
         reproduce with: CONVLOG_SIM_SEED={seed} cargo test --test crash_sim -- --nocapture{timing}"
    );
}

fn add(totals: &mut Totals, seed: &Totals) {
    totals.steps += seed.steps;
    totals.power_losses += seed.power_losses;
    totals.process_crashes += seed.process_crashes;
    totals.recovery_crashes += seed.recovery_crashes;
    totals.faults_injected += seed.faults_injected;
    totals.faults_fired += seed.faults_fired;
    totals.poisonings += seed.poisonings;
    totals.appends_acknowledged += seed.appends_acknowledged;
    totals.appends_refused += seed.appends_refused;
    totals.acknowledged_events_checked += seed.acknowledged_events_checked;
    totals.records_lost += seed.records_lost;
    totals.torn_tails_cut += seed.torn_tails_cut;
    totals.reopens += seed.reopens;
    totals.concurrent_steps += seed.concurrent_steps;
    totals.writeback_hints += seed.writeback_hints;
    totals.durable_writes += seed.durable_writes;
    totals.durable_writes_torn += seed.durable_writes_torn;
}

#[test]
fn random_operations_crashes_and_faults_keep_every_promise() {
    let started = Instant::now();
    let single = std::env::var("CONVLOG_SIM_SEED")
        .ok()
        .and_then(|seed| seed.parse::<u64>().ok());
    let seeds: Vec<u64> = match single {
        Some(seed) => vec![seed; env_number("CONVLOG_SIM_REPEAT", 1).max(1) as usize],
        None => (0..env_number("CONVLOG_SIM_SEEDS", SEEDS_DEFAULT)).collect(),
    };
    let mut totals = Totals::default();
    for &seed in &seeds {
        run_seed(seed, &mut totals);
        if single.is_some() {
            TRACE.with(|trace| eprintln!("{}", trace.borrow().join("\n")));
        }
    }
    eprintln!(
        "crash_sim: {} seeds, {} steps in {:.1?}: {} power losses ({} during recovery), {} process crashes, \
         {} faults injected ({} fired, {} writers poisoned), {} appends acknowledged, {} refused, \
         {} acknowledged events checked, {} torn tails cut, {} reopens, {} concurrent steps, \
         {} writeback hints, {} durable direct writes ({} torn), records lost: {}",
        totals.seeds,
        totals.steps,
        started.elapsed(),
        totals.power_losses + totals.recovery_crashes,
        totals.recovery_crashes,
        totals.process_crashes,
        totals.faults_injected,
        totals.faults_fired,
        totals.poisonings,
        totals.appends_acknowledged,
        totals.appends_refused,
        totals.acknowledged_events_checked,
        totals.torn_tails_cut,
        totals.reopens,
        totals.concurrent_steps,
        totals.writeback_hints,
        totals.durable_writes,
        totals.durable_writes_torn,
        totals.records_lost
    );
    assert_eq!(totals.records_lost, 0);
    if seeds.len() >= 100 {
        // The writer's early writeback (under None) ran inside the model.
        assert!(totals.writeback_hints > 0, "no writeback hint was issued");
        // Durable commits ran as direct writes inside the model, and
        // crashes and faults tore some of them.
        assert!(totals.durable_writes > 0, "no durable direct write");
        assert!(
            totals.durable_writes_torn > 0,
            "no durable direct write was torn"
        );
    }
}

/// Power losses (64 crash seeds) after `acknowledged` events were
/// acknowledged under Sync: every one must keep them all.
fn survives_power_losses(storage: &SimStorage, acknowledged: Lsn, what: &str) {
    let options = |storage: &SimStorage| {
        LogOptions::new()
            .storage(Arc::new(storage.clone()))
            .segment_bytes_max(SEGMENT_BYTES_MAX)
    };
    let mut lost = Vec::new();
    for seed in 0..64 {
        let crashed = storage.crash(seed);
        let kept = match Log::open(STORE, options(&crashed)) {
            Ok(log) => log.next_lsn() - 1,
            Err(error) => panic!("{what}: crash seed {seed}: open failed: {error}"),
        };
        if kept < acknowledged {
            lost.push((seed, kept));
        }
    }
    assert!(
        lost.is_empty(),
        "{what}: {acknowledged} events acknowledged under Sync, but after a power loss only \
         (crash seed, events kept) {lost:?}"
    );
}

/// Regression (found by this simulation): `Log::open` used to fsync the
/// parent of a store directory only when it created the directory. If that
/// fsync failed (or the process died before it), the next open found the
/// directory and never fsynced the parent, so a power loss could lose the
/// whole store, Sync-acknowledged events included. Now every open fsyncs it.
#[test]
fn a_failed_fsync_of_a_new_store_directory_is_retried() {
    let storage = SimStorage::new(7);
    storage.create_dir_all(Path::new("/sim")).unwrap();
    storage.sync_dir(Path::new("/")).unwrap();
    storage.inject(Fault::FsyncEio { nth: 1 });
    let options = LogOptions::new()
        .storage(Arc::new(storage.clone()))
        .segment_bytes_max(SEGMENT_BYTES_MAX);
    let error = Log::open(STORE, options.clone()).unwrap_err();
    assert!(error.to_string().contains("fsync parent"), "{error}");
    let log = Log::open(STORE, options).unwrap();
    for index in 0..10u8 {
        log.append_with(&[[index; 100]], Durability::Sync).unwrap();
    }
    survives_power_losses(&storage, 10, "after a failed parent fsync");
    drop(log);
}

/// Regression (`CONVLOG_SIM_NESTED=1` failed at seed 5): `Log::open` on a
/// path whose parent directories did not exist created them all but fsynced
/// only the store directory's own parent. Now the parent of every level it
/// creates is fsynced.
#[test]
fn a_new_store_in_new_parent_directories_survives_a_power_loss() {
    let storage = SimStorage::new(8);
    let options = LogOptions::new()
        .storage(Arc::new(storage.clone()))
        .segment_bytes_max(SEGMENT_BYTES_MAX);
    let log = Log::open(STORE, options).unwrap();
    for index in 0..10u8 {
        log.append_with(&[[index; 100]], Durability::Sync).unwrap();
    }
    survives_power_losses(&storage, 10, "in new parent directories");
    drop(log);
}

/// The control for the two gaps above: a store directory the log creates in
/// a durable parent survives every power loss.
#[test]
fn a_new_store_directory_survives_a_power_loss() {
    let storage = SimStorage::new(9);
    storage.create_dir_all(Path::new("/sim")).unwrap();
    storage.sync_dir(Path::new("/")).unwrap();
    let options = LogOptions::new()
        .storage(Arc::new(storage.clone()))
        .segment_bytes_max(SEGMENT_BYTES_MAX);
    let log = Log::open(STORE, options).unwrap();
    for index in 0..10u8 {
        log.append_with(&[[index; 100]], Durability::Sync).unwrap();
    }
    survives_power_losses(&storage, 10, "in a durable parent");
    drop(log);
}

/// Regression (found by this simulation with `CONVLOG_SIM_STALE=1`): a
/// poisoned writer truncates the frames it refused, and on a file system
/// that reuses freed blocks without ordering data before metadata, a power
/// loss that lost the next write at that offset could expose the refused
/// frame again, chained and numbered as if new. The poisoned writer now
/// leaves a durable marker, and the next open writes into a fresh segment
/// (new salt) instead of over the refused offsets; recovery does the same
/// after cutting a torn tail.
#[test]
fn a_refused_frame_never_comes_back_from_reused_space() {
    let storage = SimStorage::new(10);
    storage.set_stale_reuse(true);
    storage.create_dir_all(Path::new(STORE)).unwrap();
    storage.sync_dir(Path::new("/sim")).unwrap();
    storage.sync_dir(Path::new("/")).unwrap();
    let options = |storage: &SimStorage| {
        LogOptions::new()
            .storage(Arc::new(storage.clone()))
            .segment_bytes_max(SEGMENT_BYTES_MAX)
    };
    let log = Log::open(STORE, options(&storage)).unwrap();
    log.append_with(&[b"durable"], Durability::Sync).unwrap();
    // The Group commit is one durable direct write (no fsync): its EIO
    // refuses the frame, possibly after part of it reached the disk.
    storage.inject(Fault::WriteEio { nth: 1 });
    let refused = [b'r'; 40];
    let error = log.append_with(&[refused], Durability::Group).unwrap_err();
    assert!(matches!(error, Error::Poisoned { .. }), "{error}");
    drop(log);
    let log = Log::open(STORE, options(&storage)).unwrap();
    assert_eq!(log.next_lsn(), 2, "the refused append is gone");
    log.append_with(&[[b'n'; 200]], Durability::None).unwrap();

    let mut resurrected = Vec::new();
    for seed in 0..256 {
        let crashed = storage.crash(seed);
        let reopened = Log::open(STORE, options(&crashed)).unwrap();
        let records = read_records(&reopened).unwrap();
        if records.iter().any(|record| record.payload == refused) {
            resurrected.push(seed);
        }
    }
    assert!(
        resurrected.is_empty(),
        "the refused append came back as LSN 2 after a power loss (crash seeds {resurrected:?})"
    );
    drop(log);
}

/// A Sync or Group commit over a file with nothing unsynced is one durable
/// direct write of the aligned blocks its frames land in, the tail block's
/// acknowledged bytes rewritten unchanged (`StorageFile::write_durable_at`).
/// A power cut or an EIO in the middle of it tears only those blocks: every
/// event acknowledged before survives every power loss after it, wherever
/// the cut lands (the frames here share blocks with the ones before them).
#[test]
fn a_torn_durable_write_keeps_every_acknowledged_event() {
    let options = |storage: &SimStorage| {
        LogOptions::new()
            .storage(Arc::new(storage.clone()))
            .segment_bytes_max(64 * 1024)
    };
    let mut torn = 0;
    for case in 0..12u64 {
        let storage = SimStorage::new(100 + case);
        let log = Log::open(STORE, options(&storage)).unwrap();
        let mut acknowledged = 0;
        for index in 0..(5 + case as usize) {
            let payload = vec![index as u8 + 1; 37 + index * 101];
            let durability = if index % 2 == 0 {
                Durability::Sync
            } else {
                Durability::Group
            };
            log.append_with(&[payload], durability).unwrap();
            acknowledged += 1;
        }
        let before = storage.stats().durable_writes_torn;
        if case % 2 == 0 {
            storage.power_cut_after(case / 2);
        } else {
            storage.inject(Fault::WriteEio { nth: 1 });
        }
        for _ in 0..4 {
            if log.append_with(&[[0xEE; 300]], Durability::Sync).is_err() {
                break;
            }
            acknowledged += 1;
        }
        torn += storage.stats().durable_writes_torn - before;
        drop(log);
        survives_power_losses(&storage, acknowledged, &format!("case {case}"));
    }
    assert!(torn > 0, "no durable write was torn");
}

/// Space the log prepares ahead of the frames (allocated, zero-filled and
/// synced by its background thread, `SimStorage::set_prewrite`) is part of
/// the crash model: whatever the thread had done when the power went, every
/// event acknowledged under Sync survives, and the space reads as zeros.
#[test]
fn prepared_space_survives_power_losses() {
    let storage = SimStorage::new(11);
    storage.set_prewrite(true);
    let options = |storage: &SimStorage| {
        LogOptions::new()
            .storage(Arc::new(storage.clone()))
            .segment_bytes_max(3 << 20)
    };
    let log = Log::open(STORE, options(&storage)).unwrap();
    let mut acknowledged = 0;
    // Wait on the state, not on time: until the thread prepared a chunk.
    while storage.stats().prewrites == 0 || acknowledged < 50 {
        log.append_with(&[[acknowledged as u8 | 1; 700]], Durability::Sync)
            .unwrap();
        acknowledged += 1;
        if acknowledged % 50 == 0 {
            std::thread::yield_now();
        }
    }
    survives_power_losses(&storage, acknowledged, "with prepared space");
    drop(log);
    // A clean close cut the prepared space: the segment ends at its data.
    let reopened = Log::open(STORE, options(&storage)).unwrap();
    assert_eq!(reopened.next_lsn() - 1, acknowledged);
}
