//! Experiment: how much of an atomic batch's ack time is the servers taking its messages
//! in, and how much is the commit (consensus, sync)? Run by hand; the results are in
//! docs/benchmarks/cluster.md ("What the commit of a batch costs").
//!
//! `cargo test --release --all-features -p spindle-log --test jetstream_staged_commit -- --ignored --nocapture`

#![cfg(feature = "jetstream")]

mod nats_cluster;

use std::time::{Duration, Instant};

use bytes::Bytes;

const PREFIX: &str = "spn.STAGE.r";

async fn send(
    client: &async_nats::Client,
    id: &str,
    n: usize,
    expected: u64,
    pause: Option<Duration>,
) -> (Duration, Duration) {
    let payload = Bytes::from(vec![b'x'; 48]);
    let start = Instant::now();
    let mut commit_at = start;
    for i in 0..n {
        let headers = nats_cluster::batch_headers(id, i, n, Some((expected, id)));
        let subject = format!("{PREFIX}.{:02x}", i % 256);
        let commit = i + 1 == n;
        if let (true, Some(p)) = (commit, pause) {
            client.flush().await.unwrap();
            tokio::time::sleep(p).await;
        }
        if commit {
            commit_at = Instant::now();
        }
        nats_cluster::send_batch_message(client, subject, headers, payload.clone(), commit).await;
    }
    (start.elapsed(), commit_at.elapsed())
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
#[ignore = "an experiment on the server's behaviour, run by hand (docs/benchmarks/cluster.md)"]
fn commit_after_staged_messages() {
    let cluster = nats_cluster::Cluster::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client =
            nats_cluster::experiment_stream(&cluster, "STAGE", &format!("{PREFIX}.*"), 3).await;
        let mut last = 0u64;
        let n = 64;
        for rep in 0..3 {
            let (mut whole, mut staged, mut staged_total) = (Vec::new(), Vec::new(), Vec::new());
            for r in 0..200 {
                let (t, _) = send(&client, &format!("w{rep}-{r}"), n, last, None).await;
                whole.push(t);
                last += n as u64;
                let (t, c) = send(
                    &client,
                    &format!("s{rep}-{r}"),
                    n,
                    last,
                    Some(Duration::from_millis(3)),
                )
                .await;
                staged.push(c);
                staged_total.push(t);
                last += n as u64;
            }
            eprintln!(
                "{n} messages: all at once, first publish to ack p50 {:?}; staged then committed after 3 ms, commit to ack p50 {:?} (whole {:?})",
                p50(whole),
                p50(staged),
                p50(staged_total)
            );
        }
    });
}
