//! Running the node: bind the HTTP and gRPC listeners, run the truncation worker, and shut
//! down gracefully — stop accepting, end every gRPC stream with UNAVAILABLE, let in-flight
//! requests (appends) finish, then let the views drain to the durable index, persist the
//! Disk Views' applied indexes and close the log. The whole shutdown takes at most
//! `shutdown_ms_max` (plus `FORCE_CLOSE_MAX` to close connections whose clients stopped
//! reading); what was left undone is logged.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::StreamExt as _;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::node::Node;

/// The addresses the listeners are bound to (the configured ones, or the ports the system
/// chose for port 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
}

/// Serve `node` until `shutdown` resolves; `on_bound` hears the bound addresses first.
pub async fn serve(
    node: Arc<Node>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(Bound),
) -> anyhow::Result<()> {
    let http = TcpListener::bind(node.config.http_listen)
        .await
        .map_err(|e| anyhow::anyhow!("binding HTTP to {}: {e}", node.config.http_listen))?;
    let grpc = TcpListener::bind(node.config.grpc_listen)
        .await
        .map_err(|e| anyhow::anyhow!("binding gRPC to {}: {e}", node.config.grpc_listen))?;
    let bound = Bound {
        http: http.local_addr()?,
        grpc: grpc.local_addr()?,
    };
    // On JetStream: register in the stream's catalog before saying where the node listens.
    let joining = node.clone();
    tokio::task::spawn_blocking(move || joining.catalog.join(&joining, bound))
        .await
        .map_err(|e| anyhow::anyhow!("joining the catalog: {e}"))??;
    on_bound(bound);
    let (stopping, _) = watch::channel(false);
    let (kill, _) = watch::channel(false);
    let wait = |rx: watch::Receiver<bool>| async move {
        let mut rx = rx;
        let _ = rx.wait_for(|s| *s).await;
    };
    let router = crate::http::router(node.clone());
    let http_stop = wait(stopping.subscribe());
    let head_max = Duration::from_millis(node.config.request_body_ms_max);
    let connections_max = connections_cap(node.config.connections_max, open_files_limit());
    let per_source_max = node.config.connections_per_source_max.min(connections_max);
    let mut http_task = tokio::spawn(serve_http(
        http,
        router,
        head_max,
        Seating::new("HTTP", connections_max, per_source_max, node.clone()),
        http_stop,
    ));
    let kill_rx = kill.subscribe();
    let mut seating = Seating::new("gRPC", connections_max, per_source_max, node.clone());
    let incoming = TcpListenerStream::new(grpc).filter_map(move |conn| match conn {
        Ok(io) => {
            // A connection whose peer is unknown is already gone.
            let seats = seating.seat(io.peer_addr().ok()?)?;
            Some(Ok(Killable::new(io, kill_rx.clone(), seats, head_max)))
        }
        Err(e) => Some(Err(e)),
    });
    let mut grpc_task = tokio::spawn(
        tonic::transport::Server::builder()
            // As many streams per connection as HTTP/2 clients get on the HTTP port, and
            // pings that close a connection whose peer is gone (a dropped NAT entry).
            .max_concurrent_streams(GRPC_STREAMS_PER_CONNECTION_MAX)
            .http2_keepalive_interval(Some(GRPC_KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(GRPC_KEEPALIVE_TIMEOUT))
            .add_service(crate::grpc::service(node.clone()))
            .serve_with_incoming_shutdown(incoming, wait(stopping.subscribe())),
    );
    let truncation = tokio::spawn(node.clone().truncation_worker());
    let scrubs = tokio::spawn(node.clone().scrub_worker());
    shutdown.await;
    let budget = node.config.shutdown_max();
    let deadline = tokio::time::Instant::now() + budget;
    tracing::info!(
        "shutting down (at most {} ms): finishing in-flight requests, ending streams",
        budget.as_millis()
    );
    stopping.send_replace(true);
    // Leave the catalog first: nobody should pick a node that is going away.
    let leaving = node.clone();
    let _ = tokio::task::spawn_blocking(move || leaving.catalog.leave()).await;
    // Streams (rides, tails) end now with UNAVAILABLE; HTTP requests finish first.
    node.begin_shutdown();
    let http_result = match tokio::time::timeout_at(deadline, &mut http_task).await {
        Ok(result) => Some(result),
        Err(_) => {
            tracing::warn!(
                "HTTP requests were still running after shutdown_ms_max; stopping without them"
            );
            http_task.abort();
            None
        }
    };
    // The workers stop on a thread of their own, so that a view that cannot drain does not
    // hold the process (or the runtime) beyond the deadline.
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel();
    let stopper = node.clone();
    std::thread::Builder::new()
        .name("shutdown".into())
        .spawn(move || {
            stopper.shutdown();
            // Release the node before saying so: a caller may reopen its files at once.
            drop(stopper);
            let _ = stopped_tx.send(());
        })?;
    if tokio::time::timeout_at(deadline, stopped_rx).await.is_err() {
        tracing::error!(
            "the views did not drain to the durable index {} within shutdown_ms_max: applied \
             {:?}; stopping anyway (the log holds every acknowledged write, and the views \
             catch up on the next start)",
            node.log.durable_index(),
            node.applied_indexes()
        );
    }
    let grpc_result = match tokio::time::timeout_at(deadline, &mut grpc_task).await {
        Ok(result) => Some(result),
        Err(_) => {
            // A client that stopped reading keeps its stream's end unsent: close its
            // connection.
            tracing::warn!(
                "gRPC connections whose clients stopped reading are closed after \
                 shutdown_ms_max"
            );
            kill.send_replace(true);
            match tokio::time::timeout(FORCE_CLOSE_MAX, &mut grpc_task).await {
                Ok(result) => Some(result),
                Err(_) => {
                    grpc_task.abort();
                    None
                }
            }
        }
    };
    truncation.abort();
    scrubs.abort();
    if let Some(result) = http_result {
        result??;
    }
    if let Some(result) = grpc_result {
        result??;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Bytes of the HTTP/2 client preface ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").
const H2_PREFACE_BYTES: usize = 24;

/// Streams one gRPC connection may have open at once.
pub const GRPC_STREAMS_PER_CONNECTION_MAX: u32 = 64;

/// How often an open gRPC connection is pinged, and how long the answer may take.
pub const GRPC_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const GRPC_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The soft limit on open files, if there is one.
fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Connections each listener may hold (pure policy): the configured number, and at most a
/// quarter of the open-files limit, so the two listeners together take at most half of it
/// and the log, the views and the chunk store keep the rest. At least one.
pub fn connections_cap(configured: usize, open_files: Option<u64>) -> usize {
    let quarter = open_files.map_or(usize::MAX, |n| usize::try_from(n / 4).unwrap_or(usize::MAX));
    configured.min(quarter).max(1)
}

/// Why a connection was closed as soon as it was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// The listener held `connections_max`.
    Full,
    /// Its source held `connections_per_source_max`.
    Source(crate::source_seats::Source),
}

/// A listener's seats: `connections_max` in all and `connections_per_source_max` for each
/// source. A connection holds one of each while open; one that finds either taken is
/// closed at once, counted in `connections_refused_total`, and the refusals are reported
/// at most every 10 s.
struct Seating {
    listener: &'static str,
    max: usize,
    all: Arc<tokio::sync::Semaphore>,
    per_source: Arc<crate::source_seats::SourceSeats>,
    node: Arc<Node>,
    since_warned: u64,
    warned: Option<std::time::Instant>,
}

/// What an open connection holds: one of its listener's seats and one of its source's.
#[derive(Debug)]
struct Seats {
    _all: tokio::sync::OwnedSemaphorePermit,
    _source: crate::source_seats::SourceSeat,
}

impl Seating {
    fn new(listener: &'static str, max: usize, per_source_max: usize, node: Arc<Node>) -> Self {
        Seating {
            listener,
            max,
            all: Arc::new(tokio::sync::Semaphore::new(max)),
            per_source: crate::source_seats::SourceSeats::new(per_source_max),
            node,
            since_warned: 0,
            warned: None,
        }
    }

    /// Seats for a connection from `peer`, or `None` (the connection is to be closed) if
    /// either is full.
    fn seat(&mut self, peer: SocketAddr) -> Option<Seats> {
        let Ok(all) = self.all.clone().try_acquire_owned() else {
            self.refuse(Refusal::Full);
            return None;
        };
        let Some(source) = self.per_source.try_take(peer.ip()) else {
            self.refuse(Refusal::Source(crate::source_seats::Source::of(peer.ip())));
            return None;
        };
        Some(Seats {
            _all: all,
            _source: source,
        })
    }

    fn refuse(&mut self, why: Refusal) {
        crate::status::Counters::bump(&self.node.metrics.connections_refused, 1);
        self.since_warned += 1;
        if self
            .warned
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(10))
        {
            let last = match why {
                Refusal::Full => format!("{} already open (connections_max)", self.max),
                Refusal::Source(source) => format!(
                    "the last from {source}, which already held {} (connections_per_source_max)",
                    self.per_source.held_by(source)
                ),
            };
            tracing::warn!(
                "{}: {} connection(s) closed at once; {last}",
                self.listener,
                self.since_warned
            );
            self.since_warned = 0;
            self.warned = Some(std::time::Instant::now());
        }
    }
}

/// How long closing the connections that outlived `shutdown_ms_max` may take.
pub const FORCE_CLOSE_MAX: Duration = Duration::from_secs(1);

/// Pause after a failed `accept` (out of file descriptors, say) before accepting again.
pub const ACCEPT_RETRY_MS: u64 = 100;

/// Serve HTTP (HTTP/1.1, or HTTP/2 with prior knowledge: `http_conn`) on `listener` until
/// `stop` resolves, then let every open connection finish the requests it is serving. Each
/// request head (the first on a connection, or the next on a kept-alive one) must arrive
/// within `head_max`, and an HTTP/2 connection with nothing in flight is closed after it: a
/// client that sends half a head and stops, or idles, does not hold a connection and its
/// task for ever (`axum::serve` sets no such bound).
async fn serve_http(
    listener: TcpListener,
    router: axum::Router,
    head_max: Duration,
    mut seating: Seating,
    stop: impl Future<Output = ()>,
) -> io::Result<()> {
    let (closing, _) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("accepting an HTTP connection: {e}");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Some(seats) = seating.seat(peer) else {
            drop(io);
            continue;
        };
        while connections.try_join_next().is_some() {}
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection =
            crate::http_conn::serve_connection(io, service, head_max, closing.subscribe());
        connections.spawn(async move {
            connection.await;
            drop(seats);
        });
    }
    // Refuse new connections at once: a listener kept while connections drain would let
    // the kernel complete handshakes nobody will serve.
    drop(listener);
    closing.send_replace(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// What a gRPC handler knows of its connection (in the request's extensions, in place of
/// tonic's `TcpConnectInfo`, so `Request::remote_addr` is `None`: use `tcp`): its
/// addresses, and a way to close it, for a stream whose client has stopped taking messages.
#[derive(Clone, Debug)]
pub struct GrpcConnection {
    pub tcp: TcpConnectInfo,
    close: Arc<watch::Sender<bool>>,
}

impl GrpcConnection {
    /// Close the connection: its reads and writes fail from now on, which ends every stream
    /// on it and frees what they hold.
    pub fn close(&self) {
        self.close.send_replace(true);
    }
}

/// A gRPC connection that fails every read and write once `kill` turns true (or its own
/// `GrpcConnection::close` is called), so that a connection whose client stopped reading
/// ends at the shutdown deadline; and whose HTTP/2 preface (its first 24 bytes) must arrive
/// within `first_bytes_max` of its accept, after which HTTP/2 pings watch it. It holds one
/// of its listener's seats while open.
struct Killable {
    io: TcpStream,
    /// This connection's own close (`GrpcConnection::close`).
    close: Arc<watch::Sender<bool>>,
    /// Resolves when the connection is to be closed; `None` once it has.
    killed: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Until the HTTP/2 preface has been read: when it is due, and how much of it came.
    first_bytes: Option<Pin<Box<tokio::time::Sleep>>>,
    preface_read: usize,
    _seats: Seats,
}

impl Killable {
    fn new(
        io: TcpStream,
        kill: watch::Receiver<bool>,
        seats: Seats,
        first_bytes_max: Duration,
    ) -> Self {
        let mut kill = kill;
        let (close, mut closed) = watch::channel(false);
        Killable {
            io,
            close: Arc::new(close),
            // The node stopping, or this connection closed on its own.
            killed: Some(Box::pin(async move {
                tokio::select! {
                    _ = kill.wait_for(|k| *k) => {}
                    _ = closed.wait_for(|c| *c) => {}
                }
            })),
            first_bytes: Some(Box::pin(tokio::time::sleep(first_bytes_max))),
            preface_read: 0,
            _seats: seats,
        }
    }

    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let killed = match &mut self.killed {
            Some(killed) => killed.as_mut().poll(cx).is_ready(),
            None => true,
        };
        if killed {
            self.killed = None;
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed by the server (shutting down, or a stream's client took nothing)",
            ));
        }
        Ok(())
    }
}

