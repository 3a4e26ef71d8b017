//! The gRPC surface for processes (proto/spindle.proto, docs/api.md): iteration of a Disk
//! View through its carousel or a dedicated iterator, and a tail of the log.
//!
//! Each stream is fed by its own producer (a rider thread, or a tail task) through a small
//! bounded channel: a slow client slows its producer (and, on the carousel, gets demoted),
//! a client that disconnects makes the next send fail, which drops the rider and frees
//! its seat, and a client that takes no message for `stream_stall_ms_max` has its
//! connection closed (`send_to_client`), which does the same.
//!
//! Bounds: `iterate_streams_max` and `tail_streams_max` streams at once (more are refused
//! with RESOURCE_EXHAUSTED); a `Tail` message holds at most `tail_batch_records_max` records
//! and `tail_batch_bytes_max` bytes of whole transactions (a larger transaction goes alone,
//! and always fits `GRPC_SEND_BYTES_MAX`); log reads run on the blocking pool.
//!
//! Shutdown: when the node begins to stop, every stream ends with UNAVAILABLE ("server
//! shutting down") and its producer is detached, even one whose client stopped reading.

use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;

use futures_util::{Stream, StreamExt};
use prost::Message as _;
use spindle_core::txn::TXN_BYTES_MAX;
use spindle_core::{Index, Partition, Record, TXN_RECORDS_MAX};
use spindle_log::ReadError;

use crate::node_log::NodeLog;
use spindle_view::{IterError, IterRequest, Kinds};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::{
    http, Body as HttpBody, BoxFuture, InterceptedService, Service as CodegenService, StdError,
};
use tonic::{Request, Response, Status};

use crate::node::Node;
use crate::proto;
use crate::status::Counters;

/// Messages a stream may have in flight to its client.
pub const STREAM_MESSAGES_MAX: usize = 4;
/// Largest gRPC message the server sends (an iteration chunk is about `iter_chunk_bytes`
/// plus at most one record's frame).
pub const GRPC_SEND_BYTES_MAX: usize = 16 << 20;
// A carousel chunk closes at the first item boundary past `iter_chunk_bytes`, and an item
// joins one only while its stored bytes and the frame bytes it adds stay within the
// carousel's `item_shared_bytes_max`, which the frame that crossed it passes by at most one
// frame: a record's value, which a projection can make up to about 4 times larger
// (serde_json writes `1e15` as `1000000000000000.0`). A dedicated iteration's chunk passes
// `iter_chunk_bytes` by at most one such frame.
const _: () = assert!(
    crate::config::ITER_CHUNK_BYTES_MAX
        + spindle_view::carousel::ITEM_SHARED_BYTES_MAX_DEFAULT
        + 4 * spindle_core::RECORD_BYTES_MAX
        < GRPC_SEND_BYTES_MAX,
    "every iteration chunk must fit one gRPC message"
);
/// Largest gRPC request the server accepts (requests are small).
pub const GRPC_RECEIVE_BYTES_MAX: usize = 64 << 10;
/// Records per tail batch when the client does not say.
pub const TAIL_BATCH_RECORDS_DEFAULT: usize = 1024;
/// Records the first log read of a `Tail` message asks for; later reads are sized by the
/// largest record seen, so one message reads about `tail_batch_bytes_max` from the log.
pub const TAIL_READ_RECORDS_FIRST: usize = 16;
/// Bytes a record adds to a `RecordBatch` beyond its key and value: tags, lengths, index
/// and commit flag.
pub const TAIL_RECORD_OVERHEAD_BYTES_MAX: usize = 32;
/// The largest `RecordBatch` holding one transaction.
pub const TAIL_TXN_MESSAGE_BYTES_MAX: usize =
    TXN_BYTES_MAX + TXN_RECORDS_MAX * TAIL_RECORD_OVERHEAD_BYTES_MAX;
const _: () = assert!(
    TAIL_TXN_MESSAGE_BYTES_MAX < GRPC_SEND_BYTES_MAX,
    "every transaction must fit one Tail message"
);
/// The status every stream ends with when the node stops.
pub const SHUTTING_DOWN: &str = "server shutting down; reconnect to another node or retry";

/// The status a stream ends with when the node stops.
pub fn shutting_down() -> Status {
    Status::unavailable(SHUTTING_DOWN)
}

