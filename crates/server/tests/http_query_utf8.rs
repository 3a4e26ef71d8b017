//! Query parameters and path segments whose percent-decoded bytes are not UTF-8 (or whose
//! escapes are malformed, or that repeat) are refused with a JSON `400`; they never read an
//! item whose name has U+FFFD in place of the bad bytes.

mod common;

use hyper::{Method, StatusCode};
use serde_json::json;

#[test]
fn invalid_utf8_in_queries_and_paths_is_refused() {
    let server = common::TestServer::start(|c| {
        c.index_views = vec![spindle_server::config::IndexConfig {
            name: "by_name".into(),
            pointer: "/name".into(),
        }]
    });
    let client = server.http(None);
    server.rt.block_on(async {
        // The item a lossy decoder would read instead.
        let replacement = json!({"writes": [
            {"item": {"kind": "node", "id": "\u{FFFD}"}, "value": {"name": "\u{FFFD}"}},
            {"item": {"kind": "edge", "from": "\u{FFFD}", "label": "l", "to": "t"}, "value": {}}
        ]});
        let (status, answer) = client
            .json(Method::POST, "/v1/txn", Some(&replacement))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        let index = answer["index"].as_u64().unwrap();
        let (status, _) = client
            .json(
                Method::GET,
                &format!("/v1/item?node=%EF%BF%BD&min_index={index}"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "the correctly encoded name reads");
        for path in [
            "/v1/item?node=%FF",
            "/v1/item?node=%EF%BF",
            "/v1/item?from=%FF&label=l&to=t",
            "/v1/item?node=a%ZZ",
            "/v1/item?node=a&node=b",
            "/v1/item?%FF=a",
            "/v1/history?node=%FF",
            "/v1/out_edges?node=%FF",
            "/v1/out_edges?node=%EF%BF%BD&label=%C0%80",
            "/v1/index/by_name?value=%22%FF%22",
            "/v1/chunks/%FF",
            "/v1/index/%FF?value=1",
        ] {
            let (status, answer) = client.json(Method::GET, path, None).await.unwrap();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
            assert_eq!(answer["error"], "bad_request", "{path}: {answer}");
            assert!(answer["message"].is_string(), "{path}: {answer}");
        }
    });
    server.stop();
}
