//! View selection: a pure function from the catalog of views and a request to a plan of
//! sources (DESIGN.md §4).
//!
//! Rules, in the order they decide:
//! 1. Only views with the requested role serve (iteration replicas stay apart from query
//!    replicas).
//! 2. Views whose applied index lags the head by more than the bound are skipped.
//! 3. Prefer more, smaller partitions: at each point of the hash space the smallest usable
//!    view wins (ties: the most applied, then the lowest id), and a larger view's stretch
//!    ends where a smaller usable view begins.
//! 4. Use a chosen view's whole range where possible: a stretch runs to the end of its view
//!    (or of the request) unless rule 3 cuts it.
//! 5. The sources are disjoint and tile the request, so they can be read concurrently; the
//!    plan's cut is the lowest applied index among them, which every source can serve.

use spindle_core::{Index, Partition};

use crate::error::{SelectError, SkipReason};

/// What a view is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Serves iteration (boots of other views).
    Iteration,
    /// Serves user queries.
    Query,
}

/// One view in the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    pub id: String,
    pub range: Partition,
    pub applied: Index,
    pub role: Role,
}

/// What to select sources for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectRequest {
    pub range: Partition,
    pub role: Role,
    /// The log's durable index (or the highest applied index known).
    pub head: Index,
    /// A view more than this many records behind `head` is skipped.
    pub lag_records_max: u64,
}

impl SelectRequest {
    /// The request for a boot whose view then follows the log from the plan's cut + 1:
    /// a view must also have applied the record before `first`, the log's first retained
    /// index, or its cut would leave records no tail can read (it counts as lagging, and a
    /// larger view that is fresh enough is chosen instead).
    pub fn followed_from(mut self, first: Index) -> SelectRequest {
        let floor = first.prev();
        let needed = Index::new(self.head.get().saturating_sub(self.lag_records_max));
        if floor > needed {
            self.head = self.head.max(floor);
            self.lag_records_max = self.head.get() - floor.get();
        }
        self
    }
}

/// One source: iterate `view` over `range` (inside the view's partition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub view: String,
    pub range: Partition,
    /// `range` is the view's whole partition (no range filter needed at the source).
    pub whole_view: bool,
}

/// Disjoint sources tiling the request, in hash order, and the cut to iterate them to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub sources: Vec<Source>,
    pub cut: Index,
}

impl Plan {
    /// Whether the sources are disjoint and cover exactly `range`, in hash order.
    pub fn tiles(&self, range: Partition) -> bool {
        let mut at = range.lo();
        for s in &self.sources {
            if s.range.lo() != at {
                return false;
            }
            at = s.range.hi();
        }
        at == range.hi()
    }
}

fn size(p: Partition) -> u64 {
    p.hi() - p.lo()
}

fn skip_reason(view: &CatalogEntry, req: &SelectRequest, needed: Index) -> Option<SkipReason> {
    if view.role != req.role {
        Some(SkipReason::WrongRole)
    } else if view.applied < needed {
        Some(SkipReason::Lagging {
            applied: view.applied,
            needed,
        })
    } else {
        None
    }
}

/// Choose the sources for `req` from `catalog`.
pub fn select(catalog: &[CatalogEntry], req: &SelectRequest) -> Result<Plan, SelectError> {
    let needed = Index::new(req.head.get().saturating_sub(req.lag_records_max));
    let usable: Vec<&CatalogEntry> = catalog
        .iter()
        .filter(|v| v.range.intersect(req.range).is_some())
        .filter(|v| skip_reason(v, req, needed).is_none())
        .collect();
    let mut sources = Vec::new();
    let mut at = req.range.lo();
    while at < req.range.hi() {
        let chosen = usable
            .iter()
            .filter(|v| v.range.lo() <= at && at < v.range.hi())
            .min_by(|a, b| {
                size(a.range)
                    .cmp(&size(b.range))
                    .then(b.applied.cmp(&a.applied))
                    .then(a.id.cmp(&b.id))
            });
        let Some(chosen) = chosen else {
            return Err(uncovered(catalog, &usable, req, needed, at));
        };
        let smaller_start = usable
            .iter()
            .filter(|v| size(v.range) < size(chosen.range))
            .map(|v| v.range.lo())
            .filter(|&lo| lo > at)
            .min();
        let mut end = chosen.range.hi().min(req.range.hi());
        if let Some(lo) = smaller_start {
            end = end.min(lo);
        }
        let range = Partition::new(at, end).expect("at < end");
        sources.push(Source {
            view: chosen.id.clone(),
            range,
            whole_view: range == chosen.range,
        });
        at = end;
    }
    let cut = sources
        .iter()
        .map(|s| {
            usable
                .iter()
                .find(|v| v.id == s.view)
                .expect("sources are usable views")
                .applied
        })
        .min()
        .expect("a partition is never empty, so a plan has a source");
    Ok(Plan { sources, cut })
}

