//! A simulated disk for crash and fault tests: [`SimStorage`].
//!
//! `SimStorage` implements [`Storage`] in memory and models what a disk
//! keeps after a power loss the way the ALICE paper's crash model does
//! ("All File Systems Are Not Created Equal", OSDI 2014):
//!
//! - Each file has *durable* bytes and the writes and truncations made since
//!   its last `sync_data` / `sync_all`, kept as an ordered list.
//! - Directory entries (creations, renames, removals, new directories) are
//!   durable only after `sync_dir` of the directory that holds them. An
//!   fsync of a file does not make its name durable.
//! - [`SimStorage::crash`] returns the disk as it could be after a power
//!   loss: synced bytes are kept; each unsynced write is independently kept
//!   whole, dropped, kept as a prefix, torn at an arbitrary byte, zero-filled
//!   or filled with garbage (or, with [`SimStorage::set_stale_reuse`], with
//!   stale bytes the file held before a truncation); each unsynced
//!   truncation is kept or dropped; each unsynced
//!   directory operation is kept or forgotten. Because every write's fate is
//!   independent, any order in which non-overlapping writes could have
//!   reached the disk is covered (overlapping writes keep their order: the
//!   later one replaced the earlier in the page cache).
//! - `StorageFile::write_durable_at` is a durable direct write (`O_DIRECT`
//!   with `RWF_DSYNC` on the real file system): the aligned blocks
//!   ([`DIRECT_BLOCK_BYTES`]) the bytes land in are written from the file's
//!   bytes with the new ones applied, and made durable with the length they
//!   need, without syncing the rest of the file. A power cut or an EIO while
//!   it runs tears it, only inside those blocks: each byte of them is the
//!   old or the new one, so bytes of the blocks acknowledged before (the
//!   same in both) never change. With unsynced changes in the file it is a
//!   write and a sync (the log calls it only when the file has none).
//! - `StorageFile::prewrite` (space prepared ahead of the frames by a
//!   background thread) is modelled when [`SimStorage::set_prewrite`] turns
//!   it on: an allocation, a write of zeros and a sync, each an operation
//!   that can fail or be cut like any other. Off by default: the thread's
//!   operations interleave with the test's by timing, so seeds with it on
//!   are not reproducible.
//! - `StorageFile::start_writeback` is counted and changes nothing: an
//!   unsynced write may reach the disk before any fsync anyway, which the
//!   independent fates above already cover.
//! - [`SimStorage::process_crash`] returns the disk as another process sees
//!   it after this one died: nothing is lost, but what was not synced is
//!   still not durable (a later power loss can still lose it).
//!
//! Faults ([`Fault`]) are injected on demand: EIO on the n-th write, fsync,
//! create or rename; ENOSPC once the files would grow past a capacity (a
//! short write first); and a power cut after the n-th mutating operation
//! ([`SimStorage::power_cut_after`]), after which every mutating operation
//! fails, to crash in the middle of any protocol (recovery included).
//!
//! Every decision is drawn from a small deterministic generator seeded by
//! the caller, so a run that does the same operations in the same order is
//! reproduced exactly from its seed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::storage::{
    LockGuard, SealedFile, SharedBytes, Storage, StorageFile, DIRECT_BLOCK_BYTES,
};

/// A fault to inject into a [`SimStorage`]. Counts start when the fault is
/// injected; each fault fires once, except `DiskFull`, which lasts until
/// [`SimStorage::clear_faults`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The `nth` write from now (1 = the next one) fails with EIO, possibly
    /// after writing a prefix of its bytes.
    WriteEio {
        /// Which write fails, counting from 1.
        nth: u64,
    },
    /// The `nth` fsync from now (`sync_data`, `sync_all` or `sync_dir`)
    /// fails with EIO. The unsynced writes stay unsynced: a crash may still
    /// keep or lose each of them.
    FsyncEio {
        /// Which fsync fails, counting from 1.
        nth: u64,
    },
    /// The `nth` file creation from now fails with EIO.
    CreateEio {
        /// Which creation fails, counting from 1.
        nth: u64,
    },
    /// The `nth` rename from now fails with EIO.
    RenameEio {
        /// Which rename fails, counting from 1.
        nth: u64,
    },
    /// The disk is full once its files grow by `free_bytes` more bytes: a
    /// write past that writes what fits, then fails with ENOSPC.
    DiskFull {
        /// Bytes the files may still grow by.
        free_bytes: u64,
    },
}

/// Counters of what a [`SimStorage`] (and the disks it was crashed from) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Positioned writes.
    pub writes: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// `sync_data`, `sync_all` and `sync_dir` calls.
    pub fsyncs: u64,
    /// Injected faults that fired (each failed operation counts once).
    pub faults_fired: u64,
    /// Power losses simulated ([`SimStorage::crash`]).
    pub crashes: u64,
    /// Process crashes simulated ([`SimStorage::process_crash`]).
    pub process_crashes: u64,
    /// Unsynced writes a crash kept whole.
    pub writes_kept: u64,
    /// Unsynced writes a crash lost, tore, zeroed or filled with garbage.
    pub writes_damaged: u64,
    /// `StorageFile::start_writeback` hints received.
    pub writeback_hints: u64,
    /// Durable direct writes (`StorageFile::write_durable_at` on a file
    /// with no unsynced change), torn ones included.
    pub durable_writes: u64,
    /// Durable direct writes a power cut or an EIO tore.
    pub durable_writes_torn: u64,
    /// Ranges prepared by `StorageFile::prewrite` (with
    /// [`SimStorage::set_prewrite`]).
    pub prewrites: u64,
}

