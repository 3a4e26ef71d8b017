//! The appending clients of `spindle bench cluster`: each client is one request in flight at
//! a time, over HTTP/1.1 on a keep-alive connection of its own (`--http 1`) or as a stream
//! of one shared HTTP/2 connection (`--http 2`, through the pooled client).
//!
//! An HTTP/1.1 client drives its connection inside its own future and sends a request body
//! made once, as a load generator does (wrk, h2load): the bench shares the machine's cores
//! with what it measures, so its own CPU per request must be the protocol's, not a
//! connection pool's (checkout, a task per connection, a URL parsed per request). All the
//! clients and their connections are polled by the one future the bench waits on, so on
//! HTTP/1.1 they run on one thread (the bench's whole CPU, kernel included, was 28–35 µs per
//! append in docs/benchmarks/cluster.md's runs: under half a core at 13,000 appends/s).
//!
//! A client whose connection closes fails the run, with the connection's error: the node
//! closes a kept-alive connection only after an answer the bench counts as a failure
//! anyway (a timeout, a head or body too large, or when it is stopping).

use std::future::Future;

use anyhow::{ensure, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use spindle_server::client::{HttpClient, HTTP_CONNECT_TIMEOUT};

/// Where appends go and how the requests are made.
pub(crate) enum AppendTarget {
    Http1 {
        /// `host:port`.
        addr: String,
        host: HeaderValue,
        authorization: Option<HeaderValue>,
    },
    Http2(HttpClient),
}

impl AppendTarget {
    pub(crate) fn new(server: &str, token: Option<&str>, http: u8) -> anyhow::Result<Self> {
        let token = token.map(str::to_owned);
        if http == 2 {
            return Ok(AppendTarget::Http2(HttpClient::new_http2(server, token)));
        }
        let addr = server
            .trim_end_matches('/')
            .trim_start_matches("http://")
            .to_owned();
        Ok(AppendTarget::Http1 {
            host: HeaderValue::from_str(&addr).with_context(|| format!("address {addr:?}"))?,
            authorization: token
                .map(|t| HeaderValue::from_str(&format!("Bearer {t}")))
                .transpose()
                .context("the token is not a header value")?,
            addr,
        })
    }

    /// Run one client: `work` gets a sender and makes its requests with it; on HTTP/1.1 the
    /// client's connection is driven beside `work` and closed when `work` ends.
    pub(crate) async fn client<'s, T, W, F>(&'s self, work: W) -> anyhow::Result<T>
    where
        W: FnOnce(Sender<'s>) -> F,
        F: Future<Output = anyhow::Result<T>>,
    {
        match self {
            AppendTarget::Http2(client) => work(Sender::Pooled(client)).await,
            AppendTarget::Http1 {
                addr,
                host,
                authorization,
            } => {
                let stream = tokio::time::timeout(
                    HTTP_CONNECT_TIMEOUT,
                    tokio::net::TcpStream::connect(addr),
                )
                .await
                .with_context(|| format!("connecting to {addr}: timed out"))?
                .with_context(|| format!("connecting to {addr}"))?;
                stream.set_nodelay(true)?;
                let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .with_context(|| format!("HTTP/1.1 handshake with {addr}"))?;
                let sender = Sender::Own {
                    send,
                    host,
                    authorization: authorization.as_ref(),
                };
                // `work` owns the sender: when it ends, the connection sees it dropped and
                // closes; if the connection fails first, the next request fails, and the
                // connection's own error says why.
                match tokio::join!(work(sender), conn) {
                    (Err(e), Err(conn)) => {
                        Err(e.context(format!("the HTTP/1.1 connection to {addr} failed: {conn}")))
                    }
                    (result, _) => result,
                }
            }
        }
    }
}

/// One client's way of sending.
pub(crate) enum Sender<'a> {
    Own {
        send: SendRequest<Full<Bytes>>,
        host: &'a HeaderValue,
        authorization: Option<&'a HeaderValue>,
    },
    Pooled(&'a HttpClient),
}

impl Sender<'_> {
    /// `POST path` with a JSON body; the answer's status and body, which must be a success.
    pub(crate) async fn post(&mut self, path: &'static str, body: Bytes) -> anyhow::Result<Bytes> {
        let (code, answer) = match self {
            Sender::Pooled(client) => {
                client
                    .request(Method::POST, path, Some(body.into()))
                    .await?
            }
            Sender::Own {
                send,
                host,
                authorization,
            } => {
                let mut req = hyper::Request::post(path)
                    .header(HOST, (*host).clone())
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                if let Some(a) = authorization {
                    req = req.header(AUTHORIZATION, (*a).clone());
                }
                send.ready().await.context("the connection closed")?;
                let resp = send.send_request(req.body(Full::new(body))?).await?;
                let code: StatusCode = resp.status();
                (code, resp.into_body().collect().await?.to_bytes())
            }
        };
        ensure!(
            code.is_success(),
            "{path} answered {code}: {}",
            String::from_utf8_lossy(&answer)
        );
        Ok(answer)
    }
}
