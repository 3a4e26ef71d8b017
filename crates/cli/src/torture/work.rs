//! The torture driver's clients (the workload that runs until the node is killed) and the
//! verification of a restarted node against the model.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::{grpc_connect, tail, HttpClient};
use spindle_server::proto;

use super::model::{
    check_ack, check_history, check_latest, counter_fields, counter_value, resolve_maybe,
    txn_value, Counter, Key, Obs, Txn, TxnState,
};
use super::rng::Rng;

/// Items each client owns (and alone writes): nodes, then edges between them.
pub const ITEMS_PER_CLIENT: usize = 8;
const NODES_PER_CLIENT: usize = 6;
/// Counters shared by every client.
pub const COUNTERS: usize = 4;
/// Writes per owned transaction, at most.
const TXN_WRITES_MAX: usize = 4;
/// One owned transaction in this many carries a stale condition (and must be refused).
const STALE_CONDITION_ONE_IN: u64 = 16;
/// Largest chunk a client puts.
const CHUNK_BYTES_MAX: u64 = 64 << 10;
/// Conflicts an increment retries before giving up its turn.
const INCREMENT_RETRIES_MAX: usize = 64;
/// How long a read may wait for its index (a violation beyond).
const READ_WAIT_MS: u64 = 30_000;
/// Older acknowledgements re-checked per trial, on top of the new ones.
const SAMPLE_TXNS: usize = 16;
const SAMPLE_INCREMENTS: usize = 8;
const SAMPLE_CHUNKS: usize = 4;
/// Whole histories of owned items compared per trial.
const SAMPLE_HISTORIES: usize = 2;
/// Every this many trials one counter's whole history is compared.
const COUNTER_HISTORY_EVERY_TRIALS: u64 = 25;
/// Longest the Memory View may take to boot after a restart.
const BOOT_WAIT: Duration = Duration::from_secs(120);

/// An item of the model: its key and every version it must have, in index order.
#[derive(Debug)]
pub struct Item {
    pub key: Key,
    pub versions: Vec<Obs>,
}

impl Item {
    fn known(&self) -> u64 {
        self.versions.last().map_or(0, |o| o.index)
    }
}

/// An acknowledged chunk: its bytes are regenerated from `seed` and `len`.
#[derive(Clone, Debug)]
pub struct ChunkAck {
    pub id: String,
    pub seed: u64,
    pub len: u64,
}

/// A violated expectation.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Violation {
    pub trial: u64,
    pub what: String,
}

/// Everything the driver knows, across all trials.
#[derive(Debug, Default)]
pub struct State {
    pub trial: u64,
    pub items: Vec<Item>,
    pub txns: Vec<Txn>,
    pub counters: Vec<Counter>,
    pub chunks: Vec<ChunkAck>,
    pub violations: Vec<Violation>,
    next_op: u64,
    maybe_txns: Vec<u64>,
    unchecked_txns: Vec<u64>,
    unchecked_increments: Vec<(usize, u64)>,
    unchecked_chunks: Vec<usize>,
    pub max_acked: u64,
    // Counts for the summary.
    pub txn_acks: u64,
    pub write_acks: u64,
    pub increment_acks: u64,
    pub conflicts_retried: u64,
    pub maybe_total: u64,
    pub maybe_landed: u64,
    pub maybe_chunks: u64,
    pub reads_own_writes: u64,
    pub checks: u64,
    pub replayed_records: u64,
    pub stale_refused: u64,
}

impl State {
    pub fn new(clients: usize) -> State {
        let mut items = Vec::new();
        for c in 0..clients {
            for k in 0..ITEMS_PER_CLIENT {
                let key = if k < NODES_PER_CLIENT {
                    Key::Node(format!("o{c}-{k}"))
                } else {
                    Key::Edge {
                        from: format!("o{c}-0"),
                        label: format!("l{k}"),
                        to: format!("o{c}-{}", k - NODES_PER_CLIENT + 1),
                    }
                };
                items.push(Item {
                    key,
                    versions: Vec::new(),
                });
            }
        }
        State {
            items,
            counters: vec![Counter::default(); COUNTERS],
            ..State::default()
        }
    }

    pub fn violation(&mut self, what: String) {
        self.violations.push(Violation {
            trial: self.trial,
            what,
        });
    }

