//! Helpers shared by the behaviour tests: small bounds, deterministic chunk bytes, file sizes.

#![allow(dead_code)]

use std::path::Path;

use spindle_chunk::{CompactionPolicy, Options};

/// Bounds small enough that a few dozen chunks span several volumes.
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
