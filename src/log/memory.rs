//! An [`EventLog`] in memory: no file, no network, nothing survives the
//! process. It exists to prove the log boundary: the store runs on it
//! ([`Store::open_on`](crate::Store::open_on)) with the behaviour it has on
//! the segment log, so the store asks nothing of a log outside the trait.
//! Tests and experiments use it; a host wanting durability does not.

use std::collections::VecDeque;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::boundary::{Binding, Dropped, EventLog, Locator, LogCursor};
use super::format::{self, StoreId};
use super::{Durability, Lsn, Position, Record};
use crate::error::{Error, Result};

/// The `segment` of every locator a [`MemoryLog`] hands out; the `offset`
/// is the batch's number (0 for the first batch ever appended).
const MEMORY_SEGMENT: Lsn = 1;

/// An in-memory [`EventLog`]: no file, no network, nothing survives the
/// process. The store runs on it ([`Store::open_on`](crate::Store::open_on))
/// with the behaviour it has on the segment log; tests use it to prove the
/// log boundary. Clones share
/// the log; [`MemoryLog::follower`] is a read-only handle on it.
///
/// Durability is notional: `Sync` and `Group` appends count as durable at
/// once, `None` and `Periodic` ones only after [`EventLog::sync`], so
/// [`EventLog::durable_lsn`] behaves as the contract says. Batches are
/// chained like the segment log's frames (a CRC-32 over the previous
/// value and the batch), which is the [`Binding`] snapshots record.
pub struct MemoryLog {
    shared: Arc<Shared>,
    writable: bool,
    /// This handle holds the log's writer claim ([`EventLog::claim_writer`]).
    claimed: AtomicBool,
}

/// A clone shares the log, not the writer claim.
impl Clone for MemoryLog {
    fn clone(&self) -> MemoryLog {
        MemoryLog {
            shared: Arc::clone(&self.shared),
            writable: self.writable,
            claimed: AtomicBool::new(false),
        }
    }
}

impl Drop for MemoryLog {
    fn drop(&mut self) {
        if *self.claimed.get_mut() {
            self.shared.writer_claimed.store(false, Ordering::Release);
        }
    }
}

struct Shared {
    /// Names the log in errors (`memory:<store id>`).
    name: PathBuf,
    store_id: StoreId,
    inner: Mutex<Inner>,
    /// A store writes through one of the handles ([`EventLog::claim_writer`]).
    writer_claimed: AtomicBool,
}

struct Batch {
    first_lsn: Lsn,
    payloads: Vec<Vec<u8>>,
    /// The chain value after this batch.
    chain: u32,
}

impl Batch {
    fn end_lsn(&self) -> Lsn {
        self.first_lsn + self.payloads.len() as Lsn
    }
}

struct Inner {
    batches: VecDeque<Batch>,
    /// The number of the first batch held (batches dropped before it).
    first_batch: u64,
    first_lsn: Lsn,
    next_lsn: Lsn,
    durable_lsn: Lsn,
    /// The chain value just before `first_lsn`.
    chain_before_first: u32,
}

impl Inner {
    /// The index in `batches` of the batch holding `lsn`, if held.
    fn batch_of(&self, lsn: Lsn) -> Option<usize> {
        if lsn < self.first_lsn || lsn >= self.next_lsn {
            return None;
        }
        Some(self.batches.partition_point(|batch| batch.end_lsn() <= lsn))
    }

    fn records(&self, index: usize, from_lsn: Lsn) -> Vec<Record> {
        let batch = &self.batches[index];
        let position = Position {
            segment: MEMORY_SEGMENT,
            offset: self.first_batch + index as u64,
        };
        (batch.first_lsn..)
            .zip(&batch.payloads)
            .filter(|(lsn, _)| *lsn >= from_lsn)
            .map(|(lsn, payload)| Record {
                lsn,
                position,
                payload: payload.clone(),
            })
            .collect()
    }
}