    /// Test hook: forge an acknowledgement the node never gave (a transaction claimed to
    /// have written the last item of a real one, at its commit index), as if the node had
    /// lost that write. The next verification must report it.
    pub fn sabotage_lost_write(&mut self) -> bool {
        let trial = self.trial;
        let Some((item, commit)) = self.txns.iter().rev().find_map(|t| match t.state {
            TxnState::Acked(c) if t.trial == trial => Some((t.writes.last()?.0, c)),
            _ => None,
        }) else {
            return false;
        };
        let id = self.txns.len() as u64;
        self.txns.push(Txn {
            id,
            trial,
            writes: vec![(item, false)],
            state: TxnState::Acked(commit),
        });
        self.unchecked_txns.push(id);
        true
    }

    /// Test hook: pretend an acknowledged multi-item transaction of the trial just run was
    /// never answered, and that one of its items was not touched by it: the restarted node
    /// then shows it partly visible (from the model's point of view).
    pub fn sabotage_partial_txn(&mut self) -> bool {
        let trial = self.trial;
        let items = &self.items;
        let Some(t) = self.txns.iter_mut().rev().find(|t| {
            t.trial == trial
                && t.writes.len() >= 2
                && matches!(t.state, TxnState::Acked(c)
                    if t.writes.iter().enumerate().all(|(w, (i, _))| items[*i].known() == c - (t.writes.len() - 1 - w) as u64))
        }) else {
            return false;
        };
        t.state = TxnState::Maybe;
        let id = t.id;
        // Roll back all but the first item.
        for (item, _) in t.writes.clone().into_iter().skip(1) {
            self.items[item].versions.pop();
        }
        self.maybe_txns.push(id);
        true
    }
}

/// GET `/v1/item` (or history-free reads) and turn the answer into a version.
async fn get_obs(
    http: &HttpClient,
    key: &Key,
    params: &str,
) -> anyhow::Result<Result<Option<Obs>, String>> {
    let path = format!("/v1/item?{}&{params}", key.query());
    let (status, body) = http.json(Method::GET, &path, None).await?;
    Ok(parse_item(status, &body).map_err(|e| format!("GET {path}: {e}")))
}

fn parse_item(status: StatusCode, body: &Value) -> Result<Option<Obs>, String> {
    match status {
        StatusCode::OK => Ok(Some(parse_version(body)?)),
        StatusCode::NOT_FOUND if body["error"] == "deleted" => Ok(Some(Obs {
            index: body["version"]
                .as_u64()
                .ok_or_else(|| format!("no version in {body}"))?,
            value: None,
        })),
        StatusCode::NOT_FOUND if body["error"] == "not_found" => Ok(None),
        _ => Err(format!("answered {status}: {body}")),
    }
}

fn parse_version(v: &Value) -> Result<Obs, String> {
    let index = v["version"]
        .as_u64()
        .ok_or_else(|| format!("no version in {v}"))?;
    let value = if v["deleted"].as_bool() == Some(true) {
        None
    } else {
        Some(v["value"].clone())
    };
    Ok(Obs { index, value })
}

/// The bytes of a chunk, from its seed.
pub fn chunk_bytes(seed: u64, len: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len as usize + 8);
    while (out.len() as u64) < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len as usize);
    out
}

/// One client: a loop of owned transactions, counter increments and chunk puts until
/// `stop` is set or a request's outcome is unknown (the node died under it).
pub async fn client(
    c: usize,
    http: HttpClient,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    mut rng: Rng,
) {
    let mut hints = [0u64; COUNTERS];
    while !stop.load(Ordering::Relaxed) {
        let go_on = match rng.below(10) {
            0..=4 => owned_txn(c, &http, &state, &mut rng).await,
            5..=7 => increment(&http, &state, &mut rng, &mut hints, &stop).await,
            _ => put_chunk(&http, &state, &mut rng).await,
        };
        if !go_on {
            return;
        }
    }
}

