//! Fault injection (feature `failpoints`): an import that fails at any step after it began
//! leaves its data directory refused by `serve` with "import did not finish; remove DIR and
//! import again", and a second import into it is refused as not empty.

#![cfg(feature = "failpoints")]

mod common;

use common::*;
use spindle_server::node::NodeError;
use spindle_server::{Node, ServerConfig};
use spindle_sort::import::{import, ImportError, Quiet};

const POINTS: [&str; 4] = [
    "import::after_log",
    "import::after_tables",
    "import::mid_ingest",
    "import::before_unmark",
];

/// Failpoints are process-global: the scenarios run one after another in one test.
#[test]
fn a_failed_import_is_never_served() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let writes = random_writes(3, 1500, 200);
    let inputs = write_inputs(dir.path(), &writes, 1);
    for point in POINTS {
        let data = dir.path().join(point.replace("::", "-"));
        fail::cfg(point, "return").unwrap();
        let err = import(&options(&data, 4), &inputs, &Quiet).unwrap_err();
        fail::remove(point);
        assert!(
            matches!(err, ImportError::Injected(p) if p == point),
            "{err}"
        );

        let config = ServerConfig {
            data_dir: data.clone(),
            disk_partitions: 4,
            truncate: false,
            ..ServerConfig::default()
        };
        let refused = Node::open(config).unwrap_err();
        assert!(
            matches!(refused, NodeError::ImportUnfinished { .. }),
            "{point}: {refused}"
        );
        let message = refused.to_string();
        assert!(
            message.contains("import did not finish; remove")
                && message.contains("and import again"),
            "{message}"
        );
        let again = import(&options(&data, 4), &inputs, &Quiet).unwrap_err();
        assert!(matches!(again, ImportError::NotEmpty { .. }), "{again}");

        // Removing the directory and importing again works.
        std::fs::remove_dir_all(&data).unwrap();
        let report = run_import(&data, 4, &inputs);
        assert_eq!(report.records, writes.len() as u64);
        let config = ServerConfig {
            data_dir: data.clone(),
            disk_partitions: 4,
            truncate: false,
            memory_view: false,
            ..ServerConfig::default()
        };
        Node::open(config).unwrap().shutdown();
    }
    scenario.teardown();
}