impl Default for MemoryLog {
    fn default() -> MemoryLog {
        MemoryLog::new()
    }
}

impl MemoryLog {
    /// A new, empty log with a new store identity.
    pub fn new() -> MemoryLog {
        let store_id = format::new_store_id();
        MemoryLog {
            shared: Arc::new(Shared {
                name: PathBuf::from(format!("memory:{}", format::store_id_hex(&store_id))),
                store_id,
                inner: Mutex::new(Inner {
                    batches: VecDeque::new(),
                    first_batch: 0,
                    first_lsn: 1,
                    next_lsn: 1,
                    durable_lsn: 1,
                    chain_before_first: 0,
                }),
                writer_claimed: AtomicBool::new(false),
            }),
            writable: true,
            claimed: AtomicBool::new(false),
        }
    }

    /// A read-only handle on the same log: it sees every batch the
    /// writable handles append, and appends nothing itself.
    pub fn follower(&self) -> MemoryLog {
        MemoryLog {
            shared: Arc::clone(&self.shared),
            writable: false,
            claimed: AtomicBool::new(false),
        }
    }

    /// The name the log goes by in errors: `memory:<store id in hex>`.
    pub fn name(&self) -> &std::path::Path {
        &self.shared.name
    }

    fn check_writable(&self, operation: &'static str) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::ReadOnly {
                store: self.shared.name.clone(),
                operation,
            })
        }
    }

    fn compacted(&self, first_missing: Lsn, next_present: Lsn) -> Error {
        Error::Compacted {
            store: self.shared.name.clone(),
            first_missing,
            next_present,
        }
    }
}

impl std::fmt::Debug for MemoryLog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.shared.inner.lock();
        formatter
            .debug_struct("MemoryLog")
            .field("name", &self.shared.name)
            .field("writable", &self.writable)
            .field("lsns", &(inner.first_lsn..inner.next_lsn))
            .finish_non_exhaustive()
    }
}

/// The chain value after a batch of `payloads` following `previous`.
fn chain(previous: u32, payloads: &[Vec<u8>]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&previous.to_le_bytes());
    for payload in payloads {
        hasher.update(&(payload.len() as u64).to_le_bytes());
        hasher.update(payload);
    }
    hasher.finalize()
}

impl EventLog for MemoryLog {
    fn store_id(&self) -> StoreId {
        self.shared.store_id
    }

    fn is_writable(&self) -> bool {
        self.writable
    }

