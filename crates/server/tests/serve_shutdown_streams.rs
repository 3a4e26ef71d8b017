//! Shutdown ends every gRPC stream and cannot be held up by a client: a waiting `Tail` and
//! an `Iterate` whose client resumes reading end with UNAVAILABLE ("server shutting down");
//! an `Iterate` whose client never reads again is detached from the carousel, its
//! connection is closed at `shutdown_ms_max`, and it ends with an error, not a clean end
//! that would pass for a finished iteration.

mod common;

use std::time::Duration;

use spindle_core::{ItemKey, Transaction, Value};
use spindle_server::client::{grpc_connect, iterate, tail};
use spindle_server::proto::{IterateRequest, TailRequest};
use tonic::Code;

/// Hang guard only: shutdown is bounded by `shutdown_ms_max`, far below this.
const HANG_GUARD: Duration = Duration::from_secs(120);

#[test]
fn every_stream_ends_and_shutdown_completes_with_a_stalled_reader() {
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 1;
        c.memory_view = false;
        c.iter_chunk_bytes = 64 << 10;
        c.shutdown_ms_max = 2_000;
    });
    let node = server.node.clone();
    let grpc = server.bound.grpc.to_string();
    // More than the HTTP/2 windows and the stream's channel hold, so that the riders block
    // on a client that does not read.
    server.rt.block_on(async {
        let pad = "p".repeat(1000);
        for round in 0..4 {
            let txns: Vec<Transaction> = (0..100)
                .map(|t| {
                    (0..50).fold(Transaction::new(), |txn, i| {
                        let key = ItemKey::node(format!("n{round}-{t}-{i}")).unwrap();
                        txn.write(key, Value::json(format!("{{\"pad\":\"{pad}\"}}")).unwrap())
                    })
                })
                .collect();
            for r in node.log.append_many(&txns).await {
                r.unwrap();
            }
        }
        let durable = node.log.durable_index();
        node.disks
            .iter()
            .next()
            .unwrap()
            .view
            .wait_applied_async(durable, Duration::from_secs(60))
            .await
            .unwrap();
    });
    let durable = node.log.durable_index().get();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let request = IterateRequest {
        view: "disk-0".into(),
        ..Default::default()
    };
    let (mut stalled, mut resumed, mut waiting) = client_rt.block_on(async {
        // Separate connections: the stalled one must not hold the others' windows.
        let mut a = grpc_connect(&grpc, None).await.unwrap();
        let mut b = grpc_connect(&grpc, None).await.unwrap();
        let mut c = grpc_connect(&grpc, None).await.unwrap();
        let mut stalled = iterate(&mut a, request.clone()).await.unwrap();
        assert!(stalled.message().await.unwrap().is_some());
        let mut resumed = iterate(&mut b, request.clone()).await.unwrap();
        assert!(resumed.message().await.unwrap().is_some());
        let tail_from = TailRequest {
            from: durable + 1,
            batch_records_max: 0,
        };
        let waiting = tail(&mut c, tail_from).await.unwrap();
        (stalled, resumed, waiting)
    });
    assert_eq!(
        node.disks
            .iter()
            .next()
            .unwrap()
            .carousel
            .status()
            .riders
            .len(),
        2
    );
    let mut stopping = node.stopping();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let stopper = std::thread::spawn(move || {
        let dir = server.stop();
        done_tx.send(()).unwrap();
        dir
    });
    client_rt.block_on(async {
        stopping.wait_for(|s| *s).await.unwrap();
        // The waiting tail ends at once.
        let status = waiting.message().await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(status.message().contains("shutting down"), "{status:?}");
        // The client that reads again gets what was sent, then UNAVAILABLE.
        let status = loop {
            match resumed.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the stream ended cleanly as if the iteration were done"),
                Err(status) => break status,
            }
        };
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(status.message().contains("shutting down"), "{status:?}");
    });
    // The client that never reads does not hold shutdown beyond its bound.
    done_rx
        .recv_timeout(HANG_GUARD)
        .expect("shutdown did not complete");
    let _dir = stopper.join().unwrap();
    // Its rider was detached from the carousel.
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while !node
        .disks
        .iter()
        .next()
        .unwrap()
        .carousel
        .status()
        .riders
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "a rider was never detached"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // And it sees an error, never a clean end.
    client_rt.block_on(async {
        loop {
            match stalled.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("a cut-off iteration ended cleanly"),
                Err(_) => break,
            }
        }
    });
}
