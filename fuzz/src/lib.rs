//! Helpers for the fuzz targets: checksum resealing, so that mutated inputs reach the checks
//! behind a CRC instead of stopping at it (libFuzzer cannot forge a CRC32C on its own).

/// Recompute the CRC32C of every log frame in a segment image, walking frames from the
/// header on for as long as their length fields fit the image.
pub fn reseal_log_frames(image: &mut [u8], header_bytes: usize) {
    let mut at = header_bytes;
    while at + 16 <= image.len() {
        let len = u32::from_le_bytes(image[at + 4..at + 8].try_into().unwrap()) as usize;
        if len == 0 || at + 16 + len > image.len() {
            return;
        }
        let crc = crc32c::crc32c(&image[at + 4..at + 16 + len]);
        image[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        at += 16 + len;
    }
}

/// Recompute a log segment header's CRC32C (bytes 24..28 over 0..24).
pub fn reseal_segment_header(image: &mut [u8]) {
    if image.len() >= 28 {
        let crc = crc32c::crc32c(&image[0..24]);
        image[24..28].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Recompute the trailing CRC32C of a version checkpoint (over everything before it).
pub fn reseal_checkpoint(buf: &mut [u8]) {
    if buf.len() >= 4 {
        let end = buf.len() - 4;
        let crc = crc32c::crc32c(&buf[..end]);
        buf[end..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Recompute both CRC32Cs of a chunk hint file (header over 0..28; trailer over entries).
pub fn reseal_hint(b: &mut [u8]) {
    if b.len() < 36 {
        return;
    }
    let crc = crc32c::crc32c(&b[0..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    let end = b.len() - 4;
    let crc = crc32c::crc32c(&b[32..end]);
    b[end..].copy_from_slice(&crc.to_le_bytes());
}

/// Recompute the header CRC32C of a 52-byte chunk record header (48..52 over 0..48).
pub fn reseal_record_header(b: &mut [u8; 52]) {
    let crc = crc32c::crc32c(&b[0..48]);
    b[48..52].copy_from_slice(&crc.to_le_bytes());
}

/// Recompute the CRC32C of a 64-byte chunk volume header (60..64 over 0..60).
pub fn reseal_volume_header(b: &mut [u8; 64]) {
    let crc = crc32c::crc32c(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// Split a fuzz input into a mode byte (bit 0: reseal checksums) and the bytes to decode.
pub fn split_mode(data: &[u8]) -> (bool, Vec<u8>) {
    match data.split_first() {
        Some((&mode, rest)) => (mode & 1 == 1, rest.to_vec()),
        None => (false, Vec::new()),
    }
}
