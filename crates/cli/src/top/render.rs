//! Draws `spindle top`'s screen from an `App`: a pure function of the last status sample,
//! the one before it (for rates) and the screen's state, so tests render it into ratatui's
//! `TestBackend` and read the cells.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Sparkline, Table, Wrap};
use ratatui::Frame;
use serde_json::Value;

use super::model::{boot_of, App, Rates, Sample};
use super::text::{bytes, count, duration, extras, index, per_second, range, text};

/// Width of a boot's progress bar, in cells.
const BOOT_BAR_CELLS: usize = 24;
/// Rows of the boots and carousels panels before they say how many more there are.
const BOOTS_SHOWN_MAX: usize = 6;
const CAROUSEL_LINES_MAX: usize = 10;
/// The log, truncation and node panels side by side; below `NODE_PANEL_WIDTH_MIN` cells the
/// node panel (the least urgent) gives its room to the other two.
const TOP_COLUMNS: [Constraint; 3] = [
    Constraint::Percentage(34),
    Constraint::Percentage(36),
    Constraint::Percentage(30),
];
const TOP_COLUMNS_NARROW: [Constraint; 3] = [
    Constraint::Percentage(50),
    Constraint::Percentage(50),
    Constraint::Length(0),
];
const NODE_PANEL_WIDTH_MIN: u16 = 100;
/// Lines of the top panels before they are cut.
const TOP_LINES_MAX: usize = 16;
/// Widest view id column before ids are cut.
const VIEW_ID_CELLS_MAX: usize = 40;
/// Holds listed in the truncation panel.
const HOLDS_SHOWN_MAX: usize = 4;

const RED: Style = Style::new().fg(Color::Red);
const DIM: Style = Style::new().fg(Color::DarkGray);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);

/// Draw the whole screen; returns how many view rows it had room for (a page, for scrolling).
pub fn draw(f: &mut Frame, app: &App) -> usize {
    let area = f.area();
    let Some(s) = &app.current else {
        let [head, body, foot] = Layout::vertical([
            Constraint::Length(header_rows(app, area.width)),
            Constraint::Min(0),
            Constraint::Length(1),
        ])
        .areas(area);
        f.render_widget(header(app), head);
        let text = match &app.down {
            Some(_) => "no status yet",
            None => "waiting for the node's first status…",
        };
        f.render_widget(Paragraph::new(text).style(DIM), body);
        f.render_widget(footer(app), foot);
        return 0;
    };
    let rates = app.rates();
    let log = log_lines(s, rates.as_ref(), app);
    let trunc = truncation_lines(s, app);
    let node = node_lines(s);
    let failures = failure_lines(s);
    let boots = boot_lines(s, app);
    let carousels = carousel_lines(s, rates.as_ref(), app);
    let columns = if area.width < NODE_PANEL_WIDTH_MIN {
        TOP_COLUMNS_NARROW
    } else {
        TOP_COLUMNS
    };
    let [log_w, trunc_w, node_w] = Layout::horizontal(columns).areas(area);
    let top_h = [(&log, log_w), (&trunc, trunc_w), (&node, node_w)]
        .into_iter()
        .filter(|(_, r)| r.width > 2)
        .map(|(lines, r)| wrapped_height(lines, r.width.saturating_sub(2)))
        .max()
        .unwrap_or(0)
        .min(TOP_LINES_MAX)
        + 2;
    let [head, fail_area, top, boot_area, views_area, car_area, foot] = Layout::vertical([
        Constraint::Length(header_rows(app, area.width)),
        Constraint::Length(height(failures.len(), 4)),
        Constraint::Length(top_h as u16),
        Constraint::Length(height(boots.len(), BOOTS_SHOWN_MAX)),
        Constraint::Min(5),
        Constraint::Length(height(carousels.len(), CAROUSEL_LINES_MAX)),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(header(app), head);
    if !failures.is_empty() {
        f.render_widget(
            Paragraph::new(failures).block(Block::bordered().title("Failures").style(RED)),
            fail_area,
        );
    }
    let [log_area, trunc_area, node_area] = Layout::horizontal(columns).areas(top);
    draw_log(f, log_area, log, app);
    f.render_widget(
        Paragraph::new(trunc)
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title("Truncation")),
        trunc_area,
    );
    f.render_widget(
        Paragraph::new(node)
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title("Node")),
        node_area,
    );
    if !boots.is_empty() {
        f.render_widget(
            Paragraph::new(boots).block(Block::bordered().title("Boots")),
            boot_area,
        );
    }
    let page_rows = draw_views(f, views_area, s, app);
    f.render_widget(
        Paragraph::new(carousels).block(Block::bordered().title("Carousels")),
        car_area,
    );
    f.render_widget(footer(app), foot);
    page_rows
}

