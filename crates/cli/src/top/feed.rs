//! The feed of `spindle top`: reads the node's `/v1/status/stream` (server-sent events, one
//! a second) on a thread of its own and hands each status to the screen; when the node
//! cannot be reached or the stream ends it says why and tries again every second.

use std::sync::mpsc::Sender;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::model::{Sample, Update};

/// How the feed waits.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Wait before opening the stream again after it failed or ended.
    pub reconnect_delay_ms: u64,
    /// A stream that brings no status for this long counts as broken (the node sends one a
    /// second): it is dropped and opened again, and the screen says the node is unreachable.
    pub status_silence_ms_max: u64,
    /// Give up a connection attempt after this long (an unreachable host, not a refused port).
    pub connect_timeout_ms: u64,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            reconnect_delay_ms: 1000,
            status_silence_ms_max: 5000,
            connect_timeout_ms: 3000,
        }
    }
}
/// An event larger than this is refused (a status of thousands of views is far smaller).
pub const EVENT_BYTES_MAX: usize = 64 << 20;

/// Splits a `text/event-stream` body into events, across any chunking of the bytes.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
}

/// One server-sent event: its `event:` name (default `message`) and its joined `data:` lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

impl SseParser {
    /// Add bytes; return the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> anyhow::Result<Vec<SseEvent>> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some((end, sep)) = block_end(&self.buf) {
            let block = String::from_utf8_lossy(&self.buf[..end]).into_owned();
            self.buf.drain(..end + sep);
            let mut event = SseEvent {
                event: "message".to_owned(),
                data: String::new(),
            };
            let mut has_data = false;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event.event = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    if has_data {
                        event.data.push('\n');
                    }
                    event.data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    has_data = true;
                }
            }
            // A block of comments only (keep-alives) is no event.
            if has_data {
                out.push(event);
            }
        }
        if self.buf.len() > EVENT_BYTES_MAX {
            bail!("a status event is larger than {EVENT_BYTES_MAX} bytes");
        }
        Ok(out)
    }
}

/// Where the first blank line ends a block: (block length, separator length).
fn block_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// `host:port` or `http://host:port` → `http://host:port`.
pub fn base_url(server: &str) -> String {
    let s = server.trim_end_matches('/');
    if s.starts_with("http://") || s.starts_with("https://") {
        s.to_owned()
    } else {
        format!("http://{s}")
    }
}

/// Run the feed until the screen hangs up (`tx` fails). Blocks: call on its own thread.
pub fn run(server: &str, token: Option<&str>, timing: Timing, tx: &Sender<Update>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = tx.send(Update::Down(format!("cannot start the feed: {e}")));
            return;
        }
    };
    let url = format!("{}/v1/status/stream", base_url(server));
    rt.block_on(async {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_millis(timing.connect_timeout_ms)));
        let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
        loop {
            let why = match read_stream(&client, &url, token, timing, tx).await {
                Ok(Sent::HungUp) => return,
                Ok(Sent::Ended) => "the node closed the status stream".to_owned(),
                Err(e) => describe(&e),
            };
            if tx.send(Update::Down(why)).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(timing.reconnect_delay_ms)).await;
        }
    });
}

enum Sent {
    /// The stream ended.
    Ended,
    /// The screen is gone.
    HungUp,
}

async fn read_stream(
    client: &Client<HttpConnector, Empty<Bytes>>,
    url: &str,
    token: Option<&str>,
    timing: Timing,
    tx: &Sender<Update>,
) -> anyhow::Result<Sent> {
    let mut req = hyper::Request::get(url).header("accept", "text/event-stream");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let silent_ms = timing.status_silence_ms_max;
    let silence = Duration::from_millis(silent_ms);
    let resp = tokio::time::timeout(silence, client.request(req.body(Empty::new())?))
        .await
        .map_err(|_| anyhow::anyhow!("no answer in {silent_ms} ms"))?
        .context("cannot connect")?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.into_body().collect().await?.to_bytes();
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        if status == hyper::StatusCode::UNAUTHORIZED {
            bail!("{status}, give the node's token with --token or SPINDLE_TOKEN: {message}");
        }
        bail!("{status}: {message}");
    }
    let mut body = resp.into_body();
    let mut parser = SseParser::default();
    let mut deadline = tokio::time::Instant::now() + silence;
    loop {
        let Ok(frame) = tokio::time::timeout_at(deadline, body.frame()).await else {
            bail!("no status from the node for {silent_ms} ms");
        };
        let Some(frame) = frame else {
            break;
        };
        let frame = frame.context("the status stream broke off")?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        for ev in parser.push(&data)? {
            if ev.event != "status" {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(&ev.data).context("a status event is not JSON")?;
            if tx.send(Update::Sample(Sample::from_event(value))).is_err() {
                return Ok(Sent::HungUp);
            }
            deadline = tokio::time::Instant::now() + silence;
        }
    }
    Ok(Sent::Ended)
}

