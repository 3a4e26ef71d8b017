//! Spindle's shared vocabulary: log positions, item keys, values, transactions, the
//! partition hash and the record codec.
//!
//! Everything here is pure and allocation-light; I/O lives in the crates above. Every
//! integer that reaches disk or the wire is fixed-width little-endian unless a format
//! document says otherwise (the Disk View key layout is big-endian so that it sorts).

#![forbid(unsafe_code)]

pub mod error;
pub mod index;
pub mod item;
pub mod partition;
pub mod record;
pub mod txn;
pub mod value;

pub use error::InputError;
pub use index::Index;
pub use item::{ItemKey, ItemKind, ITEM_ID_BYTES_MAX, LABEL_BYTES_MAX};
pub use partition::{partition_hash, Partition, DISK_PARTITIONS_MAX};
pub use record::{Record, RecordFlags};
pub use txn::{Condition, Transaction, Write, RECORD_BYTES_MAX, TXN_RECORDS_MAX};
pub use value::Value;
