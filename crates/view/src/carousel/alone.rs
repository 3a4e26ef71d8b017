//! A demoted rider's own reader: a thread that holds one RocksDB iterator, and where it
//! stands, for as long as the rider stays demoted, and reads one chunk of whole items per
//! request from the rider.
//!
//! Why a thread: the iterator borrows the database, which the rider reaches only through
//! the carousel's `Arc<DiskView>`, and a struct cannot hold both an owner and a borrow of
//! it without `unsafe`; the thread owns its `Arc` and borrows from it on its own stack (as
//! a dedicated rider's worker does). What it replaces, one fresh iterator per chunk, read
//! storage many times over: each new iterator starts a new readahead of
//! `ITER_READAHEAD_BYTES` at its seek, and with direct reads nothing keeps the part the
//! chunk did not use, so every chunk (about 64 KiB of table data by default) cost a 2 MiB
//! read. A readahead of one chunk would not mend that: a chunk's budget counts key and
//! value bytes, not the compressed file bytes they take, and every new iterator still
//! reads again the blocks at its seek. One iterator kept across chunks reads each block
//! once, with the iteration's readahead.
//!
//! Consistency: the rider's cut is fixed at boarding, at or below the applied index then,
//! and the iterator is created after the demotion, so it sees every version at or below
//! the cut (a RocksDB iterator sees the database as of its creation); versions applied
//! since, above the cut, are dropped by the rider's filter. It never needs a refresh: a
//! refresh could only add versions above the cut. The thread stops when the rider rejoins,
//! finishes or is dropped, so the iterator pins table files no longer than a dedicated
//! iteration of the rest of the revolution would.
//!
//! One request at a time: before each chunk the rider decides whether to rejoin the ring
//! and where to stop (`policy::demoted_decision`); a reader that ran ahead would read what
//! the ring may already hold.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use rocksdb::{DBRawIteratorWithThreadMode, DB};

use super::encode::{skip_item, ChunkBuilder, Filter, ItemBuf, ScanPos};
use super::scanner::skip_kind;
use super::RiderShared;
use crate::disk::DiskView;
use crate::error::IterError;
use crate::iterate::scan_options;
use crate::keys;

/// One chunk read alone: frames, their count, and where the rider stands after them.
pub(crate) struct AloneChunk {
    pub buf: Vec<u8>,
    pub frames: u64,
    pub next: ScanPos,
    /// The chunk passed over one item too large to share (its prefix; `buf` is empty):
    /// the rider reads it itself before it goes on from `next`.
    pub large_item: Option<Vec<u8>>,
}

impl AloneChunk {
    /// The frames `builder` holds, the rider then standing at `next`.
    fn of(builder: ChunkBuilder, next: ScanPos) -> AloneChunk {
        AloneChunk {
            frames: builder.meta.frames,
            buf: builder.buf,
            next,
            large_item: None,
        }
    }
}

/// Read from `pos` towards `bound`.
struct Request {
    pos: ScanPos,
    bound: ScanPos,
}

/// The rider's handle on its reader thread. Dropping it stops the thread (and waits for
/// it, so the iterator is gone when the drop returns).
pub(crate) struct AloneReader {
    requests: Option<SyncSender<Request>>,
    replies: Receiver<Result<AloneChunk, IterError>>,
    thread: Option<JoinHandle<()>>,
}

impl AloneReader {
    /// Start the reader of a demoted rider; its iterator is opened on the thread.
    pub fn start(
        view: Arc<DiskView>,
        rider: Arc<RiderShared>,
        bounds: (usize, usize),
    ) -> Result<AloneReader, IterError> {
        let (requests, requests_rx) = sync_channel::<Request>(1);
        let (replies_tx, replies) = sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("demoted-rider".into())
            .spawn(move || serve(&view, &rider, bounds, &requests_rx, &replies_tx))
            .map_err(|e| IterError::CarouselFailed {
                reason: format!("cannot start a demoted rider's reader thread: {e}"),
            })?;
        Ok(AloneReader {
            requests: Some(requests),
            replies,
            thread: Some(thread),
        })
    }

    /// Blocking: about one chunk of whole items from `pos` towards `bound` (within one lap).
    pub fn read(&mut self, pos: ScanPos, bound: ScanPos) -> Result<AloneChunk, IterError> {
        let stopped = || IterError::CarouselFailed {
            reason: "a demoted rider's reader thread stopped".into(),
        };
        let requests = self.requests.as_ref().ok_or_else(stopped)?;
        requests
            .send(Request { pos, bound })
            .map_err(|_| stopped())?;
        self.replies.recv().map_err(|_| stopped())?
    }
}

impl Drop for AloneReader {
    fn drop(&mut self) {
        // The thread waits for a request (reads are synchronous): closing the channel ends it.
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("a demoted rider's reader thread panicked");
            }
        }
    }
}

