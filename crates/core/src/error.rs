//! Errors for input that a client got wrong. Each variant says what is wrong and where, so
//! that an API can hand the message straight back to the user.

use thiserror::Error;

/// Why a transaction, key or value was refused before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InputError {
    #[error("transaction has no writes")]
    EmptyTransaction,
    #[error("transaction has {records} writes; the limit is {max}")]
    TooManyRecords { records: usize, max: usize },
    #[error("transaction has {conditions} conditions; the limit is {max}")]
    TooManyConditions { conditions: usize, max: usize },
    #[error("{field} is empty")]
    EmptyField { field: &'static str },
    #[error("{field} is {len} bytes; the limit is {max}")]
    FieldTooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{field} is not valid UTF-8 (bad byte at offset {offset})")]
    NotUtf8 { field: &'static str, offset: usize },
    #[error("value is not a JSON object: {reason}")]
    NotJsonObject { reason: String },
    #[error("record for {item} is {len} bytes; the limit is {max}")]
    RecordTooLarge {
        item: String,
        len: usize,
        max: usize,
    },
    #[error("transaction is {len} bytes; the limit is {max}")]
    TransactionTooLarge { len: usize, max: usize },
    #[error("condition on {item} appears twice")]
    DuplicateCondition { item: String },
}
