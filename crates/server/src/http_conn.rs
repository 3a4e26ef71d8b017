//! One HTTP connection of the node: HTTP/1.1, or HTTP/2 with prior knowledge (h2c) when the
//! connection opens with the HTTP/2 preface (RFC 9113, section 3.4).
//!
//! Bounds, so that a slow, idle or malicious client holds nothing for ever:
//! - the first bytes must arrive within `head_max` (they are read, not polled, and handed
//!   back to the protocol that serves the connection);
//! - HTTP/1: every request head within `head_max` (hyper's header-read timeout; for the
//!   first, counted from its first bytes, so it may take up to twice that in all);
//! - HTTP/2: a connection with no request in flight — none being handled and no answer body
//!   still being sent, but for its last piece (`H2_PIECE_BYTES_MAX`) — for `head_max` is
//!   closed with GOAWAY (requests that crossed it are still served); pings unanswered for
//!   `head_max` close it too; at most `H2_STREAMS_MAX` streams at once and `H2_HEADER_LIST_BYTES_MAX`
//!   of head per request;
//! - both: a write the client takes no byte of for `head_max` fails and closes the connection
//!   (`Rewound`; a client that reads slowly keeps it, every byte restarting the clock);
//! - HTTP/2: an answer the client gives no flow-control room for — one whose next piece
//!   (`H2_PIECE_BYTES_MAX`) waits for `head_max`, as when the client keeps that stream's
//!   window shut and goes on using the others — closes the connection, with every request
//!   on it: the answer's memory is not held for a client that does not take it (one that
//!   takes it slowly holds it, within `answers_bytes_max`: `http::hold_answer`). (A client
//!   that reads its answers one after another, each longer than `head_max`, loses its
//!   connection too: it must read them concurrently, or the node's bound be raised.)
//!
//! On shutdown (`closing`) both kinds close gracefully: requests in flight finish, bounded by
//! `serve`'s own deadline (`shutdown_ms_max`).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::Frame;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

/// The node's routes as a hyper service.
pub type HttpService = hyper_util::service::TowerToHyperService<axum::Router>;

/// The first bytes of an HTTP/2 connection with prior knowledge.
pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Streams one HTTP/2 connection may have open at once: as many requests in flight as 64
/// HTTP/1 connections would carry (each request's body is bounded as over HTTP/1).
pub const H2_STREAMS_MAX: u32 = 64;

/// Largest request head an HTTP/2 stream may send (decoded), about what HTTP/1's parser
/// takes (its buffer is 400 KiB); the API's own bounds (`http_input::request_limits`) then
/// answer heads over them with JSON errors, as over HTTP/1.
pub const H2_HEADER_LIST_BYTES_MAX: u32 = 400 << 10;

/// Bytes one HTTP/2 stream may send ahead of the handler's reads. A stream whose body
/// waits for room in the body budget (`request_bodies_bytes_max`) is not read, and what
/// its client sent meanwhile counts against the connection's window too: with this an
/// eighth of the connection's window, it takes eight such streams to stop the others'
/// bodies (and an upload runs at most this much per round trip). (Flow-control buffers, at most the connection window per
/// connection, are outside the body budget.)
pub const H2_STREAM_WINDOW_BYTES: u32 = 128 << 10;
/// Bytes all of one HTTP/2 connection's streams may send ahead of the handlers' reads
/// (hyper's default).
pub const H2_CONNECTION_WINDOW_BYTES: u32 = 1 << 20;

