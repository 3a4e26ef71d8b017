//! Byte mutations of valid encodings for the decoder robustness tests: bit flips, byte
//! overwrites, truncation, extension, deletion, splices, and fields overwritten with huge
//! values (what a damaged length field looks like). Shared by the `decode_random_*` tests of
//! every crate (included with `#[path]`), so each decoder meets the same damage.

#![allow(dead_code)]

use proptest::prelude::*;

/// One change to a byte string. Positions are taken modulo the current length, so any
/// mutation applies to any input; on an empty input only `Extend` changes anything.
#[derive(Clone, Debug)]
pub enum Mutation {
    FlipBit {
        at: usize,
        bit: u8,
    },
    SetByte {
        at: usize,
        byte: u8,
    },
    Truncate {
        at: usize,
    },
    Extend {
        bytes: Vec<u8>,
    },
    Delete {
        at: usize,
        len: usize,
    },
    /// Copy `len` bytes from `from` and insert them at `to` (a frame or field repeated).
    Splice {
        from: usize,
        len: usize,
        to: usize,
    },
    /// Overwrite `width` bytes (2, 4 or 8) at `at`, little- or big-endian, with `value`.
    Field {
        at: usize,
        width: u8,
        big_endian: bool,
        value: u64,
    },
}

/// Values a damaged length or count field tends to hold.
pub fn huge_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u16::MAX)),
        Just(1u64 << 31),
        Just(1u64 << 20),
        Just(0u64),
        any::<u64>(),
    ]
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::SetByte { at, byte }),
        2 => any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        1 => proptest::collection::vec(any::<u8>(), 1..64)
            .prop_map(|bytes| Mutation::Extend { bytes }),
        1 => (any::<usize>(), 1usize..32).prop_map(|(at, len)| Mutation::Delete { at, len }),
        1 => (any::<usize>(), 1usize..64, any::<usize>())
            .prop_map(|(from, len, to)| Mutation::Splice { from, len, to }),
        3 => (
            any::<usize>(),
            prop_oneof![Just(2u8), Just(4u8), Just(8u8)],
            any::<bool>(),
            huge_value()
        )
            .prop_map(|(at, width, big_endian, value)| Mutation::Field {
                at,
                width,
                big_endian,
                value
            }),
    ]
}

/// One to four mutations, applied in order.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 1..5)
}

/// Apply `m` to `bytes`.
pub fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if let Mutation::Extend { bytes: tail } = m {
        bytes.extend_from_slice(tail);
        return;
    }
    let n = bytes.len();
    if n == 0 {
        return;
    }
    match *m {
        Mutation::FlipBit { at, bit } => bytes[at % n] ^= 1 << bit,
        Mutation::SetByte { at, byte } => bytes[at % n] = byte,
        Mutation::Truncate { at } => bytes.truncate(at % n),
        Mutation::Extend { .. } => unreachable!("handled above"),
        Mutation::Delete { at, len } => {
            let at = at % n;
            bytes.drain(at..(at + len).min(n));
        }
        Mutation::Splice { from, len, to } => {
            let from = from % n;
            let run = bytes[from..(from + len).min(n)].to_vec();
            let to = to % (n + 1);
            bytes.splice(to..to, run);
        }
        Mutation::Field {
            at,
            width,
            big_endian,
            value,
        } => {
            let width = usize::from(width);
            let at = at % n;
            let le = value.to_le_bytes();
            let be = value.to_be_bytes();
            let field: &[u8] = if big_endian {
                &be[8 - width..]
            } else {
                &le[..width]
            };
            let end = (at + width).min(n);
            bytes[at..end].copy_from_slice(&field[..end - at]);
        }
    }
}

/// Apply every mutation in `ms`.
pub fn apply_all(bytes: &mut Vec<u8>, ms: &[Mutation]) {
    for m in ms {
        apply(bytes, m);
    }
}

/// Random bytes, mostly short, sometimes a few KiB.
pub fn random_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => proptest::collection::vec(any::<u8>(), 0..4096),
    ]
}

/// The proptest configuration of a decoder test: `default` cases unless `PROPTEST_CASES`
/// says otherwise, and no failure files written next to the sources.
pub fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}
