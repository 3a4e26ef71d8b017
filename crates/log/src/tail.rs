//! Tailing: follow the log from a position, waking when the durable index passes it.

use spindle_core::{Index, Record};

use crate::error::ReadError;
use crate::Log;

/// A cursor that yields durable records in order, waiting for new ones.
#[derive(Debug)]
pub struct Tail<L> {
    log: L,
    next: Index,
    batch_records_max: usize,
}

impl<L: Log> Tail<L> {
    /// Follow `log` starting at `from` (inclusive), at most about `batch_records_max` records
    /// per batch (batches end on transaction boundaries).
    pub fn new(log: L, from: Index, batch_records_max: usize) -> Self {
        Tail {
            log,
            next: from.max(Index::FIRST),
            batch_records_max: batch_records_max.max(1),
        }
    }

    /// The next index this tail will yield.
    pub fn position(&self) -> Index {
        self.next
    }

    /// The next batch of records; waits until at least one is durable.
    pub async fn next_batch(&mut self) -> Result<Vec<Record>, ReadError> {
        self.log.wait_for(self.next).await?;
        let batch = self.log.read(self.next, self.batch_records_max).await?;
        if let Some(last) = batch.last() {
            self.next = last.index.next();
        }
        Ok(batch)
    }
}
