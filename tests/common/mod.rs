//! Helpers shared by the library's integration tests. The `convlog`
//! command's tests, and their helper that runs it, are in `crates/cli/tests`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use convlog::log::{LogOptions, LogReader, Record};
use convlog::storage::{FileSystem, LockGuard, SealedFile, SharedBytes, StorageFile};

/// Segment files of a store, in LSN order.
pub fn segment_paths(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
        .collect();
    paths.sort();
    paths
}

/// Where the frames of the segment file at `path` end: its length minus
/// the space the writer allocated ahead and has not written (zeros).
pub fn data_end(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    convlog::log::recovery::scan_segment(&bytes, true)
        .unwrap()
        .valid_bytes
}

/// Every record of the store, read by a directory reader; panics on error.
pub fn read_all(dir: &Path) -> Vec<Record> {
    LogReader::open(dir)
        .unwrap()
        .iter()
        .collect::<convlog::Result<Vec<_>>>()
        .unwrap()
}

/// Options with tiny segments, so tests cross segment boundaries.
pub fn small_segments() -> LogOptions {
    LogOptions::new().segment_bytes_max(4096)
}

/// A deterministic pseudo-random generator (xorshift64*), for tests that
/// must reproduce from a printed seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `range`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

/// Starts this test binary again, running only the test `name`, with
/// `CONVLOG_TEST_ROLE` set to `role` and extra environment variables.
/// The child's stdout is piped.
pub fn spawn_role(test_name: &str, role: &str, env: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env("CONVLOG_TEST_ROLE", role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn().unwrap()
}

/// The role this process plays when it was started by `spawn_role`.
///
/// In a child, this also ends the line libtest started (`test NAME ... `)
/// so that everything the role prints starts a line of its own.
pub fn role() -> Option<String> {
    let role = std::env::var("CONVLOG_TEST_ROLE").ok();
    if role.is_some() {
        println!();
    }
    role
}

/// Reads an environment variable as a number, with a default.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// What a test's storage changes of the real file system. Everything not
/// hooked here goes to `FileSystem` unchanged (see [`Hooked`]).
pub trait FsHooks: Send + Sync + std::fmt::Debug + 'static {
    /// A file opened for writing (`create`, `open_write`), to be wrapped.
    fn wrap_written(
        &self,
        file: Box<dyn convlog::storage::StorageFile>,
    ) -> Box<dyn convlog::storage::StorageFile> {
        file
    }

    /// Called before each directory listing.
    fn on_list_dir(&self, _path: &Path) {}
}

/// The real file system with a test's [`FsHooks`].
#[derive(Debug)]
pub struct Hooked<H>(pub H);

// SAFETY: every method, `read_immutable` with its token included, delegates
// to `FileSystem` with the same arguments; the hooks only wrap files opened
// for writing (which may wait or fail, never write elsewhere) and observe
// listings.
unsafe impl<H: FsHooks> convlog::storage::Storage for Hooked<H> {
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        FileSystem.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        self.0.on_list_dir(path);
        FileSystem.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        FileSystem.exists(path)
    }
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn StorageFile>> {
        FileSystem
            .create(path)
            .map(|file| self.0.wrap_written(file))
    }
    fn open_write(&self, path: &Path) -> std::io::Result<Box<dyn StorageFile>> {
        FileSystem
            .open_write(path)
            .map(|file| self.0.wrap_written(file))
    }
    fn open_read(&self, path: &Path) -> std::io::Result<Box<dyn StorageFile>> {
        FileSystem.open_read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FileSystem.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        FileSystem.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        FileSystem.sync_dir(path)
    }
    fn read_immutable(&self, path: &Path, sealed: SealedFile) -> std::io::Result<SharedBytes> {
        FileSystem.read_immutable(path, sealed)
    }
    fn try_lock(&self, path: &Path) -> std::io::Result<LockGuard> {
        FileSystem.try_lock(path)
    }
}

/// The segment files under `dir` that process `pid` (`"self"` for this
/// one) holds writable shared maps of (`rw-s` in `/proc/<pid>/maps`): the
/// active segment's write path on Linux. Empty where `/proc` is missing.
pub fn writable_segment_maps(pid: &str, dir: &Path) -> Vec<PathBuf> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut paths: Vec<PathBuf> = maps
        .lines()
        .filter(|line| line.split_whitespace().nth(1) == Some("rw-s"))
        .filter_map(|line| line.split_whitespace().nth(5).map(PathBuf::from))
        .filter(|path| {
            path.parent() == Some(dir.as_path())
                && path.extension().is_some_and(|extension| extension == "seg")
        })
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// Copies every file under `from` on the simulated disk `disk`, as a read
/// sees it now, to the real directory `to` (created): the file-system
/// checks (`store::verify`, `tamper::verify`) then run on it.
pub fn copy_out(disk: &convlog::storage::sim::SimStorage, from: &Path, to: &Path) {
    use convlog::storage::Storage;
    std::fs::create_dir_all(to).unwrap();
    for name in disk.list_dir(from).unwrap() {
        let path = from.join(&name);
        match disk.file_bytes(&path) {
            Some(bytes) => std::fs::write(to.join(&name), bytes).unwrap(),
            None => copy_out(disk, &path, &to.join(&name)),
        }
    }
}
