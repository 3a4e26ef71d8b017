//! The `Iterate` method's response, framed by hand so that the carousel's shared chunks go
//! to the socket without a copy per rider.
//!
//! tonic's codec encodes every message into its own buffer, which copies each shared chunk
//! once per rider: the per-rider serialisation cost Beam found dominating its CPU. A
//! `FrameChunk` is a single `bytes` field, so its gRPC message is a fixed little prefix —
//! the 5-byte gRPC header, the field tag and the length varint — followed by the chunk
//! itself. The body yields the prefix and then the shared `Bytes` (a reference count, no
//! copy), and ends with the `grpc-status` trailers. Requests are decoded as usual, and the
//! bearer-token interceptor runs before this path as for every method.

use bytes::{BufMut, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::{BodyExt, Limited, StreamBody};
use prost::Message;
use tokio::sync::mpsc;
use tonic::codegen::{http, Body as HttpBody, StdError};
use tonic::Status;

use crate::grpc::{Service, GRPC_RECEIVE_BYTES_MAX};
use crate::proto;

/// The gRPC message prefix of a `FrameChunk` holding `len` bytes of frames.
pub fn message_prefix(len: usize) -> Bytes {
    let field_len = 1 + prost::encoding::encoded_len_varint(len as u64) + len;
    let mut out = BytesMut::with_capacity(16);
    out.put_u8(0); // not compressed
    out.put_u32(u32::try_from(field_len).expect("chunks are far below 4 GiB"));
    out.put_u8(0x0a); // field 1, length-delimited
    prost::encoding::encode_varint(len as u64, &mut out);
    out.freeze()
}

/// Decode one unary gRPC request message from a whole body.
fn decode_request(body: &[u8]) -> Result<proto::IterateRequest, Status> {
    let (header, message) = body
        .split_at_checked(5)
        .ok_or_else(|| Status::invalid_argument("the request has no gRPC message"))?;
    if header[0] != 0 {
        return Err(Status::unimplemented(
            "compressed requests are not supported",
        ));
    }
    let len = u32::from_be_bytes(header[1..5].try_into().expect("4 bytes")) as usize;
    if len != message.len() {
        return Err(Status::invalid_argument(format!(
            "the request holds {} message bytes, its header says {len}",
            message.len()
        )));
    }
    proto::IterateRequest::decode(message)
        .map_err(|e| Status::invalid_argument(format!("malformed IterateRequest: {e}")))
}

fn trailers(status: &Status) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        map.insert("grpc-status", http::HeaderValue::from_static("13"));
    }
    map
}

struct Stream {
    rx: mpsc::Receiver<Result<Bytes, Status>>,
    /// Turns true when the node stops: the stream ends with UNAVAILABLE.
    stop: tokio::sync::watch::Receiver<bool>,
    pending: Option<Bytes>,
    done: bool,
}

/// Serve one `Iterate` call.
pub async fn iterate<B>(
    service: Service,
    req: http::Request<B>,
) -> http::Response<tonic::body::Body>
where
    B: HttpBody + Send + 'static,
    B::Data: Send,
    B::Error: Into<StdError> + Send + 'static,
{
    let connection = req
        .extensions()
        .get::<crate::serve::GrpcConnection>()
        .cloned();
    let body = match Limited::new(req.into_body(), GRPC_RECEIVE_BYTES_MAX + 5)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return Status::invalid_argument(format!("reading the request: {e}")).into_http();
        }
    };
    let request = match decode_request(&body) {
        Ok(r) => r,
        Err(status) => return status.into_http(),
    };
    // A cut inside a transaction would deliver part of it.
    if let Some(to) = request.to.map(spindle_core::Index::new) {
        match service.node().commit_around(to).await {
            Ok(None) => {}
            Ok(Some(commit)) => {
                return Status::invalid_argument(format!(
                    "to = {to} is inside a transaction (its commit index is {commit}): an \
                     iteration cut there would deliver part of it; cut at a commit index"
                ))
                .into_http()
            }
            Err(e) => {
                return Status::unavailable(format!(
                    "cannot read the log at {to} to check the cut names a commit: {e}"
                ))
                .into_http()
            }
        }
    }
    let rx = match service.start_iteration(&request, connection) {
        Ok(rx) => rx,
        Err(status) => return status.into_http(),
    };
    let state = Stream {
        rx,
        stop: service.node().stopping(),
        pending: None,
        done: false,
    };
    let frames = futures_util::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        if let Some(chunk) = st.pending.take() {
            return Some((Ok::<_, Status>(Frame::data(chunk)), st));
        }
        let next = tokio::select! {
            biased;
            () = crate::grpc::stopped(&mut st.stop) => Some(Err(crate::grpc::shutting_down())),
            next = st.rx.recv() => next,
        };
        let frame = match next {
            Some(Ok(chunk)) => {
                let prefix = message_prefix(chunk.len());
                st.pending = Some(chunk);
                Frame::data(prefix)
            }
            Some(Err(status)) => {
                st.done = true;
                Frame::trailers(trailers(&status))
            }
            None => {
                st.done = true;
                Frame::trailers(trailers(&Status::ok("")))
            }
        };
        Some((Ok(frame), st))
    });
    let mut response = http::Response::new(tonic::body::Body::new(StreamBody::new(frames)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_and_chunk_are_the_codec_encoding_of_a_frame_chunk() {
        for len in [0usize, 1, 127, 128, 300, 256 << 10] {
            let chunk = Bytes::from(vec![7u8; len]);
            let mut ours = message_prefix(len).to_vec();
            ours.extend_from_slice(&chunk);
            let message = proto::FrameChunk { frames: chunk }.encode_to_vec();
            let mut expected = vec![0u8];
            expected.extend_from_slice(&(message.len() as u32).to_be_bytes());
            // prost omits an empty bytes field; a gRPC client decodes both the same way.
            if len > 0 {
                expected.extend_from_slice(&message);
                assert_eq!(ours, expected, "len {len}");
            }
        }
    }

    #[test]
    fn requests_are_decoded_or_refused_with_what_is_wrong() {
        let r = proto::IterateRequest {
            view: "disk-1".into(),
            dedicated: true,
            ..Default::default()
        };
        let m = r.encode_to_vec();
        let mut body = vec![0u8];
        body.extend_from_slice(&(m.len() as u32).to_be_bytes());
        body.extend_from_slice(&m);
        assert_eq!(decode_request(&body).unwrap(), r);
        assert_eq!(
            decode_request(&body[..3]).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let mut short = body.clone();
        short.pop();
        assert!(decode_request(&short)
            .unwrap_err()
            .message()
            .contains("header says"));
        body[0] = 1;
        assert_eq!(
            decode_request(&body).unwrap_err().code(),
            tonic::Code::Unimplemented
        );
    }
}
