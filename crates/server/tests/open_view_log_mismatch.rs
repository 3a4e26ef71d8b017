//! The node refuses to start when a Disk View does not fit its log: a view that has applied
//! past the log's end (the log lost its tail) would silently diverge as new writes reuse
//! those indexes, and a view below the log's first retained index could never catch up.
//! Both are refused with an error naming the view, and nothing is written.

use std::path::Path;
use std::time::Duration;

use spindle_core::{Index, ItemKey, Transaction, Value};
use spindle_log::{FileLog, LogConfig};
use spindle_server::node::NodeError;
use spindle_server::{Node, ServerConfig};

fn config(dir: &Path) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_owned(),
        log_segment_bytes: 16 << 10,
        memory_view: false,
        truncate: false,
        ..ServerConfig::default()
    }
}

fn txn(i: u64) -> Transaction {
    let key = ItemKey::node(format!("n{i}")).unwrap();
    let value = format!("{{\"i\":{i},\"pad\":\"{}\"}}", "y".repeat(100));
    Transaction::single(key, Value::json(value).unwrap())
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 << 10,
        ..LogConfig::default()
    }
}

fn tree_bytes(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            out.push((entry.path(), std::fs::read(entry.path()).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn a_view_ahead_of_a_shorter_log_is_refused() {
    let data = tempfile::tempdir().unwrap();
    {
        let node = Node::open(config(data.path())).unwrap();
        for i in 0..40 {
            node.log.append_blocking(&txn(i)).unwrap();
        }
        let durable = node.log.durable_index();
        for d in &node.disks {
            d.view
                .wait_applied(durable, Duration::from_secs(30))
                .unwrap();
        }
        node.shutdown();
    }
    // The log is replaced by a shorter one (lost tail, or another node's log).
    std::fs::remove_dir_all(data.path().join("log")).unwrap();
    {
        let log = FileLog::open(data.path().join("log"), log_config()).unwrap();
        for i in 0..5 {
            log.append_blocking(&txn(1000 + i)).unwrap();
        }
        log.close();
    }
    let log_before = tree_bytes(&data.path().join("log"));
    match Node::open(config(data.path())) {
        Err(NodeError::ViewAheadOfLog {
            applied, log_last, ..
        }) => {
            assert_eq!(log_last, Index::new(5));
            assert!(applied > log_last, "applied {applied}");
            let message = Node::open(config(data.path())).unwrap_err().to_string();
            assert!(message.contains("refuses to start"), "{message}");
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("a Disk View ahead of its log was served"),
    }
    assert_eq!(
        tree_bytes(&data.path().join("log")),
        log_before,
        "the log changed"
    );
}

#[test]
fn a_view_behind_a_truncated_log_is_refused() {
    let data = tempfile::tempdir().unwrap();
    {
        let log = FileLog::open(data.path().join("log"), log_config()).unwrap();
        for i in 0..400 {
            log.append_blocking(&txn(i)).unwrap();
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        let first = rt.block_on(log.truncate_prefix(Index::new(300))).unwrap();
        assert!(
            first > Index::new(1),
            "the test must truncate (first {first})"
        );
        log.close();
    }
    // No Disk View exists yet: a fresh one starts at 0, far below the first retained index.
    match Node::open(config(data.path())) {
        Err(NodeError::ViewBehindLog {
            applied, log_first, ..
        }) => {
            assert_eq!(applied, Index::ZERO);
            assert!(log_first > Index::new(1));
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("a Disk View that cannot catch up was served"),
    }
}
