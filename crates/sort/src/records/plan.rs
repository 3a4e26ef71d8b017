//! The memory plan: a pure function from input size and budget to buffer sizes and the
//! number of buckets. Everything the sort allocates is sized here, up front.
//!
//! - I/O chunk `C`: `M/64` clamped to 64 KiB..8 MiB; the read ring and the write ring hold
//!   [`RING_SLOTS`] chunks each.
//! - Sorting a bucket of `A` bytes costs `A` (the records) plus [`INDEX_BYTES_PER_RECORD`]
//!   per record (key prefix with record number, and the radix sort's scratch). Pass two
//!   holds two such arenas (one being read while the other is sorted and written).
//! - Input that fits in one arena next to the rings is sorted in memory (one read, one
//!   write). Otherwise pass one writes `2r + 1` buckets at most (`r` key ranges and an
//!   equality bucket per heavy splitter), each staged in a buffer of `W` bytes.

use super::aligned::{align_up, ALIGN_BYTES};
use super::RECORD_BYTES;
use crate::SortError;

/// Slots in each I/O ring.
pub(crate) const RING_SLOTS: usize = 4;

/// Memory per record for sorting: a 16-byte key-and-number and its radix scratch copy.
pub(crate) const INDEX_BYTES_PER_RECORD: u64 = 32;

/// Smallest I/O chunk.
pub(crate) const CHUNK_MIN_BYTES: usize = 64 << 10;

/// Largest I/O chunk: larger buys no bandwidth.
pub(crate) const CHUNK_MAX_BYTES: usize = 8 << 20;

/// The smallest budget accepted: both rings at the smallest chunk and room for buckets.
pub const RECORD_MEMORY_MIN_BYTES: u64 = 1 << 20;

/// Largest number of key ranges in one pass (open files, staging buffers).
pub(crate) const RANGES_MAX: usize = 1024;

/// Values of a key's first two bytes: pass one's router keeps a table over them.
pub(crate) const ROUTE_PREFIXES: usize = 1 << 16;

/// Bytes of that table (one `u32` per prefix, and one past the last).
pub(crate) const ROUTE_TABLE_BYTES: usize = (ROUTE_PREFIXES + 1) * 4;

/// Buckets are planned at this fraction of an arena, so sampling error rarely overflows.
const BUCKET_FILL_PERCENT: u64 = 60;

/// How a sort of `input_bytes` under `memory_bytes` uses memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) chunk_bytes: usize,
    /// Capacity of one sort arena (records), aligned.
    pub(crate) arena_bytes: usize,
    pub(crate) mode: Mode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One read, one in-memory sort, one write.
    InMemory,
    /// Two passes through `ranges` key ranges staged in `stage_bytes` buffers.
    External { ranges: usize, stage_bytes: usize },
}

/// Records one arena of `arena_bytes` holds, with its index, within `bytes`.
fn arena_for(bytes: u64) -> usize {
    let records = bytes / (RECORD_BYTES as u64 + INDEX_BYTES_PER_RECORD);
    let arena = records as usize * RECORD_BYTES;
    arena / ALIGN_BYTES * ALIGN_BYTES
}

/// The most memory a sort uses, whatever its budget: an arena then holds fewer than 2^31
/// records, and the sort word keeps a record's number in 32 bits.
pub(crate) const RECORD_MEMORY_USED_MAX_BYTES: u64 = 256 << 30;

