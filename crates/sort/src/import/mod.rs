//! `spindle import`: bulk-load JSON-lines writes into a new node's data directory, offline
//! (docs/sort.md, "Bulk import").
//!
//! Steps: mark the directory `IMPORTING`; parse each line into a one-record transaction and
//! append it through the file log's own writer in large batches (same segments, CRCs, syncs
//! and version table as online appends; line k of the input gets index k); at the same time
//! push each record's Disk View entry (key hash | kind | item | index, value) into the
//! external entry sorter; cut the sorted entries into one run of RocksDB table files per
//! partition; ingest them into each partition's new Disk View; only after every ingestion
//! succeeded set each view's applied index to the last index; remove the marker last.
//!
//! Crash rule: the marker is created (and synced) before anything else and removed (and the
//! removal synced) after everything else, so a crash or error at any step leaves it, and
//! `spindle serve` refuses such a directory ("import did not finish; remove DIR and import
//! again"). Nothing is ever half-loaded and served.

pub mod parse;
pub mod tables;

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::stream::{FuturesOrdered, StreamExt};

use spindle_core::{Index, Partition, Transaction};
use spindle_log::{FileLog, LogConfig, SyncMode};
use spindle_view::disk_ingest::{disk_view_dir, IMPORT_MARKER_FILE};
use spindle_view::{keys, DiskView};

use crate::entries::{EntrySortOptions, EntrySorter, SortStats};
use parse::{Chunk, Line, LineReader};

/// Encoded log bytes handed to the log writer per submission (one group commit, one sync).
pub const LOG_BATCH_BYTES_MAX: usize = 16 << 20;
/// Bytes of input lines handed to a parser thread at a time, by default.
pub const PARSE_CHUNK_BYTES: usize = 1 << 20;

/// The most sort memory one Disk View entry of an import can cost: a record's payload is at
/// most `RECORD_BYTES_MAX` (its JSON value within it), and its Disk View key (the item key
/// with its fields escaped, at most twice their 2,304 bytes) and the sorter's framing add
/// less than 8 KiB.
pub const ENTRY_BYTES_MAX: u64 = spindle_core::txn::RECORD_BYTES_MAX as u64 + (8 << 10);

/// The least `--memory` `spindle import` takes: the entry sorter holds entries of up to an
/// eighth of its budget, so with less a valid line could fail the import halfway.
pub const MEMORY_MIN_BYTES: u64 = 8 * ENTRY_BYTES_MAX;
/// Submissions parsed ahead of the log writer.
pub const LOG_BATCHES_AHEAD_MAX: usize = 2;
/// Submissions appended at once: the log writes one while it syncs the other.
pub const LOG_APPENDS_IN_FLIGHT: usize = 2;

/// Why an import failed. The data directory keeps its `IMPORTING` marker.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(
        "{}: line {line}: {reason} (use --skip-bad to count and skip bad lines)",
        file.display()
    )]
    BadLine {
        file: PathBuf,
        line: u64,
        reason: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} is not empty: import writes only into a new data directory (remove it, or \
         choose another)",
        dir.display()
    )]
    NotEmpty { dir: PathBuf },
    #[error(
        "--disk-partitions is {0}; it must be between 1 and {max} (what `spindle serve` opens)",
        max = spindle_core::DISK_PARTITIONS_MAX
    )]
    BadPartitions(u64),
    #[error("opening the log: {0}")]
    LogOpen(#[from] spindle_log::OpenError),
    #[error("appending to the log: {0}")]
    Append(#[from] spindle_log::AppendError),
    #[error("sorting: {0}")]
    Sort(#[from] crate::SortError),
    #[error("writing table file {}: {source}", path.display())]
    Table {
        path: PathBuf,
        source: rocksdb::Error,
    },
    #[error("Disk View: {0}")]
    View(#[from] spindle_view::ViewError),
    #[error("injected failure at {0}")]
    Injected(&'static str),
}

/// A phase of the import, for progress reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Input bytes read and parsed.
    Parse,
    /// Records durable in the log.
    Log,
    /// Entries handed to the sorter; the sort finishes its pass over them.
    Sort,
    /// Sorted entries written into table files.
    Tables,
    /// Partitions ingested.
    Ingest,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Parse,
        Phase::Log,
        Phase::Sort,
        Phase::Tables,
        Phase::Ingest,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Parse => "parse",
            Phase::Log => "log",
            Phase::Sort => "sort",
            Phase::Tables => "tables",
            Phase::Ingest => "ingest",
        }
    }
}

/// Hears the import's progress (a terminal shows it with indicatif). Called from the
/// import's threads.
pub trait Progress: Sync {
    /// `phase` began; `total` in its unit if known (bytes for parse, records for log, sort
    /// and tables, partitions for ingest).
    fn start(&self, phase: Phase, total: Option<u64>);
    /// `done` units of `phase` are done.
    fn set(&self, phase: Phase, done: u64);
    fn end(&self, phase: Phase);
}

/// No progress reports.
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn start(&self, _: Phase, _: Option<u64>) {}
    fn set(&self, _: Phase, _: u64) {}
    fn end(&self, _: Phase) {}
}