/// Resolves once `stop` holds true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Send `message` to a stream's client. `false` once the client is gone, the node stops,
/// or the client has taken no message for `stall_max` (`stream_stall_ms_max`): then its
/// connection is closed, with every stream on it, since a client that keeps a stream's
/// flow-control window shut would otherwise hold the stream's seat and its queued messages
/// for as long as it keeps the connection alive (it answers pings); closing the connection
/// frees both. (Every connection the node serves has one; without it the producer only
/// stops.)
pub(crate) async fn send_to_client<T>(
    tx: &mpsc::Sender<T>,
    message: T,
    stop: &mut watch::Receiver<bool>,
    stall_max: Duration,
    connection: Option<&crate::serve::GrpcConnection>,
) -> bool {
    tokio::select! {
        sent = tx.send(message) => sent.is_ok(),
        () = stopped(stop) => false,
        () = tokio::time::sleep(stall_max) => {
            tracing::info!(
                peer = ?connection.and_then(|c| c.tcp.remote_addr()),
                "closing a gRPC connection: a stream's client took no message for {stall_max:?}"
            );
            if let Some(c) = connection {
                c.close();
            }
            false
        }
    }
}

/// `stream`, ended with UNAVAILABLE as soon as `stop` turns true (pending messages are
/// dropped: the client cannot finish anyway and must resume elsewhere).
pub fn until_stopped<T: Send + 'static>(
    stream: impl Stream<Item = Result<T, Status>> + Send + Unpin + 'static,
    stop: watch::Receiver<bool>,
) -> BoxStream<T> {
    let state = (stream, stop, false);
    Box::pin(futures_util::stream::unfold(
        state,
        |(mut stream, mut stop, done)| async move {
            if done {
                return None;
            }
            tokio::select! {
                biased;
                () = stopped(&mut stop) => Some((Err(shutting_down()), (stream, stop, true))),
                item = stream.next() => {
                    let item = item?;
                    let failed = item.is_err();
                    Some((item, (stream, stop, failed)))
                }
            }
        },
    ))
}

/// Streams of one kind open at once, bounded by a named configuration limit.
#[derive(Debug)]
pub struct StreamSeats {
    what: &'static str,
    limit_name: &'static str,
    seats: Arc<Semaphore>,
    max: usize,
}

impl StreamSeats {
    pub fn new(what: &'static str, limit_name: &'static str, max: usize) -> Self {
        StreamSeats {
            what,
            limit_name,
            seats: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A seat for one more stream, or RESOURCE_EXHAUSTED naming the limit.
    pub fn take(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.seats.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{} {} streams are open, the server's {} limit; retry when one ends",
                self.max, self.what, self.limit_name
            ))
        })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.max - self.seats.available_permits()
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The service name and method paths of proto/spindle.proto.
pub const SERVICE_NAME: &str = "spindle.v1.Spindle";
pub const ITERATE_PATH: &str = "/spindle.v1.Spindle/Iterate";
pub const TAIL_PATH: &str = "/spindle.v1.Spindle/Tail";

/// Protobuf encoding of the hand-written messages for tonic (see `proto`).
#[derive(Debug)]
pub struct ProtoCodec<E, D>(PhantomData<fn(E) -> D>);

impl<E, D> Default for ProtoCodec<E, D> {
    fn default() -> Self {
        ProtoCodec(PhantomData)
    }
}

#[derive(Debug)]
pub struct ProtoEncoder<E>(PhantomData<fn(E)>);

#[derive(Debug)]
pub struct ProtoDecoder<D>(PhantomData<fn() -> D>);

impl<E, D> tonic::codec::Codec for ProtoCodec<E, D>
where
    E: prost::Message + Send + 'static,
    D: prost::Message + Default + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = ProtoEncoder<E>;
    type Decoder = ProtoDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        ProtoEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProtoDecoder(PhantomData)
    }
}

impl<E: prost::Message> tonic::codec::Encoder for ProtoEncoder<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding a message: {e}")))
    }
}

impl<D: prost::Message + Default> tonic::codec::Decoder for ProtoDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<D>, Status> {
        D::decode(src)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("malformed message: {e}")))
    }
}

/// The service; cheap to clone.
#[derive(Clone, Debug)]
pub struct Service {
    node: Arc<Node>,
}

impl Service {
    pub(crate) fn node(&self) -> &Arc<Node> {
        &self.node
    }
}

/// The routes of the service, as tonic's server expects them.
#[derive(Clone, Debug)]
pub struct SpindleServer {
    service: Service,
}

impl tonic::server::NamedService for SpindleServer {
    const NAME: &'static str = SERVICE_NAME;
}

