//! A minimal W3C WebDriver client over the crate's own HTTP client, driving Debian's
//! headless Chromium through `chromedriver`: WebDriver is JSON over HTTP, so a handful of
//! calls need no browser-automation dependency.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::HttpClient;

/// How long a page condition may take to appear before the test fails.
pub const WAIT_MS_MAX: u64 = 20_000;

pub struct Browser {
    driver: Child,
    http: HttpClient,
    session: String,
}

fn find(names: &[&str]) -> Option<String> {
    let path = std::env::var("PATH").unwrap_or_default();
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
            .map(|p| p.to_string_lossy().into_owned())
    })
}

impl Browser {
    /// Start `chromedriver` and a headless Chromium session. Panics with what to install
    /// when either is missing: the browser test never passes without a browser.
    pub async fn start() -> Browser {
        let driver_bin = find(&["chromedriver"]).unwrap_or_else(|| {
            panic!("chromedriver not found: install Debian's chromium and chromium-driver (scripts/setup.sh does)")
        });
        let chromium = find(&["chromium", "chromium-browser", "google-chrome"]).unwrap_or_else(|| {
            panic!("chromium not found: install Debian's chromium and chromium-driver (scripts/setup.sh does)")
        });
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let http = HttpClient::new(&format!("127.0.0.1:{port}"), None);
        let started = Instant::now();
        loop {
            if let Ok((StatusCode::OK, v)) = http.json(Method::GET, "/status", None).await {
                if v["value"]["ready"] == true {
                    break;
                }
            }
            assert!(
                started.elapsed() < Duration::from_millis(WAIT_MS_MAX),
                "chromedriver did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1500"]
            }
        }}});
        let (status, answer) = http
            .json(Method::POST, "/session", Some(&caps))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "new session: {answer}");
        let session = answer["value"]["sessionId"].as_str().unwrap().to_owned();
        Browser {
            driver,
            http,
            session,
        }
    }

    async fn call(&self, method: Method, what: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}/{what}", self.session);
        let (status, answer) = self.http.json(method, &path, body.as_ref()).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{what}: {answer}");
        answer["value"].clone()
    }

    pub async fn open(&self, url: &str) {
        self.call(Method::POST, "url", Some(json!({"url": url})))
            .await;
    }

    /// Run `script` (a function body that returns a value) in the page.
    pub async fn eval(&self, script: &str) -> Value {
        self.call(
            Method::POST,
            "execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Poll `script` until `want` accepts its value; fails the test after `WAIT_MS_MAX`.
    pub async fn wait_for(
        &self,
        what: &str,
        script: &str,
        mut want: impl FnMut(&Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            let v = self.eval(script).await;
            if want(&v) {
                return v;
            }
            assert!(
                started.elapsed() < Duration::from_millis(WAIT_MS_MAX),
                "the page never showed {what}; last seen: {v}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        let b64 = self.call(Method::GET, "screenshot", None).await;
        base64_decode(b64.as_str().unwrap())
    }

    pub async fn quit(mut self) {
        let path = format!("/session/{}", self.session);
        let _ = self.http.json(Method::DELETE, &path, None).await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .map(value)
        .collect();
    digits
        .chunks(4)
        .flat_map(|q| {
            let n = q
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, d)| n | u32::from(*d) << (18 - 6 * i));
            let bytes = n.to_be_bytes();
            bytes[1..q.len()].to_vec()
        })
        .collect()
}
