//! A node on the JetStream log registers in the stream's catalog (`<stream>_CATALOG`, see
//! `spindle_log::jetstream::catalog`): its name, role, addresses and every view's range,
//! applied and persisted index, renewed every third of `catalog_ttl_ms` so that a node that
//! dies drops out by itself. Status shows every member the catalog holds.
//!
//! Each Disk View also publishes its checksum and checkpoints (docs/cluster.md "Replica
//! checksums"): replicas of one range that differ at a common index are named in
//! `status.cluster.replica_disagreements`, and the ones in the minority there are not
//! counted as truncation replicas.

// Without the JetStream log there is no catalog to register in: only the types stay.
#![cfg_attr(not(feature = "jetstream"), allow(dead_code, unused_imports))]

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;

use crate::node::Node;
use crate::serve::Bound;

/// The node's registration, while it has one.
#[derive(Debug, Default)]
pub struct CatalogSlot {
    #[cfg(feature = "jetstream")]
    registration: Mutex<Option<(String, spindle_log::jetstream::catalog::Registration)>>,
    #[cfg(not(feature = "jetstream"))]
    registration: Mutex<Option<(String, ())>>,
}

/// Another member of the catalog, as `CatalogSlot::others` gives it.
#[derive(Clone, Debug)]
pub struct Other {
    pub name: String,
    /// Its entry missed a renewal.
    pub stale: bool,
    pub entry: serde_json::Value,
}

/// One member of the catalog in `status.cluster.catalog`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemberStatus {
    pub name: String,
    /// Seconds since the member last renewed its entry.
    pub age_s: f64,
    /// What it registered (see `Entry`), or its raw text if it is not JSON.
    pub entry: serde_json::Value,
}

/// `status.cluster`: present when the node runs on JetStream and has registered.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ClusterStatus {
    /// This node's key in the catalog.
    pub name: String,
    pub catalog: Vec<MemberStatus>,
    /// Why the last renewal or catalog read failed, while it keeps failing.
    pub catalog_error: Option<String>,
    /// Ranges whose Disk View replicas published different checksums at a common index.
    pub replica_disagreements: Vec<ReplicaDisagreement>,
}

impl ClusterStatus {
    /// Why other members' replicas are left out of truncation, for the status line.
    pub fn truncation_note(&self) -> Option<String> {
        let own = format!("{}/", self.name);
        let skipped: Vec<String> = self
            .replica_disagreements
            .iter()
            .flat_map(|d| {
                d.suspects
                    .iter()
                    .filter(|s| !s.starts_with(&own))
                    .map(move |s| format!("{s} (checksum differs at index {})", d.index))
            })
            .collect();
        (!skipped.is_empty()).then(|| format!("not counted: {}", skipped.join(", ")))
    }
}

/// Replicas of one range whose published checksums differ at a common index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ReplicaDisagreement {
    pub range: [u64; 2],
    /// The latest index at which two or more replicas of the range published a checksum
    /// (a checkpoint, or the checksum at their applied index) and they differ.
    pub index: u64,
    /// Every replica with a checksum at `index`, as `<member>/<view>`.
    pub replicas: Vec<ReplicaChecksum>,
    /// The replicas not holding the checksum most others hold there (all of them on a
    /// tie): log truncation does not count other members' suspects.
    pub suspects: Vec<String>,
}

/// One replica's checksum at a disagreement's index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ReplicaChecksum {
    pub replica: String,
    pub checksum: String,
}

/// A Disk View as a member published it, with the checksums it can be compared at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedView {
    /// `<member>/<view id>`.
    pub replica: String,
    pub range: [u64; 2],
    /// (index, checksum hex): its checkpoints and its checksum at its applied index.
    pub points: Vec<(u64, String)>,
}