/// Binds one server-streaming method of the service for tonic.
macro_rules! method {
    ($name:ident, $req:ty, $resp:ty, $call:ident) => {
        #[derive(Clone, Debug)]
        struct $name(Service);

        impl CodegenService<Request<$req>> for $name {
            type Response = Response<BoxStream<$resp>>;
            type Error = Status;
            type Future = BoxFuture<Self::Response, Status>;

            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, req: Request<$req>) -> Self::Future {
                let service = self.0.clone();
                Box::pin(async move { service.$call(req).await })
            }
        }
    };
}

method!(TailMethod, proto::TailRequest, proto::RecordBatch, tail);

async fn stream<Req, Resp, M>(
    method: M,
    req: http::Request<impl HttpBody<Error: Into<StdError> + Send> + Send + 'static>,
) -> http::Response<tonic::body::Body>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    M: tonic::server::ServerStreamingService<Req, Response = Resp>,
    M::ResponseStream: Send + 'static,
{
    let mut grpc = tonic::server::Grpc::new(ProtoCodec::<Resp, Req>::default())
        .apply_max_message_size_config(Some(GRPC_RECEIVE_BYTES_MAX), Some(GRPC_SEND_BYTES_MAX));
    grpc.server_streaming(method, req).await
}

impl<B> CodegenService<http::Request<B>> for SpindleServer
where
    B: HttpBody + Send + 'static,
    B::Data: Send,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let service = self.service.clone();
        match req.uri().path() {
            ITERATE_PATH => {
                Box::pin(async move { Ok(crate::shared_body::iterate(service, req).await) })
            }
            TAIL_PATH => Box::pin(async move { Ok(stream(TailMethod(service), req).await) }),
            other => {
                let status = Status::unimplemented(format!("no method {other}"));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

/// The tonic service for `node`, with the bearer-token check when a token is configured.
pub fn service(
    node: Arc<Node>,
) -> InterceptedService<SpindleServer, impl tonic::service::Interceptor + Clone> {
    let token = node.config.token.clone();
    let metrics_node = node.clone();
    let server = SpindleServer {
        service: Service { node },
    };
    InterceptedService::new(server, move |req: Request<()>| {
        let Some(token) = &token else {
            return Ok(req);
        };
        let mut headers = axum::http::HeaderMap::new();
        if let Some(v) = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
        {
            if let Ok(v) = v.parse() {
                headers.insert(axum::http::header::AUTHORIZATION, v);
            }
        }
        if crate::http::bearer_matches(&headers, token) {
            Ok(req)
        } else {
            Counters::bump(&metrics_node.metrics.unauthorized, 1);
            Err(Status::unauthenticated(
                "missing or wrong bearer token (send metadata `authorization: Bearer <token>`)",
            ))
        }
    })
}

/// The iteration request a gRPC request stands for, for a view of `partition`.
pub fn iter_request(
    r: &proto::IterateRequest,
    partition: Partition,
) -> Result<IterRequest, Status> {
    let kinds = match proto::Kinds::try_from(r.kinds) {
        Ok(proto::Kinds::All) => Kinds::ALL,
        Ok(proto::Kinds::Nodes) => Kinds::NODES,
        Ok(proto::Kinds::Edges) => Kinds::EDGES,
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "unknown kinds value {}",
                r.kinds
            )))
        }
    };
    Ok(IterRequest {
        range_lo: r.range_lo.unwrap_or(partition.lo()),
        range_hi: r.range_hi.unwrap_or(partition.hi()),
        kinds,
        keys_only: r.keys_only,
        from: Index::new(r.from),
        to: r.to.map(Index::new),
        projection: r.projection.clone(),
        latest_only: r.latest_only,
    })
}

