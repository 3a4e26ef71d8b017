//! Log frames: how one record sits in a segment file.
//!
//! ```text
//! offset  size  field
//! 0       4     crc          u32 LE, CRC32C of bytes [4 .. 16 + payload_len]
//! 4       4     payload_len  u32 LE (> 0; 0 marks the end of written data)
//! 8       8     index        u64 LE
//! 16      n     payload      record payload (spindle_core::record)
//! ```
//!
//! The CRC covers the length and the index, so a frame that is intact but sits at the wrong
//! place (a stale frame from an earlier, torn write) is caught by the index check.

use spindle_core::Index;

/// Bytes before the payload.
pub const FRAME_HEADER_BYTES: usize = 16;

/// Why bytes at some offset are not a valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameFault {
    /// Fewer bytes left than the header or the declared payload needs.
    Short,
    /// The length field is zero: no frame was written here.
    Zero,
    /// The length field exceeds the record size limit.
    BadLength(u32),
    /// The checksum does not match.
    Checksum,
    /// The frame is intact but carries another index than the one expected here.
    WrongIndex { expected: Index, found: Index },
    /// The frame carries the largest index, after which no index can follow.
    IndexOverflow,
}

impl std::fmt::Display for FrameFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameFault::Short => write!(f, "frame cut short"),
            FrameFault::Zero => write!(f, "no frame (zero length)"),
            FrameFault::BadLength(n) => write!(f, "frame length {n} exceeds the record limit"),
            FrameFault::Checksum => write!(f, "checksum mismatch"),
            FrameFault::WrongIndex { expected, found } => {
                write!(f, "frame carries index {found}, expected {expected}")
            }
            FrameFault::IndexOverflow => {
                write!(
                    f,
                    "frame carries index {}, which no index can follow",
                    Index::MAX
                )
            }
        }
    }
}

/// CRC32C over a frame's length, index and payload (its bytes from offset 4 on), which are
/// contiguous so one pass covers them.
pub fn frame_crc(frame_after_crc: &[u8]) -> u32 {
    crc32c::crc32c(frame_after_crc)
}

/// Append a frame for `payload` at `index`.
pub fn encode_frame(index: Index, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    let len = u32::try_from(payload.len()).expect("payload fits u32");
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&index.get().to_le_bytes());
    out.extend_from_slice(payload);
    let crc = frame_crc(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Fill in the index and checksum of a frame whose header was reserved with zeros.
pub fn seal_frame(frame: &mut [u8], index: Index) {
    frame[8..16].copy_from_slice(&index.get().to_le_bytes());
    let crc = frame_crc(&frame[4..]);
    frame[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// A frame parsed from a buffer.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub index: Index,
    pub payload: &'a [u8],
}

impl Frame<'_> {
    pub fn total_len(&self) -> usize {
        FRAME_HEADER_BYTES + self.payload.len()
    }
}

/// Parse the frame at the start of `buf`, expecting `expected` as its index.
pub fn decode_frame(
    buf: &[u8],
    expected: Index,
    payload_max: usize,
) -> Result<Frame<'_>, FrameFault> {
    let header = buf.get(..FRAME_HEADER_BYTES).ok_or(FrameFault::Short)?;
    let len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    if len == 0 {
        return Err(FrameFault::Zero);
    }
    if len as usize > payload_max {
        return Err(FrameFault::BadLength(len));
    }
    let payload = buf
        .get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len as usize)
        .ok_or(FrameFault::Short)?;
    let crc = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    if frame_crc(&buf[4..FRAME_HEADER_BYTES + len as usize]) != crc {
        return Err(FrameFault::Checksum);
    }
    let index = Index::new(u64::from_le_bytes(
        header[8..16].try_into().expect("8 bytes"),
    ));
    if index != expected {
        return Err(FrameFault::WrongIndex {
            expected,
            found: index,
        });
    }
    Ok(Frame { index, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_detect_damage() {
        let mut buf = Vec::new();
        encode_frame(Index::new(7), b"hello", &mut buf);
        let f = decode_frame(&buf, Index::new(7), 1024).unwrap();
        assert_eq!(f.payload, b"hello");
        assert_eq!(f.total_len(), buf.len());
        assert_eq!(
            decode_frame(&buf, Index::new(8), 1024).unwrap_err(),
            FrameFault::WrongIndex {
                expected: Index::new(8),
                found: Index::new(7)
            }
        );
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(
                decode_frame(&bad, Index::new(7), 1024).is_err(),
                "flip at {i} undetected"
            );
        }
        assert_eq!(
            decode_frame(&buf[..10], Index::new(7), 1024).unwrap_err(),
            FrameFault::Short
        );
        assert_eq!(
            decode_frame(&[0; 32], Index::new(7), 1024).unwrap_err(),
            FrameFault::Zero
        );
    }

    #[test]
    fn sealing_a_reserved_frame_matches_encoding() {
        let mut direct = Vec::new();
        encode_frame(Index::new(42), b"payload", &mut direct);
        let mut reserved = vec![0u8; FRAME_HEADER_BYTES];
        reserved[4..8].copy_from_slice(&7u32.to_le_bytes());
        reserved.extend_from_slice(b"payload");
        seal_frame(&mut reserved, Index::new(42));
        assert_eq!(direct, reserved);
    }
}
