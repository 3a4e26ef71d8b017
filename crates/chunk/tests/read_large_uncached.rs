//! Large chunks whose pages are not cached are read past the page cache (`O_DIRECT`) the
//! first time and through it afterwards (admitted), and every way gives the stored bytes:
//! chunks at and around the size where reads switch, at record offsets that are not aligned.

mod common;

#[test]
fn cold_then_admitted_then_cached_reads_return_the_stored_bytes() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (store, chunks) = common::store_with_large_chunks(dir.path());
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
