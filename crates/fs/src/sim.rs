//! A simulated, in-memory file system that can lose power, for crash tests of anything
//! written against the `Fs` seam (the log and the chunk store).
//!
//! Fault model: every write, size change, creation, rename and removal is volatile until
//! synced: file contents by `sync_data`/`sync_all` of that file, names by `sync_dir` of their
//! directory. On a power cut (`power_cut`, or armed to fire at the n-th mutating call) each
//! unsynced file operation is, independently and at random from the seed, kept whole, dropped,
//! or (writes) torn at a byte, so a later write can survive an earlier one, as with page-cache
//! writeback; unsynced directory operations survive as a random prefix of their order, as with
//! a metadata journal. After a cut every handle opened before it fails with `EIO`, the
//! directory lock is released, and the state is what a reboot would find. A sync can also be
//! made to fail as a failed write-back does on Linux (`fail_next_sync`): the data is lost to
//! the disk but stays readable from the cache until `drop_cache` or a cut.
//!
//! Seeded and single-locked: the choices at a cut depend only on the seed and on the sequence
//! of calls made (which threads may interleave differently from run to run).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{DirLock, Fs, FsFile};

/// The simulated file system. Cheap to clone; clones share the disk. A handle from `boot`
/// belongs to one power-on: after a cut every call through it fails, like a process that
/// died with the machine.
#[derive(Clone, Debug)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
    /// The power-on this handle belongs to; `None`: whichever is current.
    boot: Option<u64>,
}

#[derive(Debug)]
enum FileOp {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<FileOp>,
    /// Write-backs of this file that failed, and whether a sync has reported the latest.
    wb_errors: u64,
    wb_error_seen: bool,
}

#[derive(Clone, Debug)]
enum DirOp {
    Link(PathBuf, u64),
    Unlink(PathBuf),
    Rename(PathBuf, PathBuf),
}

/// What a power cut did, for test reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    pub writes_kept: u64,
    pub writes_dropped: u64,
    pub writes_torn: u64,
    pub dir_ops_kept: u64,
    pub dir_ops_dropped: u64,
}

