//! `spindle bench ring`: one producer multicasting 64-byte events to K consumers, through
//! Spindle's ring and its peers, in one run on the same machine. What each system does per
//! event:
//!
//! - `spindle`: the producer claims up to `--batch` slots at once and writes the events in
//!   place; each consumer reads the published batch in place (no copy, one wake-up per
//!   batch). Blocking wait strategy: spin briefly, yield a few times, then park.
//! - `crossbeam-channel`: one bounded channel per consumer; every event is sent K times,
//!   one `send` (and one `recv`) per event per consumer, each a 64-byte copy.
//! - `crossbeam-batched`: one bounded channel per consumer carrying `Arc<Vec<Event>>`
//!   messages of `--batch` events, each batch built once and shared by the K consumers: one
//!   `send`/`recv` per batch per consumer and no per-consumer copy (the stronger peer). The
//!   channels hold `--capacity / --batch` messages, so as many events are in flight as in
//!   the ring.
//! - `disruptor`: the `disruptor` crate, `batch_publish` of `--batch` events, K handlers on
//!   threads it manages, busy-spinning (it has no blocking strategy) — on 2 cores the
//!   spinning threads take the time slices the others need.
//! - `limit`: the machine's limit for this work, nothing handed over. The producer builds
//!   every event into a ring-sized buffer of its own, lap after lap, and each consumer
//!   checks as many events read from a ring-sized buffer of its own (built beforehand, the
//!   sequence numbers continued lap after lap), all threads at once: the same work per
//!   event as the other systems with no synchronisation, so no system that hands events
//!   over between threads can beat it. Its checksum is that of the consumers' own buffers.
//!
//! Every consumer checks that it saw every event once, in order, and the checksums must
//! agree, so a system cannot win by dropping work. CPU time is the process's user+system
//! time from `/proc/self/stat`, so it counts every thread of the system being measured
//! (the systems run one after another).
//!
//! `--rounds` repeats the measurements; within each consumer count the systems run in an
//! order rotated every round, and the targets are judged on the median of the per-round
//! ratios.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use anyhow::{ensure, Context};
use serde::Serialize;
use spindle_ring::{RingBuilder, WaitStrategy};

use crate::report::{
    per_round, print_rounds_json, print_spreads, print_summaries, round_order, spread_of, Summary,
    Target,
};

const SYSTEMS: [&str; 5] = [
    "spindle",
    "crossbeam-channel",
    "crossbeam-batched",
    "disruptor",
    "limit",
];

/// Options of `spindle bench ring`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Events the producer publishes per measurement.
    #[arg(long, default_value_t = 50_000_000)]
    pub events: u64,
    /// Ring (and channel) capacity in events; a power of two.
    #[arg(long, default_value_t = 16_384)]
    pub capacity: usize,
    /// Events per batch: Spindle's and disruptor's claims, `crossbeam-batched`'s messages
    /// (`crossbeam-channel` sends one by one).
    #[arg(long, default_value_t = 256)]
    pub batch: u64,
    /// Consumer counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub consumers: Vec<usize>,
    /// Systems to measure, comma-separated (spindle, crossbeam-channel, crossbeam-batched,
    /// disruptor, limit).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "spindle,crossbeam-channel,crossbeam-batched,disruptor,limit"
    )]
    pub systems: Vec<String>,
    /// Rounds: every system runs once per round and consumer count, in an order rotated each
    /// round; targets are judged on the median of the per-round ratios.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Print one JSON object per measurement (with its `round`), then one per target
    /// (`"summary": true`).
    #[arg(long)]
    pub json: bool,
}

/// A 64-byte event: a sequence number and a payload derived from it.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct Event {
    seq: u64,
    payload: [u64; 7],
}

const _: () = assert!(std::mem::size_of::<Event>() == 64);

impl Event {
    fn new(seq: u64) -> Self {
        let mut payload = [0; 7];
        for (i, word) in payload.iter_mut().enumerate() {
            *word = seq
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(i as u32 * 9);
        }
        Self { seq, payload }
    }
}

/// A consumer's running check: every event once and in order, and a checksum of the payload.
#[derive(Debug, Default, Clone, Copy)]
struct Check {
    next: u64,
    sum: u64,
}

impl Check {
    #[inline]
    fn see(&mut self, event: &Event) {
        self.see_shifted(event, 0);
    }

