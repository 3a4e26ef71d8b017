//! The status page (docs/status-page.md): `GET /` answers one self-contained HTML document
//! compiled into the binary (no CDN, no network at run time), and
//! `GET /v1/status/stream` answers the node's status as server-sent events, one a second.
//!
//! The page itself carries no data and is served without the token; the stream is an API
//! route like any other and needs `Authorization: Bearer <token>` when one is configured.
//! The page reads it with `fetch` (which can set that header, unlike `EventSource`), so the
//! token never appears in a URL, a server log or the browser history.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::Stream;
use serde::Serialize;
use spindle_ring::RingSnapshot;

use crate::node::Node;
use crate::status::Status;

/// The page: HTML, CSS, JavaScript and SVG drawing code in one file.
const INDEX_HTML: &str = include_str!("../assets/status.html");

/// Time between two events of the stream (the "at most once a second").
pub const STREAM_INTERVAL_MS: u64 = 1000;

pub async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
        .into_response()
}

/// One event of the stream: the status plus the pipeline graph.
#[derive(Debug, Serialize)]
pub struct PageEvent {
    pub status: Status,
    pub pipeline: Pipeline,
    /// Counters the page turns into rates (it differences consecutive events).
    pub counters: PageCounters,
}

#[derive(Debug, Serialize)]
pub struct PageCounters {
    pub appends: u64,
    pub records_appended: u64,
    pub log_records: u64,
    pub intake_queued_bytes: usize,
}

/// The node's rings and stages as a graph: `dot` in the ring crate's `to_dot` format and
/// the same edges as data the page lays out.
#[derive(Debug, Serialize)]
pub struct Pipeline {
    pub dot: String,
    pub edges: Vec<PipelineEdge>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct PipelineEdge {
    pub from: String,
    pub to: String,
    /// Events published but not yet read by `to`.
    pub depth: u64,
    pub capacity: u64,
}

/// The edges of `rings`, one per (ring, consumer), and their Graphviz drawing.
pub fn pipeline_of(rings: &[RingSnapshot]) -> Pipeline {
    let mut dot = String::from("digraph pipeline {\n  rankdir=LR;\n");
    let mut edges = Vec::new();
    for ring in rings {
        for c in &ring.consumers {
            dot.push_str(&format!(
                "  \"{}\" -> \"{}\" [label=\"depth {} / {}\"];\n",
                ring.name, c.name, c.depth, ring.capacity_slots
            ));
            edges.push(PipelineEdge {
                from: ring.name.clone(),
                to: c.name.clone(),
                depth: c.depth,
                capacity: ring.capacity_slots,
            });
        }
    }
    dot.push_str("}\n");
    Pipeline { dot, edges }
}

impl Node {
    /// What one event of the page's stream carries.
    pub fn page_event(&self) -> PageEvent {
        use std::sync::atomic::Ordering::Relaxed;
        PageEvent {
            status: self.status(),
            pipeline: pipeline_of(&[self.tail_ring.snapshot()]),
            counters: PageCounters {
                appends: self.metrics.appends.load(Relaxed),
                records_appended: self.metrics.records_appended.load(Relaxed),
                // On JetStream every index is one record: the durable index counts them.
                log_records: self.log.file().map_or(self.log.durable_index().get(), |f| {
                    f.stats().records.load(Relaxed)
                }),
                intake_queued_bytes: self.log.intake_queued_bytes(),
            },
        }
    }
}

/// `GET /v1/status/stream`: a `status` event now and every second after, until the node
/// stops (the page then shows its banner and reconnects).
pub async fn stream(
    State(node): State<Arc<Node>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stopping = node.stopping();
    let events = futures_util::stream::unfold((node, true), move |(node, first)| {
        let mut stopping = stopping.clone();
        async move {
            if !first {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(STREAM_INTERVAL_MS)) => {}
                    _ = stopping.wait_for(|s| *s) => return None,
                }
            }
            if *stopping.borrow() {
                return None;
            }
            let event = Event::default()
                .event("status")
                .json_data(node.page_event())
                .unwrap_or_else(|e| Event::default().event("error").data(e.to_string()));
            Some((Ok(event), (node, false)))
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use spindle_ring::ConsumerSnapshot;

    #[test]
    fn every_consumer_of_every_ring_is_one_edge_with_its_depth() {
        let ring = RingSnapshot {
            name: "log-tail".into(),
            capacity_slots: 1024,
            cursor: 90,
            consumers: vec![
                ConsumerSnapshot {
                    name: "follow-disk-0".into(),
                    sequence: 80,
                    depth: 10,
                },
                ConsumerSnapshot {
                    name: "follow-memory".into(),
                    sequence: 90,
                    depth: 0,
                },
            ],
        };
        let p = pipeline_of(&[ring]);
        assert_eq!(p.edges.len(), 2);
        assert_eq!(
            p.edges[0],
            PipelineEdge {
                from: "log-tail".into(),
                to: "follow-disk-0".into(),
                depth: 10,
                capacity: 1024,
            }
        );
        assert!(p
            .dot
            .contains("\"log-tail\" -> \"follow-disk-0\" [label=\"depth 10 / 1024\"];"));
        assert!(p
            .dot
            .contains("\"follow-memory\" [label=\"depth 0 / 1024\"]"));
    }
}
