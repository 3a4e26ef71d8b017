//! The Disk View: every version of every item of one partition range, in RocksDB.
//!
//! State is always exactly "the log up to the applied index" (invariant 4): each transaction
//! is one RocksDB write batch that also stores the applied index (in the `meta` column
//! family). Batches go through RocksDB's WAL without fsync: a crash loses a suffix of
//! batches, never part of one, and the view replays the rest from the log. Layout:
//! docs/disk-view-format.md.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rocksdb::{ColumnFamilyDescriptor, DBCompressionType, Options, WriteBatch, DB};
use spindle_core::{Index, ItemKey, Partition, Record, Value};

use crate::checksum::{self, AppliedChecksum, Checkpoint, Checksum, Tally};
use crate::error::ViewError;
use crate::keys;

/// Column family of the view's own metadata.
pub const META_CF: &str = "meta";
/// Meta key: the applied index, u64 LE.
pub const META_APPLIED: &[u8] = b"applied";
/// Meta key: the partition, lo u64 LE | hi u64 LE.
pub const META_PARTITION: &[u8] = b"partition";
/// Meta key: present while a boot from iteration is filling the view: its cut, u64 LE.
pub const META_BOOTING: &[u8] = b"booting";
/// Meta key: the layout version, u32 LE.
pub const META_FORMAT: &[u8] = b"format";
/// Meta key: the checksum of every version held, at an applied index: applied u64 LE |
/// checksum u128 LE (`checksum.rs`). Stale (another applied index) or missing: recomputed
/// by a scan at open.
pub const META_CHECKSUM: &[u8] = b"checksum";
/// Meta key: the latest checkpoints, (index u64 LE | checksum u128 LE) each, increasing.
pub const META_CHECKPOINTS: &[u8] = b"checkpoints";
/// The layout version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// One version of an item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub index: Index,
    pub value: Value,
}

/// Called after each sync point of a Disk View with the applied index then persisted.
pub type SyncObserver = std::sync::Arc<dyn Fn(&DiskView, Index) + Send + Sync>;

/// How fresh a read must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Whatever the view has applied now.
    Any,
    /// Wait until the view has applied `index` (read-your-writes), at most `timeout`.
    AtLeast { index: Index, timeout: Duration },
}

/// A Disk View of one partition. Reads are concurrent; `apply` calls are serialised.
pub struct DiskView {
    db: DB,
    dir: PathBuf,
    partition: Partition,
    applied: Mutex<Index>,
    /// The highest applied index known to be on disk (WAL synced or memtables flushed):
    /// what survives a power cut, and so the only applied index truncation may rely on.
    persisted: Mutex<Index>,
    /// Told of every sync point (see `observe_syncs`).
    sync_observer: Mutex<Option<SyncObserver>>,
    applied_changed: Condvar,
    /// The applied index for async waiters (the condvar serves blocking ones).
    applied_watch: tokio::sync::watch::Sender<Index>,
    apply_lock: Mutex<()>,
    /// The checksum of every version held and the latest checkpoints; changed only with
    /// `apply_lock` held, after the batch that stores the same values is written.
    tally: Mutex<Tally>,
}

impl std::fmt::Debug for DiskView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskView")
            .field("dir", &self.dir)
            .field("partition", &self.partition)
            .field("applied", &self.applied_index())
            .finish()
    }
}

/// How a Disk View's RocksDB reads. `Default` is what `DiskView::open` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskOptions {
    /// Block cache shared by the view's column families; 0: RocksDB's default cache.
    pub block_cache_bytes: usize,
    /// Read table files with O_DIRECT (RocksDB `use_direct_reads`), bypassing the page
    /// cache, so a scan of a large, cold view really reads the disk. Needs a filesystem
    /// that supports O_DIRECT (tmpfs does not; opening then fails with a RocksDB error).
    pub direct_reads: bool,
}

pub(crate) fn db_options(disk: &DiskOptions, cache: Option<&rocksdb::Cache>) -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // Data and meta flush together, so even without the WAL they never disagree.
    opts.set_atomic_flush(true);
    opts.set_compression_type(DBCompressionType::Lz4);
    if let Some(cache) = cache {
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(cache);
        opts.set_block_based_table_factory(&table);
    }
    opts.set_use_direct_reads(disk.direct_reads);
    opts
}

impl DiskView {
    /// Open (or create) the view of `partition` in `dir`. A directory that holds another
    /// partition or another layout version is refused.
    pub fn open(dir: impl AsRef<Path>, partition: Partition) -> Result<DiskView, ViewError> {
        Self::open_with(dir, partition, DiskOptions::default())
    }

    /// `open` with explicit read options: a block cache size and direct reads, for large,
    /// cold views whose scans must hit the disk (`spindle bench carousel`).
    pub fn open_with(
        dir: impl AsRef<Path>,
        partition: Partition,
        disk: DiskOptions,
    ) -> Result<DiskView, ViewError> {
        let view = Self::open_any_with(dir, partition, &disk)?;
        if let Some(cut) = view.booting()? {
            return Err(ViewError::BootIncomplete {
                dir: view.dir.clone(),
                cut,
            });
        }
        Ok(view)
    }

