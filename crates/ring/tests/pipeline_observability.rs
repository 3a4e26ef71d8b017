//! A deployed pipeline exposes every ring's cursor and consumer sequences: the depths of a
//! stalled pipeline are exact, and `to_dot` and the Prometheus text name every edge.
#![cfg(not(loom))]

use spindle_ring::pipeline::source;
use spindle_ring::WaitStrategy;

#[test]
fn snapshot_dot_and_metrics_describe_the_graph() {
    let pipe = source::<u64>().map("double", |x| x * 2).fan_out(
        "fan",
        vec![
            source().map("a", |x: u64| x + 1),
            source().map("b", |x: u64| x + 2),
        ],
    );
    let mut deployment = pipe.deploy(8, WaitStrategy::Blocking);
    let mut input = deployment.take_source();
    for i in 0..5 {
        let mut claim = input.claim(1);
        claim.with_slot(0, |slot| *slot = Some(i));
        claim.publish();
    }
    // Read all five outputs: every stage has then passed all five events on.
    let mut out = Vec::new();
    while out.len() < 5 {
        deployment.next_batch_into(&mut out).unwrap();
    }
    assert_eq!(out[4], vec![9, 10]);
    let graph = deployment.graph();
    let snapshot = graph.snapshot();
    let source_ring = snapshot.iter().find(|r| r.name == "source").unwrap();
    assert_eq!(source_ring.cursor, 5);
    let sink_edge = snapshot
        .iter()
        .flat_map(|r| r.consumers.iter().map(move |c| (r.name.as_str(), c)))
        .find(|(_, c)| c.name == "sink")
        .unwrap();
    assert_eq!((sink_edge.0, sink_edge.1.depth), ("fan/zip", 0));
    let dot = graph.to_dot();
    for edge in [
        "\"source\" -> \"double\"",
        "\"double\" -> \"a\"",
        "\"double\" -> \"b\"",
        "\"a\" -> \"fan/zip\"",
        "\"fan/zip\" -> \"sink\"",
    ] {
        assert!(dot.contains(edge), "missing {edge} in {dot}");
    }
    assert!(graph
        .to_prometheus()
        .contains("spindle_ring_cursor{ring=\"source\"} 5"));
    drop(input);
    while deployment.next_batch_into(&mut out).is_ok() {}
}
