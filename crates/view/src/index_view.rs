//! The Index View: for one property of nodes (a JSON Pointer), property value → the ids of
//! the live nodes that have it. It boots from Disk Views with a projection (only that
//! property crosses the wire) and tails the log from the cut.
//!
//! Values are keyed by their compact JSON text as serde_json writes it, which is how the
//! projection sends them: `"x"`, `3`, `[1,2]`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use parking_lot::RwLock;
use spindle_core::{Index, ItemKey, Partition, Record};

use crate::boot::{iterate_plan, BootProgress};
use crate::error::{IterError, ViewError};
use crate::frame::FLAG_PROJECTED;
use crate::iterate::{check_pointer, project, IterRequest, Kinds};
use crate::select::Plan;

#[derive(Debug, Default)]
struct State {
    /// Property value (JSON text) → node ids.
    by_value: HashMap<String, BTreeSet<String>>,
    /// Node id → its property value, to unindex the old value on an update.
    by_node: HashMap<String, String>,
    applied: Index,
}

impl State {
    fn set(&mut self, id: &str, value: Option<String>) {
        if let Some(old) = self.by_node.remove(id) {
            if let Some(ids) = self.by_value.get_mut(&old) {
                ids.remove(id);
                if ids.is_empty() {
                    self.by_value.remove(&old);
                }
            }
        }
        if let Some(value) = value {
            self.by_value
                .entry(value.clone())
                .or_default()
                .insert(id.to_owned());
            self.by_node.insert(id.to_owned(), value);
        }
    }
}

/// Property value → node ids, for the nodes of one partition.
#[derive(Debug)]
pub struct IndexView {
    partition: Partition,
    pointer: String,
    state: RwLock<State>,
}

fn bad_pointer(pointer: &str, reason: &str) -> IterError {
    IterError::BadProjection {
        projection: pointer.to_owned(),
        reason: reason.to_owned(),
    }
}

impl IndexView {
    /// An empty index of property `pointer` (a JSON Pointer like `/city`) at index 0.
    pub fn new(partition: Partition, pointer: &str) -> Result<IndexView, IterError> {
        check_pointer(pointer).map_err(|reason| bad_pointer(pointer, reason))?;
        Ok(IndexView {
            partition,
            pointer: pointer.to_owned(),
            state: RwLock::new(State::default()),
        })
    }

    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    pub fn applied_index(&self) -> Index {
        self.state.read().applied
    }

    /// Ids of the live nodes whose property equals `value`, sorted.
    pub fn lookup(&self, value: &serde_json::Value) -> Vec<String> {
        self.lookup_page(value, None, usize::MAX).1
    }

    /// A page of `lookup`: the applied index it was read at, at most `limit` ids above
    /// `after` (if given), sorted, and whether more follow. Copies only the page's ids
    /// under the view's lock, however many nodes share the value.
    pub fn lookup_page(
        &self,
        value: &serde_json::Value,
        after: Option<&str>,
        limit: usize,
    ) -> (Index, Vec<String>, bool) {
        use std::ops::Bound;
        let key = value.to_string();
        let state = self.state.read();
        let Some(ids) = state.by_value.get(&key) else {
            return (state.applied, Vec::new(), false);
        };
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut page: Vec<String> = ids
            .range::<str, _>((from, Bound::Unbounded))
            .take(limit.saturating_add(1))
            .cloned()
            .collect();
        let more = page.len() > limit;
        page.truncate(limit);
        (state.applied, page, more)
    }

    /// Every indexed node and its property value (for tests and dumps).
    pub fn snapshot(&self) -> (Index, BTreeMap<String, String>) {
        let state = self.state.read();
        let nodes = state
            .by_node
            .iter()
            .map(|(id, v)| (id.clone(), v.clone()))
            .collect();
        (state.applied, nodes)
    }

