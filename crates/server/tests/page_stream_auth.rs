//! With a token configured, the status page itself is served without it (it carries no
//! data), while its live stream is refused without the token and sends `status` events
//! with it, until the node stops: a graceful stop ends the stream instead of waiting on it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};

const TOKEN: &str = "s3cret-token-0123456789";

#[test]
fn the_page_is_public_and_its_stream_needs_the_token() {
    let server = common::TestServer::start(|c| c.token = Some(TOKEN.into()));
    server.rt.block_on(async {
        let (status, page) = server
            .http(None)
            .request(Method::GET, "/", None)
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK);
        assert!(String::from_utf8_lossy(&page).contains("<title>Spindle status</title>"));
        for token in [None, Some("wrong-token-0123456789")] {
            let (status, answer) = server
                .http(token)
                .json(Method::GET, "/v1/status/stream", None)
                .await
                .unwrap();
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
            assert_eq!(answer["error"], "unauthorized");
        }
    });
    // With the token: the stream's first event is the node's status.
    let mut conn = TcpStream::connect(server.bound.http).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        conn,
        "GET /v1/status/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
    .unwrap();
    let mut lines = BufReader::new(conn).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let mut saw_type = false;
    let data = loop {
        let line = lines.next().expect("the stream ended").unwrap();
        saw_type |= line.eq_ignore_ascii_case("content-type: text/event-stream");
        if let Some(data) = line.strip_prefix("data: ") {
            break data.to_owned();
        }
    };
    assert!(saw_type, "not an event stream");
    let event: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert_eq!(event["status"]["log"]["durable_index"], 0);
    assert!(event["pipeline"]["dot"]
        .as_str()
        .unwrap()
        .starts_with("digraph pipeline"));
    // A stop ends the stream (events come every second until then).
    let stopping = std::thread::spawn(move || drop(server.stop()));
    let deadline = Instant::now() + Duration::from_secs(60);
    for line in lines {
        assert!(
            Instant::now() < deadline,
            "the stream went on after the node stopped"
        );
        if let Err(e) = line {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
            break;
        }
    }
    stopping.join().unwrap();
}