    /// Open without refusing an unfinished boot (for `boot`, which resumes it).
    pub(crate) fn open_any(
        dir: impl AsRef<Path>,
        partition: Partition,
    ) -> Result<DiskView, ViewError> {
        Self::open_any_with(dir, partition, &DiskOptions::default())
    }

    fn open_any_with(
        dir: impl AsRef<Path>,
        partition: Partition,
        disk: &DiskOptions,
    ) -> Result<DiskView, ViewError> {
        let dir = dir.as_ref().to_path_buf();
        let cache = (disk.block_cache_bytes > 0)
            .then(|| rocksdb::Cache::new_lru_cache(disk.block_cache_bytes));
        let options = || db_options(disk, cache.as_ref());
        let opts = options();
        let cfs = [
            ColumnFamilyDescriptor::new(rocksdb::DEFAULT_COLUMN_FAMILY_NAME, options()),
            ColumnFamilyDescriptor::new(META_CF, options()),
        ];
        let db = DB::open_cf_descriptors(&opts, &dir, cfs).map_err(db_err(&dir))?;
        let view = DiskView {
            db,
            dir,
            partition,
            applied: Mutex::new(Index::ZERO),
            persisted: Mutex::new(Index::ZERO),
            sync_observer: Mutex::new(None),
            applied_changed: Condvar::new(),
            applied_watch: tokio::sync::watch::Sender::new(Index::ZERO),
            apply_lock: Mutex::new(()),
            tally: Mutex::new(Tally::new(Index::ZERO, Checksum::EMPTY, Vec::new())),
        };
        let applied = view.load_meta()?;
        *view.applied.lock() = applied;
        view.applied_watch.send_replace(applied);
        view.load_tally(applied)?;
        // What RocksDB recovered may still sit only in the page cache (a process crash
        // keeps it there, a power cut would not): flush it to synced table files before
        // anyone relies on it as persisted.
        view.flush()?;
        Ok(view)
    }

    /// Check or write the stored partition and format; return the stored applied index.
    fn load_meta(&self) -> Result<Index, ViewError> {
        let meta = self.meta_cf();
        let get = |k: &[u8]| self.db.get_cf(meta, k).map_err(db_err(&self.dir));
        let mut want_partition = Vec::with_capacity(16);
        want_partition.extend_from_slice(&self.partition.lo().to_le_bytes());
        want_partition.extend_from_slice(&self.partition.hi().to_le_bytes());
        match (get(META_FORMAT)?, get(META_PARTITION)?) {
            (None, None) => {
                let mut batch = WriteBatch::default();
                batch.put_cf(meta, META_FORMAT, FORMAT_VERSION.to_le_bytes());
                batch.put_cf(meta, META_PARTITION, &want_partition);
                batch.put_cf(meta, META_APPLIED, 0u64.to_le_bytes());
                batch.put_cf(
                    meta,
                    META_CHECKSUM,
                    checksum::encode_applied(Index::ZERO, Checksum::EMPTY),
                );
                self.db.write(batch).map_err(db_err(&self.dir))?;
                return Ok(Index::ZERO);
            }
            (Some(format), Some(stored)) => {
                if format.as_slice() != FORMAT_VERSION.to_le_bytes() {
                    return Err(self.corrupt(format!(
                        "layout version {format:?}, this build reads {FORMAT_VERSION}"
                    )));
                }
                if stored != want_partition {
                    let stored = decode_partition(&stored)
                        .ok_or_else(|| self.corrupt(format!("bad partition meta {stored:?}")))?;
                    return Err(ViewError::WrongPartition {
                        dir: self.dir.clone(),
                        stored,
                        requested: self.partition,
                    });
                }
            }
            _ => return Err(self.corrupt("meta has only one of format and partition".into())),
        }
        let applied =
            get(META_APPLIED)?.ok_or_else(|| self.corrupt("applied index missing".into()))?;
        let raw: [u8; 8] = applied
            .as_slice()
            .try_into()
            .map_err(|_| self.corrupt(format!("applied index is {} bytes", applied.len())))?;
        Ok(Index::new(u64::from_le_bytes(raw)))
    }

    /// The cut of an unfinished boot from iteration, if one is in progress.
    pub(crate) fn booting(&self) -> Result<Option<Index>, ViewError> {
        let raw = self
            .db
            .get_cf(self.meta_cf(), META_BOOTING)
            .map_err(db_err(&self.dir))?;
        raw.map(|b| {
            <[u8; 8]>::try_from(b.as_slice())
                .map(|a| Index::new(u64::from_le_bytes(a)))
                .map_err(|_| self.corrupt(format!("boot marker is {} bytes", b.len())))
        })
        .transpose()
    }

