//! With real threads, consumers that join at random positions while the producer runs and
//! leave after a random number of events each see every event from their position once,
//! in order, with the value the producer wrote (nothing lost, duplicated or reordered).
#![cfg(not(loom))]

use std::thread;

use proptest::prelude::*;
use spindle_ring::{RingBuilder, WaitStrategy};

fn value(seq: u64) -> u64 {
    seq.wrapping_mul(0x2545_F491_4F6C_DD1D).rotate_left(17)
}

#[derive(Debug, Clone)]
struct Rider {
    /// How far behind the live cursor to try to board.
    back: u64,
    /// Events to read before leaving (0: read until the ring closes).
    stay: u64,
    batch_max: u64,
}

fn rider() -> impl Strategy<Value = Rider> {
    (0u64..40, 0u64..3000, 1u64..64).prop_map(|(back, stay, batch_max)| Rider {
        back,
        stay,
        batch_max,
    })
}

fn run(cap_log2: u32, wait: WaitStrategy, claims: Vec<u64>, riders: Vec<Rider>) {
    let capacity = 1u64 << cap_log2;
    let (mut producer, ring) = RingBuilder::new(capacity as usize)
        .wait(wait)
        .build::<u64>()
        .unwrap();
    // One consumer from 0 to the end keeps the run meaningful even if every rider is late.
    let mut anchor = ring.join_at("anchor", 0).unwrap();
    let total: u64 = claims.iter().map(|n| n.min(&capacity)).sum();
    thread::scope(|s| {
        s.spawn(move || {
            for n in claims {
                let mut claim = producer.claim(n.min(capacity));
                claim.fill(|seq, v| *v = value(seq));
                claim.publish();
            }
        });
        for r in riders {
            let ring = ring.clone();
            s.spawn(move || {
                let mut consumer = loop {
                    let position = ring
                        .cursor()
                        .saturating_sub(r.back)
                        .max(ring.oldest_joinable());
                    if let Ok(c) = ring.join_at("rider", position) {
                        break c;
                    }
                };
                consumer.set_batch_events_max(r.batch_max);
                let mut next = consumer.position();
                while r.stay == 0 || next - consumer.position() < r.stay {
                    let Ok(batch) = consumer.wait_batch() else {
                        break;
                    };
                    assert_eq!(batch.start(), next, "gap or duplicate");
                    batch
                        .for_each(|seq, v, _| assert_eq!(*v, value(seq), "slot {seq} overwritten"));
                    next = batch.end();
                    drop(batch);
                    if r.stay != 0 && next >= consumer.position() + r.stay {
                        break;
                    }
                }
                consumer.leave();
            });
        }
        let mut next = 0;
        while let Ok(batch) = anchor.wait_batch() {
            assert_eq!(batch.start(), next);
            batch.for_each(|seq, v, _| assert_eq!(*v, value(seq)));
            next = batch.end();
        }
        assert_eq!(next, total);
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn riders_see_every_event_once_in_order(
        cap_log2 in 0u32..7,
        wait in prop_oneof![Just(WaitStrategy::Blocking), Just(WaitStrategy::Yielding), Just(WaitStrategy::Spinning)],
        claims in proptest::collection::vec(1u64..50, 1..300),
        riders in proptest::collection::vec(rider(), 0..5),
    ) {
        run(cap_log2, wait, claims, riders);
    }
}
