use futures::stream::{FuturesUnordered, StreamExt};
use spindle_core::{ItemKey, Transaction, Value};
use spindle_log::{FileLog, LogConfig, SyncMode};
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let events: u64 = args[1].parse().unwrap();
    let conc: usize = args[2].parse().unwrap();
    let sync = if args[3] == "sync" {
        SyncMode::Data
    } else {
        SyncMode::Off
    };
    let group: usize = args[4].parse().unwrap();
    let dir = tempfile::tempdir_in("/work").unwrap();
    let log = FileLog::open(
        dir.path(),
        LogConfig {
            sync,
            ..LogConfig::default()
        },
    )
    .unwrap();
    let value = Value::json(r#"{"Type":"ItemCreated","ItemId":"1324"}"#).unwrap();
    let txns: Vec<Transaction> = (0..10000)
        .map(|j| Transaction::single(ItemKey::node(format!("users/{j}")).unwrap(), value.clone()))
        .collect();
    let start = Instant::now();
    futures::executor::block_on(async {
        let mut inflight = FuturesUnordered::new();
        let (mut next, mut done, mut out) = (0u64, 0u64, 0usize);
        while done < events {
            while next < events && out + group <= conc {
                let s = (next % 10000) as usize;
                let n = group.min(10000 - s).min((events - next) as usize);
                let log = &log;
                let slice = &txns[s..s + n];
                inflight.push(async move { log.append_many(slice).await });
                next += n as u64;
                out += n;
            }
            let r = inflight.next().await.unwrap();
            out -= r.len();
            done += r.len() as u64;
        }
    });
    let s = start.elapsed().as_secs_f64();
    let st = log.stats();
    println!(
        "{:.0} ev/s, syncs {}, batches {}",
        events as f64 / s,
        st.syncs.load(std::sync::atomic::Ordering::Relaxed),
        st.batches.load(std::sync::atomic::Ordering::Relaxed)
    );
}
