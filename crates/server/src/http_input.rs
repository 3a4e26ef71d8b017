//! What the HTTP surface accepts before a handler runs: the request line and headers within
//! named bounds, query strings and path parameters decoded strictly (percent-decoded bytes
//! must be UTF-8, no parameter twice), and bodies read within a size and a time bound.
//!
//! Every refusal here is an `ApiError`, so it has the JSON error shape of docs/api.md;
//! nothing here changes state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::path::ErrorKind;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request};
use axum::http::{StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::http::ApiError;

/// Longest request target (path and query) in bytes; longer is `414`. An edge named by
/// three fields of the longest lengths, every byte percent-encoded, fits.
pub const URI_BYTES_MAX: usize = 16 << 10;
/// Most bytes of request headers (names and values); more is `431`.
pub const HEADER_BYTES_MAX: usize = 64 << 10;

/// Refuse a request line or headers over their bounds with a JSON error. (Requests beyond
/// the HTTP layer's own parse limits, about 400 KiB of head or 100 headers, are refused by it
/// with an empty `414`/`431` and the connection closed.)
pub fn request_limits(req: &Request) -> Result<(), ApiError> {
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if target > URI_BYTES_MAX {
        return Err(ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the request target is {target} bytes; the limit is {URI_BYTES_MAX}"),
        ));
    }
    let headers: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if headers > HEADER_BYTES_MAX {
        return Err(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!("the request headers are {headers} bytes; the limit is {HEADER_BYTES_MAX}"),
        ));
    }
    Ok(())
}

/// Refuse a request that carries query parameters, for an endpoint that takes none (an
/// empty query, `?` alone, is none).
pub async fn refuse_query(req: Request, next: Next) -> Response {
    match query_params(req.uri()) {
        Ok(q) if q.is_empty() => next.run(req).await,
        Ok(q) => {
            let names: Vec<&str> = q.keys().map(String::as_str).collect();
            ApiError::bad(format!(
                "unknown query parameter(s) {names:?}; this endpoint takes none"
            ))
            .into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// The query string's parameters, percent-decoded (`+` is a space). Refused: a malformed
/// escape, a name or value that is not UTF-8 once decoded, a parameter given twice.
pub fn query_params(uri: &Uri) -> Result<BTreeMap<String, String>, ApiError> {
    let mut out = BTreeMap::new();
    for pair in uri.query().unwrap_or("").split('&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decode_component(name).map_err(|e| ApiError::bad(format!("query: {e}")))?;
        let value = decode_component(value)
            .map_err(|e| ApiError::bad(format!("query parameter {name:?}: {e}")))?;
        if out.contains_key(&name) {
            return Err(ApiError::bad(format!(
                "query parameter {name:?} is given twice"
            )));
        }
        out.insert(name, value);
    }
    Ok(out)
}

/// Percent-decode one query component and require UTF-8.
pub fn decode_component(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
                let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                    return Err(format!(
                        "malformed percent-escape at byte {i} (write '%' as %25)"
                    ));
                };
                out.push((hi * 16 + lo) as u8);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|e| {
        format!(
            "not UTF-8 once percent-decoded (invalid byte at {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// One path parameter, or the JSON refusal of a malformed one (bad escape, not UTF-8).
pub fn path_param(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    match p {
        Ok(Path(s)) => Ok(s),
        Err(PathRejection::FailedToDeserializePathParams(e)) => match e.kind() {
            ErrorKind::InvalidUtf8InPathParam { key } => Err(ApiError::bad(format!(
                "path parameter {key:?} is not UTF-8 once percent-decoded"
            ))),
            _ => Err(ApiError::bad(format!("path: {}", e.body_text()))),
        },
        Err(other) => Err(ApiError::bad(format!("path: {}", other.body_text()))),
    }
}

/// Request bodies held at once, across every connection and stream: each body takes its
/// share of this budget before it is read (`read_body`) and gives it back when its request
/// is done with it. Counted in KiB.
#[derive(Debug)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    kib: usize,
}

impl BodyBudget {
    pub fn new(bytes: u64) -> BodyBudget {
        let kib = usize::try_from(bytes.div_ceil(1024))
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        BodyBudget {
            permits: Arc::new(Semaphore::new(kib)),
            kib,
        }
    }

    /// Bytes of request bodies held now (rounded up to KiB per body).
    pub fn held_bytes(&self) -> u64 {
        (self.kib - self.permits.available_permits()) as u64 * 1024
    }

    fn bytes(&self) -> u64 {
        self.kib as u64 * 1024
    }

    /// A share for `bytes` now, or `None` when the budget has no room for it (a share larger
    /// than the whole budget takes all of it).
    pub fn try_hold(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let kib = u32::try_from(bytes.div_ceil(1024).min(self.kib as u64)).unwrap_or(u32::MAX);
        self.permits.clone().try_acquire_many_owned(kib).ok()
    }
}

/// Pieces a held answer is handed to its connection in.
pub const ANSWER_PIECE_BYTES: usize = 64 << 10;

/// An answer body holding its share of the answer budget for as long as any of its bytes
/// is held: every piece it hands on shares the answer's buffer and carries the share with
/// it, so the share goes back once the connection has dropped the last piece (written to
/// the socket, or the client went away), not when it merely has them all in hand.
#[derive(Debug)]
pub struct HeldAnswer {
    body: Body,
    /// Data taken from `body` and not yet handed on.
    pending: Bytes,
    held: Option<Arc<OwnedSemaphorePermit>>,
}

impl HeldAnswer {
    pub fn new(body: Body, held: OwnedSemaphorePermit) -> HeldAnswer {
        HeldAnswer {
            body,
            pending: Bytes::new(),
            held: Some(Arc::new(held)),
        }
    }
}

/// One piece of a held answer: its bytes, and the answer's share of the budget.
struct HeldPiece {
    bytes: Bytes,
    _held: Option<Arc<OwnedSemaphorePermit>>,
}

impl AsRef<[u8]> for HeldPiece {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl http_body::Body for HeldAnswer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(ANSWER_PIECE_BYTES);
                let piece = Bytes::from_owner(HeldPiece {
                    bytes: this.pending.split_to(n),
                    _held: this.held.clone(),
                });
                return Poll::Ready(Some(Ok(http_body::Frame::data(piece))));
            }
            match std::pin::Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.pending = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.held = None;
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.body.size_hint();
        let pending = self.pending.len() as u64;
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(inner.lower() + pending);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + pending);
        }
        hint
    }
}

