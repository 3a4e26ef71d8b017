//! Lanes: a store appends to several volumes at once, a chunk's records always to its lane's.
//! Reopening with the same number of lanes goes on appending to each lane's last volume;
//! with another number, a new generation of volumes starts above every old one and the old
//! generation's last volumes are sealed (hints written, compactable). After a crash, the last
//! volume of every lane may end in a torn write and is cut; a volume whose creation was cut
//! short is removed; volumes written before lanes existed (header version 1) still open.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use spindle_chunk::format::{VolumeHeader, VOLUME_FORMAT_VERSION};
use spindle_chunk::{verify_store, ChunkId, ChunkStore, Options, VOLUME_HEADER_LEN};

fn lanes(n: usize) -> Options {
    Options {
        active_volumes: n,
        ..common::small_opts()
    }
}

fn header(path: &Path) -> VolumeHeader {
    let bytes = std::fs::read(path).unwrap();
    VolumeHeader::decode(bytes[..VOLUME_HEADER_LEN as usize].try_into().unwrap()).unwrap()
}

fn put_some(store: &ChunkStore, seeds: std::ops::Range<u64>) -> Vec<ChunkId> {
    seeds
        .map(|s| store.put(&common::chunk(s, 1500)).unwrap())
        .collect()
}

fn check_all(store: &ChunkStore, ids: &[ChunkId]) {
    for id in ids {
        assert_eq!(ChunkId::of(&store.get(id).unwrap().unwrap()), *id);
    }
    assert_eq!(store.len(), ids.len());
    assert_eq!(store.used_bytes(), common::disk_bytes(store.dir()));
}

/// Remove the hint of the volume at `path` (as a process that dies leaves its active
/// volumes) and change its length to `to(length)`.
fn drop_hint_and_resize(path: &Path, to: impl Fn(u64) -> u64) {
    std::fs::remove_file(path.with_extension("hint")).unwrap();
    let len = std::fs::metadata(path).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(to(len))
        .unwrap();
}

/// Unsealed volumes of the store, by number.
fn unsealed(store: &ChunkStore) -> Vec<u32> {
    store
        .stats()
        .volumes
        .iter()
        .filter(|(_, s)| !s.sealed)
        .map(|(n, _)| *n)
        .collect()
}

#[test]
fn each_lane_appends_to_its_own_volume() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(4)).unwrap();
    let ids = put_some(&store, 0..60);
    let active = unsealed(&store);
    assert_eq!(active.len(), 4, "one volume per lane is appended to");
    let mut seen_lanes: Vec<u16> = active
        .iter()
        .map(|&n| header(&spindle_chunk::format::volume_path(dir.path(), n)).lane)
        .collect();
    seen_lanes.sort_unstable();
    assert_eq!(seen_lanes, [0, 1, 2, 3]);
    // Every record of a chunk is in a volume of its lane.
    for path in common::volumes(dir.path()) {
        let h = header(&path);
        assert_eq!(h.lanes, 4);
        assert_eq!(h.generation, 1);
    }
    check_all(&store, &ids);
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(4)).unwrap();
    assert_eq!(store.open_report().volumes_scanned, 0);
    assert_eq!(unsealed(&store), active, "the same lanes go on");
    check_all(&store, &ids);
    assert!(verify_store(dir.path()).unwrap().is_ok());
}

