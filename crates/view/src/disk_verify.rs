//! Recomputing a Disk View's checksum from its data: once at open for a directory written
//! before checksums, after a boot or an import (whose writes bypass `apply`), and in the
//! verifying scan (`DiskView::verify`, `spindle verify`) that compares it with the stored one.
//!
//! The scan reads at one RocksDB snapshot, so data and metadata agree; RocksDB checks every
//! block's checksum as it reads (a flipped byte in a table file is a `ViewError::Db`).

use rocksdb::{ReadOptions, WriteBatch};
use spindle_core::Index;

use crate::checksum::{self, Checkpoint, Checksum, ScanSums};
use crate::disk::{db_err, DiskView, META_APPLIED, META_CHECKPOINTS, META_CHECKSUM};
use crate::error::ViewError;
use crate::keys;

/// What a verifying scan found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// The applied index at the snapshot scanned.
    pub applied: Index,
    /// Versions read.
    pub versions: u64,
    /// The stored checksum, `None` if missing or stored for another applied index.
    pub stored: Option<Checksum>,
    /// The checksum of the versions read.
    pub computed: Checksum,
    /// Stored checkpoints recomputed.
    pub checkpoints_checked: usize,
    /// Stored checkpoints whose recomputation differs: (index, stored, computed).
    pub checkpoint_mismatches: Vec<(Index, Checksum, Checksum)>,
    /// Versions whose key does not decode or lies outside the view's partition, or whose
    /// index is above the applied index, or whose value tag is unknown.
    pub misplaced: u64,
}

impl VerifyReport {
    /// Whether the data matches every stored checksum and nothing is misplaced.
    pub fn ok(&self) -> bool {
        self.stored == Some(self.computed)
            && self.checkpoint_mismatches.is_empty()
            && self.misplaced == 0
    }
}

impl DiskView {
    /// Recompute the checksum from the data, at one snapshot, and compare it (and every
    /// stored checkpoint) with what is stored. A RocksDB read error (a corrupt table file)
    /// is an `Err`.
    pub fn verify(&self) -> Result<VerifyReport, ViewError> {
        let snapshot = self.db().snapshot();
        let meta = self.meta_cf();
        let get = |k: &[u8]| snapshot.get_cf(meta, k).map_err(db_err(self.dir()));
        let applied = get(META_APPLIED)?
            .and_then(|raw| <[u8; 8]>::try_from(raw.as_slice()).ok())
            .map(|raw| Index::new(u64::from_le_bytes(raw)))
            .ok_or_else(|| self.corrupt("applied index missing or malformed".into()))?;
        let stored = get(META_CHECKSUM)?
            .and_then(|raw| checksum::decode_applied(&raw))
            .filter(|s| s.applied == applied)
            .map(|s| s.checksum);
        let stored_checkpoints = match get(META_CHECKPOINTS)? {
            Some(raw) => checksum::decode_checkpoints(&raw)
                .ok_or_else(|| self.corrupt(format!("checkpoints are {} bytes", raw.len())))?,
            None => Vec::new(),
        };
        let indexes: Vec<Index> = stored_checkpoints.iter().map(|c| c.index).collect();
        let mut opts = ReadOptions::default();
        opts.set_snapshot(&snapshot);
        let (sums, misplaced) = self.scan_sums(opts, indexes, applied)?;
        let checkpoint_mismatches = stored_checkpoints
            .iter()
            .zip(sums.checkpoints())
            .filter(|(s, c)| s.checksum != c.checksum)
            .map(|(s, c)| (s.index, s.checksum, c.checksum))
            .collect();
        Ok(VerifyReport {
            applied,
            versions: sums.versions,
            stored,
            computed: sums.total(),
            checkpoints_checked: stored_checkpoints.len(),
            checkpoint_mismatches,
            misplaced,
        })
    }

    /// Scan every version, summing into the total and the checkpoints at `indexes`; also
    /// count versions that do not belong (bad key, other partition, above `applied`, bad
    /// value tag).
    fn scan_sums(
        &self,
        mut opts: ReadOptions,
        indexes: Vec<Index>,
        applied: Index,
    ) -> Result<(ScanSums, u64), ViewError> {
        opts.fill_cache(false);
        let mut sums = ScanSums::new(indexes);
        let mut misplaced = 0;
        let mut it = self.db().raw_iterator_opt(opts);
        it.seek_to_first();
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            match keys::split_key(k) {
                Some(parts)
                    if self.partition().contains(parts.hash)
                        && parts.index <= applied
                        && keys::split_value(v).is_some() =>
                {
                    sums.add(parts.index, Checksum::of_version(k, v));
                }
                Some(parts) => {
                    misplaced += 1;
                    sums.add(parts.index, Checksum::of_version(k, v));
                }
                None => misplaced += 1,
            }
            it.next();
        }
        it.status().map_err(db_err(self.dir()))?;
        Ok((sums, misplaced))
    }

    /// Recompute the checksum and the checkpoints a view at `applied` keeps by one scan, put
    /// them into `batch`, and install them in memory (the caller writes `batch` next; the
    /// view is not applying meanwhile: it is opening, booting or importing).
    pub(crate) fn rescan_into(
        &self,
        applied: Index,
        batch: &mut WriteBatch,
    ) -> Result<(), ViewError> {
        let indexes = checksum::checkpoint_indexes(applied, self.checkpoint_interval());
        let (sums, _) = self.scan_sums(ReadOptions::default(), indexes, applied)?;
        self.store_sums_into(applied, &sums, batch);
        Ok(())
    }

    /// Put the checksum and checkpoints of `sums` (summed for a view at `applied`) into
    /// `batch` and install them in memory; the caller writes `batch` next.
    pub(crate) fn store_sums_into(&self, applied: Index, sums: &ScanSums, batch: &mut WriteBatch) {
        let total = sums.total();
        let checkpoints: Vec<Checkpoint> = sums.checkpoints();
        let meta = self.meta_cf();
        batch.put_cf(
            meta,
            META_CHECKSUM,
            checksum::encode_applied(applied, total),
        );
        batch.put_cf(
            meta,
            META_CHECKPOINTS,
            checksum::encode_checkpoints(&checkpoints.iter().copied().collect()),
        );
        self.install_tally(applied, total, checkpoints);
    }
}
