//! A request head that stops arriving does not hold its connection open: like a body that
//! stops arriving, it is given up after `request_body_ms_max` and the connection closed, so a
//! slow or idle client cannot pin connections (and their tasks) for ever.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Send `head` and read until the server closes (or resets) the connection. The read timeout is only a
/// fail-safe far above the server's bound; a server that never closes fails the test there.
fn closed_by_server(addr: std::net::SocketAddr, head: &str) -> Result<Vec<u8>, std::io::Error> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    match s.read_to_end(&mut answer) {
        Ok(_) => Ok(answer),
        // Closed with bytes of ours unread (the server only peeked at them): a reset.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(answer),
        Err(e) => Err(e),
    }
}

#[test]
fn a_stalled_request_head_is_given_up_and_its_connection_closed() {
    let server = common::TestServer::start(|c| c.request_body_ms_max = 300);
    let addr = server.bound.http;
    for head in [
        // The request line and part of the headers, then nothing.
        "GET /v1/status HTTP/1.1\r\nHost: x\r\n",
        // Half a request line.
        "GET /v1/sta",
        // Part of the HTTP/2 preface.
        "PRI * HTTP/2.0\r\n",
        // The whole HTTP/2 preface, then no SETTINGS frame (the server's own frames come
        // back, then it closes the idle connection).
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        // Nothing at all.
        "",
    ] {
        let answer = closed_by_server(addr, head)
            .unwrap_or_else(|e| panic!("{head:?}: the connection was held open: {e}"));
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.is_empty()
                || text.starts_with("HTTP/1.1 408")
                || head.starts_with("PRI * HTTP/2.0\r\n\r\n"),
            "{head:?}: answered {text:?}"
        );
    }
    // Complete requests are still served.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    server.stop();
}
