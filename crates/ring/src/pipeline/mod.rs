//! Declarative pipelines: a [`Pipe`] describes stages (map, shard, fan-out and zip); it can
//! run as a plain sequential model or be deployed as threads joined by rings. Every stage
//! maps one input to one output and keeps input order, so for any input the deployed
//! output equals the model's.
//!
//! ```
//! use spindle_ring::pipeline::source;
//! let pipe = source::<u64>()
//!     .map("double", |x| x * 2)
//!     .shard("square", 3, |_seq, x| *x, |x| x * x)
//!     .fan_out("branches", vec![
//!         source().map("inc", |x: u64| x + 1),
//!         source().map("dec", |x: u64| x.saturating_sub(1)),
//!     ]);
//! let inputs: Vec<u64> = (0..1000).collect();
//! assert_eq!(pipe.run(inputs.clone(), 64), pipe.model(inputs));
//! ```

mod graph;
mod stages;

use std::sync::Arc;

pub use graph::Graph;
use stages::{FanOut, Identity, Map, Node, Shard, Then};

use crate::{Closed, Consumer, Producer, WaitStrategy};

/// What flows through a pipeline: values are cloned out of shared slots.
pub trait Value: Clone + Send + Sync + 'static {}

impl<T: Clone + Send + Sync + 'static> Value for T {}

/// A pipeline from inputs `I` to outputs `O`.
pub struct Pipe<I, O> {
    node: Arc<dyn Node<I, O>>,
}

impl<I, O> Clone for Pipe<I, O> {
    fn clone(&self) -> Self {
        Self {
            node: self.node.clone(),
        }
    }
}

impl<I, O> std::fmt::Debug for Pipe<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipe").finish_non_exhaustive()
    }
}

/// The start of a pipeline: its input, unchanged.
pub fn source<I: Value>() -> Pipe<I, I> {
    Pipe {
        node: Arc::new(Identity),
    }
}

impl<I: Value, O: Value> Pipe<I, O> {
    fn then<P: Value>(self, next: Arc<dyn Node<O, P>>) -> Pipe<I, P> {
        Pipe {
            node: Arc::new(Then {
                first: self.node,
                second: next,
            }),
        }
    }

    /// A stage on one thread applying `f` to each value.
    pub fn map<P: Value>(
        self,
        name: &str,
        f: impl Fn(O) -> P + Send + Sync + 'static,
    ) -> Pipe<I, P> {
        self.then(Arc::new(Map {
            name: name.to_owned(),
            f: Arc::new(f),
        }))
    }

    /// A stage replicated `shards` ways: the value at sequence `s` goes to shard
    /// `key(s, &value) % shards`; a merge restores input order, so the output is the same
    /// for every `shards`.
    ///
    /// # Panics
    /// If `shards` is 0.
    pub fn shard<P: Value>(
        self,
        name: &str,
        shards: usize,
        key: impl Fn(u64, &O) -> u64 + Send + Sync + 'static,
        f: impl Fn(O) -> P + Send + Sync + 'static,
    ) -> Pipe<I, P> {
        assert!(shards >= 1, "a sharded stage needs at least one shard");
        self.then(Arc::new(Shard {
            name: name.to_owned(),
            shards,
            key: Arc::new(key),
            f: Arc::new(f),
        }))
    }

    /// Sends every value to each branch (one shared ring, no copies) and zips their outputs
    /// into one `Vec` per value, in branch order.
    ///
    /// # Panics
    /// If `branches` is empty.
    pub fn fan_out<P: Value>(self, name: &str, branches: Vec<Pipe<O, P>>) -> Pipe<I, Vec<P>> {
        assert!(!branches.is_empty(), "a fan-out needs at least one branch");
        self.then(Arc::new(FanOut {
            name: name.to_owned(),
            branches: branches.into_iter().map(|b| b.node).collect(),
        }))
    }

    /// The sequential model: each input through each stage in turn, on this thread.
    pub fn model(&self, inputs: Vec<I>) -> Vec<O> {
        inputs.into_iter().map(|x| self.node.model(x)).collect()
    }

    /// Deploys the pipeline as threads and rings of `capacity_slots` each (a power of two).
    /// Push inputs through the returned source and read outputs from its sink.
    ///
    /// # Panics
    /// If `capacity_slots` is not a power of two.
    pub fn deploy(&self, capacity_slots: usize, wait: WaitStrategy) -> Deployment<I, O> {
        assert!(
            capacity_slots.is_power_of_two(),
            "pipeline ring capacity {capacity_slots} is not a power of two"
        );
        let mut graph = Graph::new(capacity_slots, wait);
        let source_name = graph.stage("source");
        let (source, input) = graph.ring::<I>(&source_name);
        let output = self.node.deploy(input, &mut graph);
        let sink_name = graph.stage("sink");
        let sink = output.join(&sink_name);
        Deployment {
            source: Some(source),
            sink,
            graph,
        }
    }

    /// Deploys the pipeline, feeds it `inputs` from a source thread and collects the
    /// sink's outputs.
    pub fn run(&self, inputs: Vec<I>, capacity_slots: usize) -> Vec<O> {
        let mut deployment = self.deploy(capacity_slots, WaitStrategy::Blocking);
        let mut source = deployment.take_source();
        let feeder = std::thread::spawn(move || {
            let n = inputs.len();
            graph::publish_all(&mut source, inputs);
            n
        });
        let mut outputs = Vec::new();
        while deployment.next_batch_into(&mut outputs).is_ok() {}
        let fed = feeder
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        deployment.graph.join();
        assert_eq!(fed, outputs.len(), "every input yields one output");
        outputs
    }
}

/// A deployed pipeline: its source producer, its sink consumer and its graph.
#[derive(Debug)]
pub struct Deployment<I, O> {
    source: Option<Producer<Option<I>>>,
    sink: Consumer<Option<O>>,
    graph: Graph,
}

impl<I: Value, O: Value> Deployment<I, O> {
    /// The producer that feeds the pipeline; dropping it closes the pipeline.
    ///
    /// # Panics
    /// If taken twice.
    pub fn take_source(&mut self) -> Producer<Option<I>> {
        self.source.take().expect("the source was already taken")
    }

    /// Waits for outputs and appends every available one to `out`.
    pub fn next_batch_into(&mut self, out: &mut Vec<O>) -> Result<(), Closed> {
        let batch = self.sink.wait_batch()?;
        batch.for_each(|_, value, _| out.push(graph::present(value).clone()));
        Ok(())
    }

    /// The graph, for snapshots, metrics and drawings.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}
