//! Opening a store: rebuild the catalog from hint files where they match their volume, scan
//! the other volumes, and cut a torn tail from the last volume of each lane of the newest
//! generation. Damage anywhere else is `Corrupt`: only the volumes being appended to can
//! hold writes that were never synced, and those are the last of their lane.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use spindle_fs::Fs;

use crate::catalog::Catalog;
use crate::error::{ChunkError, Result};
use crate::format::{self, HintEntry, VolumeHeader};
use crate::store::OpenReport;
use crate::volume::{self, VolumeFile};
use crate::writer::{self, Active, Lanes};

pub(crate) struct Recovered {
    pub catalog: Catalog,
    pub lanes: Lanes,
    pub report: OpenReport,
}

/// The last volume of each lane of the newest generation: the only volumes that can hold
/// writes that were never synced. (An older generation's last volumes were synced and given
/// hints before any volume of a newer one was created, so damage there is corruption.)
pub(crate) fn last_of_each_lane(headers: &[VolumeHeader]) -> HashSet<u32> {
    let newest = headers.iter().map(|h| h.generation).max();
    let mut last: HashMap<u16, u32> = HashMap::new();
    for h in headers.iter().filter(|h| Some(h.generation) == newest) {
        let n = last.entry(h.lane).or_insert(h.number);
        *n = (*n).max(h.number);
    }
    last.into_values().collect()
}

/// The last volume of a lane of the newest generation.
struct LastOfLane {
    header: VolumeHeader,
    entries: Vec<HintEntry>,
    from_hint: bool,
}

