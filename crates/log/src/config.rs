//! Log configuration. Every bound has a name with its unit last.

use spindle_core::txn::{TXN_BYTES_MAX, TXN_RECORDS_MAX};

use crate::frame::FRAME_HEADER_BYTES;

/// Whether appends wait for fdatasync. `Off` exists only to measure what syncing costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// fdatasync every batch before acknowledging it (the default; durable).
    Data,
    /// Never sync: acknowledged appends can be lost on a crash. Benchmarks only.
    Off,
}

/// Tunables of the file log.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// Preallocated size of each segment file.
    pub segment_bytes: u64,
    /// Bytes of encoded transactions waiting for the writer; appenders wait beyond this.
    pub intake_bytes_max: usize,
    /// Bytes the writer puts into one group commit (one write, one sync).
    pub group_commit_bytes_max: usize,
    /// Written batches waiting for the syncer; the writer waits beyond this.
    pub sync_queue_batches_max: usize,
    /// Bytes a reader fetches from a segment per read call.
    pub read_chunk_bytes: usize,
    /// Records between entries of a segment's in-memory offset index.
    pub sparse_index_stride_records: u64,
    /// Bytes the writer may have written to a segment but not yet synced; past it the writer
    /// syncs before writing more. Recorded in each segment's header, it bounds where a torn
    /// tail can lie, so recovery can tell damage to synced data from an unsynced tail.
    pub unsynced_bytes_max: u64,
    /// When the syncer thread has nothing in hand, nothing else is queued and the batch is
    /// one small submission (a lone appender), the writer syncs and answers it itself, so
    /// the acknowledgement needs one thread wake-up fewer. `false` hands every batch to the
    /// syncer.
    pub writer_syncs_when_idle: bool,
    pub sync: SyncMode,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 64 << 20,
            intake_bytes_max: 64 << 20,
            group_commit_bytes_max: 16 << 20,
            sync_queue_batches_max: 4,
            read_chunk_bytes: 1 << 20,
            sparse_index_stride_records: 512,
            unsynced_bytes_max: 4 << 20,
            writer_syncs_when_idle: true,
            sync: SyncMode::Data,
        }
    }
}

/// The largest encoded transaction: every record at its header plus the payload bound.
pub const TXN_FRAME_BYTES_MAX: usize = TXN_BYTES_MAX + TXN_RECORDS_MAX * FRAME_HEADER_BYTES;

/// The smallest unsynced window. A frame larger than the window is synced on its own (synced
/// before and after it is written); the default window holds the largest frame.
pub const UNSYNCED_BYTES_MIN: u64 = 4096;

impl LogConfig {
    /// The window recorded in new segments' headers: 0 (unknown) when nothing is synced.
    pub(crate) fn header_unsynced_window(&self) -> u32 {
        match self.sync {
            SyncMode::Data => u32::try_from(self.unsynced_bytes_max).expect("validated"),
            SyncMode::Off => 0,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.segment_bytes < 4096 {
            return Err(format!(
                "segment_bytes {} is below 4096",
                self.segment_bytes
            ));
        }
        if self.intake_bytes_max > u32::MAX as usize {
            return Err(format!(
                "intake_bytes_max {} is above {} (4 GiB - 1)",
                self.intake_bytes_max,
                u32::MAX
            ));
        }
        if self.intake_bytes_max < TXN_FRAME_BYTES_MAX {
            return Err(format!(
                "intake_bytes_max {} is below the largest transaction ({TXN_FRAME_BYTES_MAX})",
                self.intake_bytes_max
            ));
        }
        if self.group_commit_bytes_max == 0 || self.read_chunk_bytes < 4096 {
            return Err("group_commit_bytes_max must be > 0, read_chunk_bytes >= 4096".into());
        }
        if self.sync_queue_batches_max == 0 {
            return Err("sync_queue_batches_max must be > 0".into());
        }
        if self.unsynced_bytes_max < UNSYNCED_BYTES_MIN
            || self.unsynced_bytes_max > u64::from(u32::MAX)
        {
            return Err(format!(
                "unsynced_bytes_max {} must be in {UNSYNCED_BYTES_MIN}..={} ",
                self.unsynced_bytes_max,
                u32::MAX
            ));
        }
        if self.sparse_index_stride_records == 0 {
            return Err("sparse_index_stride_records must be > 0".into());
        }
        Ok(())
    }
}
