//! Iteration frames on arbitrary bytes: every frame read re-encodes to its bytes, and the
//! reader stops for good at the first bad one. The view crate needs RocksDB, so its frame
//! module is compiled in here on its own (it depends only on spindle-core).

#![no_main]

#[path = "../../crates/view/src/frame.rs"]
#[allow(dead_code)]
mod frame;

use frame::{encode_end, encode_version, FrameReader, FrameRef};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reader = FrameReader::new(data);
    loop {
        let start = reader.offset();
        let Some(item) = reader.next_ref() else { break };
        match item {
            Ok(f) => {
                let mut again = Vec::new();
                match f {
                    FrameRef::Version {
                        flags,
                        index,
                        key,
                        value,
                    } => encode_version(&mut again, flags, index, key, value),
                    FrameRef::End(end) => encode_end(&mut again, &end),
                }
                assert_eq!(&again[..], &data[start..reader.offset()]);
                let _ = f.to_owned_frame();
            }
            Err(e) => {
                assert_eq!(e.offset, start);
                assert!(reader.next_ref().is_none());
                break;
            }
        }
    }
    assert!(FrameReader::new(data).count() <= data.len());
});
