//! The stage kinds: each has a sequential model (one input, one output) and a deployment
//! (threads joined by rings). Deployed stages keep input order, so a deployed pipeline's
//! output equals its model's.

use std::sync::Arc;

use super::graph::{present, publish_all, Graph, Reader, Stream};
use super::Value;

/// A stage from `A` to `B`.
pub(crate) trait Node<A, B>: Send + Sync {
    fn model(&self, input: A) -> B;
    fn deploy(&self, input: Stream<A>, graph: &mut Graph) -> Stream<B>;
}

pub(crate) struct Identity;

impl<A: Value> Node<A, A> for Identity {
    fn model(&self, input: A) -> A {
        input
    }

    fn deploy(&self, input: Stream<A>, _graph: &mut Graph) -> Stream<A> {
        input
    }
}

pub(crate) struct Then<A, B, C> {
    pub(crate) first: Arc<dyn Node<A, B>>,
    pub(crate) second: Arc<dyn Node<B, C>>,
}

impl<A: Value, B: Value, C: Value> Node<A, C> for Then<A, B, C> {
    fn model(&self, input: A) -> C {
        self.second.model(self.first.model(input))
    }

    fn deploy(&self, input: Stream<A>, graph: &mut Graph) -> Stream<C> {
        let middle = self.first.deploy(input, graph);
        self.second.deploy(middle, graph)
    }
}

pub(crate) type MapFn<A, B> = Arc<dyn Fn(A) -> B + Send + Sync>;
pub(crate) type KeyFn<A> = Arc<dyn Fn(u64, &A) -> u64 + Send + Sync>;

/// One thread: reads a batch, claims as many output slots, writes `f` of each in place.
pub(crate) struct Map<A, B> {
    pub(crate) name: String,
    pub(crate) f: MapFn<A, B>,
}

impl<A: Value, B: Value> Node<A, B> for Map<A, B> {
    fn model(&self, input: A) -> B {
        (self.f)(input)
    }

    fn deploy(&self, input: Stream<A>, graph: &mut Graph) -> Stream<B> {
        let name = graph.stage(&self.name);
        let mut consumer = input.join(&name);
        let (mut producer, output) = graph.ring::<B>(&name);
        let f = self.f.clone();
        graph.spawn(&name, move || {
            while let Ok(batch) = consumer.wait_batch() {
                let mut claim = producer.claim(batch.len() as u64);
                for i in 0..batch.len() {
                    let value = batch.with_event(i, |slot| f(present(slot).clone()));
                    claim.with_slot(i, |slot| *slot = Some(value));
                }
                claim.publish();
            }
        });
        output
    }
}

/// `n` worker threads each take the events whose `key(sequence, event) % n` is their index;
/// a merge thread follows the input ring to know which worker owns each sequence and takes
/// that worker's next output, restoring input order for every `n`.
pub(crate) struct Shard<A, B> {
    pub(crate) name: String,
    pub(crate) shards: usize,
    pub(crate) key: KeyFn<A>,
    pub(crate) f: MapFn<A, B>,
}

impl<A: Value, B: Value> Node<A, B> for Shard<A, B> {
    fn model(&self, input: A) -> B {
        (self.f)(input)
    }

    fn deploy(&self, input: Stream<A>, graph: &mut Graph) -> Stream<B> {
        let name = graph.stage(&self.name);
        let n = self.shards as u64;
        let mut worker_outputs = Vec::new();
        for i in 0..n {
            let worker = graph.stage(&format!("{name}/{i}"));
            let mut consumer = input.join(&worker);
            let (mut producer, output) = graph.ring::<B>(&worker);
            worker_outputs.push(output);
            let (key, f) = (self.key.clone(), self.f.clone());
            graph.spawn(&worker, move || {
                while let Ok(batch) = consumer.wait_batch() {
                    let mut mine = Vec::new();
                    batch.for_each(|seq, slot, _| {
                        let value = present(slot);
                        if key(seq, value) % n == i {
                            mine.push(f(value.clone()));
                        }
                    });
                    drop(batch);
                    publish_all(&mut producer, mine);
                }
            });
        }
        let merge = graph.stage(&format!("{name}/merge"));
        let mut routes = input.join(&merge);
        let mut workers: Vec<_> = worker_outputs
            .iter()
            .map(|s| Reader::new(s.join(&merge)))
            .collect();
        let (mut producer, output) = graph.ring::<B>(&merge);
        let key = self.key.clone();
        graph.spawn(&merge, move || {
            while let Ok(batch) = routes.wait_batch() {
                let mut owners = Vec::with_capacity(batch.len());
                batch.for_each(|seq, slot, _| owners.push((key(seq, present(slot)) % n) as usize));
                drop(batch);
                let merged = owners
                    .into_iter()
                    .map(|owner| {
                        workers[owner]
                            .next()
                            .expect("worker outputs every event it owns")
                    })
                    .collect();
                publish_all(&mut producer, merged);
            }
        });
        output
    }
}

/// Every branch reads the same input ring (multicast); a zip thread takes one output from
/// each branch per input, in branch order.
pub(crate) struct FanOut<A, B> {
    pub(crate) name: String,
    pub(crate) branches: Vec<Arc<dyn Node<A, B>>>,
}

impl<A: Value, B: Value> Node<A, Vec<B>> for FanOut<A, B> {
    fn model(&self, input: A) -> Vec<B> {
        self.branches
            .iter()
            .map(|b| b.model(input.clone()))
            .collect()
    }

    fn deploy(&self, input: Stream<A>, graph: &mut Graph) -> Stream<Vec<B>> {
        let outputs: Vec<_> = self
            .branches
            .iter()
            .map(|b| {
                b.deploy(
                    Stream {
                        ring: input.ring.clone(),
                    },
                    graph,
                )
            })
            .collect();
        let zip = graph.stage(&format!("{}/zip", self.name));
        let mut readers: Vec<_> = outputs.iter().map(|s| Reader::new(s.join(&zip))).collect();
        let (mut producer, output) = graph.ring::<Vec<B>>(&zip);
        graph.spawn(&zip, move || loop {
            let mut row = Vec::with_capacity(readers.len());
            for reader in &mut readers {
                match reader.next() {
                    Ok(value) => row.push(value),
                    Err(_closed) => return,
                }
            }
            publish_all(&mut producer, vec![row]);
        });
        output
    }
}
