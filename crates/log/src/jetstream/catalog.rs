//! The cluster's catalog: one entry per process that uses a stream, in the KV bucket
//! `<stream>_CATALOG`. A member puts its entry (opaque bytes: the server defines the JSON)
//! every third of `ttl`; a reader counts only entries put less than `ttl` ago, and the
//! bucket (created with the first registrant's `ttl` as its age limit) deletes older ones,
//! so a process that dies drops out by itself; one that closes deletes its key at once.
//! Every process of a stream should use the same `ttl`; one that does not renews every
//! third of the shorter of its own and the bucket's age limit, counts entries younger than
//! the bucket's limit as live, and warns. The same task reads every entry after
//! each renewal, so `members` answers from memory without a network call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use async_nats::jetstream::stream::StorageType;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::{JetStreamError, JetStreamLog};

/// Shortest catalog TTL accepted (entries are renewed every third of it).
pub const CATALOG_TTL_MIN: Duration = Duration::from_millis(300);

/// One process in the catalog, as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The key it registered under.
    pub key: String,
    /// What it last put.
    pub value: Vec<u8>,
    /// How long before the read its entry was put.
    pub age: Duration,
}

/// What the renewal task shares with the handle.
#[derive(Debug, Default)]
struct Seen {
    members: Vec<Member>,
    /// When the task last read the whole catalog.
    read_at: Option<Instant>,
    /// The last renewal or read error, until one succeeds again.
    error: Option<String>,
}

/// This process's registration. Renewed until dropped; dropping deletes the entry.
#[derive(Debug)]
pub struct Registration {
    ttl: Duration,
    seen: Arc<Mutex<Seen>>,
    stop: watch::Sender<bool>,
    /// Wakes the renewal task to put the entry at once.
    renew: Arc<tokio::sync::Notify>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Registration {
    /// The ttl it registered with (entries are renewed every third of it).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Every member (this one too) as of the last read, sorted by key.
    pub fn members(&self) -> Vec<Member> {
        self.seen.lock().members.clone()
    }

    /// Why the last renewal or read failed, while it keeps failing.
    pub fn error(&self) -> Option<String> {
        self.seen.lock().error.clone()
    }

    /// How long ago the catalog was last read (`None` before the first read).
    pub fn read_age(&self) -> Option<Duration> {
        self.seen.lock().read_at.map(|t| t.elapsed())
    }

    /// Put the entry now (then read the catalog again), instead of at the next renewal.
    pub fn renew_now(&self) {
        self.renew.notify_one();
    }

    /// Stop renewing and delete the entry (waits for the delete to be sent).
    pub fn close(mut self) {
        self.stop_task(true);
    }

    fn stop_task(&mut self, wait: bool) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            if wait {
                let _ = futures::executor::block_on(task);
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // The task deletes the entry on its own runtime; dropping does not wait for it.
        self.stop_task(false);
    }
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'='))
}