    /// `see` of an event whose sequence number is `shift` more than the one it carries.
    #[inline]
    fn see_shifted(&mut self, event: &Event, shift: u64) {
        let seq = event.seq + shift;
        assert_eq!(seq, self.next, "event out of order or lost");
        self.next += 1;
        self.sum = self.sum.wrapping_add(event.payload[seq as usize % 7]);
    }
}

#[derive(Debug, Serialize)]
struct Row {
    system: String,
    consumers: usize,
    events: u64,
    seconds: f64,
    events_per_s: f64,
    events_per_cpu_s: f64,
    threads: usize,
    cpu_seconds: f64,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    ensure!(
        args.capacity.is_power_of_two(),
        "--capacity must be a power of two, got {}",
        args.capacity
    );
    ensure!(args.events > 0, "--events must be at least 1");
    ensure!(args.rounds > 0, "--rounds must be > 0");
    for system in &args.systems {
        ensure!(
            SYSTEMS.contains(&system.as_str()),
            "unknown system {system:?}; known: {}",
            SYSTEMS.join(", ")
        );
    }
    for &k in &args.consumers {
        ensure!(k >= 1, "--consumers values must be at least 1");
    }
    let batch = args.batch.clamp(1, args.capacity as u64);
    let expected = expected_sum(args.events);
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        let mut rows = Vec::new();
        for &k in &args.consumers {
            for system in round_order(&args.systems, round) {
                eprintln!(
                    "bench ring: round {}/{}: {system}, {k} consumers ...",
                    round + 1,
                    args.rounds
                );
                rows.push(measure(args, &system, k, batch, expected)?);
            }
        }
        rounds.push(rows);
    }
    let summaries = verdicts(&args.consumers, &rounds);
    if args.json {
        return print_rounds_json(&rounds, &summaries);
    }
    print_markdown(&args.systems, &args.consumers, &rounds);
    println!();
    print_summaries(&summaries);
    Ok(())
}

/// One system with `k` consumers, checked.
fn measure(args: &Args, system: &str, k: usize, batch: u64, expected: u64) -> anyhow::Result<Row> {
    let expected = if system == "limit" {
        limit_sum(args.events, args.capacity)
    } else {
        expected
    };
    let cpu_before = process_cpu_seconds()?;
    let started = Instant::now();
    let sums = match system {
        "spindle" => run_spindle(args.events, k, args.capacity, batch)?,
        "crossbeam-channel" => run_crossbeam(args.events, k, args.capacity),
        "crossbeam-batched" => run_crossbeam_batched(args.events, k, args.capacity, batch),
        "disruptor" => run_disruptor(args.events, k, args.capacity, batch as usize),
        "limit" => run_limit(args.events, k, args.capacity),
        other => anyhow::bail!("unknown system {other:?}"),
    };
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = process_cpu_seconds()? - cpu_before;
    ensure!(
        sums.len() == k && sums.iter().all(|&s| s == expected),
        "{system} with {k} consumers: wrong checksums {sums:?}, expected {expected}"
    );
    Ok(Row {
        system: system.to_owned(),
        consumers: k,
        events: args.events,
        seconds,
        events_per_s: args.events as f64 / seconds,
        events_per_cpu_s: args.events as f64 / cpu_seconds.max(0.01),
        threads: 1 + k,
        cpu_seconds,
    })
}

fn find<'a>(rows: &'a [Row], system: &str, k: usize) -> Option<&'a Row> {
    rows.iter().find(|r| r.system == system && r.consumers == k)
}

/// The targets: with 4 (or more) consumers at least 3x both crossbeam peers, with fewer at
/// least equal to them; within 20% of the disruptor crate or faster.
fn verdicts(consumers: &[usize], rounds: &[Vec<Row>]) -> Vec<Summary> {
    let mut out = Vec::new();
    for &k in consumers {
        for (peer, bar) in [
            ("crossbeam-batched", if k >= 4 { 3.0 } else { 1.0 }),
            ("crossbeam-channel", if k >= 4 { 3.0 } else { 1.0 }),
            ("disruptor", 0.8),
        ] {
            let ratios = per_round(rounds, |rows| {
                Some(find(rows, "spindle", k)?.events_per_s / find(rows, peer, k)?.events_per_s)
            });
            out.extend(Summary::judge(
                &format!("{k} consumers: spindle / {peer} (events/s)"),
                &ratios,
                Target::AtLeast(bar),
            ));
        }
        // How far above the stronger peer the machine allows any ring to be: below the
        // bar, the target against that peer is out of reach on this machine.
        let bar = if k >= 4 { 3.0 } else { 1.0 };
        let ceiling = per_round(rounds, |rows| {
            Some(
                find(rows, "limit", k)?.events_per_s
                    / find(rows, "crossbeam-batched", k)?.events_per_s,
            )
        });
        out.extend(Summary::judge(
            &format!("{k} consumers: limit / crossbeam-batched (events/s; the ceiling of spindle's ratio)"),
            &ceiling,
            Target::AtLeast(bar),
        ));
    }
    out
}