/// The Disk Views of catalog entries (`(member key, entry JSON)`); entries of builds that
/// publish no checksums give views with no points.
pub fn published_views(members: &[(String, serde_json::Value)]) -> Vec<PublishedView> {
    let mut out = Vec::new();
    for (member, entry) in members {
        for v in entry["views"].as_array().into_iter().flatten() {
            let (Some(lo), Some(hi)) = (v["range"][0].as_u64(), v["range"][1].as_u64()) else {
                continue;
            };
            if v["kind"].as_str() != Some("disk") {
                continue;
            }
            let mut points: Vec<(u64, String)> = v["checkpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| Some((c["index"].as_u64()?, c["checksum"].as_str()?.to_owned())))
                .collect();
            if let (Some(i), Some(c)) = (v["applied_index"].as_u64(), v["checksum"].as_str()) {
                points.push((i, c.to_owned()));
            }
            out.push(PublishedView {
                replica: format!("{member}/{}", v["id"].as_str().unwrap_or("?")),
                range: [lo, hi],
                points,
            });
        }
    }
    out
}

/// For each range held by two or more replicas, the latest common index where their
/// checksums differ (pure: tested on its own).
pub fn disagreements(views: &[PublishedView]) -> Vec<ReplicaDisagreement> {
    use std::collections::BTreeMap;
    let mut by_range: BTreeMap<[u64; 2], Vec<&PublishedView>> = BTreeMap::new();
    for v in views {
        by_range.entry(v.range).or_default().push(v);
    }
    let mut out = Vec::new();
    for (range, replicas) in by_range {
        let mut at: BTreeMap<u64, BTreeMap<&str, &str>> = BTreeMap::new();
        for v in &replicas {
            for (index, sum) in &v.points {
                at.entry(*index).or_default().insert(&v.replica, sum);
            }
        }
        let Some((index, sums)) = at.iter().rev().find(|(_, sums)| {
            let mut distinct: Vec<&&str> = sums.values().collect();
            distinct.sort();
            distinct.dedup();
            distinct.len() > 1
        }) else {
            continue;
        };
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for sum in sums.values() {
            *votes.entry(sum).or_default() += 1;
        }
        let top = votes.values().copied().max().unwrap_or(0);
        let winners: Vec<&str> = votes
            .iter()
            .filter(|(_, n)| **n == top)
            .map(|(s, _)| *s)
            .collect();
        let majority = (winners.len() == 1).then(|| winners[0]);
        out.push(ReplicaDisagreement {
            range,
            index: *index,
            replicas: sums
                .iter()
                .map(|(r, s)| ReplicaChecksum {
                    replica: (*r).to_owned(),
                    checksum: (*s).to_owned(),
                })
                .collect(),
            suspects: sums
                .iter()
                .filter(|(_, s)| Some(**s) != majority)
                .map(|(r, _)| (*r).to_owned())
                .collect(),
        });
    }
    out
}

/// The JSON a node puts in its catalog entry.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct Entry {
    name: String,
    /// `"node"` (appends, reads, every view of its own), `"disk-view"` (some Disk Views
    /// of the shared log; reads and iteration only) or `"api"` (appends; reads through the
    /// Disk View servers).
    role: &'static str,
    http: String,
    grpc: String,
    durable_index: u64,
    /// Whether it appends (holds the stream's appender lease).
    appender: bool,
    views: Vec<EntryView>,
    /// Cuts of this process's retention holds (boots in flight): the truncation
    /// coordinator keeps the log above each (docs/cluster.md "Re-partitioning").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    holds: Vec<u64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct EntryView {
    id: String,
    kind: &'static str,
    range: [u64; 2],
    applied_index: u64,
    persisted_index: Option<u64>,
    /// Disk Views: checksum of every version held at `applied_index` (32 hex digits).
    #[serde(skip_serializing_if = "Option::is_none")]
    checksum: Option<String>,
    /// Disk Views: the latest checkpoints (index, checksum).
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoints: Option<Vec<crate::status::CheckpointStatus>>,
    /// Disk Views: why it failed its scrub; other members do not read, boot from or count
    /// it.
    #[serde(skip_serializing_if = "Option::is_none")]
    corrupt: Option<String>,
}

/// `<hostname>-<http port>`, with characters a KV key cannot hold replaced by `-`.
fn default_name(http_port: u16) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".to_owned());
    let host: String = host
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{host}-{http_port}")
}