/// Serve one accepted connection until it ends, or until `closing` turns true and its
/// requests in flight have finished.
pub async fn serve_connection(
    mut io: TcpStream,
    service: HttpService,
    head_max: Duration,
    mut closing: watch::Receiver<bool>,
) {
    let _ = io.set_nodelay(true);
    let mut first = Vec::with_capacity(H2_PREFACE.len());
    tokio::select! {
        read = tokio::time::timeout(head_max, read_preface(&mut io, &mut first)) => match read {
            Ok(Ok(())) if !first.is_empty() => {}
            // Closed before a byte, an error, or nothing (or too little to tell) within
            // `head_max`.
            Ok(_) | Err(_) => return,
        },
        // Shutting down: a connection that sent nothing yet has no request to finish.
        _ = closing.wait_for(|c| *c) => return,
    }
    let h2 = first.as_slice() == H2_PREFACE.as_slice();
    let io = hyper_util::rt::TokioIo::new(Rewound {
        first,
        at: 0,
        io,
        stall_max: head_max,
        stalled: None,
    });
    if !h2 {
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(head_max);
        let conn = builder.serve_connection(io, service);
        let mut conn = std::pin::pin!(conn);
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!("HTTP connection ended: {e}");
                }
                return;
            }
            _ = closing.wait_for(|c| *c) => {}
        }
        conn.as_mut().graceful_shutdown();
        let _ = conn.await;
        return;
    }
    let activity = Arc::new(Activity::default());
    let service = Tracked {
        inner: service,
        activity: activity.clone(),
    };
    let mut builder =
        hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(head_max))
        .keep_alive_timeout(head_max)
        .max_concurrent_streams(H2_STREAMS_MAX)
        .max_header_list_size(H2_HEADER_LIST_BYTES_MAX)
        .initial_stream_window_size(H2_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(H2_CONNECTION_WINDOW_BYTES);
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut watch = tokio::time::interval((head_max / 4).max(Duration::from_millis(10)));
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let idle = loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!("HTTP/2 connection ended: {e}");
                }
                return;
            }
            _ = closing.wait_for(|c| *c) => break false,
            _ = watch.tick() => {
                if activity.answer_waiting_for() >= head_max {
                    tracing::debug!("HTTP/2 connection closed: an answer waited {head_max:?} for flow-control room");
                    return;
                }
                if activity.idle_for() >= head_max {
                    break true;
                }
            },
        }
    };
    conn.as_mut().graceful_shutdown();
    if !idle {
        // Shutting down: requests in flight finish; `serve` bounds the whole shutdown.
        let _ = conn.await;
        return;
    }
    // Idle: the GOAWAY still admits requests the client sent before it arrived. They are
    // served; the connection is dropped only once nothing has been in flight for `head_max`
    // again (normally it ends sooner, when the client closes its side).
    activity.touch();
    loop {
        let shutting_down = tokio::select! {
            _ = conn.as_mut() => return,
            _ = closing.wait_for(|c| *c) => true,
            _ = watch.tick() => false,
        };
        if shutting_down {
            let _ = conn.await;
            return;
        }
        if activity.idle_for() >= head_max || activity.answer_waiting_for() >= head_max {
            return;
        }
    }
}

/// Read the connection's first bytes until they are the HTTP/2 preface or cannot be (one
/// byte is enough to tell HTTP/1), or the client closes.
async fn read_preface(io: &mut TcpStream, first: &mut Vec<u8>) -> io::Result<()> {
    let mut buf = [0u8; H2_PREFACE.len()];
    while first.len() < H2_PREFACE.len() {
        let n = io.read(&mut buf[..H2_PREFACE.len() - first.len()]).await?;
        if n == 0 {
            break;
        }
        first.extend_from_slice(&buf[..n]);
        if first[..] != H2_PREFACE[..first.len()] {
            break;
        }
    }
    Ok(())
}

