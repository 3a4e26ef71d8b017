//! Every byte of a small chunk store's volume and hint files, flipped in turn in a fresh copy
//! of the store, is caught: `verify_store` (what `spindle inspect` runs) names the file and an
//! offset whose record or checksummed region holds the flipped byte; opening either refuses
//! with `Corrupt` naming the same, or opens and every get returns the chunk's own bytes or
//! `Corrupt` — never other bytes, never a live chunk gone missing, never a deleted one back
//! (invariant 8). A flipped hint makes open scan the volume instead and lose nothing.
//!
//! CI sweeps a store of a few kilobytes with one flip pattern. `SPINDLE_CHUNK_SWEEP=big`
//! sweeps a store of about a hundred kilobytes with two patterns:
//! `SPINDLE_CHUNK_SWEEP=big cargo test --release -p spindle-chunk --test corruption_every_offset -- --nocapture`

mod common;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use spindle_chunk::{
    verify_store, ChunkError, ChunkId, ChunkStore, CompactionPolicy, HintStatus, Options,
    VolumeStatus, RECORD_HEADER_LEN, VOLUME_HEADER_LEN,
};

/// Bytes of a hint file header; the entries and their checksum follow.
const HINT_HEADER_LEN: u64 = 32;

struct Store {
    /// The pristine store.
    dir: tempfile::TempDir,
    live: HashMap<ChunkId, Vec<u8>>,
    deleted: Vec<ChunkId>,
    big: bool,
}

fn opts(big: bool) -> Options {
    Options {
        volume_bytes_max: if big { 32 << 10 } else { 1600 },
        write_buffer_bytes_max: 256 << 10,
        chunk_bytes_max: 64 << 10,
        compaction: CompactionPolicy {
            garbage_ratio_min: 0.3,
            garbage_bytes_min: 0,
        },
        compact_in_background: false,
        // One lane: the newest volume is the one being appended to.
        active_volumes: 1,
        ..Options::default()
    }
}

/// A tmpfs when there is one, so that the thousands of opens and closes (each syncs a hint)
/// cost memory copies, not disk flushes.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// Chunks of several sizes (an empty one too) over several volumes, one rewritten by
/// compaction, a tombstone whose dead put stays in an older volume, hints everywhere.
fn build(big: bool) -> Store {
    let dir = scratch();
    let store = ChunkStore::open(dir.path(), opts(big)).unwrap();
    let sizes: Vec<usize> = if big {
        (0..24).map(|i| (i * 7919) % (12 << 10)).collect()
    } else {
        vec![0, 1, 300, 900, 600, 50, 200, 700, 40]
    };
    let mut live = HashMap::new();
    let mut ids = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let data = common::chunk(1000 + i as u64, len);
        let id = store.put(&data).unwrap();
        ids.push(id);
        live.insert(id, data);
    }
    // Make the first volume mostly garbage so compaction rewrites it, then delete a chunk
    // that lives in a later volume so its tombstone and dead put both stay.
    let mut deleted = Vec::new();
    for id in [ids[1], ids[3], ids[ids.len() - 3]] {
        assert!(store.delete(&id).unwrap());
        live.remove(&id);
        deleted.push(id);
    }
    let report = store.compact().unwrap();
    assert!(!report.volumes.is_empty(), "a volume was compacted");
    let stats = store.stats();
    assert!(stats.volumes.len() >= 2, "several volumes");
    assert!(stats.garbage_bytes > 0, "dead records remain");
    store.close().unwrap();
    let s = Store {
        dir,
        live,
        deleted,
        big,
    };
    for v in common::volumes(s.dir.path()) {
        assert!(v.with_extension("hint").exists(), "{v:?} has a hint");
    }
    s
}

/// Start offsets of the volume header (0) and of every record of a pristine volume.
fn record_starts(bytes: &[u8]) -> Vec<u64> {
    let mut starts = vec![0];
    let mut at = VOLUME_HEADER_LEN;
    while at < bytes.len() as u64 {
        starts.push(at);
        let i = at as usize;
        let len = u32::from_le_bytes(bytes[i + 8..i + 12].try_into().unwrap());
        at += RECORD_HEADER_LEN + u64::from(len);
    }
    assert_eq!(at, bytes.len() as u64, "records fill the volume");
    starts
}

/// Start of the region (volume header or record; hint header or entries) holding `offset`.
fn region_of(starts: &[u64], offset: u64) -> u64 {
    *starts.iter().rev().find(|&&s| s <= offset).unwrap()
}

#[derive(Debug, Default)]
struct Tally {
    offsets: u64,
    inspect_reported: u64,
    open_refused: u64,
    get_refused: u64,
    /// Open succeeded and every live chunk read back whole: bytes no get or open reads.
    unread: u64,
    /// Open rewrote a header-only last volume's header.
    header_rewritten: u64,
    /// Hint flips after which open scanned the volume.
    open_scanned: u64,
}

