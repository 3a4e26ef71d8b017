//! Riders that board at random moments while the view applies writes each receive exactly
//! the matching versions at or below their cut of every item in their range, each item's
//! versions together and in index order (invariant 6): for random filters (ranges that
//! cross the view's partition, kinds, projection, latest-only, keys-only, `from`, a lower
//! `to`), read at random paces so that riders are demoted and rejoin, and for dedicated
//! riders alike.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use spindle_core::partition::HASH_SPACE;
use spindle_core::{Index, ItemKey, Partition};
use spindle_view::frame::VersionFrame;
use spindle_view::{Carousel, CarouselConfig, IterRequest, Kinds, Rider};

/// A range that overlaps `view`: the view itself, everything, one crossing either edge of
/// the view, or one inside it.
fn random_range(rng: &mut Rng, view: Partition) -> (u64, u64) {
    let inside = |rng: &mut Rng| view.lo() + rng.below(view.hi() - view.lo());
    match rng.below(5) {
        0 => (view.lo(), view.hi()),
        1 => (0, HASH_SPACE),
        2 => {
            let lo = inside(rng);
            (lo, (view.hi() + 1 + rng.below(HASH_SPACE)).min(HASH_SPACE))
        }
        3 => (
            view.lo().saturating_sub(1 + rng.below(1 << 31)),
            inside(rng) + 1,
        ),
        _ => {
            let (a, b) = (inside(rng), inside(rng));
            (a.min(b), a.max(b) + 1)
        }
    }
}

fn random_request(rng: &mut Rng, view: Partition, applied: Index) -> IterRequest {
    let (lo, hi) = random_range(rng, view);
    let projection = match rng.below(5) {
        0 => Some("/name".to_owned()),
        1 => Some("/w/1".to_owned()),
        _ => None,
    };
    let to = rng
        .chance(30)
        .then(|| Index::new(rng.below(applied.get() + 1)));
    let cut = to.unwrap_or(applied);
    IterRequest {
        range_lo: lo,
        range_hi: hi,
        kinds: [Kinds::ALL, Kinds::ALL, Kinds::NODES, Kinds::EDGES][rng.below(4) as usize],
        keys_only: projection.is_none() && rng.chance(25),
        from: if rng.chance(30) {
            Index::new(rng.below(cut.get() + 1))
        } else {
            Index::ZERO
        },
        to,
        projection,
        latest_only: rng.chance(35),
    }
}

/// No item's versions are split: once another item's frame came, the item never returns.
fn assert_items_contiguous(frames: &[VersionFrame]) {
    let mut done: BTreeSet<&ItemKey> = BTreeSet::new();
    for pair in frames.windows(2) {
        if pair[0].key != pair[1].key {
            assert!(
                done.insert(&pair[0].key),
                "{} arrives in two runs",
                pair[0].key
            );
            assert!(
                !done.contains(&pair[1].key),
                "{} arrives in two runs",
                pair[1].key
            );
        }
    }
}

struct Aboard {
    req: IterRequest,
    rider: Rider,
    chunks: Vec<bytes::Bytes>,
}

fn check(records: &[Vec<spindle_core::Record>], partition: Partition, done: &Aboard) {
    let (frames, end) = decode_chunks(&done.chunks);
    let (cut, range) = (done.rider.cut(), done.rider.range());
    assert_eq!((end.cut, end.range), (cut, range), "{:?}", done.req);
    assert_log_order_within_keys(&frames, cut);
    assert_items_contiguous(&frames);
    let all = versions_upto(records, cut, partition);
    assert_eq!(
        sorted(frames),
        expected_frames(&all, &done.req, range, cut),
        "{:?} cut {cut}",
        done.req
    );
}

fn run(seed: u64) {
    let mut rng = Rng::new(seed);
    let partition =
        [Partition::ALL, Partition::nth(1, 2), Partition::nth(2, 4)][(seed % 3) as usize];
    let records = random_records(&mut rng, 900, 300);
    let (initial, rest) = records.split_at(300);
    let dir = tempfile::tempdir().unwrap();
    let view = Arc::new(view_with(dir.path(), partition, initial));
    let config = CarouselConfig {
        chunk_bytes: 256 + rng.below(1024) as usize,
        ring_slots: 16,
        rider_lag_chunks_max: 2 + rng.below(10),
        // Half the runs make many items too large to share, so riders read them
        // themselves, on the shared scan and while demoted.
        item_shared_bytes_max: if seed % 2 == 1 {
            16 + rng.below(160) as usize
        } else {
            CarouselConfig::default().item_shared_bytes_max
        },
        idle_chunk_ms: IDLE_NEVER_MS,
        ..CarouselConfig::default()
    };
    let carousel = Carousel::new(view.clone(), config);
    // Writes land between every step, while the scanner and demoted riders read.
    let mut writes = rest.iter();
    let riders_total = 14;
    let (mut boarded, mut aboard) = (0, Vec::<Aboard>::new());
    while boarded < riders_total || !aboard.is_empty() {
        for txn in writes.by_ref().take(rng.below(4) as usize) {
            view.apply(txn).unwrap();
        }
        if boarded < riders_total && (aboard.is_empty() || rng.chance(20)) {
            let req = random_request(&mut rng, partition, view.applied_index());
            let rider = if rng.chance(15) {
                carousel.dedicated(&req)
            } else {
                carousel.board(&req)
            };
            let rider = rider.unwrap_or_else(|e| panic!("{req:?} refused: {e}"));
            aboard.push(Aboard {
                req,
                rider,
                chunks: Vec::new(),
            });
            boarded += 1;
            continue;
        }
        // Read a few chunks of one rider: riders left alone fall behind and are demoted.
        let i = rng.below(aboard.len() as u64) as usize;
        for _ in 0..1 + rng.below(6) {
            match aboard[i].rider.next_chunk() {
                Some(chunk) => aboard[i].chunks.push(chunk.unwrap()),
                None => {
                    let done = aboard.swap_remove(i);
                    check(&records, partition, &done);
                    break;
                }
            }
        }
    }
    assert!(
        view.applied_index() > Index::new(initial.iter().map(Vec::len).sum::<usize>() as u64),
        "writes must land while riders ride"
    );
    let status = carousel.status();
    assert!(status.riders.is_empty(), "{status:?}");
    assert_eq!(
        status.large_items > 0,
        seed % 2 == 1,
        "items too large to share must occur exactly in the runs that make them: {status:?}"
    );
    assert!(
        !status.running,
        "the scanner stops when the last rider leaves"
    );
}

#[test]
fn riders_get_exactly_the_versions_up_to_their_cut() {
    for seed in 0..u64::from(cases(48)) {
        run(seed);
    }
}
