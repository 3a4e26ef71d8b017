//! The synced-length hint `synced.hint`: written when the log closes cleanly, it records how
//! far the last segment was synced. A bad frame below that length cannot be a torn tail, so
//! recovery reports it as damage. The hint only ever understates what is synced (the log
//! appends past it, never rewrites below it), so a stale hint stays true.
//!
//! ```text
//! 0   8  magic "SPNDLHNT"
//! 8   8  first index of the segment it describes, u64 LE
//! 16  8  synced length of that segment in bytes, u64 LE
//! 24  4  CRC32C of bytes [0..24]
//! ```
//!
//! Written as `.tmp`, synced, renamed, directory synced: a hint that does not decode is damage.

use std::io;
use std::path::Path;

use spindle_core::Index;

use crate::fs::Fs;

pub const HINT_FILE: &str = "synced.hint";
const MAGIC: &[u8; 8] = b"SPNDLHNT";
const HINT_BYTES: usize = 28;

/// How far one segment is known to be synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncedHint {
    pub segment: Index,
    pub synced_bytes: u64,
}

fn encode(hint: SyncedHint) -> [u8; HINT_BYTES] {
    let mut b = [0u8; HINT_BYTES];
    b[0..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&hint.segment.get().to_le_bytes());
    b[16..24].copy_from_slice(&hint.synced_bytes.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..24]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode(b: &[u8]) -> Result<SyncedHint, (u64, String)> {
    if b.len() != HINT_BYTES {
        return Err((
            0,
            format!("hint is {} bytes, expected {HINT_BYTES}", b.len()),
        ));
    }
    if &b[0..8] != MAGIC {
        return Err((0, "bad magic: not a synced-length hint".to_owned()));
    }
    let crc = u32::from_le_bytes(b[24..28].try_into().expect("4 bytes"));
    if crc32c::crc32c(&b[0..24]) != crc {
        return Err((0, "hint checksum mismatch".to_owned()));
    }
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    Ok(SyncedHint {
        segment: Index::new(u64_at(8)),
        synced_bytes: u64_at(16),
    })
}

/// Write the hint durably.
pub fn write_hint(fs: &dyn Fs, dir: &Path, hint: SyncedHint) -> io::Result<()> {
    let tmp = dir.join(format!("{HINT_FILE}.tmp"));
    let f = fs.create(&tmp)?;
    f.write_all_at(&encode(hint), 0)?;
    f.sync_all()?;
    fs.rename(&tmp, &dir.join(HINT_FILE))?;
    fs.sync_dir(dir)
}

/// The hint in `dir`: `Ok(None)` if there is none, `Err((offset, reason))` if it is damaged.
pub fn read_hint(fs: &dyn Fs, dir: &Path) -> io::Result<Result<Option<SyncedHint>, (u64, String)>> {
    match fs.read(&dir.join(HINT_FILE)) {
        Ok(b) => Ok(decode(&b).map(Some)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Ok(None)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_round_trip_and_reject_any_flipped_byte() {
        let h = SyncedHint {
            segment: Index::new(5),
            synced_bytes: 1234,
        };
        let b = encode(h);
        assert_eq!(decode(&b), Ok(h));
        for i in 0..b.len() {
            let mut bad = b;
            bad[i] ^= 1;
            assert!(decode(&bad).is_err(), "flip at {i}");
        }
    }
}
