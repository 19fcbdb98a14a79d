//! The writer: assigns LSNs, frames batches, and makes them durable with
//! group commit.
//!
//! Appenders encode their frame into a shared pending buffer under one mutex.
//! Whoever then finds no I/O in flight becomes the *leader*: it takes the
//! whole pending buffer (every appender that arrived meanwhile), writes it
//! with one positioned write outside the mutex and, if its own append must
//! be durable, issues one `fdatasync` for everything written so far, without
//! handing the role over in between. Appenders that arrive meanwhile encode
//! their frames for the next group and park.
//!
//! Wake-ups are targeted: each parked appender waits on its own parker,
//! registered with the LSN it waits for. When the leader's write or fsync
//! completes, it wakes exactly the waiters whose frames became written
//! (`None`, `Periodic`) or durable (`Sync`, `Group`), and, once no I/O is in
//! flight, the waiter with the lowest LSN still to commit, who leads the next
//! group. Nobody else is woken. The wake-ups are issued after the mutex is
//! released, the next leader's first.
//!
//! Durable appenders whose frames share a pending buffer form a *cohort*:
//! the first of them to park waits on its own parker as above (it is the
//! cohort's representative, which may be chosen to lead), the others park
//! together on the cohort's [`Gate`]. The gate moves with the buffer (taken
//! by the leader that writes it, then waiting for the fdatasync that covers
//! it) and is opened once, when that fdatasync completes: one futex wake
//! for the whole cohort instead of one per appender, and the members
//! return without retaking the mutex. After a poisoning every gate opens
//! with the instruction to look again under the mutex.
//!
//! A failed write or fsync poisons the writer: it acknowledges nothing more,
//! and once no I/O is in flight it truncates the active segment back to the
//! last fsynced byte so that nothing it refused can come back on reopen, and
//! wakes every waiter. An appender waiting when the writer is poisoned first
//! waits for the write or fsync in flight, then is acknowledged if its frame
//! is durable and refused if it is not: the truncation keeps exactly the
//! durable frames.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::log::format::{self, SEGMENT_HEADER_BYTES};
use crate::log::reader::{Position, SharedView};
use crate::log::recovery::Recovered;
use crate::log::segment;
use crate::log::{Durability, LogOptions, Lsn};
use crate::storage::{Storage, StorageFile};

/// Counters of the writer's work, for benchmarks and `stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Frames (atomic batches) appended.
    pub frames: u64,
    /// Positioned writes issued.
    pub writes: u64,
    /// `fdatasync` calls issued, and durable direct writes (a commit
    /// written and made durable by one call, with no `fdatasync`).
    pub syncs: u64,
    /// Segments created after the first.
    pub rolls: u64,
    /// Time spent in commits' I/O, in nanoseconds: positioned writes,
    /// `fdatasync` calls and durable direct writes issued by a leader.
    pub commit_io_nanos: u64,
    /// Time between the end of one commit's I/O and the start of the
    /// next commit's, in nanoseconds (the group fill wait included): how
    /// long the file had no commit in flight while appenders kept it busy
    /// or idle.
    pub commit_gap_nanos: u64,
    /// Time `Group` leaders held their write back for released appenders
    /// to rejoin (the group fill wait), in nanoseconds.
    pub fill_wait_nanos: u64,
    /// Group fill waits, and how many of them ended at their time limit
    /// rather than because the appenders they waited for had arrived.
    pub fills: u64,
    /// See `fills`.
    pub fill_timeouts: u64,
}

struct State {
    active_first_lsn: Lsn,
    active_path: PathBuf,
    active_file: Arc<dyn StorageFile>,
    /// The active segment's space management (the same file as
    /// `active_file`), whose preparing thread is stopped before the
    /// segment is cut; `None` if its length could not be read.
    active_space: Option<Arc<segment::PreallocatedFile>>,
    /// Bytes of the active segment including frames still in `pending`.
    active_assigned_bytes: u64,
    next_lsn: Lsn,
    /// Checksum of the last frame encoded (the next frame links to it).
    chain_crc: u32,
    /// A tamper-evident log's chain after the last frame encoded.
    chain: Option<ChainHead>,
    pending: Vec<u8>,
    spare: Vec<u8>,
    written_bytes: u64,
    written_lsn: Lsn,
    durable_bytes: u64,
    durable_lsn: Lsn,
    /// Bytes of the active segment below this offset had their writeback
    /// started (or were fsynced); see `segment::WRITEBACK_STEP_BYTES`.
    writeback_from: u64,
    writing: bool,
    syncing: bool,
    poisoned: Option<String>,
    truncated_after_poison: bool,
    stats: WriterStats,
    /// Parked appenders, each with what it waits for.
    waiters: Vec<Waiter>,
    /// Parkers to wake once the mutex is released (the next leader first).
    to_wake: Vec<Arc<Parker>>,
    /// Gates opened under the mutex, whose members are woken once it is
    /// released.
    to_open: Vec<Arc<Gate>>,
    /// The cohort of the durable appenders whose frames are in `pending`:
    /// its gate and how many joined it (its representative, which parks on
    /// its own parker, not counted). Taken with the buffer.
    pending_cohort: Cohort,
    /// Whether the pending cohort has its representative, parked in
    /// `waiters` (reset when the buffer is taken).
    pending_represented: bool,
    /// Cohorts whose frames are written but not yet durable: opened by the
    /// next fdatasync that completes.
    unsynced: Vec<Cohort>,
    /// Appenders the last commit cycle released (its leader and the waiters
    /// it completed): the ones likely to append again at once.
    released: usize,
    /// Frames encoded since the last commit cycle ended.
    arrivals: usize,
    /// How long the last fdatasync took.
    last_sync: Duration,
    /// A `Group` leader holding its write back for the released appenders
    /// to rejoin: the arrivals it waits for, and its parker.
    filling: Option<(usize, Arc<Parker>)>,
    /// When the last commit's I/O ended (`WriterStats::commit_gap_nanos`).
    io_ended: Option<Instant>,
}

