//! Version-table checkpoints on arbitrary bytes (the trailing checksum optionally resealed):
//! a checkpoint that decodes holds exactly its distinct keys.

#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_fuzz::{reseal_checkpoint, split_mode};
use spindle_log::versions::decode_checkpoint;

fuzz_target!(|data: &[u8]| {
    let (reseal, mut buf) = split_mode(data);
    if reseal {
        reseal_checkpoint(&mut buf);
    }
    if let Ok((table, _)) = decode_checkpoint(&buf) {
        let count = u64::from_le_bytes(buf[24..32].try_into().unwrap());
        assert!(table.len() as u64 <= count);
        assert!(table.len() <= buf.len() / 10);
    }
});