/// A multi-item transaction on this client's items, conditioned on every item's version
/// (which this client alone changes, so it must never conflict); sometimes followed by a
/// read that waits for its index. Returns whether the client may go on.
async fn owned_txn(c: usize, http: &HttpClient, state: &Mutex<State>, rng: &mut Rng) -> bool {
    // Sometimes one condition is deliberately stale: the node must refuse the transaction,
    // naming the item's true version (kept across restarts and truncation).
    let stale = rng.below(STALE_CONDITION_ONE_IN) == 0;
    let (txn, body, stale_item) = {
        let mut s = state.lock().unwrap();
        let g = 1 + rng.below(TXN_WRITES_MAX as u64) as usize;
        let mut chosen: Vec<usize> = Vec::new();
        while chosen.len() < g {
            let i = c * ITEMS_PER_CLIENT + rng.below(ITEMS_PER_CLIENT as u64) as usize;
            if !chosen.contains(&i) {
                chosen.push(i);
            }
        }
        let mut writes: Vec<(usize, bool)> = chosen
            .iter()
            .map(|&i| {
                let live = s.items[i]
                    .versions
                    .last()
                    .is_some_and(|o| o.value.is_some());
                (i, live && rng.below(4) == 0)
            })
            .collect();
        if writes.iter().all(|(_, d)| *d) {
            writes[0].1 = false;
        }
        let id = s.txns.len() as u64;
        let txn = Txn {
            id,
            trial: s.trial,
            writes,
            state: TxnState::Maybe,
        };
        let mut ws = Vec::new();
        let mut conds = Vec::new();
        for (w, &(i, delete)) in txn.writes.iter().enumerate() {
            let item = s.items[i].key.json();
            if delete {
                ws.push(json!({"item": item, "delete": true}));
            } else {
                ws.push(json!({"item": item, "value": txn_value(id, w)}));
            }
            let known = s.items[i].known();
            let version = match (stale && w == 0, known) {
                (false, _) => known,
                (true, 0) => 1,
                (true, k) => k - 1,
            };
            conds.push(json!({"item": item, "version": version}));
        }
        s.txns.push(txn.clone());
        let stale_item = stale.then(|| {
            (
                s.items[txn.writes[0].0].key.clone(),
                s.items[txn.writes[0].0].known(),
            )
        });
        (txn, json!({"writes": ws, "conditions": conds}), stale_item)
    };
    let answer = http.json(Method::POST, "/v1/txn", Some(&body)).await;
    // `Ok(commit)`: acknowledged; `Err(go_on)` otherwise.
    let outcome: Result<u64, bool> = {
        let mut s = state.lock().unwrap();
        match answer {
            Ok((StatusCode::CONFLICT, a)) if stale_item.is_some() => {
                s.txns[txn.id as usize].state = TxnState::Absent;
                s.stale_refused += 1;
                let (key, known) = stale_item.expect("a stale condition was sent");
                let failed = &a["failed"];
                let one = failed.as_array().map_or(0, Vec::len) == 1;
                if !one || failed[0]["item"] != key.json() || failed[0]["actual"] != known {
                    s.violation(format!(
                        "txn {} with a stale condition on {key} (version {known}) was refused \
                         with {a}",
                        txn.id
                    ));
                }
                Err(true)
            }
            Ok((StatusCode::OK, a)) => {
                let Some(commit) = a["index"].as_u64() else {
                    s.violation(format!("txn {} acknowledged without an index: {a}", txn.id));
                    return false;
                };
                if let Some((key, known)) = &stale_item {
                    s.violation(format!(
                        "txn {} was acknowledged at {commit} although its condition on {key} \
                         named a version other than {known}",
                        txn.id
                    ));
                }
                s.txns[txn.id as usize].state = TxnState::Acked(commit);
                s.txn_acks += 1;
                s.write_acks += txn.writes.len() as u64;
                s.max_acked = s.max_acked.max(commit);
                s.unchecked_txns.push(txn.id);
                for (w, &(i, _)) in txn.writes.iter().enumerate() {
                    let o = txn.expected(w, commit);
                    if o.index <= s.items[i].known() {
                        let what = format!(
                        "txn {} acknowledged at {commit} puts {} at {}, not above its version {}",
                        txn.id,
                        s.items[i].key,
                        o.index,
                        s.items[i].known()
                    );
                        s.violation(what);
                    }
                    s.items[i].versions.push(o);
                }
                Ok(commit)
            }
            Ok((StatusCode::CONFLICT, a)) => {
                s.txns[txn.id as usize].state = TxnState::Absent;
                s.violation(format!(
                    "txn {} on items only its client writes conflicted: {a}",
                    txn.id
                ));
                Err(false)
            }
            Ok((status, a)) if status.is_client_error() => {
                s.txns[txn.id as usize].state = TxnState::Absent;
                s.violation(format!("txn {} refused with {status}: {a}", txn.id));
                Err(false)
            }
            // A server error or a broken connection: the outcome is unknown.
            Ok(_) | Err(_) => {
                s.maybe_txns.push(txn.id);
                s.maybe_total += 1;
                Err(false)
            }
        }
    };
    match outcome {
        Ok(commit) if rng.below(3) == 0 => read_own_write(http, state, &txn, commit, rng).await,
        Ok(_) => true,
        Err(go_on) => go_on,
    }
}

