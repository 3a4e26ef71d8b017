//! Offline verification (`spindle inspect`): read every volume record by record, check every
//! checksum and every chunk's BLAKE3, compare hint files with what the volumes hold, and
//! count live and garbage bytes by replaying the records as `open` would.

use std::path::{Path, PathBuf};

use spindle_fs::Fs;

use crate::catalog::Catalog;
use crate::error::{ChunkError, Result};
use crate::format::{self, HintEntry, RecordKind, VOLUME_HEADER_LEN};
use crate::volume::{self, VolumeFile};

/// What verification found in one volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeStatus {
    /// Every record is whole and matches its checksums and id.
    Clean,
    /// The last volume ends in a partial or unsynced write; open will cut it (not an error).
    TornTail {
        /// Where the cut will be.
        offset: u64,
        /// Bytes after it.
        bytes: u64,
    },
    /// Damaged bytes where only synced data can be.
    Corrupt {
        /// Offset of the first bad record.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
}

/// How a volume's hint file compares with the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintStatus {
    /// The hint lists exactly the volume's records.
    Matches,
    /// No hint (normal for a volume that was never sealed or closed).
    Missing,
    /// The hint describes a shorter or longer volume; open scans instead (normal for the
    /// last volume after a crash).
    Stale,
    /// The hint fails its checksums (`VolumeReport::hint_damage` says where). Hints are
    /// written to a temporary name, synced and renamed, so a crash never leaves one half
    /// written: this is damage to synced bytes. Open scans the volume instead.
    Unreadable,
    /// The hint is well formed, matches the volume's length, and lists other records.
    Mismatch,
}

/// Verification of one volume.
#[derive(Debug, Clone)]
pub struct VolumeReport {
    /// Volume number.
    pub volume: u32,
    /// The volume file.
    pub path: PathBuf,
    /// Bytes of the file.
    pub bytes: u64,
    /// Put records that verified.
    pub puts: u64,
    /// Tombstone records that verified.
    pub tombstones: u64,
    /// Chunks whose live copy is in this volume.
    pub live_chunks: u64,
    /// Bytes of their records.
    pub live_bytes: u64,
    /// Bytes of records no live chunk needs (and any torn or unreadable tail).
    pub garbage_bytes: u64,
    /// The hint file's state.
    pub hint: HintStatus,
    /// Where an unreadable hint file is damaged: (offset in the hint file, what was wrong).
    pub hint_damage: Option<(u64, String)>,
    /// The volume's state.
    pub status: VolumeStatus,
    /// Every damaged record found: (offset, what was wrong). Past the first one, records are
    /// found through the volume's hint file, when it has one that matches.
    pub damaged: Vec<(u64, String)>,
}

/// Verification of a whole store.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// The store directory.
    pub dir: PathBuf,
    /// Per volume, ascending.
    pub volumes: Vec<VolumeReport>,
    /// Live chunks.
    pub chunks: u64,
    /// Bytes of live chunk records.
    pub live_bytes: u64,
    /// Bytes of volume records no live chunk needs.
    pub garbage_bytes: u64,
}

impl VerifyReport {
    /// Whether nothing is corrupt (a torn tail and stale hints are not errors).
    pub fn is_ok(&self) -> bool {
        self.volumes.iter().all(|v| {
            !matches!(v.status, VolumeStatus::Corrupt { .. })
                && !matches!(v.hint, HintStatus::Mismatch | HintStatus::Unreadable)
        })
    }
}

/// Verify the store in `dir` without opening it for writing.
pub fn verify_store(dir: &Path) -> Result<VerifyReport> {
    verify_store_in(&spindle_fs::StdFs, dir)
}