fn entry_of(node: &Node, name: &str, bound: &Bound) -> Vec<u8> {
    let status = node.status();
    let entry = Entry {
        name: name.to_owned(),
        role: node.config.role.name(),
        http: bound.http.to_string(),
        grpc: bound.grpc.to_string(),
        durable_index: status.log.durable_index,
        appender: status.log.appender,
        holds: node.holds.active().iter().map(|h| h.cut.get()).collect(),
        views: status
            .views
            .into_iter()
            .map(|v| EntryView {
                id: v.id,
                kind: v.kind,
                range: v.range,
                applied_index: v.applied_index,
                persisted_index: v.persisted_index,
                checksum: v.checksum,
                checkpoints: v.checkpoints,
                corrupt: v.corrupt,
            })
            .collect(),
    };
    serde_json::to_vec(&entry).unwrap_or_default()
}

impl CatalogSlot {
    /// Register `node` (a node on the JetStream log; nothing on the file log). Blocks until
    /// the first entry is stored.
    pub fn join(&self, node: &Arc<Node>, bound: Bound) -> anyhow::Result<()> {
        #[cfg(feature = "jetstream")]
        if let (crate::node_log::NodeLog::JetStream(log), Some(js)) =
            (&node.log, &node.config.jetstream)
        {
            let name = js
                .node_name
                .clone()
                .unwrap_or_else(|| default_name(bound.http.port()));
            let weak: Weak<Node> = Arc::downgrade(node);
            let key = name.clone();
            let registration = log.register(
                &name,
                Duration::from_millis(js.catalog_ttl_ms),
                move || match weak.upgrade() {
                    Some(node) => entry_of(&node, &key, &bound),
                    None => Vec::new(),
                },
            )?;
            tracing::info!("registered in the catalog as {name}");
            *self.registration.lock() = Some((name, registration));
        }
        #[cfg(not(feature = "jetstream"))]
        let _ = (node, bound);
        Ok(())
    }

    /// Leave the catalog at once (the entry is deleted, not left to expire).
    pub fn leave(&self) {
        // Taken out of the slot first: `close` waits for the renewal task, and a renewal
        // builds its entry through `others`, which locks the slot (holding the lock across
        // `close` hung a disk-view server's shutdown).
        #[cfg(feature = "jetstream")]
        {
            let taken = self.registration.lock().take();
            if let Some((_, r)) = taken {
                r.close();
            }
        }
    }

    /// The Disk Views of every other member, as truncation replicas named
    /// `<member>/<view>` at their published persisted index.
    pub fn replicas(&self) -> Vec<spindle_view::truncate::Replica> {
        #[cfg(feature = "jetstream")]
        {
            let slot = self.registration.lock();
            let Some((name, r)) = slot.as_ref() else {
                return Vec::new();
            };
            let members = member_entries(r.members());
            // A replica whose checksum differs from its range's majority does not count.
            let suspects: std::collections::BTreeSet<String> =
                disagreements(&published_views(&members))
                    .into_iter()
                    .flat_map(|d| d.suspects)
                    .collect();
            let mut out = Vec::new();
            for (key, entry) in &members {
                if key == name {
                    continue;
                }
                for v in entry["views"].as_array().into_iter().flatten() {
                    let view = format!("{key}/{}", v["id"].as_str().unwrap_or("?"));
                    // Nor does one that failed its scrub.
                    if suspects.contains(&view) || v["corrupt"].is_string() {
                        continue;
                    }
                    let (Some(lo), Some(hi), Some(persisted)) = (
                        v["range"][0].as_u64(),
                        v["range"][1].as_u64(),
                        v["persisted_index"].as_u64(),
                    ) else {
                        continue;
                    };
                    let Some(range) = spindle_core::Partition::new(lo, hi) else {
                        continue;
                    };
                    out.push(spindle_view::truncate::Replica {
                        view,
                        range,
                        applied: spindle_core::Index::new(persisted),
                    });
                }
            }
            out
        }
        #[cfg(not(feature = "jetstream"))]
        Vec::new()
    }