/// Read one write of an acknowledged transaction back with `min_index` (Disk View), or
/// the whole transaction with a multiget (Memory View): it must be visible.
async fn read_own_write(
    http: &HttpClient,
    state: &Mutex<State>,
    txn: &Txn,
    commit: u64,
    rng: &mut Rng,
) -> bool {
    let keys: Vec<Key> = {
        let s = state.lock().unwrap();
        txn.writes
            .iter()
            .map(|(i, _)| s.items[*i].key.clone())
            .collect()
    };
    if rng.below(2) == 0 {
        let w = rng.below(keys.len() as u64) as usize;
        let params = format!("min_index={commit}&timeout_ms={READ_WAIT_MS}");
        let Ok(got) = get_obs(http, &keys[w], &params).await else {
            return false;
        };
        let mut s = state.lock().unwrap();
        s.reads_own_writes += 1;
        let expected = txn.expected(w, commit);
        match got {
            Ok(o) if o.as_ref() == Some(&expected) => true,
            Ok(o) => {
                let what = format!(
                    "read-your-write: {} read with min_index={commit} gave {:?}, expected {expected}",
                    keys[w], o
                );
                s.violation(what);
                true
            }
            Err(e) if e.contains("500") || e.contains("503") => false,
            Err(e) => {
                s.violation(format!("read-your-write: {e}"));
                true
            }
        }
    } else {
        let items: Vec<Value> = keys.iter().map(Key::json).collect();
        let body = json!({"items": items, "min_index": commit, "timeout_ms": READ_WAIT_MS});
        let Ok((status, a)) = http.json(Method::POST, "/v1/multiget", Some(&body)).await else {
            return false;
        };
        let mut s = state.lock().unwrap();
        s.reads_own_writes += 1;
        if status != StatusCode::OK {
            if !status.is_server_error() || status == StatusCode::GATEWAY_TIMEOUT {
                s.violation(format!(
                    "read-your-write: multiget with min_index={commit} answered {status}: {a}"
                ));
            }
            return status == StatusCode::OK;
        }
        for (w, got) in a["values"].as_array().into_iter().flatten().enumerate() {
            let expected = memory_json(Some(&txn.expected(w, commit)));
            if *got != expected {
                let what = format!(
                    "read-your-write: multiget with min_index={commit} gave {got} for {}, expected {expected}",
                    keys[w]
                );
                s.violation(what);
            }
        }
        true
    }
}

/// What a multiget answers for an item whose latest version is `o`.
fn memory_json(o: Option<&Obs>) -> Value {
    match o {
        Some(Obs {
            index,
            value: Some(v),
        }) => json!({"version": index, "value": v}),
        _ => Value::Null,
    }
}

/// A read-modify-write increment of a shared counter: read its version and count, write
/// count + 1 on condition of that version; a conflict is retried.
async fn increment(
    http: &HttpClient,
    state: &Mutex<State>,
    rng: &mut Rng,
    hints: &mut [u64; COUNTERS],
    stop: &AtomicBool,
) -> bool {
    let k = rng.below(COUNTERS as u64) as usize;
    let key = Key::Node(format!("ctr-{k}"));
    for _ in 0..INCREMENT_RETRIES_MAX {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let params = format!("min_index={}&timeout_ms={READ_WAIT_MS}", hints[k]);
        let Ok(Ok(current)) = get_obs(http, &key, &params).await else {
            return false;
        };
        let (version, n) = match &current {
            None => (0, 0),
            Some(o) => match o.value.as_ref().and_then(counter_fields) {
                Some((n, _)) => (o.index, n),
                None => {
                    state
                        .lock()
                        .unwrap()
                        .violation(format!("counter {key} holds {o}"));
                    return false;
                }
            },
        };
        let op = {
            let mut s = state.lock().unwrap();
            s.next_op += 1;
            let op = s.next_op;
            s.counters[k].maybe.entry(n + 1).or_default().insert(op);
            op
        };
        let body = json!({
            "writes": [{"item": key.json(), "value": counter_value(n + 1, op)}],
            "conditions": [{"item": key.json(), "version": version}],
        });
        let answer = http.json(Method::POST, "/v1/txn", Some(&body)).await;
        let mut s = state.lock().unwrap();
        let forget = |s: &mut State| {
            let m = &mut s.counters[k].maybe;
            if let Some(set) = m.get_mut(&(n + 1)) {
                set.remove(&op);
                if set.is_empty() {
                    m.remove(&(n + 1));
                }
            }
        };
        match answer {
            Ok((StatusCode::OK, a)) => {
                forget(&mut s);
                let commit = a["index"].as_u64().unwrap_or(0);
                if commit <= version {
                    s.violation(format!(
                        "increment op {op} of {key} acknowledged at {commit}, not above {version}"
                    ));
                }
                if let Some(prev) = s.counters[k].acked.insert(n + 1, (op, commit)) {
                    s.violation(format!(
                        "two acknowledged increments of {key} produced {}: {prev:?} and {:?}",
                        n + 1,
                        (op, commit)
                    ));
                }
                s.increment_acks += 1;
                s.max_acked = s.max_acked.max(commit);
                s.unchecked_increments.push((k, n + 1));
                hints[k] = commit;
                return true;
            }
            Ok((StatusCode::CONFLICT, a)) => {
                forget(&mut s);
                s.conflicts_retried += 1;
                hints[k] = hints[k].max(a["failed"][0]["actual"].as_u64().unwrap_or(0));
            }
            Ok((status, a)) if status.is_client_error() => {
                forget(&mut s);
                s.violation(format!("increment of {key} refused with {status}: {a}"));
                return false;
            }
            Ok(_) | Err(_) => {
                s.maybe_total += 1;
                return false;
            }
        }
    }
    true
}

