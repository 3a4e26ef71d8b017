//! The HTTP listener also speaks HTTP/2 with prior knowledge (h2c): many requests in flight
//! on one connection are answered as over HTTP/1, the token is required the same way, and an
//! HTTP/2 connection with nothing in flight is closed after `request_body_ms_max`, as an idle
//! HTTP/1 connection is, while a connection that keeps working — or whose answer takes long,
//! or streams, or is read slowly — stays open, and one whose answer the client gives no
//! room for is closed; shutdown lets an HTTP/2 request in flight finish.

mod common;

use std::time::Duration;

use http_body_util::BodyExt;

use hyper::{Method, StatusCode};
use spindle_server::client::HttpClient;

const TOKEN: &str = "s3cret-token-0123456789";

#[test]
fn many_requests_in_flight_share_one_http2_connection() {
    let server = common::TestServer::start(|c| c.token = Some(TOKEN.into()));
    let addr = server.bound.http.to_string();
    server.rt.block_on(async {
        let refused = HttpClient::new_http2(&addr, None);
        let (status, _) = refused.json(Method::GET, "/v1/status", None).await.unwrap();
        assert_eq!(status, StatusCode::UNAUTHORIZED);

        let client = HttpClient::new_http2(&addr, Some(TOKEN.into()));
        // One request first: once the node's settings have arrived the client keeps to its
        // 64 streams (before, streams past them are refused, unprocessed).
        let (status, _) = client.json(Method::GET, "/v1/status", None).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        let writes = (0..200).map(|i| {
            let client = client.clone();
            async move {
                let body = format!(
                    r#"{{"writes":[{{"item":{{"kind":"node","id":"n{}"}},"value":{{"i":{i}}}}}]}}"#,
                    i % 50
                );
                let (status, answer) = client
                    .request(Method::POST, "/v1/txn", Some(body.into_bytes()))
                    .await
                    .unwrap();
                assert_eq!(
                    status,
                    StatusCode::OK,
                    "{}",
                    String::from_utf8_lossy(&answer)
                );
                let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
                (answer["index"].as_u64().expect("an index"), i)
            }
        });
        let written = futures_util::future::join_all(writes).await;
        let mut indexes: Vec<u64> = written.iter().map(|&(index, _)| index).collect();
        indexes.sort_unstable();
        indexes.dedup();
        assert_eq!(indexes, (1..=200).collect::<Vec<u64>>(), "one index each");
        // A read answers the write of the item with the highest index.
        let (last_index, last_i) = written
            .iter()
            .filter(|&&(_, i)| i % 50 == 7)
            .max()
            .copied()
            .unwrap();
        let (status, item) = client
            .json(
                Method::GET,
                "/v1/item?node=n7&min_index=200&timeout_ms=10000",
                None,
            )
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{item}");
        assert_eq!(item["value"]["i"], last_i, "{item}");
        assert_eq!(item["version"], last_index, "{item}");
    });
    server.stop();
}

/// An HTTP/2 connection (answering the node's pings, as hyper's client does) and the task
/// that drives it, which ends when the node closes the connection.
async fn h2_connect(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .unwrap();
    (send, tokio::spawn(conn))
}

fn get(path: &str) -> hyper::Request<http_body_util::Full<bytes::Bytes>> {
    hyper::Request::get(path)
        .body(http_body_util::Full::default())
        .unwrap()
}

/// A node whose `request_body_ms_max` (the idle bound) is `idle_max`.
fn start_with_idle_bound(idle_max: Duration) -> common::TestServer {
    common::TestServer::start(|c| c.request_body_ms_max = idle_max.as_millis() as u64)
}