    /// The Disk Views of other members that a boot may read from: those whose entries are
    /// renewed (not stale) and whose checksums do not disagree with their range's majority
    /// (docs/cluster.md "Replica checksums").
    pub fn boot_views(&self) -> Vec<crate::remote::RemoteView> {
        let mut views = crate::remote::remote_views(&self.others());
        let suspects = self.suspects();
        views.retain(|v| !v.stale && !suspects.contains(&v.name()));
        views
    }

    /// Replicas (`<member>/<view>`) whose checksums differ from their range's majority.
    fn suspects(&self) -> std::collections::BTreeSet<String> {
        #[cfg(feature = "jetstream")]
        {
            let slot = self.registration.lock();
            let Some((_, r)) = slot.as_ref() else {
                return Default::default();
            };
            disagreements(&published_views(&member_entries(r.members())))
                .into_iter()
                .flat_map(|d| d.suspects)
                .collect()
        }
        #[cfg(not(feature = "jetstream"))]
        Default::default()
    }

    /// The retention holds every other member published (a Disk View server booting from
    /// others), each named by its member. Stale entries count too: a member that is cut off
    /// may still be booting, and its entry ages out by itself.
    pub fn holds(&self) -> Vec<spindle_view::truncate::Hold> {
        let mut out = Vec::new();
        for m in self.others() {
            for (i, cut) in m.entry["holds"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_u64())
                .enumerate()
            {
                out.push(spindle_view::truncate::Hold {
                    id: i as u64 + 1,
                    cut: spindle_core::Index::new(cut),
                    owner: Some(m.name.clone()),
                });
            }
        }
        out
    }

    /// Put this member's entry now instead of at the next renewal (a new retention hold
    /// must reach the truncation coordinator soon). Does nothing before it has registered.
    pub fn renew_now(&self) {
        #[cfg(feature = "jetstream")]
        if let Some((_, r)) = self.registration.lock().as_ref() {
            r.renew_now();
        }
    }

    /// Whether this member has registered (and not left).
    pub fn registered(&self) -> bool {
        self.registration.lock().is_some()
    }

    /// The other members of the catalog at its last read, each with its entry (as JSON;
    /// entries that are not JSON are left out) and whether it is stale: older than half
    /// the ttl, so it missed a renewal (a member that died or is cut off by a network
    /// partition, until its entry ages out). Empty before the node has registered.
    pub fn others(&self) -> Vec<Other> {
        #[cfg(feature = "jetstream")]
        {
            let slot = self.registration.lock();
            let Some((name, r)) = slot.as_ref() else {
                return Vec::new();
            };
            let stale_after = r.ttl() / 2;
            r.members()
                .into_iter()
                .filter(|m| &m.key != name)
                .filter_map(|m| {
                    Some(Other {
                        entry: serde_json::from_slice(&m.value).ok()?,
                        stale: m.age > stale_after,
                        name: m.key,
                    })
                })
                .collect()
        }
        #[cfg(not(feature = "jetstream"))]
        Vec::new()
    }

    /// What the catalog held at its last read.
    pub fn status(&self) -> Option<ClusterStatus> {
        #[cfg(feature = "jetstream")]
        {
            let slot = self.registration.lock();
            let (name, r) = slot.as_ref()?;
            let members = r.members();
            let entries = member_entries(members.clone());
            Some(ClusterStatus {
                name: name.clone(),
                replica_disagreements: disagreements(&published_views(&entries)),
                catalog: members
                    .into_iter()
                    .map(|m| MemberStatus {
                        name: m.key,
                        age_s: m.age.as_secs_f64(),
                        entry: serde_json::from_slice(&m.value).unwrap_or_else(|_| {
                            serde_json::Value::String(
                                String::from_utf8_lossy(&m.value).into_owned(),
                            )
                        }),
                    })
                    .collect(),
                catalog_error: r.error(),
            })
        }
        #[cfg(not(feature = "jetstream"))]
        None
    }
}