    pub(crate) fn meta_cf(&self) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(META_CF)
            .expect("meta column family opened")
    }

    pub(crate) fn corrupt(&self, what: String) -> ViewError {
        ViewError::Corrupt {
            dir: self.dir.clone(),
            what,
        }
    }

    pub fn partition(&self) -> Partition {
        self.partition
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn db(&self) -> &DB {
        &self.db
    }

    /// Write both column families' memtables to table files, atomically (so data and the
    /// applied index agree on disk even without the WAL). RocksDB syncs the table files
    /// and its manifest, so afterwards the applied index read before the flush is
    /// persisted.
    pub fn flush(&self) -> Result<(), ViewError> {
        let applied = self.applied_index();
        let data = self
            .db
            .cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
            .expect("default column family");
        self.db
            .flush_cfs_opt(&[data, self.meta_cf()], &rocksdb::FlushOptions::default())
            .map_err(db_err(&self.dir))?;
        self.mark_persisted(applied);
        Ok(())
    }

    /// Make everything applied so far survive a power cut by syncing RocksDB's write-ahead
    /// log (one fdatasync; memtables stay), and return the applied index now persisted.
    ///
    /// Sound because `apply` publishes an index only after its batch is in the WAL: every
    /// batch up to the index read here is in a WAL file that `flush_wal(true)` syncs.
    pub fn persist(&self) -> Result<Index, ViewError> {
        let applied = self.applied_index();
        self.db.flush_wal(true).map_err(db_err(&self.dir))?;
        Ok(self.mark_persisted(applied))
    }

    fn mark_persisted(&self, index: Index) -> Index {
        let now = {
            let mut persisted = self.persisted.lock();
            *persisted = (*persisted).max(index);
            *persisted
        };
        let observer = self.sync_observer.lock().clone();
        if let Some(observe) = observer {
            observe(self, now);
        }
        now
    }

    /// Have `observer` called after every later sync point (`persist`, `flush`), with the
    /// index then persisted; `None` stops it. A simulated power cut snapshots the view
    /// there: what RocksDB promises to keep through a power cut is at least the state of
    /// the last sync point.
    pub fn observe_syncs(&self, observer: Option<SyncObserver>) {
        *self.sync_observer.lock() = observer;
    }

    /// Write a consistent copy of the view into `dir`, which must not exist (RocksDB's
    /// checkpoint: table files hard-linked where possible). The copy opens as a Disk View of
    /// the same partition.
    pub fn checkpoint(&self, dir: &Path) -> Result<(), ViewError> {
        let checkpoint =
            rocksdb::checkpoint::Checkpoint::new(&self.db).map_err(db_err(&self.dir))?;
        checkpoint.create_checkpoint(dir).map_err(db_err(&self.dir))
    }

    /// The highest applied index known to survive a power cut (see `persist`). Log
    /// truncation is gated on this, never on `applied_index` (docs/disk-view-format.md).
    pub fn persisted_index(&self) -> Index {
        *self.persisted.lock()
    }

    /// RocksDB's estimate of the live bytes this view stores (table files and memtables):
    /// the denominator of a boot's ETA.
    pub fn estimate_live_bytes(&self) -> Result<u64, ViewError> {
        let mut total = 0;
        for name in [
            "rocksdb.estimate-live-data-size",
            "rocksdb.cur-size-all-mem-tables",
        ] {
            let value = self
                .db
                .property_int_value(name)
                .map_err(db_err(&self.dir))?;
            total += value.unwrap_or(0);
        }
        Ok(total)
    }

    /// The log index this view's state reflects (0: nothing applied).
    pub fn applied_index(&self) -> Index {
        *self.applied.lock()
    }

    /// Apply durable log records. They must continue the applied prefix (records at or
    /// below the applied index are skipped, so replaying an overlap after a restart is
    /// harmless) and end on a commit record. Whole transactions go into one write batch
    /// carrying the commit index of the last, cut at the first commit past
    /// `APPLY_BATCH_BYTES_MAX`; transactions with no write in this partition only advance
    /// the applied index.
    pub fn apply(&self, records: &[Record]) -> Result<Index, ViewError> {
        let _one_writer = self.apply_lock.lock();
        let applied = self.applied_index();
        let fresh = crate::follow::fresh_suffix(applied, records)?;
        if fresh.is_empty() {
            return Ok(applied);
        }
        let last = fresh.last().expect("non-empty");
        let meta = self.meta_cf();
        let mut tally = self.tally.lock().clone();
        let mut checkpoints_changed = false;
        let mut batch = WriteBatch::default();
        let mut value_buf = Vec::new();
        let mut pending_commit = None;
        for record in fresh {
            let mut version = None;
            if self.partition.contains(record.key.hash()) {
                value_buf.clear();
                keys::encode_value(&record.value, &mut value_buf);
                let key = keys::version_key(&record.key, record.index);
                version = Some(Checksum::of_version(&key, &value_buf));
                batch.put(key, &value_buf);
            }
            checkpoints_changed |= tally.record(record.index, version);
            if record.commit {
                pending_commit = Some(record.index);
                if batch.size_in_bytes() >= APPLY_BATCH_BYTES_MAX {
                    let changed = std::mem::take(&mut checkpoints_changed);
                    self.write_batch(std::mem::take(&mut batch), meta, &tally, changed)?;
                    pending_commit = None;
                }
            }
        }
        if pending_commit.is_some() {
            self.write_batch(batch, meta, &tally, checkpoints_changed)?;
        }
        Ok(last.index)
    }

    /// Write `batch` with the applied index, checksum and (if they changed) checkpoints of
    /// `tally`, whose applied index is the batch's commit index; then publish both.
    fn write_batch(
        &self,
        mut batch: WriteBatch,
        meta: &rocksdb::ColumnFamily,
        tally: &Tally,
        checkpoints_changed: bool,
    ) -> Result<(), ViewError> {
        let commit = tally.applied;
        batch.put_cf(meta, META_APPLIED, commit.get().to_le_bytes());
        batch.put_cf(
            meta,
            META_CHECKSUM,
            checksum::encode_applied(commit, tally.sum),
        );
        if checkpoints_changed {
            batch.put_cf(
                meta,
                META_CHECKPOINTS,
                checksum::encode_checkpoints(&tally.checkpoints),
            );
        }
        self.db.write(batch).map_err(db_err(&self.dir))?;
        self.tally.lock().clone_from(tally);
        self.publish(commit);
        Ok(())
    }

    /// The checksum of every version this view holds, at its applied index.
    pub fn checksum(&self) -> AppliedChecksum {
        let tally = self.tally.lock();
        AppliedChecksum {
            applied: tally.applied,
            checksum: tally.sum,
        }
    }

    /// The latest checkpoints (at most `CHECKPOINTS_KEPT_MAX`), increasing: each the
    /// checksum of exactly the versions with index ≤ its index.
    pub fn checkpoints(&self) -> Vec<Checkpoint> {
        self.tally.lock().checkpoints()
    }

    /// Record checkpoints every `interval_indexes` log indexes from now on instead of every
    /// `CHECKPOINT_INTERVAL_INDEXES` (tests: small views cross few multiples of 1024).
    pub fn set_checkpoint_interval(&self, interval_indexes: u64) {
        assert!(interval_indexes > 0, "checkpoint interval must be positive");
        let _one_writer = self.apply_lock.lock();
        self.tally.lock().interval = interval_indexes;
    }

    pub(crate) fn checkpoint_interval(&self) -> u64 {
        self.tally.lock().interval
    }

    /// Install a checksum state computed by a scan (open, boot, import) or summed by an
    /// importer; the caller writes the batch storing it next (a failed write fails the
    /// open, boot or import, and the next open loads what is stored).
    pub(crate) fn install_tally(
        &self,
        applied: Index,
        sum: Checksum,
        checkpoints: Vec<Checkpoint>,
    ) {
        let mut tally = self.tally.lock();
        let interval = tally.interval;
        *tally = Tally::new(applied, sum, checkpoints);
        tally.interval = interval;
    }

    /// Load the stored checksum; if it is missing (a directory written before checksums)
    /// or stale (written at another applied index), recompute it by one scan and store it.
    fn load_tally(&self, applied: Index) -> Result<(), ViewError> {
        let meta = self.meta_cf();
        let get = |k: &[u8]| self.db.get_cf(meta, k).map_err(db_err(&self.dir));
        let stored = match get(META_CHECKSUM)? {
            Some(raw) => Some(
                checksum::decode_applied(&raw)
                    .ok_or_else(|| self.corrupt(format!("checksum is {} bytes", raw.len())))?,
            ),
            None => None,
        };
        if let Some(stored) = stored.filter(|s| s.applied == applied) {
            let checkpoints = match get(META_CHECKPOINTS)? {
                Some(raw) => checksum::decode_checkpoints(&raw)
                    .ok_or_else(|| self.corrupt(format!("checkpoints are {} bytes", raw.len())))?,
                None => Vec::new(),
            };
            self.install_tally(applied, stored.checksum, checkpoints);
            return Ok(());
        }
        if self.booting()?.is_some() {
            // A boot will compute it when it finishes; the view is not served before.
            return Ok(());
        }
        tracing::info!(
            dir = %self.dir.display(),
            applied = applied.get(),
            stored_at = stored.map(|s| s.applied.get()),
            "disk view has no checksum at its applied index; computing it with one scan"
        );
        let mut batch = WriteBatch::default();
        self.rescan_into(applied, &mut batch)?;
        self.db.write(batch).map_err(db_err(&self.dir))?;
        Ok(())
    }

    pub(crate) fn publish(&self, index: Index) {
        let mut applied = self.applied.lock();
        assert!(index > *applied, "applied index must grow");
        *applied = index;
        drop(applied);
        self.applied_changed.notify_all();
        self.applied_watch.send_replace(index);
    }

    /// `wait_applied` for async callers: never blocks a runtime thread.
    pub async fn wait_applied_async(
        &self,
        index: Index,
        timeout: Duration,
    ) -> Result<Index, ViewError> {
        let start = Instant::now();
        let mut rx = self.applied_watch.subscribe();
        let waited = tokio::time::timeout(timeout, rx.wait_for(|a| *a >= index))
            .await
            .map(|seen| seen.map(|applied| *applied));
        match waited {
            Ok(Ok(applied)) => Ok(applied),
            // The sender lives as long as `self`, so a closed channel cannot happen here.
            Ok(Err(_)) | Err(_) => Err(ViewError::NotYetApplied {
                wanted: index,
                applied: self.applied_index(),
                waited_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// Wait until the view has applied `index`, at most `timeout`. Returns the applied
    /// index.
    pub fn wait_applied(&self, index: Index, timeout: Duration) -> Result<Index, ViewError> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut applied = self.applied.lock();
        while *applied < index {
            if self
                .applied_changed
                .wait_until(&mut applied, deadline)
                .timed_out()
                && *applied < index
            {
                return Err(ViewError::NotYetApplied {
                    wanted: index,
                    applied: *applied,
                    waited_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
        }
        Ok(*applied)
    }

    fn await_freshness(&self, freshness: Freshness) -> Result<Index, ViewError> {
        match freshness {
            Freshness::Any => Ok(self.applied_index()),
            Freshness::AtLeast { index, timeout } => self.wait_applied(index, timeout),
        }
    }

    fn check_key(&self, key: &ItemKey) -> Result<(), ViewError> {
        let hash = key.hash();
        if self.partition.contains(hash) {
            Ok(())
        } else {
            Err(ViewError::NotInPartition {
                key: key.clone(),
                hash,
                partition: self.partition,
            })
        }
    }

    /// The newest version of `key` (a tombstone if it was deleted), or `None` if it was
    /// never written.
    pub fn latest(
        &self,
        key: &ItemKey,
        freshness: Freshness,
    ) -> Result<Option<Version>, ViewError> {
        self.check_key(key)?;
        self.await_freshness(freshness)?;
        self.version_at(key, Index::MAX)
    }

    /// The version of `key` as of log index `at`: the newest written at or below it.
    /// `at` above the applied index waits for it as `freshness` allows, else is an error.
    pub fn as_of(
        &self,
        key: &ItemKey,
        at: Index,
        freshness: Freshness,
    ) -> Result<Option<Version>, ViewError> {
        self.check_key(key)?;
        let applied = match freshness {
            Freshness::Any => self.applied_index(),
            Freshness::AtLeast { index, timeout } => self.wait_applied(index.max(at), timeout)?,
        };
        if at > applied {
            return Err(ViewError::NotYetApplied {
                wanted: at,
                applied,
                waited_ms: 0,
            });
        }
        self.version_at(key, at)
    }

    fn version_at(&self, key: &ItemKey, at: Index) -> Result<Option<Version>, ViewError> {
        let prefix = keys::item_prefix(key);
        let mut target = prefix.clone();
        target.extend_from_slice(&at.get().to_be_bytes());
        let mut it = self.db.raw_iterator();
        it.seek_for_prev(&target);
        match (it.key(), it.value()) {
            (Some(k), Some(v)) if k.len() == target.len() && k.starts_with(&prefix) => {
                Ok(Some(self.decode_version(k, v)?))
            }
            _ => {
                it.status().map_err(db_err(&self.dir))?;
                Ok(None)
            }
        }
    }

    /// Every version of `key`, oldest first.
    pub fn history(&self, key: &ItemKey, freshness: Freshness) -> Result<Vec<Version>, ViewError> {
        self.check_key(key)?;
        self.await_freshness(freshness)?;
        let prefix = keys::item_prefix(key);
        let mut out = Vec::new();
        self.scan_prefix(&prefix, |k, v| {
            if k.len() == prefix.len() + keys::INDEX_BYTES {
                out.push(self.decode_version(k, v)?);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// A page of `key`'s history: at most `limit` versions above index `after`, oldest
    /// first, and whether more follow. Reads at most `limit + 1` versions from disk, so
    /// the memory of a page does not grow with the item's history, and its values come
    /// to at most `PAGE_VALUE_BYTES_MAX` bytes (the page ends early, with more to follow,
    /// where the next would pass it; it always holds one version).
    pub fn history_page(
        &self,
        key: &ItemKey,
        after: Index,
        limit: usize,
        freshness: Freshness,
    ) -> Result<Page<Version>, ViewError> {
        self.history_page_sized(key, after, limit, PAGE_VALUE_BYTES_MAX, freshness)
    }

    /// `history_page` whose values come to at most `bytes_max` bytes.
    pub fn history_page_sized(
        &self,
        key: &ItemKey,
        after: Index,
        limit: usize,
        bytes_max: usize,
        freshness: Freshness,
    ) -> Result<Page<Version>, ViewError> {
        self.check_key(key)?;
        self.await_freshness(freshness)?;
        let prefix = keys::item_prefix(key);
        let mut page = Page::new(limit, bytes_max);
        if after == Index::MAX {
            return Ok(page);
        }
        let mut start = prefix.clone();
        start.extend_from_slice(&after.next().get().to_be_bytes());
        self.scan_from(&prefix, &start, |k, v| {
            if k.len() != prefix.len() + keys::INDEX_BYTES {
                return Ok(true);
            }
            // The stored value less its tag byte: the JSON's length (a tombstone's, 0).
            page.offer(v.len().saturating_sub(1), || self.decode_version(k, v))
        })?;
        Ok(page)
    }

    /// A page of the out-edges of node `from` that exist as of `at` (default: the applied
    /// index): at most `limit` edges ordered by (label, to) as bytes — the key order —,
    /// only label `label` if given, only past the edge `after` (label, to) if given, each
    /// with its version then; and where the next page starts, if anywhere. Deleted edges
    /// are left out. Holds at most `limit + 1` edges in memory however many the node has.
    /// Once it has read `EDGE_SCAN_VERSIONS_MAX` versions it stops at the next edge
    /// boundary (an edge's versions are read whole, so an edge with more versions than that
    /// makes one page read them all, though it decodes only the newest), so a page may
    /// hold fewer than `limit` edges (none, even, if the node's edges there are all
    /// deleted) and still say where to go on. Its values come to at most
    /// `PAGE_VALUE_BYTES_MAX` bytes, as a history page's. The next page seeks past the
    /// cursor's edge without reading its versions again.
    pub fn out_edges_page(
        &self,
        from: &str,
        filter: EdgeFilter<'_>,
        limit: usize,
        freshness: Freshness,
    ) -> Result<EdgesPage, ViewError> {
        let bounds = PageBounds {
            limit,
            scan_max: EDGE_SCAN_VERSIONS_MAX,
            bytes_max: PAGE_VALUE_BYTES_MAX,
        };
        self.out_edges_page_bounded(from, filter, bounds, freshness)
    }

    /// `out_edges_page` within `bounds`: at most `limit` edges, reading at most `scan_max`
    /// versions (at least one whole edge's), values of at most `bytes_max` bytes (at least
    /// one edge's).
    pub fn out_edges_page_bounded(
        &self,
        from: &str,
        filter: EdgeFilter<'_>,
        bounds: PageBounds,
        freshness: Freshness,
    ) -> Result<EdgesPage, ViewError> {
        let PageBounds {
            limit,
            scan_max,
            bytes_max,
        } = bounds;
        let node = ItemKey::node(from)?;
        self.check_key(&node)?;
        let applied = self.await_freshness(freshness)?;
        let at = filter.at.unwrap_or(applied);
        if at > applied {
            return Err(ViewError::NotYetApplied {
                wanted: at,
                applied,
                waited_ms: 0,
            });
        }
        let prefix = match filter.label {
            Some(label) => keys::out_edges_label_prefix(from, label),
            None => keys::out_edges_prefix(from),
        };
        // The cursor's own edge is skipped: the page starts after its last possible key
        // (its prefix and the largest index), so its versions are not read again.
        let skip = filter
            .after
            .map(|(label, to)| keys::edge_prefix(from, label, to));
        let start = match &skip {
            Some(edge) if edge.as_slice() >= prefix.as_slice() => {
                let mut past = edge.clone();
                past.extend_from_slice(&[0xFF; keys::INDEX_BYTES]);
                past
            }
            _ => prefix.clone(),
        };
        let mut page = Page::new(limit, bytes_max);
        // The edge being read (its item prefix), and its newest version at or below `at`:
        // the index, and the stored bytes in a buffer reused from edge to edge (only the
        // edge's newest version is decoded).
        let mut current: Option<Vec<u8>> = None;
        let mut newest: Option<Index> = None;
        let mut newest_value: Vec<u8> = Vec::new();
        let decode = |item_prefix: &[u8]| {
            keys::decode_item(item_prefix)
                .ok_or_else(|| self.corrupt(format!("bad key {item_prefix:?}")))
        };
        // Offer the edge just read to the page, unless it was deleted (or did not exist)
        // as of `at`; `false` once the page is full.
        let finish = |item_prefix: &[u8],
                      newest: Option<Index>,
                      stored: &[u8],
                      page: &mut Page<(ItemKey, Version)>|
         -> Result<bool, ViewError> {
            let Some(index) = newest else {
                return Ok(true);
            };
            match keys::split_value(stored) {
                Some(None) => Ok(true),
                Some(Some(json)) => page.offer(json.len(), || {
                    let value = Value::json_bytes(json)
                        .map_err(|e| self.corrupt(format!("bad value at {index}: {e}")))?;
                    Ok((decode(item_prefix)?, Version { index, value }))
                }),
                None => Err(self.corrupt(format!("bad value tag at {index}"))),
            }
        };
        // Versions read; past `scan_max`, the page ends at the next edge boundary.
        let mut scanned = 0usize;
        // The last edge read whole when the scan budget ran out: the next page starts
        // after it.
        let mut stopped_after: Option<Vec<u8>> = None;
        let mut full = false;
        self.scan_from(&prefix, &start, |k, v| {
            let parts = keys::split_key(k).ok_or_else(|| self.corrupt(format!("bad key {k:?}")))?;
            if skip.as_deref() == Some(parts.prefix) {
                // Only a version at the largest index can sort past the seek.
                return Ok(true);
            }
            if current.as_deref() != Some(parts.prefix) {
                if let Some(done) = current.take() {
                    if !finish(&done, newest, &newest_value, &mut page)? {
                        full = true;
                        return Ok(false);
                    }
                    if scanned >= scan_max {
                        stopped_after = Some(done);
                        return Ok(false);
                    }
                }
                current = Some(parts.prefix.to_vec());
                newest = None;
            }
            scanned += 1;
            if parts.index <= at {
                newest = Some(parts.index);
                newest_value.clear();
                newest_value.extend_from_slice(v);
            }
            Ok(true)
        })?;
        if !full && stopped_after.is_none() {
            if let Some(done) = current.take() {
                finish(&done, newest, &newest_value, &mut page)?;
            }
        }
        let next = if page.more {
            page.entries.last().map(|(key, _)| key.clone())
        } else {
            stopped_after.as_deref().map(decode).transpose()?
        };
        let next = match next {
            Some(ItemKey::Edge { label, to, .. }) => Some((label, to)),
            Some(other) => return Err(self.corrupt(format!("{other} among out-edges"))),
            None => None,
        };
        Ok(EdgesPage {
            edges: page.entries,
            next,
        })
    }

    /// The out-edges of node `from` that exist as of `at` (default: the applied index),
    /// each with its version then, in key order. Deleted edges are left out.
    pub fn out_edges(
        &self,
        from: &str,
        at: Option<Index>,
        freshness: Freshness,
    ) -> Result<Vec<(ItemKey, Version)>, ViewError> {
        let node = ItemKey::node(from)?;
        self.check_key(&node)?;
        let applied = self.await_freshness(freshness)?;
        let at = at.unwrap_or(applied);
        if at > applied {
            return Err(ViewError::NotYetApplied {
                wanted: at,
                applied,
                waited_ms: 0,
            });
        }
        let prefix = keys::out_edges_prefix(from);
        let mut out: Vec<(ItemKey, Version)> = Vec::new();
        let mut current: Option<(Vec<u8>, Option<Version>)> = None;
        let flush = |cur: Option<(Vec<u8>, Option<Version>)>,
                     out: &mut Vec<(ItemKey, Version)>|
         -> Result<(), ViewError> {
            if let Some((item_prefix, Some(v))) = cur {
                if !v.value.is_tombstone() {
                    let key = keys::decode_item(&item_prefix)
                        .ok_or_else(|| self.corrupt(format!("bad key {item_prefix:?}")))?;
                    out.push((key, v));
                }
            }
            Ok(())
        };
        self.scan_prefix(&prefix, |k, v| {
            let parts = keys::split_key(k).ok_or_else(|| self.corrupt(format!("bad key {k:?}")))?;
            if current
                .as_ref()
                .is_none_or(|(p, _)| p.as_slice() != parts.prefix)
            {
                flush(current.take(), &mut out)?;
                current = Some((parts.prefix.to_vec(), None));
            }
            if parts.index <= at {
                let version = self.decode_version(k, v)?;
                current.as_mut().expect("set above").1 = Some(version);
            }
            Ok(())
        })?;
        flush(current.take(), &mut out)?;
        Ok(out)
    }

    fn scan_prefix(
        &self,
        prefix: &[u8],
        mut each: impl FnMut(&[u8], &[u8]) -> Result<(), ViewError>,
    ) -> Result<(), ViewError> {
        let mut it = self.db.raw_iterator();
        it.seek(prefix);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if !k.starts_with(prefix) {
                break;
            }
            each(k, v)?;
            it.next();
        }
        it.status().map_err(db_err(&self.dir))
    }

    /// Visit the keys that start with `prefix`, from `start` on, until `each` says stop.
    fn scan_from(
        &self,
        prefix: &[u8],
        start: &[u8],
        mut each: impl FnMut(&[u8], &[u8]) -> Result<bool, ViewError>,
    ) -> Result<(), ViewError> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if !k.starts_with(prefix) || !each(k, v)? {
                break;
            }
            it.next();
        }
        it.status().map_err(db_err(&self.dir))
    }

    fn decode_version(&self, key: &[u8], value: &[u8]) -> Result<Version, ViewError> {
        let parts = keys::split_key(key).ok_or_else(|| self.corrupt(format!("bad key {key:?}")))?;
        let value = match keys::split_value(value) {
            Some(None) => Value::TOMBSTONE,
            Some(Some(json)) => Value::json_bytes(json)
                .map_err(|e| self.corrupt(format!("bad value at {}: {e}", parts.index)))?,
            None => return Err(self.corrupt(format!("bad value tag at {}", parts.index))),
        };
        Ok(Version {
            index: parts.index,
            value,
        })
    }
}

/// A page of out-edges: the live edges, and the edge (label, to) the next page starts
/// after, absent on the last page.
#[derive(Debug)]
pub struct EdgesPage {
    pub edges: Vec<(ItemKey, Version)>,
    pub next: Option<(String, String)>,
}

/// About how many versions one page of out-edges reads before it stops at the next edge
/// boundary (an edge is always read whole): a node whose edges are mostly deleted, or
/// mostly newer than `as_of`, costs each request a bounded scan, and its client follows
/// `next` through pages that may hold fewer edges than asked for.
pub const EDGE_SCAN_VERSIONS_MAX: usize = 100_000;

/// Value bytes a history or out-edges page holds at most (past its first entry), so one
/// small request cannot make the node copy and encode gigabytes (values are up to 1 MiB
/// each, pages up to 10,000 entries). The multiget's bound is the same.
pub const PAGE_VALUE_BYTES_MAX: usize = 64 << 20;

/// The size past which `apply` writes the transactions it gathered (at the next commit):
/// one RocksDB write per call for the few transactions a tailer brings at a time, and a
/// bounded batch while a view catches up.
pub const APPLY_BATCH_BYTES_MAX: usize = 4 << 20;

/// Which out-edges a page holds: as of `at` (default: the applied index), one label only,
/// and only past the edge (label, to) a previous page ended on.
#[derive(Clone, Copy, Debug, Default)]
pub struct EdgeFilter<'a> {
    pub at: Option<Index>,
    pub label: Option<&'a str>,
    pub after: Option<(&'a str, &'a str)>,
}

/// At most `limit` entries of a longer list, and whether more follow.
#[derive(Clone, Debug, PartialEq)]
pub struct Page<T> {
    pub entries: Vec<T>,
    pub more: bool,
    limit: usize,
    /// Value bytes taken, and the most the page may take (past its first entry).
    bytes: usize,
    bytes_max: usize,
}

impl<T> Page<T> {
    fn new(limit: usize, bytes_max: usize) -> Self {
        Page {
            entries: Vec::with_capacity(limit.min(1024)),
            more: false,
            limit,
            bytes: 0,
            bytes_max,
        }
    }

    /// Take one more entry of `bytes` value bytes (built only if there is room); `false`
    /// once the page is full — `limit` entries, or the entry would take its values past
    /// `bytes_max` — and another entry was seen, so the caller stops reading.
    fn offer(
        &mut self,
        bytes: usize,
        entry: impl FnOnce() -> Result<T, ViewError>,
    ) -> Result<bool, ViewError> {
        let over = self.bytes.saturating_add(bytes) > self.bytes_max;
        if self.entries.len() == self.limit || (over && !self.entries.is_empty()) {
            self.more = true;
            return Ok(false);
        }
        self.entries.push(entry()?);
        self.bytes = self.bytes.saturating_add(bytes);
        Ok(true)
    }
}

/// The bounds of one out-edges page (`DiskView::out_edges_page_bounded`).
#[derive(Clone, Copy, Debug)]
pub struct PageBounds {
    /// Edges at most.
    pub limit: usize,
    /// Versions read at most (past it, the page ends at the next edge boundary).
    pub scan_max: usize,
    /// Value bytes at most (past its first edge).
    pub bytes_max: usize,
}

impl crate::follow::Applier for DiskView {
    fn applied_index(&self) -> Index {
        DiskView::applied_index(self)
    }

    fn apply(&self, records: &[Record]) -> Result<Index, ViewError> {
        DiskView::apply(self, records)
    }
}

fn decode_partition(bytes: &[u8]) -> Option<Partition> {
    let lo = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let hi = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    if bytes.len() != 16 {
        return None;
    }
    Partition::new(lo, hi)
}

pub(crate) fn db_err(dir: &Path) -> impl Fn(rocksdb::Error) -> ViewError + '_ {
    move |source| ViewError::Db {
        dir: dir.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_bytes_estimate_grows_with_data() {
        let dir = tempfile::tempdir().unwrap();
        let view = DiskView::open(dir.path(), Partition::ALL).unwrap();
        let empty = view.estimate_live_bytes().unwrap();
        let records: Vec<Record> = (1..=100)
            .map(|i| Record {
                index: Index::new(i),
                commit: true,
                key: ItemKey::node(format!("n{i}")).unwrap(),
                value: Value::json(format!("{{\"i\":{i}}}")).unwrap(),
            })
            .collect();
        view.apply(&records).unwrap();
        assert!(view.estimate_live_bytes().unwrap() > empty);
    }

    #[test]
    fn open_with_a_small_cache_reads_what_open_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let key = ItemKey::node("n").unwrap();
        {
            let view = DiskView::open(dir.path(), Partition::ALL).unwrap();
            let record = Record {
                index: Index::FIRST,
                commit: true,
                key: key.clone(),
                value: Value::json("{\"a\":1}").unwrap(),
            };
            view.apply(&[record]).unwrap();
            view.flush().unwrap();
        }
        let small = DiskOptions {
            block_cache_bytes: 1 << 20,
            direct_reads: false,
        };
        let view = DiskView::open_with(dir.path(), Partition::ALL, small).unwrap();
        assert_eq!(view.applied_index(), Index::FIRST);
        let got = view.latest(&key, Freshness::Any).unwrap().unwrap();
        assert_eq!(got.index, Index::FIRST);
        drop(view);
        // Direct reads need O_DIRECT; where the filesystem has it, reads must still work.
        let direct = DiskOptions {
            block_cache_bytes: 1 << 20,
            direct_reads: true,
        };
        if let Ok(view) = DiskView::open_with(dir.path(), Partition::ALL, direct) {
            let got = view.latest(&key, Freshness::Any).unwrap().unwrap();
            assert_eq!(got.index, Index::FIRST);
        }
    }
}