impl Connected for Killable {
    type ConnectInfo = GrpcConnection;

    fn connect_info(&self) -> GrpcConnection {
        GrpcConnection {
            tcp: self.io.connect_info(),
            close: self.close.clone(),
        }
    }
}

impl AsyncRead for Killable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check(cx)?;
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if self.first_bytes.is_some() {
            match &read {
                Poll::Ready(Ok(())) if buf.filled().len() > before => {
                    // HTTP/2 pings start only after the handshake: until the whole preface
                    // is in, the deadline stands.
                    self.preface_read += buf.filled().len() - before;
                    if self.preface_read >= H2_PREFACE_BYTES {
                        self.first_bytes = None;
                    }
                }
                Poll::Pending => {
                    let due = self.first_bytes.as_mut().expect("checked");
                    if due.as_mut().poll(cx).is_ready() {
                        self.first_bytes = None;
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no bytes from the client in time",
                        )));
                    }
                }
                _ => {}
            }
        }
        read
    }
}

impl AsyncWrite for Killable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Resolves on SIGINT or SIGTERM.
pub fn signals() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    // Installed now, not at the first poll: a SIGTERM that arrives as soon as the node
    // prints its addresses must stop it gracefully, not kill it with the default action.
    // Call it inside the runtime (`Runtime::enter` or an async context).
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}