/// Plans a sort; `MemoryTooSmall` below [`RECORD_MEMORY_MIN_BYTES`]. A budget above
/// [`RECORD_MEMORY_USED_MAX_BYTES`] is planned as that much.
pub(crate) fn plan(input_bytes: u64, memory_bytes: u64) -> Result<Plan, SortError> {
    if memory_bytes < RECORD_MEMORY_MIN_BYTES {
        return Err(SortError::MemoryTooSmall {
            memory_bytes,
            min_bytes: RECORD_MEMORY_MIN_BYTES,
        });
    }
    let memory_bytes = memory_bytes.min(RECORD_MEMORY_USED_MAX_BYTES);
    let chunk_bytes = ((memory_bytes / 64) as usize).clamp(CHUNK_MIN_BYTES, CHUNK_MAX_BYTES)
        / ALIGN_BYTES
        * ALIGN_BYTES;
    let rings = (2 * RING_SLOTS * chunk_bytes) as u64;
    let whole = memory_bytes - rings;
    let in_memory = align_up(input_bytes as usize) as u64
        + input_bytes / RECORD_BYTES as u64 * INDEX_BYTES_PER_RECORD;
    if in_memory <= whole {
        return Ok(Plan {
            chunk_bytes,
            arena_bytes: align_up(input_bytes as usize).max(ALIGN_BYTES),
            mode: Mode::InMemory,
        });
    }
    // Pass two: two arenas and one write ring.
    let arena_bytes = arena_for((memory_bytes - (RING_SLOTS * chunk_bytes) as u64) / 2);
    let target = (arena_bytes as u64 * BUCKET_FILL_PERCENT / 100).max(1);
    let mut ranges = (input_bytes.div_ceil(target) as usize).clamp(2, RANGES_MAX);
    // Pass one: the rings, the router's table, and `2r + 1` staging buffers of at least
    // one aligned block.
    let stages_budget =
        (whole as usize).saturating_sub(RING_SLOTS * ALIGN_BYTES + ROUTE_TABLE_BYTES);
    let fits = |r: usize| stages_budget / (2 * r + 1 + RING_SLOTS) >= ALIGN_BYTES;
    while ranges > 1 && !fits(ranges) {
        ranges -= 1;
    }
    let stage_bytes = (stages_budget / (2 * ranges + 1 + RING_SLOTS)).min(CHUNK_MAX_BYTES)
        / ALIGN_BYTES
        * ALIGN_BYTES;
    Ok(Plan {
        chunk_bytes,
        arena_bytes,
        mode: Mode::External {
            ranges,
            stage_bytes,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything a plan allocates at once in its largest phase.
    fn peak_bytes(p: &Plan, input_bytes: u64) -> u64 {
        let rings = (2 * RING_SLOTS * p.chunk_bytes) as u64;
        let index = |arena: usize| arena as u64 / RECORD_BYTES as u64 * INDEX_BYTES_PER_RECORD;
        match p.mode {
            Mode::InMemory => rings + p.arena_bytes as u64 + index(input_bytes as usize),
            Mode::External {
                ranges,
                stage_bytes,
            } => {
                let pass1 = rings
                    + ((2 * ranges + 1 + RING_SLOTS) * stage_bytes + ROUTE_TABLE_BYTES) as u64;
                let pass2 = (RING_SLOTS * p.chunk_bytes) as u64
                    + 2 * (p.arena_bytes as u64 + index(p.arena_bytes));
                pass1.max(pass2)
            }
        }
    }

    #[test]
    fn an_arena_never_holds_more_records_than_a_sort_word_can_number() {
        for (input, memory) in [
            (600u64 << 30, 1u64 << 40),
            (10 << 40, 1 << 40),
            (100 << 30, 1 << 40),
        ] {
            let p = plan(input, memory).unwrap();
            let records = p.arena_bytes as u64 / RECORD_BYTES as u64;
            assert!(records <= u32::MAX as u64, "{input} / {memory}: {p:?}");
        }
    }

    #[test]
    fn plans_stay_within_the_budget() {
        for memory in [
            1u64 << 20,
            3 << 20,
            64 << 20,
            128 << 20,
            512 << 20,
            1 << 30,
            4 << 30,
        ] {
            for input in [0u64, 100, 1 << 20, 100 << 20, 1 << 30, 4 << 30, 100 << 30] {
                let input = input / 100 * 100;
                let p = plan(input, memory).unwrap();
                assert!(
                    peak_bytes(&p, input) <= memory,
                    "{p:?} for {input} in {memory}"
                );
                assert_eq!(p.chunk_bytes % ALIGN_BYTES, 0);
                assert_eq!(p.arena_bytes % ALIGN_BYTES, 0);
                if let Mode::External {
                    stage_bytes,
                    ranges,
                } = p.mode
                {
                    assert!(stage_bytes >= ALIGN_BYTES && stage_bytes % ALIGN_BYTES == 0);
                    assert!(ranges >= 1);
                    assert!(input > p.arena_bytes as u64 / 2);
                }
            }
        }
    }

    #[test]
    fn fits_in_memory_when_it_can() {
        let p = plan(256 << 20, 512 << 20).unwrap();
        assert_eq!(p.mode, Mode::InMemory);
        let p = plan(1 << 30, 128 << 20).unwrap();
        assert!(matches!(p.mode, Mode::External { ranges, .. } if ranges >= 20));
    }

    #[test]
    fn tiny_memory_is_refused() {
        assert!(matches!(
            plan(1000, RECORD_MEMORY_MIN_BYTES - 1),
            Err(SortError::MemoryTooSmall { .. })
        ));
    }
}
