//! What `spindle top` knows: the last two status samples from the node, the rates between
//! them, and the screen's own state (filter, scroll). Pure: the feed and the keyboard change
//! it through `apply` and `on_key`, and the renderer only reads it.
//!
//! Samples are kept as JSON (`serde_json::Value`), not as the server's structs, so a node
//! that reports more fields (or a few fewer) is still shown: missing numbers render as `–`.

use std::collections::{BTreeMap, VecDeque};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde_json::Value;

/// Points of the records/s sparkline: one per sample, two minutes.
pub const RATE_HISTORY_POINTS_MAX: usize = 120;

/// Hold ages are counted from the first sample that showed the hold; this bounds the memory
/// of holds already gone.
pub const HOLDS_REMEMBERED_MAX: usize = 4096;

/// One event of `/v1/status/stream`: `status` is what `GET /v1/status` answers, `counters`
/// the totals the rates are computed from, `pipeline` the rings' edges with queue depths.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub status: Value,
    pub counters: Value,
    pub pipeline: Value,
}

impl Sample {
    /// Parse one event's JSON. A bare status (`GET /v1/status`) is accepted too; its rates
    /// then come from the log's indexes alone.
    pub fn from_event(v: Value) -> Sample {
        if v.get("status").is_some() {
            Sample {
                counters: v.get("counters").cloned().unwrap_or(Value::Null),
                pipeline: v.get("pipeline").cloned().unwrap_or(Value::Null),
                status: v["status"].clone(),
            }
        } else {
            Sample {
                status: v,
                counters: Value::Null,
                pipeline: Value::Null,
            }
        }
    }

    pub fn uptime_s(&self) -> Option<f64> {
        self.status["uptime_s"].as_f64()
    }

    /// Records made durable so far: the log's counter, or the durable index without it.
    fn log_records(&self) -> Option<u64> {
        self.counters["log_records"]
            .as_u64()
            .or_else(|| self.status["log"]["durable_index"].as_u64())
    }
}

/// Rates between two samples of the same node run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rates {
    pub seconds: f64,
    pub appends_per_s: Option<f64>,
    pub records_per_s: Option<f64>,
    /// Records made durable per fsync; `None` when no fsync happened in between.
    pub records_per_sync: Option<f64>,
    /// Frame bytes per second of each rider seen in both samples: (carousel view, rider id).
    pub rider_bytes_per_s: BTreeMap<(String, u64), f64>,
}

impl Rates {
    /// `None` when the samples do not follow each other in one run of the node (the second
    /// is not later, or a counter went backwards: the node restarted).
    pub fn between(prev: &Sample, cur: &Sample) -> Option<Rates> {
        let seconds = cur.uptime_s()? - prev.uptime_s()?;
        if seconds <= 0.0 {
            return None;
        }
        let delta = |a: Option<u64>, b: Option<u64>| -> Option<Option<u64>> {
            match (a, b) {
                (Some(a), Some(b)) if b < a => None,
                (Some(a), Some(b)) => Some(Some(b - a)),
                _ => Some(None),
            }
        };
        let counter = |s: &Sample, k: &str| s.counters[k].as_u64();
        let appends = delta(counter(prev, "appends"), counter(cur, "appends"))?;
        let records = delta(prev.log_records(), cur.log_records())?;
        let syncs = delta(
            prev.status["log"]["syncs"].as_u64(),
            cur.status["log"]["syncs"].as_u64(),
        )?;
        let mut rider_bytes_per_s = BTreeMap::new();
        let before = riders(prev);
        for (key, bytes) in riders(cur) {
            if let Some(&was) = before.get(&key) {
                if bytes >= was {
                    rider_bytes_per_s.insert(key, (bytes - was) as f64 / seconds);
                }
            }
        }
        Some(Rates {
            seconds,
            appends_per_s: appends.map(|n| n as f64 / seconds),
            records_per_s: records.map(|n| n as f64 / seconds),
            records_per_sync: match (records, syncs) {
                (Some(r), Some(s)) if s > 0 => Some(r as f64 / s as f64),
                _ => None,
            },
            rider_bytes_per_s,
        })
    }
}

/// Bytes delivered so far to each rider, by (carousel view, rider id).
fn riders(s: &Sample) -> BTreeMap<(String, u64), u64> {
    let mut out = BTreeMap::new();
    for c in s.status["carousels"].as_array().into_iter().flatten() {
        let view = c["view"].as_str().unwrap_or("?");
        for r in c["riders"].as_array().into_iter().flatten() {
            if let (Some(id), Some(bytes)) = (r["id"].as_u64(), r["bytes"].as_u64()) {
                out.insert((view.to_owned(), id), bytes);
            }
        }
    }
    out
}

/// What the feed tells the screen.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    Sample(Sample),
    /// The node cannot be read now, and why; the feed keeps trying.
    Down(String),
}

/// Keys that act on the screen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    Quit,
}

