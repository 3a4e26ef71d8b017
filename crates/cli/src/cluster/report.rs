//! What a cluster's members answer: NATS servers' `/healthz?js-enabled-only=true`, Spindle
//! processes' `/v1/status` (applied and durable index), and the table and JSON that `up`
//! and `status` print from it.

use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::HttpClient;

use super::proc;
use super::state::{Cluster, Member, Network, TOKEN_FILE};

/// One probe's limit: a member that takes longer is "not answering".
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Asks members whether they answer.
#[derive(Debug)]
pub struct Prober {
    rt: tokio::runtime::Runtime,
    token: Option<String>,
}

impl Prober {
    pub fn new(token: Option<String>) -> anyhow::Result<Prober> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Prober { rt, token })
    }

    fn get(&self, base: &str, path: &str, token: bool) -> anyhow::Result<(StatusCode, Value)> {
        let client = HttpClient::new(base, self.token.clone().filter(|_| token));
        // The timer is made inside the runtime: it needs the runtime's time driver.
        let answer = self.rt.block_on(async {
            tokio::time::timeout(PROBE_TIMEOUT, client.json(Method::GET, path, None)).await
        });
        match answer {
            Ok(result) => result,
            Err(_) => anyhow::bail!("{base}{path} did not answer within {PROBE_TIMEOUT:?}"),
        }
    }

    /// A Spindle member's `/v1/status`.
    pub fn spindle_status(&self, m: &Member) -> anyhow::Result<Value> {
        let base = m.http_url().expect("a Spindle member");
        let (status, body) = self.get(&base, "/v1/status", true)?;
        anyhow::ensure!(
            status.is_success(),
            "{base}/v1/status answered {status}: {body}"
        );
        Ok(body)
    }

    /// Whether a NATS server has JetStream up (its monitor's health check).
    pub fn nats_healthy(&self, m: &Member) -> anyhow::Result<()> {
        let base = m.monitor_url().expect("a NATS member");
        let (status, body) = self.get(&base, "/healthz?js-enabled-only=true", false)?;
        anyhow::ensure!(
            status.is_success(),
            "{base}/healthz answered {status}: {body}"
        );
        Ok(())
    }

    /// Whether the member answers as a ready member of its kind.
    pub fn ready(&self, m: &Member) -> bool {
        if m.is_nats() {
            self.nats_healthy(m).is_ok()
        } else {
            self.spindle_status(m).is_ok()
        }
    }
}

/// The token `up` wrote, if it did.
pub fn read_token(cluster: &Cluster) -> Option<String> {
    std::fs::read_to_string(cluster.dir.join(TOKEN_FILE))
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// One member as seen now.
#[derive(Debug)]
pub struct Row<'a> {
    pub member: &'a Member,
    pub alive: bool,
    /// Answered its probe (None: not asked, it does not run).
    pub answering: Option<bool>,
    /// The least applied index over the member's views.
    pub applied: Option<u64>,
    /// The log's durable index as the member sees it.
    pub durable: Option<u64>,
    /// For an API process: whether it appends (holds the appender lease) or stands by.
    pub appender: Option<bool>,
}

pub fn rows<'a>(cluster: &'a Cluster, prober: &Prober) -> Vec<Row<'a>> {
    cluster
        .members
        .iter()
        .map(|m| {
            let alive = proc::alive(m);
            let mut row = Row {
                member: m,
                alive,
                answering: None,
                applied: None,
                durable: None,
                appender: None,
            };
            if !alive {
                return row;
            }
            if m.is_nats() {
                row.answering = Some(prober.nats_healthy(m).is_ok());
            } else {
                match prober.spindle_status(m) {
                    Ok(s) => {
                        row.answering = Some(true);
                        row.applied = s["views"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|v| v["applied_index"].as_u64())
                            .min();
                        row.durable = s["log"]["durable_index"].as_u64();
                        if m.partition.is_none() {
                            row.appender = s["log"]["appender"].as_bool();
                        }
                    }
                    Err(_) => row.answering = Some(false),
                }
            }
            row
        })
        .collect()
}

