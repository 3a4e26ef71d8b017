//! A node on the JetStream log registers in the stream's catalog (`<stream>_CATALOG`, see
//! `spindle_log::jetstream::catalog`): its name, role, addresses and every view's range,
//! applied and persisted index, renewed every third of `catalog_ttl_ms` so that a node that
//! dies drops out by itself. Status shows every member the catalog holds.

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
    views: Vec<EntryView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct EntryView {
    id: String,
    kind: &'static str,
    range: [u64; 2],
    applied_index: u64,
    persisted_index: Option<u64>,
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
        views: status
            .views
            .into_iter()
            .map(|v| EntryView {
                id: v.id,
                kind: v.kind,
                range: v.range,
                applied_index: v.applied_index,
                persisted_index: v.persisted_index,
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
        #[cfg(feature = "jetstream")]
        if let Some((_, r)) = self.registration.lock().take() {
            r.close();
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
            let mut out = Vec::new();
            for m in r.members() {
                if &m.key == name {
                    continue;
                }
                let Ok(entry) = serde_json::from_slice::<serde_json::Value>(&m.value) else {
                    continue;
                };
                for v in entry["views"].as_array().into_iter().flatten() {
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
                        view: format!("{}/{}", m.key, v["id"].as_str().unwrap_or("?")),
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
            Some(ClusterStatus {
                name: name.clone(),
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

#[cfg(test)]
mod tests {
    #[test]
    fn default_names_are_catalog_keys() {
        let name = super::default_name(7070);
        assert!(name.ends_with("-7070"), "{name}");
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    }
}
