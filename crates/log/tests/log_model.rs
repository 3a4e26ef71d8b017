//! Model test: random transactions with conditions, reopen and truncation, checked against a
//! plain in-memory reference (a `Vec` of records and a map of versions). Invariants 1–3:
//! every acknowledged record reads back byte for byte, indexes are dense, conflicts match.

mod common;

use std::collections::HashMap;

use common::*;
use proptest::prelude::*;
use spindle_core::{Index, ItemKey, Record, Transaction, Value};
use spindle_log::{AppendError, FileLog};

#[derive(Clone, Debug)]
enum Expect {
    Absent,
    Current,
    Wrong(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Append {
        writes: Vec<(u8, Option<u16>)>,
        conditions: Vec<(u8, Expect)>,
    },
    Reopen,
    Truncate {
        fraction: u8,
    },
}

fn key(k: u8) -> ItemKey {
    if k % 3 == 2 {
        ItemKey::edge(format!("n{}", k % 4), "rel", format!("n{k}")).unwrap()
    } else {
        ItemKey::node(format!("n{k}")).unwrap()
    }
}

fn op() -> impl Strategy<Value = Op> {
    let write = (0u8..8, proptest::option::weighted(0.85, any::<u16>()));
    let expect = prop_oneof![
        Just(Expect::Absent),
        Just(Expect::Current),
        (1u64..50).prop_map(Expect::Wrong)
    ];
    prop_oneof![
        8 => (proptest::collection::vec(write, 1..5), proptest::collection::vec((0u8..8, expect), 0..3))
            .prop_map(|(writes, conditions)| Op::Append { writes, conditions }),
        1 => Just(Op::Reopen),
        1 => (0u8..=100).prop_map(|fraction| Op::Truncate { fraction }),
    ]
}

struct Model {
    records: Vec<Record>,
    versions: HashMap<ItemKey, Index>,
}

impl Model {
    fn version(&self, k: &ItemKey) -> Index {
        self.versions.get(k).copied().unwrap_or(Index::ZERO)
    }

    /// A condition holds at the current version, and 0 holds for an absent or deleted item.
    fn holds(&self, k: &ItemKey, expected: Index) -> bool {
        let deleted = self
            .records
            .iter()
            .rev()
            .find(|r| &r.key == k)
            .is_some_and(|r| r.value.is_tombstone());
        self.version(k) == expected || (expected == Index::ZERO && deleted)
    }

    fn apply(&mut self, txn: &Transaction) -> Result<Index, Vec<ItemKey>> {
        let failed: Vec<ItemKey> = txn
            .conditions
            .iter()
            .filter(|c| !self.holds(&c.key, c.expected))
            .map(|c| c.key.clone())
            .collect();
        if !failed.is_empty() {
            return Err(failed);
        }
        let last = txn.writes.len() - 1;
        for (i, w) in txn.writes.iter().enumerate() {
            let index = Index::new(self.records.len() as u64 + 1);
            self.versions.insert(w.key.clone(), index);
            self.records.push(Record {
                index,
                commit: i == last,
                key: w.key.clone(),
                value: w.value.clone(),
            });
        }
        Ok(Index::new(self.records.len() as u64))
    }
}

fn check_reads(log: &FileLog, model: &Model) {
    let first = log.first_index();
    assert_eq!(log.durable_index().get(), model.records.len() as u64);
    let got = log.read(first, usize::MAX).unwrap();
    let want = &model.records[(first.get() as usize - 1).min(model.records.len())..];
    assert_eq!(got.as_slice(), want);
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), small_segments());
    let mut model = Model {
        records: Vec::new(),
        versions: HashMap::new(),
    };
    for op in ops {
        match op {
            Op::Append { writes, conditions } => {
                let mut txn = Transaction::new();
                for (k, v) in writes {
                    let value = v.map_or(Value::TOMBSTONE, |n| obj(u64::from(n)));
                    txn = txn.write(key(k), value);
                }
                let mut seen = std::collections::HashSet::new();
                for (k, e) in conditions {
                    if !seen.insert(k) {
                        continue;
                    }
                    let expected = match e {
                        Expect::Absent => Index::ZERO,
                        Expect::Current => model.version(&key(k)),
                        Expect::Wrong(n) => Index::new(n),
                    };
                    txn = txn.condition(key(k), expected);
                }
                let want = model.apply(&txn);
                match (log.append_blocking(&txn), want) {
                    (Ok(got), Ok(want)) => assert_eq!(got, want),
                    (Err(AppendError::Conflict { failed }), Err(keys)) => {
                        let got: Vec<ItemKey> = failed.into_iter().map(|f| f.key).collect();
                        assert_eq!(got, keys);
                    }
                    (got, want) => panic!("log said {got:?}, model said {want:?}"),
                }
            }
            Op::Reopen => {
                drop(log);
                log = open(dir.path(), small_segments());
                check_reads(&log, &model);
            }
            Op::Truncate { fraction } => {
                let below = Index::new(model.records.len() as u64 * u64::from(fraction) / 100 + 1);
                let first = futures::executor::block_on(log.truncate_prefix(below)).unwrap();
                assert!(
                    first <= below.max(Index::FIRST),
                    "truncated past {below}: first {first}"
                );
            }
        }
    }
    check_reads(&log, &model);
    drop(log);
    let log = open(dir.path(), small_segments());
    check_reads(&log, &model);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}
