//! Bad requests get a 4xx with a JSON error that says what is wrong, and change nothing: the
//! log's durable index and every view stay where they were.

mod common;

use hyper::{Method, StatusCode};
use serde_json::json;

#[test]
fn bad_requests_are_refused_with_json_errors_and_change_nothing() {
    let server = common::TestServer::start(|c| c.request_body_bytes_max = 4096);
    let client = server.http(None);
    server.rt.block_on(async {
        let ok = json!({"writes": [{"item": {"kind": "node", "id": "a"}, "value": {"x": 1}}]});
        let (status, _) = client.json(Method::POST, "/v1/txn", Some(&ok)).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        let durable = server.node.log.durable_index();
        let node = |id: &str| json!({"kind": "node", "id": id});
        let bad_txns = [
            (json!({"writes": []}), "no writes"),
            (json!({"writes": [{"item": node(""), "value": {}}]}), "empty"),
            (json!({"writes": [{"item": node("a"), "value": [1]}]}), "JSON object"),
            (json!({"writes": [{"item": node("a")}]}), "delete: true"),
            (json!({"writes": [{"item": node("a"), "value": {}, "delete": true}]}), "both"),
            (json!({"writes": [{"item": {"kind": "vertex", "id": "a"}, "value": {}}]}), "request body"),
            (json!({"writes": [{"item": node("a"), "value": {}}], "extra": 1}), "unknown field"),
            (json!({"writes": [{"item": node("a"), "value": {}}],
                    "conditions": [{"item": node("a"), "version": 0}, {"item": node("a"), "version": 1}]}),
             "appears twice"),
            (json!({"writes": [{"item": node(&"x".repeat(2000)), "value": {}}]}), "limit"),
        ];
        for (body, says) in bad_txns {
            let (status, answer) = client.json(Method::POST, "/v1/txn", Some(&body)).await.unwrap();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {answer}");
            assert_eq!(answer["error"], "bad_request");
            let message = answer["message"].as_str().unwrap();
            assert!(message.contains(says), "{body}: {message:?} does not say {says:?}");
        }
        // Not JSON at all, and too large.
        let (status, answer) = client
            .request(Method::POST, "/v1/txn", Some(b"{not json".to_vec()))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer:?}");
        let big = format!("{{\"writes\":[{{\"item\":{{\"kind\":\"node\",\"id\":\"b\"}},\"value\":{{\"s\":\"{}\"}}}}]}}", "y".repeat(5000));
        let (status, answer) = client.request(Method::POST, "/v1/txn", Some(big.into_bytes())).await.unwrap();
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer:?}");
        let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert!(answer["message"].as_str().unwrap().contains("4096"));
        // A conflict names the failed condition and writes nothing.
        let conflict = json!({"writes": [{"item": node("a"), "value": {}}],
                              "conditions": [{"item": node("a"), "version": 0}]});
        let (status, answer) = client.json(Method::POST, "/v1/txn", Some(&conflict)).await.unwrap();
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(answer["failed"][0]["expected"], 0);
        assert_eq!(answer["failed"][0]["actual"], 1);
        // Reads with bad parameters.
        for (path, status_wanted) in [
            ("/v1/item", StatusCode::BAD_REQUEST),
            ("/v1/item?node=a&as_of=x", StatusCode::BAD_REQUEST),
            ("/v1/item?node=a&nonsense=1", StatusCode::BAD_REQUEST),
            ("/v1/item?from=a&label=l", StatusCode::BAD_REQUEST),
            ("/v1/item?node=a&label=l", StatusCode::BAD_REQUEST),
            ("/v1/history?node=a&label=l", StatusCode::BAD_REQUEST),
            ("/v1/item?node=a&timeout_ms=99999999", StatusCode::BAD_REQUEST),
            ("/v1/item?node=never", StatusCode::NOT_FOUND),
            ("/v1/item?node=a&min_index=999&timeout_ms=10", StatusCode::GATEWAY_TIMEOUT),
            ("/v1/index/missing?value=1", StatusCode::NOT_FOUND),
            ("/v1/chunks/zz", StatusCode::BAD_REQUEST),
            ("/v1/nowhere", StatusCode::NOT_FOUND),
        ] {
            let (status, answer) = client.json(Method::GET, path, None).await.unwrap();
            assert_eq!(status, status_wanted, "{path}: {answer}");
            assert!(answer["message"].is_string(), "{path}: {answer}");
        }
        // A chunk whose bytes do not hash to the id in the URL is refused and not stored.
        let id = "0".repeat(64);
        let (status, _) = client
            .request(Method::PUT, &format!("/v1/chunks/{id}"), Some(b"abc".to_vec()))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(server.node.chunks.len(), 0);
        // Endpoints that take no query parameters refuse any, even with a body that would
        // be accepted without it; `?` alone is no parameter.
        let chunk = format!("/v1/chunks/{id}");
        for (method, path, body) in [
            (Method::POST, "/v1/txn?dry_run=1".to_string(), Some(serde_json::to_vec(&ok).unwrap())),
            (Method::POST, "/v1/multiget?x=1".to_string(), Some(b"{\"items\": []}".to_vec())),
            (Method::POST, "/v1/chunks?x=1".to_string(), Some(b"abc".to_vec())),
            (Method::GET, format!("{chunk}?x=1"), None),
            (Method::DELETE, format!("{chunk}?x=1"), None),
            (Method::GET, "/v1/status?verbose=1".to_string(), None),
            (Method::GET, "/v1/status/stream?interval=5".to_string(), None),
            (Method::GET, "/metrics?name=x".to_string(), None),
            (Method::GET, "/openapi.json?v=3".to_string(), None),
            (Method::GET, "/?x=%FF".to_string(), None),
        ] {
            let (status, answer) = client.request(method.clone(), &path, body).await.unwrap();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {answer:?}");
            let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
            assert_eq!(answer["error"], "bad_request", "{method} {path}");
        }
        let (status, _) = client.json(Method::GET, "/v1/status?", None).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(server.node.chunks.len(), 0);
        assert_eq!(server.node.log.durable_index(), durable, "a refused request wrote to the log");
        let (_, m) = client.request(Method::GET, "/metrics", None).await.unwrap();
        let m = String::from_utf8(m.to_vec()).unwrap();
        assert!(m.contains("spindle_bad_requests_total"), "{m}");
        assert!(m.contains("spindle_append_conflicts_total 1"), "{m}");
    });
    server.stop();
}

