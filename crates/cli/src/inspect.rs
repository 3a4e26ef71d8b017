//! `spindle inspect DIR`: verify a log directory (or a chunk store) offline.

use std::path::Path;
use std::process::ExitCode;

use crate::inspect_chunks;

pub fn run(dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    if inspect_chunks::looks_like_chunk_store(dir) {
        return inspect_chunks::run(dir, json);
    }
    anyhow::bail!("log inspection is not built yet")
}