#[derive(Debug)]
struct State {
    rng: u64,
    generation: u64,
    next_inode: u64,
    inodes: HashMap<u64, Inode>,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    /// Unsynced directory operations, in order, with their directory.
    dir_ops: Vec<(PathBuf, DirOp)>,
    dirs: HashSet<PathBuf>,
    locks: HashSet<PathBuf>,
    /// Mutating calls made so far, and the call at which an armed cut fires.
    mutations: u64,
    cut_at: Option<u64>,
    /// Whether the armed event is a process crash (data stays) rather than a power cut.
    crash_only: bool,
    /// The next file sync fails: its write-back is lost, the pages stay cached and clean.
    fail_next_sync: bool,
    /// Longest pause, in microseconds, a file sync takes before and after it reaches the
    /// disk (chosen at random each time), so that syncs of several threads reach the disk
    /// and return in orders other than the one they were called in.
    sync_jitter_us: u64,
    cuts: u64,
    last_cut: CutReport,
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("simulated power loss: {what}"))
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl State {
    /// splitmix64.
    fn next_u64(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Count a mutating call; fire an armed cut instead of performing it.
    fn mutate(&mut self, generation: u64) -> io::Result<()> {
        if generation != self.generation {
            return Err(eio("handle from before the cut"));
        }
        self.mutations += 1;
        if self.cut_at.is_some_and(|at| self.mutations >= at) {
            if self.crash_only {
                self.crash();
                return Err(eio("process crashed"));
            }
            self.cut();
            return Err(eio("power cut"));
        }
        Ok(())
    }

    fn check(&self, generation: u64) -> io::Result<()> {
        if generation == self.generation {
            Ok(())
        } else {
            Err(eio("handle from before the cut"))
        }
    }

    fn cut(&mut self) {
        let mut report = CutReport::default();
        let mut ids: Vec<u64> = self.inodes.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let mut inode = self.inodes.remove(&id).expect("listed");
            let mut data = std::mem::take(&mut inode.durable);
            for op in inode.pending.drain(..) {
                match op {
                    FileOp::Write { offset, bytes } => match self.below(3) {
                        0 => {
                            apply_write(&mut data, offset, &bytes);
                            report.writes_kept += 1;
                        }
                        1 => report.writes_dropped += 1,
                        _ => {
                            let keep = self.below(bytes.len() as u64) as usize;
                            apply_write(&mut data, offset, &bytes[..keep]);
                            report.writes_torn += 1;
                        }
                    },
                    FileOp::SetLen(len) => {
                        if self.below(2) == 0 {
                            data.resize(len as usize, 0);
                        }
                    }
                }
            }
            inode.current = data.clone();
            inode.durable = data;
            self.inodes.insert(id, inode);
        }
        let mut by_dir: BTreeMap<PathBuf, Vec<DirOp>> = BTreeMap::new();
        for (dir, op) in self.dir_ops.drain(..) {
            by_dir.entry(dir).or_default().push(op);
        }
        for (_, ops) in by_dir {
            let keep = self.below(ops.len() as u64 + 1) as usize;
            report.dir_ops_kept += keep as u64;
            report.dir_ops_dropped += (ops.len() - keep) as u64;
            for op in &ops[..keep] {
                apply_dir_op(&mut self.durable_names, op);
            }
        }
        self.names = self.durable_names.clone();
        let live: HashSet<u64> = self.names.values().copied().collect();
        self.inodes.retain(|id, _| live.contains(id));
        self.locks.clear();
        self.generation += 1;
        self.cut_at = None;
        self.cuts += 1;
        self.last_cut = report;
    }

    /// The process dies, the machine keeps running: nothing is lost (unsynced writes stay in
    /// the page cache, still volatile), but every handle of the process is dead.
    fn crash(&mut self) {
        self.locks.clear();
        self.generation += 1;
        self.cut_at = None;
    }

    fn dir_op(&mut self, path: &Path, op: DirOp) {
        let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
        apply_dir_op(&mut self.names, &op);
        self.dir_ops.push((dir, op));
    }

    fn inode(&mut self, id: u64) -> io::Result<&mut Inode> {
        self.inodes.get_mut(&id).ok_or_else(|| eio("file vanished"))
    }
}

impl Inode {
    /// What a handle opened now has reported of the file's failed write-backs (Linux's
    /// `errseq_sample`): a failure no sync has reported yet is reported to it too.
    fn wb_errors_sample(&self) -> u64 {
        if self.wb_error_seen {
            self.wb_errors
        } else {
            0
        }
    }

    /// The disk's contents once every pending operation is written back (equal to `current`
    /// unless a write-back failed).
    fn written_back(&self) -> Vec<u8> {
        let mut data = self.durable.clone();
        for op in &self.pending {
            match op {
                FileOp::Write { offset, bytes } => apply_write(&mut data, *offset, bytes),
                FileOp::SetLen(len) => data.resize(*len as usize, 0),
            }
        }
        data
    }
}

fn apply_write(data: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let end = offset as usize + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[offset as usize..end].copy_from_slice(bytes);
}

fn apply_dir_op(names: &mut BTreeMap<PathBuf, u64>, op: &DirOp) {
    match op {
        DirOp::Link(path, id) => {
            names.insert(path.clone(), *id);
        }
        DirOp::Unlink(path) => {
            names.remove(path);
        }
        DirOp::Rename(from, to) => {
            if let Some(id) = names.remove(from) {
                names.insert(to.clone(), id);
            }
        }
    }
}

