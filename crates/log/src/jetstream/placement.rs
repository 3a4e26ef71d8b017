//! Moving a stream's leader to the server a publisher is connected to (docs/cluster.md,
//! "Where the stream's leader is").
//!
//! A JetStream publish goes to the server the client is connected to; when that server is
//! not the stream's leader, it relays every message over a route to the leader, which
//! costs a second server a receive and a send per message and the batch a hop each way.
//! The appender publishes every record, so once it holds the lease it asks the stream's
//! leader to step down in favour of its own server (`$JS.API.STREAM.LEADER.STEPDOWN`
//! with a preferred placement, nats-server 2.11 and later) before its first batch. It is
//! an optimisation only: when the connected server is not a replica of the stream, or is
//! not current within the time given, or the move is refused or not seen in time, the
//! appender publishes through whichever server leads. A move requested but not seen may still complete after the
//! appender began publishing: its first batch then meets an election, as it would meet
//! one the servers started themselves.

use std::time::Duration;

use async_nats::jetstream;
use serde_json::json;
use thiserror::Error;
use tokio::time::Instant;

use super::Shared;

/// What `lead_from_connected_server` found or did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The server the client is connected to already led the stream.
    AlreadyLeader { server: String },
    /// The leader stepped down and the connected server now leads.
    Moved { from: String, to: String },
}

/// Why the connected server does not lead the stream.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum NotPlaced {
    /// The connected server is not a replica of the stream (a cluster larger than the
    /// stream's replicas, an R1 stream led elsewhere): it cannot lead, and no move was
    /// asked.
    #[error("{server} is not a replica of the stream")]
    NotReplica { server: String },
    /// The servers answered the step-down request with an error; nothing moved.
    #[error("the step-down was refused: {0}")]
    Refused(String),
    /// Another server took the lead.
    #[error("{leader} took the lead instead of {server}")]
    OtherLeader { leader: String, server: String },
    /// No leader, the connected server not current, no answer, or the move not seen,
    /// within the time given. If the step-down request was sent (`asked`), the election
    /// may still be under way.
    #[error("not led by {server} within {wait:?} (step-down asked: {asked})")]
    Unconfirmed {
        server: String,
        wait: Duration,
        asked: bool,
    },
    /// The step-down request failed.
    #[error("{0}")]
    Request(String),
}

/// How long the appender gives the whole move (an election takes tens of milliseconds).
pub const LEADER_MOVE_WAIT: Duration = Duration::from_secs(1);

/// How often the stream's info is asked while waiting for the new leader.
const POLL: Duration = Duration::from_millis(20);

/// How long one of those asks waits for its answer before the next one is sent.
const ASK_WAIT: Duration = Duration::from_millis(100);

/// What the stream's info says about its leadership.
struct Leadership {
    /// "" while the stream has no leader.
    leader: String,
    /// The replicas other than the leader, and whether each is current.
    followers: Vec<(String, bool)>,
}

/// Make the server `client` is connected to the leader of `stream`, within `wait` for the
/// whole step (every request included). A server that is a replica of the stream but not
/// current yet (a stream just created, a replica catching up) is waited for; one that is
/// not a replica at all is not asked about.
pub async fn lead_from_connected_server(
    client: &async_nats::Client,
    js: &jetstream::Context,
    stream: &str,
    wait: Duration,
) -> Result<Placement, NotPlaced> {
    let deadline = Instant::now() + wait.min(Duration::from_secs(86_400));
    let here = client.server_info().server_name;
    let unconfirmed = |asked| NotPlaced::Unconfirmed {
        server: here.clone(),
        wait,
        asked,
    };
    // Until the stream has a leader and this server is a current follower of it.
    let before = loop {
        if let Some(now) = ask(js, stream, deadline).await {
            match first(&here, &now) {
                First::Leads => return Ok(Placement::AlreadyLeader { server: here }),
                First::Ask => break now,
                First::NotReplica => return Err(NotPlaced::NotReplica { server: here }),
                First::Wait => {}
            }
        }
        pause(deadline).await.ok_or_else(|| unconfirmed(false))?;
    };
    let body = json!({ "placement": { "preferred": here } });
    let request =
        js.request::<_, _, serde_json::Value>(format!("STREAM.LEADER.STEPDOWN.{stream}"), &body);
    let answer = bounded(deadline, request)
        .await
        .ok_or_else(|| unconfirmed(true))?
        .map_err(|e| NotPlaced::Request(format!("leader step-down: {e}")))?;
    if let Some(error) = answer.get("error") {
        return Err(NotPlaced::Refused(error.to_string()));
    }
    loop {
        // The election takes tens of milliseconds; an ask sent before it ends goes
        // unanswered, so each waits at most `ASK_WAIT` before the next.
        pause(deadline).await.ok_or_else(|| unconfirmed(true))?;
        if let Some(now) = ask(js, stream, deadline).await {
            match next(&here, &before.leader, &now.leader) {
                Next::Done => {
                    return Ok(Placement::Moved {
                        from: before.leader,
                        to: here,
                    })
                }
                Next::Other => {
                    return Err(NotPlaced::OtherLeader {
                        leader: now.leader,
                        server: here,
                    })
                }
                Next::Wait => {}
            }
        }
    }
}

