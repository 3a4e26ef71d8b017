//! Experiment: what do the NATS servers spend per message on atomic batches shaped as
//! Spindle's appender sends them (a subject per partition byte, its batch id, the expected
//! last sequence and a message id on the first message) against the plainest batch (one
//! subject, a short batch id)? Run by hand; the results are in docs/benchmarks/cluster.md
//! ("The NATS servers' extra work per event").
//!
//! `cargo test --release --all-features -p spindle-log --test jetstream_batch_headers -- --ignored --nocapture`

#![cfg(feature = "jetstream")]

mod nats_cluster;

use bytes::Bytes;

const N: usize = 64;

/// One batch of `N` 48-byte messages; `spindle`: with the appender's headers, and with
/// `subjects` on its subjects too.
async fn batch(client: &async_nats::Client, spindle: bool, subjects: bool, no: u64, last: u64) {
    let payload = Bytes::from(vec![b'x'; 48]);
    let id = if spindle {
        format!("0123456789abcdef-{no}")
    } else {
        format!("b-{no}")
    };
    let batch_id = if spindle {
        format!("{id}-0")
    } else {
        id.clone()
    };
    for i in 0..N {
        let headers =
            nats_cluster::batch_headers(&batch_id, i, N, spindle.then_some((last, id.as_str())));
        let subject = if subjects {
            format!("spn.SHAPE.r.{:02x}", (no as usize * 61 + i * 37) % 256)
        } else {
            "spn.SHAPE.r.00".to_owned()
        };
        nats_cluster::send_batch_message(client, subject, headers, payload.clone(), i + 1 == N)
            .await;
    }
}

#[test]
#[ignore = "an experiment on the server's behaviour, run by hand (docs/benchmarks/cluster.md)"]
fn servers_cpu_per_message_by_batch_shape() {
    let cluster = nats_cluster::Cluster::start(3);
    let pids = cluster.pids();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = nats_cluster::experiment_stream(&cluster, "SHAPE", "spn.SHAPE.r.*", 3).await;
        // (shape, Spindle's headers, its subjects)
        let shapes = [
            ("one subject, a short batch id", false, false),
            ("one subject, the appender's headers", true, false),
            ("the appender's headers and subjects", true, true),
        ];
        let (mut last, mut no) = (0u64, 0u64);
        let mut per_msg = vec![Vec::new(); shapes.len()];
        for _ in 0..10 {
            for (k, &(_, spindle, subjects)) in shapes.iter().enumerate() {
                let before = nats_cluster::cpu_seconds(&pids);
                for _ in 0..200 {
                    no += 1;
                    batch(&client, spindle, subjects, no, last).await;
                    last += N as u64;
                }
                per_msg[k]
                    .push((nats_cluster::cpu_seconds(&pids) - before) / (200 * N) as f64 * 1e6);
            }
        }
        eprintln!("servers' CPU µs per message, blocks of 200 batches of {N} (median, blocks):");
        for ((name, ..), mut v) in shapes.iter().zip(per_msg) {
            v.sort_by(f64::total_cmp);
            eprintln!("  {name}: {:.1} {v:.1?}", v[v.len() / 2]);
        }
    });
}
