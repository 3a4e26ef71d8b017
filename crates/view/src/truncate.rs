//! Log truncation (DESIGN.md §7): which log prefix may be deleted, as a pure function, the
//! retention holds that boots take on their cut, and the worker step that truncates.
//!
//! The safe index S is the highest index whose records may be deleted: at every point of
//! the hash space at least k Disk View replicas have applied S (S is the minimum over the
//! space of the k-th highest applied index), and no boot in flight needs a record at or
//! below S (a boot with cut C tails from C + 1, so S ≤ C). Invariant 7: truncation never
//! deletes an index above S.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use spindle_core::partition::HASH_SPACE;
use spindle_core::{Index, Partition};
use spindle_log::{Log, TruncateError};

/// A Disk View replica as the coordinator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    pub view: String,
    pub range: Partition,
    pub applied: Index,
}

/// A boot in flight whose log tail (cut + 1 onwards) must stay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub id: u64,
    pub cut: Index,
    /// The catalog member that published it (a boot on another host); `None` for this
    /// process's own.
    pub owner: Option<String>,
}

impl Hold {
    /// A hold of this process.
    pub fn local(id: u64, cut: Index) -> Hold {
        Hold {
            id,
            cut,
            owner: None,
        }
    }
}

/// What keeps the safe index where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// `range` has fewer than `needed` replicas: nothing may be truncated.
    UnderReplicated {
        range: Partition,
        replicas: usize,
        needed: usize,
    },
    /// In `range`, `view` is the k-th most applied replica.
    Replica {
        range: Partition,
        view: String,
        applied: Index,
    },
    /// A boot's retention hold (`owner`: the catalog member that holds it, if not this
    /// process).
    Hold {
        id: u64,
        cut: Index,
        owner: Option<String>,
    },
}

/// The coordinator's decision: records `1..=safe` may be deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub safe: Index,
    pub blocker: Blocker,
}

impl std::fmt::Display for Truncation {
    /// The status line: the safe index and what holds it back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "log may be truncated through index {}; ", self.safe)?;
        match &self.blocker {
            Blocker::UnderReplicated {
                range,
                replicas,
                needed,
            } => write!(
                f,
                "hash range [{}, {}) has {replicas} of the {needed} Disk View replicas needed",
                range.lo(),
                range.hi()
            ),
            Blocker::Replica {
                range,
                view,
                applied,
            } => write!(
                f,
                "held back by view {view:?}, applied through {applied}, in hash range [{}, {})",
                range.lo(),
                range.hi()
            ),
            Blocker::Hold {
                id,
                cut,
                owner: None,
            } => write!(f, "held back by boot hold {id} at cut {cut}"),
            Blocker::Hold {
                id,
                cut,
                owner: Some(member),
            } => write!(f, "held back by boot hold {id} of {member:?} at cut {cut}"),
        }
    }
}

