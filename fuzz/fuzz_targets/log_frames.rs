//! Log segment images: the header, every frame, and the scan recovery runs, on arbitrary
//! bytes (checksums optionally resealed so damage reaches the checks behind them).

#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_core::record::{decode_payload, encode_payload, payload_key};
use spindle_core::{Index, RECORD_BYTES_MAX};
use spindle_fuzz::{reseal_log_frames, reseal_segment_header, split_mode};
use spindle_log::frame::{decode_frame, encode_frame};
use spindle_log::segment::{decode_header, scan_frames, SEGMENT_HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    let (reseal, mut image) = split_mode(data);
    let header = SEGMENT_HEADER_BYTES as usize;
    if reseal {
        reseal_segment_header(&mut image);
        reseal_log_frames(&mut image, header);
    }
    let first = match decode_header(&image) {
        Ok(first) => first,
        Err(_) => Index::new(
            image
                .get(16..24)
                .map_or(1, |b| u64::from_le_bytes(b.try_into().unwrap())),
        ),
    };
    if let Some(body) = image.get(header..) {
        if let Ok(frame) = decode_frame(body, first, RECORD_BYTES_MAX) {
            let mut again = Vec::new();
            encode_frame(frame.index, frame.payload, &mut again);
            assert_eq!(&again[..], &body[..frame.total_len()]);
        }
    }
    let mut visited = 0u64;
    let scan = scan_frames(&image, first, RECORD_BYTES_MAX, |index, payload, _| {
        assert_eq!(index.get(), first.get() + visited);
        visited += 1;
        let key = payload_key(payload).ok_or("record payload does not decode")?;
        if let Ok(rec) = decode_payload(index, payload) {
            let mut again = Vec::new();
            let range = encode_payload(rec.commit, &rec.key, &rec.value, &mut again);
            assert_eq!(again, payload);
            assert_eq!(&again[range], key);
        }
        Ok(())
    });
    if let Ok(end) = scan {
        assert_eq!(end.next_index.get() - first.get(), visited);
        assert!(end.commit_end_offset <= end.end_offset);
        assert!(end.end_offset <= image.len().max(header) as u64);
    }
});
