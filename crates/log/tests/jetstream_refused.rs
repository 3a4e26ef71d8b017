//! The JetStream log refuses what would break its guarantees, with an error that says
//! why: a server without `sync_interval: always`, a stream configured to delete or expire
//! records (or not atomic), and a config that gives no way to check the servers.
//! (Versions older than 2.14.4 are refused by the pure check's unit tests: no old server
//! binary is installed.)

#![cfg(feature = "jetstream")]

mod nats_cluster;

use async_nats::jetstream::stream::Config;
use spindle_log::jetstream::{check, JetStreamError, JetStreamLog};

#[test]
fn a_server_that_does_not_sync_every_write_is_refused() {
    let cluster =
        nats_cluster::Cluster::start_with(1, nats_cluster::Options { sync_always: false });
    match JetStreamLog::open(cluster.config("UNSYNCED")) {
        Err(JetStreamError::ServerRefused { reason, .. }) => {
            assert!(reason.contains("sync_interval: always"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_stream_that_deletes_records_is_refused() {
    let cluster = nats_cluster::Cluster::start(1);
    let config = cluster.config("LOOSE");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = async_nats::connect(config.servers[0].as_str())
            .await
            .unwrap();
        let js = async_nats::jetstream::new(client);
        let good = check::stream_config("LOOSE", "spn.LOOSE.r.*", 1);
        js.create_stream(Config {
            deny_delete: false,
            max_age: std::time::Duration::from_secs(3600),
            ..good
        })
        .await
        .unwrap();
    });
    match JetStreamLog::open(config.clone()) {
        Err(JetStreamError::StreamRefused { reason, .. }) => {
            assert!(
                reason.contains("deny_delete") && reason.contains("limits"),
                "{reason}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let mut unmonitored = config;
    unmonitored.monitor_urls.clear();
    assert!(matches!(
        JetStreamLog::open(unmonitored),
        Err(JetStreamError::NoMonitor)
    ));
}