/// Put a chunk of random bytes; its id must be its BLAKE3 hash.
async fn put_chunk(http: &HttpClient, state: &Mutex<State>, rng: &mut Rng) -> bool {
    let seed = rng.next_u64();
    let len = 1 + rng.below(CHUNK_BYTES_MAX);
    let bytes = chunk_bytes(seed, len);
    let id = spindle_chunk::ChunkId::of(&bytes).to_hex();
    let answer = http.request(Method::POST, "/v1/chunks", Some(bytes)).await;
    let mut s = state.lock().unwrap();
    match answer {
        Ok((status, body)) if status == StatusCode::OK || status == StatusCode::CREATED => {
            let a: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if a["id"] != id.as_str() || a["bytes"] != len {
                s.violation(format!(
                    "chunk put of {len} bytes with id {id} answered {a}"
                ));
                return false;
            }
            s.chunks.push(ChunkAck { id, seed, len });
            let at = s.chunks.len() - 1;
            s.unchecked_chunks.push(at);
            true
        }
        Ok((status, body)) if status.is_client_error() => {
            let what = format!(
                "chunk put refused with {status}: {}",
                String::from_utf8_lossy(&body)
            );
            s.violation(what);
            false
        }
        Ok(_) | Err(_) => {
            s.maybe_chunks += 1;
            false
        }
    }
}

/// Take new entries plus a sample of older ones.
fn new_and_sample<T: Clone>(new: Vec<T>, all: &[T], sample: usize, rng: &mut Rng) -> Vec<T> {
    let mut out = new;
    for _ in 0..sample.min(all.len()) {
        out.push(all[rng.below(all.len() as u64) as usize].clone());
    }
    out
}