/// Each member's key and entry JSON (entries that are not JSON are left out).
#[cfg(feature = "jetstream")]
fn member_entries(
    members: Vec<spindle_log::jetstream::catalog::Member>,
) -> Vec<(String, serde_json::Value)> {
    members
        .into_iter()
        .filter_map(|m| Some((m.key, serde_json::from_slice(&m.value).ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(replica: &str, range: [u64; 2], points: &[(u64, &str)]) -> PublishedView {
        PublishedView {
            replica: replica.to_owned(),
            range,
            points: points.iter().map(|(i, c)| (*i, (*c).to_owned())).collect(),
        }
    }

    #[test]
    fn agreeing_replicas_and_replicas_without_a_common_index_are_not_named() {
        let views = [
            view("a/disk-0", [0, 8], &[(1024, "x"), (2048, "y"), (2100, "z")]),
            view("b/disk-0", [0, 8], &[(1024, "x"), (2048, "y"), (2050, "w")]),
            // Same checksums as a range of its own: a different range is never compared.
            view("c/disk-1", [8, 16], &[(1024, "q")]),
            view("d/disk-0", [0, 4], &[(1024, "q")]),
            // No common index with the others of its range.
            view("e/disk-1", [8, 16], &[(3072, "r")]),
        ];
        assert_eq!(disagreements(&views), []);
    }

    #[test]
    fn the_latest_differing_common_index_names_the_minority() {
        let views = [
            view("a/disk-0", [0, 8], &[(1024, "x"), (2048, "y"), (2100, "s")]),
            view(
                "b/disk-0",
                [0, 8],
                &[(1024, "x"), (2048, "BAD"), (2100, "t")],
            ),
            view("c/disk-0", [0, 8], &[(1024, "x"), (2048, "y")]),
        ];
        let found = disagreements(&views);
        assert_eq!(found.len(), 1, "{found:?}");
        // 2100 is common to a and b only, where they differ with no majority: a tie.
        assert_eq!(found[0].index, 2100);
        assert_eq!(found[0].suspects, ["a/disk-0", "b/disk-0"]);
        // Without that index, 2048 decides: c and a outvote b.
        let views = [
            view("a/disk-0", [0, 8], &[(1024, "x"), (2048, "y")]),
            view("b/disk-0", [0, 8], &[(1024, "x"), (2048, "BAD")]),
            view("c/disk-0", [0, 8], &[(1024, "x"), (2048, "y")]),
        ];
        let found = disagreements(&views);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].index, 2048);
        assert_eq!(found[0].range, [0, 8]);
        assert_eq!(found[0].replicas.len(), 3);
        assert_eq!(found[0].suspects, ["b/disk-0"]);
    }

    #[test]
    fn published_views_read_catalog_entries() {
        let entry = serde_json::json!({
            "views": [
                {"id": "disk-0", "kind": "disk", "range": [0, 8], "applied_index": 5,
                 "checksum": "c5", "checkpoints": [{"index": 4, "checksum": "c4"}]},
                {"id": "memory", "kind": "memory", "range": [0, 8], "applied_index": 5},
                {"id": "disk-1", "kind": "disk", "range": [8, 16], "applied_index": 5},
            ]
        });
        let views = published_views(&[("m".to_owned(), entry)]);
        assert_eq!(
            views,
            [
                view("m/disk-0", [0, 8], &[(4, "c4"), (5, "c5")]),
                view("m/disk-1", [8, 16], &[]),
            ]
        );
        let cluster = ClusterStatus {
            name: "m".into(),
            catalog: Vec::new(),
            catalog_error: None,
            replica_disagreements: vec![ReplicaDisagreement {
                range: [0, 8],
                index: 4,
                replicas: Vec::new(),
                suspects: vec!["m/disk-0".into(), "o/disk-0".into()],
            }],
        };
        assert_eq!(
            cluster.truncation_note().as_deref(),
            Some("not counted: o/disk-0 (checksum differs at index 4)")
        );
    }

    #[test]
    fn default_names_are_catalog_keys() {
        let name = super::default_name(7070);
        assert!(name.ends_with("-7070"), "{name}");
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    }
}
