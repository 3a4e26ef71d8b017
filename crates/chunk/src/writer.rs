//! The single background writer and its syncer. The writer drains every queued operation,
//! decides each against the index (plus what it wrote but is not yet durable) and appends the
//! records to the active volume of the chunk's lane (`format::lane_of`), handing what it
//! wrote to the syncers every `HANDOFF_BYTES` and at the end of each drain. A syncer takes
//! every record written so far and syncs each volume they wrote to once, all of them at the
//! same time (group commit), through handles of its own; up to `syncs_in_flight_max` syncers
//! run at once. What they synced is published to the catalog, and its waiters woken, in the
//! order it was taken, by whichever syncer finds it publishable (see `run_syncer`). Several
//! active volumes exist because concurrent `fdatasync`s of one file wait for each other, while
//! those of different files proceed together (docs/benchmarks/chunks.md). So the page-cache
//! copy of one batch overlaps the sync of the previous ones, and there are no timers: a lone
//! put waits for exactly one sync.
//!
//! A failed write or sync (or a panic of the writer or a syncer) is sticky: the writer stops,
//! the syncers stop once they have synced what was handed to them (a failed sync stops them
//! at once), every waiting operation not made durable and every later one gets
//! `WriterFailed`, and the store must be reopened (recovery then cuts any torn tail).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use std::path::Path;

use spindle_fs::{Fs, FsFile};

use crate::catalog::Loc;
use crate::error::{ChunkError, Result};
use crate::format::{self, HintEntry, RecordHeader, RecordKind, VolumeHeader};
use crate::id::ChunkId;
use crate::policy;
use crate::store::{Failure, Shared};
use crate::volume::{self, VolumeFile};

/// What an operation asks the writer to do.
#[derive(Debug)]
pub(crate) enum OpKind {
    /// Append the chunk unless it is already live.
    Put { header: RecordHeader, data: Bytes },
    /// Append a tombstone if the chunk is live.
    Delete,
    /// Compaction: copy a live chunk out of a volume being emptied, if it is still there.
    Relocate {
        from: Loc,
        header: RecordHeader,
        data: Bytes,
    },
    /// Compaction: carry a tombstone forward, unless the chunk was put again meanwhile.
    KeepTombstone,
    /// A put did not fit: seal every active volume holding records of deleted chunks, so
    /// that compaction may rewrite it (only sealed volumes are). Writes no record.
    SealForSpace,
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

/// A volume being appended to. Owned by the writer thread.
#[derive(Debug)]
pub(crate) struct Active {
    pub number: u32,
    pub file: Arc<dyn FsFile>,
    pub len: u64,
    pub entries: Vec<HintEntry>,
    /// One handle per syncer, opened before this process first appends here (see
    /// `run_syncer`).
    pub sync_handles: Option<SyncHandles>,
}

/// A volume's handles for its syncers, indexed by syncer.
pub(crate) type SyncHandles = Arc<[Arc<dyn FsFile>]>;

/// The volumes being appended to, one per lane of the current generation. Owned by the
/// writer thread.
#[derive(Debug)]
pub(crate) struct Lanes {
    /// Number of the generation's first volume.
    pub generation: u32,
    /// Indexed by lane.
    pub active: Vec<Active>,
    /// The number the next volume gets: above every volume of the store, so a lane's
    /// volumes are numbered in the order they are written.
    pub next_volume: u32,
}

/// Records written by the writer, waiting for the syncer.
#[derive(Debug)]
struct Written {
    number: u64,
    /// The volumes its records went to, with their syncers' handles.
    volumes: Vec<(u32, SyncHandles)>,
    ops: Vec<Op>,
    entries: Vec<(u32, HintEntry)>,
    deleted: Vec<(u64, bool)>,
    sealed: bool,
}

/// The hand-off between writer and syncers.
#[derive(Debug, Default)]
struct PipeState {
    written: Vec<Written>,
    /// Handed to each syncer with the batches it takes, in batch order.
    next_ticket: u64,
    /// The last ticket whose batches are published; publication follows ticket order.
    published_ticket: u64,
    /// Tickets taken by a syncer and not yet published.
    taken: BTreeMap<u64, Taken>,
    /// A syncer is publishing (one at a time, so publication follows ticket order); what it
    /// publishes may have left `taken` already.
    publishing: bool,
    stop: bool,
    failed: bool,
}

/// What one syncer took.
#[derive(Debug)]
struct Taken {
    batches: Vec<Written>,
    /// Its sync returned success.
    synced: bool,
}

#[derive(Debug, Default)]
struct Pipe {
    state: Mutex<PipeState>,
    cv: Condvar,
    /// Where written-but-not-yet-published chunks are (`None`: deleted), with the number of
    /// the batch that wrote them, so the writer decides against the newest state.
    inflight: Mutex<HashMap<ChunkId, (Option<Loc>, u64)>>,
}

/// Run the writer (and its syncers) until the store closes or a write or sync fails.
pub(crate) fn run(shared: Arc<Shared>, mut lanes: Lanes) {
    let pipe = Pipe::default();
    std::thread::scope(|s| {
        for i in 0..shared.opts.syncs_in_flight_max {
            let (shared_ref, pipe_ref) = (&*shared, &pipe);
            let syncer = std::thread::Builder::new()
                .name(format!("chunk-syncer-{i}"))
                .spawn_scoped(s, move || {
                    let run = std::panic::AssertUnwindSafe(|| run_syncer(shared_ref, pipe_ref, i));
                    if let Err(payload) = std::panic::catch_unwind(run) {
                        record_failure(shared_ref, &panicked("a syncer", payload.as_ref()));
                        pipe_ref.state.lock().failed = true;
                        pipe_ref.cv.notify_all();
                    }
                });
            if let Err(e) = syncer {
                record_failure(
                    &shared,
                    &ChunkError::io("spawn syncer thread", &shared.dir, e),
                );
                pipe.state.lock().stop = true;
                pipe.cv.notify_all();
                return;
            }
        }
        // A panic (a broken invariant) is a failure like a failed write: sticky, and every
        // waiting put is told, instead of waiting for a writer that is gone.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            write_loop(&shared, &pipe, &mut lanes)
                .and_then(|()| wait_drained(&pipe))
                .and_then(|()| close_active(&shared, &lanes))
        }))
        .unwrap_or_else(|payload| Err(panicked("the writer", payload.as_ref())));
        if let Err(e) = result {
            record_failure(&shared, &e);
        }
        pipe.state.lock().stop = true;
        pipe.cv.notify_all();
    });
}

