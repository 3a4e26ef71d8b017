//! `spindle inspect` for chunk-store directories (not built yet).

use std::path::Path;
use std::process::ExitCode;

/// Whether `dir` holds a chunk store rather than a log.
pub fn looks_like_chunk_store(_dir: &Path) -> bool {
    false
}

/// Verify a chunk store offline and print a report.
pub fn run(_dir: &Path, _json: bool) -> anyhow::Result<ExitCode> {
    anyhow::bail!("chunk store inspection is not built yet")
}
