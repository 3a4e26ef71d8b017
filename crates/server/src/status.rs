//! The status report (`GET /v1/status`, `spindle status`) and the Prometheus metrics
//! (`GET /metrics`), both read from the node's live state.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use spindle_view::carousel::CarouselStatus;

use crate::node::Node;

/// Counters the surfaces bump. Names match the metrics they become.
#[derive(Debug, Default)]
pub struct Counters {
    pub appends: AtomicU64,
    pub append_conflicts: AtomicU64,
    pub append_errors: AtomicU64,
    pub records_appended: AtomicU64,
    pub reads: AtomicU64,
    pub bad_requests: AtomicU64,
    pub unauthorized: AtomicU64,
    pub iterations: AtomicU64,
    pub iteration_bytes: AtomicU64,
    pub tails: AtomicU64,
    pub chunk_puts: AtomicU64,
    pub chunk_gets: AtomicU64,
    /// Requests answered `503 busy`: no room in `request_bodies_bytes_max` in time.
    pub bodies_refused: AtomicU64,
    /// Answers replaced by `503 busy`: no room in `answers_bytes_max`.
    pub answers_refused: AtomicU64,
    /// Connections closed as soon as they were accepted: their listener held
    /// `connections_max`, or their source `connections_per_source_max`.
    pub connections_refused: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Status {
    pub uptime_s: f64,
    pub log: LogStatus,
    pub views: Vec<ViewStatus>,
    pub boots: Vec<BootStatus>,
    pub carousels: Vec<CarouselEntry>,
    pub truncation: TruncationStatus,
    pub chunks: ChunkStatus,
    pub failures: Vec<String>,
    pub tailer: TailerStatus,
    pub streams: StreamsStatus,
    pub request_bodies: BodiesStatus,
    /// HTTP answers being sent, against `answers_bytes_max`.
    pub answers: BodiesStatus,
    /// The stream's catalog, on a node that runs on JetStream (absent on the file log).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<crate::catalog::ClusterStatus>,
}

/// gRPC streams open now, and their limits.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StreamsStatus {
    pub iterate_open: usize,
    pub iterate_max: usize,
    pub tail_open: usize,
    pub tail_max: usize,
}

/// HTTP request bodies held now against `request_bodies_bytes_max`, or answers being sent
/// against `answers_bytes_max`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BodiesStatus {
    /// Bytes being read or in use (request bodies), or being sent (answers of 64 KiB or
    /// more), each rounded up to KiB.
    pub held_bytes: u64,
    pub max_bytes: u64,
    /// Requests answered `503 busy` since the node started: their body, or their answer,
    /// found no room.
    pub refused: u64,
}