impl SimFs {
    /// An empty disk whose power cuts are drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        SimFs {
            state: Arc::new(Mutex::new(State {
                rng: seed,
                generation: 0,
                next_inode: 1,
                inodes: HashMap::new(),
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                dir_ops: Vec::new(),
                dirs: HashSet::new(),
                locks: HashSet::new(),
                mutations: 0,
                cut_at: None,
                crash_only: false,
                fail_next_sync: false,
                sync_jitter_us: 0,
                cuts: 0,
                last_cut: CutReport::default(),
            })),
            boot: None,
        }
    }

    /// A handle for the current power-on, for the process that runs until the next cut.
    pub fn boot(&self) -> SimFs {
        SimFs {
            state: self.state.clone(),
            boot: Some(self.state.lock().generation),
        }
    }

    /// Lose power now.
    pub fn power_cut(&self) -> CutReport {
        let mut s = self.state.lock();
        s.cut();
        s.last_cut.clone()
    }

    /// Lose power in place of the `n`-th mutating call from now (n ≥ 1).
    pub fn arm_cut_after(&self, n: u64) {
        let mut s = self.state.lock();
        s.cut_at = Some(s.mutations + n.max(1));
        s.crash_only = false;
    }

    /// Crash the process (not the machine) in place of the `n`-th mutating call from now.
    pub fn arm_crash_after(&self, n: u64) {
        let mut s = self.state.lock();
        s.cut_at = Some(s.mutations + n.max(1));
        s.crash_only = true;
    }

    /// Make the write-back of the next `sync_data`/`sync_all` of any file fail with `EIO` as
    /// a failed write-back does on Linux: the file's unsynced writes never reach the disk, yet
    /// stay readable from the page cache (the kernel marks the pages clean), so a later sync
    /// through the same handle succeeds without writing them and a reader sees them until
    /// `drop_cache` or a cut. As on Linux, the failure is reported once to each handle of the
    /// file open at the time (and to one opened later, until some sync reported it).
    pub fn fail_next_sync(&self) {
        self.state.lock().fail_next_sync = true;
    }

    /// Make every file sync pause for up to `max_us` microseconds (at random, from the seed)
    /// before it reaches the disk and again before it returns, as syncs that take
    /// milliseconds on a real disk overlap and finish out of order.
    pub fn set_sync_jitter(&self, max_us: u64) {
        self.state.lock().sync_jitter_us = max_us;
    }

    /// Whether an armed cut is still waiting to fire.
    pub fn cut_armed(&self) -> bool {
        self.state.lock().cut_at.is_some()
    }

    /// Power cuts so far.
    pub fn cuts(&self) -> u64 {
        self.state.lock().cuts
    }

    /// What the last cut did.
    pub fn last_cut(&self) -> CutReport {
        self.state.lock().last_cut.clone()
    }

    /// The current contents of a file (for tests that damage or inspect bytes).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.state.lock();
        let id = s.names.get(path)?;
        Some(s.inodes[id].current.clone())
    }

    /// Replace a file's contents durably (a test damaging the disk).
    pub fn set_contents(&self, path: &Path, bytes: Vec<u8>) {
        let mut s = self.state.lock();
        let id = s.names[path];
        let inode = s.inodes.get_mut(&id).expect("named inode");
        inode.current = bytes.clone();
        inode.durable = bytes;
        inode.pending.clear();
    }

    fn generation(&self, s: &State) -> u64 {
        self.boot.unwrap_or(s.generation)
    }
}

#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    inode: u64,
    generation: u64,
    /// The file's failed write-backs this handle has reported (Linux's per-open-file
    /// `errseq` sample).
    wb_errors_reported: AtomicU64,
}

#[derive(Debug)]
struct SimLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    generation: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut s = self.state.lock();
        if s.generation == self.generation {
            s.locks.remove(&self.path);
        }
    }
}

impl DirLock for SimLock {}

impl SimFile {
    /// The sync itself, at one instant.
    fn sync_now(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate(self.generation)?;
        let failed = std::mem::take(&mut s.fail_next_sync);
        let inode = s.inode(self.inode)?;
        if failed {
            inode.pending.clear();
            inode.wb_errors += 1;
        }
        // As Linux reports a failed write-back: to the next sync through every handle opened
        // before it failed (or opened after it, until some sync has reported it), once each.
        if self.wb_errors_reported.load(Ordering::Relaxed) != inode.wb_errors {
            self.wb_errors_reported
                .store(inode.wb_errors, Ordering::Relaxed);
            inode.wb_error_seen = true;
            return Err(io::Error::other("simulated write-back failure (EIO)"));
        }
        // What is waiting to be written back reaches the disk; data whose write-back failed
        // earlier is cached but clean, and is not written again.
        inode.durable = inode.written_back();
        inode.pending.clear();
        Ok(())
    }
}

