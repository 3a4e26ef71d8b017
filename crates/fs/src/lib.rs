//! The file-system seam: the few calls the log and the chunk store make on files and
//! directories, as a trait, so tests can run them over a simulated disk that loses power
//! (`sim`).
//!
//! `StdFs` is the default and makes exactly the calls the stores made before the seam existed.
//! Semantics the stores rely on, which every implementation must keep:
//! - a write is durable only after `sync_data`/`sync_all` of its file returns;
//! - a creation, rename or removal is durable only after `sync_dir` of its directory;
//! - `allocate` extends a file with zeros (reads past the written data return zeros).

use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

pub mod sim;

pub use sim::{CutReport, SimFs};

/// An open file: positioned reads and writes, syncs, size.
pub trait FsFile: Send + Sync + Debug {
    /// Read up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Read up to `len` bytes at `offset` onto the end of `out`; fewer only at the end of the
    /// file. Returns the bytes read. (`StdFs` reads into the vector's spare capacity without
    /// zeroing it first: chunk gets of large chunks.)
    fn read_append_at(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<usize> {
        let start = out.len();
        out.resize(start + len, 0);
        let n = self.read_at(&mut out[start..], offset)?;
        out.truncate(start + n);
        Ok(n)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Write `bufs` one after the other from `offset` (one system call where the platform
    /// has one; not atomic either way).
    fn write_all_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut at = offset;
        for b in bufs {
            self.write_all_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// fdatasync: the file's data (and the size needed to read it) is durable.
    fn sync_data(&self) -> io::Result<()>;
    /// fsync: data and metadata.
    fn sync_all(&self) -> io::Result<()>;
    fn size(&self) -> io::Result<u64>;
    /// Make the file at least `len` bytes, the new bytes zero (preallocation).
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Overwrite `[from, to)` with zeros without changing the size.
    fn zero_range(&self, from: u64, to: u64) -> io::Result<()>;
    /// Cut or extend the file to `len` bytes (new bytes zero); durable after `sync_all`.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserve disk blocks for the file's first `len` bytes without changing its size or any
    /// byte (`fallocate` with `FALLOC_FL_KEEP_SIZE`), so that appends within them allocate
    /// nothing. Best effort: `Ok` without reserving where the file system cannot (the
    /// simulated disk models bytes, not blocks: there it is only a call a cut can fall on,
    /// and `unreserve` a truncate to the current size); where the disk has less than
    /// `2 × len` free ([`reservation_fits`]) it reserves nothing and gives back what the
    /// file already held past its size (a reservation left by a process that crashed);
    /// after an error (such as a full disk) what was reserved is given back. Call it only
    /// while nothing writes to the file.
    fn reserve(&self, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Give back the blocks reserved past the file's size. Changes no byte and no size (the
    /// modification time, yes); call it only while nothing writes to the file and once what
    /// was written is synced (a truncate also sets the size the disk keeps).
    fn unreserve(&self) -> io::Result<()> {
        Ok(())
    }
    /// Hint that reads are random (no readahead). A no-op where there is no page cache.
    fn advise_random(&self) -> io::Result<()> {
        Ok(())
    }
    /// Drop the file's pages from the page cache (cold-read measurements).
    fn drop_cache(&self) -> io::Result<()> {
        Ok(())
    }
    /// Read `buf.len()` bytes at `offset` only if the page cache holds them all, without
    /// waiting for the disk: `Some(n)` as `read_at` would return, `None` if any would have to
    /// come from the disk, an error of kind `Unsupported` if the file system cannot tell (the
    /// default).
    fn read_at_if_cached(&self, _buf: &mut [u8], _offset: u64) -> io::Result<Option<usize>> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// Read a record past the page cache: `head.len()` bytes at `offset` into `head`, then up
    /// to `len` bytes after them into the returned vector, shorter only at the end of the file
    /// (`head` is then only partly filled if the vector is empty). `StdFs` reads with
    /// `O_DIRECT` where the file system allows it, so a large cold read is one transfer into
    /// the caller's memory that fills no page of the cache; elsewhere, and by
    /// default, a normal read.
    fn read_uncached_at(&self, head: &mut [u8], len: usize, offset: u64) -> io::Result<Vec<u8>> {
        read_record_cached(self, head, len, offset)
    }
}

/// `FsFile::read_uncached_at` through the page cache: the head, then the body after it.
fn read_record_cached<F: FsFile + ?Sized>(
    file: &F,
    head: &mut [u8],
    len: usize,
    offset: u64,
) -> io::Result<Vec<u8>> {
    let n = file.read_at(head, offset)?;
    let mut body = Vec::new();
    if n == head.len() {
        file.read_append_at(&mut body, len, offset + n as u64)?;
    }
    Ok(body)
}

/// The least alignment of `O_DIRECT` transfers (file offset, length and memory address): 4 KiB
/// covers devices with 512-byte and with 4 KiB logical blocks; a file system that asks for
/// more (`statx` `STATX_DIOALIGN`) gets what it asks.
pub const DIRECT_ALIGN_BYTES_MIN: usize = 4096;

/// Reads this process has done with `O_DIRECT` (`FsFile::read_uncached_at` of `StdFs`); tests
/// use it to tell that the direct path ran rather than its fallback.
static DIRECT_READS: AtomicU64 = AtomicU64::new(0);

/// The alignment uncached reads of the file at `path` would use, `None` if they would go
/// through the cache (the file system refuses `O_DIRECT` or reports no direct I/O for the
/// file): the same decision `FsFile::read_uncached_at` makes, for tests and tools.
pub fn direct_alignment_of(path: &Path) -> Option<usize> {
    direct_alignment(&open_direct(path).ok()?)
}

/// Open `path` to read with `O_DIRECT`.
fn open_direct(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(path)
}

/// The size of a memory page (the unit the page cache holds).
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// Reads this process has done with `O_DIRECT`.
pub fn direct_reads() -> u64 {
    DIRECT_READS.load(Ordering::Relaxed)
}

/// A held directory lock; released when dropped.
pub trait DirLock: Send + Sync + Debug {}

/// Files and directories.
pub trait Fs: Send + Sync + Debug {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Take the exclusive lock file `path`; `ErrorKind::WouldBlock` if another holds it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>>;
    /// Names of the entries in `dir` (a name that is not UTF-8, lossily).
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Open an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn FsFile>>;
    /// Open an existing file only to read it (verification of a store it may not write).
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        self.open(path)
    }
    /// Create (or truncate) a file for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn FsFile>>;
    /// The whole contents of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Make creations, renames and removals in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn is_dir(&self, dir: &Path) -> bool;
}

/// A name a file system puts in a directory of its own accord: `lost+found` where the
/// directory is a mount point, and what NFS (`.nfsXXXX`) or FUSE (`.fuse_hiddenXXXX`) keep
/// of a file removed while it was open (a truncated segment a reader still held, say). A
/// directory whose every file is accounted for (the log's, the chunk store's) leaves these
/// alone.
pub fn is_left_by_the_file_system(name: &str) -> bool {
    name == "lost+found" || name.starts_with(".nfs") || name.starts_with(".fuse_hidden")
}

/// The real file system (`std::fs` and a few Linux calls).
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFs;

/// `FsFile::reserve` on a plain file: blocks for its first `len` bytes reserved with
/// `fallocate(FALLOC_FL_KEEP_SIZE)`, only where the disk keeps as much free again (a
/// reservation must not be what fills it for everything else); nothing where the file
/// system cannot; after a failure, what it reserved is given back.
pub fn reserve_blocks(file: &std::fs::File, len: u64) -> io::Result<()> {
    let fs = rustix::fs::fstatvfs(file)?;
    if !reservation_fits(fs.f_bavail.saturating_mul(fs.f_frsize), len) {
        // Nothing new on a nearly full disk, and nothing kept from an earlier reservation.
        return unreserve_blocks(file);
    }
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::KEEP_SIZE, 0, len) {
        Ok(()) | Err(rustix::io::Errno::OPNOTSUPP) => Ok(()),
        Err(e) => {
            // A failed fallocate may keep what it allocated before failing (ext4).
            let _ = unreserve_blocks(file);
            Err(e.into())
        }
    }
}

/// Whether blocks for `len` bytes may be reserved on a disk with `free_bytes` available: only
/// where as much again stays free, so a reservation is never what fills a disk for
/// everything else.
pub fn reservation_fits(free_bytes: u64, len: u64) -> bool {
    free_bytes >= len.saturating_mul(2)
}

/// `FsFile::unreserve` on a plain file: truncating it to the size it has frees the blocks
/// past it (ext4, XFS). Only while nothing writes to it.
pub fn unreserve_blocks(file: &std::fs::File) -> io::Result<()> {
    let len = file.metadata()?.len();
    file.set_len(len)
}

/// The default file system, shared.
pub fn std_fs() -> Arc<dyn Fs> {
    Arc::new(StdFs)
}

#[derive(Debug)]
struct StdFile {
    file: File,
    /// The same file opened again with `O_DIRECT` (through `/proc/self/fd`, so it is the
    /// same inode whatever became of the path), on the first uncached read; `None` where the
    /// file system refuses `O_DIRECT` (tmpfs before Linux 6.6, for one).
    direct: OnceLock<Option<Direct>>,
    /// A direct read was refused (`EINVAL`): later uncached reads go through the cache.
    direct_refused: AtomicBool,
}

#[derive(Debug)]
struct Direct {
    file: File,
    align: usize,
}

impl StdFile {
    fn new(file: File) -> Self {
        StdFile {
            file,
            direct: OnceLock::new(),
            direct_refused: AtomicBool::new(false),
        }
    }

    fn direct(&self) -> Option<&Direct> {
        if self.direct_refused.load(Ordering::Relaxed) {
            return None;
        }
        if let Some(d) = self.direct.get() {
            return d.as_ref();
        }
        let proc_path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        match open_direct(Path::new(&proc_path)) {
            Ok(file) => {
                let _ = self
                    .direct
                    .set(direct_alignment(&file).map(|align| Direct { file, align }));
            }
            // The file system refuses O_DIRECT: for good.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                let _ = self.direct.set(None);
            }
            // Too many open files, no /proc …: perhaps not next time.
            Err(_) => return None,
        }
        self.direct.get().and_then(Option::as_ref)
    }

    /// `read_uncached_at` with `O_DIRECT`: the aligned span around the record is read into an
    /// aligned part of a new vector, `head` copied out of it and the body moved to the
    /// vector's start. `None` if the direct read could not be done (the caller reads
    /// normally instead).
    fn read_direct(
        &self,
        direct: &Direct,
        head: &mut [u8],
        len: usize,
        offset: u64,
    ) -> Option<Vec<u8>> {
        let align = direct.align;
        let want = head.len() + len;
        let start = offset - offset % align as u64;
        let skip = (offset - start) as usize;
        let span = (skip + want).div_ceil(align) * align;
        let mut buf = vec![0u8; span + align];
        let pad = buf.as_ptr().align_offset(align);
        let mut got = 0;
        while got < skip + want {
            if got % align != 0 {
                // A short read that was not the end of the file: the next one would not be
                // aligned.
                return None;
            }
            match direct
                .file
                .read_at(&mut buf[pad + got..pad + span], start + got as u64)
            {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) {
                        self.direct_refused.store(true, Ordering::Relaxed);
                    }
                    return None;
                }
            }
        }
        DIRECT_READS.fetch_add(1, Ordering::Relaxed);
        let end = pad + got.clamp(skip, skip + want);
        let body = pad + skip + head.len();
        if end < body {
            let h = end - (pad + skip);
            head[..h].copy_from_slice(&buf[pad + skip..end]);
            return Some(Vec::new());
        }
        head.copy_from_slice(&buf[pad + skip..body]);
        buf.copy_within(body..end, 0);
        buf.truncate(end - body);
        Some(buf)
    }
}

