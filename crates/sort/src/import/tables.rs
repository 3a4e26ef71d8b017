//! Cutting the sorted entries into RocksDB table files, one run of files per Disk View
//! partition. Disk View keys start with the partition hash (big-endian), so sorted entries
//! meet the partitions in order, each partition's entries contiguous.

use std::path::{Path, PathBuf};

use rocksdb::SstFileWriter;
use spindle_core::{Index, Partition};
use spindle_view::disk_ingest::IngestChecksum;
use spindle_view::DiskView;

use super::ImportError;

/// Largest table file written before the next one is started, in bytes (a bound on how much
/// one ingestion moves and on RocksDB's work per file, not on memory).
pub const TABLE_FILE_BYTES_MAX: u64 = 256 << 20;

/// The table files written for each partition, in partition order.
#[derive(Debug, Default)]
pub struct Tables {
    pub files: Vec<Vec<PathBuf>>,
    pub entries: Vec<u64>,
    pub bytes: u64,
    /// Each partition's replica checksum, summed over the entries as they were written.
    pub checksums: Vec<IngestChecksum>,
}

/// Which of `n` partitions a Disk View key belongs to.
fn partition_of(key: &[u8], n: u64) -> u64 {
    let hash = u32::from_be_bytes(key[..4].try_into().expect("a Disk View key has a hash"));
    // Partition i is [floor(i·2³²/n), floor((i+1)·2³²/n)): start from the estimate and
    // correct for the floor.
    let mut i = (u64::from(hash) * n) >> 32;
    while !Partition::nth(i, n).contains(hash) {
        i += 1;
    }
    i
}

/// Entries handed from the reading thread to the table writer at a time, at most...
const HANDOFF_ENTRIES: usize = 4096;
/// ... and at most about this many key and value bytes (one entry may pass it), so the
/// entries in flight take at most about `(HANDOFF_BATCHES + 2) × HANDOFF_BYTES` whatever
/// their size (4,096 entries of 1 MiB values would be 4 GiB a batch).
const HANDOFF_BYTES: usize = 4 << 20;
/// Batches of entries in flight between them.
const HANDOFF_BATCHES: usize = 8;

/// Write every sorted entry into table files under `dir`, cut per partition of `n`, for
/// views that will be at `applied`. `progress` hears the entries written so far. The sorted
/// entries are read (merged from the sort's runs) and checksummed on this thread while
/// another builds the table files, so the two overlap.
pub fn write_tables<E>(
    sorted: impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), E>>,
    n: u64,
    applied: Index,
    dir: &Path,
    mut progress: impl FnMut(u64),
) -> Result<Tables, ImportError>
where
    ImportError: From<E>,
{
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<(Vec<u8>, Vec<u8>)>>(HANDOFF_BATCHES);
        let writer = std::thread::Builder::new()
            .name("import-tables".into())
            .spawn_scoped(s, move || build_tables(rx.into_iter().flatten(), n, dir))
            .map_err(|source| ImportError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        let mut read = 0u64;
        let mut batch = Vec::with_capacity(HANDOFF_ENTRIES);
        let mut batch_bytes = 0usize;
        let mut failed = None;
        let mut checksums: Vec<IngestChecksum> =
            (0..n).map(|_| IngestChecksum::new(applied)).collect();
        for entry in sorted {
            match entry {
                Ok(kv) => {
                    checksums[partition_of(&kv.0, n) as usize].add(&kv.0, &kv.1);
                    batch_bytes += kv.0.len() + kv.1.len();
                    batch.push(kv);
                }
                Err(e) => {
                    failed = Some(ImportError::from(e));
                    break;
                }
            }
            if handoff_full(batch.len(), batch_bytes) {
                batch_bytes = 0;
                read += batch.len() as u64;
                let full = std::mem::replace(&mut batch, Vec::with_capacity(HANDOFF_ENTRIES));
                if tx.send(full).is_err() {
                    break; // the writer failed: its error is reported below
                }
                progress(read);
            }
        }
        if failed.is_none() && !batch.is_empty() {
            read += batch.len() as u64;
            let _ = tx.send(batch);
        }
        drop(tx);
        let built = writer.join().expect("the table writer does not panic");
        if let Some(e) = failed {
            return Err(e);
        }
        let mut tables = built?;
        tables.checksums = checksums;
        progress(read);
        Ok(tables)
    })
}