/// The status of an iteration refused at its start: a bad request is the client's
/// (`INVALID_ARGUMENT`), the carousel's bound on filter groups a full server's
/// (`RESOURCE_EXHAUSTED`), a failed shared scan worth boarding again `UNAVAILABLE`, anything
/// else the server's own fault (`INTERNAL`) — never the client's mistake. The last two are
/// logged whole and answered with the data directory hidden.
fn refused_iteration(e: IterError) -> Status {
    match e {
        IterError::CarouselGroupsFull { .. } => {
            Status::resource_exhausted(format!("{e} (the server's carousel_groups_max)"))
        }
        IterError::EmptyRange { .. }
        | IterError::RangeOutsideView { .. }
        | IterError::NoKinds
        | IterError::FromAboveTo { .. }
        | IterError::CutAboveApplied { .. }
        | IterError::BadProjection { .. }
        | IterError::ProjectionWithKeysOnly => Status::invalid_argument(e.to_string()),
        // The shared scan failed: boarding again (or a dedicated iterator) may work.
        IterError::CarouselFailed { .. } => {
            tracing::warn!("an iteration could not start: {e}");
            Status::unavailable(crate::redact::paths(&e.to_string()))
        }
        IterError::UnknownSource { .. }
        | IterError::CarouselConfig { .. }
        | IterError::Remote { .. }
        | IterError::View(_) => {
            let message = e.to_string();
            tracing::warn!("an iteration could not start: {message}");
            Status::internal(crate::redact::paths(&message))
        }
    }
}

impl Service {
    /// Board (or start a dedicated iterator) and return the chunks as they come. The rider
    /// runs on its own thread; the channel's bound paces it to the client.
    pub(crate) fn start_iteration(
        &self,
        r: &proto::IterateRequest,
        connection: Option<crate::serve::GrpcConnection>,
    ) -> Result<mpsc::Receiver<Result<Bytes, Status>>, Status> {
        let node = &self.node;
        let Some(slot) = node.disks.iter().find(|d| d.id == r.view) else {
            let ids: Vec<_> = node.disks.iter().map(|d| d.id.as_str()).collect();
            return Err(Status::not_found(format!(
                "no Disk View {:?}; this node has {ids:?}",
                r.view
            )));
        };
        if let Some(reason) = slot.corrupt() {
            return Err(Status::failed_precondition(format!(
                "Disk View {} failed verification and serves nothing: {}",
                slot.id,
                crate::redact::paths(&reason)
            )));
        }
        let req = iter_request(r, slot.view.partition())?;
        if *node.stopping().borrow() {
            return Err(shutting_down());
        }
        let seat = node.iterate_seats.take()?;
        let rider = if r.dedicated {
            slot.carousel.dedicated(&req)
        } else {
            slot.carousel.board(&req)
        };
        let mut rider = rider.map_err(refused_iteration)?;
        Counters::bump(&node.metrics.iterations, 1);
        let (tx, rx) = mpsc::channel(STREAM_MESSAGES_MAX);
        let node = node.clone();
        let mut stop = node.stopping();
        let stall_max = Duration::from_millis(node.config.stream_stall_ms_max);
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name(format!("rider-{}", slot.id))
            .spawn(move || {
                let _seat = seat;
                while let Some(chunk) = rider.next_chunk() {
                    let message = chunk.map_err(|e| {
                        let message = e.to_string();
                        tracing::warn!("an iteration failed: {message}");
                        Status::internal(crate::redact::paths(&message))
                    });
                    if let Ok(frames) = &message {
                        Counters::bump(&node.metrics.iteration_bytes, frames.len() as u64);
                    }
                    let failed = message.is_err();
                    // A send error means the client went away, and a stopping node
                    // detaches a rider whose client stopped reading: either way, dropping
                    // the rider frees its seat.
                    let sent = runtime.block_on(send_to_client(
                        &tx,
                        message,
                        &mut stop,
                        stall_max,
                        connection.as_ref(),
                    ));
                    if !sent || failed {
                        return;
                    }
                }
            })
            .map_err(|e| Status::resource_exhausted(format!("cannot start a rider thread: {e}")))?;
        Ok(rx)
    }

