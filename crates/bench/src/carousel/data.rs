//! The data of `spindle bench carousel`: the synthetic graph loaded through a file log into
//! one Disk View of the whole hash space, in the layout `spindle serve --disk-partitions 1`
//! opens, flushed and compacted; or a kept directory that already holds the same graph.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context as _};
use serde_json::{json, Value};
use spindle_core::Partition;
use spindle_log::{FileLog, LogConfig, SyncMode};
use spindle_view::{follow, DiskView};

use super::{spec, Args, Data};
use crate::graph::GraphSpec;
use crate::iterate::{futures_block_on, load};

/// Where `spindle serve --disk-partitions 1` keeps its one Disk View, under its data
/// directory.
const VIEW_DIR: &str = "views/disk-0-of-1";
/// Written last by the build: the graph a kept data directory holds.
const MARKER_FILE: &str = "bench-carousel.json";

/// Reuse a kept directory that holds this graph, or build the data.
pub(super) fn prepare(dir: &Path, a: &Args) -> anyhow::Result<Data> {
    let s = spec(a);
    let graph = json!({"nodes": s.nodes, "edges": s.edges, "versions": s.versions, "seed": s.seed});
    let marker = dir.join(MARKER_FILE);
    let kept = std::fs::read_to_string(&marker)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .filter(|m| m["graph"] == graph)
        .and_then(|m| m["writes"].as_u64());
    let (writes, build_s) = match kept {
        Some(writes) => {
            eprintln!("reusing the data in {}", dir.display());
            (writes, None)
        }
        None => {
            ensure!(
                !dir.exists() || std::fs::read_dir(dir)?.next().is_none(),
                "{} exists but holds no complete build of this graph (an interrupted run?); \
                 remove it",
                dir.display()
            );
            std::fs::create_dir_all(dir)?;
            let t = Instant::now();
            let writes = build(dir, &s)?;
            let record = json!({"graph": graph, "writes": writes});
            std::fs::write(&marker, record.to_string())?;
            (writes, Some(t.elapsed().as_secs_f64()))
        }
    };
    let tables = table_files(&dir.join(VIEW_DIR))?;
    let mut bytes = 0;
    for t in &tables {
        bytes += std::fs::metadata(t)?.len();
    }
    Ok(Data {
        writes,
        build_s,
        tables,
        bytes,
    })
}

/// Load the graph through a file log into one Disk View of the whole hash space, flush it,
/// and compact it. Returns the number of writes (= versions = log records).
fn build(dir: &Path, spec: &GraphSpec) -> anyhow::Result<u64> {
    let config = LogConfig {
        sync: SyncMode::Off,
        ..LogConfig::default()
    };
    let log = FileLog::open(dir.join("log"), config)?;
    let t = Instant::now();
    let writes = load(spec, &log);
    eprintln!("loaded {writes} writes into the log in {:.1?}", t.elapsed());
    let t = Instant::now();
    let view_dir = dir.join(VIEW_DIR);
    let view = DiskView::open(&view_dir, Partition::ALL)?;
    let applied = futures_block_on(follow::catch_up(&view, &log))?;
    ensure!(
        applied == log.durable_index(),
        "the view applied {applied} of {}",
        log.durable_index()
    );
    view.flush()?;
    drop(view);
    log.close();
    eprintln!("applied into the Disk View in {:.1?}", t.elapsed());
    let t = Instant::now();
    compact(&view_dir)?;
    eprintln!("compacted in {:.1?}", t.elapsed());
    Ok(writes)
}

/// Compact every column family of the view into its last level, with the view's
/// compression, so the node starts with nothing left to compact.
fn compact(view_dir: &Path) -> anyhow::Result<()> {
    let mut opts = rocksdb::Options::default();
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    opts.set_atomic_flush(true);
    let cfs = rocksdb::DB::list_cf(&opts, view_dir)?;
    let db = rocksdb::DB::open_cf(&opts, view_dir, &cfs)?;
    for name in &cfs {
        let cf = db.cf_handle(name).context("a listed column family")?;
        db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
    }
    Ok(())
}

fn table_files(view_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(view_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "sst") {
            out.push(path);
        }
    }
    out.sort();
    ensure!(!out.is_empty(), "no table files in {}", view_dir.display());
    Ok(out)
}

/// Refuse a filesystem without O_DIRECT (tmpfs) up front, with a way out.
pub(super) fn check_direct_reads(dir: &Path) -> anyhow::Result<()> {
    let probe = dir.join("direct-reads-probe");
    let opened = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(&probe);
    let _ = std::fs::remove_file(&probe);
    if let Err(e) = opened {
        bail!(
            "{} does not support O_DIRECT ({e}); choose --dir on a real disk, or --buffered",
            dir.display()
        );
    }
    Ok(())
}
