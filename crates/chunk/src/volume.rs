//! Volume files: creating them, reading one record with one positioned read, scanning them
//! record by record (recovery and verification), and writing hint files.
//!
//! Fault model: a write that was not followed by a completed fdatasync may be lost or torn
//! anywhere (any subset of its pages may reach the disk); a created, renamed or removed name
//! is durable only once its directory is synced. Bytes that were synced stay as written
//! unless the medium rots, which checksums and the BLAKE3 id detect. Every call goes through
//! the `spindle_fs::Fs` seam, so tests can cut power under the store (`spindle_fs::SimFs`).

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use spindle_fs::{Fs, FsFile};

use crate::error::{ChunkError, Result};
use crate::format::{
    self, HintEntry, RecordHeader, RecordKind, VolumeHeader, RECORD_HEADER_LEN, RECORD_MAGIC,
    VOLUME_HEADER_LEN,
};
use crate::id::ChunkId;

/// Chunks of at least this many bytes whose pages are not cached are read with `O_DIRECT`
/// the first time (`VolumeFile::read_record`); smaller ones always through the page cache.
pub const DIRECT_READ_BYTES_MIN: u64 = 64 << 10;

/// Slots of a volume's `RecentlyUncached` table.
const RECENT_SLOTS: usize = 1024;

/// Which large chunks of a volume were lately read past the page cache: a direct-mapped
/// table of id fingerprints (an id is a BLAKE3 hash, so its first 8 bytes are uniform). A
/// chunk read a second time while its fingerprint is still here is read through the cache
/// and so admitted to it: a chunk read once (a scan, a backup, a cold miss) costs the cache
/// one page (the probe's, `read_record`), a chunk read again stays cached as long as the
/// kernel keeps it. A collision only makes a chunk wait for one more read to be admitted.
#[derive(Debug)]
struct RecentlyUncached {
    slots: Box<[AtomicU64]>,
}

