//! Compaction: rewrite a sealed volume whose garbage passed the policy's threshold. Its live
//! chunks (and the tombstones still needed) are queued to the writer like puts and appended
//! to the active volume; once they are durable the old volume is dropped from the catalog
//! and its files removed. Gets never wait: they follow the index, and a reader that already
//! holds the old volume's file handle can still read it after the unlink.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use spindle_fs::Fs;

use crate::catalog::Loc;
use crate::error::{ChunkError, Result};
use crate::format::{self, RecordHeader, RecordKind, RECORD_HEADER_LEN};
use crate::id::ChunkId;
use crate::policy;
use crate::store::{CompactionReport, Shared};
use crate::volume;
use crate::writer::OpKind;

impl Shared {
    /// Rewrite every sealed volume the compaction policy picks. One compaction runs at a time.
    /// A volume that cannot be rewritten (a live chunk whose bytes rotted, which compaction
    /// will not copy) does not hold back the others: they are rewritten all the same, and
    /// the first such error is returned. Once the writer has failed, nothing more is tried.
    pub(crate) fn compact(&self) -> Result<CompactionReport> {
        let _one_at_a_time = self.compaction_lock.lock();
        let usage = self.catalog.read().usage();
        let mut report = CompactionReport::default();
        let mut result = Ok(());
        for volume in policy::compaction_candidates(&usage, &self.opts.compaction) {
            if let Err(e) = self.compact_volume(volume, &mut report) {
                if result.is_ok() {
                    result = Err(e);
                }
                if self.queue.lock().failed.is_some() {
                    break;
                }
            }
        }
        self.count_compaction(&report);
        result.map(|()| report)
    }

    /// What a compaction rewrote counts even when a later volume failed.
    fn count_compaction(&self, report: &CompactionReport) {
        let mut totals = self.compaction_totals.lock();
        totals.runs += 1;
        totals.volumes += report.volumes.len() as u64;
        totals.chunks_moved += report.chunks_moved;
        totals.bytes_reclaimed += report.bytes_reclaimed;
    }

    /// A put did not fit (`fits` says whether it does now): give back the space of deleted
    /// chunks, whatever the compaction policy would wait for. The writer seals each active
    /// volume holding records of deleted chunks (compaction rewrites only sealed ones, and
    /// deletes alone never seal a volume), then the sealed volumes holding the most such
    /// records are rewritten, one at a time, until the put fits or none is left. Returns
    /// whether anything was rewritten.
    pub(crate) fn reclaim_space(&self, fits: impl Fn() -> bool) -> Result<bool> {
        let seq = self.enqueue_when_room(ChunkId::from_bytes([0; 32]), OpKind::SealForSpace, 0)?;
        self.wait_seq(seq)?;
        let _one_at_a_time = self.compaction_lock.lock();
        let mut report = CompactionReport::default();
        let mut result = Ok(());
        let mut candidates = self.catalog.read().volumes_with_dead_puts();
        candidates.retain(|(v, _)| !self.reclaim_skip.lock().contains(v));
        for (volume, _) in candidates {
            if fits() {
                break;
            }
            if let Err(e) = self.compact_volume(volume, &mut report) {
                // Damage stays; an I/O error may pass, and the next put tries again.
                if matches!(e, ChunkError::Corrupt { .. }) {
                    self.reclaim_skip.lock().insert(volume);
                }
                if result.is_ok() {
                    result = Err(e);
                }
                if self.queue.lock().failed.is_some() {
                    break;
                }
            }
        }
        let rewrote = !report.volumes.is_empty();
        if rewrote {
            self.count_compaction(&report);
        }
        result.map(|()| rewrote)
    }

    /// Whether any sealed volume passes the compaction policy now.
    pub(crate) fn compaction_due(&self) -> bool {
        let usage = self.catalog.read().usage();
        !policy::compaction_candidates(&usage, &self.opts.compaction).is_empty()
    }