/// Bytes of records after which the writer hands what it wrote to the syncers without
/// waiting for the end of the queue it drains (or a quarter of the write buffer, if less).
/// Measured with 1 MiB chunks from 16 writers: 1,619 and 1,634 MB/s against 1,330 and 1,373
/// for one hand-off per drain (docs/benchmarks/chunks.md, "Handing records to the syncers
/// sooner").
const HANDOFF_BYTES: u64 = 256 << 10;

fn write_loop(shared: &Shared, pipe: &Pipe, lanes: &mut Lanes) -> Result<()> {
    let lane_count = u16::try_from(lanes.active.len()).expect("at most 64 lanes");
    let handoff_bytes = HANDOFF_BYTES
        .min(shared.opts.write_buffer_bytes_max / 4)
        .max(1);
    let mut batch_number = 0u64;
    loop {
        let batch = {
            let mut q = shared.queue.lock();
            while q.ops.is_empty() && !q.closing {
                shared.queue_cv.wait(&mut q);
            }
            if q.ops.is_empty() {
                return Ok(());
            }
            std::mem::take(&mut q.ops)
        };
        batch_number += 1;
        let mut cur = Written::new(batch_number);
        let mut unhanded_bytes = 0u64;
        for op in batch {
            if matches!(op.kind, OpKind::SealForSpace) {
                // Everything written so far is published first: a volume is sealed only
                // when the catalog knows all of it, and only then does it tell dead records.
                batch_number += 1;
                let next = Written::new(batch_number);
                hand_off(pipe, std::mem::replace(&mut cur, next))?;
                unhanded_bytes = 0;
                wait_drained(pipe)?;
                for lane in 0..lanes.active.len() {
                    let number = lanes.active[lane].number;
                    let dead = shared
                        .catalog
                        .read()
                        .volumes
                        .get(&number)
                        .map_or(0, |s| s.dead_put_bytes());
                    if dead > 0 {
                        seal_and_roll(shared, lanes, lane)?;
                        cur.sealed = true;
                    }
                }
                cur.ops.push(op);
                continue;
            }
            let live = match pipe.inflight.lock().get(&op.id) {
                Some(&(loc, _)) => loc,
                None => shared.catalog.read().index.get(&op.id).copied(),
            };
            let record = match &op.kind {
                OpKind::Put { header, .. } if live.is_none() => Some(*header),
                OpKind::Relocate { from, header, .. } if live == Some(*from) => Some(*header),
                OpKind::Delete => live.map(|_| RecordHeader::tombstone(op.id)),
                OpKind::KeepTombstone if live.is_none() => Some(RecordHeader::tombstone(op.id)),
                OpKind::Put { .. }
                | OpKind::Relocate { .. }
                | OpKind::KeepTombstone
                | OpKind::SealForSpace => None,
            };
            if let Some(header) = record {
                let lane = usize::from(format::lane_of(&op.id, lane_count));
                if policy::should_seal(
                    lanes.active[lane].len,
                    header.record_len(),
                    shared.opts.volume_bytes_max,
                ) {
                    batch_number += 1;
                    let next = Written::new(batch_number);
                    hand_off(pipe, std::mem::replace(&mut cur, next))?;
                    unhanded_bytes = 0;
                    wait_drained(pipe)?;
                    seal_and_roll(shared, lanes, lane)?;
                    cur.sealed = true;
                }
                let active = &mut lanes.active[lane];
                let handles = sync_handles(shared, active)?;
                let data: &[u8] = match &op.kind {
                    OpKind::Put { data, .. } | OpKind::Relocate { data, .. } => data,
                    OpKind::Delete | OpKind::KeepTombstone | OpKind::SealForSpace => &[],
                };
                let entry = append(shared, active, header, data)?;
                unhanded_bytes += header.record_len();
                let loc = (header.kind == RecordKind::Put).then_some(Loc {
                    volume: active.number,
                    offset: entry.offset,
                    len: entry.len,
                });
                pipe.inflight.lock().insert(op.id, (loc, cur.number));
                if !cur.volumes.iter().any(|(n, _)| *n == active.number) {
                    cur.volumes.push((active.number, handles));
                }
                cur.entries.push((active.number, entry));
            }
            // After any seal above, so the outcome travels with the op's own batch.
            if matches!(op.kind, OpKind::Delete) {
                cur.deleted.push((op.seq, live.is_some()));
            }
            cur.ops.push(op);
            // Once `handoff_bytes` of records are written, they go to the syncers at once: a
            // sync can start while the rest of the queue is still being written. Small records
            // still go in one batch per drain, so they share syncs.
            if unhanded_bytes >= handoff_bytes {
                unhanded_bytes = 0;
                batch_number += 1;
                let next = Written::new(batch_number);
                hand_off(pipe, std::mem::replace(&mut cur, next))?;
            }
        }
        hand_off(pipe, cur)?;
    }
}

