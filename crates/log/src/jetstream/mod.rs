//! `JetStreamLog`: the `Log` trait over one NATS JetStream stream (docs/cluster.md).
//!
//! Mapping: a log index is a stream sequence (dense from 1: the stream deletes nothing but
//! the prefix the log purges); a record is one message whose payload is the record codec of
//! `spindle_core::record`; a group of transactions is one atomic batch. One appender per
//! stream, elected through a KV lease, keeps the file log's version table, checks
//! conditions, and publishes each group commit with `Nats-Expected-Last-Sequence` on its
//! first message, so a deposed appender's batch is refused and conditions stay exact, also
//! across truncation (the table is checkpointed to an object store before each purge).
//!
//! Fault model: servers may be SIGKILLed, connections drop, acks get lost. An append is
//! acknowledged only after JetStream acknowledged its batch (quorum, and with
//! `sync_interval: always` fsynced on each replica); an unknown outcome is resolved by
//! reading the stream, never by guessing. All NATS I/O runs on the log's own runtime, so
//! callers may use any executor.

mod appender;
pub mod catalog;
pub mod check;
mod feed;
pub mod placement;
mod read;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use parking_lot::Mutex;
use spindle_core::{Index, Record, Transaction};
use thiserror::Error;
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::{AppendError, ReadError, TruncateError};

pub use check::{ServerFacts, SERVER_VERSION_MIN};

/// Where the log lives and how it behaves. Bounds carry their unit.
#[derive(Clone, Debug)]
pub struct JetStreamConfig {
    /// Client URLs of the cluster's servers (`nats://host:port`).
    pub servers: Vec<String>,
    /// Monitoring URLs (`http://host:port`) of every server, where `/varz` proves each one
    /// syncs writes before acknowledging them. The log refuses to open without them.
    pub monitor_urls: Vec<String>,
    /// The stream's name; records use subjects `spn.<stream>.r.<byte>`, the lease bucket is
    /// `<stream>_APPENDER` and the version checkpoints live in `<stream>_VERSIONS`.
    pub stream: String,
    /// Replicas the stream must have (3 in production).
    pub replicas: usize,
    /// An appender that finds the lease held waits this long for it to expire.
    pub lease_wait: Duration,
    /// The lease lives this long without renewal (renewed every third of it).
    pub lease_ttl: Duration,
    /// How long one batch's acknowledgement is awaited before its outcome is resolved.
    pub ack_timeout: Duration,
    /// How long the appender keeps resolving and retrying through an unavailable cluster
    /// before it fails with the outcome unknown (sticky; a standby's appender stands by
    /// again instead).
    pub unavailable_wait: Duration,
    /// Most records in one group commit (the server's batch limit caps it too).
    pub group_commit_records_max: usize,
    /// Most payload bytes in one group commit (one transaction may exceed it alone).
    pub group_commit_bytes_max: usize,
    /// How long a group commit holding fewer transactions than the previous one waits for
    /// more (never longer; a lone writer, whose previous group held one transaction, never
    /// waits). Every batch costs each NATS server a Raft append and an fsync whatever its
    /// size, so under load a slightly later, larger batch costs the servers less per record.
    pub group_commit_linger: Duration,
    /// Transactions queued for the appender before `append` waits.
    pub intake_txns_max: usize,
    /// Messages asked for in one batched direct get.
    pub read_batch_records_max: usize,
    /// Payload bytes of the most recent announced records each process keeps for its
    /// readers (the feed; 0 turns it off and every read asks the stream).
    pub feed_cache_bytes_max: usize,
    /// Whether the appender, once it holds the lease, asks the stream's leader to step
    /// down in favour of the server the appender is connected to (see `placement`).
    pub leader_follows_appender: bool,
    /// The longest the appender waits for that move before its first batch (it publishes
    /// through whichever server leads if the move is not seen by then).
    pub leader_move_wait: Duration,
}

