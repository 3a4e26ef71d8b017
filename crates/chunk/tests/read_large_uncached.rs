//! Large chunks whose pages are not cached are read past the page cache (`O_DIRECT`) the
//! first time and through it afterwards (admitted), and every way gives the stored bytes:
//! chunks at and around the size where reads switch, at record offsets that are not aligned.

mod common;

use spindle_chunk::{ChunkId, ChunkStore, Options, DIRECT_READ_BYTES_MIN};

const SIZES: [usize; 5] = [
    DIRECT_READ_BYTES_MIN as usize - 1,
    DIRECT_READ_BYTES_MIN as usize,
    DIRECT_READ_BYTES_MIN as usize + 4096,
    (1 << 20) + 7,
    3 << 20,
];

/// Put one chunk of each size (so records start at unaligned offsets), close, reopen.
fn store_with_chunks(dir: &std::path::Path) -> (ChunkStore, Vec<(ChunkId, Vec<u8>)>) {
    let store = ChunkStore::open(dir, Options::default()).unwrap();
    let chunks: Vec<(ChunkId, Vec<u8>)> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let bytes = common::chunk(i as u64 + 1, len);
            (store.put(&bytes).unwrap(), bytes)
        })
        .collect();
    store.close().unwrap();
    (ChunkStore::open(dir, Options::default()).unwrap(), chunks)
}

#[test]
fn cold_then_admitted_then_cached_reads_return_the_stored_bytes() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (store, chunks) = store_with_chunks(dir.path());
    let direct_before = spindle_fs::direct_reads();
    for round in 0..2 {
        store.drop_page_cache().unwrap();
        // First read: uncached (direct) for the large ones; second: admitted through the
        // cache; third: cached.
        for pass in 0..3 {
            for (id, bytes) in &chunks {
                for verify in [true, false] {
                    let got = store.get_with(id, verify).unwrap().unwrap();
                    assert!(
                        got == *bytes,
                        "round {round} pass {pass} verify {verify}: chunk of {} bytes differs",
                        bytes.len()
                    );
                }
            }
        }
    }
    // Four large chunks, each read directly once in the first round. In the second, after the
    // drop, a chunk whose second read found the probed page already cached (the probe's miss
    // reads that page in) kept its slot and is admitted at once; one whose second read came
    // before that page arrived was admitted by the table, which forgot it, and is read
    // directly again. So 4 to 8. (The counter is the process's: this is the only test in
    // this file.)
    let direct = spindle_fs::direct_reads() - direct_before;
    let volume = common::volumes(dir.path()).remove(0);
    let direct_io_works = spindle_fs::direct_alignment_of(&volume).is_some();
    if direct_io_works {
        assert!((4..=8).contains(&direct), "{direct} direct reads");
    } else {
        eprintln!(
            "no O_DIRECT for {}: only reads through the cache ran",
            volume.display()
        );
    }
}