/// A `Group` leader holds its write back for the appenders the previous
/// commit released to rejoin for at most this fraction of the last
/// fdatasync's duration ...
const GROUP_FILL_WAIT_DIVISOR: u32 = 2;
/// ... and never longer than this.
const GROUP_FILL_WAIT_MAX: Duration = Duration::from_millis(1);

/// What an append waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// Its frame written (`None`, `Periodic`).
    Written,
    /// Its frame durable, committed at once (`Sync`, `sync()`).
    Durable,
    /// Its frame durable; a leader may hold the write back briefly for
    /// more appenders to join (`Group`).
    DurableGroup,
}

/// What a parked thread waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitFor {
    /// Every LSN below this one written (`None`, `Periodic`).
    Written(Lsn),
    /// Every LSN below this one durable (`Sync`, `Group`, `sync()`).
    Durable(Lsn),
    /// No write and no fsync in flight (a roll, or an appender after a
    /// poisoning).
    Idle,
}

struct Waiter {
    wait_for: WaitFor,
    parker: Arc<Parker>,
}

/// A thread's own wake-up slot: set `notified`, then unpark the thread.
struct Parker {
    thread: Thread,
    notified: AtomicBool,
}

impl Parker {
    fn wake(&self) {
        self.notified.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

thread_local! {
    static PARKER: Arc<Parker> = Arc::new(Parker {
        thread: std::thread::current(),
        notified: AtomicBool::new(false),
    });
}

/// Wakes `parkers` in order, then every member of `gates` (call without
/// the writer's mutex held).
fn wake_all((parkers, gates): Wakes) {
    for parker in parkers {
        parker.wake();
    }
    for gate in gates {
        gate.wake_members();
    }
}

/// Who to wake once the writer's mutex is released: parkers (the next
/// leader first) and opened gates.
type Wakes = (Vec<Arc<Parker>>, Vec<Arc<Gate>>);

/// Takes what is queued to be woken, to deliver with `wake_all` once the
/// mutex is released.
fn take_wakes(state: &mut State) -> Wakes {
    (
        std::mem::take(&mut state.to_wake),
        std::mem::take(&mut state.to_open),
    )
}

/// A cohort's gate is still closed.
const GATE_CLOSED: u32 = 0;
/// Opened: every frame of the cohort is durable; its members return.
const GATE_DURABLE: u32 = 1;
/// Opened after a poisoning: each member looks again under the mutex.
const GATE_LOOK_AGAIN: u32 = 2;

/// The wake-up word a cohort of durable appenders parks on together (see
/// the module docs). Opened once; never joined after it is opened.
struct Gate {
    outcome: AtomicU32,
    #[cfg(not(target_os = "linux"))]
    opened: (std::sync::Mutex<()>, std::sync::Condvar),
}

impl Gate {
    fn new() -> Arc<Gate> {
        Arc::new(Gate {
            outcome: AtomicU32::new(GATE_CLOSED),
            #[cfg(not(target_os = "linux"))]
            opened: Default::default(),
        })
    }

    /// Sets the outcome (under the writer's mutex; members that look now
    /// see it without waiting).
    fn open(&self, outcome: u32) {
        debug_assert_ne!(outcome, GATE_CLOSED);
        self.outcome.store(outcome, Ordering::Release);
    }

    /// Blocks until the gate is opened; returns its outcome.
    fn wait(&self) -> u32 {
        loop {
            let outcome = self.outcome.load(Ordering::Acquire);
            if outcome != GATE_CLOSED {
                return outcome;
            }
            #[cfg(target_os = "linux")]
            {
                use rustix::thread::futex;
                // Returns at once if the word changed meanwhile; a signal
                // or a spurious wake-up just looks again.
                match futex::wait(&self.outcome, futex::Flags::PRIVATE, GATE_CLOSED, None) {
                    Ok(()) | Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
                    // Not expected from a futex wait on a valid word: never
                    // spin on it.
                    Err(_) => std::thread::yield_now(),
                }
            }
            #[cfg(not(target_os = "linux"))]
            {
                let (lock, opened) = &self.opened;
                let guard = lock.lock().unwrap_or_else(|poison| poison.into_inner());
                if self.outcome.load(Ordering::Acquire) == GATE_CLOSED {
                    drop(opened.wait(guard));
                }
            }
        }
    }

    /// Wakes every member at once (after `open`, without the writer's
    /// mutex): on Linux one `FUTEX_WAKE` for all of them.
    fn wake_members(&self) {
        #[cfg(target_os = "linux")]
        {
            use rustix::thread::futex;
            let _ = futex::wake(&self.outcome, futex::Flags::PRIVATE, i32::MAX as u32);
        }
        #[cfg(not(target_os = "linux"))]
        {
            let (lock, opened) = &self.opened;
            drop(lock.lock().unwrap_or_else(|poison| poison.into_inner()));
            opened.notify_all();
        }
    }
}

/// A gate and how many appenders parked on it.
struct Cohort {
    gate: Arc<Gate>,
    members: usize,
}

impl Cohort {
    fn new() -> Cohort {
        Cohort {
            gate: Gate::new(),
            members: 0,
        }
    }
}

/// What `append_locked` leaves its caller to do.
enum Appended {
    /// The append is complete (acknowledged).
    Done(std::ops::Range<Lsn>, Position),
    /// The frame is encoded and its appender joined a cohort: wait on its
    /// gate once the mutex is released.
    Joined(Arc<Gate>, std::ops::Range<Lsn>, Position, Commit),
}

/// Where a tamper-evident log's chain stands: the digest after the last
/// frame and the epoch of the key that tagged it (`None` before the first
/// frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChainHead {
    pub(crate) digest: crate::tamper::Digest,
    pub(crate) epoch: Option<u32>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Readers may keep the active segment's handle: its preparing
        // thread stops with the writer, so that a writer opened next on
        // the same store never shares the file with it.
        if let Some(space) = &self.state.get_mut().active_space {
            space.stop_preparing();
        }
    }
}

