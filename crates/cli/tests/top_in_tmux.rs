//! `spindle top` as a person sees it: run in a tmux pane (a real pseudo-terminal) against a
//! running `spindle serve` with a token, it shows the API's durable index and a Disk View's
//! row, riders on the carousel and their leaving, an error line when the node stops and the
//! live status again when it comes back on the same address, a typed filter narrowing the
//! views, and `q` ends it with exit status 0 and the shell's screen restored; a wrong token
//! from `SPINDLE_TOKEN` is reported on the error line, and Ctrl-C quits too.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use spindle_server::client::{grpc_connect, iterate, HttpClient};
use spindle_server::proto::IterateRequest;

const TOKEN: &str = "top-secret-token";
/// How long the screen may take to show something before the test fails.
const SCREEN_DEADLINE: Duration = Duration::from_secs(60);

struct Server {
    child: Child,
    http: String,
    grpc: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, http: &str) -> Server {
    // Small iteration chunks and one Disk View, so a rider that reads nothing stays aboard
    // once its stream's buffers are full.
    let config = dir.with_extension("toml");
    std::fs::write(&config, "iter_chunk_bytes = 4096\ndisk_partitions = 1\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args([
            "serve",
            "--http-listen",
            http,
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir)
        .args(["--token", TOKEN])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
            .to_owned()
    };
    Server {
        http: field("http="),
        grpc: field("grpc="),
        child,
    }
}

/// A tmux server of this test's own (its socket in the test's directory).
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .output()
            .unwrap()
    }

    fn screen(&self) -> String {
        let out = self.cmd(&["capture-pane", "-p", "-t", "top"]);
        assert!(out.status.success(), "capture-pane: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Poll the pane until `ok` holds for what it shows; fail with the screen after the deadline.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < SCREEN_DEADLINE,
                "the screen never showed {what}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn durable_index(client: &HttpClient, rt: &tokio::runtime::Runtime) -> u64 {
    let (status, s) = rt
        .block_on(client.json(Method::GET, "/v1/status", None))
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{s}");
    s["log"]["durable_index"].as_u64().unwrap()
}

/// The line of the views table that shows `view` of `kind`.
fn view_row<'a>(screen: &'a str, view: &str, kind: &str) -> Option<&'a str> {
    screen.lines().find(|l| {
        let mut words = l
            .split(|c: char| c == '│' || c.is_whitespace())
            .filter(|w| !w.is_empty());
        words.next() == Some(view) && words.next() == Some(kind)
    })
}

