//! Bad `Iterate` requests are refused before any data, with the code that says whose fault
//! it is: an unknown view `NOT_FOUND`, a bad filter `INVALID_ARGUMENT`. A refusal holds no
//! seat (with one seat, a good request right after each is served), and the filters a
//! request carries are applied: `from`, `keys_only`, a projection and `latest_only` each
//! change what comes.

mod common;

use std::collections::HashMap;

use spindle_core::{ItemKey, Transaction, Value};
use spindle_server::client::{grpc_connect, iterate, GrpcClient};
use spindle_server::proto::IterateRequest;
use spindle_view::frame::{FrameReader, FrameRef};
use tonic::Code;

/// The status a call ends with, whether it is refused at once or as its first message.
async fn refusal(
    call: Result<tonic::Streaming<spindle_server::proto::FrameChunk>, tonic::Status>,
) -> tonic::Status {
    match call {
        Err(status) => status,
        Ok(mut stream) => match stream.message().await {
            Err(status) => status,
            Ok(m) => panic!("expected a refusal, got a message: {}", m.is_some()),
        },
    }
}

/// Every version frame of a whole iteration: (item key bytes, index, value).
async fn versions(
    client: &mut GrpcClient,
    req: IterateRequest,
) -> Vec<(Vec<u8>, u64, Option<Vec<u8>>)> {
    let mut stream = iterate(client, req).await.unwrap();
    let mut out = Vec::new();
    let mut ended = false;
    while let Some(chunk) = stream.message().await.unwrap() {
        let mut reader = FrameReader::new(&chunk.frames);
        while let Some(frame) = reader.next_ref() {
            match frame.unwrap() {
                FrameRef::Version {
                    index, key, value, ..
                } => out.push((key.to_vec(), index.get(), value.map(<[u8]>::to_vec))),
                FrameRef::End(_) => ended = true,
            }
        }
    }
    assert!(ended, "the stream ends with its end frame");
    out
}

#[test]
fn bad_iterate_requests_are_refused_with_their_code_and_hold_no_seat() {
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 1;
        c.memory_view = false;
        c.iterate_streams_max = 1;
    });
    let grpc = server.bound.grpc.to_string();
    server.rt.block_on(async {
        // 20 nodes, each written 3 times (one transaction per round).
        let txns: Vec<Transaction> = (0..3)
            .map(|round| {
                (0..20).fold(Transaction::new(), |t, i| {
                    let key = ItemKey::node(format!("n{i}")).unwrap();
                    t.write(key, Value::json(format!("{{\"round\":{round}}}")).unwrap())
                })
            })
            .collect();
        let durable = server.append_and_apply(&txns).await;
        let mut client = grpc_connect(&grpc, None).await.unwrap();
        let good = IterateRequest {
            view: "disk-0".into(),
            ..Default::default()
        };
        let bad: Vec<(&str, IterateRequest, Code)> = vec![
            (
                "an unknown view",
                IterateRequest {
                    view: "disk-9".into(),
                    ..good.clone()
                },
                Code::NotFound,
            ),
            (
                "an unknown kinds value",
                IterateRequest {
                    kinds: 7,
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                "an empty range",
                IterateRequest {
                    range_lo: Some(100),
                    range_hi: Some(100),
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                "a range past the hash space",
                IterateRequest {
                    range_lo: Some(0),
                    range_hi: Some(1 << 33),
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                "a cut above the applied index",
                IterateRequest {
                    to: Some(durable.get() + 1000),
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                "a cut inside a transaction (of 20 records)",
                IterateRequest {
                    to: Some(durable.get() - 5),
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                "from above to",
                IterateRequest {
                    from: 10,
                    to: Some(5),
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                "a projection that is not a JSON Pointer",
                IterateRequest {
                    projection: Some("round".into()),
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
            (
                "a projection with keys-only",
                IterateRequest {
                    projection: Some("/round".into()),
                    keys_only: true,
                    ..good.clone()
                },
                Code::InvalidArgument,
            ),
        ];
        for (what, req, code) in bad {
            for dedicated in [false, true] {
                let req = IterateRequest {
                    dedicated,
                    ..req.clone()
                };
                let refused = refusal(iterate(&mut client, req).await).await;
                assert_eq!(
                    refused.code(),
                    code,
                    "{what} (dedicated {dedicated}): {refused:?}"
                );
                assert!(!refused.message().is_empty(), "{what}");
                // The one seat is free: a good request is served whole.
                let all = versions(&mut client, good.clone()).await;
                assert_eq!(all.len(), 60, "after {what}");
            }
        }
        // The filters are applied, not dropped on the way.
        let all = versions(&mut client, good.clone()).await;
        let from = all.iter().map(|v| v.1).min().unwrap() + 20;
        let later = versions(
            &mut client,
            IterateRequest {
                from,
                ..good.clone()
            },
        )
        .await;
        assert_eq!(later.len(), 40);
        assert!(later.iter().all(|v| v.1 >= from), "from {from}");
        let keys = versions(
            &mut client,
            IterateRequest {
                keys_only: true,
                ..good.clone()
            },
        )
        .await;
        assert_eq!(keys.len(), 60);
        assert!(
            keys.iter().all(|v| v.2.is_none()),
            "keys-only frames carry no value"
        );
        let projected = versions(
            &mut client,
            IterateRequest {
                projection: Some("/round".into()),
                ..good.clone()
            },
        )
        .await;
        assert_eq!(projected.len(), 60);
        for (v, whole) in projected.iter().zip(&all) {
            let object: serde_json::Value =
                serde_json::from_slice(whole.2.as_ref().unwrap()).unwrap();
            let property: serde_json::Value =
                serde_json::from_slice(v.2.as_ref().unwrap()).unwrap();
            assert_eq!(property, object["round"], "the projected property");
        }
        let latest = versions(
            &mut client,
            IterateRequest {
                latest_only: true,
                ..good.clone()
            },
        )
        .await;
        let newest: HashMap<&[u8], u64> = all.iter().fold(HashMap::new(), |mut m, v| {
            let e = m.entry(v.0.as_slice()).or_insert(0);
            *e = (*e).max(v.1);
            m
        });
        assert_eq!(latest.len(), 20);
        for v in &latest {
            assert_eq!(newest[v.0.as_slice()], v.1, "the newest version only");
        }
    });
    server.stop();
}
