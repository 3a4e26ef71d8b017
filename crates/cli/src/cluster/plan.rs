//! The plan of a cluster on one machine: its members, their names, roles, addresses, config
//! files and command lines. Pure: the caller picks free ports and does every bit of I/O.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::state::{Cluster, Member, Network, Phase, Ports, STATE_FORMAT};

/// The `--role` the API processes run with: `api` appends to the stream, forwards item
/// reads to the Disk View servers and boots its Memory and Index Views from them.
pub const API_ROLE: &str = "api";
/// Whether an API process keeps Disk Views of its own, which then count as replicas for
/// truncation (an `api` server does not; a `node` would).
pub const API_HAS_DISK_VIEWS: bool = false;
/// One API process appends to a stream (it holds the appender lease); the others stand by
/// (they serve reads and take the lease over when the appender dies).
pub const API_PROCESSES_MAX: usize = 3;
/// The largest NATS cluster `up` starts (an odd number: see `check`).
pub const NATS_SERVERS_MAX: usize = 7;
/// JetStream streams have at most three replicas.
pub const STREAM_REPLICAS_MAX: usize = 3;
/// Members fit in a /24 next to the bridge's own address (.1): .2 to .251.
pub const MEMBERS_MAX: usize = 250;
/// `spindle serve` holds at most this many partitions (`disk_partitions`).
pub const PARTITIONS_MAX: u64 = spindle_core::DISK_PARTITIONS_MAX;

/// Ports inside a member's own network namespace (each member has its own address).
pub const NATS_CLIENT_PORT: u16 = 4222;
pub const NATS_MONITOR_PORT: u16 = 8222;
pub const NATS_ROUTE_PORT: u16 = 6222;
pub const SPINDLE_HTTP_PORT: u16 = 7070;
pub const SPINDLE_GRPC_PORT: u16 = 7071;

/// What `up` was asked for.
#[derive(Clone, Debug)]
pub struct Shape {
    pub nats: usize,
    pub partitions: u64,
    pub replicas: usize,
    pub api: usize,
    pub stream: String,
    /// Whether the members truncate the log once enough Disk View replicas cover it.
    pub truncate: bool,
}

/// Where the members listen.
#[derive(Clone, Debug)]
pub enum Placement {
    /// Everything on 127.0.0.1; `ports` holds `ports_needed` distinct free ports.
    Loopback { ports: Vec<u16> },
    /// One network namespace per member on a bridge; `subnet` is the /24's first three
    /// bytes, `tag` names this cluster's bridge, namespaces and veths.
    Namespaces { subnet: [u8; 3], tag: String },
}

/// The executables the members run.
#[derive(Clone, Debug)]
pub struct Programs {
    pub spindle: PathBuf,
    pub nats_server: PathBuf,
}

/// A file `up` writes before starting anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    pub path: PathBuf,
    pub text: String,
}

/// Refuse shapes that cannot work, saying why.
pub fn check(shape: &Shape) -> Result<(), String> {
    if shape.nats.is_multiple_of(2) || shape.nats > NATS_SERVERS_MAX {
        return Err(format!(
            "--nats {}: use an odd number of NATS servers from 1 to {NATS_SERVERS_MAX}. \
             JetStream's Raft groups need a majority: 2 servers stop when either is down \
             (no better than 1), 4 tolerate one failure like 3",
            shape.nats
        ));
    }
    if shape.partitions == 0 || shape.partitions > PARTITIONS_MAX {
        return Err(format!(
            "--partitions {}: use 1 to {PARTITIONS_MAX}",
            shape.partitions
        ));
    }
    if shape.replicas == 0 {
        return Err("--replicas 0: every partition needs at least one Disk View server".into());
    }
    if shape.api == 0 {
        return Err(
            "--api 0: at least one API process is needed (it appends to the log and \
             creates the stream)"
                .into(),
        );
    }
    if shape.api > API_PROCESSES_MAX {
        return Err(format!(
            "--api {}: one API process appends and the others stand by; use at most \
             --api {API_PROCESSES_MAX}",
            shape.api
        ));
    }
    // Bounded first, so the count below cannot wrap.
    if shape.replicas > MEMBERS_MAX {
        return Err(format!(
            "--replicas {}: a cluster holds at most {MEMBERS_MAX} members",
            shape.replicas
        ));
    }
    let members = member_count(shape);
    if members > MEMBERS_MAX {
        return Err(format!(
            "{members} members (nats + partitions × replicas + api) do not fit in one /24; \
             at most {MEMBERS_MAX}"
        ));
    }
    if shape.stream.is_empty()
        || !shape
            .stream
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "--stream {:?}: use ASCII letters, digits, '-' and '_'",
            shape.stream
        ));
    }
    Ok(())
}

