//! The `device` system of `bench sort`: the disk's own 2R+2W, as fast as it goes. The input
//! is copied to a middle file and the middle file to the output, each copy with `O_DIRECT`
//! (where the file system takes it, as `spindle sort` does) in 8 MiB aligned pieces, a
//! reader thread and a writer thread overlapped through four buffers, the copy synced
//! before the next starts. No sort does less I/O than this, or does it with less in its way.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::mpsc::sync_channel;

use anyhow::Context;

/// Bytes per read and write.
const PIECE_BYTES: usize = 8 << 20;
/// Pieces in flight between the reader and the writer.
const PIECES: usize = 4;
/// O_DIRECT alignment of buffers, offsets and lengths.
const ALIGN_BYTES: usize = 4096;

/// A buffer of `PIECE_BYTES` starting at an aligned address inside an over-allocated `Vec`.
struct Piece {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl Piece {
    fn new() -> Piece {
        let raw = vec![0u8; PIECE_BYTES + ALIGN_BYTES];
        let start = raw.as_ptr().align_offset(ALIGN_BYTES);
        Piece { raw, start, len: 0 }
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + PIECE_BYTES]
    }

    fn filled(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

/// Opens with O_DIRECT, or without it where the file system refuses (EINVAL).
fn open(path: &Path, write: bool) -> std::io::Result<(File, bool)> {
    let opts = |direct: bool| {
        let mut o = OpenOptions::new();
        if write {
            o.write(true).create(true).truncate(true);
        } else {
            o.read(true);
        }
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o
    };
    match opts(true).open(path) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((opts(false).open(path)?, false)),
        Err(e) => Err(e),
    }
}

/// Reads `from` into `to` (created), overlapped, and syncs `to`; fails unless `to` ends up
/// exactly as long as `from`.
pub(crate) fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    let (src, _) = open(from, false).with_context(|| format!("opening {}", from.display()))?;
    let (dst, direct) = open(to, true).with_context(|| format!("creating {}", to.display()))?;
    // The unaligned end of the file goes through a buffered descriptor.
    let tail = OpenOptions::new()
        .write(true)
        .open(to)
        .with_context(|| format!("opening {}", to.display()))?;
    let (full_tx, full_rx) = sync_channel::<(Piece, u64)>(PIECES);
    let (free_tx, free_rx) = sync_channel::<Piece>(PIECES);
    for _ in 0..PIECES {
        free_tx.send(Piece::new()).expect("the channel has room");
    }
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let reader = scope.spawn(move || -> anyhow::Result<()> {
            let mut offset = 0u64;
            while let Ok(mut piece) = free_rx.recv() {
                let mut len = 0;
                while len < PIECE_BYTES {
                    let n = src.read_at(&mut piece.buf()[len..], offset + len as u64)?;
                    if n == 0 {
                        break;
                    }
                    len += n;
                }
                if len == 0 {
                    return Ok(());
                }
                piece.len = len;
                if full_tx.send((piece, offset)).is_err() {
                    // The writer stopped on an error; it reports it.
                    return Ok(());
                }
                offset += len as u64;
            }
            Ok(())
        });
        let mut result = Ok(());
        for (piece, offset) in full_rx {
            let bytes = piece.filled();
            let aligned = if direct {
                bytes.len() / ALIGN_BYTES * ALIGN_BYTES
            } else {
                bytes.len()
            };
            let written = dst
                .write_all_at(&bytes[..aligned], offset)
                .and_then(|()| tail.write_all_at(&bytes[aligned..], offset + aligned as u64));
            if let Err(e) = written {
                result = Err(anyhow::Error::new(e).context(format!("writing {}", to.display())));
                break;
            }
            // The reader leaves at the end of the input: what it queued is still written.
            let _ = free_tx.send(piece);
        }
        drop(free_tx);
        let read = reader.join().expect("reader thread");
        result?;
        read.with_context(|| format!("reading {}", from.display()))
    })?;
    tail.sync_data()
        .and_then(|()| dst.sync_data())
        .with_context(|| format!("syncing {}", to.display()))?;
    let (want, got) = (std::fs::metadata(from)?.len(), std::fs::metadata(to)?.len());
    anyhow::ensure!(
        want == got,
        "device probe: {} is {got} bytes after copying {want}",
        to.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_byte_of_a_file_not_a_multiple_of_a_piece() {
        let dir = tempfile::tempdir().unwrap();
        for len in [
            0,
            1,
            4095,
            4097,
            PIECE_BYTES - 100,
            PIECE_BYTES * PIECES * 2 + 4000,
        ] {
            let (from, to) = (dir.path().join("from"), dir.path().join("to"));
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
            std::fs::write(&from, &bytes).unwrap();
            copy(&from, &to).unwrap();
            assert!(std::fs::read(&to).unwrap() == bytes, "{len} bytes");
        }
    }
}
