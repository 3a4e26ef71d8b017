//! `ChunkStore`: the public handle. Puts hash on the caller's thread, queue for the writer and
//! wait until their batch is synced; gets are one positioned read through the in-memory index
//! (or a copy from the write buffer while the chunk is not yet durable).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use spindle_fs::{DirLock, Fs};

use crate::catalog::{Catalog, VolumeStats};
use crate::error::{ChunkError, Result};
use crate::format::{
    self, RecordHeader, HINT_ENTRY_LEN, HINT_HEADER_LEN, HINT_TRAILER_LEN, RECORD_HEADER_LEN,
};
use crate::id::ChunkId;
use crate::policy::{self, CompactionPolicy};
use crate::recovery;
use crate::writer::{self, Op, OpKind};

/// Bounds and switches of a store.
#[derive(Debug, Clone)]
pub struct Options {
    /// A volume is sealed once the next record would take it past this size.
    pub volume_bytes_max: u64,
    /// Bytes of queued, not yet durable records; puts wait while it is full.
    pub write_buffer_bytes_max: u64,
    /// Volume syncs that may run at once (each covers every batch written before it began).
    pub syncs_in_flight_max: usize,
    /// Volumes appended to at once (lanes): a chunk's records go to the volume of its lane,
    /// and a group commit syncs each volume it wrote to at the same time as the others.
    /// Opening a store with another number than last time starts a new generation of
    /// volumes (docs/chunk-format.md, "Lanes"). Default 1: on the machine measured, more
    /// lanes did not make puts faster (docs/benchmarks/chunks.md, "Lanes").
    pub active_volumes: usize,
    /// Bytes of volume and hint files the store may use; a put past it fails and writes nothing.
    pub space_bytes_max: u64,
    /// Largest chunk accepted.
    pub chunk_bytes_max: u64,
    /// Check BLAKE3 of every chunk read (a CRC32C is always checked).
    pub verify_on_read: bool,
    /// When a sealed volume is rewritten by `compact`.
    pub compaction: CompactionPolicy,
    /// Run `compact` on a background thread whenever a delete or a seal leaves a volume
    /// that passes the compaction policy.
    pub compact_in_background: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            volume_bytes_max: 256 << 20,
            write_buffer_bytes_max: 64 << 20,
            syncs_in_flight_max: 4,
            active_volumes: 1,
            space_bytes_max: u64::MAX,
            chunk_bytes_max: 16 << 20,
            verify_on_read: true,
            compaction: CompactionPolicy::default(),
            compact_in_background: true,
        }
    }
}

impl Options {
    fn check(&self) -> Result<()> {
        let bad = |reason: &str| {
            Err(ChunkError::BadOptions {
                reason: reason.into(),
            })
        };
        if self.chunk_bytes_max == 0 || self.chunk_bytes_max > u64::from(u32::MAX) {
            return bad("chunk_bytes_max must be between 1 byte and 4 GiB - 1");
        }
        if self.write_buffer_bytes_max < self.chunk_bytes_max + RECORD_HEADER_LEN {
            return bad("write_buffer_bytes_max must hold at least one largest chunk");
        }
        if self.syncs_in_flight_max == 0 || self.syncs_in_flight_max > 64 {
            return bad("syncs_in_flight_max must be between 1 and 64");
        }
        if self.active_volumes == 0 || self.active_volumes > 64 {
            return bad("active_volumes must be between 1 and 64");
        }
        // Each syncer holds a handle of its own on each active volume.
        if self.syncs_in_flight_max * self.active_volumes > 256 {
            return bad(
                "syncs_in_flight_max × active_volumes must be at most 256 (each syncer holds a \
                 file handle on each active volume)",
            );
        }
        if self.volume_bytes_max < format::VOLUME_HEADER_LEN + RECORD_HEADER_LEN {
            return bad("volume_bytes_max is smaller than one record");
        }
        Ok(())
    }
}

/// The writer's queue and everything that is not yet durable.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    pub ops: Vec<Op>,
    /// Chunks queued or being written, readable before they are durable.
    pub buffered: HashMap<ChunkId, (Bytes, u64)>,
    pub buffer_bytes: u64,
    pub reserved_bytes: u64,
    pub next_seq: u64,
    /// Every op with a sequence number up to this one is durable (or decided).
    pub durable_seq: u64,
    pub deleted: HashMap<u64, bool>,
    pub failed: Option<Failure>,
    pub closing: bool,
    /// Threads parked until op `seq` is durable, each woken alone when it is (or when the
    /// writer fails): a publish wakes only the puts it made durable, not every waiting one.
    pub waiters: Vec<(u64, std::thread::Thread)>,
}

