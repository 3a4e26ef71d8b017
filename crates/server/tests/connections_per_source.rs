//! One source cannot take every seat of a listener: each source (an IPv4 address) holds at
//! most `connections_per_source_max` connections on each listener (HTTP, gRPC), a further
//! one from it is closed as soon as it is accepted (and counted in
//! `spindle_connections_refused_total`), while another source still connects and is
//! answered; once one of the first source's connections closes, it connects again.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Held connections from one source, and the listener they are on.
const PER_SOURCE: usize = 3;

/// Connect to `addr` from `source` (any port).
fn connect_from(rt: &tokio::runtime::Runtime, source: &str, addr: SocketAddr) -> TcpStream {
    let from: SocketAddr = format!("{source}:0").parse().unwrap();
    let s = rt
        .block_on(async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(from)?;
            socket.connect(addr).await?.into_std()
        })
        .unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

/// True if the server closes `s` within `wait` (EOF or a reset), false if it keeps it.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    let start = Instant::now();
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            // A gRPC server's own HTTP/2 settings: keep reading until the wait is over.
            Ok(_) if start.elapsed() < wait => continue,
            Ok(_) => return false,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// The status line of a `GET /v1/status` sent on `s`.
fn status_line(s: &mut TcpStream) -> String {
    s.write_all(b"GET /v1/status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().unwrap_or("").to_owned()
}

#[test]
fn a_source_holds_at_most_its_share_and_others_still_connect() {
    let server = common::TestServer::start(|c| {
        c.connections_max = 50;
        c.connections_per_source_max = PER_SOURCE;
    });
    for (name, addr) in [("HTTP", server.bound.http), ("gRPC", server.bound.grpc)] {
        // The first source takes its share; they send nothing and are kept (the head and
        // preface wait is 30 s by default).
        let mut held: Vec<TcpStream> = (0..PER_SOURCE)
            .map(|_| connect_from(&server.rt, "127.0.0.1", addr))
            .collect();
        for (i, s) in held.iter_mut().enumerate() {
            assert!(
                !closed_within(s, Duration::from_millis(300)),
                "{name}: connection {i} of the first source was closed within its share"
            );
        }
        // One more from it is closed at once (the listener accepts in order, so it comes
        // after the ones held).
        let mut more = connect_from(&server.rt, "127.0.0.1", addr);
        assert!(
            closed_within(&mut more, Duration::from_secs(10)),
            "{name}: a connection past the source's share was kept"
        );
        // Another source connects, and is served.
        let mut other = connect_from(&server.rt, "127.0.0.2", addr);
        if name == "HTTP" {
            let line = status_line(&mut other);
            assert!(
                line.starts_with("HTTP/1.1 200"),
                "{name}: another source was answered {line:?}"
            );
        } else {
            assert!(
                !closed_within(&mut other, Duration::from_millis(500)),
                "{name}: a connection from another source was closed"
            );
        }
        // The first source gets a seat back when one of its connections closes (the
        // server notices the close when it reads it: try until a connection is kept).
        drop(held.pop());
        let mut back = false;
        for _ in 0..40 {
            let mut again = connect_from(&server.rt, "127.0.0.1", addr);
            if !closed_within(&mut again, Duration::from_millis(250)) {
                held.push(again);
                back = true;
                break;
            }
        }
        assert!(back, "{name}: the first source never got its seat back");
        if name == "HTTP" {
            // Kept, and served.
            let line = status_line(held.last_mut().unwrap());
            assert!(
                line.starts_with("HTTP/1.1 200"),
                "{name}: the first source's new connection was answered {line:?}"
            );
        }
    }
    let client = server.http(None);
    let metrics = server.rt.block_on(async {
        let (status, body) = client
            .request(hyper::Method::GET, "/metrics", None)
            .await
            .unwrap();
        assert_eq!(status, hyper::StatusCode::OK);
        String::from_utf8(body.to_vec()).unwrap()
    });
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("spindle_connections_refused_total "))
        .expect("the refusals metric")
        .trim()
        .parse()
        .unwrap();
    assert!(
        refused >= 2,
        "one refusal per listener at least, counted: {refused}"
    );
}

#[test]
fn a_per_source_share_of_zero_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = common::config(dir.path());
    c.connections_per_source_max = 0;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("connections_per_source_max"), "{err}");
}
