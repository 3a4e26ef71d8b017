//! A volume whose writer failed keeps its reservation (nothing closed it cleanly), like one
//! left by a crash. The next open gives those blocks back wherever it does not resume the
//! volume: when the lane count changed (the volume is sealed at the open), and when it
//! resumes it on a disk with less than twice a volume free (a reservation is never what
//! fills a disk). On a file system that reserves blocks; the second case needs a tmpfs
//! (root). (Needs `--features failpoints`.)

#![cfg(feature = "failpoints")]

mod common;

use std::path::Path;
use std::process::Command;

use spindle_chunk::ChunkStore;

use common::{reserve_opts, volume_usage, RESERVE_VOLUME};

/// Chunks put, with their bytes.
type Stored = Vec<(spindle_chunk::ChunkId, Vec<u8>)>;

/// Puts a few chunks into a one-lane store at `dir`, then fails its writer: returns the
/// active volume, still holding its reservation, and the chunks put. `None` where the file
/// system reserves nothing.
fn failed_store(dir: &Path) -> Option<(u32, Stored)> {
    let store = ChunkStore::open(dir, reserve_opts(1)).unwrap();
    let stored: Vec<_> = (0..3u64)
        .map(|i| {
            let data = common::chunk(i, 200 << 10);
            (store.put(&data).unwrap(), data)
        })
        .collect();
    fail::cfg("chunk-writer-append", "return").unwrap();
    assert!(store.put(&common::chunk(99, 1000)).is_err());
    fail::cfg("chunk-writer-append", "off").unwrap();
    assert!(store.close().is_err(), "close reports the failure");
    let active = common::volumes(dir)
        .iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            name.strip_suffix(".volume")?.parse().ok()
        })
        .max()
        .unwrap();
    let (len, allocated) = volume_usage(dir, active);
    if allocated < RESERVE_VOLUME {
        println!("skipped: this file system reserves no blocks past a file's size");
        return None;
    }
    assert!(len < RESERVE_VOLUME);
    Some((active, stored))
}

#[test]
fn a_volume_sealed_at_the_open_gives_back_a_reservation_its_writer_left() {
    let scenario = fail::FailScenario::setup();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("chunks");
    let Some((active, stored)) = failed_store(&dir) else {
        return;
    };
    // Two lanes now: the open seals the old lane's volume.
    let store = ChunkStore::open(&dir, reserve_opts(2)).unwrap();
    let (len, allocated) = volume_usage(&dir, active);
    assert!(
        allocated < len + (64 << 10),
        "volume {active}, sealed at the reopen: {allocated} bytes allocated for {len}"
    );
    for (id, data) in &stored {
        assert_eq!(store.get(id).unwrap().as_deref(), Some(&data[..]));
    }
    store.close().unwrap();
    scenario.teardown();
}

#[test]
fn a_volume_resumed_on_a_nearly_full_disk_gives_back_its_reservation() {
    let scenario = fail::FailScenario::setup();
    let base = tempfile::tempdir().unwrap();
    let small = base.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"])
        .arg(&small)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        println!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
    let dir = small.join("chunks");
    let result = std::panic::catch_unwind(|| {
        let Some((active, stored)) = failed_store(&dir) else {
            return;
        };
        // Ballast until less than two volumes are free, but room enough to open.
        let free = || {
            let s = rustix::fs::statvfs(&small).unwrap();
            s.f_bavail * s.f_frsize
        };
        let ballast = free() - (2 * RESERVE_VOLUME - (1 << 20));
        std::fs::write(small.join("ballast"), vec![1u8; ballast as usize]).unwrap();
        assert!(free() < 2 * RESERVE_VOLUME, "{}", free());
        // Same lane count: the open resumes the volume, and reserves nothing for it.
        let store = ChunkStore::open(&dir, reserve_opts(1)).unwrap();
        let (len, allocated) = volume_usage(&dir, active);
        assert!(
            allocated < len + (64 << 10),
            "volume {active}, resumed: {allocated} bytes allocated for {len}"
        );
        for (id, data) in &stored {
            assert_eq!(store.get(id).unwrap().as_deref(), Some(&data[..]));
        }
        store.close().unwrap();
    });
    let _ = Command::new("umount").arg(&small).status();
    scenario.teardown();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