/// The log tailer that feeds every view.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TailerStatus {
    /// `"running"`, or `"failed"`: every view is stalled (reads that wait for an index
    /// fail with `views_stalled`) while appends are still acknowledged.
    pub state: &'static str,
    /// Why it stopped, once it has.
    pub error: Option<String>,
    /// Read errors met, retried or not.
    pub read_errors: u64,
    /// Reads attempted again after a transient error.
    pub retries: u64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LogStatus {
    /// `"file"` (the log under the data directory) or `"jetstream"` (a NATS JetStream
    /// stream, whose servers sync: the fsync fields below stay 0 / absent).
    pub kind: &'static str,
    /// Whether this process appends: always on the file log; on JetStream while it holds
    /// the stream's appender lease (an api server without it is a standby: it serves reads
    /// and takes over the lease once it is free; a disk-view server never appends).
    pub appender: bool,
    /// Why a standby that took the lease could not start appending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standby_error: Option<String>,
    /// Why this api server last stopped being the appender (deposed by another, or a batch
    /// whose outcome it could not learn), if it ever did: it stood by again and takes the
    /// lease once it is free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stepped_down: Option<String>,
    pub first_index: u64,
    pub durable_index: u64,
    pub syncs: u64,
    /// Group commits made durable since open (on JetStream: batches this process's appender
    /// had acknowledged; 0 on a process that does not append).
    pub group_commits: u64,
    /// Records made durable since open (records per fsync = `records / syncs`; on JetStream
    /// the records of this process's group commits, per batch = `records / group_commits`).
    pub records: u64,
    /// fdatasync latency of appends over the last `syncs_in_window` syncs (at most
    /// `spindle_log::SYNC_LATENCY_WINDOW`), in microseconds; absent before the first.
    pub sync_p50_us: Option<u64>,
    pub sync_p99_us: Option<u64>,
    pub sync_max_us: Option<u64>,
    pub syncs_in_window: usize,
    /// On JetStream: records this process's views read from the feed (the appender's
    /// announcements of acknowledged batches, docs/cluster.md "The feed") and records they
    /// asked the stream for (absent on the file log).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_from_feed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_from_stream: Option<u64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ViewStatus {
    pub id: String,
    pub kind: &'static str,
    /// `[lo, hi)` of the hash space.
    pub range: [u64; 2],
    pub applied_index: u64,
    /// Disk Views: the applied index known to survive a power cut (WAL synced or
    /// flushed); truncation counts only this. Absent for views rebuilt on every start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persisted_index: Option<u64>,
    /// Disk Views: the checksum (32 hex digits) of every version the view holds, at
    /// `applied_index` (docs/disk-view-format.md "Checksum"): replicas of one range at the
    /// same index must show the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// Disk Views: the latest checkpoints, increasing; each the checksum of exactly the
    /// versions with index ≤ its index, comparable across replicas of the range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<Vec<CheckpointStatus>>,
    /// Records the view is behind the log's durable index.
    pub lag: u64,
    pub ready: bool,
    /// Why the view stopped following the log, or is paused (see `paused`).
    pub stalled: Option<String>,
    /// The view cannot write now (its disk is full) and retries on its own: `stalled`
    /// says why, and it clears when a write succeeds.
    pub paused: bool,
    /// Disk Views: why the view failed its scrub; it serves nothing from then on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<String>,
    /// Disk Views: its scrubs (`scrub_interval_ms`), once one has run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrub: Option<ScrubStatus>,
}

/// The scrubs of a Disk View.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScrubStatus {
    pub runs: u64,
    /// Seconds since the last scrub ended.
    pub age_s: f64,
    /// How long the last scrub took.
    pub seconds: f64,
    /// Versions the last scrub read (0 when it failed).
    pub versions: u64,
}

/// A Disk View's checksum of exactly the versions with index ≤ `index`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct CheckpointStatus {
    pub index: u64,
    /// 32 hex digits.
    pub checksum: String,
}