impl Written {
    fn new(number: u64) -> Self {
        Self {
            number,
            volumes: Vec::new(),
            ops: Vec::new(),
            entries: Vec::new(),
            deleted: Vec::new(),
            sealed: false,
        }
    }
}

fn hand_off(pipe: &Pipe, written: Written) -> Result<()> {
    let mut st = pipe.state.lock();
    if st.failed {
        return Err(ChunkError::WriterFailed {
            reason: "the syncer failed".into(),
            disk_full: false,
        });
    }
    if !written.ops.is_empty() {
        st.written.push(written);
        pipe.cv.notify_all();
    }
    Ok(())
}

/// Wait until everything written is synced and published.
fn wait_drained(pipe: &Pipe) -> Result<()> {
    let mut st = pipe.state.lock();
    while (!st.written.is_empty() || !st.taken.is_empty() || st.publishing) && !st.failed {
        pipe.cv.wait(&mut st);
    }
    if st.failed {
        return Err(ChunkError::WriterFailed {
            reason: "the syncer failed".into(),
            disk_full: false,
        });
    }
    Ok(())
}

/// A syncer takes every batch written so far and syncs the volumes they wrote to. Several
/// syncers may sync at once (`syncs_in_flight_max`), which keeps the disk's queue deeper;
/// batches are published strictly in the order they were taken, so acknowledgements and the
/// catalog follow the log order. A syncer does not wait for that order: whichever finds the
/// next tickets publishable publishes them, and the others go back to syncing what was
/// written meanwhile.
///
/// Each syncer syncs through handles of its own, opened before any record of the volume was
/// written (`sync_handles`). Linux reports a failed write-back once to each open file
/// (`errseq`): through a handle shared by several syncers, a sync that ran beside another
/// could return success while the other was handed the error for its pages. Through its own
/// handle, a sync that returns success has found every page written before it began on the
/// disk, and the rule that held a ticket until every sync begun before its own returned is
/// not needed. A ticket is published once its own sync returned success (and, publication
/// being in order, every earlier ticket's did): never on a later sync's word alone, though
/// that sync began after its records were written, because a file system may report some
/// errors (a failed journal commit) to one sync only.
fn run_syncer(shared: &Shared, pipe: &Pipe, syncer: usize) {
    loop {
        let (ticket, files) = {
            let mut st = pipe.state.lock();
            while st.written.is_empty() && !st.stop && !st.failed {
                pipe.cv.wait(&mut st);
            }
            if st.written.is_empty() || st.failed {
                return;
            }
            st.next_ticket += 1;
            let ticket = st.next_ticket;
            let batches = std::mem::take(&mut st.written);
            let mut files: Vec<(u32, Arc<dyn FsFile>)> = Vec::new();
            for (v, handles) in batches.iter().flat_map(|b| &b.volumes) {
                if !files.iter().any(|(n, _)| n == v) {
                    files.push((*v, Arc::clone(&handles[syncer])));
                }
            }
            st.taken.insert(
                ticket,
                Taken {
                    batches,
                    synced: false,
                },
            );
            (ticket, files)
        };
        let synced = sync_volumes(shared, &files);
        let mut st = pipe.state.lock();
        if let Err(e) = synced {
            record_failure(shared, &e);
            st.failed = true;
            pipe.cv.notify_all();
            return;
        }
        st.taken
            .get_mut(&ticket)
            .expect("a taken ticket stays until published")
            .synced = true;
        pipe.cv.notify_all();
        if st.publishing {
            continue;
        }
        st.publishing = true;
        while !st.failed {
            let next = st.published_ticket + 1;
            if !st.taken.get(&next).is_some_and(|t| t.synced) {
                break;
            }
            let batches = st.taken.remove(&next).expect("looked up above").batches;
            drop(st);
            publish_batches(shared, pipe, batches);
            st = pipe.state.lock();
            st.published_ticket = next;
            pipe.cv.notify_all();
        }
        st.publishing = false;
        pipe.cv.notify_all();
        if st.failed {
            return;
        }
    }
}