/// SplitMix64: tiny, deterministic, good enough to choose fates.
#[derive(Debug, Clone)]
struct SimRng(u64);

impl SimRng {
    fn new(seed: u64) -> SimRng {
        SimRng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut value = self.0;
        value = (value ^ (value >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        value = (value ^ (value >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        value ^ (value >> 31)
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next_u64() % bound
        }
    }

    fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// One change to a file's bytes not yet made durable.
#[derive(Debug, Clone)]
enum DataOp {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Default)]
struct Inode {
    /// What survives any crash.
    durable: Vec<u8>,
    /// What reads see: `durable` with `pending` applied.
    current: Vec<u8>,
    /// Changes since the last fsync, in order.
    pending: Vec<DataOp>,
    /// Bytes the file held before truncations (stale data a crash can expose
    /// when the file grows again over the same blocks).
    ghost: Vec<u8>,
    /// Open handles (an unlinked file with open handles still takes space).
    handles: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Dir,
    File(u64),
}

/// A change to a directory's entries not yet made durable by `sync_dir`.
#[derive(Debug, Clone)]
enum DirOp {
    Insert(PathBuf, Node),
    Remove(PathBuf),
    /// A rename within one directory (atomic: kept or forgotten whole).
    Rename(PathBuf, PathBuf, Node),
}

#[derive(Debug, Clone, Default)]
struct Faults {
    write_eio: Option<u64>,
    fsync_eio: Option<u64>,
    create_eio: Option<u64>,
    rename_eio: Option<u64>,
    capacity_bytes: Option<u64>,
    power_cut_after: Option<u64>,
    powered_off: bool,
}

#[derive(Debug, Clone)]
struct Disk {
    /// The namespace as the running system sees it.
    current: BTreeMap<PathBuf, Node>,
    /// The namespace that survives a crash.
    durable: BTreeMap<PathBuf, Node>,
    /// Unsynced directory operations, per directory, in order.
    pending_dir: BTreeMap<PathBuf, Vec<DirOp>>,
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    faults: Faults,
    stats: SimStats,
    rng: SimRng,
    /// Whether space freed by a truncation keeps its old bytes (see
    /// `SimStorage::set_stale_reuse`).
    stale_reuse: bool,
    /// Whether `StorageFile::prewrite` is modelled (see
    /// `SimStorage::set_prewrite`).
    prewrite: bool,
}

#[derive(Debug)]
struct Shared {
    disk: Mutex<Disk>,
    locks: Mutex<BTreeSet<PathBuf>>,
}

/// An in-memory disk that loses, tears and reorders unsynced writes at a
/// simulated crash, and fails operations on demand. See the module docs.
///
/// Clones share the same disk.
#[derive(Clone)]
pub struct SimStorage {
    shared: Arc<Shared>,
}

impl fmt::Debug for SimStorage {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let disk = self.shared.disk.lock();
        formatter
            .debug_struct("SimStorage")
            .field("entries", &disk.current.len())
            .field("stats", &disk.stats)
            .finish_non_exhaustive()
    }
}

fn parent_of(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn is_root(path: &Path) -> bool {
    path.parent().is_none() || path.as_os_str().is_empty()
}

fn is_dir(namespace: &BTreeMap<PathBuf, Node>, path: &Path) -> bool {
    is_root(path) || namespace.get(path) == Some(&Node::Dir)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("sim: no such file or directory: {}", path.display()),
    )
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("sim: injected EIO on {what}"))
}

fn power_loss() -> io::Error {
    io::Error::other("sim: simulated power loss (the disk is off)")
}

fn disk_full() -> io::Error {
    // ENOSPC, so that messages read "No space left on device".
    io::Error::from_raw_os_error(28)
}

fn write_into(buffer: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let start = offset as usize;
    let end = start + bytes.len();
    if buffer.len() < end {
        buffer.resize(end, 0);
    }
    buffer[start..end].copy_from_slice(bytes);
}

fn apply_dir_op(namespace: &mut BTreeMap<PathBuf, Node>, op: &DirOp) {
    match op {
        DirOp::Insert(path, node) => {
            namespace.insert(path.clone(), *node);
        }
        DirOp::Remove(path) => {
            namespace.remove(path);
        }
        DirOp::Rename(from, to, node) => {
            namespace.remove(from);
            namespace.insert(to.clone(), *node);
        }
    }
}

/// Removes entries whose parent directory does not exist (their directory's
/// own creation was forgotten by a crash).
fn prune_orphans(namespace: &mut BTreeMap<PathBuf, Node>) {
    // Paths order component by component: a parent comes before its children.
    let paths: Vec<PathBuf> = namespace.keys().cloned().collect();
    for path in paths {
        if !is_dir(namespace, &parent_of(&path)) {
            namespace.remove(&path);
        }
    }
}

impl Inode {
    fn set_len(&mut self, len: u64, stale_reuse: bool) {
        let len = len as usize;
        if stale_reuse && len < self.current.len() {
            let removed = self.current[len..].to_vec();
            write_into(&mut self.ghost, len as u64, &removed);
        }
        self.current.resize(len, 0);
        self.pending.push(DataOp::SetLen(len as u64));
    }

    /// Extends the file with zeros to `len` bytes (preallocation): a size
    /// change, pending until the next sync.
    fn allocate(&mut self, len: u64) {
        self.current.resize(len as usize, 0);
        self.pending.push(DataOp::SetLen(len));
    }

    fn sync(&mut self) {
        self.durable.clone_from(&self.current);
        self.pending.clear();
    }