/// The screen's own state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ui {
    /// Views (and carousels) whose id or kind contains this are shown.
    pub filter: String,
    /// Keys go into the filter (after `/`, until Enter or Esc).
    pub editing: bool,
    /// Only views that lag, boot or failed.
    pub trouble_only: bool,
    /// First view row shown.
    pub scroll: usize,
    /// View rows the last drawing had room for (what `draw` returned): a page.
    pub page_rows: usize,
}

/// Everything the renderer draws.
#[derive(Clone, Debug, Default)]
pub struct App {
    /// The node's address as given.
    pub server: String,
    pub current: Option<Sample>,
    pub previous: Option<Sample>,
    /// Records/s of recent samples, oldest first.
    pub history: VecDeque<f64>,
    /// Hold id → the node's uptime when a sample first showed it.
    pub hold_seen: BTreeMap<u64, f64>,
    /// Why the node cannot be read now; the last sample stays on screen.
    pub down: Option<String>,
    pub ui: Ui,
}

impl App {
    pub fn new(server: &str) -> App {
        App {
            server: server.to_owned(),
            ..App::default()
        }
    }

    /// The rates between the last two samples, when they follow each other.
    pub fn rates(&self) -> Option<Rates> {
        Rates::between(self.previous.as_ref()?, self.current.as_ref()?)
    }

    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Down(why) => self.down = Some(why),
            Update::Sample(s) => {
                self.down = None;
                let now = s.uptime_s().unwrap_or(0.0);
                if self
                    .current
                    .as_ref()
                    .and_then(Sample::uptime_s)
                    .is_some_and(|t| t > now)
                {
                    // The node restarted: nothing of the old run carries over.
                    self.history.clear();
                    self.hold_seen.clear();
                }
                for h in s.status["truncation"]["holds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if let Some(id) = h["id"].as_u64().filter(|_| h["owner"].is_null()) {
                        self.hold_seen.entry(id).or_insert(now);
                    }
                }
                while self.hold_seen.len() > HOLDS_REMEMBERED_MAX {
                    self.hold_seen.pop_first();
                }
                self.previous = self.current.replace(s);
                if let Some(r) = self.rates().and_then(|r| r.records_per_s) {
                    self.history.push_back(r);
                    while self.history.len() > RATE_HISTORY_POINTS_MAX {
                        self.history.pop_front();
                    }
                }
            }
        }
    }

    pub fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Continue;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        let ui = &mut self.ui;
        if ui.editing {
            match key.code {
                KeyCode::Enter => ui.editing = false,
                KeyCode::Esc => {
                    ui.editing = false;
                    ui.filter.clear();
                }
                KeyCode::Backspace => {
                    ui.filter.pop();
                }
                KeyCode::Char(c) => ui.filter.push(c),
                _ => {}
            }
            ui.scroll = 0;
            return Action::Continue;
        }
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('/') => {
                ui.editing = true;
                ui.scroll = 0;
            }
            KeyCode::Esc => {
                ui.filter.clear();
                ui.scroll = 0;
            }
            KeyCode::Char('t') => {
                ui.trouble_only = !ui.trouble_only;
                ui.scroll = 0;
            }
            KeyCode::Down | KeyCode::Char('j') => ui.scroll = ui.scroll.saturating_add(1),
            KeyCode::Up | KeyCode::Char('k') => ui.scroll = ui.scroll.saturating_sub(1),
            KeyCode::PageDown => ui.scroll = ui.scroll.saturating_add(ui.page_rows.max(1)),
            KeyCode::PageUp => ui.scroll = ui.scroll.saturating_sub(ui.page_rows.max(1)),
            KeyCode::Home | KeyCode::Char('g') => ui.scroll = 0,
            KeyCode::End | KeyCode::Char('G') => ui.scroll = usize::MAX,
            _ => {}
        }
        // Past the last page the view would not move: keep `Up` one key away from moving.
        let last_first_row = self.shown_views().len().saturating_sub(self.ui.page_rows);
        self.ui.scroll = self.ui.scroll.min(last_first_row);
        Action::Continue
    }

    /// The views the filter lets through, in the node's order.
    pub fn shown_views(&self) -> Vec<&Value> {
        let Some(s) = &self.current else {
            return Vec::new();
        };
        s.status["views"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| self.matches(v["id"].as_str(), v["kind"].as_str()))
            .filter(|v| !self.ui.trouble_only || in_trouble(v, boot_of(s, v)))
            .collect()
    }

    /// Whether the filter lets a view (or a carousel of that view) through.
    pub fn matches(&self, id: Option<&str>, kind: Option<&str>) -> bool {
        let q = self.ui.filter.trim().to_lowercase();
        q.is_empty()
            || id.is_some_and(|i| i.to_lowercase().contains(&q))
            || kind.is_some_and(|k| k.to_lowercase().contains(&q))
    }
}

