//! Many clients watching the status stream cost the node one status a second, not one per
//! client: every stream sends the same events, made by one task, which stops once no
//! stream is left and starts again with the next one.

mod common;

use std::io::BufReader;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Streams watched at once.
const WATCHERS: usize = 24;
/// Events each watcher reads.
const EVENTS: usize = 3;

/// The `uptime_s` of the next `status` event on `lines`.
fn next_event(lines: &mut std::io::Lines<BufReader<TcpStream>>) -> f64 {
    let mut name = String::new();
    loop {
        let line = lines.next().expect("the stream ended").unwrap();
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_owned();
        }
        if let Some(data) = line.strip_prefix("data: ") {
            assert_eq!(name, "status", "{data}");
            let event: serde_json::Value = serde_json::from_str(data).unwrap();
            return event["status"]["uptime_s"].as_f64().unwrap();
        }
    }
}

/// Wait (at most 30 s: a hang guard) until `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn watchers_share_one_status_a_second() {
    let server = common::TestServer::start(|_| {});
    let events = &server.node.status_events;
    assert_eq!(events.made(), 0);
    let mut streams: Vec<_> = (0..WATCHERS)
        .map(|_| common::open_status_stream(server.bound.http))
        .collect();
    // Every watcher gets an event at once, then one a second; they are the same events.
    let mut seen: Vec<Vec<f64>> = vec![Vec::new(); WATCHERS];
    for _ in 0..EVENTS {
        for (s, seen) in streams.iter_mut().zip(&mut seen) {
            seen.push(next_event(s));
        }
    }
    for (i, seen) in seen.iter().enumerate() {
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "watcher {i}: events not in order {seen:?}"
        );
    }
    let made = events.made();
    // Each watcher read EVENTS events; made one per watcher, there would be at least
    // WATCHERS × EVENTS. Shared, there is one a second for all of them.
    assert!(
        made >= EVENTS as u64 && made < WATCHERS as u64,
        "{made} events made for {WATCHERS} watchers of {EVENTS} events each"
    );
    // Every event sent was one of those made: the watchers saw at most `made` distinct
    // statuses between them.
    let distinct: std::collections::HashSet<u64> =
        seen.iter().flatten().map(|u| u.to_bits()).collect();
    assert!(
        distinct.len() as u64 <= made,
        "{} distinct events seen, {made} made",
        distinct.len()
    );
    // With no stream left the task stops (it looks once a second), and nothing more is
    // made.
    drop(streams);
    wait_until("the task to stop", || !events.producing());
    let stopped_at = events.made();
    let last_seen = seen.iter().flatten().copied().fold(0.0, f64::max);
    // A new watcher starts it again, and gets a new event at once: not the latest from
    // before the pause, for it nor for a second watcher that comes right after it.
    let mut again = common::open_status_stream(server.bound.http);
    let mut second = common::open_status_stream(server.bound.http);
    for (name, s) in [("first", &mut again), ("second", &mut second)] {
        let uptime = next_event(s);
        assert!(
            uptime > last_seen,
            "the {name} watcher after the pause got an event of uptime {uptime} s, from \
             before it (the last seen was {last_seen} s)"
        );
    }
    assert!(events.producing());
    assert!(events.made() > stopped_at);
}
