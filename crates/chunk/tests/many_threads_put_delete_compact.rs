//! Many threads at once: 16 putting (some the same chunk at the same moment), 2 deleting and
//! background compaction copying, over volumes small enough that the writer seals and rolls
//! them while puts queue behind it. Every put and delete returns (none is left queued with
//! nobody to write it: a watchdog fails the test after 300 s), every acknowledged chunk reads
//! back whole, every acknowledged delete holds, before and after reopening, and the store's
//! files account for exactly what it says it holds.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
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
    let done = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|s| {
        // A watchdog: a put whose op nobody writes would wait forever.
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                assert!(
                    started.elapsed() < Duration::from_secs(300),
                    "puts and deletes still waiting after 300 s: an op was left unwritten"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let putters: Vec<_> = (0..PUTTERS)
            .map(|t| {
                let (store, acked) = (&store, &acked);
                s.spawn(move || {
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
                let (store, acked) = (&store, &acked);
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
        done.store(true, Ordering::Release);
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
    assert_eq!(stats.used_bytes, common::disk_bytes(dir.path()));
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), opts).unwrap();
    check(&store, "reopened");
    assert!(store.open_report().torn_tails.is_empty(), "a clean close");
}
