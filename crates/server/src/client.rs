//! Clients of a running node, for `spindle load`, `ride`, `status` and the tests: a small
//! HTTP/JSON client and a gRPC connection that carry the bearer token when one is given.

use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use spindle_core::{Index, Partition};
use spindle_view::frame::{END_FRAME_BYTES, TAG_END};
use tonic::codegen::http;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::grpc::{ProtoCodec, ITERATE_PATH, TAIL_PATH};
use crate::proto;

/// `host:port` or `http://host:port` → `http://host:port`.
fn base_url(server: &str) -> String {
    let s = server.trim_end_matches('/');
    if s.starts_with("http://") || s.starts_with("https://") {
        s.to_owned()
    } else {
        format!("http://{s}")
    }
}

/// Longest wait for a TCP connection to a node (an unreachable host, e.g. behind a network
/// partition, fails after it instead of hanging).
pub const HTTP_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// An HTTP/JSON client of one node.
#[derive(Clone, Debug)]
pub struct HttpClient {
    base: String,
    token: Option<String>,
    client: hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
}

impl HttpClient {
    pub fn new(server: &str, token: Option<String>) -> Self {
        Self::build(server, token, false)
    }

    /// A client that speaks HTTP/2 with prior knowledge (h2c): every request in flight
    /// shares one connection, as many streams.
    pub fn new_http2(server: &str, token: Option<String>) -> Self {
        Self::build(server, token, true)
    }

    fn build(server: &str, token: Option<String>, http2: bool) -> Self {
        HttpClient {
            base: base_url(server),
            token,
            client: {
                let mut connector = HttpConnector::new();
                connector.set_connect_timeout(Some(HTTP_CONNECT_TIMEOUT));
                connector.set_nodelay(true);
                hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                    .http2_only(http2)
                    .build(connector)
            },
        }
    }

    /// Send a request; returns the status and the whole body.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let resp = self
            .client
            .request(req)
            .await
            .with_context(|| format!("requesting {}{path}", self.base))?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// Send JSON (or nothing) and parse the JSON answer.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> anyhow::Result<(StatusCode, serde_json::Value)> {
        let body = body.map(serde_json::to_vec).transpose()?;
        let (status, bytes) = self.request(method, path, body).await?;
        let value = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).with_context(|| {
                format!(
                    "{path} answered {status} with a body that is not JSON: {:?}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                )
            })?
        };
        Ok((status, value))
    }
}

/// Adds `authorization: Bearer <token>` to every gRPC request.
#[derive(Clone, Debug)]
pub struct TokenInterceptor(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for TokenInterceptor {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// The largest HTTP/2 DATA frame a client accepts (HTTP/2's default is 16 KiB). The server
/// writes each frame with one system call, so an iteration chunk (1 MiB by default, at most
/// 4 MiB) sent in 16 KiB frames costs 64 of them per chunk and per rider; in frames this
/// large it costs one.
pub const GRPC_FRAME_BYTES_MAX: u32 = 4 << 20;

pub type GrpcClient = tonic::client::Grpc<InterceptedService<Channel, TokenInterceptor>>;

/// Connect to a node's gRPC listener.
pub async fn grpc_connect(server: &str, token: Option<&str>) -> anyhow::Result<GrpcClient> {
    let channel = Channel::from_shared(base_url(server))?
        .max_frame_size(GRPC_FRAME_BYTES_MAX)
        .connect()
        .await
        .with_context(|| format!("connecting to gRPC at {server}"))?;
    let token = token
        .map(|t| format!("Bearer {t}").parse())
        .transpose()
        .map_err(|_| anyhow!("the token is not valid in a header"))?;
    Ok(
        tonic::client::Grpc::new(InterceptedService::new(channel, TokenInterceptor(token)))
            .max_decoding_message_size(crate::grpc::GRPC_SEND_BYTES_MAX),
    )
}

/// Call a server-streaming method at `path`.
async fn server_streaming<Req, Resp>(
    client: &mut GrpcClient,
    path: &'static str,
    request: Req,
) -> Result<tonic::Streaming<Resp>, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    client
        .ready()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("the server is not reachable: {e}")))?;
    let path = http::uri::PathAndQuery::from_static(path);
    Ok(client
        .server_streaming(
            tonic::Request::new(request),
            path,
            ProtoCodec::<Req, Resp>::default(),
        )
        .await?
        .into_inner())
}

/// Start an iteration (`Iterate`): a stream of frame chunks.
pub async fn iterate(
    client: &mut GrpcClient,
    request: proto::IterateRequest,
) -> Result<tonic::Streaming<proto::FrameChunk>, tonic::Status> {
    server_streaming(client, ITERATE_PATH, request).await
}

/// Tail the log (`Tail`): a stream of record batches.
pub async fn tail(
    client: &mut GrpcClient,
    request: proto::TailRequest,
) -> Result<tonic::Streaming<proto::RecordBatch>, tonic::Status> {
    server_streaming(client, TAIL_PATH, request).await
}

/// What one ride received.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RideReport {
    pub bytes: u64,
    /// Version frames, as counted by the end frame.
    pub frames: u64,
    pub cut: Index,
    pub range: Partition,
    pub seconds: f64,
}

impl RideReport {
    pub fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / f64::from(1 << 20) / self.seconds.max(1e-9)
    }
}

/// Ride one iteration to its end, counting bytes (`progress` hears the running total).
/// Only the end frame is decoded: a rider that merely counts should cost nothing.
pub async fn ride(
    client: &mut GrpcClient,
    request: proto::IterateRequest,
    mut progress: impl FnMut(u64),
) -> anyhow::Result<RideReport> {
    let start = Instant::now();
    let mut stream = iterate(client, request)
        .await
        .map_err(|s| anyhow!("the server refused the iteration: {}", s.message()))?;
    let mut bytes = 0u64;
    let mut last = Bytes::new();
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(|s| anyhow!("the iteration broke off: {}", s.message()))?
    {
        bytes += chunk.frames.len() as u64;
        progress(bytes);
        last = chunk.frames;
    }
    let seconds = start.elapsed().as_secs_f64();
    if last.len() < END_FRAME_BYTES || last[last.len() - END_FRAME_BYTES] != TAG_END {
        bail!("the stream ended without an end frame ({bytes} bytes received)");
    }
    let end = &last[last.len() - END_FRAME_BYTES + 1..];
    let word = |i: usize| u64::from_le_bytes(end[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    Ok(RideReport {
        bytes,
        frames: word(3),
        cut: Index::new(word(0)),
        range: Partition::new(word(1), word(2))
            .ok_or_else(|| anyhow!("the end frame holds an empty range"))?,
        seconds,
    })
}
