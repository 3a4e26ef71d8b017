//! What the JetStream log requires of servers and of its stream, as pure checks over what
//! the servers report, so each refusal is tested on its own (docs/cluster.md).
//!
//! A server must be at least `SERVER_VERSION_MIN` (atomic batches with several subject
//! conditions, nats-server#8376), sync every write before acknowledging it
//! (`sync_interval: always`: the Jepsen analysis of 2.12.1 lost acknowledged writes without
//! it), accept whole records (`max_payload`) and whole transactions (`max_batch_size`).

use std::time::Duration;

use async_nats::jetstream::stream::StorageType;
use async_nats::jetstream::stream::{Config, DiscardPolicy, PersistenceMode, RetentionPolicy};
use serde_json::Value as Json;
use spindle_core::{RECORD_BYTES_MAX, TXN_RECORDS_MAX};

/// Oldest nats-server the log runs on.
pub const SERVER_VERSION_MIN: (u64, u64, u64) = (2, 14, 4);
/// Room for batch, id and condition headers on top of a record's payload.
pub const HEADER_BYTES_MAX: usize = 1024;

/// What one server's `/varz` says, once it passed the checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFacts {
    pub version: String,
    pub max_payload_bytes: usize,
    pub max_batch_records: usize,
}

/// Parse "2.15.1" (or "2.15.1-beta") into a comparable triple.
pub fn parse_version(text: &str) -> Option<(u64, u64, u64)> {
    let core = text.trim_start_matches('v').split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// Check one server's `/varz` document; the error says what is wrong in words a user can act on.
pub fn check_varz(varz: &Json) -> Result<ServerFacts, String> {
    let version = varz["version"]
        .as_str()
        .ok_or("the server's /varz has no version")?;
    let parsed = parse_version(version).ok_or_else(|| format!("unreadable version {version:?}"))?;
    if parsed < SERVER_VERSION_MIN {
        let (a, b, c) = SERVER_VERSION_MIN;
        return Err(format!(
            "nats-server {version} is older than {a}.{b}.{c} (atomic batches with several \
             subject conditions are broken before it); install the version scripts/nats.sh pins"
        ));
    }
    let js = &varz["jetstream"];
    if js["config"].is_null() {
        return Err("JetStream is not enabled on this server".to_owned());
    }
    if js["config"]["sync_always"].as_bool() != Some(true) {
        return Err(
            "the server does not sync every write before acknowledging it; set \
             `jetstream { sync_interval: always }` (with the default, acknowledged writes are \
             lost on power failure)"
                .to_owned(),
        );
    }
    let max_payload_bytes = varz["max_payload"].as_u64().unwrap_or(0) as usize;
    if max_payload_bytes < RECORD_BYTES_MAX + HEADER_BYTES_MAX {
        return Err(format!(
            "max_payload is {max_payload_bytes} bytes, below one record of {} bytes plus \
             headers; set `max_payload: 8MB`",
            RECORD_BYTES_MAX
        ));
    }
    let max_batch_records = js["limits"]["max_batch_size"].as_u64().unwrap_or(0) as usize;
    if max_batch_records < TXN_RECORDS_MAX {
        return Err(format!(
            "atomic batches are limited to {max_batch_records} messages, below a transaction's \
             {TXN_RECORDS_MAX} records; set `jetstream {{ limits {{ batch {{ max_msgs: {TXN_RECORDS_MAX} }} }} }}`"
        ));
    }
    Ok(ServerFacts {
        version: version.to_owned(),
        max_payload_bytes,
        max_batch_records,
    })
}

/// The stream the log creates when none exists.
pub fn stream_config(name: &str, subjects: &str, replicas: usize) -> Config {
    Config {
        name: name.to_owned(),
        subjects: vec![subjects.to_owned()],
        storage: StorageType::File,
        num_replicas: replicas,
        retention: RetentionPolicy::Limits,
        discard: DiscardPolicy::New,
        max_messages: -1,
        max_bytes: -1,
        max_messages_per_subject: -1,
        max_age: Duration::ZERO,
        allow_atomic_publish: true,
        allow_direct: true,
        deny_delete: true,
        ..Config::default()
    }
}

/// Check an existing stream's configuration: indexes must stay dense (nothing deletes or
/// expires messages except the log's own prefix purge), writes durable on a quorum, batches
/// atomic and direct reads allowed.
pub fn check_stream(config: &Config, subjects: &str, replicas: usize) -> Result<(), String> {
    let mut wrong = Vec::new();
    if config.storage != StorageType::File {
        wrong.push("storage must be file".to_owned());
    }
    if config.num_replicas != replicas {
        wrong.push(format!(
            "replicas are {}, the log is configured for {replicas}",
            config.num_replicas
        ));
    }
    if config.subjects != [subjects.to_owned()] {
        wrong.push(format!("subjects must be exactly [{subjects:?}]"));
    }
    if config.retention != RetentionPolicy::Limits {
        wrong.push("retention must be limits (work-queue and interest remove messages)".into());
    }
    if config.max_messages > 0
        || config.max_bytes > 0
        || config.max_messages_per_subject > 0
        || !config.max_age.is_zero()
    {
        wrong.push(
            "message, byte, per-subject and age limits must be unset (they delete records)".into(),
        );
    }
    if !config.allow_atomic_publish {
        wrong.push("allow_atomic_publish must be on (a transaction is one atomic batch)".into());
    }
    if !config.allow_direct {
        wrong.push("allow_direct must be on (reads are batched direct gets)".into());
    }
    if !config.deny_delete {
        wrong.push("deny_delete must be on (a deleted message is a hole in the log)".into());
    }
    if config.deny_purge {
        wrong.push("deny_purge must be off (prefix truncation purges)".into());
    }
    if config.allow_rollup || config.allow_message_ttl || config.sealed {
        wrong.push("rollups, message TTLs and sealing must be off".into());
    }
    if config.persist_mode == Some(PersistenceMode::Async) {
        wrong.push("persist_mode must not be async (acknowledged before stored)".into());
    }
    if config.mirror.is_some() || config.sources.as_ref().is_some_and(|s| !s.is_empty()) {
        wrong.push("the stream must not be a mirror or have sources".into());
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varz(version: &str, sync: bool, payload: u64, batch: u64) -> Json {
        serde_json::json!({
            "version": version,
            "max_payload": payload,
            "jetstream": {"config": {"sync_always": sync}, "limits": {"max_batch_size": batch}},
        })
    }

    #[test]
    fn servers_are_refused_for_each_missing_requirement() {
        assert!(check_varz(&varz("2.15.1", true, 8 << 20, 10_000)).is_ok());
        assert!(check_varz(&varz("2.14.4", true, 8 << 20, 10_000)).is_ok());
        let old = check_varz(&varz("2.12.8", true, 8 << 20, 10_000)).unwrap_err();
        assert!(old.contains("older than 2.14.4"), "{old}");
        assert!(check_varz(&varz("2.14.3", true, 8 << 20, 10_000)).is_err());
        let unsynced = check_varz(&varz("2.15.1", false, 8 << 20, 10_000)).unwrap_err();
        assert!(unsynced.contains("sync_interval: always"), "{unsynced}");
        assert!(check_varz(&varz("2.15.1", true, 1 << 20, 10_000))
            .unwrap_err()
            .contains("max_payload"));
        assert!(check_varz(&varz("2.15.1", true, 8 << 20, 1000))
            .unwrap_err()
            .contains("max_msgs"));
        let no_js = serde_json::json!({"version": "2.15.1", "max_payload": 8 << 20});
        assert!(check_varz(&no_js).unwrap_err().contains("JetStream"));
    }

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(parse_version("2.15.1"), Some((2, 15, 1)));
        assert_eq!(parse_version("v2.10.22-RC.1"), Some((2, 10, 22)));
        assert!(parse_version("2.9.10").unwrap() < parse_version("2.14.4").unwrap());
        assert_eq!(parse_version("x"), None);
    }

    #[test]
    fn the_created_stream_passes_and_each_deviation_is_named() {
        let good = stream_config("S", "spn.S.r.*", 3);
        assert_eq!(check_stream(&good, "spn.S.r.*", 3), Ok(()));
        let cases: Vec<(Config, &str)> = vec![
            (
                Config {
                    storage: StorageType::Memory,
                    ..good.clone()
                },
                "storage",
            ),
            (
                Config {
                    num_replicas: 1,
                    ..good.clone()
                },
                "replicas",
            ),
            (
                Config {
                    max_age: Duration::from_secs(60),
                    ..good.clone()
                },
                "limits",
            ),
            (
                Config {
                    max_messages: 10,
                    ..good.clone()
                },
                "limits",
            ),
            (
                Config {
                    allow_atomic_publish: false,
                    ..good.clone()
                },
                "allow_atomic_publish",
            ),
            (
                Config {
                    allow_direct: false,
                    ..good.clone()
                },
                "allow_direct",
            ),
            (
                Config {
                    deny_delete: false,
                    ..good.clone()
                },
                "deny_delete",
            ),
            (
                Config {
                    deny_purge: true,
                    ..good.clone()
                },
                "deny_purge",
            ),
            (
                Config {
                    persist_mode: Some(PersistenceMode::Async),
                    ..good.clone()
                },
                "persist_mode",
            ),
            (
                Config {
                    retention: RetentionPolicy::WorkQueue,
                    ..good.clone()
                },
                "retention",
            ),
            (
                Config {
                    subjects: vec!["other.>".into()],
                    ..good.clone()
                },
                "subjects",
            ),
        ];
        for (config, word) in cases {
            let err = check_stream(&config, "spn.S.r.*", 3).unwrap_err();
            assert!(err.contains(word), "{word}: {err}");
        }
    }
}