pub fn member_count(shape: &Shape) -> usize {
    shape.nats + shape.partitions as usize * shape.replicas + shape.api
}

/// Free ports a loopback cluster needs: three per NATS server, two per Spindle process.
pub fn ports_needed(shape: &Shape) -> usize {
    3 * shape.nats + 2 * (member_count(shape) - shape.nats)
}

/// The stream's replica count: every NATS server, at most three.
pub fn stream_replicas(shape: &Shape) -> usize {
    shape.nats.min(STREAM_REPLICAS_MAX)
}

/// Copies of each hash range that must have persisted a prefix before the API purges it:
/// all of them (the Disk View servers', and the API's own), so that a member that is down
/// can always catch up from the stream when it comes back.
pub fn truncate_replicas_min(shape: &Shape) -> usize {
    shape.replicas + usize::from(API_HAS_DISK_VIEWS)
}

/// A name → this cluster's short tag (4 hex digits of FNV-1a over the directory's path),
/// so that two clusters' bridges and namespaces have different names.
pub fn tag_of(dir: &Path) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in dir.as_os_str().as_encoded_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{:04x}", (h ^ (h >> 16)) & 0xffff)
}

/// `A.B.C.0/24` → `[A, B, C]`.
pub fn parse_subnet(s: &str) -> Result<[u8; 3], String> {
    let bad = || format!("--subnet {s:?} must be a /24 written A.B.C.0/24, e.g. 10.77.0.0/24");
    let (addr, len) = s.split_once('/').ok_or_else(bad)?;
    let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
    let o = addr.octets();
    if len != "24" || o[3] != 0 {
        return Err(bad());
    }
    Ok([o[0], o[1], o[2]])
}

/// The whole cluster: members with addresses and command lines, and the files to write.
pub fn plan(
    dir: &Path,
    shape: &Shape,
    placement: &Placement,
    programs: &Programs,
) -> (Cluster, Vec<File>) {
    let mut names: Vec<(String, Option<u64>)> = Vec::new();
    names.extend((0..shape.nats).map(|i| (format!("nats-{i}"), None)));
    for p in 0..shape.partitions {
        names.extend((0..shape.replicas).map(|r| (format!("dv-{p}-r{r}"), Some(p))));
    }
    names.extend((0..shape.api).map(|i| (format!("api-{i}"), None)));

    let mut free = match placement {
        Placement::Loopback { ports } => ports.clone(),
        Placement::Namespaces { .. } => Vec::new(),
    }
    .into_iter();
    let mut members = Vec::new();
    for (k, (name, partition)) in names.into_iter().enumerate() {
        let is_nats = k < shape.nats;
        let (ip, netns, veth) = match placement {
            Placement::Loopback { .. } => (Ipv4Addr::LOCALHOST, None, None),
            Placement::Namespaces { subnet, tag } => (
                Ipv4Addr::new(subnet[0], subnet[1], subnet[2], 2 + k as u8),
                Some(format!("spn{tag}-{name}")),
                Some(format!("spv{tag}{k}")),
            ),
        };
        let mut port = |fixed: u16| match placement {
            Placement::Loopback { .. } => free.next().expect("ports_needed ports given"),
            Placement::Namespaces { .. } => fixed,
        };
        let ports = if is_nats {
            Ports::Nats {
                client: port(NATS_CLIENT_PORT),
                monitor: port(NATS_MONITOR_PORT),
                route: port(NATS_ROUTE_PORT),
            }
        } else {
            Ports::Spindle {
                http: port(SPINDLE_HTTP_PORT),
                grpc: port(SPINDLE_GRPC_PORT),
            }
        };
        let role = match (is_nats, partition) {
            (true, _) => "nats",
            (false, Some(_)) => "disk-view",
            (false, None) => API_ROLE,
        };
        members.push(Member {
            name: name.clone(),
            role: role.to_owned(),
            partition,
            partitions: None,
            ip,
            ports,
            netns,
            veth,
            program: PathBuf::new(),
            args: Vec::new(),
            dir: dir.join(&name),
            log: dir.join(format!("{name}.log")),
            pid: None,
            start_ticks: None,
        });
    }

    let servers: Vec<String> = members.iter().filter_map(Member::nats_client_url).collect();
    let monitors: Vec<String> = members.iter().filter_map(Member::monitor_url).collect();
    let routes: Vec<String> = members.iter().filter_map(Member::route_url).collect();
    let mut files = Vec::new();
    for m in &mut members {
        match m.ports {
            Ports::Nats {
                client,
                monitor,
                route,
            } => {
                let conf = m.dir.join("nats.conf");
                files.push(File {
                    path: conf.clone(),
                    text: nats_conf(m, client, monitor, route, &routes),
                });
                m.program = programs.nats_server.clone();
                m.args = vec!["-c".into(), conf.display().to_string()];
            }
            Ports::Spindle { http, grpc } => {
                let conf = m.dir.join("spindle.toml");
                files.push(File {
                    path: conf.clone(),
                    text: spindle_conf(shape, &m.name, &servers, &monitors),
                });
                m.program = programs.spindle.clone();
                m.args = spindle_args(shape.partitions, m, &conf, http, grpc);
            }
        }
    }
    let network = match placement {
        Placement::Loopback { .. } => Network::Loopback,
        Placement::Namespaces { subnet, tag } => Network::Namespaces {
            bridge: format!("spb{tag}"),
            gateway: Ipv4Addr::new(subnet[0], subnet[1], subnet[2], 1),
        },
    };
    let cluster = Cluster {
        format: STATE_FORMAT,
        dir: dir.to_owned(),
        phase: Phase::Starting,
        network,
        stream: shape.stream.clone(),
        nats: shape.nats,
        partitions: shape.partitions,
        replicas: shape.replicas,
        api: shape.api,
        members,
    };
    (cluster, files)
}

