//! The gRPC surface for processes (proto/spindle.proto, docs/api.md): iteration of a Disk
//! View through its carousel or a dedicated iterator, and a tail of the log.
//!
//! Each stream is fed by its own producer (a rider thread, or a tail task) through a small
//! bounded channel: a slow client slows its producer (and, on the carousel, gets demoted),
//! and a client that disconnects makes the next send fail, which drops the rider and frees
//! its seat.

use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;

use futures_util::Stream;
use spindle_core::{Index, Partition};
use spindle_log::{ReadError, Tail};
use spindle_view::{IterRequest, Kinds};
use tokio::sync::mpsc;
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
/// Largest gRPC request the server accepts (requests are small).
pub const GRPC_RECEIVE_BYTES_MAX: usize = 64 << 10;
/// Records per tail batch when the client does not say.
pub const TAIL_BATCH_RECORDS_DEFAULT: usize = 1024;

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

impl Service {
    /// Board (or start a dedicated iterator) and return the chunks as they come. The rider
    /// runs on its own thread; the channel's bound paces it to the client.
    pub(crate) fn start_iteration(
        &self,
        r: &proto::IterateRequest,
    ) -> Result<mpsc::Receiver<Result<Bytes, Status>>, Status> {
        let node = &self.node;
        let Some(slot) = node.disks.iter().find(|d| d.id == r.view) else {
            let ids: Vec<_> = node.disks.iter().map(|d| d.id.as_str()).collect();
            return Err(Status::not_found(format!(
                "no Disk View {:?}; this node has {ids:?}",
                r.view
            )));
        };
        let req = iter_request(r, slot.view.partition())?;
        let rider = if r.dedicated {
            slot.carousel.dedicated(&req)
        } else {
            slot.carousel.board(&req)
        };
        let mut rider = rider.map_err(|e| Status::invalid_argument(e.to_string()))?;
        Counters::bump(&node.metrics.iterations, 1);
        let (tx, rx) = mpsc::channel(STREAM_MESSAGES_MAX);
        let node = node.clone();
        std::thread::Builder::new()
            .name(format!("rider-{}", slot.id))
            .spawn(move || {
                while let Some(chunk) = rider.next_chunk() {
                    let message = chunk.map_err(|e| Status::internal(e.to_string()));
                    if let Ok(frames) = &message {
                        Counters::bump(&node.metrics.iteration_bytes, frames.len() as u64);
                    }
                    let failed = message.is_err();
                    // A send error means the client went away: dropping the rider frees it.
                    if tx.blocking_send(message).is_err() || failed {
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
        let r = request.into_inner();
        let node = self.node.clone();
        let from = Index::new(r.from.max(1));
        let first = node.log.first_index();
        if from < first {
            return Err(Status::out_of_range(format!(
                "index {from} was truncated; the first retained index is {first}"
            )));
        }
        let batch = match r.batch_records_max {
            0 => TAIL_BATCH_RECORDS_DEFAULT,
            n => n as usize,
        };
        Counters::bump(&node.metrics.tails, 1);
        let (tx, rx) = mpsc::channel(STREAM_MESSAGES_MAX);
        let mut stop = node.stopping();
        tokio::spawn(async move {
            let mut tail = Tail::new(node.log.clone(), from, batch);
            loop {
                let next = tokio::select! {
                    batch = tail.next_batch() => batch,
                    _ = stop.changed() => return,
                    _ = tx.closed() => return,
                };
                let message = next.map(record_batch).map_err(|e| match e {
                    ReadError::Truncated { first } => Status::out_of_range(format!(
                        "the log was truncated past the tail; the first retained index is {first}"
                    )),
                    other => Status::internal(other.to_string()),
                });
                let failed = message.is_err();
                if tx.send(message).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

fn record_batch(records: Vec<spindle_core::Record>) -> proto::RecordBatch {
    proto::RecordBatch {
        records: records
            .into_iter()
            .map(|r| proto::Record {
                index: r.index.get(),
                commit: r.commit,
                key: r.key.to_bytes(),
                value: r.value.as_json().map(str::to_owned),
            })
            .collect(),
    }
}