/// Open the store's volumes and get `lane_count` volumes ready to append to: the last volume
/// of each lane of the newest generation if it has `lane_count` lanes, else a new generation
/// numbered above every volume (the old one's last volumes are sealed first), so that the
/// records of every chunk stay in (volume, offset) order.
///
/// A lane's last volume is appended to again only if its header's unsynced window holds the
/// write buffer (`window`) this store now keeps: otherwise it is sealed and the lane gets a
/// new volume, so that no volume ever has more unsynced than its header says.
pub(crate) fn recover(fs: &dyn Fs, dir: &Path, lane_count: u16, window: u64) -> Result<Recovered> {
    remove_leftovers(fs, dir)?;
    let mut numbers = volume::list_volumes(fs, dir)?;
    remove_unfinished_volume(fs, dir, &mut numbers)?;
    let headers = numbers
        .iter()
        .map(|&n| volume::check_volume_header(fs, &format::volume_path(dir, n), n))
        .collect::<Result<Vec<_>>>()?;
    let last_of_lane = last_of_each_lane(&headers);
    let mut catalog = Catalog::default();
    let mut report = OpenReport::default();
    let mut lasts: Vec<LastOfLane> = Vec::new();
    for h in &headers {
        let n = h.number;
        let is_last = last_of_lane.contains(&n);
        let path = format::volume_path(dir, n);
        if is_last {
            // After a failed sync the kernel keeps the unwritten pages cached but clean: a
            // sync will not write them, yet a read returns them. Read the last volume of each
            // lane (the only ones a failed sync can leave so) from the disk. Best effort: a
            // file system that cannot drop cached pages only loses this guard.
            let _ = fs.open(&path).and_then(|f| f.drop_cache());
        }
        let len = volume::file_len(fs, &path)?;
        let (entries, hint_bytes, from_hint) = match volume::read_hint(fs, dir, n, len) {
            Some((entries, hint_bytes)) => {
                report.volumes_from_hints += 1;
                (entries, hint_bytes, true)
            }
            None => {
                if let Some(reason) = volume::shorter_than_hint(fs, dir, n, len) {
                    return Err(ChunkError::Corrupt {
                        volume: path.clone(),
                        offset: len,
                        reason: format!("{reason}; nothing was changed"),
                    });
                }
                report.volumes_scanned += 1;
                let entries = scan_and_cut(fs, dir, &path, n, is_last, &mut report)?;
                let hint_bytes = if is_last {
                    volume::file_len(fs, &format::hint_path(dir, n)).unwrap_or(0)
                } else {
                    // Sealed, but the hint never made it (crash right after the seal), or
                    // the one there is damaged: said in the report, then written anew.
                    let hint_path = format::hint_path(dir, n);
                    if let Ok(raw) = fs.read(&hint_path) {
                        let why = match format::decode_hint(&raw) {
                            Err(damage) => {
                                format!("{} at offset {}", damage.reason, damage.offset)
                            }
                            Ok(_) => "it does not describe the volume as it is".to_owned(),
                        };
                        report.rewritten_hints.push((hint_path, why));
                    }
                    volume::write_hint(fs, dir, n, volume::file_len(fs, &path)?, &entries)?
                };
                (entries, hint_bytes, false)
            }
        };
        catalog.add_volume(n, Some(Arc::new(VolumeFile::open(fs, path)?)));
        for e in &entries {
            catalog.apply(n, e);
        }
        let stats = catalog.volumes.get_mut(&n).expect("just added");
        stats.sealed = true;
        stats.hint_bytes = hint_bytes;
        if is_last {
            lasts.push(LastOfLane {
                header: *h,
                entries,
                from_hint,
            });
        }
    }
    let newest = headers.iter().map(|h| h.generation).max();
    let reuse = headers
        .iter()
        .any(|h| Some(h.generation) == newest && h.lanes == lane_count);
    let mut next_volume = numbers.last().map_or(1, |n| n + 1);
    let generation = match newest {
        Some(g) if reuse => g,
        _ => next_volume,
    };
    let mut active: Vec<Option<Active>> = (0..lane_count).map(|_| None).collect();
    for last in lasts {
        let n = last.header.number;
        let path = format::volume_path(dir, n);
        let file = fs
            .open(&path)
            .map_err(|e| ChunkError::io("open volume for append", &path, e))?;
        let len = file
            .size()
            .map_err(|e| ChunkError::io("stat volume", &path, e))?;
        assert_eq!(
            len, catalog.volumes[&n].bytes,
            "replayed length matches the file"
        );
        // What recovery found may sit only in the page cache of a process that died before
        // its sync: records of a lane's last volume, or the name of a volume it had just
        // created. Make it durable before serving it (a power cut must not bring back a
        // chunk served as deleted) and before appending there (acknowledged puts must not be
        // lost with the name).
        file.sync_all()
            .map_err(|e| ChunkError::io("sync volume", &path, e))?;
        if last.header.generation == generation && last.header.unsynced_window >= window {
            catalog.volumes.get_mut(&n).expect("added above").sealed = false;
            active[usize::from(last.header.lane)] = Some(Active {
                number: n,
                file,
                len,
                entries: last.entries,
                sync_handles: None,
            });
        } else {
            // A lane of the newest generation when the lane count changed, or a volume whose
            // header allows less unsynced than the write buffer now holds: sealed from now
            // on, so it gives back the blocks reserved past its end and gets its hint.
            let _ = file.unreserve();
            if !last.from_hint {
                let hint_bytes = volume::write_hint(fs, dir, n, len, &last.entries)?;
                catalog.volumes.get_mut(&n).expect("added above").hint_bytes = hint_bytes;
            }
        }
    }
    volume::sync_dir(fs, dir)?;
    // Lanes without a volume: a new generation, or one whose creation a crash interrupted.
    let mut lanes = Vec::with_capacity(active.len());
    for (lane, a) in active.into_iter().enumerate() {
        let a = match a {
            Some(a) => a,
            None => {
                let header = VolumeHeader {
                    number: next_volume,
                    generation,
                    lane: u16::try_from(lane).expect("lanes are u16"),
                    lanes: lane_count,
                    unsynced_window: window,
                };
                let (a, reader) = writer::start_volume(fs, dir, header)?;
                catalog.add_volume(header.number, Some(reader));
                next_volume += 1;
                a
            }
        };
        lanes.push(a);
    }
    remove_empty_sealed_volumes(fs, dir, &mut catalog)?;
    Ok(Recovered {
        catalog,
        lanes: Lanes {
            generation,
            active: lanes,
            next_volume,
        },
        report,
    })
}

