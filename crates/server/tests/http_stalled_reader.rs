//! A client that asks for a large answer and then reads nothing does not hold the connection
//! (and the answer's memory) for ever: once it has taken no byte for `request_body_ms_max`,
//! the node closes the connection. A client that reads slowly keeps it (HTTP/2:
//! `a_large_answer_read_slowly_is_not_cut`).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use hyper::Method;
use spindle_server::client::HttpClient;

#[test]
fn a_client_that_stops_reading_an_answer_is_closed() {
    let server = common::TestServer::start(|c| c.request_body_ms_max = 1000);
    let addr = server.bound.http;
    let client = HttpClient::new(&addr.to_string(), None);
    let (chunk, id) = common::store_chunk(&server, 12 << 20);
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /v1/chunks/{id} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    // Read nothing for three times the bound: the socket buffers fill and the node waits.
    std::thread::sleep(Duration::from_secs(3));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got); // ends with EOF or a reset
    assert!(
        got.len() < chunk.len(),
        "the whole answer waited for a client that read nothing ({} bytes)",
        got.len()
    );
    // The node is fine and serves the chunk to a client that reads.
    server.rt.block_on(async {
        let (status, body) = client
            .request(Method::GET, &format!("/v1/chunks/{id}"), None)
            .await
            .unwrap();
        assert!(status.is_success());
        assert!(body == chunk);
    });
}
