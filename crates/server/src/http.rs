//! The HTTP/JSON surface for users (docs/api.md): transactions, reads, multiget, index
//! lookups, chunks, status and metrics.
//!
//! Every refusal is a 4xx with `{"error": code, "message": text}` and changes nothing;
//! requests are decoded strictly and within named bounds (`http_input`); reads that wait
//! for an applied index are bounded by `read_wait_ms_max`. Values are stored as the exact
//! JSON text the client sent and answered verbatim.
//!
//! Every route is one entry of `routes()`: the router and the OpenAPI description served at
//! `/openapi.json` (`crate::openapi`) are both built from that table, and each handler's
//! `#[utoipa::path]` describes its parameters, bodies and answers from the types it uses.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::handler::Handler;
use axum::http::Method;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use spindle_chunk::{ChunkError, ChunkId, HashedChunk};
use spindle_core::{Index, ItemKey, Transaction, Value};
use spindle_log::AppendError;
use spindle_view::{EdgeFilter, Freshness, Version, ViewError};
use utoipa::openapi::path::{HttpMethod, PathItem};
use utoipa::{IntoParams, ToSchema};

use crate::http_input::{path_param, query_params, refuse_query, request_limits, HeldBody};
use crate::node::Node;
use crate::status::Counters;

/// An error answer: status, a stable code, and a message a user can act on.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `409 conflict`: each condition that failed.
    pub failed: Option<Vec<FailedCondition>>,
    /// `404 deleted`: the index of the delete.
    pub version: Option<u64>,
}

/// The body of every error answer (docs/api.md, "Errors").
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code: `bad_request`, `unauthorized`, `not_found`, `deleted`, `conflict`,
    /// `not_yet_applied`, `booting`, `views_stalled`, `log_unavailable`, … (docs/api.md).
    pub error: &'static str,
    /// What went wrong, for a person.
    pub message: String,
    /// `409 conflict` only: each condition that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub failed: Option<Vec<FailedCondition>>,
    /// `404 deleted` only: the index of the delete (a condition on it holds).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub version: Option<u64>,
}

/// A condition of a transaction that did not hold.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct FailedCondition {
    pub item: ItemKey,
    /// The version the condition asked for (0: absent).
    pub expected: u64,
    /// The item's current version (0: absent).
    pub actual: u64,
}

impl From<crate::node::DiskUnavailable> for ApiError {
    fn from(e: crate::node::DiskUnavailable) -> Self {
        match e {
            crate::node::DiskUnavailable::NotServed(e) => e.into(),
            e @ crate::node::DiskUnavailable::Corrupt { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "view_corrupt",
                e.to_string(),
            ),
        }
    }
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
            failed: None,
            version: None,
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
            failed: None,
            version: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // These answer a request whose body was not read to its end.
        let unread = matches!(self.code, "busy" | "body_timeout" | "body_too_large");
        // A failure of the node's own: the whole text to the node's log, the client's
        // without the node's directories.
        let message = if self.status.is_server_error() {
            let told = crate::redact::paths(&self.message);
            if told != self.message {
                tracing::warn!(
                    code = self.code,
                    "answered {}: {}",
                    self.status,
                    self.message
                );
            }
            told
        } else {
            self.message
        };
        let body = ErrorBody {
            error: self.code,
            message,
            failed: self.failed,
            version: self.version,
        };
        let mut response = (self.status, Json(body)).into_response();
        if unread {
            response.extensions_mut().insert(BodyUnread);
        }
        response
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

/// One route of the HTTP API: its path, its methods, whether it is served without the
/// token, its handler and its OpenAPI description (from the handler's `#[utoipa::path]`).
pub struct ApiRoute {
    /// The path in the router's and OpenAPI's common syntax (`/v1/chunks/{id}`).
    pub path: String,
    pub methods: Vec<Method>,
    /// Served without `Authorization` even when a token is configured (it carries no data).
    pub public: bool,
    handler: MethodRouter<Arc<Node>>,
    /// The operations of this route, as `/openapi.json` lists them.
    pub item: PathItem,
}

impl std::fmt::Debug for ApiRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiRoute")
            .field("path", &self.path)
            .field("methods", &self.methods)
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

fn http_method(m: &HttpMethod) -> Method {
    match m {
        HttpMethod::Get => Method::GET,
        HttpMethod::Post => Method::POST,
        HttpMethod::Put => Method::PUT,
        HttpMethod::Delete => Method::DELETE,
        HttpMethod::Options => Method::OPTIONS,
        HttpMethod::Head => Method::HEAD,
        HttpMethod::Patch => Method::PATCH,
        HttpMethod::Trace => Method::TRACE,
    }
}

/// The route a handler's `#[utoipa::path]` (`P`) describes, served by `handler`.
pub(crate) fn api_route<P: utoipa::Path, H, T>(handler: H, public: bool) -> ApiRoute
where
    H: Handler<T, Arc<Node>>,
    T: 'static,
{
    let methods: Vec<Method> = P::methods().iter().map(http_method).collect();
    let filter = methods
        .iter()
        .map(|m| MethodFilter::try_from(m.clone()).expect("an HTTP method axum routes"))
        .reduce(MethodFilter::or)
        .expect("a route has a method");
    let item = P::methods()
        .into_iter()
        .fold(utoipa::openapi::path::PathItemBuilder::new(), |b, m| {
            b.operation(m, P::operation())
        })
        .build();
    // An endpoint whose description lists no query parameter takes none: a query there is
    // refused like an unknown parameter anywhere else (the handlers that take parameters
    // check their own names).
    let takes_query = P::operation()
        .parameters
        .iter()
        .flatten()
        .any(|p| p.parameter_in == utoipa::openapi::path::ParameterIn::Query);
    let mut handler = on(filter, handler);
    if !takes_query {
        handler = handler.layer(middleware::from_fn(refuse_query));
    }
    ApiRoute {
        path: P::path(),
        methods,
        public,
        handler,
        item,
    }
}

/// Every route of the HTTP API, in the order `/openapi.json` lists them. The router serves
/// exactly these (`router`), and the description lists exactly these (`crate::openapi`).
pub fn routes() -> Vec<ApiRoute> {
    use crate::openapi as doc;
    vec![
        api_route::<__path_append, _, _>(append, false),
        api_route::<__path_read_item, _, _>(read_item, false),
        api_route::<__path_history, _, _>(history, false),
        api_route::<__path_out_edges, _, _>(out_edges, false),
        api_route::<__path_multiget, _, _>(multiget, false),
        api_route::<__path_index_lookup, _, _>(index_lookup, false),
        api_route::<__path_post_chunk, _, _>(post_chunk, false),
        api_route::<__path_put_chunk, _, _>(put_chunk, false),
        api_route::<__path_get_chunk, _, _>(get_chunk, false),
        api_route::<__path_head_chunk, _, _>(head_chunk, false),
        api_route::<__path_delete_chunk, _, _>(delete_chunk, false),
        api_route::<__path_status, _, _>(status, false),
        api_route::<doc::__path_status_stream, _, _>(crate::page::stream, false),
        api_route::<__path_metrics, _, _>(metrics, false),
        // The status page and the description carry no data (the page asks for the token
        // itself): served without the token check.
        api_route::<doc::__path_status_page, _, _>(crate::page::index, true),
        api_route::<doc::__path_openapi_json, _, _>(doc::openapi_json, true),
    ]
}

/// The schemas the routes refer to, and those they refer to in turn (`crate::openapi` adds
/// the paths from `routes()`).
#[derive(utoipa::OpenApi)]
#[openapi(components(schemas(
    ErrorBody,
    TxnJson,
    AppendAnswer,
    VersionOut,
    HistoryPage,
    EdgesPage,
    MultigetJson,
    MultigetAnswer,
    IndexAnswer,
    PutAnswer,
    crate::status::Status
)))]
pub(crate) struct Schemas;

