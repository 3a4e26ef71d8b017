//! `spindle gen-records`: input in the Sort Benchmark's format. Binary records: a random
//! 10-byte key, `00 11`, the record number (16 bytes, big-endian), `88 99 AA BB`, 64 filler
//! bytes, `CC DD EE FF`. ASCII records: a 10-character printable key, two spaces, the
//! record number in 32 hex digits, two spaces, 52 filler characters, `\r\n`. `skew` draws
//! keys heavily skewed: half the records take one of 16 hot keys, a quarter share a 6-byte
//! prefix, the rest are uniform.

use std::io::Write;
use std::path::Path;

use super::{KEY_BYTES, RECORD_BYTES};
use crate::SortError;

/// How to generate records.
#[derive(Debug, Clone, Copy)]
pub struct GenOptions {
    pub records: u64,
    pub ascii: bool,
    pub skew: bool,
    pub seed: u64,
}

/// A small deterministic generator (SplitMix64).
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn key(rng: &mut Rng, ascii: bool, skew: bool) -> [u8; KEY_BYTES] {
    let mut key = [0u8; KEY_BYTES];
    let byte = |v: u64| {
        if ascii {
            b' ' + (v % 95) as u8
        } else {
            v as u8
        }
    };
    let (a, b) = (rng.next(), rng.next());
    for (i, k) in key.iter_mut().enumerate() {
        *k = byte(if i < 8 {
            a >> (8 * i)
        } else {
            b >> (8 * (i - 8))
        });
    }
    if skew {
        match rng.next() % 4 {
            0 | 1 => {
                let hot = rng.next() % 16;
                for (i, k) in key.iter_mut().enumerate() {
                    *k = byte(hot.wrapping_mul(0x9E37_79B9).wrapping_add(i as u64 * 7));
                }
            }
            2 => key[..6].copy_from_slice(&[byte(1), byte(2), byte(3), byte(4), byte(5), byte(6)]),
            _ => {}
        }
    }
    key
}

/// Fills `out` with record number `n`.
fn record(out: &mut [u8], rng: &mut Rng, n: u64, opts: &GenOptions) {
    out[..KEY_BYTES].copy_from_slice(&key(rng, opts.ascii, opts.skew));
    if opts.ascii {
        let filler = b'A' + (n % 26) as u8;
        let text = format!("  {:032X}  ", n);
        out[10..46].copy_from_slice(text.as_bytes());
        out[46..98].fill(filler);
        out[98..].copy_from_slice(b"\r\n");
    } else {
        out[10..12].copy_from_slice(&[0x00, 0x11]);
        out[12..28].copy_from_slice(&u128::from(n).to_be_bytes());
        out[28..32].copy_from_slice(&[0x88, 0x99, 0xAA, 0xBB]);
        out[32..96].fill((n % 251) as u8);
        out[96..].copy_from_slice(&[0xCC, 0xDD, 0xEE, 0xFF]);
    }
}

/// Writes `opts.records` records to `path`: under a temporary name beside it, synced, then
/// renamed and the directory synced, so `path` appears whole or not at all (a full disk
/// leaves nothing behind).
pub fn generate(path: &Path, opts: &GenOptions) -> Result<(), SortError> {
    let needed = opts.records * RECORD_BYTES as u64;
    let err = |e: std::io::Error| match SortError::write(path, needed, e) {
        SortError::NoSpace { path, needed_bytes } => {
            SortError::NoSpaceForRecords { path, needed_bytes }
        }
        other => other,
    };
    if path.is_dir() {
        return Err(SortError::BadOutput {
            path: path.to_path_buf(),
            why: "it is a directory".to_owned(),
        });
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Readable by others, as a file made with `File::create` is (a temporary file is not).
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.spindle-gen-"))
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(err)?;
    let _on_signal = crate::cleanup::register(tmp.path());
    let mut w = std::io::BufWriter::with_capacity(4 << 20, tmp.as_file());
    let mut rng = Rng(opts.seed);
    let mut buf = [0u8; RECORD_BYTES];
    for n in 0..opts.records {
        record(&mut buf, &mut rng, n, opts);
        w.write_all(&buf).map_err(err)?;
    }
    w.flush().map_err(err)?;
    drop(w);
    tmp.as_file().sync_all().map_err(err)?;
    crate::cleanup::finish(|| tmp.persist(path)).map_err(|e| err(e.error))?;
    crate::records::sync_output_dir(path, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary key is the 8 bytes of one draw, little-endian, then the low 2 of the next
    /// (the same keys a release build made before the shift was written without overflow).
    #[test]
    fn a_key_takes_the_bytes_of_two_draws() {
        let mut rng = Rng(7);
        let mut draws = Rng(7);
        let (a, b) = (draws.next(), draws.next());
        let k = key(&mut rng, false, false);
        assert_eq!(k[..8], a.to_le_bytes());
        assert_eq!(k[8..], b.to_le_bytes()[..2]);
    }
}
