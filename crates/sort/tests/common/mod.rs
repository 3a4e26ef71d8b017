//! Helpers of the import tests: random write lines, importing them, and loading the same
//! lines through the log the normal way.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use spindle_core::{Index, ItemKey, Partition, Transaction, Value};
use spindle_log::{FileLog, LogConfig};
use spindle_sort::import::{import, ImportOptions, ImportReport, Quiet};
use spindle_view::disk_ingest::disk_view_dir;
use spindle_view::{follow, DiskView};

/// xorshift64*: deterministic, so a failure names its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// An item of a pool of `items`: nodes and edges, some ids with a zero byte or non-ASCII.
pub fn pool_item(k: u64) -> ItemKey {
    let id = |k: u64| match k % 7 {
        0 => format!("n\u{0}{k}"),
        1 => format!("ü{k}"),
        _ => format!("n{k}"),
    };
    if k.is_multiple_of(3) {
        ItemKey::node(id(k)).unwrap()
    } else {
        ItemKey::edge(id(k / 3), "l", id(k * 7 + 1)).unwrap()
    }
}

/// `lines` random writes over `items` items: several versions per item, about one in six a
/// delete, values with varied text (kept byte for byte).
pub fn random_writes(seed: u64, lines: usize, items: u64) -> Vec<(ItemKey, Value)> {
    let mut rng = Rng(seed.max(1));
    (0..lines)
        .map(|i| {
            let key = pool_item(rng.below(items));
            let value = if rng.below(6) == 0 {
                Value::TOMBSTONE
            } else {
                let pad = "x".repeat(rng.below(40) as usize);
                Value::json(format!("{{ \"i\": {i}, \"s\":\"{pad}\\u00e9\" }}")).unwrap()
            };
            (key, value)
        })
        .collect()
}

/// One write as an input line (the HTTP API's write shape).
pub fn line(key: &ItemKey, value: &Value) -> String {
    let item = serde_json::to_string(key).unwrap();
    match value.as_json() {
        Some(json) => format!("{{\"item\":{item},\"value\":{json}}}"),
        None => format!("{{\"item\":{item},\"delete\":true}}"),
    }
}

/// Write the lines into `files` input files (in order) under `dir`.
pub fn write_inputs(dir: &Path, writes: &[(ItemKey, Value)], files: usize) -> Vec<PathBuf> {
    let per = writes.len().div_ceil(files.max(1)).max(1);
    writes
        .chunks(per)
        .enumerate()
        .map(|(i, chunk)| {
            let path = dir.join(format!("in-{i}.jsonl"));
            let text: String = chunk.iter().map(|(k, v)| line(k, v) + "\n").collect();
            std::fs::write(&path, text).unwrap();
            path
        })
        .collect()
}

pub fn options(data: &Path, partitions: u64) -> ImportOptions {
    ImportOptions {
        data_dir: data.to_path_buf(),
        disk_partitions: partitions,
        sort_memory_bytes: 64 << 10,
        tmp_dir: None,
        threads: 2,
        skip_bad: false,
        parse_chunk_bytes: 4 << 10,
        log_only: false,
    }
}

pub fn run_import(data: &Path, partitions: u64, inputs: &[PathBuf]) -> ImportReport {
    import(&options(data, partitions), inputs, &Quiet).unwrap()
}

/// The same writes the normal way: one transaction each through the log, then every Disk
/// View applies the log.
pub fn load_normally(data: &Path, partitions: u64, writes: &[(ItemKey, Value)]) {
    let log = FileLog::open(data.join("log"), LogConfig::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // One transaction per write; many submitted together only to save syncs.
    for chunk in writes.chunks(256) {
        let txns: Vec<Transaction> = chunk
            .iter()
            .map(|(k, v)| Transaction::single(k.clone(), v.clone()))
            .collect();
        for r in rt.block_on(log.append_many(&txns)) {
            r.unwrap();
        }
    }
    for i in 0..partitions {
        let view = DiskView::open(
            disk_view_dir(data, i, partitions),
            Partition::nth(i, partitions),
        )
        .unwrap();
        rt.block_on(follow::catch_up(&view, &log)).unwrap();
        assert_eq!(view.applied_index(), Index::new(writes.len() as u64));
        view.flush().unwrap();
    }
    log.close();
}

pub fn open_views(data: &Path, partitions: u64) -> Vec<DiskView> {
    (0..partitions)
        .map(|i| {
            DiskView::open(
                disk_view_dir(data, i, partitions),
                Partition::nth(i, partitions),
            )
            .unwrap()
        })
        .collect()
}

/// The names in `dir`, sorted.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
