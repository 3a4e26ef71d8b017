//! Booting a new Disk View (a new replica, or a new partitioning such as 4 → 6) from other
//! Disk Views through the Iteration Service, instead of replaying a log that may already be
//! truncated.
//!
//! Protocol: mark the view `booting = cut`; write every version of the plan's sources up to
//! the cut in large batches without the WAL; flush both column families; then, in one WAL
//! batch, set `applied = cut` with the checksum of what was written (one scan), and remove
//! the mark. A crash before the last step leaves the
//! mark, and `DiskView::open` refuses the view until a boot finishes. Each attempt at a
//! source's range first deletes every key of that range (one range tombstone, ahead of its
//! puts), so what an earlier attempt left — a boot that did not finish, at another cut, or
//! a source that failed part way, perhaps after sending bad frames — is not kept beside
//! what this attempt writes.

use std::path::Path;

use rocksdb::{WriteBatch, WriteOptions};
use spindle_core::{ItemKey, Partition, Value};

use crate::boot::{iterate_plan, BootProgress};
use crate::disk::{db_err, DiskView, META_APPLIED, META_BOOTING};
use crate::error::{IterError, ViewError};
use crate::frame::FLAG_TOMBSTONE;
use crate::iterate::IterRequest;
use crate::keys;
use crate::select::Plan;

/// Bytes a boot gathers per RocksDB write batch.
pub const DISK_BOOT_BATCH_BYTES: usize = 4 << 20;

fn no_wal() -> WriteOptions {
    let mut opts = WriteOptions::default();
    opts.disable_wal(true);
    opts
}

impl DiskView {
    /// Boot a Disk View of `partition` in `dir` (new, or left by an unfinished boot) from
    /// the sources of `plan`, to `plan.cut`. Then follow the log from `cut + 1`.
    pub fn boot<'v, S: crate::boot::BootSource + ?Sized + 'v>(
        dir: impl AsRef<Path>,
        partition: Partition,
        plan: &Plan,
        view_of: impl Fn(&str) -> Option<&'v S>,
        progress: &BootProgress,
    ) -> Result<DiskView, IterError> {
        let view = DiskView::open_any(dir, partition)?;
        let applied = view.applied_index();
        if !applied.is_zero() {
            return Err(ViewError::NotEmpty {
                dir: view.dir().to_path_buf(),
                applied,
            }
            .into());
        }
        let meta = view.meta_cf();
        view.db()
            .put_cf(meta, META_BOOTING, plan.cut.get().to_le_bytes())
            .map_err(db_err(view.dir()))?;
        let template = IterRequest::range(partition);
        let target = &view;
        let batches = iterate_plan(
            plan,
            view_of,
            &template,
            progress,
            |range| {
                // Ahead of this attempt's puts in the same write order: what an earlier
                // attempt (or an unfinished boot) left in the range goes.
                let mut batch = WriteBatch::default();
                let ceiling = keys::hash_ceiling(range.hi()).unwrap_or_else(|| vec![0xFF; 5]);
                batch.delete_range(keys::hash_floor(range.lo()), ceiling);
                batch
            },
            |batch, f| {
                let Some((key, _)) = ItemKey::decode(f.key) else {
                    return Err(f.source.corrupt(format!("bad key in frame at {}", f.index)));
                };
                let value = match f.value {
                    _ if f.flags & FLAG_TOMBSTONE != 0 => Value::TOMBSTONE,
                    Some(json) => Value::json_bytes(json)
                        .map_err(|e| f.source.corrupt(format!("value at {}: {e}", f.index)))?,
                    None => {
                        return Err(f
                            .source
                            .corrupt(format!("frame at {} has no value", f.index)))
                    }
                };
                let mut stored = Vec::with_capacity(1 + value.encoded_len());
                keys::encode_value(&value, &mut stored);
                batch.put(keys::version_key(&key, f.index), stored);
                if batch.size_in_bytes() >= DISK_BOOT_BATCH_BYTES {
                    target.write_no_wal(std::mem::take(batch))?;
                }
                Ok(())
            },
        )?;
        for batch in batches {
            view.write_no_wal(batch)?;
        }
        // The unlogged writes reach table files before the view claims them.
        view.flush()?;
        let mut done = WriteBatch::default();
        // The versions came around `apply`: their checksum and checkpoints come from one
        // scan of what the boot wrote (every version is at or below the cut).
        view.rescan_into(plan.cut, &mut done)?;
        done.put_cf(meta, META_APPLIED, plan.cut.get().to_le_bytes());
        done.delete_cf(meta, META_BOOTING);
        view.db().write(done).map_err(db_err(view.dir()))?;
        if !plan.cut.is_zero() {
            view.publish(plan.cut);
        }
        // The finishing batch went to the unsynced WAL: sync it, so the boot is complete on
        // disk before truncation may count this view at its cut.
        view.persist()?;
        Ok(view)
    }

    fn write_no_wal(&self, batch: WriteBatch) -> Result<(), ViewError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.db()
            .write_opt(batch, &no_wal())
            .map_err(db_err(self.dir()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spindle_core::Index;

    #[test]
    fn a_view_with_an_unfinished_boot_is_refused_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let view = DiskView::open(dir.path(), Partition::ALL).unwrap();
        view.db()
            .put_cf(view.meta_cf(), META_BOOTING, 7u64.to_le_bytes())
            .unwrap();
        drop(view);
        let err = DiskView::open(dir.path(), Partition::ALL).unwrap_err();
        assert!(
            matches!(err, ViewError::BootIncomplete { cut, .. } if cut == Index::new(7)),
            "{err}"
        );
        assert!(err.to_string().contains("run the boot again"), "{err}");
    }
}
