//! `spindle ride`: board a carousel of a running node (or ask for a dedicated iterator) and
//! report, like Beam's `cc` tool, how long the ride took and its average MiB/s.

use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use spindle_server::client::{grpc_connect, ride};
use spindle_server::proto::{IterateRequest, Kinds};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's gRPC address (host:port).
    #[arg(long, default_value = "127.0.0.1:7071")]
    server: String,
    /// Bearer token, if the node requires one.
    #[arg(long, env = "SPINDLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The Disk View to ride (ids in `spindle status`).
    #[arg(long, default_value = "disk-0")]
    view: String,
    /// A dedicated iterator instead of the shared carousel.
    #[arg(long)]
    dedicated: bool,
    /// Hash range low end (default: the view's).
    #[arg(long)]
    range_lo: Option<u64>,
    /// Hash range high end, exclusive (default: the view's).
    #[arg(long)]
    range_hi: Option<u64>,
    /// Only nodes, or only edges.
    #[arg(long, value_parser = ["all", "nodes", "edges"], default_value = "all")]
    kinds: String,
    /// Keys without values.
    #[arg(long)]
    keys_only: bool,
    /// Only each item's newest version.
    #[arg(long)]
    latest_only: bool,
    /// Lowest index wanted.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// The cut (default: the view's applied index at boarding).
    #[arg(long)]
    to: Option<u64>,
    /// A JSON Pointer: send only this property.
    #[arg(long)]
    projection: Option<String>,
    /// Print one JSON object instead of text, and no progress bar.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let request = IterateRequest {
        view: args.view.clone(),
        range_lo: args.range_lo,
        range_hi: args.range_hi,
        kinds: match args.kinds.as_str() {
            "nodes" => Kinds::Nodes,
            "edges" => Kinds::Edges,
            _ => Kinds::All,
        } as i32,
        keys_only: args.keys_only,
        from: args.from,
        to: args.to,
        projection: args.projection.clone(),
        latest_only: args.latest_only,
        dedicated: args.dedicated,
    };
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner().with_style(ProgressStyle::with_template(
            "{spinner} {bytes} received ({bytes_per_sec}) {elapsed}",
        )?)
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(async {
        let mut client = grpc_connect(&args.server, args.token.as_deref()).await?;
        ride(&mut client, request, |bytes| bar.set_position(bytes)).await
    })?;
    bar.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "mode": if args.dedicated { "dedicated" } else { "carousel" },
                "view": args.view,
                "seconds": report.seconds,
                "bytes": report.bytes,
                "frames": report.frames,
                "cut": report.cut.get(),
                "mib_per_s": report.mib_per_s(),
            })
        );
    } else {
        println!(
            "{} frames, {} bytes, cut {}",
            report.frames, report.bytes, report.cut
        );
        println!("Took {:.3}s", report.seconds);
        println!("Average {:.1} MiB/s", report.mib_per_s());
    }
    Ok(ExitCode::SUCCESS)
}