/// The HTTP router over `node`: every route of `routes()`, nothing else.
pub fn router(node: Arc<Node>) -> Router {
    let (public, private): (Vec<_>, Vec<_>) = routes().into_iter().partition(|r| r.public);
    let public_paths: Arc<HashSet<String>> =
        Arc::new(public.iter().map(|r| r.path.clone()).collect());
    // `front` lets a request through without the token by its path alone: that is the
    // route's only if a public path is a fixed string and no private route shares it
    // (else every method on it would be public).
    for r in &public {
        assert!(
            !r.path.contains(['{', '*']),
            "public route {} has a parameter",
            r.path
        );
    }
    for r in &private {
        assert!(
            !public_paths.contains(&r.path),
            "private route {} shares a public path",
            r.path
        );
    }
    let mut api = Router::new();
    for r in private {
        api = api.route(&r.path, r.handler);
    }
    api = api
        .method_not_allowed_fallback(method_not_allowed)
        // Bodies are read by `read_body` with the limit that fits each endpoint.
        .layer(DefaultBodyLimit::disable())
        .fallback(|| async {
            ApiError::not_found("not_found", "no such endpoint; see docs/api.md")
        });
    // Served without the token check (`front` knows their paths).
    for r in public {
        api = api.route(&r.path, r.handler);
    }
    api.method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            (node.clone(), public_paths),
            front,
        ))
        .with_state(node)
}

/// What every request goes through, in one layer (each layer costs every request a clone
/// of the router below it and a boxed future): the bounds of its head
/// (`http_input::request_limits`), the token check on every path but the public routes'
/// (`authorize`), then the answer's hold on `answers_bytes_max` (`hold_answer`), then the
/// refusal count and the connection's close (`count_refusals`).
async fn front(
    State((node, public_paths)): State<(Arc<Node>, Arc<HashSet<String>>)>,
    req: Request,
    next: Next,
) -> Response {
    let http1 = req.version() < axum::http::Version::HTTP_2;
    let response = match request_limits(&req) {
        Err(refused) => refused.into_response(),
        Ok(()) => match authorize(&node, &public_paths, &req) {
            Err(refused) => refused.into_response(),
            Ok(()) => hold_answer(&node, next.run(req).await),
        },
    };
    count_refusals(&node, http1, response)
}

/// Answers at least this large (and successful) hold a share of `answers_bytes_max` while
/// they are sent.
pub const HELD_ANSWER_BYTES_MIN: u64 = 64 << 10;

/// Hold every answer of `HELD_ANSWER_BYTES_MIN` or more against `answers_bytes_max` until
/// its client has taken it: a client that reads slowly (each byte restarts the connection's
/// stall clock) cannot pin more than that budget of the node's memory with many large
/// answers at once. An answer that finds no room is dropped and answered `503 busy` at once
/// (waiting would hold its memory meanwhile).
fn hold_answer(node: &Node, response: Response) -> Response {
    let Some(bytes) = http_body::Body::size_hint(response.body()).exact() else {
        // A stream (`/v1/status/stream`): sent as it is made, piece by piece.
        return response;
    };
    // Refusals are answered whatever their size: "busy" would hide a conflict, say.
    if bytes < HELD_ANSWER_BYTES_MIN || !response.status().is_success() {
        return response;
    }
    match node.answer_budget.try_hold(bytes) {
        Some(held) => {
            response.map(|body| Body::new(crate::http_input::HeldAnswer::new(body, held)))
        }
        None => {
            Counters::bump(&node.metrics.answers_refused, 1);
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                format!(
                    "no room for this answer ({bytes} bytes) in answers_bytes_max ({} bytes): \
                     answers to other clients hold it until they take them; retry",
                    node.config.answers_bytes_max
                ),
            )
            .into_response()
        }
    }
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method; see docs/api.md",
    )
}

