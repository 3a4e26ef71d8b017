//! Over HTTP, a deleted item does not exist for conditions: `"version": 0` re-creates it,
//! the delete's index (the one a read of it names) holds too, and a live item's 0-condition
//! is a 409 that names its version.

mod common;

use hyper::{Method, StatusCode};
use serde_json::json;

#[test]
fn version_zero_holds_for_a_deleted_item() {
    let server = common::TestServer::start(|_| {});
    let client = server.http(None);
    let a = json!({"kind": "node", "id": "a"});
    server.rt.block_on(async {
        let post = |body: serde_json::Value| {
            let client = client.clone();
            async move {
                client
                    .json(Method::POST, "/v1/txn", Some(&body))
                    .await
                    .unwrap()
            }
        };
        let create = json!({"writes": [{"item": a, "value": {"v": 1}}],
                            "conditions": [{"item": a, "version": 0}]});
        let (status, _) = post(create.clone()).await;
        assert_eq!(status, StatusCode::OK);
        let (status, answer) = post(create.clone()).await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        assert_eq!(answer["failed"][0]["actual"], 1);
        let (status, answer) = post(json!({"writes": [{"item": a, "delete": true}]})).await;
        assert_eq!(status, StatusCode::OK);
        let deleted_at = answer["index"].as_u64().unwrap();
        let (status, answer) = client
            .json(
                Method::GET,
                &format!("/v1/item?node=a&min_index={deleted_at}"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(
            (status, &answer["error"]),
            (StatusCode::NOT_FOUND, &json!("deleted"))
        );
        assert_eq!(answer["version"], deleted_at);
        // The delete's index names the deleted item exactly (checked with a failing
        // condition beside it so nothing is written).
        let exact = json!({"writes": [{"item": a, "value": {"v": 2}}],
                           "conditions": [{"item": a, "version": deleted_at},
                                          {"item": {"kind": "node", "id": "b"}, "version": 9}]});
        let (status, answer) = post(exact).await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        assert_eq!(answer["failed"].as_array().unwrap().len(), 1, "{answer}");
        // "Must not exist" re-creates it.
        let (status, answer) = post(create.clone()).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let (status, answer) = post(create).await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    });
    server.stop();
}
