//! Record payloads and item keys on arbitrary bytes: whatever decodes re-encodes exactly.

#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_core::record::{decode_payload, encode_payload, payload_key};
use spindle_core::{Index, ItemKey};

fuzz_target!(|data: &[u8]| {
    if let Some((key, used)) = ItemKey::decode(data) {
        assert_eq!(key.to_bytes(), &data[..used]);
    }
    let key = payload_key(data);
    if let Ok(rec) = decode_payload(Index::FIRST, data) {
        let mut again = Vec::new();
        let range = encode_payload(rec.commit, &rec.key, &rec.value, &mut again);
        assert_eq!(again, data);
        assert_eq!(key, Some(&again[range]));
    }
});