/// The error and its root cause on one line (hyper's causes in between repeat each other).
fn describe(e: &anyhow::Error) -> String {
    let first = e.to_string();
    let root = e.root_cause().to_string();
    if first.contains(&root) {
        first
    } else {
        format!("{first}: {root}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_and_keep_alives_are_skipped() {
        let stream = b": keep-alive\n\nevent: status\ndata: {\"a\":\ndata: 1}\n\nevent: status\r\ndata: 2\r\n\r\n";
        for cut in 0..stream.len() {
            let mut p = SseParser::default();
            let mut got = p.push(&stream[..cut]).unwrap();
            got.extend(p.push(&stream[cut..]).unwrap());
            assert_eq!(
                got,
                vec![
                    SseEvent {
                        event: "status".into(),
                        data: "{\"a\":\n1}".into()
                    },
                    SseEvent {
                        event: "status".into(),
                        data: "2".into()
                    },
                ],
                "cut at {cut}"
            );
        }
    }

    /// A fake node on a loopback port: each connection gets `answer(n)` (n counts
    /// connections from 0) and is then held open without another byte.
    fn fake_node(answer: impl Fn(usize) -> String + Send + 'static) -> String {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for (n, conn) in listener.incoming().enumerate() {
                let Ok(mut conn) = conn else { return };
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(answer(n).as_bytes());
                held.push(conn);
            }
        });
        addr
    }

    const SSE_HEAD: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

    fn chunk(data: &str) -> String {
        format!("{:x}\r\n{data}\r\n", data.len())
    }

    fn feed(addr: String, token: Option<&'static str>) -> std::sync::mpsc::Receiver<Update> {
        let (tx, rx) = std::sync::mpsc::channel();
        let timing = Timing {
            reconnect_delay_ms: 10,
            status_silence_ms_max: 300,
            connect_timeout_ms: 1000,
        };
        std::thread::spawn(move || run(&addr, token, timing, &tx));
        rx
    }

    fn next(rx: &std::sync::mpsc::Receiver<Update>) -> Update {
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the feed said nothing")
    }

    #[test]
    fn a_silent_stream_is_reported_and_opened_again() {
        // First connection: one status, then silence. Second: a status again.
        let addr = fake_node(|n| {
            let event = format!("event: status\ndata: {{\"status\": {{\"uptime_s\": {n}}}}}\n\n");
            format!("{SSE_HEAD}{}", chunk(&event))
        });
        let rx = feed(addr, None);
        let Update::Sample(s) = next(&rx) else {
            panic!("no first sample")
        };
        assert_eq!(s.uptime_s(), Some(0.0));
        assert_eq!(
            next(&rx),
            Update::Down("no status from the node for 300 ms".into())
        );
        let Update::Sample(s) = next(&rx) else {
            panic!("no sample after reconnecting")
        };
        assert_eq!(s.uptime_s(), Some(1.0));
    }

    #[test]
    fn a_refused_token_is_reported_with_what_to_do() {
        let addr = fake_node(|_| {
            let body = "{\"error\":\"unauthorized\",\"message\":\"a bearer token is required\"}";
            format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        });
        let rx = feed(addr, Some("wrong"));
        let Update::Down(why) = next(&rx) else {
            panic!("no error")
        };
        assert!(why.contains("401"), "{why}");
        assert!(why.contains("a bearer token is required"), "{why}");
        assert!(why.contains("--token or SPINDLE_TOKEN"), "{why}");
    }

    #[test]
    fn addresses_get_a_scheme() {
        assert_eq!(base_url("127.0.0.1:7070"), "http://127.0.0.1:7070");
        assert_eq!(base_url("http://h:1/"), "http://h:1");
    }
}
