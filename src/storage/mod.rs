//! The storage interface: every file operation the log performs.
//!
//! The writer, recovery and readers never call `std::fs` directly; they go
//! through [`Storage`] and [`StorageFile`]. [`FileSystem`] is the real
//! implementation. A test implementation can simulate a disk that loses,
//! tears or reorders unsynced writes, or fails any operation, without the log
//! code knowing the difference.

mod mmap;
#[cfg(feature = "testing")]
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
/// Only convlog's log can create one (`assert_sealed` is crate-private), so
/// code outside the crate cannot ask [`FileSystem`] to map a file of its
/// choosing. The token is neither `Copy` nor `Clone`: each one is consumed by
/// the one [`Storage::read_immutable`] call it was made for, so a storage
/// that receives it cannot keep a copy for another file.
///
/// ```compile_fail,E0599
/// // A token cannot be duplicated ...
/// fn duplicate(token: &convlog::storage::SealedFile) -> convlog::storage::SealedFile {
///     token.clone()
/// }
/// ```
///
/// ```compile_fail,E0451
/// // ... nor made outside convlog.
/// let token = convlog::storage::SealedFile { _private: () };
/// ```
#[derive(Debug)]
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
    /// Allocates space so that the file is at least `len` bytes long; the
    /// added bytes read as zeros. Like `set_len`, the new length is durable
    /// only after `sync_all`. The real file system reserves the blocks
    /// (`fallocate(2)` on Linux), so that writing into them later changes
    /// no metadata a `sync_data` has to carry. The default extends the file
    /// with `set_len` (a sparse extension); a wrapping storage delegates.
    fn allocate(&self, len: u64) -> io::Result<()> {
        if self.size_bytes()? < len {
            self.set_len(len)?;
        }
        Ok(())
    }
}

/// The file operations of a store directory.
///
/// # Safety
///
/// This trait is `unsafe` to implement because convlog trusts what
/// [`Storage::read_immutable`] does with the [`SealedFile`] it passes: the
/// real [`FileSystem`] memory-maps the file, and a map of a file that
/// changes or shrinks while it is mapped is undefined behaviour (`UNSAFE.md`).
/// An implementation must:
///
/// - pass a `SealedFile` it receives only to another storage's
///   `read_immutable` for the same file, the one convlog asked for (a
///   wrapper that delegates every method to [`FileSystem`] with the same
///   paths keeps this);
/// - give every other method the meaning documented on it, over the same
///   files `read_immutable` reads, so that a file convlog knows to be sealed
///   (it has a successor segment, and convlog never writes, truncates or
///   extends it again) is not changed through the storage either.
///
/// ```compile_fail,E0200
/// // A storage implemented without `unsafe impl` does not compile.
/// use std::{io, path::Path};
/// use convlog::storage::*;
/// #[derive(Debug)]
/// struct Mine;
/// impl Storage for Mine {
///     fn create_dir_all(&self, _: &Path) -> io::Result<()> { todo!() }
///     fn list_dir(&self, _: &Path) -> io::Result<Vec<String>> { todo!() }
///     fn exists(&self, _: &Path) -> bool { todo!() }
///     fn create(&self, _: &Path) -> io::Result<Box<dyn StorageFile>> { todo!() }
///     fn open_write(&self, _: &Path) -> io::Result<Box<dyn StorageFile>> { todo!() }
///     fn open_read(&self, _: &Path) -> io::Result<Box<dyn StorageFile>> { todo!() }
///     fn rename(&self, _: &Path, _: &Path) -> io::Result<()> { todo!() }
///     fn remove_file(&self, _: &Path) -> io::Result<()> { todo!() }
///     fn sync_dir(&self, _: &Path) -> io::Result<()> { todo!() }
///     fn read_immutable(&self, _: &Path, _: SealedFile) -> io::Result<SharedBytes> { todo!() }
///     fn try_lock(&self, _: &Path) -> io::Result<LockGuard> { todo!() }
/// }
/// ```
#[allow(unsafe_code)]
pub unsafe trait Storage: Send + Sync + fmt::Debug {
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
    /// Takes an exclusive lock on the file or directory at `path` without
    /// waiting, creating a missing file (never a directory). The lock
    /// belongs to what `path` names at the moment of the call: removing,
    /// renaming or replacing the name later neither releases it nor lets
    /// anyone else take it. It is held until the guard is dropped, and
    /// excludes every other holder, in this process or another.
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

    fn allocate(&self, len: u64) -> io::Result<()> {
        let size = self.size_bytes()?;
        if size >= len {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        {
            // Mode 0: allocate the blocks and extend the size; the new
            // blocks are unwritten extents, which read as zeros (also after a
            // crash).
            match rustix::fs::fallocate(
                &self.file,
                rustix::fs::FallocateFlags::empty(),
                size,
                len - size,
            ) {
                Ok(()) => return Ok(()),
                // A file system without fallocate: a sparse extension.
                Err(rustix::io::Errno::OPNOTSUPP) => {}
                Err(error) => return Err(error.into()),
            }
        }
        self.file.set_len(len)
    }
}

#[derive(Debug)]
struct RealLock {
    // Held for its lock; dropping the file releases it.
    _file: std::fs::File,
    _path: PathBuf,
}

// SAFETY: `read_immutable` maps only the path it is given, with the token
// convlog made for that path; every other method is the plain `std::fs`
// operation on the same file system, so a file convlog knows to be sealed
// is not changed through this storage.
#[allow(unsafe_code)]
unsafe impl Storage for FileSystem {
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
        // `flock(2)` locks the open file description of the inode the path
        // names now, so unlinking or replacing the name does not release it.
        // A directory is opened read-only, which is all `flock` needs.
        let file = if std::fs::metadata(path).is_ok_and(|metadata| metadata.is_dir()) {
            std::fs::File::open(path)?
        } else {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)?
        };
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
