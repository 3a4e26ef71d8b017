//! Answers are held against `answers_bytes_max` until their clients take them: a client
//! that asks for large answers and reads them slowly (each byte restarting the connection's
//! stall clock) cannot pin more of the node's memory than that. An answer that finds no
//! room is answered `503 busy` at once; small answers are not held; once the slow client
//! has taken its answer, its share is free again.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};

const CHUNK: usize = 12 << 20;

#[test]
fn a_slow_reader_holds_at_most_the_answer_budget() {
    let server = common::TestServer::start(|c| {
        c.answers_bytes_max = 20 << 20;
        c.request_body_ms_max = 20_000;
    });
    let client = server.http(None);
    let (chunk, id) = common::store_chunk(&server, CHUNK);
    let status = |client: &spindle_server::client::HttpClient| {
        server.rt.block_on(async {
            let (code, s) = client.json(Method::GET, "/v1/status", None).await.unwrap();
            assert_eq!(code, StatusCode::OK);
            s
        })
    };

    // A client asks for the chunk and takes only the start of the answer.
    let mut slow = TcpStream::connect(server.bound.http).unwrap();
    write!(slow, "GET /v1/chunks/{id} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut taken = vec![0u8; 64];
    slow.read_exact(&mut taken).unwrap();
    assert!(taken.starts_with(b"HTTP/1.1 200"));
    let held = status(&client)["answers"]["held_bytes"].as_u64().unwrap();
    assert_eq!(
        held, CHUNK as u64,
        "the slow client's answer holds its size"
    );

    // Another 12 MiB answer does not fit beside it: refused at once, nothing sent.
    let path = format!("/v1/chunks/{id}");
    let (code, answer) = server
        .rt
        .block_on(client.request(Method::GET, &path, None))
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert!(
        answer.contains("\"busy\"") && answer.contains("answers_bytes_max"),
        "{answer}"
    );
    // Small answers are not held (the status answers above and below).
    assert_eq!(status(&client)["answers"]["refused"], 1);

    // The slow client takes the rest: its share comes back, and the answer is whole.
    let head_end = loop {
        if let Some(p) = taken.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let mut more = [0u8; 4096];
        let n = slow.read(&mut more).unwrap();
        assert!(n > 0, "the answer ended in its head");
        taken.extend_from_slice(&more[..n]);
    };
    while taken.len() < head_end + CHUNK {
        let mut more = vec![0u8; 1 << 20];
        let n = slow.read(&mut more).unwrap();
        assert!(n > 0, "the answer ended early");
        taken.extend_from_slice(&more[..n]);
    }
    assert!(taken[head_end..] == chunk[..], "the held answer came whole");
    let start = Instant::now();
    loop {
        let (code, body) = server
            .rt
            .block_on(client.request(Method::GET, &path, None))
            .unwrap();
        if code == StatusCode::OK {
            assert!(body == chunk);
            break;
        }
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the slow client's share never came back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = status(&client);
    assert_eq!(s["answers"]["held_bytes"], 0, "{}", s["answers"]);
    drop(slow);
    server.stop();
}
