//! The pipeline stages joined by `spindle-ring` rings: a reader thread filling
//! preallocated aligned slots, and a writer thread draining them. Buffers move between the
//! bucketing/sorting thread and the rings by swapping with a claimed slot, never copied.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use spindle_ring::{Consumer, Producer, RingBuilder};

use super::aligned::{open_read, read_full_at, AlignedBuf, WriteFile};
use super::RECORD_BYTES;
use crate::SortError;

/// One piece of a file read into a slot.
#[derive(Debug, Default)]
pub(crate) struct Piece {
    pub(crate) buf: AlignedBuf,
    pub(crate) len: usize,
    /// Whether the piece's records are already in order (one-key buckets).
    pub(crate) presorted: bool,
}

/// A file range the reader reads into one slot (pieces of at most the slot's capacity).
#[derive(Debug, Clone)]
pub(crate) struct ReadTask {
    pub(crate) path: PathBuf,
    pub(crate) bytes: u64,
    pub(crate) presorted: bool,
    /// Whether to read it with O_DIRECT.
    pub(crate) direct: bool,
    /// Remove the file once all of it is read (a bucket: its space is then free for the
    /// output).
    pub(crate) remove_when_read: bool,
}

/// Builds a read ring of `slots` slots of `slot_bytes` and its one consumer.
pub(crate) fn read_ring(
    name: &str,
    slots: usize,
    slot_bytes: usize,
) -> (Producer<Piece>, Consumer<Piece>) {
    let (producer, ring) = RingBuilder::new(slots)
        .name(name)
        .build_with(|| Piece {
            buf: AlignedBuf::new(slot_bytes),
            len: 0,
            presorted: false,
        })
        .expect("ring slots are a power of two");
    let mut consumer = ring.join(&format!("{name}-consumer"));
    consumer.set_batch_events_max(1);
    (producer, consumer)
}

/// Reads each task's file in pieces of `io_bytes` (aligned) into slots of up to their
/// capacity, one slot per piece. Stops early if `stop` is set.
pub(crate) fn read_files(
    mut producer: Producer<Piece>,
    tasks: &[ReadTask],
    io_bytes: usize,
    stop: &AtomicBool,
) -> Result<(), SortError> {
    for task in tasks {
        let file =
            open_read(&task.path, task.direct).map_err(|e| SortError::read(&task.path, e))?;
        let mut offset = 0u64;
        while offset < task.bytes {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let mut claim = producer.claim(1);
            let got = claim.with_slot(0, |piece| {
                let cap = piece.buf.capacity() as u64;
                let want = cap.min(task.bytes - offset) as usize;
                piece.presorted = task.presorted;
                piece.len = 0;
                let buf = piece.buf.as_mut_slice();
                while piece.len < want {
                    let end = (piece.len + io_bytes).min(buf.len());
                    let n =
                        read_full_at(&file, &mut buf[piece.len..end], offset + piece.len as u64)?;
                    if n == 0 {
                        break;
                    }
                    piece.len += n.min(want - piece.len);
                }
                Ok::<usize, std::io::Error>(piece.len)
            });
            let got = got.map_err(|e| SortError::read(&task.path, e))?;
            claim.publish();
            if got == 0 {
                return Err(SortError::InputChanged {
                    path: task.path.clone(),
                    expected_bytes: task.bytes,
                    read_bytes: offset,
                });
            }
            offset += got as u64;
        }
        if task.remove_when_read {
            drop(file);
            // Best effort: a bucket left here goes with the temporary directory at the end.
            let _ = std::fs::remove_file(&task.path);
        }
    }
    Ok(())
}

/// A buffer to write at `offset` of target file `target`.
#[derive(Debug, Default)]
pub(crate) struct WriteSlot {
    buf: AlignedBuf,
    len: usize,
    target: usize,
    offset: u64,
}

