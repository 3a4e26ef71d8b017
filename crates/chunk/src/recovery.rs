//! Opening a store: rebuild the catalog from hint files where they match their volume, scan
//! the other volumes, and cut a torn tail from the last (unsealed) volume. Damage before the
//! end of the last volume, or anywhere in a sealed volume, is `Corrupt`: only the last volume
//! can hold writes that were never synced.

use std::path::Path;
use std::sync::Arc;

use spindle_fs::Fs;

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

pub(crate) fn recover(fs: &dyn Fs, dir: &Path) -> Result<Recovered> {
    remove_leftovers(fs, dir)?;
    let numbers = volume::list_volumes(fs, dir)?;
    let mut catalog = Catalog::default();
    let mut report = OpenReport::default();
    let Some(&last) = numbers.last() else {
        let (file, reader) = volume::create_volume(fs, dir, 1)?;
        catalog.add_volume(1, Some(Arc::new(reader)));
        let active = Active {
            number: 1,
            file,
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
            // After a failed sync the kernel keeps the unwritten pages cached but clean: a
            // sync will not write them, yet a read returns them. Read the last volume (the
            // only one a failed sync can leave so) from the disk. Best effort: a file system
            // that cannot drop cached pages only loses this guard.
            let _ = fs.open(&path).and_then(|f| f.drop_cache());
            repair_empty_header(fs, dir, n)?;
        }
        let len = volume::file_len(fs, &path)?;
        let (entries, hint_bytes) = match volume::read_hint(fs, dir, n, len) {
            Some(found) => {
                volume::check_volume_header(fs, &path, n)?;
                report.volumes_from_hints += 1;
                found
            }
            None => {
                report.volumes_scanned += 1;
                let entries = scan_and_cut(fs, dir, &path, n, is_last, &mut report)?;
                let hint_bytes = if is_last {
                    volume::file_len(fs, &format::hint_path(dir, n)).unwrap_or(0)
                } else {
                    // Sealed, but the hint never made it (crash right after the seal).
                    volume::write_hint(fs, dir, n, volume::file_len(fs, &path)?, &entries)?
                };
                (entries, hint_bytes)
            }
        };
        catalog.add_volume(n, Some(Arc::new(VolumeFile::open(fs, path)?)));
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
    let file = fs
        .open(&path)
        .map_err(|e| ChunkError::io("open volume for append", &path, e))?;
    let len = file
        .size()
        .map_err(|e| ChunkError::io("stat volume", &path, e))?;
    assert_eq!(
        len, catalog.volumes[&last].bytes,
        "replayed length matches the file"
    );
    // What recovery found may sit only in the page cache of a process that died before its
    // sync: records of the last volume, or the name of a volume it had just created. Make it
    // durable before serving it (a power cut must not bring back a chunk served as deleted)
    // and before appending there (acknowledged puts must not be lost with the name).
    file.sync_all()
        .map_err(|e| ChunkError::io("sync volume", &path, e))?;
    volume::sync_dir(fs, dir)?;
    let active = Active {
        number: last,
        file,
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
    fs: &dyn Fs,
    dir: &Path,
    path: &Path,
    n: u32,
    is_last: bool,
    report: &mut OpenReport,
) -> Result<Vec<HintEntry>> {
    let scan = volume::scan_volume(fs, path, n, false)?;
    if let Some(stop) = scan.stop {
        if !is_last || stop.offset < volume::hinted_synced_len(fs, dir, n) {
            return Err(ChunkError::Corrupt {
                volume: path.to_owned(),
                offset: stop.offset,
                reason: stop.reason,
            });
        }
        let f = fs
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
fn repair_empty_header(fs: &dyn Fs, dir: &Path, n: u32) -> Result<()> {
    let path = format::volume_path(dir, n);
    if volume::file_len(fs, &path)? > VOLUME_HEADER_LEN {
        return Ok(());
    }
    let bytes = fs
        .read(&path)
        .map_err(|e| ChunkError::io("read volume", &path, e))?;
    let header = format::encode_volume_header(n);
    if bytes == header {
        return Ok(());
    }
    let f = fs
        .open(&path)
        .map_err(|e| ChunkError::io("open volume", &path, e))?;
    f.set_len(0)
        .and_then(|()| f.write_all_at(&header, 0))
        .and_then(|()| f.sync_all())
        .map_err(|e| ChunkError::io("rewrite volume header", &path, e))?;
    volume::sync_dir(fs, dir)
}

/// Remove half-written hint files and hints whose volume compaction already removed.
fn remove_leftovers(fs: &dyn Fs, dir: &Path) -> Result<()> {
    let names = fs
        .list(dir)
        .map_err(|e| ChunkError::io("list directory", dir, e))?;
    let mut removed = false;
    for name in &names {
        let orphan = name
            .strip_suffix(".hint")
            .is_some_and(|stem| !names.contains(&format!("{stem}.volume")));
        if name.ends_with(".hint.tmp") || orphan {
            let path = dir.join(name);
            fs.remove(&path)
                .map_err(|e| ChunkError::io("remove", &path, e))?;
            removed = true;
        }
    }
    // Unsynced, a removal may be undone by a power cut; harmless, but the directory should
    // hold what this open decided.
    if removed {
        volume::sync_dir(fs, dir)?;
    }
    Ok(())
}
