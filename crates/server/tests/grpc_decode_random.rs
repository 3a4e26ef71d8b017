//! The hand-written gRPC messages (`proto`) decode any input without a panic, and nothing
//! they decode holds more than the input could describe: no allocation is sized by a
//! length field before the bytes behind it are there. Random bytes, and valid encodings
//! with random mutations (flipped bytes, cuts, splices, huge length varints).
//! `PROPTEST_CASES=100000 cargo test --release -p spindle-server --test grpc_decode_random`
//! runs a long campaign.

use proptest::prelude::*;
use prost::Message;
use spindle_server::proto::{FrameChunk, IterateRequest, Record, RecordBatch, TailRequest};

/// The most elements (or bytes) a decoded container may reserve for an input of `len`
/// bytes: every element costs at least one input byte, and a growing `Vec` at most doubles.
fn reserve_bound(len: usize) -> usize {
    (2 * len).max(8)
}

fn check_request(input: &[u8]) {
    if let Ok(r) = IterateRequest::decode(input) {
        assert!(r.view.capacity() <= reserve_bound(input.len()));
        let projection = r.projection.as_ref().map_or(0, String::capacity);
        assert!(projection <= reserve_bound(input.len()));
    }
    if let Ok(t) = TailRequest::decode(input) {
        assert!(t.encoded_len() <= input.len());
    }
}

fn check_batch(input: &[u8]) {
    if let Ok(batch) = RecordBatch::decode(input) {
        let bound = reserve_bound(input.len());
        assert!(
            batch.records.capacity() <= bound,
            "{}",
            batch.records.capacity()
        );
        let held: usize = batch
            .records
            .iter()
            .map(|r| r.key.len() + r.value.as_ref().map_or(0, String::len))
            .sum();
        assert!(held <= input.len());
    }
    if let Ok(chunk) = FrameChunk::decode(input) {
        assert!(chunk.frames.len() <= input.len());
    }
}

fn valid_request() -> impl Strategy<Value = Vec<u8>> {
    (
        "[a-z0-9-]{0,12}",
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
        any::<i32>(),
        any::<bool>(),
        any::<u64>(),
        proptest::option::of(any::<u64>()),
        proptest::option::of("[/a-z]{0,12}"),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(view, lo, hi, kinds, keys_only, from, to, projection, (l, d))| {
                IterateRequest {
                    view,
                    range_lo: lo,
                    range_hi: hi,
                    kinds,
                    keys_only,
                    from,
                    to,
                    projection,
                    latest_only: l,
                    dedicated: d,
                }
                .encode_to_vec()
            },
        )
}

fn valid_batch() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        (
            any::<u64>(),
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..20),
            proptest::option::of("[ -~]{0,20}"),
        ),
        0..8,
    )
    .prop_map(|records| {
        RecordBatch {
            records: records
                .into_iter()
                .map(|(index, commit, key, value)| Record {
                    index,
                    commit,
                    key,
                    value,
                })
                .collect(),
        }
        .encode_to_vec()
    })
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip {
        at: usize,
        byte: u8,
    },
    Cut {
        at: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    /// A length-delimited field whose length varint claims up to 2^64 - 1 bytes.
    HugeLength {
        at: usize,
        tag: u8,
        len: u64,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Flip { at, byte }),
        any::<usize>().prop_map(|at| Mutation::Cut { at }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..12)
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1u8..16, any::<u64>()).prop_map(|(at, field, len)| Mutation::HugeLength {
            at,
            tag: (field << 3) | 2,
            len: len | (1 << 31),
        }),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let at = |i: usize| {
            if bytes.is_empty() {
                0
            } else {
                i % (bytes.len() + 1)
            }
        };
        match m {
            Mutation::Flip { at: i, byte } => {
                if !bytes.is_empty() {
                    let i = i % bytes.len();
                    bytes[i] ^= byte;
                }
            }
            Mutation::Cut { at: i } => {
                let i = at(*i);
                bytes.truncate(i);
            }
            Mutation::Insert { at: i, bytes: new } => {
                let i = at(*i);
                bytes.splice(i..i, new.iter().copied());
            }
            Mutation::HugeLength { at: i, tag, len } => {
                let i = at(*i);
                let mut field = vec![*tag];
                prost::encoding::encode_varint(*len, &mut field);
                field.extend_from_slice(b"short");
                bytes.splice(i..i, field);
            }
        }
    }
    bytes
}

proptest! {
    #[test]
    fn random_bytes_decode_without_panic(input in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_request(&input);
        check_batch(&input);
    }

    #[test]
    fn mutated_requests_decode_without_panic(
        valid in valid_request(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let input = mutate(valid, &mutations);
        check_request(&input);
        check_batch(&input);
    }

    #[test]
    fn mutated_batches_decode_without_panic(
        valid in valid_batch(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let input = mutate(valid, &mutations);
        check_request(&input);
        check_batch(&input);
    }
}

#[test]
fn a_length_beyond_the_input_is_refused() {
    for field in 1u8..=11 {
        for len in [6u64, 1 << 20, 4 << 30, u64::MAX >> 1] {
            let mut input = vec![(field << 3) | 2];
            prost::encoding::encode_varint(len, &mut input);
            input.extend_from_slice(b"abcde");
            assert!(
                IterateRequest::decode(&input[..]).is_err(),
                "field {field} len {len}"
            );
            assert!(
                TailRequest::decode(&input[..]).is_err(),
                "field {field} len {len}"
            );
            assert!(
                RecordBatch::decode(&input[..]).is_err(),
                "field {field} len {len}"
            );
            assert!(
                FrameChunk::decode(&input[..]).is_err(),
                "field {field} len {len}"
            );
        }
    }
}