impl JetStreamConfig {
    /// Defaults for a cluster at these client and monitoring URLs.
    pub fn new(servers: Vec<String>, monitor_urls: Vec<String>) -> Self {
        JetStreamConfig {
            servers,
            monitor_urls,
            stream: "SPINDLE".to_owned(),
            replicas: 3,
            lease_wait: Duration::from_secs(30),
            lease_ttl: Duration::from_secs(10),
            ack_timeout: Duration::from_secs(5),
            unavailable_wait: Duration::from_secs(60),
            group_commit_records_max: 10_000,
            group_commit_bytes_max: 8 << 20,
            group_commit_linger: Duration::from_millis(5),
            intake_txns_max: 65_536,
            read_batch_records_max: 1000,
            feed_cache_bytes_max: 64 << 20,
            leader_follows_appender: true,
            leader_move_wait: placement::LEADER_MOVE_WAIT,
        }
    }

    fn subject_prefix(&self) -> String {
        format!("spn.{}.r", self.stream)
    }

    fn subjects(&self) -> String {
        format!("{}.*", self.subject_prefix())
    }

    /// The core NATS subject the appender announces acknowledged batches on (outside the
    /// stream's subjects, so the stream does not store it).
    fn feed_subject(&self) -> String {
        format!("spn.{}.feed", self.stream)
    }

    fn lease_bucket(&self) -> String {
        format!("{}_APPENDER", self.stream)
    }

    fn checkpoint_bucket(&self) -> String {
        format!("{}_VERSIONS", self.stream)
    }
}

/// Why the JetStream log could not be opened.
#[derive(Debug, Error)]
pub enum JetStreamError {
    #[error("cannot connect to NATS at {servers:?}: {cause}")]
    Connect { servers: Vec<String>, cause: String },
    #[error("no monitoring URL given: the log must see each server's /varz to know it syncs every write")]
    NoMonitor,
    #[error("cannot read {url}/varz: {cause}")]
    Monitor { url: String, cause: String },
    /// A server does not meet the log's requirements (version, sync, limits).
    #[error("server {url} refused: {reason}")]
    ServerRefused { url: String, reason: String },
    /// The stream exists but is configured in a way that breaks the log's guarantees.
    #[error("stream {stream} refused: {reason}")]
    StreamRefused { stream: String, reason: String },
    #[error("the appender lease of stream {stream} is held by {holder} (waited {waited:?})")]
    LeaseHeld {
        stream: String,
        holder: String,
        waited: Duration,
    },
    /// The catalog bucket could not be used, or a registration was refused.
    #[error("catalog of stream {stream}: {reason}")]
    Catalog { stream: String, reason: String },
    /// The version checkpoint is missing or damaged while the stream was truncated past it.
    #[error("version checkpoint of stream {stream}: {reason}")]
    Checkpoint { stream: String, reason: String },
    #[error("JetStream {op} failed: {cause}")]
    Nats { op: &'static str, cause: String },
    #[error("cannot start the log's runtime: {0}")]
    Runtime(std::io::Error),
}

fn nats_err(op: &'static str) -> impl FnOnce(String) -> JetStreamError {
    move |cause| JetStreamError::Nats { op, cause }
}

/// State the handle, the appender and readers share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub config: JetStreamConfig,
    pub durable: watch::Sender<Index>,
    pub first: AtomicU64,
    failure: Mutex<Option<String>>,
    watcher: Mutex<bool>,
    /// Group commits (acknowledged batches) and their records; no syncs (the servers sync).
    pub stats: crate::LogStats,
    /// The stream's creation time in nanoseconds: feed pieces name it (see `feed`).
    pub stream_id: u64,
    /// The most recent announced records (see `feed`).
    pub feed: Mutex<feed::FeedCache>,
    /// Feed pieces ignored (damaged, or of another stream).
    pub feed_ignored: AtomicU64,
    /// Records this handle's reads returned, taken from the feed and from the stream.
    pub read_from_feed: AtomicU64,
    pub read_from_stream: AtomicU64,
}

impl Shared {
    pub fn durable_index(&self) -> Index {
        *self.durable.borrow()
    }

    pub fn advance_durable(&self, to: Index) {
        self.durable.send_if_modified(|d| {
            let moved = to > *d;
            if moved {
                *d = to;
            }
            moved
        });
    }

    pub fn first_index(&self) -> Index {
        Index::new(self.first.load(Ordering::Acquire).max(1))
    }

    pub fn set_first(&self, first: Index) {
        self.first.fetch_max(first.get(), Ordering::AcqRel);
        self.feed.lock().drop_below(first.get());
    }

    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// Refuse writes from now on (an unknown outcome, or this appender was deposed): until
    /// reopened, or for a standby's appender until it has ended (`clear_failure`).
    pub fn fail(&self, cause: String) {
        tracing::error!(%cause, "JetStream log failed; refusing writes");
        self.failure.lock().get_or_insert(cause);
    }