/// The checksum of a consumer of `limit`: a ring-sized buffer read lap after lap.
fn limit_sum(events: u64, capacity: usize) -> u64 {
    let buf: Vec<Event> = (0..capacity as u64).map(Event::new).collect();
    let mut check = Check::default();
    check_laps(&buf, events, &mut check);
    check.sum
}

/// Check `events` events read from `buf` lap after lap, the sequence numbers continued.
fn check_laps(buf: &[Event], events: u64, check: &mut Check) {
    let mut seen = 0;
    while seen < events {
        let n = (events - seen).min(buf.len() as u64) as usize;
        for event in &buf[..n] {
            check.see_shifted(event, seen);
        }
        seen += n as u64;
    }
}

fn expected_sum(events: u64) -> u64 {
    let mut check = Check::default();
    (0..events).for_each(|s| check.see(&Event::new(s)));
    check.sum
}

fn print_markdown(systems: &[String], consumers: &[usize], rounds: &[Vec<Row>]) {
    let rows: Vec<(String, Vec<_>)> = consumers
        .iter()
        .flat_map(|&k| {
            systems.iter().map(move |system| {
                let spread =
                    |f: fn(&Row) -> f64| spread_of(rounds, |rows| find(rows, system, k), f);
                (
                    format!("{system}, {k} consumers ({} threads)", k + 1),
                    vec![
                        spread(|r| r.events_per_s / 1e6),
                        spread(|r| r.events_per_cpu_s / 1e6),
                        spread(|r| r.seconds),
                    ],
                )
            })
        })
        .collect();
    print_spreads(
        "system",
        &[("M events/s", 1), ("M events/cpu-s", 1), ("seconds", 3)],
        &rows,
    );
}

/// Spindle's ring: the producer claims up to `batch` slots and writes events in place; K
/// consumers read the same slots. Blocking wait strategy (the default).
fn run_spindle(events: u64, k: usize, capacity: usize, batch: u64) -> anyhow::Result<Vec<u64>> {
    let (mut producer, ring) = RingBuilder::new(capacity)
        .name("bench")
        .wait(WaitStrategy::Blocking)
        .build::<Event>()?;
    let consumers: Vec<_> = (0..k)
        .map(|i| ring.join_at(&format!("c{i}"), 0))
        .collect::<Result<_, _>>()?;
    thread::scope(|s| {
        let handles: Vec<_> = consumers
            .into_iter()
            .map(|mut consumer| {
                s.spawn(move || {
                    let mut check = Check::default();
                    while let Ok(batch) = consumer.wait_batch() {
                        let (a, b) = batch.slices();
                        a.iter().chain(b).for_each(|e| check.see(e));
                    }
                    check.sum
                })
            })
            .collect();
        let mut sent = 0;
        while sent < events {
            let mut claim = producer.claim_up_to(batch.min(events - sent));
            let start = claim.start();
            let (a, b) = claim.slices_mut();
            for (i, slot) in a.iter_mut().chain(b).enumerate() {
                *slot = Event::new(start + i as u64);
            }
            sent += claim.len() as u64;
            claim.publish();
        }
        drop(producer);
        Ok(handles.into_iter().map(|h| h.join().unwrap()).collect())
    })
}

