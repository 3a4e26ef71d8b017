//! Replica checksums: an order-independent 128-bit digest of every version a Disk View holds,
//! kept incrementally as records are applied, so replicas of one range can prove they agree.
//!
//! Digest: the sum mod 2¹²⁸ of `H(version)` over the versions held, where `H` is the first
//! 16 bytes of BLAKE3 over `len(key) u32 LE | key | value` (the RocksDB key and value bytes
//! of docs/disk-view-format.md: the key carries the item and the index, the value the
//! tombstone tag and the JSON text). A sum rather than an XOR: the sum is a multiset hash, so
//! a version counted twice (or a bug that applies a record twice) changes it, while under
//! XOR two equal contributions cancel; and any two replicas holding the same versions get
//! the same sum in whatever order or batching they applied them. Format and the checkpoint
//! rule: docs/disk-view-format.md "Checksum".

use std::collections::VecDeque;

use spindle_core::Index;

/// Every this many log indexes a Disk View records a checkpoint: the checksum of exactly the
/// versions with index ≤ the multiple (`DiskView::set_checkpoint_interval` changes it, for
/// tests; replicas compare only checkpoints at the same index).
pub const CHECKPOINT_INTERVAL_INDEXES: u64 = 1024;
/// How many of the latest checkpoints a Disk View keeps.
pub const CHECKPOINTS_KEPT_MAX: usize = 16;
/// Bytes of one stored checkpoint: index u64 LE | checksum u128 LE.
pub const CHECKPOINT_BYTES: usize = 24;

/// A 128-bit order-independent checksum of a set of versions (hex when shown).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Checksum(pub u128);

impl Checksum {
    /// The checksum of no versions.
    pub const EMPTY: Checksum = Checksum(0);

    /// The contribution of one stored version (its RocksDB key and value bytes).
    pub fn of_version(key: &[u8], value: &[u8]) -> Checksum {
        let mut hasher = blake3::Hasher::new();
        let key_len = u32::try_from(key.len()).expect("version keys are bounded");
        hasher.update(&key_len.to_le_bytes());
        hasher.update(key);
        hasher.update(value);
        let digest = hasher.finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest.as_bytes()[..16]);
        Checksum(u128::from_le_bytes(first))
    }

    /// This set plus one more version (or another disjoint set).
    #[must_use]
    pub fn plus(self, other: Checksum) -> Checksum {
        Checksum(self.0.wrapping_add(other.0))
    }

    /// 32 lower-case hex digits, most significant first.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    /// Parse `to_hex`'s output.
    pub fn from_hex(text: &str) -> Option<Checksum> {
        if text.len() != 32 {
            return None;
        }
        u128::from_str_radix(text, 16).ok().map(Checksum)
    }
}

impl std::fmt::Display for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl std::fmt::Debug for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// The checksum of exactly the versions with index ≤ `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub index: Index,
    pub checksum: Checksum,
}

/// A view's checksum at its applied index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppliedChecksum {
    pub applied: Index,
    pub checksum: Checksum,
}

/// The checksum state of a view: the running sum at `applied` and the latest checkpoints.
/// `apply` works on a copy and publishes it once its batch is written.
#[derive(Clone, Debug)]
pub(crate) struct Tally {
    pub applied: Index,
    pub sum: Checksum,
    pub checkpoints: VecDeque<Checkpoint>,
    pub interval: u64,
}

impl Tally {
    pub fn new(applied: Index, sum: Checksum, checkpoints: Vec<Checkpoint>) -> Tally {
        Tally {
            applied,
            sum,
            checkpoints: checkpoints.into(),
            interval: CHECKPOINT_INTERVAL_INDEXES,
        }
    }

    /// Account for the log record at `index` (the next one: records come dense and in
    /// order), whose in-partition version contributes `version` (`None`: out of range).
    /// Passing a checkpoint multiple records it, including this record. Returns whether a
    /// checkpoint was recorded.
    pub fn record(&mut self, index: Index, version: Option<Checksum>) -> bool {
        if let Some(v) = version {
            self.sum = self.sum.plus(v);
        }
        self.applied = index;
        if index.get().is_multiple_of(self.interval) {
            self.push_checkpoint(Checkpoint {
                index,
                checksum: self.sum,
            });
            return true;
        }
        false
    }

    fn push_checkpoint(&mut self, checkpoint: Checkpoint) {
        self.checkpoints.push_back(checkpoint);
        while self.checkpoints.len() > CHECKPOINTS_KEPT_MAX {
            self.checkpoints.pop_front();
        }
    }

    pub fn checkpoints(&self) -> Vec<Checkpoint> {
        self.checkpoints.iter().copied().collect()
    }
}

/// The meta `checksum` value: applied u64 LE | checksum u128 LE.
pub(crate) fn encode_applied(applied: Index, sum: Checksum) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..8].copy_from_slice(&applied.get().to_le_bytes());
    out[8..].copy_from_slice(&sum.0.to_le_bytes());
    out
}

