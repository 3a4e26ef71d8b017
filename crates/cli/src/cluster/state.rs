//! The state file of a cluster on one machine (`DIR/cluster.json`): every member's name,
//! role, addresses, command line and process, so that `down`, `status`, `kill` and `start`
//! work from another shell. Written whole to a temporary file and renamed over the old one,
//! so a reader never sees half of it; `up` writes it before it creates anything, so `down`
//! can clean up after an `up` that crashed. Commands that change it hold `DIR/cluster.lock`
//! (flock) from reading it to writing it, so two shells do not lose each other's changes.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// The state file's format; `load` refuses others.
pub const STATE_FORMAT: u32 = 1;
pub const STATE_FILE: &str = "cluster.json";
/// The bearer token every Spindle member requires (mode 0600).
pub const TOKEN_FILE: &str = "token";
pub const LOCK_FILE: &str = "cluster.lock";

/// Held while a command reads, changes and writes the state file; released on drop.
#[derive(Debug)]
pub struct Lock(#[expect(dead_code, reason = "held for its flock")] std::fs::File);

/// Wait for and take the directory's lock.
pub fn lock(dir: &Path) -> anyhow::Result<Lock> {
    let path = dir.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.lock()
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(Lock(f))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// `up` is creating and starting members (or crashed while doing so).
    Starting,
    /// `up` saw every member answer.
    Up,
    /// `up` failed and stopped what it had started.
    Failed,
    /// `down` stopped everything.
    Down,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Network {
    Loopback,
    /// One namespace per member (`Member::netns`), each with a veth into `bridge`, which
    /// holds `gateway` (.1 of the /24) so this host reaches every member.
    Namespaces {
        bridge: String,
        gateway: Ipv4Addr,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ports {
    Nats {
        client: u16,
        monitor: u16,
        route: u16,
    },
    Spindle {
        http: u16,
        grpc: u16,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    /// `nats`, `disk-view`, or the API processes' role.
    pub role: String,
    /// For a Disk View server: its partition I of the cluster's partitions (or of
    /// `partitions`).
    pub partition: Option<u64>,
    /// For a Disk View server added by `cluster add`: the partition count of its set
    /// (absent: the cluster's `partitions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u64>,
    pub ip: Ipv4Addr,
    pub ports: Ports,
    pub netns: Option<String>,
    /// The host side of the member's veth pair (its namespace's side is `eth0`).
    pub veth: Option<String>,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The member's own directory (configs, data).
    pub dir: PathBuf,
    /// Its stdout and stderr, appended to across restarts.
    pub log: PathBuf,
    /// The process last started, if any, and its start time (clock ticks since boot, from
    /// /proc) so that a reused pid is never taken for it.
    pub pid: Option<u32>,
    pub start_ticks: Option<u64>,
}

impl Member {
    /// `I/N` for a Disk View server.
    pub fn partition_label(&self, cluster_partitions: u64) -> Option<String> {
        self.partition
            .map(|p| format!("{p}/{}", self.partitions.unwrap_or(cluster_partitions)))
    }

    pub fn is_nats(&self) -> bool {
        matches!(self.ports, Ports::Nats { .. })
    }

    pub fn nats_client_url(&self) -> Option<String> {
        match self.ports {
            Ports::Nats { client, .. } => Some(format!("nats://{}:{client}", self.ip)),
            Ports::Spindle { .. } => None,
        }
    }

    pub fn monitor_url(&self) -> Option<String> {
        match self.ports {
            Ports::Nats { monitor, .. } => Some(format!("http://{}:{monitor}", self.ip)),
            Ports::Spindle { .. } => None,
        }
    }

    pub fn route_url(&self) -> Option<String> {
        match self.ports {
            Ports::Nats { route, .. } => Some(format!("nats://{}:{route}", self.ip)),
            Ports::Spindle { .. } => None,
        }
    }

    pub fn http_url(&self) -> Option<String> {
        match self.ports {
            Ports::Spindle { http, .. } => Some(format!("http://{}:{http}", self.ip)),
            Ports::Nats { .. } => None,
        }
    }

    /// The member's addresses, as `what address` pairs for the table and JSON.
    pub fn addresses(&self) -> Vec<(&'static str, String)> {
        match self.ports {
            Ports::Nats {
                client,
                monitor,
                route,
            } => vec![
                ("client", format!("nats://{}:{client}", self.ip)),
                ("monitor", format!("http://{}:{monitor}", self.ip)),
                ("route", format!("{}:{route}", self.ip)),
            ],
            Ports::Spindle { http, grpc } => vec![
                ("http", format!("http://{}:{http}", self.ip)),
                ("grpc", format!("{}:{grpc}", self.ip)),
            ],
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    pub format: u32,
    pub dir: PathBuf,
    pub phase: Phase,
    pub network: Network,
    pub stream: String,
    pub nats: usize,
    pub partitions: u64,
    pub replicas: usize,
    pub api: usize,
    pub members: Vec<Member>,
}

impl Cluster {
    pub fn member(&self, name: &str) -> anyhow::Result<&Member> {
        self.members.iter().find(|m| m.name == name).ok_or_else(|| {
            anyhow::anyhow!(
                "no member named {name:?} in {}; members: {}",
                self.dir.display(),
                self.members
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    pub fn member_mut(&mut self, name: &str) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.name == name)
    }

    /// The API processes' URLs, the ones a user should use.
    pub fn api_urls(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.name.starts_with("api-"))
            .filter_map(Member::http_url)
            .collect()
    }

    pub fn save(&self) -> anyhow::Result<()> {
        let path = self.dir.join(STATE_FILE);
        let tmp = self.dir.join(format!("{STATE_FILE}.tmp"));
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

/// The cluster whose state is in `dir`, or None if `dir` holds no state file.
pub fn load(dir: &Path) -> anyhow::Result<Option<Cluster>> {
    let path = dir.join(STATE_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let cluster: Cluster = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a cluster state file", path.display()))?;
    anyhow::ensure!(
        cluster.format == STATE_FORMAT,
        "{} has format {}; this spindle reads format {STATE_FORMAT}",
        path.display(),
        cluster.format
    );
    Ok(Some(cluster))
}

/// The cluster in `dir`, or an error saying there is none.
pub fn load_existing(dir: &Path) -> anyhow::Result<Cluster> {
    load(dir)?.ok_or_else(|| {
        anyhow::anyhow!(
            "{} holds no cluster ({STATE_FILE} is missing); start one with `spindle cluster up --dir {}`",
            dir.display(),
            dir.display()
        )
    })
}
