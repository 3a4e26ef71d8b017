//! Slow-rider policy (DESIGN.md §5): when the scanner waits for a rider, when it moves a
//! rider off the shared scan onto its own iterator, and when a demoted rider may come
//! back. Pure functions from state to a decision; the scanner and the rider do the I/O. A
//! rider is never ejected: the worst case is that it finishes its revolution alone.
//!
//! The scanner never runs more than `rider_lag_chunks_max` chunks ahead of any rider. A
//! rider at that bound is demoted only if another rider is near the head of the scan (at
//! most half the bound behind), that is, only if it holds back a rider that keeps pace; if
//! every rider is slow, the scan waits for the pack. So a lone rider is never demoted,
//! and riders reading at equal pace are never demoted.
//!
//! Hysteresis: a demoted rider rejoins only at a chunk that is at most half the bound
//! behind the scanner, so a rejoined rider is not at the bound again soon.

/// What the scanner does about one rider of the shared scan before it publishes a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedDecision {
    /// The rider can take one more chunk: publish.
    Ride,
    /// The rider is at the bound and so is the whole pack: wait for it to read.
    Wait,
    /// The rider is at the bound and holds back a rider near the head: move it to its own
    /// iterator (it stops gating the scanner now), then publish.
    Demote,
}

/// Decided at every chunk boundary. `lag_chunks`: chunks published that this rider has
/// not read; `leader_lag_chunks`: the smallest lag among the shared scan's riders (this
/// one included, so it is at most `lag_chunks`).
pub fn shared_decision(
    lag_chunks: u64,
    leader_lag_chunks: u64,
    rider_lag_chunks_max: u64,
) -> SharedDecision {
    if lag_chunks < rider_lag_chunks_max {
        SharedDecision::Ride
    } else if leader_lag_chunks <= rider_lag_chunks_max / 2 {
        SharedDecision::Demote
    } else {
        SharedDecision::Wait
    }
}

/// The highest lag at which a demoted rider may rejoin.
pub fn rejoin_lag_chunks_max(rider_lag_chunks_max: u64) -> u64 {
    rider_lag_chunks_max / 2
}

/// What a demoted rider sees of the shared scan when it is about to read on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RejoinView {
    /// Chunks the scanner has published.
    pub cursor: u64,
    /// The oldest chunk still in the ring (older slots may be rewritten).
    pub oldest_joinable: u64,
    /// A chunk of the rider's group that starts exactly where the rider is.
    pub aligned: Option<u64>,
    /// The first chunk of the rider's group that starts after the rider and before the end
    /// of its revolution.
    pub ahead: Option<u64>,
}

/// What a demoted rider does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DemotedDecision {
    /// Join the ring at this chunk and ride the shared scan again.
    Rejoin { seq: u64 },
    /// Read alone up to the start of this chunk (then it may be aligned with it).
    CatchUp { seq: u64 },
    /// Read alone towards the end of the revolution.
    Alone,
}

/// Decided by a demoted rider before each chunk it reads.
pub fn demoted_decision(view: RejoinView, rider_lag_chunks_max: u64) -> DemotedDecision {
    let joinable = |seq: u64| seq >= view.oldest_joinable && seq <= view.cursor;
    let lag = |seq: u64| view.cursor - seq;
    let rejoin_max = rejoin_lag_chunks_max(rider_lag_chunks_max);
    match (view.aligned, view.ahead) {
        (Some(seq), _) if joinable(seq) && lag(seq) <= rejoin_max => {
            DemotedDecision::Rejoin { seq }
        }
        (_, Some(seq)) if joinable(seq) => DemotedDecision::CatchUp { seq },
        _ => DemotedDecision::Alone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_decisions_over_every_small_state() {
        for max in 2..12u64 {
            for lag in 0..=max + 3 {
                for leader in 0..=lag {
                    let d = shared_decision(lag, leader, max);
                    let at_bound = lag >= max;
                    // Publishing keeps every rider within the bound.
                    assert_eq!(d == SharedDecision::Ride, !at_bound, "{lag} {leader} {max}");
                    if d == SharedDecision::Demote {
                        // Only a rider that holds back a faster one; never the leader.
                        assert!(leader <= max / 2 && leader < lag, "{lag} {leader} {max}");
                    }
                    if d == SharedDecision::Wait {
                        assert!(leader > max / 2, "waits although a rider keeps pace");
                    }
                }
            }
        }
    }

    #[test]
    fn a_lone_rider_and_riders_at_equal_pace_are_never_demoted() {
        for max in 2..40u64 {
            for lag in 0..=max {
                assert_ne!(shared_decision(lag, lag, max), SharedDecision::Demote);
            }
        }
    }

    /// Every combination of a small ring: cursor, oldest joinable, aligned and ahead
    /// chunks (or none), and the bound.
    #[test]
    fn demoted_decisions_over_every_small_state() {
        let options = |cursor: u64| std::iter::once(None).chain((0..=cursor).map(Some));
        for max in 2..8u64 {
            for cursor in 0..10u64 {
                for oldest in 0..=cursor {
                    for aligned in options(cursor) {
                        for ahead in options(cursor) {
                            let view = RejoinView {
                                cursor,
                                oldest_joinable: oldest,
                                aligned,
                                ahead,
                            };
                            check_demoted(view, max);
                        }
                    }
                }
            }
        }
    }

    fn check_demoted(view: RejoinView, max: u64) {
        let d = demoted_decision(view, max);
        let joinable = |s: u64| s >= view.oldest_joinable && s <= view.cursor;
        let aligned_ok = view
            .aligned
            .is_some_and(|s| joinable(s) && view.cursor - s <= max / 2);
        match d {
            DemotedDecision::Rejoin { seq } => {
                assert_eq!(Some(seq), view.aligned, "{view:?}");
                assert!(joinable(seq), "rejoins a rewritten slot: {view:?}");
                // A rejoined rider can take the next chunk, whoever leads.
                let lag = view.cursor - seq;
                for leader in 0..=lag {
                    assert_eq!(shared_decision(lag, leader, max), SharedDecision::Ride);
                }
            }
            DemotedDecision::CatchUp { seq } => {
                assert!(!aligned_ok, "catches up instead of rejoining: {view:?}");
                assert_eq!(Some(seq), view.ahead);
                assert!(joinable(seq), "{view:?}");
            }
            DemotedDecision::Alone => {
                assert!(!aligned_ok, "{view:?}");
                assert!(!view.ahead.is_some_and(joinable), "{view:?}");
            }
        }
    }

    #[test]
    fn hysteresis_is_half_the_bound() {
        assert_eq!(rejoin_lag_chunks_max(64), 32);
        assert_eq!(rejoin_lag_chunks_max(2), 1);
        let view = RejoinView {
            cursor: 100,
            oldest_joinable: 0,
            aligned: Some(80),
            ahead: Some(90),
        };
        assert_eq!(
            demoted_decision(view, 40),
            DemotedDecision::Rejoin { seq: 80 }
        );
        assert_eq!(
            demoted_decision(view, 39),
            DemotedDecision::CatchUp { seq: 90 }
        );
    }
}
