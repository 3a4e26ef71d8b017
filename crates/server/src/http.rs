//! The HTTP/JSON surface for users (docs/api.md): transactions, reads, multiget, index
//! lookups, chunks, status and metrics.
//!
//! Every refusal is a 4xx with `{"error": code, "message": text}` and changes nothing;
//! bodies are read up to a named limit; reads that wait for an applied index are bounded by
//! `read_wait_ms_max`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use spindle_chunk::{ChunkError, ChunkId};
use spindle_core::{Index, ItemKey, Transaction, Value};
use spindle_log::AppendError;
use spindle_view::{Freshness, Version, ViewError};

use crate::node::Node;
use crate::status::Counters;

/// An error answer: status, a stable code, and a message a user can act on.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub extra: Option<serde_json::Value>,
}

impl ApiError {
    pub fn bad(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            message: message.into(),
            extra: None,
        }
    }

    fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, code, message)
    }

    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            extra: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"error": self.code, "message": self.message});
        if let (Some(extra), Some(map)) = (self.extra, body.as_object_mut()) {
            if let Some(fields) = extra.as_object() {
                map.extend(fields.clone());
            }
        }
        (self.status, Json(body)).into_response()
    }
}

impl From<ViewError> for ApiError {
    fn from(e: ViewError) -> Self {
        match e {
            ViewError::NotYetApplied { .. } => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "not_yet_applied",
                e.to_string(),
            ),
            ViewError::Input(_) | ViewError::NotInPartition { .. } => ApiError::bad(e.to_string()),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "view_error",
                other.to_string(),
            ),
        }
    }
}

impl From<crate::node::WaitError> for ApiError {
    fn from(e: crate::node::WaitError) -> Self {
        use crate::node::WaitError;
        match e {
            WaitError::Timeout { .. } => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "not_yet_applied",
                e.to_string(),
            ),
            WaitError::Stalled { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "views_stalled",
                e.to_string(),
            ),
        }
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The HTTP router over `node`.
pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route("/v1/txn", post(append))
        .route("/v1/item", get(read_item))
        .route("/v1/history", get(history))
        .route("/v1/out_edges", get(out_edges))
        .route("/v1/multiget", post(multiget))
        .route("/v1/index/{name}", get(index_lookup))
        .route("/v1/status", get(status))
        .route("/metrics", get(metrics))
        .route(
            "/v1/chunks/{id}",
            put(put_chunk)
                .get(get_chunk)
                .head(head_chunk)
                .delete(delete_chunk),
        )
        .route("/v1/chunks", post(post_chunk))
        // Bodies are read by `read_body` with the limit that fits each endpoint.
        .layer(DefaultBodyLimit::disable())
        .fallback(|| async {
            ApiError::not_found("not_found", "no such endpoint; see docs/api.md")
        })
        .layer(middleware::from_fn_with_state(node.clone(), authorize))
        .with_state(node)
}

/// With a configured token, every request must carry `Authorization: Bearer <token>`.
async fn authorize(State(node): State<Arc<Node>>, req: Request, next: Next) -> Response {
    if let Some(token) = &node.config.token {
        if !bearer_matches(req.headers(), token) {
            Counters::bump(&node.metrics.unauthorized, 1);
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong bearer token (send `Authorization: Bearer <token>`)",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// Constant-time comparison of the presented bearer token with `token`.
pub fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(presented) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (presented.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Read a request body of at most `limit` bytes (streamed; reading stops at the limit).
async fn read_body(node: &Node, body: Body, limit: usize) -> ApiResult<Bytes> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        Counters::bump(&node.metrics.bad_requests, 1);
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body is over the limit of {limit} bytes (or broke off): {e}"),
        )
    })
}

