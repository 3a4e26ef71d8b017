//! Graceful shutdown: appends in flight when the node is told to stop either finish
//! (acknowledged, and then present after a restart) or fail cleanly, and the Disk Views
//! persist their applied index, so a restart resumes instead of replaying. The same over
//! HTTP/1 connections and over one HTTP/2 connection.

mod common;

use hyper::{Method, StatusCode};
use serde_json::json;
use spindle_core::Partition;
use spindle_view::DiskView;

#[test]
fn in_flight_appends_finish_and_views_persist_their_applied_index() {
    in_flight_appends_finish(false);
}

#[test]
fn in_flight_appends_on_one_http2_connection_finish_too() {
    in_flight_appends_finish(true);
}

fn in_flight_appends_finish(http2: bool) {
    let server = common::TestServer::start(|_| {});
    let client = if http2 {
        spindle_server::client::HttpClient::new_http2(&server.bound.http.to_string(), None)
    } else {
        server.http(None)
    };
    let appends: Vec<_> = (0..64)
        .map(|i| {
            let client = client.clone();
            server.rt.spawn(async move {
                let body = json!({"writes": [{"item": {"kind": "node", "id": format!("n{i}")}, "value": {"i": i}}]});
                client.json(Method::POST, "/v1/txn", Some(&body)).await
            })
        })
        .collect();
    let node = server.node.clone();
    // Stop while appends are still arriving: some are acknowledged, others in flight.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while node.log.durable_index() < spindle_core::Index::new(8) {
        assert!(
            std::time::Instant::now() < deadline,
            "no append got through"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let data_dir = node.config.data_dir.clone();
    let config = node.config.clone();
    drop(node);
    let handle = server.rt.handle().clone();
    let dir = server.stop();
    let mut acked = Vec::new();
    for (i, a) in appends.into_iter().enumerate() {
        match handle.block_on(a).unwrap() {
            Ok((StatusCode::OK, answer)) => acked.push((i, answer["index"].as_u64().unwrap())),
            // Refused because the node was already stopping: a clean failure.
            Ok((status, answer)) => assert!(status.is_server_error(), "{status} {answer}"),
            // The listener was already closed: nothing was sent.
            Err(_) => {}
        }
    }
    assert!(acked.len() >= 8, "{} acknowledged", acked.len());
    // The Disk Views were flushed with their applied index at the log's end.
    let durable = {
        let log =
            spindle_log::FileLog::open(data_dir.join("log"), spindle_log::LogConfig::default())
                .unwrap();
        log.durable_index()
    };
    for i in 0..4 {
        let view = DiskView::open(
            data_dir.join(format!("views/disk-{i}-of-4")),
            Partition::nth(i, 4),
        )
        .unwrap();
        assert_eq!(
            view.applied_index(),
            durable,
            "disk-{i} did not persist its applied index"
        );
    }
    let server = common::TestServer::start_in(dir, config);
    let client = server.http(None);
    server.rt.block_on(async {
        for (i, index) in &acked {
            let path = format!("/v1/item?node=n{i}&as_of={index}&timeout_ms=10000");
            let (status, answer) = client.json(Method::GET, &path, None).await.unwrap();
            assert_eq!(
                status,
                StatusCode::OK,
                "acknowledged n{i} at {index} is gone: {answer}"
            );
            assert_eq!(answer["version"].as_u64(), Some(*index));
            assert_eq!(answer["value"]["i"], *i);
        }
    });
    server.stop();
}
