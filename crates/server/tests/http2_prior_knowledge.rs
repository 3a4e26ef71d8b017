//! The HTTP listener also speaks HTTP/2 with prior knowledge (h2c): many requests in flight
//! on one connection are answered as over HTTP/1, the token is required the same way, and an
//! HTTP/2 connection with nothing in flight is closed after `request_body_ms_max`, as an idle
//! HTTP/1 connection is, while a connection that keeps working stays open.

mod common;

use std::time::{Duration, Instant};

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
                answer["index"].as_u64().expect("an index")
            }
        });
        let mut indexes = futures_util::future::join_all(writes).await;
        indexes.sort_unstable();
        indexes.dedup();
        assert_eq!(indexes, (1..=200).collect::<Vec<u64>>(), "one index each");
        // The last write of each item is what a read answers.
        let (status, item) = client
            .json(Method::GET, "/v1/item?node=n7", None)
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{item}");
        assert_eq!(item["value"]["i"], 157, "{item}");
    });
    server.stop();
}

/// Open an HTTP/2 connection (answering the server's pings), send one request, and return
/// how long after its answer the server closed the connection.
async fn closed_after_idle(addr: std::net::SocketAddr, pause: Option<Duration>) -> Duration {
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .unwrap();
    let conn = tokio::spawn(conn);
    let mut requests = 1 + pause.map_or(0, |_| 3);
    let mut answered = Instant::now();
    while requests > 0 {
        let req = hyper::Request::get("/v1/status")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        answered = Instant::now();
        requests -= 1;
        if let (Some(pause), true) = (pause, requests > 0) {
            tokio::time::sleep(pause).await;
        }
    }
    // A server that never closes fails the test here, far above its bound.
    tokio::time::timeout(Duration::from_secs(20), conn)
        .await
        .expect("the idle HTTP/2 connection was held open")
        .unwrap()
        .unwrap();
    answered.elapsed()
}

#[test]
fn an_idle_http2_connection_is_closed_and_a_busy_one_is_not() {
    let idle_max = Duration::from_millis(400);
    let server = common::TestServer::start(|c| c.request_body_ms_max = idle_max.as_millis() as u64);
    let addr = server.bound.http;
    server.rt.block_on(async {
        // Idle after one request: closed, and not before the bound.
        let after = closed_after_idle(addr, None).await;
        assert!(after >= idle_max, "closed {after:?} after its last answer");
        // Requests every half of the bound keep it open: four of them span 1.5 bounds,
        // and the connection closes only once they stop.
        let after = closed_after_idle(addr, Some(idle_max / 2)).await;
        assert!(after >= idle_max, "closed {after:?} after its last answer");
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
        assert!(resp.headers().get("connection").is_none());
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
