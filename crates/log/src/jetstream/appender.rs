//! The appender: opening (checks, lease, version table) and group commit.
//!
//! One task drains every queued transaction, checks conditions in arrival order against
//! the version table (plus an overlay of what this batch writes), and publishes the group
//! as one atomic batch whose first message carries `Nats-Expected-Last-Sequence` = the
//! last sequence the table reflects and `Nats-Msg-Id` naming the batch. While one batch is
//! in flight the next gathers; when it is acknowledged and fewer transactions are queued
//! than the previous batch held, the next waits at most `group_commit_linger` for more. Once
//! acknowledged, a batch is announced on the feed (`feed`).
//!
//! Outcomes: an ack commits. Anything else is resolved against the stream: the last
//! sequence unchanged means not written (resend the same batch, same id); our message id at
//! `expected + 1` means written; someone else's means this appender was fenced: it reads
//! what the other wrote into its table, and either retries (it still holds the lease) or
//! fails every pending append as not written and refuses writes (deposed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{kv, object_store, stream::StorageType};
use async_nats::{HeaderMap, ServerAddr};
use bytes::Bytes;
use spindle_core::record::payload_key;
use spindle_core::{Index, RecordFlags};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::check::{check_stream, check_varz, stream_config};
use super::read::fetch_range;
use super::{nats_err, shared, Command, JetStreamConfig, JetStreamError, PreparedTxn, Shared};
use crate::error::{AppendError, FailedCondition, TruncateError};
use crate::versions::{decode_checkpoint, VersionTable};

const LEASE_KEY: &str = "appender";
const CHECKPOINT_OBJECT: &str = "versions";
/// JetStream's error code for a failed `Nats-Expected-Last-Sequence`.
const WRONG_LAST_SEQUENCE: u64 = 10071;
/// A resent batch whose message id the stream already holds.
const DUPLICATE_MSG_ID: u64 = 10201;
const RESOLVE_PAUSE: Duration = Duration::from_millis(100);

/// How long a standby whose promotion failed first waits before it tries again; the wait
/// doubles with each failure in a row, up to `PROMOTE_RETRY_PAUSE_MAX`.
pub(crate) const PROMOTE_RETRY_PAUSE: Duration = Duration::from_secs(1);
pub(crate) const PROMOTE_RETRY_PAUSE_MAX: Duration = Duration::from_secs(30);
/// Largest feed piece (smaller if the servers' max_payload is).
const FEED_PIECE_MAX: usize = 1 << 20;

/// How a handle opens: taking the lease now, reading only, or reading until it can take
/// the lease (a standby).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Appender,
    Reader,
    Standby,
}

/// How an appender's task ended, told to its handle once the lease is given up.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Closed, or every sender dropped.
    Closed,
    /// A standby's appender stopped appending (deposed, or a batch whose outcome it could
    /// not learn): every pending append was answered, and the handle may take the lease
    /// again, rebuilding its table from the stream.
    SteppedDown(String),
    /// Its task panicked (a broken invariant): the handle stays failed.
    Panicked,
}

/// A running appender: its intake, and word of its end.
pub(crate) struct Started {
    pub intake: mpsc::Sender<Command>,
    pub ended: oneshot::Receiver<Ended>,
}

