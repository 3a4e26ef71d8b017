//! The node's configuration: a TOML file (every key optional) overlaid by command-line flags.
//! Validation refuses what would be unsafe or meaningless before anything is opened: a
//! listener on a non-loopback address without a bearer token, zero partitions, a bad
//! JSON Pointer for an Index View.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Highest `tail_batch_records_max` accepted.
pub const TAIL_BATCH_RECORDS_LIMIT: u32 = 1 << 16;
/// Lowest `tail_batch_bytes_max` accepted.
pub const TAIL_BATCH_BYTES_MIN: usize = 64 << 10;
/// Highest `tail_streams_max`, `iterate_streams_max` and `carousel_groups_max` accepted.
pub const STREAMS_LIMIT: usize = 4096;
/// Lowest `shutdown_ms_max` accepted.
pub const SHUTDOWN_MS_MIN: u64 = 100;

/// The largest `iter_chunk_bytes` accepted.
pub const ITER_CHUNK_BYTES_MAX: usize = 4 << 20;

/// Largest `request_bodies_bytes_max` accepted (1 TiB).
pub const REQUEST_BODIES_BYTES_LIMIT: u64 = 1 << 40;

/// Most connections one listener may be configured to hold.
pub const CONNECTIONS_LIMIT: usize = 1_000_000;

/// One Index View: property value → node ids for the property at `pointer`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IndexConfig {
    /// The name in `/v1/index/{name}`.
    pub name: String,
    /// A JSON Pointer (RFC 6901) such as `/name`.
    pub pointer: String,
}