/// Remove every sealed volume that holds no record: a lane that got none before its
/// generation ended (compaction never removes a volume without records). Only once the
/// volumes to append to exist: removing the last volumes of the newest generation first
/// could make an older generation the newest, and a sealed volume of it writable again.
fn remove_empty_sealed_volumes(fs: &dyn Fs, dir: &Path, catalog: &mut Catalog) -> Result<()> {
    let empty: Vec<u32> = catalog
        .volumes
        .iter()
        .filter(|(_, s)| s.sealed && s.records == 0)
        .map(|(&n, _)| n)
        .collect();
    for &n in &empty {
        catalog.remove_volume(n, &[]);
        let hint = format::hint_path(dir, n);
        if fs.open_read(&hint).is_ok() {
            fs.remove(&hint)
                .map_err(|e| ChunkError::io("remove hint", &hint, e))?;
        }
        let path = format::volume_path(dir, n);
        fs.remove(&path)
            .map_err(|e| ChunkError::io("remove empty volume", &path, e))?;
    }
    if !empty.is_empty() {
        volume::sync_dir(fs, dir)?;
    }
    Ok(())
}

/// Scan a volume without a usable hint. A bad record in the last volume of a lane, past what
/// a stale hint says was synced and within the volume's unsynced window of the end of what
/// was written, is a torn tail and is cut; anywhere else it is corruption
/// (`volume::damage_not_torn`).
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
        if let Some(reason) = volume::damage_not_torn(fs, dir, path, n, is_last, &stop)? {
            return Err(ChunkError::Corrupt {
                volume: path.to_owned(),
                offset: stop.offset,
                reason: format!("{reason}; nothing was cut"),
            });
        }
        let f = fs
            .open(path)
            .map_err(|e| ChunkError::io("open volume", path, e))?;
        f.set_len(scan.valid_len)
            .and_then(|()| f.sync_all())
            .map_err(|e| ChunkError::io("cut torn tail of", path, e))?;
        report.torn_tails.push((
            path.to_owned(),
            scan.valid_len,
            scan.file_len - scan.valid_len,
        ));
    }
    Ok(scan.entries)
}

/// The newest volume, if no more than a header long and its header is not whole (magic and
/// checksum), was being created when the process stopped (a volume gets records only once its header and
/// name are synced): remove it, and its number is given again.
fn remove_unfinished_volume(fs: &dyn Fs, dir: &Path, numbers: &mut Vec<u32>) -> Result<()> {
    let Some(&n) = numbers.last() else {
        return Ok(());
    };
    let path = format::volume_path(dir, n);
    if !volume::creation_cut_short(fs, &path)? {
        return Ok(());
    }
    fs.remove(&path)
        .map_err(|e| ChunkError::io("remove unfinished volume", &path, e))?;
    let _ = fs.remove(&format::hint_path(dir, n));
    volume::sync_dir(fs, dir)?;
    numbers.pop();
    Ok(())
}

/// Refuse a store directory that holds a file the store does not write: a volume whose
/// name was damaged would otherwise be left out unseen, its chunks lost (and, at open, its
/// hint removed as an orphan).
pub(crate) fn check_names(dir: &Path, names: &[String]) -> Result<()> {
    for name in names {
        let stem = name
            .strip_suffix(".hint.tmp")
            .or_else(|| name.strip_suffix(".hint"))
            .or_else(|| name.strip_suffix(".volume"));
        let numbered = stem.and_then(format::parse_volume_number).is_some();
        if !numbered && name != format::MARKER_FILE && !spindle_fs::is_left_by_the_file_system(name)
        {
            return Err(ChunkError::Corrupt {
                volume: dir.join(name),
                offset: 0,
                reason: format!(
                    "{name:?} is not a file the chunk store writes (a volume is named by 8 \
                     digits and \".volume\"); a volume with a damaged name would be left out, \
                     so the store is refused: rename the file if it is a damaged volume (its \
                     header holds its number), or move it out of the directory"
                ),
            });
        }
    }
    Ok(())
}

/// Remove half-written hint files and hints whose volume compaction already removed (after
/// refusing a directory with a file the store does not write).
fn remove_leftovers(fs: &dyn Fs, dir: &Path) -> Result<()> {
    let names = fs
        .list(dir)
        .map_err(|e| ChunkError::io("list directory", dir, e))?;
    check_names(dir, &names)?;
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
