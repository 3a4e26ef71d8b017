//! An api server (`role = "api"`) holds no Disk View: it reaches those of the Disk View
//! servers in the stream's catalog. Reads of one item are forwarded over HTTP to a live
//! replica of the item's partition (the freshest first, the next on failure), and the
//! Memory and Index Views boot by iterating remote Disk Views over gRPC, chosen by view
//! selection over the catalog; a source whose stream breaks off starts over on another
//! replica of the same range at the same cut (docs/cluster.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use spindle_core::{Index, Partition};
use spindle_view::boot::{BootSource, FrameBatches};
use spindle_view::{CatalogEntry, IterError, IterRequest, Kinds, Plan, Role};

use crate::client::{grpc_connect, iterate, HttpClient};
use crate::proto;

/// Longest wait for the next message of a remote iteration before its source counts as
/// lost (and the boot moves to another replica).
pub const REMOTE_MESSAGE_WAIT_MS_MAX: u64 = 30_000;
/// Longest wait to connect to a member.
pub const REMOTE_CONNECT_MS_MAX: u64 = 2_000;
/// How often a read with no replica in the catalog looks again while it may wait.
pub const CATALOG_POLL_MS: u64 = 100;
/// Time a forwarded read may take beyond the wait it asks for.
pub const FORWARD_SLACK_MS: u64 = 5_000;

/// One Disk View of another member, as its catalog entry says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteView {
    /// The member's catalog key.
    pub member: String,
    /// The view's id on that member (`disk-I`).
    pub id: String,
    pub range: Partition,
    pub applied: Index,
    pub http: String,
    pub grpc: String,
    /// Its member's catalog entry missed a renewal (dead or cut off, not yet aged out).
    pub stale: bool,
}

impl RemoteView {
    /// `<member>/<view>`: its id in view selection and status.
    pub fn name(&self) -> String {
        format!("{}/{}", self.member, self.id)
    }
}

/// The Disk Views of the members of a catalog entry list (`CatalogSlot::others`), skipping
/// entries that are not JSON or not Disk Views, and views that failed their scrub.
pub fn remote_views(members: &[crate::catalog::Other]) -> Vec<RemoteView> {
    let mut out = Vec::new();
    for m in members {
        let (member, entry) = (&m.name, &m.entry);
        let (Some(http), Some(grpc)) = (entry["http"].as_str(), entry["grpc"].as_str()) else {
            continue;
        };
        for v in entry["views"].as_array().into_iter().flatten() {
            // A view that failed its scrub serves nothing.
            if v["kind"] != "disk" || v["corrupt"].is_string() {
                continue;
            }
            let (Some(id), Some(lo), Some(hi), Some(applied)) = (
                v["id"].as_str(),
                v["range"][0].as_u64(),
                v["range"][1].as_u64(),
                v["applied_index"].as_u64(),
            ) else {
                continue;
            };
            let Some(range) = Partition::new(lo, hi) else {
                continue;
            };
            out.push(RemoteView {
                member: member.clone(),
                id: id.to_owned(),
                range,
                applied: Index::new(applied),
                http: http.to_owned(),
                grpc: grpc.to_owned(),
                stale: m.stale,
            });
        }
    }
    out
}

/// View selection's catalog over remote Disk Views (every one serves iteration).
pub fn selection_catalog(views: &[RemoteView]) -> Vec<CatalogEntry> {
    views
        .iter()
        .map(|v| CatalogEntry {
            id: v.name(),
            range: v.range,
            applied: v.applied,
            role: Role::Iteration,
        })
        .collect()
}

/// The replicas that may serve a read of an item hashing to `hash`: those whose entries
/// are renewed first, then the stale ones (a last resort); the freshest first in each.
pub fn read_replicas(views: &[RemoteView], hash: u32) -> Vec<&RemoteView> {
    let mut out: Vec<&RemoteView> = views.iter().filter(|v| v.range.contains(hash)).collect();
    out.sort_by(|a, b| {
        a.stale
            .cmp(&b.stale)
            .then(b.applied.cmp(&a.applied))
            .then(a.name().cmp(&b.name()))
    });
    out
}

