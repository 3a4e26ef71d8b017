//! A small tmpfs mounted for one test, so that "the disk is full" is a real ENOSPC from a
//! real file system. Mounting needs root: without it (or if mount fails) the test prints why
//! and skips. The guard unmounts on drop, also when the test panics.

use std::path::Path;
use std::process::Command;

/// A mounted tmpfs; unmounted (lazily, if something still holds it) when dropped.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mount a tmpfs of `size_bytes` on a fresh temporary directory, or say why not.
    pub fn mount(size_bytes: u64) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size_bytes},mode=0700"))
            .arg("tmpfs")
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed (needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Self { dir })
    }

    /// `mount`, or `None` after printing why the calling test is skipped.
    #[allow(dead_code)]
    pub fn mount_or_skip(size_bytes: u64) -> Option<Self> {
        Self::mount(size_bytes)
            .inspect_err(|why| println!("skipped: {why}"))
            .ok()
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fill the file system with a file at `path` until a write fails with ENOSPC; returns
    /// its size. Deleting the file gives the space back.
    #[allow(dead_code)]
    pub fn fill(path: &Path) -> u64 {
        use std::io::Write;
        let mut f = std::fs::File::create(path).unwrap();
        let block = vec![0xA5u8; 64 << 10];
        let mut written = 0u64;
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        written
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}