/// Verify a restarted node against the model; violations go into the state. `Err` when
/// the node could not be asked (it died or never became ready).
pub async fn verify(
    http: &HttpClient,
    grpc: &str,
    s: &mut State,
    rng: &mut Rng,
) -> anyhow::Result<()> {
    let (code, status) = http.json(Method::GET, "/v1/status", None).await?;
    anyhow::ensure!(
        code == StatusCode::OK,
        "/v1/status answered {code}: {status}"
    );
    let durable = status["log"]["durable_index"].as_u64().unwrap_or(0);
    if durable < s.max_acked {
        s.violation(format!(
            "the restarted log is durable to {durable}, below the acknowledged {}",
            s.max_acked
        ));
    }
    if let Some(f) = status["failures"].as_array().filter(|f| !f.is_empty()) {
        s.violation(format!("the node reports failed workers: {f:?}"));
    }
    let wait = format!("min_index={durable}&timeout_ms={READ_WAIT_MS}");
    let read = |key: Key, params: String| async move {
        get_obs(http, &key, &params)
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))
    };

    // Unacknowledged transactions: whole or absent.
    for id in std::mem::take(&mut s.maybe_txns) {
        let txn = s.txns[id as usize].clone();
        let keys: Vec<Key> = txn
            .writes
            .iter()
            .map(|(i, _)| s.items[*i].key.clone())
            .collect();
        let known: Vec<u64> = txn
            .writes
            .iter()
            .map(|(i, _)| s.items[*i].known())
            .collect();
        let mut latest = Vec::new();
        for k in &keys {
            latest.push(read(k.clone(), wait.clone()).await?);
        }
        s.checks += 1;
        match resolve_maybe(&txn, &keys, &known, &latest) {
            Ok(Some(commit)) => {
                s.txns[id as usize].state = TxnState::Landed(commit);
                s.maybe_landed += 1;
                for (w, (i, _)) in txn.writes.iter().enumerate() {
                    let o = txn.expected(w, commit);
                    s.items[*i].versions.push(o);
                }
            }
            Ok(None) => s.txns[id as usize].state = TxnState::Absent,
            Err(e) => {
                s.violation(e);
                s.txns[id as usize].state = TxnState::Absent;
                // Follow the node from here on, so that one fault is reported once.
                for ((i, _), (k, l)) in txn.writes.iter().zip(known.iter().zip(latest)) {
                    if let Some(l) = l.filter(|l| l.index != *k) {
                        s.items[*i].versions.push(l);
                    }
                }
            }
        }
    }

    // Acknowledged transactions: every write at its index with its value.
    let acked: Vec<u64> = s
        .txns
        .iter()
        .filter(|t| matches!(t.state, TxnState::Acked(_)))
        .map(|t| t.id)
        .collect();
    let check = new_and_sample(
        std::mem::take(&mut s.unchecked_txns),
        &acked,
        SAMPLE_TXNS,
        rng,
    );
    for id in check {
        let txn = s.txns[id as usize].clone();
        let TxnState::Acked(commit) = txn.state else {
            continue;
        };
        for (w, (i, _)) in txn.writes.iter().enumerate() {
            let expected = txn.expected(w, commit);
            let key = s.items[*i].key.clone();
            // As of the commit (an index inside the transaction is refused): the items of
            // a transaction are distinct, so each read shows this write's version.
            let got = read(
                key.clone(),
                format!("as_of={commit}&timeout_ms={READ_WAIT_MS}"),
            )
            .await?;
            s.checks += 1;
            if let Err(e) = check_ack(&key, &expected, got.as_ref()) {
                s.violation(format!("txn {id}: {e}"));
            }
        }
    }

    // Latest of every owned item, and a sample of whole histories.
    let mut disk_latest = Vec::new();
    for i in 0..s.items.len() {
        let key = s.items[i].key.clone();
        let got = read(key.clone(), wait.clone()).await?;
        s.checks += 1;
        if let Err(e) = check_latest(&key, s.items[i].versions.last(), got.as_ref()) {
            s.violation(e);
            if let Some(g) = got.clone() {
                s.items[i].versions.push(g);
            }
        }
        disk_latest.push((key, got));
    }
    for _ in 0..SAMPLE_HISTORIES {
        let i = rng.below(s.items.len() as u64) as usize;
        let key = s.items[i].key.clone();
        let observed = history(http, &key, &wait).await?;
        s.checks += 1;
        if let Err(e) = check_history(&key, &s.items[i].versions, &observed) {
            s.violation(e);
        }
    }

    // Counters: exact, each acknowledged increment at its index.
    for k in 0..COUNTERS {
        let key = Key::Node(format!("ctr-{k}"));
        let got = read(key.clone(), wait.clone()).await?;
        s.checks += 1;
        if let Err(e) = s.counters[k].check(&key.to_string(), got.as_ref()) {
            s.violation(e);
        }
        let count = got
            .as_ref()
            .and_then(|o| o.value.as_ref())
            .and_then(counter_fields)
            .map_or(0, |(n, _)| n);
        s.counters[k].settle(count);
        if s.trial.is_multiple_of(COUNTER_HISTORY_EVERY_TRIALS)
            && s.trial / COUNTER_HISTORY_EVERY_TRIALS % COUNTERS as u64 == k as u64
        {
            let observed = history(http, &key, &wait).await?;
            s.checks += 1;
            let chain = observed.iter().enumerate().find(|(at, o)| {
                o.value.as_ref().and_then(counter_fields).map(|(n, _)| n) != Some(*at as u64 + 1)
            });
            if let Some((at, o)) = chain {
                s.violation(format!(
                    "history of {key}: version {at} is {o}, expected the count {}",
                    at + 1
                ));
            }
        }
        disk_latest.push((key, got));
    }
    let all: Vec<(usize, u64)> = s
        .counters
        .iter()
        .enumerate()
        .flat_map(|(k, c)| c.acked.keys().map(move |n| (k, *n)))
        .collect();
    let check = new_and_sample(
        std::mem::take(&mut s.unchecked_increments),
        &all,
        SAMPLE_INCREMENTS,
        rng,
    );
    for (k, n) in check {
        let key = Key::Node(format!("ctr-{k}"));
        let (op, index) = s.counters[k].acked[&n];
        let expected = Obs {
            index,
            value: Some(counter_value(n, op)),
        };
        let got = read(
            key.clone(),
            format!("as_of={index}&timeout_ms={READ_WAIT_MS}"),
        )
        .await?;
        s.checks += 1;
        if let Err(e) = check_ack(&key, &expected, got.as_ref()) {
            s.violation(format!("increment op {op}: {e}"));
        }
    }

    // Chunks: readable, the same bytes.
    let all: Vec<usize> = (0..s.chunks.len()).collect();
    let check = new_and_sample(
        std::mem::take(&mut s.unchecked_chunks),
        &all,
        SAMPLE_CHUNKS,
        rng,
    );
    for at in check {
        let c = s.chunks[at].clone();
        let (code, body) = http
            .request(Method::GET, &format!("/v1/chunks/{}", c.id), None)
            .await?;
        s.checks += 1;
        if code != StatusCode::OK {
            s.violation(format!(
                "acknowledged chunk {} ({} bytes) answered {code}",
                c.id, c.len
            ));
        } else if body[..] != chunk_bytes(c.seed, c.len)[..]
            || spindle_chunk::ChunkId::of(&body).to_hex() != c.id
        {
            s.violation(format!(
                "acknowledged chunk {} ({} bytes) read back {} different bytes",
                c.id,
                c.len,
                body.len()
            ));
        }
    }

    // The retained log, replayed, agrees with the model and the Disk Views.
    s.replayed_records += check_replay(http, grpc, s, &disk_latest, durable).await?;

    // The Memory View (booted from the Disk Views) equals the Disk Views' latest versions.
    let items: Vec<Value> = disk_latest.iter().map(|(k, _)| k.json()).collect();
    let body = json!({"items": items, "min_index": durable, "timeout_ms": READ_WAIT_MS});
    let start = std::time::Instant::now();
    let answer = loop {
        let (code, a) = http.json(Method::POST, "/v1/multiget", Some(&body)).await?;
        if code != StatusCode::SERVICE_UNAVAILABLE || start.elapsed() > BOOT_WAIT {
            break (code, a);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    s.checks += 1;
    match answer {
        (StatusCode::OK, a) => {
            let values = a["values"].as_array().cloned().unwrap_or_default();
            if values.len() != disk_latest.len() {
                s.violation(format!(
                    "multiget of {} items answered {a}",
                    disk_latest.len()
                ));
            }
            for (got, (key, disk)) in values.iter().zip(&disk_latest) {
                let expected = memory_json(disk.as_ref());
                if *got != expected {
                    s.violation(format!(
                        "Memory View has {got} for {key}, the Disk View {expected}"
                    ));
                }
            }
        }
        (code, a) => s.violation(format!("multiget after restart answered {code}: {a}")),
    }
    Ok(())
}

async fn history(http: &HttpClient, key: &Key, params: &str) -> anyhow::Result<Vec<Obs>> {
    let path = format!("/v1/history?{}&{params}", key.query());
    let (code, a) = http.json(Method::GET, &path, None).await?;
    anyhow::ensure!(code == StatusCode::OK, "GET {path} answered {code}: {a}");
    a["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| parse_version(v).map_err(|e| anyhow::anyhow!("GET {path}: {e}")))
        .collect()
}

/// Longest a tail of the retained log may stall.
const TAIL_WAIT: Duration = Duration::from_secs(30);

/// The retained log from `first` through `last` over gRPC (`Tail`). Truncation may move the
/// first retained index meanwhile: the caller retries from a newer one.
async fn tail_log(grpc: &str, first: u64, last: u64) -> anyhow::Result<Vec<proto::Record>> {
    let mut client = grpc_connect(grpc, None).await?;
    let request = proto::TailRequest {
        from: first,
        batch_records_max: 0,
    };
    let mut stream = tail(&mut client, request)
        .await
        .map_err(|s| anyhow::anyhow!("Tail from {first}: {}", s.message()))?;
    let mut out: Vec<proto::Record> = Vec::new();
    while out.last().is_none_or(|r| r.index < last) {
        let batch = tokio::time::timeout(TAIL_WAIT, stream.message())
            .await
            .map_err(|_| anyhow::anyhow!("Tail stalled below {last}"))?
            .map_err(|s| anyhow::anyhow!("Tail broke off: {}", s.message()))?;
        match batch {
            Some(b) => out.extend(b.records),
            None => anyhow::bail!("Tail ended below {last}"),
        }
    }
    out.retain(|r| r.index <= last);
    Ok(out)
}

fn key_of(bytes: &[u8]) -> Option<Key> {
    let (key, _) = spindle_core::ItemKey::decode(bytes)?;
    Some(match key {
        spindle_core::ItemKey::Node { id } => Key::Node(id),
        spindle_core::ItemKey::Edge { from, label, to } => Key::Edge { from, label, to },
    })
}

/// Replay the retained log: every transaction in it must be one the model knows (an
/// acknowledged or landed transaction with exactly those records, or an increment), and
/// each Disk View's latest version of a key the replay touched must be the replay's.
pub async fn check_replay(
    http: &HttpClient,
    grpc: &str,
    s: &mut State,
    disk_latest: &[(Key, Option<Obs>)],
    durable: u64,
) -> anyhow::Result<u64> {
    let mut attempt = 0;
    let records = loop {
        let (_, status) = http.json(Method::GET, "/v1/status", None).await?;
        let first = status["log"]["first_index"].as_u64().unwrap_or(1).max(1);
        if first > durable {
            return Ok(0);
        }
        match tail_log(grpc, first, durable).await {
            Ok(r) => break r,
            Err(e) if attempt >= 3 => return Err(e),
            Err(_) => attempt += 1,
        }
    };
    let mut replay: std::collections::BTreeMap<Key, Obs> = Default::default();
    let mut group: Vec<(Key, Obs)> = Vec::new();
    let item_of: std::collections::BTreeMap<Key, usize> = s
        .items
        .iter()
        .enumerate()
        .map(|(i, it)| (it.key.clone(), i))
        .collect();
    let n = records.len() as u64;
    for r in records {
        let Some(key) = key_of(&r.key) else {
            s.violation(format!("log record {} has an undecodable key", r.index));
            continue;
        };
        let value = match r.value.as_deref().map(serde_json::from_str::<Value>) {
            None => None,
            Some(Ok(v)) => Some(v),
            Some(Err(e)) => {
                s.violation(format!(
                    "log record {} holds a value that is not JSON: {e}",
                    r.index
                ));
                continue;
            }
        };
        let obs = Obs {
            index: r.index,
            value,
        };
        replay.insert(key.clone(), obs.clone());
        group.push((key, obs));
        if r.commit {
            if let Err(e) = known_group(s, &item_of, &group) {
                s.violation(format!("log replay: {e}"));
            }
            group.clear();
        }
    }
    if !group.is_empty() {
        s.violation(format!(
            "log replay: the retained log ends with {} records of an uncommitted transaction",
            group.len()
        ));
    }
    for (key, disk) in disk_latest {
        if let Some(r) = replay.get(key) {
            if disk.as_ref() != Some(r) {
                s.violation(format!(
                    "the Disk View's latest {key} is {}, the replay of the log gives {r}",
                    disk.as_ref()
                        .map_or_else(|| "nothing".to_owned(), ToString::to_string)
                ));
            }
        }
    }
    Ok(n)
}

/// One committed transaction of the log must be a transaction the model holds.
fn known_group(
    s: &State,
    item_of: &std::collections::BTreeMap<Key, usize>,
    group: &[(Key, Obs)],
) -> Result<(), String> {
    let commit = group.last().map_or(0, |(_, o)| o.index);
    let describe = || {
        group
            .iter()
            .map(|(k, o)| format!("{k}: {o}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    if let [(Key::Node(id), o)] = group {
        if let Some(k) = id
            .strip_prefix("ctr-")
            .and_then(|k| k.parse::<usize>().ok())
        {
            let c = s
                .counters
                .get(k)
                .ok_or_else(|| format!("unknown counter {id}"))?;
            let (n, op) = o
                .value
                .as_ref()
                .and_then(counter_fields)
                .ok_or_else(|| format!("counter {id} written as {o}"))?;
            let known = c.acked.get(&n) == Some(&(op, o.index))
                || c.maybe.get(&n).is_some_and(|m| m.contains(&op));
            return if known {
                Ok(())
            } else {
                Err(format!("an increment the model lacks: {}", describe()))
            };
        }
    }
    let txn = group
        .iter()
        .find_map(|(_, o)| o.value.as_ref()?["txn"].as_u64())
        .and_then(|id| s.txns.get(id as usize))
        .ok_or_else(|| format!("a transaction the model lacks at {commit}: {}", describe()))?;
    let matches = matches!(txn.state, TxnState::Acked(c) | TxnState::Landed(c) if c == commit)
        && txn.writes.len() == group.len()
        && txn
            .writes
            .iter()
            .zip(group)
            .enumerate()
            .all(|(w, ((i, _), (k, o)))| {
                item_of.get(k) == Some(i) && *o == txn.expected(w, commit)
            });
    if matches {
        Ok(())
    } else {
        Err(format!(
            "the log holds, at {commit}, transaction {} differently from the model ({:?}): {}",
            txn.id,
            txn.state,
            describe()
        ))
    }
}
