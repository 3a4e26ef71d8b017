//! Disk View keys and values on arbitrary bytes: what decodes re-encodes exactly (past the
//! hash, which the decoder does not re-derive), and the transcoder agrees with the decoder.
//! The view crate needs RocksDB, so its key module is compiled in here on its own.

#![no_main]

#[path = "../../crates/view/src/keys.rs"]
#[allow(dead_code)]
mod keys;

use keys::{decode_item, split_key, split_value, transcode_item, version_key, HASH_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = split_value(data);
    let mut scratch = Vec::new();
    let _ = transcode_item(data, &mut scratch);
    let Some(parts) = split_key(data) else { return };
    let mut core = Vec::new();
    let transcoded = transcode_item(parts.prefix, &mut core);
    if let Some(item) = decode_item(parts.prefix) {
        let again = version_key(&item, parts.index);
        assert_eq!(&again[HASH_BYTES..], &data[HASH_BYTES..]);
        assert_eq!(transcoded, Some(()));
        assert_eq!(core, item.to_bytes());
    }
});
