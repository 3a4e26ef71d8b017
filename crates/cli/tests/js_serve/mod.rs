//! A `spindle serve` process on a shared JetStream stream, for the tests that start several:
//! its config (top-level keys given by the test, then `[jetstream]` naming the cluster, the
//! stream and the member), its HTTP address from the first line it prints, and a kill when
//! the handle drops (a failing test leaves no process behind).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::Value;
use spindle_server::client::HttpClient;

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

/// `client`'s status once `want` holds (two minutes at most: a liveness bound, not a
/// performance one); past that, panics with `what` and `show` of the last status.
#[allow(dead_code)] // not every test that starts servers waits on a status
pub fn status_until(
    rt: &tokio::runtime::Runtime,
    client: &HttpClient,
    what: &str,
    want: impl Fn(&Value) -> bool,
    show: impl Fn(&Value) -> String,
) -> Value {
    let started = Instant::now();
    loop {
        let (_, status) = rt
            .block_on(client.json(Method::GET, "/v1/status", None))
            .unwrap();
        if want(&status) {
            return status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{what}: {}",
            show(&status)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