pub(crate) fn decode_applied(bytes: &[u8]) -> Option<AppliedChecksum> {
    if bytes.len() != 24 {
        return None;
    }
    let applied = Index::new(u64::from_le_bytes(bytes[..8].try_into().ok()?));
    let checksum = Checksum(u128::from_le_bytes(bytes[8..].try_into().ok()?));
    Some(AppliedChecksum { applied, checksum })
}

/// The meta `checkpoints` value: checkpoints in increasing index order, 24 bytes each.
pub(crate) fn encode_checkpoints(checkpoints: &VecDeque<Checkpoint>) -> Vec<u8> {
    let mut out = Vec::with_capacity(checkpoints.len() * CHECKPOINT_BYTES);
    for c in checkpoints {
        out.extend_from_slice(&encode_applied(c.index, c.checksum));
    }
    out
}

pub(crate) fn decode_checkpoints(bytes: &[u8]) -> Option<Vec<Checkpoint>> {
    if !bytes.len().is_multiple_of(CHECKPOINT_BYTES) {
        return None;
    }
    bytes
        .chunks_exact(CHECKPOINT_BYTES)
        .map(|c| {
            decode_applied(c).map(|a| Checkpoint {
                index: a.applied,
                checksum: a.checksum,
            })
        })
        .collect()
}

/// The checkpoint indexes a view at `applied` keeps: the latest `CHECKPOINTS_KEPT_MAX`
/// positive multiples of `interval` at or below it, increasing.
pub(crate) fn checkpoint_indexes(applied: Index, interval: u64) -> Vec<Index> {
    let last = applied.get() / interval;
    let first = last.saturating_sub(CHECKPOINTS_KEPT_MAX as u64 - 1).max(1);
    (first..=last).map(|m| Index::new(m * interval)).collect()
}

/// Sums a scan of versions into the total and into each checkpoint of `indexes` (increasing):
/// a version counts towards every checkpoint at or above its index.
#[derive(Debug)]
pub(crate) struct ScanSums {
    indexes: Vec<Index>,
    /// `buckets[j]`: versions with index in (indexes[j-1], indexes[j]]; the last bucket holds
    /// those above every checkpoint.
    buckets: Vec<Checksum>,
    pub versions: u64,
}

impl ScanSums {
    pub fn new(indexes: Vec<Index>) -> ScanSums {
        let buckets = vec![Checksum::EMPTY; indexes.len() + 1];
        ScanSums {
            indexes,
            buckets,
            versions: 0,
        }
    }

    pub fn add(&mut self, index: Index, version: Checksum) {
        let bucket = self.indexes.partition_point(|k| *k < index);
        self.buckets[bucket] = self.buckets[bucket].plus(version);
        self.versions += 1;
    }

    pub fn total(&self) -> Checksum {
        self.buckets
            .iter()
            .fold(Checksum::EMPTY, |acc, b| acc.plus(*b))
    }

    pub fn checkpoints(&self) -> Vec<Checkpoint> {
        let mut acc = Checksum::EMPTY;
        self.indexes
            .iter()
            .zip(&self.buckets)
            .map(|(index, bucket)| {
                acc = acc.plus(*bucket);
                Checkpoint {
                    index: *index,
                    checksum: acc,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_has_fixed_width() {
        let c = Checksum(0xab);
        assert_eq!(c.to_hex().len(), 32);
        assert_eq!(Checksum::from_hex(&c.to_hex()), Some(c));
        assert_eq!(Checksum::from_hex("ab"), None);
    }

    #[test]
    fn the_sum_ignores_order_but_counts_multiplicity() {
        let a = Checksum::of_version(b"k1", b"v");
        let b = Checksum::of_version(b"k2", b"v");
        assert_eq!(a.plus(b), b.plus(a));
        assert_ne!(
            a.plus(a),
            Checksum::EMPTY,
            "unlike XOR, a twice does not cancel"
        );
        // The key length frames the input: moving bytes between key and value differs.
        assert_ne!(
            Checksum::of_version(b"ab", b"c"),
            Checksum::of_version(b"a", b"bc")
        );
    }

    #[test]
    fn checkpoint_indexes_are_the_latest_multiples() {
        assert!(checkpoint_indexes(Index::new(1023), 1024).is_empty());
        assert_eq!(
            checkpoint_indexes(Index::new(2047), 1024),
            [Index::new(1024)]
        );
        let many = checkpoint_indexes(Index::new(100), 2);
        assert_eq!(many.len(), CHECKPOINTS_KEPT_MAX);
        assert_eq!(many.last(), Some(&Index::new(100)));
        assert_eq!(many.first(), Some(&Index::new(70)));
    }

    #[test]
    fn scan_sums_match_a_tally_of_the_same_versions() {
        let mut tally = Tally::new(Index::ZERO, Checksum::EMPTY, Vec::new());
        tally.interval = 3;
        let mut scan = ScanSums::new(checkpoint_indexes(Index::new(20), 3));
        for i in 1..=20u64 {
            let v = (i % 4 != 0).then(|| Checksum::of_version(&i.to_be_bytes(), b"x"));
            tally.record(Index::new(i), v);
            if let Some(v) = v {
                scan.add(Index::new(i), v);
            }
        }
        assert_eq!(scan.total(), tally.sum);
        assert_eq!(scan.checkpoints(), tally.checkpoints());
    }
}
