//! A deployed pipeline's graph: stage names, the rings between them, the threads running
//! them, and the observability built on that (snapshots, Prometheus text, Graphviz dot).

use std::collections::VecDeque;
use std::thread::JoinHandle;

use crate::{Closed, Consumer, Producer, Ring, RingBuilder, RingSnapshot, WaitStrategy};

/// Anything whose positions can be read for metrics.
trait Probe: Send + Sync {
    fn snapshot(&self) -> RingSnapshot;
}

impl<T: Send + Sync> Probe for Ring<T> {
    fn snapshot(&self) -> RingSnapshot {
        Ring::snapshot(self)
    }
}

/// Rings, stages and threads of one deployment.
pub struct Graph {
    capacity_slots: usize,
    wait: WaitStrategy,
    stages: Vec<String>,
    rings: Vec<Box<dyn Probe>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("stages", &self.stages)
            .field("capacity_slots", &self.capacity_slots)
            .finish_non_exhaustive()
    }
}

/// The output of a stage: a ring that later stages join at its start.
#[derive(Debug)]
pub(crate) struct Stream<T> {
    pub(crate) ring: Ring<Option<T>>,
}

impl<T: Send + Sync> Stream<T> {
    /// Joins at event 0; safe because no stage publishes before the whole graph is built.
    pub(crate) fn join(&self, stage: &str) -> Consumer<Option<T>> {
        self.ring
            .join_at(stage, 0)
            .expect("graphs are wired before any event flows")
    }
}

impl Graph {
    pub(crate) fn new(capacity_slots: usize, wait: WaitStrategy) -> Self {
        Self {
            capacity_slots,
            wait,
            stages: Vec::new(),
            rings: Vec::new(),
            threads: Vec::new(),
        }
    }

    /// Registers a stage and returns its unique name.
    pub(crate) fn stage(&mut self, name: &str) -> String {
        let mut unique = name.to_owned();
        let mut n = 1;
        while self.stages.contains(&unique) {
            n += 1;
            unique = format!("{name}#{n}");
        }
        self.stages.push(unique.clone());
        unique
    }

    /// A new ring written by `stage`.
    pub(crate) fn ring<T: Send + Sync + 'static>(
        &mut self,
        stage: &str,
    ) -> (Producer<Option<T>>, Stream<T>) {
        let (producer, ring) = RingBuilder::new(self.capacity_slots)
            .name(stage)
            .wait(self.wait)
            .build_with(|| None)
            .expect("capacity checked when the pipeline was deployed");
        self.rings.push(Box::new(ring.clone()));
        (producer, Stream { ring })
    }

    pub(crate) fn spawn(&mut self, stage: &str, work: impl FnOnce() + Send + 'static) {
        let handle = std::thread::Builder::new()
            .name(stage.to_owned())
            .spawn(work)
            .expect("spawning a pipeline thread");
        self.threads.push(handle);
    }

    /// Every ring's cursor and consumer sequences.
    pub fn snapshot(&self) -> Vec<RingSnapshot> {
        self.rings.iter().map(|r| r.snapshot()).collect()
    }

    /// Every ring's positions in Prometheus text format.
    pub fn to_prometheus(&self) -> String {
        self.snapshot()
            .iter()
            .map(RingSnapshot::to_prometheus)
            .collect()
    }

    /// A Graphviz drawing: one node per stage, one edge per (ring, consumer), labelled with
    /// the edge's queue depth.
    pub fn to_dot(&self) -> String {
        let mut out = String::from("digraph pipeline {\n  rankdir=LR;\n");
        for stage in &self.stages {
            out.push_str(&format!("  \"{stage}\";\n"));
        }
        for ring in self.snapshot() {
            for c in &ring.consumers {
                out.push_str(&format!(
                    "  \"{}\" -> \"{}\" [label=\"depth {} / {}\"];\n",
                    ring.name, c.name, c.depth, ring.capacity_slots
                ));
            }
        }
        out.push_str("}\n");
        out
    }

    /// Waits for every stage thread; re-raises a stage's panic.
    pub(crate) fn join(&mut self) {
        for handle in self.threads.drain(..) {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// Reads a ring one value at a time, copying each batch out and releasing it at once, so
/// a stage that combines several inputs (zip, merge) never holds a slot while it waits on
/// another ring.
#[derive(Debug)]
pub(crate) struct Reader<T> {
    consumer: Consumer<Option<T>>,
    buffered: VecDeque<T>,
}

impl<T: Clone + Send + Sync> Reader<T> {
    pub(crate) fn new(consumer: Consumer<Option<T>>) -> Self {
        Self {
            consumer,
            buffered: VecDeque::new(),
        }
    }

    pub(crate) fn next(&mut self) -> Result<T, Closed> {
        if self.buffered.is_empty() {
            let batch = self.consumer.wait_batch()?;
            let buffered = &mut self.buffered;
            batch.for_each(|_, value, _| buffered.push_back(present(value).clone()));
        }
        Ok(self
            .buffered
            .pop_front()
            .expect("a batch holds at least one event"))
    }
}

/// Every published slot of a pipeline ring holds a value; `None` only before the first
/// write.
pub(crate) fn present<T>(slot: &Option<T>) -> &T {
    slot.as_ref()
        .expect("published pipeline slots hold a value")
}

/// Publishes `values` in claims of at most the ring's capacity.
pub(crate) fn publish_all<T>(producer: &mut Producer<Option<T>>, values: Vec<T>) {
    let mut values = values.into_iter().peekable();
    while values.peek().is_some() {
        let n = values.len().min(producer.capacity() as usize) as u64;
        let mut claim = producer.claim(n);
        for i in 0..claim.len() {
            let value = values.next().expect("claim sized to the remaining values");
            claim.with_slot(i, |slot| *slot = Some(value));
        }
        claim.publish();
    }
}
