//! The status page, opened in headless Chromium, shows what the API says: the durable
//! index, a Memory View boot's bar moving and reaching done, riders appearing on the carousel and leaving,
//! the named truncation blocker, an error banner while the node is down and recovery when
//! it comes back on the same address.
//!
//! Needs Debian's `chromium` and `chromium-driver` (scripts/setup.sh installs them); fails
//! with that message when they are missing. `SPINDLE_STATUS_SCREENSHOT=<path>` saves a PNG
//! of the page under load (docs/img/status.png was made so).

mod common;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::time::Duration;

use hyper::Method;
use serde_json::Value;
use spindle_core::{ItemKey, Transaction, Value as ItemValue};
use spindle_server::client::{grpc_connect, iterate};
use spindle_server::proto::IterateRequest;
use webdriver::Browser;

fn txn(t: usize, records: usize, pad: usize) -> Transaction {
    (0..records).fold(Transaction::new(), |txn, i| {
        let key = ItemKey::node(format!("n{t}-{i}")).unwrap();
        txn.write(
            key,
            ItemValue::json(format!("{{\"pad\":\"{}\"}}", "p".repeat(pad))).unwrap(),
        )
    })
}

fn text(id: &str) -> String {
    format!("return document.getElementById('{id}').textContent")
}

const RIDERS: &str = "return document.querySelectorAll('circle.rider').length";
const BOARDED: &str =
    "return [...document.querySelectorAll('circle.rider')].filter(c => c.dataset.boarded !== '').length";
const BANNER: &str = "return document.getElementById('banner').classList.contains('shown')";
const BOOT: &str = "const r = document.querySelector('tr[data-boot=memory]'); \
     return r ? [r.dataset.state, Number(r.querySelector('.bar').dataset.pct)] : null";

#[test]
fn the_page_shows_what_the_api_says() {
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 1;
        c.iter_chunk_bytes = 4096;
    });
    let node = server.node.clone();
    let http_addr = server.bound.http;
    let url = format!("http://{http_addr}/");
    let grpc = server.bound.grpc.to_string();
    // The browser's client lives on its own runtime: the servers' runtimes stop with them.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let browser = rt.block_on(async {
        // ~20 MiB: more than a gRPC stream buffers, so an unread rider stays aboard.
        let txns: Vec<Transaction> = (0..200).map(|t| txn(t, 50, 2000)).collect();
        for r in node.log.append_many(&txns).await {
            r.unwrap();
        }
        let durable = node.log.durable_index();
        node.disks
            .iter()
            .next()
            .unwrap()
            .view
            .wait_applied_async(durable, Duration::from_secs(30))
            .await
            .unwrap();
        let browser = Browser::start().await;
        browser.open(&url).await;
        let api = server.http(None);
        let (_, status) = api.json(Method::GET, "/v1/status", None).await.unwrap();
        let want = status["log"]["durable_index"].to_string();
        browser
            .wait_for("the API's durable index", &text("durable"), |v| {
                v.as_str() == Some(want.as_str())
            })
            .await;
        let blocker = status["truncation"]["held_back_by"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(!blocker.is_empty());
        browser
            .wait_for("the truncation blocker", &text("blocker"), |v| {
                v.as_str() == Some(blocker.as_str())
            })
            .await;

        // Riders: board, read one message each, hold.
        let mut client = grpc_connect(&grpc, None).await.unwrap();
        let mut riders = Vec::new();
        for _ in 0..3 {
            let mut s = iterate(
                &mut client,
                IterateRequest {
                    view: "disk-0".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            assert!(s.message().await.unwrap().is_some());
            riders.push(s);
        }
        browser
            .wait_for("three riders on the carousel", RIDERS, |v| v == 3)
            .await;
        // Each rode the shared scan from where the scanner let it board: the mark is placed
        // from the status's `boarded_at`, never left empty for an admitted rider.
        browser
            .wait_for("the riders' boarding places", BOARDED, |v| v == 3)
            .await;
        // The appends above were fsynced: their latency is shown, not a placeholder.
        browser
            .wait_for("fsync latency p50 / p99", &text("sync-latency"), |v| {
                v.as_str()
                    .is_some_and(|t| t.contains(" / ") && t.contains("last"))
            })
            .await;
        if let Ok(path) = std::env::var("SPINDLE_STATUS_SCREENSHOT") {
            // Under load: appends running while the riders are aboard.
            for t in 0..40 {
                node.log.append(&txn(1000 + t, 20, 200)).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(2500)).await;
            std::fs::write(path, browser.screenshot().await).unwrap();
        }
        for mut s in riders {
            while s.message().await.unwrap().is_some() {}
        }
        browser
            .wait_for("the riders leaving the carousel", RIDERS, |v| v == 0)
            .await;
        browser
    });

    // The node stops: the page says so.
    let mut config = server.node.config.clone();
    drop(node);
    let dir = server.stop();
    rt.block_on(browser.wait_for("the error banner", BANNER, |v| v == true));

    // It comes back on the same address: the Memory View boots again and the page recovers.
    config.http_listen = http_addr;
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    // Each 1 MiB batch of the boot pauses, so the boot lasts a few events of the stream.
    fail::cfg("boot::batch", "sleep(150)").unwrap();
    let server = common::TestServer::start_in(dir, config);
    rt.block_on(async {
        browser
            .wait_for("the banner gone", BANNER, |v| v == false)
            .await;
        let mut partial = Vec::new();
        browser
            .wait_for("the boot done", BOOT, |v: &Value| {
                if v[0] == "booting" {
                    partial.push(v[1].as_f64().unwrap());
                }
                v[0] == "done" && v[1] == 100.0
            })
            .await;
        fail::remove("boot::batch");
        partial.dedup();
        assert!(
            partial.iter().any(|p| *p > 0.0 && *p < 100.0),
            "the boot's bar never showed partial progress: {partial:?}"
        );
        assert!(
            partial.windows(2).all(|w| w[0] <= w[1]),
            "the bar went backwards: {partial:?}"
        );
        let api = server.http(None);
        let (_, status) = api.json(Method::GET, "/v1/status", None).await.unwrap();
        let want = status["log"]["durable_index"].to_string();
        browser
            .wait_for("the durable index after restart", &text("durable"), |v| {
                v.as_str() == Some(want.as_str())
            })
            .await;
        browser.quit().await;
    });
    server.stop();
}
