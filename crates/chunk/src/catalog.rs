//! The in-memory catalog: chunk id → location, per-volume usage, and which volumes still
//! hold dead copies of a chunk (so compaction knows which tombstones must be kept).
//!
//! The catalog changes only by replaying records in volume order, the same function at open
//! time (from hints or scans) and after each group commit, so a reopened store rebuilds
//! exactly the state it had.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::format::{HintEntry, RecordKind, RECORD_HEADER_LEN, VOLUME_HEADER_LEN};
use crate::id::ChunkId;
use crate::policy::VolumeUsage;
use crate::volume::VolumeFile;

/// Where a live chunk's record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Volume number.
    pub volume: u32,
    /// Offset of the record header in the volume file.
    pub offset: u64,
    /// Bytes of chunk data.
    pub len: u32,
}

impl Loc {
    pub(crate) fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN + u64::from(self.len)
    }
}

/// Usage of one volume.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VolumeStats {
    /// Bytes of the volume file.
    pub bytes: u64,
    /// Bytes of its hint file (0 while it has none).
    pub hint_bytes: u64,
    /// Records of live chunks, in bytes.
    pub live_bytes: u64,
    /// Live chunks.
    pub live_chunks: u64,
    /// All records (puts and tombstones).
    pub records: u64,
    /// Tombstone records.
    pub tombstones: u64,
    /// Sealed volumes are never appended to again.
    pub sealed: bool,
}

impl VolumeStats {
    /// Bytes of put records whose chunk was deleted or put again elsewhere.
    pub fn dead_put_bytes(&self) -> u64 {
        self.bytes
            .saturating_sub(VOLUME_HEADER_LEN)
            .saturating_sub(self.live_bytes)
            .saturating_sub(self.tombstones * RECORD_HEADER_LEN)
    }
}

/// Id → location, per-volume usage, open volume files.
#[derive(Debug, Default)]
pub struct Catalog {
    pub(crate) index: HashMap<ChunkId, Loc>,
    pub(crate) volumes: BTreeMap<u32, VolumeStats>,
    pub(crate) files: HashMap<u32, Arc<VolumeFile>>,
    /// Volumes that hold a dead put record of the chunk.
    pub(crate) dead: HashMap<ChunkId, Vec<u32>>,
}

impl Catalog {
    /// Start tracking an empty volume (its header only).
    pub(crate) fn add_volume(&mut self, volume: u32, file: Option<Arc<VolumeFile>>) {
        let stats = VolumeStats {
            bytes: VOLUME_HEADER_LEN,
            ..VolumeStats::default()
        };
        assert!(
            self.volumes.insert(volume, stats).is_none(),
            "volume {volume} added twice"
        );
        if let Some(file) = file {
            self.files.insert(volume, file);
        }
    }

    /// Replay one record of `volume`.
    pub(crate) fn apply(&mut self, volume: u32, e: &HintEntry) {
        let stats = self
            .volumes
            .get_mut(&volume)
            .expect("records only in known volumes");
        assert_eq!(
            stats.bytes, e.offset,
            "records of volume {volume} replayed out of order"
        );
        stats.bytes += e.record_len();
        stats.records += 1;
        let old = match e.kind {
            RecordKind::Put => {
                stats.live_bytes += e.record_len();
                stats.live_chunks += 1;
                self.index.insert(
                    e.id,
                    Loc {
                        volume,
                        offset: e.offset,
                        len: e.len,
                    },
                )
            }
            RecordKind::Tombstone => {
                stats.tombstones += 1;
                self.index.remove(&e.id)
            }
        };
        if let Some(old) = old {
            let s = self
                .volumes
                .get_mut(&old.volume)
                .expect("index points at known volumes");
            s.live_bytes -= old.record_len();
            s.live_chunks -= 1;
            let dead = self.dead.entry(e.id).or_default();
            if !dead.contains(&old.volume) {
                dead.push(old.volume);
            }
        }
    }

    /// Forget a volume that compaction emptied. `dead_ids` are the ids of its dead puts.
    pub(crate) fn remove_volume(&mut self, volume: u32, dead_ids: &[ChunkId]) {
        let stats = self
            .volumes
            .remove(&volume)
            .expect("removing a known volume");
        assert_eq!(
            stats.live_chunks, 0,
            "volume {volume} removed while chunks live in it"
        );
        self.files.remove(&volume);
        for id in dead_ids {
            if let Some(v) = self.dead.get_mut(id) {
                v.retain(|&n| n != volume);
                if v.is_empty() {
                    self.dead.remove(id);
                }
            }
        }
    }

    /// Whether a volume older than `volume` still holds a dead put of `id`, so a tombstone
    /// for `id` in `volume` must survive compaction.
    pub(crate) fn tombstone_needed(&self, id: &ChunkId, volume: u32) -> bool {
        self.dead
            .get(id)
            .is_some_and(|v| v.iter().any(|&n| n < volume))
    }

    /// Bytes of all volume and hint files.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.volumes.values().map(|s| s.bytes + s.hint_bytes).sum()
    }

    /// Sealed volumes holding records of deleted or superseded chunks, with those records'
    /// bytes (what rewriting the volume is sure to give back; a tombstone may have to be
    /// carried forward), most first.
    pub(crate) fn volumes_with_dead_puts(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .volumes
            .iter()
            .filter(|(_, s)| s.sealed)
            .map(|(&n, s)| (n, s.dead_put_bytes()))
            .filter(|&(_, dead)| dead > 0)
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// Usage of every volume, for the compaction policy.
    pub(crate) fn usage(&self) -> Vec<VolumeUsage> {
        self.volumes
            .iter()
            .map(|(&volume, s)| VolumeUsage {
                volume,
                bytes: s.bytes,
                live_bytes: s.live_bytes,
                sealed: s.sealed,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(id: ChunkId, offset: u64, len: u32) -> HintEntry {
        HintEntry {
            id,
            offset,
            len,
            kind: RecordKind::Put,
        }
    }

    fn tomb(id: ChunkId, offset: u64) -> HintEntry {
        HintEntry {
            id,
            offset,
            len: 0,
            kind: RecordKind::Tombstone,
        }
    }

    #[test]
    fn replay_tracks_live_dead_and_needed_tombstones() {
        let a = ChunkId::of(b"a");
        let mut c = Catalog::default();
        c.add_volume(1, None);
        c.add_volume(2, None);
        let h = VOLUME_HEADER_LEN;
        c.apply(1, &put(a, h, 10));
        assert_eq!(c.volumes[&1].live_bytes, RECORD_HEADER_LEN + 10);
        c.apply(2, &tomb(a, h));
        assert!(!c.index.contains_key(&a));
        assert_eq!(c.volumes[&1].live_bytes, 0);
        assert!(c.tombstone_needed(&a, 2));
        assert!(!c.tombstone_needed(&a, 1));
        c.remove_volume(1, &[a]);
        assert!(!c.tombstone_needed(&a, 2));
        assert_eq!(c.used_bytes(), h + RECORD_HEADER_LEN);
    }

    #[test]
    fn a_second_put_moves_the_chunk() {
        let a = ChunkId::of(b"a");
        let mut c = Catalog::default();
        c.add_volume(1, None);
        c.add_volume(2, None);
        c.apply(1, &put(a, VOLUME_HEADER_LEN, 1));
        c.apply(2, &put(a, VOLUME_HEADER_LEN, 1));
        assert_eq!(c.index[&a].volume, 2);
        assert_eq!(c.volumes[&1].live_chunks, 0);
        assert_eq!(c.volumes[&2].live_chunks, 1);
    }
}
