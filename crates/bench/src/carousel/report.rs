//! The output of `spindle bench carousel`: JSON lines, or Markdown tables of the runs, the
//! riders and the targets.

use serde_json::json;

use super::{spec, Args, Data, Mode, Run, MIB};
use crate::report::{print_spreads, print_summaries, print_table, Spread, Summary, Target};

pub(super) fn print_json(a: &Args, runs: &[Run], data: &Data) -> anyhow::Result<()> {
    for run in runs {
        for (i, r) in run.rides.iter().enumerate() {
            let v = json!({
                "round": run.round,
                "mode": run.mode.name(),
                "riders": run.rides.len(),
                "rider": i + 1,
                "seconds": r.seconds,
                "mib_per_s": r.mib_per_s,
            });
            println!("{v}");
        }
        let v = json!({
            "round": run.round,
            "mode": run.mode.name(),
            "riders": run.rides.len(),
            "storage_read_bytes": run.storage_read_bytes,
            "data_bytes": data.bytes,
            "server_cpu_s": run.server_cpu_s,
            "demotions": run.demotions,
        });
        println!("{v}");
    }
    crate::report::print_json(&verdicts(a, runs, data.bytes))
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
            format!("{} {}", r.round + 1, r.name())
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
    let kinds = [
        (Mode::Carousel, false),
        (Mode::Dedicated, false),
        (Mode::Carousel, true),
        (Mode::Dedicated, true),
    ];
    let rows: Vec<(String, Vec<_>)> = kinds
        .iter()
        .filter_map(|&(mode, many)| {
            let of_kind: Vec<&Run> = runs
                .iter()
                .filter(|r| r.mode == mode && (r.rides.len() > 1) == many)
                .collect();
            let spread = |f: &dyn Fn(&Run) -> f64| {
                Spread::of(&of_kind.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            Some((
                of_kind.first()?.name(),
                vec![
                    spread(&|r| r.slowest().mib_per_s),
                    spread(&|r| r.storage_read_bytes as f64 / data.bytes as f64),
                    spread(&|r| r.server_cpu_s),
                    spread(&|r| r.wall_s),
                ],
            ))
        })
        .collect();
    print_spreads(
        "run",
        &[
            ("slowest rider MiB/s", 1),
            ("read / data", 2),
            ("server CPU s", 2),
            ("seconds", 2),
        ],
        &rows,
    );
    println!();
    print_summaries(&verdicts(a, runs, data.bytes));
}

/// One round's four runs.
struct Round<'a> {
    c1: &'a Run,
    d1: &'a Run,
    cn: &'a Run,
    dn: &'a Run,
}

fn rounds<'a>(a: &Args, runs: &'a [Run]) -> Vec<Round<'a>> {
    (0..a.rounds)
        .filter_map(|round| {
            let find = |mode: Mode, many: bool| {
                runs.iter()
                    .find(|r| r.round == round && r.mode == mode && (r.rides.len() > 1) == many)
            };
            Some(Round {
                c1: find(Mode::Carousel, false)?,
                d1: find(Mode::Dedicated, false)?,
                cn: find(Mode::Carousel, true)?,
                dn: find(Mode::Dedicated, true)?,
            })
        })
        .collect()
}

/// The targets, each judged on the median of its per-round values. Every rider
/// here reads as fast as it can and only counts, so none is slow: any demotion is one of a
/// rider that is not slow.
fn verdicts(a: &Args, runs: &[Run], data_bytes: u64) -> Vec<Summary> {
    let rounds = rounds(a, runs);
    let n = a.riders;
    let per = |f: &dyn Fn(&Round<'_>) -> f64| rounds.iter().map(f).collect::<Vec<f64>>();
    [
        Summary::judge(
            &format!("carousel, {n} riders: storage read / data"),
            &per(&|r| r.cn.storage_read_bytes as f64 / data_bytes as f64),
            Target::AtMost(1.05),
        ),
        Summary::judge(
            &format!("server CPU, carousel: {n} riders / 1 rider"),
            &per(&|r| r.cn.server_cpu_s / r.c1.server_cpu_s),
            Target::AtMost(1.4),
        ),
        Summary::judge(
            &format!("slowest rider MiB/s, {n} riders: carousel / dedicated"),
            &per(&|r| r.cn.slowest().mib_per_s / r.dn.slowest().mib_per_s),
            Target::AtLeast(2.0),
        ),
        Summary::judge(
            "one rider alone MiB/s: carousel / dedicated",
            &per(&|r| r.c1.slowest().mib_per_s / r.d1.slowest().mib_per_s),
            Target::AtLeast(0.9),
        ),
        Summary::judge(
            "carousel demotions (1 and n riders; none is slow)",
            &per(&|r| (r.c1.demotions + r.cn.demotions) as f64),
            Target::AtMost(0.0),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}