/// Everything `spindle serve` needs. Field names are the TOML keys.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Directory of the log, the Disk Views and the chunk store (created if missing).
    pub data_dir: PathBuf,
    /// HTTP/JSON listener.
    pub http_listen: SocketAddr,
    /// gRPC listener (iteration, log tail).
    pub grpc_listen: SocketAddr,
    /// Bearer token every request must carry. Required when a listener is not loopback.
    pub token: Option<String>,
    /// Disk View partitions (each its own RocksDB), "partition i of n" of DESIGN.md §1.
    pub disk_partitions: u64,
    /// Keep a Memory View (booted from the Disk Views on every start).
    pub memory_view: bool,
    /// Index Views to keep.
    pub index_views: Vec<IndexConfig>,
    /// Disk View replicas that must have applied a log prefix before it may be deleted.
    pub truncate_replicas_min: usize,
    /// Delete log segments that every Disk View covers (off: keep the whole log).
    pub truncate: bool,
    /// How often the truncation worker runs.
    pub truncate_interval_ms: u64,
    /// How often every Disk View is scrubbed: read whole at a snapshot (RocksDB checks
    /// each block's checksum) and its checksum and checkpoints recomputed and compared
    /// with the stored ones. A view that fails is marked corrupt: it stops serving reads
    /// and iteration, and on a shared log it is left out of other members' reads, boots and
    /// truncation. 0: never.
    pub scrub_interval_ms: u64,
    /// Preallocated size of each log segment.
    pub log_segment_bytes: u64,
    /// fdatasync before acknowledging appends. Off only for experiments: acknowledged
    /// writes can then be lost on a crash.
    pub log_sync: bool,
    /// Largest HTTP request body (transactions, multiget).
    pub request_body_bytes_max: usize,
    /// Bytes of HTTP request bodies (transactions, multigets, chunks) the node holds at
    /// once, over every connection and stream; a body the budget has no room for within
    /// `request_body_ms_max` is answered `503 busy`. At least the largest single body.
    pub request_bodies_bytes_max: u64,
    /// Bytes of HTTP answers of 64 KiB or more the node holds at once while their clients
    /// take them, over every connection and stream; an answer that finds no room is
    /// answered `503 busy` instead (one larger than the whole budget needs all of it).
    pub answers_bytes_max: u64,
    /// Longest time an HTTP request body (or chunk) may take to arrive, from the handler's
    /// first read to its last byte; a slower body is answered `408`. Also how long a
    /// client may take no byte of an answer (an HTTP/2 answer's next piece) before its
    /// connection is closed (docs/api.md).
    pub request_body_ms_max: u64,
    /// How long a gRPC stream's next message (`Tail`, `Iterate`) may wait for its client
    /// to take it before the client's connection is closed, freeing the stream's seat.
    /// Longer than `request_body_ms_max`: a booting view's consumer may pause for a
    /// storage engine's write stall.
    pub stream_stall_ms_max: u64,
    /// Connections each listener (HTTP, gRPC) holds open at once; past it a new one is
    /// closed as soon as it is accepted. Also at most a quarter of the open-files limit, so
    /// that connections never take the descriptors the log and the views need.
    pub connections_max: usize,
    /// Connections one source (an IPv4 address, an IPv6 /64) holds open at once on each
    /// listener; past it a new one from that source is closed as soon as it is accepted.
    /// One client cannot take every seat of `connections_max`. Set it to `connections_max`
    /// for a node behind a proxy whose connections all come from one address.
    pub connections_per_source_max: usize,
    /// Largest chunk accepted by `PUT /v1/chunks/{id}`.
    pub chunk_bytes_max: usize,
    /// Space the chunk store may use.
    pub chunk_store_bytes_max: u64,
    /// Chunk volumes appended to at once (1 ..= 64; docs/chunk-format.md, "Lanes").
    pub chunk_active_volumes: usize,
    /// Frame bytes per gRPC iteration message.
    pub iter_chunk_bytes: usize,
    /// Chunks a carousel rider may fall behind the scanner before it is moved to its own
    /// iterator (below `carousel_ring_slots`).
    pub rider_lag_chunks_max: u64,
    /// Slots of each carousel's ring; each holds one shared chunk per filter group, so a
    /// carousel buffers at most `carousel_ring_slots × groups × iter_chunk_bytes`.
    pub carousel_ring_slots: usize,
    /// RocksDB block cache of each Disk View (0: RocksDB's default).
    pub disk_block_cache_bytes: usize,
    /// Read the Disk Views' table files with O_DIRECT, bypassing the page cache (a
    /// filesystem without O_DIRECT then refuses to open them).
    pub disk_direct_reads: bool,
    /// Longest wait a read may ask for (`min_index` with `timeout_ms`).
    pub read_wait_ms_max: u64,
    /// Most records in one `Tail` message (a client's `batch_records_max` above it is
    /// lowered to it).
    pub tail_batch_records_max: u32,
    /// Most bytes in one `Tail` message, whole transactions only (a transaction larger
    /// than this goes alone; every transaction fits the gRPC message limit).
    pub tail_batch_bytes_max: usize,
    /// `Tail` streams open at once; more are refused with RESOURCE_EXHAUSTED.
    pub tail_streams_max: usize,
    /// `Iterate` streams (each a rider thread) open at once; more are refused with
    /// RESOURCE_EXHAUSTED.
    pub iterate_streams_max: usize,
    /// Distinct filter groups (kinds, keys-only, `from`, projection) each carousel encodes
    /// for at once; a rider that would add one more is refused with RESOURCE_EXHAUSTED.
    pub carousel_groups_max: usize,
    /// Longest a graceful shutdown may take: in-flight requests, streams, and the views
    /// draining to the durable index. Past it the node stops anyway and logs what was left.
    pub shutdown_ms_max: u64,
    /// Run the log on a NATS JetStream cluster instead of the file log under `data_dir`
    /// (TOML table `[jetstream]`; `spindle serve --jetstream URL…`). Needs the `jetstream`
    /// feature (on in the `spindle` binary).
    pub jetstream: Option<JetStreamSettings>,
    /// What this process is: `node` (the embedded node: appends, reads, every view),
    /// `disk-view` (a Disk View server on a shared JetStream log: holds only `partitions`,
    /// follows the stream as a reader, serves reads and iteration, refuses appends) or
    /// `api` (appends to the shared log, holds no Disk View: forwards item reads to the Disk
    /// View servers of the catalog and boots its Memory and Index Views from them).
    pub role: Role,
    /// The partitions of `disk_partitions` this process holds (default: all). A
    /// `disk-view` server holds the ones listed here (`--partition I/N`).
    pub partitions: Option<Vec<u64>>,
    /// How a `disk-view` server fills a Disk View it does not have yet (a new partition,
    /// or one left by an unfinished boot): `auto` (default) boots it from the Disk View
    /// servers of the catalog that cover its range when they hold anything, else replays
    /// the log while it still starts at index 1, else waits for such servers; `replicas`
    /// always boots from those servers (waiting for them); `log` always replays the log
    /// (docs/cluster.md "Re-partitioning").
    pub disk_boot: DiskBoot,
}

