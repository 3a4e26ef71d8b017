//! The in-memory sort: each record becomes a `u128` holding its 10-byte key above its
//! record number; those are radix sorted (most significant key byte first to cut the work
//! into 256 independent ranges sorted on threads, then least significant digit first over
//! the other nine bytes, skipping bytes that are equal everywhere), and the records are
//! gathered in that order. Records are never compared or moved as 100-byte structs.

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
                    lsd(&mut d[a..z], &mut s[a..z]);
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

/// Sorts `data` by key bytes 1..10 (least significant first); `spare` is as long.
fn lsd(data: &mut [u128], spare: &mut [u128]) {
    if data.len() <= 32 {
        data.sort_unstable();
        return;
    }
    let mut in_data = true;
    for d in (1..KEY_BYTES).rev() {
        let (src, dst): (&[u128], &mut [u128]) = if in_data {
            (&*data, &mut *spare)
        } else {
            (&*spare, &mut *data)
        };
        let mut counts = [0usize; 256];
        for &w in src {
            counts[digit(w, d)] += 1;
        }
        if counts.contains(&src.len()) {
            continue;
        }
        let mut next = [0usize; 256];
        let mut sum = 0;
        for b in 0..256 {
            next[b] = sum;
            sum += counts[b];
        }
        for &w in src {
            let b = digit(w, d);
            dst[next[b]] = w;
            next[b] += 1;
        }
        in_data = !in_data;
    }
    if !in_data {
        data.copy_from_slice(spare);
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
        for i in 0..5000 {
            let mut key = [0u8; KEY_BYTES];
            for b in key.iter_mut() {
                *b = next() % if i % 3 == 0 { 2 } else { 255 };
            }
            arena.extend(record(key));
        }
        let mut expected: Vec<Vec<u8>> = arena
            .chunks(RECORD_BYTES)
            .map(|r| r[..KEY_BYTES].to_vec())
            .collect();
        expected.sort();
        for threads in [1, 2, 3, 8] {
            let (mut items, mut scratch) = (Vec::new(), Vec::new());
            index(&arena, &mut items);
            sort(&mut items, &mut scratch, threads);
            let got: Vec<Vec<u8>> = items
                .iter()
                .map(|&w| {
                    let i = w as u32 as usize;
                    arena[i * RECORD_BYTES..][..KEY_BYTES].to_vec()
                })
                .collect();
            assert_eq!(got, expected, "threads {threads}");
        }
    }
}
