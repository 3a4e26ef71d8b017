//! Transactions: writes to items plus conditions on items' current versions.
//!
//! A transaction becomes a run of consecutive log records, one per write, appended
//! atomically; it commits only if every condition holds (per-item optimistic concurrency:
//! "the item's current version equals `expected`", where 0 means "the item does not exist").

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::error::InputError;
use crate::index::Index;
use crate::item::ItemKey;
use crate::record::encoded_payload_len;
use crate::value::Value;

/// Largest encoded record payload (key + value + header), in bytes.
pub const RECORD_BYTES_MAX: usize = 1 << 20;
/// Most writes in one transaction.
pub const TXN_RECORDS_MAX: usize = 10_000;
/// Most conditions in one transaction: each is a version-table lookup on the log's single
/// writer, and none is counted in a transaction's bytes.
pub const TXN_CONDITIONS_MAX: usize = 10_000;
/// Largest transaction, summed over its records' payloads, in bytes.
pub const TXN_BYTES_MAX: usize = 8 << 20;

/// One write: a new version of one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub key: ItemKey,
    pub value: Value,
}

/// "The current version of `key` is `expected`" (`Index::ZERO`: the item is absent).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Condition {
    pub key: ItemKey,
    pub expected: Index,
}

/// Writes applied atomically if all conditions hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transaction {
    pub writes: Vec<Write>,
    pub conditions: Vec<Condition>,
}

impl Transaction {
    pub fn new() -> Self {
        Self::default()
    }

    /// A one-write transaction without conditions.
    pub fn single(key: ItemKey, value: Value) -> Self {
        Transaction {
            writes: vec![Write { key, value }],
            conditions: Vec::new(),
        }
    }

    pub fn write(mut self, key: ItemKey, value: Value) -> Self {
        self.writes.push(Write { key, value });
        self
    }

    pub fn condition(mut self, key: ItemKey, expected: Index) -> Self {
        self.conditions.push(Condition { key, expected });
        self
    }

    /// Check everything a client could get wrong; returns the summed payload bytes.
    pub fn validate(&self) -> Result<usize, InputError> {
        if self.writes.is_empty() {
            return Err(InputError::EmptyTransaction);
        }
        if self.writes.len() > TXN_RECORDS_MAX {
            return Err(InputError::TooManyRecords {
                records: self.writes.len(),
                max: TXN_RECORDS_MAX,
            });
        }
        if self.conditions.len() > TXN_CONDITIONS_MAX {
            return Err(InputError::TooManyConditions {
                conditions: self.conditions.len(),
                max: TXN_CONDITIONS_MAX,
            });
        }
        let mut total = 0usize;
        for w in &self.writes {
            w.key.validate()?;
            let len = encoded_payload_len(&w.key, &w.value);
            if len > RECORD_BYTES_MAX {
                return Err(InputError::RecordTooLarge {
                    item: w.key.to_string(),
                    len,
                    max: RECORD_BYTES_MAX,
                });
            }
            total += len;
        }
        if total > TXN_BYTES_MAX {
            return Err(InputError::TransactionTooLarge {
                len: total,
                max: TXN_BYTES_MAX,
            });
        }
        if self.conditions.len() > 1 {
            let mut seen = HashSet::with_capacity(self.conditions.len());
            for c in &self.conditions {
                if !seen.insert(&c.key) {
                    return Err(InputError::DuplicateCondition {
                        item: c.key.to_string(),
                    });
                }
            }
        }
        for c in &self.conditions {
            c.key.validate()?;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str) -> ItemKey {
        ItemKey::node(id).unwrap()
    }

    #[test]
    fn too_many_conditions_are_refused() {
        let mut t = Transaction::single(node("a"), Value::json("{}").unwrap());
        for i in 0..TXN_CONDITIONS_MAX {
            t = t.condition(node(&format!("c{i}")), Index::ZERO);
        }
        assert!(t.validate().is_ok());
        let t = t.condition(node("one-more"), Index::ZERO);
        assert_eq!(
            t.validate(),
            Err(InputError::TooManyConditions {
                conditions: TXN_CONDITIONS_MAX + 1,
                max: TXN_CONDITIONS_MAX
            })
        );
    }

    #[test]
    fn empty_transaction_is_refused() {
        assert_eq!(
            Transaction::new().validate(),
            Err(InputError::EmptyTransaction)
        );
        let only_condition = Transaction::new().condition(node("a"), Index::ZERO);
        assert_eq!(only_condition.validate(), Err(InputError::EmptyTransaction));
    }

    #[test]
    fn oversized_record_is_refused() {
        let big = format!("{{\"x\":\"{}\"}}", "y".repeat(RECORD_BYTES_MAX));
        let txn = Transaction::single(node("a"), Value::json(big).unwrap());
        assert!(matches!(
            txn.validate(),
            Err(InputError::RecordTooLarge { .. })
        ));
    }

    #[test]
    fn oversized_transaction_is_refused() {
        let half = format!("{{\"x\":\"{}\"}}", "y".repeat(RECORD_BYTES_MAX - 64));
        let mut txn = Transaction::new();
        for i in 0..(TXN_BYTES_MAX / RECORD_BYTES_MAX + 1) {
            txn = txn.write(node(&format!("n{i}")), Value::json(half.clone()).unwrap());
        }
        assert!(matches!(
            txn.validate(),
            Err(InputError::TransactionTooLarge { .. })
        ));
    }

    #[test]
    fn invalid_keys_inside_a_transaction_are_refused() {
        let txn = Transaction::single(
            ItemKey::Node { id: String::new() },
            Value::json("{}").unwrap(),
        );
        assert!(matches!(txn.validate(), Err(InputError::EmptyField { .. })));
    }

    #[test]
    fn duplicate_conditions_are_refused() {
        let txn = Transaction::single(node("a"), Value::TOMBSTONE)
            .condition(node("b"), Index::ZERO)
            .condition(node("b"), Index::new(3));
        assert!(matches!(
            txn.validate(),
            Err(InputError::DuplicateCondition { .. })
        ));
    }
}