/// Where a Disk View server's new Disk Views come from (`disk_boot`, `--disk-boot`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DiskBoot {
    #[default]
    Auto,
    Replicas,
    Log,
}

impl DiskBoot {
    pub fn name(self) -> &'static str {
        match self {
            DiskBoot::Auto => "auto",
            DiskBoot::Replicas => "replicas",
            DiskBoot::Log => "log",
        }
    }
}

/// A process's role (`role` in the config, `--role`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    #[default]
    Node,
    DiskView,
    Api,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::DiskView => "disk-view",
            Role::Api => "api",
        }
    }
}

/// Where the node's JetStream log lives (docs/cluster.md).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct JetStreamSettings {
    /// Client URLs of the cluster's servers (`nats://host:port`).
    pub servers: Vec<String>,
    /// Monitoring URLs (`http://host:port`) of every server: the log reads each one's
    /// `/varz` and refuses servers that do not sync every write before acknowledging it.
    pub monitor_urls: Vec<String>,
    /// The stream's name.
    #[serde(default = "default_stream")]
    pub stream: String,
    /// Replicas the stream must have.
    #[serde(default = "default_replicas")]
    pub replicas: usize,
    /// This node's key in the stream's catalog (`<stream>_CATALOG`); default
    /// `<hostname>-<http port>`. ASCII letters, digits, `-`, `_`, `=`.
    #[serde(default)]
    pub node_name: Option<String>,
    /// A catalog entry not renewed for this long drops out (renewed every third of it).
    #[serde(default = "default_catalog_ttl_ms")]
    pub catalog_ttl_ms: u64,
    /// How long the appender's group commit waits for more transactions while it holds
    /// fewer than the previous one (a lone writer never waits); 0 never waits.
    #[serde(default = "default_group_commit_linger_ms")]
    pub group_commit_linger_ms: u64,
    /// Payload bytes of the most recently announced records this process keeps for its
    /// views (the feed, docs/cluster.md); 0 turns the feed off and views read every record
    /// from the stream.
    #[serde(default = "default_feed_cache_bytes_max")]
    pub feed_cache_bytes_max: usize,
    /// Whether the appender, once it holds the lease, moves the stream's leader to the
    /// NATS server it is connected to, so its batches are not relayed (docs/cluster.md).
    #[serde(default = "default_leader_follows_appender")]
    pub leader_follows_appender: bool,
}

impl JetStreamSettings {
    /// No servers yet, every other setting at its default.
    pub fn empty() -> Self {
        JetStreamSettings {
            servers: Vec::new(),
            monitor_urls: Vec::new(),
            stream: default_stream(),
            replicas: default_replicas(),
            node_name: None,
            catalog_ttl_ms: default_catalog_ttl_ms(),
            group_commit_linger_ms: default_group_commit_linger_ms(),
            feed_cache_bytes_max: default_feed_cache_bytes_max(),
            leader_follows_appender: default_leader_follows_appender(),
        }
    }
}

/// The longest group-commit linger the config takes.
pub const GROUP_COMMIT_LINGER_MS_MAX: u64 = 1000;

fn default_group_commit_linger_ms() -> u64 {
    5
}

