//! Pure policies: when to seal a volume, whether a put fits, which volumes to compact.
//! The store's workers call these and do the I/O; the functions themselves touch nothing.

use crate::format::VOLUME_HEADER_LEN;

/// Whether the active volume, now `active_len` bytes long, must be sealed before a record
/// of `record_len` bytes is appended. A volume always takes at least one record, so a chunk
/// larger than the volume bound still fits somewhere.
pub fn should_seal(active_len: u64, record_len: u64, volume_bytes_max: u64) -> bool {
    active_len > VOLUME_HEADER_LEN && active_len.saturating_add(record_len) > volume_bytes_max
}

/// Whether a put of `needed_bytes` fits when `used_bytes` are on disk and `reserved_bytes`
/// are promised to puts still in the write buffer.
pub fn put_fits(
    used_bytes: u64,
    reserved_bytes: u64,
    needed_bytes: u64,
    space_bytes_max: u64,
) -> bool {
    used_bytes
        .checked_add(reserved_bytes)
        .and_then(|b| b.checked_add(needed_bytes))
        .is_some_and(|total| total <= space_bytes_max)
}

/// When a sealed volume is worth rewriting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionPolicy {
    /// Compact a volume once at least this fraction of its records' bytes is garbage.
    pub garbage_ratio_min: f64,
    /// ... and at least this many bytes are garbage (so tiny volumes are left alone).
    pub garbage_bytes_min: u64,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        Self {
            garbage_ratio_min: 0.5,
            garbage_bytes_min: 1 << 20,
        }
    }
}

/// What the compaction policy knows about one volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeUsage {
    /// Volume number.
    pub volume: u32,
    /// Bytes of the volume file.
    pub bytes: u64,
    /// Bytes of records of live chunks.
    pub live_bytes: u64,
    /// Whether the volume is sealed (only sealed volumes are compacted).
    pub sealed: bool,
}

impl VolumeUsage {
    /// Bytes of records that no live chunk needs (deleted or superseded chunks, tombstones).
    pub fn garbage_bytes(&self) -> u64 {
        self.bytes
            .saturating_sub(VOLUME_HEADER_LEN)
            .saturating_sub(self.live_bytes)
    }
}

/// The sealed volumes worth compacting, most garbage first.
pub fn compaction_candidates(volumes: &[VolumeUsage], policy: &CompactionPolicy) -> Vec<u32> {
    let mut picked: Vec<&VolumeUsage> = volumes
        .iter()
        .filter(|v| v.sealed)
        .filter(|v| {
            let garbage = v.garbage_bytes();
            let records = v.bytes.saturating_sub(VOLUME_HEADER_LEN);
            let empty = records == 0 || v.live_bytes == 0;
            // A sealed volume with nothing live is always worth dropping, however small.
            (empty && records > 0)
                || (garbage >= policy.garbage_bytes_min
                    && garbage as f64 >= policy.garbage_ratio_min * records as f64)
        })
        .collect();
    picked.sort_by(|a, b| {
        b.garbage_bytes()
            .cmp(&a.garbage_bytes())
            .then(a.volume.cmp(&b.volume))
    });
    picked.into_iter().map(|v| v.volume).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = VOLUME_HEADER_LEN;

    fn vol(volume: u32, records: u64, live: u64, sealed: bool) -> VolumeUsage {
        VolumeUsage {
            volume,
            bytes: H + records,
            live_bytes: live,
            sealed,
        }
    }

    #[test]
    fn seal_only_when_next_record_overflows_a_nonempty_volume() {
        assert!(
            !should_seal(H, 1000, 100),
            "an empty volume takes any record"
        );
        assert!(!should_seal(H + 10, 90 - H, 100));
        assert!(should_seal(H + 10, 91 - H, 100));
        for active in [H, H + 1, 50, 99, 100, 1000] {
            for rec in [1, 10, 36, 37, 1000] {
                let expect = active > H && active + rec > 100;
                assert_eq!(should_seal(active, rec, 100), expect, "{active} {rec}");
            }
        }
    }

    #[test]
    fn put_fits_exactly_up_to_the_limit() {
        assert!(put_fits(60, 30, 10, 100));
        assert!(!put_fits(60, 30, 11, 100));
        assert!(!put_fits(u64::MAX, 1, 1, u64::MAX));
    }

    #[test]
    fn candidates_need_ratio_and_bytes_and_a_seal() {
        let p = CompactionPolicy {
            garbage_ratio_min: 0.5,
            garbage_bytes_min: 100,
        };
        let vols = [
            vol(1, 1000, 400, true),  // 600 garbage, 60%: yes
            vol(2, 1000, 600, true),  // 40%: no
            vol(3, 1000, 100, false), // active: never
            vol(4, 150, 50, true),    // 100 garbage, 66%: yes (exactly the byte bound)
            vol(5, 120, 50, true),    // 70 garbage: too few bytes
            vol(6, 10, 0, true),      // nothing live: always
            vol(7, 0, 0, true),       // no records at all: nothing to gain
            vol(8, 1000, 500, true),  // exactly 50%: yes
        ];
        assert_eq!(compaction_candidates(&vols, &p), vec![1, 8, 4, 6]);
    }

    #[test]
    fn candidates_exhaustive_small_grid() {
        let p = CompactionPolicy {
            garbage_ratio_min: 0.25,
            garbage_bytes_min: 2,
        };
        for records in 0..12u64 {
            for live in 0..=records {
                for sealed in [false, true] {
                    let v = vol(1, records, live, sealed);
                    let got = !compaction_candidates(&[v], &p).is_empty();
                    let garbage = records - live;
                    let expect = sealed
                        && records > 0
                        && (live == 0 || (garbage >= 2 && 4 * garbage >= records));
                    assert_eq!(got, expect, "records {records} live {live} sealed {sealed}");
                }
            }
        }
    }
}