/// A request body read whole, holding its share of the `BodyBudget` until dropped.
#[derive(Debug)]
pub struct HeldBody {
    pub bytes: Bytes,
    _held: OwnedSemaphorePermit,
}

impl HeldBody {
    /// The bytes, and the budget they hold (kept until the request is done with them).
    pub fn split(self) -> (Bytes, OwnedSemaphorePermit) {
        (self.bytes, self._held)
    }
}

impl std::ops::Deref for HeldBody {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// When an admitted body must have its next bytes. A body holds its whole share of the
/// budget while it arrives, so one that trickles in (or stops) would hold it for all of
/// `request_body_ms_max`: instead, after a grace (a tenth of that time, at least 1 s), it
/// must keep the pace that brings its share in within that time, or it is cut. A client
/// that holds a share must send it; one that sends nothing gives its share back after the
/// grace.
///
/// A body of unknown length (chunked) holds its endpoint's whole limit, but its real size
/// may be far smaller: it is held to the pace of its limit or `UNKNOWN_LENGTH_PACE_MAX`
/// bytes a second, whichever is slower, so an honest small upload that streams slowly is
/// not cut for not sending bytes it does not have.
#[derive(Debug, Clone, Copy)]
struct Pace {
    start: Instant,
    grace: Duration,
    /// Bytes a second the body must keep up after the grace.
    rate: f64,
    end: Instant,
}

/// The pace a body of unknown length is held to at most, in bytes a second.
const UNKNOWN_LENGTH_PACE_MAX: f64 = 64.0 * 1024.0;

impl Pace {
    /// `share` bytes, of which `known` says whether the client declared them.
    fn new(start: Instant, time_max: Duration, share: usize, known: bool) -> Pace {
        let grace = (time_max / 10).max(Duration::from_secs(1)).min(time_max);
        let mut rate = share.max(1) as f64 / time_max.as_secs_f64().max(1e-3);
        if !known {
            rate = rate.min(UNKNOWN_LENGTH_PACE_MAX);
        }
        Pace {
            start,
            grace,
            rate,
            end: start + time_max,
        }
    }

