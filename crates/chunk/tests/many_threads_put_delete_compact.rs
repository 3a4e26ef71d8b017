//! Many threads at once: 16 putting (some the same chunk at the same moment), 2 deleting and
//! background compaction copying, over volumes small enough that the writer seals and rolls
//! them while puts queue behind it. Every put and delete returns (none waits forever: a
//! watchdog ends the test process with a failure after 300 s), every acknowledged chunk reads
//! back whole, every acknowledged delete holds, before and after reopening, and the store's
//! files account for exactly what it says it holds.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spindle_chunk::{ChunkId, ChunkStore, CompactionPolicy, Options};

const PUTTERS: u64 = 16;
const PUTS_EACH: u64 = 250;

#[test]
fn acknowledged_puts_and_deletes_hold_under_concurrency() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compact_in_background: true,
        compaction: CompactionPolicy {
            garbage_ratio_min: 0.2,
            garbage_bytes_min: 0,
        },
        active_volumes: 2,
        ..common::small_opts()
    };
    let store = ChunkStore::open(dir.path(), opts.clone()).unwrap();
    // Per chunk: its bytes, whether its last acknowledged operation was a put (false: a
    // delete), and whether two threads put it (those are never deleted, so no put of theirs
    // can land after a delete).
    type Acked = HashMap<ChunkId, (Vec<u8>, bool, bool)>;
    let acked: Mutex<Acked> = Mutex::new(HashMap::new());
    // A watchdog outside the scope: a put or delete whose waiter is never woken would hang
    // the scope, and a panic in a scoped thread would only wait for it.
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let started = Instant::now();
            while !done.load(Ordering::Acquire) {
                if started.elapsed() > Duration::from_secs(300) {
                    eprintln!("still running after 300 s: a put or delete was never woken");
                    std::process::exit(101);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // Putters finished (also by a panic): the deleters stop once nothing is left to delete.
    let putters_done = AtomicU64::new(0);
    std::thread::scope(|s| {
        let putters: Vec<_> = (0..PUTTERS)
            .map(|t| {
                let (store, acked) = (&store, &acked);
                let putters_done = &putters_done;
                s.spawn(move || {
                    struct Done<'a>(&'a AtomicU64);
                    impl Drop for Done<'_> {
                        fn drop(&mut self) {
                            self.0.fetch_add(1, Ordering::Release);
                        }
                    }
                    let _done = Done(putters_done);
                    for i in 0..PUTS_EACH {
                        // Every fifth chunk is also put by the neighbouring thread at about
                        // the same moment: the second put waits for the first's.
                        let shared = i % 5 == 0;
                        let seed = if shared {
                            (t / 2) * 1_000_000 + i
                        } else {
                            t * 1_000_000 + 500_000 + i
                        };
                        let len = 1 + ((seed * 7919) % 8000) as usize;
                        let data = common::chunk(seed, len);
                        let id = store.put(&data).unwrap();
                        assert_eq!(id, ChunkId::of(&data));
                        acked
                            .lock()
                            .unwrap()
                            .entry(id)
                            .or_insert((data, true, shared));
                    }
                })
            })
            .collect();
        let deleters: Vec<_> = (0..2u64)
            .map(|d| {
                let (store, acked, putters_done) = (&store, &acked, &putters_done);
                s.spawn(move || {
                    let mut deleted = 0;
                    while deleted < 150 {
                        // A chunk one thread put, of this deleter's half of the ids.
                        let victim = acked
                            .lock()
                            .unwrap()
                            .iter()
                            .find(|(id, (_, live, shared))| {
                                *live && !*shared && u64::from(id.as_bytes()[0] % 2) == d
                            })
                            .map(|(id, _)| *id);
                        let Some(id) = victim else {
                            if putters_done.load(Ordering::Acquire) == PUTTERS {
                                break;
                            }
                            std::thread::yield_now();
                            continue;
                        };
                        // Claimed before deleting, so no put of it is recorded after.
                        acked.lock().unwrap().get_mut(&id).unwrap().1 = false;
                        assert!(store.delete(&id).unwrap(), "an acknowledged chunk is there");
                        deleted += 1;
                    }
                })
            })
            .collect();
        for t in putters.into_iter().chain(deleters) {
            t.join().unwrap();
        }
    });

    let check = |store: &ChunkStore, when: &str| {
        let acked = acked.lock().unwrap();
        let mut live = 0;
        for (id, (data, is_live, _)) in acked.iter() {
            let got = store.get(id).unwrap();
            if *is_live {
                live += 1;
                assert_eq!(got.as_deref(), Some(&data[..]), "{when}: acknowledged put");
            } else {
                assert_eq!(got, None, "{when}: acknowledged delete");
            }
        }
        assert_eq!(
            store.len(),
            live,
            "{when}: no chunk the threads did not put"
        );
    };
    check(&store, "open");
    store.wait_for_background_compaction();
    let stats = store.stats();
    assert!(
        stats.compaction.volumes > 0,
        "compaction ran beside the puts"
    );
    assert_eq!(stats.compaction_error, None);
    assert_eq!(stats.used_bytes, common::disk_bytes(dir.path()));
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), opts).unwrap();
    check(&store, "reopened");
    assert!(store.open_report().torn_tails.is_empty(), "a clean close");
    done.store(true, Ordering::Release);
    watchdog.join().unwrap();
}
