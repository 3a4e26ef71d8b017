//! The deterministic synthetic graph of the benchmarks and `spindle gen`: `nodes` nodes
//! `user/<i>`, `edges` `follows` edges with power-law out-degrees (sources skewed towards
//! low ids), a few JSON properties per version, and `versions` versions per item on average
//! (every item once, then about half of them in each further round).

use spindle_core::{ItemKey, Value};

/// What to generate. The same spec and seed always give the same writes in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphSpec {
    pub nodes: u64,
    pub edges: u64,
    pub versions: u64,
    pub seed: u64,
}

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn item(spec: &GraphSpec, rng: &mut Rng, i: u64) -> ItemKey {
    if i < spec.nodes {
        return ItemKey::node(format!("user/{i}")).expect("a valid id");
    }
    let u = (rng.below(1 << 20) as f64 / f64::from(1 << 20)).powi(3);
    let from = (u * spec.nodes as f64) as u64;
    let to = rng.below(spec.nodes);
    ItemKey::edge(format!("user/{from}"), "follows", format!("user/{to}")).expect("a valid edge")
}

/// Call `write` for every write of the graph, in order. Returns the number of writes.
pub fn generate(spec: &GraphSpec, mut write: impl FnMut(ItemKey, Value)) -> u64 {
    let items = spec.nodes + spec.edges;
    let mut rng = Rng(spec.seed.max(1));
    let keys: Vec<ItemKey> = (0..items).map(|i| item(spec, &mut rng, i)).collect();
    let mut writes = 0;
    for round in 0..(2 * spec.versions).saturating_sub(1).max(1) {
        for key in &keys {
            if rng.below(2) == 0 && round > 0 {
                continue;
            }
            let n = rng.below(1000);
            let value = Value::json(format!(
                r#"{{"name":"{}","age":{},"city":"c{}","v":{round}}}"#,
                key.partition_key(),
                n % 90,
                n % 50
            ))
            .expect("a JSON object");
            write(key.clone(), value);
            writes += 1;
        }
    }
    writes
}

/// One write as a JSON line of `spindle load` (docs/api.md).
pub fn json_line(key: &ItemKey, value: &Value) -> String {
    let item = serde_json::to_string(key).expect("item keys serialise");
    match value.as_json() {
        Some(json) => format!("{{\"item\":{item},\"value\":{json}}}"),
        None => format!("{{\"item\":{item},\"delete\":true}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_spec_gives_the_same_graph() {
        let spec = GraphSpec {
            nodes: 50,
            edges: 200,
            versions: 3,
            seed: 9,
        };
        let mut a = Vec::new();
        let n = generate(&spec, |k, v| a.push(json_line(&k, &v)));
        let mut b = Vec::new();
        generate(&spec, |k, v| b.push(json_line(&k, &v)));
        assert_eq!(a, b);
        assert_eq!(n as usize, a.len());
        let mean = n as f64 / 250.0;
        assert!((2.0..4.0).contains(&mean), "{mean} versions per item");
        let line: serde_json::Value = serde_json::from_str(&a[0]).unwrap();
        assert_eq!(line["item"]["kind"], "node");
        assert!(line["value"]["name"].is_string());
    }
}
