//! The set of consumers that gate a ring's producer. Consumers join and leave at runtime;
//! the producer keeps a snapshot and refreshes it only when the set's version changes.

use crate::sync::{lock, Arc, AtomicU64, Mutex, Ordering, Padded};

/// A consumer's sequence: the number of events it has finished reading.
pub(crate) type SeqCell = Arc<Padded<AtomicU64>>;

#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) sequence: SeqCell,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// Bumped (SeqCst) after every join and leave; see `Ring::join_at` for why SeqCst.
    version: Padded<AtomicU64>,
    members: Mutex<Vec<Member>>,
    next_id: AtomicU64,
}

impl Registry {
    pub(crate) fn add(&self, name: &str, position: u64) -> (u64, SeqCell) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sequence: SeqCell = Arc::new(Padded(AtomicU64::new(position)));
        lock(&self.members).push(Member {
            id,
            name: name.to_owned(),
            sequence: sequence.clone(),
        });
        self.version.fetch_add(1, Ordering::SeqCst);
        (id, sequence)
    }

    pub(crate) fn remove(&self, id: u64) {
        lock(&self.members).retain(|m| m.id != id);
        self.version.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// The current members' sequence cells and the version they belong to.
    pub(crate) fn gates(&self) -> (u64, Vec<SeqCell>) {
        let members = lock(&self.members);
        let version = self.version.load(Ordering::SeqCst);
        (
            version,
            members.iter().map(|m| m.sequence.clone()).collect(),
        )
    }

    /// `(name, sequence)` of every member, for metrics.
    pub(crate) fn positions(&self) -> Vec<(String, u64)> {
        lock(&self.members)
            .iter()
            .map(|m| (m.name.clone(), m.sequence.load(Ordering::Acquire)))
            .collect()
    }
}

/// The producer's view of the gating set: cached cells and the lowest sequence seen.
#[derive(Debug)]
pub(crate) struct GateCache {
    version: u64,
    gates: Vec<SeqCell>,
    /// A lower bound of every gate's sequence (sequences only grow), `u64::MAX` if none.
    min: u64,
}

impl GateCache {
    pub(crate) fn new() -> Self {
        Self {
            version: u64::MAX,
            gates: Vec::new(),
            min: 0,
        }
    }

    /// The lowest sequence among the current consumers that is at least `needed`, or a
    /// fresh minimum below it. Re-reads the gates only when the cached bound is too low or
    /// the set changed.
    pub(crate) fn min_at_least(&mut self, registry: &Registry, needed: u64) -> u64 {
        if registry.version() != self.version {
            (self.version, self.gates) = registry.gates();
            self.min = self.scan();
        } else if self.min < needed {
            self.min = self.scan();
        }
        self.min
    }

    fn scan(&self) -> u64 {
        self.gates
            .iter()
            .map(|g| g.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }
}
