//! The status page (docs/status-page.md): `GET /` answers one self-contained HTML document
//! compiled into the binary (no CDN, no network at run time), and
//! `GET /v1/status/stream` answers the node's status as server-sent events, one a second.
//!
//! The page itself carries no data and is served without the token; the stream is an API
//! route like any other and needs `Authorization: Bearer <token>` when one is configured.
//! The page reads it with `fetch` (which can set that header, unlike `EventSource`), so the
//! token never appears in a URL, a server log or the browser history.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::Stream;
use serde::Serialize;
use spindle_ring::RingSnapshot;
use tokio::sync::watch;

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

/// One event of the stream, made once and sent to every client watching.
#[derive(Debug)]
pub struct MadeEvent {
    /// `status`, or `error` if the status did not serialize.
    pub name: &'static str,
    pub data: String,
}

/// The stream's events: one task makes an event a second while at least one client
/// watches, and every stream sends that same event, so a thousand watchers cost one status
/// a second, not a thousand. The task stops once no stream is left (and when the node
/// stops); the next stream starts it again.
#[derive(Debug, Default)]
pub struct StatusEvents {
    latest: OnceLock<watch::Sender<Option<Arc<MadeEvent>>>>,
    /// The running task's number, if one runs; changed only under this lock, with the
    /// watchers counted.
    producing: Mutex<Option<u64>>,
    /// Tasks started.
    started: AtomicU64,
    made: AtomicU64,
}

impl StatusEvents {
    fn sender(&self) -> &watch::Sender<Option<Arc<MadeEvent>>> {
        self.latest.get_or_init(|| watch::channel(None).0)
    }

    /// Watch the events. If the task that makes them runs, its latest event (at most a
    /// second old) comes first; else the task starts and makes one at once (the latest,
    /// from before it stopped, may be old: it is not sent).
    pub fn watch(&self, node: &Arc<Node>) -> watch::Receiver<Option<Arc<MadeEvent>>> {
        let mut producing = self.producing.lock().unwrap_or_else(|p| p.into_inner());
        if producing.is_none() {
            self.start(&mut producing, node);
            return self.sender().subscribe();
        }
        let mut rx = self.sender().subscribe();
        if rx.borrow().is_some() {
            rx.mark_changed();
        }
        rx
    }

    /// Start a task if none runs (for a stream that has waited too long: the task it
    /// watched is gone).
    pub fn ensure_running(&self, node: &Arc<Node>) {
        let mut producing = self.producing.lock().unwrap_or_else(|p| p.into_inner());
        if producing.is_none() {
            self.start(&mut producing, node);
        }
    }

    /// Start a task, under the lock.
    fn start(&self, producing: &mut Option<u64>, node: &Arc<Node>) {
        // The latest event is from before the last task stopped: nobody may be sent it (a
        // stream that comes before the new task's first event would be). Streams skip
        // the empty value.
        self.sender().send_replace(None);
        let task = self.started.fetch_add(1, Ordering::Relaxed);
        *producing = Some(task);
        tokio::spawn(produce(Arc::downgrade(node), task));
    }

    /// Events made since the node started.
    pub fn made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// Whether the task that makes them runs now.
    pub fn producing(&self) -> bool {
        self.producing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Task `task` has ended: the next stream starts a new one.
    fn ended(&self, task: u64) {
        let mut producing = self.producing.lock().unwrap_or_else(|p| p.into_inner());
        if *producing == Some(task) {
            *producing = None;
        }
    }

    /// True (and the task is to end) if nobody watches; checked and cleared under the
    /// lock `watch` takes, so a stream that starts watching meanwhile starts a new task.
    fn nobody_watches(&self, task: u64) -> bool {
        let mut producing = self.producing.lock().unwrap_or_else(|p| p.into_inner());
        if self.sender().receiver_count() == 0 {
            if *producing == Some(task) {
                *producing = None;
            }
            return true;
        }
        false
    }
}

/// Marks the task stopped however it ends (its loop returns, it panics, or its runtime
/// drops it), so that the next stream starts a new one instead of waiting for ever on a
/// task that is gone.
struct Producing(std::sync::Weak<Node>, u64);

impl Drop for Producing {
    fn drop(&mut self) {
        if let Some(n) = self.0.upgrade() {
            n.status_events.ended(self.1);
        }
    }
}

/// Make an event a second while anyone watches and the node runs.
async fn produce(node: std::sync::Weak<Node>, task: u64) {
    let _producing = Producing(node.clone(), task);
    loop {
        let Some(n) = node.upgrade() else { return };
        let mut stopping = n.stopping();
        let events = &n.status_events;
        // A stopping node's streams end: no status of it is made for them.
        if *stopping.borrow() || events.nobody_watches(task) {
            return;
        }
        fail::fail_point!("page::event");
        let made = match serde_json::to_string(&n.page_event()) {
            Ok(data) => MadeEvent {
                name: "status",
                data,
            },
            Err(e) => MadeEvent {
                name: "error",
                data: e.to_string(),
            },
        };
        events.made.fetch_add(1, Ordering::Relaxed);
        events.sender().send_replace(Some(Arc::new(made)));
        drop(n);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(STREAM_INTERVAL_MS)) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// `GET /v1/status/stream`: a `status` event now and every second after, until the node
/// stops (the page then shows its banner and reconnects). Every stream sends the same
/// events (`StatusEvents`); one that cannot keep up skips to the latest.
pub async fn stream(
    State(node): State<Arc<Node>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stopping = node.stopping();
    let latest = node.status_events.watch(&node);
    let state = (latest, stopping, Arc::downgrade(&node));
    drop(node);
    let events = futures_util::stream::unfold(state, |(mut latest, mut stopping, node)| {
        async move {
            loop {
                tokio::select! {
                    changed = latest.changed() => changed.ok()?,
                    _ = stopping.wait_for(|s| *s) => return None,
                    () = tokio::time::sleep(Duration::from_millis(STALLED_EVENTS * STREAM_INTERVAL_MS)) => {
                        // No event for that long: the task that makes them is gone (it
                        // panicked, say). Start another.
                        let n = node.upgrade()?;
                        n.status_events.ensure_running(&n);
                        continue;
                    }
                }
                if *stopping.borrow() {
                    return None;
                }
                let Some(made) = latest.borrow_and_update().clone() else {
                    continue;
                };
                let event = Event::default().event(made.name).data(&made.data);
                return Some((Ok(event), (latest, stopping, node)));
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// Intervals a stream waits for an event before it starts a task to make them.
const STALLED_EVENTS: u64 = 3;

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
