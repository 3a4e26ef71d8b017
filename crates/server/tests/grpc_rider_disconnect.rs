//! A client that disconnects mid-stream frees its carousel seat: the rider leaves, and the
//! scanner stops once no one rides.

mod common;

use spindle_core::{ItemKey, Transaction, Value};
use spindle_server::client::{grpc_connect, iterate};
use spindle_server::proto::IterateRequest;

#[test]
fn a_disconnected_rider_is_freed() {
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 1;
        c.iter_chunk_bytes = 4096;
        c.memory_view = false;
    });
    let node = server.node.clone();
    let grpc = server.bound.grpc.to_string();
    server.rt.block_on(async {
        let txns: Vec<Transaction> = (0..200)
            .map(|t| {
                (0..50).fold(Transaction::new(), |txn, i| {
                    let key = ItemKey::node(format!("n{t}-{i}")).unwrap();
                    txn.write(
                        key,
                        Value::json(format!("{{\"pad\":\"{}\"}}", "p".repeat(100))).unwrap(),
                    )
                })
            })
            .collect();
        server.append_and_apply(&txns).await;
        let mut client = grpc_connect(&grpc, None).await.unwrap();
        let mut stream = iterate(
            &mut client,
            IterateRequest {
                view: "disk-0".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        // Past any empty message a rider sends while it waits (`idle_chunk_ms`).
        let first = loop {
            let message = stream.message().await.unwrap().unwrap();
            if !message.frames.is_empty() {
                break message;
            }
        };
        assert!(!first.frames.is_empty());
        assert_eq!(
            node.disks
                .iter()
                .next()
                .unwrap()
                .carousel
                .status()
                .riders
                .len(),
            1,
            "the rider is aboard"
        );
        drop(stream);
        drop(client);
        // The rider thread notices the closed stream on its next send; wait for that.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let status = node.disks.iter().next().unwrap().carousel.status();
            if status.riders.is_empty() && !status.running {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "rider never freed: {status:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    server.stop();
}