impl RecentlyUncached {
    fn new() -> Self {
        RecentlyUncached {
            slots: (0..RECENT_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Whether `id` was recorded since its slot was last taken; records it if not, forgets
    /// it if so (so it is admitted once, not on every read).
    fn seen_again(&self, id: &ChunkId) -> bool {
        let b = id.as_bytes();
        // Never 0, which marks an empty slot.
        let fingerprint = u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")) | 1;
        let slot = &self.slots
            [u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")) as usize % RECENT_SLOTS];
        if slot.load(Ordering::Relaxed) == fingerprint {
            slot.store(0, Ordering::Relaxed);
            true
        } else {
            slot.store(fingerprint, Ordering::Relaxed);
            false
        }
    }
}

/// An open volume file, shared by readers.
#[derive(Debug)]
pub struct VolumeFile {
    /// Path of the file.
    pub path: PathBuf,
    pub(crate) file: Arc<dyn FsFile>,
    recent: RecentlyUncached,
}

impl VolumeFile {
    /// Open an existing volume for reading.
    pub fn open(fs: &dyn Fs, path: PathBuf) -> Result<Self> {
        let file = fs
            .open_read(&path)
            .map_err(|e| ChunkError::io("open volume", &path, e))?;
        // Gets are random reads of whole records. Readahead past a record reads neighbouring
        // chunks nobody asked for: on a store larger than memory that is wasted disk time
        // (and in a benchmark it makes "cold" reads of a small store look warm).
        file.advise_random()
            .map_err(|e| ChunkError::io("fadvise volume", &path, e))?;
        Ok(Self {
            path,
            file,
            recent: RecentlyUncached::new(),
        })
    }

    /// Read exactly `buf.len()` bytes at `offset`; `None` if the file ends first.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<Option<()>> {
        let n = self
            .file
            .read_at(buf, offset)
            .map_err(|e| ChunkError::io("read volume", &self.path, e))?;
        Ok((n == buf.len()).then_some(()))
    }

    /// Read the chunk whose record starts at `offset` with `len` data bytes. Checks the
    /// header, and BLAKE3 of the data against `id` (`verify_id`) or else the data CRC; any
    /// mismatch is `Corrupt`, never wrong bytes. One I/O on a cold cache (`read_record`).
    pub fn read_chunk(
        &self,
        id: &ChunkId,
        offset: u64,
        len: u32,
        verify_id: bool,
    ) -> Result<Vec<u8>> {
        let corrupt = |reason: String| ChunkError::Corrupt {
            volume: self.path.clone(),
            offset,
            reason,
        };
        let mut header = [0u8; RECORD_HEADER_LEN as usize];
        let data = self.read_record(id, &mut header, offset, len)?;
        if data.len() < len as usize {
            return Err(corrupt(format!(
                "volume ends {} bytes into a {len}-byte chunk",
                data.len()
            )));
        }
        let h = RecordHeader::decode(&header).map_err(|r| corrupt(r.to_string()))?;
        if h.kind != RecordKind::Put || h.id != *id || h.len != len {
            return Err(corrupt(format!(
                "record does not hold chunk {id} of {len} bytes"
            )));
        }
        if verify_id {
            if ChunkId::of(&data) != *id {
                return Err(corrupt(format!("bytes do not hash to chunk id {id}")));
            }
        } else if crc32c::crc32c(&data) != h.data_crc {
            return Err(corrupt(format!("data checksum mismatch for chunk {id}")));
        }
        Ok(data)
    }

    /// The record of `id` at `offset`: its header into `header`, then up to `len` data bytes
    /// (fewer only where the volume ends).
    ///
    /// A large record (`DIRECT_READ_BYTES_MIN`) whose pages are not cached, read for the first
    /// time lately (`RecentlyUncached`), is read past the cache (`FsFile::read_uncached_at`,
    /// `O_DIRECT`): one transfer of the whole record into memory of our own, with no
    /// page-cache page to allocate, fill and copy out of for it (the Disk Views' RocksDB
    /// blocks share the cache); a chunk read again is read through the cache, which then
    /// keeps it. Whether it is cached is asked of a page wholly inside its data (the header's
    /// page may be the end of the record before, read through the cache) with
    /// `RWF_NOWAIT`, which on a miss still starts a read of that one page (measured: the
    /// next probe finds it): so a chunk read once leaves one page in the cache, and its
    /// next read finds it and goes through the cache even if its `RecentlyUncached` slot was
    /// taken meanwhile. A file system that cannot tell reads through the cache, as before
    /// this existed.
    ///
    /// Through the cache, the data is read first, straight into the returned vector's
    /// uninitialised capacity, then the header, whose page that read has just brought in.
    fn read_record(
        &self,
        id: &ChunkId,
        header: &mut [u8; RECORD_HEADER_LEN as usize],
        offset: u64,
        len: u32,
    ) -> Result<Vec<u8>> {
        let io = |e| ChunkError::io("read volume", &self.path, e);
        if u64::from(len) >= DIRECT_READ_BYTES_MIN {
            // A page wholly within the data (at least 64 KiB long; on a machine with larger
            // pages the probe may share the header's page, and then only decides less well).
            let page = spindle_fs::page_size() as u64;
            let probe_at = (offset + RECORD_HEADER_LEN)
                .next_multiple_of(page)
                .min(offset + RECORD_HEADER_LEN + u64::from(len) - 1);
            let cached = match self.file.read_at_if_cached(&mut [0u8; 1], probe_at) {
                Ok(n) => n == Some(1),
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported => true,
                Err(e) => return Err(io(e)),
            };
            if !cached && !self.recent.seen_again(id) {
                return self
                    .file
                    .read_uncached_at(header, len as usize, offset)
                    .map_err(io);
            }
        }
        let mut data = Vec::new();
        self.file
            .read_append_at(&mut data, len as usize, offset + RECORD_HEADER_LEN)
            .map_err(io)?;
        if data.len() == len as usize && self.read_exact_at(header, offset)?.is_none() {
            data.clear();
        }
        Ok(data)
    }

    /// Check that a tombstone for `id` is at `offset` (verification tools).
    pub fn read_tombstone(&self, id: &ChunkId, offset: u64) -> Result<()> {
        let mut header = [0u8; RECORD_HEADER_LEN as usize];
        if self.read_exact_at(&mut header, offset)?.is_none() {
            return Err(ChunkError::Corrupt {
                volume: self.path.clone(),
                offset,
                reason: "volume ends inside the record header".into(),
            });
        }
        match RecordHeader::decode(&header) {
            Ok(h) if h.kind == RecordKind::Tombstone && h.id == *id => Ok(()),
            Ok(_) => Err(format!("record is not the tombstone of chunk {id}")),
            Err(reason) => Err(reason.to_string()),
        }
        .map_err(|reason| ChunkError::Corrupt {
            volume: self.path.clone(),
            offset,
            reason,
        })
    }

    /// Ask the kernel to drop this volume's cached pages (for cold-read measurements).
    pub fn drop_cache(&self) -> Result<()> {
        self.file
            .drop_cache()
            .map_err(|e| ChunkError::io("fadvise volume", &self.path, e))
    }
}

/// Create the volume `header` names in `dir`: header written and synced, directory synced.
pub fn create_volume(
    fs: &dyn Fs,
    dir: &Path,
    header: VolumeHeader,
) -> Result<(Arc<dyn FsFile>, VolumeFile)> {
    let path = format::volume_path(dir, header.number);
    // Volume numbers only grow, so the name is new; a leftover file of that number would be
    // one whose creation was never synced, and is replaced.
    let file = fs
        .create(&path)
        .map_err(|e| ChunkError::io("create volume", &path, e))?;
    file.write_all_at(&header.encode(), 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| ChunkError::io("write volume header", &path, e))?;
    sync_dir(fs, dir)?;
    let reader = VolumeFile::open(fs, path)?;
    Ok((file, reader))
}

/// fsync a directory so that created, renamed and removed names are durable.
pub fn sync_dir(fs: &dyn Fs, dir: &Path) -> Result<()> {
    fs.sync_dir(dir)
        .map_err(|e| ChunkError::io("sync directory", dir, e))
}

/// The length of a file.
pub fn file_len(fs: &dyn Fs, path: &Path) -> Result<u64> {
    fs.open_read(path)
        .and_then(|f| f.size())
        .map_err(|e| ChunkError::io("stat volume", path, e))
}

/// Write the hint file of `volume` atomically (temp file, sync, rename, sync directory).
/// Returns its size in bytes.
pub fn write_hint(
    fs: &dyn Fs,
    dir: &Path,
    volume: u32,
    volume_len: u64,
    entries: &[HintEntry],
) -> Result<u64> {
    let bytes = format::encode_hint(volume, volume_len, entries);
    let tmp = format::hint_tmp_path(dir, volume);
    let path = format::hint_path(dir, volume);
    let f = fs
        .create(&tmp)
        .map_err(|e| ChunkError::io("create hint", &tmp, e))?;
    f.write_all_at(&bytes, 0)
        .and_then(|()| f.sync_data())
        .map_err(|e| ChunkError::io("write hint", &tmp, e))?;
    fs.rename(&tmp, &path)
        .map_err(|e| ChunkError::io("rename hint", &path, e))?;
    sync_dir(fs, dir)?;
    Ok(bytes.len() as u64)
}

/// Read and check the header of volume `number`: a damaged header is corruption of synced
/// bytes (a volume's header is synced before any record is written to it).
pub fn check_volume_header(fs: &dyn Fs, path: &Path, number: u32) -> Result<VolumeHeader> {
    let mut b = [0u8; VOLUME_HEADER_LEN as usize];
    let n = fs
        .open_read(path)
        .and_then(|f| f.read_at(&mut b, 0))
        .map_err(|e| ChunkError::io("read volume header", path, e))?;
    if n < b.len() {
        return Err(ChunkError::Corrupt {
            volume: path.to_owned(),
            offset: 0,
            reason: "volume header is incomplete".into(),
        });
    }
    match VolumeHeader::decode(&b) {
        Ok(h) if h.number == number => Ok(h),
        Ok(h) => Err(ChunkError::Format {
            path: path.to_owned(),
            reason: format!("header says volume {}, file name says {number}", h.number),
        }),
        Err(reason) => Err(ChunkError::Corrupt {
            volume: path.to_owned(),
            offset: 0,
            reason,
        }),
    }
}

/// Whether the volume at `path` is one whose creation was cut short: no longer than a
/// header, and that header not whole (magic or checksum wrong). No record is written to a
/// volume before its header and name are synced, so it holds nothing. (A whole header this
/// build cannot read, such as a newer version, is not one.)
pub fn creation_cut_short(fs: &dyn Fs, path: &Path) -> Result<bool> {
    if file_len(fs, path)? > VOLUME_HEADER_LEN {
        return Ok(false);
    }
    let bytes = fs
        .read(path)
        .map_err(|e| ChunkError::io("read volume", path, e))?;
    Ok(
        !<&[u8; VOLUME_HEADER_LEN as usize]>::try_from(bytes.as_slice())
            .is_ok_and(format::volume_header_is_whole),
    )
}

/// Read a hint file and accept it only if it describes `volume` at exactly `volume_len` bytes.
pub fn read_hint(
    fs: &dyn Fs,
    dir: &Path,
    volume: u32,
    volume_len: u64,
) -> Option<(Vec<HintEntry>, u64)> {
    let bytes = fs.read(&format::hint_path(dir, volume)).ok()?;
    let hint = format::decode_hint(&bytes).ok()?;
    (hint.volume == volume && hint.volume_len == volume_len)
        .then_some((hint.entries, bytes.len() as u64))
}

/// How much of volume `volume` is known to have been synced: the length recorded in its
/// hint file if one decodes, else 0. Damage before that length cannot be a torn write.
pub fn hinted_synced_len(fs: &dyn Fs, dir: &Path, volume: u32) -> u64 {
    fs.read(&format::hint_path(dir, volume))
        .ok()
        .and_then(|b| format::decode_hint(&b).ok())
        .filter(|h| h.volume == volume)
        .map_or(0, |h| h.volume_len)
}

/// Where and why a scan stopped before the end of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStop {
    /// Offset of the first record that is not whole and valid.
    pub offset: u64,
    /// What was wrong with it.
    pub reason: String,
}

/// The records of a volume as found by reading it from the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Every valid record before the stop, in file order.
    pub entries: Vec<HintEntry>,
    /// End of the last valid record.
    pub valid_len: u64,
    /// Length of the file.
    pub file_len: u64,
    /// Set when the scan stopped before the end of the file.
    pub stop: Option<ScanStop>,
}

/// Scan a volume file. Checks the volume header, every record header and data CRC, and, if
/// `verify_ids`, that each put's bytes hash to its id. A bad volume header is an error; a bad
/// record ends the scan (the caller decides whether that is a torn tail or corruption).
pub fn scan_volume(fs: &dyn Fs, path: &Path, number: u32, verify_ids: bool) -> Result<Scan> {
    let file = fs
        .open_read(path)
        .map_err(|e| ChunkError::io("open volume", path, e))?;
    let file_len = file
        .size()
        .map_err(|e| ChunkError::io("stat volume", path, e))?;
    let mut r = io::BufReader::with_capacity(1 << 20, ReadAt { file, at: 0 });
    let mut vh = [0u8; VOLUME_HEADER_LEN as usize];
    let stop_at = |offset: u64, reason: String| ScanStop { offset, reason };
    if file_len < VOLUME_HEADER_LEN {
        return Ok(Scan {
            entries: Vec::new(),
            valid_len: 0,
            file_len,
            stop: Some(stop_at(0, "volume header is incomplete".into())),
        });
    }
    r.read_exact(&mut vh)
        .map_err(|e| ChunkError::io("read volume", path, e))?;
    match VolumeHeader::decode(&vh) {
        Ok(h) if h.number == number => {}
        Ok(h) => {
            return Err(ChunkError::Format {
                path: path.to_owned(),
                reason: format!("header says volume {}, file name says {number}", h.number),
            })
        }
        Err(reason) => {
            return Err(ChunkError::Corrupt {
                volume: path.to_owned(),
                offset: 0,
                reason,
            })
        }
    }
    let mut entries = Vec::new();
    let mut offset = VOLUME_HEADER_LEN;
    let mut data = Vec::new();
    let stop = loop {
        if offset == file_len {
            break None;
        }
        if file_len - offset < RECORD_HEADER_LEN {
            break Some(stop_at(
                offset,
                "record header cut short by end of file".into(),
            ));
        }
        let mut hb = [0u8; RECORD_HEADER_LEN as usize];
        r.read_exact(&mut hb)
            .map_err(|e| ChunkError::io("read volume", path, e))?;
        let h = match RecordHeader::decode(&hb) {
            Ok(h) => h,
            Err(reason) => break Some(stop_at(offset, reason.into())),
        };
        if file_len - offset - RECORD_HEADER_LEN < u64::from(h.len) {
            break Some(stop_at(
                offset,
                "record data cut short by end of file".into(),
            ));
        }
        data.resize(h.len as usize, 0);
        r.read_exact(&mut data)
            .map_err(|e| ChunkError::io("read volume", path, e))?;
        if crc32c::crc32c(&data) != h.data_crc {
            break Some(stop_at(offset, "record data checksum mismatch".into()));
        }
        if verify_ids && h.kind == RecordKind::Put && ChunkId::of(&data) != h.id {
            break Some(stop_at(
                offset,
                format!("bytes do not hash to chunk id {}", h.id),
            ));
        }
        entries.push(HintEntry {
            id: h.id,
            offset,
            len: h.len,
            kind: h.kind,
        });
        offset += h.record_len();
    };
    Ok(Scan {
        entries,
        valid_len: offset,
        file_len,
        stop,
    })
}

/// A file read from the start through positioned reads (for `BufReader`).
struct ReadAt {
    file: Arc<dyn FsFile>,
    at: u64,
}

impl io::Read for ReadAt {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Volume numbers present in `dir`, ascending.
pub fn list_volumes(fs: &dyn Fs, dir: &Path) -> Result<Vec<u32>> {
    let mut out: Vec<u32> = fs
        .list(dir)
        .map_err(|e| ChunkError::io("list directory", dir, e))?
        .iter()
        .filter_map(|name| format::parse_volume_name(name))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Why volume `n`, `len` bytes long, has lost synced records, if it has: it is shorter than
/// its hint says was synced (a volume only grows while it has a hint; a cut is never below
/// it), whether or not its records scan clean.
pub fn shorter_than_hint(fs: &dyn Fs, dir: &Path, n: u32, len: u64) -> Option<String> {
    let synced = hinted_synced_len(fs, dir, n);
    (synced > len).then(|| {
        format!(
            "the volume ends at {len} bytes, but its hint says {synced} were synced: synced \
             records are missing"
        )
    })
}

/// Why the bad record where the scan of volume `n` (at `path`) stopped must be damage to
/// synced data rather than a torn tail, or `None` if it can be a torn tail: only the last
/// volume of a lane has one, never below the length its hint says was synced, and never a
/// whole unsynced window (`VolumeHeader::unsynced_window`) or more before an intact record.
pub fn damage_not_torn(
    fs: &dyn Fs,
    dir: &Path,
    path: &Path,
    n: u32,
    is_last: bool,
    stop: &ScanStop,
) -> Result<Option<String>> {
    if !is_last {
        return Ok(Some(stop.reason.clone()));
    }
    let synced = hinted_synced_len(fs, dir, n);
    if stop.offset < synced {
        return Ok(Some(format!(
            "{}, below the {synced} bytes its hint says were synced",
            stop.reason
        )));
    }
    let window = check_volume_header(fs, path, n)?.unsynced_window;
    if window == 0 {
        return Ok(None);
    }
    Ok(
        find_record_from(fs, path, stop.offset + window)?.map(|found| {
            format!(
                "{}; an intact record follows at offset {found}, {window} bytes or more past it, \
             beyond what can be unsynced, so synced data is damaged (not a torn tail)",
                stop.reason
            )
        }),
    )
}

/// The offset of the first intact record (magic, header checksum, data within the file and
/// its CRC32C) that starts at `from` or later in the volume at `path`, if any. Recovery asks
/// this past a bad record: anything intact a whole unsynced window past it was written, so
/// the bad record had been synced. Reads the file 1 MiB at a time.
pub fn find_record_from(fs: &dyn Fs, path: &Path, from: u64) -> Result<Option<u64>> {
    const STEP: usize = 1 << 20;
    let io_err = |e| ChunkError::io("read volume", path, e);
    let file = fs.open_read(path).map_err(io_err)?;
    let file_len = file.size().map_err(io_err)?;
    let header_len = RECORD_HEADER_LEN as usize;
    let mut buf = vec![0u8; STEP + header_len];
    let mut at = from;
    while at + RECORD_HEADER_LEN <= file_len {
        let want = ((file_len - at) as usize).min(buf.len());
        let got = read_full_at(&*file, &mut buf[..want], at).map_err(io_err)?;
        let window = &buf[..got];
        let mut i = 0;
        while i + header_len <= window.len() {
            // Every start at which a whole header fits: the magic is its first bytes.
            let Some(k) = memchr_magic(&window[i..window.len() - header_len + RECORD_MAGIC.len()])
            else {
                break;
            };
            let start = i + k;
            let offset = at + start as u64;
            let hb: &[u8; RECORD_HEADER_LEN as usize] = window[start..start + header_len]
                .try_into()
                .expect("header length");
            if let Ok(h) = RecordHeader::decode(hb) {
                let end = offset + RECORD_HEADER_LEN + u64::from(h.len);
                if end <= file_len {
                    let mut data = vec![0u8; h.len as usize];
                    let n = read_full_at(&*file, &mut data, offset + RECORD_HEADER_LEN)
                        .map_err(io_err)?;
                    if n == data.len() && crc32c::crc32c(&data) == h.data_crc {
                        return Ok(Some(offset));
                    }
                }
            }
            i = start + 1;
        }
        if got <= header_len {
            break;
        }
        // The next read overlaps this one by a header, so no record start is missed.
        at += (got - header_len + 1) as u64;
    }
    Ok(None)
}

/// Where the record magic first starts in `b`, if it does.
fn memchr_magic(b: &[u8]) -> Option<usize> {
    b.windows(RECORD_MAGIC.len())
        .position(|w| w == RECORD_MAGIC)
}

/// Reads into `buf` at `offset` until it is full or the file ends; the bytes read.
fn read_full_at(file: &dyn FsFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_admitted_at_its_second_read_and_once() {
        let recent = RecentlyUncached::new();
        let (a, b) = (ChunkId::of(b"a"), ChunkId::of(b"b"));
        assert!(!recent.seen_again(&a), "first read of a: uncached");
        assert!(!recent.seen_again(&b), "first read of b: uncached");
        assert!(recent.seen_again(&a), "second read of a: admitted");
        assert!(
            !recent.seen_again(&a),
            "a read after the admission starts over (the cache normally answers first)"
        );
        // A chunk whose slot another took waits for one more read.
        let slot = |id: &ChunkId| {
            u64::from_le_bytes(id.as_bytes()[8..16].try_into().unwrap()) as usize % RECENT_SLOTS
        };
        let rival = (0u32..)
            .map(|i| ChunkId::of(&i.to_le_bytes()))
            .find(|id| slot(id) == slot(&b) && *id != b)
            .expect("some id shares b's slot");
        assert!(!recent.seen_again(&rival));
        assert!(!recent.seen_again(&b), "b's record was taken by the rival");
        assert!(recent.seen_again(&b));
    }
}