#[test]
fn top_in_a_terminal_follows_the_node_and_quits_cleanly() {
    if !tmux_available() {
        eprintln!("SKIPPED: tmux is not installed (scripts/setup.sh installs it with apt-get)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = serve(&data, "127.0.0.1:0");
    let client = HttpClient::new(&server.http, Some(TOKEN.to_owned()));
    // ~20 MiB: more than a gRPC stream and the sockets buffer.
    let pad = "x".repeat(2000);
    for t in 0..200 {
        let writes: Vec<_> = (0..50)
            .map(|i| json!({"item": {"kind": "node", "id": format!("n{t}-{i}")}, "value": {"pad": pad}}))
            .collect();
        let body = json!({ "writes": writes });
        let (status, answer) = rt
            .block_on(client.json(Method::POST, "/v1/txn", Some(&body)))
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let durable = durable_index(&client, &rt);
    assert_eq!(durable, 200 * 50);

    let tmux = Tmux {
        socket: dir.path().join("tmux.sock"),
    };
    let script = format!(
        "printf 'shell before top\\n'; '{}' top --server {} --token {TOKEN}; echo \"top exited with $?\"; sleep 600",
        env!("CARGO_BIN_EXE_spindle"),
        server.http
    );
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "150",
        "-y",
        "45",
        "sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success(), "tmux new-session: {out:?}");

    // The durable index the API answers, and Disk View 0's row caught up to it.
    let expected = format!("durable index    {durable} ");
    let screen = tmux.wait_for("the durable index and disk-0 caught up", |s| {
        s.contains(&expected)
            && view_row(s, "disk-0", "disk")
                .is_some_and(|r| r.contains(&durable.to_string()) && r.contains("caught up"))
    });
    let row = view_row(&screen, "disk-0", "disk").unwrap();
    assert!(row.contains("[0%, 100%)"), "{row}");
    assert!(screen.contains("· live"), "{screen}");
    assert!(view_row(&screen, "memory", "memory").is_some(), "{screen}");

    // Two riders board disk-0's carousel, read one message each and hold: top shows them
    // with the cut they boarded at; when they have read everything they leave.
    let riders = rt.block_on(async {
        let mut grpc = grpc_connect(&server.grpc, Some(TOKEN)).await.unwrap();
        let mut riders = Vec::new();
        for _ in 0..2 {
            let request = IterateRequest {
                view: "disk-0".into(),
                ..IterateRequest::default()
            };
            let mut stream = iterate(&mut grpc, request).await.unwrap();
            assert!(stream.message().await.unwrap().is_some());
            riders.push(stream);
        }
        riders
    });
    let screen = tmux.wait_for("two riders on disk-0's carousel", |s| {
        s.contains("riders 2") && s.matches(&format!("cut {durable} ")).count() >= 2
    });
    assert!(screen.contains("rider #"), "{screen}");
    rt.block_on(async {
        for mut stream in riders {
            while stream.message().await.unwrap().is_some() {}
        }
    });
    tmux.wait_for("the riders gone", |s| {
        s.contains("1 idle, no riders: disk-0") && !s.contains("rider #")
    });

    // The node stops: an error line, the last status stays.
    let http = server.http.clone();
    drop(server);
    let screen = tmux.wait_for("the error line", |s| s.contains("node unreachable"));
    assert!(screen.contains(&expected), "{screen}");
    assert!(!screen.contains("· live"), "{screen}");

    // It comes back on the same address with more records: top recovers on its own.
    let server = serve(&data, &http);
    let client = HttpClient::new(&server.http, Some(TOKEN.to_owned()));
    let body = json!({"writes": [{"item": {"kind": "node", "id": "after"}, "value": {}}]});
    let (status, _) = rt
        .block_on(client.json(Method::POST, "/v1/txn", Some(&body)))
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let durable = durable_index(&client, &rt);
    let expected = format!("durable index    {durable} ");
    tmux.wait_for("the restarted node's durable index, live", |s| {
        s.contains(&expected) && s.contains("· live") && !s.contains("node unreachable")
    });

    // A filter typed after `/` narrows the views to the matching ones.
    let out = tmux.cmd(&["send-keys", "-t", "top", "/memory", "Enter"]);
    assert!(out.status.success(), "send-keys: {out:?}");
    let screen = tmux.wait_for("the filtered views", |s| s.contains("Views (1 of 2)"));
    assert!(view_row(&screen, "memory", "memory").is_some(), "{screen}");
    assert!(view_row(&screen, "disk-0", "disk").is_none(), "{screen}");

    // `q` quits with status 0 and gives the shell its screen back.
    let out = tmux.cmd(&["send-keys", "-t", "top", "q"]);
    assert!(out.status.success(), "send-keys: {out:?}");
    let screen = tmux.wait_for("top's exit", |s| s.contains("top exited with"));
    assert!(screen.contains("top exited with 0"), "{screen}");
    assert!(screen.contains("shell before top"), "{screen}");
    assert!(!screen.contains("durable index"), "{screen}");

    // A wrong token from SPINDLE_TOKEN: the node's refusal and what to do, on the error
    // line. Ctrl-C quits the same way as `q` (raw mode makes it a key, not a signal).
    let script = format!(
        "SPINDLE_TOKEN=wrong '{}' top --server {}; echo \"top exited with $?\"; sleep 600",
        env!("CARGO_BIN_EXE_spindle"),
        server.http
    );
    let out = tmux.cmd(&["kill-session", "-t", "top"]);
    assert!(out.status.success(), "kill-session: {out:?}");
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "150",
        "-y",
        "45",
        "sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success(), "tmux new-session: {out:?}");
    tmux.wait_for("the refused token", |s| {
        s.contains("node unreachable: 401 Unauthorized, give the node's token with --token or SPINDLE_TOKEN")
            && s.contains("missing or wrong bearer token")
    });
    let out = tmux.cmd(&["send-keys", "-t", "top", "C-c"]);
    assert!(out.status.success(), "send-keys: {out:?}");
    let screen = tmux.wait_for("top's exit", |s| s.contains("top exited with"));
    assert!(screen.contains("top exited with 0"), "{screen}");
    assert!(!screen.contains("durable index"), "{screen}");
}