    /// The bytes this file holds after a power loss.
    fn after_power_loss(&self, rng: &mut SimRng, stats: &mut SimStats) -> Vec<u8> {
        let mut bytes = self.durable.clone();
        // Whole-file modes make the interesting extremes common; mode 3
        // chooses every fate independently.
        let mode = rng.below(4);
        let cut = rng.below(self.pending.len() as u64 + 1) as usize;
        for (index, op) in self.pending.iter().enumerate() {
            let keep_whole = match mode {
                0 => Some(true),
                1 => Some(false),
                2 if index < cut => Some(true),
                2 if index > cut => Some(false),
                _ => None,
            };
            match op {
                DataOp::SetLen(len) => {
                    if keep_whole.unwrap_or_else(|| rng.below(2) == 0) {
                        bytes.resize(*len as usize, 0);
                    }
                }
                DataOp::Write {
                    offset,
                    bytes: written,
                } => {
                    let fate = match keep_whole {
                        Some(true) => 0,
                        Some(false) => 1,
                        None => rng.below(10),
                    };
                    if fate == 0 || fate == 9 {
                        stats.writes_kept += 1;
                    } else {
                        stats.writes_damaged += 1;
                    }
                    self.apply_fate(&mut bytes, rng, fate, *offset, written);
                }
            }
        }
        bytes
    }

    fn apply_fate(
        &self,
        bytes: &mut Vec<u8>,
        rng: &mut SimRng,
        fate: u64,
        offset: u64,
        data: &[u8],
    ) {
        let length = data.len();
        let split = rng.below(length as u64 + 1) as usize;
        match fate {
            // Kept whole (twice as likely as each damage).
            0 | 9 => write_into(bytes, offset, data),
            // Lost.
            1 => {}
            // A prefix reached the disk, nothing after it.
            2 => write_into(bytes, offset, &data[..split]),
            // Torn: a prefix reached the disk, the rest of the range (the
            // file size did grow) holds zeros, garbage or stale bytes.
            3 => {
                let mut filled = self.filler(rng, offset, length);
                filled[..split].copy_from_slice(&data[..split]);
                write_into(bytes, offset, &filled);
            }
            // Torn the other way: sectors past a point reached the disk, the
            // ones before them did not.
            4 => {
                let mut filled = self.filler(rng, offset, length);
                filled[split..].copy_from_slice(&data[split..]);
                write_into(bytes, offset, &filled);
            }
            // The size grew but the data never came: zeros.
            5 => write_into(bytes, offset, &vec![0; length]),
            // Garbage.
            6 => {
                let mut garbage = vec![0; length];
                rng.fill(&mut garbage);
                write_into(bytes, offset, &garbage);
            }
            // Stale bytes of reused blocks (zeros without stale reuse).
            7 => write_into(bytes, offset, &self.stale(offset, length)),
            // Every byte independently: a write torn at arbitrary bytes.
            _ => {
                let mut mixed = self.filler(rng, offset, length);
                for (index, byte) in data.iter().enumerate() {
                    if rng.below(2) == 0 {
                        mixed[index] = *byte;
                    }
                }
                write_into(bytes, offset, &mixed);
            }
        }
    }

    /// Zeros, garbage or stale bytes for `length` bytes at `offset`.
    fn filler(&self, rng: &mut SimRng, offset: u64, length: usize) -> Vec<u8> {
        match rng.below(3) {
            0 => vec![0; length],
            1 => {
                let mut garbage = vec![0; length];
                rng.fill(&mut garbage);
                garbage
            }
            _ => self.stale(offset, length),
        }
    }

    fn stale(&self, offset: u64, length: usize) -> Vec<u8> {
        let mut stale = vec![0; length];
        let start = (offset as usize).min(self.ghost.len());
        let end = (offset as usize + length).min(self.ghost.len());
        stale[..end - start].copy_from_slice(&self.ghost[start..end]);
        stale
    }
}

impl Disk {
    fn new(seed: u64) -> Disk {
        Disk {
            current: BTreeMap::new(),
            durable: BTreeMap::new(),
            pending_dir: BTreeMap::new(),
            inodes: BTreeMap::new(),
            next_inode: 1,
            faults: Faults::default(),
            stats: SimStats::default(),
            rng: SimRng::new(seed),
            stale_reuse: false,
            prewrite: false,
        }
    }

    /// Counts a mutating operation toward a power cut; fails once the power
    /// is off.
    fn mutate(&mut self) -> io::Result<()> {
        if let Some(left) = self.faults.power_cut_after.as_mut() {
            if *left == 0 {
                self.faults.powered_off = true;
            } else {
                *left -= 1;
            }
        }
        if self.faults.powered_off {
            return Err(power_loss());
        }
        Ok(())
    }

    /// Counts down an armed fault; true when it fires now.
    fn fires(counter: &mut Option<u64>, stats: &mut SimStats) -> bool {
        match counter {
            Some(1) => {
                *counter = None;
                stats.faults_fired += 1;
                true
            }
            Some(left) => {
                *left -= 1;
                false
            }
            None => false,
        }
    }

    fn dir_op(&mut self, dir: &Path, op: DirOp) {
        apply_dir_op(&mut self.current, &op);
        self.pending_dir
            .entry(dir.to_path_buf())
            .or_default()
            .push(op);
    }