/// Sync each of `files` once, all at the same time: one on this thread, each other one on a
/// thread of its own (a sync takes milliseconds; starting a thread, microseconds). A thread
/// the system refuses to start is made up for by a sync on this thread.
fn sync_volumes(shared: &Shared, files: &[(u32, Arc<dyn FsFile>)]) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    shared.group_commits.fetch_add(1, Ordering::Relaxed);
    let (first, rest) = files.split_first().expect("not empty");
    std::thread::scope(|s| {
        let mut others = Vec::with_capacity(rest.len());
        let mut here = vec![first];
        for f in rest {
            let (volume, file) = (f.0, &f.1);
            match std::thread::Builder::new()
                .name("chunk-volume-sync".into())
                .spawn_scoped(s, move || sync_file(shared, file, volume))
            {
                Ok(t) => others.push(t),
                Err(_) => here.push(f),
            }
        }
        let mut result = Ok(());
        for (volume, file) in here {
            result = result.and_then(|()| sync_file(shared, file, *volume));
        }
        for t in others {
            let r = t.join().unwrap_or_else(|_| {
                Err(ChunkError::WriterFailed {
                    reason: "a volume sync thread panicked".into(),
                    disk_full: false,
                })
            });
            result = result.and(r);
        }
        result
    })
}

/// Replay synced batches into the catalog and wake their waiters.
fn publish_batches(shared: &Shared, pipe: &Pipe, batches: Vec<Written>) {
    {
        let mut cat = shared.catalog.write();
        for b in &batches {
            for (volume, entry) in &b.entries {
                cat.apply(*volume, entry);
            }
        }
    }
    let last = batches.last().map_or(0, |b| b.number);
    pipe.inflight.lock().retain(|_, (_, n)| *n > last);
    // Ask the compactor before the waiters wake, so a caller that sees its delete done can
    // rely on the compactor having been asked. A delete adds garbage; a seal makes a volume
    // eligible.
    if batches
        .iter()
        .any(|b| b.sealed || b.deleted.iter().any(|&(_, d)| d))
    {
        shared.want_compaction();
    }
    for b in batches {
        publish(shared, &b.ops, b.deleted);
    }
}

