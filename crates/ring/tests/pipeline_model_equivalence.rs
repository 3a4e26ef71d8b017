//! For random pipelines (maps, shards of random width, fan-outs with zip, nested) and
//! random inputs, the deployed pipeline's output equals its sequential model's output.
#![cfg(not(loom))]

use proptest::prelude::*;
use spindle_ring::pipeline::{source, Pipe};

/// A pipeline shape; every stage maps u64 to u64.
#[derive(Debug, Clone)]
enum Spec {
    Map(u64),
    Shard { shards: usize, by_key: bool, k: u64 },
    FanOut(Vec<Spec>),
    Seq(Box<Spec>, Box<Spec>),
}

fn spec() -> impl Strategy<Value = Spec> {
    let leaf = prop_oneof![
        (1u64..100).prop_map(Spec::Map),
        ((1usize..5), any::<bool>(), (1u64..100)).prop_map(|(shards, by_key, k)| Spec::Shard {
            shards,
            by_key,
            k
        }),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 1..4).prop_map(Spec::FanOut),
            (inner.clone(), inner).prop_map(|(a, b)| Spec::Seq(Box::new(a), Box::new(b))),
        ]
    })
}

fn step(x: u64, k: u64) -> u64 {
    x.wrapping_mul(k | 1)
        .wrapping_add(k)
        .rotate_left((k % 61) as u32)
}

fn build(pipe: Pipe<u64, u64>, spec: &Spec) -> Pipe<u64, u64> {
    match spec {
        Spec::Map(k) => {
            let k = *k;
            pipe.map("map", move |x| step(x, k))
        }
        Spec::Shard { shards, by_key, k } => {
            let (k, by_key) = (*k, *by_key);
            pipe.shard(
                "shard",
                *shards,
                move |seq, x| if by_key { x.rotate_right(7) } else { seq },
                move |x| step(x, k),
            )
        }
        Spec::FanOut(branches) => {
            let branches = branches.iter().map(|b| build(source(), b)).collect();
            pipe.fan_out("fan", branches).map("fold", |xs: Vec<u64>| {
                xs.iter().fold(0u64, |a, x| a.rotate_left(5) ^ x)
            })
        }
        Spec::Seq(a, b) => build(build(pipe, a), b),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn deployed_equals_model(
        spec in spec(),
        inputs in proptest::collection::vec(any::<u64>(), 0..400),
        cap_log2 in 0u32..6,
    ) {
        let pipe = build(source(), &spec);
        let expected = pipe.model(inputs.clone());
        prop_assert_eq!(pipe.run(inputs, 1 << cap_log2), expected);
    }
}