    fn file(&self, path: &Path) -> io::Result<u64> {
        match self.current.get(path) {
            Some(Node::File(inode)) => Ok(*inode),
            Some(Node::Dir) => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("sim: is a directory: {}", path.display()),
            )),
            None => Err(not_found(path)),
        }
    }

    fn inode(&mut self, inode: u64) -> &mut Inode {
        self.inodes.get_mut(&inode).expect("inodes are never freed")
    }

    fn used_bytes(&self) -> u64 {
        let linked: BTreeSet<u64> = self
            .current
            .values()
            .filter_map(|node| match node {
                Node::File(inode) => Some(*inode),
                Node::Dir => None,
            })
            .collect();
        self.inodes
            .iter()
            .filter(|(number, inode)| linked.contains(number) || inode.handles > 0)
            .map(|(_, inode)| inode.current.len() as u64)
            .sum()
    }

    fn open_handle(&mut self, inode: u64) {
        self.inode(inode).handles += 1;
    }

    fn create_dir_all(&mut self, path: &Path) -> io::Result<()> {
        let mut missing = Vec::new();
        let mut cursor = path.to_path_buf();
        while !is_root(&cursor) {
            match self.current.get(&cursor) {
                Some(Node::Dir) => break,
                Some(Node::File(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("sim: a file is in the way: {}", cursor.display()),
                    ))
                }
                None => missing.push(cursor.clone()),
            }
            cursor = parent_of(&cursor);
        }
        for dir in missing.into_iter().rev() {
            self.mutate()?;
            self.dir_op(&parent_of(&dir), DirOp::Insert(dir.clone(), Node::Dir));
        }
        Ok(())
    }

    fn create(&mut self, path: &Path) -> io::Result<u64> {
        self.mutate()?;
        if Disk::fires(&mut self.faults.create_eio, &mut self.stats) {
            return Err(injected("create"));
        }
        let dir = parent_of(path);
        if !is_dir(&self.current, &dir) {
            return Err(not_found(&dir));
        }
        match self.current.get(path) {
            Some(Node::File(inode)) => {
                let inode = *inode;
                let stale_reuse = self.stale_reuse;
                self.inode(inode).set_len(0, stale_reuse);
                Ok(inode)
            }
            Some(Node::Dir) => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("sim: is a directory: {}", path.display()),
            )),
            None => {
                let inode = self.next_inode;
                self.next_inode += 1;
                self.inodes.insert(inode, Inode::default());
                self.dir_op(&dir, DirOp::Insert(path.to_path_buf(), Node::File(inode)));
                Ok(inode)
            }
        }
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.mutate()?;
        if Disk::fires(&mut self.faults.rename_eio, &mut self.stats) {
            return Err(injected("rename"));
        }
        let node = Node::File(self.file(from)?);
        if !is_dir(&self.current, &parent_of(to)) {
            return Err(not_found(&parent_of(to)));
        }
        if self.current.get(to) == Some(&Node::Dir) {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("sim: is a directory: {}", to.display()),
            ));
        }
        let (from_dir, to_dir) = (parent_of(from), parent_of(to));
        if from_dir == to_dir {
            self.dir_op(
                &from_dir,
                DirOp::Rename(from.to_path_buf(), to.to_path_buf(), node),
            );
        } else {
            // Across directories each half is durable with its own directory.
            self.dir_op(&to_dir, DirOp::Insert(to.to_path_buf(), node));
            self.dir_op(&from_dir, DirOp::Remove(from.to_path_buf()));
        }
        Ok(())
    }

    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        self.mutate()?;
        self.file(path)?;
        self.dir_op(&parent_of(path), DirOp::Remove(path.to_path_buf()));
        Ok(())
    }

    fn fsync_fault(&mut self) -> io::Result<()> {
        self.mutate()?;
        self.stats.fsyncs += 1;
        if Disk::fires(&mut self.faults.fsync_eio, &mut self.stats) {
            return Err(injected("fsync"));
        }
        Ok(())
    }

    fn sync_dir(&mut self, path: &Path) -> io::Result<()> {
        if !is_dir(&self.current, path) {
            return Err(not_found(path));
        }
        self.fsync_fault()?;
        for op in self.pending_dir.remove(path).unwrap_or_default() {
            apply_dir_op(&mut self.durable, &op);
        }
        Ok(())
    }

    fn write(&mut self, inode: u64, buf: &[u8], offset: u64) -> io::Result<()> {
        self.mutate()?;
        self.stats.writes += 1;
        let mut length = buf.len();
        let mut failure = None;
        if Disk::fires(&mut self.faults.write_eio, &mut self.stats) {
            // Sometimes part of the write happened before the error.
            length = if self.rng.below(2) == 0 {
                0
            } else {
                self.rng.below(length as u64 + 1) as usize
            };
            failure = Some(injected("write"));
        }
        if let Some(capacity) = self.faults.capacity_bytes {
            let used = self.used_bytes();
            let file_length = self.inode(inode).current.len() as u64;
            let growth = (offset + length as u64).saturating_sub(file_length);
            if used + growth > capacity {
                // A short write: what fits, then ENOSPC.
                let room = capacity.saturating_sub(used);
                let fits = (file_length + room).saturating_sub(offset);
                length = length.min(fits as usize);
                self.stats.faults_fired += 1;
                failure = Some(disk_full());
            }
        }
        if length > 0 {
            let data = buf[..length].to_vec();
            let file = self.inode(inode);
            write_into(&mut file.current, offset, &data);
            file.pending.push(DataOp::Write {
                offset,
                bytes: data,
            });
            self.stats.bytes_written += length as u64;
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// A durable direct write of `buf` at `offset` into a file with no
    /// unsynced change (see the module docs).
    fn write_durable(&mut self, inode: u64, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.faults.powered_off {
            return Err(power_loss());
        }
        let start = offset - offset % DIRECT_BLOCK_BYTES;
        let end = (offset + buf.len() as u64).div_ceil(DIRECT_BLOCK_BYTES) * DIRECT_BLOCK_BYTES;
        let file_length = self.inode(inode).current.len() as u64;
        if let Some(capacity) = self.faults.capacity_bytes {
            let growth = end.saturating_sub(file_length);
            if self.used_bytes() + growth > capacity {
                self.stats.faults_fired += 1;
                return Err(disk_full());
            }
        }
        // The blocks as the write leaves them: the file's bytes (zeros past
        // its end) with the new ones applied.
        let mut image = vec![0; (end - start) as usize];
        {
            let current = &self.inode(inode).current;
            let from = (start as usize).min(current.len());
            let to = (end as usize).min(current.len());
            image[..to - from].copy_from_slice(&current[from..to]);
        }
        let at = (offset - start) as usize;
        image[at..at + buf.len()].copy_from_slice(buf);
        let cut = self.mutate().is_err();
        let eio = !cut && Disk::fires(&mut self.faults.write_eio, &mut self.stats);
        self.stats.durable_writes += 1;
        self.stats.writes += 1;
        if cut || eio {
            // In flight when the power went or the device failed: each
            // byte of the blocks is the old one or the new one, and the
            // size change may or may not have been made durable.
            self.stats.durable_writes_torn += 1;
            let mode = self.rng.below(3);
            let split = self.rng.below(image.len() as u64 + 1) as usize;
            let grow = self.rng.below(2) == 0;
            let mut torn = Vec::with_capacity(image.len());
            {
                let durable = &self.inodes[&inode].durable;
                for (index, new) in image.iter().enumerate() {
                    let old = durable.get(start as usize + index).copied().unwrap_or(0);
                    let take_new = match mode {
                        0 => index < split,
                        1 => index >= split,
                        _ => self.rng.below(2) == 0,
                    };
                    torn.push(if take_new { *new } else { old });
                }
            }
            let file = self.inode(inode);
            let old_length = file.durable.len();
            write_into(&mut file.durable, start, &torn);
            if !grow && old_length < file.durable.len() {
                file.durable.truncate(old_length.max(start as usize));
            }
            if cut {
                return Err(power_loss());
            }
            // EIO: the running system sees what the device holds.
            file.current.clone_from(&file.durable);
            return Err(injected("durable write"));
        }
        self.stats.bytes_written += buf.len() as u64;
        let file = self.inode(inode);
        write_into(&mut file.current, start, &image);
        write_into(&mut file.durable, start, &image);
        Ok(())
    }

    /// The disk after a power loss, chosen by `seed`.
    fn after_power_loss(&self, seed: u64) -> Disk {
        let mut rng = SimRng::new(seed);
        let mut stats = self.stats;
        stats.crashes += 1;
        let mut namespace = self.durable.clone();
        for ops in self.pending_dir.values() {
            let mode = rng.below(4);
            let cut = rng.below(ops.len() as u64 + 1) as usize;
            for (index, op) in ops.iter().enumerate() {
                let keep = match mode {
                    0 => true,
                    1 => false,
                    2 => index < cut,
                    _ => rng.below(2) == 0,
                };
                if keep {
                    apply_dir_op(&mut namespace, op);
                }
            }
        }
        prune_orphans(&mut namespace);
        let mut inodes = BTreeMap::new();
        for node in namespace.values() {
            if let Node::File(number) = node {
                if inodes.contains_key(number) {
                    continue;
                }
                let inode = &self.inodes[number];
                let bytes = inode.after_power_loss(&mut rng, &mut stats);
                let mut ghost = inode.ghost.clone();
                if self.stale_reuse && bytes.len() < inode.durable.len() {
                    // Durable bytes a kept truncation cut off are stale now.
                    write_into(
                        &mut ghost,
                        bytes.len() as u64,
                        &inode.durable[bytes.len()..],
                    );
                }
                inodes.insert(
                    *number,
                    Inode {
                        durable: bytes.clone(),
                        current: bytes,
                        pending: Vec::new(),
                        ghost,
                        handles: 0,
                    },
                );
            }
        }
        Disk {
            current: namespace.clone(),
            durable: namespace,
            pending_dir: BTreeMap::new(),
            inodes,
            next_inode: self.next_inode,
            faults: Faults::default(),
            stats,
            rng: SimRng::new(rng.next_u64()),
            stale_reuse: self.stale_reuse,
            prewrite: self.prewrite,
        }
    }

    /// The disk as the next process finds it: everything, synced or not.
    fn after_process_crash(&self) -> Disk {
        let mut disk = self.clone();
        disk.stats.process_crashes += 1;
        disk.faults = Faults::default();
        for inode in disk.inodes.values_mut() {
            inode.handles = 0;
        }
        disk.rng = SimRng::new(self.rng.clone().next_u64());
        disk
    }
}

impl SimStorage {
    /// An empty disk (only the root directory exists) whose own random
    /// choices (how much of a failing write happens) follow `seed`.
    pub fn new(seed: u64) -> SimStorage {
        SimStorage::from_disk(Disk::new(seed))
    }

    fn from_disk(disk: Disk) -> SimStorage {
        SimStorage {
            shared: Arc::new(Shared {
                disk: Mutex::new(disk),
                locks: Mutex::new(BTreeSet::new()),
            }),
        }
    }

    /// The disk as it could be after a power loss now, chosen by `seed`:
    /// see the module docs. The result is a new, independent disk with no
    /// faults armed and no locks held; this one is left unchanged (handles
    /// open on it keep working on it).
    pub fn crash(&self, seed: u64) -> SimStorage {
        let disk = self.shared.disk.lock().after_power_loss(seed);
        SimStorage::from_disk(disk)
    }

    /// The disk as the next process finds it after this one died: every
    /// write and directory operation is there, and what was not synced is
    /// still not durable. A new, independent disk with no faults and no locks.
    pub fn process_crash(&self) -> SimStorage {
        let disk = self.shared.disk.lock().after_process_crash();
        SimStorage::from_disk(disk)
    }

    /// Whether space a truncation freed keeps its old bytes, so that a crash
    /// that loses a later write over it can expose them again (a file system
    /// that reuses blocks without writing data before metadata, such as ext4
    /// with `data=writeback`). Off by default: such space reads as zeros.
    /// Carried over to crashed disks.
    pub fn set_stale_reuse(&self, enabled: bool) {
        self.shared.disk.lock().stale_reuse = enabled;
    }

    /// Whether `StorageFile::prewrite` is modelled: the log's background
    /// thread then allocates, zero-fills and syncs space ahead of the
    /// frames inside the model (see the module docs). Off by default (the
    /// storage declines, as a storage without the method does). Carried
    /// over to crashed disks.
    pub fn set_prewrite(&self, enabled: bool) {
        self.shared.disk.lock().prewrite = enabled;
    }

    /// Arms a fault (see [`Fault`]).
    pub fn inject(&self, fault: Fault) {
        let mut disk = self.shared.disk.lock();
        match fault {
            Fault::WriteEio { nth } => disk.faults.write_eio = Some(nth.max(1)),
            Fault::FsyncEio { nth } => disk.faults.fsync_eio = Some(nth.max(1)),
            Fault::CreateEio { nth } => disk.faults.create_eio = Some(nth.max(1)),
            Fault::RenameEio { nth } => disk.faults.rename_eio = Some(nth.max(1)),
            Fault::DiskFull { free_bytes } => {
                let used = disk.used_bytes();
                disk.faults.capacity_bytes = Some(used + free_bytes);
            }
        }
    }

    /// Disarms every fault and frees the disk (a power cut stays).
    pub fn clear_faults(&self) {
        let mut disk = self.shared.disk.lock();
        let faults = &mut disk.faults;
        faults.write_eio = None;
        faults.fsync_eio = None;
        faults.create_eio = None;
        faults.rename_eio = None;
        faults.capacity_bytes = None;
    }

    /// Cuts the power after `operations` more mutating operations (writes,
    /// truncations, fsyncs, creations, renames, removals): from then on every
    /// mutating operation fails with EIO and changes nothing. Crash the disk
    /// afterwards with [`SimStorage::crash`].
    pub fn power_cut_after(&self, operations: u64) {
        self.shared.disk.lock().faults.power_cut_after = Some(operations);
    }

    /// Whether a power cut has happened.
    pub fn is_powered_off(&self) -> bool {
        self.shared.disk.lock().faults.powered_off
    }

    /// Counters of this disk and of the disks it was crashed from.
    pub fn stats(&self) -> SimStats {
        self.shared.disk.lock().stats
    }

    /// The bytes a read of `path` sees now, if it is a file.
    pub fn file_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.shared.disk.lock();
        let inode = disk.file(path).ok()?;
        Some(disk.inodes[&inode].current.clone())
    }

    /// The bytes of `path` that are durable (it survives a crash only if its
    /// directory entry is durable too), if it is a file now.
    pub fn durable_file_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.shared.disk.lock();
        let inode = disk.file(path).ok()?;
        Some(disk.inodes[&inode].durable.clone())
    }

    /// Unsynced writes, truncations and directory operations: what a crash
    /// now could lose.
    pub fn unsynced_operations(&self) -> usize {
        let disk = self.shared.disk.lock();
        let data: usize = disk.inodes.values().map(|inode| inode.pending.len()).sum();
        let dirs: usize = disk.pending_dir.values().map(Vec::len).sum();
        data + dirs
    }

    fn handle(&self, inode: u64, path: &Path, writable: bool) -> Box<dyn StorageFile> {
        self.shared.disk.lock().open_handle(inode);
        Box::new(SimFile {
            shared: Arc::clone(&self.shared),
            inode,
            path: path.to_path_buf(),
            writable,
        })
    }
}