/// The safe index for `replicas` (each range needs `replicas_min` of them, ≥ 1) and the
/// active `holds`, and what holds it back.
pub fn safe_index(replicas: &[Replica], replicas_min: usize, holds: &[Hold]) -> Truncation {
    assert!(
        replicas_min >= 1,
        "at least one replica must cover a truncated prefix"
    );
    // Elementary ranges: between consecutive replica boundaries, coverage is constant.
    let mut cuts: Vec<u64> = vec![0, HASH_SPACE];
    for r in replicas {
        cuts.push(r.range.lo());
        cuts.push(r.range.hi());
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut best: Option<Truncation> = None;
    for pair in cuts.windows(2) {
        let range = Partition::new(pair[0], pair[1]).expect("distinct sorted cuts");
        let mut covering: Vec<&Replica> =
            replicas.iter().filter(|r| r.range.covers(range)).collect();
        let candidate = if covering.len() < replicas_min {
            Truncation {
                safe: Index::ZERO,
                blocker: Blocker::UnderReplicated {
                    range,
                    replicas: covering.len(),
                    needed: replicas_min,
                },
            }
        } else {
            covering.sort_by(|a, b| b.applied.cmp(&a.applied).then(a.view.cmp(&b.view)));
            let kth = covering[replicas_min - 1];
            Truncation {
                safe: kth.applied,
                blocker: Blocker::Replica {
                    range,
                    view: kth.view.clone(),
                    applied: kth.applied,
                },
            }
        };
        if best.as_ref().is_none_or(|b| candidate.safe < b.safe) {
            best = Some(candidate);
        }
    }
    let mut decision = best.expect("the hash space has at least one range");
    for hold in holds {
        if hold.cut < decision.safe {
            decision = Truncation {
                safe: hold.cut,
                blocker: Blocker::Hold {
                    id: hold.id,
                    cut: hold.cut,
                    owner: hold.owner.clone(),
                },
            };
        }
    }
    decision
}

/// Retention holds of boots in flight. Cheap to clone; a hold lasts until its guard drops.
#[derive(Clone, Debug, Default)]
pub struct Holds {
    inner: Arc<Mutex<HoldsInner>>,
}

#[derive(Debug, Default)]
struct HoldsInner {
    next_id: u64,
    active: BTreeMap<u64, Index>,
    /// When each active hold was taken.
    taken: BTreeMap<u64, std::time::Instant>,
}

/// Releases its hold when dropped (a boot that finishes or fails).
#[derive(Debug)]
pub struct HoldGuard {
    holds: Holds,
    id: u64,
}

impl HoldGuard {
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        let mut inner = self.holds.inner.lock();
        inner.active.remove(&self.id);
        inner.taken.remove(&self.id);
    }
}

impl Holds {
    /// Keep the log from `cut + 1` on until the guard drops. Take it before the boot's
    /// iteration starts (before the coordinator could pass the cut).
    pub fn hold(&self, cut: Index) -> HoldGuard {
        let mut inner = self.inner.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        inner.active.insert(id, cut);
        inner.taken.insert(id, std::time::Instant::now());
        HoldGuard {
            holds: self.clone(),
            id,
        }
    }

    /// The active holds with how long each has been held, for the status report.
    pub fn active_with_age(&self) -> Vec<(Hold, std::time::Duration)> {
        let inner = self.inner.lock();
        inner
            .active
            .iter()
            .map(|(&id, &cut)| {
                let age = inner
                    .taken
                    .get(&id)
                    .map(|t| t.elapsed())
                    .unwrap_or_default();
                (Hold::local(id, cut), age)
            })
            .collect()
    }

    /// The active holds, for `safe_index`.
    pub fn active(&self) -> Vec<Hold> {
        self.inner
            .lock()
            .active
            .iter()
            .map(|(&id, &cut)| Hold::local(id, cut))
            .collect()
    }
}

