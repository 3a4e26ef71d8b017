//! The HTTP/JSON surface for users (docs/api.md): transactions, reads, multiget, index
//! lookups, chunks, status and metrics.
//!
//! Every refusal is a 4xx with `{"error": code, "message": text}` and changes nothing;
//! requests are decoded strictly and within named bounds (`http_input`); reads that wait
//! for an applied index are bounded by `read_wait_ms_max`. Values are stored as the exact
//! JSON text the client sent and answered verbatim.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;
use spindle_chunk::{ChunkError, ChunkId};
use spindle_core::{Index, ItemKey, Transaction, Value};
use spindle_log::AppendError;
use spindle_view::{EdgeFilter, Freshness, Version, ViewError};

use crate::http_input::{path_param, query_params, request_limits};
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

impl From<crate::node::NotServed> for ApiError {
    fn from(e: crate::node::NotServed) -> Self {
        ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "not_served_here",
            e.to_string(),
        )
    }
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

    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
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
            WaitError::Paused { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "view_paused",
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
        .route("/v1/status/stream", get(crate::page::stream))
        .route("/metrics", get(metrics))
        .route(
            "/v1/chunks/{id}",
            put(put_chunk)
                .get(get_chunk)
                .head(head_chunk)
                .delete(delete_chunk),
        )
        .route("/v1/chunks", post(post_chunk))
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not take that method; see docs/api.md",
            )
        })
        // Bodies are read by `read_body` with the limit that fits each endpoint.
        .layer(DefaultBodyLimit::disable())
        .fallback(|| async {
            ApiError::not_found("not_found", "no such endpoint; see docs/api.md")
        })
        .layer(middleware::from_fn_with_state(node.clone(), authorize))
        // The status page carries no data (it asks for the token itself): added after the
        // token check, so that check does not apply to it.
        .route("/", get(crate::page::index))
        .layer(middleware::from_fn(request_limits))
        .layer(middleware::from_fn_with_state(node.clone(), count_refusals))
        .with_state(node)
}

/// Count every request refused as malformed (`bad_requests_total`), in one place; close the
/// connection after a body that was too large or too slow, whose rest is never read.
async fn count_refusals(State(node): State<Arc<Node>>, req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    if matches!(
        response.status(),
        StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE
    ) {
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    if matches!(
        response.status(),
        StatusCode::BAD_REQUEST
            | StatusCode::METHOD_NOT_ALLOWED
            | StatusCode::REQUEST_TIMEOUT
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::URI_TOO_LONG
            | StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    ) {
        Counters::bump(&node.metrics.bad_requests, 1);
    }
    response
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

/// Read a request body of at most `limit` bytes within `request_body_ms_max`.
async fn read_body(node: &Node, body: Body, limit: usize) -> ApiResult<Bytes> {
    let time_max = Duration::from_millis(node.config.request_body_ms_max);
    crate::http_input::read_body(body, limit, time_max).await
}

fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> ApiResult<T> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("request body: {e}")))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteJson<'a> {
    item: ItemKey,
    /// The value's exact text as sent: it is stored byte for byte, never re-serialised.
    #[serde(default, borrow)]
    value: Option<&'a RawValue>,
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
struct TxnJson<'a> {
    #[serde(borrow)]
    writes: Vec<WriteJson<'a>>,
    #[serde(default)]
    conditions: Vec<ConditionJson>,
}

fn checked_key(key: ItemKey) -> ApiResult<ItemKey> {
    key.validate().map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(key)
}

fn to_transaction(txn: TxnJson<'_>) -> ApiResult<Transaction> {
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
                if !v.get().starts_with('{') {
                    return Err(ApiError::bad(format!(
                        "writes[{i}].value must be a JSON object"
                    )));
                }
                Value::json(v.get()).map_err(|e| ApiError::bad(format!("writes[{i}]: {e}")))?
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
    if node.config.role == crate::config::Role::DiskView {
        return Err(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "read_only_role",
            "this is a disk-view server: it follows the shared log and serves reads; append \
             through a node (role = \"node\", see the catalog in /v1/status)",
        ));
    }
    let body = read_body(&node, body, node.config.request_body_bytes_max).await?;
    let txn = to_transaction(parse_json::<TxnJson>(&body)?)?;
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

