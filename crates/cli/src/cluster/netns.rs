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

/// Whether network namespaces can be made here: root, and `ip netns add` works (a probe
/// namespace is made and removed).
pub fn usable() -> bool {
    if !is_root() {
        return false;
    }
    let probe = format!("spn-probe-{}", std::process::id());
    let made = ip_output(&["netns", "add", &probe]).is_ok();
    if made {
        let _ = ip_output(&["netns", "del", &probe]);
    }
    made
}

/// Refuse to build the network when it cannot work or would collide with what exists, and
/// choose its /24: `wanted` if given and free, else the first free one of 10.77.0.0/16.
pub fn check_free(bridge: &str, wanted: Option<[u8; 3]>) -> anyhow::Result<[u8; 3]> {
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
    let addrs = ip_output(&["-4", "-o", "addr", "show"])?;
    let routes = ip_output(&["-4", "-o", "route", "show"])?;
    match wanted {
        Some(subnet) => match subnet_user(&addrs, &routes, subnet) {
            Some(line) => bail!(
                "the subnet {}.{}.{}.0/24 is in use on this machine ({line}); choose another \
                 with --subnet, or leave --subnet out to take a free one",
                subnet[0],
                subnet[1],
                subnet[2]
            ),
            None => Ok(subnet),
        },
        None => first_free(&addrs, &routes).ok_or_else(|| {
            anyhow::anyhow!(
                "every /24 of 10.77.0.0/16 is in use on this machine; choose one with --subnet"
            )
        }),
    }
}

/// The first /24 of 10.77.0.0/16 that no `ip addr`/`ip route` line uses.
fn first_free(addrs: &str, routes: &str) -> Option<[u8; 3]> {
    (0..=255u8)
        .map(|c| [10, 77, c])
        .find(|s| subnet_user(addrs, routes, *s).is_none())
}

/// `a.b.c.d/len` (`len` 32 when absent) as the network's first address and its length.
fn parse_net(text: &str) -> Option<(u32, u8)> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a, l.parse::<u8>().ok().filter(|l| *l <= 32)?),
        None => (text, 32),
    };
    Some((u32::from(addr.parse::<Ipv4Addr>().ok()?), len))
}

/// Whether the /24 `subnet` and the network `net`/`len` share any address.
fn overlaps(subnet: [u8; 3], (net, len): (u32, u8)) -> bool {
    let base = u32::from(Ipv4Addr::new(subnet[0], subnet[1], subnet[2], 0));
    let common = len.min(24);
    let mask = if common == 0 {
        0
    } else {
        u32::MAX << (32 - common)
    };
    base & mask == net & mask
}

/// The `ip -4 -o addr`/`ip -4 -o route` line whose network shares an address with `subnet`'s
/// /24 (a larger network around it counts: its route would lose part of it), if any. The
/// default route does not count.
fn subnet_user(addrs: &str, routes: &str, subnet: [u8; 3]) -> Option<String> {
    let addr_net = |l: &str| {
        let mut words = l.split_whitespace();
        words.find(|w| *w == "inet")?;
        parse_net(words.next()?)
    };
    let route_net = |l: &str| parse_net(l.split_whitespace().next()?);
    addrs
        .lines()
        .find(|l| addr_net(l).is_some_and(|n| overlaps(subnet, n)))
        .or_else(|| {
            routes
                .lines()
                .find(|l| route_net(l).is_some_and(|n| overlaps(subnet, n)))
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// After creating `bridge`: fail if another interface holds an address in its /24 (a
/// `cluster up` running at the same time chose the same free subnet).
pub fn check_alone(bridge: &str, gateway: Ipv4Addr) -> anyhow::Result<()> {
    let o = gateway.octets();
    let addrs = ip_output(&["-4", "-o", "addr", "show"])?;
    let others: String = addrs
        .lines()
        .filter(|l| l.split_whitespace().nth(1) != Some(bridge))
        .map(|l| format!("{l}\n"))
        .collect();
    if let Some(line) = subnet_user(&others, "", [o[0], o[1], o[2]]) {
        bail!(
            "another interface took the subnet {}.{}.{}.0/24 at the same time ({line}); \
             run `spindle cluster up` again",
            o[0],
            o[1],
            o[2]
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
    let mut removed = remove_members(members)?;
    if link_exists(bridge) {
        ip(&["link", "del", bridge])?;
        removed.push(format!("bridge {bridge}"));
    }
    Ok(removed)
}

/// Remove the namespaces and veths of `members` (not the bridge).
pub fn remove_members(members: &[Member]) -> anyhow::Result<Vec<String>> {
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
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_free_subnet_skips_addresses_and_routes_in_use() {
        let addrs = "2: eth0    inet 10.77.0.5/24 brd 10.77.0.255 scope global eth0\n\
                     9: spb1    inet 10.77.2.1/24 scope global spb1\n";
        let routes = "default via 192.168.0.1 dev eth0\n10.77.1.0/24 via 192.168.0.1 dev eth0\n";
        assert_eq!(first_free(addrs, routes), Some([10, 77, 3]));
        assert_eq!(first_free("", ""), Some([10, 77, 0]));
        assert_eq!(
            subnet_user(addrs, routes, [10, 77, 2]).as_deref(),
            Some("9: spb1 inet 10.77.2.1/24 scope global spb1")
        );
        let all: String = (0..=255)
            .map(|c| format!("1: x inet 10.77.{c}.1/24\n"))
            .collect();
        assert_eq!(first_free(&all, ""), None);
    }

    #[test]
    fn a_larger_network_around_the_subnet_makes_it_used() {
        // An address in 10.77.0.0/16, or a route to 10.0.0.0/8, covers every candidate.
        let wide = "2: eth0    inet 10.77.200.5/16 brd 10.77.255.255 scope global eth0\n";
        assert_eq!(first_free(wide, ""), None);
        assert_eq!(first_free("", "10.0.0.0/8 dev tun0 scope link\n"), None);
        // A host route or a smaller network inside a /24 takes only that /24.
        assert_eq!(first_free("", "10.77.0.9 dev tun0\n"), Some([10, 77, 1]));
        assert_eq!(
            first_free("", "10.77.0.128/25 dev tun0\n"),
            Some([10, 77, 1])
        );
        // Networks elsewhere do not count.
        assert_eq!(
            first_free(
                "2: eth0 inet 172.17.0.1/16 scope global\n",
                "10.78.0.0/16 dev x\n"
            ),
            Some([10, 77, 0])
        );
    }
}
