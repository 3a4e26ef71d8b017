//! External sort for Spindle: two reads and two writes per record (TritonSort).
//!
//! Input that fits in the memory budget is sorted in memory and never touches disk. Larger
//! input is read once and written once into temporary bucket files by key range (splitters
//! from a sample, so skewed keys still give buckets that fit), then each bucket is read once,
//! sorted in memory and streamed out. A bucket that does not fit is split again; nothing is
//! ever sorted with unbounded memory. Temporary files live in a private directory that is
//! removed on drop and on error.
//!
//! - [`entries`]: variable-length `(key, value)` entries, for bulk loads.
//! - [`import`]: `spindle import`, the offline bulk load of a new data directory.
//!
//! See `docs/sort.md` for the bucket file format, the passes and the memory budget.

#![forbid(unsafe_code)]

pub mod entries;
mod error;
pub mod import;

pub use error::SortError;
