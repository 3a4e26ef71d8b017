//! The in-memory sort: each record becomes a `u128` holding its 10-byte key above its
//! record number; those are radix sorted most significant key byte first (the first byte
//! cuts the work into 256 independent ranges sorted on threads; each range is split by the
//! next byte, recursively, skipping bytes equal across it, until a range is small enough for
//! a comparison sort of its words), and the records are gathered in that order. Records are
//! never compared or moved as 100-byte structs. Random keys need about three byte levels
//! before ranges are small, where sorting every byte least significant first took nine
//! passes over every word.

use super::{KEY_BYTES, RECORD_BYTES};

/// The key of a record as an integer that orders as the key's unsigned bytes.
pub(crate) fn key_of(record: &[u8]) -> u128 {
    let mut word = [0u8; 16];
    word[16 - KEY_BYTES..].copy_from_slice(&record[..KEY_BYTES]);
    u128::from_be_bytes(word)
}

/// The sort word of record number `i`.
fn word(record: &[u8], i: usize) -> u128 {
    (key_of(record) << 32) | i as u128
}

/// Byte `d` of the key (0 = most significant) in a sort word.
fn digit(w: u128, d: usize) -> usize {
    ((w >> (32 + 8 * (KEY_BYTES - 1 - d))) & 0xFF) as usize
}

/// Fills `items` with the sort words of the records in `arena` (whole records only).
pub(crate) fn index(arena: &[u8], items: &mut Vec<u128>) {
    items.clear();
    items.extend(
        arena
            .chunks_exact(RECORD_BYTES)
            .enumerate()
            .map(|(i, r)| word(r, i)),
    );
}

/// Sorts `items` by key; `scratch` is working space (resized to match).
pub(crate) fn sort(items: &mut Vec<u128>, scratch: &mut Vec<u128>, threads: usize) {
    let n = items.len();
    scratch.clear();
    scratch.resize(n, 0);
    // Most significant byte: scatter into 256 ranges of `scratch`.
    let mut counts = [0usize; 257];
    for &w in items.iter() {
        counts[digit(w, 0) + 1] += 1;
    }
    for b in 0..256 {
        counts[b + 1] += counts[b];
    }
    let bounds = counts;
    let mut next = counts;
    for &w in items.iter() {
        let b = digit(w, 0);
        scratch[next[b]] = w;
        next[b] += 1;
    }
    // The ranges are independent: hand contiguous groups of them to threads.
    let threads = threads.clamp(1, 64);
    let per_thread = n.div_ceil(threads).max(1);
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for b in 0..256 {
        if bounds[b + 1] - start >= per_thread || b == 255 {
            groups.push((start, bounds[b + 1]));
            start = bounds[b + 1];
        }
    }
    std::thread::scope(|scope| {
        let mut data: &mut [u128] = scratch;
        let mut spare: &mut [u128] = items;
        let mut at = 0;
        for &(lo, hi) in &groups {
            debug_assert_eq!(lo, at);
            let (d, rest_d) = data.split_at_mut(hi - lo);
            let (s, rest_s) = spare.split_at_mut(hi - lo);
            data = rest_d;
            spare = rest_s;
            at = hi;
            let ranges: Vec<(usize, usize)> = (0..256)
                .map(|b| (bounds[b], bounds[b + 1]))
                .filter(|&(a, z)| a >= lo && z <= hi && z > a)
                .map(|(a, z)| (a - lo, z - lo))
                .collect();
            let work = move || {
                for (a, z) in ranges {
                    msd(&mut d[a..z], &mut s[a..z], 1);
                }
            };
            if groups.len() == 1 {
                work();
            } else {
                scope.spawn(work);
            }
        }
    });
    std::mem::swap(items, scratch);
}

/// Ranges of at most this many words are finished with a comparison sort.
const SMALL_WORDS: usize = 48;

/// Sorts `data`, whose keys agree on bytes before `d`, by key bytes `d..` (most significant
/// first); `spare` is as long.
fn msd(data: &mut [u128], spare: &mut [u128], mut d: usize) {
    loop {
        if data.len() <= SMALL_WORDS {
            data.sort_unstable();
            return;
        }
        if d == KEY_BYTES {
            // Every key is equal (the scatters are stable, so these stay in record order).
            return;
        }
        let mut counts = [0usize; 256];
        for &w in data.iter() {
            counts[digit(w, d)] += 1;
        }
        if counts.contains(&data.len()) {
            d += 1;
            continue;
        }
        let mut starts = [0usize; 256];
        let mut sum = 0;
        for b in 0..256 {
            starts[b] = sum;
            sum += counts[b];
        }
        let mut next = starts;
        for &w in data.iter() {
            let b = digit(w, d);
            spare[next[b]] = w;
            next[b] += 1;
        }
        data.copy_from_slice(spare);
        for b in 0..256 {
            let (a, z) = (starts[b], starts[b] + counts[b]);
            if z - a > 1 {
                msd(&mut data[a..z], &mut spare[a..z], d + 1);
            }
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: [u8; KEY_BYTES]) -> Vec<u8> {
        let mut r = vec![0u8; RECORD_BYTES];
        r[..KEY_BYTES].copy_from_slice(&key);
        r
    }

    /// Sorts `arena`'s records on each thread count and checks their keys come out as a
    /// reference sort of the keys.
    fn assert_sorts(arena: &[u8], thread_counts: &[usize]) {
        let mut expected: Vec<&[u8]> = arena
            .chunks(RECORD_BYTES)
            .map(|r| &r[..KEY_BYTES])
            .collect();
        expected.sort();
        for &threads in thread_counts {
            let (mut items, mut scratch) = (Vec::new(), Vec::new());
            index(arena, &mut items);
            sort(&mut items, &mut scratch, threads);
            let got: Vec<&[u8]> = items
                .iter()
                .map(|&w| &arena[(w as u32 as usize) * RECORD_BYTES..][..KEY_BYTES])
                .collect();
            assert_eq!(got, expected, "threads {threads}");
            // Stable: equal keys keep their input order (record numbers rise).
            assert!(items.windows(2).all(|w| w[0] < w[1]), "threads {threads}");
        }
    }

    #[test]
    fn sorts_by_key_bytes_on_any_thread_count() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u8
        };
        let mut arena = Vec::new();
        for i in 0..20_000 {
            let mut key = [0u8; KEY_BYTES];
            for b in key.iter_mut() {
                *b = next() % if i % 3 == 0 { 2 } else { 255 };
            }
            arena.extend(record(key));
        }
        assert_sorts(&arena, &[1, 2, 3, 8]);
    }

    #[test]
    fn many_copies_of_few_keys_are_sorted() {
        // Ranges of equal keys far longer than the comparison sort's threshold, and keys
        // that agree on every byte but the last.
        let mut arena = Vec::new();
        for i in 0..30_000u32 {
            let mut key = *b"same-key!!";
            key[9] = (i.wrapping_mul(2_654_435_761) >> 29) as u8;
            if i % 5 == 0 {
                key[0] = 0;
            }
            arena.extend(record(key));
        }
        assert_sorts(&arena, &[1, 2]);
    }
}
