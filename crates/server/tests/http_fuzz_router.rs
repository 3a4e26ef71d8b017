//! Random and mutated transaction bodies, multiget bodies, query strings, path segments and
//! methods thrown at the HTTP router never panic it; every refusal has the JSON error shape; refusals change
//! nothing (the log's durable index stays where it was).
//!
//! More cases: `PROPTEST_CASES=5000 cargo test --release -p spindle-server --test
//! http_fuzz_router`.

mod common;

use hyper::{Method, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Valid transaction bodies, as text, from a few shapes.
fn valid_txn() -> impl Strategy<Value = String> {
    let id = prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        "[a-z\u{e9}\u{FFFD}]{1,4}"
    ];
    let value = prop_oneof![
        Just(r#"{"x":1}"#.to_owned()),
        Just(r#"{ "big": 123456789012345678901234567890 }"#.to_owned()),
        Just(r#"{"s":"\u00e9","n":[1,{"m":null}]}"#.to_owned()),
    ];
    let write = (id.clone(), value, any::<bool>(), any::<bool>()).prop_map(|(id, v, edge, del)| {
        let item = if edge {
            format!(r#"{{"kind":"edge","from":"{id}","label":"l","to":"t"}}"#)
        } else {
            format!(r#"{{"kind":"node","id":"{id}"}}"#)
        };
        if del {
            format!(r#"{{"item":{item},"delete":true}}"#)
        } else {
            format!(r#"{{"item":{item},"value":{v}}}"#)
        }
    });
    let condition = (id, 0u64..4)
        .prop_map(|(id, v)| format!(r#"{{"item":{{"kind":"node","id":"{id}"}},"version":{v}}}"#));
    (
        proptest::collection::vec(write, 1..4),
        proptest::collection::vec(condition, 0..2),
    )
        .prop_map(|(w, c)| {
            format!(
                r#"{{"writes":[{}],"conditions":[{}]}}"#,
                w.join(","),
                c.join(",")
            )
        })
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Cut { at: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Delete { at: usize, len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        any::<usize>().prop_map(|at| Mutation::Cut { at }),
        (
            any::<usize>(),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 1..4),
                Just(b"\"".to_vec()),
                Just(b",\"x\":1".to_vec()),
                Just(b"{".to_vec()),
                Just(b"\xff".to_vec()),
            ]
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..6).prop_map(|(at, len)| Mutation::Delete { at, len }),
    ]
}

fn mutate(mut b: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        let n = b.len().max(1);
        match m {
            Mutation::Flip { at, bit } if !b.is_empty() => b[at % n] ^= 1 << bit,
            Mutation::Cut { at } => b.truncate(at % n),
            Mutation::Insert { at, bytes } => {
                let at = at % (b.len() + 1);
                b.splice(at..at, bytes.iter().copied());
            }
            Mutation::Delete { at, len } if !b.is_empty() => {
                let at = at % n;
                let end = (at + len).min(b.len());
                b.drain(at..end);
            }
            _ => {}
        }
    }
    b
}

#[derive(Clone, Debug)]
enum Case {
    Txn(Vec<u8>),
    Multiget(Vec<u8>),
    Read {
        path: &'static str,
        query: String,
    },
    /// Any method on an endpoint, with a path segment that may not decode.
    Path {
        method: Method,
        path: String,
    },
}

/// Query strings from the parameters the reads know plus a few they do not, with values
/// that are numbers, names, escapes (valid or not) and junk.
fn query() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("node"),
        Just("from"),
        Just("label"),
        Just("to"),
        Just("as_of"),
        Just("min_index"),
        Just("timeout_ms"),
        Just("limit"),
        Just("after"),
        Just("value"),
        Just("x"),
        Just("%FF"),
        Just("")
    ];
    let value = prop_oneof![
        (0u64..6).prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_owned()),
        Just("a".to_owned()),
        Just("%C3%A9".to_owned()),
        Just("%FF".to_owned()),
        Just("%E2%82".to_owned()),
        Just("%zz".to_owned()),
        Just("%".to_owned()),
        Just("+".to_owned()),
        Just("%22a%22".to_owned()),
        Just("1:lt".to_owned()),
        "[a-z0-9%+=&]{0,6}",
    ];
    proptest::collection::vec((name, value), 0..5).prop_map(|ps| {
        ps.iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

fn case() -> impl Strategy<Value = Case> {
    let mutations = || proptest::collection::vec(mutation(), 0..4);
    prop_oneof![
        4 => (valid_txn(), mutations()).prop_map(|(t, ms)| Case::Txn(mutate(t.into_bytes(), &ms))),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Case::Txn),
        1 => mutations().prop_map(|ms: Vec<Mutation>| {
            let body = br#"{"items":[{"kind":"node","id":"a"},{"kind":"edge","from":"a","label":"l","to":"t"}],"min_index":1,"timeout_ms":10}"#;
            Case::Multiget(mutate(body.to_vec(), &ms))
        }),
        3 => (prop_oneof![
                Just("/v1/item"), Just("/v1/history"), Just("/v1/out_edges"), Just("/v1/index/by_name")
             ], query())
            .prop_map(|(path, query)| Case::Read { path, query }),
        1 => (
            prop_oneof![Just(Method::GET), Just(Method::PUT), Just(Method::DELETE), Just(Method::PATCH)],
            prop_oneof![
                Just("/v1/txn".to_owned()),
                Just("/v1/multiget".to_owned()),
                Just("/v1/status".to_owned()),
                "/v1/chunks/(%FF|%C3|[0-9a-f]{64}|[a-z%]{0,8})",
                "/v1/index/(%FF|%E2%82|by_name|[a-z%]{1,8})",
            ],
        )
            .prop_map(|(method, path)| Case::Path { method, path }),
    ]
}

#[test]
fn the_router_survives_random_requests() {
    let server = common::TestServer::start(|c| {
        c.read_wait_ms_max = 50;
        c.index_views = vec![spindle_server::config::IndexConfig {
            name: "by_name".into(),
            pointer: "/s".into(),
        }];
    });
    let client = server.http(None);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let result = runner.run(&case(), |case| {
        let durable = server.node.log.durable_index();
        let (method, path, body) = match &case {
            Case::Txn(b) => (Method::POST, "/v1/txn".to_owned(), Some(b.clone())),
            Case::Multiget(b) => (Method::POST, "/v1/multiget".to_owned(), Some(b.clone())),
            Case::Read { path, query } => (Method::GET, format!("{path}?{query}"), None),
            Case::Path { method, path } => (method.clone(), path.clone(), None),
        };
        let (status, answer) = server
            .rt
            .block_on(client.request(method, &path, body))
            .map_err(|e| TestCaseError::fail(format!("{path}: no answer (a panic?): {e:#}")))?;
        prop_assert!(
            !status.is_server_error()
                || status == StatusCode::SERVICE_UNAVAILABLE
                || status == StatusCode::GATEWAY_TIMEOUT,
            "{path}: {status} {answer:?}"
        );
        if status.is_client_error() {
            let json: serde_json::Value = serde_json::from_slice(&answer)
                .map_err(|e| TestCaseError::fail(format!("{path}: {status} not JSON: {e}")))?;
            prop_assert!(json["error"].is_string(), "{path}: {json}");
            prop_assert!(json["message"].is_string(), "{path}: {json}");
            prop_assert_eq!(
                server.node.log.durable_index(),
                durable,
                "{} was refused but wrote",
                path
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    server.stop();
}
