//! Every refusal has the JSON error shape `{"error": CODE, "message": TEXT}`: a wrong method
//! (405), an unknown chunk on DELETE (404), an over-long request target (414) or header
//! block (431), a declared body over the limit (413, answered before any body byte, and the
//! connection closed), a body that stops arriving (408, connection closed), item objects with
//! unknown fields and multiget waits above `read_wait_ms_max` (400).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;

fn assert_error_shape(what: &str, body: &[u8], code: &str) {
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}): {:?}",
            String::from_utf8_lossy(body)
        )
    });
    assert_eq!(answer["error"], code, "{what}: {answer}");
    assert!(
        answer["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {answer}"
    );
}

/// Send `head` (and `body`) on a fresh connection; read the whole answer until the server
/// closes the connection. The read timeout only keeps a broken server from hanging the test.
fn raw_exchange(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .expect("the server closed the connection");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status: u16 = text.split(' ').nth(1).unwrap().parse().unwrap();
    let split = text.find("\r\n\r\n").unwrap() + 4;
    let mut body = answer[split..].to_vec();
    if text[..split]
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let len = usize::from_str_radix(std::str::from_utf8(&b[..line]).unwrap(), 16).unwrap();
        if len == 0 {
            return out;
        }
        out.extend_from_slice(&b[line + 2..line + 2 + len]);
        b = &b[line + 4 + len..];
    }
}

#[test]
fn every_refusal_has_the_json_error_shape() {
    let server = common::TestServer::start(|c| {
        c.request_body_bytes_max = 4096;
        c.request_body_ms_max = 300;
        c.read_wait_ms_max = 1000;
    });
    let client = server.http(None);
    let addr = server.bound.http;
    server.rt.block_on(async {
        let durable = server.node.log.durable_index();
        // 405: the endpoint exists, the method does not.
        for (method, path) in [
            (Method::GET, "/v1/txn"),
            (Method::DELETE, "/v1/item?node=a"),
            (Method::PUT, "/v1/chunks"),
        ] {
            let (status, body) = client.request(method.clone(), path, None).await.unwrap();
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_error_shape(&format!("{method} {path}"), &body, "method_not_allowed");
        }
        // 404 of an unknown chunk on DELETE.
        let path = format!("/v1/chunks/{}", "0".repeat(64));
        let (status, body) = client.request(Method::DELETE, &path, None).await.unwrap();
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_error_shape("DELETE unknown chunk", &body, "not_found");
        // 414: a request target over the bound.
        let long = format!("/v1/item?node={}", "x".repeat(20 << 10));
        let (status, body) = client.request(Method::GET, &long, None).await.unwrap();
        assert_eq!(status, StatusCode::URI_TOO_LONG);
        assert_error_shape("long URI", &body, "uri_too_long");
        // Item objects with unknown fields, and multiget waits above the bound.
        let item_extra =
            json!({"writes": [{"item": {"kind": "node", "id": "a", "x": 1}, "value": {}}]});
        let (status, answer) = client
            .json(Method::POST, "/v1/txn", Some(&item_extra))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("unknown field"),
            "{answer}"
        );
        let edge_extra =
            json!({"items": [{"kind": "edge", "from": "a", "label": "l", "to": "b", "id": "c"}]});
        let (status, answer) = client
            .json(Method::POST, "/v1/multiget", Some(&edge_extra))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let slow =
            json!({"items": [{"kind": "node", "id": "a"}], "min_index": 1, "timeout_ms": 5000});
        let (status, answer) = client
            .json(Method::POST, "/v1/multiget", Some(&slow))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("read_wait_ms_max"),
            "{answer}"
        );
        assert_eq!(server.node.log.durable_index(), durable, "a refusal wrote");
    });
    // 431: a header block over the bound.
    let head = format!(
        "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "h".repeat(70 << 10)
    );
    let (status, body) = raw_exchange(addr, &head, b"");
    assert_eq!(status, 431);
    assert_error_shape("big headers", &body, "headers_too_large");
    // 413 before any body byte is sent: the connection is closed after the answer.
    let head = "POST /v1/txn HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n";
    let (status, body) = raw_exchange(addr, head, b"");
    assert_eq!(status, 413);
    assert_error_shape("declared too large", &body, "body_too_large");
    // A body that stops arriving: 408, and the connection is closed.
    let head = "POST /v1/txn HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n";
    let (status, body) = raw_exchange(addr, head, b"{\"writes\"");
    assert_eq!(status, 408);
    assert_error_shape("stalled body", &body, "body_timeout");
    server.stop();
}

/// A node that keeps no Memory View answers a multiget `404 no_memory_view`, at once and
/// every time: `503 booting` would have a client retry for a boot that never comes.
#[test]
fn a_multiget_on_a_node_without_a_memory_view_is_refused_for_good() {
    let server = common::TestServer::start(|c| c.memory_view = false);
    let client = server.http(None);
    server.rt.block_on(async {
        let ask = json!({"items": [{"kind": "node", "id": "a"}]});
        for _ in 0..2 {
            let (status, body) = client
                .request(
                    Method::POST,
                    "/v1/multiget",
                    Some(serde_json::to_vec(&ask).unwrap()),
                )
                .await
                .unwrap();
            assert_eq!(status, StatusCode::NOT_FOUND);
            assert_error_shape("multiget without a Memory View", &body, "no_memory_view");
        }
    });
    server.stop();
}