    /// Take writes again: only once the appender that failed has ended.
    pub fn clear_failure(&self) {
        self.failure.lock().take();
    }

    /// A `ReadError` for a NATS failure (retryable like an I/O error).
    pub fn read_err(&self, cause: impl std::fmt::Display) -> ReadError {
        ReadError::Io {
            file: PathBuf::from(format!("jetstream stream {}", self.config.stream)),
            source: Arc::new(std::io::Error::other(cause.to_string())),
        }
    }
}

/// One transaction ready for the appender: its messages and conditions.
#[derive(Debug)]
pub(crate) struct PreparedTxn {
    /// (subject byte, payload, key range in payload, tombstone)
    pub records: Vec<(u8, bytes::Bytes, std::ops::Range<usize>, bool)>,
    pub conditions: Vec<spindle_core::Condition>,
    pub bytes: usize,
}

impl PreparedTxn {
    fn new(txn: &Transaction) -> Result<Self, AppendError> {
        let bytes = txn.validate()?;
        let last = txn.writes.len() - 1;
        let records = txn
            .writes
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let mut payload =
                    Vec::with_capacity(spindle_core::record::encoded_payload_len(&w.key, &w.value));
                let key =
                    spindle_core::record::encode_payload(i == last, &w.key, &w.value, &mut payload);
                let byte = (w.key.hash() >> 24) as u8;
                (byte, payload.into(), key, w.value.is_tombstone())
            })
            .collect();
        Ok(PreparedTxn {
            records,
            conditions: txn.conditions.clone(),
            bytes,
        })
    }
}

pub(crate) enum Command {
    Append {
        txns: Vec<PreparedTxn>,
        reply: oneshot::Sender<Vec<Result<Index, AppendError>>>,
    },
    Truncate {
        below: Index,
        reply: oneshot::Sender<Result<Index, TruncateError>>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// The log on a JetStream stream. An appender handle (`open`) holds the stream's lease and
/// writes; a reader handle (`open_reader`) only reads and refuses appends.
#[derive(Debug)]
pub struct JetStreamLog {
    shared: Arc<Shared>,
    /// The group-commit task's intake: set at open for an appender, while a standby holds
    /// the lease, never for a reader.
    intake: Arc<Mutex<Option<mpsc::Sender<Command>>>>,
    /// Turns true at `close`: a standby stops waiting for the lease.
    closed: Arc<std::sync::atomic::AtomicBool>,
    /// Why a standby's promotion failed, if it did.
    promotion_error: Arc<Mutex<Option<String>>>,
    /// Why a standby last stopped appending, if it did (it stands by again).
    stepped_down: Arc<Mutex<Option<String>>>,
    /// A standby's task (`Standby::run`): `close` waits for it, so that the lease is given
    /// up before `close` returns whatever the task was doing.
    standby_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Opened with `open_standby`: an append it refuses before sending is `NotWritten`
    /// (retry here later, or at the appender), not a failure of the log.
    standby: bool,
    /// The largest batch the servers take (for a standby's appender).
    records_max: usize,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    handle: tokio::runtime::Handle,
}

impl Drop for JetStreamLog {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.lock().take() {
            rt.shutdown_background();
        }
    }
}

impl JetStreamLog {
    /// Open the log as its stream's appender: check every server and the stream (creating
    /// it if absent), take the lease, rebuild the version table from the checkpoint and the
    /// retained records, and start the group-commit task.
    pub fn open(config: JetStreamConfig) -> Result<JetStreamLog, JetStreamError> {
        Self::start(config, appender::Mode::Appender).map(|(log, _)| log)
    }

    /// Group commits this handle's appender made and their records (`syncs` stays 0: the
    /// servers sync before they acknowledge).
    pub fn stats(&self) -> &crate::LogStats {
        &self.shared.stats
    }

    /// Open a handle that reads (and waits for) the stream without taking the lease.
    pub fn open_reader(config: JetStreamConfig) -> Result<JetStreamLog, JetStreamError> {
        Self::start(config, appender::Mode::Reader).map(|(log, _)| log)
    }

