//! Disk View keys and values under random and mutated input: splitting and decoding never
//! panic, what decodes re-encodes to the bytes it came from (the order-preserving escape is
//! canonical), and the transcoder to the core key encoding agrees with the decoder on every
//! key the decoder accepts.
//!
//! `PROPTEST_CASES` raises the case counts (docs/benchmarks/faults.md has the long run).

#[path = "../../core/tests/common/mutate.rs"]
mod mutate;
use mutate::cases;

use proptest::prelude::*;
use spindle_core::{Index, ItemKey};
use spindle_view::keys::{
    decode_item, encode_value, split_key, split_value, transcode_item, version_key, HASH_BYTES,
    INDEX_BYTES,
};

fn key() -> impl Strategy<Value = ItemKey> {
    let field = "[a-z\u{0}\u{1}\u{ff}\u{e9}]{1,8}";
    prop_oneof![
        field.prop_map(|id| ItemKey::node(id).unwrap()),
        (field, field, field).prop_map(|(f, l, t)| ItemKey::edge(f, l, t).unwrap()),
    ]
}

/// Split, decode and transcode `bytes` as a Disk View key and check what comes out.
fn check_key(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Some(parts) = split_key(bytes) else {
        return Ok(());
    };
    prop_assert_eq!(parts.prefix.len() + INDEX_BYTES, bytes.len());
    prop_assert_eq!(&parts.prefix[..HASH_BYTES], &parts.hash.to_be_bytes()[..]);
    prop_assert_eq!(parts.prefix[HASH_BYTES], parts.kind as u8);
    let decoded = decode_item(parts.prefix);
    let mut core = Vec::new();
    let transcoded = transcode_item(parts.prefix, &mut core);
    if let Some(item) = decoded {
        prop_assert_eq!(item.kind(), parts.kind);
        // The hash is not re-derived by the decoder; everything after it is canonical.
        let again = version_key(&item, parts.index);
        prop_assert_eq!(&again[HASH_BYTES..], &bytes[HASH_BYTES..]);
        prop_assert_eq!(transcoded, Some(()));
        prop_assert_eq!(core, item.to_bytes());
    }
    Ok(())
}

fn check_value(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Some(value) = split_value(bytes) {
        let mut again = Vec::new();
        match value {
            Some(json) => {
                again.push(spindle_view::keys::VALUE_OBJECT);
                again.extend_from_slice(json);
            }
            None => encode_value(&spindle_core::Value::TOMBSTONE, &mut again),
        }
        prop_assert_eq!(again, bytes);
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(20000))]

    #[test]
    fn random_bytes_never_panic(bytes in mutate::random_bytes()) {
        check_key(&bytes)?;
        check_value(&bytes)?;
        let mut core = Vec::new();
        let _ = transcode_item(&bytes, &mut core);
    }

    #[test]
    fn valid_keys_round_trip(item in key(), index in any::<u64>()) {
        let bytes = version_key(&item, Index::new(index));
        let parts = split_key(&bytes).unwrap();
        prop_assert_eq!(parts.index, Index::new(index));
        prop_assert_eq!(parts.hash, item.hash());
        prop_assert_eq!(decode_item(parts.prefix), Some(item));
        check_key(&bytes)?;
    }

    #[test]
    fn mutated_keys_decode_cleanly(
        item in key(),
        index in any::<u64>(),
        ms in mutate::mutations(),
    ) {
        let mut bytes = version_key(&item, Index::new(index));
        mutate::apply_all(&mut bytes, &ms);
        check_key(&bytes)?;
        check_value(&bytes)?;
    }
}
