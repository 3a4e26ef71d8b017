//! Record payloads and item keys under random and mutated input: decoding never panics,
//! valid encodings round-trip, and whatever decodes re-encodes to exactly the bytes it was
//! decoded from (the codecs are canonical), so a damaged payload is either refused or is a
//! well-formed record. Lengths set huge are refused by the bytes present.
//!
//! `PROPTEST_CASES` raises the case counts (docs/benchmarks/faults.md has the long run).

mod common;

use common::mutate;
use mutate::cases;
use proptest::prelude::*;
use spindle_core::record::{decode_payload, encode_payload, payload_key, PayloadError};
use spindle_core::{Index, ItemKey, Value, ITEM_ID_BYTES_MAX, LABEL_BYTES_MAX};

fn field(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9/\u{0}\u{e9}\u{1F600}]{1,12}",
        1 => Just("x".repeat(max)),
    ]
}

fn key() -> impl Strategy<Value = ItemKey> {
    prop_oneof![
        field(ITEM_ID_BYTES_MAX).prop_map(|id| ItemKey::node(id).unwrap()),
        (
            field(ITEM_ID_BYTES_MAX),
            field(LABEL_BYTES_MAX),
            field(ITEM_ID_BYTES_MAX)
        )
            .prop_map(|(f, l, t)| ItemKey::edge(f, l, t).unwrap()),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::TOMBSTONE),
        "[a-z]{0,8}".prop_map(|s| Value::json(format!("{{\"p\":\"{s}\"}}")).unwrap()),
    ]
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    (any::<bool>(), key(), value()).prop_map(|(commit, key, value)| {
        let mut out = Vec::new();
        encode_payload(commit, &key, &value, &mut out);
        out
    })
}

/// A key that decodes re-encodes to the bytes it consumed.
fn check_key(buf: &[u8]) -> Result<(), TestCaseError> {
    if let Some((key, used)) = ItemKey::decode(buf) {
        prop_assert!(used <= buf.len());
        prop_assert!(key.validate().is_ok());
        prop_assert_eq!(key.to_bytes(), &buf[..used]);
        prop_assert_eq!(key.encoded_len(), used);
    }
    Ok(())
}

/// A payload that decodes re-encodes to itself, and `payload_key` agrees with it.
fn check_payload(buf: &[u8]) -> Result<(), TestCaseError> {
    let key = payload_key(buf);
    match decode_payload(Index::new(3), buf) {
        Ok(rec) => {
            let mut again = Vec::new();
            let range = encode_payload(rec.commit, &rec.key, &rec.value, &mut again);
            prop_assert_eq!(&again[..], buf);
            prop_assert_eq!(key, Some(&again[range]));
        }
        Err(PayloadError::BadKey) => prop_assert!(key.is_none()),
        // Flags are checked before the key.
        Err(PayloadError::UnknownFlags) => {}
        Err(PayloadError::BadValue | PayloadError::TrailingBytes) => prop_assert!(key.is_some()),
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(20000))]

    #[test]
    fn random_bytes_never_panic(bytes in mutate::random_bytes()) {
        check_key(&bytes)?;
        check_payload(&bytes)?;
    }

    #[test]
    fn valid_payloads_round_trip(commit in any::<bool>(), key in key(), value in value()) {
        let mut out = Vec::new();
        encode_payload(commit, &key, &value, &mut out);
        let rec = decode_payload(Index::new(9), &out).unwrap();
        prop_assert_eq!((rec.commit, rec.key, rec.value), (commit, key.clone(), value));
        let (back, used) = ItemKey::decode(&out[1..]).unwrap();
        prop_assert_eq!(back, key);
        prop_assert!(used < out.len());
    }

    #[test]
    fn mutated_payloads_decode_cleanly(payload in payload(), ms in mutate::mutations()) {
        let mut bytes = payload;
        mutate::apply_all(&mut bytes, &ms);
        check_payload(&bytes)?;
        check_key(bytes.get(1..).unwrap_or(&[]))?;
    }

    #[test]
    fn lengths_set_huge_are_refused_or_consistent(
        payload in payload(),
        pick in any::<prop::sample::Index>(),
        value in mutate::huge_value(),
    ) {
        // The key's u16 field lengths and the value's u32 length.
        let mut bytes = payload;
        let mut fields = Vec::new();
        let fields_in_key = if bytes[1] == 0 { 1 } else { 3 };
        let mut pos = 2;
        for _ in 0..fields_in_key {
            fields.push((pos, 2usize));
            pos += 2 + usize::from(u16::from_le_bytes([bytes[pos], bytes[pos + 1]]));
        }
        if pos < bytes.len() {
            fields.push((pos, 4));
        }
        let (at, width) = fields[pick.index(fields.len())];
        bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        check_payload(&bytes)?;
    }
}