fn default_leader_follows_appender() -> bool {
    true
}

fn default_feed_cache_bytes_max() -> usize {
    64 << 20
}

fn default_catalog_ttl_ms() -> u64 {
    10_000
}

fn default_stream() -> String {
    "SPINDLE".to_owned()
}

fn default_replicas() -> usize {
    3
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data_dir: PathBuf::from("spindle-data"),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 7071)),
            token: None,
            disk_partitions: 4,
            memory_view: true,
            index_views: Vec::new(),
            truncate_replicas_min: 1,
            truncate: true,
            truncate_interval_ms: 10_000,
            scrub_interval_ms: 86_400_000,
            log_segment_bytes: 64 << 20,
            log_sync: true,
            request_body_bytes_max: 16 << 20,
            // 64 bodies of the largest size at once.
            request_bodies_bytes_max: 1 << 30,
            // 16 answers of the largest JSON size (64 MiB) at once.
            answers_bytes_max: 1 << 30,
            request_body_ms_max: 30_000,
            connections_max: 1000,
            connections_per_source_max: 250,
            chunk_bytes_max: 16 << 20,
            chunk_store_bytes_max: 1 << 40,
            chunk_active_volumes: 1,
            // A chunk costs each rider a wakeup and a send: with 1 MiB chunks five riders
            // cost the node less CPU than with 256 KiB ones (docs/benchmarks/carousel.md,
            // run 6).
            iter_chunk_bytes: 1 << 20,
            // 64 MiB of lag: on a busy 2-core machine, rider processes sharing the cores
            // with the server drift apart by tens of MiB without being slow, and a demoted
            // rider reads the disk on its own (docs/benchmarks/carousel.md).
            rider_lag_chunks_max: 64,
            carousel_ring_slots: 128,
            disk_block_cache_bytes: 0,
            disk_direct_reads: false,
            read_wait_ms_max: 60_000,
            stream_stall_ms_max: 120_000,
            tail_batch_records_max: 4096,
            tail_batch_bytes_max: 4 << 20,
            tail_streams_max: 64,
            iterate_streams_max: 64,
            carousel_groups_max: 16,
            shutdown_ms_max: 30_000,
            jetstream: None,
            role: Role::Node,
            partitions: None,
            disk_boot: DiskBoot::Auto,
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl ServerConfig {
    /// Read a TOML file; keys it does not set keep their defaults.
    pub fn from_file(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// The carousel of each Disk View.
    pub fn carousel(&self) -> spindle_view::carousel::CarouselConfig {
        spindle_view::carousel::CarouselConfig {
            chunk_bytes: self.iter_chunk_bytes,
            rider_lag_chunks_max: self.rider_lag_chunks_max,
            ring_slots: self.carousel_ring_slots,
            groups_max: self.carousel_groups_max,
            item_shared_bytes_max: spindle_view::carousel::ITEM_SHARED_BYTES_MAX_DEFAULT,
            idle_chunk_ms: spindle_view::carousel::IDLE_CHUNK_MS_DEFAULT,
        }
    }

    pub fn shutdown_max(&self) -> Duration {
        Duration::from_millis(self.shutdown_ms_max)
    }

    pub fn truncate_interval(&self) -> Duration {
        Duration::from_millis(self.truncate_interval_ms)
    }

    /// Refuse settings that are unsafe or meaningless, saying which and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        for (what, addr) in [
            ("http_listen", self.http_listen),
            ("grpc_listen", self.grpc_listen),
        ] {
            if !addr.ip().is_loopback() && self.token.is_none() {
                return bad(format!(
                    "{what} is {addr}, which is not a loopback address: set a bearer token \
                     (`token` in the config file or --token) so that other machines must \
                     authenticate"
                ));
            }
        }
        if matches!(&self.token, Some(t) if t.len() < 16 || t.chars().any(char::is_whitespace)) {
            return bad("token must be at least 16 characters without whitespace".into());
        }
        if self.http_listen == self.grpc_listen && self.http_listen.port() != 0 {
            return bad(format!(
                "http_listen and grpc_listen are both {}",
                self.http_listen
            ));
        }
        if !(1..=spindle_core::DISK_PARTITIONS_MAX).contains(&self.disk_partitions) {
            return bad(format!(
                "disk_partitions is {}; it must be between 1 and {}",
                self.disk_partitions,
                spindle_core::DISK_PARTITIONS_MAX
            ));
        }
        if let Some(js) = &self.jetstream {
            if !cfg!(feature = "jetstream") {
                return bad(
                    "jetstream is configured, but this build has no JetStream support \
                     (build spindle with the `jetstream` feature)"
                        .into(),
                );
            }
            if js.servers.is_empty() || js.monitor_urls.is_empty() {
                return bad(
                    "jetstream needs at least one server URL and the monitoring URL \
                     of every server"
                        .into(),
                );
            }
            if js.replicas == 0 {
                return bad("jetstream replicas must be at least 1".into());
            }
            if js.group_commit_linger_ms > GROUP_COMMIT_LINGER_MS_MAX {
                return bad(format!(
                    "jetstream group_commit_linger_ms is {}; it must be at most \
                     {GROUP_COMMIT_LINGER_MS_MAX} (a batch waits this long for more \
                     transactions)",
                    js.group_commit_linger_ms
                ));
            }
        }
        if let Some(parts) = &self.partitions {
            if parts.is_empty() || parts.iter().any(|&p| p >= self.disk_partitions) {
                return bad(format!(
                    "partitions {parts:?} must name at least one of 0..{} (disk_partitions)",
                    self.disk_partitions
                ));
            }
            if self.role == Role::Node && parts.len() as u64 != self.disk_partitions {
                return bad(
                    "a node holds every partition; only a disk-view server holds a \
                     subset (role = \"disk-view\")"
                        .into(),
                );
            }
        }
        if self.role == Role::Api {
            if self.jetstream.is_none() {
                return bad(
                    "an api server appends to a shared log and reads from Disk View servers: \
                     configure [jetstream] (--jetstream URL)"
                        .into(),
                );
            }
            if self.partitions.is_some() {
                return bad(
                    "an api server holds no Disk View partitions; drop `partitions` \
                     (--partition) or use role = \"disk-view\""
                        .into(),
                );
            }
        }
        if self.disk_boot == DiskBoot::Replicas && self.role != Role::DiskView {
            return bad(
                "disk_boot = \"replicas\" is for a disk-view server (role = \"disk-view\"): \
                 only it boots Disk Views from other servers"
                    .into(),
            );
        }
        if self.role == Role::DiskView && self.jetstream.is_none() {
            return bad(
                "a disk-view server follows a shared log: configure [jetstream] \
                 (--jetstream URL)"
                    .into(),
            );
        }
        if self.truncate_replicas_min == 0 {
            return bad("truncate_replicas_min must be at least 1".into());
        }
        let mut names = std::collections::BTreeSet::new();
        for index in &self.index_views {
            if index.name.is_empty()
                || !index
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return bad(format!(
                    "index view name {:?} must be non-empty ASCII letters, digits, '_' or '-'",
                    index.name
                ));
            }
            if !names.insert(index.name.as_str()) {
                return bad(format!("index view {:?} is configured twice", index.name));
            }
            if let Err(e) =
                spindle_view::IndexView::new(spindle_core::Partition::ALL, &index.pointer)
            {
                return bad(format!("index view {:?}: {e}", index.name));
            }
        }
        if !(1..=64).contains(&self.chunk_active_volumes) {
            return bad(format!(
                "chunk_active_volumes is {}; it must be between 1 and 64",
                self.chunk_active_volumes
            ));
        }
        if self.iter_chunk_bytes < 4096 || self.iter_chunk_bytes > ITER_CHUNK_BYTES_MAX {
            return bad("iter_chunk_bytes must be between 4096 and 4 MiB".into());
        }
        if self.request_body_bytes_max < 1024 {
            return bad("request_body_bytes_max must be at least 1024".into());
        }
        if let Err(e) = self.carousel().check() {
            return bad(format!(
                "carousel settings (iter_chunk_bytes, carousel_ring_slots, rider_lag_chunks_max, \
                 carousel_groups_max): {e}"
            ));
        }
        let largest = self.request_body_bytes_max.max(self.chunk_bytes_max) as u64;
        if self.request_bodies_bytes_max < largest {
            return bad(format!(
                "request_bodies_bytes_max is {}; it must hold at least the largest body \
                 (request_body_bytes_max and chunk_bytes_max: {largest})",
                self.request_bodies_bytes_max
            ));
        }
        if self.request_bodies_bytes_max > REQUEST_BODIES_BYTES_LIMIT {
            return bad(format!(
                "request_bodies_bytes_max is {}; it must be at most {REQUEST_BODIES_BYTES_LIMIT}",
                self.request_bodies_bytes_max
            ));
        }
        if !(1 << 20..=REQUEST_BODIES_BYTES_LIMIT).contains(&self.answers_bytes_max) {
            return bad(format!(
                "answers_bytes_max is {}; it must be between 1 MiB and \
                 {REQUEST_BODIES_BYTES_LIMIT}",
                self.answers_bytes_max
            ));
        }
        if self.request_body_ms_max == 0 {
            return bad("request_body_ms_max must be at least 1".into());
        }
        if self.stream_stall_ms_max == 0 {
            return bad("stream_stall_ms_max must be at least 1".into());
        }
        if !(1..=CONNECTIONS_LIMIT).contains(&self.connections_max) {
            return bad(format!(
                "connections_max must be 1 ..= {CONNECTIONS_LIMIT}, not {}",
                self.connections_max
            ));
        }
        if !(1..=CONNECTIONS_LIMIT).contains(&self.connections_per_source_max) {
            return bad(format!(
                "connections_per_source_max must be 1 ..= {CONNECTIONS_LIMIT}, not {}",
                self.connections_per_source_max
            ));
        }
        if self.truncate_interval_ms == 0 {
            return bad("truncate_interval_ms must be at least 1".into());
        }
        if !(1..=TAIL_BATCH_RECORDS_LIMIT).contains(&self.tail_batch_records_max) {
            return bad(format!(
                "tail_batch_records_max is {}; it must be between 1 and {TAIL_BATCH_RECORDS_LIMIT}",
                self.tail_batch_records_max
            ));
        }
        let bytes_limit = crate::grpc::GRPC_SEND_BYTES_MAX;
        if !(TAIL_BATCH_BYTES_MIN..=bytes_limit).contains(&self.tail_batch_bytes_max) {
            return bad(format!(
                "tail_batch_bytes_max is {}; it must be between {TAIL_BATCH_BYTES_MIN} and the \
                 gRPC message limit {bytes_limit}",
                self.tail_batch_bytes_max
            ));
        }
        for (what, n) in [
            ("tail_streams_max", self.tail_streams_max),
            ("iterate_streams_max", self.iterate_streams_max),
            ("carousel_groups_max", self.carousel_groups_max),
        ] {
            if !(1..=STREAMS_LIMIT).contains(&n) {
                return bad(format!(
                    "{what} is {n}; it must be between 1 and {STREAMS_LIMIT}"
                ));
            }
        }
        if self.shutdown_ms_max < SHUTDOWN_MS_MIN {
            return bad(format!(
                "shutdown_ms_max is {}; it must be at least {SHUTDOWN_MS_MIN}",
                self.shutdown_ms_max
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(c: &ServerConfig) -> String {
        c.validate().unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_valid_and_loopback_only() {
        let c = ServerConfig::default();
        c.validate().unwrap();
        assert!(c.http_listen.ip().is_loopback() && c.grpc_listen.ip().is_loopback());
        assert_eq!(c.disk_partitions, 4);
    }

    #[test]
    fn a_public_listener_needs_a_token() {
        let mut c = ServerConfig {
            http_listen: "0.0.0.0:7070".parse().unwrap(),
            ..ServerConfig::default()
        };
        assert!(invalid(&c).contains("bearer token"), "{}", invalid(&c));
        c.token = Some("short".into());
        assert!(invalid(&c).contains("16 characters"));
        c.token = Some("0123456789abcdef".into());
        c.validate().unwrap();
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        let c = ServerConfig {
            disk_partitions: 0,
            ..ServerConfig::default()
        };
        assert!(invalid(&c).contains("disk_partitions"));
        let idx = |name: &str, pointer: &str| IndexConfig {
            name: name.into(),
            pointer: pointer.into(),
        };
        let c = ServerConfig {
            index_views: vec![idx("by_name", "name")],
            ..ServerConfig::default()
        };
        assert!(invalid(&c).contains("by_name"));
        let c = ServerConfig {
            index_views: vec![idx("a", "/x"), idx("a", "/y")],
            ..ServerConfig::default()
        };
        assert!(invalid(&c).contains("twice"));
        for lanes in [0, 65] {
            let c = ServerConfig {
                chunk_active_volumes: lanes,
                ..ServerConfig::default()
            };
            assert!(invalid(&c).contains("chunk_active_volumes"), "{lanes}");
        }
        // Without the feature, any JetStream setting is refused (a build that cannot use it).
        #[cfg(feature = "jetstream")]
        {
            let mut js = JetStreamSettings::empty();
            js.servers = vec!["nats://127.0.0.1:4222".into()];
            js.monitor_urls = vec!["http://127.0.0.1:8222".into()];
            let c = ServerConfig {
                jetstream: Some(js.clone()),
                ..ServerConfig::default()
            };
            c.validate().unwrap();
            js.group_commit_linger_ms = GROUP_COMMIT_LINGER_MS_MAX + 1;
            let c = ServerConfig {
                jetstream: Some(js),
                ..ServerConfig::default()
            };
            assert!(invalid(&c).contains("group_commit_linger_ms"));
        }
    }

    #[test]
    fn stream_and_batch_bounds_are_checked_at_load() {
        type Edit = fn(&mut ServerConfig);
        let cases: [(&str, Edit); 8] = [
            ("tail_batch_records_max", |c| c.tail_batch_records_max = 0),
            ("tail_batch_records_max", |c| {
                c.tail_batch_records_max = TAIL_BATCH_RECORDS_LIMIT + 1
            }),
            ("tail_batch_bytes_max", |c| c.tail_batch_bytes_max = 1024),
            ("tail_batch_bytes_max", |c| {
                c.tail_batch_bytes_max = crate::grpc::GRPC_SEND_BYTES_MAX + 1
            }),
            ("tail_streams_max", |c| c.tail_streams_max = 0),
            ("iterate_streams_max", |c| c.iterate_streams_max = 0),
            ("carousel_groups_max", |c| c.carousel_groups_max = 0),
            ("shutdown_ms_max", |c| c.shutdown_ms_max = 0),
        ];
        for (key, edit) in cases {
            let mut c = ServerConfig::default();
            edit(&mut c);
            let e = invalid(&c);
            assert!(e.contains(key), "{key}: {e}");
        }
    }

    #[test]
    fn toml_files_overlay_the_defaults_and_refuse_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spindle.toml");
        std::fs::write(
            &path,
            "data_dir = \"d\"\ndisk_partitions = 8\n[[index_views]]\nname = \"by_name\"\npointer = \"/name\"\n",
        )
        .unwrap();
        let c = ServerConfig::from_file(&path).unwrap();
        assert_eq!(c.disk_partitions, 8);
        assert_eq!(c.data_dir, PathBuf::from("d"));
        assert_eq!(c.index_views.len(), 1);
        assert_eq!(c.http_listen, ServerConfig::default().http_listen);
        std::fs::write(&path, "disk_partitons = 8\n").unwrap();
        let e = ServerConfig::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("disk_partitons"), "{e}");
    }
}
