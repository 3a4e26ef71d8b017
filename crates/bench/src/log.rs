//! `spindle bench log` (being built).

/// Options of `spindle bench log`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Print one JSON object per system.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("spindle bench log is not built yet")
}
