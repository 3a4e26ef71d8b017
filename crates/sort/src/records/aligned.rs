//! Buffers aligned for O_DIRECT, taken safely from an over-allocated `Vec` at an aligned
//! offset, and file opening with or without O_DIRECT.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Alignment of buffers, file offsets and lengths for O_DIRECT (a page covers every
/// logical block size in use).
pub(crate) const ALIGN_BYTES: usize = 4096;

/// Rounds up to a multiple of [`ALIGN_BYTES`].
pub(crate) fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN_BYTES) * ALIGN_BYTES
}

/// A fixed-capacity byte buffer whose start is aligned to [`ALIGN_BYTES`]. Zeroed memory
/// from the allocator, so pages are only touched when used.
#[derive(Debug, Default)]
pub(crate) struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    capacity: usize,
}

impl AlignedBuf {
    /// A buffer of at least `capacity` bytes (rounded up to the alignment).
    pub(crate) fn new(capacity: usize) -> AlignedBuf {
        let capacity = align_up(capacity);
        let raw = vec![0u8; capacity + ALIGN_BYTES];
        let start = raw.as_ptr().align_offset(ALIGN_BYTES);
        assert!(start < ALIGN_BYTES, "align_offset on u8 always succeeds");
        AlignedBuf {
            raw,
            start,
            capacity,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.capacity]
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.capacity]
    }
}

/// How the sort's large sequential reads and writes meet the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// `O_DIRECT` wherever the file system takes it, the page cache where it refuses.
    /// Copying every byte into and out of the page cache cost about half of a buffered
    /// sort's time here (docs/benchmarks/sort.md), and the sort reads each byte once per
    /// pass, so a cache would gain it nothing.
    #[default]
    Auto,
    /// `O_DIRECT` everywhere; a file system that refuses it is an error.
    Direct,
    /// Through the page cache.
    Buffered,
}

/// Whether a file system refused `O_DIRECT` (Linux says `EINVAL` at open).
fn refused_direct(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// Whether `path` (an existing file) can be read with `O_DIRECT` under `mode`: it is
/// opened so and its first block read (some file systems take the flag at open and refuse
/// the I/O). `Direct` turns a refusal into an error that says so.
pub(crate) fn direct_for_file(path: &Path, mode: IoMode) -> std::io::Result<bool> {
    if mode == IoMode::Buffered {
        return Ok(false);
    }
    let tried = open_read(path, true).and_then(|file| {
        let mut block = AlignedBuf::new(ALIGN_BYTES);
        read_full_at(&file, block.as_mut_slice(), 0).map(|_| ())
    });
    decide(tried, mode, path)
}

/// Fresh probe names tried before an `AlreadyExists` is reported as it is.
const PROBE_TRIES_MAX: u32 = 64;

/// Distinguishes the probe files of sorts running at once in one process.
static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether files created in `dir` can be written and read with `O_DIRECT` under `mode`: a
/// probe file of a new name is created there, one block written and read back, and the
/// file removed.
pub(crate) fn direct_for_dir(dir: &Path, mode: IoMode) -> std::io::Result<bool> {
    if mode == IoMode::Buffered {
        return Ok(false);
    }
    let mut tries = 0;
    let (probe, file) = loop {
        tries += 1;
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let probe = dir.join(format!(".spindle-sort-probe-{}-{n}", std::process::id()));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
        {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < PROBE_TRIES_MAX => {
                continue
            }
            opened => break (probe, opened),
        }
    };
    // A file system that refuses O_DIRECT does so after `create_new` made the file.
    let created = file.as_ref().map_or_else(refused_direct, |_| true);
    let tried = file.and_then(|file| {
        let mut block = AlignedBuf::new(ALIGN_BYTES);
        file.write_all_at(block.as_slice(), 0)?;
        read_full_at(&file, block.as_mut_slice(), 0).map(|_| ())
    });
    if created {
        let _ = std::fs::remove_file(&probe);
    }
    decide(tried, mode, dir)
}

/// `Ok(true)` if the probe worked, `Ok(false)` if the file system refused O_DIRECT under
/// `Auto`, else the error.
fn decide(tried: std::io::Result<()>, mode: IoMode, path: &Path) -> std::io::Result<bool> {
    match tried {
        Ok(()) => Ok(true),
        Err(e) if refused_direct(&e) && mode == IoMode::Auto => Ok(false),
        Err(e) if refused_direct(&e) => Err(direct_refused(path)),
        Err(e) => Err(e),
    }
}

fn direct_refused(path: &Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!(
            "the file system of {} refuses O_DIRECT (drop --direct to use the page cache there)",
            path.display()
        ),
    )
}

/// Opens a file for reading, with O_DIRECT if asked.
pub(crate) fn open_read(path: &Path, direct: bool) -> std::io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    if direct {
        opts.custom_flags(libc::O_DIRECT);
    }
    opts.open(path)
}

/// Creates a new file for writing, with O_DIRECT if asked; refuses one that exists (every
/// name the sort writes is its own: a bucket in its private directory, the output's
/// temporary name).
pub(crate) fn create_write(path: &Path, direct: bool) -> std::io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    if direct {
        opts.custom_flags(libc::O_DIRECT);
    }
    opts.open(path)
}

/// Reads into `buf` at `offset` until it is full or the file ends; returns the bytes read.
/// With O_DIRECT, `buf`'s length and `offset` must be aligned (a short read at the end of
/// the file is fine).
pub(crate) fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut at = 0;
    while at < buf.len() {
        match file.read_at(&mut buf[at..], offset + at as u64) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(at)
}

/// A file written at increasing offsets. With O_DIRECT, whole aligned pieces go through
/// the direct descriptor and an unaligned tail through a second, buffered one.
#[derive(Debug)]
pub(crate) struct WriteFile {
    pub(crate) file: File,
    tail: Option<File>,
    direct: bool,
}

impl WriteFile {
    pub(crate) fn create(path: &Path, direct: bool) -> std::io::Result<WriteFile> {
        let file = create_write(path, direct)?;
        let tail = if direct {
            Some(OpenOptions::new().write(true).open(path)?)
        } else {
            None
        };
        Ok(WriteFile { file, tail, direct })
    }

    pub(crate) fn write_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()> {
        let aligned =
            bytes.len().is_multiple_of(ALIGN_BYTES) && offset.is_multiple_of(ALIGN_BYTES as u64);
        match (&self.tail, self.direct && !aligned) {
            (Some(tail), true) => tail.write_all_at(bytes, offset),
            _ => self.file.write_all_at(bytes, offset),
        }
    }

    pub(crate) fn sync(&self) -> std::io::Result<()> {
        if let Some(tail) = &self.tail {
            tail.sync_data()?;
        }
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_sized() {
        for capacity in [1, 100, 4096, 5000, 1 << 20] {
            let mut buf = AlignedBuf::new(capacity);
            assert_eq!(buf.as_slice().as_ptr() as usize % ALIGN_BYTES, 0);
            assert!(buf.capacity() >= capacity && buf.capacity().is_multiple_of(ALIGN_BYTES));
            assert_eq!(buf.as_mut_slice().len(), buf.capacity());
        }
    }
}