/// The thread's body: one iterator over the rider's range, one chunk per request, until
/// the rider closes the channel or a read fails. `bounds`: the carousel's `chunk_bytes`
/// and `item_shared_bytes_max`.
fn serve(
    view: &DiskView,
    rider: &RiderShared,
    (chunk_bytes, item_bytes_max): (usize, usize),
    requests: &Receiver<Request>,
    replies: &SyncSender<Result<AloneChunk, IterError>>,
) {
    let range = rider.checked.range;
    let mut reader = Reader {
        view,
        filter: Filter::of(&rider.checked),
        floor: keys::hash_floor(range.lo()),
        chunk_bytes,
        item_bytes_max,
        it: view.db().raw_iterator_opt(scan_options(range)),
        at: None,
        item: ItemBuf::default(),
        large_at: None,
    };
    rider.iterators_opened.fetch_add(1, Ordering::Relaxed);
    while let Ok(req) = requests.recv() {
        let got = reader.read(&req.pos, &req.bound);
        let failed = got.is_err();
        if replies.send(got).is_err() || failed {
            return;
        }
    }
}

/// The iterator and where it stands.
struct Reader<'v> {
    view: &'v DiskView,
    filter: Filter,
    /// The first key of the rider's range.
    floor: Vec<u8>,
    chunk_bytes: usize,
    /// As the scanner: a larger item is not put in a chunk but read by the rider itself.
    item_bytes_max: usize,
    /// Bounded to the rider's range (`scan_options`).
    it: DBRawIteratorWithThreadMode<'v, DB>,
    /// The position the iterator stands on (on the first key of the first item at or
    /// after it); `None`: it must seek.
    at: Option<ScanPos>,
    item: ItemBuf,
    /// The item found too large where the last chunk ended (the next read passes over it).
    large_at: Option<Vec<u8>>,
}

impl Reader<'_> {
    /// Read from `pos` towards `bound` (within one lap) about one chunk of whole items.
    fn read(&mut self, pos: &ScanPos, bound: &ScanPos) -> Result<AloneChunk, IterError> {
        let view = self.view;
        let limit = bound.clone().min(pos.lap_end());
        // Where this read must stop within the lap (the range's end bounds the iterator).
        let stop = (limit.lap == pos.lap).then_some(limit.key.as_slice());
        let lower = pos.key.as_slice().max(self.floor.as_slice());
        let mut builder = ChunkBuilder::new(
            self.filter.clone(),
            super::chunk_capacity_bytes(self.chunk_bytes),
        );
        if stop.is_some_and(|s| s <= lower) {
            return Ok(AloneChunk {
                buf: Vec::new(),
                frames: 0,
                next: limit,
                large_item: None,
            });
        }
        if let Some(prefix) = self.large_at.take().filter(|p| *p == pos.key) {
            return self.pass_large(prefix, pos, &limit);
        }
        if self.at.as_ref() != Some(pos) {
            self.it.seek(lower);
        }
        self.at = None;
        let (mut raw_bytes, mut items) = (0usize, 0u64);
        loop {
            let Some(key) = self.it.key() else {
                self.it.status().map_err(crate::disk::db_err(view.dir()))?;
                break;
            };
            let parts =
                keys::split_key(key).ok_or_else(|| view.corrupt(format!("bad key {key:?}")))?;
            let full = raw_bytes >= self.chunk_bytes || builder.buf.len() >= self.chunk_bytes;
            if stop.is_some_and(|s| parts.prefix >= s) {
                // Nothing lies between the limit and the iterator's item.
                self.at = Some(limit.clone());
                break;
            }
            if items > 0 && full {
                let next = ScanPos {
                    lap: pos.lap,
                    key: parts.prefix.to_vec(),
                };
                self.at = Some(next.clone());
                return Ok(AloneChunk::of(builder, next));
            }
            if !self.filter.kinds.allows(parts.kind) {
                let (hash, kind) = (parts.hash, parts.kind);
                if !skip_kind(&mut self.it, hash, kind) {
                    break;
                }
                continue;
            }
            self.item.start(&parts, view)?;
            let mark = builder.mark();
            let builders = std::slice::from_mut(&mut builder);
            if !self
                .item
                .read_into(&mut self.it, view, builders, self.item_bytes_max)?
            {
                builder.rollback(mark);
                let prefix = std::mem::take(&mut self.item.prefix);
                if items == 0 {
                    return self.pass_large(prefix, pos, &limit);
                }
                // The iterator stands inside the item (`at` stays `None`).
                let next = ScanPos {
                    lap: pos.lap,
                    key: prefix.clone(),
                };
                self.large_at = Some(prefix);
                return Ok(AloneChunk::of(builder, next));
            }
            raw_bytes += self.item.raw_bytes;
            items += 1;
        }
        Ok(AloneChunk::of(builder, limit))
    }

    /// Pass over the item at `pos` (whose prefix is `prefix`), too large to share: the
    /// rider reads it itself.
    fn pass_large(
        &mut self,
        prefix: Vec<u8>,
        pos: &ScanPos,
        limit: &ScanPos,
    ) -> Result<AloneChunk, IterError> {
        let stop = (limit.lap == pos.lap).then_some(limit.key.as_slice());
        let next = skip_item(&mut self.it, self.view, &prefix)?;
        let next = match next {
            Some(next) if stop.is_none_or(|s| next.as_slice() < s) => {
                let next = ScanPos {
                    lap: pos.lap,
                    key: next,
                };
                self.at = Some(next.clone());
                next
            }
            // Nothing lies between the limit and the iterator's item.
            Some(_) => {
                self.at = Some(limit.clone());
                limit.clone()
            }
            None => {
                self.at = None;
                limit.clone()
            }
        };
        Ok(AloneChunk {
            buf: Vec::new(),
            frames: 0,
            next,
            large_item: Some(prefix),
        })
    }
}