/// The boot of a view, if the node reports one.
pub fn boot_of<'a>(s: &'a Sample, view: &Value) -> Option<&'a Value> {
    let id = view["id"].as_str()?;
    s.status["boots"]
        .as_array()?
        .iter()
        .rev()
        .find(|b| b["view"].as_str() == Some(id))
}

/// A view that lags, boots, is paused or failed.
pub fn in_trouble(view: &Value, boot: Option<&Value>) -> bool {
    view["lag"].as_u64().unwrap_or(0) > 0
        || view["ready"] == false
        || !view["stalled"].is_null()
        || boot.is_some_and(|b| b["state"] != "done")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample(uptime: f64, appends: u64, records: u64, syncs: u64, rider_bytes: u64) -> Sample {
        Sample::from_event(json!({
            "status": {"uptime_s": uptime, "log": {"durable_index": records, "syncs": syncs},
                       "carousels": [{"view": "disk-0", "riders": [{"id": 7, "bytes": rider_bytes}]}],
                       "truncation": {"holds": []}},
            "counters": {"appends": appends, "log_records": records, "intake_queued_bytes": 0}
        }))
    }

    #[test]
    fn rates_are_counter_differences_over_the_uptime_difference() {
        let r = Rates::between(
            &sample(10.0, 100, 1000, 50, 0),
            &sample(12.0, 300, 2000, 60, 4096),
        )
        .unwrap();
        assert_eq!(r.seconds, 2.0);
        assert_eq!(r.appends_per_s, Some(100.0));
        assert_eq!(r.records_per_s, Some(500.0));
        assert_eq!(r.records_per_sync, Some(100.0));
        assert_eq!(r.rider_bytes_per_s[&("disk-0".to_owned(), 7)], 2048.0);
    }

    #[test]
    fn no_fsync_in_between_gives_no_records_per_sync() {
        let r = Rates::between(&sample(1.0, 0, 5, 3, 0), &sample(2.0, 0, 5, 3, 0)).unwrap();
        assert_eq!(r.records_per_sync, None);
        assert_eq!(r.records_per_s, Some(0.0));
    }

    #[test]
    fn a_restarted_node_gives_no_rates_and_forgets_its_history() {
        assert_eq!(
            Rates::between(&sample(100.0, 500, 900, 9, 0), &sample(1.0, 1, 2, 1, 0)),
            None
        );
        let mut app = App::new("n");
        app.apply(Update::Sample(sample(10.0, 0, 0, 0, 0)));
        app.apply(Update::Sample(sample(11.0, 10, 10, 1, 0)));
        assert_eq!(app.history.len(), 1);
        app.apply(Update::Sample(sample(1.0, 0, 0, 0, 0)));
        assert!(app.history.is_empty());
        assert_eq!(app.rates(), None);
    }

    #[test]
    fn a_down_node_keeps_its_last_sample_until_the_next_one_clears_the_error() {
        let mut app = App::new("n");
        app.apply(Update::Sample(sample(10.0, 0, 0, 0, 0)));
        app.apply(Update::Down("refused".into()));
        assert_eq!(app.down.as_deref(), Some("refused"));
        assert!(app.current.is_some());
        app.apply(Update::Sample(sample(11.0, 0, 0, 0, 0)));
        assert_eq!(app.down, None);
    }

    #[test]
    fn keys_filter_scroll_and_quit() {
        let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
        let mut app = App::new("n");
        let views: Vec<Value> = (0..50)
            .map(|i| serde_json::json!({"id": format!("disk-{i}"), "kind": "disk", "lag": 0}))
            .collect();
        app.apply(Update::Sample(Sample::from_event(
            serde_json::json!({"uptime_s": 1.0, "views": views}),
        )));
        app.ui.page_rows = 10;
        assert_eq!(app.on_key(key(KeyCode::Down)), Action::Continue);
        assert_eq!(app.ui.scroll, 1);
        app.on_key(key(KeyCode::PageDown));
        assert_eq!(app.ui.scroll, 11);
        app.on_key(key(KeyCode::End));
        assert_eq!(app.ui.scroll, 40, "the last page starts at row 40 of 50");
        app.on_key(key(KeyCode::Up));
        assert_eq!(app.ui.scroll, 39);
        app.on_key(key(KeyCode::Home));
        assert_eq!(app.ui.scroll, 0);
        app.on_key(key(KeyCode::Char('/')));
        for c in "disk-1q".chars() {
            assert_eq!(app.on_key(key(KeyCode::Char(c))), Action::Continue);
        }
        app.on_key(key(KeyCode::Backspace));
        app.on_key(key(KeyCode::Enter));
        assert_eq!(app.ui.filter, "disk-1");
        assert_eq!(app.ui.scroll, 0);
        assert!(app.matches(Some("disk-12"), Some("disk")));
        assert!(!app.matches(Some("memory"), Some("memory")));
        app.on_key(key(KeyCode::Esc));
        assert_eq!(app.ui.filter, "");
        assert_eq!(app.on_key(key(KeyCode::Char('q'))), Action::Quit);
        assert_eq!(
            app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
    }
}
