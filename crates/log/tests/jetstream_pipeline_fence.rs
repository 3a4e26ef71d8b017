//! An experiment on the pinned nats-server, run by hand (docs/cluster.md, "Why one batch in
//! flight"): can the appender keep two atomic batches in flight and still fence exactly?
//!
//! Batch k+1 is sent before batch k's ack, with `Nats-Expected-Last-Sequence` = k's last
//! sequence. Alone, that fence is not exact: if k is refused because another writer wrote
//! as many messages, k+1 fits behind them. The candidate exact fence adds
//! `Nats-Expected-Last-Subject-Sequence` = the same sequence on a subject only this writer
//! uses (k's last message is published on it), so k+1 commits only behind k itself.
//!
//! The experiment prints how many pipelined k+1 batches the servers take, with and without
//! that fence, and checks the fence's logic where no race is involved (k+1 sent after k was
//! refused).
//!
//! `cargo test --release --all-features -p spindle-log --test jetstream_pipeline_fence -- --ignored --nocapture`

#![cfg(feature = "jetstream")]

mod nats_cluster;

use std::time::Duration;

use bytes::Bytes;

const PREFIX: &str = "spn.PIPE.r";

/// Publish one atomic batch, one message per subject; the returned task yields the ack's
/// JSON. `fence`: a subject and the last sequence it must have.
async fn publish_batch(
    client: &async_nats::Client,
    id: &str,
    subjects: &[String],
    expected: u64,
    fence: Option<(&str, u64)>,
) -> tokio::task::JoinHandle<String> {
    let last = subjects.len() - 1;
    for (i, subject) in subjects.iter().enumerate() {
        let mut headers = nats_cluster::batch_headers(id, i, subjects.len(), Some((expected, id)));
        if i == 0 {
            if let Some((subj, seq)) = fence {
                headers.insert(
                    "Nats-Expected-Last-Subject-Sequence",
                    seq.to_string().as_str(),
                );
                headers.insert("Nats-Expected-Last-Subject-Sequence-Subject", subj);
            }
        }
        if i < last {
            client
                .publish_with_headers(subject.clone(), headers, Bytes::from_static(b"x"))
                .await
                .unwrap();
            continue;
        }
        let client = client.clone();
        let subject = subject.clone();
        return tokio::spawn(async move {
            let reply = tokio::time::timeout(
                Duration::from_secs(10),
                client.request_with_headers(subject, headers, Bytes::from_static(b"x")),
            )
            .await
            .unwrap()
            .unwrap();
            String::from_utf8_lossy(&reply.payload).into_owned()
        });
    }
    unreachable!("a batch has at least one message")
}

fn subjects(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| format!("{PREFIX}.{n}")).collect()
}

#[test]
#[ignore = "an experiment on the server's behaviour, run by hand (docs/cluster.md)"]
fn two_batches_in_flight_with_and_without_a_private_subject_fence() {
    let cluster = nats_cluster::Cluster::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client =
            nats_cluster::experiment_stream(&cluster, "PIPE", &format!("{PREFIX}.*"), 3).await;
        let mine = format!("{PREFIX}.fA");
        let k = subjects(&["01", "02", "fA"]);
        let k1 = subjects(&["03", "fA"]);
        let mut last = 0u64;
        let mut round = 0u64;
        for fenced in [true, false] {
            let (mut taken, mut refused) = (0, Vec::new());
            for _ in 0..200 {
                round += 1;
                let a = publish_batch(&client, &format!("a-{round}"), &k, last, None).await;
                let fence = fenced.then_some((mine.as_str(), last + 3));
                let b = publish_batch(&client, &format!("b-{round}"), &k1, last + 3, fence).await;
                let (a, b) = (a.await.unwrap(), b.await.unwrap());
                assert!(!a.contains("error"), "the first batch was refused: {a}");
                last += 3;
                if b.contains("error") {
                    refused.push(b);
                } else {
                    taken += 1;
                    last += 2;
                }
            }
            eprintln!(
                "fence on a private subject: {fenced}: pipelined batches taken {taken}, refused {}",
                refused.len()
            );
            for r in refused.iter().take(3) {
                eprintln!("  {r}");
            }
        }

        // No race: another writer writes 3 messages where k was meant to go; k is refused;
        // then k+1 is sent. Fenced on the stream's last sequence alone it is taken (the
        // coincidence); fenced on the private subject too it is refused.
        for fenced in [false, true] {
            round += 1;
            let other = subjects(&["04", "05", "06"]);
            let o = publish_batch(&client, &format!("o-{round}"), &other, last, None).await;
            let o = o.await.unwrap();
            assert!(!o.contains("error"), "{o}");
            let a = publish_batch(&client, &format!("a-{round}"), &k, last, None)
                .await
                .await
                .unwrap();
            assert!(
                a.contains("error"),
                "k was taken over another writer's: {a}"
            );
            let fence = fenced.then_some((mine.as_str(), last + 3));
            let b = publish_batch(&client, &format!("b-{round}"), &k1, last + 3, fence)
                .await
                .await
                .unwrap();
            eprintln!("after another writer, k refused; k+1 fenced on the subject: {fenced}: {b}");
            if fenced {
                assert!(b.contains("error"), "the subject fence let k+1 in: {b}");
            } else {
                assert!(!b.contains("error"), "the coincidence did not happen: {b}");
                last += 2;
            }
            last += 3;
        }
    });
}