/// Lines `lines` take when wrapped at `width` cells.
fn wrapped_height(lines: &[Line<'_>], width: u16) -> usize {
    let width = usize::from(width.max(1));
    lines.iter().map(|l| l.width().max(1).div_ceil(width)).sum()
}

/// Panel height for `lines` lines shown up to `max` (0 lines: no panel).
fn height(lines: usize, max: usize) -> u16 {
    if lines == 0 {
        0
    } else {
        (lines.min(max) + 2) as u16
    }
}

/// The title line, and under it the red error line while the node is unreachable.
fn header(app: &App) -> Paragraph<'static> {
    let mut spans = vec![
        Span::styled("spindle top", BOLD),
        Span::raw(format!(" · {}", app.server)),
    ];
    if let Some(up) = app.current.as_ref().and_then(Sample::uptime_s) {
        spans.push(Span::raw(format!(" · up {}", duration(up))));
    }
    let mut lines = Vec::new();
    match &app.down {
        Some(why) => {
            spans.push(Span::styled(" · node unreachable", RED));
            lines.push(Line::from(spans));
            lines.push(Line::styled(
                format!("node unreachable: {why} · retrying every second"),
                Style::new().fg(Color::White).bg(Color::Red),
            ));
        }
        None => {
            spans.push(if app.current.is_some() {
                Span::styled(" · live", Style::new().fg(Color::Green))
            } else {
                Span::raw(" · connecting…")
            });
            lines.push(Line::from(spans));
        }
    }
    Paragraph::new(lines).wrap(Wrap { trim: false })
}

/// Rows the header takes at `width` cells: the title, and the error wrapped (at most 4 rows).
fn header_rows(app: &App, width: u16) -> u16 {
    match &app.down {
        Some(why) => {
            let error = format!("node unreachable: {why} · retrying every second");
            1 + wrapped_height(&[Line::raw(error)], width).min(4) as u16
        }
        None => 1,
    }
}

fn footer(app: &App) -> Line<'static> {
    if app.ui.editing {
        return Line::from(vec![
            Span::styled(format!("filter: {}▏", app.ui.filter), BOLD),
            Span::styled("  Enter keeps it, Esc clears it", DIM),
        ]);
    }
    let mut spans = vec![Span::styled(
        "q quit  / filter  t only lagging/booting/failed  ↑↓ PgUp PgDn Home End scroll",
        DIM,
    )];
    if !app.ui.filter.is_empty() {
        spans.push(Span::styled(format!("  filter: {}", app.ui.filter), BOLD));
    }
    if app.ui.trouble_only {
        spans.push(Span::styled("  only trouble", BOLD));
    }
    Line::from(spans)
}

/// A `label value` line with the label padded to a column.
fn kv(label: &str, value: impl Into<String>) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{label:<16} "), DIM),
        Span::raw(value.into()),
    ])
}

