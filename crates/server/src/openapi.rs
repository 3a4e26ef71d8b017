//! The OpenAPI 3.1 description of the HTTP API, served at `GET /openapi.json`.
//!
//! It is built from `http::routes()`, the table the router is built from, so it lists every
//! route the node serves and nothing else; each operation comes from its handler's
//! `#[utoipa::path]`, and the schemas are derived from the types the handlers decode and
//! answer. Every operation also lists `401` (when a token is configured) and a `default`
//! answer: any other refusal, with the one error shape (`ErrorBody`).

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::{Operation, PathsBuilder};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{
    ContentBuilder, InfoBuilder, LicenseBuilder, OpenApi, Ref, RefOr, ResponseBuilder,
};

use crate::http::{routes, Schemas};

/// The name of the bearer-token security scheme.
const BEARER: &str = "bearer";

/// The description: the routes of `http::routes()` with their schemas, auth and errors.
pub fn document() -> OpenApi {
    let mut doc = <Schemas as utoipa::OpenApi>::openapi();
    doc.info = InfoBuilder::new()
        .title("Spindle HTTP API")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "The HTTP/JSON API of `spindle serve`: transactions with per-item conditions, \
             reads of Disk Views (latest, as of an index, history, out-edges), the Memory \
             View's multiget, Index View lookups, the chunk store, status and metrics. \
             Values are JSON objects stored and answered as the exact text written. Every \
             refusal is a 4xx/5xx with the body `ErrorBody` and changes nothing. See \
             docs/api.md.",
        ))
        .license(Some(
            LicenseBuilder::new()
                .name("Apache-2.0")
                .identifier(Some("Apache-2.0"))
                .build(),
        ))
        .build();
    let mut paths = PathsBuilder::new();
    for route in routes() {
        let mut item = route.item;
        for op in operations(&mut item) {
            describe_refusals(op, route.public);
        }
        paths = paths.path(route.path, item);
    }
    doc.paths = paths.build();
    let components = doc.components.get_or_insert_with(Default::default);
    let mut scheme = Http::new(HttpAuthScheme::Bearer);
    scheme.description = Some(
        "`Authorization: Bearer <token>`, checked when the node is configured with a token \
         (`token`, `--token` or `SPINDLE_TOKEN`; required to listen beyond loopback). A node \
         without a token checks nothing."
            .to_owned(),
    );
    components
        .security_schemes
        .insert(BEARER.to_owned(), SecurityScheme::Http(scheme));
    doc.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
    doc.tags = Some(vec![
        TagBuilder::new()
            .name("items")
            .description(Some("Transactions and reads of nodes and edges"))
            .build(),
        TagBuilder::new()
            .name("chunks")
            .description(Some("Content-addressed immutable chunks (BLAKE3)"))
            .build(),
        TagBuilder::new()
            .name("status")
            .description(Some(
                "Status, metrics, the status page and this description",
            ))
            .build(),
    ]);
    doc
}

fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// Add what every operation may answer besides its own responses: `401` where the token is
/// checked, and `default` for every other refusal (bad requests, limits, timeouts).
fn describe_refusals(op: &mut Operation, public: bool) {
    let error_json = || {
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("ErrorBody")))
            .build()
    };
    let is_head = op.responses.responses.values().all(|r| match r {
        RefOr::T(r) => r.content.is_empty(),
        RefOr::Ref(_) => false,
    });
    if public {
        op.security = Some(Vec::new());
    } else {
        op.responses
            .responses
            .entry("401".to_owned())
            .or_insert_with(|| {
                RefOr::T(
                    ResponseBuilder::new()
                        .description("No or a wrong bearer token (`unauthorized`)")
                        .content("application/json", error_json())
                        .build(),
                )
            });
    }
    let mut default = ResponseBuilder::new().description(
        "Any other refusal, with the JSON error shape: `400 bad_request` (malformed path, \
         query or body), `405 method_not_allowed`, `408 body_timeout`, `413 body_too_large`, \
         `414 uri_too_long`, `431 headers_too_large`, `500`",
    );
    if !is_head {
        default = default.content("application/json", error_json());
    }
    op.responses
        .responses
        .insert("default".to_owned(), RefOr::T(default.build()));
}

/// The description as served, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    document()
        .to_pretty_json()
        .expect("the OpenAPI description serialises")
});

#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "status",
    summary = "This description (OpenAPI 3.1), served without the token",
    responses((status = 200, description = "The OpenAPI document", body = Object))
)]
pub async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}

#[utoipa::path(
    get,
    path = "/",
    tag = "status",
    summary = "The status page (HTML), served without the token (it asks for it)",
    responses((
        status = 200,
        description = "One self-contained HTML document (docs/status-page.md)",
        body = String,
        content_type = "text/html; charset=utf-8"
    ))
)]
#[expect(dead_code, reason = "describes `page::index`, which serves the route")]
fn status_page() {}

#[utoipa::path(
    get,
    path = "/v1/status/stream",
    tag = "status",
    summary = "The status as server-sent events, one a second",
    responses((
        status = 200,
        description = "An endless `text/event-stream`. Each event's `data` is one JSON object: \
            `status` (the `Status` schema), `pipeline` (the node's rings as a graph: `dot` and \
            `edges` with `from`, `to`, `depth`, `capacity`) and `counters` (totals the status \
            page turns into rates).",
        body = String,
        content_type = "text/event-stream"
    ))
)]
#[expect(dead_code, reason = "describes `page::stream`, which serves the route")]
fn status_stream() {}