    fn compact_volume(&self, volume: u32, report: &mut CompactionReport) -> Result<()> {
        let dir = &self.dir;
        let (file, len, hint_bytes) = {
            let cat = self.catalog.read();
            let stats = cat.volumes[&volume];
            assert!(stats.sealed, "only sealed volumes are compacted");
            (
                Arc::clone(&cat.files[&volume]),
                stats.bytes,
                stats.hint_bytes,
            )
        };
        let entries = match volume::read_hint(&*self.fs, dir, volume, len) {
            Some((entries, _)) => entries,
            None => {
                let scan = volume::scan_volume(&*self.fs, &file.path, volume, false)?;
                if let Some(stop) = scan.stop {
                    return Err(ChunkError::Corrupt {
                        volume: file.path.clone(),
                        offset: stop.offset,
                        reason: stop.reason,
                    });
                }
                scan.entries
            }
        };
        let mut last_seq = None;
        let mut copied_bytes = 0;
        let mut put_ids = Vec::new();
        for e in &entries {
            match e.kind {
                RecordKind::Put => {
                    put_ids.push(e.id);
                    let here = Loc {
                        volume,
                        offset: e.offset,
                        len: e.len,
                    };
                    if self.catalog.read().index.get(&e.id) != Some(&here) {
                        continue;
                    }
                    // Verify before copying: compaction must not spread rotten bytes.
                    let data = Bytes::from(file.read_chunk(&e.id, e.offset, e.len, true)?);
                    let header = RecordHeader::put(e.id, &data);
                    let kind = OpKind::Relocate {
                        from: here,
                        header,
                        data,
                    };
                    last_seq = Some(self.enqueue_when_room(e.id, kind, e.record_len())?);
                    report.chunks_moved += 1;
                    copied_bytes += e.record_len();
                }
                RecordKind::Tombstone => {
                    if self.catalog.read().tombstone_needed(&e.id, volume) {
                        let seq =
                            self.enqueue_when_room(e.id, OpKind::KeepTombstone, RECORD_HEADER_LEN)?;
                        last_seq = Some(seq);
                        report.tombstones_kept += 1;
                        copied_bytes += RECORD_HEADER_LEN;
                    }
                }
            }
        }
        if let Some(seq) = last_seq {
            self.wait_seq(seq)?;
        }
        // A failed writer (or one that panicked while publishing) may have left the catalog
        // behind the volumes: remove nothing on its word.
        if let Some(failure) = &self.queue.lock().failed {
            return Err(failure.error());
        }
        // The files go first: a catalog that forgot a volume still on disk would let a
        // later compaction drop the tombstone masking one of its dead puts, and the next
        // open would serve that deleted chunk again. If a removal fails, the volume stays
        // known (a later run tries again); reads follow the index, which no longer points
        // into it, and a reader holding its file handle can still read after the unlink.
        remove_if_present(&*self.fs, &format::hint_path(dir, volume))?;
        remove_if_present(&*self.fs, &file.path)?;
        if let Err(e) = volume::sync_dir(&*self.fs, dir) {
            // The unlinks may not be durable, and the files are gone: the volume can be
            // neither kept (nothing left to compact) nor forgotten (a tombstone masking one
            // of its dead puts could be dropped, and a power cut would bring it back). A
            // failed directory sync is a failed sync: the store stops writing, as for one
            // of the writer's own, and the next open finds what is on disk.
            crate::writer::record_failure(self, &e);
            return Err(e);
        }
        self.catalog.write().remove_volume(volume, &put_ids);
        report.volumes.push(volume);
        report.bytes_reclaimed += (len + hint_bytes).saturating_sub(copied_bytes);
        Ok(())
    }
}

fn remove_if_present(fs: &dyn Fs, path: &std::path::Path) -> Result<()> {
    match fs.remove(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(ChunkError::io("remove", path, e)),
        _ => Ok(()),
    }
}
