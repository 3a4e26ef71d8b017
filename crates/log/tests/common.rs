//! Helpers shared by the log's behaviour tests.

#![allow(dead_code)]

use spindle_core::{ItemKey, Transaction, Value};
use spindle_log::{FileLog, LogConfig};

/// A config with tiny segments so tests cross segment boundaries quickly.
pub fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        ..LogConfig::default()
    }
}

pub fn node(id: &str) -> ItemKey {
    ItemKey::node(id).unwrap()
}

pub fn obj(n: u64) -> Value {
    Value::json(format!("{{\"n\":{n}}}")).unwrap()
}

pub fn put(id: &str, n: u64) -> Transaction {
    Transaction::single(node(id), obj(n))
}

pub fn open(dir: &std::path::Path, config: LogConfig) -> FileLog {
    FileLog::open(dir, config).unwrap()
}

/// Make a cleanly closed log look like one whose process died: remove the synced-length
/// hint a clean close leaves, so damage past the last sync can be a torn tail again.
pub fn forget_clean_close(dir: &std::path::Path) {
    std::fs::remove_file(dir.join(spindle_log::hint::HINT_FILE)).unwrap();
}