/// What to import and how.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// The new data directory (absent or empty).
    pub data_dir: PathBuf,
    /// Disk View partitions (`spindle serve` must use the same count).
    pub disk_partitions: u64,
    /// The sorter's memory budget, in bytes.
    pub sort_memory_bytes: u64,
    /// The sorter's temporary directory (default: inside the data directory).
    pub tmp_dir: Option<PathBuf>,
    pub threads: usize,
    /// Count and skip bad lines instead of stopping at the first.
    pub skip_bad: bool,
    /// Bytes of input lines handed to a parser thread at a time (`PARSE_CHUNK_BYTES`).
    pub parse_chunk_bytes: usize,
    /// Write only the log (no sort, no views): the log-only cost, for `spindle bench import`.
    /// The directory keeps its marker, so it is never served.
    pub log_only: bool,
}

/// What an import did.
#[derive(Clone, Debug, Default)]
pub struct ImportReport {
    /// Records imported (one per good line).
    pub records: u64,
    /// Bad lines skipped (with `skip_bad`).
    pub skipped: u64,
    /// The first bad line skipped, if any.
    pub first_skipped: Option<String>,
    /// Input bytes read.
    pub input_bytes: u64,
    /// The last index (= records).
    pub last_index: Index,
    /// Entries ingested per partition.
    pub partition_entries: Vec<u64>,
    /// Bytes of table files written.
    pub table_bytes: u64,
    /// What the sort did (passes over the entries, bytes spilled to its bucket files).
    pub sort: SortStats,
    /// Seconds per phase (parse and log overlap; their time is the same pass).
    pub phase_seconds: Vec<(Phase, f64)>,
}

/// Fail here when the failpoint `name` is set (feature `failpoints`; a no-op otherwise).
macro_rules! failpoint {
    ($name:literal) => {
        fail::fail_point!($name, |_| Err(ImportError::Injected($name)))
    };
}