    /// Open a standby: a reader now (creating the stream if absent) that takes the lease
    /// whenever it is free — at once if nobody holds it, else once its holder releases it
    /// or stops renewing it — and then appends like `open`'s handle (`is_appender`). Unlike
    /// `open`'s, its appender does not refuse writes for good when the log fails (it was
    /// deposed, or it could not learn a batch's outcome): it answers what it holds, gives
    /// the lease up and stands by again (`stepped_down`), taking the lease once it is free
    /// and rebuilding its table from the stream.
    pub fn open_standby(config: JetStreamConfig) -> Result<JetStreamLog, JetStreamError> {
        let (mut log, started) = Self::start(config, appender::Mode::Standby)?;
        log.standby = true;
        let standby = Standby {
            shared: log.shared.clone(),
            intake: log.intake.clone(),
            closed: log.closed.clone(),
            promotion_error: log.promotion_error.clone(),
            stepped_down: log.stepped_down.clone(),
            records_max: log.records_max,
        };
        *log.standby_task.lock() = Some(log.handle.spawn(standby.run(started)));
        Ok(log)
    }

    /// The stream's first retained sequence as its servers report it now, which also
    /// raises the cached `first_index` (a reader's cache moves only when a read meets a
    /// purged gap, so it can lag a purge by the appender).
    pub fn refresh_first_index(&self) -> Result<Index, String> {
        let shared = self.shared.clone();
        let asked = async move {
            let mut stream = shared
                .js
                .get_stream(&shared.config.stream)
                .await
                .map_err(|e| format!("get stream: {e}"))?;
            let info = stream
                .info()
                .await
                .map_err(|e| format!("stream info: {e}"))?;
            Ok::<_, String>(Index::new(info.state.first_sequence.max(1)))
        };
        let first = futures::executor::block_on(self.handle.spawn(asked))
            .map_err(|e| format!("stream info task: {e}"))??;
        self.shared.set_first(first);
        Ok(self.shared.first_index())
    }

    /// Records this handle's reads took from the feed, and from the stream itself.
    pub fn read_sources(&self) -> (u64, u64) {
        (
            self.shared.read_from_feed.load(Ordering::Relaxed),
            self.shared.read_from_stream.load(Ordering::Relaxed),
        )
    }

    /// Whether this handle appends (it holds the lease).
    pub fn is_appender(&self) -> bool {
        self.intake.lock().is_some()
    }

    /// Why this standby last stopped being the appender (deposed, or a batch whose outcome
    /// it could not learn), if it ever did; it stood by again.
    pub fn stepped_down(&self) -> Option<String> {
        self.stepped_down.lock().clone()
    }

    /// Why a standby's last try to become the appender failed after it took the lease
    /// (it tries again; `None` once it is the appender).
    pub fn promotion_error(&self) -> Option<String> {
        self.promotion_error.lock().clone()
    }