    /// Apply log records continuing the applied prefix (ending on a commit), under one lock.
    pub fn apply(&self, records: &[Record]) -> Result<Index, ViewError> {
        let mut state = self.state.write();
        let fresh = crate::follow::fresh_suffix(state.applied, records)?;
        if fresh.is_empty() {
            return Ok(state.applied);
        }
        let last = fresh.last().expect("non-empty");
        for r in fresh {
            let ItemKey::Node { id } = &r.key else {
                continue;
            };
            if !self.partition.contains(r.key.hash()) {
                continue;
            }
            let value = match r.value.as_json() {
                None => None,
                Some(json) => project(json.as_bytes(), &self.pointer)
                    .expect("log values are validated JSON objects"),
            };
            state.set(id, value);
        }
        state.applied = last.index;
        Ok(last.index)
    }

    /// Boot from the sources of `plan` with a projection of the property: nodes only,
    /// latest versions only, to `plan.cut`. Then tail the log from `cut + 1`.
    pub fn boot<'v, S: crate::boot::BootSource + ?Sized + 'v>(
        partition: Partition,
        pointer: &str,
        plan: &Plan,
        view_of: impl Fn(&str) -> Option<&'v S>,
        progress: &BootProgress,
    ) -> Result<IndexView, IterError> {
        let view = IndexView::new(partition, pointer)?;
        let mut template = IterRequest::range(partition);
        template.kinds = Kinds::NODES;
        template.latest_only = true;
        template.projection = Some(pointer.to_owned());
        let parts = iterate_plan(
            plan,
            view_of,
            &template,
            progress,
            |_| Vec::new(),
            |acc, f| {
                let Some(value) = f.value.filter(|_| f.flags & FLAG_PROJECTED != 0) else {
                    return Ok(()); // deleted, or the node lacks the property
                };
                let Some((ItemKey::Node { id }, _)) = ItemKey::decode(f.key) else {
                    return Err(f
                        .source
                        .corrupt(format!("frame at {} is not a node", f.index)));
                };
                let value = std::str::from_utf8(value).map_err(|_| {
                    f.source
                        .corrupt(format!("projection at {} is not UTF-8", f.index))
                })?;
                acc.push((id, value.to_owned()));
                Ok(())
            },
        )?;
        {
            let mut state = view.state.write();
            for (id, value) in parts.into_iter().flatten() {
                state.set(&id, Some(value));
            }
            state.applied = plan.cut;
        }
        Ok(view)
    }
}

impl crate::follow::Applier for IndexView {
    fn applied_index(&self) -> Index {
        IndexView::applied_index(self)
    }

    fn apply(&self, records: &[Record]) -> Result<Index, ViewError> {
        IndexView::apply(self, records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spindle_core::Value;

    fn put(index: u64, id: &str, json: Option<&str>) -> Record {
        Record {
            index: Index::new(index),
            commit: true,
            key: ItemKey::node(id).unwrap(),
            value: json.map_or(Value::TOMBSTONE, |j| Value::json(j).unwrap()),
        }
    }

    #[test]
    fn updates_move_nodes_between_values_and_deletes_unindex() {
        let ix = IndexView::new(Partition::ALL, "/city").unwrap();
        ix.apply(&[
            put(1, "a", Some(r#"{"city":"Oslo"}"#)),
            put(2, "b", Some(r#"{"city":"Oslo","n":1}"#)),
            put(3, "c", Some(r#"{"n":2}"#)),
        ])
        .unwrap();
        let oslo = serde_json::json!("Oslo");
        assert_eq!(ix.lookup(&oslo), ["a", "b"]);
        ix.apply(&[put(4, "a", Some(r#"{"city":"Rome"}"#)), put(5, "b", None)])
            .unwrap();
        assert!(ix.lookup(&oslo).is_empty());
        assert_eq!(ix.lookup(&serde_json::json!("Rome")), ["a"]);
        assert_eq!(ix.snapshot().1.len(), 1);
        assert_eq!(ix.applied_index(), Index::new(5));
    }

    #[test]
    fn a_bad_pointer_is_refused() {
        assert!(matches!(
            IndexView::new(Partition::ALL, "city"),
            Err(IterError::BadProjection { .. })
        ));
    }
}