impl JetStreamLog {
    /// Register in the stream's catalog under `key` (ASCII letters, digits, `-`, `_`, `=`),
    /// putting `entry()` now and every `ttl / 3`; entries not renewed for `ttl` vanish.
    /// Waits until the first entry is stored.
    pub fn register(
        &self,
        key: &str,
        ttl: Duration,
        entry: impl Fn() -> Vec<u8> + Send + Sync + 'static,
    ) -> Result<Registration, JetStreamError> {
        let refuse = |reason: String| JetStreamError::Catalog {
            stream: self.shared.config.stream.clone(),
            reason,
        };
        if !valid_key(key) {
            return Err(refuse(format!(
                "catalog key {key:?} must be ASCII letters, digits, '-', '_' or '='"
            )));
        }
        if ttl < CATALOG_TTL_MIN {
            return Err(refuse(format!(
                "catalog ttl {ttl:?} is below {CATALOG_TTL_MIN:?}"
            )));
        }
        let shared = self.shared.clone();
        let bucket = format!("{}_CATALOG", shared.config.stream);
        let replicas = shared.config.replicas;
        let wait = shared.config.unavailable_wait;
        let store = futures::executor::block_on(self.handle.spawn(async move {
            let asked = Instant::now();
            loop {
                let kv = match shared.js.get_key_value(&bucket).await {
                    Ok(kv) => Ok(kv),
                    Err(_) => shared
                        .js
                        .create_key_value(kv::Config {
                            bucket: bucket.clone(),
                            history: 1,
                            max_age: ttl,
                            storage: StorageType::File,
                            num_replicas: replicas,
                            ..kv::Config::default()
                        })
                        .await
                        .map_err(|e| e.to_string()),
                };
                match kv {
                    Ok(kv) => {
                        let max_age = kv.status().await.map_or(ttl, |s| s.max_age());
                        return Ok((kv, max_age));
                    }
                    Err(e) if asked.elapsed() < wait => {
                        tracing::debug!(error = %e, "catalog bucket not available yet; retrying");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }))
        .map_err(|e| refuse(format!("catalog task: {e}")))?
        .map_err(|e| refuse(format!("opening the catalog bucket: {e}")))?;
        let (store, max_age) = store;
        // The bucket deletes entries older than the age its creator gave it: renewed every
        // third of the shorter of the two, an entry never lapses between renewals, though
        // this process was configured with another ttl (every process should use one).
        let every = if max_age.is_zero() {
            ttl
        } else {
            ttl.min(max_age)
        } / 3;
        // Every member renews within a third of the bucket's age limit, whatever its own
        // ttl: entries younger than that limit are live (the bucket deletes older ones).
        let window = if max_age.is_zero() { ttl } else { max_age };
        if !max_age.is_zero() && max_age != ttl {
            tracing::warn!(
                bucket = %format!("{}_CATALOG", self.shared.config.stream),
                "the catalog bucket keeps entries {max_age:?}, this process registers with a \
                 ttl of {ttl:?}: renewing every {every:?}; give every process of the stream \
                 the same catalog ttl"
            );
        }
        let key = key.to_owned();
        let entry: Arc<dyn Fn() -> Vec<u8> + Send + Sync> = Arc::new(entry);
        // The first put, before returning: a caller sees itself registered. A bucket that
        // another process has just created may not take puts yet ("no stream found for
        // given subject" while its stream is placed): retried for the same wait.
        futures::executor::block_on(self.handle.spawn({
            let (store, key, entry) = (store.clone(), key.clone(), entry.clone());
            async move {
                let asked = Instant::now();
                loop {
                    match store.put(&key, entry().into()).await {
                        Ok(_) => return Ok(()),
                        Err(e) if asked.elapsed() < wait => {
                            tracing::debug!(error = %e, "first catalog put failed; retrying");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
            }
        }))
        .map_err(|e| refuse(format!("catalog task: {e}")))?
        .map_err(|e| refuse(format!("registering {key}: {e}")))?;
        // The first read too, before returning: the caller's status lists the catalog
        // (itself included) from the start. A failure is kept as the error and retried by
        // the renewal task.
        let first = futures::executor::block_on(self.handle.spawn({
            let store = store.clone();
            async move { read_all(&store, window).await }
        }))
        .map_err(|e| refuse(format!("catalog task: {e}")))?;
        let mut seen = Seen::default();
        match first {
            Ok(members) => {
                seen.members = members;
                seen.read_at = Some(Instant::now());
            }
            Err(e) => seen.error = Some(e),
        }
        let seen = Arc::new(Mutex::new(seen));
        let (stop, mut stopped) = watch::channel(false);
        let renew = Arc::new(tokio::sync::Notify::new());
        let task = self.handle.spawn({
            let seen = seen.clone();
            let renew = renew.clone();
            async move {
                loop {
                    let read = read_all(&store, window).await;
                    {
                        let mut s = seen.lock();
                        match read {
                            Ok(members) => {
                                s.members = members;
                                s.read_at = Some(Instant::now());
                                s.error = None;
                            }
                            Err(e) => s.error = Some(e),
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = renew.notified() => {}
                        _ = stopped.changed() => break,
                    }
                    if let Err(e) = store.put(&key, entry().into()).await {
                        seen.lock().error = Some(format!("renewing {key}: {e}"));
                    }
                }
                if let Err(e) = store.delete(&key).await {
                    tracing::warn!("leaving the catalog: deleting {key}: {e}");
                }
            }
        });
        Ok(Registration {
            ttl,
            seen,
            stop,
            renew,
            task: Some(task),
        })
    }
}

/// Every entry of the bucket put less than `ttl` ago, sorted by key.
async fn read_all(store: &kv::Store, ttl: Duration) -> Result<Vec<Member>, String> {
    let mut keys = store.keys().await.map_err(|e| format!("listing: {e}"))?;
    let mut names = Vec::new();
    while let Some(k) = keys.next().await {
        names.push(k.map_err(|e| format!("listing: {e}"))?);
    }
    names.sort();
    let now = std::time::SystemTime::now();
    let mut members = Vec::new();
    for key in names {
        let Some(e) = store.entry(&key).await.map_err(|e| format!("{key}: {e}"))? else {
            continue;
        };
        if e.operation != kv::Operation::Put {
            continue;
        }
        let created = std::time::SystemTime::from(e.created);
        let age = now.duration_since(created).unwrap_or_default();
        if age > ttl {
            continue;
        }
        members.push(Member {
            key,
            value: e.value.to_vec(),
            age,
        });
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::valid_key;

    #[test]
    fn catalog_keys_are_kv_safe() {
        assert!(valid_key("disk-view_1=a"));
        for bad in ["", "a.b", "a b", "a*", "a>", "é"] {
            assert!(!valid_key(bad), "{bad:?}");
        }
    }
}