/// Marks an answer to a request whose body was not read to its end (too large, too slow,
/// or refused for want of room in the body budget).
#[derive(Clone, Copy, Debug)]
struct BodyUnread;

/// Count every request refused as malformed (`bad_requests_total`), in one place; close the
/// HTTP/1 connection after a body that was too large or too slow, or refused as `busy`,
/// whose rest is never read (over HTTP/2 only that request's stream ends: the connection's
/// other streams go on).
fn count_refusals(node: &Node, http1: bool, mut response: Response) -> Response {
    if http1
        && (matches!(
            response.status(),
            StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE
        ) || response.extensions().get::<BodyUnread>().is_some())
    {
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

/// With a configured token, every request must carry `Authorization: Bearer <token>`,
/// but those for the public routes' paths (exactly those: an unknown path needs the token
/// before it is told it does not exist). By path, which is by route because `router`
/// makes sure public paths are fixed strings no private route shares.
fn authorize(node: &Node, public_paths: &HashSet<String>, req: &Request) -> ApiResult<()> {
    let Some(token) = &node.config.token else {
        return Ok(());
    };
    if bearer_matches(req.headers(), token) || public_paths.contains(req.uri().path()) {
        return Ok(());
    }
    Counters::bump(&node.metrics.unauthorized, 1);
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "missing or wrong bearer token (send `Authorization: Bearer <token>`)",
    ))
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
/// Its bytes count against `request_bodies_bytes_max` until the returned body is dropped.
async fn read_body(node: &Node, body: Body, limit: usize) -> ApiResult<HeldBody> {
    let time_max = Duration::from_millis(node.config.request_body_ms_max);
    let read = crate::http_input::read_body(body, limit, time_max, &node.body_budget).await;
    if matches!(&read, Err(e) if e.code == "busy") {
        Counters::bump(&node.metrics.bodies_refused, 1);
    }
    read
}

fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> ApiResult<T> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("request body: {e}")))
}

/// One write: `{"item", "value"}` or `{"item", "delete": true}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct WriteJson<'a> {
    item: ItemKey,
    /// The new value, a JSON object, stored as the exact text sent (byte for byte).
    /// Absent when `delete` is true.
    #[serde(default, borrow)]
    #[schema(value_type = Option<Object>, nullable = false)]
    value: Option<&'a RawValue>,
    /// Delete the item (a tombstone version) instead of writing a value.
    #[serde(default)]
    delete: bool,
}

/// A condition: the item's current version must be `version`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ConditionJson {
    item: ItemKey,
    /// The item's current version must be this (0: the item must be absent).
    version: u64,
}

/// A transaction: its writes, appended atomically if every condition holds.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct TxnJson<'a> {
    /// At most 10,000 writes, 8 MiB in all, 1 MiB each.
    #[serde(
        borrow,
        deserialize_with = "at_most::<_, _, { spindle_core::txn::TXN_RECORDS_MAX }>"
    )]
    writes: Vec<WriteJson<'a>>,
    /// At most 10,000 conditions.
    #[serde(
        default,
        deserialize_with = "at_most::<_, _, { spindle_core::txn::TXN_CONDITIONS_MAX }>"
    )]
    conditions: Vec<ConditionJson>,
}

/// A JSON array of at most `MAX` entries, refused as soon as one more is read: a body of many
/// tiny entries is not decoded whole (tens of bytes of memory per byte sent) before the
/// transaction's own limits would refuse it.
fn at_most<'de, T, D, const MAX: usize>(d: D) -> Result<Vec<T>, D::Error>
where
    T: Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    struct Bounded<T, const MAX: usize>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const MAX: usize> serde::de::Visitor<'de> for Bounded<T, MAX> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "an array of at most {MAX} entries")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX));
            while let Some(entry) = seq.next_element()? {
                if out.len() == MAX {
                    return Err(serde::de::Error::custom(format!(
                        "more than {MAX} entries in an array (the limit)"
                    )));
                }
                out.push(entry);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Bounded::<T, MAX>(std::marker::PhantomData))
}