/// An open file of a [`SimStorage`].
struct SimFile {
    shared: Arc<Shared>,
    inode: u64,
    path: PathBuf,
    writable: bool,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("SimFile")
            .field("path", &self.path)
            .field("inode", &self.inode)
            .field("writable", &self.writable)
            .finish()
    }
}

impl SimFile {
    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("sim: opened read-only: {}", self.path.display()),
            ))
        }
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut disk = self.shared.disk.lock();
        if let Some(inode) = disk.inodes.get_mut(&self.inode) {
            inode.handles = inode.handles.saturating_sub(1);
        }
    }
}

impl StorageFile for SimFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        self.shared.disk.lock().write(self.inode, buf, offset)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let disk = self.shared.disk.lock();
        let current = &disk.inodes[&self.inode].current;
        let start = (offset as usize).min(current.len());
        let end = (start + buf.len()).min(current.len());
        buf[..end - start].copy_from_slice(&current[start..end]);
        Ok(end - start)
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut disk = self.shared.disk.lock();
        disk.fsync_fault()?;
        disk.inode(self.inode).sync();
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut disk = self.shared.disk.lock();
        disk.mutate()?;
        let stale_reuse = disk.stale_reuse;
        disk.inode(self.inode).set_len(len, stale_reuse);
        Ok(())
    }

    fn size_bytes(&self) -> io::Result<u64> {
        let disk = self.shared.disk.lock();
        Ok(disk.inodes[&self.inode].current.len() as u64)
    }

    /// Preallocation (`fallocate`): an extension with zeros, kept or lost
    /// by a crash like any unsynced size change until `sync_all`. Unlike a
    /// write it either reserves all the space or fails with ENOSPC without
    /// changing anything. Allocated space reads as zeros after a crash too
    /// (a real file system's unwritten extents), never as stale bytes.
    fn allocate(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut disk = self.shared.disk.lock();
        disk.mutate()?;
        let current = disk.inode(self.inode).current.len() as u64;
        if len <= current {
            return Ok(());
        }
        if let Some(capacity) = disk.faults.capacity_bytes {
            if disk.used_bytes() + (len - current) > capacity {
                disk.stats.faults_fired += 1;
                return Err(disk_full());
            }
        }
        disk.inode(self.inode).allocate(len);
        Ok(())
    }

    /// A durable direct write; see the module docs.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut disk = self.shared.disk.lock();
        if buf.is_empty() || !disk.inode(self.inode).pending.is_empty() {
            drop(disk);
            self.write_all_at(buf, offset)?;
            return self.sync_data();
        }
        disk.write_durable(self.inode, buf, offset)
    }

    /// With [`SimStorage::set_prewrite`]: allocates, writes zeros and
    /// syncs, three operations; without, declines (`false`).
    fn prewrite(&self, offset: u64, len: u64) -> io::Result<bool> {
        if !self.shared.disk.lock().prewrite {
            return Ok(false);
        }
        self.allocate(offset + len)?;
        self.write_all_at(&vec![0; len as usize], offset)?;
        self.sync_data()?;
        self.shared.disk.lock().stats.prewrites += 1;
        Ok(true)
    }

    /// A hint, counted and otherwise ignored: it makes nothing durable.
    /// The crash model already lets any unsynced write reach the disk
    /// before an fsync (each one's fate is independent), which is all that
    /// starting writeback early can do on a real disk.
    fn start_writeback(&self, _offset: u64, _len: u64) -> io::Result<()> {
        self.shared.disk.lock().stats.writeback_hints += 1;
        Ok(())
    }
}