pub(crate) struct Writer {
    dir: PathBuf,
    /// The store identity every new segment header carries.
    store_id: format::StoreId,
    storage: Arc<dyn Storage>,
    options: LogOptions,
    state: Mutex<State>,
    view: Arc<SharedView>,
    /// After a poisoning: the LSN from which the writer truncated what it
    /// had written but not made durable (0 until then).
    taken_back_from: AtomicU64,
}

impl Writer {
    /// A writer that continues the log where recovery left it.
    pub(crate) fn new(
        dir: PathBuf,
        options: LogOptions,
        recovered: &Recovered,
        view: Arc<SharedView>,
        chain: Option<ChainHead>,
    ) -> Writer {
        let active_bytes = recovered.active_bytes;
        let next_lsn = recovered.report.next_lsn;
        let (active_file, active_space) = preallocated(
            Arc::clone(&recovered.active_file),
            &recovered.active.path,
            options.segment_bytes_max,
        );
        Writer {
            dir,
            store_id: recovered.report.store_id,
            storage: Arc::clone(&options.storage),
            options,
            state: Mutex::new(State {
                active_first_lsn: recovered.active.first_lsn,
                active_path: recovered.active.path.clone(),
                active_file,
                active_space,
                active_assigned_bytes: active_bytes,
                next_lsn,
                chain_crc: recovered.active_chain_crc,
                chain,
                pending: Vec::new(),
                spare: Vec::new(),
                written_bytes: active_bytes,
                written_lsn: next_lsn,
                durable_bytes: active_bytes,
                durable_lsn: next_lsn,
                writeback_from: active_bytes,
                writing: false,
                syncing: false,
                poisoned: None,
                truncated_after_poison: false,
                stats: WriterStats::default(),
                waiters: Vec::new(),
                to_wake: Vec::new(),
                to_open: Vec::new(),
                pending_cohort: Cohort::new(),
                pending_represented: false,
                unsynced: Vec::new(),
                released: 0,
                arrivals: 0,
                last_sync: Duration::ZERO,
                filling: None,
                io_ended: None,
            }),
            view,
            taken_back_from: AtomicU64::new(0),
        }
    }

    pub(crate) fn next_lsn(&self) -> Lsn {
        self.state.lock().next_lsn
    }

    pub(crate) fn durable_lsn(&self) -> Lsn {
        self.state.lock().durable_lsn
    }

    pub(crate) fn stats(&self) -> WriterStats {
        self.state.lock().stats
    }

    /// After a poisoning, the LSN from which events were taken back (every
    /// event at or after it is gone from the log); `None` before.
    pub(crate) fn taken_back_from(&self) -> Option<Lsn> {
        match self.taken_back_from.load(Ordering::Acquire) {
            0 => None,
            lsn => Some(lsn),
        }
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.state.lock().poisoned.is_some()
    }

    /// Appends `payloads` as one atomic frame; returns its LSN range and
    /// where the frame starts.
    pub(crate) fn append<P: AsRef<[u8]>>(
        &self,
        payloads: &[P],
        durability: Durability,
    ) -> Result<(std::ops::Range<Lsn>, Position)> {
        let (frame_bytes, events) = self.prepare_frame(payloads)?;
        let mut state = self.state.lock();
        let result = self.append_locked(&mut state, payloads, frame_bytes, events, durability);
        let wake = take_wakes(&mut state);
        drop(state);
        wake_all(wake);
        match result? {
            Appended::Done(lsns, position) => Ok((lsns, position)),
            Appended::Joined(gate, lsns, position, commit) => {
                if gate.wait() == GATE_DURABLE {
                    // The gate opens so only once every frame of the cohort
                    // is durable: nothing is left to check under the mutex.
                    return Ok((lsns, position));
                }
                let mut state = self.state.lock();
                let result = self.wait_for(&mut state, lsns.end, commit);
                let wake = take_wakes(&mut state);
                drop(state);
                wake_all(wake);
                result.map(|()| (lsns, position))
            }
        }
    }

    fn append_locked<P: AsRef<[u8]>>(
        &self,
        state: &mut MutexGuard<'_, State>,
        payloads: &[P],
        frame_bytes: u64,
        events: Option<crate::tamper::Digest>,
        durability: Durability,
    ) -> Result<Appended> {
        let (lsns, position) = self.encode_locked(state, payloads, frame_bytes, events)?;
        let (first_lsn, end_lsn) = (lsns.start, lsns.end);
        let commit = match durability {
            Durability::Sync => Commit::Durable,
            Durability::Group => Commit::DurableGroup,
            Durability::Periodic(_) | Durability::None => Commit::Written,
        };
        if commit != Commit::Written && (state.writing || state.syncing) {
            // Durable, and someone else's I/O is in flight: this frame waits
            // at least for the next commit. The cohort's first appender
            // parks on its own (it may be asked to lead); the others join
            // the gate.
            if state.pending_represented {
                state.pending_cohort.members += 1;
                let gate = Arc::clone(&state.pending_cohort.gate);
                return Ok(Appended::Joined(gate, first_lsn..end_lsn, position, commit));
            }
            state.pending_represented = true;
        }
        self.wait_for(state, end_lsn, commit)?;
        Ok(Appended::Done(first_lsn..end_lsn, position))
    }

