//! The entry sorter's in-memory sort allocates no more on 3, 4 or 8 threads than on 2: its
//! index and one scratch index, the two the memory budget counts per entry (`SLOT_BYTES`).
//! Counted by a global allocator of this test binary's own.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use spindle_sort::entries::{EntrySortOptions, EntrySorter};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is to the system allocator.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated at the peak of `finish` beyond what was live before it, for `n` random
/// 8-byte keys sorted in memory on `threads` threads.
fn finish_peak(n: usize, threads: usize) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let mut sorter = EntrySorter::new(EntrySortOptions {
        memory_bytes: 64 << 20,
        tmp_dir: dir.path().to_path_buf(),
        threads,
    })
    .unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..n as u64 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        sorter
            .push(&(x >> 8).to_be_bytes(), &i.to_le_bytes())
            .unwrap();
    }
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let sorted = sorter.finish().unwrap();
    let peak = PEAK.load(Ordering::SeqCst) - before;
    let mut last: Option<Vec<u8>> = None;
    let mut count = 0;
    for entry in sorted {
        let (key, _) = entry.unwrap();
        assert!(last.as_deref() <= Some(key.as_slice()), "out of order");
        last = Some(key);
        count += 1;
    }
    assert_eq!(count, n);
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "it spilled: the budget is too small for an in-memory sort"
    );
    peak
}

#[test]
fn more_threads_take_no_more_memory_than_two() {
    let n = 200_000;
    let two = finish_peak(n, 2);
    for threads in [3, 4, 8] {
        let peak = finish_peak(n, threads);
        assert!(
            peak <= two + (64 << 10),
            "{threads} threads took {peak} bytes at the peak of the sort, 2 threads {two}"
        );
    }
}
