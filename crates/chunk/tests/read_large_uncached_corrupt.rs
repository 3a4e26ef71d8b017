//! A flipped byte in a large chunk (the start, the end and an alignment boundary of its data,
//! and its header) is `Corrupt` on the read past the page cache and on the admitting read
//! through it, and its neighbours still read back whole.

mod common;

use spindle_chunk::{ChunkError, ChunkStore, RECORD_HEADER_LEN, VOLUME_HEADER_LEN};

#[test]
fn a_flipped_byte_is_corrupt_on_the_uncached_and_the_admitting_read() {
    let big = common::LARGE_READ_SIZES.len() - 1;
    // Record offsets: each record follows the one before.
    let record_of = |i: usize| {
        VOLUME_HEADER_LEN
            + common::LARGE_READ_SIZES[..i]
                .iter()
                .map(|&l| RECORD_HEADER_LEN + l as u64)
                .sum::<u64>()
    };
    let record = record_of(big);
    let data = record + RECORD_HEADER_LEN;
    let boundary = data.next_multiple_of(4096) + 4096;
    for at in [
        data,
        boundary - 1,
        boundary,
        data + common::LARGE_READ_SIZES[big] as u64 - 1,
        record + 3,
    ] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let (store, chunks) = common::store_with_large_chunks(dir.path());
        store.close().unwrap();
        let path = common::volumes(dir.path()).remove(0);
        common::flip_byte(&path, at, 0x04);
        let store = ChunkStore::open(dir.path(), common::one_lane_opts()).unwrap();
        store.drop_page_cache().unwrap();
        for verify in [true, false] {
            // Twice: the first read is uncached, the second admits.
            for pass in 0..2 {
                match store.get_with(&chunks[big].0, verify) {
                    Err(ChunkError::Corrupt { volume, offset, .. }) => {
                        assert_eq!(
                            (volume, offset),
                            (path.clone(), record),
                            "byte {at} pass {pass}"
                        );
                    }
                    other => panic!(
                        "byte {at} pass {pass} verify {verify}: expected Corrupt, got {:?}",
                        other.map(|o| o.map(|b| b.len()))
                    ),
                }
            }
            store.drop_page_cache().unwrap();
        }
        // The neighbours are intact.
        for (id, bytes) in &chunks[..big] {
            assert!(store.get(id).unwrap().unwrap() == *bytes);
        }
    }
}
