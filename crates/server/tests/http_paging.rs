//! `/v1/history`, `/v1/out_edges` and `/v1/index` answer pages of at most `limit` entries with a `next`
//! cursor; following the cursors yields exactly the whole list once, in order, and bad
//! `limit`/`after` values are refused.

mod common;

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::HttpClient;

/// Follow `next` from `first_path` until the last page; returns the entries (under `field`)
/// and the number of pages.
async fn all_pages(client: &HttpClient, first_path: &str, field: &str) -> (Vec<Value>, usize) {
    let (mut out, mut pages) = (Vec::new(), 0);
    let mut path = first_path.to_owned();
    loop {
        let (status, answer) = client.json(Method::GET, &path, None).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        pages += 1;
        let entries = answer[field].as_array().unwrap();
        assert!(!entries.is_empty(), "{path}: an empty page");
        out.extend(entries.iter().cloned());
        match &answer["next"] {
            Value::Null => return (out, pages),
            Value::Number(n) => path = format!("{first_path}&after={n}"),
            Value::String(s) => {
                let encoded: String = s.bytes().map(|b| format!("%{b:02X}")).collect();
                path = format!("{first_path}&after={encoded}");
            }
            other => panic!("next is {other}"),
        }
    }
}

#[test]
fn history_and_out_edges_are_paged() {
    let server = common::TestServer::start(|c| {
        c.index_views = vec![spindle_server::config::IndexConfig {
            name: "by_name".into(),
            pointer: "/name".into(),
        }];
    });
    let client = server.http(None);
    server.rt.block_on(async {
        let mut writes = Vec::new();
        // 37 nodes share a name (ids that sort differently as numbers and as bytes), one
        // has another.
        for i in 0..37 {
            writes.push(json!({"item": {"kind": "node", "id": format!("p{i}")}, "value": {"name": "same"}}));
        }
        writes.push(json!({"item": {"kind": "node", "id": "q"}, "value": {"name": "other"}}));
        for i in 0..25 {
            writes.push(json!({"item": {"kind": "node", "id": "n"}, "value": {"i": i}}));
        }
        // Labels and targets that a naive "label/to" cursor would confuse.
        for i in 0..23 {
            let label = ["a", "a:b", "a/b"][i % 3];
            let to = format!("t{}:{}", i % 7, i);
            writes.push(json!({"item": {"kind": "edge", "from": "n", "label": label, "to": to}, "value": {"i": i}}));
        }
        let (status, answer) = client
            .json(Method::POST, "/v1/txn", Some(&json!({"writes": writes})))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        let last = answer["index"].as_u64().unwrap();

        // The Index View applies the log after the append answers: wait for it.
        let base = "/v1/index/by_name?value=%22same%22";
        let mut waited = 0;
        let whole = loop {
            let (status, answer) = client.json(Method::GET, base, None).await.unwrap();
            if status == StatusCode::OK && answer["applied_index"].as_u64() >= Some(last) {
                break answer;
            }
            waited += 1;
            assert!(waited < 500, "the index did not apply {last}: {answer}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        let whole: Vec<Value> = whole["nodes"].as_array().unwrap().clone();
        let mut want: Vec<String> = (0..37).map(|i| format!("p{i}")).collect();
        want.sort();
        assert_eq!(whole, want.iter().map(|s| json!(s)).collect::<Vec<_>>());
        for limit in [1, 5, 36, 37] {
            let (paged, pages) = all_pages(&client, &format!("{base}&limit={limit}"), "nodes").await;
            assert_eq!(paged, whole, "limit {limit}");
            assert_eq!(pages, 37usize.div_ceil(limit), "limit {limit}");
        }

        let base = format!("/v1/history?node=n&min_index={last}");
        let (whole, pages) = all_pages(&client, &base, "versions").await;
        assert_eq!(pages, 1);
        assert_eq!(whole.len(), 25);
        let (paged, pages) = all_pages(&client, &format!("{base}&limit=10"), "versions").await;
        assert_eq!(pages, 3);
        assert_eq!(paged, whole);

        let base = format!("/v1/out_edges?node=n&as_of={last}");
        let (whole, pages) = all_pages(&client, &base, "edges").await;
        assert_eq!((whole.len(), pages), (23, 1));
        for limit in [1, 4, 22, 23] {
            let (paged, _) = all_pages(&client, &format!("{base}&limit={limit}"), "edges").await;
            assert_eq!(paged, whole, "limit {limit}");
        }
        let labelled = format!("{base}&label=a%3Ab");
        let (whole_ab, _) = all_pages(&client, &labelled, "edges").await;
        assert_eq!(whole_ab.len(), 8);
        let (paged_ab, pages) = all_pages(&client, &format!("{labelled}&limit=3"), "edges").await;
        assert_eq!((paged_ab, pages), (whole_ab, 3));

        for path in [
            "/v1/index/by_name?value=1&limit=0",
            "/v1/index/by_name?value=1&limit=10001",
            "/v1/history?node=n&limit=0",
            "/v1/history?node=n&limit=10001",
            "/v1/history?node=n&after=x",
            "/v1/out_edges?node=n&after=9:ab",
            "/v1/out_edges?node=n&after=nocolon",
        ] {
            let (status, answer) = client.json(Method::GET, path, None).await.unwrap();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
            assert_eq!(answer["error"], "bad_request");
        }
    });
    server.stop();
}