/// The names of the Disk View servers `add` would start: `dvN-J-rR`.
fn added_names(partitions: u64, replicas: usize) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for j in 0..partitions {
        out.extend((0..replicas).map(|r| (format!("dv{partitions}-{j}-r{r}"), j)));
    }
    out
}

/// Refuse an `add` that cannot work, saying why; the number of servers it starts.
pub fn check_add(cluster: &Cluster, partitions: u64, replicas: usize) -> Result<usize, String> {
    if partitions == 0 || partitions > PARTITIONS_MAX {
        return Err(format!(
            "--partitions {partitions}: use 1 to {PARTITIONS_MAX}"
        ));
    }
    if replicas == 0 {
        return Err("--replicas 0: a set needs at least one Disk View server per partition".into());
    }
    // Counted before any name is made (partitions ≤ PARTITIONS_MAX, so this cannot wrap).
    if replicas > MEMBERS_MAX || partitions as usize * replicas > MEMBERS_MAX {
        return Err(format!(
            "--partitions {partitions} × --replicas {replicas}: a cluster holds at most \
             {MEMBERS_MAX} members"
        ));
    }
    let names = added_names(partitions, replicas);
    if let Some((taken, _)) = names
        .iter()
        .find(|(n, _)| cluster.members.iter().any(|m| &m.name == n))
    {
        return Err(format!(
            "{taken} exists already: a {partitions}-way set was added before (retire it first)"
        ));
    }
    if !cluster.members.iter().any(|m| m.partition.is_some()) {
        return Err("the cluster has no Disk View server to boot a new set from".into());
    }
    if let Network::Namespaces { .. } = cluster.network {
        let next = next_slot(cluster);
        if next + names.len() > MEMBERS_MAX {
            return Err(format!(
                "{} more members do not fit in the cluster's /24 (addresses .2 to .{})",
                names.len(),
                MEMBERS_MAX + 1
            ));
        }
    }
    Ok(names.len())
}

/// The first member slot (address .(k+2), veth `spvTAGk`) no member used.
fn next_slot(cluster: &Cluster) -> usize {
    cluster
        .members
        .iter()
        .map(|m| usize::from(m.ip.octets()[3]).saturating_sub(1))
        .max()
        .unwrap_or(0)
}

