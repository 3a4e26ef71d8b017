//! Moving a stream's leader to the server a publisher is connected to (docs/cluster.md,
//! "Where the stream's leader is").
//!
//! A JetStream publish goes to the server the client is connected to; when that server is
//! not the stream's leader, it relays every message over a route to the leader, which
//! costs a second server a receive and a send per message and the batch a hop each way.
//! The appender publishes every record, so once it holds the lease it asks the stream's
//! leader to step down in favour of its own server (`$JS.API.STREAM.LEADER.STEPDOWN`
//! with a preferred placement, nats-server 2.11 and later) before its first batch. It is
//! an optimisation only: if the request fails or the new leader does not show within the
//! wait, the appender goes on publishing through whichever server leads.

use std::time::Duration;

use async_nats::jetstream;
use serde_json::json;

/// What `lead_from_connected_server` found or did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The server the client is connected to already led the stream.
    AlreadyLeader { server: String },
    /// The leader stepped down and the connected server now leads.
    Moved { from: String, to: String },
}

/// How long the appender gives the whole move (an election takes tens of milliseconds).
pub const WAIT: Duration = Duration::from_secs(1);

/// How often the stream's info is asked while waiting for the new leader.
const POLL: Duration = Duration::from_millis(20);

/// How long one of those asks waits for its answer before the next one is sent.
const ASK_WAIT: Duration = Duration::from_millis(100);

/// Make the server `client` is connected to the leader of `stream`, waiting at most `wait`
/// for the new leader to show in the stream's info. An `Err` says why it is not (the
/// stream unchanged, or led by another server); nothing else is affected.
pub async fn lead_from_connected_server(
    client: &async_nats::Client,
    js: &jetstream::Context,
    stream: &str,
    wait: Duration,
) -> Result<Placement, String> {
    let here = client.server_info().server_name;
    if here.is_empty() {
        return Err("the connected server sent no name".to_owned());
    }
    let leader = leader_of(js, stream).await?;
    if leader == here {
        return Ok(Placement::AlreadyLeader { server: here });
    }
    let answer: serde_json::Value = js
        .request(
            format!("STREAM.LEADER.STEPDOWN.{stream}"),
            &json!({ "placement": { "preferred": here } }),
        )
        .await
        .map_err(|e| format!("leader step-down request: {e}"))?;
    if let Some(error) = answer.get("error") {
        return Err(format!("leader step-down refused: {error}"));
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // The election takes tens of milliseconds; an ask sent before it ends is dropped.
        tokio::time::sleep(POLL).await;
        // Right after a step-down the stream may answer without a leader, or not at all
        // (an info request sent during the election goes unanswered): ask again soon.
        let asked = tokio::time::timeout(ASK_WAIT, leader_of(js, stream)).await;
        match asked.unwrap_or_else(|_| Err("no answer".to_owned())) {
            Ok(now) if now == here => {
                return Ok(Placement::Moved {
                    from: leader,
                    to: here,
                })
            }
            Ok(now) if now != leader && !now.is_empty() => {
                return Err(format!("{now} took the lead instead of {here}"))
            }
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("{here} was not leading after {wait:?}"));
        }
    }
}

/// The name of the server leading `stream` ("" while it has none).
async fn leader_of(js: &jetstream::Context, stream: &str) -> Result<String, String> {
    let handle = js
        .get_stream(stream)
        .await
        .map_err(|e| format!("stream info: {e}"))?;
    let info = handle.cached_info();
    Ok(info
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .unwrap_or_default())
}