fn parse_json<T: serde::de::DeserializeOwned>(node: &Node, body: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(body).map_err(|e| {
        Counters::bump(&node.metrics.bad_requests, 1);
        ApiError::bad(format!("request body: {e}"))
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteJson {
    item: ItemKey,
    #[serde(default)]
    value: Option<serde_json::Value>,
    #[serde(default)]
    delete: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConditionJson {
    item: ItemKey,
    /// The item's current version must be this (0: the item must be absent).
    version: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TxnJson {
    writes: Vec<WriteJson>,
    #[serde(default)]
    conditions: Vec<ConditionJson>,
}

fn checked_key(key: ItemKey) -> ApiResult<ItemKey> {
    key.validate().map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(key)
}

fn to_transaction(txn: TxnJson) -> ApiResult<Transaction> {
    let mut out = Transaction::new();
    for (i, w) in txn.writes.into_iter().enumerate() {
        let key = checked_key(w.item)?;
        let value = match (w.value, w.delete) {
            (Some(_), true) => {
                return Err(ApiError::bad(format!(
                    "writes[{i}] has both a value and delete: true"
                )))
            }
            (None, false) => {
                return Err(ApiError::bad(format!(
                    "writes[{i}] needs a value (a JSON object) or delete: true"
                )))
            }
            (None, true) => Value::TOMBSTONE,
            (Some(v), false) => {
                if !v.is_object() {
                    return Err(ApiError::bad(format!(
                        "writes[{i}].value must be a JSON object"
                    )));
                }
                Value::json(v.to_string()).map_err(|e| ApiError::bad(e.to_string()))?
            }
        };
        out = out.write(key, value);
    }
    for c in txn.conditions {
        out = out.condition(checked_key(c.item)?, Index::new(c.version));
    }
    out.validate().map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(out)
}

async fn append(State(node): State<Arc<Node>>, body: Body) -> ApiResult<Json<serde_json::Value>> {
    let body = read_body(&node, body, node.config.request_body_bytes_max).await?;
    // `parse_json` counts its own refusals; count the rest here, once each.
    let txn = to_transaction(parse_json::<TxnJson>(&node, &body)?).inspect_err(|_| {
        Counters::bump(&node.metrics.bad_requests, 1);
    })?;
    let records = txn.writes.len() as u64;
    match node.log.append(&txn).await {
        Ok(index) => {
            Counters::bump(&node.metrics.appends, 1);
            Counters::bump(&node.metrics.records_appended, records);
            Ok(Json(json!({ "index": index.get() })))
        }
        Err(AppendError::Conflict { failed }) => {
            Counters::bump(&node.metrics.append_conflicts, 1);
            let message = AppendError::Conflict {
                failed: failed.clone(),
            }
            .to_string();
            let failed: Vec<_> = failed
                .iter()
                .map(|f| json!({"item": f.key, "expected": f.expected.get(), "actual": f.actual.get()}))
                .collect();
            Err(ApiError {
                status: StatusCode::CONFLICT,
                code: "conflict",
                message,
                extra: Some(json!({ "failed": failed })),
            })
        }
        Err(AppendError::Input(e)) => Err(ApiError::bad(e.to_string())),
        Err(e) => {
            Counters::bump(&node.metrics.append_errors, 1);
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "log_unavailable",
                e.to_string(),
            ))
        }
    }
}

/// Query parameters shared by the reads. Unknown parameters are refused.
#[derive(Debug, Default)]
struct ReadParams {
    key: Option<ItemKey>,
    node: Option<String>,
    label: Option<String>,
    as_of: Option<Index>,
    min_index: Option<Index>,
    timeout: Duration,
}

fn read_params(
    node: &Node,
    q: &BTreeMap<String, String>,
    allowed: &[&str],
) -> ApiResult<ReadParams> {
    let fail = |m: String| {
        Counters::bump(&node.metrics.bad_requests, 1);
        ApiError::bad(m)
    };
    if let Some(unknown) = q.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(fail(format!(
            "unknown query parameter {unknown:?}; this endpoint takes {}",
            allowed.join(", ")
        )));
    }
    let num = |k: &str| -> ApiResult<Option<u64>> {
        q.get(k)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| fail(format!("{k} must be an unsigned integer, got {v:?}")))
            })
            .transpose()
    };
    let mut p = ReadParams {
        as_of: num("as_of")?.map(Index::new),
        min_index: num("min_index")?.map(Index::new),
        label: q.get("label").cloned(),
        ..ReadParams::default()
    };
    let wait_max = node.config.read_wait_ms_max;
    let timeout_ms = num("timeout_ms")?.unwrap_or(wait_max.min(5_000));
    if timeout_ms > wait_max {
        return Err(fail(format!(
            "timeout_ms {timeout_ms} is above the limit {wait_max}"
        )));
    }
    p.timeout = Duration::from_millis(timeout_ms);
    let edge_params = [q.get("from"), q.get("to")];
    let key = if edge_params.iter().any(Option::is_some) {
        match (q.get("node"), q.get("from"), q.get("label"), q.get("to")) {
            (None, Some(from), Some(label), Some(to)) => {
                Some(ItemKey::edge(from.clone(), label.clone(), to.clone()))
            }
            _ => {
                return Err(fail(
                    "an edge is named by from, label and to (and no node parameter)".into(),
                ))
            }
        }
    } else {
        q.get("node").map(|id| {
            p.node = Some(id.clone());
            ItemKey::node(id.clone())
        })
    };
    p.key = key.transpose().map_err(|e| fail(e.to_string()))?;
    Ok(p)
}

fn item_key(p: &ReadParams) -> ApiResult<ItemKey> {
    p.key.clone().ok_or_else(|| {
        ApiError::bad("name the item: ?node=ID, or ?from=ID&label=L&to=ID for an edge")
    })
}