    /// Checks a batch against the limits and measures its frame, before
    /// the mutex is taken: the frame's bytes, and for a tamper-evident log
    /// the digest of its events (hashed here, so that only the chain step,
    /// two short hashes, runs under the mutex).
    fn prepare_frame<P: AsRef<[u8]>>(
        &self,
        payloads: &[P],
    ) -> Result<(u64, Option<crate::tamper::Digest>)> {
        check_batch(payloads)?;
        let mut frame_bytes = format::frame_bytes(payloads) as u64;
        let events = match &self.options.tamper {
            Some(_) => {
                let body = frame_bytes - format::FRAME_HEADER_BYTES as u64;
                let limit = (format::BATCH_BYTES_MAX - format::FRAME_TRAILER_BYTES) as u64;
                if body > limit {
                    return Err(Error::LimitExceeded {
                        what: "batch bytes of a tamper-evident store (payloads and length prefixes; the frame's trailer takes FRAME_TRAILER_BYTES of BATCH_BYTES_MAX)",
                        actual: body,
                        limit,
                        constant: "BATCH_BYTES_MAX",
                    });
                }
                frame_bytes += format::FRAME_TRAILER_BYTES as u64;
                Some(crate::tamper::events_digest(payloads))
            }
            None => None,
        };
        Ok((frame_bytes, events))
    }

    /// Encodes a frame of `payloads` into the pending buffer (rolling to a
    /// new segment first if it does not fit): assigns its LSNs, links it
    /// to the chain. Nothing is written yet.
    fn encode_locked<P: AsRef<[u8]>>(
        &self,
        state: &mut MutexGuard<'_, State>,
        payloads: &[P],
        frame_bytes: u64,
        events: Option<crate::tamper::Digest>,
    ) -> Result<(std::ops::Range<Lsn>, Position)> {
        self.check_poison(state)?;
        if self.needs_roll(state, frame_bytes) {
            self.roll(state, frame_bytes)?;
        }
        let first_lsn = state.next_lsn;
        let durable_lsn = state.durable_lsn;
        let position = Position {
            segment: state.active_first_lsn,
            offset: state.active_assigned_bytes,
        };
        let chain_crc = state.chain_crc;
        let trailer = match (events, state.chain, &self.options.tamper) {
            (Some(events), Some(head), Some(tamper)) => {
                let digest = crate::tamper::chain_digest(
                    &head.digest,
                    &self.store_id,
                    first_lsn,
                    payloads.len() as u32,
                    &events,
                );
                let tag = tamper.key.tag(first_lsn, &digest, head.epoch);
                let epoch = tamper.key.epoch();
                state.chain = Some(ChainHead {
                    digest,
                    epoch: Some(epoch),
                });
                Some(format::FrameTrailer {
                    auth_lsn: first_lsn,
                    key_epoch: epoch,
                    reserved: 0,
                    digest,
                    tag,
                })
            }
            _ => None,
        };
        state.chain_crc = format::encode_frame_with_trailer(
            &mut state.pending,
            first_lsn,
            durable_lsn,
            chain_crc,
            payloads,
            trailer.as_ref(),
        );
        let end_lsn = first_lsn + payloads.len() as u64;
        state.next_lsn = end_lsn;
        state.active_assigned_bytes += frame_bytes;
        state.stats.frames += 1;
        state.arrivals += 1;
        if let Some((target, _)) = &state.filling {
            if state.arrivals >= *target {
                let (_, leader) = state.filling.take().expect("filling");
                state.to_wake.push(leader);
            }
        }
        Ok((first_lsn..end_lsn, position))
    }

    /// Appends each of `batches` as its own atomic frame, in order, and
    /// makes them all durable with one commit, as [`Writer::sync`] does
    /// (issued at once; one durable write when everything written before
    /// is durable). Returns, per batch, its LSN range and where its frame
    /// starts, or the error that kept it out: a batch over the limits
    /// fails alone; after a failed write or sync every frame that is not
    /// durable fails (the poisoned writer takes them back).
    pub(crate) fn append_frames<P: AsRef<[u8]>>(
        &self,
        batches: &[&[P]],
    ) -> Vec<Result<(std::ops::Range<Lsn>, Position)>> {
        let prepared: Vec<_> = batches
            .iter()
            .map(|payloads| self.prepare_frame(payloads))
            .collect();
        let mut state = self.state.lock();
        let mut results = Vec::with_capacity(batches.len());
        let mut end_lsn = None;
        for (payloads, prepared) in batches.iter().zip(prepared) {
            let encoded = prepared.and_then(|(frame_bytes, events)| {
                self.encode_locked(&mut state, payloads, frame_bytes, events)
            });
            if let Ok((lsns, _)) = &encoded {
                end_lsn = Some(lsns.end);
            }
            results.push(encoded);
        }
        if let Some(end_lsn) = end_lsn {
            if self.wait_for(&mut state, end_lsn, Commit::Durable).is_err() {
                // Poisoned (the one way `wait_for` fails): a frame is
                // acknowledged only if it is durable.
                let durable_lsn = state.durable_lsn;
                let cause = state.poisoned.clone().unwrap_or_default();
                for result in &mut results {
                    if matches!(result, Ok((lsns, _)) if lsns.end > durable_lsn) {
                        *result = Err(Error::Poisoned {
                            store: self.dir.clone(),
                            cause: cause.clone(),
                        });
                    }
                }
            }
        }
        let wake = take_wakes(&mut state);
        drop(state);
        wake_all(wake);
        results
    }

    /// A tamper-evident log's head: the last LSN appended (0 if none) and
    /// the chain digest after it.
    pub(crate) fn chain_head(&self) -> Option<(Lsn, crate::tamper::Digest)> {
        let state = self.state.lock();
        state.chain.map(|head| (state.next_lsn - 1, head.digest))
    }

    /// The log's tamper evidence options, if it is tamper-evident.
    pub(crate) fn tamper(&self) -> Option<&crate::tamper::TamperOptions> {
        self.options.tamper.as_ref()
    }