/// `verify_store` on the file system `fs`.
pub fn verify_store_in(fs: &dyn Fs, dir: &Path) -> Result<VerifyReport> {
    if fs.open_read(&dir.join(format::MARKER_FILE)).is_err() {
        return Err(ChunkError::Format {
            path: dir.to_owned(),
            reason: format!("no {} file", format::MARKER_FILE),
        });
    }
    let names = fs
        .list(dir)
        .map_err(|e| ChunkError::io("list directory", dir, e))?;
    crate::recovery::check_names(dir, &names)?;
    let numbers = volume::list_volumes(fs, dir)?;
    // The last volume of each lane of the newest generation may end in a torn write, as open
    // decides. A volume whose header does not decode is reported as corrupt by its scan,
    // unless it is the newest and no longer than a header: then its creation was cut short
    // (open removes it).
    let headers: Vec<_> = numbers
        .iter()
        .map(|&n| volume::check_volume_header(fs, &format::volume_path(dir, n), n).ok())
        .collect();
    let last_of_lane =
        crate::recovery::last_of_each_lane(&headers.iter().flatten().copied().collect::<Vec<_>>());
    let mut catalog = Catalog::default();
    let mut volumes = Vec::new();
    for (&n, header) in numbers.iter().zip(&headers) {
        let path = format::volume_path(dir, n);
        let newest = Some(&n) == numbers.last();
        let is_last = match header {
            Some(_) => last_of_lane.contains(&n),
            None => newest,
        };
        let bytes = volume::file_len(fs, &path)?;
        catalog.add_volume(n, None);
        let mut report = VolumeReport {
            volume: n,
            path: path.clone(),
            bytes,
            puts: 0,
            tombstones: 0,
            live_chunks: 0,
            live_bytes: 0,
            garbage_bytes: 0,
            hint: HintStatus::Missing,
            hint_damage: None,
            status: VolumeStatus::Clean,
            damaged: Vec::new(),
        };
        if header.is_none() && newest && volume::creation_cut_short(fs, &path)? {
            // Open removes it: a volume's creation cut short holds no record.
            report.status = VolumeStatus::TornTail { offset: 0, bytes };
            volumes.push(report);
            continue;
        }
        let scan = match volume::scan_volume(fs, &path, n, true) {
            Ok(scan) => scan,
            Err(ChunkError::Corrupt { offset, reason, .. }) => {
                report.status = VolumeStatus::Corrupt { offset, reason };
                volumes.push(report);
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut entries = scan.entries.clone();
        if let Some(stop) = &scan.stop {
            let damage = volume::damage_not_torn(fs, dir, &path, n, is_last, stop)?;
            report.status = if damage.is_none() {
                VolumeStatus::TornTail {
                    offset: stop.offset,
                    bytes: scan.file_len - stop.offset,
                }
            } else {
                report.damaged.push((stop.offset, stop.reason.clone()));
                if let Some(rest) = records_past_damage(fs, dir, n, bytes, &scan) {
                    let file = VolumeFile::open(fs, path.clone())?;
                    for e in rest.iter().skip(1) {
                        if let Err(reason) = check_record(&file, e) {
                            report.damaged.push((e.offset, reason));
                        }
                    }
                    entries.extend(rest);
                }
                VolumeStatus::Corrupt {
                    offset: stop.offset,
                    reason: damage.unwrap_or_else(|| stop.reason.clone()),
                }
            };
        }
        for e in &entries {
            match e.kind {
                RecordKind::Put => report.puts += 1,
                RecordKind::Tombstone => report.tombstones += 1,
            }
            catalog.apply(n, e);
        }
        (report.hint, report.hint_damage) = hint_status(fs, dir, n, bytes, &scan);
        if !matches!(report.status, VolumeStatus::Corrupt { .. }) {
            if let Some(reason) = volume::shorter_than_hint(fs, dir, n, bytes) {
                report.status = VolumeStatus::Corrupt {
                    offset: bytes,
                    reason,
                };
            }
        }
        volumes.push(report);
    }
    for v in &mut volumes {
        let s = catalog.volumes[&v.volume];
        v.live_chunks = s.live_chunks;
        v.live_bytes = s.live_bytes;
        v.garbage_bytes = v
            .bytes
            .saturating_sub(VOLUME_HEADER_LEN)
            .saturating_sub(s.live_bytes);
    }
    Ok(VerifyReport {
        dir: dir.to_owned(),
        chunks: catalog.index.len() as u64,
        live_bytes: volumes.iter().map(|v| v.live_bytes).sum(),
        garbage_bytes: volumes.iter().map(|v| v.garbage_bytes).sum(),
        volumes,
    })
}

fn hint_status(
    fs: &dyn Fs,
    dir: &Path,
    n: u32,
    bytes: u64,
    scan: &volume::Scan,
) -> (HintStatus, Option<(u64, String)>) {
    let Ok(raw) = fs.read(&format::hint_path(dir, n)) else {
        return (HintStatus::Missing, None);
    };
    let status = match format::decode_hint(&raw) {
        Err(damage) => return (HintStatus::Unreadable, Some((damage.offset, damage.reason))),
        Ok(h) if h.volume != n => HintStatus::Mismatch,
        Ok(h) if h.volume_len != bytes => HintStatus::Stale,
        Ok(h) if scan.stop.is_none() && h.entries == scan.entries => HintStatus::Matches,
        // Where the volume is damaged, the hint can only be checked up to the damage.
        Ok(h) if scan.stop.is_some() && h.entries.starts_with(&scan.entries) => HintStatus::Matches,
        Ok(_) => HintStatus::Mismatch,
    };
    (status, None)
}

/// The records after the first damaged one, from a hint file that matches the volume's length
/// and agrees with every record before the damage.
fn records_past_damage(
    fs: &dyn Fs,
    dir: &Path,
    n: u32,
    bytes: u64,
    scan: &volume::Scan,
) -> Option<Vec<HintEntry>> {
    let raw = fs.read(&format::hint_path(dir, n)).ok()?;
    let hint = format::decode_hint(&raw).ok()?;
    let usable = hint.volume == n
        && hint.volume_len == bytes
        && hint.entries.len() > scan.entries.len()
        && hint.entries.starts_with(&scan.entries);
    // Starting with the damaged record itself, already reported.
    usable.then(|| hint.entries[scan.entries.len()..].to_vec())
}

/// Check one record found through a hint: header, and BLAKE3 of a put's bytes.
fn check_record(file: &VolumeFile, e: &HintEntry) -> Result<(), String> {
    match e.kind {
        RecordKind::Put => file.read_chunk(&e.id, e.offset, e.len, true).map(drop),
        RecordKind::Tombstone => file.read_tombstone(&e.id, e.offset),
    }
    .map_err(|err| match err {
        ChunkError::Corrupt { reason, .. } => reason,
        other => other.to_string(),
    })
}