fn log_lines(s: &Sample, rates: Option<&Rates>, app: &App) -> Vec<Line<'static>> {
    let log = &s.status["log"];
    let rate = |r: Option<f64>| r.map_or_else(|| "–".to_owned(), per_second);
    // On JetStream the servers sync: the node counts its group commits, never fsyncs.
    let jetstream = log["kind"] == "jetstream";
    let mut lines = vec![
        kv("durable index", index(&log["durable_index"])),
        kv("first retained", index(&log["first_index"])),
        kv("appends/s", rate(rates.and_then(|r| r.appends_per_s))),
        kv("records/s", rate(rates.and_then(|r| r.records_per_s))),
        kv(
            "records/fsync",
            match rates {
                _ if jetstream => "– (JetStream servers sync)".to_owned(),
                Some(r) => r
                    .records_per_sync
                    .map_or_else(|| "no fsync this second".to_owned(), |n| format!("{n:.1}")),
                None => "–".to_owned(),
            },
        ),
        kv(
            "commits/fsyncs",
            format!(
                "{} / {}",
                count(&log["group_commits"]),
                if jetstream {
                    "–".to_owned()
                } else {
                    count(&log["syncs"])
                }
            ),
        ),
        kv(
            "intake queued",
            match s.counters["intake_queued_bytes"].as_u64() {
                Some(b) => format!("{} for the writer", bytes(b as f64)),
                None => "–".to_owned(),
            },
        ),
    ];
    let known = ["durable_index", "first_index", "group_commits", "syncs"];
    lines.extend(extras(log, &known).map(|(k, v)| kv(&k, v)));
    // The sparkline gets the panel's last line when there is history to draw.
    if !app.history.is_empty() {
        lines.push(Line::raw(""));
    }
    lines
}

fn draw_log(f: &mut Frame, area: Rect, lines: Vec<Line<'static>>, app: &App) {
    let block = Block::bordered().title("Log");
    let inner = block.inner(area);
    f.render_widget(block, area);
    let n = lines.len() as u16;
    f.render_widget(Paragraph::new(lines), inner);
    if !app.history.is_empty() && inner.height >= n {
        let spark = Rect {
            y: inner.y + n - 1,
            height: inner.height - (n - 1),
            ..inner
        };
        let width = usize::from(spark.width);
        let skip = app.history.len().saturating_sub(width);
        let data: Vec<u64> = app.history.iter().skip(skip).map(|r| *r as u64).collect();
        f.render_widget(
            Sparkline::default()
                .data(data)
                .style(Style::new().fg(Color::Cyan)),
            spark,
        );
    }
}

fn truncation_lines(s: &Sample, app: &App) -> Vec<Line<'static>> {
    let t = &s.status["truncation"];
    let now = s.uptime_s().unwrap_or(0.0);
    let mut lines = vec![
        kv(
            "enabled",
            match t["enabled"].as_bool() {
                Some(true) => "yes",
                Some(false) => "no",
                None => "–",
            },
        ),
        kv("safe index", index(&t["safe_index"])),
        kv("first retained", index(&t["first_retained_index"])),
        kv("held back by", text(&t["held_back_by"])),
    ];
    let mut runs = count(&t["worker_runs"]);
    if let Some(e) = t["last_error"].as_str() {
        runs.push_str(&format!(" (last error: {e})"));
    }
    lines.push(kv("worker runs", runs));
    let holds = t["holds"].as_array().map(Vec::as_slice).unwrap_or_default();
    if holds.is_empty() {
        lines.push(kv("holds", "none"));
    }
    for (i, h) in holds.iter().take(HOLDS_SHOWN_MAX).enumerate() {
        let id = h["id"].as_u64();
        // Another member's hold (a boot on another host) is named by its owner; its age
        // is not known here.
        let owner = h["owner"].as_str();
        let age = id
            .filter(|_| owner.is_none())
            .and_then(|id| app.hold_seen.get(&id))
            .map_or_else(|| "–".to_owned(), |&seen| duration(now - seen));
        let label = if i == 0 { "holds" } else { "" };
        lines.push(kv(
            label,
            format!(
                "#{}{} cut {} age {age}",
                id.map_or("?".to_owned(), |i| i.to_string()),
                owner.map_or(String::new(), |o| format!(" of {o}")),
                index(&h["cut"])
            ),
        ));
    }
    if holds.len() > HOLDS_SHOWN_MAX {
        lines.push(kv("", format!("… {} more", holds.len() - HOLDS_SHOWN_MAX)));
    }
    lines
}