    /// The store's identity.
    pub(crate) fn store_id(&self) -> format::StoreId {
        self.store_id
    }

    /// Makes everything appended so far durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let mut state = self.state.lock();
        let result = self.check_poison(&state).and_then(|()| {
            let end_lsn = state.next_lsn;
            self.wait_for(&mut state, end_lsn, Commit::Durable)
        });
        let wake = take_wakes(&mut state);
        drop(state);
        wake_all(wake);
        result
    }

    /// On a clean close, after [`Writer::sync`]: cuts the space allocated
    /// past the active segment's last frame, so a closed store takes the
    /// room of its frames only (the next open allocates again). Skipped
    /// unless every written frame is durable; a crash during the cut leaves
    /// the file at its old length or at its data's end, both of which
    /// recovery reads (`docs/format.md` 5.7).
    pub(crate) fn release_unused_space(&self) -> Result<()> {
        let mut state = self.state.lock();
        while state.writing || state.syncing {
            self.park(&mut state, WaitFor::Idle);
        }
        self.check_poison(&state)?;
        if !state.pending.is_empty() || state.durable_lsn < state.written_lsn {
            return Ok(());
        }
        if let Some(space) = &state.active_space {
            space.stop_preparing();
        }
        segment::trim_to_data(state.active_file.as_ref(), state.written_bytes).map_err(Error::io(
            "cut the preallocated space of",
            &state.active_path,
        ))
    }

    /// Whether a frame of `frame_bytes` must go into a new segment: it would
    /// grow a non-empty active segment past `segment_bytes_max`.
    fn needs_roll(&self, state: &State, frame_bytes: u64) -> bool {
        state.active_assigned_bytes > SEGMENT_HEADER_BYTES as u64
            && state.active_assigned_bytes + frame_bytes > self.options.segment_bytes_max
    }

    fn check_poison(&self, state: &State) -> Result<()> {
        match &state.poisoned {
            Some(cause) => Err(Error::Poisoned {
                store: self.dir.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Blocks until every LSN below `end_lsn` is written (and, with
    /// `durable`, fsynced), leading a commit when no I/O is in flight.
    fn wait_for(
        &self,
        state: &mut MutexGuard<'_, State>,
        end_lsn: Lsn,
        commit: Commit,
    ) -> Result<()> {
        let durable = commit != Commit::Written;
        loop {
            if state.poisoned.is_some() {
                // After a poisoning only what is durable survives (the
                // writer truncates the rest). A write or fsync issued before
                // the poisoning may still be in flight and make this frame
                // durable: wait for it, then acknowledge the frame if it is
                // durable and refuse it if it is not, so that nothing
                // refused comes back on reopen and nothing acknowledged is
                // taken back.
                if state.writing || state.syncing {
                    self.park(state, WaitFor::Idle);
                    continue;
                }
                if state.durable_lsn >= end_lsn {
                    return Ok(());
                }
                return self.check_poison(state);
            }
            let done = if durable {
                state.durable_lsn >= end_lsn
            } else {
                state.written_lsn >= end_lsn
            };
            if done {
                return Ok(());
            }
            if !state.writing && !state.syncing {
                self.lead(state, commit);
                continue;
            }
            let wait_for = if durable {
                WaitFor::Durable(end_lsn)
            } else {
                WaitFor::Written(end_lsn)
            };
            self.park(state, wait_for);
        }
    }

    /// Parks this thread until a completion it waits for wakes it. Wakes
    /// what is queued in `to_wake` first.
    fn park(&self, state: &mut MutexGuard<'_, State>, wait_for: WaitFor) {
        let parker = PARKER.with(Arc::clone);
        parker.notified.store(false, Ordering::Relaxed);
        state.waiters.push(Waiter {
            wait_for,
            parker: Arc::clone(&parker),
        });
        let wake = take_wakes(state);
        MutexGuard::unlocked(state, || {
            wake_all(wake);
            // Whoever wakes this thread has removed its entry first.
            while !parker.notified.load(Ordering::Acquire) {
                std::thread::park();
            }
        });
    }

    /// One commit cycle, with no I/O in flight: writes everything pending
    /// and, for a durable append, fdatasyncs everything written. Queues the
    /// wake-ups of the waiters it completes and of the next leader.
    fn lead(&self, state: &mut MutexGuard<'_, State>, commit: Commit) {
        debug_assert!(!state.writing && !state.syncing);
        let durable = commit != Commit::Written;
        // Members of the cohorts this cycle made durable.
        let mut opened = 0;
        let wrote = !state.pending.is_empty();
        if wrote {
            state.writing = true;
            if commit == Commit::DurableGroup && state.arrivals < state.released {
                self.fill_group(state);
            }
            let spare = std::mem::take(&mut state.spare);
            let buffer = std::mem::replace(&mut state.pending, spare);
            let cohort = self.take_pending_cohort(state);
            let offset = state.written_bytes;
            let end_lsn = state.next_lsn;
            let file = Arc::clone(&state.active_file);
            // A durable commit over a file whose every written byte is
            // durable already is one durable write (a direct write where
            // the storage has it; `StorageFile::write_durable_at`), with no
            // separate fdatasync. After writes of `None`/`Periodic` appends
            // not yet synced, it is a write and an fdatasync of everything.
            let direct = durable && state.durable_bytes == state.written_bytes;
            let writeback = if durable {
                None
            } else {
                self.writeback_range(state, offset + buffer.len() as u64)
            };
            note_io_start(state, false);
            let (result, took) = MutexGuard::unlocked(state, || {
                let started = Instant::now();
                if direct {
                    let result = file.write_durable_at(&buffer, offset);
                    return (result, started.elapsed());
                }
                let result = file.write_all_at(&buffer, offset);
                if let (Ok(()), Some((from, to))) = (&result, writeback) {
                    // A hint: a failure shows at the next fdatasync.
                    if let Err(error) = file.start_writeback(from, to - from) {
                        tracing::debug!(error = %error, "could not start the segment's writeback");
                    }
                }
                (result, started.elapsed())
            });
            state.writing = false;
            state.stats.writes += 1;
            note_io_end(state, took);
            // Written or not, the cohort waits for an fdatasync now (after a
            // failed write, for the poisoning to open its gate).
            state.unsynced.extend(cohort);
            match result {
                Ok(()) => {
                    state.written_bytes = offset + buffer.len() as u64;
                    state.written_lsn = end_lsn;
                    if direct {
                        state.last_sync = took;
                        state.stats.syncs += 1;
                        state.durable_bytes = state.written_bytes;
                        state.durable_lsn = end_lsn;
                        let covered = std::mem::take(&mut state.unsynced);
                        opened += open_cohorts(state, covered, GATE_DURABLE);
                    }
                    self.view
                        .publish_active(state.written_bytes, state.written_lsn);
                    let mut buffer = buffer;
                    buffer.clear();
                    state.spare = buffer;
                }
                Err(error) if direct => self.poison(state, "durable write to", &error),
                Err(error) => self.poison(state, "write to", &error),
            }
        }
        if durable && state.poisoned.is_none() && state.durable_lsn < state.written_lsn {
            state.syncing = true;
            // Appenders that only wait for the write need not wait for the
            // fsync too (the fsync in flight keeps anyone from leading).
            self.collect_wakes(state);
            let wake = take_wakes(state);
            // Every cohort written so far: this fdatasync covers them.
            let covered = std::mem::take(&mut state.unsynced);
            let target_bytes = state.written_bytes;
            let target_lsn = state.written_lsn;
            let file = Arc::clone(&state.active_file);
            // After this commit's write, its I/O goes on: no gap.
            note_io_start(state, wrote);
            let result = MutexGuard::unlocked(state, || {
                wake_all(wake);
                let started = Instant::now();
                let result = file.sync_data();
                (result, started.elapsed())
            });
            let (result, took) = result;
            state.last_sync = took;
            state.syncing = false;
            state.stats.syncs += 1;
            note_io_end(state, took);
            match result {
                Ok(()) => {
                    if target_lsn > state.durable_lsn {
                        state.durable_lsn = target_lsn;
                        state.durable_bytes = target_bytes;
                    }
                    opened += open_cohorts(state, covered, GATE_DURABLE);
                }
                Err(error) => {
                    // Opened below with the poisoning, with every other gate.
                    state.unsynced.extend(covered);
                    self.poison(state, "fdatasync", &error);
                }
            }
        }
        let completed = self.after_io(state) + opened;
        // The cycle is over: its leader and the waiters it completed are
        // released, and may append again at once.
        state.released = 1 + completed;
        state.arrivals = 0;
    }

    /// Under `None` and `Periodic`: the range of the active segment whose
    /// writeback a write ending at `end` should start, if a step's worth
    /// has accumulated past what was started or fsynced before (marked as
    /// started). It ends a step behind `end`, on an alignment boundary, so
    /// that no page (or larger page-cache folio) the next frames go on
    /// writing into is written back half-filled, then dirtied and written
    /// again.
    fn writeback_range(&self, state: &mut State, end: u64) -> Option<(u64, u64)> {
        let step = segment::writeback_step(self.options.segment_bytes_max);
        let from = state.writeback_from.max(state.durable_bytes);
        let align = segment::WRITEBACK_ALIGN_BYTES.min(step);
        let behind = end.saturating_sub(step);
        let to = behind - behind % align;
        if to < from + step {
            return None;
        }
        state.writeback_from = to;
        Some((from, to))
    }

    /// Holds the write back (the leader's role taken, `writing` set) until
    /// as many frames arrived since the last cycle as it released, or for
    /// a fraction of the last fdatasync's duration: under load the released
    /// appenders rejoin this group instead of forming the next one, so a
    /// group can hold nearly every appender instead of about half of them.
    fn fill_group(&self, state: &mut MutexGuard<'_, State>) {
        let wait = (state.last_sync / GROUP_FILL_WAIT_DIVISOR).min(GROUP_FILL_WAIT_MAX);
        if wait.is_zero() {
            return;
        }
        let began = Instant::now();
        let deadline = began + wait;
        let parker = PARKER.with(Arc::clone);
        parker.notified.store(false, Ordering::Relaxed);
        state.filling = Some((state.released, Arc::clone(&parker)));
        let wake = take_wakes(state);
        MutexGuard::unlocked(state, || {
            wake_all(wake);
            while !parker.notified.load(Ordering::Acquire) {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                std::thread::park_timeout(deadline - now);
            }
        });
        state.stats.fills += 1;
        let timed_out = state.filling.take().is_some();
        if timed_out {
            state.stats.fill_timeouts += 1;
        } else {
            // An appender reached the target as the wait timed out and
            // queued this thread's wake-up: take it back, or wait for it if
            // it is being delivered, so that no stale wake-up ends a later
            // park early.
            if let Some(index) = state
                .to_wake
                .iter()
                .position(|queued| Arc::ptr_eq(queued, &parker))
            {
                state.to_wake.remove(index);
            } else {
                MutexGuard::unlocked(state, || {
                    while !parker.notified.load(Ordering::Acquire) {
                        std::thread::park();
                    }
                });
            }
        }
        state.stats.fill_wait_nanos += nanos(began.elapsed());
    }

    /// Moves the waiters that can go on now from `waiters` to `to_wake`:
    /// those whose LSN is written or durable as they asked, those waiting
    /// for idle I/O when none is in flight, everyone after a poisoning; and,
    /// with no I/O in flight, the remaining waiter with the lowest LSN, to
    /// lead the next commit (queued first). Returns how many waiters can go
    /// on (the next leader not counted).
    fn collect_wakes(&self, state: &mut State) -> usize {
        let idle = !state.writing && !state.syncing;
        let poisoned = state.poisoned.is_some();
        let (written, durable) = (state.written_lsn, state.durable_lsn);
        let mut next_leader: Option<(Lsn, usize)> = None;
        let mut ready_count = 0;
        let mut index = 0;
        while index < state.waiters.len() {
            let ready = poisoned
                || match state.waiters[index].wait_for {
                    WaitFor::Written(lsn) => lsn <= written,
                    WaitFor::Durable(lsn) => lsn <= durable,
                    WaitFor::Idle => idle,
                };
            if ready {
                let waiter = state.waiters.swap_remove(index);
                state.to_wake.push(waiter.parker);
                ready_count += 1;
                continue;
            }
            let lsn = match state.waiters[index].wait_for {
                WaitFor::Written(lsn) | WaitFor::Durable(lsn) => lsn,
                WaitFor::Idle => 0,
            };
            if next_leader.is_none_or(|(lowest, _)| lsn < lowest) {
                next_leader = Some((lsn, index));
            }
            index += 1;
        }
        if poisoned {
            // Every appender on a gate looks again under the mutex, where
            // the poisoning decides (see `wait_for`).
            let pending = self.take_pending_cohort(state);
            let cohorts: Vec<Cohort> = state.unsynced.drain(..).chain(pending).collect();
            ready_count += open_cohorts(state, cohorts, GATE_LOOK_AGAIN);
        }
        if idle && !poisoned {
            if let Some((_, index)) = next_leader {
                let waiter = state.waiters.swap_remove(index);
                state.to_wake.insert(0, waiter.parker);
            }
        }
        ready_count
    }

    /// Takes the pending buffer's cohort (with the buffer: its frames go
    /// wherever the buffer goes) and starts a new one; `None` if nobody
    /// joined it.
    fn take_pending_cohort(&self, state: &mut State) -> Option<Cohort> {
        state.pending_represented = false;
        if state.pending_cohort.members == 0 {
            // Nobody waits on its gate: it stays the pending one (a lone
            // appender's commits allocate nothing).
            return None;
        }
        Some(std::mem::replace(&mut state.pending_cohort, Cohort::new()))
    }

    fn poison(&self, state: &mut State, operation: &str, error: &std::io::Error) {
        let cause = format!("{operation} {}: {error}", state.active_path.display());
        self.poison_with(state, cause);
    }

    /// Poisons the writer from code that holds the mutex throughout (a roll)
    /// and returns the resulting error.
    fn fail_under_lock(
        &self,
        state: &mut State,
        operation: &str,
        error: &std::io::Error,
    ) -> Result<()> {
        self.poison(state, operation, error);
        self.after_io(state);
        self.check_poison(state)
    }

    fn poison_with(&self, state: &mut State, cause: String) {
        tracing::error!(store = %self.dir.display(), cause = %cause, "writer poisoned; reopen the store");
        if state.poisoned.is_none() {
            state.poisoned = Some(cause);
        }
    }

    /// Queues the wake-ups of the waiters that can go on (see
    /// `collect_wakes`), and after a poisoning with no I/O left in flight,
    /// removes every byte past the last fsync. Returns how many waiters can
    /// go on.
    fn after_io(&self, state: &mut State) -> usize {
        if state.poisoned.is_some()
            && !state.writing
            && !state.syncing
            && !state.truncated_after_poison
        {
            state.truncated_after_poison = true;
            state.pending.clear();
            // Announced before readers see the shorter log, so a reader that
            // fails on a taken-back frame can tell why.
            self.taken_back_from
                .store(state.durable_lsn, Ordering::Release);
            self.view
                .publish_active(state.durable_bytes, state.durable_lsn);
            // Leave a durable note first: the next open then writes into a
            // fresh segment, never over the offsets of refused frames.
            let marker = self.dir.join(crate::log::recovery::POISONED_MARKER);
            let record = crate::log::recovery::poisoned_marker_record(
                state.active_first_lsn,
                state.durable_bytes,
            );
            let noted = self
                .storage
                .create(&marker)
                .and_then(|file| {
                    file.write_all_at(&record, 0)?;
                    file.sync_all()
                })
                .and_then(|()| self.storage.sync_dir(&self.dir));
            if let Err(error) = noted {
                tracing::error!(marker = %marker.display(), error = %error, "could not leave the poisoned marker");
            }
            let file = &state.active_file;
            let truncated = file
                .set_len(state.durable_bytes)
                .and_then(|()| file.sync_all());
            if let Err(error) = truncated {
                tracing::error!(
                    segment = %state.active_path.display(),
                    error = %error,
                    "could not truncate unsynced bytes after poisoning"
                );
            }
        }
        self.collect_wakes(state)
    }

    /// Seals the active segment (all of it written and fsynced) and starts a
    /// new one at the next LSN. Runs under the mutex: rolls are rare.
    fn roll(&self, state: &mut MutexGuard<'_, State>, frame_bytes: u64) -> Result<()> {
        while state.writing || state.syncing {
            self.park(state, WaitFor::Idle);
        }
        self.check_poison(state)?;
        if !self.needs_roll(state, frame_bytes) {
            // Another appender rolled while this one waited.
            return Ok(());
        }
        let file = Arc::clone(&state.active_file);
        if !state.pending.is_empty() {
            let buffer = std::mem::take(&mut state.pending);
            let cohort = self.take_pending_cohort(state);
            state.unsynced.extend(cohort);
            state.stats.writes += 1;
            if let Err(error) = file.write_all_at(&buffer, state.written_bytes) {
                return self.fail_under_lock(state, "write to", &error);
            }
            state.written_bytes += buffer.len() as u64;
            state.written_lsn = state.next_lsn;
            self.view
                .publish_active(state.written_bytes, state.written_lsn);
        }
        if state.durable_lsn < state.written_lsn {
            state.stats.syncs += 1;
            if let Err(error) = file.sync_data() {
                return self.fail_under_lock(state, "fdatasync", &error);
            }
            state.durable_lsn = state.written_lsn;
            state.durable_bytes = state.written_bytes;
        }
        // Everything written is durable: so is every cohort waiting for it.
        let covered = std::mem::take(&mut state.unsynced);
        open_cohorts(state, covered, GATE_DURABLE);
        // Nothing but the writer may write into the file from here on.
        if let Some(space) = &state.active_space {
            space.stop_preparing();
        }
        // The segment is sealed only once its file ends at its last frame.
        if let Err(error) = segment::trim_to_data(file.as_ref(), state.written_bytes) {
            return self.fail_under_lock(state, "cut the preallocated space of", &error);
        }
        let next_lsn = state.next_lsn;
        // The active segment holds frames (`needs_roll`): the chain value
        // is its last frame's checksum, which the new header links to.
        let link = format::SegmentLink {
            store_id: self.store_id,
            prev_chain: state.chain_crc,
            keyed: self.options.tamper.is_some(),
        };
        match segment::create(self.storage.as_ref(), &self.dir, next_lsn, link) {
            Ok((created, handle, header_crc)) => {
                state.chain_crc = header_crc;
                let sealed_path = std::mem::replace(&mut state.active_path, created.path.clone());
                state.active_first_lsn = created.first_lsn;
                (state.active_file, state.active_space) = preallocated(
                    Arc::from(handle),
                    &created.path,
                    self.options.segment_bytes_max,
                );
                let header = SEGMENT_HEADER_BYTES as u64;
                state.active_assigned_bytes = header;
                state.written_bytes = header;
                state.durable_bytes = header;
                state.writeback_from = header;
                state.stats.rolls += 1;
                self.view.seal_and_start(
                    sealed_path,
                    created.first_lsn,
                    created.path,
                    Arc::clone(&state.active_file),
                );
                // The roll made every frame durable: wake their waiters.
                self.collect_wakes(state);
                Ok(())
            }
            Err(error) => {
                let cause = format!("create segment at LSN {next_lsn}: {error}");
                self.poison_with(state, cause);
                self.after_io(state);
                self.check_poison(state)
            }
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }
}

/// As a commit's I/O starts: counts the time since the last commit's I/O
/// ended into `WriterStats::commit_gap_nanos`, unless `continues` (the
/// same commit's write came just before).
fn note_io_start(state: &mut State, continues: bool) {
    match state.io_ended.take() {
        Some(ended) if !continues => state.stats.commit_gap_nanos += nanos(ended.elapsed()),
        _ => {}
    }
}

/// As a commit's write or sync ends, after `took`.
fn note_io_end(state: &mut State, took: Duration) {
    state.stats.commit_io_nanos += nanos(took);
    state.io_ended = Some(Instant::now());
}

/// `duration` in whole nanoseconds, saturating.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Opens the gates of `cohorts` with `outcome` and queues their members'
/// wake-up; returns how many members they had.
fn open_cohorts(
    state: &mut State,
    cohorts: impl IntoIterator<Item = Cohort>,
    outcome: u32,
) -> usize {
    let mut members = 0;
    for cohort in cohorts {
        cohort.gate.open(outcome);
        members += cohort.members;
        state.to_open.push(cohort.gate);
    }
    members
}

/// The active segment `file` as the writer writes it: its space allocated
/// ahead of the frames (`segment::PreallocatedFile`). A file whose length
/// cannot be read is written as it is (appending).
/// Also returns the wrapper itself, whose preparing thread the writer stops.
fn preallocated(
    file: Arc<dyn StorageFile>,
    path: &Path,
    limit: u64,
) -> (Arc<dyn StorageFile>, Option<Arc<segment::PreallocatedFile>>) {
    match segment::PreallocatedFile::new(Arc::clone(&file), path.to_path_buf(), limit) {
        Ok(wrapped) => {
            let wrapped = Arc::new(wrapped);
            (Arc::clone(&wrapped) as Arc<dyn StorageFile>, Some(wrapped))
        }
        Err(error) => {
            tracing::debug!(segment = %path.display(), error = %error, "cannot preallocate segment space; appending");
            (file, None)
        }
    }
}

/// Checks a batch against the limits before anything is encoded.
pub(crate) fn check_batch<P: AsRef<[u8]>>(payloads: &[P]) -> Result<()> {
    if payloads.is_empty() {
        return Err(Error::EmptyBatch);
    }
    if payloads.len() > format::BATCH_EVENTS_MAX {
        return Err(Error::LimitExceeded {
            what: "events in the batch",
            actual: payloads.len() as u64,
            limit: format::BATCH_EVENTS_MAX as u64,
            constant: "BATCH_EVENTS_MAX",
        });
    }
    let mut body = 0u64;
    for (index, payload) in payloads.iter().enumerate() {
        let length = payload.as_ref().len();
        if length > format::EVENT_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: if index == 0 && payloads.len() == 1 {
                    "event payload bytes"
                } else {
                    "an event payload in the batch (bytes)"
                },
                actual: length as u64,
                limit: format::EVENT_BYTES_MAX as u64,
                constant: "EVENT_BYTES_MAX",
            });
        }
        body += (format::EVENT_LENGTH_PREFIX_BYTES + length) as u64;
    }
    if body > format::BATCH_BYTES_MAX as u64 {
        return Err(Error::LimitExceeded {
            what: "batch bytes (payloads and length prefixes)",
            actual: body,
            limit: format::BATCH_BYTES_MAX as u64,
            constant: "BATCH_BYTES_MAX",
        });
    }
    Ok(())
}
