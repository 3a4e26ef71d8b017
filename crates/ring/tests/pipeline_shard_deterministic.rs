//! A sharded stage's output is identical for every shard count, whether events are routed
//! by sequence or by key, and equals the unsharded map.
#![cfg(not(loom))]

use spindle_ring::pipeline::source;

#[test]
fn output_is_the_same_for_every_shard_count() {
    let inputs: Vec<u64> = (0..5000).map(|i| i * 7919 % 10007).collect();
    let f = |x: u64| x * x + 1;
    let reference = source::<u64>().map("f", f).run(inputs.clone(), 64);
    for shards in 1..=6 {
        let by_seq = source::<u64>().shard("f", shards, |seq, _| seq, f);
        assert_eq!(
            by_seq.run(inputs.clone(), 16),
            reference,
            "by sequence, {shards} shards"
        );
        let by_key = source::<u64>().shard("f", shards, |_, x| *x, f);
        assert_eq!(
            by_key.run(inputs.clone(), 16),
            reference,
            "by key, {shards} shards"
        );
    }
}
