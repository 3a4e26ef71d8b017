//! Fault injection (feature `failpoints`): a failed write or fdatasync (EIO) is sticky until
//! reopen, the log stays readable meanwhile, nothing acknowledged is lost across the reopen,
//! a stalled writer makes appenders wait once the intake holds `intake_bytes_max` bytes, a
//! lone append is never synced by the writer ahead of a batch the syncer is still syncing, and
//! a conflict in a failed batch is answered `Failed` (the version it would name was never
//! durable).

#![cfg(feature = "failpoints")]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use common::*;
use spindle_core::{Transaction, Value};
use spindle_log::{AppendError, Index, LogConfig};

/// Failpoints are process-global: run the scenarios one after another in one test.
#[test]
fn failpoint_scenarios() {
    let scenario = fail::FailScenario::setup();
    // Both ways a lone append's batch is synced: by the writer itself, or by the syncer.
    for inline in [true, false] {
        a_failed_sync_is_sticky_until_reopen(inline);
        for point in ["log::write", "log::sync"] {
            a_failure_loses_nothing_acknowledged(point, inline);
            a_conflict_in_a_failed_batch_is_failed(point, inline);
        }
    }
    a_stalled_writer_stops_appenders_at_the_intake_bound();
    a_lone_append_waits_for_the_batch_the_syncer_holds();
    scenario.teardown();
}

fn a_failed_sync_is_sticky_until_reopen(inline: bool) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(inline));
    assert_eq!(log.append_blocking(&put("a", 1)).unwrap(), Index::new(1));
    fail::cfg("log::sync", "return").unwrap();
    assert!(matches!(
        log.append_blocking(&put("a", 2)),
        Err(AppendError::Failed { .. })
    ));
    fail::remove("log::sync");
    // The disk "works" again, but the log must not trust its page cache: still refused.
    let err = log.append_blocking(&put("a", 3)).unwrap_err();
    assert!(
        matches!(err, AppendError::Failed { ref cause } if cause.contains("fdatasync")),
        "{err}"
    );
    assert_eq!(
        log.durable_index(),
        Index::new(1),
        "nothing past the failed sync is visible"
    );
    drop(log);
    let log = open(dir.path(), config(inline));
    let next = log.append_blocking(&put("a", 4)).unwrap();
    assert!(
        next == Index::new(2) || next == Index::new(3),
        "unknown-outcome batch at most once"
    );
}

fn a_failure_loses_nothing_acknowledged(point: &str, inline: bool) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(inline));
    let acked: Vec<Index> = (0..100)
        .map(|i| log.append_blocking(&put(&format!("k{i}"), i)).unwrap())
        .collect();
    fail::cfg(point, "return").unwrap();
    let err = log.append_blocking(&put("lost", 0)).unwrap_err();
    fail::remove(point);
    assert!(
        matches!(&err, AppendError::Failed { cause } if cause.contains("injected")),
        "{point}: {err}"
    );
    assert!(matches!(
        log.append_blocking(&put("after", 0)),
        Err(AppendError::Failed { .. })
    ));
    // Readable while failed.
    let before = log.read(Index::FIRST, usize::MAX).unwrap();
    assert_eq!(before.len(), 100, "{point}");
    drop(log);
    let log = open(dir.path(), config(inline));
    let after = log.read(Index::FIRST, usize::MAX).unwrap();
    assert!(after.len() >= 100 && after.len() <= 101, "{point}");
    assert_eq!(
        after[..100],
        before[..],
        "{point}: acknowledged records changed"
    );
    assert_eq!(acked.last().copied(), Some(Index::new(100)));
    let next = log.append_blocking(&put("again", 1)).unwrap();
    assert_eq!(next.get(), after.len() as u64 + 1, "{point}");
}

/// One submission (one batch): `x` written, then a transaction whose condition says `x` is
/// absent, a conflict against the version just staged. The batch's write or sync fails, so
/// that version never becomes durable: the conflict must not name it.
fn a_conflict_in_a_failed_batch_is_failed(point: &str, inline: bool) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(inline));
    assert_eq!(log.append_blocking(&put("warm", 0)).unwrap(), Index::new(1));
    let expects_absent = put("y", 1).condition(node("x"), Index::ZERO);
    fail::cfg(point, "return").unwrap();
    let results = futures::executor::block_on(log.append_many(&[put("x", 1), expects_absent]));
    fail::remove(point);
    for (t, r) in results.iter().enumerate() {
        assert!(
            matches!(r, Err(AppendError::Failed { .. })),
            "{point}, inline {inline}: transaction {t} of the failed batch: {r:?}"
        );
    }
    drop(log);
    let log = open(dir.path(), config(inline));
    assert!(log.read(Index::FIRST, usize::MAX).unwrap().len() <= 2);
}