    /// The latest the next bytes may come, `received` bytes having come.
    fn deadline(&self, received: usize) -> Instant {
        let due = (received as f64 / self.rate).min(1e9);
        (self.start + self.grace + Duration::from_secs_f64(due)).min(self.end)
    }
}

/// Read a body of at most `limit` bytes, taking its bytes from `budget`. Before its first
/// byte is read a body takes its whole share at once — all of a declared `Content-Length`,
/// else `limit`, of which what the body did not use is given back once it is read — so no
/// body ever holds part of the budget while it waits for more. A body the budget has no
/// room for within `time_max` is `503 busy`; a declared length over the limit is refused
/// before anything is read; an admitted body that has not arrived within `time_max` of
/// its admission, or falls behind the pace that would bring it in by then (`Pace`), is
/// `408`.
pub async fn read_body(
    body: Body,
    limit: usize,
    time_max: Duration,
    budget: &BodyBudget,
) -> Result<HeldBody, ApiError> {
    let too_large = |got: &str| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body is over the limit of {limit} bytes ({got})"),
        )
    };
    let hint = body.size_hint();
    if hint.lower() > limit as u64 {
        return Err(too_large(&format!("Content-Length is {}", hint.lower())));
    }
    let declared = hint.exact().map(|n| n as usize);
    let share = declared.unwrap_or(limit);
    let admitted = tokio::time::timeout(
        time_max,
        budget.permits.clone().acquire_many_owned(kib(share)),
    )
    .await;
    // The budget's semaphore is never closed.
    let Ok(Ok(mut held)) = admitted else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!(
                "the request bodies being read hold all of the node's request_bodies_bytes_max \
                 ({} bytes) and none gave way within {} ms (request_body_ms_max); retry later",
                budget.bytes(),
                time_max.as_millis()
            ),
        ));
    };
    let pace = Pace::new(Instant::now(), time_max, share, declared.is_some());
    // A body that arrives in one frame is kept as it came; one of several is gathered into
    // a buffer that never grows past the body's share.
    let mut first: Option<Bytes> = None;
    let mut buf: Vec<u8> = Vec::new();
    let mut body = std::pin::pin!(body);
    loop {
        let received = first.as_ref().map_or(buf.len(), Bytes::len);
        let deadline = pace.deadline(received);
        let frame = match tokio::time::timeout_at(deadline, body.as_mut().frame()).await {
            Ok(None) => break,
            Ok(Some(Ok(frame))) => frame,
            Ok(Some(Err(e))) => {
                return Err(ApiError::bad(format!("request body broke off: {e}")));
            }
            Err(_) if deadline < pace.end => {
                return Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    format!(
                        "the request body fell behind: {received} of its {share} bytes arrived \
                         in {} ms, slower than the pace that brings it in within {} ms \
                         (request_body_ms_max)",
                        deadline.duration_since(pace.start).as_millis(),
                        time_max.as_millis()
                    ),
                ))
            }
            Err(_) => {
                return Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    format!(
                        "the request body did not arrive within {} ms (request_body_ms_max)",
                        time_max.as_millis()
                    ),
                ))
            }
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let len = first.as_ref().map_or(buf.len(), Bytes::len) + data.len();
        if len > share {
            return Err(too_large("it kept coming"));
        }
        if buf.is_empty() && first.is_none() {
            first = Some(data);
            continue;
        }
        if len > buf.capacity() {
            // Doubling, but exactly and never past the share the body holds.
            let cap = declared.unwrap_or_else(|| len.max(2 * buf.capacity()).min(share));
            buf.reserve_exact(cap - buf.len());
        }
        if let Some(f) = first.take() {
            buf.extend_from_slice(&f);
        }
        buf.extend_from_slice(&data);
    }
    // Give back what the body did not use (a body of unknown length took `limit`); a
    // gathered body keeps its buffer's whole capacity.
    let (bytes, used) = match first {
        Some(f) => {
            let len = f.len();
            (f, len)
        }
        None => {
            let cap = buf.capacity();
            (Bytes::from(buf), cap)
        }
    };
    let used = kib(used) as usize;
    if held.num_permits() > used {
        drop(held.split(held.num_permits() - used));
    }
    Ok(HeldBody { bytes, _held: held })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_decode_strictly() {
        assert_eq!(decode_component("a+b%20c").unwrap(), "a b c");
        assert_eq!(decode_component("%C3%A9").unwrap(), "é");
        assert_eq!(decode_component("%e2%82%ac").unwrap(), "€");
        for bad in ["%FF", "%C3", "%", "%4", "%zz", "%+1", "a%ed%a0%80"] {
            assert!(decode_component(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_body_must_keep_the_pace_that_brings_it_in_on_time() {
        let start = Instant::now();
        let secs = Duration::from_secs;
        let pace = Pace::new(start, secs(30), 1000, true);
        // Nothing yet: the grace (a tenth of the time).
        assert_eq!(pace.deadline(0), start + secs(3));
        // Half of it: half of the time, after the grace.
        assert_eq!(pace.deadline(500), start + secs(18));
        // All of it, or more (a body of unknown length): never past the time.
        assert_eq!(pace.deadline(1000), start + secs(30));
        assert_eq!(pace.deadline(5000), start + secs(30));
        // The grace is at least a second, and never past the time itself.
        assert_eq!(
            Pace::new(start, secs(5), 10, true).deadline(0),
            start + secs(1)
        );
        let short = Duration::from_millis(300);
        assert_eq!(Pace::new(start, short, 10, true).deadline(0), start + short);
        assert_eq!(Pace::new(start, short, 0, true).deadline(0), start + short);
        // A body of unknown length holding a 16 MiB limit need only keep 64 KiB a second:
        // 128 KiB by the grace plus 2 s, where its limit's pace would ask for 1 MiB.
        let unknown = Pace::new(start, secs(30), 16 << 20, false);
        assert_eq!(unknown.deadline(128 << 10), start + secs(5));
        // ... unless its limit's own pace is slower.
        let small = Pace::new(start, secs(30), 30 << 10, false);
        assert_eq!(small.deadline(15 << 10), start + secs(18));
    }

    #[test]
    fn parameters_are_refused_twice() {
        let uri: Uri = "/v1/item?node=a&node=b".parse().unwrap();
        assert!(query_params(&uri).is_err());
        let uri: Uri = "/v1/item?node=a&&label=%2B".parse().unwrap();
        let q = query_params(&uri).unwrap();
        assert_eq!(q["node"], "a");
        assert_eq!(q["label"], "+");
    }
}
