//! Helpers shared by the behaviour tests: small bounds, deterministic chunk bytes, file sizes.

#![allow(dead_code)]

use std::path::Path;

use spindle_chunk::{ChunkId, ChunkStore, CompactionPolicy, Options, DIRECT_READ_BYTES_MIN};

/// Bounds small enough that a few dozen chunks span several volumes; one lane.
pub fn small_opts() -> Options {
    Options {
        volume_bytes_max: 16 << 10,
        write_buffer_bytes_max: 64 << 10,
        chunk_bytes_max: 8 << 10,
        compaction: CompactionPolicy {
            garbage_ratio_min: 0.3,
            garbage_bytes_min: 0,
        },
        // Tests call `compact` themselves, except the one about background compaction.
        compact_in_background: false,
        // One volume appended to at a time, so "the newest volume" is the one being written.
        // Tests that are about lanes (and the power-cut and model tests) set their own.
        active_volumes: 1,
        ..Options::default()
    }
}

/// Deterministic bytes for chunk `seed` (xorshift), `len` long.
pub fn chunk(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sum of the sizes of the store's volume and hint files.
pub fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".volume") || name.ends_with(".hint")
        })
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// Paths of the volume files, ascending.
pub fn volumes(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "volume"))
        .collect();
    v.sort();
    v
}

/// Flip the bits of `mask` in the byte at `at` of the file at `path`, and sync it.
pub fn flip_byte(path: &Path, at: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ mask], at).unwrap();
    f.sync_all().unwrap();
}

/// Chunk sizes at and around the size where gets switch to reads past the page cache, and
/// two large ones, so that records start at offsets that are not aligned.
pub const LARGE_READ_SIZES: [usize; 5] = [
    DIRECT_READ_BYTES_MIN as usize - 1,
    DIRECT_READ_BYTES_MIN as usize,
    DIRECT_READ_BYTES_MIN as usize + 4096,
    (1 << 20) + 7,
    3 << 20,
];

/// Default options but one lane, so records follow each other in volume 1 in put order.
pub fn one_lane_opts() -> Options {
    Options {
        active_volumes: 1,
        ..Options::default()
    }
}

/// A store in `dir` (`one_lane_opts`) holding one chunk of each of `LARGE_READ_SIZES`, in
/// that order in volume 1, closed and opened again; with the chunks' ids and bytes.
pub fn store_with_large_chunks(dir: &Path) -> (ChunkStore, Vec<(ChunkId, Vec<u8>)>) {
    let store = ChunkStore::open(dir, one_lane_opts()).unwrap();
    let chunks: Vec<(ChunkId, Vec<u8>)> = LARGE_READ_SIZES
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let bytes = chunk(i as u64 + 1, len);
            (store.put(&bytes).unwrap(), bytes)
        })
        .collect();
    store.close().unwrap();
    (ChunkStore::open(dir, one_lane_opts()).unwrap(), chunks)
}

/// Volume size of the reservation tests.
pub const RESERVE_VOLUME: u64 = 4 << 20;

/// Options of the reservation tests: 4 MiB volumes, `lanes` lanes, no background compaction.
pub fn reserve_opts(lanes: usize) -> Options {
    Options {
        volume_bytes_max: RESERVE_VOLUME,
        write_buffer_bytes_max: 1 << 20,
        chunk_bytes_max: 512 << 10,
        compact_in_background: false,
        active_volumes: lanes,
        ..Options::default()
    }
}

/// (size, bytes of blocks allocated) of volume `n` in `dir`.
pub fn volume_usage(dir: &Path, n: u32) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(spindle_chunk::format::volume_path(dir, n)).unwrap();
    (m.len(), m.blocks() * 512)
}
