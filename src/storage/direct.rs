//! Durable direct writes of the real file system (Linux): a second
//! descriptor of the file opened `O_DIRECT`, written with
//! `pwritev2(..., RWF_DSYNC)`, so that a commit is one device write (with
//! the FUA flag, or a write and a cache flush where the device has no FUA)
//! instead of a write into the page cache plus an `fdatasync`.
//!
//! A direct write must cover whole aligned blocks, from aligned memory. The
//! bytes of the first block that precede the new ones (the file's last
//! partial block, written and acknowledged before) are written again,
//! unchanged, from an in-memory image of that block kept from the previous
//! direct write; the image is read back from the file when a write through
//! the other paths may have changed it. The bytes of the last block past
//! the new ones are written as zeros: the caller writes at the end of its
//! data, and the bytes past it are zeros (allocated or prepared space).
//!
//! A direct write drops the page cache's copy of the blocks it covers, so a
//! reader of the file (`pread`) reads them from the disk again, and sees the
//! new bytes.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;
use rustix::io::{Errno, ReadWriteFlags};

use super::DIRECT_BLOCK_BYTES;

const BLOCK: usize = DIRECT_BLOCK_BYTES as usize;

/// Zeros written per direct write when preparing space.
const ZERO_WRITE_BYTES: usize = 256 * 1024;

/// Memory whose start is aligned to [`BLOCK`], without `unsafe`: an
/// over-allocated vector, used from its first aligned byte.
#[derive(Default)]
struct AlignedBuf {
    bytes: Vec<u8>,
}

impl AlignedBuf {
    /// `len` aligned bytes (their content kept if the buffer did not grow).
    fn get(&mut self, len: usize) -> &mut [u8] {
        if self.skip() + len > self.bytes.len() {
            let mut grown = vec![0; len.max(BLOCK) * 2 + BLOCK];
            let old_skip = self.skip();
            let new_skip = grown.as_ptr().align_offset(BLOCK);
            let kept = self.bytes.len().saturating_sub(old_skip).min(BLOCK);
            grown[new_skip..new_skip + kept]
                .copy_from_slice(&self.bytes[old_skip..old_skip + kept]);
            self.bytes = grown;
        }
        let skip = self.skip();
        &mut self.bytes[skip..skip + len]
    }

    fn skip(&self) -> usize {
        // For bytes `align_offset` always computes the offset; the vector
        // holds a whole block more than asked for, so it fits.
        self.bytes
            .as_ptr()
            .align_offset(BLOCK)
            .min(self.bytes.len())
    }
}

/// The file's last partial block as the last direct write left it.
#[derive(Default)]
struct Tail {
    /// The image's first byte in the file (a block boundary), and how many
    /// of its bytes are data; valid only while `known`.
    start: u64,
    len: usize,
    known: bool,
    buf: AlignedBuf,
}

/// The direct-write state of one open file.
#[derive(Default)]
pub(super) struct DirectWriter {
    /// The `O_DIRECT` descriptor, opened at the first durable write; `None`
    /// if the file system refused it.
    fd: OnceLock<Option<File>>,
    /// Set once a direct write was refused (EINVAL: no direct I/O on this
    /// file system, or logical blocks larger than [`BLOCK`]).
    refused: AtomicBool,
    tail: Mutex<Tail>,
}

impl DirectWriter {
    fn fd(&self, file: &File) -> Option<&File> {
        if self.refused.load(Ordering::Relaxed) {
            return None;
        }
        self.fd.get_or_init(|| open_direct(file)).as_ref()
    }

    /// The file was written, or its length changed, another way: the next
    /// direct write reads its first block's earlier bytes from the file.
    pub(super) fn forget_tail(&self) {
        if self.fd.get().is_some() {
            self.tail.lock().known = false;
        }
    }

