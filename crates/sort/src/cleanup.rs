//! Temporary files and directories to remove when the process is stopped by a signal it can
//! handle (SIGINT, SIGTERM): a sort registers its bucket directory and its temporary output
//! while they exist, and the binary's signal handler calls [`remove_registered`] before it
//! exits. Without it, a sort interrupted at the terminal would leave up to its input's size
//! of bucket files behind. (SIGKILL, the OOM killer or a power cut cannot be handled: their
//! leftovers are named in docs/sort.md.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

static REGISTERED: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// While this lives, `remove_registered` removes its path (a file, or a directory and all it
/// holds). Dropping it only forgets the path: whoever made the path removes it as usual.
#[derive(Debug)]
pub struct Registered(u64);

/// Remove `path` if the process is stopped by a signal while the returned value lives.
pub fn register(path: &Path) -> Registered {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    REGISTERED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((id, path.to_path_buf()));
    Registered(id)
}

impl Drop for Registered {
    fn drop(&mut self) {
        REGISTERED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(id, _)| *id != self.0);
    }
}

/// Remove every registered path (best effort: the sort's threads may still be writing, so a
/// directory is tried again while files appear in it). Returns the paths it could not
/// remove. Called once, by a signal handler, just before the process exits: the paths stay
/// registered, so nothing else removes them meanwhile.
pub fn remove_registered() -> Vec<PathBuf> {
    let paths: Vec<PathBuf> = REGISTERED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(_, p)| p.clone())
        .collect();
    let mut left = Vec::new();
    for path in paths {
        let mut removed = false;
        for _ in 0..20 {
            let r = match std::fs::symlink_metadata(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
                Ok(_) => std::fs::remove_file(&path),
            };
            match r {
                Ok(()) => {
                    removed = true;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    removed = true;
                    break;
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
        if !removed {
            left.push(path);
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_paths_are_removed_and_dropped_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("buckets");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("bucket-000000"), b"x").unwrap();
        let file = dir.path().join(".out.tmp");
        std::fs::write(&file, b"y").unwrap();
        let kept = dir.path().join("kept");
        std::fs::write(&kept, b"z").unwrap();
        let _a = register(&sub);
        let _b = register(&file);
        drop(register(&kept));
        let _gone = register(&dir.path().join("never-made"));
        assert!(remove_registered().is_empty());
        assert!(!sub.exists() && !file.exists());
        assert!(kept.exists());
    }
}