/// One source of a remote boot: the view the plan chose, then the other replicas that
/// hold its whole range at or above the cut, tried in turn when a stream breaks off.
#[derive(Debug)]
pub struct RemoteSource {
    name: String,
    candidates: Vec<RemoteView>,
    opened: AtomicUsize,
    token: Option<String>,
    rt: tokio::runtime::Handle,
}

/// The remote sources of `plan`, by the ids view selection gave them.
pub fn plan_sources(
    plan: &Plan,
    views: &[RemoteView],
    token: Option<String>,
    rt: tokio::runtime::Handle,
) -> HashMap<String, RemoteSource> {
    plan.sources
        .iter()
        .filter_map(|s| {
            let chosen = views.iter().find(|v| v.name() == s.view)?;
            let mut candidates = vec![chosen.clone()];
            candidates.extend(
                views
                    .iter()
                    .filter(|v| {
                        v.name() != s.view
                            && v.range.lo() <= s.range.lo()
                            && s.range.hi() <= v.range.hi()
                            && v.applied >= plan.cut
                    })
                    .cloned(),
            );
            Some((
                s.view.clone(),
                RemoteSource {
                    name: s.view.clone(),
                    candidates,
                    opened: AtomicUsize::new(0),
                    token: token.clone(),
                    rt: rt.clone(),
                },
            ))
        })
        .collect()
}

fn remote_err(view: &RemoteView, detail: String, retry: bool) -> IterError {
    IterError::Remote {
        view: view.name(),
        detail,
        retry,
    }
}

impl BootSource for RemoteSource {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn open(&self, req: &IterRequest) -> Result<Box<dyn FrameBatches + '_>, IterError> {
        let n = self.opened.fetch_add(1, Ordering::Relaxed);
        let view = self.candidates[n % self.candidates.len()].clone();
        let cut = req.to.expect("a boot asks for the plan's cut");
        let request = proto::IterateRequest {
            view: view.id.clone(),
            range_lo: Some(req.range_lo),
            range_hi: Some(req.range_hi),
            kinds: if req.kinds == Kinds::NODES {
                proto::Kinds::Nodes as i32
            } else if req.kinds == Kinds::EDGES {
                proto::Kinds::Edges as i32
            } else {
                proto::Kinds::All as i32
            },
            keys_only: req.keys_only,
            from: req.from.get(),
            to: Some(cut.get()),
            projection: req.projection.clone(),
            latest_only: req.latest_only,
            dedicated: false,
        };
        let token = self.token.clone();
        let grpc = view.grpc.clone();
        let stream = self.rt.block_on(async move {
            let connect = grpc_connect(&grpc, token.as_deref());
            let mut client =
                tokio::time::timeout(Duration::from_millis(REMOTE_CONNECT_MS_MAX), connect)
                    .await
                    .map_err(|_| "connecting timed out".to_owned())?
                    .map_err(|e| format!("{e:#}"))?;
            iterate(&mut client, request)
                .await
                .map_err(|s| format!("refused the iteration: {}", s.message()))
        });
        let stream = stream.map_err(|detail| remote_err(&view, detail, true))?;
        tracing::info!("booting from {} ({})", view.name(), view.grpc);
        Ok(Box::new(RemoteBatches {
            view,
            stream,
            rt: self.rt.clone(),
        }))
    }

    fn corrupt(&self, what: String) -> IterError {
        IterError::Remote {
            view: self.name.clone(),
            detail: format!("sent bad data: {what}"),
            retry: true,
        }
    }

    fn may_retry(&self, error: &IterError) -> bool {
        matches!(error, IterError::Remote { retry: true, .. })
    }
}

/// A remote iteration: one gRPC message per batch.
struct RemoteBatches {
    view: RemoteView,
    stream: tonic::Streaming<proto::FrameChunk>,
    rt: tokio::runtime::Handle,
}

