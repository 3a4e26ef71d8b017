//! A simulated power cut after truncation loses no acknowledged write: Disk Views come back
//! at the state of their last sync point (RocksDB's promise for a write-ahead log that is
//! not synced on every write), and the truncation worker never deleted a log record above
//! what the views had synced, so every view catches up from the log (invariant 1 and 7).
//!
//! The cut is simulated only at sync points: each Disk View is snapshotted (a RocksDB
//! checkpoint) whenever it syncs, and the "powered-off" data directory is the log as
//! fsynced plus each view's last snapshot, or an empty view if it never synced.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use spindle_core::{Index, ItemKey, Transaction, Value};
use spindle_server::{Node, ServerConfig};
use spindle_view::disk::SyncObserver;
use spindle_view::Freshness;

fn config(dir: &Path) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_owned(),
        log_segment_bytes: 16 << 10,
        memory_view: false,
        truncate: true,
        ..ServerConfig::default()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Snapshot each view into `snaps/<view dir name>` at every sync point (latest wins).
fn snapshot_at_syncs(node: &Node, snaps: &Path) -> Arc<Mutex<BTreeMap<String, Index>>> {
    let taken = Arc::new(Mutex::new(BTreeMap::new()));
    for d in &node.disks {
        let name = d.view.dir().file_name().unwrap().to_owned();
        let target = snaps.join(&name);
        let staging = snaps.join(format!("{}.new", name.to_string_lossy()));
        let taken = taken.clone();
        let id = d.id.clone();
        let observer: SyncObserver = Arc::new(move |view, persisted| {
            let _ = std::fs::remove_dir_all(&staging);
            view.checkpoint(&staging).unwrap();
            let _ = std::fs::remove_dir_all(&target);
            std::fs::rename(&staging, &target).unwrap();
            taken.lock().insert(id.clone(), persisted);
        });
        d.view.observe_syncs(Some(observer));
    }
    taken
}

/// The data directory a power cut would leave: the synced log, each view's last snapshot.
fn powered_off(data: &Path, snaps: &Path, out: &Path, node: &Node) {
    copy_dir(&data.join("log"), &out.join("log"));
    std::fs::create_dir_all(out.join("views")).unwrap();
    for d in &node.disks {
        let name = d.view.dir().file_name().unwrap();
        let snap = snaps.join(name);
        if snap.exists() {
            copy_dir(&snap, &out.join("views").join(name));
        }
    }
}

/// Every view's last snapshot must still be able to catch up from the log.
fn check_log_covers_snapshots(node: &Node, taken: &Mutex<BTreeMap<String, Index>>) {
    let first = node.log.first_index();
    for d in &node.disks {
        let persisted = taken.lock().get(&d.id).copied().unwrap_or(Index::ZERO);
        assert!(
            persisted.next() >= first,
            "{} synced through {persisted}, but the log was truncated below {first}",
            d.id
        );
    }
}

fn txn(round: u64, t: u64) -> (ItemKey, Transaction, String) {
    let key = ItemKey::node(format!("n{}", (round * 31 + t) % 150)).unwrap();
    let json = format!(
        "{{\"round\":{round},\"t\":{t},\"pad\":\"{}\"}}",
        "x".repeat(100)
    );
    let txn = Transaction::single(key.clone(), Value::json(json.clone()).unwrap());
    (key, txn, json)
}

#[test]
fn truncation_waits_for_synced_views_so_a_power_cut_loses_nothing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let snaps = tempfile::tempdir().unwrap();
    let node = Node::open(config(data.path())).unwrap();
    let taken = snapshot_at_syncs(&node, snaps.path());
    // Writers keep appending while the truncation worker runs, so views apply more between
    // their sync and the decision: only the persisted index may count.
    let writer = {
        let node = node.clone();
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            for round in 0..40 {
                for t in 0..20 {
                    let (key, txn, json) = txn(round, t);
                    let index = node.log.append_blocking(&txn).unwrap();
                    acked.push((key, index, json));
                }
            }
            acked
        })
    };
    while !writer.is_finished() {
        rt.block_on(node.truncate_once());
        let state = node.truncation.lock().clone();
        assert!(
            state.error.is_none(),
            "truncation failed: {:?}",
            state.error
        );
        // A power cut now would leave each view at its last snapshot.
        check_log_covers_snapshots(&node, &taken);
    }
    let acked: Vec<(ItemKey, Index, String)> = writer.join().unwrap();
    let first = node.log.first_index();
    assert!(
        first > Index::new(100),
        "the test must truncate to mean anything (first retained {first})"
    );
    check_log_covers_snapshots(&node, &taken);
    let cut = tempfile::tempdir().unwrap();
    let after: PathBuf = cut.path().join("data");
    powered_off(data.path(), snaps.path(), &after, &node);
    for d in &node.disks {
        d.view.observe_syncs(None);
    }
    node.shutdown();
    drop(node);

    let node = Node::open(config(&after)).expect("the node restarts after the power cut");
    let durable = node.log.durable_index();
    for d in &node.disks {
        d.view
            .wait_applied(durable, Duration::from_secs(30))
            .unwrap();
    }
    for (key, index, json) in &acked {
        let slot = node.disk_for(key).unwrap();
        let got = slot
            .view
            .as_of(key, *index, Freshness::Any)
            .unwrap()
            .unwrap_or_else(|| panic!("{key:?} at {index} lost"));
        assert_eq!(got.index, *index, "{key:?}");
        assert_eq!(
            got.value.as_json(),
            Some(json.as_str()),
            "{key:?} at {index}"
        );
    }
    node.shutdown();
}