/// Sleep `POLL`, or `None` (without sleeping past it) once `deadline` is reached.
async fn pause(deadline: Instant) -> Option<()> {
    let until = (Instant::now() + POLL).min(deadline);
    tokio::time::sleep_until(until).await;
    (Instant::now() < deadline).then_some(())
}

/// The stream's leadership, or `None` when the ask fails or goes unanswered within
/// `ASK_WAIT` (as during an election) or by `deadline`: the caller asks again.
async fn ask(js: &jetstream::Context, stream: &str, deadline: Instant) -> Option<Leadership> {
    let asked = tokio::time::timeout(ASK_WAIT, leadership(js, stream));
    bounded(deadline, asked).await?.ok()?.ok()
}

/// Before the step-down: what the stream's leadership says about `here`.
#[derive(Debug, PartialEq, Eq)]
enum First {
    /// `here` already leads.
    Leads,
    /// `here` is a current follower of a leader: ask for the move.
    Ask,
    /// The stream has a leader and `here` is none of its replicas.
    NotReplica,
    /// No leader yet, or `here` not current yet.
    Wait,
}

fn first(here: &str, now: &Leadership) -> First {
    if now.leader.is_empty() {
        return First::Wait;
    }
    if now.leader == here {
        return First::Leads;
    }
    match now.followers.iter().find(|(name, _)| name == here) {
        Some((_, true)) => First::Ask,
        Some((_, false)) => First::Wait,
        None => First::NotReplica,
    }
}

/// After the step-down was asked: what the leader now named says.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// `here` leads.
    Done,
    /// A third server leads.
    Other,
    /// No leader yet, or the old one still (the step-down not applied yet).
    Wait,
}

fn next(here: &str, before: &str, now: &str) -> Next {
    if now == here {
        Next::Done
    } else if now.is_empty() || now == before {
        Next::Wait
    } else {
        Next::Other
    }
}

/// `fut`, or `None` once `deadline` passed.
async fn bounded<T>(deadline: Instant, fut: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout_at(deadline, fut).await.ok()
}

async fn leadership(js: &jetstream::Context, stream: &str) -> Result<Leadership, NotPlaced> {
    let handle = js
        .get_stream(stream)
        .await
        .map_err(|e| NotPlaced::Request(format!("stream info: {e}")))?;
    let cluster = handle.cached_info().cluster.clone().unwrap_or_default();
    Ok(Leadership {
        leader: cluster.leader.unwrap_or_default(),
        followers: cluster
            .replicas
            .into_iter()
            .map(|p| (p.name, p.current && !p.offline))
            .collect(),
    })
}

/// The appender, before its first batch: make the server this process is connected to the
/// stream's leader, so that its batches are not relayed by another server. Logged only.
pub(crate) async fn place_leader(shared: &Shared) {
    let stream = &shared.config.stream;
    let wait = shared.config.leader_move_wait;
    match lead_from_connected_server(&shared.client, &shared.js, stream, wait).await {
        Ok(Placement::Moved { from, to }) => {
            tracing::info!(%stream, %from, %to, "moved the stream's leader to the appender's server")
        }
        Ok(Placement::AlreadyLeader { .. }) => {}
        // Nothing was asked: a server that cannot lead is no reason to warn at every open.
        Err(why @ NotPlaced::NotReplica { .. }) => {
            tracing::debug!(%stream, %why, "the stream's leader stays where it is")
        }
        Err(why) => tracing::warn!(
            %stream, %why,
            "the stream's leader may not be the appender's server: its batches may be relayed"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_move_is_asked_only_of_a_current_follower_under_a_leader() {
        let lead = |leader: &str, followers: &[(&str, bool)]| Leadership {
            leader: leader.to_owned(),
            followers: followers.iter().map(|&(n, c)| (n.to_owned(), c)).collect(),
        };
        assert_eq!(first("a", &lead("a", &[("b", true)])), First::Leads);
        assert_eq!(first("a", &lead("b", &[("a", true)])), First::Ask);
        assert_eq!(first("a", &lead("b", &[("a", false)])), First::Wait);
        assert_eq!(first("a", &lead("", &[("a", true)])), First::Wait);
        assert_eq!(first("", &lead("", &[])), First::Wait);
        assert_eq!(first("a", &lead("b", &[("c", true)])), First::NotReplica);
    }

    #[test]
    fn the_move_is_done_only_when_the_connected_server_leads() {
        assert_eq!(next("a", "b", "a"), Next::Done);
        assert_eq!(next("a", "b", "b"), Next::Wait);
        assert_eq!(next("a", "b", ""), Next::Wait);
        assert_eq!(next("a", "b", "c"), Next::Other);
    }
}