/// Parse an unsigned integer parameter.
fn num_param(q: &BTreeMap<String, String>, k: &str) -> ApiResult<Option<u64>> {
    q.get(k)
        .map(|v| {
            v.parse::<u64>()
                .map_err(|_| ApiError::bad(format!("{k} must be an unsigned integer, got {v:?}")))
        })
        .transpose()
}

/// The wait a read asked for: `timeout_ms` (default 5000, at most `read_wait_ms_max`; more
/// is refused, not cut down).
fn read_timeout(node: &Node, asked_ms: Option<u64>) -> ApiResult<Duration> {
    let wait_max = node.config.read_wait_ms_max;
    let timeout_ms = asked_ms.unwrap_or(wait_max.min(5_000));
    if timeout_ms > wait_max {
        return Err(ApiError::bad(format!(
            "timeout_ms {timeout_ms} is above the limit {wait_max} (read_wait_ms_max)"
        )));
    }
    Ok(Duration::from_millis(timeout_ms))
}

fn read_params(
    node: &Node,
    q: &BTreeMap<String, String>,
    allowed: &[&str],
) -> ApiResult<ReadParams> {
    if let Some(unknown) = q.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::bad(format!(
            "unknown query parameter {unknown:?}; this endpoint takes {}",
            allowed.join(", ")
        )));
    }
    let mut p = ReadParams {
        as_of: num_param(q, "as_of")?.map(Index::new),
        min_index: num_param(q, "min_index")?.map(Index::new),
        label: q.get("label").cloned(),
        timeout: read_timeout(node, num_param(q, "timeout_ms")?)?,
        ..ReadParams::default()
    };
    let edge_params = [q.get("from"), q.get("to")];
    let key = if edge_params.iter().any(Option::is_some) {
        match (q.get("node"), q.get("from"), q.get("label"), q.get("to")) {
            (None, Some(from), Some(label), Some(to)) => {
                Some(ItemKey::edge(from.clone(), label.clone(), to.clone()))
            }
            _ => {
                return Err(ApiError::bad(
                    "an edge is named by from, label and to (and no node parameter)",
                ))
            }
        }
    } else {
        q.get("node").map(|id| {
            p.node = Some(id.clone());
            ItemKey::node(id.clone())
        })
    };
    p.key = key.transpose().map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(p)
}

fn item_key(p: &ReadParams) -> ApiResult<ItemKey> {
    p.key.clone().ok_or_else(|| {
        ApiError::bad("name the item: ?node=ID, or ?from=ID&label=L&to=ID for an edge")
    })
}

/// Items per page of `/v1/history` and `/v1/out_edges` when `limit` is not given.
pub const PAGE_ITEMS_DEFAULT: usize = 1_000;
/// Largest `limit` of a page.
pub const PAGE_ITEMS_MAX: usize = 10_000;

/// `limit` of a paged read: 1..=PAGE_ITEMS_MAX, default PAGE_ITEMS_DEFAULT.
fn page_limit(q: &BTreeMap<String, String>) -> ApiResult<usize> {
    match num_param(q, "limit")? {
        None => Ok(PAGE_ITEMS_DEFAULT),
        Some(n) if (1..=PAGE_ITEMS_MAX as u64).contains(&n) => Ok(n as usize),
        Some(n) => Err(ApiError::bad(format!(
            "limit is {n}; it must be between 1 and {PAGE_ITEMS_MAX}"
        ))),
    }
}

/// A stored value's text as raw JSON, to be answered verbatim.
fn raw_value(text: &str) -> ApiResult<&RawValue> {
    serde_json::from_str(text).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("a stored value is not JSON: {e}"),
        )
    })
}

/// One version of one item as answered by the reads: the value is the stored text.
#[derive(Debug, Serialize)]
struct VersionOut<'a> {
    item: &'a ItemKey,
    version: u64,
    deleted: bool,
    value: Option<&'a RawValue>,
}

fn version_out<'a>(key: &'a ItemKey, v: &'a Version) -> ApiResult<VersionOut<'a>> {
    Ok(VersionOut {
        item: key,
        version: v.index.get(),
        deleted: v.value.is_tombstone(),
        value: v.value.as_json().map(raw_value).transpose()?,
    })
}

