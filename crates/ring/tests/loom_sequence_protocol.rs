//! Model-checks the sequence protocol with loom: publish/consume handoff with wrap-around
//! and parking, a join racing the producer's claim, and a leave waking a blocked producer.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p spindle-ring --release --test loom_sequence_protocol`.
#![cfg(loom)]

use loom::thread;
use spindle_ring::{RingBuilder, WaitStrategy};

fn value(seq: u64) -> u64 {
    seq * 10 + 1
}

/// Two events through a one-slot ring: the second write must wait for the consumer to
/// release the first, and the consumer must see each value the producer wrote.
#[test]
fn handoff_through_one_slot() {
    loom::model(|| {
        let (mut producer, ring) = RingBuilder::new(1)
            .wait(WaitStrategy::Blocking)
            .build::<u64>()
            .unwrap();
        let mut consumer = ring.join_at("c", 0).unwrap();
        let reader = thread::spawn(move || {
            let mut seen = Vec::new();
            while let Ok(batch) = consumer.wait_batch() {
                batch.for_each(|seq, v, _| seen.push((seq, *v)));
            }
            seen
        });
        for seq in 0..2 {
            let mut claim = producer.claim(1);
            claim.fill(|s, v| *v = value(s));
            assert_eq!(claim.start(), seq);
            claim.publish();
        }
        drop(producer);
        assert_eq!(reader.join().unwrap(), vec![(0, value(0)), (1, value(1))]);
    });
}

/// A consumer joining at event 0 while the producer claims event 1 (which reuses event 0's
/// slot) either is refused or reads event 0's original value.
#[test]
fn join_races_claim() {
    loom::model(|| {
        let (mut producer, ring) = RingBuilder::new(1).build::<u64>().unwrap();
        let mut first = producer.claim(1);
        first.fill(|s, v| *v = value(s));
        first.publish();
        let joiner = {
            let ring = ring.clone();
            thread::spawn(move || match ring.join_at("late", 0) {
                Err(refused) => {
                    assert_eq!(refused.requested, 0);
                    None
                }
                Ok(mut consumer) => {
                    let batch = consumer.wait_batch().unwrap();
                    let got = batch.with_event(0, |v| *v);
                    assert_eq!(batch.start(), 0);
                    drop(batch);
                    consumer.leave();
                    Some(got)
                }
            })
        };
        let mut second = producer.claim(1);
        second.fill(|s, v| *v = value(s));
        second.publish();
        if let Some(got) = joiner.join().unwrap() {
            assert_eq!(got, value(0));
        }
    });
}

/// A producer parked on a full ring wakes when the gating consumer leaves.
#[test]
fn leave_wakes_blocked_producer() {
    loom::model(|| {
        let (mut producer, ring) = RingBuilder::new(1).build::<u64>().unwrap();
        let consumer = ring.join_at("stalled", 0).unwrap();
        producer.claim(1).publish();
        let leaver = thread::spawn(move || consumer.leave());
        producer.claim(1).publish();
        leaver.join().unwrap();
        assert_eq!(producer.cursor(), 2);
    });
}