/// The failure a panic of `who` becomes, with the panic's message.
pub(crate) fn panicked(who: &str, payload: &(dyn std::any::Any + Send)) -> ChunkError {
    ChunkError::WriterFailed {
        reason: format!("{who} panicked: {}", panic_message(payload)),
        disk_full: false,
    }
}

/// A panic's message, if it has one.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Make the first failure sticky and wake every waiter. Chunks still in the write buffer
/// will never be durable, so they stop being readable: `has` and `get` answer only for what
/// was acknowledged (or, before a failure, is on its way to be).
pub(crate) fn record_failure(shared: &Shared, e: &ChunkError) {
    let mut q = shared.queue.lock();
    q.failed.get_or_insert_with(|| Failure {
        reason: e.to_string(),
        disk_full: e.is_disk_full(),
    });
    q.buffered.clear();
    let parked = std::mem::take(&mut q.waiters);
    shared.done_cv.notify_all();
    drop(q);
    for (_, thread) in parked {
        thread.unpark();
    }
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
    // Wake only the waiters this made durable (`Queue::waiters`); the condvar is for those
    // waiting for room in the write buffer.
    let durable = q.durable_seq;
    let mut ready = Vec::new();
    q.waiters.retain(|(seq, thread)| {
        let done = *seq <= durable;
        if done {
            ready.push(thread.clone());
        }
        !done
    });
    shared.done_cv.notify_all();
    drop(q);
    for thread in ready {
        thread.unpark();
    }
}

/// The syncers' handles of `active`, opened now if this process has not appended to it yet:
/// before any record of it is written, so that a failed write-back of one is reported through
/// every one of them (a handle opened after a failure that some sync already reported would
/// not be told).
fn sync_handles(shared: &Shared, active: &mut Active) -> Result<SyncHandles> {
    if let Some(h) = &active.sync_handles {
        return Ok(Arc::clone(h));
    }
    let path = format::volume_path(&shared.dir, active.number);
    let handles = (0..shared.opts.syncs_in_flight_max)
        .map(|_| shared.fs.open(&path))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| ChunkError::io("open volume to sync", &path, e))?;
    let handles: SyncHandles = handles.into();
    active.sync_handles = Some(Arc::clone(&handles));
    Ok(handles)
}

/// Append one record to the active volume (not synced).
fn append(
    shared: &Shared,
    active: &mut Active,
    header: RecordHeader,
    data: &[u8],
) -> Result<HintEntry> {
    let path = crate::format::volume_path(&shared.dir, active.number);
    let encoded = header.encode();
    // "torn": half a header reaches the file first, as a short write before an error would.
    // "full": the error is ENOSPC.
    ::fail::fail_point!("chunk-writer-append", |arg: Option<String>| {
        if arg.as_deref() == Some("torn") {
            let half = &encoded[..encoded.len() / 2];
            let _ = active.file.write_all_at(half, active.len);
        }
        let e = match arg.as_deref() {
            Some("full") => std::io::Error::from(std::io::ErrorKind::StorageFull),
            _ => std::io::Error::other("injected write failure"),
        };
        Err(ChunkError::io("append to volume", &path, e))
    });
    active
        .file
        .write_all_vectored_at(&[&encoded, data], active.len)
        .map_err(|e| ChunkError::io("append to volume", &path, e))?;
    let entry = HintEntry {
        id: header.id,
        offset: active.len,
        len: header.len,
        kind: header.kind,
    };
    active.len += header.record_len();
    active.entries.push(entry);
    Ok(entry)
}