/// Add a `partitions`-way set of `replicas` Disk View servers to `cluster` (configs
/// written, processes not started); `ports`: 2 free ports per server on loopback. Their
/// names.
pub fn add(
    cluster: &mut Cluster,
    partitions: u64,
    replicas: usize,
    ports: &[u16],
) -> anyhow::Result<Vec<String>> {
    let template = cluster
        .members
        .iter()
        .find(|m| m.partition.is_some())
        .ok_or_else(|| anyhow::anyhow!("no Disk View server to copy the configuration of"))?
        .clone();
    let conf_text = std::fs::read_to_string(template.dir.join("spindle.toml"))?;
    let mut free = ports.iter().copied();
    let mut slot = next_slot(cluster);
    let mut names = Vec::new();
    for (name, j) in added_names(partitions, replicas) {
        let (ip, netns, veth) = match &cluster.network {
            Network::Loopback => (Ipv4Addr::LOCALHOST, None, None),
            Network::Namespaces { bridge, gateway } => {
                let tag = bridge.trim_start_matches("spb");
                let o = gateway.octets();
                let ip = Ipv4Addr::new(o[0], o[1], o[2], 2 + slot as u8);
                slot += 1;
                (
                    ip,
                    Some(format!("spn{tag}-{name}")),
                    Some(format!("spv{tag}{}", slot - 1)),
                )
            }
        };
        let (http, grpc) = match cluster.network {
            Network::Loopback => (
                free.next().expect("2 ports per server"),
                free.next().expect("2 ports per server"),
            ),
            Network::Namespaces { .. } => (SPINDLE_HTTP_PORT, SPINDLE_GRPC_PORT),
        };
        let dir = cluster.dir.join(&name);
        let mut m = Member {
            name: name.clone(),
            role: "disk-view".into(),
            partition: Some(j),
            partitions: Some(partitions),
            ip,
            ports: Ports::Spindle { http, grpc },
            netns,
            veth,
            program: template.program.clone(),
            args: Vec::new(),
            log: cluster.dir.join(format!("{name}.log")),
            dir,
            pid: None,
            start_ticks: None,
        };
        let conf = m.dir.join("spindle.toml");
        std::fs::create_dir_all(&m.dir)?;
        std::fs::write(&conf, renamed_conf(&conf_text, &name))?;
        m.args = spindle_args(partitions, &m, &conf, http, grpc);
        cluster.members.push(m);
        names.push(name);
    }
    Ok(names)
}

