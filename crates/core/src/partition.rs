//! The partition hash and hash-range partitions.
//!
//! `partition_hash` is XXH32 with seed 0 over the UTF-8 bytes of the partition key. It is part
//! of the on-disk and wire format (Disk View keys start with it) and never changes.
//!
//! A partition is a half-open range `[lo, hi)` of the 32-bit hash space, held in `u64` so that
//! `hi` can be 2^32. "Partition i of n" is `[floor(i·2^32/n), floor((i+1)·2^32/n))`, so
//! partitionings nest (4-way inside 8-way) and any two can be intersected.

use serde::{Deserialize, Serialize};

/// The size of the hash space: 2^32.
pub const HASH_SPACE: u64 = 1 << 32;

/// The most Disk Views one node's data directory may be split into (`disk_partitions`,
/// `spindle import --disk-partitions`).
pub const DISK_PARTITIONS_MAX: u64 = 256;

/// Stable 32-bit hash of a partition key (XXH32, seed 0).
pub fn partition_hash(key: &[u8]) -> u32 {
    xxhash_rust::xxh32::xxh32(key, 0)
}

/// A half-open range `[lo, hi)` of the hash space, `lo < hi <= 2^32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Partition {
    lo: u64,
    hi: u64,
}

impl Partition {
    /// The whole hash space.
    pub const ALL: Partition = Partition {
        lo: 0,
        hi: HASH_SPACE,
    };

    /// `[lo, hi)`; `None` if empty or out of the hash space.
    pub fn new(lo: u64, hi: u64) -> Option<Self> {
        (lo < hi && hi <= HASH_SPACE).then_some(Partition { lo, hi })
    }

    /// Partition `i` of `n`. Panics if `n == 0` or `i >= n` (a caller bug, not input).
    pub fn nth(i: u64, n: u64) -> Self {
        assert!(n >= 1 && i < n, "partition {i} of {n} does not exist");
        let lo = i * HASH_SPACE / n;
        let hi = (i + 1) * HASH_SPACE / n;
        Partition { lo, hi }
    }

    #[inline]
    pub fn lo(self) -> u64 {
        self.lo
    }

    #[inline]
    pub fn hi(self) -> u64 {
        self.hi
    }

    #[inline]
    pub fn contains(self, hash: u32) -> bool {
        let h = u64::from(hash);
        self.lo <= h && h < self.hi
    }

    /// The overlap of two partitions, if any.
    pub fn intersect(self, other: Partition) -> Option<Partition> {
        Partition::new(self.lo.max(other.lo), self.hi.min(other.hi))
    }

    /// Whether `other` lies wholly inside `self`.
    #[inline]
    pub fn covers(self, other: Partition) -> bool {
        self.lo <= other.lo && other.hi <= self.hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_frozen() {
        // These values are part of the on-disk format: if this test fails, the format broke.
        assert_eq!(partition_hash(b""), 0x02cc_5d05);
        assert_eq!(partition_hash(b"users/1"), partition_hash(b"users/1"));
        assert_ne!(partition_hash(b"users/1"), partition_hash(b"users/2"));
    }

    #[test]
    fn nth_partitions_tile_the_space_and_nest() {
        for n in 1..=16u64 {
            let parts: Vec<_> = (0..n).map(|i| Partition::nth(i, n)).collect();
            assert_eq!(parts[0].lo(), 0);
            assert_eq!(parts[n as usize - 1].hi(), HASH_SPACE);
            for w in parts.windows(2) {
                assert_eq!(w[0].hi(), w[1].lo());
            }
        }
        for i in 0..8 {
            let small = Partition::nth(i, 8);
            assert!(Partition::nth(i / 2, 4).covers(small));
        }
    }

    #[test]
    fn four_way_intersects_six_way() {
        let a = Partition::nth(1, 4);
        let b = Partition::nth(2, 6);
        let both = a.intersect(b).unwrap();
        assert!(a.covers(both) && b.covers(both));
        assert!(Partition::nth(0, 4)
            .intersect(Partition::nth(5, 6))
            .is_none());
        assert!(Partition::new(5, 5).is_none());
        assert!(Partition::new(0, HASH_SPACE + 1).is_none());
    }
}
