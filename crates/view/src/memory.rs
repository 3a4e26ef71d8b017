//! The Memory View: the latest value of every live item of one partition range, in memory
//! (get and multiget). It boots from Disk Views: select sources, iterate them concurrently
//! to one cut (latest only), then tail the log from cut + 1 (`follow::catch_up` or
//! `follow::follow`; invariant 5).

use std::collections::HashMap;

use parking_lot::RwLock;
use spindle_core::{Index, ItemKey, Partition, Record};

use crate::boot::{iterate_plan, BootProgress};
use crate::error::{IterError, ViewError};
use crate::iterate::IterRequest;
use crate::select::Plan;

/// Live items: key → (version, JSON object).
pub type Items = HashMap<ItemKey, (Index, String)>;

type Hasher = foldhash::fast::RandomState;

/// Items of one hash range, keyed by their core key encoding (one allocation per key,
/// fast to hash).
#[derive(Debug)]
struct Shard {
    range: Partition,
    items: HashMap<Box<[u8]>, (Index, String), Hasher>,
}

impl Shard {
    fn new(range: Partition) -> Self {
        Shard {
            range,
            items: HashMap::default(),
        }
    }
}

/// Shards tile the view's partition in hash order; a boot fills one per source, in
/// parallel, with no merge afterwards.
#[derive(Debug)]
struct State {
    shards: Vec<Shard>,
    applied: Index,
}

impl State {
    fn shard(&self, hash: u32) -> &Shard {
        let i = self
            .shards
            .partition_point(|s| s.range.lo() <= u64::from(hash));
        &self.shards[i - 1]
    }

    fn shard_mut(&mut self, hash: u32) -> &mut Shard {
        let i = self
            .shards
            .partition_point(|s| s.range.lo() <= u64::from(hash));
        &mut self.shards[i - 1]
    }

    fn get(&self, key: &ItemKey) -> Option<(Index, String)> {
        self.get_with_len(key, |_| true)
    }

    /// `get`, copying the value only if `take(its length)` says so.
    fn get_with_len(
        &self,
        key: &ItemKey,
        take: impl FnOnce(usize) -> bool,
    ) -> Option<(Index, String)> {
        let (index, text) = self
            .shard(key.hash())
            .items
            .get(key.to_bytes().as_slice())?;
        take(text.len()).then(|| (*index, text.clone()))
    }
}

/// The latest version of an item: its index and JSON object.
pub type Latest = (Index, String);

/// Latest values of the live items of one partition.
#[derive(Debug)]
pub struct MemoryView {
    partition: Partition,
    state: RwLock<State>,
}

impl MemoryView {
    /// An empty view of `partition` at index 0 (replaying the log into it builds it from
    /// scratch).
    pub fn new(partition: Partition) -> Self {
        MemoryView {
            partition,
            state: RwLock::new(State {
                shards: vec![Shard::new(partition)],
                applied: Index::ZERO,
            }),
        }
    }

    pub fn partition(&self) -> Partition {
        self.partition
    }

    pub fn applied_index(&self) -> Index {
        self.state.read().applied
    }