/// The writer's first failure, sticky until the store is reopened.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub reason: String,
    pub disk_full: bool,
}

impl Failure {
    pub(crate) fn error(&self) -> ChunkError {
        ChunkError::WriterFailed {
            reason: self.reason.clone(),
            disk_full: self.disk_full,
        }
    }
}

/// State shared by the handle, the writer thread and compaction.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The file system every volume, hint and marker goes through.
    pub fs: Arc<dyn Fs>,
    pub dir: PathBuf,
    pub opts: Options,
    pub catalog: RwLock<Catalog>,
    pub queue: Mutex<Queue>,
    /// Signals the writer that ops are queued or the store is closing.
    pub queue_cv: Condvar,
    /// Signals waiters that buffer space was freed or the writer failed (waiters for an op to
    /// be durable park instead: `Queue::waiters`).
    pub done_cv: Condvar,
    /// Volume syncs done by the writer since open (one per volume a group commit wrote to).
    pub syncs: AtomicU64,
    /// Group commits since open (each syncs one or more volumes).
    pub group_commits: AtomicU64,
    /// One compaction at a time.
    pub compaction_lock: Mutex<()>,
    /// Volumes a put's reclaim found damaged (a rotten chunk): later reclaims pass them
    /// over, and their dead bytes do not count as room, instead of reading them again for
    /// each put near the limit. (Volume numbers are never reused.)
    pub reclaim_skip: Mutex<std::collections::HashSet<u32>>,
    /// What every compaction since open did.
    pub compaction_totals: Mutex<CompactionTotals>,
    /// The background compactor's mailbox.
    pub compactor: Mutex<Compactor>,
    /// Signals the background compactor.
    pub compactor_cv: Condvar,
}

/// State of the background compactor.
#[derive(Debug, Default)]
pub(crate) struct Compactor {
    /// A delete or seal may have made a volume worth compacting.
    pub wanted: bool,
    /// A compaction is running.
    pub running: bool,
    /// The store is closing.
    pub stop: bool,
    /// The last background compaction's failure, if any.
    pub error: Option<String>,
}

/// What opening the store found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Volumes whose records came from their hint file.
    pub volumes_from_hints: u32,
    /// Volumes that were read record by record.
    pub volumes_scanned: u32,
    /// Torn tails cut from the last volumes of lanes: (volume file, offset of the cut, bytes
    /// removed), one per volume cut.
    pub torn_tails: Vec<(PathBuf, u64, u64)>,
    /// Hint files of sealed volumes that were there but damaged or wrong, and were written
    /// anew from a scan of their volume: (hint file, what was wrong).
    pub rewritten_hints: Vec<(PathBuf, String)>,
}

/// Space and record counts of the whole store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Live chunks.
    pub chunks: u64,
    /// Bytes of volume and hint files.
    pub used_bytes: u64,
    /// Bytes of records of live chunks.
    pub live_bytes: u64,
    /// Bytes of volume records no live chunk needs.
    pub garbage_bytes: u64,
    /// Volume syncs since open (a group commit syncs each volume it wrote to).
    pub syncs: u64,
    /// Group commits since open; puts divided by them is the average group-commit size.
    pub group_commits: u64,
    /// Why the last compaction failed, if it did: one in the background, or one a put ran
    /// to make room for itself (see `ChunkStore::put`).
    pub compaction_error: Option<String>,
    /// Bytes of records queued or being written, not yet durable (at most
    /// `write_buffer_bytes_max`, or one record if a single record is larger).
    pub write_buffer_bytes: u64,
    /// Per volume, ascending.
    pub volumes: Vec<(u32, VolumeStats)>,
    /// A compaction (background or `compact`) is running now.
    pub compacting: bool,
    /// What every compaction since open did.
    pub compaction: CompactionTotals,
}

