//! Temporary files and directories to remove when the process is stopped by a signal it can
//! handle (SIGINT, SIGTERM): a sort registers its bucket directory and its temporary output
//! while they exist, and the binary's signal handler calls [`stop_and_remove`] before it
//! exits; a sort makes its output final through [`finish`], so an output either appears
//! before the stop (and is reported) or never. Without it, a sort interrupted at the terminal would leave up to its input's size
//! of bucket files behind. (SIGKILL, the OOM killer or a power cut cannot be handled: their
//! leftovers are named in docs/sort.md.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The paths to remove. Whoever stops the process takes this lock and never gives it back,
/// so that nothing is registered, and no output is made final, after the removal.
static REGISTERED: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);
/// A step run by `finish` completed: an output is in place.
static FINISHED: AtomicBool = AtomicBool::new(false);
/// `stop_and_remove` has begun: the process is about to exit.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Run `step`, which makes an output final (renames it into place), unless the process is
/// being stopped: then this blocks until the process exits, and the output never appears.
/// Once `step` has succeeded, `stop_and_remove` reports the output as written.
pub fn finish<T, E>(step: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let _held = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
    let out = step();
    if out.is_ok() {
        FINISHED.store(true, Ordering::SeqCst);
    }
    out
}

/// Whether the process is being stopped by a signal (an error a sort meets now is the
/// removal's doing, not the user's to see).
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// While this lives, `stop_and_remove` removes its path (a file, or a directory and all it
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

/// What `stop_and_remove` did.
#[derive(Debug)]
pub struct Stopped {
    /// Registered paths it could not remove.
    pub left: Vec<PathBuf>,
    /// An output had been made final (`finish`) before the stop.
    pub finished: bool,
}

/// Remove every registered path, for a process about to exit on a signal: best effort,
/// since the sort's threads may still be writing (a directory is tried again while files
/// appear in it). Holds the registry for ever, so call it once and exit: meanwhile no path
/// is registered, no output made final (`finish` blocks), and nothing else removes them.
pub fn stop_and_remove() -> Stopped {
    let held = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
    STOPPING.store(true, Ordering::SeqCst);
    let mut left = Vec::new();
    for (_, path) in held.iter() {
        if !remove(path) {
            left.push(path.clone());
        }
    }
    let finished = FINISHED.load(Ordering::SeqCst);
    // Never given back: the process exits holding it.
    std::mem::forget(held);
    Stopped { left, finished }
}

/// Remove `path` (a file, or a directory and all it holds); `true` once it is gone.
fn remove(path: &Path) -> bool {
    for _ in 0..20 {
        let r = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(e) => Err(e),
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
            Ok(_) => std::fs::remove_file(path),
        };
        match r {
            Ok(()) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    // `stop_and_remove` holds the registry for ever, which would stop every other test of
    // this binary that sorts: it is tested through the binary (crates/cli/tests/sort_cli.rs).
    // Here: what is registered, and how it is removed.
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
        // Other tests register their own paths meanwhile: only this test's are looked at.
        let mine: Vec<PathBuf> = REGISTERED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, p)| p.clone())
            .filter(|p| p.starts_with(dir.path()))
            .collect();
        assert_eq!(mine.len(), 3, "{mine:?}");
        assert!(!mine.contains(&kept));
        for path in &mine {
            assert!(remove(path), "{path:?}");
        }
        assert!(!sub.exists() && !file.exists());
        assert!(kept.exists());
        assert!(!stopping());
    }
}
