//! `spindle sort --check`: validates a record file as the Sort Benchmark's checker does —
//! record count, duplicate keys, the first record out of order, and a checksum that does
//! not depend on order (the 128-bit sum of each record's CRC32C), so an input and its
//! sorted output can be compared.

use std::io::Read;
use std::path::Path;

use super::{KEY_BYTES, RECORD_BYTES};
use crate::SortError;

/// Read buffer of the checker.
const CHECK_BUFFER_BYTES: usize = 8 << 20;

/// What the checker found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckReport {
    pub records: u64,
    /// Records whose key equals the previous record's key.
    pub duplicate_keys: u64,
    /// Byte offset of the first record whose key is below its predecessor's.
    pub first_unsorted_offset: Option<u64>,
    /// Sum of CRC32C of every record, wrapping at 128 bits.
    pub checksum: u128,
}

impl CheckReport {
    pub fn is_sorted(&self) -> bool {
        self.first_unsorted_offset.is_none()
    }
}

/// Checks `path` (its length must be a whole number of records).
pub fn check_file(path: &Path) -> Result<CheckReport, SortError> {
    let mut file = std::fs::File::open(path).map_err(|source| SortError::Input {
        path: path.to_path_buf(),
        source,
    })?;
    let meta = file.metadata().map_err(|e| SortError::read(path, e))?;
    // A pipe or a device has no length to check the records against (a FIFO says 0).
    if !meta.is_file() {
        return Err(SortError::InputNotFile {
            path: path.to_path_buf(),
        });
    }
    let bytes = meta.len();
    if bytes % RECORD_BYTES as u64 != 0 {
        return Err(SortError::BadLength {
            path: path.to_path_buf(),
            bytes,
            record_bytes: RECORD_BYTES as u64,
        });
    }
    let mut report = CheckReport {
        records: 0,
        duplicate_keys: 0,
        first_unsorted_offset: None,
        checksum: 0,
    };
    let mut prev: Option<[u8; KEY_BYTES]> = None;
    let mut buf = vec![0u8; CHECK_BUFFER_BYTES / RECORD_BYTES * RECORD_BYTES];
    let mut filled = 0;
    loop {
        let n = file
            .read(&mut buf[filled..])
            .map_err(|e| SortError::read(path, e))?;
        filled += n;
        let whole = filled / RECORD_BYTES * RECORD_BYTES;
        for record in buf[..whole].chunks_exact(RECORD_BYTES) {
            let key: [u8; KEY_BYTES] = record[..KEY_BYTES].try_into().expect("key slice");
            if let Some(p) = prev {
                if key == p {
                    report.duplicate_keys += 1;
                } else if key < p && report.first_unsorted_offset.is_none() {
                    report.first_unsorted_offset = Some(report.records * RECORD_BYTES as u64);
                }
            }
            prev = Some(key);
            report.checksum = report
                .checksum
                .wrapping_add(u128::from(crc32c::crc32c(record)));
            report.records += 1;
        }
        buf.copy_within(whole..filled, 0);
        filled -= whole;
        if n == 0 {
            break;
        }
    }
    if filled != 0 || report.records * RECORD_BYTES as u64 != bytes {
        return Err(SortError::InputChanged {
            path: path.to_path_buf(),
            expected_bytes: bytes,
            read_bytes: report.records * RECORD_BYTES as u64,
        });
    }
    Ok(report)
}
