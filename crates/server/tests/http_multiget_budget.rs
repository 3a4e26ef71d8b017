//! One small multiget cannot make the node copy gigabytes: asking for one large item many
//! times over passes the bound on an answer's values (64 MiB), and the answer is `400` with
//! a message saying so; below it, the same item asked for several times is answered. A
//! multiget of more than 10,000 items is refused while it is decoded, not after.

mod common;

use hyper::{Method, StatusCode};
use serde_json::json;

#[test]
fn a_multiget_whose_values_pass_the_bound_is_refused() {
    let server = common::TestServer::start(|_| {});
    let client = server.http(None);
    server.rt.block_on(async {
        // A value of about 900 KiB, under the record limit.
        let big = "x".repeat(900 << 10);
        let txn = json!({"writes": [{"item": {"kind": "node", "id": "big"}, "value": {"s": big}}]});
        let (status, answer) = client
            .json(Method::POST, "/v1/txn", Some(&txn))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        let index = answer["index"].as_u64().unwrap();
        let ask = |times: usize| {
            json!({
                "items": vec![json!({"kind": "node", "id": "big"}); times],
                "min_index": index,
            })
        };
        // 100 × 900 KiB is past 64 MiB.
        let (status, answer) = client
            .json(Method::POST, "/v1/multiget", Some(&ask(100)))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["error"], "bad_request");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains("ask for fewer items"), "{message}");
        // Four times is well within it: four copies of the value.
        let (status, answer) = client
            .json(Method::POST, "/v1/multiget", Some(&ask(4)))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK);
        let values = answer["values"].as_array().unwrap();
        assert_eq!(values.len(), 4);
        assert!(values
            .iter()
            .all(|v| v["value"]["s"].as_str() == Some(&big)));
    });
}

#[test]
fn a_multiget_of_too_many_items_is_refused_as_it_is_read() {
    let server = common::TestServer::start(|_| {});
    let client = server.http(None);
    server.rt.block_on(async {
        let ask = |n: usize| {
            json!({"items": (0..n).map(|i| json!({"kind": "node", "id": format!("n{i}")})).collect::<Vec<_>>()})
        };
        let (status, answer) = client
            .json(Method::POST, "/v1/multiget", Some(&ask(10_000)))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["values"].as_array().unwrap().len(), 10_000);
        // One more: refused by the decoder at the 10,001st item (its message says so), so
        // a body of a million items is never decoded whole.
        let (status, answer) = client
            .json(Method::POST, "/v1/multiget", Some(&ask(10_001)))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains("more than 10000 entries"), "{message}");
    });
}
