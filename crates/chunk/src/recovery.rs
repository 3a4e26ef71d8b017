//! Opening a store: rebuild the catalog from hint files where they match their volume, scan
//! the other volumes, and cut a torn tail from the last (unsealed) volume. Damage before the
//! end of the last volume, or anywhere in a sealed volume, is `Corrupt`: only the last volume
//! can hold writes that were never synced.

use std::fs::{self, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use crate::catalog::Catalog;
use crate::error::{ChunkError, Result};
use crate::format::{self, HintEntry, VOLUME_HEADER_LEN};
use crate::store::OpenReport;
use crate::volume::{self, VolumeFile};
use crate::writer::Active;

pub(crate) struct Recovered {
    pub catalog: Catalog,
    pub active: Active,
    pub report: OpenReport,
}

pub(crate) fn recover(dir: &Path) -> Result<Recovered> {
    remove_leftovers(dir)?;
    let numbers = volume::list_volumes(dir)?;
    let mut catalog = Catalog::default();
    let mut report = OpenReport::default();
    let Some(&last) = numbers.last() else {
        let (file, reader) = volume::create_volume(dir, 1)?;
        catalog.add_volume(1, Some(Arc::new(reader)));
        let active = Active {
            number: 1,
            file: Arc::new(file),
            len: VOLUME_HEADER_LEN,
            entries: Vec::new(),
        };
        return Ok(Recovered {
            catalog,
            active,
            report,
        });
    };
    let mut last_entries = Vec::new();
    for &n in &numbers {
        let is_last = n == last;
        let path = format::volume_path(dir, n);
        if is_last {
            repair_empty_header(dir, n)?;
        }
        let len = file_len(&path)?;
        let (entries, hint_bytes) = match volume::read_hint(dir, n, len) {
            Some(found) => {
                volume::check_volume_header(&path, n)?;
                report.volumes_from_hints += 1;
                found
            }
            None => {
                report.volumes_scanned += 1;
                let entries = scan_and_cut(dir, &path, n, is_last, &mut report)?;
                let hint_bytes = if is_last {
                    fs::metadata(format::hint_path(dir, n)).map_or(0, |m| m.len())
                } else {
                    // Sealed, but the hint never made it (crash right after the seal).
                    volume::write_hint(dir, n, file_len(&path)?, &entries)?
                };
                (entries, hint_bytes)
            }
        };
        catalog.add_volume(n, Some(Arc::new(VolumeFile::open(path)?)));
        for e in &entries {
            catalog.apply(n, e);
        }
        let stats = catalog.volumes.get_mut(&n).expect("just added");
        stats.sealed = !is_last;
        stats.hint_bytes = hint_bytes;
        if is_last {
            last_entries = entries;
        }
    }
    let path = format::volume_path(dir, last);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| ChunkError::io("open volume for append", &path, e))?;
    let len = file
        .seek(SeekFrom::End(0))
        .map_err(|e| ChunkError::io("seek volume", &path, e))?;
    assert_eq!(
        len, catalog.volumes[&last].bytes,
        "replayed length matches the file"
    );
    let active = Active {
        number: last,
        file: Arc::new(file),
        len,
        entries: last_entries,
    };
    Ok(Recovered {
        catalog,
        active,
        report,
    })
}

/// Scan a volume without a usable hint. A bad record in the last volume, past what a stale
/// hint says was synced, is a torn tail and is cut; anywhere else it is corruption.
fn scan_and_cut(
    dir: &Path,
    path: &Path,
    n: u32,
    is_last: bool,
    report: &mut OpenReport,
) -> Result<Vec<HintEntry>> {
    let scan = volume::scan_volume(path, n, false)?;
    if let Some(stop) = scan.stop {
        if !is_last || stop.offset < volume::hinted_synced_len(dir, n) {
            return Err(ChunkError::Corrupt {
                volume: path.to_owned(),
                offset: stop.offset,
                reason: stop.reason,
            });
        }
        let f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| ChunkError::io("open volume", path, e))?;
        f.set_len(scan.valid_len)
            .and_then(|()| f.sync_all())
            .map_err(|e| ChunkError::io("cut torn tail of", path, e))?;
        report.torn_tail = Some((
            path.to_owned(),
            scan.valid_len,
            scan.file_len - scan.valid_len,
        ));
    }
    Ok(scan.entries)
}

/// A last volume that holds no record and whose header is incomplete was being created when
/// the process stopped: write its header again.
fn repair_empty_header(dir: &Path, n: u32) -> Result<()> {
    let path = format::volume_path(dir, n);
    if file_len(&path)? > VOLUME_HEADER_LEN {
        return Ok(());
    }
    let bytes = fs::read(&path).map_err(|e| ChunkError::io("read volume", &path, e))?;
    let header = format::encode_volume_header(n);
    if bytes == header {
        return Ok(());
    }
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| ChunkError::io("open volume", &path, e))?;
    f.write_all(&header)
        .and_then(|()| f.sync_all())
        .map_err(|e| ChunkError::io("rewrite volume header", &path, e))?;
    volume::sync_dir(dir)
}

fn file_len(path: &Path) -> Result<u64> {
    fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| ChunkError::io("stat volume", path, e))
}

/// Remove half-written hint files and hints whose volume compaction already removed.
fn remove_leftovers(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(|e| ChunkError::io("list directory", dir, e))? {
        let entry = entry.map_err(|e| ChunkError::io("list directory", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let orphan = name
            .strip_suffix(".hint")
            .is_some_and(|stem| !dir.join(format!("{stem}.volume")).exists());
        if name.ends_with(".hint.tmp") || orphan {
            fs::remove_file(entry.path()).map_err(|e| ChunkError::io("remove", entry.path(), e))?;
        }
    }
    Ok(())
}
