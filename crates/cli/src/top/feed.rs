//! The feed of `spindle top`: reads the node's `/v1/status/stream` (server-sent events, one
//! a second) on a thread of its own and hands each status to the screen; when the node
//! cannot be reached or the stream ends it says why and tries again every second.

use std::sync::mpsc::Sender;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::model::{Sample, Update};

/// Wait before opening the stream again after it failed or ended.
pub const RECONNECT_DELAY_MS: u64 = 1000;
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
pub fn run(server: &str, token: Option<&str>, tx: &Sender<Update>) {
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
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        loop {
            let why = match read_stream(&client, &url, token, tx).await {
                Ok(Sent::HungUp) => return,
                Ok(Sent::Ended) => "the node closed the status stream".to_owned(),
                Err(e) => describe(&e),
            };
            if tx.send(Update::Down(why)).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(RECONNECT_DELAY_MS)).await;
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
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    url: &str,
    token: Option<&str>,
    tx: &Sender<Update>,
) -> anyhow::Result<Sent> {
    let mut req = hyper::Request::get(url).header("accept", "text/event-stream");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = client
        .request(req.body(Empty::new())?)
        .await
        .context("cannot connect")?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.into_body().collect().await?.to_bytes();
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        if status == hyper::StatusCode::UNAUTHORIZED {
            bail!("{status}: {message} (give the node's token with --token or SPINDLE_TOKEN)");
        }
        bail!("{status}: {message}");
    }
    let mut body = resp.into_body();
    let mut parser = SseParser::default();
    while let Some(frame) = body.frame().await {
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

    #[test]
    fn addresses_get_a_scheme() {
        assert_eq!(base_url("127.0.0.1:7070"), "http://127.0.0.1:7070");
        assert_eq!(base_url("http://h:1/"), "http://h:1");
    }
}