/// A committed transaction.
#[derive(Debug, Serialize, ToSchema)]
struct AppendAnswer {
    /// The commit index: the index of the transaction's last record. Each write's version
    /// is its own record's index.
    index: u64,
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

#[utoipa::path(
    post,
    path = "/v1/txn",
    tag = "items",
    summary = "Append a transaction",
    description = "Appends the writes atomically if every condition holds, and answers once \
        the transaction is durable (fdatasync).",
    request_body(content = TxnJson, content_type = "application/json"),
    responses(
        (status = 200, description = "Committed and durable", body = AppendAnswer),
        (status = 400, description = "Malformed transaction (`bad_request`); nothing written", body = ErrorBody),
        (status = 421, description = "This is a disk-view server (`read_only_role`): append through a node", body = ErrorBody),
        (status = 409, description = "A condition failed (`conflict`, with `failed`); nothing written", body = ErrorBody),
        (status = 503, description = "The log refuses writes (`log_unavailable`: its outcome is unknown, as when a connection drops — the transaction may be durable; retry with a condition to write it at most once), the log could not start a new segment for a reason other than a full disk (`not_written`; nothing written, the log goes on), this api server is a standby (`standby`: another holds the appender lease; nothing written), or no room for the body in `request_bodies_bytes_max` in time (`busy`; nothing written)", body = ErrorBody),
        (status = 507, description = "The log needed a new segment and the disk is full (`disk_full`); nothing written, and appends are taken again once space is freed", body = ErrorBody),
    )
)]
async fn append(State(node): State<Arc<Node>>, body: Body) -> ApiResult<Json<AppendAnswer>> {
    if node.config.role == crate::config::Role::DiskView {
        return Err(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "read_only_role",
            "this is a disk-view server: it follows the shared log and serves reads; append \
             through a node (role = \"node\", see the catalog in /v1/status)",
        ));
    }
    if !node.log.appends() {
        let appender = node
            .catalog
            .others()
            .into_iter()
            .find(|m| m.entry["appender"] == true && !m.stale)
            .map_or(
                "none in the catalog yet (its lease has not expired)".to_owned(),
                |m| format!("{} at {}", m.name, m.entry["http"].as_str().unwrap_or("?")),
            );
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "standby",
            format!(
                "this api server is a standby: another process holds the stream's appender \
                 lease (the appender: {appender}); append there, or retry here: this server \
                 takes over once that lease is released or expires"
            ),
        ));
    }
    let body = read_body(&node, body, node.config.request_body_bytes_max).await?;
    let txn = to_transaction(parse_json::<TxnJson>(&body)?)?;
    let records = txn.writes.len() as u64;
    match node.log.append(&txn).await {
        Ok(index) => {
            Counters::bump(&node.metrics.appends, 1);
            Counters::bump(&node.metrics.records_appended, records);
            Ok(Json(AppendAnswer { index: index.get() }))
        }
        Err(AppendError::Conflict { failed }) => {
            Counters::bump(&node.metrics.append_conflicts, 1);
            let message = AppendError::Conflict {
                failed: failed.clone(),
            }
            .to_string();
            let failed: Vec<_> = failed
                .iter()
                .map(|f| FailedCondition {
                    item: f.key.clone(),
                    expected: f.expected.get(),
                    actual: f.actual.get(),
                })
                .collect();
            Err(ApiError {
                failed: Some(failed),
                ..ApiError::new(StatusCode::CONFLICT, "conflict", message)
            })
        }
        Err(AppendError::Input(e)) => Err(ApiError::bad(e.to_string())),
        Err(e) => {
            Counters::bump(&node.metrics.append_errors, 1);
            let (status, code) = match e {
                AppendError::NotWritten {
                    disk_full: true, ..
                } => (StatusCode::INSUFFICIENT_STORAGE, "disk_full"),
                AppendError::NotWritten { .. } => (StatusCode::SERVICE_UNAVAILABLE, "not_written"),
                _ => (StatusCode::SERVICE_UNAVAILABLE, "log_unavailable"),
            };
            Err(ApiError::new(status, code, e.to_string()))
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

/// The names of the query parameters `P` describes: the only ones an endpoint accepts, so
/// the handler and `/openapi.json` agree by construction.
fn param_names<P: IntoParams>() -> Vec<String> {
    P::into_params(|| None)
        .into_iter()
        .map(|p| p.name)
        .collect()
}

/// The query of `GET /v1/item`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "describes the query string that `read_params` parses"
)]
struct ItemQuery {
    /// A node's id. An edge is named by `from`, `label` and `to` instead.
    node: Option<String>,
    /// An edge's source node.
    from: Option<String>,
    /// An edge's label.
    label: Option<String>,
    /// An edge's target node.
    to: Option<String>,
    /// The version as of this log index (a deleted item then answers `"deleted": true`).
    as_of: Option<u64>,
    /// Wait until the view has applied this index (read-your-writes: pass an append's index).
    min_index: Option<u64>,
    /// Longest wait for `min_index` or `as_of`, in ms: default 5000, at most
    /// `read_wait_ms_max` (more is `400`); then `504 not_yet_applied`.
    timeout_ms: Option<u64>,
}

/// The query of `GET /v1/history`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "describes the query string that `read_params` parses"
)]
struct HistoryQuery {
    /// A node's id. An edge is named by `from`, `label` and `to` instead.
    node: Option<String>,
    /// An edge's source node.
    from: Option<String>,
    /// An edge's label.
    label: Option<String>,
    /// An edge's target node.
    to: Option<String>,
    /// Wait until the view has applied this index.
    min_index: Option<u64>,
    /// Longest wait for `min_index`, in ms (default 5000, at most `read_wait_ms_max`).
    timeout_ms: Option<u64>,
    /// Versions per page: 1 to 10000, default 1000.
    limit: Option<u64>,
    /// The `next` of the previous page: versions above this index follow.
    after: Option<u64>,
}

/// The query of `GET /v1/out_edges`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "describes the query string that `read_params` parses"
)]
struct OutEdgesQuery {
    /// The node whose out-edges are listed.
    node: String,
    /// Only edges with this label.
    label: Option<String>,
    /// The edges live as of this log index (default: the view's applied index).
    as_of: Option<u64>,
    /// Wait until the view has applied this index.
    min_index: Option<u64>,
    /// Longest wait for `min_index` or `as_of`, in ms (default 5000, at most
    /// `read_wait_ms_max`).
    timeout_ms: Option<u64>,
    /// Edges per page: 1 to 10000, default 1000.
    limit: Option<u64>,
    /// The `next` of the previous page (an opaque cursor).
    after: Option<String>,
}

