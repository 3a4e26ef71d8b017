//! `spindle top`: a running node's status page in a terminal (docs/status-page.md,
//! "`spindle top`"): the log with its rates, views with lag and boot progress, carousels
//! with their riders, truncation and streams, refreshed from `/v1/status/stream` once a
//! second. `q` or Ctrl-C quits and gives the terminal back as it was.
//!
//! Three parts: `feed` reads the node on its own thread, `model` holds what is known and
//! reacts to keys, `render` draws it (a pure function, tested with ratatui's TestBackend).

mod feed;
mod model;
mod render;
mod text;

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context};
use ratatui::crossterm::event::{self, Event};

use model::{Action, App};

/// How long the screen waits for a key before it looks for news from the feed.
const INPUT_POLL_MS: u64 = 100;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's HTTP address (host:port).
    #[arg(long, default_value = "127.0.0.1:7070")]
    server: String,
    #[arg(long, env = "SPINDLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        bail!("`spindle top` draws on a terminal; use `spindle status` (or --json) for text");
    }
    let (tx, rx) = mpsc::channel();
    let (server, token) = (args.server.clone(), args.token.clone());
    std::thread::Builder::new()
        .name("top-feed".into())
        .spawn(move || feed::run(&server, token.as_deref(), feed::Timing::default(), &tx))
        .context("starting the feed thread")?;
    // Raw mode and the alternate screen; the panic hook ratatui installs restores both.
    let mut terminal = ratatui::try_init().context("setting up the terminal")?;
    let result = screen(&mut terminal, &args.server, &rx);
    ratatui::try_restore().context("restoring the terminal")?;
    result.map(|()| ExitCode::SUCCESS)
}

/// Draw, read keys and take the feed's updates until a quit key.
fn screen(
    terminal: &mut ratatui::DefaultTerminal,
    server: &str,
    rx: &mpsc::Receiver<model::Update>,
) -> anyhow::Result<()> {
    let mut app = App::new(server);
    let mut dirty = true;
    loop {
        if dirty {
            terminal.draw(|f| app.ui.page_rows = render::draw(f, &app))?;
            dirty = false;
        }
        if event::poll(Duration::from_millis(INPUT_POLL_MS))? {
            match event::read()? {
                Event::Key(key) => {
                    if app.on_key(key) == Action::Quit {
                        return Ok(());
                    }
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
        loop {
            match rx.try_recv() {
                Ok(update) => {
                    app.apply(update);
                    dirty = true;
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => bail!("the status feed stopped"),
            }
        }
    }
}
