//! A Memory View's boot checks what its sources send, since a source may be another
//! process: a version above the cut, an item outside the range asked of the source, or
//! (latest only) one item sent twice each fail the boot with an error naming the source —
//! never a panic, never a view that files an item where reads cannot find it. A
//! well-formed source boots. And a booted view (one shard per source) never shows a reader
//! part of a transaction, even one that spans shards (DESIGN.md §12).

use std::sync::atomic::{AtomicBool, Ordering};

use spindle_core::{Index, ItemKey, Partition, Record, Value};
use spindle_view::boot::{BootSource, FrameBatches};
use spindle_view::frame::{self, EndFrame};
use spindle_view::{BootProgress, IterError, IterRequest, MemoryView, Plan, Source};

/// A source that sends a fixed list of (item, index) versions, then the end frame.
struct Scripted {
    versions: Vec<(ItemKey, u64)>,
    end: End,
}

/// How a scripted source ends its stream.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// The end frame, counting the versions sent.
    Right,
    /// An end frame that says this many frames.
    Counting(u64),
    /// No end frame.
    Missing,
    /// The end frame, then the first version again.
    VersionAfter,
    /// A tombstone of the first item at this index, then the end frame.
    ThenTombstone(u64),
}

impl Scripted {
    fn new(versions: Vec<(ItemKey, u64)>) -> Scripted {
        Scripted {
            versions,
            end: End::Right,
        }
    }
}

struct Batches<'a> {
    source: &'a Scripted,
    req: IterRequest,
    sent: bool,
}

impl FrameBatches for Batches<'_> {
    fn fill(&mut self, buf: &mut Vec<u8>, _bytes_max: usize) -> Result<bool, IterError> {
        if !self.sent {
            // In hash order, as a Disk View sends them (equal hashes as listed).
            let mut versions = self.source.versions.clone();
            versions.sort_by_key(|(k, _)| k.hash());
            for (key, index) in &versions {
                let value = br#"{"v":1}"#;
                let flags = frame::FLAG_VALUE;
                frame::encode_version(buf, flags, Index::new(*index), &key.to_bytes(), Some(value));
            }
            let range = Partition::new(self.req.range_lo, self.req.range_hi).unwrap();
            if let (End::ThenTombstone(at), Some((key, _))) =
                (self.source.end, self.source.versions.first())
            {
                frame::encode_version(
                    buf,
                    frame::FLAG_TOMBSTONE,
                    Index::new(at),
                    &key.to_bytes(),
                    None,
                );
            }
            let frames = match self.source.end {
                End::Counting(n) => n,
                End::ThenTombstone(_) => self.source.versions.len() as u64 + 1,
                _ => self.source.versions.len() as u64,
            };
            let end = EndFrame {
                cut: self.req.to.unwrap(),
                range,
                frames,
            };
            if self.source.end != End::Missing {
                frame::encode_end(buf, &end);
            }
            if let (End::VersionAfter, Some((key, index))) =
                (self.source.end, self.source.versions.first())
            {
                let value = br#"{"v":1}"#;
                frame::encode_version(
                    buf,
                    frame::FLAG_VALUE,
                    Index::new(*index),
                    &key.to_bytes(),
                    Some(value),
                );
            }
            self.sent = true;
        }
        Ok(true)
    }
}

impl BootSource for Scripted {
    fn name(&self) -> String {
        "scripted".into()
    }
    fn open(&self, req: &IterRequest) -> Result<Box<dyn FrameBatches + '_>, IterError> {
        Ok(Box::new(Batches {
            source: self,
            req: req.clone(),
            sent: false,
        }))
    }
    fn corrupt(&self, what: String) -> IterError {
        IterError::Remote {
            view: self.name(),
            detail: what,
            retry: false,
        }
    }
}

fn nodes_in(range: Partition, n: usize) -> Vec<ItemKey> {
    (0..)
        .map(|i| ItemKey::node(format!("n{i}")).unwrap())
        .filter(|k| range.contains(k.hash()))
        .take(n)
        .collect()
}

/// Boot a Memory View of the whole hash space from one source that covers its first half
/// (`versions`) and one well-formed source for the second half.
fn boot(versions: Vec<(ItemKey, u64)>, cut: u64) -> Result<MemoryView, IterError> {
    boot_ending(versions, cut, End::Right)
}

/// `boot`, the first source ending its stream as `end` says.
fn boot_ending(versions: Vec<(ItemKey, u64)>, cut: u64, end: End) -> Result<MemoryView, IterError> {
    boot_from(Scripted { versions, end }, cut)
}

/// `boot` with `first` as the source of the first half.
fn boot_from(first_source: Scripted, cut: u64) -> Result<MemoryView, IterError> {
    let (first, second) = (Partition::nth(0, 2), Partition::nth(1, 2));
    let sources = [
        first_source,
        Scripted::new(nodes_in(second, 3).into_iter().map(|k| (k, 2)).collect()),
    ];
    let plan = Plan {
        sources: vec![
            Source {
                view: "a".into(),
                range: first,
                whole_view: true,
            },
            Source {
                view: "b".into(),
                range: second,
                whole_view: true,
            },
        ],
        cut: Index::new(cut),
    };
    MemoryView::boot(
        Partition::ALL,
        &plan,
        |id| match id {
            "a" => Some(&sources[0]),
            "b" => Some(&sources[1]),
            _ => None,
        },
        &BootProgress::default(),
    )
}

/// The boot failed, naming the source, for the reason `says`.
fn refused(result: Result<MemoryView, IterError>, why: &str, says: &str) {
    match result {
        Ok(_) => panic!("booted, but the source {why}"),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("scripted"),
                "the error names the source: {text}"
            );
            assert!(text.contains(says), "{why}: {text}");
        }
    }
}

