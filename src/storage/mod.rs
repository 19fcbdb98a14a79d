//! The storage interface: every file operation the log performs.
//!
//! The writer, recovery and readers never call `std::fs` directly; they go
//! through [`Storage`] and [`StorageFile`]. [`FileSystem`] is the real
//! implementation. A test implementation can simulate a disk that loses,
//! tears or reorders unsynced writes, or fails any operation, without the log
//! code knowing the difference.

mod mmap;
pub mod sim;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of a whole file that will not change while they are held.
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Proof that a path names a sealed segment: a file convlog will never
/// modify, extend or truncate again (see `UNSAFE.md`).
///
/// Only convlog's log can create one, so code outside the crate cannot ask
/// [`FileSystem`] to map an arbitrary (possibly changing) file. Other
/// `Storage` implementations receive it and may ignore it.
#[derive(Debug, Clone, Copy)]
pub struct SealedFile {
    _private: (),
}

impl SealedFile {
    /// Asserts that the file about to be read is a sealed segment.
    pub(crate) fn assert_sealed() -> SealedFile {
        SealedFile { _private: () }
    }
}

/// A guard that holds the store's writer lock until dropped.
pub type LockGuard = Box<dyn fmt::Debug + Send + Sync>;

/// One open file.
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Reads into `buf` from `offset`; returns how many bytes were read
    /// (fewer than asked only at the end of the file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Makes the file's data durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's data and metadata durable (fsync).
    fn sync_all(&self) -> io::Result<()>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// The file's current length.
    fn size_bytes(&self) -> io::Result<u64>;
}

/// The file operations of a store directory.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Names of the entries in a directory.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Whether a path exists.
    fn exists(&self, path: &Path) -> bool;
    /// Creates (or truncates) a file for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing file for reading and writing.
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing file for reading.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Renames a file, replacing any file at `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// The whole content of a file that will never change or shrink again
    /// (a sealed segment, vouched for by `sealed`). The real implementation
    /// maps it read-only.
    fn read_immutable(&self, path: &Path, sealed: SealedFile) -> io::Result<SharedBytes>;
    /// Takes the exclusive writer lock on `path` without waiting.
    /// Fails with `io::ErrorKind::WouldBlock` when someone else holds it.
    fn try_lock(&self, path: &Path) -> io::Result<LockGuard>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct FileSystem;

#[derive(Debug)]
struct RealFile {
    file: std::fs::File,
}

impl StorageFile for RealFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.file, buf, offset)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match std::os::unix::fs::FileExt::read_at(
                &self.file,
                &mut buf[filled..],
                offset + filled as u64,
            ) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(filled)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}

#[derive(Debug)]
struct RealLock {
    // Held for its lock; dropping the file releases it.
    _file: std::fs::File,
    _path: PathBuf,
}

impl Storage for FileSystem {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(RealFile { file }))
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        Ok(Box::new(RealFile { file }))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = std::fs::File::open(path)?;
        Ok(Box::new(RealFile { file }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::File::open(path)?.sync_all()
    }

    fn read_immutable(&self, path: &Path, _sealed: SealedFile) -> io::Result<SharedBytes> {
        let file = std::fs::File::open(path)?;
        if file.metadata()?.len() == 0 {
            // A zero-length mapping is an error on Linux; there is nothing to map.
            return Ok(Arc::new(Vec::<u8>::new()));
        }
        Ok(Arc::new(mmap::map_sealed_file(&file)?))
    }

    fn try_lock(&self, path: &Path) -> io::Result<LockGuard> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(RealLock {
                _file: file,
                _path: path.to_path_buf(),
            })),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "lock is held by another writer",
            )),
            Err(std::fs::TryLockError::Error(error)) => Err(error),
        }
    }
}
