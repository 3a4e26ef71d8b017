//! What the node must hold after any crash, kept by the torture driver, and the pure checks
//! that compare it with what a restarted node answers.
//!
//! Every acknowledgement is kept (not only the last per item). A request whose answer never
//! came is "maybe": it may or may not have landed, and is resolved after the restart.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

/// An item the driver writes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Node(String),
    Edge {
        from: String,
        label: String,
        to: String,
    },
}

impl Key {
    /// The item as the HTTP API names it in a transaction or a multiget.
    pub fn json(&self) -> Value {
        match self {
            Key::Node(id) => json!({"kind": "node", "id": id}),
            Key::Edge { from, label, to } => {
                json!({"kind": "edge", "from": from, "label": label, "to": to})
            }
        }
    }

    /// The item as query parameters of `/v1/item` and `/v1/history` (ids need no escaping:
    /// the driver uses only letters, digits and `-`).
    pub fn query(&self) -> String {
        match self {
            Key::Node(id) => format!("node={id}"),
            Key::Edge { from, label, to } => format!("from={from}&label={label}&to={to}"),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Node(id) => write!(f, "node {id}"),
            Key::Edge { from, label, to } => write!(f, "edge {from}-{label}->{to}"),
        }
    }
}

/// One version of an item as the node shows it (or as the model expects it).
#[derive(Clone, Debug, PartialEq)]
pub struct Obs {
    pub index: u64,
    /// `None`: a tombstone.
    pub value: Option<Value>,
}

impl std::fmt::Display for Obs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{v} at {}", self.index),
            None => write!(f, "a tombstone at {}", self.index),
        }
    }
}

fn show(o: Option<&Obs>) -> String {
    o.map_or_else(|| "nothing".to_owned(), ToString::to_string)
}

/// The value write `w` of transaction `txn` puts.
pub fn txn_value(txn: u64, w: usize) -> Value {
    json!({"txn": txn, "w": w})
}

/// The outcome of a transaction as far as the driver knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnState {
    /// Sent, no answer yet (or the answer was lost with the node).
    Maybe,
    /// Acknowledged at this commit index.
    Acked(u64),
    /// Unacknowledged, and found whole in the restarted node at this commit index.
    Landed(u64),
    /// Unacknowledged and not in the restarted node (or refused).
    Absent,
}

/// A multi-item transaction on items one client owns, conditioned on every item's version.
#[derive(Clone, Debug)]
pub struct Txn {
    pub id: u64,
    pub trial: u64,
    /// Item (index into the model's items) and whether the write deletes it.
    pub writes: Vec<(usize, bool)>,
    pub state: TxnState,
}

impl Txn {
    /// The version write `w` has when the transaction commits at `commit`: each record's
    /// version is its own index, the last record's is the commit index.
    pub fn expected(&self, w: usize, commit: u64) -> Obs {
        let (_, delete) = self.writes[w];
        Obs {
            index: commit.saturating_sub((self.writes.len() - 1 - w) as u64),
            value: (!delete).then(|| txn_value(self.id, w)),
        }
    }
}

/// An acknowledged version must be present at its index with its value.
pub fn check_ack(key: &Key, expected: &Obs, observed: Option<&Obs>) -> Result<(), String> {
    if observed == Some(expected) {
        return Ok(());
    }
    Err(format!(
        "lost write: {key} was acknowledged as {expected}; as of {} the node has {}",
        expected.index,
        show(observed)
    ))
}

/// The latest version of an item must be the last one the model holds.
pub fn check_latest(
    key: &Key,
    expected: Option<&Obs>,
    observed: Option<&Obs>,
) -> Result<(), String> {
    if expected == observed {
        return Ok(());
    }
    Err(format!(
        "latest of {key}: expected {}, the node has {}",
        show(expected),
        show(observed)
    ))
}

/// A whole history must be exactly the versions the model holds, in order.
pub fn check_history(key: &Key, expected: &[Obs], observed: &[Obs]) -> Result<(), String> {
    if expected == observed {
        return Ok(());
    }
    let first = expected
        .iter()
        .zip(observed)
        .position(|(e, o)| e != o)
        .unwrap_or(expected.len().min(observed.len()));
    Err(format!(
        "history of {key}: {} versions expected, {} found; first difference at position \
         {first}: expected {}, found {}",
        expected.len(),
        observed.len(),
        show(expected.get(first)),
        show(observed.get(first))
    ))
}