/// Compactions since the store opened, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionTotals {
    /// Compaction passes run (each looks at every sealed volume once).
    pub runs: u64,
    /// Volumes rewritten and removed.
    pub volumes: u64,
    /// Live chunks copied forward.
    pub chunks_moved: u64,
    /// Bytes of volume and hint files freed, less the bytes copied forward.
    pub bytes_reclaimed: u64,
}

/// What one `compact` call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Volumes rewritten and removed.
    pub volumes: Vec<u32>,
    /// Live chunks copied forward.
    pub chunks_moved: u64,
    /// Tombstones copied forward.
    pub tombstones_kept: u64,
    /// Bytes of volume and hint files freed, less the bytes copied forward.
    pub bytes_reclaimed: u64,
}

/// A chunk's bytes with their id, hashed once: for a caller that needs the id before it
/// puts (to check it against one it was given, say); `ChunkStore::put_hashed` does not hash
/// them again. Only `new` makes one, so the id is always the bytes' BLAKE3.
#[derive(Clone)]
pub struct HashedChunk {
    id: ChunkId,
    bytes: Bytes,
}

impl std::fmt::Debug for HashedChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashedChunk")
            .field("id", &self.id)
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl HashedChunk {
    /// Hash `bytes` (BLAKE3).
    pub fn new(bytes: Bytes) -> Self {
        Self {
            id: ChunkId::of(&bytes),
            bytes,
        }
    }

    /// The chunk's id.
    pub fn id(&self) -> ChunkId {
        self.id
    }

    /// The chunk's bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

/// A Haystack-style chunk store. Cheap to share between threads (`&self` everywhere).
#[derive(Debug)]
pub struct ChunkStore {
    pub(crate) shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    compactor: Mutex<Option<JoinHandle<()>>>,
    report: OpenReport,
    _lock: Box<dyn DirLock>,
}

impl ChunkStore {
    /// Open (or create) the store in `dir`. Hint files are read where they match their
    /// volume; other volumes are scanned; a torn tail of the last volume of each lane is cut.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Self> {
        Self::open_in(spindle_fs::std_fs(), dir, opts)
    }

    /// `open` on the file system `fs` (tests pass a simulated disk that loses power).
    pub fn open_in(fs: Arc<dyn Fs>, dir: impl AsRef<Path>, opts: Options) -> Result<Self> {
        opts.check()?;
        let dir = dir.as_ref().to_owned();
        fs.create_dir_all(&dir)
            .map_err(|e| ChunkError::io("create directory", &dir, e))?;
        let lock = lock_marker(&*fs, &dir)?;
        let lanes = u16::try_from(opts.active_volumes).expect("checked: at most 64");
        let recovered = recovery::recover(&*fs, &dir, lanes, opts.write_buffer_bytes_max)?;
        for active in &recovered.lanes.active {
            writer::reserve_volume(active, opts.volume_bytes_max);
        }
        let shared = Arc::new(Shared {
            fs,
            dir,
            opts,
            catalog: RwLock::new(recovered.catalog),
            queue: Mutex::new(Queue {
                next_seq: 1,
                ..Queue::default()
            }),
            queue_cv: Condvar::new(),
            done_cv: Condvar::new(),
            syncs: AtomicU64::new(0),
            group_commits: AtomicU64::new(0),
            compaction_lock: Mutex::new(()),
            reclaim_skip: Mutex::default(),
            compaction_totals: Mutex::new(CompactionTotals::default()),
            compactor: Mutex::new(Compactor::default()),
            compactor_cv: Condvar::new(),
        });
        let worker = Arc::clone(&shared);
        let lanes = recovered.lanes;
        let handle = std::thread::Builder::new()
            .name("chunk-writer".into())
            .spawn(move || writer::run(worker, lanes))
            .map_err(|e| ChunkError::io("spawn writer thread", &shared.dir, e))?;
        let compactor = if shared.opts.compact_in_background {
            let worker = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name("chunk-compactor".into())
                .spawn(move || worker.run_compactor())
                .map_err(|e| ChunkError::io("spawn compactor thread", &shared.dir, e))?;
            Some(handle)
        } else {
            None
        };
        Ok(Self {
            shared,
            writer: Mutex::new(Some(handle)),
            compactor: Mutex::new(compactor),
            report: recovered.report,
            _lock: lock,
        })
    }

    /// What opening found (hints used, volumes scanned, torn tails cut).
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Store `data`; returns its id once the bytes are synced. Putting a chunk that is
    /// already stored writes nothing and returns at once (or when its pending put is durable).
    /// The store keeps a copy of the bytes until they are durable; `put_bytes` keeps the
    /// caller's own buffer instead.
    ///
    /// A put that would take the store past `space_bytes_max` fails with `SpaceExhausted`
    /// and writes nothing, unless records of deleted chunks would make room: then the put
    /// first has them rewritten away (the active volumes holding them are sealed, and the
    /// volumes holding the most are compacted until the put fits, whatever the compaction
    /// policy), and so may take as long as that compaction.
    pub fn put(&self, data: &[u8]) -> Result<ChunkId> {
        self.put_from(data, ChunkId::of(data), || Bytes::copy_from_slice(data))
    }

    /// `put` of bytes the caller hands over: the store holds this buffer until the bytes
    /// are durable instead of copying them (`Bytes::from(vec)` makes one of a `Vec` without
    /// a copy). Only `data.len()` counts against `write_buffer_bytes_max`: a slice of a much
    /// larger allocation keeps all of it alive, so hand over an exact buffer.
    pub fn put_bytes(&self, data: Bytes) -> Result<ChunkId> {
        self.put_hashed(HashedChunk::new(data))
    }

    /// `put_bytes` of a chunk already hashed (`HashedChunk::new`), for a caller that needed
    /// its id first: the bytes are not hashed again.
    pub fn put_hashed(&self, chunk: HashedChunk) -> Result<ChunkId> {
        let HashedChunk { id, bytes } = chunk;
        self.put_from(&bytes, id, || bytes.clone())
    }

    /// `put` of `data`, whose id is `id` and whose owned form (`owned`) is made only if the
    /// chunk is to be written.
    fn put_from(&self, data: &[u8], id: ChunkId, owned: impl FnOnce() -> Bytes) -> Result<ChunkId> {
        let len = data.len() as u64;
        if len > self.shared.opts.chunk_bytes_max {
            return Err(ChunkError::ChunkTooLarge {
                len_bytes: len,
                chunk_bytes_max: self.shared.opts.chunk_bytes_max,
            });
        }
        if self.shared.catalog.read().index.contains_key(&id) {
            return Ok(id);
        }
        let bytes = owned();
        // The CRC too is computed here, off the single writer thread.
        let header = RecordHeader::put(id, data);
        let record_bytes = RECORD_HEADER_LEN + len;
        // The record, its hint entry, and a new volume's header and empty hint: the put may
        // be the one that starts its lane's next volume.
        let needed_bytes = record_bytes
            + HINT_ENTRY_LEN as u64
            + format::VOLUME_HEADER_LEN
            + (HINT_HEADER_LEN + HINT_TRAILER_LEN) as u64;
        let max = self.shared.opts.space_bytes_max;
        let mut reclaimed = false;
        let mut q = self.shared.queue.lock();
        let seq = loop {
            usable(&q)?;
            if let Some(&(_, seq)) = q.buffered.get(&id) {
                break seq;
            }
            let (in_index, committed, dead) = {
                let cat = self.shared.catalog.read();
                // Volumes a reclaim could not rewrite give nothing back: not counted, so a
                // put they cannot make room for is refused at once.
                let skip = self.shared.reclaim_skip.lock();
                let dead: u64 = cat
                    .volumes
                    .iter()
                    .filter(|(v, _)| !skip.contains(v))
                    .map(|(_, s)| s.dead_put_bytes())
                    .sum();
                drop(skip);
                (cat.index.contains_key(&id), committed_bytes(&cat), dead)
            };
            if in_index {
                return Ok(id);
            }
            if !policy::put_fits(committed, q.reserved_bytes, needed_bytes, max) {
                // Deleted chunks' records would make room once rewritten: do that first,
                // once, rather than refuse a put that deletes have made fit.
                let room_after = max.saturating_add(dead);
                if !reclaimed
                    && policy::put_fits(committed, q.reserved_bytes, needed_bytes, room_after)
                {
                    reclaimed = true;
                    drop(q);
                    let fits = || {
                        let q = self.shared.queue.lock();
                        let committed = committed_bytes(&self.shared.catalog.read());
                        policy::put_fits(committed, q.reserved_bytes, needed_bytes, max)
                    };
                    // A volume that could not be rewritten (a rotten chunk) leaves the put
                    // refused for space; the status shows why, as for background compaction.
                    if let Err(e) = self.shared.reclaim_space(fits) {
                        self.shared.compactor.lock().error = Some(e.to_string());
                    }
                    q = self.shared.queue.lock();
                    continue;
                }
                return Err(ChunkError::SpaceExhausted {
                    needed_bytes,
                    used_bytes: committed + q.reserved_bytes,
                    space_bytes_max: max,
                });
            }
            if !self.shared.buffer_has_room(&q, record_bytes) {
                self.shared.done_cv.wait(&mut q);
                continue;
            }
            let kind = OpKind::Put {
                header,
                data: bytes.clone(),
            };
            let seq = self
                .shared
                .enqueue(&mut q, id, kind, record_bytes, needed_bytes);
            q.buffered.insert(id, (bytes, seq));
            break seq;
        };
        self.shared.wait_durable(q, seq)?;
        Ok(id)
    }

    /// The bytes of chunk `id`, or `None` if the store does not hold it. Checks BLAKE3 of
    /// the bytes if the store was opened with `verify_on_read`.
    pub fn get(&self, id: &ChunkId) -> Result<Option<Vec<u8>>> {
        self.get_with(id, self.shared.opts.verify_on_read)
    }

    /// `get`, choosing whether to check BLAKE3 (a CRC32C of the bytes is checked either way).
    pub fn get_with(&self, id: &ChunkId, verify_id: bool) -> Result<Option<Vec<u8>>> {
        // The buffer first: the writer adds a chunk to the index before dropping it from the
        // buffer, so a miss here followed by a miss in the index means it is not stored.
        if let Some((data, _)) = self.shared.queue.lock().buffered.get(id) {
            return Ok(Some(data.to_vec()));
        }
        let found = {
            let cat = self.shared.catalog.read();
            cat.index
                .get(id)
                .map(|loc| (*loc, Arc::clone(&cat.files[&loc.volume])))
        };
        match found {
            None => Ok(None),
            Some((loc, file)) => file
                .read_chunk(id, loc.offset, loc.len, verify_id)
                .map(Some),
        }
    }

    /// Whether the store holds chunk `id` (durable or still in the write buffer).
    pub fn has(&self, id: &ChunkId) -> bool {
        self.shared.queue.lock().buffered.contains_key(id)
            || self.shared.catalog.read().index.contains_key(id)
    }

    /// Whether chunk `id` is durable in the store. A put of it still in the write buffer
    /// (another caller's) is waited for: `true` once it is durable, `false` if the writer
    /// fails first. What a caller that skips its own put because the chunk exists needs.
    pub fn has_durable(&self, id: &ChunkId) -> bool {
        let q = self.shared.queue.lock();
        if let Some(&(_, seq)) = q.buffered.get(id) {
            if self.shared.wait_durable(q, seq).is_err() {
                return false;
            }
        } else {
            drop(q);
        }
        // A delete may have followed the put.
        self.shared.catalog.read().index.contains_key(id)
    }

    /// Delete chunk `id`: a tombstone is appended and synced. Returns whether it was stored.
    /// Its space comes back when compaction rewrites the volume that holds it.
    pub fn delete(&self, id: &ChunkId) -> Result<bool> {
        let mut q = self.shared.queue.lock();
        usable(&q)?;
        if !q.buffered.contains_key(id) && !self.shared.catalog.read().index.contains_key(id) {
            return Ok(false);
        }
        // A tombstone takes its room in the write buffer like any record: what is written
        // and not yet synced stays within the buffer, the window recovery relies on.
        while !self.shared.buffer_has_room(&q, RECORD_HEADER_LEN) {
            self.shared.done_cv.wait(&mut q);
            usable(&q)?;
        }
        let seq = self
            .shared
            .enqueue(&mut q, *id, OpKind::Delete, RECORD_HEADER_LEN, 0);
        let mut q = self.shared.wait_durable_guard(q, seq)?;
        Ok(q.deleted.remove(&seq).unwrap_or(false))
    }

    /// Ids of all durable chunks, in no particular order.
    pub fn keys(&self) -> Vec<ChunkId> {
        self.shared.catalog.read().index.keys().copied().collect()
    }

    /// Number of durable chunks.
    pub fn len(&self) -> usize {
        self.shared.catalog.read().index.len()
    }

    /// Whether the store holds no durable chunk.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the store's volume and hint files on disk.
    pub fn used_bytes(&self) -> u64 {
        self.shared.catalog.read().used_bytes()
    }

    /// The space limit (`Options::space_bytes_max`).
    pub fn max_bytes(&self) -> u64 {
        self.shared.opts.space_bytes_max
    }

    /// Space and record counts.
    pub fn stats(&self) -> StoreStats {
        let cat = self.shared.catalog.read();
        let volumes: Vec<(u32, VolumeStats)> = cat.volumes.iter().map(|(n, s)| (*n, *s)).collect();
        let live_bytes = volumes.iter().map(|(_, s)| s.live_bytes).sum();
        let records: u64 = volumes
            .iter()
            .map(|(_, s)| s.bytes - format::VOLUME_HEADER_LEN)
            .sum();
        StoreStats {
            chunks: cat.index.len() as u64,
            used_bytes: cat.used_bytes(),
            live_bytes,
            garbage_bytes: records - live_bytes,
            syncs: self.shared.syncs.load(Ordering::Relaxed),
            group_commits: self.shared.group_commits.load(Ordering::Relaxed),
            compaction_error: self.shared.compactor.lock().error.clone(),
            write_buffer_bytes: self.shared.queue.lock().buffer_bytes,
            volumes,
            compacting: self.shared.compaction_lock.is_locked(),
            compaction: *self.shared.compaction_totals.lock(),
        }
    }

    /// Drop the store's volumes from the page cache (for cold-read measurements).
    pub fn drop_page_cache(&self) -> Result<()> {
        let files: Vec<_> = self.shared.catalog.read().files.values().cloned().collect();
        files.iter().try_for_each(|f| f.drop_cache())
    }

    /// Finish queued writes, write the active volumes' hints and stop the writer.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// Rewrite every sealed volume the compaction policy picks (see `Options::compaction`).
    /// Gets keep running meanwhile; the copies go through the writer like puts.
    pub fn compact(&self) -> Result<CompactionReport> {
        self.shared.compact()
    }

    /// Wait until the background compactor has nothing asked of it and is not running.
    pub fn wait_for_background_compaction(&self) {
        if self.compactor.lock().is_none() {
            return;
        }
        let mut c = self.shared.compactor.lock();
        while (c.wanted || c.running) && !c.stop {
            self.shared.compactor_cv.wait(&mut c);
        }
    }

    fn shutdown(&self) -> Result<()> {
        if let Some(handle) = self.compactor.lock().take() {
            self.shared.compactor.lock().stop = true;
            self.shared.compactor_cv.notify_all();
            let _ = handle.join();
        }
        let Some(handle) = self.writer.lock().take() else {
            return Ok(());
        };
        self.shared.queue.lock().closing = true;
        self.shared.queue_cv.notify_all();
        if handle.join().is_err() {
            return Err(ChunkError::WriterFailed {
                reason: "writer thread panicked".into(),
                disk_full: false,
            });
        }
        match &self.shared.queue.lock().failed {
            Some(failure) => Err(failure.error()),
            None => Ok(()),
        }
    }
}

