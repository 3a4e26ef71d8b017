//! `spindle bench` scenarios. Each scenario measures Spindle and its peers in one run on the
//! same machine and prints a table of ratios (or one JSON object per system with `--json`).

pub mod carousel;
pub mod chunks;
pub mod graph;
pub mod import;
pub mod iterate;
pub mod log;
pub mod report;
pub mod ring;
pub mod serve_child;
pub mod sort;