/// The error for a gap starting at `at`: the gap runs to where a usable view next begins.
fn uncovered(
    catalog: &[CatalogEntry],
    usable: &[&CatalogEntry],
    req: &SelectRequest,
    needed: Index,
    at: u64,
) -> SelectError {
    let end = usable
        .iter()
        .map(|v| v.range.lo())
        .filter(|&lo| lo > at)
        .min()
        .unwrap_or(req.range.hi())
        .min(req.range.hi());
    let missing = Partition::new(at, end).expect("at < end");
    let skipped = catalog
        .iter()
        .filter(|v| v.range.intersect(missing).is_some())
        .filter_map(|v| skip_reason(v, req, needed).map(|why| (v.id.clone(), why)))
        .collect();
    SelectError::Uncovered { missing, skipped }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn view(id: &str, range: Partition, applied: u64) -> CatalogEntry {
        CatalogEntry {
            id: id.into(),
            range,
            applied: Index::new(applied),
            role: Role::Iteration,
        }
    }

    fn ways(prefix: &str, n: u64, applied: u64) -> Vec<CatalogEntry> {
        (0..n)
            .map(|i| view(&format!("{prefix}{i}"), Partition::nth(i, n), applied))
            .collect()
    }

    fn request(range: Partition) -> SelectRequest {
        SelectRequest {
            range,
            role: Role::Iteration,
            head: Index::new(100),
            lag_records_max: 10,
        }
    }

    fn ids(plan: &Plan) -> Vec<&str> {
        plan.sources.iter().map(|s| s.view.as_str()).collect()
    }

    #[test]
    fn a_boot_to_follow_skips_views_behind_the_first_retained_index() {
        // The small views stalled at 40; the log now starts at 61.
        let mut catalog = ways("large", 2, 95);
        catalog.extend(ways("small", 8, 40));
        let unbounded = SelectRequest {
            lag_records_max: u64::MAX,
            ..request(Partition::ALL)
        };
        assert_eq!(select(&catalog, &unbounded).unwrap().cut, Index::new(40));
        let plan = select(&catalog, &unbounded.clone().followed_from(Index::new(61))).unwrap();
        assert_eq!(ids(&plan), ["large0", "large1"]);
        assert_eq!(plan.cut, Index::new(95));
        // A view at exactly the record before the first retained one can be followed.
        let plan = select(&catalog, &unbounded.clone().followed_from(Index::new(41))).unwrap();
        assert_eq!(plan.cut, Index::new(40));
        // Nothing fresh enough: refused, naming the lag, not a plan with a gap.
        let err = select(&catalog, &unbounded.clone().followed_from(Index::new(97))).unwrap_err();
        assert!(err.to_string().contains("needs 96"), "{err}");
        // A tighter bound of its own is kept.
        let tight = request(Partition::ALL).followed_from(Index::new(2));
        assert_eq!(tight, request(Partition::ALL));
        // An empty log (first 1) asks for nothing.
        assert_eq!(unbounded.clone().followed_from(Index::FIRST), unbounded);
    }

    #[test]
    fn eight_small_partitions_are_preferred_over_two_large() {
        let mut catalog = ways("large", 2, 100);
        catalog.extend(ways("small", 8, 100));
        let plan = select(&catalog, &request(Partition::ALL)).unwrap();
        assert_eq!(
            ids(&plan),
            ["small0", "small1", "small2", "small3", "small4", "small5", "small6", "small7"]
        );
        assert!(plan.sources.iter().all(|s| s.whole_view));
        assert_eq!(plan.cut, Index::new(100));
    }

    #[test]
    fn a_four_way_catalog_feeds_a_six_way_request_with_range_filters() {
        let catalog = ways("q", 4, 100);
        for i in 0..6 {
            let want = Partition::nth(i, 6);
            let plan = select(&catalog, &request(want)).unwrap();
            assert_eq!(plan.sources.first().unwrap().range.lo(), want.lo());
            assert_eq!(plan.sources.last().unwrap().range.hi(), want.hi());
            for pair in plan.sources.windows(2) {
                assert_eq!(pair[0].range.hi(), pair[1].range.lo());
            }
            for s in &plan.sources {
                let v = catalog.iter().find(|v| v.id == s.view).unwrap();
                assert!(v.range.covers(s.range) && !s.whole_view);
            }
        }
        // Sixth 1 = [1/6, 2/6) straddles quarters 0 and 1.
        let plan = select(&catalog, &request(Partition::nth(1, 6))).unwrap();
        assert_eq!(ids(&plan), ["q0", "q1"]);
        assert_eq!(plan.sources[0].range.hi(), Partition::nth(1, 4).lo());
    }

    #[test]
    fn a_lagging_view_is_skipped_for_a_fresh_replica() {
        let mut catalog = vec![view("stale", Partition::nth(0, 2), 50)];
        catalog.push(view("fresh", Partition::nth(0, 2), 95));
        catalog.push(view("stale-small", Partition::nth(0, 4), 80));
        let plan = select(&catalog, &request(Partition::nth(0, 2))).unwrap();
        assert_eq!(ids(&plan), ["fresh"]);
        assert_eq!(plan.cut, Index::new(95));
    }

    #[test]
    fn an_uncovered_request_names_the_missing_range_and_why() {
        let mut catalog = ways("q", 4, 100);
        catalog[2].applied = Index::new(3);
        catalog.push(view("query2", Partition::nth(2, 4), 100));
        catalog.last_mut().unwrap().role = Role::Query;
        let err = select(&catalog, &request(Partition::ALL)).unwrap_err();
        let SelectError::Uncovered { missing, skipped } = &err;
        assert_eq!(*missing, Partition::nth(2, 4));
        assert_eq!(
            skipped,
            &vec![
                (
                    "q2".to_string(),
                    SkipReason::Lagging {
                        applied: Index::new(3),
                        needed: Index::new(90)
                    }
                ),
                ("query2".to_string(), SkipReason::WrongRole),
            ]
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("[{}, {})", missing.lo(), missing.hi())),
            "{text}"
        );
        assert!(text.contains("q2 lags"), "{text}");
    }

    #[test]
    fn an_empty_catalog_misses_the_whole_request() {
        let err = select(&[], &request(Partition::nth(3, 8))).unwrap_err();
        assert_eq!(
            err,
            SelectError::Uncovered {
                missing: Partition::nth(3, 8),
                skipped: vec![]
            }
        );
    }

    #[test]
    fn query_replicas_do_not_serve_iteration_and_vice_versa() {
        let mut catalog = vec![view("it", Partition::ALL, 100)];
        catalog.push(CatalogEntry {
            role: Role::Query,
            ..view("q-small", Partition::nth(0, 8), 100)
        });
        let plan = select(&catalog, &request(Partition::ALL)).unwrap();
        assert_eq!(ids(&plan), ["it"]);
        let mut req = request(Partition::nth(0, 8));
        req.role = Role::Query;
        assert_eq!(ids(&select(&catalog, &req).unwrap()), ["q-small"]);
    }

    #[test]
    fn a_larger_view_fills_around_a_smaller_one_and_the_cut_is_the_lowest_applied() {
        let catalog = vec![
            view("big", Partition::ALL, 100),
            view("mid", Partition::nth(1, 4), 97),
        ];
        let plan = select(&catalog, &request(Partition::ALL)).unwrap();
        assert_eq!(ids(&plan), ["big", "mid", "big"]);
        assert_eq!(plan.sources[1].range, Partition::nth(1, 4));
        assert!(plan.sources[1].whole_view && !plan.sources[0].whole_view);
        assert_eq!(plan.cut, Index::new(97));
    }

    #[test]
    fn equal_replicas_pick_the_most_applied_then_the_lowest_id() {
        let catalog = vec![
            view("b", Partition::ALL, 99),
            view("a", Partition::ALL, 99),
            view("c", Partition::ALL, 98),
        ];
        assert_eq!(
            ids(&select(&catalog, &request(Partition::ALL)).unwrap()),
            ["a"]
        );
    }

    fn catalog_strategy() -> impl Strategy<Value = Vec<CatalogEntry>> {
        let entry =
            (1u64..=8, 0u64..8, 80u64..=100, any::<bool>()).prop_map(|(n, i, applied, q)| {
                let mut v = view("", Partition::nth(i % n, n), applied);
                if q {
                    v.role = Role::Query;
                }
                v
            });
        proptest::collection::vec(entry, 0..12).prop_map(|mut vs| {
            for (i, v) in vs.iter_mut().enumerate() {
                v.id = format!("v{i}");
            }
            vs
        })
    }

    proptest! {
        /// Every plan tiles the request with usable views; every error names a range that
        /// no usable view covers.
        #[test]
        fn plans_tile_the_request_with_usable_views(
            catalog in catalog_strategy(), i in 0u64..6, n in 1u64..=6,
        ) {
            let req = request(Partition::nth(i % n, n));
            let usable = |v: &CatalogEntry| v.role == req.role && v.applied >= Index::new(90);
            match select(&catalog, &req) {
                Ok(plan) => {
                    let mut at = req.range.lo();
                    for s in &plan.sources {
                        prop_assert_eq!(s.range.lo(), at);
                        at = s.range.hi();
                        let v = catalog.iter().find(|v| v.id == s.view).unwrap();
                        prop_assert!(usable(v) && v.range.covers(s.range));
                        prop_assert!(plan.cut <= v.applied);
                        prop_assert_eq!(s.whole_view, s.range == v.range);
                        // No usable strictly smaller view covers the start of this source.
                        prop_assert!(!catalog.iter().any(|o| usable(o)
                            && size(o.range) < size(v.range)
                            && o.range.contains(s.range.lo() as u32)));
                    }
                    prop_assert_eq!(at, req.range.hi());
                    prop_assert!(plan.tiles(req.range));
                }
                Err(SelectError::Uncovered { missing, .. }) => {
                    prop_assert!(req.range.covers(missing));
                    prop_assert!(!catalog.iter().any(|v| usable(v)
                        && v.range.contains(missing.lo() as u32)));
                }
            }
        }
    }
}