/// Resolve an unacknowledged transaction after a restart: `known[w]` is the version its
/// item `w` had before it was sent (0: none), `latest[w]` what the node now has. No other
/// request touched those items since, so either every item moved to the transaction's
/// versions (it landed, at the returned commit index) or none moved (`None`). Anything
/// else is a partly visible transaction.
pub fn resolve_maybe(
    txn: &Txn,
    keys: &[Key],
    known: &[u64],
    latest: &[Option<Obs>],
) -> Result<Option<u64>, String> {
    let moved: Vec<bool> = known
        .iter()
        .zip(latest)
        .map(|(k, l)| l.as_ref().map_or(0, |o| o.index) != *k)
        .collect();
    if moved.iter().all(|m| !m) {
        return Ok(None);
    }
    let describe = || {
        keys.iter()
            .zip(known.iter().zip(latest))
            .map(|(k, (was, now))| format!("{k}: was {was}, now {}", show(now.as_ref())))
            .collect::<Vec<_>>()
            .join("; ")
    };
    if moved.iter().any(|m| !m) {
        return Err(format!(
            "partly visible transaction {}: some of its items changed, some did not ({})",
            txn.id,
            describe()
        ));
    }
    let last = latest
        .last()
        .and_then(Option::as_ref)
        .map_or(0, |o| o.index);
    for (w, now) in latest.iter().enumerate() {
        if now.as_ref() != Some(&txn.expected(w, last)) {
            return Err(format!(
                "unacknowledged transaction {} landed inconsistently: write {w} expected {}, \
                 ({})",
                txn.id,
                txn.expected(w, last),
                describe()
            ));
        }
    }
    Ok(Some(last))
}

/// One counter built by conditional read-modify-write increments: value `{"n": n, "op": op}`.
#[derive(Clone, Debug, Default)]
pub struct Counter {
    /// Acknowledged increments: the count they produced → (op, commit index).
    pub acked: BTreeMap<u64, (u64, u64)>,
    /// Unacknowledged increments (in flight at a crash, or landed): count → ops.
    pub maybe: BTreeMap<u64, BTreeSet<u64>>,
}

/// The value an increment writes.
pub fn counter_value(n: u64, op: u64) -> Value {
    json!({"n": n, "op": op})
}

/// Read `n` and `op` from a counter's value.
pub fn counter_fields(v: &Value) -> Option<(u64, u64)> {
    Some((v["n"].as_u64()?, v["op"].as_u64()?))
}

impl Counter {
    /// The counter's latest version must hold a count `F` such that every acknowledged
    /// increment is at or below it, and every count `1..=F` was produced by exactly the
    /// acknowledged increment for it or by an unacknowledged one: the counter is exact.
    pub fn check(&self, name: &str, latest: Option<&Obs>) -> Result<(), String> {
        let (count, op) = match latest {
            None => (0, None),
            Some(o) => match o.value.as_ref().and_then(counter_fields) {
                Some((n, op)) => (n, Some((op, o.index))),
                None => return Err(format!("counter {name}: unexpected latest {o}")),
            },
        };
        if let Some((&n, &(op, index))) = self.acked.range(count + 1..).next() {
            return Err(format!(
                "counter {name} is {count}, but increment op {op} to {n} was acknowledged at \
                 {index} (lost increment)"
            ));
        }
        if let Some(n) =
            (1..=count).find(|n| !self.acked.contains_key(n) && !self.maybe.contains_key(n))
        {
            return Err(format!(
                "counter {name} is {count}, but no increment to {n} was ever sent \
                 ({} acknowledged, {} unacknowledged)",
                self.acked.len(),
                self.maybe.len()
            ));
        }
        if let Some((op, index)) = op {
            let ok = match self.acked.get(&count) {
                Some(&a) => a == (op, index),
                None => self.maybe.get(&count).is_some_and(|s| s.contains(&op)),
            };
            if !ok {
                return Err(format!(
                    "counter {name} is {count} by op {op} at {index}; the model has {:?} / {:?}",
                    self.acked.get(&count),
                    self.maybe.get(&count)
                ));
            }
        }
        Ok(())
    }

