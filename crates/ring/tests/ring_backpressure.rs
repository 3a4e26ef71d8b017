//! A stalled consumer stops the producer at exactly the ring's capacity: `try_claim` says
//! `Full` with the exact free count, and a blocking claim resumes once the consumer reads.
#![cfg(not(loom))]

use std::sync::mpsc;
use std::thread;

use spindle_ring::{Full, RingBuilder};

#[test]
fn producer_stops_at_exactly_capacity() {
    for capacity in [1u64, 2, 8, 64] {
        let (mut producer, ring) = RingBuilder::new(capacity as usize).build::<u64>().unwrap();
        let mut stalled = ring.join_at("stalled", 0).unwrap();
        let mut published = 0;
        loop {
            match producer.try_claim(1) {
                Ok(claim) => {
                    claim.publish();
                    published += 1;
                }
                Err(full) => {
                    assert_eq!(full, Full { free_slots: 0 });
                    break;
                }
            }
            assert!(
                published <= capacity,
                "producer ran past a stalled consumer"
            );
        }
        assert_eq!(published, capacity);
        // Reading one event frees exactly one slot.
        stalled.set_batch_events_max(1);
        drop(stalled.try_batch().unwrap());
        if capacity >= 2 {
            assert_eq!(producer.try_claim(2).unwrap_err(), Full { free_slots: 1 });
        }
        producer.try_claim(1).unwrap().publish();
        assert!(producer.try_claim(1).is_err());
    }
}

#[test]
fn blocking_claim_waits_for_the_consumer() {
    let (mut producer, ring) = RingBuilder::new(4).build::<u64>().unwrap();
    let mut consumer = ring.join_at("c", 0).unwrap();
    producer.claim(4).publish();
    let (claimed_tx, claimed_rx) = mpsc::channel();
    let blocked = thread::spawn(move || {
        let claim = producer.claim(1);
        claimed_tx.send(claim.start()).unwrap();
        claim.publish();
        producer
    });
    // The claim cannot have succeeded: nothing was read yet, so the ring is still full.
    assert_eq!(ring.snapshot().cursor, 4);
    assert!(claimed_rx.try_recv().is_err());
    consumer.set_batch_events_max(1);
    drop(consumer.wait_batch().unwrap());
    assert_eq!(claimed_rx.recv().unwrap(), 4);
    let _producer = blocked.join().unwrap();
    assert_eq!(ring.cursor(), 5);
}