fn node_lines(s: &Sample) -> Vec<Line<'static>> {
    let st = &s.status;
    let tailer = &st["tailer"];
    let mut lines = vec![kv(
        "log tailer",
        format!(
            "{} ({} read errors, {} retries)",
            tailer["state"].as_str().unwrap_or("–"),
            count(&tailer["read_errors"]),
            count(&tailer["retries"])
        ),
    )];
    let streams = &st["streams"];
    lines.push(kv(
        "gRPC streams",
        format!(
            "iterate {}/{}, tail {}/{}",
            count(&streams["iterate_open"]),
            count(&streams["iterate_max"]),
            count(&streams["tail_open"]),
            count(&streams["tail_max"])
        ),
    ));
    let c = &st["chunks"];
    lines.push(kv("chunks", count(&c["chunks"])));
    let used = |k: &str| c[k].as_f64().map_or_else(|| "–".to_owned(), bytes);
    lines.push(kv(
        "chunk space",
        format!("{} / {}", used("used_bytes"), used("max_bytes")),
    ));
    lines.extend(extras(c, &["chunks", "used_bytes", "max_bytes"]).map(|(k, v)| kv(&k, v)));
    lines.extend(pipeline_lines(&s.pipeline));
    lines
}

/// One ring of the pipeline as `top` sums it up.
#[derive(Default)]
struct RingSummary {
    name: String,
    readers: usize,
    /// The reader furthest behind: its name, queue depth and the ring's capacity.
    deepest: (String, u64, u64),
}

/// One line per ring: its readers and the deepest queue (the page draws the graph).
fn pipeline_lines(p: &Value) -> Vec<Line<'static>> {
    let mut rings: Vec<RingSummary> = Vec::new();
    for e in p["edges"].as_array().into_iter().flatten() {
        let from = e["from"].as_str().unwrap_or("?");
        let i = rings
            .iter()
            .position(|r| r.name == from)
            .unwrap_or_else(|| {
                rings.push(RingSummary {
                    name: from.to_owned(),
                    ..RingSummary::default()
                });
                rings.len() - 1
            });
        let ring = &mut rings[i];
        let depth = e["depth"].as_u64().unwrap_or(0);
        ring.readers += 1;
        if ring.readers == 1 || depth > ring.deepest.1 {
            let to = e["to"].as_str().unwrap_or("?").to_owned();
            ring.deepest = (to, depth, e["capacity"].as_u64().unwrap_or(0));
        }
    }
    rings
        .into_iter()
        .map(|r| {
            let (to, depth, cap) = r.deepest;
            let line = kv(
                &format!("ring {}", r.name),
                format!("{} readers, deepest {depth}/{cap} ({to})", r.readers),
            );
            if cap > 0 && depth * 4 > cap * 3 {
                line.style(RED)
            } else {
                line
            }
        })
        .collect()
}

fn failure_lines(s: &Sample) -> Vec<Line<'static>> {
    let mut out: Vec<Line<'static>> = s.status["failures"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| Line::styled(text(f), RED))
        .collect();
    if let Some(e) = s.status["tailer"]["error"].as_str() {
        out.push(Line::styled(format!("log tailer: {e}"), RED));
    }
    out
}

/// A boot's progress in percent: full when done, elapsed over elapsed + ETA while booting.
pub fn boot_percent(b: &Value) -> f64 {
    if b["state"] == "done" {
        return 100.0;
    }
    let seconds = b["seconds"].as_f64().unwrap_or(0.0);
    match b["eta_s"].as_f64() {
        Some(eta) if seconds + eta > 0.0 => (100.0 * seconds / (seconds + eta)).min(99.0),
        _ => 0.0,
    }
}

fn progress_bar(percent: f64, cells: usize) -> String {
    let full = ((percent / 100.0) * cells as f64).round() as usize;
    let full = full.min(cells);
    format!("{}{}", "█".repeat(full), "░".repeat(cells - full))
}