#[test]
fn another_lane_count_starts_a_generation_above_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(4)).unwrap();
    let mut ids = put_some(&store, 0..30);
    // Deletes and puts again, so chunks have records in both generations.
    for id in &ids[..10] {
        assert!(store.delete(id).unwrap());
    }
    ids.drain(..10);
    let old_active = unsealed(&store);
    store.close().unwrap();
    let highest = *common::volumes(dir.path())
        .iter()
        .map(|p| header(p).number)
        .collect::<Vec<_>>()
        .last()
        .unwrap();

    let store = ChunkStore::open(dir.path(), lanes(2)).unwrap();
    let now_active = unsealed(&store);
    assert_eq!(
        now_active,
        [highest + 1, highest + 2],
        "new volumes above all"
    );
    for n in &old_active {
        let path = spindle_chunk::format::volume_path(dir.path(), *n);
        assert!(path.with_extension("hint").exists(), "sealed with its hint");
    }
    for n in now_active.iter() {
        let h = header(&spindle_chunk::format::volume_path(dir.path(), *n));
        assert_eq!((h.generation, h.lanes), (highest + 1, 2));
    }
    check_all(&store, &ids);
    // Chunks deleted in the old generation are put again in the new one, and deleted again.
    let again = put_some(&store, 0..10);
    for id in &again[..5] {
        assert!(store.delete(id).unwrap());
    }
    ids.extend_from_slice(&again[5..]);
    ids.extend(put_some(&store, 100..140));
    check_all(&store, &ids);
    // Old volumes are sealed now, so compaction may rewrite them.
    store.compact().unwrap();
    check_all(&store, &ids);
    store.close().unwrap();

    // The same count again: no new generation. Then back to 4 lanes: another.
    let store = ChunkStore::open(dir.path(), lanes(2)).unwrap();
    assert_eq!(unsealed(&store).len(), 2);
    assert!(unsealed(&store).iter().all(|&n| n > highest));
    check_all(&store, &ids);
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(4)).unwrap();
    assert_eq!(unsealed(&store).len(), 4);
    check_all(&store, &ids);
    store.compact().unwrap();
    check_all(&store, &ids);
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(1)).unwrap();
    check_all(&store, &ids);
    drop(store);
    let report = verify_store(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.chunks, ids.len() as u64);
}

#[test]
fn torn_tails_of_every_lane_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(4)).unwrap();
    let ids = put_some(&store, 0..20);
    let active = unsealed(&store);
    store.close().unwrap();
    // A process that dies leaves no hints for its active volumes, and each may end in a
    // half-written record.
    for n in &active {
        let path = spindle_chunk::format::volume_path(dir.path(), *n);
        std::fs::remove_file(path.with_extension("hint")).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&b"CHNK\x01\0\0\0garbage"[..]).unwrap();
    }
    let report = verify_store(dir.path()).unwrap();
    assert!(report.is_ok(), "torn tails are not corruption: {report:?}");
    let store = ChunkStore::open(dir.path(), lanes(4)).unwrap();
    assert_eq!(store.open_report().torn_tails.len(), 4);
    check_all(&store, &ids);
    let more = put_some(&store, 50..60);
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(4)).unwrap();
    assert!(store.open_report().torn_tails.is_empty());
    check_all(&store, &[ids, more].concat());
}

#[test]
fn a_torn_lane_is_cut_even_when_the_lane_count_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(3)).unwrap();
    let ids = put_some(&store, 0..20);
    let active = unsealed(&store);
    store.close().unwrap();
    let path = spindle_chunk::format::volume_path(dir.path(), active[1]);
    drop_hint_and_resize(&path, |len| len + 4096);
    let store = ChunkStore::open(dir.path(), lanes(2)).unwrap();
    assert_eq!(store.open_report().torn_tails.len(), 1);
    assert_eq!(store.open_report().torn_tails[0].0, path);
    assert!(path.with_extension("hint").exists(), "sealed after the cut");
    check_all(&store, &ids);
    drop(store);
    assert!(verify_store(dir.path()).unwrap().is_ok());
}

#[test]
fn a_volume_whose_creation_was_cut_short_is_removed() {
    for leftover in [&b""[..], &b"SPNDLVOL\x02\0"[..], &[0u8; 64][..]] {
        let dir = tempfile::tempdir().unwrap();
        let store = ChunkStore::open(dir.path(), lanes(2)).unwrap();
        let ids = put_some(&store, 0..10);
        store.close().unwrap();
        let highest = header(common::volumes(dir.path()).last().unwrap()).number;
        let unfinished = spindle_chunk::format::volume_path(dir.path(), highest + 1);
        std::fs::write(&unfinished, leftover).unwrap();
        let report = verify_store(dir.path()).unwrap();
        assert!(report.is_ok(), "inspect agrees with open: {report:?}");
        let store = ChunkStore::open(dir.path(), lanes(2)).unwrap();
        assert!(!unfinished.exists(), "removed");
        check_all(&store, &ids);
        // The number is given again at the next seal or generation.
        store.close().unwrap();
        let store = ChunkStore::open(dir.path(), lanes(3)).unwrap();
        assert!(unfinished.exists(), "volume {} made again", highest + 1);
        assert_eq!(header(&unfinished).lanes, 3);
        check_all(&store, &ids);
    }
}