/// A member's config with its `node_name` (its catalog key) set to `name`.
fn renamed_conf(text: &str, name: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("node_name") {
                format!("node_name = {name:?}")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Refuse a `retire` of anything but Disk View servers of the cluster, or one that would
/// leave part of the hash space without a Disk View server.
pub fn check_retire(cluster: &Cluster, names: &[String]) -> Result<(), String> {
    for n in names {
        match cluster.members.iter().find(|m| &m.name == n) {
            None => return Err(format!("no member {n} in the cluster")),
            Some(m) if m.partition.is_none() => {
                return Err(format!(
                    "{n} is {} {}: `retire` stops Disk View servers only",
                    if m.role.starts_with(['a', 'e', 'i', 'o', 'u']) {
                        "an"
                    } else {
                        "a"
                    },
                    m.role
                ))
            }
            Some(_) => {}
        }
    }
    let ranges: Vec<spindle_core::Partition> = cluster
        .members
        .iter()
        .filter(|m| !names.contains(&m.name))
        .filter_map(|m| {
            let p = m.partition?;
            Some(spindle_core::Partition::nth(
                p,
                m.partitions.unwrap_or(cluster.partitions),
            ))
        })
        .collect();
    let mut cuts: Vec<u64> = vec![0, spindle_core::partition::HASH_SPACE];
    for r in &ranges {
        cuts.extend([r.lo(), r.hi()]);
    }
    cuts.sort_unstable();
    cuts.dedup();
    for w in cuts.windows(2) {
        let piece = spindle_core::Partition::new(w[0], w[1]).expect("distinct sorted cuts");
        if !ranges.iter().any(|r| r.covers(piece)) {
            return Err(format!(
                "retiring {} would leave hash range [{:#x}, {:#x}) with no Disk View server \
                 (add a set that covers it first: `spindle cluster add`)",
                names.join(", "),
                w[0],
                w[1]
            ));
        }
    }
    Ok(())
}

fn nats_conf(m: &Member, client: u16, monitor: u16, route: u16, routes: &[String]) -> String {
    let ip = m.ip;
    // `sync_interval: always`: the JetStream log refuses servers that acknowledge writes
    // before they are on disk; 8 MB payloads and 10,000-message batches: one transaction.
    let mut text = format!(
        "server_name: {name}\nlisten: {ip}:{client}\nhttp: {ip}:{monitor}\nmax_payload: 8MB\n\
         jetstream {{\n  store_dir: {store:?}\n  sync_interval: always\n  \
         limits {{\n    batch {{ max_msgs: 10000 }}\n  }}\n}}\n",
        name = m.name,
        store = m.dir.join("jetstream").display().to_string(),
    );
    if routes.len() > 1 {
        text.push_str(&format!(
            "cluster {{\n  name: spindle\n  listen: {ip}:{route}\n  routes: [\n{}\n  ]\n}}\n",
            routes
                .iter()
                .map(|r| format!("    {r}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    text
}

fn spindle_conf(shape: &Shape, name: &str, servers: &[String], monitors: &[String]) -> String {
    let list = |v: &[String]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "# Every client reaches a cluster on one machine from the host's one address.\n\
         connections_per_source_max = 1000000\n\
         truncate = {}\ntruncate_replicas_min = {}\n\n[jetstream]\nservers = [{}]\nmonitor_urls = [{}]\n\
         stream = {:?}\nreplicas = {}\nnode_name = {name:?}\n",
        shape.truncate,
        truncate_replicas_min(shape),
        list(servers),
        list(monitors),
        shape.stream,
        stream_replicas(shape),
    )
}

fn spindle_args(partitions: u64, m: &Member, conf: &Path, http: u16, grpc: u16) -> Vec<String> {
    let partitions = m.partitions.unwrap_or(partitions);
    let mut args = vec![
        "serve".to_owned(),
        "--config".to_owned(),
        conf.display().to_string(),
        "--data-dir".to_owned(),
        m.dir.join("data").display().to_string(),
        "--http-listen".to_owned(),
        format!("{}:{http}", m.ip),
        "--grpc-listen".to_owned(),
        format!("{}:{grpc}", m.ip),
        "--role".to_owned(),
        m.role.clone(),
    ];
    match m.partition {
        Some(p) => args.extend(["--partition".to_owned(), format!("{p}/{partitions}")]),
        None => args.extend(["--disk-partitions".to_owned(), partitions.to_string()]),
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(nats: usize, partitions: u64, replicas: usize, api: usize) -> Shape {
        Shape {
            nats,
            partitions,
            replicas,
            api,
            stream: "SPINDLE".into(),
            truncate: true,
        }
    }

    fn programs() -> Programs {
        Programs {
            spindle: "/bin/spindle".into(),
            nats_server: "/bin/nats-server".into(),
        }
    }

    #[test]
    fn bad_shapes_are_refused_with_the_reason() {
        for (s, needle) in [
            (shape(2, 4, 2, 1), "odd number"),
            (shape(0, 4, 2, 1), "odd number"),
            (shape(9, 4, 2, 1), "odd number"),
            (shape(3, 0, 2, 1), "--partitions 0"),
            (shape(3, 4, 0, 1), "--replicas 0"),
            (shape(3, 4, 2, 0), "--api 0"),
            (shape(3, 256, 2, 1), "do not fit"),
            (shape(3, 4, usize::MAX, 1), "--replicas"),
            (shape(3, 256, usize::MAX / 128, 1), "--replicas"),
        ] {
            let e = check(&s).unwrap_err();
            assert!(e.contains(needle), "{s:?}: {e}");
        }
        assert!(check(&shape(3, 4, 2, 4)).unwrap_err().contains("--api 4"));
        check(&shape(3, 4, 2, 2)).unwrap();
        let mut s = shape(3, 4, 2, 1);
        s.stream = "a.b".into();
        assert!(check(&s).is_err());
        for ok in [shape(1, 1, 1, 1), shape(3, 4, 2, 1), shape(7, 8, 3, 1)] {
            check(&ok).unwrap();
        }
    }

    #[test]
    fn namespaces_give_each_member_its_address_and_fixed_ports() {
        let s = shape(3, 2, 2, 1);
        let placement = Placement::Namespaces {
            subnet: [10, 77, 0],
            tag: "abcd".into(),
        };
        let (c, files) = plan(Path::new("/c"), &s, &placement, &programs());
        let names: Vec<&str> = c.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            ["nats-0", "nats-1", "nats-2", "dv-0-r0", "dv-0-r1", "dv-1-r0", "dv-1-r1", "api-0"]
        );
        for (k, m) in c.members.iter().enumerate() {
            assert_eq!(m.ip, Ipv4Addr::new(10, 77, 0, 2 + k as u8));
            assert_eq!(m.netns.as_deref(), Some(&*format!("spnabcd-{}", m.name)));
            assert!(m.veth.as_ref().unwrap().len() <= 15);
        }
        let api = &c.members[7];
        assert_eq!(api.role, API_ROLE);
        assert!(api
            .args
            .windows(2)
            .any(|w| w == ["--http-listen", "10.77.0.9:7070"]));
        let dv = &c.members[5];
        assert!(dv.args.windows(2).any(|w| w == ["--partition", "1/2"]));
        assert!(dv.args.windows(2).any(|w| w == ["--role", "disk-view"]));
        match &c.network {
            Network::Namespaces { bridge, gateway } => {
                assert_eq!(bridge, "spbabcd");
                assert_eq!(*gateway, Ipv4Addr::new(10, 77, 0, 1));
            }
            Network::Loopback => panic!("namespaces planned"),
        }
        let nats0 = &files[0].text;
        assert!(nats0.contains("sync_interval: always"), "{nats0}");
        assert!(nats0.contains("listen: 10.77.0.2:4222"), "{nats0}");
        for i in 2..5 {
            assert!(
                nats0.contains(&format!("nats://10.77.0.{i}:6222")),
                "{nats0}"
            );
        }
        let dv_conf = files
            .iter()
            .find(|f| f.path.ends_with("dv-1-r1/spindle.toml"));
        let dv_conf = &dv_conf.unwrap().text;
        assert!(dv_conf.contains("node_name = \"dv-1-r1\""), "{dv_conf}");
        assert!(dv_conf.contains("replicas = 3"), "{dv_conf}");
        assert!(
            dv_conf.contains("\"http://10.77.0.4:8222\"]"),
            "every monitor URL: {dv_conf}"
        );
    }

    #[test]
    fn loopback_uses_the_given_ports_once_each_and_one_server_has_no_routes() {
        let s = shape(1, 2, 1, 1);
        let ports: Vec<u16> = (5000..5000 + ports_needed(&s) as u16).collect();
        let placement = Placement::Loopback {
            ports: ports.clone(),
        };
        let (c, files) = plan(Path::new("/c"), &s, &placement, &programs());
        let mut used = Vec::new();
        for m in &c.members {
            assert_eq!(m.ip, Ipv4Addr::LOCALHOST);
            assert!(m.netns.is_none());
            match m.ports {
                Ports::Nats {
                    client,
                    monitor,
                    route,
                } => used.extend([client, monitor, route]),
                Ports::Spindle { http, grpc } => used.extend([http, grpc]),
            }
        }
        assert_eq!(used, ports);
        assert!(!files[0].text.contains("cluster {"), "{}", files[0].text);
        assert!(files[1].text.contains("replicas = 1"), "{}", files[1].text);
    }

    #[test]
    fn subnets_parse_only_as_a_slash_24() {
        assert_eq!(parse_subnet("10.77.0.0/24"), Ok([10, 77, 0]));
        for bad in ["10.77.0.0", "10.77.0.1/24", "10.77.0.0/16", "x/24"] {
            assert!(parse_subnet(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn truncation_waits_for_every_copy() {
        let s = shape(3, 4, 2, 1);
        assert_eq!(
            truncate_replicas_min(&s),
            2 + usize::from(API_HAS_DISK_VIEWS)
        );
        assert_eq!(stream_replicas(&shape(5, 1, 1, 1)), 3);
        assert_eq!(stream_replicas(&shape(1, 1, 1, 1)), 1);
        assert_ne!(tag_of(Path::new("/a")), tag_of(Path::new("/b")));
    }

    #[test]
    fn no_truncate_reaches_every_spindle_config() {
        let mut s = shape(3, 2, 1, 1);
        let conf =
            |s: &Shape| spindle_conf(s, "dv-0-r0", &["nats://a".into()], &["http://a".into()]);
        let dir = tempfile::tempdir().unwrap();
        let parsed = |text: String| {
            let path = dir.path().join("spindle.toml");
            std::fs::write(&path, text).unwrap();
            spindle_server::ServerConfig::from_file(&path).unwrap()
        };
        assert!(parsed(conf(&s)).truncate);
        s.truncate = false;
        assert!(!parsed(conf(&s)).truncate);
    }
}
