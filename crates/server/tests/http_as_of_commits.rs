//! `as_of` must name a commit: a read as of an index inside a transaction of several
//! records would show part of that transaction (an item written twice, half of a node's
//! new edges), so it is refused with `400`, naming the transaction's commit index; as of
//! the commit, or of an earlier one, the read answers the state that commit made.

mod common;

use hyper::{Method, StatusCode};
use serde_json::json;

#[test]
fn a_read_as_of_an_index_inside_a_transaction_is_refused() {
    let server = common::TestServer::start(|_| {});
    let client = server.http(None);
    server.rt.block_on(async {
        let post = |txn: serde_json::Value| {
            let client = &client;
            async move { common::post_txn(client, &txn).await }
        };
        let edge = |to: &str| json!({"kind": "edge", "from": "a", "label": "knows", "to": to});
        let first = post(json!({"writes": [
            {"item": {"kind": "node", "id": "a"}, "value": {"v": 1}},
        ]}))
        .await;
        // One transaction: a written twice and two edges from it (4 records).
        let commit = post(json!({"writes": [
            {"item": {"kind": "node", "id": "a"}, "value": {"v": 2}},
            {"item": edge("b"), "value": {}},
            {"item": edge("c"), "value": {}},
            {"item": {"kind": "node", "id": "a"}, "value": {"v": 3}},
        ]}))
        .await;
        assert_eq!(commit, first + 4);
        let get = |path: String| {
            let client = &client;
            async move { client.json(Method::GET, &path, None).await.unwrap() }
        };
        for inside in first + 1..commit {
            for path in [
                format!("/v1/item?node=a&as_of={inside}"),
                format!("/v1/out_edges?node=a&as_of={inside}"),
            ] {
                let (status, answer) = get(path.clone()).await;
                assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
                let message = answer["message"].as_str().unwrap();
                assert!(
                    message.contains("inside a transaction")
                        && message.contains(&format!("commit index is {commit}")),
                    "{path}: {message}"
                );
            }
        }
        // As of the commit: the whole transaction.
        let (status, answer) = get(format!("/v1/item?node=a&as_of={commit}")).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["value"]["v"], 3);
        let (status, answer) = get(format!("/v1/out_edges?node=a&as_of={commit}")).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["edges"].as_array().unwrap().len(), 2, "{answer}");
        // As of the commit before: none of it.
        let (status, answer) = get(format!("/v1/item?node=a&as_of={first}")).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["value"]["v"], 1);
        let (status, answer) = get(format!("/v1/out_edges?node=a&as_of={first}")).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["edges"].as_array().unwrap().len(), 0, "{answer}");
    });
    server.stop();
}
