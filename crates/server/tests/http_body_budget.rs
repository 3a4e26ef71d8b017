//! Request bodies held at once are bounded across connections (`request_bodies_bytes_max`):
//! a body takes its bytes from one budget as they arrive and gives them back when its
//! request is done, so many clients each sending a body of the largest size cannot make
//! the node hold their sum. A body that finds no room within `request_body_ms_max` is
//! answered `503 busy` and changes nothing; once the holders are done, the same request
//! goes through.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use spindle_server::ServerConfig;

const BODY_MAX: usize = 64 << 10;
const BUDGET: u64 = 128 << 10;

fn small_budget(c: &mut ServerConfig) {
    c.request_body_bytes_max = BODY_MAX;
    c.chunk_bytes_max = BODY_MAX;
    c.request_bodies_bytes_max = BUDGET;
    c.request_body_ms_max = 1500;
}

/// Send one request with a `Content-Length` body and read the whole answer.
fn post(addr: SocketAddr, path: &str, body: &[u8]) -> (u16, String) {
    request(addr, "POST", path, body)
}

fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    (status, answer)
}

/// Open a chunked request to `path` and send `pieces` of it; the body is not ended.
fn chunked(addr: SocketAddr, path: &str, pieces: &[&[u8]]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    for piece in pieces {
        write!(s, "{:x}\r\n", piece.len()).unwrap();
        s.write_all(piece).unwrap();
        s.write_all(b"\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

/// A transaction writing `item`, padded with spaces to `bytes`.
fn txn_of(item: &str, bytes: usize) -> Vec<u8> {
    let mut t =
        format!(r#"{{"writes":[{{"item":{{"kind":"node","id":"{item}"}},"value":{{}}}}]}}"#)
            .into_bytes();
    assert!(t.len() <= bytes);
    t.resize(bytes, b' ');
    t
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "waited for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bodies_held_at_once_are_bounded_and_a_body_without_room_is_refused_as_busy() {
    let server = common::TestServer::start(small_budget);
    let addr = server.bound.http;
    let node = server.node.clone();
    wait_until("the Memory View to boot", || node.memory.get().is_some());
    // Two multigets of 60 KiB each (padded with spaces) wait 6 s for an index that never
    // comes: their bodies hold 120 KiB of the 128 KiB budget meanwhile.
    let holders: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut body =
                    br#"{"items":[{"kind":"node","id":"a"}],"min_index":1000000000,"timeout_ms":6000}"#
                        .to_vec();
                body.resize(60 << 10, b' ');
                post(addr, "/v1/multiget", &body)
            })
        })
        .collect();
    wait_until("both multigets to hold their bodies", || {
        node.body_budget.held_bytes() == 120 << 10
    });
    // A 10 KiB transaction has no room: after request_body_ms_max it is refused, and its
    // write is not made.
    let start = Instant::now();
    let (status, answer) = post(addr, "/v1/txn", &txn_of("refused", 10 << 10));
    let waited = start.elapsed();
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains(r#""error":"busy""#), "{answer}");
    assert!(answer.contains("request_bodies_bytes_max"), "{answer}");
    // Its body was never read: the HTTP/1 connection is closed after the answer.
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(
        waited >= Duration::from_millis(1400),
        "refused after {waited:?}, before request_body_ms_max"
    );
    // A small one fits beside the holders.
    let (status, answer) = post(addr, "/v1/txn", &txn_of("small", 2 << 10));
    assert_eq!(status, 200, "{answer}");
    // The holders end (504: the index never came) and give their bytes back.
    for h in holders {
        let (status, answer) = h.join().unwrap();
        assert_eq!(status, 504, "{answer}");
    }
    wait_until("the budget to be free", || {
        node.body_budget.held_bytes() == 0
    });
    let status = node.status();
    assert_eq!(status.request_bodies.refused, 1);
    assert_eq!(status.request_bodies.max_bytes, BUDGET);
    // The refused write was never made; now it goes through.
    let (status, answer) = request(addr, "GET", "/v1/item?node=refused", b"");
    assert_eq!(status, 404, "the refused write was made: {answer}");
    let (status, answer) = post(addr, "/v1/txn", &txn_of("refused", 10 << 10));
    assert_eq!(status, 200, "{answer}");
}

#[test]
fn a_body_of_unknown_length_holds_the_limit_while_read_and_gives_back_what_it_did_not_use() {
    let server = common::TestServer::start(small_budget);
    let node = server.node.clone();
    wait_until("the Memory View to boot", || node.memory.get().is_some());
    // A chunked multiget of two 5 KiB pieces that waits 3 s for an index: read, it holds
    // its 10 KiB (not the 64 KiB it took while its length was unknown).
    let addr = server.bound.http;
    let waiter = std::thread::spawn(move || {
        let mut body =
            br#"{"items":[{"kind":"node","id":"a"}],"min_index":1000000000,"timeout_ms":3000}"#
                .to_vec();
        body.resize(10 << 10, b' ');
        let pieces: Vec<&[u8]> = body.chunks(5 << 10).collect();
        let mut s = chunked(addr, "/v1/multiget", &pieces);
        s.write_all(b"0\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    });
    wait_until("the read body to hold 10 KiB", || {
        node.body_budget.held_bytes() == 10 << 10
    });
    let answer = waiter.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    wait_until("the budget to be free", || {
        node.body_budget.held_bytes() == 0
    });
    // A chunked body that stops arriving holds its endpoint's limit meanwhile.
    let piece = vec![b' '; 10 << 10];
    let mut s = chunked(server.bound.http, "/v1/txn", &[piece.as_slice(); 4]);
    wait_until("the limit to be held", || {
        node.body_budget.held_bytes() == BODY_MAX as u64
    });
    // It never finishes: 408 after request_body_ms_max, and its bytes are given back.
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    wait_until("the budget to be free", || {
        node.body_budget.held_bytes() == 0
    });
    // A chunked body past the largest body is still 413, and gives back what it held.
    let mut s = chunked(server.bound.http, "/v1/txn", &[piece.as_slice(); 7]);
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    wait_until("the budget to be free", || {
        node.body_budget.held_bytes() == 0
    });
}

#[test]
fn a_budget_smaller_than_the_largest_body_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = common::config(dir.path());
    c.request_bodies_bytes_max = (c.chunk_bytes_max - 1) as u64;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("request_bodies_bytes_max"), "{e}");
}

/// A body that stops arriving gives its share back once it falls behind the pace that would
/// bring it in within `request_body_ms_max` (after a grace of a tenth of that time), not at
/// the end of that time; a slow body that keeps the pace is read whole.
#[test]
fn a_stalled_body_gives_its_share_back_after_the_grace_and_a_paced_one_is_read() {
    let server = common::TestServer::start(|c| {
        small_budget(c);
        c.request_body_ms_max = 20_000;
    });
    let addr = server.bound.http;
    let node = server.node.clone();
    // Declares 60 KiB, sends 10 bytes, then nothing.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let start = Instant::now();
    write!(
        s,
        "POST /v1/txn HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{{\"writes\":",
        60 << 10
    )
    .unwrap();
    wait_until("the declared length to be held", || {
        node.body_budget.held_bytes() == 60 << 10
    });
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let waited = start.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("fell behind"), "{answer}");
    // The grace is 2 s; the whole time 20 s.
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(12),
        "cut after {waited:?}"
    );
    wait_until("the budget to be free", || {
        node.body_budget.held_bytes() == 0
    });
    // 20 KiB in pieces of 2 KiB every 400 ms (5 KiB/s; the pace asks 1 KiB/s): read whole.
    let body = txn_of("paced", 20 << 10);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST /v1/txn HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    for piece in body.chunks(2 << 10) {
        s.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(400));
    }
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