impl Shared {
    /// Ask the background compactor to look at the volumes again.
    pub(crate) fn want_compaction(&self) {
        if self.opts.compact_in_background && self.compaction_due() {
            self.compactor.lock().wanted = true;
            self.compactor_cv.notify_all();
        }
    }

    fn run_compactor(&self) {
        loop {
            {
                let mut c = self.compactor.lock();
                while !c.wanted && !c.stop {
                    self.compactor_cv.wait(&mut c);
                }
                if c.stop {
                    return;
                }
                c.wanted = false;
                c.running = true;
            }
            // A panic (a broken invariant) ends this pass with an error, not the compactor:
            // `running` must not stay set, or `wait_for_background_compaction` waits forever.
            let error =
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.compact())) {
                    Ok(result) => result.err().map(|e| e.to_string()),
                    Err(payload) => Some(format!(
                        "compaction panicked: {}",
                        writer::panic_message(payload.as_ref())
                    )),
                };
            let mut c = self.compactor.lock();
            c.running = false;
            c.error = error;
            self.compactor_cv.notify_all();
        }
    }

    /// Queue an op for the writer and return its sequence number.
    pub(crate) fn enqueue(
        &self,
        q: &mut Queue,
        id: ChunkId,
        kind: OpKind,
        buffer_bytes: u64,
        reserved_bytes: u64,
    ) -> u64 {
        let seq = q.next_seq;
        q.next_seq += 1;
        q.buffer_bytes += buffer_bytes;
        q.reserved_bytes += reserved_bytes;
        q.ops.push(Op {
            seq,
            id,
            kind,
            buffer_bytes,
            reserved_bytes,
        });
        self.queue_cv.notify_one();
        seq
    }

    /// Wait for room in the write buffer, then queue (compaction's ops).
    pub(crate) fn enqueue_when_room(
        &self,
        id: ChunkId,
        kind: OpKind,
        buffer_bytes: u64,
    ) -> Result<u64> {
        let mut q = self.queue.lock();
        loop {
            usable(&q)?;
            if self.buffer_has_room(&q, buffer_bytes) {
                return Ok(self.enqueue(&mut q, id, kind, buffer_bytes, 0));
            }
            self.done_cv.wait(&mut q);
        }
    }

    /// Wait until op `seq` is durable.
    pub(crate) fn wait_seq(&self, seq: u64) -> Result<()> {
        let q = self.queue.lock();
        self.wait_durable(q, seq)
    }

    fn buffer_has_room(&self, q: &Queue, record_bytes: u64) -> bool {
        q.buffer_bytes == 0 || q.buffer_bytes + record_bytes <= self.opts.write_buffer_bytes_max
    }

    fn wait_durable(&self, q: MutexGuard<'_, Queue>, seq: u64) -> Result<()> {
        self.wait_durable_guard(q, seq).map(drop)
    }

    fn wait_durable_guard<'a>(
        &self,
        mut q: MutexGuard<'a, Queue>,
        seq: u64,
    ) -> Result<MutexGuard<'a, Queue>> {
        let me = std::thread::current();
        while q.durable_seq < seq {
            if let Some(failure) = &q.failed {
                return Err(failure.error());
            }
            // Registered once; a wake-up with the op still not durable (a spurious one)
            // parks again under the same registration.
            if !q
                .waiters
                .iter()
                .any(|(s, t)| *s == seq && t.id() == me.id())
            {
                q.waiters.push((seq, me.clone()));
            }
            // An unpark between unlocking and parking is not lost: it makes `park` return.
            MutexGuard::unlocked(&mut q, std::thread::park);
        }
        Ok(q)
    }
}