impl FsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut s = self.state.lock();
        s.check(self.generation)?;
        let data = &s.inode(self.inode)?.current;
        let start = (offset as usize).min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate(self.generation)?;
        let inode = s.inode(self.inode)?;
        apply_write(&mut inode.current, offset, buf);
        inode.pending.push(FileOp::Write {
            offset,
            bytes: buf.to_vec(),
        });
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let (before, after) = {
            let mut s = self.state.lock();
            match s.sync_jitter_us {
                0 => (0, 0),
                jitter => (s.below(jitter + 1), s.below(jitter + 1)),
            }
        };
        if before > 0 {
            std::thread::sleep(std::time::Duration::from_micros(before));
        }
        let result = self.sync_now();
        if after > 0 {
            std::thread::sleep(std::time::Duration::from_micros(after));
        }
        result
    }

    /// The cache keeps only what is durable or still waiting to be written back: data whose
    /// write-back failed is read from the disk again.
    fn drop_cache(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.check(self.generation)?;
        let inode = s.inode(self.inode)?;
        inode.current = inode.written_back();
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn size(&self) -> io::Result<u64> {
        let mut s = self.state.lock();
        s.check(self.generation)?;
        Ok(s.inode(self.inode)?.current.len() as u64)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate(self.generation)?;
        let inode = s.inode(self.inode)?;
        if (inode.current.len() as u64) < len {
            inode.current.resize(len as usize, 0);
            inode.pending.push(FileOp::SetLen(len));
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate(self.generation)?;
        let inode = s.inode(self.inode)?;
        inode.current.resize(len as usize, 0);
        inode.pending.push(FileOp::SetLen(len));
        Ok(())
    }

    /// Blocks are not modelled, so a reservation changes no byte and no size; but it is a
    /// call the disk sees: an armed cut can fall on it, and a handle from before a cut fails.
    fn reserve(&self, _len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate(self.generation)?;
        s.inode(self.inode)?;
        Ok(())
    }

    /// As on Linux, giving back the blocks past the size is a truncate to the size the file
    /// has now: a size change, volatile until synced like any other, so a cut may keep it
    /// and lose unsynced writes made before it (zeros up to that size), or drop it.
    fn unreserve(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate(self.generation)?;
        let inode = s.inode(self.inode)?;
        let len = inode.current.len() as u64;
        inode.pending.push(FileOp::SetLen(len));
        Ok(())
    }

    fn zero_range(&self, from: u64, to: u64) -> io::Result<()> {
        let len = self.size()?;
        let to = to.min(len);
        if from >= to {
            return Ok(());
        }
        self.write_all_at(&vec![0u8; (to - from) as usize], from)
    }
}

impl Fs for SimFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        // Directories are made durable at once: the log's directory exists before any test.
        let mut d = Some(dir);
        while let Some(p) = d {
            s.dirs.insert(p.to_path_buf());
            d = p.parent();
        }
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        let mut s = self.state.lock();
        s.check(self.generation(&s))?;
        if !s.locks.insert(path.to_path_buf()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(Box::new(SimLock {
            state: self.state.clone(),
            path: path.to_path_buf(),
            generation: s.generation,
        }))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let s = self.state.lock();
        s.check(self.generation(&s))?;
        if !s.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(s.names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        let s = self.state.lock();
        let generation = self.generation(&s);
        s.check(generation)?;
        let inode = *s.names.get(path).ok_or_else(|| not_found(path))?;
        let wb_errors_reported = s.inodes[&inode].wb_errors_sample();
        Ok(Arc::new(SimFile {
            state: self.state.clone(),
            inode,
            generation,
            wb_errors_reported: AtomicU64::new(wb_errors_reported),
        }))
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        let mut s = self.state.lock();
        let generation = self.generation(&s);
        s.mutate(generation)?;
        let inode = match s.names.get(path) {
            Some(&id) => {
                let inode = s.inode(id)?;
                inode.current.clear();
                inode.pending.push(FileOp::SetLen(0));
                id
            }
            None => {
                let id = s.next_inode;
                s.next_inode += 1;
                s.inodes.insert(id, Inode::default());
                s.dir_op(path, DirOp::Link(path.to_path_buf(), id));
                id
            }
        };
        let wb_errors_reported = s.inodes[&inode].wb_errors_sample();
        Ok(Arc::new(SimFile {
            state: self.state.clone(),
            inode,
            generation,
            wb_errors_reported: AtomicU64::new(wb_errors_reported),
        }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let s = self.state.lock();
        s.check(self.generation(&s))?;
        let id = s.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(s.inodes[id].current.clone())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        let generation = self.generation(&s);
        s.mutate(generation)?;
        if !s.names.contains_key(from) {
            return Err(not_found(from));
        }
        s.dir_op(to, DirOp::Rename(from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        let generation = self.generation(&s);
        s.mutate(generation)?;
        if !s.names.contains_key(path) {
            return Err(not_found(path));
        }
        s.dir_op(path, DirOp::Unlink(path.to_path_buf()));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        let generation = self.generation(&s);
        s.mutate(generation)?;
        let ops = std::mem::take(&mut s.dir_ops);
        for (d, op) in ops {
            if d == dir {
                apply_dir_op(&mut s.durable_names, &op);
            } else {
                s.dir_ops.push((d, op));
            }
        }
        Ok(())
    }

    fn is_dir(&self, dir: &Path) -> bool {
        self.state.lock().dirs.contains(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_data_and_names_survive_a_cut_and_unsynced_ones_may_not() {
        let fs = SimFs::new(1);
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let a = fs.create(&dir.join("a")).unwrap();
        a.write_all_at(b"hello", 0).unwrap();
        a.sync_data().unwrap();
        fs.sync_dir(dir).unwrap();
        a.write_all_at(b"world", 5).unwrap();
        let b = fs.create(&dir.join("b")).unwrap();
        b.write_all_at(b"x", 0).unwrap();
        b.sync_data().unwrap();
        fs.power_cut();
        let got = fs.read(&dir.join("a")).unwrap();
        assert_eq!(&got[..5], b"hello");
        assert!(got.len() <= 10);
        assert!(a.write_all_at(b"!", 0).is_err(), "old handles are dead");
        // `b`'s name was never synced: it survives only if the journal kept its creation.
        let listed = fs.list(dir).unwrap();
        assert!(listed.contains(&"a".to_owned()));
    }

    #[test]
    fn a_failed_write_back_is_reported_once_to_each_handle() {
        let fs = SimFs::new(3);
        let path = Path::new("/d/f");
        fs.create_dir_all(Path::new("/d")).unwrap();
        let a = fs.create(path).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        let b = fs.open(path).unwrap();
        a.write_all_at(b"lost", 0).unwrap();
        fs.fail_next_sync();
        assert!(a.sync_data().is_err(), "the sync whose write-back failed");
        assert!(b.sync_data().is_err(), "a handle open before the failure");
        assert!(a.sync_data().is_ok(), "reported once per handle");
        assert!(b.sync_data().is_ok(), "reported once per handle");
        let c = fs.open(path).unwrap();
        assert!(c.sync_data().is_ok(), "opened after it was reported");
        // Opened after a failure no sync has reported yet: this handle reports it.
        a.write_all_at(b"gone", 0).unwrap();
        let d = fs.open(path).unwrap();
        fs.fail_next_sync();
        assert!(a.sync_data().is_err());
        let e = fs.open(path).unwrap();
        assert!(d.sync_data().is_err());
        assert!(e.sync_data().is_ok(), "opened after a sync reported it");
        fs.power_cut();
        assert!(
            fs.read(path).unwrap().is_empty(),
            "neither write reached the disk"
        );
    }

    #[test]
    fn an_armed_cut_fires_in_place_of_the_nth_mutation() {
        let fs = SimFs::new(2);
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let a = fs.create(&dir.join("a")).unwrap();
        fs.sync_dir(dir).unwrap();
        fs.arm_cut_after(2);
        a.write_all_at(b"1", 0).unwrap();
        assert!(a.write_all_at(b"2", 1).is_err());
        assert_eq!(fs.cuts(), 1);
        assert!(!fs.cut_armed());
    }
}