/// Import `inputs` into `opts.data_dir`.
pub fn import(
    opts: &ImportOptions,
    inputs: &[PathBuf],
    progress: &dyn Progress,
) -> Result<ImportReport, ImportError> {
    if !(1..=spindle_core::DISK_PARTITIONS_MAX).contains(&opts.disk_partitions) {
        return Err(ImportError::BadPartitions(opts.disk_partitions));
    }
    let data = &opts.data_dir;
    // Everything that can be checked before the data directory is touched is: a typo in an
    // input's path must not leave a directory that a second attempt is refused.
    let input_total = check_inputs(inputs)?;
    if !opts.log_only {
        EntrySorter::check_memory(opts.sort_memory_bytes)?;
    }
    begin(data)?;
    let mut report = ImportReport::default();

    let started = Instant::now();
    // A directory the user named is theirs: the sorter works in a private directory inside
    // it, which it removes itself, and nothing else in it is touched. The default one is
    // inside the data directory and removed at the end.
    let own_tmp = opts.tmp_dir.is_none();
    let tmp = opts
        .tmp_dir
        .clone()
        .unwrap_or_else(|| data.join("import-tmp"));
    let io_at = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImportError::Io { path, source }
    };
    let tmp_existed = tmp.exists();
    std::fs::create_dir_all(&tmp).map_err(io_at(&tmp))?;
    let mut sorter = if opts.log_only {
        None
    } else {
        Some(EntrySorter::new(EntrySortOptions {
            memory_bytes: opts.sort_memory_bytes,
            tmp_dir: tmp.clone(),
            threads: opts.threads.max(1),
        })?)
    };
    parse_and_log(
        opts,
        inputs,
        input_total,
        sorter.as_mut(),
        &mut report,
        progress,
    )?;
    report
        .phase_seconds
        .push((Phase::Parse, started.elapsed().as_secs_f64()));
    failpoint!("import::after_log");
    let Some(sorter) = sorter else {
        return Ok(report);
    };

    let phase = Instant::now();
    progress.start(Phase::Sort, Some(report.records));
    let sorted = sorter.finish()?;
    report.sort = sorted.stats();
    progress.end(Phase::Sort);
    report
        .phase_seconds
        .push((Phase::Sort, phase.elapsed().as_secs_f64()));

    let phase = Instant::now();
    let n = opts.disk_partitions;
    let table_dir = data.join("import-tables");
    std::fs::create_dir_all(&table_dir).map_err(io_at(&table_dir))?;
    progress.start(Phase::Tables, Some(report.records));
    let tables = tables::write_tables(sorted, n, report.last_index, &table_dir, |done| {
        progress.set(Phase::Tables, done)
    })?;
    progress.end(Phase::Tables);
    report.partition_entries = tables.entries.clone();
    report.table_bytes = tables.bytes;
    report
        .phase_seconds
        .push((Phase::Tables, phase.elapsed().as_secs_f64()));
    failpoint!("import::after_tables");

    let phase = Instant::now();
    progress.start(Phase::Ingest, Some(n));
    let mut views = Vec::with_capacity(n as usize);
    for (i, files) in tables.files.iter().enumerate() {
        let i = i as u64;
        let view = DiskView::open(disk_view_dir(data, i, n), Partition::nth(i, n))?;
        view.ingest_tables(files)?;
        views.push(view);
        progress.set(Phase::Ingest, i + 1);
        failpoint!("import::mid_ingest");
    }
    // Every partition holds its data: now, and only now, the views claim the last index,
    // each with the checksum summed while its table files were written. The views write
    // and flush on up to `threads` threads at once.
    let checksums = &tables.checksums;
    assert_eq!(checksums.len(), views.len(), "one checksum per partition");
    for (i, sums) in checksums.iter().enumerate() {
        assert_eq!(
            sums.versions(),
            tables.entries[i],
            "partition {i}: every entry written was summed once"
        );
    }
    let per_thread = views.len().div_ceil(opts.threads.max(1)).max(1);
    let last_index = report.last_index;
    std::thread::scope(|s| {
        let workers: Vec<_> = views
            .chunks(per_thread)
            .zip(checksums.chunks(per_thread))
            .map(|(views, sums)| {
                s.spawn(move || -> Result<(), ImportError> {
                    for (view, sums) in views.iter().zip(sums) {
                        view.finish_ingest_summed(last_index, sums)?;
                    }
                    Ok(())
                })
            })
            .collect();
        // Join every worker before reporting the first error.
        let results: Vec<Result<(), ImportError>> = workers
            .into_iter()
            .map(|w| w.join().expect("a finishing thread panicked"))
            .collect();
        results.into_iter().collect::<Result<(), ImportError>>()
    })?;
    drop(views);
    progress.end(Phase::Ingest);
    report
        .phase_seconds
        .push((Phase::Ingest, phase.elapsed().as_secs_f64()));
    failpoint!("import::before_unmark");

    for dir in [Some(&table_dir), own_tmp.then_some(&tmp)]
        .into_iter()
        .flatten()
    {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io_at(dir))?;
        }
    }
    if !own_tmp && !tmp_existed {
        // The user's `--tmp` did not exist and was made for this import: removed if empty.
        let _ = std::fs::remove_dir(&tmp);
    }
    finish(data)?;
    Ok(report)
}

/// Refuse a non-empty directory; create it and the marker, durably.
fn begin(data: &Path) -> Result<(), ImportError> {
    let io = |source| ImportError::Io {
        path: data.to_path_buf(),
        source,
    };
    match std::fs::read_dir(data) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ImportError::NotEmpty {
                    dir: data.to_path_buf(),
                });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data).map_err(io)?;
            if let Some(parent) = data.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        Err(e) => return Err(io(e)),
    }
    let marker = data.join(IMPORT_MARKER_FILE);
    let f = File::create(&marker).map_err(|source| ImportError::Io {
        path: marker.clone(),
        source,
    })?;
    f.sync_all().map_err(io)?;
    sync_dir(data)
}

/// Remove the marker, durably: the import is finished.
fn finish(data: &Path) -> Result<(), ImportError> {
    let marker = data.join(IMPORT_MARKER_FILE);
    std::fs::remove_file(&marker).map_err(|source| ImportError::Io {
        path: marker,
        source,
    })?;
    sync_dir(data)
}