fn boot_lines(s: &Sample, app: &App) -> Vec<Line<'static>> {
    let boots: Vec<&Value> = s.status["boots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| app.matches(b["view"].as_str(), None))
        .collect();
    let mut lines: Vec<Line<'static>> = boots
        .iter()
        .take(BOOTS_SHOWN_MAX)
        .map(|b| {
            let state = b["state"].as_str().unwrap_or("?");
            let pct = boot_percent(b);
            let color = match state {
                "failed" => Color::Red,
                "done" => Color::Green,
                _ => Color::Blue,
            };
            let eta = b["eta_s"].as_f64().map_or_else(|| "–".to_owned(), duration);
            let mut spans = vec![
                Span::raw(format!("{:<14} ", b["view"].as_str().unwrap_or("?"))),
                Span::styled(progress_bar(pct, BOOT_BAR_CELLS), Style::new().fg(color)),
                Span::raw(format!(
                    " {pct:>3.0}%  {} items  {}  {} items/s  {}/s  ETA {eta}  ",
                    count(&b["items"]),
                    bytes(b["bytes"].as_f64().unwrap_or(0.0)),
                    per_second(b["items_per_s"].as_f64().unwrap_or(0.0)),
                    bytes(b["bytes_per_s"].as_f64().unwrap_or(0.0)),
                )),
                Span::styled(state.to_owned(), Style::new().fg(color)),
            ];
            if let Some(e) = b["error"].as_str() {
                spans.push(Span::styled(format!(": {e}"), RED));
            }
            Line::from(spans)
        })
        .collect();
    if boots.len() > BOOTS_SHOWN_MAX {
        lines.pop();
        lines.push(Line::styled(
            format!("… {} more boots (filter with /)", boots.len() - lines.len()),
            DIM,
        ));
    }
    lines
}

/// A view's state in words and its colour.
fn view_state(s: &Sample, v: &Value) -> (String, Style) {
    if let Some(why) = v["stalled"].as_str() {
        let word = if v["paused"] == true {
            "paused"
        } else {
            "failed"
        };
        return (format!("{word}: {why}"), RED);
    }
    if v["ready"] == false {
        let pct = boot_of(s, v).map_or(0.0, boot_percent);
        return (format!("booting {pct:.0}%"), Style::new().fg(Color::Blue));
    }
    if v["lag"].as_u64().unwrap_or(0) > 0 {
        ("following".to_owned(), Style::new().fg(Color::Yellow))
    } else {
        ("caught up".to_owned(), Style::new())
    }
}

