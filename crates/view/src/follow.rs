//! Feeding a view from the log: catch up to the durable index, or follow it until told to
//! stop. Works for every view (`Applier`) over any `Log` implementation.

use spindle_core::{Index, Record};
use spindle_log::{Log, ReadError, Tail};
use tokio::sync::watch;

use crate::error::ViewError;

/// A view derived from the log by applying its records in order.
pub trait Applier: Sync {
    /// The index the view's state reflects.
    fn applied_index(&self) -> Index;
    /// Apply records that continue the applied prefix and end on a commit record; records
    /// at or below the applied index are skipped.
    fn apply(&self, records: &[Record]) -> Result<Index, ViewError>;
}

/// The records past `applied`: checked to continue it without a gap and to end on a commit
/// record. Empty when every record is at or below `applied` (a harmless replayed overlap).
pub(crate) fn fresh_suffix(applied: Index, records: &[Record]) -> Result<&[Record], ViewError> {
    let Some(start) = records.iter().position(|r| r.index > applied) else {
        return Ok(&[]);
    };
    let fresh = &records[start..];
    if fresh[0].index != applied.next() {
        return Err(ViewError::Gap {
            applied,
            got: fresh[0].index,
        });
    }
    let last = fresh.last().expect("non-empty");
    if !last.commit {
        return Err(ViewError::PartialTransaction { last: last.index });
    }
    Ok(fresh)
}

/// Records asked of the log per read while feeding a view (reads end on a transaction
/// boundary, so a batch may be a little larger).
pub const TAIL_BATCH_RECORDS_MAX: usize = 4096;

fn read_error(next: Index, e: ReadError) -> ViewError {
    match e {
        ReadError::Truncated { first } => ViewError::LogTruncated { next, first },
        other => ViewError::Log(other),
    }
}

/// Apply every record that is durable in `log` now. Returns the applied index.
pub async fn catch_up<V: Applier + ?Sized, L: Log>(view: &V, log: &L) -> Result<Index, ViewError> {
    loop {
        let applied = view.applied_index();
        if applied >= log.durable_index() {
            return Ok(applied);
        }
        let next = applied.next();
        let records = log
            .read(next, TAIL_BATCH_RECORDS_MAX)
            .await
            .map_err(|e| read_error(next, e))?;
        if records.is_empty() {
            return Ok(applied);
        }
        view.apply(&records)?;
    }
}

/// Follow `log` into `view` from its applied index until `stop` holds `true` (or its sender
/// is dropped). Returns the applied index when it stops.
pub async fn follow<V: Applier + ?Sized, L: Log>(
    view: &V,
    log: L,
    mut stop: watch::Receiver<bool>,
) -> Result<Index, ViewError> {
    let mut tail = Tail::new(log, view.applied_index().next(), TAIL_BATCH_RECORDS_MAX);
    loop {
        if *stop.borrow_and_update() {
            return Ok(view.applied_index());
        }
        let next = tail.position();
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() {
                    return Ok(view.applied_index());
                }
            }
            batch = tail.next_batch() => {
                let records = batch.map_err(|e| read_error(next, e))?;
                view.apply(&records)?;
            }
        }
    }
}