/// One bounded channel per consumer; the producer sends each event K times.
fn run_crossbeam(events: u64, k: usize, capacity: usize) -> Vec<u64> {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..k)
        .map(|_| crossbeam_channel::bounded::<Event>(capacity))
        .unzip();
    thread::scope(|s| {
        let handles: Vec<_> = receivers
            .into_iter()
            .map(|rx| {
                s.spawn(move || {
                    let mut check = Check::default();
                    for event in rx {
                        check.see(&event);
                    }
                    check.sum
                })
            })
            .collect();
        for seq in 0..events {
            let event = Event::new(seq);
            for tx in &senders {
                tx.send(event).expect("consumer alive");
            }
        }
        drop(senders);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// One bounded channel of `Arc<Vec<Event>>` per consumer: the producer fills a batch of
/// `batch` events once and sends the same `Arc` to every consumer, so each consumer pays one
/// `recv` per batch and reads the events in place. The channels hold `capacity / batch`
/// messages (at least 1), the same number of events in flight as the ring.
fn run_crossbeam_batched(events: u64, k: usize, capacity: usize, batch: u64) -> Vec<u64> {
    let messages = (capacity / batch as usize).max(1);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..k)
        .map(|_| crossbeam_channel::bounded::<Arc<Vec<Event>>>(messages))
        .unzip();
    thread::scope(|s| {
        let handles: Vec<_> = receivers
            .into_iter()
            .map(|rx| {
                s.spawn(move || {
                    let mut check = Check::default();
                    for events in rx {
                        events.iter().for_each(|e| check.see(e));
                    }
                    check.sum
                })
            })
            .collect();
        let mut sent = 0;
        while sent < events {
            let n = batch.min(events - sent);
            let message: Arc<Vec<Event>> = Arc::new((sent..sent + n).map(Event::new).collect());
            for tx in &senders {
                tx.send(message.clone()).expect("consumer alive");
            }
            sent += n;
        }
        drop(senders);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The work of the other systems with nothing handed over (see the module's doc): the
/// producer writes every event into its own ring-sized buffer, each consumer checks its own
/// ring-sized buffer lap after lap, all at once.
fn run_limit(events: u64, k: usize, capacity: usize) -> Vec<u64> {
    let template: Vec<Event> = (0..capacity as u64).map(Event::new).collect();
    thread::scope(|s| {
        let handles: Vec<_> = (0..k)
            .map(|_| {
                let buf = template.clone();
                s.spawn(move || {
                    let mut check = Check::default();
                    check_laps(&buf, events, &mut check);
                    check.sum
                })
            })
            .collect();
        let mut buf = vec![Event::default(); capacity];
        let mask = capacity as u64 - 1;
        for seq in 0..events {
            buf[(seq & mask) as usize] = Event::new(seq);
            if seq & mask == mask {
                std::hint::black_box(&mut buf);
            }
        }
        std::hint::black_box(&buf);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The `disruptor` crate: single producer, K event handlers on threads it manages, its
/// `BusySpinWithSpinLoopHint` wait strategy (it has no blocking one). Its producer spins
/// while the ring is full.
fn run_disruptor(events: u64, k: usize, capacity: usize, batch: usize) -> Vec<u64> {
    use disruptor::{BusySpinWithSpinLoopHint, Producer as _};
    let sums: Arc<Vec<AtomicU64>> = Arc::new((0..k).map(|_| AtomicU64::new(0)).collect());
    let handler = |i: usize| {
        let sums = sums.clone();
        let mut check = Check::default();
        move |e: &Event, _seq: i64, _end: bool| {
            check.see(e);
            if check.next == events {
                sums[i].store(check.sum, Ordering::Release);
            }
        }
    };
    let publish = |producer: &mut dyn FnMut(usize, u64)| {
        let mut sent = 0;
        while sent < events {
            let n = (batch as u64).min(events - sent);
            producer(n as usize, sent);
            sent += n;
        }
    };
    if k == 1 {
        let mut producer =
            disruptor::build_single_producer(capacity, Event::default, BusySpinWithSpinLoopHint)
                .handle_events_with(handler(0))
                .build();
        publish(&mut |n, start| {
            producer.batch_publish(n, |iter| {
                for (i, e) in iter.enumerate() {
                    *e = Event::new(start + i as u64);
                }
            })
        });
        drop(producer);
    } else {
        let mut builder =
            disruptor::build_single_producer(capacity, Event::default, BusySpinWithSpinLoopHint)
                .with_multi_consumer();
        for i in 0..k {
            builder = builder.handle_events_with(handler(i));
        }
        let mut producer = builder.build();
        publish(&mut |n, start| {
            producer.batch_publish(n, |iter| {
                for (i, e) in iter.enumerate() {
                    *e = Event::new(start + i as u64);
                }
            })
        });
        drop(producer);
    }
    sums.iter().map(|s| s.load(Ordering::Acquire)).collect()
}

/// User plus system CPU seconds of this process so far (all threads, live and exited).
fn process_cpu_seconds() -> anyhow::Result<f64> {
    // USER_HZ is 100 on every Linux ABI.
    const TICKS_PER_S: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    let after_name = stat
        .rsplit_once(") ")
        .context("unexpected /proc/self/stat format")?
        .1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat(5) (utime, stime); `after_name` starts at field 3.
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .context("short /proc/self/stat")?
            .parse::<f64>()?)
    };
    Ok((ticks(11)? + ticks(12)?) / TICKS_PER_S)
}