    fn start(
        config: JetStreamConfig,
        mode: appender::Mode,
    ) -> Result<(JetStreamLog, Option<appender::Started>), JetStreamError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("spindle-jetstream")
            .enable_all()
            .build()
            .map_err(JetStreamError::Runtime)?;
        let handle = runtime.handle().clone();
        let opened = std::thread::scope(|s| {
            s.spawn(|| runtime.block_on(appender::open(config, mode)))
                .join()
                .expect("the open task does not panic")
        });
        let (shared, started, records_max) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                runtime.shutdown_background();
                return Err(e);
            }
        };
        let log = JetStreamLog {
            shared,
            intake: Arc::new(Mutex::new(started.as_ref().map(|s| s.intake.clone()))),
            closed: Arc::default(),
            promotion_error: Arc::default(),
            stepped_down: Arc::default(),
            standby_task: Mutex::new(None),
            standby: false,
            records_max,
            runtime: Mutex::new(Some(runtime)),
            handle,
        };
        Ok((log, started))
    }

    /// Append many independent transactions in one submission (each its own outcome).
    pub async fn append_many(&self, txns: &[Transaction]) -> Vec<Result<Index, AppendError>> {
        let mut results: Vec<Option<Result<Index, AppendError>>> = vec![None; txns.len()];
        let mut prepared = Vec::new();
        let mut slots = Vec::new();
        for (i, t) in txns.iter().enumerate() {
            match PreparedTxn::new(t) {
                Ok(p) => {
                    prepared.push(p);
                    slots.push(i);
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        if !prepared.is_empty() {
            let n = prepared.len();
            let outcomes = self
                .submit(prepared)
                .await
                .unwrap_or_else(|e| vec![Err(e); n]);
            for (slot, outcome) in slots.into_iter().zip(outcomes) {
                results[slot] = Some(outcome);
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every slot answered"))
            .collect()
    }

    async fn submit(
        &self,
        txns: Vec<PreparedTxn>,
    ) -> Result<Vec<Result<Index, AppendError>>, AppendError> {
        // Refused before anything was sent: a standby that stands by says so (`NotWritten`,
        // safe to retry), also in the moment between its appender failing and standing
        // down. One whose task ended (its appender panicked) stays failed.
        let refused = |cause: String, standby_says: &str| {
            let standing_by = self.standby
                && self
                    .standby_task
                    .lock()
                    .as_ref()
                    .is_some_and(|task| !task.is_finished());
            if standing_by {
                AppendError::NotWritten {
                    cause: format!("{cause}{standby_says}; not written"),
                    disk_full: false,
                }
            } else {
                AppendError::Failed { cause }
            }
        };
        let Some(intake) = self.intake.lock().clone() else {
            return Err(refused(
                not_the_appender("appends go through the appender"),
                "",
            ));
        };
        if let Some(cause) = self.shared.failure() {
            return Err(refused(cause, "; this standby stops appending"));
        }
        let (reply, rx) = oneshot::channel();
        if intake.send(Command::Append { txns, reply }).await.is_err() {
            // Closed, or a standby's appender that stood down: nothing was sent.
            return Err(if self.closed.load(Ordering::Acquire) {
                AppendError::Closed
            } else {
                AppendError::NotWritten {
                    cause: "this standby stopped appending (see its log); not written".into(),
                    disk_full: false,
                }
            });
        }
        rx.await.map_err(|_| AppendError::Closed)
    }

    /// `append` for callers without an async runtime.
    pub fn append_blocking(&self, txn: &Transaction) -> Result<Index, AppendError> {
        futures::executor::block_on(crate::Log::append(self, txn))
    }

    /// `read` for callers on a plain thread (not on an async worker).
    pub fn read_blocking(&self, from: Index, max_records: usize) -> Result<Vec<Record>, ReadError> {
        futures::executor::block_on(crate::Log::read(self, from, max_records))
    }

    /// Why the log refuses writes, if it does.
    pub fn failure(&self) -> Option<String> {
        self.shared.failure()
    }

    /// Finish queued appends, release the lease and stop. Later appends get `Closed`. A
    /// standby's close also waits for its task: an appender stepping down, or one a promotion
    /// is starting, has given the lease up when it returns.
    pub async fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        let intake = self.intake.lock().clone();
        if let Some(intake) = intake {
            close_appender(&intake).await;
        }
        let task = self.standby_task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// The underlying NATS client (tests and benches use it to inspect the stream).
    pub fn client(&self) -> async_nats::Client {
        self.shared.client.clone()
    }

    /// Run `fut` on the log's runtime (NATS futures need it) and await it from anywhere.
    async fn on_runtime<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        self.handle.spawn(fut).await.ok()
    }
}

impl crate::Log for JetStreamLog {
    async fn append(&self, txn: &Transaction) -> Result<Index, AppendError> {
        let prepared = PreparedTxn::new(txn)?;
        self.submit(vec![prepared])
            .await?
            .pop()
            .expect("one transaction, one outcome")
    }

    async fn read(&self, from: Index, max_records: usize) -> Result<Vec<Record>, ReadError> {
        let shared = self.shared.clone();
        self.on_runtime(async move { read::read(&shared, from, max_records).await })
            .await
            .unwrap_or(Err(ReadError::Closed))
    }

    async fn wait_for(&self, index: Index) -> Result<Index, ReadError> {
        let mut rx = self.shared.durable.subscribe();
        if *rx.borrow() < index {
            read::ensure_watcher(&self.shared, &self.handle);
        }
        let seen = rx
            .wait_for(|d| *d >= index)
            .await
            .map_err(|_| ReadError::Closed)?;
        Ok(*seen)
    }

    async fn truncate_prefix(&self, below: Index) -> Result<Index, TruncateError> {
        let intake = self
            .intake
            .lock()
            .clone()
            .ok_or_else(|| TruncateError::Failed {
                cause: not_the_appender("the appender truncates"),
            })?;
        let (reply, rx) = oneshot::channel();
        intake
            .send(Command::Truncate { below, reply })
            .await
            .map_err(|_| TruncateError::Closed)?;
        rx.await.map_err(|_| TruncateError::Closed)?
    }

    fn durable_index(&self) -> Index {
        self.shared.durable_index()
    }

    fn first_index(&self) -> Index {
        self.shared.first_index()
    }
}

/// Why a handle without the lease refuses to append or truncate.
fn not_the_appender(then: &str) -> String {
    format!(
        "this JetStream log handle is a reader (or a standby that does not hold the appender \
         lease); {then}"
    )
}

/// Ask an appender to finish what it holds and give the lease up; wait for it.
async fn close_appender(intake: &mpsc::Sender<Command>) {
    let (reply, rx) = oneshot::channel();
    if intake.send(Command::Close { reply }).await.is_ok() {
        let _ = rx.await;
    }
}

/// A standby handle's background task: takes the lease whenever it is free, appends while
/// it holds it, and stands by again when its appender steps down.
struct Standby {
    shared: Arc<Shared>,
    intake: Arc<Mutex<Option<mpsc::Sender<Command>>>>,
    closed: Arc<std::sync::atomic::AtomicBool>,
    promotion_error: Arc<Mutex<Option<String>>>,
    stepped_down: Arc<Mutex<Option<String>>>,
    records_max: usize,
}

impl Standby {
    /// Until the handle is closed: wait for an appender (`started`, the one taken at open)
    /// to end; when it stepped down, clear the failure and take the lease again. A failed
    /// promotion (the stream's servers electing a leader, say) is tried again after a pause
    /// (1 s, doubling up to 30 s): one error must not leave the stream with no appender
    /// until a restart.
    async fn run(self, mut started: Option<appender::Started>) {
        let mut pause = appender::PROMOTE_RETRY_PAUSE;
        loop {
            if let Some(running) = started.take() {
                match running.ended.await {
                    Ok(appender::Ended::SteppedDown(cause)) => {
                        // The appender has ended and given the lease up; nothing of it
                        // runs, so its failure can go with it. In this order, so that one
                        // that no longer appends has said why and holds no failure.
                        tracing::warn!(stream = %self.shared.config.stream, %cause, "standby: stopped appending; standing by");
                        *self.stepped_down.lock() = Some(cause);
                        self.shared.clear_failure();
                        *self.intake.lock() = None;
                    }
                    // Closed, or panicked (the handle stays failed, its intake closed).
                    Ok(_) | Err(_) => return,
                }
            }
            match appender::promote(&self.shared, self.records_max, &self.closed).await {
                None => return,
                Some(Ok(running)) => {
                    *self.intake.lock() = Some(running.intake.clone());
                    *self.promotion_error.lock() = None;
                    pause = appender::PROMOTE_RETRY_PAUSE;
                    tracing::info!(stream = %self.shared.config.stream, "standby: now the appender");
                    // A close that came after `promote` looked and before the intake was
                    // set did not see this appender: close it here.
                    if self.closed.load(Ordering::Acquire) {
                        close_appender(&running.intake).await;
                        return;
                    }
                    started = Some(running);
                }
                Some(Err(e)) => {
                    tracing::error!(error = %e, "standby: could not become the appender; trying again");
                    *self.promotion_error.lock() = Some(e.to_string());
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(appender::PROMOTE_RETRY_PAUSE_MAX);
                }
            }
        }
    }
}

/// Build the shared state once connected and checked.
pub(crate) fn shared(
    client: async_nats::Client,
    config: JetStreamConfig,
    stream_id: u64,
    first: Index,
    durable: Index,
) -> Arc<Shared> {
    Arc::new(Shared {
        js: jetstream::new(client.clone()),
        client,
        durable: watch::Sender::new(durable),
        first: AtomicU64::new(first.get()),
        failure: Mutex::new(None),
        watcher: Mutex::new(false),
        stats: crate::LogStats::default(),
        stream_id,
        feed: Mutex::new(feed::FeedCache::new(config.feed_cache_bytes_max)),
        feed_ignored: AtomicU64::new(0),
        read_from_feed: AtomicU64::new(0),
        read_from_stream: AtomicU64::new(0),
        config,
    })
}