fn sync_file(shared: &Shared, file: &Arc<dyn FsFile>, volume: u32) -> Result<()> {
    let path = || crate::format::volume_path(&shared.dir, volume);
    ::fail::fail_point!("chunk-writer-before-sync");
    ::fail::fail_point!("chunk-writer-sync", |_| Err(ChunkError::io(
        "sync volume",
        path(),
        std::io::Error::other("injected sync failure"),
    )));
    shared.syncs.fetch_add(1, Ordering::Relaxed);
    file.sync_data()
        .map_err(|e| ChunkError::io("sync volume", path(), e))
}

/// Seal the active volume of `lane` (everything in it is already synced and published): write
/// its hint, mark it sealed, then start the lane's next volume.
fn seal_and_roll(shared: &Shared, lanes: &mut Lanes, lane: usize) -> Result<()> {
    let active = &lanes.active[lane];
    // Nothing appends to it any more: give back the blocks reserved past its end.
    let _ = active.file.unreserve();
    let hint_bytes = write_active_hint(shared, active)?;
    {
        let mut cat = shared.catalog.write();
        let stats = cat
            .volumes
            .get_mut(&active.number)
            .expect("sealing a known volume");
        assert_eq!(
            stats.bytes, active.len,
            "a volume is sealed only when fully published"
        );
        stats.sealed = true;
        stats.hint_bytes = hint_bytes;
    }
    let header = VolumeHeader {
        number: lanes.next_volume,
        generation: lanes.generation,
        lane: u16::try_from(lane).expect("at most 64 lanes"),
        lanes: u16::try_from(lanes.active.len()).expect("at most 64 lanes"),
        unsynced_window: shared.opts.write_buffer_bytes_max,
    };
    let (active, reader) = start_volume(&*shared.fs, &shared.dir, header)?;
    reserve_volume(&active, shared.opts.volume_bytes_max);
    shared
        .catalog
        .write()
        .add_volume(header.number, Some(reader));
    lanes.active[lane] = active;
    lanes.next_volume += 1;
    Ok(())
}

/// Reserve the disk blocks a volume being appended to will fill (up to `volume_bytes_max`),
/// so that its appends allocate none: on ext4 the writer's buffered `pwrite` of a 1 MiB
/// record into reserved blocks took about half as long as one that allocates as it goes
/// (docs/chunk-format.md, "Reserved blocks"). Best effort: a file system that cannot, or a
/// disk with less than twice that free, leaves the appends as they were.
pub(crate) fn reserve_volume(active: &Active, volume_bytes_max: u64) {
    let _ = active.file.reserve(volume_bytes_max);
}

/// Write the hint of a volume being appended to, for what it holds now; its size in bytes.
fn write_active_hint(shared: &Shared, active: &Active) -> Result<u64> {
    volume::write_hint(
        &*shared.fs,
        &shared.dir,
        active.number,
        active.len,
        &active.entries,
    )
}

/// Create the volume `header` names (synced, its name too), to be appended to.
pub(crate) fn start_volume(
    fs: &dyn Fs,
    dir: &Path,
    header: VolumeHeader,
) -> Result<(Active, Arc<VolumeFile>)> {
    let (file, reader) = volume::create_volume(fs, dir, header)?;
    let active = Active {
        number: header.number,
        file,
        len: format::VOLUME_HEADER_LEN,
        entries: Vec::new(),
        sync_handles: None,
    };
    Ok((active, Arc::new(reader)))
}

/// On a clean close, write a hint for each active volume so the next open reads no volume.
fn close_active(shared: &Shared, lanes: &Lanes) -> Result<()> {
    for active in &lanes.active {
        let path = format::volume_path(&shared.dir, active.number);
        active
            .file
            .sync_data()
            .map_err(|e| ChunkError::io("sync volume", &path, e))?;
        // Closed, nothing appends to it: give back the blocks reserved past its end (the
        // next open reserves them again if it resumes the volume).
        let _ = active.file.unreserve();
        let hint_bytes = write_active_hint(shared, active)?;
        if let Some(s) = shared.catalog.write().volumes.get_mut(&active.number) {
            s.hint_bytes = hint_bytes;
        }
    }
    Ok(())
}
