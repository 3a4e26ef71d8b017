//! A put is never acknowledged on the strength of a sync that overlapped a failed one.
//! Linux reports a write-back error to only one `fdatasync` per open file (errseq): with two
//! syncs of the active volume in flight through one handle, the disk failing to write the
//! first batch's pages makes one sync return EIO and the other return success, although the
//! pages it waited for never reached the disk. Through two handles, each sync is told. The
//! gate below does exactly that to two overlapping syncs; the store must acknowledge neither
//! batch, so nothing acknowledged can be missing after a power cut.

use std::io;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};

use spindle_chunk::{ChunkId, ChunkStore, Options};
use spindle_fs::{DirLock, Fs, FsFile, SimFs};

const DIR: &str = "/sim/chunks";

/// Two syncs of a volume meet here once armed: the first waits for the second; the second
/// gets the write-back error; the first then returns without anything written back: success
/// if both went through one handle (the error was reported to the other sync), the error too
/// if not.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    armed: bool,
    /// The handle of the first sync, while it waits.
    first_waiting: Option<usize>,
    /// Whether the second sync went through the first one's handle.
    released: Option<bool>,
}

impl Gate {
    fn sync(&self, inner: &dyn FsFile, handle: usize) -> io::Result<()> {
        let mut g = self.state.lock().unwrap();
        if !g.armed {
            drop(g);
            return inner.sync_data();
        }
        let eio = || Err(io::Error::other("simulated write-back failure (EIO)"));
        let Some(first) = g.first_waiting else {
            g.first_waiting = Some(handle);
            self.cv.notify_all();
            loop {
                match g.released {
                    // The error went to the other sync, through this handle: this one sees none.
                    Some(true) => return Ok(()),
                    Some(false) => return eio(),
                    None => g = self.cv.wait(g).unwrap(),
                }
            }
        };
        g.armed = false;
        g.released = Some(first == handle);
        self.cv.notify_all();
        eio()
    }

    fn wait_first(&self) {
        let mut g = self.state.lock().unwrap();
        while g.first_waiting.is_none() {
            g = self.cv.wait(g).unwrap();
        }
    }
}

#[derive(Debug)]
struct GatedFs {
    inner: SimFs,
    gate: Arc<Gate>,
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
        self.gate.sync(&*self.inner, self as *const Self as usize)
    }
    fn sync_all(&self) -> io::Result<()> {
        self.gate.sync(&*self.inner, self as *const Self as usize)
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

impl GatedFs {
    fn wrap(&self, path: &Path, file: Arc<dyn FsFile>) -> Arc<dyn FsFile> {
        if path.extension().is_some_and(|e| e == "volume") {
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

fn options() -> Options {
    Options {
        syncs_in_flight_max: 2,
        compact_in_background: false,
        chunk_bytes_max: 4096,
        write_buffer_bytes_max: 64 << 10,
        ..Options::default()
    }
}

fn bytes(seed: u64) -> Vec<u8> {
    (0..1000u64).map(|i| (i * 7 + seed * 13) as u8).collect()
}

#[test]
fn no_put_is_acknowledged_when_an_overlapping_sync_failed() {
    let mut acknowledged_then_lost = Vec::new();
    let mut acknowledged = 0;
    for seed in 0..12u64 {
        let sim = SimFs::new(seed);
        let gate = Arc::new(Gate::default());
        let fs = GatedFs {
            inner: sim.boot(),
            gate: gate.clone(),
        };
        let store = ChunkStore::open_in(Arc::new(fs), DIR, options()).unwrap();
        let (a, b) = (bytes(seed), bytes(seed + 100));
        gate.state.lock().unwrap().armed = true;
        let (put_a, put_b) = std::thread::scope(|s| {
            let first = s.spawn(|| store.put(&a));
            // The second put starts once the first one's sync is in flight.
            gate.wait_first();
            let second = s.spawn(|| store.put(&b));
            (first.join().unwrap(), second.join().unwrap())
        });
        assert!(
            put_b.is_err(),
            "seed {seed}: the failed sync's put was acknowledged"
        );
        let acked = put_a.is_ok();
        acknowledged += u64::from(acked);
        // The power fails while the store runs.
        sim.power_cut();
        drop(store);
        let store = ChunkStore::open_in(Arc::new(sim.boot()), DIR, options()).unwrap();
        if acked && store.get(&ChunkId::of(&a)).unwrap().is_none() {
            acknowledged_then_lost.push(seed);
        }
    }
    assert!(
        acknowledged_then_lost.is_empty(),
        "{acknowledged} of 12 puts acknowledged by a sync that overlapped a failed one; lost \
         after a power cut at seeds {acknowledged_then_lost:?}"
    );
}
