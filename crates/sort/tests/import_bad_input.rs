//! Bad input: the first bad line stops an import with its file and line number (and the
//! directory is never served); `skip_bad` counts and skips bad lines, numbering the good
//! ones densely; a non-empty directory is refused before anything is written to it.

mod common;

use common::*;
use spindle_core::Index;
use spindle_server::node::NodeError;
use spindle_server::{Node, ServerConfig};
use spindle_sort::import::{import, ImportError, Quiet};

const GOOD: &str = r#"{"item":{"kind":"node","id":"a"},"value":{"v":1}}"#;

fn config(data: &std::path::Path) -> ServerConfig {
    ServerConfig {
        data_dir: data.to_path_buf(),
        disk_partitions: 2,
        truncate: false,
        memory_view: false,
        ..ServerConfig::default()
    }
}

fn input(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("bad.jsonl");
    let text = [
        GOOD,
        "",
        r#"{"item":{"kind":"node","id":"b"},"value":"not an object"}"#,
        GOOD,
        r#"{"item":{"kind":"node","id":"c"}"#,
        GOOD,
    ]
    .join("\n");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_first_bad_line_stops_the_import_with_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = input(dir.path());
    let data = dir.path().join("data");
    let err = import(&options(&data, 2), std::slice::from_ref(&path), &Quiet).unwrap_err();
    match &err {
        ImportError::BadLine { file, line, .. } => assert_eq!((file, *line), (&path, 3)),
        other => panic!("{other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("bad.jsonl: line 3: value must be a JSON object"),
        "{message}"
    );
    assert!(matches!(
        Node::open(config(&data)).unwrap_err(),
        NodeError::ImportUnfinished { .. }
    ));
}

#[test]
fn skip_bad_counts_and_skips_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = input(dir.path());
    let data = dir.path().join("data");
    let mut opts = options(&data, 2);
    opts.skip_bad = true;
    let report = import(&opts, &[path], &Quiet).unwrap();
    assert_eq!((report.records, report.skipped), (3, 2));
    assert!(report.first_skipped.unwrap().contains("line 3"));
    let node = Node::open(config(&data)).unwrap();
    assert_eq!(node.log.durable_index(), Index::new(3));
    let key = spindle_core::ItemKey::node("a").unwrap();
    let history = node
        .disk_for(&key)
        .unwrap()
        .view
        .history(&key, spindle_view::Freshness::Any)
        .unwrap();
    let indexes: Vec<u64> = history.iter().map(|v| v.index.get()).collect();
    assert_eq!(indexes, [1, 2, 3]);
    node.shutdown();
}

#[test]
fn a_non_empty_directory_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let writes = random_writes(5, 10, 5);
    let inputs = write_inputs(dir.path(), &writes, 1);
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("something"), b"mine").unwrap();
    let err = import(&options(&data, 2), &inputs, &Quiet).unwrap_err();
    assert!(matches!(err, ImportError::NotEmpty { .. }), "{err}");
    let names: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["something"]);
    // A data directory a node already serves is not empty either.
    let served = dir.path().join("served");
    Node::open(config(&served)).unwrap().shutdown();
    let err = import(&options(&served, 2), &inputs, &Quiet).unwrap_err();
    assert!(matches!(err, ImportError::NotEmpty { .. }), "{err}");
}

#[test]
fn a_tmp_directory_the_user_names_keeps_everything_of_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let writes = random_writes(6, 40, 3);
    let inputs = write_inputs(dir.path(), &writes, 2);
    // The user's scratch directory holds the inputs and a file of their own.
    let scratch = dir.path().to_path_buf();
    std::fs::write(scratch.join("keep-me"), b"mine").unwrap();
    let before: Vec<_> = names_in(&scratch);
    let data = dir.path().join("data");
    let opts = spindle_sort::import::ImportOptions {
        tmp_dir: Some(scratch.clone()),
        ..options(&data, 2)
    };
    import(&opts, &inputs, &Quiet).unwrap();
    let mut after = names_in(&scratch);
    after.retain(|n| n != "data");
    assert_eq!(after, before, "only the data directory was added");
    assert_eq!(std::fs::read(scratch.join("keep-me")).unwrap(), b"mine");
    let node = Node::open(config(&data)).unwrap();
    assert_eq!(node.log.durable_index(), Index::new(writes.len() as u64));
    node.shutdown();
    // A `--tmp` that did not exist is made for the import and not left behind.
    let made = dir.path().join("made-for-it");
    let opts = spindle_sort::import::ImportOptions {
        tmp_dir: Some(made.clone()),
        ..options(&dir.path().join("data2"), 2)
    };
    import(&opts, &inputs, &Quiet).unwrap();
    assert!(!made.exists(), "the --tmp made for the import is left");
}

#[test]
fn an_input_that_cannot_be_read_is_refused_before_the_directory_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let writes = random_writes(7, 10, 2);
    let mut inputs = write_inputs(dir.path(), &writes, 1);
    let data = dir.path().join("data");
    for bad in [dir.path().join("absent.jsonl"), dir.path().to_path_buf()] {
        inputs.push(bad.clone());
        let err = import(&options(&data, 2), &inputs, &Quiet).unwrap_err();
        assert!(
            matches!(&err, ImportError::Io { path, .. } if *path == bad),
            "{err}"
        );
        assert!(!data.exists(), "{bad:?}: the data directory was made");
        inputs.pop();
    }
    let opts = spindle_sort::import::ImportOptions {
        sort_memory_bytes: 1,
        ..options(&data, 2)
    };
    let err = import(&opts, &inputs, &Quiet).unwrap_err();
    assert!(err.to_string().contains("too small"), "{err}");
    assert!(!data.exists(), "a refused budget made the data directory");
    // A partition count `spindle serve` would not open is refused before any work.
    for partitions in [0, 257, u64::MAX] {
        let err = import(&options(&data, partitions), &inputs, &Quiet).unwrap_err();
        assert!(
            matches!(err, ImportError::BadPartitions(n) if n == partitions),
            "{err}"
        );
        assert!(err.to_string().contains("between 1 and 256"), "{err}");
        assert!(
            !data.exists(),
            "{partitions} partitions made the data directory"
        );
    }
    // Corrected, the same command goes through.
    import(&options(&data, 2), &inputs, &Quiet).unwrap();
}