fn read_params(
    node: &Node,
    q: &BTreeMap<String, String>,
    allowed: &[String],
) -> ApiResult<ReadParams> {
    if let Some(unknown) = q.keys().find(|k| !allowed.contains(k)) {
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
    if p.node.is_some() && p.label.is_some() {
        // Not the node, silently: a client that meant an edge would read the wrong item.
        return Err(ApiError::bad(
            "label names an edge (with from and to); a node is named by node alone",
        ));
    }
    p.key.clone().ok_or_else(|| {
        ApiError::bad("name the item: ?node=ID, or ?from=ID&label=L&to=ID for an edge")
    })
}

/// Items per page of `/v1/history`, `/v1/out_edges` and `/v1/index` when `limit` is not
/// given.
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
#[derive(Debug, Serialize, ToSchema)]
struct VersionOut<'a> {
    item: &'a ItemKey,
    /// The index of the record that wrote this version.
    version: u64,
    /// This version is a delete.
    deleted: bool,
    /// The value as the exact text written; `null` for a delete.
    #[schema(value_type = Option<Object>)]
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

/// On an api server (`role = "api"`, no Disk Views of its own), a read of one item is
/// answered by a Disk View server of the catalog that holds the item's partition, the
/// freshest replica first and the next when one cannot answer; the request goes as it came
/// (its `min_index`/`as_of` wait happens there). `None` on any other role.
async fn forwarded(
    node: &Node,
    key: &ItemKey,
    uri: &Uri,
    wait: Duration,
) -> Option<ApiResult<Response>> {
    if node.config.role != crate::config::Role::Api {
        return None;
    }
    Some(unless_stopping(node, forward_read(node, key, uri, wait)).await)
}

/// `forwarded`'s work on an api server.
async fn forward_read(
    node: &Node,
    key: &ItemKey,
    uri: &Uri,
    wait: Duration,
) -> ApiResult<Response> {
    // A Disk View server that has just started may not be in the catalog yet, and one
    // that has just stopped may still be there (the catalog is read every third of its
    // ttl): while the read may wait, look again until a replica answers.
    let asked = std::time::Instant::now();
    let target = uri
        .path_and_query()
        .map_or_else(|| uri.path(), |p| p.as_str());
    let answer = loop {
        let views = crate::remote::remote_views(&node.catalog.others());
        let replicas = crate::remote::read_replicas(&views, key.hash());
        let left = wait.saturating_sub(asked.elapsed());
        let answer = if replicas.is_empty() {
            Err("no Disk View server in the catalog holds it".to_owned())
        } else {
            crate::remote::forward(&replicas, target, node.config.token.clone(), left).await
        };
        if answer.is_ok() || asked.elapsed() >= wait {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(crate::remote::CATALOG_POLL_MS)).await;
    };
    match answer {
        Ok((status, body)) => {
            Ok((status, [(header::CONTENT_TYPE, "application/json")], body).into_response())
        }
        Err(why) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_replica",
            format!(
                "no Disk View server could answer for hash {:#010x}: {why}",
                key.hash()
            ),
        )),
    }
}

/// A read's wait (for an index, or for a replica to answer), cut short a second
/// (`STOP_GRACE`) after the node begins to stop: a shutdown does not wait out reads that
/// wait (`503 shutting_down`), so the views still drain and the log still closes within
/// `shutdown_ms_max`.
async fn unless_stopping<T>(
    node: &Node,
    wait: impl std::future::Future<Output = ApiResult<T>>,
) -> ApiResult<T> {
    let mut stop = node.stopping();
    let mut wait = std::pin::pin!(wait);
    tokio::select! {
        biased;
        done = &mut wait => return done,
        Ok(_) = stop.wait_for(|s| *s) => {}
    }
    // A read about to be answered (a forward in flight, a wait nearly over) still is.
    match tokio::time::timeout(STOP_GRACE, wait).await {
        Ok(done) => done,
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down: the read stopped waiting; ask another server, or \
             this one once it is back",
        )),
    }
}

/// How long a read that waits may still take once a shutdown begins.
pub const STOP_GRACE: Duration = Duration::from_secs(1);

/// Wait (bounded) until the Disk View owning `key` has applied `index`.
async fn wait_disk(
    node: &Node,
    key: &ItemKey,
    index: Option<Index>,
    timeout: Duration,
) -> ApiResult<()> {
    if let Some(index) = index {
        let disk = node.disk_for(key)?;
        unless_stopping(node, async { Ok(disk.wait_applied(index, timeout).await?) }).await?;
    }
    Ok(())
}

/// An `as_of` must name a commit (`Node::commit_around`).
async fn check_as_of(node: &Arc<Node>, at: Option<Index>) -> ApiResult<()> {
    let Some(at) = at else {
        return Ok(());
    };
    match node.commit_around(at).await {
        Ok(None) => Ok(()),
        Ok(Some(commit)) => Err(ApiError::bad(format!(
            "as_of {at} is inside a transaction (its commit index is {commit}): a read as of it \
             would show part of that transaction; pass a commit index (one an append returned, \
             or a view's applied index)"
        ))),
        Err(e) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "log_unavailable",
            format!("cannot read the log at as_of {at} to check it names a commit: {e}"),
        )),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
}

#[utoipa::path(
    get,
    path = "/v1/item",
    tag = "items",
    summary = "Read an item's latest version, or its version as of an index",
    description = "Served by the Disk View that owns the item.",
    params(ItemQuery),
    responses(
        (status = 200, description = "The version", body = VersionOut),
        (status = 400, description = "Bad parameters, or an `as_of` inside a transaction (`bad_request`)", body = ErrorBody),
        (status = 404, description = "Never written (`not_found`) or deleted (`deleted`, with `version`)", body = ErrorBody),
        (status = 503, description = "The views stopped following the log (`views_stalled`, `view_paused`), on an api server no Disk View server could answer (`no_replica`), the server began to shut down while the read waited (`shutting_down`), or the log could not be read to check `as_of` (`log_unavailable`)", body = ErrorBody),
        (status = 504, description = "The view did not apply `min_index`/`as_of` in time (`not_yet_applied`)", body = ErrorBody),
    )
)]
async fn read_item(State(node): State<Arc<Node>>, uri: Uri) -> ApiResult<Response> {
    let q = query_params(&uri)?;
    let p = read_params(&node, &q, &param_names::<ItemQuery>())?;
    let key = item_key(&p)?;
    Counters::bump(&node.metrics.reads, 1);
    if let Some(answer) = forwarded(&node, &key, &uri, p.timeout).await {
        return answer;
    }
    wait_disk(&node, &key, p.as_of.max(p.min_index), p.timeout).await?;
    check_as_of(&node, p.as_of).await?;
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
            version: Some(v.index.get()),
            ..ApiError::not_found("deleted", format!("{key} was deleted at index {}", v.index))
        }),
        None => Err(ApiError::not_found(
            "not_found",
            format!("{key} was never written"),
        )),
    }
}

