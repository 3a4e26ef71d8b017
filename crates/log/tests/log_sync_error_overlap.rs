//! No append is acknowledged on the strength of a sync that overlapped a failed one. The
//! writer thread syncs a segment itself when it seals it, while the syncer thread may be
//! syncing the same segment for the batch before; Linux reports a write-back error to only
//! one of two such syncs, and the other returns success although the pages it waited for
//! never reached the disk. The log must then acknowledge neither.

mod common;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use common::*;
use spindle_core::{Transaction, Value};
use spindle_log::fs::{DirLock, Fs, FsFile};
use spindle_log::sim_fs::SimFs;
use spindle_log::{FileLog, LogConfig};

/// Two syncs of a segment meet here once armed: the first waits for the second; the second
/// gets the write-back error (once the first has moved on: its caller acknowledged, or it
/// waits for the second); the first returns success without anything written back.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
    first_done: AtomicBool,
    log: OnceLock<FileLog>,
}

#[derive(Debug, Default)]
struct GateState {
    armed: bool,
    first_waiting: bool,
    released: bool,
}

impl Gate {
    fn sync(&self, inner: &dyn FsFile) -> io::Result<()> {
        let mut g = self.state.lock().unwrap();
        if !g.armed {
            drop(g);
            return inner.sync_data();
        }
        if !g.first_waiting {
            g.first_waiting = true;
            self.cv.notify_all();
            while !g.released {
                g = self.cv.wait(g).unwrap();
            }
            return Ok(());
        }
        g.armed = false;
        g.released = true;
        self.cv.notify_all();
        drop(g);
        // Return the error only once the first sync's caller has acted on its success: it
        // acknowledged the batch, or it waits for this sync to end.
        let log = self.log.get().expect("set after open");
        while !self.first_done.load(Ordering::Acquire)
            && log.stats().sync_overlaps.load(Ordering::Relaxed) == 0
        {
            std::thread::yield_now();
        }
        Err(io::Error::other("simulated write-back failure (EIO)"))
    }

    fn wait_first(&self) {
        let mut g = self.state.lock().unwrap();
        while !g.first_waiting {
            g = self.cv.wait(g).unwrap();
        }
    }
}

#[derive(Debug)]
struct GatedFile {
    inner: Arc<dyn FsFile>,
    gate: Arc<Gate>,
}

impl FsFile for GatedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.gate.sync(&*self.inner)
    }
    fn sync_all(&self) -> io::Result<()> {
        self.gate.sync(&*self.inner)
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }
    fn zero_range(&self, from: u64, to: u64) -> io::Result<()> {
        self.inner.zero_range(from, to)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

#[derive(Debug)]
struct GatedFs {
    inner: SimFs,
    gate: Arc<Gate>,
}

impl GatedFs {
    fn wrap(&self, path: &Path, file: Arc<dyn FsFile>) -> Arc<dyn FsFile> {
        let segment = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains(".seg"));
        if segment {
            Arc::new(GatedFile {
                inner: file,
                gate: self.gate.clone(),
            })
        } else {
            file
        }
    }
}

impl Fs for GatedFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        self.inner.lock(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        Ok(self.wrap(path, self.inner.open(path)?))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        Ok(self.wrap(path, self.inner.open_read(path)?))
    }
    fn create(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        Ok(self.wrap(path, self.inner.create(path)?))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn is_dir(&self, dir: &Path) -> bool {
        self.inner.is_dir(dir)
    }
}

#[test]
fn no_append_is_acknowledged_when_an_overlapping_sync_failed() {
    let mut wrong = Vec::new();
    for seed in 0..8u64 {
        let sim = SimFs::new(seed);
        let gate = Arc::new(Gate::default());
        let fs = GatedFs {
            inner: sim.boot(),
            gate: gate.clone(),
        };
        // The overlap needs the batch's sync on the syncer thread while the writer seals
        // (a writer that syncs a lone batch itself cannot seal meanwhile).
        let config = LogConfig {
            writer_syncs_when_idle: false,
            ..small_segments()
        };
        let log = FileLog::open_in(Arc::new(fs), Path::new("/sim/log"), config).unwrap();
        gate.log.set(log.clone()).unwrap();
        let before = log.append_blocking(&put("a", 0)).unwrap();
        // Too big for what is left of the 4 KiB segment: its append seals the segment.
        let big = Transaction::single(
            node("big"),
            Value::json(format!("{{\"s\":\"{}\"}}", "x".repeat(4000))).unwrap(),
        );
        gate.state.lock().unwrap().armed = true;
        let (first, _second) = std::thread::scope(|s| {
            let first = s.spawn(|| {
                let r = log.append_blocking(&put("a", 1));
                gate.first_done.store(true, Ordering::Release);
                r
            });
            // The batch's sync is in flight; the next append seals the segment meanwhile.
            gate.wait_first();
            let second = s.spawn(|| log.append_blocking(&big));
            (first.join().unwrap(), second.join().unwrap())
        });
        if let Ok(commit) = first {
            sim.power_cut();
            drop(log);
            let log = FileLog::open_in(
                Arc::new(sim.boot()),
                Path::new("/sim/log"),
                small_segments(),
            )
            .unwrap();
            wrong.push(format!(
                "seed {seed}: acknowledged {commit} after an overlapping sync failed; after a \
                 power cut the log ends at {} (before it: {before})",
                log.durable_index()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
