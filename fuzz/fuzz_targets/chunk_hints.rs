//! Chunk hint files, record headers and volume headers on arbitrary bytes (checksums
//! optionally resealed): what decodes re-encodes exactly, and a hint's records tile its
//! volume, so no read is sized by a length the volume does not hold.

#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_chunk::format::{
    decode_hint, decode_volume_header, encode_hint, encode_volume_header, RecordHeader,
};
use spindle_chunk::VOLUME_HEADER_LEN;
use spindle_fuzz::{reseal_hint, reseal_record_header, reseal_volume_header, split_mode};

fuzz_target!(|data: &[u8]| {
    let (reseal, mut buf) = split_mode(data);
    if let Ok(mut b) = <[u8; 52]>::try_from(buf.get(..52).unwrap_or(&[])) {
        if reseal {
            reseal_record_header(&mut b);
        }
        if let Ok(h) = RecordHeader::decode(&b) {
            assert_eq!(h.encode(), b);
        }
    }
    if let Ok(mut b) = <[u8; 64]>::try_from(buf.get(..64).unwrap_or(&[])) {
        if reseal {
            reseal_volume_header(&mut b);
        }
        if let Ok(n) = decode_volume_header(&b) {
            assert_eq!(decode_volume_header(&encode_volume_header(n)), Ok(n));
        }
    }
    if reseal {
        reseal_hint(&mut buf);
    }
    if let Ok(hint) = decode_hint(&buf) {
        assert_eq!(
            encode_hint(hint.volume, hint.volume_len, &hint.entries),
            buf
        );
        let mut offset = VOLUME_HEADER_LEN;
        for e in &hint.entries {
            assert_eq!(e.offset, offset);
            offset += e.record_len();
        }
        assert_eq!(offset, hint.volume_len);
    }
});
