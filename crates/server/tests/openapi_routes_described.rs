//! `/openapi.json` describes exactly the routes the router serves: the same (path, method)
//! pairs as the route table and as the router itself, every documented operation reaches a
//! handler (no fallback `404`, no `405`), every undocumented method on a documented path is
//! `405`, and each read's documented query parameters are exactly those it accepts.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::TestServer;
use spindle_server::config::IndexConfig;

const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE",
];

/// Send one request on a fresh connection and read the status and (unless the answer is a
/// stream or has no length) the body. The read timeout only keeps a broken server from
/// hanging the test.
fn exchange(addr: SocketAddr, method: &str, target: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: spindle\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "{method} {target}: connection closed before the head"
        );
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map(|v| v.trim().parse::<usize>().unwrap());
    let mut body = got[head_end..].to_vec();
    if let (Some(length), false) = (length, method == "HEAD") {
        while body.len() < length {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "{method} {target}: body cut short");
            body.extend_from_slice(&buf[..n]);
        }
    }
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The router's paths, read from its `Debug` output (axum keeps no other list).
fn router_paths(server: &TestServer) -> BTreeSet<String> {
    let text = format!("{:?}", spindle_server::http::router(server.node.clone()));
    let mut paths = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("): \"") {
        let tail = &rest[i + 4..];
        let end = tail.find('"').unwrap();
        // axum's own catch-all for the fallback is not a route.
        if tail.starts_with('/') && !tail[..end].contains("__private__axum") {
            paths.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    assert!(
        !paths.is_empty(),
        "could not read the router's paths from its Debug output (did axum change it?): {text}"
    );
    paths
}

/// A target for `path` whose parameters name things that exist.
fn concrete(path: &str) -> String {
    path.replace("{name}", "by_name").replace(
        "{id}",
        "ea8f163db38682925e4491c5e58d4bb3506ef8c14eb78a86e908c5624a67200f",
    )
}

#[test]
fn openapi_lists_exactly_the_served_routes() {
    let server = TestServer::start(|c| {
        c.index_views = vec![IndexConfig {
            name: "by_name".into(),
            pointer: "/name".into(),
        }]
    });
    let addr = server.bound.http;
    let (status, text) = exchange(addr, "GET", "/openapi.json", "");
    assert_eq!(status, 200, "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{doc}");

    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.to_uppercase().as_str()) {
                documented.insert((path.clone(), method.to_uppercase()));
            }
        }
    }
    let table: BTreeSet<_> = spindle_server::http::routes()
        .iter()
        .flat_map(|r| r.methods.iter().map(|m| (r.path.clone(), m.to_string())))
        .collect();
    assert_eq!(
        documented, table,
        "/openapi.json and the route table differ"
    );
    let documented_paths: BTreeSet<_> = documented.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(
        router_paths(&server),
        documented_paths,
        "the router serves paths /openapi.json does not describe, or the reverse"
    );

    for path in &documented_paths {
        let target = concrete(path);
        for method in METHODS {
            let described = documented.contains(&(path.clone(), method.to_owned()))
                || (method == "HEAD" && documented.contains(&(path.clone(), "GET".to_owned())));
            let (status, body) = exchange(addr, method, &target, "");
            if described {
                assert_ne!(
                    status, 405,
                    "{method} {target} is described but refused: {body}"
                );
                assert!(
                    !(status == 404 && body.contains("no such endpoint")),
                    "{method} {target} is described but not routed: {body}"
                );
            } else {
                assert_eq!(
                    status, 405,
                    "{method} {target} is served but not described: {body}"
                );
            }
        }
    }
}

#[test]
fn documented_query_parameters_are_the_accepted_ones() {
    let server = TestServer::start(|c| {
        c.index_views = vec![IndexConfig {
            name: "by_name".into(),
            pointer: "/name".into(),
        }]
    });
    let addr = server.bound.http;
    let (_, text) = exchange(addr, "GET", "/openapi.json", "");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let Some(params) = item["get"]["parameters"].as_array() else {
            continue;
        };
        let mut query: Vec<&str> = params
            .iter()
            .filter(|p| p["in"] == "query")
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        if query.is_empty() {
            continue;
        }
        let (status, body) = exchange(addr, "GET", &format!("{}?bogus=1", concrete(path)), "");
        assert_eq!(status, 400, "GET {path}?bogus=1: {body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        let message = answer["message"].as_str().unwrap();
        // "unknown query parameter \"bogus\"; this endpoint takes a, b, c[ (…)]"
        let names = message.rsplit_once("takes ").map_or("", |(_, n)| n);
        let names = names.split(" (").next().unwrap();
        let mut accepted: Vec<&str> = names.split(", ").collect();
        accepted.sort_unstable();
        query.sort_unstable();
        assert_eq!(
            accepted, query,
            "GET {path}: accepted (per {message:?}) vs documented"
        );
        checked += 1;
    }
    assert_eq!(
        checked, 4,
        "item, history, out_edges and index take query parameters"
    );
}