    #[cfg(test)]
    pub(super) fn refuse(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// Whether durable writes go direct: `None` before the first.
    #[cfg(test)]
    pub(super) fn goes_direct(&self) -> Option<bool> {
        let opened = self.fd.get()?;
        Some(opened.is_some() && !self.refused.load(Ordering::Relaxed))
    }

    /// Writes `buf` at `offset` with one durable direct write; `Ok(false)`
    /// if the file system does not take direct writes (nothing written).
    pub(super) fn write_durable(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<bool> {
        if buf.is_empty() {
            return Ok(false);
        }
        let Some(fd) = self.fd(file) else {
            return Ok(false);
        };
        let mut tail = self.tail.lock();
        let start = offset - offset % DIRECT_BLOCK_BYTES;
        let prefix = (offset - start) as usize;
        let total = prefix + buf.len();
        let padded = total.div_ceil(BLOCK) * BLOCK;
        let known = tail.known && tail.start == start && tail.len == prefix;
        // From here on the image is being rewritten: unknown until the
        // write succeeds.
        tail.known = false;
        let image = tail.buf.get(padded);
        if !known && prefix > 0 {
            let mut filled = 0;
            while filled < prefix {
                match file.read_at(&mut image[filled..prefix], start + filled as u64) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("durable write at {offset}: the file ends before it"),
                        ))
                    }
                    Ok(read) => filled += read,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(error),
                }
            }
        }
        image[prefix..total].copy_from_slice(buf);
        image[total..padded].fill(0);
        let mut done = 0;
        while done < padded {
            let slice = [io::IoSlice::new(&image[done..padded])];
            match rustix::io::pwritev2(fd, &slice, start + done as u64, ReadWriteFlags::DSYNC) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) if written.is_multiple_of(BLOCK) || done + written == padded => done += written,
                Ok(written) => {
                    return Err(io::Error::other(format!(
                        "durable direct write at {start}: {written} bytes written, not a whole number of blocks"
                    )))
                }
                Err(Errno::INTR) => {}
                Err(Errno::INVAL) if done == 0 => {
                    tracing::debug!("direct writes refused (EINVAL); writing and syncing instead");
                    self.refused.store(true, Ordering::Relaxed);
                    return Ok(false);
                }
                Err(error) => return Err(error.into()),
            }
        }
        // Keep the new last partial block for the next write.
        let end = offset + buf.len() as u64;
        let keep = (end % DIRECT_BLOCK_BYTES) as usize;
        if keep > 0 {
            image.copy_within(padded - BLOCK..padded - BLOCK + keep, 0);
        }
        tail.start = end - keep as u64;
        tail.len = keep;
        tail.known = true;
        Ok(true)
    }

    /// Writes `len` zeros at `offset` (space past the file's data), by
    /// direct writes where the range is aligned and the file system takes
    /// them, else by `pwrite` on `file`. Makes nothing durable.
    pub(super) fn write_zeros(&self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        let aligned =
            offset.is_multiple_of(DIRECT_BLOCK_BYTES) && len.is_multiple_of(DIRECT_BLOCK_BYTES);
        let chunk = (len as usize).min(ZERO_WRITE_BYTES);
        let mut zeros = AlignedBuf::default();
        let zeros = zeros.get(chunk);
        let mut at = offset;
        let end = offset + len;
        let direct = if aligned { self.fd(file) } else { None };
        while at < end {
            let this = ((end - at) as usize).min(chunk);
            match direct {
                Some(fd) => match rustix::io::pwrite(fd, &zeros[..this], at) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(written) if written.is_multiple_of(BLOCK) => at += written as u64,
                    Ok(written) => {
                        // Unaligned remainder: finish it buffered.
                        at += written as u64;
                        return file.write_all_at(&vec![0; (end - at) as usize], at);
                    }
                    Err(Errno::INTR) => {}
                    Err(Errno::INVAL) => {
                        return file.write_all_at(&vec![0; (end - at) as usize], at)
                    }
                    Err(error) => return Err(error.into()),
                },
                None => {
                    file.write_all_at(&zeros[..this], at)?;
                    at += this as u64;
                }
            }
        }
        Ok(())
    }
}

/// Opens `file` again, write-only and `O_DIRECT`, through `/proc/self/fd`
/// (the file may have been renamed since it was opened); `None` where that
/// fails (no `/proc`, a file system without direct I/O).
fn open_direct(file: &File) -> Option<File> {
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(direct) => Some(direct),
        Err(error) => {
            tracing::debug!(error = %error, "no direct writes for this file; writing and syncing instead");
            None
        }
    }
}