/// The views table; returns the rows it had room for.
fn draw_views(f: &mut Frame, area: Rect, s: &Sample, app: &App) -> usize {
    let shown = app.shown_views();
    let total = s.status["views"].as_array().map_or(0, Vec::len);
    // Borders and the header row.
    let visible = usize::from(area.height.saturating_sub(3));
    let first = app.ui.scroll.min(shown.len().saturating_sub(visible));
    let rows = shown.iter().skip(first).take(visible).map(|v| {
        let (state, style) = view_state(s, v);
        Row::new(vec![
            Cell::from(v["id"].as_str().unwrap_or("?").to_owned()),
            Cell::from(v["kind"].as_str().unwrap_or("?").to_owned()),
            Cell::from(range(&v["range"])),
            Cell::from(index(&v["applied_index"])),
            Cell::from(index(&v["persisted_index"])),
            Cell::from(count(&v["lag"])),
            Cell::from(state),
        ])
        .style(style)
    });
    let mut title = format!("Views ({} of {total}", shown.len());
    if shown.len() > visible {
        title.push_str(&format!(
            ", rows {}–{}",
            first + 1,
            (first + visible).min(shown.len())
        ));
    }
    title.push(')');
    let id_cells = shown
        .iter()
        .filter_map(|v| v["id"].as_str())
        .map(|id| id.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(8, VIEW_ID_CELLS_MAX) as u16;
    let table = Table::new(
        rows,
        [
            Constraint::Length(id_cells),
            Constraint::Length(7),
            Constraint::Length(16),
            Constraint::Length(12),
            Constraint::Length(12),
            Constraint::Length(10),
            Constraint::Fill(1),
        ],
    )
    .header(
        Row::new([
            "view",
            "kind",
            "range",
            "applied",
            "persisted",
            "lag",
            "state",
        ])
        .style(BOLD),
    )
    .block(Block::bordered().title(title));
    f.render_widget(table, area);
    visible
}

fn carousel_lines(s: &Sample, rates: Option<&Rates>, app: &App) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let mut idle = Vec::new();
    for c in s.status["carousels"].as_array().into_iter().flatten() {
        let view = c["view"].as_str().unwrap_or("?");
        if !app.matches(Some(view), Some("disk")) {
            continue;
        }
        let riders = c["riders"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let running = c["running"] == true;
        if riders.is_empty() && !running {
            idle.push(view.to_owned());
            continue;
        }
        lines.push(Line::from(vec![
            Span::styled(format!("{view:<14} "), BOLD),
            Span::styled(
                if running { "scanning" } else { "idle" },
                Style::new().fg(if running { Color::Green } else { Color::Gray }),
            ),
            Span::raw(format!(
                "  riders {}  laps {}  groups {}  chunks encoded {}",
                riders.len(),
                count(&c["laps"]),
                count(&c["groups"]),
                count(&c["chunks_encoded"])
            )),
            // Items too large to share, which each rider reads itself (docs/iteration.md).
            Span::raw(match c["large_items"].as_u64() {
                Some(n) if n > 0 => format!("  large items {n}"),
                _ => String::new(),
            }),
        ]));
        for r in riders {
            let id = r["id"].as_u64();
            let rate = id
                .and_then(|id| rates?.rider_bytes_per_s.get(&(view.to_owned(), id)))
                .map_or_else(|| "–".to_owned(), |b| format!("{}/s", bytes(*b)));
            let mode = r["mode"].as_str().unwrap_or("?");
            let mut line = format!(
                "  rider #{} {mode:<9} {}  cut {}  {} frames  {}  {rate}  {} demotions {} rejoins",
                id.map_or("?".to_owned(), |i| i.to_string()),
                range(&r["range"]),
                index(&r["cut"]),
                count(&r["frames"]),
                bytes(r["bytes"].as_f64().unwrap_or(0.0)),
                count(&r["demotions"]),
                count(&r["rejoins"]),
            );
            let known = [
                "id",
                "cut",
                "range",
                "mode",
                "frames",
                "bytes",
                "demotions",
                "rejoins",
            ];
            for (k, v) in extras(r, &known) {
                line.push_str(&format!("  {k} {v}"));
            }
            let style = if mode == "shared" {
                Style::new()
            } else {
                Style::new().fg(Color::Yellow)
            };
            lines.push(Line::styled(line, style));
        }
    }
    if lines.len() > CAROUSEL_LINES_MAX {
        let hidden = lines.len() - (CAROUSEL_LINES_MAX - 1);
        lines.truncate(CAROUSEL_LINES_MAX - 1);
        lines.push(Line::styled(
            format!("… {hidden} more lines (filter with /)"),
            DIM,
        ));
    }
    if !idle.is_empty() {
        let mut names = idle.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
        if idle.len() > 8 {
            names.push_str(", …");
        }
        lines.push(Line::styled(
            format!("{} idle, no riders: {names}", idle.len()),
            DIM,
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::super::model::Update;
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use serde_json::json;

    fn event(uptime: f64, durable: u64, boot_seconds: f64, rider_bytes: u64) -> Value {
        json!({
            "status": {
                "uptime_s": uptime,
                "log": {"first_index": 1, "durable_index": durable, "syncs": durable / 10,
                        "group_commits": durable / 10, "fsync_p99_us": 840,
                        "fsync_latency_us": {"p50": 120, "p99": 840.5}},
                "views": [
                    {"id": "disk-0", "kind": "disk", "range": [0, 1_073_741_824u64],
                     "applied_index": durable, "persisted_index": durable, "lag": 0,
                     "ready": true, "stalled": null, "paused": false},
                    {"id": "disk-1", "kind": "disk", "range": [1_073_741_824u64, 2_147_483_648u64],
                     "applied_index": durable - 5, "lag": 5, "ready": true,
                     "stalled": "No space left on device", "paused": true},
                    {"id": "memory", "kind": "memory", "range": [0, 4_294_967_296u64],
                     "applied_index": 0, "lag": durable, "ready": false, "stalled": null,
                     "paused": false}
                ],
                "boots": [{"view": "memory", "state": "booting", "cut": 900, "items": 4000,
                           "bytes": 2_097_152, "items_per_s": 2000.0, "bytes_per_s": 1_048_576.0,
                           "eta_s": 2.0, "seconds": boot_seconds, "error": null}],
                "carousels": [
                    {"view": "disk-0", "running": true, "laps": 3, "chunks_encoded": 120,
                     "large_items": 2, "ring_cursor": 99, "ring_slots": 64, "groups": 1,
                     "riders": [{"id": 7, "cut": 900, "range": {"lo": 0, "hi": 1_073_741_824u64},
                                 "mode": "shared", "frames": 50, "bytes": rider_bytes,
                                 "demotions": 0, "rejoins": 0}]},
                    {"view": "disk-1", "running": false, "laps": 0, "chunks_encoded": 0,
                     "ring_cursor": 0, "ring_slots": 64, "groups": 0, "riders": []}
                ],
                "truncation": {"enabled": true, "safe_index": 900,
                               "held_back_by": "hold #3 (a boot to cut 900)",
                               "first_retained_index": 1, "worker_runs": 2, "last_error": null,
                               "holds": [{"id": 3, "cut": 900}]},
                "chunks": {"chunks": 2, "used_bytes": 2048, "max_bytes": 1_073_741_824u64},
                "failures": [],
                "tailer": {"state": "running", "error": null, "read_errors": 0, "retries": 0},
                "streams": {"iterate_open": 1, "iterate_max": 64, "tail_open": 0, "tail_max": 16}
            },
            "counters": {"appends": durable / 2, "records_appended": durable,
                         "log_records": durable, "intake_queued_bytes": 512},
            "pipeline": {"dot": "digraph pipeline {}", "edges": [
                {"from": "log-tail", "to": "follow-disk-0", "depth": 3, "capacity": 1024},
                {"from": "log-tail", "to": "follow-memory", "depth": 17, "capacity": 1024},
                {"from": "log-tail", "to": "follow-disk-1", "depth": 0, "capacity": 1024}]}
        })
    }

    fn screen(app: &App, width: u16, height: u16) -> Vec<String> {
        let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
        t.draw(|f| {
            draw(f, app);
        })
        .unwrap();
        let buf = t.backend().buffer();
        buf.content
            .chunks(usize::from(buf.area.width))
            .map(|row| row.iter().map(|c| c.symbol()).collect())
            .collect()
    }

    fn has(screen: &[String], needle: &str) -> bool {
        screen.iter().any(|l| l.contains(needle))
    }

    fn app_with_two_samples() -> App {
        let mut app = App::new("127.0.0.1:7070");
        app.apply(Update::Sample(Sample::from_event(event(
            10.0, 1000, 1.0, 0,
        ))));
        app.apply(Update::Sample(Sample::from_event(event(
            12.0, 3000, 3.0, 4096,
        ))));
        app
    }

    #[test]
    fn the_screen_shows_log_rates_views_boots_carousels_and_truncation() {
        let app = app_with_two_samples();
        let s = screen(&app, 180, 44);
        let text = s.join("\n");
        assert!(has(&s, "durable index    3000"), "{text}");
        assert!(
            has(&s, "records/s        1,000.0") || has(&s, "records/s        1,000"),
            "{text}"
        );
        assert!(has(&s, "appends/s        500"), "{text}");
        assert!(has(&s, "records/fsync    10.0"), "{text}");
        assert!(has(&s, "512 B for the writer"), "{text}");
        // A field this renderer does not know is still shown.
        assert!(has(&s, "fsync p99 us     840"), "{text}");
        assert!(has(&s, "fsync latency us p50 120, p99 840.5"), "{text}");
        assert!(has(&s, "held back by     hold #3"), "{text}");
        assert!(has(&s, "#3 cut 900 age 2 s"), "{text}");
        assert!(has(&s, "Views (3 of 3)"), "{text}");
        let row = s
            .iter()
            .find(|l| l.contains("disk-0") && l.contains("caught up"));
        assert!(
            row.is_some_and(|r| r.contains("[0%, 25%)") && r.contains("3000")),
            "{text}"
        );
        assert!(has(&s, "paused: No space left on device"), "{text}");
        // 3 s elapsed of 5 s: 60 %.
        assert!(has(&s, "booting 60%"), "{text}");
        assert!(has(&s, " 60%  4,000 items  2.0 MiB"), "{text}");
        assert!(has(&s, "ETA 2 s"), "{text}");
        assert!(has(&s, "rider #7 shared    [0%, 25%)  cut 900"), "{text}");
        assert!(has(&s, "scanning  riders 1  laps 3"), "{text}");
        assert!(has(&s, "chunks encoded 120  large items 2"), "{text}");
        assert!(has(&s, "2.0 KiB/s"), "{text}");
        assert!(has(&s, "1 idle, no riders: disk-1"), "{text}");
        assert!(has(&s, "iterate 1/64"), "{text}");
        assert!(
            has(&s, "ring log-tail    3 readers, deepest 17/1024"),
            "{text}"
        );
        assert!(has(&s, "· live"), "{text}");
    }

    #[test]
    fn a_node_that_stops_shows_an_error_line_over_its_last_status() {
        let mut app = app_with_two_samples();
        app.apply(Update::Down("connection refused".into()));
        let s = screen(&app, 140, 42);
        assert!(has(&s, "node unreachable: connection refused"));
        assert!(has(&s, "durable index    3000"));
        assert!(!has(&s, "· live"));
    }

    #[test]
    fn hundreds_of_views_scroll_and_filter() {
        let mut e = event(10.0, 1000, 1.0, 0);
        let views: Vec<Value> = (0..300)
            .map(|i| {
                json!({"id": format!("index-{i:03}"), "kind": "index", "range": [0, 4_294_967_296u64],
                       "applied_index": 1000, "lag": if i == 250 { 7 } else { 0 }, "ready": true,
                       "stalled": null, "paused": false})
            })
            .collect();
        e["status"]["views"] = Value::Array(views);
        let mut app = App::new("n");
        app.apply(Update::Sample(Sample::from_event(e)));
        let s = screen(&app, 120, 40);
        assert!(has(&s, "Views (300 of 300, rows 1–"));
        assert!(has(&s, "index-000"));
        assert!(!has(&s, "index-299"));
        app.ui.scroll = usize::MAX;
        let s = screen(&app, 120, 40);
        assert!(has(&s, "index-299"), "{}", s.join("\n"));
        assert!(!has(&s, "index-000"));
        app.ui.scroll = 0;
        app.ui.filter = "index-25".into();
        let s = screen(&app, 120, 40);
        assert!(has(&s, "Views (10 of 300)"), "{}", s.join("\n"));
        app.ui.filter.clear();
        app.ui.trouble_only = true;
        let s = screen(&app, 120, 40);
        assert!(has(&s, "Views (1 of 300)"));
        assert!(has(&s, "index-250"));
    }

    #[test]
    fn a_small_terminal_and_a_missing_section_do_not_panic() {
        let mut e = event(10.0, 1000, 1.0, 0);
        e["status"].as_object_mut().unwrap().remove("truncation");
        e["status"].as_object_mut().unwrap().remove("carousels");
        let mut app = App::new("n");
        app.apply(Update::Sample(Sample::from_event(e)));
        for (w, h) in [(20, 5), (80, 24), (1, 1)] {
            screen(&app, w, h);
        }
        let s = screen(&app, 120, 40);
        assert!(has(&s, "safe index       –"));
        // 80 columns: the node panel gives way to the log and truncation panels.
        let app = app_with_two_samples();
        let s = screen(&app, 80, 24);
        let text = s.join("\n");
        assert!(has(&s, "intake queued    512 B for the writer"), "{text}");
        assert!(has(&s, "held back by"), "{text}");
        assert!(!has(&s, "Node"), "{text}");
        assert!(has(&s, "disk-0"), "{text}");
    }

    #[test]
    fn boot_percent_is_elapsed_over_elapsed_plus_eta() {
        assert_eq!(boot_percent(&json!({"state": "done"})), 100.0);
        assert_eq!(
            boot_percent(&json!({"state": "booting", "seconds": 1.0, "eta_s": 3.0})),
            25.0
        );
        assert_eq!(
            boot_percent(&json!({"state": "booting", "seconds": 1.0, "eta_s": null})),
            0.0
        );
        assert_eq!(progress_bar(50.0, 4), "██░░");
    }
}
