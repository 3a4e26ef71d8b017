//! A consumer that leaves no longer gates the producer: a full ring becomes free, and a
//! producer blocked on the leaver wakes up.
#![cfg(not(loom))]

use std::thread;

use spindle_ring::RingBuilder;

#[test]
fn leaving_frees_the_ring() {
    let (mut producer, ring) = RingBuilder::new(8).build::<u64>().unwrap();
    let fast = ring.join_at("fast", 0).unwrap();
    let slow = ring.join_at("slow", 0).unwrap();
    producer.claim(8).publish();
    assert!(producer.try_claim(1).is_err());
    drop(fast);
    assert!(
        producer.try_claim(1).is_err(),
        "the slow consumer still gates"
    );
    slow.leave();
    for _ in 0..100 {
        producer
            .try_claim(8)
            .expect("no consumer gates any more")
            .publish();
    }
    assert!(ring.snapshot().consumers.is_empty());
}

#[test]
fn leaving_wakes_a_blocked_producer() {
    let (mut producer, ring) = RingBuilder::new(2).build::<u64>().unwrap();
    let stalled = ring.join_at("stalled", 0).unwrap();
    producer.claim(2).publish();
    let blocked = thread::spawn(move || {
        producer.claim(2).publish();
        producer.cursor()
    });
    assert_eq!(ring.cursor(), 2);
    stalled.leave();
    assert_eq!(blocked.join().unwrap(), 4);
}

#[test]
fn rejoining_behind_the_producer_is_refused() {
    let (mut producer, ring) = RingBuilder::new(4).build::<u64>().unwrap();
    for _ in 0..3 {
        producer.claim(4).publish();
    }
    let err = ring.join_at("late", 0).unwrap_err();
    assert_eq!((err.requested, err.oldest), (0, 8));
    assert_eq!(ring.oldest_joinable(), 8);
    assert!(ring.join_at("ok", 8).is_ok());
}