/// A transaction with more writes or conditions than the limit is refused as soon as the
/// decoder reads one too many (not after decoding the whole body), and writes nothing.
#[test]
fn too_many_writes_or_conditions_are_refused_early() {
    let server = common::TestServer::start(|_| {});
    let client = server.http(None);
    server.rt.block_on(async {
        let write =
            |i: usize| json!({"item": {"kind": "node", "id": format!("n{i}")}, "value": {}});
        let condition =
            |i: usize| json!({"item": {"kind": "node", "id": format!("n{i}")}, "version": 0});
        let limit = spindle_core::TXN_RECORDS_MAX;
        let too_many_writes = json!({"writes": (0..=limit).map(write).collect::<Vec<_>>()});
        let too_many_conditions = json!({"writes": [write(0)],
            "conditions": (0..=limit).map(condition).collect::<Vec<_>>()});
        for body in [too_many_writes, too_many_conditions] {
            let (status, answer) = client
                .json(Method::POST, "/v1/txn", Some(&body))
                .await
                .unwrap();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
            let message = answer["message"].as_str().unwrap();
            assert!(message.contains(&format!("more than {limit}")), "{message}");
        }
        assert_eq!(
            server.node.log.durable_index().get(),
            0,
            "a refused transaction was written"
        );
        // At the limit, it is taken.
        let full = json!({"writes": (0..limit).map(write).collect::<Vec<_>>()});
        let (status, answer) = client
            .json(Method::POST, "/v1/txn", Some(&full))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
    });
    server.stop();
}