    /// One store at a time writes a memory log: another handle's claim
    /// fails with `Error::Locked` naming the log until that handle is
    /// dropped (with its store).
    fn claim_writer(&self) -> Result<()> {
        if !self.writable || self.claimed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.shared
            .writer_claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| Error::Locked {
                path: self.shared.name.clone(),
            })?;
        self.claimed.store(true, Ordering::Release);
        Ok(())
    }

    fn append(
        &self,
        payloads: &[Vec<u8>],
        durability: Durability,
    ) -> Result<(Range<Lsn>, Locator)> {
        self.check_writable("append")?;
        if payloads.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let mut inner = self.shared.inner.lock();
        let previous = inner
            .batches
            .back()
            .map_or(inner.chain_before_first, |batch| batch.chain);
        let first_lsn = inner.next_lsn;
        let batch = Batch {
            first_lsn,
            payloads: payloads.to_vec(),
            chain: chain(previous, payloads),
        };
        let lsns = first_lsn..batch.end_lsn();
        let locator = Position {
            segment: MEMORY_SEGMENT,
            offset: inner.first_batch + inner.batches.len() as u64,
        };
        inner.batches.push_back(batch);
        inner.next_lsn = lsns.end;
        if matches!(durability, Durability::Sync | Durability::Group) {
            inner.durable_lsn = lsns.end;
        }
        Ok((lsns, locator))
    }

    fn read_batch(&self, locator: Locator) -> Result<Vec<Record>> {
        let inner = self.shared.inner.lock();
        if locator.segment != MEMORY_SEGMENT {
            return Err(Error::PositionNotFound {
                store: self.shared.name.clone(),
                segment: locator.segment,
                offset: locator.offset,
            });
        }
        if locator.offset < inner.first_batch {
            return Err(self.compacted(1, inner.first_lsn));
        }
        let index = usize::try_from(locator.offset - inner.first_batch).unwrap_or(usize::MAX);
        if index >= inner.batches.len() {
            return Err(Error::PositionNotFound {
                store: self.shared.name.clone(),
                segment: locator.segment,
                offset: locator.offset,
            });
        }
        Ok(inner.records(index, 0))
    }

    fn read_from(&self, lsn: Lsn) -> Box<dyn LogCursor> {
        Box::new(MemoryCursor {
            log: self.clone(),
            next_lsn: lsn,
            buffered: VecDeque::new(),
            stopped: false,
        })
    }

    fn first_lsn(&self) -> Lsn {
        self.shared.inner.lock().first_lsn
    }

    fn next_lsn(&self) -> Lsn {
        self.shared.inner.lock().next_lsn
    }

    fn durable_lsn(&self) -> Lsn {
        self.shared.inner.lock().durable_lsn
    }

    fn drop_before(&self, lsn: Lsn) -> Result<Dropped> {
        self.check_writable("compact")?;
        let mut inner = self.shared.inner.lock();
        while inner
            .batches
            .front()
            .is_some_and(|batch| batch.end_lsn() <= lsn)
        {
            let batch = inner.batches.pop_front().expect("checked above");
            inner.first_lsn = batch.end_lsn();
            inner.chain_before_first = batch.chain;
            inner.first_batch += 1;
        }
        Ok(Dropped {
            first_lsn: inner.first_lsn,
            removed: Vec::new(),
        })
    }

    fn sync(&self) -> Result<()> {
        self.check_writable("sync")?;
        let mut inner = self.shared.inner.lock();
        inner.durable_lsn = inner.next_lsn;
        Ok(())
    }

    fn binding_at(&self, lsn: Lsn) -> Result<Binding> {
        let inner = self.shared.inner.lock();
        if lsn < inner.first_lsn {
            return Ok(Binding::BeforeStart {
                first_lsn: inner.first_lsn,
            });
        }
        if lsn > inner.next_lsn {
            return Ok(Binding::PastEnd {
                next_lsn: inner.next_lsn,
            });
        }
        if lsn == inner.first_lsn {
            return Ok(Binding::Found(inner.chain_before_first));
        }
        let batch = &inner.batches[inner.batch_of(lsn - 1).expect("lsn - 1 is held")];
        if batch.end_lsn() == lsn {
            Ok(Binding::Found(batch.chain))
        } else {
            Ok(Binding::InsideBatch {
                batch_first_lsn: batch.first_lsn,
                batch_end_lsn: batch.end_lsn(),
            })
        }
    }

    fn durability(&self) -> Durability {
        Durability::Group
    }
}

/// Reads a [`MemoryLog`] from an LSN on, following it.
struct MemoryCursor {
    log: MemoryLog,
    next_lsn: Lsn,
    buffered: VecDeque<Record>,
    stopped: bool,
}

impl Iterator for MemoryCursor {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if self.stopped {
            return None;
        }
        if self.buffered.is_empty() {
            let inner = self.log.shared.inner.lock();
            if self.next_lsn < inner.first_lsn {
                self.stopped = true;
                return Some(Err(self.log.compacted(self.next_lsn, inner.first_lsn)));
            }
            let index = inner.batch_of(self.next_lsn)?;
            self.buffered = inner.records(index, self.next_lsn).into();
        }
        let record = self.buffered.pop_front()?;
        self.next_lsn = record.lsn + 1;
        Some(Ok(record))
    }
}

impl LogCursor for MemoryCursor {
    fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }
}
