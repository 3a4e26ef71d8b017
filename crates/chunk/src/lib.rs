//! A Haystack-style chunk store: content-addressed immutable chunks (BLAKE3 ids) packed into
//! append-only volume files, with an in-memory index so a get is one positioned read.
//!
//! - Puts go through one background writer with a bounded buffer; a put returns only after
//!   its bytes are synced, and every put queued during a sync shares the next one.
//! - Sealed volumes get a hint file (their record list) so opening reads hints, not volumes;
//!   after a crash the unsealed volume is scanned and a torn tail cut.
//! - Deletes append tombstones; `compact` rewrites volumes whose garbage passes a threshold.
//!
//! The byte formats and the crash rules are in `docs/chunk-format.md`.

#![forbid(unsafe_code)]

mod catalog;
mod compact;
mod error;
pub mod format;
mod id;
mod policy;
mod recovery;
mod store;
mod verify;
mod volume;
mod writer;

pub use bytes::Bytes;
pub use catalog::VolumeStats;
pub use error::{ChunkError, Result};
pub use format::{RecordKind, MARKER_FILE, RECORD_HEADER_LEN, VOLUME_HEADER_LEN};
pub use id::{ChunkId, ParseChunkIdError};
pub use policy::{compaction_candidates, put_fits, should_seal, CompactionPolicy, VolumeUsage};
pub use store::{
    ChunkStore, CompactionReport, CompactionTotals, HashedChunk, OpenReport, Options, StoreStats,
};
pub use verify::{
    verify_store, verify_store_in, HintStatus, VerifyReport, VolumeReport, VolumeStatus,
};
pub use volume::DIRECT_READ_BYTES_MIN;
