//! The network of a cluster in namespaces: a Linux bridge holding the /24's first address
//! (so this host reaches every member), and per member a network namespace with a veth pair
//! whose host side is on the bridge and whose other side is the namespace's `eth0`. All of
//! it through ip(8), as root. Removal is idempotent: it removes whatever of it exists.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _};

use super::state::Member;

/// Run `ip ARGS`; the error carries ip's own message.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip(8) (package iproute2)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip_output(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip(8) (package iproute2)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Whether this process's effective uid is 0 (namespaces and bridges need root).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Refuse to build the network when it cannot work or would collide with what exists.
pub fn check_free(bridge: &str, subnet: [u8; 3]) -> anyhow::Result<()> {
    if !is_root() {
        bail!(
            "network namespaces need root (ip netns add, a bridge, veth pairs): run as root, \
             or add --loopback to run every member on 127.0.0.1"
        );
    }
    ip_output(&["netns", "list"]).context(
        "`ip netns` does not work here; add --loopback to run every member on 127.0.0.1",
    )?;
    if link_exists(bridge) {
        bail!(
            "the bridge {bridge} exists already: another cluster with this directory's tag runs \
             (stop it with `spindle cluster down`), or remove it with `ip link del {bridge}`"
        );
    }
    let prefix = format!("{}.{}.{}.", subnet[0], subnet[1], subnet[2]);
    let addrs = ip_output(&["-4", "-o", "addr", "show"])?;
    let routes = ip_output(&["-4", "-o", "route", "show"])?;
    let net = format!("{prefix}0/24");
    if let Some(line) = addrs
        .lines()
        .find(|l| l.split_whitespace().any(|w| w.starts_with(&prefix)))
        .or_else(|| routes.lines().find(|l| l.starts_with(&net)))
    {
        bail!(
            "the subnet {net} is in use on this machine ({}); choose another with --subnet",
            line.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
    Ok(())
}

/// Create the bridge with `gateway`/24 on it.
pub fn create_bridge(bridge: &str, gateway: Ipv4Addr) -> anyhow::Result<()> {
    ip(&["link", "add", bridge, "type", "bridge"])?;
    ip(&["addr", "add", &format!("{gateway}/24"), "dev", bridge])?;
    ip(&["link", "set", bridge, "up"])
}

/// Create `m`'s namespace and veth pair on `bridge`, with `m.ip`/24 on its `eth0`.
pub fn create_member(m: &Member, bridge: &str) -> anyhow::Result<()> {
    let (Some(ns), Some(veth)) = (&m.netns, &m.veth) else {
        bail!("{} has no namespace in the plan", m.name);
    };
    ip(&["netns", "add", ns])?;
    ip(&[
        "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
    ])?;
    ip(&["link", "set", veth, "master", bridge, "up"])?;
    ip(&[
        "-n",
        ns,
        "addr",
        "add",
        &format!("{}/24", m.ip),
        "dev",
        "eth0",
    ])?;
    ip(&["-n", ns, "link", "set", "eth0", "up"])?;
    ip(&["-n", ns, "link", "set", "lo", "up"])
}

/// Remove every namespace, veth and the bridge that exist; returns what was removed.
/// Deleting a namespace deletes its `eth0` and so its veth pair; a veth left over from a
/// half-made member is deleted on its own.
pub fn remove(bridge: &str, members: &[Member]) -> anyhow::Result<Vec<String>> {
    let mut removed = Vec::new();
    for m in members {
        if let Some(ns) = m.netns.as_deref().filter(|ns| netns_exists(ns)) {
            ip(&["netns", "del", ns])?;
            removed.push(format!("namespace {ns}"));
        }
        if let Some(veth) = m.veth.as_deref().filter(|v| link_exists(v)) {
            // The kernel may still be tearing down a deleted namespace's pair.
            match ip(&["link", "del", veth]) {
                Ok(()) => removed.push(format!("veth {veth}")),
                Err(_) if !link_exists(veth) => {}
                Err(e) => return Err(e),
            }
        }
    }
    if link_exists(bridge) {
        ip(&["link", "del", bridge])?;
        removed.push(format!("bridge {bridge}"));
    }
    Ok(removed)
}
