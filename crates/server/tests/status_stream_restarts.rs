//! A status stream does not go silent for ever when the task that makes its events dies
//! (here: it panics at a fail point): the stream starts another after three quiet
//! intervals, and events flow again.

#![cfg(feature = "failpoints")]

mod common;

use std::time::{Duration, Instant};

#[test]
fn a_stream_outlives_the_task_that_made_its_events() {
    let scenario = fail::FailScenario::setup();
    // The first event the first task would make panics instead.
    fail::cfg("page::event", "1*panic").unwrap();
    let server = common::TestServer::start(|_| {});
    let mut lines = common::open_status_stream(server.bound.http);
    // Keep-alive comments come every 15 s: bound the wait for an event itself.
    let deadline = Instant::now() + Duration::from_secs(30);
    let data = loop {
        assert!(Instant::now() < deadline, "no event within 30 s");
        let line = lines
            .next()
            .expect("the stream ended")
            .expect("nothing, not even a keep-alive, within 60 s");
        if let Some(data) = line.strip_prefix("data: ") {
            break data.to_owned();
        }
    };
    let event: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert!(event["status"]["uptime_s"].is_number(), "{event}");
    // The event came from a second task: the first one died.
    assert!(server.node.status_events.made() >= 1);
    assert!(server.node.status_events.producing());
    scenario.teardown();
}
