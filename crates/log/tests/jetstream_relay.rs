//! Experiment: what does it cost a publisher when the server it is connected to does not
//! lead the stream, so that every message is relayed to the leader over a route? Two
//! clients of one 3-node cluster, one connected to the stream's leader and one to a
//! follower, take turns publishing the same messages: single publishes with 64 acks awaited
//! at once, and atomic batches of 64, one at a time. Run by hand; the results are in
//! docs/benchmarks/cluster.md ("Latest: where the stream's leader is").
//!
//! `cargo test --release --all-features -p spindle-log --test jetstream_relay -- --ignored --nocapture`

#![cfg(feature = "jetstream")]

mod nats_cluster;

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

const IN_FLIGHT: usize = 64;
const SINGLES: usize = 10_000;
const BATCHES: usize = 150;
const ROUNDS: usize = 8;

/// "median (min – max)" of `values`, with `digits` decimals and `unit` after the median.
fn summary(values: impl Iterator<Item = f64>, unit: &str, digits: usize) -> String {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    format!(
        "{:.digits$}{unit} ({:.digits$} – {:.digits$})",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1]
    )
}

async fn singles(js: &async_nats::jetstream::Context) {
    let payload = Bytes::from(vec![b'x'; 48]);
    let mut acks = VecDeque::new();
    for i in 0..SINGLES {
        if acks.len() == IN_FLIGHT {
            let ack: async_nats::jetstream::context::PublishAckFuture = acks.pop_front().unwrap();
            ack.await.unwrap();
        }
        let subject = format!("spn.RELAY.r.{:02x}", i % 256);
        acks.push_back(js.publish(subject, payload.clone()).await.unwrap());
    }
    for ack in acks {
        ack.await.unwrap();
    }
}

async fn batches(client: &async_nats::Client, who: &str, round: usize) {
    let payload = Bytes::from(vec![b'x'; 48]);
    for b in 0..BATCHES {
        let id = format!("{who}-{round}-{b}");
        for i in 0..IN_FLIGHT {
            let headers = nats_cluster::batch_headers(&id, i, IN_FLIGHT, None);
            let subject = format!("spn.RELAY.r.{:02x}", (b * 61 + i * 37) % 256);
            let commit = i + 1 == IN_FLIGHT;
            nats_cluster::send_batch_message(client, subject, headers, payload.clone(), commit)
                .await;
        }
    }
}

#[test]
#[ignore = "an experiment on the server's behaviour, run by hand (docs/benchmarks/cluster.md)"]
fn publishing_through_a_follower_against_the_leader() {
    let cluster = nats_cluster::Cluster::start(3);
    let pids = cluster.pids();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let first = nats_cluster::experiment_stream(&cluster, "RELAY", "spn.RELAY.r.*", 3).await;
        let js = async_nats::jetstream::new(first);
        let stream = js.get_stream("RELAY").await.unwrap();
        let leader = stream
            .cached_info()
            .cluster
            .as_ref()
            .unwrap()
            .leader
            .clone()
            .unwrap();
        let at_leader = cluster.node_named(&leader);
        let at_follower = (at_leader + 1) % 3;
        let connect = |i: usize| async_nats::connect(cluster.servers()[i].clone());
        let clients = [
            ("leader", connect(at_leader).await.unwrap()),
            ("follower", connect(at_follower).await.unwrap()),
        ];
        // (client, batches) -> per round (messages/s, servers' CPU µs per message)
        let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); 4];
        for round in 0..ROUNDS {
            // Alternate which client goes first.
            let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for &c in &order {
                let (who, client) = &clients[c];
                let cjs = async_nats::jetstream::new(client.clone());
                for batched in [false, true] {
                    let (cpu, start) = (nats_cluster::cpu_seconds(&pids), Instant::now());
                    let n = if batched {
                        batches(client, who, round).await;
                        BATCHES * IN_FLIGHT
                    } else {
                        singles(&cjs).await;
                        SINGLES
                    };
                    let secs = start.elapsed().as_secs_f64();
                    let used = nats_cluster::cpu_seconds(&pids) - cpu;
                    results[c * 2 + batched as usize]
                        .push((n as f64 / secs, used / n as f64 * 1e6));
                }
            }
        }
        let names = ["singles", "batches"];
        eprintln!(
            "stream leader {leader}; medians of {ROUNDS} interleaved rounds (range), via the \
             leader | via a follower | per-round ratio follower / leader"
        );
        for (k, name) in names.iter().enumerate() {
            let (lead, follow) = (&results[k], &results[2 + k]);
            let ratios: Vec<f64> = lead.iter().zip(follow).map(|(l, f)| f.0 / l.0).collect();
            eprintln!(
                "  {name}: {} | {} | {}",
                summary(lead.iter().map(|r| r.0), "/s", 0),
                summary(follow.iter().map(|r| r.0), "/s", 0),
                summary(ratios.into_iter(), "", 3),
            );
            eprintln!(
                "  {name}, servers' CPU µs per message: {} | {}",
                summary(lead.iter().map(|r| r.1), "", 1),
                summary(follow.iter().map(|r| r.1), "", 1),
            );
        }
    });
}