/// Serialise an answer that embeds raw values.
fn json_answer(answer: &impl Serialize) -> ApiResult<Response> {
    let body = serde_json::to_vec(answer)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Wait (bounded) until the Disk View owning `key` has applied `index`.
async fn wait_disk(
    node: &Node,
    key: &ItemKey,
    index: Option<Index>,
    timeout: Duration,
) -> ApiResult<()> {
    if let Some(index) = index {
        node.disk_for(key)?.wait_applied(index, timeout).await?;
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

async fn read_item(State(node): State<Arc<Node>>, uri: Uri) -> ApiResult<Response> {
    let q = query_params(&uri)?;
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
    let view = node.disk_for(&key)?.view.clone();
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
        Some(v) if !v.value.is_tombstone() || at.is_some() => json_answer(&version_out(&key, &v)?),
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

/// A page of an item's history.
#[derive(Debug, Serialize)]
struct HistoryPage<'a> {
    item: &'a ItemKey,
    versions: Vec<VersionOut<'a>>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<u64>,
}

async fn history(State(node): State<Arc<Node>>, uri: Uri) -> ApiResult<Response> {
    let q = query_params(&uri)?;
    let p = read_params(
        &node,
        &q,
        &[
            "node",
            "from",
            "label",
            "to",
            "min_index",
            "timeout_ms",
            "limit",
            "after",
        ],
    )?;
    let key = item_key(&p)?;
    let limit = page_limit(&q)?;
    let after = Index::new(num_param(&q, "after")?.unwrap_or(0));
    Counters::bump(&node.metrics.reads, 1);
    wait_disk(&node, &key, p.min_index, p.timeout).await?;
    let view = node.disk_for(&key)?.view.clone();
    let k = key.clone();
    let page = blocking(move || Ok(view.history_page(&k, after, limit, Freshness::Any)?)).await?;
    let next = match (page.more, page.entries.last()) {
        (true, Some(last)) => Some(last.index.get()),
        _ => None,
    };
    let versions = page
        .entries
        .iter()
        .map(|v| version_out(&key, v))
        .collect::<ApiResult<Vec<_>>>()?;
    json_answer(&HistoryPage {
        item: &key,
        versions,
        next,
    })
}

/// The paging cursor of an out-edge: `<label byte length>:<label><to>`, unambiguous for
/// any label and target.
fn edge_cursor(label: &str, to: &str) -> String {
    format!("{}:{label}{to}", label.len())
}

fn parse_edge_cursor(cursor: &str) -> ApiResult<(String, String)> {
    let bad = || {
        ApiError::bad(format!(
            "after {cursor:?} is not a cursor this endpoint gave"
        ))
    };
    let (len, rest) = cursor.split_once(':').ok_or_else(bad)?;
    let len: usize = len.parse().map_err(|_| bad())?;
    if !rest.is_char_boundary(len) || len > rest.len() {
        return Err(bad());
    }
    let (label, to) = rest.split_at(len);
    Ok((label.to_owned(), to.to_owned()))
}

/// A page of a node's out-edges, ordered by (label, to) as bytes.
#[derive(Debug, Serialize)]
struct EdgesPage<'a> {
    node: &'a str,
    edges: Vec<VersionOut<'a>>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

fn edge_label_to(key: &ItemKey) -> (&str, &str) {
    match key {
        ItemKey::Edge { label, to, .. } => (label, to),
        ItemKey::Node { .. } => ("", ""),
    }
}

async fn out_edges(State(node): State<Arc<Node>>, uri: Uri) -> ApiResult<Response> {
    let q = query_params(&uri)?;
    let p = read_params(
        &node,
        &q,
        &[
            "node",
            "label",
            "as_of",
            "min_index",
            "timeout_ms",
            "limit",
            "after",
        ],
    )?;
    let (Some(key), Some(id)) = (p.key.clone(), p.node.clone()) else {
        return Err(ApiError::bad(
            "name the node: ?node=ID (and optionally &label=L)",
        ));
    };
    let limit = page_limit(&q)?;
    let after = q.get("after").map(|c| parse_edge_cursor(c)).transpose()?;
    Counters::bump(&node.metrics.reads, 1);
    let wanted = p.as_of.max(p.min_index);
    wait_disk(&node, &key, wanted, p.timeout).await?;
    let view = node.disk_for(&key)?.view.clone();
    let at = p.as_of;
    let from = id.clone();
    let label = p.label.clone();
    let page = blocking(move || {
        let filter = EdgeFilter {
            at,
            label: label.as_deref(),
            after: after.as_ref().map(|(l, t)| (l.as_str(), t.as_str())),
        };
        Ok(view.out_edges_page(&from, filter, limit, Freshness::Any)?)
    })
    .await?;
    let next = match (page.more, page.entries.last()) {
        (true, Some((last, _))) => {
            let (label, to) = edge_label_to(last);
            Some(edge_cursor(label, to))
        }
        _ => None,
    };
    let page = page
        .entries
        .iter()
        .map(|(k, v)| version_out(k, v))
        .collect::<ApiResult<Vec<_>>>()?;
    json_answer(&EdgesPage {
        node: &id,
        edges: page,
        next,
    })
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

/// One multiget answer: a live item's version and its stored value text.
#[derive(Debug, Serialize)]
struct MultigetValue<'a> {
    version: u64,
    value: &'a RawValue,
}

#[derive(Debug, Serialize)]
struct MultigetAnswer<'a> {
    applied_index: u64,
    values: Vec<Option<MultigetValue<'a>>>,
}

async fn multiget(State(node): State<Arc<Node>>, body: Body) -> ApiResult<Response> {
    let body = read_body(&node, body, node.config.request_body_bytes_max).await?;
    let req: MultigetJson = parse_json(&body)?;
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
    let timeout = read_timeout(&node, req.timeout_ms)?;
    Counters::bump(&node.metrics.reads, 1);
    let view = node
        .memory
        .get()
        .ok_or_else(|| booting(&node.memory.name))?;
    if let Some(min) = req.min_index.map(Index::new) {
        node.memory.wait_applied(min, timeout).await?;
    }
    let (applied, values) = view.multiget(&keys);
    let values = values
        .iter()
        .map(|v| {
            v.as_ref()
                .map(|(index, text)| {
                    Ok(MultigetValue {
                        version: index.get(),
                        value: raw_value(text)?,
                    })
                })
                .transpose()
        })
        .collect::<ApiResult<Vec<_>>>()?;
    json_answer(&MultigetAnswer {
        applied_index: applied.get(),
        values,
    })
}

async fn index_lookup(
    State(node): State<Arc<Node>>,
    name: Result<Path<String>, PathRejection>,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    let name = path_param(name)?;
    let q = query_params(&uri)?;
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

/// The chunk id of the URL: 64 hex digits.
fn chunk_id(id: Result<Path<String>, PathRejection>) -> ApiResult<ChunkId> {
    path_param(id)?
        .parse()
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
        ChunkError::WriterFailed {
            disk_full: true, ..
        } => ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "disk_full", e.to_string()),
        ChunkError::WriterFailed { .. } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "chunk_store_failed",
            e.to_string(),
        ),
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
    id: Result<Path<String>, PathRejection>,
    body: Body,
) -> ApiResult<Response> {
    let want = chunk_id(id)?;
    let body = read_body(&node, body, node.config.chunk_bytes_max).await?;
    store_chunk(node, body, Some(want)).await
}

async fn post_chunk(State(node): State<Arc<Node>>, body: Body) -> ApiResult<Response> {
    let body = read_body(&node, body, node.config.chunk_bytes_max).await?;
    store_chunk(node, body, None).await
}

async fn get_chunk(
    State(node): State<Arc<Node>>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<Response> {
    let id = chunk_id(id)?;
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
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<StatusCode> {
    let id = chunk_id(id)?;
    Ok(if node.chunks.has(&id) {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    })
}

async fn delete_chunk(
    State(node): State<Arc<Node>>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<StatusCode> {
    let id = chunk_id(id)?;
    let n = node.clone();
    let existed = blocking(move || n.chunks.delete(&id).map_err(chunk_error)).await?;
    if existed {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("not_found", format!("no chunk {id}")))
    }
}
