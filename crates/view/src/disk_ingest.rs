//! Filling a new Disk View from sorted table files (`spindle import`, docs/sort.md "Bulk
//! import"): the files are written outside RocksDB with the options the view opens with,
//! ingested into the data column family, and only then is the applied index set.
//!
//! Fault model: ingestion and the applied index are two steps. A crash between them leaves a
//! view whose data is ahead of its applied index; the importer keeps its `IMPORTING` marker in
//! the data directory until every view finished, and `spindle serve` refuses a directory that
//! still has it, so such a view is never served.

use std::path::{Path, PathBuf};

use rocksdb::{IngestExternalFileOptions, Options, WriteBatch};
use spindle_core::Index;

use crate::checksum::{self, Checksum, ScanSums, CHECKPOINT_INTERVAL_INDEXES};
use crate::disk::{db_err, db_options, DiskOptions, DiskView, META_APPLIED};
use crate::error::ViewError;
use crate::keys;

/// The file an importer creates first in a data directory and removes last: while it
/// exists, the directory holds an unfinished import and must not be served.
pub const IMPORT_MARKER_FILE: &str = "IMPORTING";

/// Where a node keeps Disk View `i` of `n` in its data directory (`views/disk-I-of-N`).
pub fn disk_view_dir(data_dir: &Path, i: u64, n: u64) -> PathBuf {
    data_dir.join("views").join(format!("disk-{i}-of-{n}"))
}

/// The replica checksum (docs/disk-view-format.md "Checksum") of the versions an importer
/// writes into one view's table files, summed as they are written, so that the view does not
/// have to read them all back to learn it (`DiskView::finish_ingest_summed`).
#[derive(Debug)]
pub struct IngestChecksum {
    applied: Index,
    interval: u64,
    sums: ScanSums,
}

impl IngestChecksum {
    /// For a view that will be at `applied` once its files are ingested, with the default
    /// checkpoint interval.
    pub fn new(applied: Index) -> IngestChecksum {
        let interval = CHECKPOINT_INTERVAL_INDEXES;
        IngestChecksum {
            applied,
            interval,
            sums: ScanSums::new(checksum::checkpoint_indexes(applied, interval)),
        }
    }

    /// Count one version: a Disk View key and value as written into a table file. A key that
    /// is not a Disk View key is no version and counts nothing, as in a view's own scan.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        if let Some(parts) = keys::split_key(key) {
            self.sums.add(parts.index, Checksum::of_version(key, value));
        }
    }

    /// Versions counted.
    pub fn versions(&self) -> u64 {
        self.sums.versions
    }
}

/// Whether `data_dir` holds an unfinished import; an error where that cannot be told (the
/// marker cannot be looked up: permissions, I/O), so such a directory is not served.
pub fn import_unfinished(data_dir: &Path) -> std::io::Result<bool> {
    data_dir.join(IMPORT_MARKER_FILE).try_exists()
}

impl DiskView {
    /// The options a table file for a Disk View's data column family is written with
    /// (`SstFileWriter`): the same comparator (bytewise), compression and table format the
    /// view opens with, so an ingested file reads like one the view flushed itself.
    pub fn table_file_options() -> Options {
        db_options(&DiskOptions::default(), None)
    }

    /// Ingest table files of Disk View keys (docs/disk-view-format.md) into this view's data
    /// column family, moving them in. The view must be new (applied index 0); the files must
    /// hold keys of this view's partition only, in non-overlapping ranges. The applied index
    /// is left alone: call `finish_ingest` once every view of the import has its data.
    pub fn ingest_tables(&self, files: &[PathBuf]) -> Result<(), ViewError> {
        let applied = self.applied_index();
        if !applied.is_zero() {
            return Err(ViewError::NotEmpty {
                dir: self.dir().to_path_buf(),
                applied,
            });
        }
        if files.is_empty() {
            return Ok(());
        }
        let mut opts = IngestExternalFileOptions::default();
        opts.set_move_files(true);
        self.db()
            .ingest_external_file_opts(&opts, files.to_vec())
            .map_err(db_err(self.dir()))
    }

    /// Set the applied index of a view filled by `ingest_tables` and make it durable: the
    /// meta batch goes through the WAL and both column families are flushed (synced), so the
    /// view's persisted index is `applied` too.
    pub fn finish_ingest(&self, applied: Index) -> Result<(), ViewError> {
        let mut batch = WriteBatch::default();
        // The ingested versions came around `apply`: checksum them with one scan.
        self.rescan_into(applied, &mut batch)?;
        self.claim_ingested(applied, batch)
    }

    /// `finish_ingest` with the checksum the importer summed while it wrote the ingested
    /// files, instead of a scan of them. The sums must count exactly the versions of the
    /// ingested files, and the view must have held nothing else (a new view, as
    /// `ingest_tables` requires). Sums made for another applied index or checkpoint
    /// interval, or a view that had already claimed an applied index, are not used: the
    /// view scans instead. Nothing reads the ingested files back here: `verify` does.
    pub fn finish_ingest_summed(
        &self,
        applied: Index,
        sums: &IngestChecksum,
    ) -> Result<(), ViewError> {
        let mut batch = WriteBatch::default();
        if sums.applied == applied
            && sums.interval == self.checkpoint_interval()
            && self.applied_index().is_zero()
        {
            self.store_sums_into(applied, &sums.sums, &mut batch);
        } else {
            self.rescan_into(applied, &mut batch)?;
        }
        self.claim_ingested(applied, batch)
    }

    /// Write the applied index with the checksum already in `batch`, and flush.
    fn claim_ingested(&self, applied: Index, mut batch: WriteBatch) -> Result<(), ViewError> {
        batch.put_cf(self.meta_cf(), META_APPLIED, applied.get().to_le_bytes());
        self.db().write(batch).map_err(db_err(self.dir()))?;
        if applied > self.applied_index() {
            self.publish(applied);
        }
        self.flush()
    }
}