#[test]
fn volumes_written_before_lanes_open_and_the_lane_goes_on_in_a_new_volume() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(1)).unwrap();
    let ids = put_some(&store, 0..30);
    store.close().unwrap();
    // Rewrite every header as a version 1 header (lane fields zero, as before lanes).
    for path in common::volumes(dir.path()) {
        let mut b = [0u8; VOLUME_HEADER_LEN as usize];
        b[0..8].copy_from_slice(b"SPNDLVOL");
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&header(&path).number.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        use std::os::unix::fs::FileExt;
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&b, 0).unwrap();
    }
    assert_ne!(VOLUME_FORMAT_VERSION, 1);
    let old = common::volumes(dir.path());
    let store = ChunkStore::open(dir.path(), lanes(1)).unwrap();
    check_all(&store, &ids);
    // A version 1 header does not say how much of its volume could be unsynced, so the last
    // one is sealed and the lane goes on in a new volume that does.
    let now = common::volumes(dir.path());
    assert_eq!(now[..old.len()], old[..], "every old volume is kept");
    assert_eq!(now.len(), old.len() + 1, "one new volume");
    let new = header(now.last().unwrap());
    assert_eq!(
        (new.lanes, new.unsynced_window),
        (1, lanes(1).write_buffer_bytes_max)
    );
    assert_eq!(unsealed(&store), [new.number]);
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(4)).unwrap();
    assert_eq!(unsealed(&store).len(), 4);
    let more = put_some(&store, 40..60);
    check_all(&store, &[ids.clone(), more.clone()].concat());
    store.close().unwrap();
    assert!(verify_store(dir.path()).unwrap().is_ok());
}

#[test]
fn a_whole_header_of_another_version_is_not_taken_for_an_unfinished_volume() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(2)).unwrap();
    put_some(&store, 0..4);
    store.close().unwrap();
    let highest = header(common::volumes(dir.path()).last().unwrap()).number;
    let newer = spindle_chunk::format::volume_path(dir.path(), highest + 1);
    let mut b = VolumeHeader {
        number: highest + 1,
        generation: highest + 1,
        lane: 0,
        lanes: 2,
        unsynced_window: 0,
    }
    .encode();
    b[8..12].copy_from_slice(&9u32.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&newer, b).unwrap();
    let err = ChunkStore::open(dir.path(), lanes(2)).unwrap_err();
    assert!(err.to_string().contains("version 9"), "{err}");
    assert!(
        newer.exists(),
        "a volume this build cannot read is left alone"
    );
}

#[test]
fn damage_in_an_older_generation_is_corruption_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(2)).unwrap();
    put_some(&store, 0..8);
    let old = unsealed(&store);
    store.close().unwrap();
    // A new generation; the old one's last volumes are sealed now.
    let store = ChunkStore::open(dir.path(), lanes(3)).unwrap();
    put_some(&store, 20..24);
    store.close().unwrap();
    let path = spindle_chunk::format::volume_path(dir.path(), old[0]);
    drop_hint_and_resize(&path, |len| len - 100);
    assert!(!verify_store(dir.path()).unwrap().is_ok());
    match ChunkStore::open(dir.path(), lanes(3)) {
        Err(spindle_chunk::ChunkError::Corrupt { volume, .. }) => assert_eq!(volume, path),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn lanes_that_got_no_record_are_removed_when_the_count_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), lanes(4)).unwrap();
    let ids = put_some(&store, 0..1);
    store.close().unwrap();
    assert_eq!(common::volumes(dir.path()).len(), 4);
    let store = ChunkStore::open(dir.path(), lanes(2)).unwrap();
    // The one volume with the chunk, and the two new lanes.
    assert_eq!(common::volumes(dir.path()).len(), 3);
    check_all(&store, &ids);
    store.close().unwrap();
    assert!(verify_store(dir.path()).unwrap().is_ok());
}