fn partition(cluster: &Cluster, m: &Member) -> String {
    match (m.partition, m.is_nats()) {
        (Some(_), _) => m.partition_label(cluster.partitions).unwrap_or_default(),
        (None, true) => "-".to_owned(),
        (None, false) => "all".to_owned(),
    }
}

fn state_word(row: &Row) -> &'static str {
    match (row.alive, row.answering) {
        (false, _) => "dead",
        (true, Some(false)) => "alive, not answering",
        (true, _) => "alive",
    }
}

/// The table of every member, then the URLs to use.
pub fn print_table(cluster: &Cluster, rows: &[Row]) {
    let mut lines = vec![[
        "NAME",
        "ROLE",
        "PARTITION",
        "PID",
        "STATE",
        "APPLIED",
        "ADDRESSES",
    ]
    .map(str::to_owned)];
    for row in rows {
        let m = row.member;
        lines.push([
            m.name.clone(),
            match row.appender {
                Some(true) => format!("{} (appender)", m.role),
                Some(false) => format!("{} (standby)", m.role),
                None => m.role.clone(),
            },
            partition(cluster, m),
            m.pid.map_or("-".to_owned(), |p| p.to_string()),
            state_word(row).to_owned(),
            row.applied.map_or("-".to_owned(), |a| a.to_string()),
            m.addresses()
                .iter()
                .map(|(what, addr)| format!("{what} {addr}"))
                .collect::<Vec<_>>()
                .join("  "),
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
        .collect();
    for l in &lines {
        let mut out = String::new();
        for (c, cell) in l.iter().enumerate() {
            if c + 1 == l.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            }
        }
        println!("{}", out.trim_end());
    }
    if let Some(durable) = rows.iter().filter_map(|r| r.durable).max() {
        println!("log: durable index {durable} (stream {})", cluster.stream);
    }
    for url in cluster.api_urls() {
        println!("API: {url}");
    }
}

/// How to use the token, after `up`.
pub fn print_usage(cluster: &Cluster) {
    let dir = cluster.dir.display();
    let token = cluster.dir.join(TOKEN_FILE);
    let api = cluster.api_urls().into_iter().next().unwrap_or_default();
    let server = api.trim_start_matches("http://");
    println!();
    println!(
        "Every Spindle member requires the bearer token in {} (mode 0600):",
        token.display()
    );
    println!("  export SPINDLE_TOKEN=$(cat {})", token.display());
    println!("  curl -H \"Authorization: Bearer $SPINDLE_TOKEN\" {api}/v1/status");
    println!("  spindle status --server {server}");
    if matches!(cluster.network, Network::Namespaces { .. }) {
        println!("Members listen in their own network namespaces (ip netns list); this host reaches them over the bridge.");
    }
    println!(
        "Status: spindle cluster status --dir {dir}    Stop: spindle cluster down --dir {dir}"
    );
}

pub fn json(cluster: &Cluster, rows: &[Row]) -> Value {
    let members: Vec<Value> = rows
        .iter()
        .map(|row| {
            let m = row.member;
            let addresses: serde_json::Map<String, Value> = m
                .addresses()
                .into_iter()
                .map(|(what, addr)| (what.to_owned(), Value::String(addr)))
                .collect();
            json!({
                "name": m.name,
                "role": m.role,
                "partition": m.partition_label(cluster.partitions),
                "pid": m.pid,
                "alive": row.alive,
                "answering": row.answering,
                "applied_index": row.applied,
                "durable_index": row.durable,
                "appender": row.appender,
                "addresses": addresses,
                "netns": m.netns,
                "log": m.log,
            })
        })
        .collect();
    json!({
        "dir": cluster.dir,
        "phase": cluster.phase,
        "network": cluster.network,
        "stream": cluster.stream,
        "api_urls": cluster.api_urls(),
        "token_file": cluster.dir.join(TOKEN_FILE),
        "members": members,
    })
}