/// The alignment `O_DIRECT` transfers of `file` need: what `statx` reports (Linux 6.1+), at
/// least `DIRECT_ALIGN_BYTES_MIN`; `None` if it reports that the file takes no direct I/O.
fn direct_alignment(file: &File) -> Option<usize> {
    use rustix::fs::{AtFlags, StatxFlags};
    match rustix::fs::statx(file, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN) {
        Ok(st) if StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::DIOALIGN) => {
            if st.stx_dio_offset_align == 0 {
                return None;
            }
            let asked = st.stx_dio_offset_align.max(st.stx_dio_mem_align) as usize;
            Some(asked.max(DIRECT_ALIGN_BYTES_MIN).next_power_of_two())
        }
        _ => Some(DIRECT_ALIGN_BYTES_MIN),
    }
}

#[derive(Debug)]
struct StdLock {
    _file: File,
}

impl DirLock for StdLock {}

impl FsFile for StdFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match self
                .file
                .read_at(&mut buf[filled..], offset + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(filled)
    }

    fn read_append_at(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<usize> {
        let start = out.len();
        out.reserve_exact(len);
        while out.len() < start + len {
            let at = offset + (out.len() - start) as u64;
            match rustix::io::pread(&self.file, rustix::buffer::spare_capacity(out), at) {
                Ok(0) => break,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // The spare capacity may be larger than asked for.
        out.truncate(start + len);
        Ok(out.len() - start)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    /// pwritev, continued after short writes.
    fn write_all_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut slices: Vec<io::IoSlice<'_>> = bufs.iter().map(|b| io::IoSlice::new(b)).collect();
        let mut slices = &mut slices[..];
        let mut at = offset;
        while !slices.is_empty() {
            let n = match rustix::io::pwritev(&self.file, slices, at) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote 0"));
            }
            at += n as u64;
            io::IoSlice::advance_slices(&mut slices, n);
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn reserve(&self, len: u64) -> io::Result<()> {
        reserve_blocks(&self.file, len)
    }

    fn unreserve(&self) -> io::Result<()> {
        unreserve_blocks(&self.file)
    }

    fn advise_random(&self) -> io::Result<()> {
        rustix::fs::fadvise(&self.file, 0, None, rustix::fs::Advice::Random).map_err(Into::into)
    }

    fn drop_cache(&self) -> io::Result<()> {
        rustix::fs::fadvise(&self.file, 0, None, rustix::fs::Advice::DontNeed).map_err(Into::into)
    }

    /// `preadv2` with `RWF_NOWAIT`: the kernel answers `EAGAIN` instead of reading the disk.
    fn read_at_if_cached(&self, buf: &mut [u8], offset: u64) -> io::Result<Option<usize>> {
        let mut filled = 0;
        while filled < buf.len() {
            let mut slices = [io::IoSliceMut::new(&mut buf[filled..])];
            match rustix::io::preadv2(
                &self.file,
                &mut slices,
                offset + filled as u64,
                rustix::io::ReadWriteFlags::NOWAIT,
            ) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return Ok(None),
                // The kernel or the file system cannot tell.
                Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::INVAL) => {
                    return Err(io::ErrorKind::Unsupported.into())
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Some(filled))
    }

    fn read_uncached_at(&self, head: &mut [u8], len: usize, offset: u64) -> io::Result<Vec<u8>> {
        if let Some(body) = self
            .direct()
            .and_then(|direct| self.read_direct(direct, head, len, offset))
        {
            return Ok(body);
        }
        read_record_cached(self, head, len, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// fallocate, falling back to extending the file where it is unsupported.
    fn allocate(&self, len: u64) -> io::Result<()> {
        match rustix::fs::fallocate(&self.file, rustix::fs::FallocateFlags::empty(), 0, len) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::OPNOTSUPP) => {
                if self.size()? < len {
                    self.file.set_len(len)?;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn zero_range(&self, from: u64, to: u64) -> io::Result<()> {
        if from >= to {
            return Ok(());
        }
        let flags = rustix::fs::FallocateFlags::ZERO_RANGE | rustix::fs::FallocateFlags::KEEP_SIZE;
        if rustix::fs::fallocate(&self.file, flags, from, to - from).is_ok() {
            return Ok(());
        }
        let zeros = vec![0u8; 1 << 20];
        let mut at = from;
        while at < to {
            let n = (to - at).min(zeros.len() as u64) as usize;
            self.file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }
}

impl Fs for StdFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Box::new(StdLock { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(io::ErrorKind::WouldBlock.into()),
            Err(e) => Err(e.into()),
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir)? {
            // A name that is not UTF-8 (a damaged one, say) is listed lossily, not left out,
            // so that whoever lists the directory sees that something is there.
            out.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(StdFile::new(file)))
    }

    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        Ok(Arc::new(StdFile::new(File::open(path)?)))
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Arc::new(StdFile::new(file)))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn is_dir(&self, dir: &Path) -> bool {
        dir.is_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::reservation_fits;

    #[test]
    fn a_reservation_fits_only_where_as_much_again_stays_free() {
        assert!(reservation_fits(512 << 20, 256 << 20));
        assert!(!reservation_fits((512 << 20) - 1, 256 << 20));
        assert!(reservation_fits(0, 0));
        // No overflow for absurd lengths: they never fit.
        assert!(!reservation_fits(u64::MAX - 1, u64::MAX));
    }
}