/// Connect, check, and (for an appender) take the lease and rebuild the version table.
/// Also the largest batch the servers take, for a later `promote`.
pub(crate) async fn open(
    config: JetStreamConfig,
    mode: Mode,
) -> Result<(Arc<Shared>, Option<Started>, usize), JetStreamError> {
    let appender = mode != Mode::Reader;
    if config.monitor_urls.is_empty() {
        return Err(JetStreamError::NoMonitor);
    }
    let mut batch_records_max = config.group_commit_records_max;
    for url in &config.monitor_urls {
        let varz = get_varz(url)
            .await
            .map_err(|cause| JetStreamError::Monitor {
                url: url.clone(),
                cause,
            })?;
        let facts = check_varz(&varz).map_err(|reason| JetStreamError::ServerRefused {
            url: url.clone(),
            reason,
        })?;
        batch_records_max = batch_records_max.min(facts.max_batch_records);
    }
    let client = connect(&config).await?;
    let js = async_nats::jetstream::new(client.clone());
    let subjects = config.subjects();
    let started = Instant::now();
    let stream = loop {
        let found = match js.get_stream(&config.stream).await {
            Ok(s) => Ok(s),
            Err(e) if appender => {
                tracing::info!(stream = %config.stream, error = %e, "creating the log's stream");
                js.create_stream(stream_config(&config.stream, &subjects, config.replicas))
                    .await
                    .map_err(|e| nats_err("create stream")(e.to_string()))
            }
            Err(e) => Err(nats_err("get stream")(e.to_string())),
        };
        match found {
            Ok(s) => break s,
            // A cluster that just started may not know all its peers yet ("no suitable
            // peers for placement"): ask again until `unavailable_wait`.
            Err(e) if started.elapsed() < config.unavailable_wait => {
                tracing::debug!(error = %e, "stream not available yet; retrying");
                tokio::time::sleep(RESOLVE_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    };
    let info = stream.cached_info();
    check_stream(&info.config, &subjects, config.replicas).map_err(|reason| {
        JetStreamError::StreamRefused {
            stream: config.stream.clone(),
            reason,
        }
    })?;
    let first = Index::new(info.state.first_sequence.max(1));
    let last = Index::new(info.state.last_sequence);
    let stream_id = info.created.unix_timestamp_nanos() as u64;
    let shared = shared(client, config, stream_id, first, Index::ZERO);
    // Opened while a batch is being stored, the stream's last record may sit inside a
    // transaction: the durable index starts at the last record that ends one.
    let durable = super::read::last_commit_at_or_before(&shared, last.get())
        .await
        .map_err(nats_err("find the last commit"))?;
    shared.advance_durable(Index::new(durable));
    let records_max = batch_records_max.max(1);
    let id = format!("{:016x}", rand::random::<u64>());
    let lease = match mode {
        Mode::Reader => return Ok((shared, None, records_max)),
        Mode::Appender => {
            Lease::acquire(&shared, id.clone(), shared.config.lease_wait, None).await?
        }
        // A standby takes a free lease at once, as an appender would; a held one later.
        Mode::Standby => match Lease::acquire(&shared, id.clone(), Duration::ZERO, None).await {
            Ok(lease) => lease,
            Err(JetStreamError::LeaseHeld { holder, .. }) => {
                tracing::info!(
                    stream = %shared.config.stream,
                    "the appender lease is held by {holder}: standing by (reads only)"
                );
                return Ok((shared, None, records_max));
            }
            Err(e) => return Err(e),
        },
    };
    let rejoin = mode == Mode::Standby;
    let started = start_appender(&shared, Arc::new(lease), id, records_max, rejoin).await?;
    Ok((shared, Some(started), records_max))
}

/// A standby's promotion: wait (as long as it takes, until `closed`) for the lease, then
/// read the stream's state as it is now, rebuild the version table and start appending.
/// `None` once `closed` turned true first.
pub(crate) async fn promote(
    shared: &Arc<Shared>,
    records_max: usize,
    closed: &std::sync::atomic::AtomicBool,
) -> Option<Result<Started, JetStreamError>> {
    let id = format!("{:016x}", rand::random::<u64>());
    let lease = loop {
        if closed.load(Ordering::Acquire) {
            return None;
        }
        match Lease::acquire(shared, id.clone(), shared.config.lease_wait, Some(closed)).await {
            Ok(lease) => break Arc::new(lease),
            Err(JetStreamError::LeaseHeld { .. }) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "standby: taking the appender lease failed; retrying");
                tokio::time::sleep(RESOLVE_PAUSE * 10).await;
            }
        }
    };
    if closed.load(Ordering::Acquire) {
        lease.release().await;
        return None;
    }
    tracing::info!(
        stream = %shared.config.stream,
        "standby: took the appender lease; rebuilding the version table"
    );
    // The previous appender is gone: the stream's end as it is now is the durable index
    // (every message of the stream belongs to a whole atomic batch).
    let info = match shared.js.get_stream(&shared.config.stream).await {
        Ok(mut s) => s
            .info()
            .await
            .map(|i| i.state.clone())
            .map_err(|e| nats_err("stream info")(e.to_string())),
        Err(e) => Err(nats_err("get stream")(e.to_string())),
    };
    match info {
        Ok(state) => {
            shared.set_first(Index::new(state.first_sequence.max(1)));
            shared.advance_durable(Index::new(state.last_sequence));
        }
        Err(e) => {
            // Let another standby (or this one's next try) have it at once.
            lease.release().await;
            return Some(Err(e));
        }
    }
    Some(start_appender(shared, lease, id, records_max, true).await)
}

/// Holding `lease`: rebuild the version table and start the group-commit task. With
/// `rejoin` (a standby's appender) the task ends when the log fails (deposed, an outcome it
/// could not learn) instead of refusing writes for as long as it runs.
async fn start_appender(
    shared: &Arc<Shared>,
    lease: Arc<Lease>,
    id: String,
    records_max: usize,
    rejoin: bool,
) -> Result<Started, JetStreamError> {
    // The table reflects the stream through `last`, and the first batch is fenced on it:
    // never on the shared durable index, which the feed (or the watcher) may move past it
    // while the table is rebuilt (a deposed appender still committing).
    // Renewed from now: a rebuild may take longer than the lease's TTL (a long stream,
    // truncation held back), and another standby must not take it meanwhile.
    let renewal = tokio::spawn(lease.clone().renew_forever(shared.config.lease_ttl));
    let (versions, last) = match rebuild(shared).await {
        Ok(v) => v,
        Err(e) => {
            renewal.abort();
            // A renewal already sent must land before the release, not after it.
            let _ = renewal.await;
            lease.release().await;
            return Err(e);
        }
    };
    if shared.config.leader_follows_appender {
        super::placement::place_leader(shared).await;
    }
    let (tx, rx) = mpsc::channel(shared.config.intake_txns_max.max(1));
    let task = Appender {
        shared: shared.clone(),
        versions,
        last,
        lease,
        id,
        batch_no: 0,
        records_max,
        last_group_txns: 0,
        acked_at: tokio::time::Instant::now(),
        truncating: Truncating::default(),
        rejoin,
    };
    let (ended_tx, ended) = oneshot::channel();
    let (shared, lease, truncating) = (shared.clone(), task.lease.clone(), task.truncating.clone());
    tokio::spawn(async move {
        // On its own task, so that a panic (a broken invariant) still ends the renewal and
        // gives the lease up: a process that cannot append must not keep a standby from
        // taking over.
        let ran = tokio::spawn(task.run(rx)).await;
        // A truncation still uploading or purging (the task panicked meanwhile) ends while
        // the lease is held: a successor must not rebuild while this one purges.
        await_truncation(&truncating).await;
        // Renewal ends before the release: a renewal in flight after the delete would find
        // the key gone and create it again, keeping every standby out for a TTL.
        renewal.abort();
        let _ = renewal.await;
        // Closes are answered once the lease is given up.
        let (ended, closes) = match ran {
            Ok(RunEnd::Closed(close)) => (Ended::Closed, close.into_iter().collect()),
            Ok(RunEnd::SteppedDown { cause, closes }) => (Ended::SteppedDown(cause), closes),
            Err(e) => {
                let cause = format!("the appender task stopped: {e}");
                tracing::error!("{cause}");
                shared.fail(cause);
                (Ended::Panicked, Vec::new())
            }
        };
        lease.release().await;
        for reply in closes {
            let _ = reply.send(());
        }
        let _ = ended_tx.send(ended);
    });
    Ok(Started { intake: tx, ended })
}

/// How `Appender::run` ended.
enum RunEnd {
    /// At `Close` (its reply), or once every sender was dropped (`None`).
    Closed(Option<oneshot::Sender<()>>),
    /// The log failed on a standby's appender: every queued append was answered; the
    /// closes found queued are answered once the lease is given up.
    SteppedDown {
        cause: String,
        closes: Vec<oneshot::Sender<()>>,
    },
}

async fn connect(config: &JetStreamConfig) -> Result<async_nats::Client, JetStreamError> {
    let connect_err = |cause: String| JetStreamError::Connect {
        servers: config.servers.clone(),
        cause,
    };
    let addrs = config
        .servers
        .iter()
        .map(|s| {
            s.parse::<ServerAddr>()
                .map_err(|e| connect_err(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .request_timeout(Some(config.ack_timeout))
        .connect(addrs)
        .await
        .map_err(|e| connect_err(e.to_string()))
}

/// `GET <url>/varz` over plain HTTP/1.0 (the monitoring port speaks nothing else).
async fn get_varz(url: &str) -> Result<serde_json::Value, String> {
    let host = url
        .strip_prefix("http://")
        .ok_or("monitoring URLs start with http://")?
        .trim_end_matches('/');
    let io = async {
        let mut conn = tokio::net::TcpStream::connect(host).await?;
        let request = format!("GET /varz HTTP/1.0\r\nHost: {host}\r\n\r\n");
        conn.write_all(request.as_bytes()).await?;
        let mut body = Vec::new();
        conn.read_to_end(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    let body = tokio::time::timeout(Duration::from_secs(5), io)
        .await
        .map_err(|_| "timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let at = body
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no HTTP body")?;
    serde_json::from_slice(&body[at + 4..]).map_err(|e| format!("/varz is not JSON: {e}"))
}

/// The appender lease: a key in a KV bucket whose entries expire after the lease TTL unless
/// renewed by compare-and-set. It only keeps two appenders from fighting; safety comes from
/// the expected-last-sequence fence on every batch.
#[derive(Debug)]
struct Lease {
    kv: kv::Store,
    id: String,
    revision: AtomicU64,
    lost: AtomicBool,
}

impl Lease {
    /// Take the lease, waiting up to `wait` while another holds it (and no longer once
    /// `closed`, if given, turns true).
    async fn acquire(
        shared: &Shared,
        id: String,
        wait: Duration,
        closed: Option<&AtomicBool>,
    ) -> Result<Lease, JetStreamError> {
        let config = &shared.config;
        let bucket = config.lease_bucket();
        // A cluster that just started may not place a new bucket at once: ask again until
        // `unavailable_wait`.
        let asked = Instant::now();
        let kv = loop {
            let kv = match shared.js.get_key_value(&bucket).await {
                Ok(kv) => Ok(kv),
                Err(_) => shared
                    .js
                    .create_key_value(kv::Config {
                        bucket: bucket.clone(),
                        history: 1,
                        max_age: config.lease_ttl,
                        storage: StorageType::File,
                        num_replicas: config.replicas,
                        ..kv::Config::default()
                    })
                    .await
                    .map_err(|e| nats_err("create lease bucket")(e.to_string())),
            };
            match kv {
                Ok(kv) => break kv,
                Err(e) if asked.elapsed() < config.unavailable_wait => {
                    tracing::debug!(error = %e, "lease bucket not available yet; retrying");
                    tokio::time::sleep(RESOLVE_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        };
        let started = Instant::now();
        loop {
            match kv.create(LEASE_KEY, Bytes::from(id.clone())).await {
                Ok(revision) => {
                    return Ok(Lease {
                        kv,
                        id,
                        revision: AtomicU64::new(revision),
                        lost: AtomicBool::new(false),
                    })
                }
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                    // A retried create whose first attempt landed: the lease is ours.
                    if let Ok(Some(entry)) = kv.entry(LEASE_KEY).await {
                        if entry.value[..] == *id.as_bytes() {
                            return Ok(Lease {
                                kv,
                                id,
                                revision: AtomicU64::new(entry.revision),
                                lost: AtomicBool::new(false),
                            });
                        }
                    }
                    let closing = closed.is_some_and(|c| c.load(Ordering::Acquire));
                    if started.elapsed() >= wait || closing {
                        let holder = kv
                            .get(LEASE_KEY)
                            .await
                            .ok()
                            .flatten()
                            .map_or("nobody (expired)".to_owned(), |b| {
                                String::from_utf8_lossy(&b).into_owned()
                            });
                        return Err(JetStreamError::LeaseHeld {
                            stream: config.stream.clone(),
                            holder,
                            waited: started.elapsed(),
                        });
                    }
                    tokio::time::sleep((config.lease_ttl / 20).max(Duration::from_millis(20)))
                        .await;
                }
                // A bucket just created may not be placed yet ("no stream found for given
                // subject"): ask again until `unavailable_wait`.
                Err(e) if started.elapsed() < config.unavailable_wait => {
                    tracing::debug!(error = %e, "lease bucket not available yet; retrying");
                    tokio::time::sleep(RESOLVE_PAUSE).await;
                }
                Err(e) => return Err(nats_err("take the appender lease")(e.to_string())),
            }
        }
    }

    /// Renew every third of the TTL; a renewal refused because someone else holds the key
    /// marks the lease lost.
    async fn renew_forever(self: Arc<Self>, ttl: Duration) {
        loop {
            tokio::time::sleep(ttl / 3).await;
            let revision = self.revision.load(Ordering::Acquire);
            match self
                .kv
                .update(LEASE_KEY, Bytes::from(self.id.clone()), revision)
                .await
            {
                Ok(r) => self.revision.store(r, Ordering::Release),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    // Expired while unrenewed: take it again if nobody else did.
                    match self
                        .kv
                        .create(LEASE_KEY, Bytes::from(self.id.clone()))
                        .await
                    {
                        Ok(r) => self.revision.store(r, Ordering::Release),
                        // Still ours: an update that was applied although its answer was
                        // lost moved the revision on. Renew from the revision it has now
                        // (else every later renewal would fail the same way, and the lease
                        // expire under a live appender).
                        Err(_) => match self.held_at().await {
                            Some(r) => self.revision.store(r, Ordering::Release),
                            None => {
                                tracing::warn!("appender lease lost");
                                self.lost.store(true, Ordering::Release);
                                return;
                            }
                        },
                    }
                }
                Err(e) => tracing::warn!(error = %e, "appender lease renewal failed; retrying"),
            }
        }
    }

    async fn still_held(&self) -> bool {
        self.held_at().await.is_some()
    }

    /// The revision of the lease key if it names this holder now (`None` when it names
    /// another or nobody); an error when the bucket cannot be read.
    async fn holder_revision(&self) -> Result<Option<u64>, String> {
        match self.kv.entry(LEASE_KEY).await {
            Ok(Some(e)) if e.operation == kv::Operation::Put && e.value == self.id.as_bytes() => {
                Ok(Some(e.revision))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Whether the lease key names this holder now; an error when the bucket cannot be
    /// read (unlike `held_at`, which counts that as not held).
    async fn holder(&self) -> Result<bool, String> {
        self.holder_revision().await.map(|r| r.is_some())
    }

    /// The revision of the lease key if this holder's id is its value now.
    async fn held_at(&self) -> Option<u64> {
        self.holder_revision().await.ok().flatten()
    }

    /// Give the lease up if this holder still has it: the delete is conditioned on the
    /// revision it was seen at, so a successor that took the key meanwhile keeps it.
    async fn release(&self) {
        if let Some(revision) = self.held_at().await {
            let _ = self
                .kv
                .delete_expect_revision(LEASE_KEY, Some(revision))
                .await;
        }
    }
}

async fn checkpoint_store(shared: &Shared) -> Result<object_store::ObjectStore, String> {
    let bucket = shared.config.checkpoint_bucket();
    if let Ok(store) = shared.js.get_object_store(&bucket).await {
        return Ok(store);
    }
    shared
        .js
        .create_object_store(object_store::Config {
            bucket,
            storage: StorageType::File,
            num_replicas: shared.config.replicas,
            ..object_store::Config::default()
        })
        .await
        .map_err(|e| e.to_string())
}

/// The version table as of the durable index when it starts: the checkpoint, then every
/// retained record after it; and that index.
async fn rebuild(shared: &Shared) -> Result<(VersionTable, Index), JetStreamError> {
    let stream = shared.config.stream.clone();
    let ckpt_err = |reason: String| JetStreamError::Checkpoint {
        stream: stream.clone(),
        reason,
    };
    let asked = Instant::now();
    let store = loop {
        match checkpoint_store(shared).await {
            Ok(store) => break store,
            Err(e) if asked.elapsed() < shared.config.unavailable_wait => {
                tracing::debug!(error = %e, "checkpoint store not available yet; retrying");
                tokio::time::sleep(RESOLVE_PAUSE).await;
            }
            Err(e) => return Err(nats_err("open checkpoint store")(e)),
        }
    };
    let started = Instant::now();
    let (mut table, as_of) = loop {
        match store.get(CHECKPOINT_OBJECT).await {
            Ok(mut object) => {
                let mut bytes = Vec::new();
                object
                    .read_to_end(&mut bytes)
                    .await
                    .map_err(|e| ckpt_err(format!("read: {e}")))?;
                break decode_checkpoint(&bytes).map_err(ckpt_err)?;
            }
            Err(e) if e.kind() == object_store::GetErrorKind::NotFound => {
                break (VersionTable::new(), Index::ZERO);
            }
            // A store just created may not be placed yet ("503 no responders"): ask again
            // until `unavailable_wait`.
            Err(e) if started.elapsed() < shared.config.unavailable_wait => {
                tracing::debug!(error = %e, "checkpoint store not available yet; retrying");
                tokio::time::sleep(RESOLVE_PAUSE).await;
            }
            Err(e) => return Err(ckpt_err(e.to_string())),
        }
    };
    let first = shared.first_index();
    let last = shared.durable_index();
    // Tests stretch the replay: the stream (and the durable index) may move meanwhile.
    // `sleep(MS)` blocks this worker thread; `return(MS)` pauses this task only, as a long
    // replay's reads would, while the runtime's other tasks (the lease's renewal) run.
    #[cfg(feature = "failpoints")]
    if let Some(Some(ms)) = fail::eval("jetstream::rebuild", |arg| {
        arg.and_then(|a| a.parse::<u64>().ok())
    }) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if as_of.get() + 1 < first.get() || as_of > last {
        return Err(ckpt_err(format!(
            "the checkpoint covers 1..={as_of} but the stream retains {first}..={last}"
        )));
    }
    let mut from = as_of.next().max(first).get();
    let chunk = (shared.config.read_batch_records_max as u64).max(1) * 16;
    while from <= last.get() {
        let to = (from + chunk - 1).min(last.get());
        let msgs = fetch_range(shared, from, to)
            .await
            .map_err(nats_err("replay the stream"))?;
        for m in &msgs {
            apply(&mut table, m.seq, &m.payload).map_err(ckpt_err)?;
        }
        from = to + 1;
    }
    Ok((table, last))
}

/// Record a stored message's write in the table.
fn apply(table: &mut VersionTable, seq: u64, payload: &[u8]) -> Result<(), String> {
    let key = payload_key(payload).ok_or_else(|| format!("message {seq} is not a record"))?;
    let deleted = payload[0] & RecordFlags::TOMBSTONE != 0;
    table.set(key, Index::new(seq), deleted);
    Ok(())
}

type Reply = oneshot::Sender<Vec<Result<Index, AppendError>>>;

/// What publishing one batch came to.
#[derive(Debug)]
enum Published {
    Committed(u64),
    Refused { code: u64, description: String },
    Unknown(String),
}

/// What the stream says about a batch whose ack did not arrive.
#[derive(Debug)]
enum Verdict {
    Written(u64),
    NotWritten,
    Fenced(u64),
    Lost(String),
}

struct Appender {
    shared: Arc<Shared>,
    versions: VersionTable,
    /// The last sequence the table reflects.
    last: Index,
    lease: Arc<Lease>,
    id: String,
    batch_no: u64,
    records_max: usize,
    /// Transactions in the previous group commit (the next one lingers until it holds as
    /// many, at most `group_commit_linger` after the previous one was answered).
    last_group_txns: usize,
    acked_at: tokio::time::Instant,
    /// A truncation writing its checkpoint and purging, off the group-commit loop (it
    /// answers its caller itself); the next truncation or a close waits for it, and so
    /// does the lease's release after a panic of this task (shared for that).
    truncating: Truncating,
    /// A standby's appender: it ends once the log fails, so that its handle can stand by
    /// and take the lease again (see `Ended::SteppedDown`).
    rejoin: bool,
}

/// The truncation task in flight, if any.
type Truncating = Arc<parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>>;

/// Wait for the truncation in `slot`, if any, to end (a failure of its task is logged: its
/// caller was answered `Closed`).
async fn await_truncation(slot: &Truncating) {
    let task = slot.lock().take();
    if let Some(task) = task {
        if let Err(e) = task.await {
            tracing::error!("a truncation's task stopped: {e}");
        }
    }
}

/// What a truncation has left to do once the appender checked it.
enum Truncation {
    /// Nothing below this first index to purge.
    Nothing(Index),
    Purge(Purge),
}

/// A truncation's last steps, once the table is encoded: they run on a task of their own,
/// so that appends go on while the checkpoint uploads.
struct Purge {
    shared: Arc<Shared>,
    store: object_store::ObjectStore,
    bytes: Vec<u8>,
    stream: async_nats::jetstream::stream::Stream,
    below: Index,
}

impl Purge {
    /// Put the checkpoint, then purge below `below`: the stream never lacks records the
    /// checkpoint in the store does not cover.
    async fn run(self) -> Result<Index, TruncateError> {
        let failed = |cause: String| TruncateError::Failed { cause };
        // Tests stretch the upload, as a large table's would be (`return(MS)` pauses this
        // task only).
        #[cfg(feature = "failpoints")]
        if let Some(Some(ms)) = fail::eval("jetstream::checkpoint_put", |arg| {
            arg.and_then(|a| a.parse::<u64>().ok())
        }) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        self.store
            .put(CHECKPOINT_OBJECT, &mut self.bytes.as_slice())
            .await
            .map_err(|e| failed(format!("write the version checkpoint: {e}")))?;
        self.stream
            .purge()
            .sequence(self.below.get())
            .await
            .map_err(|e| failed(format!("purge below {}: {e}", self.below)))?;
        self.shared.set_first(self.below);
        Ok(self.below)
    }
}

impl Appender {
    /// Group-commit until `Close` (returning its reply, which the caller sends once the
    /// lease is given up), until every sender is dropped, or (a standby's appender) until
    /// the log fails.
    async fn run(mut self, mut rx: mpsc::Receiver<Command>) -> RunEnd {
        let mut carried: Option<Command> = None;
        loop {
            if self.rejoin {
                if let Some(cause) = self.shared.failure() {
                    return self.step_down(rx, carried, cause).await;
                }
            }
            let cmd = match carried.take() {
                Some(c) => c,
                None => match rx.recv().await {
                    Some(c) => c,
                    None => {
                        self.truncation_done().await;
                        return RunEnd::Closed(None);
                    }
                },
            };
            match cmd {
                Command::Append { txns, reply } => {
                    let (mut records, mut bytes) = size(&txns);
                    let mut txn_count = txns.len();
                    let mut group = vec![(txns, reply)];
                    // Take what is queued; while the group holds fewer transactions than
                    // the previous one, wait up to `group_commit_linger` for more (see the
                    // config).
                    let linger_until = self.acked_at + self.shared.config.group_commit_linger;
                    let mut cut_by_command = false;
                    while records < self.records_max
                        && bytes < self.shared.config.group_commit_bytes_max
                    {
                        let next = match rx.try_recv() {
                            Ok(cmd) => cmd,
                            Err(_) if txn_count < self.last_group_txns => {
                                match tokio::time::timeout_at(linger_until, rx.recv()).await {
                                    Ok(Some(cmd)) => cmd,
                                    Ok(None) | Err(_) => break,
                                }
                            }
                            Err(_) => break,
                        };
                        match next {
                            Command::Append { txns, reply } => {
                                let (r, b) = size(&txns);
                                if records + r > self.records_max
                                    || bytes + b > self.shared.config.group_commit_bytes_max
                                {
                                    carried = Some(Command::Append { txns, reply });
                                    break;
                                }
                                records += r;
                                bytes += b;
                                txn_count += txns.len();
                                group.push((txns, reply));
                            }
                            other => {
                                carried = Some(other);
                                cut_by_command = true;
                                break;
                            }
                        }
                    }
                    // A group a truncation or close cut short says nothing of the load.
                    if !cut_by_command || txn_count > self.last_group_txns {
                        self.last_group_txns = txn_count;
                    }
                    self.commit(group).await;
                    self.acked_at = tokio::time::Instant::now();
                }
                Command::Truncate { below, reply } => {
                    self.truncation_done().await;
                    match self.truncate(below).await {
                        Ok(Truncation::Purge(purge)) => {
                            *self.truncating.lock() = Some(tokio::spawn(async move {
                                let _ = reply.send(purge.run().await);
                            }));
                        }
                        Ok(Truncation::Nothing(first)) => {
                            let _ = reply.send(Ok(first));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e));
                        }
                    }
                }
                Command::Close { reply } => {
                    self.truncation_done().await;
                    return RunEnd::Closed(Some(reply));
                }
            }
        }
    }

    /// Stop appending after the log failed (`cause`): nothing queued was sent, so every
    /// queued append is answered not written; later sends find the intake closed.
    async fn step_down(
        mut self,
        mut rx: mpsc::Receiver<Command>,
        carried: Option<Command>,
        cause: String,
    ) -> RunEnd {
        tracing::warn!(%cause, "the appender stops appending and stands by again");
        self.truncation_done().await;
        rx.close();
        let not_written =
            format!("{cause}; the appender stood down before this append was sent: not written");
        let mut closes = Vec::new();
        // Closed, `recv` still yields what is queued and what a sender already holding a
        // permit sends, then `None`: every append handed over is answered here.
        let mut queued = Vec::from_iter(carried);
        while let Some(cmd) = rx.recv().await {
            queued.push(cmd);
        }
        for cmd in queued {
            match cmd {
                Command::Append { txns, reply } => {
                    let outcome = AppendError::NotWritten {
                        cause: not_written.clone(),
                        disk_full: false,
                    };
                    let _ = reply.send(vec![Err(outcome); txns.len()]);
                }
                Command::Truncate { reply, .. } => {
                    let _ = reply.send(Err(TruncateError::Failed {
                        cause: cause.clone(),
                    }));
                }
                Command::Close { reply } => closes.push(reply),
            }
        }
        RunEnd::SteppedDown { cause, closes }
    }

    /// Commit one group: stage, publish, resolve; answer every submission.
    async fn commit(&mut self, group: Vec<(Vec<PreparedTxn>, Reply)>) {
        let txns: Vec<&PreparedTxn> = group.iter().flat_map(|(t, _)| t.iter()).collect();
        let outcomes = self.commit_txns(&txns).await;
        drop(txns);
        let mut outcomes = outcomes.into_iter();
        for (txns, reply) in group {
            let _ = reply.send(outcomes.by_ref().take(txns.len()).collect());
        }
    }

    async fn commit_txns(&mut self, txns: &[&PreparedTxn]) -> Vec<Result<Index, AppendError>> {
        let fail_all = |cause: String| vec![Err(AppendError::Failed { cause }); txns.len()];
        let deadline = Instant::now() + self.shared.config.unavailable_wait;
        self.batch_no += 1;
        let mut attempt = 0u32;
        loop {
            if let Some(cause) = self.shared.failure() {
                return fail_all(cause);
            }
            if self.lease.lost.load(Ordering::Acquire) {
                let cause = self.deposed();
                return fail_all(cause);
            }
            let expected = self.last.get();
            let staged = self.stage(txns, expected);
            if staged.messages.is_empty() {
                // Nothing to publish, so no fence proves the table current: a conflict is
                // answered only once the stream shows no write after the table's last
                // (another appender, deposed or not yet aware of it, may have written).
                if staged
                    .outcomes
                    .iter()
                    .any(|o| matches!(o, Err(AppendError::Conflict { .. })))
                {
                    match self.stream_last().await {
                        Ok(last) if last > expected => {
                            if let Err(cause) = self.catch_up_holding_lease(expected, last).await {
                                return fail_all(cause);
                            }
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!(error = %e, "conflicts answered without checking the stream's end");
                        }
                    }
                }
                return staged.outcomes;
            }
            let msg_id = format!("{}-{}", self.id, self.batch_no);
            let published = self
                .publish(&staged.messages, expected, &msg_id, attempt)
                .await;
            let n = staged.messages.len() as u64;
            let verdict = match published {
                Published::Committed(last) => Verdict::Written(last),
                Published::Refused { code, description }
                    if code != WRONG_LAST_SEQUENCE && code != DUPLICATE_MSG_ID =>
                {
                    // Refused for what the batch is (size, headers): check, then report.
                    match self.resolve(expected, n, &msg_id, deadline).await {
                        Verdict::NotWritten => {
                            return fail_all(format!(
                                "JetStream refused the batch ({code}): {description}; not written"
                            ))
                        }
                        other => other,
                    }
                }
                Published::Refused { code, description } => {
                    tracing::debug!(code, %description, "batch refused; resolving");
                    self.resolve(expected, n, &msg_id, deadline).await
                }
                Published::Unknown(cause) => {
                    tracing::debug!(%cause, "batch outcome unknown; resolving");
                    self.resolve(expected, n, &msg_id, deadline).await
                }
            };
            match verdict {
                Verdict::Written(last) => {
                    assert_eq!(
                        last,
                        expected + n,
                        "a committed batch takes consecutive sequences"
                    );
                    for (key, (seq, deleted)) in staged.overlay {
                        self.versions.set(&key, Index::new(seq), deleted);
                    }
                    self.announce(expected + 1, &staged.messages).await;
                    self.last = Index::new(last);
                    self.shared.advance_durable(self.last);
                    self.shared.stats.batches.fetch_add(1, Ordering::Relaxed);
                    self.shared.stats.records.fetch_add(n, Ordering::Relaxed);
                    return staged.outcomes;
                }
                Verdict::NotWritten if Instant::now() < deadline => attempt += 1,
                Verdict::NotWritten => {
                    let cause = format!(
                        "JetStream did not take batch {msg_id} within {:?}; not written",
                        self.shared.config.unavailable_wait
                    );
                    self.shared.fail(cause.clone());
                    return fail_all(cause);
                }
                Verdict::Fenced(last) => {
                    if let Err(cause) = self.catch_up_holding_lease(expected, last).await {
                        return fail_all(cause);
                    }
                    // Still ours: stage again on the updated table, as a new batch.
                    self.batch_no += 1;
                    attempt = 0;
                }
                Verdict::Lost(cause) => {
                    self.shared.fail(cause.clone());
                    return fail_all(cause);
                }
            }
        }
    }

    /// Put a batch the stream acknowledged at `first..` into this process's feed cache
    /// and announce it on the feed subject (best effort: a reader that misses it reads the
    /// stream).
    async fn announce(&self, first: u64, messages: &[(u8, Bytes)]) {
        // Announced whatever this process's own cache size: other processes' readers
        // count on it.
        let payloads: Vec<&Bytes> = messages.iter().map(|(_, p)| p).collect();
        self.shared
            .feed
            .lock()
            .insert(first, payloads.iter().map(|p| (*p).clone()));
        let piece_max = (self.shared.client.server_info().max_payload).clamp(4096, FEED_PIECE_MAX);
        let subject = self.shared.config.feed_subject();
        for piece in super::feed::encode(self.shared.stream_id, first, &payloads, piece_max) {
            if let Err(e) = self.shared.client.publish(subject.clone(), piece).await {
                tracing::debug!(error = %e, "feed announcement not sent");
                return;
            }
        }
    }

    /// Read what another appender wrote after `expected` through `last` into the table,
    /// then check this one still holds the lease; the error (the log failed, or this
    /// appender was deposed) is what every pending append is answered.
    async fn catch_up_holding_lease(&mut self, expected: u64, last: u64) -> Result<(), String> {
        if let Err(cause) = self.catch_up(expected + 1, last).await {
            self.shared.fail(cause.clone());
            return Err(cause);
        }
        if !self.lease.still_held().await {
            return Err(self.deposed());
        }
        Ok(())
    }

    fn deposed(&self) -> String {
        let cause = format!(
            "this appender ({}) lost the lease of stream {} to another; appends not written",
            self.id, self.shared.config.stream
        );
        self.shared.fail(cause.clone());
        cause
    }

    /// Check each transaction's conditions in order and lay out the messages of those that
    /// hold, from sequence `expected + 1`.
    fn stage(&self, txns: &[&PreparedTxn], expected: u64) -> Staged {
        let mut staged = Staged::default();
        for txn in txns {
            let mut failed = Vec::new();
            for c in &txn.conditions {
                let key = c.key.to_bytes();
                let (actual, deleted) = match staged.overlay.get(&key) {
                    Some(&(seq, deleted)) => (Index::new(seq), deleted),
                    None => (self.versions.get(&key), self.versions.is_deleted(&key)),
                };
                let holds = actual == c.expected || (c.expected == Index::ZERO && deleted);
                if !holds {
                    failed.push(FailedCondition {
                        key: c.key.clone(),
                        expected: c.expected,
                        actual,
                    });
                }
            }
            if !failed.is_empty() {
                staged.outcomes.push(Err(AppendError::Conflict { failed }));
                continue;
            }
            for (byte, payload, key, deleted) in &txn.records {
                let seq = expected + staged.messages.len() as u64 + 1;
                staged
                    .overlay
                    .insert(payload[key.clone()].to_vec(), (seq, *deleted));
                staged.messages.push((*byte, payload.clone()));
            }
            staged
                .outcomes
                .push(Ok(Index::new(expected + staged.messages.len() as u64)));
        }
        staged
    }

    /// Send one atomic batch: every message but the last without a reply, the last as a
    /// request for the batch's ack.
    async fn publish(
        &self,
        messages: &[(u8, Bytes)],
        expected: u64,
        msg_id: &str,
        attempt: u32,
    ) -> Published {
        let client = &self.shared.client;
        let prefix = self.shared.config.subject_prefix();
        let batch_id = format!("{msg_id}-{attempt}");
        let last = messages.len() - 1;
        for (i, (byte, payload)) in messages.iter().enumerate() {
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Batch-Id", batch_id.as_str());
            headers.insert("Nats-Batch-Sequence", (i + 1).to_string().as_str());
            if i == 0 {
                headers.insert("Nats-Expected-Last-Sequence", expected.to_string().as_str());
                headers.insert("Nats-Msg-Id", msg_id);
            }
            let subject = format!("{prefix}.{byte:02x}");
            if i < last {
                // Bounded like the ack: while the client reconnects its queue of outgoing
                // messages can fill, and a publish would then wait for as long as that takes.
                let publish = client.publish_with_headers(subject, headers, payload.clone());
                match tokio::time::timeout(self.shared.config.ack_timeout, publish).await {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => return Published::Unknown(format!("publish: {e}")),
                    Err(_) => {
                        return Published::Unknown(
                            "publish not queued within the ack timeout".into(),
                        )
                    }
                }
            }
            headers.insert("Nats-Batch-Commit", "1");
            let request = client.request_with_headers(subject, headers, payload.clone());
            let reply = match tokio::time::timeout(self.shared.config.ack_timeout, request).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(e)) => return Published::Unknown(format!("commit request: {e}")),
                Err(_) => return Published::Unknown("no ack within the ack timeout".into()),
            };
            let published = parse_ack(&reply.payload);
            if matches!(published, Published::Committed(_)) {
                fail::fail_point!("jetstream::ack_lost", |_| Published::Unknown(
                    "injected: the ack was lost".into()
                ));
            }
            return published;
        }
        unreachable!("a batch has at least one message")
    }

    /// Find out from the stream whether the batch whose first message is `msg_id` was
    /// written after `expected`.
    async fn resolve(&self, expected: u64, n: u64, msg_id: &str, deadline: Instant) -> Verdict {
        loop {
            match self.probe(expected, n, msg_id).await {
                Ok(verdict) => return verdict,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "resolving a batch outcome; retrying");
                    tokio::time::sleep(RESOLVE_PAUSE).await;
                }
                Err(e) => {
                    return Verdict::Lost(format!(
                        "outcome of batch {msg_id} unknown: the stream did not answer within {:?} ({e})",
                        self.shared.config.unavailable_wait
                    ))
                }
            }
        }
    }

    /// The stream's last sequence, from its leader.
    async fn stream_last(&self) -> Result<u64, String> {
        let stream = self
            .shared
            .js
            .get_stream(&self.shared.config.stream)
            .await
            .map_err(|e| e.to_string())?;
        Ok(stream.cached_info().state.last_sequence)
    }

    async fn probe(&self, expected: u64, n: u64, msg_id: &str) -> Result<Verdict, String> {
        let stream = self
            .shared
            .js
            .get_stream(&self.shared.config.stream)
            .await
            .map_err(|e| e.to_string())?;
        let last = stream.cached_info().state.last_sequence;
        if last == expected {
            return Ok(Verdict::NotWritten);
        }
        if last < expected {
            return Ok(Verdict::Lost(format!(
                "the stream's last sequence went back from {expected} to {last}: JetStream lost \
                 acknowledged messages"
            )));
        }
        let first = stream
            .get_raw_message(expected + 1)
            .await
            .map_err(|e| e.to_string())?;
        let id = first
            .headers
            .get("Nats-Msg-Id")
            .map(|v| v.as_str().to_owned());
        if id.as_deref() == Some(msg_id) {
            Ok(Verdict::Written(expected + n))
        } else {
            Ok(Verdict::Fenced(last))
        }
    }

    /// Apply records another appender wrote (`from..=to`) to the table.
    async fn catch_up(&mut self, from: u64, to: u64) -> Result<(), String> {
        let msgs = fetch_range(&self.shared, from, to).await?;
        for m in &msgs {
            apply(&mut self.versions, m.seq, &m.payload)?;
        }
        self.last = Index::new(to);
        self.shared.advance_durable(self.last);
        Ok(())
    }

    /// Wait for the truncation in flight, if any, to finish.
    async fn truncation_done(&mut self) {
        await_truncation(&self.truncating).await;
    }

    /// Check the lease and encode the checkpoint: the `Purge` left to do (checkpoint, then
    /// purge every record below `below`, never past the durable index + 1), or nothing when
    /// the stream already starts at or above `below`.
    async fn truncate(&mut self, below: Index) -> Result<Truncation, TruncateError> {
        let failed = |cause: String| TruncateError::Failed { cause };
        if let Some(cause) = self.shared.failure() {
            return Err(failed(cause));
        }
        let below = below.min(self.last.next());
        let first = self.shared.first_index();
        if below <= first {
            return Ok(Truncation::Nothing(first));
        }
        // Only the appender may write the checkpoint, and only one that covers the stream
        // as it is: a deposed appender that has not yet noticed (nothing made it append)
        // would put a table of its own, older end over its successor's, and no later open
        // could use it once the successor purged past that end.
        let mut stream = self
            .shared
            .js
            .get_stream(&self.shared.config.stream)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let end = stream
            .info()
            .await
            .map_err(|e| failed(format!("stream info: {e}")))?
            .state
            .last_sequence;
        // Deposed only when the key names another holder (or renewal found it lost): a
        // lease bucket that cannot be read now is a truncation put off, not a failed log.
        if self.lease.lost.load(Ordering::Acquire) {
            return Err(failed(self.deposed()));
        }
        match self.lease.holder().await {
            Ok(true) => {}
            Ok(false) => return Err(failed(self.deposed())),
            Err(e) => {
                return Err(failed(format!(
                    "cannot read the appender lease ({e}); truncation put off"
                )))
            }
        }
        // Past this table's end: a predecessor's batch that landed after this appender took
        // over. Read it in first, so the checkpoint covers the stream as it is. Records that
        // cannot be fetched now put the truncation off (nothing was applied: they are all
        // fetched first); records that do not decode fail the log, as in a commit.
        if end > self.last.get() {
            let msgs = fetch_range(&self.shared, self.last.get() + 1, end)
                .await
                .map_err(failed)?;
            for m in &msgs {
                if let Err(cause) = apply(&mut self.versions, m.seq, &m.payload) {
                    self.shared.fail(cause.clone());
                    return Err(failed(cause));
                }
            }
            self.last = Index::new(end);
            self.shared.advance_durable(self.last);
        }
        let store = checkpoint_store(&self.shared).await.map_err(failed)?;
        let bytes = self.versions.encode_checkpoint(self.last);
        Ok(Truncation::Purge(Purge {
            shared: self.shared.clone(),
            store,
            bytes,
            stream,
            below,
        }))
    }
}

#[derive(Default)]
struct Staged {
    messages: Vec<(u8, Bytes)>,
    overlay: HashMap<Vec<u8>, (u64, bool)>,
    outcomes: Vec<Result<Index, AppendError>>,
}

fn size(txns: &[PreparedTxn]) -> (usize, usize) {
    txns.iter()
        .fold((0, 0), |(r, b), t| (r + t.records.len(), b + t.bytes))
}

/// A JetStream publish ack: `{"stream","seq",...}` or `{"error":{"err_code","description"}}`.
fn parse_ack(payload: &[u8]) -> Published {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(payload) else {
        return Published::Unknown(format!(
            "unreadable ack {:?}",
            String::from_utf8_lossy(payload)
        ));
    };
    if let Some(err) = v.get("error") {
        return Published::Refused {
            code: err["err_code"].as_u64().unwrap_or(0),
            description: err["description"].as_str().unwrap_or("").to_owned(),
        };
    }
    match v["seq"].as_u64() {
        Some(seq) => Published::Committed(seq),
        None => Published::Unknown(format!("ack without a sequence: {v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_parse_into_outcomes() {
        assert!(matches!(
            parse_ack(br#"{"stream":"S","seq":7,"batch":"b","count":3}"#),
            Published::Committed(7)
        ));
        match parse_ack(
            br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 2"}}"#,
        ) {
            Published::Refused { code, description } => {
                assert_eq!(code, WRONG_LAST_SEQUENCE);
                assert!(description.contains("wrong last"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_ack(b""), Published::Unknown(_)));
    }
}