/// While the syncer's fdatasync of a large batch hangs, a lone small append behind it must not
/// be synced and acknowledged by the writer on its own: the durable index would pass the
/// unsynced batch.
fn a_lone_append_waits_for_the_batch_the_syncer_holds() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), LogConfig::default());
    let first = log.append_blocking(&put("warm", 0)).unwrap();
    let by_writer = || log.stats().batches_synced_by_writer.load(Ordering::Relaxed);
    assert_eq!(by_writer(), 1, "a lone append is synced by the writer");
    // Larger than the writer syncs itself: the syncer takes it, and its sync hangs.
    let big = Transaction::single(
        node("big"),
        Value::json(format!("{{\"s\":\"{}\"}}", "x".repeat(40_000))).unwrap(),
    );
    fail::cfg("log::sync", "1*pause").unwrap();
    let small_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let big_append = s.spawn(|| log.append_blocking(&big));
        std::thread::sleep(std::time::Duration::from_millis(100));
        let small_append = s.spawn(|| {
            let r = log.append_blocking(&put("small", 1));
            small_done.store(true, Ordering::Release);
            r
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        let stuck = (
            small_done.load(Ordering::Acquire),
            log.durable_index(),
            by_writer(),
        );
        fail::remove("log::sync");
        let big_at = big_append.join().unwrap().unwrap();
        let small_at = small_append.join().unwrap().unwrap();
        assert_eq!(
            stuck,
            (false, first, 1),
            "(acknowledged, durable index, batches synced by the writer) while the syncer's \
             sync of {big_at} hung; the lone append got {small_at}"
        );
        assert!(big_at < small_at, "{big_at} then {small_at}");
        assert_eq!(log.durable_index(), small_at);
    });
}

/// Small segments; lone batches synced by the writer (`inline`) or by the syncer.
fn config(inline: bool) -> LogConfig {
    LogConfig {
        writer_syncs_when_idle: inline,
        ..small_segments()
    }
}

fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    f.poll(&mut Context::from_waker(&waker))
}

fn a_stalled_writer_stops_appenders_at_the_intake_bound() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        intake_bytes_max: spindle_log::config::TXN_FRAME_BYTES_MAX,
        ..small_segments()
    };
    let log = open(dir.path(), config.clone());
    fail::cfg("log::sync", "pause").unwrap();
    // The first append is taken by the writer, which then stalls in its sync.
    let first = put("first", 0);
    let mut stalled = Box::pin(log.append(&first));
    assert!(poll_once(stalled.as_mut()).is_pending());
    while !log.intake_is_empty() {
        std::thread::yield_now();
    }
    // Now fill the intake with ~1 MB transactions until one cannot enter.
    let json = format!("{{\"x\":\"{}\"}}", "y".repeat(1000 * 1000));
    let frame = 16 + 1 + 1 + 2 + "big00".len() + 4 + json.len();
    let big = Value::json(json).unwrap();
    let txns: Vec<Transaction> = (0..20)
        .map(|i| Transaction::single(node(&format!("big{i:02}")), big.clone()))
        .collect();
    let mut futures: Vec<_> = txns.iter().map(|t| Box::pin(log.append(t))).collect();
    for f in futures.iter_mut() {
        assert!(poll_once(f.as_mut()).is_pending());
    }
    let capacity = config.intake_bytes_max / frame;
    let queued = log.intake_queued_bytes();
    assert_eq!(
        queued,
        capacity * frame,
        "the intake stops exactly at its bound"
    );
    // Still blocked on re-poll: nothing more gets in while the writer is stalled.
    for f in futures.iter_mut() {
        assert!(poll_once(f.as_mut()).is_pending());
    }
    assert_eq!(log.intake_queued_bytes(), queued);
    fail::remove("log::sync");
    let results = futures::executor::block_on(async {
        let mut out = vec![stalled.await];
        for f in futures {
            out.push(f.await);
        }
        out
    });
    assert!(
        results.iter().all(Result::is_ok),
        "every waiting append completes: {results:?}"
    );
    assert_eq!(log.durable_index(), Index::new(21));
}