fn sync_dir(dir: &Path) -> Result<(), ImportError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| ImportError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// Every input must be a regular file that can be opened; returns their total size.
fn check_inputs(inputs: &[PathBuf]) -> Result<u64, ImportError> {
    let mut total = 0;
    for path in inputs {
        let io = |source| ImportError::Io {
            path: path.clone(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        std::fs::File::open(path).map_err(io)?;
        total += meta.len();
    }
    Ok(total)
}

/// The first pass: read every line, append it to the log (on a log thread, in batches of
/// about `LOG_BATCH_BYTES_MAX`), and push its Disk View entry into the sorter.
fn parse_and_log(
    opts: &ImportOptions,
    inputs: &[PathBuf],
    input_total: u64,
    mut sorter: Option<&mut EntrySorter>,
    report: &mut ImportReport,
    progress: &dyn Progress,
) -> Result<(), ImportError> {
    let config = LogConfig {
        group_commit_bytes_max: LOG_BATCH_BYTES_MAX,
        unsynced_bytes_max: 2 * LOG_BATCH_BYTES_MAX as u64,
        sync: SyncMode::Data,
        ..LogConfig::default()
    };
    let log = FileLog::open(opts.data_dir.join("log"), config)?;
    progress.start(Phase::Parse, Some(input_total));
    progress.start(Phase::Log, None);
    if sorter.is_some() {
        progress.start(Phase::Sort, None);
    }
    let (tx, rx) = sync_channel::<Vec<Transaction>>(LOG_BATCHES_AHEAD_MAX);
    let result = std::thread::scope(|s| {
        let log = &log;
        let writer = s.spawn(move || -> Result<Index, ImportError> {
            let mut next = Index::FIRST;
            let mut check = |results: Vec<Result<Index, spindle_log::AppendError>>| {
                for r in results {
                    let index = r?;
                    assert_eq!(index, next, "a new log gives line k index k");
                    next = next.next();
                }
                progress.set(Phase::Log, next.prev().get());
                Ok::<(), ImportError>(())
            };
            // Up to `LOG_APPENDS_IN_FLIGHT` submissions at once, so the log writes the next
            // batch while the previous one is being synced. Results come back in order.
            let mut in_flight = FuturesOrdered::new();
            let mut noop = Context::from_waker(futures::task::noop_waker_ref());
            let mut open = true;
            while open || !in_flight.is_empty() {
                if open && in_flight.len() < LOG_APPENDS_IN_FLIGHT {
                    match rx.recv() {
                        Ok(batch) => {
                            in_flight.push_back(async move { log.append_many(&batch).await });
                            // Polling submits it (the log's writer takes it from there).
                            // A poll returns at the first result that is ready, which may
                            // be an older submission's before the new one was polled: poll
                            // until nothing more is ready.
                            while let Poll::Ready(Some(results)) =
                                in_flight.poll_next_unpin(&mut noop)
                            {
                                check(results)?;
                            }
                        }
                        Err(_) => open = false,
                    }
                    continue;
                }
                let results = futures::executor::block_on(in_flight.next())
                    .expect("a submission is in flight");
                check(results)?;
            }
            Ok(next.prev())
        });
        let parsed = parse_all(inputs, opts, &mut sorter, report, progress, &tx);
        drop(tx);
        let logged = writer.join().expect("the log thread panicked");
        parsed.and(logged)
    });
    let last = result?;
    log.close();
    if let Some(cause) = log.failure() {
        return Err(ImportError::Append(spindle_log::AppendError::Failed {
            cause,
        }));
    }
    assert_eq!(last.get(), report.records, "every parsed record was logged");
    report.last_index = last;
    progress.end(Phase::Parse);
    progress.end(Phase::Log);
    Ok(())
}

/// Read the inputs on a reader thread, parse chunks of lines on `threads` parser threads,
/// and take the parsed lines here in input order: number them, push their Disk View entries
/// into the sorter, and hand them to the log thread in batches.
fn parse_all(
    inputs: &[PathBuf],
    opts: &ImportOptions,
    sorter: &mut Option<&mut EntrySorter>,
    report: &mut ImportReport,
    progress: &dyn Progress,
    log: &SyncSender<Vec<Transaction>>,
) -> Result<(), ImportError> {
    let threads = opts.threads.max(1);
    let (work_tx, work_rx) = sync_channel::<(Chunk, SyncSender<Vec<Line>>)>(threads);
    let work_rx = Mutex::new(work_rx);
    // Parsed chunks' text buffers go back to the reader: memory the allocator would give
    // back to the system and fault in again, zeroed, for the next chunk (docs/benchmarks/
    // import.md, "Fresh pages").
    let texts_kept = 2 * threads + 2;
    let (text_back, texts) = sync_channel::<Vec<u8>>(texts_kept);
    std::thread::scope(|s| {
        // Each chunk's result, in input order, with the input bytes read once it is done.
        let (order_tx, order_rx) = sync_channel::<(Receiver<Vec<Line>>, u64)>(2 * threads);
        for _ in 0..threads {
            let work_rx = &work_rx;
            let text_back = text_back.clone();
            s.spawn(move || loop {
                let job = work_rx.lock().expect("a parser panicked").recv();
                let Ok((chunk, done)) = job else { return };
                let _ = done.send(chunk.parse());
                // Full (the reader has enough) or closed: the buffer is freed instead.
                let _ = text_back.try_send(chunk.text);
            });
        }
        drop(text_back);
        let reader = s.spawn(move || -> Result<u64, ImportError> {
            let mut before = 0;
            for path in inputs {
                let file = File::open(path).map_err(|source| ImportError::Io {
                    path: path.clone(),
                    source,
                })?;
                let mut reader = LineReader::new(path, BufReader::with_capacity(1 << 20, file));
                while let Some(chunk) = reader.next_chunk(
                    opts.parse_chunk_bytes.max(1),
                    texts.try_recv().unwrap_or_default(),
                )? {
                    let (done_tx, done_rx) = sync_channel(1);
                    let read = before + chunk.bytes_end;
                    // Either send fails only once the consumer stopped on an error.
                    if order_tx.send((done_rx, read)).is_err()
                        || work_tx.send((chunk, done_tx)).is_err()
                    {
                        return Ok(read);
                    }
                }
                before += reader.bytes;
            }
            Ok(before)
        });
        let consumed = consume(order_rx, opts.skip_bad, sorter, report, progress, log);
        let read = reader.join().expect("the reader panicked");
        consumed?;
        report.input_bytes = read?;
        progress.set(Phase::Parse, report.input_bytes);
        Ok(())
    })
}

fn consume(
    chunks: Receiver<(Receiver<Vec<Line>>, u64)>,
    skip_bad: bool,
    sorter: &mut Option<&mut EntrySorter>,
    report: &mut ImportReport,
    progress: &dyn Progress,
    log: &SyncSender<Vec<Transaction>>,
) -> Result<(), ImportError> {
    let mut batch = Vec::new();
    let mut batch_bytes = 0;
    let mut key_buf = Vec::new();
    let mut value_buf = Vec::new();
    for (done, read) in chunks {
        let lines = done.recv().expect("a parser thread died");
        for line in lines {
            let (key, value) = match line {
                Line::Write(key, value) => (key, value),
                Line::Bad(e) if skip_bad => {
                    report.skipped += 1;
                    report.first_skipped.get_or_insert_with(|| e.to_string());
                    continue;
                }
                Line::Bad(e) => return Err(e),
            };
            report.records += 1;
            let index = Index::new(report.records);
            if let Some(sorter) = sorter.as_deref_mut() {
                key_buf.clear();
                keys::item_prefix_into(&key, &mut key_buf);
                key_buf.extend_from_slice(&index.get().to_be_bytes());
                value_buf.clear();
                keys::encode_value(&value, &mut value_buf);
                sorter.push(&key_buf, &value_buf)?;
            }
            batch_bytes += spindle_core::record::encoded_payload_len(&key, &value) + 16;
            batch.push(Transaction::single(key, value));
            if batch_bytes >= LOG_BATCH_BYTES_MAX {
                batch_bytes = 0;
                let next = Vec::with_capacity(batch.len());
                let full = std::mem::replace(&mut batch, next);
                if log.send(full).is_err() {
                    // The log thread stopped on an error; it reports it.
                    return Ok(());
                }
            }
        }
        progress.set(Phase::Parse, read);
        progress.set(Phase::Sort, report.records);
    }
    if !batch.is_empty() {
        let _ = log.send(batch);
    }
    progress.set(Phase::Sort, report.records);
    Ok(())
}
