//! Under random single-threaded schedules of claim, try_claim, publish, join, leave and
//! read, the ring behaves exactly like a simple model: each consumer sees every event from
//! its join position once and in order, `Full` comes exactly when the slowest consumer
//! holds the slots, and joins are refused exactly at overwritten positions.
#![cfg(not(loom))]

use proptest::prelude::*;
use spindle_ring::{Consumer, Overwritten, Producer, RingBuilder};

#[derive(Debug, Clone)]
enum Op {
    Publish(u64),
    Abandon(u64),
    /// Join at `cursor - back` (saturating).
    Join(u64),
    Leave(usize),
    Read(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..=8).prop_map(Op::Publish),
        1 => (1u64..=8).prop_map(Op::Abandon),
        2 => (0u64..12).prop_map(Op::Join),
        1 => (0usize..4).prop_map(Op::Leave),
        4 => ((0usize..4), (1u64..10)).prop_map(|(i, n)| Op::Read(i, n)),
    ]
}

fn value(seq: u64) -> u64 {
    seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xABCD
}

struct Live {
    consumer: Consumer<u64>,
    /// The model: next sequence this consumer must see.
    next: u64,
}

fn run(capacity: u64, ops: Vec<Op>) {
    let (mut producer, ring): (Producer<u64>, _) =
        RingBuilder::new(capacity as usize).build::<u64>().unwrap();
    let mut live: Vec<Live> = Vec::new();
    let mut cursor = 0u64;
    let mut claimed = 0u64;
    for op in ops {
        match op {
            Op::Publish(n) | Op::Abandon(n) => {
                let n = n.min(capacity);
                let min = live.iter().map(|l| l.next).min().unwrap_or(u64::MAX);
                let fits = min.saturating_add(capacity) >= cursor + n;
                claimed = claimed.max(cursor + n);
                match producer.try_claim(n) {
                    Ok(mut claim) => {
                        assert!(fits, "claim of {n} succeeded past the slowest consumer");
                        claim.fill(|s, v| *v = value(s));
                        if matches!(op, Op::Publish(_)) {
                            claim.publish();
                            cursor += n;
                        }
                    }
                    Err(full) => {
                        assert!(!fits, "Full although the slots were free");
                        assert_eq!(full.free_slots, min + capacity - cursor);
                    }
                }
            }
            Op::Join(back) => {
                let position = cursor.saturating_sub(back);
                let oldest = claimed.saturating_sub(capacity);
                match ring.join_at("c", position) {
                    Ok(consumer) => {
                        assert!(position >= oldest);
                        live.push(Live {
                            consumer,
                            next: position,
                        });
                    }
                    Err(e) => {
                        assert_eq!(
                            e,
                            Overwritten {
                                requested: position,
                                oldest
                            }
                        );
                    }
                }
            }
            Op::Leave(i) => {
                if !live.is_empty() {
                    let gone = live.remove(i % live.len());
                    gone.consumer.leave();
                }
            }
            Op::Read(i, max) => {
                if live.is_empty() {
                    continue;
                }
                let n = live.len();
                let l = &mut live[i % n];
                l.consumer.set_batch_events_max(max);
                match l.consumer.try_batch() {
                    None => assert!(l.next >= cursor, "events available but no batch"),
                    Some(batch) => {
                        assert_eq!(batch.start(), l.next);
                        assert_eq!(batch.end(), cursor.min(l.next + max));
                        for (seq, v) in batch.iter() {
                            assert_eq!(*v, value(seq), "slot {seq} overwritten or torn");
                        }
                        l.next = batch.end();
                    }
                }
            }
        }
    }
    assert_eq!(producer.cursor(), cursor);
}

proptest! {
    // PROPTEST_CASES overrides the count (the Miri script runs a handful).
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn ring_matches_model(cap_log2 in 0u32..4, ops in proptest::collection::vec(op(), 1..200)) {
        run(1 << cap_log2, ops);
    }
}