/// The worker step: truncate `log` below `decision.safe + 1`. Returns the log's first
/// retained index (the log deletes whole segments only, so it may keep more).
pub async fn truncate<L: Log>(log: &L, decision: &Truncation) -> Result<Index, TruncateError> {
    if decision.safe.is_zero() {
        return Ok(log.first_index());
    }
    log.truncate_prefix(decision.safe.next()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(view: &str, range: Partition, applied: u64) -> Replica {
        Replica {
            view: view.into(),
            range,
            applied: Index::new(applied),
        }
    }

    #[test]
    fn the_kth_highest_replica_bounds_each_range() {
        let replicas = vec![
            replica("a0", Partition::nth(0, 2), 50),
            replica("b0", Partition::nth(0, 2), 70),
            replica("c0", Partition::nth(0, 2), 90),
            replica("a1", Partition::ALL, 60),
            replica("b1", Partition::nth(1, 2), 80),
        ];
        // Left half: 90, 70, 60, 50 → 2nd highest 70. Right half: 80, 60 → 60.
        let t = safe_index(&replicas, 2, &[]);
        assert_eq!(t.safe, Index::new(60));
        assert_eq!(
            t.blocker,
            Blocker::Replica {
                range: Partition::nth(1, 2),
                view: "a1".into(),
                applied: Index::new(60)
            }
        );
        assert_eq!(safe_index(&replicas, 1, &[]).safe, Index::new(80));
    }

    #[test]
    fn an_under_replicated_range_blocks_everything_and_is_named() {
        let replicas = vec![
            replica("a", Partition::nth(0, 4), 50),
            replica("b", Partition::nth(1, 4), 50),
            replica("c", Partition::nth(3, 4), 50),
        ];
        let t = safe_index(&replicas, 1, &[]);
        assert_eq!(t.safe, Index::ZERO);
        assert_eq!(
            t.blocker,
            Blocker::UnderReplicated {
                range: Partition::nth(2, 4),
                replicas: 0,
                needed: 1
            }
        );
        assert_eq!(safe_index(&[], 1, &[]).safe, Index::ZERO);
    }

    #[test]
    fn the_status_line_names_the_blocker() {
        let t = safe_index(&[replica("v7", Partition::nth(0, 1), 42)], 1, &[]);
        assert_eq!(
            t.to_string(),
            "log may be truncated through index 42; held back by view \"v7\", applied through 42, \
             in hash range [0, 4294967296)"
        );
        let t = safe_index(&[], 1, &[]);
        assert!(
            t.to_string()
                .contains("has 0 of the 1 Disk View replicas needed"),
            "{t}"
        );
        let t = safe_index(
            &[replica("v", Partition::ALL, 9)],
            1,
            &[Hold::local(3, Index::new(4))],
        );
        assert!(
            t.to_string().ends_with("held back by boot hold 3 at cut 4"),
            "{t}"
        );
    }

    #[test]
    fn a_hold_keeps_its_cut() {
        let replicas = vec![replica("a", Partition::ALL, 100)];
        let holds = vec![
            Hold::local(7, Index::new(40)),
            Hold::local(8, Index::new(90)),
        ];
        let t = safe_index(&replicas, 1, &holds);
        assert_eq!(t.safe, Index::new(40));
        assert_eq!(
            t.blocker,
            Blocker::Hold {
                id: 7,
                cut: Index::new(40),
                owner: None,
            }
        );
    }

    #[test]
    fn holds_release_when_their_guard_drops() {
        let holds = Holds::default();
        let a = holds.hold(Index::new(5));
        let b = holds.hold(Index::new(9));
        assert_eq!(holds.active().len(), 2);
        drop(a);
        assert_eq!(holds.active(), vec![Hold::local(b.id(), Index::new(9))]);
        drop(b);
        assert!(holds.active().is_empty());
    }

    #[test]
    fn the_safe_index_is_the_lowest_kth_replica_or_hold() {
        // Exhaustive over small configurations: every 1-, 2- and 4-way replica set with
        // applied indexes from a small alphabet.
        let appl = [0u64, 3, 7];
        for n in [1u64, 2, 4] {
            for mask in 0..(appl.len() as u64).pow(n as u32) {
                let mut replicas = vec![replica("all", Partition::ALL, 5)];
                let mut m = mask;
                for i in 0..n {
                    let a = appl[(m % 3) as usize];
                    m /= 3;
                    replicas.push(replica(&format!("p{i}"), Partition::nth(i, n), a));
                }
                for k in 1..=2 {
                    let t = safe_index(&replicas, k, &[Hold::local(1, Index::new(6))]);
                    let mut expected = Index::new(6);
                    for i in 0..n {
                        let part = Partition::nth(i, n);
                        let mut cover: Vec<Index> = replicas
                            .iter()
                            .filter(|r| r.range.covers(part))
                            .map(|r| r.applied)
                            .collect();
                        cover.sort_unstable_by(|a, b| b.cmp(a));
                        let bound = cover.get(k - 1).copied().unwrap_or(Index::ZERO);
                        expected = expected.min(bound);
                    }
                    assert_eq!(t.safe, expected, "n={n} mask={mask} k={k}: {t:?}");
                }
            }
        }
    }
}