#[test]
fn a_well_formed_source_boots() {
    let mine = nodes_in(Partition::nth(0, 2), 3);
    let view = boot(mine.iter().map(|k| (k.clone(), 3)).collect(), 5).unwrap();
    assert_eq!(view.applied_index(), Index::new(5));
    assert_eq!(view.snapshot().1.len(), 6);
    for k in &mine {
        assert!(view.get(k).is_some(), "{k:?}");
    }
}

#[test]
fn a_version_above_the_cut_fails_the_boot() {
    let mine = nodes_in(Partition::nth(0, 2), 2);
    refused(
        boot(vec![(mine[0].clone(), 3), (mine[1].clone(), 6)], 5),
        "sent a version above the cut",
        "above the cut 5",
    );
}

#[test]
fn an_item_outside_the_asked_range_fails_the_boot() {
    let mine = nodes_in(Partition::nth(0, 2), 1);
    let theirs = nodes_in(Partition::nth(1, 2), 1);
    refused(
        boot(vec![(mine[0].clone(), 3), (theirs[0].clone(), 4)], 5),
        "sent an item of another range",
        "outside the range",
    );
}

#[test]
fn an_item_sent_twice_to_a_latest_only_boot_fails_it_without_a_panic() {
    let mine = nodes_in(Partition::nth(0, 2), 1);
    refused(
        boot(vec![(mine[0].clone(), 3), (mine[0].clone(), 4)], 5),
        "sent one item twice",
        "sent an item twice",
    );
}

/// A latest-only boot takes each item once: a value then a tombstone of one item (or the
/// reverse, or the same item twice apart) fails the boot, where the view would otherwise
/// keep a deleted item live.
#[test]
fn an_item_sent_twice_apart_or_as_value_then_tombstone_fails_a_latest_only_boot() {
    let mine = nodes_in(Partition::nth(0, 2), 3);
    // Apart: a, b, a.
    refused(
        boot(
            vec![
                (mine[0].clone(), 3),
                (mine[1].clone(), 3),
                (mine[0].clone(), 4),
            ],
            5,
        ),
        "sent one item twice, apart",
        "twice",
    );
    // A value, then a tombstone of the same item.
    let source = Scripted {
        versions: vec![(mine[2].clone(), 3)],
        end: End::ThenTombstone(5),
    };
    refused(
        boot_from(source, 5),
        "sent a value then a tombstone",
        "twice",
    );
}

/// The end frame must come last and count every version frame before it: a chunk lost or
/// repeated on the way fails the boot.
#[test]
fn an_end_frame_that_miscounts_is_missing_or_is_not_last_fails_the_boot() {
    let mine = nodes_in(Partition::nth(0, 2), 3);
    let versions: Vec<_> = mine.iter().map(|k| (k.clone(), 3)).collect();
    for (end, says) in [
        (End::Counting(2), "sent 3 frames"),
        (End::Counting(4), "sent 3 frames"),
        (End::Missing, "without its end frame"),
        (End::VersionAfter, "after the end frame"),
    ] {
        refused(
            boot_ending(versions.clone(), 5, end),
            "ended its stream wrongly",
            says,
        );
    }
    assert!(boot_ending(versions, 5, End::Right).is_ok());
}

#[test]
fn readers_never_see_part_of_a_transaction_across_shards() {
    // Four empty sources: a view of four shards at cut 0.
    let empty: Vec<Scripted> = (0..4).map(|_| Scripted::new(vec![])).collect();
    let plan = Plan {
        sources: (0..4)
            .map(|i| Source {
                view: i.to_string(),
                range: Partition::nth(i, 4),
                whole_view: true,
            })
            .collect(),
        cut: Index::ZERO,
    };
    let view = MemoryView::boot(
        Partition::ALL,
        &plan,
        |id| empty.get(id.parse::<usize>().ok()?),
        &BootProgress::default(),
    )
    .unwrap();
    // `a` in the first shard, `b` in the last: each transaction writes both.
    let a = nodes_in(Partition::nth(0, 4), 1).remove(0);
    let b = nodes_in(Partition::nth(3, 4), 1).remove(0);
    const TXNS: u64 = 3000;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut seen = 0u64;
            let keys = [a.clone(), b.clone()];
            loop {
                let finished = done.load(Ordering::Acquire);
                let (applied, values) = view.multiget(&keys, usize::MAX).unwrap();
                assert_eq!(applied.get() % 2, 0, "applied {applied}: mid-transaction");
                match (&values[0], &values[1]) {
                    (None, None) => assert_eq!(applied, Index::ZERO),
                    (Some((ia, va)), Some((ib, vb))) => {
                        assert_eq!(va, vb, "at {applied}");
                        assert_eq!(ib.get(), ia.get() + 1, "at {applied}");
                        assert_eq!(*ib, applied);
                    }
                    other => panic!("half a transaction at {applied}: {other:?}"),
                }
                seen += 1;
                if finished {
                    return seen;
                }
            }
        });
        for t in 1..=TXNS {
            let value = Value::json(format!("{{\"t\":{t}}}")).unwrap();
            view.apply(&[
                Record {
                    index: Index::new(2 * t - 1),
                    commit: false,
                    key: a.clone(),
                    value: value.clone(),
                },
                Record {
                    index: Index::new(2 * t),
                    commit: true,
                    key: b.clone(),
                    value,
                },
            ])
            .unwrap();
        }
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
    });
    assert_eq!(view.applied_index(), Index::new(2 * TXNS));
}
