//! Bad input gets a clear error and writes nothing: empty transactions, bad ids and labels,
//! values that are not JSON objects, oversized records and transactions.

mod common;

use common::*;
use spindle_core::{InputError, ItemKey, Transaction, Value, RECORD_BYTES_MAX};
use spindle_log::{AppendError, Index, LogConfig};

fn refused(log: &spindle_log::FileLog, txn: Transaction) -> InputError {
    match log.append_blocking(&txn) {
        Err(AppendError::Input(e)) => e,
        other => panic!("expected an input error, got {other:?}"),
    }
}

#[test]
fn every_bad_input_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(log.append_blocking(&put("ok", 1)).unwrap(), Index::new(1));

    assert_eq!(
        refused(&log, Transaction::new()),
        InputError::EmptyTransaction
    );
    let empty_id = Transaction::single(ItemKey::Node { id: String::new() }, obj(1));
    assert!(matches!(
        refused(&log, empty_id),
        InputError::EmptyField { field: "node id" }
    ));
    let long_id = Transaction::single(
        ItemKey::Node {
            id: "x".repeat(5000),
        },
        obj(1),
    );
    assert!(matches!(
        refused(&log, long_id),
        InputError::FieldTooLong { .. }
    ));
    let empty_label = Transaction::single(
        ItemKey::Edge {
            from: "a".into(),
            label: String::new(),
            to: "b".into(),
        },
        obj(1),
    );
    assert!(matches!(
        refused(&log, empty_label),
        InputError::EmptyField {
            field: "edge label"
        }
    ));
    // Values are opaque: the only way to make one is through validation.
    assert!(matches!(
        Value::json("[1,2]"),
        Err(InputError::NotJsonObject { .. })
    ));
    assert!(matches!(
        Value::json_bytes(b"{\"a\":\"\xc3\x28\"}"),
        Err(InputError::NotUtf8 { .. })
    ));
    // Ids arriving as bytes (from the wire) must be UTF-8.
    assert!(matches!(
        spindle_core::item::field_from_bytes("node id", b"users/\xff"),
        Err(InputError::NotUtf8 {
            field: "node id",
            offset: 6
        })
    ));
    let huge = Value::json(format!("{{\"x\":\"{}\"}}", "y".repeat(RECORD_BYTES_MAX))).unwrap();
    assert!(matches!(
        refused(&log, Transaction::single(node("a"), huge)),
        InputError::RecordTooLarge { .. }
    ));

    assert_eq!(log.durable_index(), Index::new(1), "nothing was written");
    let records = log.read(Index::FIRST, 100).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(log.append_blocking(&put("ok", 2)).unwrap(), Index::new(2));
}

/// A config the log cannot honour is refused at open with a message naming the setting.
#[test]
fn configs_out_of_range_are_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    for (config, setting) in [
        (
            LogConfig {
                intake_bytes_max: u32::MAX as usize + 1,
                ..LogConfig::default()
            },
            "intake_bytes_max",
        ),
        (
            LogConfig {
                intake_bytes_max: 1,
                ..LogConfig::default()
            },
            "intake_bytes_max",
        ),
        (
            LogConfig {
                segment_bytes: 100,
                ..LogConfig::default()
            },
            "segment_bytes",
        ),
    ] {
        let err = spindle_log::FileLog::open(dir.path(), config).unwrap_err();
        assert!(err.to_string().contains(setting), "{err}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a refused open creates nothing"
    );
}