    async fn tail(
        &self,
        request: Request<proto::TailRequest>,
    ) -> Result<Response<BoxStream<proto::RecordBatch>>, Status> {
        let connection = request
            .extensions()
            .get::<crate::serve::GrpcConnection>()
            .cloned();
        let r = request.into_inner();
        let node = self.node.clone();
        let from = Index::new(r.from.max(1));
        let first = node.log.first_index();
        if from < first {
            return Err(Status::out_of_range(format!(
                "index {from} was truncated; the first retained index is {first}"
            )));
        }
        let config = &node.config;
        // A tail from past the head's next index waits (up to `read_wait_ms_max`, holding
        // no seat) for the log to reach it, as a follower slightly ahead of this node's
        // view of the log would; one from further on is refused, so that a request that
        // can never be answered does not hold a seat for ever (FAILED_PRECONDITION: the
        // log is not there yet; OUT_OF_RANGE says a tail asked below what the log kept).
        let head = node.log.durable_index();
        if from > head.next() {
            let wait = Duration::from_millis(config.read_wait_ms_max);
            let before = Index::new(from.get() - 1);
            let mut stop = node.stopping();
            let reached = tokio::select! {
                reached = tokio::time::timeout(wait, node.log.wait_for(before)) => reached,
                () = stopped(&mut stop) => return Err(shutting_down()),
            };
            match reached {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(tail_status(e)),
                Err(_) => {
                    let head = node.log.durable_index();
                    return Err(Status::failed_precondition(format!(
                        "index {from} is past the log's head ({head}) and was not reached within \
                         {} ms; tail from at most {}",
                        config.read_wait_ms_max,
                        head.next()
                    )));
                }
            }
        }
        let limits = TailLimits {
            records_max: match r.batch_records_max {
                0 => TAIL_BATCH_RECORDS_DEFAULT,
                n => n as usize,
            }
            .min(config.tail_batch_records_max as usize),
            bytes_max: config.tail_batch_bytes_max,
        };
        if *node.stopping().borrow() {
            return Err(shutting_down());
        }
        let seat = node.tail_seats.take()?;
        Counters::bump(&node.metrics.tails, 1);
        let (tx, rx) = mpsc::channel(STREAM_MESSAGES_MAX);
        let stop = node.stopping();
        let mut stopping = node.stopping();
        let stall_max = Duration::from_millis(config.stream_stall_ms_max);
        tokio::spawn(async move {
            let _seat = seat;
            let mut next = from;
            loop {
                let read = tokio::select! {
                    ready = node.log.wait_for(next) => ready,
                    _ = tx.closed() => return,
                };
                let log = node.log.clone();
                let read = match read {
                    Ok(_) => tokio::task::spawn_blocking(move || read_messages(&log, next, limits))
                        .await
                        .unwrap_or_else(|e| {
                            Err(ReadError::Io {
                                file: "tail".into(),
                                source: Arc::new(std::io::Error::other(e.to_string())),
                            })
                        }),
                    Err(e) => Err(e),
                };
                let messages = match read {
                    Ok(messages) => messages,
                    Err(e) => {
                        // A slow client is likely here (truncation passed it): the error
                        // waits for it no longer than a message would.
                        let failed = Err(tail_status(e));
                        send_to_client(&tx, failed, &mut stopping, stall_max, connection.as_ref())
                            .await;
                        return;
                    }
                };
                for message in messages {
                    if let Some(last) = message.records.last() {
                        next = Index::new(last.index).next();
                    }
                    let sent = send_to_client(
                        &tx,
                        Ok(message),
                        &mut stopping,
                        stall_max,
                        connection.as_ref(),
                    );
                    if !sent.await {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(until_stopped(ReceiverStream::new(rx), stop)))
    }
}

fn tail_status(e: ReadError) -> Status {
    match e {
        ReadError::Truncated { first } => Status::out_of_range(format!(
            "the log was truncated past the tail; the first retained index is {first}"
        )),
        other => {
            let message = other.to_string();
            tracing::warn!("a tail failed: {message}");
            Status::internal(crate::redact::paths(&message))
        }
    }
}

/// How much one `Tail` message may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailLimits {
    pub records_max: usize,
    pub bytes_max: usize,
}

/// Read durable records from `from` for about one message's worth, and split them into
/// messages within `limits`. Reads are sized by the largest record seen so far, so memory
/// stays near `bytes_max` plus one transaction.
pub fn read_messages(
    log: &NodeLog,
    from: Index,
    limits: TailLimits,
) -> Result<Vec<proto::RecordBatch>, ReadError> {
    let mut records = Vec::new();
    let mut bytes = 0usize;
    let mut record_bytes_max = 0usize;
    let mut next = from;
    while records.len() < limits.records_max && bytes < limits.bytes_max {
        let budget = match record_bytes_max {
            0 => TAIL_READ_RECORDS_FIRST,
            b => (limits.bytes_max - bytes) / b,
        };
        let want = budget.clamp(1, limits.records_max - records.len());
        let read = log.read(next, want)?;
        let Some(last) = read.last() else { break };
        next = last.index.next();
        for r in read {
            let r = proto_record(r);
            let len = record_message_len(&r);
            record_bytes_max = record_bytes_max.max(len);
            bytes += len;
            records.push(r);
        }
    }
    Ok(split_messages(records, limits))
}

/// Bytes `record` adds to a `RecordBatch`.
pub fn record_message_len(record: &proto::Record) -> usize {
    let len = record.encoded_len();
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

/// Cut `records` (whole transactions) into messages of whole transactions, each within
/// `limits`, except that a transaction larger than the limits goes alone (a pure policy).
pub fn split_messages(records: Vec<proto::Record>, limits: TailLimits) -> Vec<proto::RecordBatch> {
    let mut out = Vec::new();
    let mut current: Vec<proto::Record> = Vec::new();
    let mut current_bytes = 0usize;
    let mut txn: Vec<proto::Record> = Vec::new();
    let mut txn_bytes = 0usize;
    for r in records {
        txn_bytes += record_message_len(&r);
        let commit = r.commit;
        txn.push(r);
        if !commit {
            continue;
        }
        let fits = current.len() + txn.len() <= limits.records_max
            && current_bytes + txn_bytes <= limits.bytes_max;
        if !fits && !current.is_empty() {
            out.push(proto::RecordBatch {
                records: std::mem::take(&mut current),
            });
            current_bytes = 0;
        }
        current.append(&mut txn);
        current_bytes += std::mem::take(&mut txn_bytes);
    }
    // Reads end on a commit; a trailing partial transaction cannot occur, but is kept.
    current.append(&mut txn);
    if !current.is_empty() {
        out.push(proto::RecordBatch { records: current });
    }
    out
}

fn proto_record(r: Record) -> proto::Record {
    proto::Record {
        index: r.index.get(),
        commit: r.commit,
        key: r.key.to_bytes(),
        value: r.value.as_json().map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_iteration_says_whose_fault_it_is() {
        let bad = IterError::NoKinds;
        assert_eq!(refused_iteration(bad).code(), tonic::Code::InvalidArgument);
        let full = IterError::CarouselGroupsFull { groups: 16 };
        let status = refused_iteration(full);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("carousel_groups_max"),
            "{status:?}"
        );
        let scan = IterError::CarouselFailed {
            reason: "disk error".into(),
        };
        assert_eq!(refused_iteration(scan).code(), tonic::Code::Unavailable);
        let corrupt = IterError::View(spindle_view::ViewError::Corrupt {
            dir: "/srv/secret-place/disk-0".into(),
            what: "bad key".into(),
        });
        let status = refused_iteration(corrupt);
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(!status.message().contains("secret-place"), "{status:?}");
    }

    /// Transactions of the given sizes, each record carrying `value_bytes` of value.
    fn records(txns: &[usize], value_bytes: usize) -> Vec<proto::Record> {
        let mut out = Vec::new();
        for &n in txns {
            for i in 0..n {
                out.push(proto::Record {
                    index: out.len() as u64 + 1,
                    commit: i + 1 == n,
                    key: vec![b'k'; 8],
                    value: Some("v".repeat(value_bytes)),
                });
            }
        }
        out
    }

    #[test]
    fn messages_hold_whole_transactions_within_the_limits() {
        let limits = TailLimits {
            records_max: 10,
            bytes_max: 2_000,
        };
        for (txns, value_bytes) in [
            (vec![1; 50], 10),
            (vec![3, 4, 5, 2, 9, 1, 1], 10),
            (vec![2, 30, 2], 10),
            (vec![1, 1, 1, 5, 1], 900),
            (vec![4], 1_000),
        ] {
            let input = records(&txns, value_bytes);
            let messages = split_messages(input.clone(), limits);
            let mut rejoined = Vec::new();
            for m in &messages {
                let last = m.records.last().expect("no empty message");
                assert!(last.commit, "{txns:?}: a message ends on a commit");
                let commits = m.records.iter().filter(|r| r.commit).count();
                let bytes: usize = m.records.iter().map(record_message_len).sum();
                assert_eq!(bytes, m.encoded_len());
                if commits > 1 {
                    assert!(m.records.len() <= limits.records_max, "{txns:?}");
                    assert!(bytes <= limits.bytes_max, "{txns:?}: {bytes}");
                }
                rejoined.extend(m.records.iter().cloned());
            }
            assert_eq!(
                rejoined, input,
                "{txns:?}: nothing lost, reordered or repeated"
            );
        }
    }

    #[test]
    fn messages_are_not_cut_smaller_than_the_limits_allow() {
        let limits = TailLimits {
            records_max: 10,
            bytes_max: 1 << 20,
        };
        let messages = split_messages(records(&[1; 35], 10), limits);
        let sizes: Vec<_> = messages.iter().map(|m| m.records.len()).collect();
        assert_eq!(sizes, [10, 10, 10, 5]);
    }
}
