//! `spindle load`: a JSON-lines graph file into a running node. Each line is one write,
//! exactly as in a transaction's `writes` (docs/api.md):
//! `{"item":{"kind":"node","id":"a"},"value":{...}}`; lines are grouped into transactions of
//! `batch_writes` and sent with `requests_in_flight_max` outstanding. A bad line or a refused
//! transaction stops the load before anything after it is sent (the lines before a bad line
//! are all sent), and names the line; the transactions already sent are waited for, and the
//! error says how many were acknowledged.
//! Lines are sent as written, never re-serialised, so values reach the log byte for byte.

use std::io::BufRead;

use anyhow::{bail, Context};
use futures_util::stream::{FuturesUnordered, StreamExt};
use hyper::Method;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::client::HttpClient;

/// What a line must have to be a write; the server checks the rest.
#[derive(Deserialize)]
struct LineProbe {
    item: Option<serde::de::IgnoredAny>,
}

/// A transaction body holding `writes` exactly as they were read.
fn txn_body(writes: &[Box<RawValue>]) -> Vec<u8> {
    let mut body = Vec::with_capacity(16 + writes.iter().map(|w| w.get().len() + 1).sum::<usize>());
    body.extend_from_slice(b"{\"writes\":[");
    for (i, w) in writes.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(w.get().as_bytes());
    }
    body.extend_from_slice(b"]}");
    body
}

/// What a load did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    pub writes: u64,
    pub transactions: u64,
    pub bytes: u64,
    /// The commit index of the last transaction acknowledged.
    pub last_index: u64,
}

impl LoadReport {
    /// Count one transaction's answer: (writes, commit index), or why it failed.
    fn tally(&mut self, done: anyhow::Result<(u64, u64)>) -> anyhow::Result<()> {
        let (writes, index) = done?;
        self.writes += writes;
        self.transactions += 1;
        self.last_index = self.last_index.max(index);
        Ok(())
    }
}

/// Line `line_no`'s bytes (with the newline) and the write it holds (`None`: blank).
fn read_write(
    line: std::io::Result<String>,
    line_no: u64,
) -> anyhow::Result<(u64, Option<Box<RawValue>>)> {
    let line = line.with_context(|| format!("reading line {line_no}"))?;
    let bytes = line.len() as u64 + 1;
    if line.trim().is_empty() {
        return Ok((bytes, None));
    }
    let write: Box<RawValue> =
        serde_json::from_str(&line).with_context(|| format!("line {line_no} is not JSON"))?;
    let probe: Option<LineProbe> = serde_json::from_str(write.get()).ok();
    if probe.and_then(|p| p.item).is_none() {
        bail!("line {line_no} has no \"item\"; each line is one write");
    }
    Ok((bytes, Some(write)))
}

/// Load every line of `input`. `progress` hears the bytes read so far.
pub async fn load(
    client: &HttpClient,
    input: impl BufRead,
    batch_writes: usize,
    requests_in_flight_max: usize,
    mut progress: impl FnMut(u64),
) -> anyhow::Result<LoadReport> {
    let batch_writes = batch_writes.clamp(1, spindle_core::txn::TXN_RECORDS_MAX);
    let mut report = LoadReport::default();
    let mut in_flight = FuturesUnordered::new();
    let mut batch: Vec<Box<RawValue>> = Vec::with_capacity(batch_writes);
    let send = |writes: Vec<Box<RawValue>>, first_line: u64| {
        let client = client.clone();
        async move {
            let (status, answer) = client
                .request(Method::POST, "/v1/txn", Some(txn_body(&writes)))
                .await?;
            let answer: serde_json::Value = serde_json::from_slice(&answer).with_context(|| {
                format!("the answer to the transaction starting at line {first_line} is not JSON")
            })?;
            if !status.is_success() {
                bail!(
                    "the transaction starting at line {first_line} was refused ({status}): {}",
                    answer["message"]
                );
            }
            let index = answer["index"]
                .as_u64()
                .context("the answer has no index")?;
            Ok::<(u64, u64), anyhow::Error>((writes.len() as u64, index))
        }
    };
    let mut first_line = 1;
    // The first failure (a bad line, a refused transaction) stops sending; transactions
    // already in flight are still waited for, so the error can say what was committed.
    let mut failure: Option<anyhow::Error> = None;
    // A bad line (not a refusal) still lets the lines before it go.
    let mut bad_line = false;
    for (n, line) in input.lines().enumerate() {
        let line_no = n as u64 + 1;
        let write = match read_write(line, line_no) {
            Ok((bytes, write)) => {
                report.bytes += bytes;
                match write {
                    Some(write) => write,
                    None => continue,
                }
            }
            Err(e) => {
                failure = Some(e);
                bad_line = true;
                break;
            }
        };
        if batch.is_empty() {
            first_line = line_no;
        }
        batch.push(write);
        if batch.len() == batch_writes {
            in_flight.push(send(std::mem::take(&mut batch), first_line));
            progress(report.bytes);
        }
        while in_flight.len() >= requests_in_flight_max.max(1) {
            if let Err(e) = report.tally(in_flight.next().await.expect("non-empty")) {
                failure.get_or_insert(e);
            }
        }
        if failure.is_some() {
            break;
        }
    }
    if (failure.is_none() || bad_line) && !batch.is_empty() {
        in_flight.push(send(batch, first_line));
    }
    while let Some(done) = in_flight.next().await {
        if let Err(e) = report.tally(done) {
            failure.get_or_insert(e);
        }
    }
    if let Some(e) = failure {
        return Err(e.context(format!(
            "the load stopped: {} transactions ({} writes) were acknowledged, the last at \
             index {} (every transaction sent was waited for; one answered 503 may be \
             committed too)",
            report.transactions, report.writes, report.last_index
        )));
    }
    progress(report.bytes);
    Ok(report)
}
