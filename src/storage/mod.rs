//! The storage interface: every file operation the log performs.
//!
//! The writer, recovery and readers never call `std::fs` directly; they go
//! through [`Storage`] and [`StorageFile`]. [`FileSystem`] is the real
//! implementation. A test implementation can simulate a disk that loses,
//! tears or reorders unsynced writes, or fails any operation, without the log
//! code knowing the difference.

#[cfg(target_os = "linux")]
mod direct;
mod mmap;

/// The alignment of a durable direct write's offset, length and memory
/// (`StorageFile::write_durable_at` on the real file system): the largest
/// logical block size of common devices. A device with larger logical
/// blocks refuses the write (EINVAL) and the file falls back to
/// `write_all_at` + `sync_data`.
pub const DIRECT_BLOCK_BYTES: u64 = 4096;
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
    /// Writes all of `buf` at `offset`. When it returns, the bytes are part
    /// of the file as every reader sees it (the operating system's page
    /// cache, not a buffer of this process): a crash of this process keeps
    /// them, a power loss may lose them until the next `sync_data`. Under
    /// `Durability::None` convlog acknowledges an append on exactly this.
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
    /// Starts writing the file's unsynced bytes in `offset..offset + len`
    /// to the disk, without waiting: a hint that makes nothing durable and
    /// promises nothing (only `sync_data` does), but lets a later
    /// `sync_data` find less left to write. The real file system uses
    /// `sync_file_range(2)` on Linux. The default does nothing; a wrapping
    /// storage delegates.
    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// Writes all of `buf` at `offset` and makes it durable, with the file
    /// length it needs to be read back: `write_all_at` followed by
    /// `sync_data`, which is the default. The caller calls it only when
    /// every byte it wrote to the file before is durable already, so a
    /// storage may make durable only the blocks `buf` lands in. The real
    /// file system writes those blocks with one durable direct write where
    /// it can (see [`FileSystem`]); a crash during the call can damage only
    /// those blocks' bytes that were not acknowledged before, never a byte
    /// written durably earlier (the block's earlier bytes are written again
    /// unchanged). A wrapping storage delegates.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_at(buf, offset)?;
        self.sync_data()
    }
    /// Prepares `offset..offset + len`, space past every byte written so
    /// far, so that later writes into it make no metadata change a sync has
    /// to carry: allocates it, writes zeros into it and makes them durable.
    /// Returns `false` if the storage has nothing to gain from it (the
    /// default, which does nothing). Never called on space that holds data.
    /// The log calls it from a background thread, ahead of the frames.
    fn prewrite(&self, offset: u64, len: u64) -> io::Result<bool> {
        let _ = (offset, len);
        Ok(false)
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

/// A file of the real file system.
///
/// On Linux, the space `allocate` reserves with `fallocate(2)` is also
/// mapped `MAP_SHARED` (`mmap::AllocatedMap`), and a write that falls
/// entirely inside mapped space is a copy into the map instead of a
/// `pwrite(2)`: the bytes are in the page cache when the copy ends, as
/// after a `pwrite`, and `fdatasync` flushes them alike, without a system
/// call per write. Writes elsewhere use `pwrite`. `set_len` drops every map
/// before it changes the length, so no map ever covers bytes past the end
/// of the file; dropping the handle drops the maps.
///
/// On Linux, `write_durable_at` writes through a second descriptor of the
/// same file opened `O_DIRECT` (`direct::DirectWriter`): the aligned
/// [`DIRECT_BLOCK_BYTES`] blocks the bytes land in, composed from an
/// in-memory image of the file's last partial block, with one
/// `pwritev2(..., RWF_DSYNC)` and no separate `fdatasync`. A file system
/// that refuses direct writes gets `write_all_at` + `sync_data` instead.
struct RealFile {
    file: std::fs::File,
    /// Maps of allocated space, in file order (Linux only).
    #[cfg(target_os = "linux")]
    maps: parking_lot::Mutex<Vec<mmap::AllocatedMap>>,
    /// Durable direct writes (Linux only).
    #[cfg(target_os = "linux")]
    direct: direct::DirectWriter,
}

impl fmt::Debug for RealFile {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("RealFile")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl RealFile {
    fn new(file: std::fs::File) -> RealFile {
        RealFile {
            file,
            #[cfg(target_os = "linux")]
            maps: parking_lot::Mutex::new(Vec::new()),
            #[cfg(target_os = "linux")]
            direct: direct::DirectWriter::default(),
        }
    }

    /// Copies `buf` into the maps if they cover `offset..offset + buf.len()`
    /// entirely; returns whether they did.
    #[cfg(target_os = "linux")]
    fn write_mapped(&self, buf: &[u8], offset: u64) -> bool {
        let maps = self.maps.lock();
        let end = offset + buf.len() as u64;
        // The maps that hold the write, found from the last (the writer
        // writes at the end): each must start where the one before ends.
        let Some(last) = maps
            .iter()
            .rposition(|map| map.range().contains(&(end - 1)))
        else {
            return false;
        };
        let mut first = last;
        while maps[first].range().start > offset {
            if first == 0 || maps[first - 1].range().end != maps[first].range().start {
                return false;
            }
            first -= 1;
        }
        for map in &maps[first..=last] {
            let range = map.range();
            let from = offset.max(range.start);
            let to = end.min(range.end);
            map.copy_in(&buf[(from - offset) as usize..(to - offset) as usize], from);
        }
        true
    }
}

impl StorageFile for RealFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // A write that bypasses the direct path may change the last
        // partial block: the next direct write reads it again.
        #[cfg(target_os = "linux")]
        self.direct.forget_tail();
        #[cfg(target_os = "linux")]
        if !buf.is_empty() && self.write_mapped(buf, offset) {
            return Ok(());
        }
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
        // No map may outlive the bytes it covers (a store into a page past
        // the end of the file raises SIGBUS): drop them all first, and keep
        // the lock so that no write lands in a map meanwhile.
        #[cfg(target_os = "linux")]
        let mut maps = self.maps.lock();
        #[cfg(target_os = "linux")]
        maps.clear();
        #[cfg(target_os = "linux")]
        self.direct.forget_tail();
        self.file.set_len(len)
    }

    #[cfg(target_os = "linux")]
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.direct.write_durable(&self.file, buf, offset)? {
            return Ok(());
        }
        self.write_all_at(buf, offset)?;
        self.sync_data()
    }

    #[cfg(target_os = "linux")]
    fn prewrite(&self, offset: u64, len: u64) -> io::Result<bool> {
        if len == 0 {
            return Ok(true);
        }
        self.allocate(offset + len)?;
        // Zeros written past the maps (never through them, so no page of
        // the prepared space is dirtied in the page cache), then durable.
        self.direct.write_zeros(&self.file, offset, len)?;
        self.file.sync_data()?;
        Ok(true)
    }

    fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        return mmap::start_writeback(&self.file, offset, len);
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (offset, len);
            Ok(())
        }
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            let mut maps = self.maps.lock();
            // Everything below the end of the last map is reserved and
            // mapped already; reserve and map the rest, holes in the file's
            // current length included (a file written before, say a segment
            // reopened after a restart, is mapped from its start, so its
            // next writes go through the map too).
            let mapped_end = maps.last().map_or(0, |map| map.range().end);
            if mapped_end >= len {
                return Ok(());
            }
            // Mode 0: allocate the blocks (a no-op where they exist) and
            // extend the size; new blocks are unwritten extents, which read
            // as zeros (also after a crash).
            match rustix::fs::fallocate(
                &self.file,
                rustix::fs::FallocateFlags::empty(),
                mapped_end,
                len - mapped_end,
            ) {
                Ok(()) => {
                    // Map the space just reserved for `write_all_at`. Only
                    // reserved space is mapped: a store into a hole the
                    // file system cannot fill (a full disk) raises SIGBUS
                    // where `pwrite` returns ENOSPC. Without a map, writes
                    // use `pwrite`.
                    match mmap::AllocatedMap::new(&self.file, mapped_end, len - mapped_end) {
                        Ok(map) => maps.push(map),
                        Err(error) => {
                            tracing::debug!(error = %error, "could not map allocated space; writing with pwrite");
                        }
                    }
                    return Ok(());
                }
                // A file system without fallocate: a sparse extension,
                // written with `pwrite`.
                Err(rustix::io::Errno::OPNOTSUPP) => {}
                Err(error) => return Err(error.into()),
            }
        }
        if self.size_bytes()? < len {
            self.file.set_len(len)?;
        }
        Ok(())
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
        Ok(Box::new(RealFile::new(file)))
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        Ok(Box::new(RealFile::new(file)))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = std::fs::File::open(path)?;
        Ok(Box::new(RealFile::new(file)))
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// How many writable shared maps of `path` this process holds (from
    /// `/proc/self/maps`).
    fn writable_maps_of(path: &Path) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let name = path.to_str().unwrap();
        maps.lines()
            .filter(|line| line.ends_with(name) && line.split_whitespace().nth(1) == Some("rw-s"))
            .count()
    }

    fn read(file: &dyn StorageFile, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        assert_eq!(file.read_at(&mut buf, offset).unwrap(), len);
        buf
    }

    #[test]
    fn writes_into_allocated_space_go_through_a_map_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("active.seg");
        let file = FileSystem.create(&path).unwrap();
        file.write_all_at(b"header", 0).unwrap();
        assert_eq!(writable_maps_of(&path), 0);
        file.allocate(1 << 20).unwrap();
        file.allocate(2 << 20).unwrap();
        assert_eq!(file.size_bytes().unwrap(), 2 << 20);
        // One map per allocated range (the kernel may merge adjacent ones).
        assert!(writable_maps_of(&path) >= 1);
        // Inside one map, across the boundary of two, over bytes written
        // before the first allocation (mapped too), and across the end of
        // the maps (written by pwrite, which extends the file).
        file.write_all_at(b"inside", 4096).unwrap();
        let across: Vec<u8> = (0..100u8).collect();
        file.write_all_at(&across, (1 << 20) - 50).unwrap();
        file.write_all_at(b"HEADER+more", 0).unwrap();
        file.write_all_at(b"end+beyond", (2 << 20) - 4).unwrap();
        assert_eq!(read(file.as_ref(), 4096, 6), b"inside");
        assert_eq!(read(file.as_ref(), (1 << 20) - 50, 100), across);
        assert_eq!(read(file.as_ref(), 0, 11), b"HEADER+more");
        assert_eq!(read(file.as_ref(), (2 << 20) - 4, 10), b"end+beyond");
        assert_eq!(file.size_bytes().unwrap(), (2 << 20) + 6);
        // Another handle (another process would see the same) reads them.
        let other = FileSystem.open_read(&path).unwrap();
        assert_eq!(read(other.as_ref(), 4096, 6), b"inside");
        // A file written before (a reopened segment) is mapped from its
        // start by its first allocation.
        let reopened = FileSystem.open_write(&path).unwrap();
        reopened.allocate(4096).unwrap();
        assert!(writable_maps_of(&path) >= 2);
        reopened.write_all_at(b"again", 10).unwrap();
        assert_eq!(read(file.as_ref(), 0, 16), b"HEADER+moragain\0");
        drop(reopened);
        file.sync_data().unwrap();
        drop(file);
        assert_eq!(writable_maps_of(&path), 0, "dropping the handle unmaps");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[4096..4102], b"inside");
    }

    /// Regression guard for the write maps: a map left over a truncated
    /// range would turn the next write there into SIGBUS (the whole test
    /// binary dies) and would keep a writable map of bytes the file no
    /// longer has.
    #[test]
    fn set_len_drops_the_maps_before_it_cuts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("active.seg");
        let file = FileSystem.create(&path).unwrap();
        file.allocate(1 << 20).unwrap();
        file.write_all_at(&[7; 100], 8192).unwrap();
        assert!(writable_maps_of(&path) >= 1);
        file.set_len(100).unwrap();
        assert_eq!(writable_maps_of(&path), 0);
        // Past the new end: a pwrite that extends the file, not a store
        // into a page the file no longer has.
        file.write_all_at(&[9; 10], 8192).unwrap();
        assert_eq!(file.size_bytes().unwrap(), 8202);
        assert_eq!(read(file.as_ref(), 8192, 10), [9; 10]);
        assert_eq!(read(file.as_ref(), 8000, 10), [0; 10]);
        // Allocating again maps again.
        file.allocate(1 << 20).unwrap();
        assert!(writable_maps_of(&path) >= 1);
        file.write_all_at(b"again", 9000).unwrap();
        assert_eq!(read(file.as_ref(), 9000, 5), b"again");
    }

    /// Appends `frames` with `write_durable_at` after a header, checking
    /// after each that the file as another descriptor reads it holds every
    /// byte written so far: a durable direct write rewrites the tail
    /// block's earlier bytes from its image, and must write them unchanged.
    fn durable_appends_read_back(file: &RealFile, path: &Path) {
        let mut expected = b"header-bytes".to_vec();
        file.write_all_at(&expected, 0).unwrap();
        file.sync_data().unwrap();
        // Lengths that end mid-block, exactly on a block, span blocks.
        let lengths = [700, 3, 4096 - 715, 4096, 9000, 1, 5000, 333];
        for (index, length) in lengths.into_iter().enumerate() {
            if index == 5 {
                // A write through the other path in between: the next
                // durable write must take the tail from the file again.
                let buffered = vec![0xB0; 77];
                file.write_all_at(&buffered, expected.len() as u64).unwrap();
                file.sync_data().unwrap();
                expected.extend_from_slice(&buffered);
            }
            let frame: Vec<u8> = (0..length)
                .map(|byte| (byte * 7 + index + 1) as u8 | 1)
                .collect();
            file.write_durable_at(&frame, expected.len() as u64)
                .unwrap();
            expected.extend_from_slice(&frame);
            let on_disk = std::fs::read(path).unwrap();
            assert!(on_disk.len() >= expected.len());
            assert_eq!(
                &on_disk[..expected.len()],
                &expected[..],
                "after frame {index}"
            );
            assert!(
                on_disk[expected.len()..].iter().all(|&byte| byte == 0),
                "zeros past the data after frame {index}"
            );
            let mut again = vec![0; expected.len()];
            assert_eq!(file.read_at(&mut again, 0).unwrap(), expected.len());
            assert_eq!(again, expected);
        }
    }

    #[test]
    fn durable_direct_writes_keep_the_acknowledged_bytes_of_the_tail_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("active.seg");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let file = RealFile::new(file);
        file.allocate(1 << 20).unwrap();
        durable_appends_read_back(&file, &path);
        // ext4 (where the tests run) takes direct writes.
        eprintln!("direct writes: {:?}", file.direct.goes_direct());
        // Also without allocated space: the direct writes extend the file.
        let bare_path = dir.path().join("bare.seg");
        let bare = RealFile::new(std::fs::File::create_new(&bare_path).unwrap());
        durable_appends_read_back(&bare, &bare_path);
    }

    #[test]
    fn durable_writes_fall_back_to_write_and_sync_where_direct_writes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("active.seg");
        let file = RealFile::new(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .unwrap(),
        );
        file.allocate(1 << 20).unwrap();
        // As a file system without O_DIRECT (EINVAL) leaves it.
        file.direct.refuse();
        durable_appends_read_back(&file, &path);
        assert_eq!(
            file.direct.goes_direct(),
            None,
            "no direct descriptor was opened"
        );
    }

    #[test]
    fn prewrite_allocates_and_zero_fills_space_past_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("active.seg");
        let file = FileSystem.create(&path).unwrap();
        file.write_all_at(b"data", 0).unwrap();
        assert!(file.prewrite(1 << 20, 1 << 20).unwrap());
        assert_eq!(file.size_bytes().unwrap(), 2 << 20);
        // Unaligned space is prepared too (written by pwrite).
        assert!(file.prewrite((2 << 20) + 5, 1000).unwrap());
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), (2 << 20) + 1005);
        assert_eq!(&bytes[..4], b"data");
        assert!(bytes[4..].iter().all(|&byte| byte == 0));
        // Written into afterwards like any space.
        file.write_durable_at(b"frame", 4).unwrap();
        file.write_all_at(b"more", (1 << 20) + 10).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..9], b"dataframe");
        assert_eq!(&bytes[(1 << 20) + 10..(1 << 20) + 14], b"more");
    }

    #[test]
    fn start_writeback_accepts_the_written_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("active.seg");
        let file = FileSystem.create(&path).unwrap();
        file.allocate(1 << 20).unwrap();
        file.write_all_at(&[1; 65536], 0).unwrap();
        file.start_writeback(0, 65536).unwrap();
        file.sync_data().unwrap();
        assert_eq!(read(file.as_ref(), 0, 16), [1; 16]);
    }
}
