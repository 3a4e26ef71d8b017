//! `spindle verify --data DIR`: recompute the checksum of every Disk View of a stopped data
//! directory from its data and compare it with the stored one (docs/disk-view-format.md
//! "Checksum").
//!
//! Prints one line per view. Exit status: 0 when every view verifies, 1 when one does not
//! (a checksum or checkpoint mismatch, a misplaced version, a RocksDB corruption error, or a
//! view that cannot be opened, e.g. because a running node holds it).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use spindle_core::Partition;
use spindle_view::{DiskView, ViewError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The data directory of a stopped node (its Disk Views are under `views/`).
    #[arg(long)]
    pub data: PathBuf,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let views = disk_views(&args.data)?;
    if views.is_empty() {
        anyhow::bail!("no Disk Views under {}", args.data.join("views").display());
    }
    let mut bad = 0usize;
    for (dir, partition) in &views {
        let name = dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let verdict = match DiskView::open(dir, *partition).and_then(|view| view.verify()) {
            Ok(report) if report.ok() => format!(
                "ok        applied {} versions {} checksum {} checkpoints {}",
                report.applied, report.versions, report.computed, report.checkpoints_checked
            ),
            Ok(report) => {
                bad += 1;
                let stored = report
                    .stored
                    .map_or_else(|| "none at this index".to_owned(), |s| s.to_hex());
                let mut line = format!(
                    "MISMATCH  applied {} stored {stored} computed {}",
                    report.applied, report.computed
                );
                for (index, stored, computed) in &report.checkpoint_mismatches {
                    line.push_str(&format!(
                        "; checkpoint {index}: stored {stored} computed {computed}"
                    ));
                }
                if report.misplaced > 0 {
                    line.push_str(&format!("; {} misplaced versions", report.misplaced));
                }
                line
            }
            Err(ViewError::Db { source, .. }) => {
                bad += 1;
                format!("CORRUPT   {source}")
            }
            Err(e) => {
                bad += 1;
                format!("ERROR     {e}")
            }
        };
        println!("{name:<16} {verdict}");
    }
    if bad == 0 {
        println!("{} Disk Views verified", views.len());
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{bad} of {} Disk Views failed to verify", views.len());
        Ok(ExitCode::from(1))
    }
}

/// The Disk View directories of a data directory (`views/disk-I-of-N`) with their
/// partitions, sorted by name.
fn disk_views(data: &Path) -> anyhow::Result<Vec<(PathBuf, Partition)>> {
    let root = data.join("views");
    let entries =
        std::fs::read_dir(&root).with_context(|| format!("reading {}", root.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let Some((i, n)) = name
            .strip_prefix("disk-")
            .and_then(|rest| rest.split_once("-of-"))
            .and_then(|(i, n)| Some((i.parse::<u64>().ok()?, n.parse::<u64>().ok()?)))
            .filter(|(i, n)| i < n)
        else {
            continue;
        };
        out.push((path, Partition::nth(i, n)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
