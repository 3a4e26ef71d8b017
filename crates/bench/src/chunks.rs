//! `spindle bench chunks` (not built yet).

/// Options of `spindle bench chunks`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Print one JSON object per measurement.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("spindle bench chunks is not built yet")
}