/// A page of an item's history, oldest version first.
#[derive(Debug, Serialize, ToSchema)]
struct HistoryPage<'a> {
    item: &'a ItemKey,
    versions: Vec<VersionOut<'a>>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    next: Option<u64>,
}

#[utoipa::path(
    get,
    path = "/v1/history",
    tag = "items",
    summary = "An item's versions, oldest first, deletes included",
    params(HistoryQuery),
    responses(
        (status = 200, description = "A page of versions", body = HistoryPage),
        (status = 400, description = "Bad parameters (`bad_request`)", body = ErrorBody),
        (status = 503, description = "The views stopped following the log (`views_stalled`, `view_paused`), on an api server no Disk View server could answer (`no_replica`), or the server began to shut down while the read waited (`shutting_down`)", body = ErrorBody),
        (status = 504, description = "The view did not apply `min_index` in time (`not_yet_applied`)", body = ErrorBody),
    )
)]
async fn history(State(node): State<Arc<Node>>, uri: Uri) -> ApiResult<Response> {
    let q = query_params(&uri)?;
    let p = read_params(&node, &q, &param_names::<HistoryQuery>())?;
    let key = item_key(&p)?;
    let limit = page_limit(&q)?;
    let after = Index::new(num_param(&q, "after")?.unwrap_or(0));
    Counters::bump(&node.metrics.reads, 1);
    if let Some(answer) = forwarded(&node, &key, &uri, p.timeout).await {
        return answer;
    }
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

/// A page of a node's live out-edges, ordered by (label, to) as bytes.
#[derive(Debug, Serialize, ToSchema)]
struct EdgesPage<'a> {
    node: &'a str,
    /// At most `limit` edges; fewer (none, even) when the page stopped at its scan bound
    /// with `next` set.
    edges: Vec<VersionOut<'a>>,
    /// Pass as `after` for the next page; absent on the last page (only its absence says
    /// the listing is complete).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    next: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/out_edges",
    tag = "items",
    summary = "A node's live out-edges, by label then target",
    params(OutEdgesQuery),
    responses(
        (status = 200, description = "A page of edges", body = EdgesPage),
        (status = 400, description = "Bad parameters, or an `as_of` inside a transaction (`bad_request`)", body = ErrorBody),
        (status = 503, description = "The views stopped following the log (`views_stalled`, `view_paused`), on an api server no Disk View server could answer (`no_replica`), the server began to shut down while the read waited (`shutting_down`), or the log could not be read to check `as_of` (`log_unavailable`)", body = ErrorBody),
        (status = 504, description = "The view did not apply `min_index`/`as_of` in time (`not_yet_applied`)", body = ErrorBody),
    )
)]
async fn out_edges(State(node): State<Arc<Node>>, uri: Uri) -> ApiResult<Response> {
    let q = query_params(&uri)?;
    let p = read_params(&node, &q, &param_names::<OutEdgesQuery>())?;
    let (Some(key), Some(id)) = (p.key.clone(), p.node.clone()) else {
        return Err(ApiError::bad(
            "name the node: ?node=ID (and optionally &label=L)",
        ));
    };
    let limit = page_limit(&q)?;
    let after = q.get("after").map(|c| parse_edge_cursor(c)).transpose()?;
    Counters::bump(&node.metrics.reads, 1);
    if let Some(answer) = forwarded(&node, &key, &uri, p.timeout).await {
        return answer;
    }
    let wanted = p.as_of.max(p.min_index);
    wait_disk(&node, &key, wanted, p.timeout).await?;
    check_as_of(&node, p.as_of).await?;
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
    let next = page.next.as_ref().map(|(label, to)| edge_cursor(label, to));
    let page = page
        .edges
        .iter()
        .map(|(k, v)| version_out(k, v))
        .collect::<ApiResult<Vec<_>>>()?;
    json_answer(&EdgesPage {
        node: &id,
        edges: page,
        next,
    })
}

/// Items to read from the Memory View.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct MultigetJson {
    /// At most 10,000 items (refused as soon as one more is read).
    #[serde(deserialize_with = "at_most::<_, _, MULTIGET_ITEMS_MAX>")]
    items: Vec<ItemKey>,
    /// Wait until the Memory View has applied this index.
    #[serde(default)]
    min_index: Option<u64>,
    /// Longest wait for `min_index`, in ms (default 5000, at most `read_wait_ms_max`).
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// Items per multiget.
pub const MULTIGET_ITEMS_MAX: usize = 10_000;

/// Bytes of values one multiget answers with at most (a key asked for many times counts
/// each time), so one small request cannot make the node copy and encode gigabytes.
pub const MULTIGET_VALUE_BYTES_MAX: usize = 64 << 20;

fn booting(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "booting",
        format!("view {name} is still booting; /v1/status shows its progress"),
    )
}

/// One multiget answer: a live item's version and its stored value text.
#[derive(Debug, Serialize, ToSchema)]
struct MultigetValue<'a> {
    version: u64,
    /// The value as the exact text written.
    #[schema(value_type = Object)]
    value: &'a RawValue,
}

/// The latest live values, one per item asked, in order.
#[derive(Debug, Serialize, ToSchema)]
struct MultigetAnswer<'a> {
    /// The Memory View's applied index when it answered.
    applied_index: u64,
    /// `null` for an item absent or deleted.
    values: Vec<Option<MultigetValue<'a>>>,
}