/// An answer's whole body, parsed as JSON.
async fn json_body(resp: hyper::Response<hyper::body::Incoming>) -> serde_json::Value {
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

/// A 12 MiB chunk: far more than an HTTP/2 client's stream window.
fn large_chunk() -> Vec<u8> {
    (0..12u32 << 20).map(|i| (i % 251) as u8).collect()
}

/// Store `chunk` over HTTP/1; its id.
async fn put_chunk(client: &HttpClient, chunk: &[u8]) -> String {
    let (status, answer) = client
        .request(Method::POST, "/v1/chunks", Some(chunk.to_vec()))
        .await
        .unwrap();
    assert!(
        status.is_success(),
        "{status} {}",
        String::from_utf8_lossy(&answer)
    );
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    answer["id"].as_str().expect("the chunk's id").to_owned()
}

/// Chunk `id` asked for on a new HTTP/2 connection: the connection, its task and the
/// answer (`200`; its body not read yet).
async fn get_over_h2(
    addr: std::net::SocketAddr,
    id: &str,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
    hyper::Response<hyper::body::Incoming>,
) {
    let (mut send, conn) = h2_connect(addr).await;
    let resp = send
        .send_request(get(&format!("/v1/chunks/{id}")))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    (send, conn, resp)
}

/// Wait for the node to close the connection; a node that never does fails the test here,
/// far above its bound.
async fn closed_by_node(conn: tokio::task::JoinHandle<Result<(), hyper::Error>>) {
    tokio::time::timeout(Duration::from_secs(30), conn)
        .await
        .expect("the idle HTTP/2 connection was held open")
        .unwrap()
        .unwrap();
}

#[test]
fn an_idle_http2_connection_is_closed_and_a_busy_one_is_not() {
    let idle_max = Duration::from_millis(1000);
    let server = start_with_idle_bound(idle_max);
    let addr = server.bound.http;
    server.rt.block_on(async {
        // Idle after one request: closed.
        let (mut send, conn) = h2_connect(addr).await;
        let resp = send.send_request(get("/v1/status")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        closed_by_node(conn).await;

        // Requests a fifth of the bound apart, for twice the bound: every one is answered
        // on the same connection, which closes only once they stop.
        let (mut send, conn) = h2_connect(addr).await;
        for _ in 0..10 {
            let resp = send.send_request(get("/v1/status")).await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            tokio::time::sleep(idle_max / 5).await;
        }
        assert!(!conn.is_finished());
        closed_by_node(conn).await;
    });
    server.stop();
}

#[test]
fn answers_that_take_longer_than_the_idle_bound_are_not_cut() {
    let idle_max = Duration::from_millis(1000);
    let server = start_with_idle_bound(idle_max);
    let addr = server.bound.http;
    server.rt.block_on(async {
        // A read waiting for an index that never comes, longer than the idle bound: its own
        // timeout answers it, on a connection still open.
        let (mut send, conn) = h2_connect(addr).await;
        let resp = send
            .send_request(get("/v1/item?node=x&min_index=1000&timeout_ms=2500"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
        let body = json_body(resp).await;
        assert_eq!(body["error"], "not_yet_applied", "{body}");
        assert!(!conn.is_finished(), "closed while a request was in flight");
        drop(send);

        // Server-sent events: the answer's head comes at once, the events keep coming (one
        // a second) past the idle bound.
        let (mut send, conn) = h2_connect(addr).await;
        let resp = send.send_request(get("/v1/status/stream")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        let mut events = 0;
        while events < 3 {
            let frame = body
                .frame()
                .await
                .expect("the event stream ended")
                .expect("the event stream was cut");
            if let Some(data) = frame.data_ref() {
                events += String::from_utf8_lossy(data)
                    .matches("event: status")
                    .count();
            }
        }
        drop(body);
        closed_by_node(conn).await;
    });
    server.stop();
}

#[test]
fn a_large_answer_read_slowly_is_not_cut() {
    let idle_max = Duration::from_millis(500);
    let server = start_with_idle_bound(idle_max);
    let addr = server.bound.http;
    // Far more than the client's stream window, so the reader's pace sets the sender's.
    let chunk = large_chunk();
    let client = HttpClient::new(&addr.to_string(), None);
    server.rt.block_on(async {
        let id = put_chunk(&client, &chunk).await;
        let (_send, _conn, resp) = get_over_h2(addr, &id).await;
        let mut body = resp.into_body();
        let mut got = Vec::with_capacity(chunk.len());
        let mut pauses = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("the answer was cut");
            if let Some(data) = frame.data_ref() {
                got.extend_from_slice(data);
            }
            // Read slowly: in all, several idle bounds.
            if pauses < 8 && got.len() > pauses * (1 << 20) {
                pauses += 1;
                tokio::time::sleep(idle_max / 2).await;
            }
        }
        assert_eq!(got.len(), chunk.len());
        assert!(got == chunk, "the answer's bytes differ");
    });
    server.stop();
}

/// A client that leaves one large answer unread (its stream's window stays shut) while it
/// goes on using the connection does not hold the answer for ever: once the answer has
/// waited `request_body_ms_max` for room, the node closes the connection.
#[test]
fn an_answer_the_client_never_makes_room_for_closes_the_connection() {
    let idle_max = Duration::from_millis(1000);
    let server = start_with_idle_bound(idle_max);
    let addr = server.bound.http;
    // Far more than the client's stream window (2 MiB by default), so the rest must wait.
    let chunk = large_chunk();
    let client = HttpClient::new(&addr.to_string(), None);
    server.rt.block_on(async {
        let id = put_chunk(&client, &chunk).await;
        let (mut send, conn, unread) = get_over_h2(addr, &id).await;
        // Keep the connection busy with small requests, a tenth of the bound apart, and the
        // unread answer's body held: the node must close the connection within a few
        // bounds, not serve it for ever.
        let started = std::time::Instant::now();
        let mut answered = 0;
        loop {
            match send.send_request(get("/v1/status")).await {
                Ok(resp) => {
                    assert_eq!(resp.status(), StatusCode::OK);
                    json_body(resp).await;
                    answered += 1;
                }
                Err(_) => break,
            }
            assert!(
                started.elapsed() < idle_max * 20,
                "the connection with an unread answer was kept open ({answered} answers since)"
            );
            tokio::time::sleep(idle_max / 10).await;
        }
        assert!(answered >= 5, "closed too soon: {answered} answers");
        let _ = tokio::time::timeout(Duration::from_secs(30), conn)
            .await
            .expect("the connection's task went on");
        // What the client had not taken never comes: the body ends in an error.
        let rest = unread.into_body().collect().await;
        assert!(rest.is_err(), "the unread answer came whole after all");

        // A client that reads gets the whole answer.
        let (status, body) = client
            .request(Method::GET, &format!("/v1/chunks/{id}"), None)
            .await
            .unwrap();
        assert!(status.is_success());
        assert!(body == chunk);
    });
    server.stop();
}

#[test]
fn a_read_waiting_at_shutdown_is_answered_and_does_not_hold_the_shutdown() {
    // The read would wait a minute, three times the shutdown's budget, and outlasts the
    // idle bound and the one-second force-close bound after the stop.
    let server = common::TestServer::start(|c| {
        c.request_body_ms_max = 1000;
        c.shutdown_ms_max = 20_000;
    });
    let addr = server.bound.http;
    // The client on a runtime of its own: the server's stops with it.
    let client_rt = tokio::runtime::Runtime::new().unwrap();
    let (arrived, has_arrived) = std::sync::mpsc::channel();
    let pending = client_rt.spawn(async move {
        let (mut send, _conn) = h2_connect(addr).await;
        let read = send.send_request(get("/v1/item?node=x&min_index=1000&timeout_ms=60000"));
        // A request sent after it on the same connection is answered: the read's head has
        // reached the node before this one's.
        let resp = send.send_request(get("/v1/status")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        arrived.send(()).unwrap();
        let resp = read.await.unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    });
    // Stop while the read waits (it cannot be answered before its timeout).
    has_arrived.recv().unwrap();
    assert!(!pending.is_finished());
    server.stop();
    // Before reads stopped waiting at shutdown, the stop took the whole 20 s budget and
    // the read got no answer (its request was cut when the HTTP phase ran out).
    let (status, body) = client_rt.block_on(pending).unwrap();
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("shutting_down"), "{body}");
}

#[test]
fn heads_have_the_bounds_they_have_over_http1() {
    let server = common::TestServer::start(|_| {});
    let addr = server.bound.http;
    server.rt.block_on(async {
        let (mut send, _conn) = h2_connect(addr).await;
        // A first request, so that the node's settings have been acknowledged (until then
        // the HTTP/2 layer's defaults hold).
        let resp = send.send_request(get("/v1/status")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        // 32 KiB of headers: within the API's 64 KiB (and above the HTTP/2 layer's default).
        let req = hyper::Request::get("/v1/status")
            .header("x-pad", "p".repeat(32 << 10))
            .body(http_body_util::Full::default())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        // 100 KiB: the API's JSON refusal.
        let req = hyper::Request::get("/v1/status")
            .header("x-pad", "p".repeat(100 << 10))
            .body(http_body_util::Full::default())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let body = json_body(resp).await;
        assert_eq!(body["error"], "headers_too_large", "{body}");
    });
    server.stop();
}

#[test]
fn a_refused_body_ends_its_stream_and_the_connection_goes_on() {
    let server = common::TestServer::start(|c| c.request_body_bytes_max = 1024);
    let addr = server.bound.http;
    server.rt.block_on(async {
        let io = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(io),
        )
        .await
        .unwrap();
        let conn = tokio::spawn(conn);
        let big = format!(
            r#"{{"writes":[{{"item":{{"kind":"node","id":"big"}},"value":{{"s":"{}"}}}}]}}"#,
            "x".repeat(4096)
        );
        let req = hyper::Request::post("/v1/txn")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(big)))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
        // The same connection still serves.
        let small = r#"{"writes":[{"item":{"kind":"node","id":"small"},"value":{"s":1}}]}"#;
        let req = hyper::Request::post("/v1/txn")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(small)))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(!conn.is_finished(), "the connection was closed");
        drop(send);
        let _ = conn.await;
    });
    server.stop();
}