    /// Live items held.
    pub fn len(&self) -> usize {
        self.state.read().shards.iter().map(|s| s.items.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The latest version of a live item: its index and JSON object.
    pub fn get(&self, key: &ItemKey) -> Option<(Index, String)> {
        if !self.partition.contains(key.hash()) {
            return None;
        }
        self.state.read().get(key)
    }

    /// `get` for many keys under one lock, so all answers come from one applied index. The
    /// values' bytes together may not pass `value_bytes_max` (a key asked for many times
    /// counts each time): past it, nothing more is copied and `Err` says how many bytes the
    /// values read so far took.
    pub fn multiget(
        &self,
        keys: &[ItemKey],
        value_bytes_max: usize,
    ) -> Result<(Index, Vec<Option<Latest>>), usize> {
        let state = self.state.read();
        let mut bytes = 0usize;
        let mut values = Vec::with_capacity(keys.len());
        for k in keys {
            let value = self
                .partition
                .contains(k.hash())
                .then(|| {
                    state.get_with_len(k, |len| {
                        bytes = bytes.saturating_add(len);
                        bytes <= value_bytes_max
                    })
                })
                .flatten();
            if bytes > value_bytes_max {
                return Err(bytes);
            }
            values.push(value);
        }
        Ok((state.applied, values))
    }

    /// Every live item (for tests and dumps).
    pub fn snapshot(&self) -> (Index, Items) {
        let state = self.state.read();
        let mut items = Items::new();
        for shard in &state.shards {
            for (key, value) in &shard.items {
                let (key, _) = ItemKey::decode(key).expect("memory view keys are valid");
                items.insert(key, value.clone());
            }
        }
        (state.applied, items)
    }

    /// Apply log records continuing the applied prefix (ending on a commit), all under one
    /// lock so readers never see part of a transaction.
    pub fn apply(&self, records: &[Record]) -> Result<Index, ViewError> {
        let mut state = self.state.write();
        let fresh = crate::follow::fresh_suffix(state.applied, records)?;
        if fresh.is_empty() {
            return Ok(state.applied);
        }
        let last = fresh.last().expect("non-empty");
        for r in fresh {
            let hash = r.key.hash();
            if self.partition.contains(hash) {
                let shard = state.shard_mut(hash);
                match r.value.as_json() {
                    Some(json) => {
                        shard
                            .items
                            .insert(r.key.to_bytes().into(), (r.index, json.to_owned()));
                    }
                    None => {
                        shard.items.remove(r.key.to_bytes().as_slice());
                    }
                }
            }
        }
        state.applied = last.index;
        Ok(last.index)
    }

    /// Boot from the sources of `plan` (looked up by id with `view_of`): iterate them
    /// concurrently to `plan.cut`, latest versions only. The view is then at `plan.cut`;
    /// the caller tails the log from `cut + 1` (`follow::catch_up` or `follow::follow`).
    pub fn boot<'v, S: crate::boot::BootSource + ?Sized + 'v>(
        partition: Partition,
        plan: &Plan,
        view_of: impl Fn(&str) -> Option<&'v S>,
        progress: &BootProgress,
    ) -> Result<MemoryView, IterError> {
        let mut template = IterRequest::range(partition);
        template.latest_only = true;
        let shards = iterate_plan(
            plan,
            view_of,
            &template,
            progress,
            Shard::new,
            |shard, f| {
                let Some(json) = f.value else {
                    return Ok(()); // a tombstone: the item is not live
                };
                let json = std::str::from_utf8(json).map_err(|_| {
                    f.source
                        .corrupt(format!("value at {} is not UTF-8", f.index))
                })?;
                let previous = shard.items.insert(f.key.into(), (f.index, json.to_owned()));
                // A source's bug or damage, not this process's: an error, not a panic.
                match previous {
                    None => Ok(()),
                    Some((earlier, _)) => Err(f.source.corrupt(format!(
                        "a latest-only iteration sent an item twice (at {earlier} and {})",
                        f.index
                    ))),
                }
            },
        )?;
        let mut at = partition.lo();
        for shard in &shards {
            assert_eq!(
                shard.range.lo(),
                at,
                "plan sources tile the view's partition"
            );
            at = shard.range.hi();
        }
        assert_eq!(at, partition.hi(), "plan sources tile the view's partition");
        Ok(MemoryView {
            partition,
            state: RwLock::new(State {
                shards,
                applied: plan.cut,
            }),
        })
    }
}

impl crate::follow::Applier for MemoryView {
    fn applied_index(&self) -> Index {
        MemoryView::applied_index(self)
    }

    fn apply(&self, records: &[Record]) -> Result<Index, ViewError> {
        MemoryView::apply(self, records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spindle_core::Value;

    fn put(index: u64, key: &ItemKey, json: Option<&str>) -> Record {
        Record {
            index: Index::new(index),
            commit: true,
            key: key.clone(),
            value: json.map_or(Value::TOMBSTONE, |j| Value::json(j).unwrap()),
        }
    }

    #[test]
    fn get_and_multiget_see_latest_live_values_of_one_partition() {
        let part = Partition::nth(0, 2);
        let ids: Vec<ItemKey> = (0..40)
            .map(|i| ItemKey::node(format!("n{i}")).unwrap())
            .collect();
        let inside: Vec<&ItemKey> = ids.iter().filter(|k| part.contains(k.hash())).collect();
        let outside = ids.iter().find(|k| !part.contains(k.hash())).unwrap();
        let (a, b) = (inside[0], inside[1]);
        let view = MemoryView::new(part);
        view.apply(&[
            put(1, a, Some(r#"{"v":1}"#)),
            put(2, b, Some(r#"{"v":2}"#)),
            put(3, outside, Some(r#"{"v":3}"#)),
            put(4, a, Some(r#"{"v":4}"#)),
            put(5, b, None),
        ])
        .unwrap();
        assert_eq!(view.get(a), Some((Index::new(4), r#"{"v":4}"#.to_owned())));
        assert_eq!(view.get(b), None, "deleted");
        assert_eq!(view.get(outside), None, "outside the partition");
        let (at, values) = view
            .multiget(&[a.clone(), b.clone(), outside.clone()], usize::MAX)
            .unwrap();
        assert_eq!(at, Index::new(5));
        assert_eq!(values, vec![view.get(a), None, None]);
        // A budget counts every value copied, a key asked for twice twice.
        let len = r#"{"v":4}"#.len();
        assert!(view.multiget(&[a.clone(), a.clone()], 2 * len).is_ok());
        assert_eq!(
            view.multiget(&[a.clone(), a.clone()], 2 * len - 1),
            Err(2 * len)
        );
        assert_eq!(view.len(), 1);
    }

    #[test]
    fn records_must_continue_the_applied_prefix() {
        let view = MemoryView::new(Partition::ALL);
        let key = ItemKey::node("a").unwrap();
        assert!(matches!(
            view.apply(&[put(2, &key, None)]),
            Err(ViewError::Gap { .. })
        ));
        let mut open = put(1, &key, None);
        open.commit = false;
        assert!(matches!(
            view.apply(&[open]),
            Err(ViewError::PartialTransaction { .. })
        ));
        assert_eq!(view.applied_index(), Index::ZERO);
    }
}
