//! The output of `spindle bench carousel`: JSON lines, or Markdown tables of the runs, the
//! riders and the targets.

use serde_json::{json, Value};

use super::{spec, Args, Data, Mode, Run, MIB};
use crate::report::print_table;

pub(super) fn print_json(a: &Args, runs: &[Run], data: &Data) {
    let with_round = |mut v: Value, round: usize| {
        if a.rounds > 1 {
            v["round"] = json!(round);
        }
        v
    };
    for run in runs {
        for (i, r) in run.rides.iter().enumerate() {
            let v = json!({
                "mode": run.mode.name(),
                "riders": run.rides.len(),
                "rider": i + 1,
                "seconds": r.seconds,
                "mib_per_s": r.mib_per_s,
            });
            println!("{}", with_round(v, run.round));
        }
        let v = json!({
            "mode": run.mode.name(),
            "riders": run.rides.len(),
            "storage_read_bytes": run.storage_read_bytes,
            "data_bytes": data.bytes,
            "server_cpu_s": run.server_cpu_s,
        });
        println!("{}", with_round(v, run.round));
    }
}

pub(super) fn print_markdown(a: &Args, runs: &[Run], data: &Data) {
    let s = spec(a);
    let ride = runs[0].rides[0];
    println!(
        "Data: {} items ({} nodes, {} edges), {} versions; table files {:.1} MiB (data_bytes \
         {}); one ride delivers {:.1} MiB in {} frames; {}.",
        a.items,
        s.nodes,
        s.edges,
        data.writes,
        data.bytes as f64 / MIB,
        data.bytes,
        ride.bytes as f64 / MIB,
        ride.frames,
        match data.build_s {
            Some(secs) => format!("built in {secs:.0}s"),
            None => "reused from an earlier --keep run".into(),
        }
    );
    println!(
        "Server: `spindle serve`, one Disk View, block cache {:.1} MiB, {}; the table files' \
         cached pages dropped (POSIX_FADV_DONTNEED) before every run.\n",
        a.block_cache_bytes as f64 / MIB,
        if a.buffered {
            "buffered reads"
        } else {
            "direct reads (O_DIRECT)"
        }
    );
    let round = |r: &Run| {
        if a.rounds > 1 {
            format!("{} {}", r.round, r.name())
        } else {
            r.name()
        }
    };
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let (slow, fast) = (r.slowest(), r.fastest());
            vec![
                round(r),
                format!("{:.2}", r.wall_s),
                format!("{:.1}", r.storage_read_bytes as f64 / MIB),
                format!("{:.2}", r.storage_read_bytes as f64 / data.bytes as f64),
                format!("{:.2}", r.server_cpu_s),
                format!("{:.1}", slow.mib_per_s),
                format!("{:.1}", fast.mib_per_s),
                format!("{:.1}", r.mib() / r.wall_s),
                format!("{:.1}", r.mib() / r.server_cpu_s),
                r.demotions.to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "run",
            "seconds",
            "storage read MiB",
            "read / data",
            "server CPU s",
            "slowest rider MiB/s",
            "fastest rider MiB/s",
            "aggregate MiB/s",
            "MiB per server CPU-s",
            "demotions",
        ],
        &rows,
    );
    println!();
    let rows: Vec<Vec<String>> = runs
        .iter()
        .flat_map(|run| {
            run.rides.iter().enumerate().map(move |(i, r)| {
                vec![
                    round(run),
                    (i + 1).to_string(),
                    format!("{:.2}", r.seconds),
                    format!("{:.1}", r.mib_per_s),
                ]
            })
        })
        .collect();
    print_table(&["run", "rider", "seconds", "MiB/s"], &rows);
    println!();
    let rows: Vec<Vec<String>> = (1..=a.rounds)
        .flat_map(|round| {
            let of_round: Vec<&Run> = runs.iter().filter(|r| r.round == round).collect();
            targets(&of_round, data.bytes)
                .into_iter()
                .map(move |mut row| {
                    if a.rounds > 1 {
                        row[0] = format!("round {round}: {}", row[0]);
                    }
                    row
                })
        })
        .collect();
    print_table(&["target", "wanted", "measured", "met"], &rows);
}

/// The targets for one round's four runs.
fn targets(runs: &[&Run], data_bytes: u64) -> Vec<Vec<String>> {
    let find = |mode: Mode, many: bool| {
        *runs
            .iter()
            .find(|r| r.mode == mode && (r.rides.len() > 1) == many)
            .expect("every round has the four runs")
    };
    let (c1, cn, dn) = (
        find(Mode::Carousel, false),
        find(Mode::Carousel, true),
        find(Mode::Dedicated, true),
    );
    let n = cn.rides.len();
    let read = |r: &Run| r.storage_read_bytes as f64 / data_bytes as f64;
    let met = |ok: bool| if ok { "yes" } else { "no" }.to_owned();
    let cpu = cn.server_cpu_s / c1.server_cpu_s;
    let faster = cn.slowest().mib_per_s / dn.slowest().mib_per_s;
    let spread = cn.slowest().seconds / cn.fastest().seconds;
    let per_cpu = |r: &Run| r.mib() / r.server_cpu_s;
    vec![
        vec![
            format!("carousel, {n} riders: storage read / data"),
            "≤ 1.2".into(),
            format!("{:.2}", read(cn)),
            met(read(cn) <= 1.2),
        ],
        vec![
            format!("dedicated, {n} riders: storage read / data"),
            format!("about {n}"),
            format!("{:.2}", read(dn)),
            "reference".into(),
        ],
        vec![
            format!("server CPU, carousel: {n} riders / 1 rider"),
            "< 1.5".into(),
            format!("{cpu:.2}"),
            met(cpu < 1.5),
        ],
        vec![
            format!("slowest rider MiB/s, {n} riders: carousel / dedicated"),
            "≥ 1.5 (Beam: 186 / 108)".into(),
            format!(
                "{faster:.2} ({:.1} / {:.1})",
                cn.slowest().mib_per_s,
                dn.slowest().mib_per_s
            ),
            met(faster >= 1.5),
        ],
        vec![
            format!("carousel, {n} riders: slowest / fastest rider's seconds"),
            "≤ 1.10".into(),
            format!("{spread:.2}"),
            met(spread <= 1.10),
        ],
        vec![
            format!("MiB delivered per server CPU-s, {n} riders: carousel / dedicated"),
            "(reported)".into(),
            format!(
                "{:.2} ({:.1} / {:.1})",
                per_cpu(cn) / per_cpu(dn),
                per_cpu(cn),
                per_cpu(dn)
            ),
            "reference".into(),
        ],
    ]
}