#[utoipa::path(
    post,
    path = "/v1/multiget",
    tag = "items",
    summary = "Latest live values of many items, from the Memory View",
    request_body(content = MultigetJson, content_type = "application/json"),
    responses(
        (status = 200, description = "The values", body = MultigetAnswer),
        (status = 400, description = "Malformed request (`bad_request`)", body = ErrorBody),
        (status = 404, description = "The node keeps no Memory View (`no_memory_view`)", body = ErrorBody),
        (status = 503, description = "The Memory View is booting (`booting`) or stopped following the log (`views_stalled`, `view_paused`), no room for the body in `request_bodies_bytes_max` in time (`busy`), or the server began to shut down while the read waited for `min_index` (`shutting_down`)", body = ErrorBody),
        (status = 504, description = "The view did not apply `min_index` in time (`not_yet_applied`)", body = ErrorBody),
    )
)]
async fn multiget(State(node): State<Arc<Node>>, body: Body) -> ApiResult<Response> {
    if !node.config.memory_view {
        // Not "booting": no boot will ever come, and a client would retry for ever.
        return Err(ApiError::not_found(
            "no_memory_view",
            "this node keeps no Memory View (memory_view = false, as on every Disk View \
             server): send multigets to a node that keeps one",
        ));
    }
    let body = read_body(&node, body, node.config.request_body_bytes_max).await?;
    let req: MultigetJson = parse_json(&body)?;
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
        let wait = async { Ok(node.memory.wait_applied(min, timeout).await?) };
        unless_stopping(&node, wait).await?;
    }
    let (applied, values) = view
        .multiget(&keys, MULTIGET_VALUE_BYTES_MAX)
        .map_err(|bytes| {
            ApiError::bad(format!(
                "the values asked for come to more than {MULTIGET_VALUE_BYTES_MAX} bytes \
             ({bytes} by the item where it stopped); ask for fewer items at a time"
            ))
        })?;
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

/// The query of `GET /v1/index/{name}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "describes the query string that `index_lookup` parses"
)]
struct IndexQuery {
    /// The indexed property's value as JSON text, URL-encoded (`%22Ada%22` for `"Ada"`).
    value: String,
    /// Node ids per page: 1 to 10000, default 1000.
    limit: Option<u64>,
    /// The `next` of the previous page (the last node id it listed).
    after: Option<String>,
}

/// The nodes whose indexed property equals the value asked.
#[derive(Debug, Serialize, ToSchema)]
struct IndexAnswer {
    /// The Index View's name.
    index: String,
    /// The Index View's applied index when it answered.
    applied_index: u64,
    /// Node ids, sorted as bytes; at most `limit`.
    nodes: Vec<String>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    next: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/index/{name}",
    tag = "items",
    summary = "Look up nodes by a property value in an Index View",
    params(
        ("name" = String, Path, description = "The Index View's name (`index_views` in the configuration)"),
        IndexQuery,
    ),
    responses(
        (status = 200, description = "The nodes", body = IndexAnswer),
        (status = 400, description = "Missing or malformed `value`, or `limit` out of range (`bad_request`)", body = ErrorBody),
        (status = 404, description = "No such Index View (`unknown_index`)", body = ErrorBody),
        (status = 503, description = "The Index View is booting (`booting`)", body = ErrorBody),
    )
)]
async fn index_lookup(
    State(node): State<Arc<Node>>,
    name: Result<Path<String>, PathRejection>,
    uri: Uri,
) -> ApiResult<Json<IndexAnswer>> {
    let name = path_param(name)?;
    let q = query_params(&uri)?;
    let Some((_, slot)) = node.indexes.iter().find(|(c, _)| c.name == name) else {
        let names: Vec<_> = node.indexes.iter().map(|(c, _)| c.name.as_str()).collect();
        return Err(ApiError::not_found(
            "unknown_index",
            format!("no index view {name:?}; configured: {names:?}"),
        ));
    };
    let allowed = param_names::<IndexQuery>();
    if let Some(unknown) = q.keys().find(|k| !allowed.contains(k)) {
        return Err(ApiError::bad(format!(
            "unknown query parameter {unknown:?}; this endpoint takes {} (?value=<JSON>)",
            allowed.join(", ")
        )));
    }
    let text = q
        .get("value")
        .ok_or_else(|| ApiError::bad("give ?value=<JSON value>, e.g. ?value=%22ada%22"))?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ApiError::bad(format!("value is not JSON: {e}")))?;
    let limit = page_limit(&q)?;
    Counters::bump(&node.metrics.reads, 1);
    let view = slot.get().ok_or_else(|| booting(&slot.name))?;
    let (applied, nodes, more) =
        view.lookup_page(&value, q.get("after").map(String::as_str), limit);
    let next = if more { nodes.last().cloned() } else { None };
    Ok(Json(IndexAnswer {
        index: name,
        applied_index: applied.get(),
        nodes,
        next,
    }))
}

#[utoipa::path(
    get,
    path = "/v1/status",
    tag = "status",
    summary = "The node's status: log, views, boots, carousels, truncation, chunk store",
    responses((status = 200, description = "The status now", body = crate::status::Status))
)]
async fn status(State(node): State<Arc<Node>>) -> Json<crate::status::Status> {
    Json(node.status())
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "status",
    summary = "Prometheus metrics",
    responses((
        status = 200,
        description = "The Prometheus text exposition format",
        body = String,
        content_type = "text/plain; version=0.0.4"
    ))
)]
async fn metrics(State(node): State<Arc<Node>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        node.metrics_text(),
    )
        .into_response()
}

/// A chunk's bytes, as sent and answered (at most `chunk_bytes_max`).
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
#[expect(
    dead_code,
    reason = "describes the raw body the chunk handlers read and answer"
)]
struct ChunkBytes(Vec<u8>);

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

