//! Connections cannot exhaust the node: each listener holds at most `connections_max` at
//! once and closes any more as soon as it accepts them, and a gRPC connection that sends
//! nothing (not even the HTTP/2 preface) is closed once `request_body_ms_max` has passed,
//! as an HTTP connection whose first request head does not arrive is. Once the silent
//! connections are gone the node answers again, and appends go on.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use spindle_server::serve::connections_cap;

/// How long until the server closes `s` (reads EOF or an error), or `None` within `wait`.
fn closed_within(s: &mut TcpStream, wait: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => continue, // a server's own preface or answer: keep reading
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None
            }
            Err(_) => return Some(start.elapsed()),
        }
    }
}

fn silent(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect()
}

#[test]
fn each_listener_holds_at_most_its_connections_and_silent_ones_are_closed() {
    let server = common::TestServer::start(|c| {
        c.connections_max = 4;
        c.request_body_ms_max = 1500;
    });
    for (name, addr) in [("gRPC", server.bound.grpc), ("HTTP", server.bound.http)] {
        let mut held = silent(addr, 4);
        // One more is closed at once. (Until the listener has accepted the four, a new one
        // may still take a seat: it then joins them, and the next one is tried.)
        let mut refused = false;
        for _ in 0..20 {
            let mut more = TcpStream::connect(addr).unwrap();
            if closed_within(&mut more, Duration::from_millis(500)).is_some() {
                refused = true;
                break;
            }
            held.push(more);
        }
        assert!(refused, "{name}: connections past the bound were kept");
        // They send nothing: each is closed once 1.5 s have passed.
        for (i, s) in held.iter_mut().enumerate() {
            assert!(
                closed_within(s, Duration::from_secs(10)).is_some(),
                "{name}: silent connection {i} still open after 10 s"
            );
        }
    }
    // Half a preface does not keep a gRPC connection either: pings start only after it.
    let mut half = TcpStream::connect(server.bound.grpc).unwrap();
    half.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
    assert!(
        closed_within(&mut half, Duration::from_secs(10)).is_some(),
        "a connection that sent part of the preface is still open"
    );
    // Seats are back: the node answers and appends go on.
    let client = server.http(None);
    server.rt.block_on(async {
        let txn = json!({"writes": [{"item": {"kind": "node", "id": "a"}, "value": {"v": 1}}]});
        let (status, answer) = client
            .json(Method::POST, "/v1/txn", Some(&txn))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
    });
}

#[test]
fn the_cap_is_at_most_a_quarter_of_the_open_files_limit() {
    assert_eq!(connections_cap(1000, None), 1000);
    assert_eq!(connections_cap(1000, Some(1024)), 256);
    assert_eq!(connections_cap(1000, Some(1 << 20)), 1000);
    assert_eq!(connections_cap(1000, Some(2)), 1, "never none");
}
