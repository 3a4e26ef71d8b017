//! A `spindle serve` process on a shared JetStream stream, for the tests that start several:
//! its config (top-level keys given by the test, then `[jetstream]` naming the cluster, the
//! stream and the member), its HTTP address from the first line it prints, and a kill when
//! the handle drops (a failing test leaves no process behind).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::nats_cluster::Cluster;

pub struct Server {
    pub child: Child,
    pub http: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start member `name` on `stream` with its data under `dir`: `config` is (lines before
/// the `[jetstream]` table, lines added to it); `args` and `env` go to the process.
pub fn start(
    dir: &Path,
    cluster: &Cluster,
    stream: &str,
    name: &str,
    (top, jetstream): (&str, &str),
    args: &[&str],
    env: &[(&str, &str)],
) -> Server {
    let quote = |v: Vec<String>| {
        v.iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "{top}[jetstream]\nservers = [{}]\nmonitor_urls = [{}]\nstream = \"{stream}\"\n\
             replicas = 1\nnode_name = \"{name}\"\n{jetstream}",
            quote(cluster.servers()),
            quote(cluster.monitors()),
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args([
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.join(name))
        .args(args)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let http = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http="))
        .unwrap_or_else(|| panic!("{name}: no http= in {line:?}: it did not start"))
        .to_owned();
    Server { child, http }
}