/// The connection with its first bytes, already read, handed back before the rest; and
/// whose writes fail once the client has taken no byte of an answer for `stall_max`, so a
/// client that stops reading does not hold the connection and the answer's memory for ever
/// (one that reads slowly keeps it: every byte it takes restarts the clock).
struct Rewound {
    first: Vec<u8>,
    at: usize,
    io: TcpStream,
    stall_max: Duration,
    /// While a write waits for the client to take bytes: when it must have.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Rewound {
    /// A write that could not go on: `TimedOut` once it has waited `stall_max`.
    fn pending_write<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let stall_max = self.stall_max;
        let due = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall_max)));
        if due.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no byte of the answer in time",
            )));
        }
        Poll::Pending
    }

    /// What a write gave: progress ends the wait, waiting goes on counting.
    fn after_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.pending_write(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl AsyncRead for Rewound {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.first.len() {
            let n = (this.first.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.first[this.at..this.at + n]);
            this.at += n;
            if this.at == this.first.len() {
                this.first = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.after_write(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.after_write(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Requests in flight on one HTTP/2 connection, and since when none is; and the answers
/// ready to send that wait for the client to give them flow-control room.
struct Activity {
    in_flight: AtomicUsize,
    since: Mutex<Instant>,
    /// Answers (by `Counted::id`) whose next piece waits for the HTTP/2 layer to take it:
    /// since when.
    waiting: Mutex<HashMap<u64, Instant>>,
    next_id: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            in_flight: AtomicUsize::new(0),
            since: Mutex::new(Instant::now()),
            waiting: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }
}

impl Activity {
    /// Count idleness from now.
    fn touch(&self) {
        *self.since.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// Answer `id` has a piece ready that the HTTP/2 layer has not asked for yet.
    fn answer_waits(&self, id: u64) {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Instant::now());
    }

    /// Answer `id` was asked for its next piece, or ended.
    fn answer_taken(&self, id: u64) {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    /// How long the answer that has waited longest for room has waited (zero if none).
    fn answer_waiting_for(&self) -> Duration {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .min()
            .map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// How long the connection has had no request in flight (zero while one is).
    fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        self.since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .elapsed()
    }
}

/// Counts one request in flight: from its arrival until its answer's body has been sent (or
/// the request or the answer is dropped).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Largest piece of an answer body handed to the HTTP/2 layer at once.
pub const H2_PIECE_BYTES_MAX: usize = 64 << 10;

/// An answer body that keeps its request counted in flight until it ends or is dropped (a
/// stream of server-sent events, say, is a request in flight for as long as it runs). Its
/// data goes out in pieces of at most `H2_PIECE_BYTES_MAX`: hyper drops a body once it has
/// handed its last frame to the HTTP/2 layer, which may still be sending it to a slow
/// reader, so only that last piece is sent after the request stops counting.
///
/// hyper asks a body for its next frame only once the stream has flow-control room, so
/// from the moment a piece is ready (the answer's first, or the one after a piece handed
/// over) until hyper asks for it, the answer waits for the client: `Activity::waiting`
/// has it then.
struct Counted {
    inner: Body,
    /// The rest of a data frame larger than a piece.
    held: Option<Bytes>,
    id: u64,
    in_flight: InFlight,
}

impl Counted {
    fn new(inner: Body, in_flight: InFlight) -> Self {
        let activity = &in_flight.0;
        let id = activity.next_id.fetch_add(1, Ordering::Relaxed);
        if !http_body::Body::is_end_stream(&inner) {
            activity.answer_waits(id);
        }
        Counted {
            inner,
            held: None,
            id,
            in_flight,
        }
    }

    /// After handing over a piece: the next one, if any, waits for room from now.
    fn handed(&self) {
        if self.held.is_some() || !http_body::Body::is_end_stream(&self.inner) {
            self.in_flight.0.answer_waits(self.id);
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.in_flight.0.answer_taken(self.id);
    }
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        this.in_flight.0.answer_taken(this.id);
        let mut data = match this.held.take() {
            Some(held) => held,
            None => match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return other,
            },
        };
        if data.len() > H2_PIECE_BYTES_MAX {
            let piece = data.split_to(H2_PIECE_BYTES_MAX);
            this.held = Some(data);
            this.handed();
            return Poll::Ready(Some(Ok(Frame::data(piece))));
        }
        this.handed();
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.inner.size_hint();
        let held = self.held.as_ref().map_or(0, |h| h.len() as u64);
        let mut hint = http_body::SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + held);
        }
        hint.set_lower(inner.lower() + held);
        hint
    }
}

/// The node's service with its requests counted in `activity`.
#[derive(Clone)]
struct Tracked {
    inner: HttpService,
    activity: Arc<Activity>,
}

type Request = hyper::Request<hyper::body::Incoming>;
type Answer = <HttpService as hyper::service::Service<Request>>::Response;
type Failure = <HttpService as hyper::service::Service<Request>>::Error;

impl hyper::service::Service<Request> for Tracked {
    type Response = Answer;
    type Error = Failure;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Failure>> + Send>>;

    fn call(&self, req: Request) -> Self::Future {
        let in_flight = InFlight::new(self.activity.clone());
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await?;
            Ok(answer.map(|inner| Body::new(Counted::new(inner, in_flight))))
        })
    }
}