impl FrameBatches for RemoteBatches {
    fn fill(&mut self, buf: &mut Vec<u8>, _bytes_max: usize) -> Result<bool, IterError> {
        let stream = &mut self.stream;
        let next = self.rt.block_on(async {
            let wait = Duration::from_millis(REMOTE_MESSAGE_WAIT_MS_MAX);
            tokio::time::timeout(wait, stream.message()).await
        });
        match next {
            Err(_) => Err(remote_err(
                &self.view,
                format!("no message for {REMOTE_MESSAGE_WAIT_MS_MAX} ms"),
                true,
            )),
            Ok(Err(status)) => Err(remote_err(
                &self.view,
                format!("the iteration broke off: {}", status.message()),
                true,
            )),
            Ok(Ok(Some(chunk))) => {
                buf.extend_from_slice(&chunk.frames);
                Ok(false)
            }
            // The end frame is checked by the boot (`iterate_source`): the last frame, at
            // the cut, over the range, counting every version frame.
            Ok(Ok(None)) => Ok(true),
        }
    }
}

/// Forward a read (`path_and_query` of this node's HTTP API) to the replicas in turn;
/// the first that answers other than `421` (does not hold it) or `503` (its views stopped
/// following the log) wins; when every one answered `503`, the last such answer is given.
/// An error says what each replica did when none could answer.
pub async fn forward(
    replicas: &[&RemoteView],
    path_and_query: &str,
    token: Option<String>,
    wait: Duration,
) -> Result<(StatusCode, Bytes), String> {
    let mut tried = Vec::new();
    let mut unavailable = None;
    for r in replicas {
        let client = HttpClient::new(&r.http, token.clone());
        let limit = wait + Duration::from_millis(FORWARD_SLACK_MS);
        match tokio::time::timeout(limit, client.request(Method::GET, path_and_query, None)).await {
            Ok(Ok((status, _))) if status == StatusCode::MISDIRECTED_REQUEST => {
                tried.push(format!("{} no longer holds it", r.name()));
            }
            Ok(Ok((status, body))) if status == StatusCode::SERVICE_UNAVAILABLE => {
                tried.push(format!(
                    "{}: {}",
                    r.name(),
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ));
                unavailable = Some((status, body));
            }
            Ok(Ok((status, body))) => return Ok((status, body)),
            Ok(Err(e)) => tried.push(format!("{}: {e:#}", r.name())),
            Err(_) => tried.push(format!("{}: no answer within {limit:?}", r.name())),
        }
    }
    if let Some(answer) = unavailable {
        return Ok(answer);
    }
    Err(if tried.is_empty() {
        "no live Disk View server in the catalog holds it".to_owned()
    } else {
        tried.join("; ")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Other;
    use serde_json::json;

    fn entry(http: &str, views: serde_json::Value) -> serde_json::Value {
        json!({"name": "x", "role": "disk-view", "http": http, "grpc": http, "durable_index": 9,
               "views": views})
    }

    #[test]
    fn replicas_of_a_hash_come_freshest_first() {
        let half = 1u64 << 31;
        let other = |name: &str, stale: bool, entry: serde_json::Value| Other {
            name: name.to_owned(),
            stale,
            entry,
        };
        let mut members = vec![
            other(
                "a",
                false,
                entry(
                    "h1",
                    json!([{"id": "disk-0", "kind": "disk", "range": [0, half],
                            "applied_index": 5, "persisted_index": 5}]),
                ),
            ),
            other(
                "b",
                false,
                entry(
                    "h2",
                    json!([{"id": "disk-0", "kind": "disk", "range": [0, half],
                            "applied_index": 7, "persisted_index": 2},
                           {"id": "memory", "kind": "memory", "range": [0, 1u64 << 32],
                            "applied_index": 7}]),
                ),
            ),
            other("c", false, json!("not an entry")),
        ];
        let views = remote_views(&members);
        assert_eq!(
            views.len(),
            2,
            "the memory view and the bad entry are skipped"
        );
        let names: Vec<String> = read_replicas(&views, 1).iter().map(|v| v.name()).collect();
        assert_eq!(names, ["b/disk-0", "a/disk-0"]);
        // A member that missed its renewal goes last, however fresh its view.
        members[1].stale = true;
        let stale = remote_views(&members);
        let names: Vec<String> = read_replicas(&stale, 1).iter().map(|v| v.name()).collect();
        assert_eq!(names, ["a/disk-0", "b/disk-0"]);
        assert!(read_replicas(&views, half as u32).is_empty());
    }
}
