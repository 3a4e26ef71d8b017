//! Reads: batched direct gets (`$JS.API.DIRECT.GET.<stream>` with `{"seq","batch"}`),
//! trimmed to the durable index so a reader never sees part of a transaction, and the
//! watcher that moves the durable index when another process appends.
//!
//! Any replica may answer a direct get and a follower may lag: a short answer is retried,
//! never taken for the end of the log. A gap inside an answer is corruption (the stream
//! deletes nothing but a purged prefix).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use bytes::Bytes;
use futures::StreamExt;
use spindle_core::record::decode_payload;
use spindle_core::{Index, Record};

use super::Shared;
use crate::error::ReadError;

/// How often a read asks again when the replica that answered lags the durable index.
const STALE_RETRIES_MAX: u32 = 200;
const STALE_RETRY_PAUSE: Duration = Duration::from_millis(5);
/// How often a reader asks the stream's leader for its last sequence, besides watching
/// commits as they come.
const DURABLE_POLL: Duration = Duration::from_millis(500);
/// How long one direct get waits for its whole answer.
const DIRECT_GET_TIMEOUT: Duration = Duration::from_secs(5);
/// How often `read` asks again when no server answers a direct get at all (status 503, no
/// responders: right after the stream is created, a replica's direct-get subscription may
/// not be up yet), and how long it waits between: about 10 s in all, then the read fails.
const UNANSWERED_RETRIES_MAX: u32 = 200;
const UNANSWERED_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Why a direct get returned nothing.
#[derive(Debug)]
pub(crate) enum FetchError {
    /// No server answered the request (status 503, no responders).
    NoResponders {
        from: u64,
    },
    Failed(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::NoResponders { from } => {
                write!(f, "direct get from {from}: status 503, no server answered")
            }
            FetchError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<String> for FetchError {
    fn from(e: String) -> Self {
        FetchError::Failed(e)
    }
}

/// One stored message.
#[derive(Debug)]
pub(crate) struct Stored {
    pub seq: u64,
    pub payload: Bytes,
}

/// Up to `count` messages from the first sequence at or after `from`, in order (empty if the
/// answering replica has none). Asked once: the caller decides whether to ask again.
pub(crate) async fn fetch(
    shared: &Shared,
    from: u64,
    count: usize,
) -> Result<Vec<Stored>, FetchError> {
    let subject = format!("$JS.API.DIRECT.GET.{}", shared.config.stream);
    let inbox = shared.client.new_inbox();
    let mut sub = shared
        .client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| e.to_string())?;
    let body = serde_json::json!({"seq": from, "batch": count}).to_string();
    shared
        .client
        .publish_with_reply(subject, inbox, body.into())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    loop {
        let msg = match tokio::time::timeout(DIRECT_GET_TIMEOUT, sub.next()).await {
            Ok(Some(m)) => m,
            Ok(None) => return Err("direct get subscription closed".to_string().into()),
            Err(_) => return Err(format!("direct get from {from} timed out").into()),
        };
        if let Some(status) = msg.status {
            match status.as_u16() {
                204 | 404 => return Ok(out),
                503 if out.is_empty() => return Err(FetchError::NoResponders { from }),
                code => {
                    return Err(format!(
                        "direct get from {from}: status {code} {}",
                        msg.description.unwrap_or_default()
                    )
                    .into())
                }
            }
        }
        let headers = msg.headers.unwrap_or_default();
        let seq = headers
            .get("Nats-Sequence")
            .and_then(|v| v.as_str().parse::<u64>().ok())
            .ok_or_else(|| "direct get answer without Nats-Sequence".to_string())?;
        out.push(Stored {
            seq,
            payload: msg.payload,
        });
        if out.len() >= count {
            return Ok(out);
        }
    }
}

/// Every message `from..=to`, retrying while the answering replica lags.
pub(crate) async fn fetch_range(
    shared: &Shared,
    from: u64,
    to: u64,
) -> Result<Vec<Stored>, String> {
    let mut out: Vec<Stored> = Vec::new();
    let mut next = from;
    let mut tries = 0;
    while next <= to {
        let want = ((to - next + 1) as usize).min(shared.config.read_batch_records_max);
        let got = match fetch(shared, next, want).await {
            Ok(got) => got,
            Err(e) if tries < STALE_RETRIES_MAX => {
                tries += 1;
                tracing::debug!(error = %e, "direct get failed; retrying");
                tokio::time::sleep(STALE_RETRY_PAUSE * 10).await;
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        if got.is_empty() {
            tries += 1;
            if tries > STALE_RETRIES_MAX {
                return Err(format!(
                    "no replica returned sequence {next} (last is {to})"
                ));
            }
            tokio::time::sleep(STALE_RETRY_PAUSE).await;
            continue;
        }
        for m in got {
            if m.seq != next {
                return Err(format!(
                    "expected sequence {next}, the stream returned {}",
                    m.seq
                ));
            }
            next += 1;
            out.push(m);
            if next > to {
                break;
            }
        }
    }
    Ok(out)
}

fn corrupt(shared: &Shared, seq: u64, reason: String) -> ReadError {
    ReadError::Corrupt {
        file: PathBuf::from(format!("jetstream stream {}", shared.config.stream)),
        offset: seq,
        reason,
    }
}

/// `Log::read`: durable records from `from`, at least `max_records` unless the log ends
/// first, ending on a commit record.
pub(crate) async fn read(
    shared: &Shared,
    from: Index,
    max_records: usize,
) -> Result<Vec<Record>, ReadError> {
    let from = from.max(Index::FIRST).get();
    let end = shared.durable_index().get();
    let mut out: Vec<Record> = Vec::new();
    let mut next = from;
    let mut stale = 0;
    let mut unanswered = 0;
    while next <= end {
        let want = ((end - next + 1) as usize)
            .min(shared.config.read_batch_records_max)
            .min(
                max_records
                    .saturating_sub(out.len())
                    .max(1)
                    .saturating_add(16),
            );
        let (got, from_feed) = match next_records(shared, next, want).await {
            Ok(got) => got,
            Err(FetchError::NoResponders { .. }) if unanswered < UNANSWERED_RETRIES_MAX => {
                unanswered += 1;
                tokio::time::sleep(UNANSWERED_RETRY_PAUSE).await;
                continue;
            }
            Err(e) => return Err(shared.read_err(e.to_string())),
        };
        let counter = if from_feed {
            &shared.read_from_feed
        } else {
            &shared.read_from_stream
        };
        if got.first().is_none_or(|m| m.seq > next) {
            let first = first_seq(shared).await.map_err(|e| shared.read_err(e))?;
            if first > next {
                shared.set_first(Index::new(first));
                if out.is_empty() {
                    return Err(ReadError::Truncated {
                        first: Index::new(first),
                    });
                }
                return Err(corrupt(
                    shared,
                    next,
                    format!("purged while being read (first is now {first})"),
                ));
            }
            stale += 1;
            if stale > STALE_RETRIES_MAX {
                return Err(shared.read_err(format!("no replica returned sequence {next}")));
            }
            tokio::time::sleep(STALE_RETRY_PAUSE).await;
            continue;
        }
        for m in got {
            if m.seq > end {
                break;
            }
            if m.seq != next {
                return Err(corrupt(
                    shared,
                    next,
                    format!("gap: the stream returned {}", m.seq),
                ));
            }
            let record = decode_payload(Index::new(m.seq), &m.payload).map_err(|e| {
                corrupt(
                    shared,
                    m.seq,
                    format!("record payload does not decode: {e:?}"),
                )
            })?;
            let commit = record.commit;
            out.push(record);
            counter.fetch_add(1, Ordering::Relaxed);
            next += 1;
            if out.len() >= max_records && commit {
                return Ok(out);
            }
        }
    }
    // `end` is a commit index, so nothing is left to trim; keep the guarantee explicit.
    while out.last().is_some_and(|r| !r.commit) {
        out.pop();
    }
    Ok(out)
}

/// Up to `want` records from `next`: from the feed cache when it holds `next` (and the
/// stream was not purged past it as far as this process knows), else from the stream,
/// stopping where the cache's records begin. True if they came from the cache.
async fn next_records(
    shared: &Shared,
    next: u64,
    want: usize,
) -> Result<(Vec<Stored>, bool), FetchError> {
    let (cached, cached_from) = if next >= shared.first_index().get() {
        let feed = shared.feed.lock();
        (feed.take(next, want), feed.next_cached(next))
    } else {
        (Vec::new(), None)
    };
    if !cached.is_empty() {
        let got = cached
            .into_iter()
            .zip(next..)
            .map(|(payload, seq)| Stored { seq, payload })
            .collect();
        return Ok((got, true));
    }
    let want = match cached_from {
        Some(at) if at > next => want.min((at - next) as usize),
        _ => want,
    };
    let got = fetch(shared, next, want).await?;
    Ok((got, false))
}

/// The stream's first sequence, from its leader.
pub(crate) async fn first_seq(shared: &Shared) -> Result<u64, String> {
    let stream = shared
        .js
        .get_stream(&shared.config.stream)
        .await
        .map_err(|e| e.to_string())?;
    let state = stream.cached_info().state.clone();
    Ok(state.first_sequence.max(1))
}

/// Start (once) the task that follows commits made by any appender: the feed (see
/// `feed`), or with the feed off a headers-only ordered consumer, where each message
/// carrying `Nats-Batch-Commit` ends a batch, so its sequence is a commit index.
pub(crate) fn ensure_watcher(shared: &Arc<Shared>, handle: &tokio::runtime::Handle) {
    {
        let mut started = shared.watcher.lock();
        if *started {
            return;
        }
        *started = true;
    }
    // The consumer can stall for a long while when the server it lives on dies (it is
    // recreated only after missed heartbeats); the stream's state, asked of its leader
    // every `DURABLE_POLL`, moves the durable index meanwhile.
    handle.spawn({
        let shared = shared.clone();
        async move {
            loop {
                tokio::time::sleep(DURABLE_POLL).await;
                // The leader stores a committed batch message by message: only a record
                // that ends a transaction is a durable index.
                let _ = catch_up_durable(&shared).await;
            }
        }
    });
    let shared = shared.clone();
    handle.spawn(async move {
        loop {
            let followed = if shared.config.feed_cache_bytes_max > 0 {
                follow_feed(&shared).await
            } else {
                watch(&shared).await
            };
            if let Err(e) = followed {
                tracing::warn!(error = %e, "commit watcher stopped; restarting");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// Follow the appender's announcements: cache their records and move the durable index to
/// each batch's end. (A piece lost on the way leaves a gap the readers fill from the
/// stream; the durable index then moves with the next batch or the leader's state.)
async fn follow_feed(shared: &Shared) -> Result<(), String> {
    let mut pieces = shared
        .client
        .subscribe(shared.config.feed_subject())
        .await
        .map_err(|e| e.to_string())?;
    // What was committed before the subscription took effect comes through no piece.
    catch_up_durable(shared).await?;
    while let Some(msg) = pieces.next().await {
        // A copy: the message shares the connection's read buffer, which the cache would
        // otherwise keep alive with everything else received beside the piece.
        let owned = bytes::Bytes::copy_from_slice(&msg.payload);
        let piece = super::feed::decode(&owned).and_then(|piece| {
            if piece.stream == shared.stream_id {
                Ok(piece)
            } else {
                Err(format!(
                    "feed piece of another stream (id {:x}, this one's is {:x})",
                    piece.stream, shared.stream_id
                ))
            }
        });
        match piece {
            Ok(piece) => {
                shared.feed.lock().insert(piece.first, piece.payloads);
                if piece.durable != 0 {
                    shared.advance_durable(Index::new(piece.durable));
                }
            }
            Err(e) => {
                let n = shared.feed_ignored.fetch_add(1, Ordering::Relaxed);
                if n.is_power_of_two() || n == 0 {
                    tracing::warn!(error = %e, ignored = n + 1, "feed piece ignored");
                }
            }
        }
    }
    Err("feed subscription closed".into())
}

/// Move the durable index to the stream's last sequence if that record ends a transaction
/// (what the stream holds is committed; a batch being stored shows part of itself, and its
/// end comes later). Returns the stream and that last sequence.
async fn catch_up_durable(
    shared: &Shared,
) -> Result<(async_nats::jetstream::stream::Stream, u64), String> {
    let stream = shared
        .js
        .get_stream(&shared.config.stream)
        .await
        .map_err(|e| e.to_string())?;
    let last = stream.cached_info().state.last_sequence;
    if last > shared.durable_index().get() && ends_transaction(shared, last).await {
        shared.advance_durable(Index::new(last));
    }
    Ok((stream, last))
}

/// How many records `last_commit_at_or_before` asks for at a time, walking back.
const COMMIT_SEARCH_WINDOW: u64 = 256;

/// The last sequence at or before `last` whose record ends a transaction: what a handle
/// opened while a batch is being stored may take as durable. With none retained, the one
/// before the stream's first (a purge ends on a whole transaction; 0 on a new stream).
pub(crate) async fn last_commit_at_or_before(shared: &Shared, last: u64) -> Result<u64, String> {
    let first = shared.first_index().get();
    let mut to = last;
    while to >= first && to > 0 {
        let from = to.saturating_sub(COMMIT_SEARCH_WINDOW - 1).max(first);
        let got = fetch_range(shared, from, to).await?;
        for m in got.iter().rev() {
            let record = decode_payload(Index::new(m.seq), &m.payload)
                .map_err(|e| format!("record {} does not decode: {e:?}", m.seq))?;
            if record.commit {
                return Ok(m.seq);
            }
        }
        to = from - 1;
    }
    Ok(first.saturating_sub(1).min(last))
}

/// Whether the stored record at `seq` is the last of its transaction (false when no
/// replica answered with it).
async fn ends_transaction(shared: &Shared, seq: u64) -> bool {
    let Ok(got) = fetch(shared, seq, 1).await else {
        return false;
    };
    got.first()
        .filter(|m| m.seq == seq)
        .and_then(|m| decode_payload(Index::new(seq), &m.payload).ok())
        .is_some_and(|r| r.commit)
}

async fn watch(shared: &Shared) -> Result<(), String> {
    // The end of a batch being stored comes through the consumer below.
    let (stream, last) = catch_up_durable(shared).await?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: last + 1,
            },
            headers_only: true,
            ..OrderedConfig::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    while let Some(msg) = messages.next().await {
        let msg = msg.map_err(|e| e.to_string())?;
        let info = msg.info().map_err(|e| e.to_string())?;
        let commits = msg
            .headers
            .as_ref()
            .is_some_and(|h| h.get("Nats-Batch-Commit").is_some());
        if commits {
            shared.advance_durable(Index::new(info.stream_sequence));
        }
    }
    Ok(())
}