    /// After a restart that showed count `count`, unacknowledged increments above it, or
    /// beaten by an acknowledged one, never landed: forget them.
    pub fn settle(&mut self, count: u64) {
        let acked = &self.acked;
        self.maybe
            .retain(|n, _| *n <= count && !acked.contains_key(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(writes: Vec<(usize, bool)>) -> Txn {
        Txn {
            id: 7,
            trial: 1,
            writes,
            state: TxnState::Maybe,
        }
    }

    fn keys(n: usize) -> Vec<Key> {
        (0..n).map(|i| Key::Node(format!("k{i}"))).collect()
    }

    #[test]
    fn a_lost_acknowledged_write_is_reported() {
        let t = txn(vec![(0, false), (1, false)]);
        let key = Key::Node("k0".into());
        let expected = t.expected(0, 10);
        assert_eq!(expected.index, 9);
        assert!(check_ack(&key, &expected, Some(&expected)).is_ok());
        let err = check_ack(&key, &expected, None).unwrap_err();
        assert!(err.contains("lost write"), "{err}");
        let other = Obs {
            index: 9,
            value: Some(txn_value(8, 0)),
        };
        assert!(check_ack(&key, &expected, Some(&other)).is_err());
    }

    #[test]
    fn a_partly_visible_transaction_is_reported() {
        let t = txn(vec![(0, false), (1, true), (2, false)]);
        let known = [0, 3, 4];
        // Whole: every item at the transaction's versions (commit 12).
        let whole: Vec<_> = (0..3).map(|w| Some(t.expected(w, 12))).collect();
        assert_eq!(resolve_maybe(&t, &keys(3), &known, &whole), Ok(Some(12)));
        // Absent: nothing moved.
        let none = vec![
            None,
            Some(Obs {
                index: 3,
                value: None,
            }),
            Some(Obs {
                index: 4,
                value: Some(json!({})),
            }),
        ];
        assert_eq!(resolve_maybe(&t, &keys(3), &known, &none), Ok(None));
        // Partial: the first two landed, the last did not.
        let mut partial = whole.clone();
        partial[2] = none[2].clone();
        let err = resolve_maybe(&t, &keys(3), &known, &partial).unwrap_err();
        assert!(err.contains("partly visible"), "{err}");
        // Moved, but not to this transaction's versions.
        let mut torn = whole;
        torn[0] = Some(Obs {
            index: 10,
            value: Some(txn_value(99, 0)),
        });
        assert!(resolve_maybe(&t, &keys(3), &known, &torn).is_err());
    }

    #[test]
    fn histories_must_match_exactly() {
        let key = Key::Node("k".into());
        let a = Obs {
            index: 1,
            value: Some(json!(1)),
        };
        let b = Obs {
            index: 5,
            value: None,
        };
        assert!(check_history(&key, &[a.clone(), b.clone()], &[a.clone(), b.clone()]).is_ok());
        let both = [a.clone(), b.clone()];
        assert!(check_history(&key, &both, std::slice::from_ref(&a)).is_err());
        assert!(check_history(&key, std::slice::from_ref(&a), &both).is_err());
        assert!(check_latest(&key, Some(&b), Some(&a)).is_err());
        assert!(check_latest(&key, None, None).is_ok());
    }

    #[test]
    fn counters_must_be_exact() {
        let mut c = Counter::default();
        c.acked.insert(1, (10, 3));
        c.acked.insert(2, (11, 5));
        c.maybe.entry(3).or_default().insert(12);
        let at = |n, op, index| Obs {
            index,
            value: Some(counter_value(n, op)),
        };
        assert!(c.check("c", Some(&at(2, 11, 5))).is_ok());
        // The in-flight increment landed.
        assert!(c.check("c", Some(&at(3, 12, 8))).is_ok());
        // An acknowledged increment is missing.
        let err = c.check("c", Some(&at(1, 10, 3))).unwrap_err();
        assert!(err.contains("lost increment"), "{err}");
        assert!(c.check("c", None).is_err());
        // A count nobody produced.
        assert!(c.check("c", Some(&at(4, 13, 9))).is_err());
        // The right count by the wrong op or at the wrong index.
        assert!(c.check("c", Some(&at(2, 11, 6))).is_err());
        assert!(c.check("c", Some(&at(3, 14, 8))).is_err());
        c.settle(2);
        assert!(c.maybe.is_empty());
    }
}
