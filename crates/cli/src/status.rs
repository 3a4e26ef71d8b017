//! `spindle status`: a running node's status report, as text or JSON.

use std::process::ExitCode;

use spindle_server::client::HttpClient;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's HTTP address (host:port).
    #[arg(long, default_value = "127.0.0.1:7070")]
    server: String,
    #[arg(long, env = "SPINDLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print the JSON report.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let client = HttpClient::new(&args.server, args.token.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (status, s) = rt.block_on(client.json(hyper::Method::GET, "/v1/status", None))?;
    if !status.is_success() {
        anyhow::bail!("the node answered {status}: {}", s["message"]);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    let log = &s["log"];
    println!(
        "log: indexes {}..={} ({} syncs)",
        log["first_index"], log["durable_index"], log["syncs"]
    );
    for v in s["views"].as_array().into_iter().flatten() {
        println!(
            "view {:<16} {:<6} applied {:>10}  lag {:>8}{}",
            v["id"].as_str().unwrap_or("?"),
            v["kind"].as_str().unwrap_or("?"),
            v["applied_index"],
            v["lag"],
            if v["ready"] == true {
                ""
            } else {
                "  (booting)"
            }
        );
    }
    for b in s["boots"].as_array().into_iter().flatten() {
        println!(
            "boot {:<16} {:<8} {} items, {} bytes, {:.1} MiB/s{}",
            b["view"].as_str().unwrap_or("?"),
            b["state"].as_str().unwrap_or("?"),
            b["items"],
            b["bytes"],
            b["bytes_per_s"].as_f64().unwrap_or(0.0) / f64::from(1 << 20),
            b["eta_s"]
                .as_f64()
                .map(|e| format!(", ETA {e:.0}s"))
                .unwrap_or_default()
        );
    }
    for c in s["carousels"].as_array().into_iter().flatten() {
        let riders = c["riders"].as_array().map_or(0, Vec::len);
        if riders > 0 {
            println!(
                "carousel {}: {riders} riders",
                c["view"].as_str().unwrap_or("?")
            );
        }
    }
    println!(
        "truncation: {}",
        s["truncation"]["held_back_by"].as_str().unwrap_or("?")
    );
    for f in s["failures"].as_array().into_iter().flatten() {
        println!("FAILURE: {}", f.as_str().unwrap_or("?"));
    }
    Ok(ExitCode::SUCCESS)
}
