//! Spindle's views (DESIGN.md §3, §4, §6): the Disk View (every version of every item of one
//! partition range, in RocksDB), the Iteration Service that streams a Disk View to a
//! consistent cut, the Carousel that shares one scan among many iterations, view selection,
//! the Memory and Index Views that boot from iteration, and the log-truncation coordinator.
//!
//! Every view is derived from the log: a view at applied index N equals a replay of the log
//! from 1 to N (invariant 4). Formats: docs/disk-view-format.md, docs/iteration.md.

#![forbid(unsafe_code)]

pub mod boot;
pub mod carousel;
pub mod checksum;
pub mod disk;
pub mod disk_boot;
pub mod disk_ingest;
pub mod disk_verify;
pub mod error;
pub mod follow;
pub mod frame;
pub mod index_view;
pub mod iterate;
pub mod keys;
pub mod memory;
pub mod select;
pub mod truncate;

pub use boot::BootProgress;
pub use carousel::{
    Carousel, CarouselConfig, CarouselStatus, Rider, RiderMode, RiderStats, RiderStatus,
};
pub use checksum::{AppliedChecksum, Checkpoint, Checksum};
pub use disk::{
    DiskOptions, DiskView, EdgeFilter, EdgesPage, Freshness, Page, PageBounds, Version,
    EDGE_SCAN_VERSIONS_MAX, PAGE_VALUE_BYTES_MAX,
};
pub use disk_verify::VerifyReport;
pub use error::{IterError, SelectError, SkipReason, ViewError};
pub use index_view::IndexView;
pub use iterate::{IterRequest, Iteration, Kinds};
pub use memory::MemoryView;
pub use select::{select, CatalogEntry, Plan, Role, SelectRequest, Source};