impl CheckpointStatus {
    pub fn of(view: &spindle_view::DiskView) -> Vec<CheckpointStatus> {
        view.checkpoints()
            .into_iter()
            .map(|c| CheckpointStatus {
                index: c.index.get(),
                checksum: c.checksum.to_hex(),
            })
            .collect()
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BootStatus {
    pub view: String,
    pub state: &'static str,
    pub cut: Option<u64>,
    /// The Disk Views it iterates (`disk-I`; `<member>/disk-I` on an api server).
    pub sources: Vec<String>,
    /// Why it has not begun: an api server waits until the Disk View servers of the
    /// catalog cover the hash space.
    pub waiting: Option<String>,
    /// Sources started over on another replica after their stream failed.
    pub source_restarts: u64,
    pub items: u64,
    pub bytes: u64,
    pub items_per_s: f64,
    pub bytes_per_s: f64,
    pub eta_s: Option<f64>,
    pub seconds: f64,
    pub error: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CarouselEntry {
    pub view: String,
    #[serde(flatten)]
    pub status: CarouselStatus,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TruncationStatus {
    pub enabled: bool,
    /// Records 1..=safe_index may be deleted.
    pub safe_index: u64,
    /// What holds the safe index back, in words.
    pub held_back_by: String,
    pub first_retained_index: u64,
    pub holds: Vec<HoldStatus>,
    pub worker_runs: u64,
    pub last_error: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HoldStatus {
    pub id: u64,
    pub cut: u64,
    /// How long the boot has held the log (`null` for another member's hold).
    pub age_s: Option<f64>,
    /// The catalog member whose boot holds it (a Disk View server on another host,
    /// published in its catalog entry); absent for this process's own holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChunkStatus {
    pub chunks: usize,
    pub used_bytes: u64,
    pub max_bytes: u64,
    /// Bytes of records of live chunks; the rest of the volumes is garbage until compacted.
    pub live_bytes: u64,
    pub garbage_bytes: u64,
    /// Volume syncs since start: a group commit syncs each volume it wrote to, at once.
    pub syncs: u64,
    /// Group commits since start.
    pub group_commits: u64,
    pub volumes: Vec<VolumeStatus>,
    pub compaction: CompactionStatus,
}

/// One chunk volume file.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct VolumeStatus {
    pub volume: u32,
    pub bytes: u64,
    pub live_bytes: u64,
    pub live_chunks: u64,
    /// Sealed volumes take no more puts; only they are compacted.
    pub sealed: bool,
}

/// The chunk store's compactions since the node started.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CompactionStatus {
    pub running: bool,
    pub runs: u64,
    pub volumes_rewritten: u64,
    pub chunks_moved: u64,
    pub bytes_reclaimed: u64,
    pub last_error: Option<String>,
}

impl Node {
    pub fn status(&self) -> Status {
        let durable = self.log.durable_index().get();
        let mut views = Vec::new();
        for d in self.disks.iter() {
            let p = d.view.partition();
            // The checksum and the applied index it covers, read together.
            let sum = d.view.checksum();
            let scrub = d.scrub.lock().clone();
            let applied = sum.applied.get();
            views.push(ViewStatus {
                id: d.id.clone(),
                kind: "disk",
                range: [p.lo(), p.hi()],
                applied_index: applied,
                persisted_index: Some(d.view.persisted_index().get()),
                checksum: Some(sum.checksum.to_hex()),
                checkpoints: Some(CheckpointStatus::of(&d.view)),
                lag: durable.saturating_sub(applied),
                ready: true,
                stalled: d.stall.reason(),
                paused: d.stall.state().is_some_and(|s| s.retrying),
                corrupt: scrub.corrupt.clone(),
                scrub: scrub.last.map(|(at, took, versions)| ScrubStatus {
                    runs: scrub.runs,
                    age_s: at.elapsed().as_secs_f64(),
                    seconds: took.as_secs_f64(),
                    versions,
                }),
            });
        }
        // The Memory View is listed only where the node keeps one.
        let booted = self
            .config
            .memory_view
            .then_some((
                &self.memory.name,
                self.memory.get().is_some(),
                "memory",
                self.memory.applied(),
                self.memory.stall.state(),
            ))
            .into_iter()
            .chain(self.indexes.iter().map(|(_, s)| {
                (
                    &s.name,
                    s.get().is_some(),
                    "index",
                    s.applied(),
                    s.stall.state(),
                )
            }));
        for (name, ready, kind, applied, stalled) in booted {
            views.push(ViewStatus {
                id: name.clone(),
                kind,
                range: [0, spindle_core::partition::HASH_SPACE],
                applied_index: applied.get(),
                persisted_index: None,
                checksum: None,
                checkpoints: None,
                lag: durable.saturating_sub(applied.get()),
                ready,
                paused: stalled.as_ref().is_some_and(|s| s.retrying),
                stalled: stalled.map(|s| s.reason),
                corrupt: None,
                scrub: None,
            });
        }
        let boots = self
            .boots
            .lock()
            .iter()
            .map(|b| {
                let elapsed = b.finished.unwrap_or_else(|| b.started.elapsed());
                let r = b.progress.report(elapsed, b.bytes_total);
                BootStatus {
                    view: b.view.clone(),
                    state: match (&b.error, b.finished, &b.waiting) {
                        (Some(_), _, _) => "failed",
                        (None, Some(_), _) => "done",
                        (None, None, Some(_)) => "waiting",
                        (None, None, None) => "booting",
                    },
                    cut: b.cut.map(|c| c.get()),
                    sources: b.sources.clone(),
                    waiting: b.waiting.clone(),
                    source_restarts: b.progress.source_restarts.load(Ordering::Relaxed),
                    items: r.items,
                    bytes: r.bytes,
                    items_per_s: r.items_per_s,
                    bytes_per_s: r.bytes_per_s,
                    eta_s: r
                        .eta
                        .filter(|_| b.finished.is_none())
                        .map(|e| e.as_secs_f64()),
                    seconds: elapsed.as_secs_f64(),
                    error: b.error.clone(),
                }
            })
            .collect();
        let carousels = self
            .disks
            .iter()
            .map(|d| CarouselEntry {
                view: d.id.clone(),
                status: d.carousel.status(),
            })
            .collect();
        let decision = self.truncation_decision();
        let cluster = self.catalog.status();
        let held_back_by = match cluster.as_ref().and_then(|c| c.truncation_note()) {
            Some(note) => format!("{decision}; {note}"),
            None => decision.to_string(),
        };
        let state = self.truncation.lock().clone();
        let stats = self.log.stats();
        let sync = stats.and_then(|s| s.sync_latency.percentiles());
        let count = |f: fn(&spindle_log::LogStats) -> &AtomicU64| {
            stats.map_or(0, |s| f(s).load(Ordering::Relaxed))
        };
        let chunk_stats = self.chunks.stats();
        let read_sources = self.log.read_sources();
        Status {
            uptime_s: self.started.elapsed().as_secs_f64(),
            log: LogStatus {
                kind: self.log.kind(),
                appender: self.log.appends(),
                standby_error: self.log.standby_error(),
                stepped_down: self.log.stepped_down(),
                first_index: self.log.first_index().get(),
                durable_index: durable,
                syncs: count(|s| &s.syncs),
                group_commits: count(|s| &s.batches),
                records: count(|s| &s.records),
                sync_p50_us: sync.map(|p| p.p50_us),
                sync_p99_us: sync.map(|p| p.p99_us),
                sync_max_us: sync.map(|p| p.max_us),
                syncs_in_window: sync.map_or(0, |p| p.count),
                records_from_feed: read_sources.map(|s| s.0),
                records_from_stream: read_sources.map(|s| s.1),
            },
            views,
            boots,
            carousels,
            truncation: TruncationStatus {
                enabled: self.config.truncate,
                safe_index: decision.safe.get(),
                held_back_by,
                first_retained_index: self.log.first_index().get(),
                holds: self
                    .holds
                    .active_with_age()
                    .into_iter()
                    .map(|(h, age)| HoldStatus {
                        id: h.id,
                        cut: h.cut.get(),
                        age_s: Some(age.as_secs_f64()),
                        owner: None,
                    })
                    .chain(self.catalog.holds().into_iter().map(|h| HoldStatus {
                        id: h.id,
                        cut: h.cut.get(),
                        age_s: None,
                        owner: h.owner,
                    }))
                    .collect(),
                worker_runs: state.runs,
                last_error: state.error,
            },
            chunks: ChunkStatus {
                chunks: self.chunks.len(),
                used_bytes: chunk_stats.used_bytes,
                max_bytes: self.chunks.max_bytes(),
                live_bytes: chunk_stats.live_bytes,
                garbage_bytes: chunk_stats.garbage_bytes,
                syncs: chunk_stats.syncs,
                group_commits: chunk_stats.group_commits,
                volumes: chunk_stats
                    .volumes
                    .iter()
                    .map(|(n, v)| VolumeStatus {
                        volume: *n,
                        bytes: v.bytes,
                        live_bytes: v.live_bytes,
                        live_chunks: v.live_chunks,
                        sealed: v.sealed,
                    })
                    .collect(),
                compaction: CompactionStatus {
                    running: chunk_stats.compacting,
                    runs: chunk_stats.compaction.runs,
                    volumes_rewritten: chunk_stats.compaction.volumes,
                    chunks_moved: chunk_stats.compaction.chunks_moved,
                    bytes_reclaimed: chunk_stats.compaction.bytes_reclaimed,
                    last_error: chunk_stats.compaction_error,
                },
            },
            failures: self.failures.lock().clone(),
            tailer: {
                let h = &self.tailer_health;
                let error = h.failure();
                TailerStatus {
                    state: if error.is_some() { "failed" } else { "running" },
                    error,
                    read_errors: h.errors.load(Ordering::Relaxed),
                    retries: h.retries.load(Ordering::Relaxed),
                }
            },
            streams: StreamsStatus {
                iterate_open: self.iterate_seats.open(),
                iterate_max: self.config.iterate_streams_max,
                tail_open: self.tail_seats.open(),
                tail_max: self.config.tail_streams_max,
            },
            request_bodies: BodiesStatus {
                held_bytes: self.body_budget.held_bytes(),
                max_bytes: self.config.request_bodies_bytes_max,
                refused: self.metrics.bodies_refused.load(Ordering::Relaxed),
            },
            answers: BodiesStatus {
                held_bytes: self.answer_budget.held_bytes(),
                max_bytes: self.config.answers_bytes_max,
                refused: self.metrics.answers_refused.load(Ordering::Relaxed),
            },
            cluster,
        }
    }

    /// Prometheus text exposition of the node's gauges and counters.
    pub fn metrics_text(&self) -> String {
        let s = self.status();
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, kind: &str, rows: Vec<(String, f64)>| {
            let _ = writeln!(
                out,
                "# HELP spindle_{name} {help}\n# TYPE spindle_{name} {kind}"
            );
            for (labels, v) in rows {
                let _ = writeln!(out, "spindle_{name}{labels} {v}");
            }
        };
        let one = |v: u64| vec![(String::new(), v as f64)];
        gauge(
            "log_durable_index",
            "Highest durable log index.",
            "gauge",
            one(s.log.durable_index),
        );
        gauge(
            "log_first_index",
            "First retained log index.",
            "gauge",
            one(s.log.first_index),
        );
        gauge(
            "log_syncs_total",
            "fdatasync calls for appends.",
            "counter",
            one(s.log.syncs),
        );
        gauge(
            "log_sync_seconds",
            "fdatasync latency of appends over the last syncs (at most 1024).",
            "summary",
            [("0.5", s.log.sync_p50_us), ("0.99", s.log.sync_p99_us)]
                .into_iter()
                .filter_map(|(q, us)| Some((format!("{{quantile=\"{q}\"}}"), us? as f64 / 1e6)))
                .collect(),
        );
        gauge(
            "chunk_garbage_bytes",
            "Bytes of chunk volume records no live chunk needs (compaction reclaims them).",
            "gauge",
            one(s.chunks.garbage_bytes),
        );
        gauge(
            "view_applied_index",
            "Log index each view has applied.",
            "gauge",
            s.views
                .iter()
                .map(|v| (format!("{{view=\"{}\"}}", v.id), v.applied_index as f64))
                .collect(),
        );
        gauge(
            "view_persisted_index",
            "Log index each Disk View has applied and synced (what truncation counts).",
            "gauge",
            s.views
                .iter()
                .filter_map(|v| {
                    let p = v.persisted_index?;
                    Some((format!("{{view=\"{}\"}}", v.id), p as f64))
                })
                .collect(),
        );
        gauge(
            "view_lag_records",
            "Records each view is behind the durable index.",
            "gauge",
            s.views
                .iter()
                .map(|v| (format!("{{view=\"{}\"}}", v.id), v.lag as f64))
                .collect(),
        );
        gauge(
            "carousel_riders",
            "Riders aboard each Disk View's carousel.",
            "gauge",
            s.carousels
                .iter()
                .map(|c| {
                    (
                        format!("{{view=\"{}\"}}", c.view),
                        c.status.riders.len() as f64,
                    )
                })
                .collect(),
        );
        gauge(
            "truncation_safe_index",
            "Log index through which truncation is safe.",
            "gauge",
            one(s.truncation.safe_index),
        );
        gauge(
            "truncation_holds",
            "Active retention holds of boots.",
            "gauge",
            one(s.truncation.holds.len() as u64),
        );
        gauge(
            "chunks_used_bytes",
            "Bytes used by the chunk store.",
            "gauge",
            one(s.chunks.used_bytes),
        );
        gauge(
            "worker_failures",
            "View followers or boots that stopped with an error.",
            "gauge",
            one(s.failures.len() as u64),
        );
        gauge(
            "tailer_failed",
            "1 when the log tailer stopped for good: every view is stalled.",
            "gauge",
            one(u64::from(s.tailer.error.is_some())),
        );
        gauge(
            "tailer_read_errors_total",
            "Read errors the log tailer met, retried or not.",
            "counter",
            one(s.tailer.read_errors),
        );
        gauge(
            "tailer_retries_total",
            "Log reads the tailer attempted again after a transient error.",
            "counter",
            one(s.tailer.retries),
        );
        gauge(
            "view_stalled",
            "1 for a view that stopped following the log or is paused (disk full, retrying).",
            "gauge",
            s.views
                .iter()
                .map(|v| {
                    (
                        format!("{{view=\"{}\"}}", v.id),
                        f64::from(u8::from(v.stalled.is_some())),
                    )
                })
                .collect(),
        );
        gauge(
            "grpc_streams_open",
            "gRPC streams open now, by method.",
            "gauge",
            vec![
                ("{method=\"iterate\"}".into(), s.streams.iterate_open as f64),
                ("{method=\"tail\"}".into(), s.streams.tail_open as f64),
            ],
        );
        gauge(
            "request_body_bytes_held",
            "Bytes of HTTP request bodies held now (request_bodies_bytes_max bounds them).",
            "gauge",
            vec![(String::new(), s.request_bodies.held_bytes as f64)],
        );
        gauge(
            "answer_bytes_held",
            "Bytes of HTTP answers being sent now (answers_bytes_max bounds them).",
            "gauge",
            vec![(String::new(), s.answers.held_bytes as f64)],
        );
        let c = &self.metrics;
        for (name, help, v) in [
            ("appends_total", "Transactions appended.", &c.appends),
            (
                "append_conflicts_total",
                "Appends refused by a failed condition.",
                &c.append_conflicts,
            ),
            (
                "append_errors_total",
                "Appends that failed for another reason.",
                &c.append_errors,
            ),
            (
                "records_appended_total",
                "Records in appended transactions.",
                &c.records_appended,
            ),
            (
                "reads_total",
                "Item, history, out-edge, multiget and index reads.",
                &c.reads,
            ),
            (
                "bad_requests_total",
                "Requests refused as malformed.",
                &c.bad_requests,
            ),
            (
                "unauthorized_total",
                "Requests refused for a missing or wrong token.",
                &c.unauthorized,
            ),
            (
                "iterations_total",
                "Iterations started over gRPC.",
                &c.iterations,
            ),
            (
                "iteration_bytes_total",
                "Frame bytes sent by iterations.",
                &c.iteration_bytes,
            ),
            ("tails_total", "Log tails started over gRPC.", &c.tails),
            ("chunk_puts_total", "Chunks stored.", &c.chunk_puts),
            ("chunk_gets_total", "Chunks read.", &c.chunk_gets),
            (
                "request_bodies_refused_total",
                "Requests answered 503 busy: their body found no room in request_bodies_bytes_max.",
                &c.bodies_refused,
            ),
            (
                "answers_refused_total",
                "Answers replaced by 503 busy: they found no room in answers_bytes_max.",
                &c.answers_refused,
            ),
            (
                "connections_refused_total",
                "Connections closed as soon as they were accepted: their listener held connections_max, or their source connections_per_source_max.",
                &c.connections_refused,
            ),
        ] {
            gauge(name, help, "counter", one(v.load(Ordering::Relaxed)));
        }
        out.push_str(&self.tail_ring.snapshot().to_prometheus());
        out
    }
}