/// A stored chunk.
#[derive(Debug, Serialize, ToSchema)]
struct PutAnswer {
    /// The chunk's id: the BLAKE3 hash of its bytes, 64 hex digits.
    id: String,
    /// Its length.
    bytes: usize,
    /// False when the store already held it.
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
    let len = body.len();
    let n = node.clone();
    // Hashing (milliseconds for a large chunk) runs off the async runtime, once: the store
    // takes the hashed chunk as it is. The store holds the buffer until the bytes are
    // durable, counting only their length against its write buffer: hand over the request's
    // own allocation when the body is all of it (no copy), and an exact copy when the body
    // is a slice of a larger read buffer, which would otherwise be held whole.
    let (id, created) = blocking(move || {
        let mut bytes = Vec::from(body);
        bytes.shrink_to_fit();
        let chunk = HashedChunk::new(bytes.into());
        let id = chunk.id();
        if let Some(want) = expected {
            if want != id {
                return Err(ApiError::bad(format!(
                    "the body's BLAKE3 is {id}, not the {want} in the URL; nothing was stored"
                )));
            }
        }
        let created = !n.chunks.has(&id);
        n.chunks.put_hashed(chunk).map_err(chunk_error)?;
        Ok((id, created))
    })
    .await?;
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

#[utoipa::path(
    put,
    path = "/v1/chunks/{id}",
    tag = "chunks",
    summary = "Store a chunk under its id",
    description = "Refuses a body whose BLAKE3 hash is not the id (`400`, nothing stored).",
    params(("id" = String, Path, description = "The body's BLAKE3 hash, 64 hex digits")),
    request_body(content = inline(ChunkBytes), content_type = "application/octet-stream"),
    responses(
        (status = 201, description = "Stored (durable)", body = PutAnswer),
        (status = 200, description = "Already stored", body = PutAnswer),
        (status = 400, description = "Empty body, bad id, or a hash other than the id (`bad_request`)", body = ErrorBody),
        (status = 413, description = "Larger than `chunk_bytes_max` (`body_too_large`)", body = ErrorBody),
        (status = 503, description = "The store's writes failed (`chunk_store_failed`), or no room for the body in `request_bodies_bytes_max` in time (`busy`)", body = ErrorBody),
        (status = 507, description = "Past `chunk_store_bytes_max` (`store_full`) or the disk is full (`disk_full`)", body = ErrorBody),
    )
)]
async fn put_chunk(
    State(node): State<Arc<Node>>,
    id: Result<Path<String>, PathRejection>,
    body: Body,
) -> ApiResult<Response> {
    let want = chunk_id(id)?;
    let body = read_body(&node, body, node.config.chunk_bytes_max).await?;
    let (body, _held) = body.split();
    store_chunk(node, body, Some(want)).await
}

#[utoipa::path(
    post,
    path = "/v1/chunks",
    tag = "chunks",
    summary = "Store a chunk; the node computes its id",
    request_body(content = inline(ChunkBytes), content_type = "application/octet-stream"),
    responses(
        (status = 201, description = "Stored (durable)", body = PutAnswer),
        (status = 200, description = "Already stored", body = PutAnswer),
        (status = 400, description = "Empty body (`bad_request`)", body = ErrorBody),
        (status = 413, description = "Larger than `chunk_bytes_max` (`body_too_large`)", body = ErrorBody),
        (status = 503, description = "The store's writes failed (`chunk_store_failed`), or no room for the body in `request_bodies_bytes_max` in time (`busy`)", body = ErrorBody),
        (status = 507, description = "Past `chunk_store_bytes_max` (`store_full`) or the disk is full (`disk_full`)", body = ErrorBody),
    )
)]
async fn post_chunk(State(node): State<Arc<Node>>, body: Body) -> ApiResult<Response> {
    let body = read_body(&node, body, node.config.chunk_bytes_max).await?;
    let (body, _held) = body.split();
    store_chunk(node, body, None).await
}

#[utoipa::path(
    get,
    path = "/v1/chunks/{id}",
    tag = "chunks",
    summary = "A chunk's bytes, hash verified",
    params(("id" = String, Path, description = "The chunk's id, 64 hex digits")),
    responses(
        (status = 200, description = "The chunk", body = inline(ChunkBytes), content_type = "application/octet-stream"),
        (status = 400, description = "Not a chunk id (`bad_request`)", body = ErrorBody),
        (status = 404, description = "No such chunk (`not_found`)", body = ErrorBody),
    )
)]
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

#[utoipa::path(
    head,
    path = "/v1/chunks/{id}",
    tag = "chunks",
    summary = "Whether the store holds a chunk (no body)",
    params(("id" = String, Path, description = "The chunk's id, 64 hex digits")),
    responses(
        (status = 200, description = "Held and durable (a put of it in flight is waited for)"),
        (status = 404, description = "Not held"),
    )
)]
async fn head_chunk(
    State(node): State<Arc<Node>>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<StatusCode> {
    let id = chunk_id(id)?;
    // Only a durable chunk is there: a client may skip its upload on this answer.
    let n = node.clone();
    let durable = blocking(move || Ok(n.chunks.has_durable(&id))).await?;
    Ok(if durable {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    })
}

#[utoipa::path(
    delete,
    path = "/v1/chunks/{id}",
    tag = "chunks",
    summary = "Delete a chunk",
    params(("id" = String, Path, description = "The chunk's id, 64 hex digits")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Not a chunk id (`bad_request`)", body = ErrorBody),
        (status = 404, description = "No such chunk (`not_found`)", body = ErrorBody),
    )
)]
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn told(e: ApiError) -> serde_json::Value {
        let body = e.into_response().into_body();
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn server_failures_do_not_tell_the_node_s_directories() {
        let text = "reading /srv/spindle/data/log/00000007.seg: Input/output error (os error 5)";
        let answer = told(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            text,
        ))
        .await;
        assert_eq!(
            answer["message"],
            "reading …/00000007.seg: Input/output error (os error 5)"
        );
        let corrupt = ViewError::Corrupt {
            dir: "/srv/spindle/data/disk-0".into(),
            what: "bad key".into(),
        };
        let answer = told(corrupt.into()).await;
        assert!(
            !answer["message"].as_str().unwrap().contains("/srv/"),
            "{answer}"
        );
        // A client's own mistake is told as it is.
        let answer = told(ApiError::bad("after /a/b is not a cursor")).await;
        assert_eq!(answer["message"], "after /a/b is not a cursor");
    }
}