/// The writer lock of a [`SimStorage`]: released on drop.
struct SimLock {
    shared: Arc<Shared>,
    path: PathBuf,
}

impl fmt::Debug for SimLock {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("SimLock")
            .field("path", &self.path)
            .finish()
    }
}

impl Drop for SimLock {
    fn drop(&mut self) {
        self.shared.locks.lock().remove(&self.path);
    }
}

// SAFETY: `read_immutable` returns a copy of the bytes, never a map, and
// never passes its token on: nothing it returns can change.
#[allow(unsafe_code)]
unsafe impl Storage for SimStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.shared.disk.lock().create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let disk = self.shared.disk.lock();
        if !is_dir(&disk.current, path) {
            return Err(not_found(path));
        }
        Ok(disk
            .current
            .keys()
            .filter(|entry| entry.parent() == Some(path))
            .filter_map(|entry| entry.file_name()?.to_str().map(str::to_string))
            .collect())
    }

    fn exists(&self, path: &Path) -> bool {
        let disk = self.shared.disk.lock();
        is_root(path) || disk.current.contains_key(path)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let inode = self.shared.disk.lock().create(path)?;
        Ok(self.handle(inode, path, true))
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let inode = self.shared.disk.lock().file(path)?;
        Ok(self.handle(inode, path, true))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let inode = self.shared.disk.lock().file(path)?;
        Ok(self.handle(inode, path, false))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.shared.disk.lock().rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.shared.disk.lock().remove_file(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.shared.disk.lock().sync_dir(path)
    }

    fn read_immutable(&self, path: &Path, _sealed: SealedFile) -> io::Result<SharedBytes> {
        let disk = self.shared.disk.lock();
        let inode = disk.file(path)?;
        Ok(Arc::new(disk.inodes[&inode].current.clone()))
    }

    fn try_lock(&self, path: &Path) -> io::Result<LockGuard> {
        let mut locks = self.shared.locks.lock();
        if locks.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "sim: lock is held by another writer",
            ));
        }
        {
            // Like the real lock, create a missing lock file (never a
            // directory); a directory is locked as it is.
            let mut disk = self.shared.disk.lock();
            if !is_dir(&disk.current, path) && !disk.current.contains_key(path) {
                disk.create(path)?;
            }
        }
        locks.insert(path.to_path_buf());
        Ok(Box::new(SimLock {
            shared: Arc::clone(&self.shared),
            path: path.to_path_buf(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> PathBuf {
        PathBuf::from(text)
    }

    #[test]
    fn synced_bytes_and_entries_survive_every_crash() {
        let storage = SimStorage::new(1);
        storage.create_dir_all(&path("/d")).unwrap();
        storage.sync_dir(&path("/")).unwrap();
        let file = storage.create(&path("/d/f")).unwrap();
        file.write_all_at(b"hello", 0).unwrap();
        file.sync_data().unwrap();
        storage.sync_dir(&path("/d")).unwrap();
        file.write_all_at(b" world", 5).unwrap();
        let mut outcomes = BTreeSet::new();
        for seed in 0..200 {
            let crashed = storage.crash(seed);
            let bytes = crashed.file_bytes(&path("/d/f")).expect("durable entry");
            assert!(bytes.starts_with(b"hello"), "seed {seed}: {bytes:?}");
            outcomes.insert(bytes);
        }
        assert!(outcomes.contains(b"hello".as_slice()));
        assert!(outcomes.contains(b"hello world".as_slice()));
        assert!(outcomes.len() > 3, "torn and garbage fates occur");
    }

    #[test]
    fn unsynced_directory_entries_may_vanish_or_revert() {
        let storage = SimStorage::new(2);
        let file = storage.create(&path("/a.tmp")).unwrap();
        file.write_all_at(b"x", 0).unwrap();
        file.sync_all().unwrap();
        storage.rename(&path("/a.tmp"), &path("/a")).unwrap();
        let (mut renamed, mut vanished) = (false, false);
        for seed in 0..100 {
            let crashed = storage.crash(seed);
            renamed |= crashed.exists(&path("/a"));
            vanished |= !crashed.exists(&path("/a")) && !crashed.exists(&path("/a.tmp"));
        }
        assert!(renamed && vanished);
        storage.sync_dir(&path("/")).unwrap();
        for seed in 0..20 {
            let crashed = storage.crash(seed);
            assert_eq!(crashed.file_bytes(&path("/a")), Some(b"x".to_vec()));
            assert!(!crashed.exists(&path("/a.tmp")));
        }
    }

    #[test]
    fn faults_fire_once_and_disk_full_makes_short_writes() {
        let storage = SimStorage::new(3);
        let file = storage.create(&path("/f")).unwrap();
        storage.inject(Fault::FsyncEio { nth: 2 });
        file.sync_data().unwrap();
        assert!(file.sync_data().is_err());
        file.sync_data().unwrap();
        storage.inject(Fault::DiskFull { free_bytes: 10 });
        let error = file.write_all_at(&[7; 25], 0).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert_eq!(file.size_bytes().unwrap(), 10, "a short write");
        storage.clear_faults();
        file.write_all_at(&[7; 25], 0).unwrap();
        assert_eq!(storage.stats().faults_fired, 2);
    }

    #[test]
    fn allocated_space_reads_as_zeros_and_its_size_is_durable_only_after_sync() {
        let storage = SimStorage::new(5);
        storage.create_dir_all(&path("/d")).unwrap();
        storage.sync_dir(&path("/")).unwrap();
        let file = storage.create(&path("/d/f")).unwrap();
        storage.sync_dir(&path("/d")).unwrap();
        file.write_all_at(b"data", 0).unwrap();
        file.sync_data().unwrap();
        file.allocate(64).unwrap();
        assert_eq!(file.size_bytes().unwrap(), 64);
        let mut kept = 0;
        for seed in 0..32 {
            let bytes = storage.crash(seed).file_bytes(&path("/d/f")).unwrap();
            // Unsynced: the allocation is kept or lost, never partial.
            assert!(bytes == b"data" || bytes.len() == 64, "seed {seed}");
            assert_eq!(&bytes[..4], b"data");
            assert!(bytes[4..].iter().all(|&byte| byte == 0), "seed {seed}");
            kept += usize::from(bytes.len() == 64);
        }
        assert!(kept > 0 && kept < 32, "both fates occur");
        file.sync_all().unwrap();
        // A write into the allocated space that a crash loses leaves zeros.
        file.write_all_at(b"more", 4).unwrap();
        for seed in 0..32 {
            let bytes = storage.crash(seed).file_bytes(&path("/d/f")).unwrap();
            assert_eq!(bytes.len(), 64, "seed {seed}");
        }
        // Allocating less than the length changes nothing.
        file.allocate(8).unwrap();
        assert_eq!(file.size_bytes().unwrap(), 64);
    }

    #[test]
    fn a_full_disk_refuses_a_whole_allocation() {
        let storage = SimStorage::new(6);
        let file = storage.create(&path("/f")).unwrap();
        storage.inject(Fault::DiskFull { free_bytes: 10 });
        let error = file.allocate(25).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert_eq!(file.size_bytes().unwrap(), 0, "nothing allocated");
        file.allocate(10).unwrap();
        assert_eq!(file.size_bytes().unwrap(), 10);
        // Writing into allocated space needs no more room.
        file.write_all_at(&[1; 10], 0).unwrap();
    }

    #[test]
    fn the_lock_is_exclusive_until_dropped() {
        let storage = SimStorage::new(4);
        let guard = storage.try_lock(&path("/LOCK")).unwrap();
        let error = storage.try_lock(&path("/LOCK")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
        drop(guard);
        storage.try_lock(&path("/LOCK")).unwrap();
    }

    #[test]
    fn a_lock_outlives_its_name() {
        let storage = SimStorage::new(4);
        storage.create_dir_all(&path("/store")).unwrap();
        let directory = storage.try_lock(&path("/store")).unwrap();
        let file = storage.try_lock(&path("/store/LOCK")).unwrap();
        // Locking a directory creates nothing in it.
        assert_eq!(storage.list_dir(&path("/store")).unwrap(), ["LOCK"]);
        storage.remove_file(&path("/store/LOCK")).unwrap();
        for locked in ["/store", "/store/LOCK"] {
            let error = storage.try_lock(&path(locked)).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::WouldBlock, "{locked}");
        }
        drop((directory, file));
        storage.try_lock(&path("/store")).unwrap();
    }

    #[test]
    fn a_power_cut_stops_every_change() {
        let storage = SimStorage::new(5);
        let file = storage.create(&path("/f")).unwrap();
        storage.power_cut_after(1);
        file.write_all_at(b"a", 0).unwrap();
        assert!(file.write_all_at(b"b", 1).is_err());
        assert!(storage.is_powered_off());
        assert_eq!(storage.file_bytes(&path("/f")), Some(b"a".to_vec()));
    }
}