fn version_json(key: &ItemKey, v: &Version) -> serde_json::Value {
    json!({
        "item": key,
        "version": v.index.get(),
        "deleted": v.value.is_tombstone(),
        "value": v.value.as_json().map(|s| serde_json::from_str::<serde_json::Value>(s).unwrap_or(serde_json::Value::Null)),
    })
}

/// Wait (bounded) until the Disk View owning `key` has applied `index`.
async fn wait_disk(
    node: &Node,
    key: &ItemKey,
    index: Option<Index>,
    timeout: Duration,
) -> ApiResult<()> {
    if let Some(index) = index {
        node.disk_for(key).wait_applied(index, timeout).await?;
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
}

async fn read_item(
    State(node): State<Arc<Node>>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<serde_json::Value>> {
    let p = read_params(
        &node,
        &q,
        &[
            "node",
            "from",
            "label",
            "to",
            "as_of",
            "min_index",
            "timeout_ms",
        ],
    )?;
    let key = item_key(&p)?;
    Counters::bump(&node.metrics.reads, 1);
    wait_disk(&node, &key, p.as_of.max(p.min_index), p.timeout).await?;
    let view = node.disk_for(&key).view.clone();
    let at = p.as_of;
    let k = key.clone();
    let version = blocking(move || {
        Ok(match at {
            Some(at) => view.as_of(&k, at, Freshness::Any)?,
            None => view.latest(&k, Freshness::Any)?,
        })
    })
    .await?;
    match version {
        Some(v) if !v.value.is_tombstone() || at.is_some() => Ok(Json(version_json(&key, &v))),
        Some(v) => Err(ApiError {
            extra: Some(json!({"version": v.index.get()})),
            ..ApiError::not_found("deleted", format!("{key} was deleted at index {}", v.index))
        }),
        None => Err(ApiError::not_found(
            "not_found",
            format!("{key} was never written"),
        )),
    }
}

async fn history(
    State(node): State<Arc<Node>>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<serde_json::Value>> {
    let p = read_params(
        &node,
        &q,
        &["node", "from", "label", "to", "min_index", "timeout_ms"],
    )?;
    let key = item_key(&p)?;
    Counters::bump(&node.metrics.reads, 1);
    wait_disk(&node, &key, p.min_index, p.timeout).await?;
    let view = node.disk_for(&key).view.clone();
    let k = key.clone();
    let versions = blocking(move || Ok(view.history(&k, Freshness::Any)?)).await?;
    let versions: Vec<_> = versions.iter().map(|v| version_json(&key, v)).collect();
    Ok(Json(json!({ "item": key, "versions": versions })))
}

async fn out_edges(
    State(node): State<Arc<Node>>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<serde_json::Value>> {
    let p = read_params(
        &node,
        &q,
        &["node", "label", "as_of", "min_index", "timeout_ms"],
    )?;
    let (Some(key), Some(id)) = (p.key.clone(), p.node.clone()) else {
        return Err(ApiError::bad(
            "name the node: ?node=ID (and optionally &label=L)",
        ));
    };
    Counters::bump(&node.metrics.reads, 1);
    let wanted = p.as_of.max(p.min_index);
    wait_disk(&node, &key, wanted, p.timeout).await?;
    let view = node.disk_for(&key).view.clone();
    let at = p.as_of;
    let edges = blocking(move || Ok(view.out_edges(&id, at, Freshness::Any)?)).await?;
    let edges: Vec<_> = edges
        .iter()
        .filter(|(k, _)| match (&p.label, k) {
            (Some(want), ItemKey::Edge { label, .. }) => want == label,
            _ => true,
        })
        .map(|(k, v)| version_json(k, v))
        .collect();
    Ok(Json(json!({ "node": p.node, "edges": edges })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MultigetJson {
    items: Vec<ItemKey>,
    #[serde(default)]
    min_index: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// Items per multiget.
pub const MULTIGET_ITEMS_MAX: usize = 10_000;

fn booting(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "booting",
        format!("view {name} is still booting; /v1/status shows its progress"),
    )
}

async fn multiget(State(node): State<Arc<Node>>, body: Body) -> ApiResult<Json<serde_json::Value>> {
    let body = read_body(&node, body, node.config.request_body_bytes_max).await?;
    let req: MultigetJson = parse_json(&node, &body)?;
    if req.items.len() > MULTIGET_ITEMS_MAX {
        return Err(ApiError::bad(format!(
            "{} items asked; a multiget takes at most {MULTIGET_ITEMS_MAX}",
            req.items.len()
        )));
    }
    let keys = req
        .items
        .into_iter()
        .map(checked_key)
        .collect::<ApiResult<Vec<_>>>()?;
    let timeout = Duration::from_millis(
        req.timeout_ms
            .unwrap_or(5_000)
            .min(node.config.read_wait_ms_max),
    );
    Counters::bump(&node.metrics.reads, 1);
    let view = node
        .memory
        .get()
        .ok_or_else(|| booting(&node.memory.name))?;
    if let Some(min) = req.min_index.map(Index::new) {
        node.memory.wait_applied(min, timeout).await?;
    }
    let (applied, values) = view.multiget(&keys);
    let values: Vec<_> = values
        .into_iter()
        .map(|v| {
            v.map(|(index, text)| {
                json!({"version": index.get(), "value": serde_json::from_str::<serde_json::Value>(&text).unwrap_or(serde_json::Value::Null)})
            })
        })
        .collect();
    Ok(Json(
        json!({ "applied_index": applied.get(), "values": values }),
    ))
}

async fn index_lookup(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<serde_json::Value>> {
    let Some((_, slot)) = node.indexes.iter().find(|(c, _)| c.name == name) else {
        let names: Vec<_> = node.indexes.iter().map(|(c, _)| c.name.as_str()).collect();
        return Err(ApiError::not_found(
            "unknown_index",
            format!("no index view {name:?}; configured: {names:?}"),
        ));
    };
    if let Some(unknown) = q.keys().find(|k| k.as_str() != "value") {
        return Err(ApiError::bad(format!(
            "unknown query parameter {unknown:?}; give ?value=<JSON>"
        )));
    }
    let text = q
        .get("value")
        .ok_or_else(|| ApiError::bad("give ?value=<JSON value>, e.g. ?value=%22ada%22"))?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ApiError::bad(format!("value is not JSON: {e}")))?;
    Counters::bump(&node.metrics.reads, 1);
    let view = slot.get().ok_or_else(|| booting(&slot.name))?;
    Ok(Json(json!({
        "index": name,
        "applied_index": view.applied_index().get(),
        "nodes": view.lookup(&value),
    })))
}

async fn status(State(node): State<Arc<Node>>) -> Json<crate::status::Status> {
    Json(node.status())
}

async fn metrics(State(node): State<Arc<Node>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        node.metrics_text(),
    )
        .into_response()
}

fn chunk_id(id: &str) -> ApiResult<ChunkId> {
    id.parse()
        .map_err(|e: spindle_chunk::ParseChunkIdError| ApiError::bad(e.to_string()))
}

fn chunk_error(e: ChunkError) -> ApiError {
    match e {
        ChunkError::SpaceExhausted { .. } => ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "store_full",
            e.to_string(),
        ),
        ChunkError::ChunkTooLarge { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", e.to_string())
        }
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "chunk_store",
            other.to_string(),
        ),
    }
}

#[derive(Debug, Serialize)]
struct PutAnswer {
    id: String,
    bytes: usize,
    created: bool,
}

async fn store_chunk(
    node: Arc<Node>,
    body: Bytes,
    expected: Option<ChunkId>,
) -> ApiResult<Response> {
    if body.is_empty() {
        return Err(ApiError::bad("a chunk must not be empty"));
    }
    let id = ChunkId::of(&body);
    if let Some(want) = expected {
        if want != id {
            return Err(ApiError::bad(format!(
                "the body's BLAKE3 is {id}, not the {want} in the URL; nothing was stored"
            )));
        }
    }
    let created = !node.chunks.has(&id);
    let len = body.len();
    let n = node.clone();
    blocking(move || n.chunks.put(&body).map_err(chunk_error)).await?;
    Counters::bump(&node.metrics.chunk_puts, 1);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(PutAnswer {
            id: id.to_hex(),
            bytes: len,
            created,
        }),
    )
        .into_response())
}

async fn put_chunk(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult<Response> {
    let want = chunk_id(&id)?;
    let body = read_body(&node, body, node.config.chunk_bytes_max).await?;
    store_chunk(node, body, Some(want)).await
}

async fn post_chunk(State(node): State<Arc<Node>>, body: Body) -> ApiResult<Response> {
    let body = read_body(&node, body, node.config.chunk_bytes_max).await?;
    store_chunk(node, body, None).await
}

async fn get_chunk(State(node): State<Arc<Node>>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = chunk_id(&id)?;
    let n = node.clone();
    let data = blocking(move || n.chunks.get(&id).map_err(chunk_error)).await?;
    Counters::bump(&node.metrics.chunk_gets, 1);
    match data {
        Some(bytes) => Ok((
            [(header::CONTENT_TYPE, "application/octet-stream")],
            Body::from(bytes),
        )
            .into_response()),
        None => Err(ApiError::not_found("not_found", format!("no chunk {id}"))),
    }
}

async fn head_chunk(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = chunk_id(&id)?;
    Ok(if node.chunks.has(&id) {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    })
}

async fn delete_chunk(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = chunk_id(&id)?;
    let n = node.clone();
    let existed = blocking(move || n.chunks.delete(&id).map_err(chunk_error)).await?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    })
}
