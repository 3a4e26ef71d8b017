//! A value is stored as the exact JSON text the client sent — key order, whitespace,
//! escapes and numbers beyond 64 bits included — and every read (item, as_of, history,
//! out-edges, multiget) answers those bytes verbatim; so does a value sent by `spindle load`.

mod common;

use hyper::{Method, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use spindle_server::client::HttpClient;

/// Values whose text any re-serialisation would change.
const VALUES: [&str; 4] = [
    r#"{"z":1,"a":2,"m":{"y":true,"b":null}}"#,
    r#"{ "spaced" :  [ 1 , 2 ]	,"tab":"x" }"#,
    r#"{"big":123456789012345678901234567890,"small":-0.10,"exp":1E+2}"#,
    r#"{"escaped":"\u00e9\n\/","dup":1,"dup":2}"#,
];

#[derive(Deserialize)]
struct Versioned<'a> {
    #[serde(borrow)]
    value: Option<&'a RawValue>,
}

async fn get(client: &HttpClient, path: &str) -> Vec<u8> {
    let (status, body) = client.request(Method::GET, path, None).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{path}: {body:?}");
    body.to_vec()
}

fn raw<'a>(answer: &'a [u8], field: &str) -> Vec<&'a str> {
    #[derive(Deserialize)]
    struct List<'a> {
        #[serde(borrow, default)]
        versions: Vec<Versioned<'a>>,
        #[serde(borrow, default)]
        edges: Vec<Versioned<'a>>,
        #[serde(borrow, default)]
        values: Vec<Option<Versioned<'a>>>,
    }
    let list: List<'a> = serde_json::from_slice(answer).unwrap();
    let items: Vec<Option<&RawValue>> = match field {
        "versions" => list.versions.iter().map(|v| v.value).collect(),
        "edges" => list.edges.iter().map(|v| v.value).collect(),
        _ => list
            .values
            .iter()
            .map(|v| v.as_ref().and_then(|v| v.value))
            .collect(),
    };
    items.into_iter().map(|v| v.unwrap().get()).collect()
}

#[test]
fn values_come_back_byte_for_byte() {
    let server = common::TestServer::start(|_| {});
    let client = server.http(None);
    server.rt.block_on(async {
        let mut last = 0;
        for (i, value) in VALUES.iter().enumerate() {
            // The body is sent as text, exactly as a client would type it.
            let body = format!(
                r#"{{"writes":[{{"item":{{"kind":"node","id":"n"}},"value": {value} }},
                   {{"item":{{"kind":"edge","from":"n","label":"l","to":"t{i}"}},"value":{value}}}]}}"#
            );
            let (status, answer) = client
                .request(Method::POST, "/v1/txn", Some(body.into_bytes()))
                .await
                .unwrap();
            assert_eq!(status, StatusCode::OK, "{answer:?}");
            let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
            last = answer["index"].as_u64().unwrap();
        }
        let latest = get(&client, &format!("/v1/item?node=n&min_index={last}")).await;
        let latest: Versioned = serde_json::from_slice(&latest).unwrap();
        assert_eq!(latest.value.unwrap().get(), VALUES[3]);
        for (i, value) in VALUES.iter().enumerate() {
            // As of each transaction's commit (its second record).
            let at = get(&client, &format!("/v1/item?node=n&as_of={}", 2 * i + 2)).await;
            let at: Versioned = serde_json::from_slice(&at).unwrap();
            assert_eq!(at.value.unwrap().get(), *value);
        }
        let history = get(&client, "/v1/history?node=n").await;
        assert_eq!(raw(&history, "versions"), VALUES);
        let edges = get(&client, "/v1/out_edges?node=n").await;
        assert_eq!(raw(&edges, "edges"), VALUES);
        let items: Vec<String> = (0..VALUES.len())
            .map(|i| format!(r#"{{"kind":"edge","from":"n","label":"l","to":"t{i}"}}"#))
            .collect();
        let body = format!(r#"{{"items":[{}],"min_index":{last}}}"#, items.join(","));
        let (status, multi) = client
            .request(Method::POST, "/v1/multiget", Some(body.into_bytes()))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{multi:?}");
        assert_eq!(raw(&multi, "values"), VALUES);

        // `spindle load` sends each line's value as written too.
        let lines: String = VALUES
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{{\"item\":{{\"kind\":\"node\",\"id\":\"load{i}\"}},\"value\":{v}}}\n"))
            .collect();
        let report = spindle_server::load::load(&client, lines.as_bytes(), 2, 1, |_| {})
            .await
            .unwrap();
        for (i, value) in VALUES.iter().enumerate() {
            let path = format!("/v1/item?node=load{i}&min_index={}", report.last_index);
            let one = get(&client, &path).await;
            let one: Versioned = serde_json::from_slice(&one).unwrap();
            assert_eq!(one.value.unwrap().get(), *value);
        }
    });
    server.stop();
}
