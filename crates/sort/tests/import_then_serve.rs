//! A node serves an imported data directory at once: reads answer from the Disk Views, the
//! Memory View boots from them, iteration yields every imported version, and later writes go
//! on at the next index, their conditions checked against the imported versions.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use spindle_core::{Index, ItemKey, Partition, Transaction, Value};
use spindle_log::AppendError;
use spindle_server::{Node, ServerConfig};
use spindle_view::{Freshness, IterRequest};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn serve_reads_boots_iterates_and_writes_on_after_an_import() {
    let dir = tempfile::tempdir().unwrap();
    let writes = random_writes(7, 2000, 300);
    let inputs = write_inputs(dir.path(), &writes, 2);
    let data = dir.path().join("data");
    let report = run_import(&data, 4, &inputs);
    let last = Index::new(writes.len() as u64);
    assert_eq!(report.last_index, last);

    let mut latest: HashMap<ItemKey, (Index, Value)> = HashMap::new();
    for (i, (k, v)) in writes.iter().enumerate() {
        latest.insert(k.clone(), (Index::new(i as u64 + 1), v.clone()));
    }

    let node = Node::open(ServerConfig {
        data_dir: data.clone(),
        disk_partitions: 4,
        truncate: false,
        ..ServerConfig::default()
    })
    .unwrap();
    assert_eq!(node.log.durable_index(), last);
    for (key, (index, value)) in &latest {
        let got = node
            .disk_for(key)
            .unwrap()
            .view
            .latest(key, Freshness::Any)
            .unwrap()
            .unwrap();
        assert_eq!((got.index, &got.value), (*index, value), "{key}");
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(node.memory.wait_applied(last, WAIT)).unwrap();
    let memory = node.memory.get().unwrap();
    for (key, (index, value)) in &latest {
        let want = value.as_json().map(|j| (*index, j.to_owned()));
        assert_eq!(memory.get(key), want, "{key}");
    }

    let mut frames = 0;
    for d in &node.disks {
        let mut it = d.view.iterate(&IterRequest::range(Partition::ALL)).unwrap();
        let mut buf = Vec::new();
        while !it.fill(&mut buf, 1 << 16).unwrap() {}
        frames += it.stats().frames;
    }
    assert_eq!(
        frames,
        writes.len() as u64,
        "iteration yields every version"
    );

    // Later writes: the next index, conditions on the imported versions.
    let (key, (version, _)) = latest.iter().find(|(_, (_, v))| !v.is_tombstone()).unwrap();
    let value = Value::json("{\"after\":true}").unwrap();
    let stale = Transaction::single(key.clone(), value.clone()).condition(key.clone(), Index::ZERO);
    assert!(matches!(
        node.log.append_blocking(&stale),
        Err(AppendError::Conflict { .. })
    ));
    let ok = Transaction::single(key.clone(), value.clone()).condition(key.clone(), *version);
    assert_eq!(node.log.append_blocking(&ok).unwrap(), last.next());
    let slot = node.disk_for(key).unwrap();
    rt.block_on(slot.wait_applied(last.next(), WAIT)).unwrap();
    let got = slot.view.latest(key, Freshness::Any).unwrap().unwrap();
    assert_eq!((got.index, got.value), (last.next(), value));
    node.shutdown();
}