impl Drop for ChunkStore {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Bytes on disk plus the hint files the unsealed volumes will need: what a put is checked
/// against, so that sealing never takes the store past its limit.
fn committed_bytes(cat: &Catalog) -> u64 {
    cat.volumes
        .values()
        .map(|s| {
            let hint =
                (HINT_HEADER_LEN + HINT_TRAILER_LEN) as u64 + s.records * HINT_ENTRY_LEN as u64;
            s.bytes + s.hint_bytes.max(hint)
        })
        .sum()
}

/// Take an exclusive lock on the marker file for this handle, and write the marker if it is
/// missing or empty.
fn lock_marker(fs: &dyn Fs, dir: &Path) -> Result<Box<dyn DirLock>> {
    let path = dir.join(format::MARKER_FILE);
    let lock = fs.lock(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => ChunkError::Locked { path: path.clone() },
        _ => ChunkError::io("open marker", &path, e),
    })?;
    let len = fs.open(&path).and_then(|f| f.size()).unwrap_or(0);
    if len == 0 {
        let f = fs
            .open(&path)
            .or_else(|_| fs.create(&path))
            .map_err(|e| ChunkError::io("open marker", &path, e))?;
        f.write_all_at(format::MARKER_TEXT.as_bytes(), 0)
            .and_then(|()| f.sync_all())
            .map_err(|e| ChunkError::io("write marker", &path, e))?;
        crate::volume::sync_dir(fs, dir)?;
    }
    Ok(lock)
}

fn usable(q: &Queue) -> Result<()> {
    if let Some(failure) = &q.failed {
        return Err(failure.error());
    }
    if q.closing {
        return Err(ChunkError::Closed);
    }
    Ok(())
}
