//! The single background writer: drains every queued operation, appends their records to the
//! active volume, syncs once for the whole batch (group commit), then publishes the batch to
//! the catalog and wakes the waiters. Operations queued while a sync runs form the next batch;
//! there are no timers, so a lone put waits for exactly one sync.
//!
//! A failed write or sync is sticky: the writer stops, every waiting and later operation gets
//! `WriterFailed`, and the store must be reopened (recovery then cuts any torn tail).

use std::collections::HashMap;
use std::fs::File;
use std::io::{IoSlice, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::catalog::Loc;
use crate::error::{ChunkError, Result};
use crate::format::{HintEntry, RecordHeader, RecordKind};
use crate::id::ChunkId;
use crate::policy;
use crate::store::Shared;
use crate::volume;

/// What an operation asks the writer to do.
#[derive(Debug)]
pub(crate) enum OpKind {
    /// Append the chunk unless it is already live.
    Put { data: Arc<[u8]> },
    /// Append a tombstone if the chunk is live.
    Delete,
    /// Compaction: copy a live chunk out of a volume being emptied, if it is still there.
    Relocate { from: Loc, data: Arc<[u8]> },
    /// Compaction: carry a tombstone forward, unless the chunk was put again meanwhile.
    KeepTombstone,
}

/// One queued operation.
#[derive(Debug)]
pub(crate) struct Op {
    pub seq: u64,
    pub id: ChunkId,
    pub kind: OpKind,
    /// Bytes this op holds in the write buffer until it is durable.
    pub buffer_bytes: u64,
    /// Space reserved for it by the space check, released once it is on disk.
    pub reserved_bytes: u64,
}

/// The volume being appended to. Owned by the writer thread.
#[derive(Debug)]
pub(crate) struct Active {
    pub number: u32,
    pub file: File,
    pub len: u64,
    pub entries: Vec<HintEntry>,
}

/// Run the writer until the store closes or a write fails.
pub(crate) fn run(shared: Arc<Shared>, mut active: Active) {
    loop {
        let batch = {
            let mut q = shared.queue.lock();
            while q.ops.is_empty() && !q.closing {
                shared.queue_cv.wait(&mut q);
            }
            if q.ops.is_empty() {
                break;
            }
            std::mem::take(&mut q.ops)
        };
        match write_batch(&shared, &mut active, &batch) {
            Ok((deleted, sealed)) => {
                // A delete adds garbage; a seal makes a volume eligible for compaction.
                // Before the waiters wake, so a caller that sees its delete done can rely on
                // the compactor having been asked.
                if sealed || deleted.iter().any(|&(_, d)| d) {
                    shared.want_compaction();
                }
                publish(&shared, &batch, deleted);
            }
            Err(e) => {
                fail(&shared, e.to_string());
                return;
            }
        }
    }
    if let Err(e) = close_active(&shared, &active) {
        fail(&shared, e.to_string());
    }
}

fn fail(shared: &Shared, reason: String) {
    let mut q = shared.queue.lock();
    q.failed.get_or_insert(reason);
    shared.done_cv.notify_all();
}

fn publish(shared: &Shared, batch: &[Op], deleted: Vec<(u64, bool)>) {
    let mut q = shared.queue.lock();
    for op in batch {
        if matches!(op.kind, OpKind::Put { .. })
            && q.buffered
                .get(&op.id)
                .is_some_and(|(_, seq)| *seq == op.seq)
        {
            q.buffered.remove(&op.id);
        }
        q.buffer_bytes -= op.buffer_bytes;
        q.reserved_bytes -= op.reserved_bytes;
    }
    q.durable_seq = batch.last().map_or(q.durable_seq, |op| op.seq);
    q.deleted.extend(deleted);
    shared.done_cv.notify_all();
}

/// Records written but not yet published to the catalog.
struct Pending {
    applied: Vec<(u32, HintEntry)>,
    unsynced: bool,
    sealed: bool,
}

/// Append the batch's records, sync, and apply them to the catalog. Returns the outcome of
/// each delete and whether a volume was sealed.
fn write_batch(
    shared: &Shared,
    active: &mut Active,
    batch: &[Op],
) -> Result<(Vec<(u64, bool)>, bool)> {
    let mut overlay: HashMap<ChunkId, Option<Loc>> = HashMap::new();
    let mut pending = Pending {
        applied: Vec::with_capacity(batch.len()),
        unsynced: false,
        sealed: false,
    };
    let mut deleted = Vec::new();
    for op in batch {
        let live = match overlay.get(&op.id) {
            Some(l) => *l,
            None => shared.catalog.read().index.get(&op.id).copied(),
        };
        let loc = match &op.kind {
            OpKind::Put { data } if live.is_none() => Some(append(
                shared,
                active,
                &mut pending,
                RecordHeader::put(op.id, data),
                data,
            )?),
            OpKind::Relocate { from, data } if live == Some(*from) => Some(append(
                shared,
                active,
                &mut pending,
                RecordHeader::put(op.id, data),
                data,
            )?),
            OpKind::Delete | OpKind::KeepTombstone if live.is_none() => {
                if matches!(op.kind, OpKind::Delete) {
                    deleted.push((op.seq, false));
                    continue;
                }
                append(
                    shared,
                    active,
                    &mut pending,
                    RecordHeader::tombstone(op.id),
                    &[],
                )?;
                None
            }
            OpKind::Delete => {
                append(
                    shared,
                    active,
                    &mut pending,
                    RecordHeader::tombstone(op.id),
                    &[],
                )?;
                deleted.push((op.seq, true));
                None
            }
            OpKind::Put { .. } | OpKind::Relocate { .. } | OpKind::KeepTombstone => continue,
        };
        overlay.insert(op.id, loc);
    }
    sync(shared, active, &mut pending)?;
    apply(shared, &mut pending, None);
    Ok((deleted, pending.sealed))
}

fn append(
    shared: &Shared,
    active: &mut Active,
    pending: &mut Pending,
    header: RecordHeader,
    data: &[u8],
) -> Result<Loc> {
    let record_len = header.record_len();
    if policy::should_seal(active.len, record_len, shared.opts.volume_bytes_max) {
        seal_and_roll(shared, active, pending)?;
    }
    let path = crate::format::volume_path(&shared.dir, active.number);
    let encoded = header.encode();
    let mut bufs = [IoSlice::new(&encoded), IoSlice::new(data)];
    let mut slices = &mut bufs[..];
    while !slices.is_empty() {
        let n = active
            .file
            .write_vectored(slices)
            .map_err(|e| ChunkError::io("append to volume", &path, e))?;
        if n == 0 {
            let e = std::io::Error::new(std::io::ErrorKind::WriteZero, "volume write returned 0");
            return Err(ChunkError::io("append to volume", &path, e));
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    let entry = HintEntry {
        id: header.id,
        offset: active.len,
        len: header.len,
        kind: header.kind,
    };
    active.len += record_len;
    active.entries.push(entry);
    pending.applied.push((active.number, entry));
    pending.unsynced = true;
    debug_assert!(header.kind == RecordKind::Tombstone || data.len() == header.len as usize);
    Ok(Loc {
        volume: active.number,
        offset: entry.offset,
        len: header.len,
    })
}

fn sync(shared: &Shared, active: &mut Active, pending: &mut Pending) -> Result<()> {
    if pending.unsynced {
        fail::fail_point!("chunk-writer-before-sync");
        fail::fail_point!("chunk-writer-sync", |_| Err(ChunkError::io(
            "sync volume",
            crate::format::volume_path(&shared.dir, active.number),
            std::io::Error::other("injected sync failure"),
        )));
        shared.syncs.fetch_add(1, Ordering::Relaxed);
        let dir = &shared.dir;
        active.file.sync_data().map_err(|e| {
            ChunkError::io(
                "sync volume",
                crate::format::volume_path(dir, active.number),
                e,
            )
        })?;
        pending.unsynced = false;
    }
    Ok(())
}

/// Publish durable records to the catalog; optionally mark a volume sealed with its hint size.
fn apply(shared: &Shared, pending: &mut Pending, sealed: Option<(u32, u64)>) {
    let mut cat = shared.catalog.write();
    for (volume, entry) in pending.applied.drain(..) {
        cat.apply(volume, &entry);
    }
    if let Some((volume, hint_bytes)) = sealed {
        let stats = cat
            .volumes
            .get_mut(&volume)
            .expect("sealing a known volume");
        stats.sealed = true;
        stats.hint_bytes = hint_bytes;
    }
}

/// Sync and seal the active volume (hint file written), then start the next one. Records of
/// the sealed volume reach the catalog before it is marked sealed, so compaction never sees a
/// sealed volume whose records are not all in the index.
fn seal_and_roll(shared: &Shared, active: &mut Active, pending: &mut Pending) -> Result<()> {
    sync(shared, active, pending)?;
    let hint_bytes = volume::write_hint(&shared.dir, active.number, active.len, &active.entries)?;
    apply(shared, pending, Some((active.number, hint_bytes)));
    pending.sealed = true;
    let next = active.number + 1;
    let (file, reader) = volume::create_volume(&shared.dir, next)?;
    shared
        .catalog
        .write()
        .add_volume(next, Some(Arc::new(reader)));
    *active = Active {
        number: next,
        file,
        len: crate::format::VOLUME_HEADER_LEN,
        entries: Vec::new(),
    };
    Ok(())
}

/// On a clean close, write a hint for the active volume so the next open reads no volume.
fn close_active(shared: &Shared, active: &Active) -> Result<()> {
    let path = crate::format::volume_path(&shared.dir, active.number);
    active
        .file
        .sync_data()
        .map_err(|e| ChunkError::io("sync volume", &path, e))?;
    let hint_bytes = volume::write_hint(&shared.dir, active.number, active.len, &active.entries)?;
    if let Some(s) = shared.catalog.write().volumes.get_mut(&active.number) {
        s.hint_bytes = hint_bytes;
    }
    Ok(())
}