/// Builds a write ring of slots of `slot_bytes`.
pub(crate) fn write_ring(
    name: &str,
    slots: usize,
    slot_bytes: usize,
) -> (Producer<WriteSlot>, Consumer<WriteSlot>) {
    let (producer, ring) = RingBuilder::new(slots)
        .name(name)
        .build_with(|| WriteSlot {
            buf: AlignedBuf::new(slot_bytes),
            ..WriteSlot::default()
        })
        .expect("ring slots are a power of two");
    let mut consumer = ring.join(&format!("{name}-writer"));
    consumer.set_batch_events_max(1);
    (producer, consumer)
}

/// Writes every slot to its target (files created on first use); syncs them at the end if
/// `sync`. On error sets `stop` and leaves the ring (ungating the producer).
pub(crate) fn write_files(
    mut consumer: Consumer<WriteSlot>,
    targets: &[PathBuf],
    direct: bool,
    sync: bool,
    needed_bytes: u64,
    stop: &AtomicBool,
) -> Result<(), SortError> {
    let mut files: Vec<Option<WriteFile>> = (0..targets.len()).map(|_| None).collect();
    let result = (|| {
        while let Ok(batch) = consumer.wait_batch() {
            for i in 0..batch.len() {
                batch.with_event(i, |slot| {
                    let path = &targets[slot.target];
                    let file = match &mut files[slot.target] {
                        Some(f) => f,
                        empty => empty.insert(
                            WriteFile::create(path, direct)
                                .map_err(|e| SortError::write(path, needed_bytes, e))?,
                        ),
                    };
                    file.write_at(&slot.buf.as_slice()[..slot.len], slot.offset)
                        .map_err(|e| SortError::write(path, needed_bytes, e))
                })?;
            }
        }
        if sync {
            for (file, path) in files.iter().zip(targets) {
                if let Some(file) = file {
                    file.sync()
                        .map_err(|e| SortError::write(path, needed_bytes, e))?;
                }
            }
        }
        Ok(())
    })();
    if result.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    result
}

/// A staging buffer for one target file, filled byte-stream-wise and handed to the writer
/// whole (aligned) by swapping with a claimed slot.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    buf: AlignedBuf,
    len: usize,
    offset: u64,
}

impl Stage {
    /// Bytes given to this stage so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.offset + self.len as u64
    }

    /// Appends one record, sending every full buffer to the writer. A record that fits
    /// whole is copied as a fixed-size block (no call to `memmove` per record).
    #[inline]
    pub(crate) fn push_record(
        &mut self,
        out: &mut Producer<WriteSlot>,
        target: usize,
        stage_bytes: usize,
        record: &[u8; RECORD_BYTES],
    ) {
        if self.buf.capacity() - self.len >= RECORD_BYTES {
            let end = self.len + RECORD_BYTES;
            let dst: &mut [u8; RECORD_BYTES] = (&mut self.buf.as_mut_slice()[self.len..end])
                .try_into()
                .expect("a record's length");
            *dst = *record;
            self.len = end;
            if self.len == self.buf.capacity() {
                self.send(out, target);
            }
        } else {
            self.push(out, target, stage_bytes, record);
        }
    }

    /// Appends `bytes`, sending every full buffer to the writer.
    pub(crate) fn push(
        &mut self,
        out: &mut Producer<WriteSlot>,
        target: usize,
        stage_bytes: usize,
        mut bytes: &[u8],
    ) {
        while !bytes.is_empty() {
            if self.buf.capacity() == 0 {
                self.buf = AlignedBuf::new(stage_bytes);
            }
            let space = self.buf.capacity() - self.len;
            let n = space.min(bytes.len());
            self.buf.as_mut_slice()[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
            if self.len == self.buf.capacity() {
                self.send(out, target);
            }
        }
    }

    /// Sends what is staged (a partial buffer only at the end of the file).
    pub(crate) fn send(&mut self, out: &mut Producer<WriteSlot>, target: usize) {
        if self.len == 0 {
            return;
        }
        let mut claim = out.claim(1);
        claim.with_slot(0, |slot| {
            std::mem::swap(&mut slot.buf, &mut self.buf);
            slot.len = self.len;
            slot.target = target;
            slot.offset = self.offset;
        });
        claim.publish();
        self.offset += self.len as u64;
        self.len = 0;
    }
}

/// The path of temporary file `i` in `dir`.
pub(crate) fn bucket_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("bucket-{i:06}"))
}