/// Whether a batch of `entries` holding `bytes` of keys and values goes to the writer now.
fn handoff_full(entries: usize, bytes: usize) -> bool {
    entries >= HANDOFF_ENTRIES || bytes >= HANDOFF_BYTES
}

/// Build the table files from sorted entries (the writing half of `write_tables`).
fn build_tables(
    sorted: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
    n: u64,
    dir: &Path,
) -> Result<Tables, ImportError> {
    let opts = DiskView::table_file_options();
    let mut tables = Tables {
        files: vec![Vec::new(); n as usize],
        entries: vec![0; n as usize],
        ..Tables::default()
    };
    let mut writer: Option<(u64, SstFileWriter<'_>, PathBuf)> = None;
    let mut last_key: Option<Vec<u8>> = None;
    for (key, value) in sorted {
        assert!(
            last_key.as_ref().is_none_or(|last| key > *last),
            "the sorter yielded keys out of order"
        );
        let p = partition_of(&key, n);
        let full = writer
            .as_ref()
            .is_some_and(|(_, w, _)| w.file_size() >= TABLE_FILE_BYTES_MAX);
        if full || writer.as_ref().is_some_and(|(wp, _, _)| *wp != p) {
            let (wp, w, path) = writer.take().expect("checked");
            tables.bytes += finish(w, &path)?;
            tables.files[wp as usize].push(path);
        }
        if writer.is_none() {
            let path = dir.join(format!("p{p:04}-{:06}.sst", tables.files[p as usize].len()));
            let w = SstFileWriter::create(&opts);
            w.open(&path).map_err(|e| ImportError::Table {
                path: path.clone(),
                source: e,
            })?;
            writer = Some((p, w, path));
        }
        let (_, w, path) = writer.as_mut().expect("opened above");
        w.put(&key, &value).map_err(|e| ImportError::Table {
            path: path.clone(),
            source: e,
        })?;
        tables.entries[p as usize] += 1;
        last_key = Some(key);
    }
    if let Some((wp, w, path)) = writer {
        tables.bytes += finish(w, &path)?;
        tables.files[wp as usize].push(path);
    }
    Ok(tables)
}

/// Finish a table file and sync it; returns its size.
fn finish(mut w: SstFileWriter<'_>, path: &Path) -> Result<u64, ImportError> {
    w.finish().map_err(|e| ImportError::Table {
        path: path.to_path_buf(),
        source: e,
    })?;
    let io = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    f.sync_all().map_err(io)?;
    Ok(f.metadata().map_err(io)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch goes to the table writer at 4,096 entries or 4 MiB of keys and values,
    /// whichever comes first: large values do not make a batch of 4 GiB.
    #[test]
    fn handoff_batches_are_bounded_by_bytes_as_well_as_entries() {
        assert!(!handoff_full(HANDOFF_ENTRIES - 1, HANDOFF_BYTES - 1));
        assert!(handoff_full(HANDOFF_ENTRIES, 0));
        assert!(handoff_full(4, HANDOFF_BYTES));
        // Four entries of 1 MiB values fill one.
        assert!(handoff_full(4, 4 * (1 << 20) + 4 * 20));
    }

    #[test]
    fn keys_go_to_the_partition_whose_range_holds_their_hash() {
        for n in [1u64, 3, 4, 6, 7] {
            for hash in [
                0u32,
                1,
                0x3fff_ffff,
                0x4000_0000,
                0x7fff_ffff,
                0xaaaa_aaab,
                u32::MAX,
            ] {
                let mut key = hash.to_be_bytes().to_vec();
                key.extend_from_slice(&[0, 9, 9]);
                let p = partition_of(&key, n);
                assert!(
                    p < n && Partition::nth(p, n).contains(hash),
                    "{hash} of {n}"
                );
            }
        }
    }
}
