//! On a real file system that reserves blocks (`fallocate` with `FALLOC_FL_KEEP_SIZE`: ext4,
//! XFS, tmpfs), the volume being appended to has its blocks reserved up to
//! `volume_bytes_max`, and every volume that is sealed or closed gives back what it did not
//! fill: at a seal, at a clean close, and at an open that seals a lane's volume because the
//! lane count changed. Sizes and contents never change. Skipped where the file system
//! reserves nothing.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use spindle_chunk::ChunkStore;

use common::{reserve_opts, volume_usage, RESERVE_VOLUME};

/// Whether the file system under `dir` reserves blocks past a file's size.
fn reserves(dir: &Path) -> bool {
    let path = dir.join("probe");
    let file = std::fs::File::create(&path).unwrap();
    let ok = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::KEEP_SIZE, 0, 1 << 20)
        .is_ok()
        && file.metadata().unwrap().blocks() * 512 >= 1 << 20;
    std::fs::remove_file(&path).unwrap();
    ok
}

fn volumes(dir: &Path) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".volume")?.parse().ok()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn the_active_volume_has_its_blocks_reserved_and_sealed_ones_give_them_back() {
    let tmp = tempfile::tempdir().unwrap();
    if !reserves(tmp.path()) {
        println!("skipped: this file system reserves no blocks past a file's size");
        return;
    }
    let dir = tmp.path().join("chunks");
    let store = ChunkStore::open(&dir, reserve_opts(1)).unwrap();
    let mut stored = Vec::new();
    // 300 KiB chunks: 13 fill a 4 MiB volume, so 40 seal three volumes.
    for i in 0..40u64 {
        let data = common::chunk(i, 300 << 10);
        stored.push((store.put(&data).unwrap(), data));
    }
    let names = volumes(&dir);
    assert!(names.len() >= 3, "several volumes: {names:?}");
    let (active, sealed) = names.split_last().unwrap();
    for &n in sealed {
        let (len, allocated) = volume_usage(&dir, n);
        assert!(
            allocated < len + (64 << 10),
            "sealed volume {n}: {allocated} bytes allocated for {len}"
        );
    }
    let (len, allocated) = volume_usage(&dir, *active);
    assert!(len < RESERVE_VOLUME, "{len}");
    assert!(
        allocated >= RESERVE_VOLUME,
        "active volume {active}: {allocated} bytes allocated, {RESERVE_VOLUME} reserved"
    );
    store.close().unwrap();
    let (len, allocated) = volume_usage(&dir, *active);
    assert!(
        allocated < len + (64 << 10),
        "volume {active} after a clean close: {allocated} bytes allocated for {len}"
    );

    // Reopened with two lanes: the old lane's volume is sealed and gives its blocks back;
    // the new lanes' volumes are reserved.
    let store = ChunkStore::open(&dir, reserve_opts(2)).unwrap();
    for (id, data) in &stored {
        assert_eq!(store.get(id).unwrap().as_deref(), Some(&data[..]), "{id}");
    }
    let (len, allocated) = volume_usage(&dir, *active);
    assert!(
        allocated < len + (64 << 10),
        "volume {active}, sealed at the reopen: {allocated} bytes allocated for {len}"
    );
    let new: Vec<u32> = volumes(&dir).into_iter().filter(|n| n > active).collect();
    assert_eq!(new.len(), 2, "one new volume per lane: {new:?}");
    for n in new {
        assert!(
            volume_usage(&dir, n).1 >= RESERVE_VOLUME,
            "volume {n} of a new lane"
        );
    }
    store.close().unwrap();
}