fn copy_store(from: &Path, to: &Path) {
    let _ = fs::remove_dir_all(to);
    fs::create_dir(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn flip(path: &Path, offset: u64, mask: u8) {
    let mut b = fs::read(path).unwrap();
    b[offset as usize] ^= mask;
    fs::write(path, b).unwrap();
}

/// One flipped byte in a volume: inspect, open and get.
fn check_volume_flip(s: &Store, work: &Path, vol: &Path, starts: &[u64], at: u64, t: &mut Tally) {
    let region = region_of(starts, at);
    let ctx = format!("{} offset {at} (region {region})", vol.display());
    let report = verify_store(work).unwrap();
    let v = report
        .volumes
        .iter()
        .find(|v| v.path == vol)
        .expect("volume reported");
    let named = matches!(&v.status, VolumeStatus::Corrupt { offset, .. } if *offset == region)
        || v.damaged.iter().any(|(o, _)| *o == region);
    assert!(!report.is_ok() && named, "inspect missed {ctx}: {v:?}");
    t.inspect_reported += 1;
    let header_only_last = starts.len() == 1 && common::volumes(work).last().unwrap() == vol;
    let store = match ChunkStore::open(work, opts(s.big)) {
        Err(ChunkError::Corrupt { volume, offset, .. }) => {
            assert_eq!((volume.as_path(), offset), (vol, region), "{ctx}");
            t.open_refused += 1;
            return;
        }
        Err(e) => panic!("{ctx}: open failed without naming the damage: {e}"),
        Ok(store) => store,
    };
    assert!(
        region != 0 || header_only_last,
        "{ctx}: open accepted a damaged volume header"
    );
    let mut refused = false;
    for (id, data) in &s.live {
        for verify in [true, false] {
            match store.get_with(id, verify) {
                Ok(Some(got)) => assert!(got == *data, "{ctx}: other bytes served for {id}"),
                Ok(None) => panic!("{ctx}: live chunk {id} lost"),
                Err(ChunkError::Corrupt { volume, offset, .. }) => {
                    assert_eq!((volume.as_path(), offset), (vol, region), "{ctx}");
                    refused = true;
                }
                Err(e) => panic!("{ctx}: get failed without naming the damage: {e}"),
            }
        }
    }
    for id in &s.deleted {
        assert!(!store.has(id), "{ctx}: deleted chunk {id} is back");
    }
    assert_eq!(store.len(), s.live.len(), "{ctx}");
    drop(store);
    if refused {
        t.get_refused += 1;
    } else if header_only_last {
        t.header_rewritten += 1;
    } else {
        t.unread += 1;
    }
}

/// One flipped byte in a hint: inspect names it, open scans the volume and loses nothing.
fn check_hint_flip(s: &Store, work: &Path, hint: &Path, len: u64, at: u64, t: &mut Tally) {
    let region = region_of(&[0, HINT_HEADER_LEN], at);
    let ctx = format!("{} offset {at}", hint.display());
    let report = verify_store(work).unwrap();
    let v = report
        .volumes
        .iter()
        .find(|v| v.path == hint.with_extension("volume"))
        .unwrap();
    assert_eq!(v.hint, HintStatus::Unreadable, "{ctx}");
    let (offset, _) = v.hint_damage.clone().expect("hint damage located");
    assert!(
        !report.is_ok() && offset == region && at < len,
        "inspect placed {ctx} at {offset}"
    );
    t.inspect_reported += 1;
    let store = ChunkStore::open(work, opts(s.big)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(store.open_report().volumes_scanned, 1, "{ctx}");
    t.open_scanned += 1;
    for (id, data) in &s.live {
        let got = store.get(id).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(got.as_deref() == Some(&data[..]), "{ctx}: chunk {id}");
    }
    for id in &s.deleted {
        assert!(!store.has(id), "{ctx}: deleted chunk {id} is back");
    }
    assert_eq!(store.len(), s.live.len(), "{ctx}");
}

fn sweep(big: bool, masks: &[u8]) {
    let s = build(big);
    let scratch = scratch();
    let work = scratch.path().join("store");
    let mut volumes = Tally::default();
    let mut hints = Tally::default();
    for pristine in common::volumes(s.dir.path()) {
        let bytes = fs::read(&pristine).unwrap();
        let starts = record_starts(&bytes);
        let name = pristine.file_name().unwrap();
        for &mask in masks {
            for at in 0..bytes.len() as u64 {
                copy_store(s.dir.path(), &work);
                let vol = work.join(name);
                flip(&vol, at, mask);
                volumes.offsets += 1;
                check_volume_flip(&s, &work, &vol, &starts, at, &mut volumes);
            }
        }
        let hint_pristine = pristine.with_extension("hint");
        let len = fs::metadata(&hint_pristine).unwrap().len();
        let hint_name: PathBuf = hint_pristine.file_name().unwrap().into();
        for &mask in masks {
            for at in 0..len {
                copy_store(s.dir.path(), &work);
                let hint = work.join(&hint_name);
                flip(&hint, at, mask);
                hints.offsets += 1;
                check_hint_flip(&s, &work, &hint, len, at, &mut hints);
            }
        }
    }
    println!("volume flips: {volumes:?}");
    println!("hint flips:   {hints:?}");
    assert_eq!(volumes.inspect_reported, volumes.offsets);
    assert_eq!(hints.inspect_reported, hints.offsets);
    assert_eq!(hints.open_scanned, hints.offsets);
    assert!(volumes.get_refused > 0 && volumes.open_refused > 0);
}

#[test]
fn every_flipped_byte_is_reported_and_never_served() {
    if std::env::var("SPINDLE_CHUNK_SWEEP").as_deref() == Ok("big") {
        sweep(true, &[0x01, 0xFF]);
    } else {
        sweep(false, &[0x20]);
    }
}
