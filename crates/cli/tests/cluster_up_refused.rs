//! `spindle cluster up` refuses shapes that cannot work with the reason (an even number of
//! NATS servers, zero replicas, no API process, a missing nats-server), and when a member
//! fails midway it names that member with the end of its log, stops every member it had
//! started (none of their pids runs afterwards), and refuses to reuse the directory.

#![cfg(feature = "jetstream")]

#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Output};

use serde_json::Value;

fn spindle(args: &[&str], nats_server: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(args)
        .env("SPINDLE_NATS_SERVER", nats_server)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn refused(args: &[&str], nats_server: &std::path::Path, needle: &str) -> String {
    let out = spindle(args, nats_server);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} was accepted");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    stderr
}

fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s[s.rfind(')').unwrap() + 1..].split_whitespace().next();
        !matches!(state, Some("Z" | "X"))
    })
}

#[test]
fn bad_arguments_are_refused_before_anything_starts() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("c");
    let dir = dir.to_str().unwrap();
    let nats = nats_cluster::nats_server_bin();
    fn up<'a>(dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["cluster", "up", "--dir", dir, "--loopback"];
        v.extend_from_slice(extra);
        v
    }
    refused(
        &up(dir, &["--nats", "2"]),
        &nats,
        "odd number of NATS servers",
    );
    refused(&up(dir, &["--replicas", "0"]), &nats, "--replicas 0");
    refused(&up(dir, &["--api", "0"]), &nats, "--api 0");
    refused(&up(dir, &["--partitions", "0"]), &nats, "--partitions 0");
    refused(
        &up(dir, &["--subnet", "10.77.5.0/24"]),
        &nats,
        "--loopback has none",
    );
    refused(
        &up(dir, &[]),
        &root.path().join("no-such-nats-server"),
        "scripts/nats.sh",
    );
    assert!(
        !std::path::Path::new(dir).exists(),
        "nothing was created for refused arguments"
    );
    refused(
        &["cluster", "status", "--dir", dir],
        &nats,
        "holds no cluster",
    );
}

#[test]
fn a_member_failing_midway_is_named_and_the_others_are_stopped() {
    let root = tempfile::tempdir().unwrap();
    // A nats-server that refuses to run as nats-2 and is the real one otherwise.
    let wrapper = root.path().join("nats-server-but-not-nats-2");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \"$2\" in *nats-2*) echo 'refusing to start as nats-2' >&2; exit 3;; esac\nexec {:?} \"$@\"\n",
            nats_cluster::nats_server_bin()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = root.path().join("c");
    let dir = dir.to_str().unwrap();
    let stderr = refused(
        &["cluster", "up", "--dir", dir, "--loopback", "--nats", "3"],
        &wrapper,
        "member nats-2 (nats) exited before it answered",
    );
    assert!(stderr.contains("refusing to start as nats-2"), "{stderr}");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(std::path::Path::new(dir).join("cluster.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["phase"], "failed");
    let members = state["members"].as_array().unwrap();
    let started: Vec<u64> = members.iter().filter_map(|m| m["pid"].as_u64()).collect();
    assert_eq!(
        started.len(),
        3,
        "the three NATS servers were started: {state}"
    );
    for pid in started {
        assert!(!running(pid), "pid {pid} still runs");
    }
    assert!(
        members
            .iter()
            .all(|m| m["pid"].is_null() || m["role"] == "nats"),
        "no Spindle process was started"
    );
    refused(
        &["cluster", "up", "--dir", dir, "--loopback"],
        &wrapper,
        "not running",
    );
    let out = spindle(&["cluster", "down", "--dir", dir], &wrapper);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing was running"));
}
