//! Once a graceful shutdown begins, the HTTP port refuses new connections at once, while
//! an answer still in flight (here a large chunk its client does not read) holds the
//! shutdown: a client is not left in the kernel's backlog until the drain ends.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn new_connections_are_refused_while_answers_drain() {
    let server = common::TestServer::start(|c| {
        // An answer waits this long for its client to take a byte (and the stop for it).
        c.request_body_ms_max = 20_000;
        c.shutdown_ms_max = 20_000;
    });
    let addr = server.bound.http;
    let (_, id) = common::store_chunk(&server, 12 << 20);
    // A client that asks for the chunk and reads only the start of the answer.
    let mut slow = TcpStream::connect(addr).unwrap();
    write!(slow, "GET /v1/chunks/{id} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = [0u8; 64];
    slow.read_exact(&mut head).unwrap();
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );

    let stop = std::thread::spawn(move || server.stop());
    let start = Instant::now();
    loop {
        // A connection taken, or one left waiting (a full backlog drops the handshake).
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            Err(e) if e.kind() != std::io::ErrorKind::TimedOut => panic!("connect: {e}"),
            _ => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "new connections were still taken 10 s into the shutdown"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    // The unread answer still holds the shutdown: the refusal came while it drained.
    assert!(
        !stop.is_finished(),
        "the shutdown ended before the refusal was seen"
    );
    drop(slow);
    stop.join().unwrap();
}
