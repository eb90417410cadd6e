//! A real browser for the console's tests: headless Chromium driven over WebDriver by
//! `chromedriver` (Debian's `chromium` and `chromium-driver`, which `scripts/browser-env`
//! installs), on loopback.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A running chromedriver, killed when dropped.
pub struct Driver {
    child: Child,
    url: String,
    runtime: tokio::runtime::Runtime,
    http: reqwest::Client,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One browser window.
pub struct Session<'a> {
    driver: &'a Driver,
    id: String,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let _ = self.driver.send(
            reqwest::Method::DELETE,
            &format!("/session/{}", self.id),
            None,
        );
    }
}

impl Driver {
    /// chromedriver on a port it picks, or `None` (said on stderr) where it is not installed.
    pub fn start() -> Option<Driver> {
        let found = ["chromedriver", "/usr/bin/chromedriver"]
            .into_iter()
            .find(|c| Command::new(c).arg("--version").output().is_ok())?;
        let mut child = Command::new(found)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut lines = BufReader::new(child.stdout.take()?).lines();
        let port = lines.find_map(|line| {
            let line = line.ok()?;
            let (_, rest) = line.split_once("started successfully on port ")?;
            rest.trim_end_matches('.').parse::<u16>().ok()
        })?;
        std::thread::spawn(move || lines.for_each(drop));
        Some(Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?,
            http: reqwest::Client::new(),
        })
    }

    fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let request = self.http.request(method, format!("{}{path}", self.url));
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        self.runtime.block_on(async {
            let answer: Value = request
                .send()
                .await
                .expect("chromedriver answers")
                .json()
                .await
                .expect("chromedriver answers JSON");
            answer
        })
    }

    /// A new headless window of `width` × `height`.
    pub fn session(&self, width: u32, height: u32) -> Session<'_> {
        let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("chromium");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": binary,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", format!("--window-size={width},{height}")],
            },
        }}});
        let answer = self.send(reqwest::Method::POST, "/session", Some(capabilities));
        let id = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned();
        Session { driver: self, id }
    }
}

impl Session<'_> {
    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let answer = self
            .driver
            .send(method, &format!("/session/{}{path}", self.id), body);
        if let Some(error) = answer["value"]["error"].as_str() {
            panic!("WebDriver {path}: {error}: {}", answer["value"]["message"]);
        }
        answer["value"].clone()
    }

    pub fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})));
    }

    /// Runs `script` in the page (`return ...` gives a value back).
    pub fn run(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    fn element(&self, css: &str) -> String {
        let found = self.call(
            reqwest::Method::POST,
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        found[ELEMENT].as_str().expect("an element id").to_owned()
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        );
    }

    pub fn click(&self, css: &str) {
        let id = self.element(css);
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        );
    }

    /// The visible text of the first element `css` selects, or `None` if none does.
    pub fn text(&self, css: &str) -> Option<String> {
        let text = self.run(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            json!([css]),
        );
        text.as_str().map(str::to_owned)
    }

    /// Waits (polling, up to `within`) until `check` gives a value.
    pub fn until<T>(&self, what: &str, within: Duration, check: impl Fn(&Self) -> Option<T>) -> T {
        let deadline = Instant::now() + within;
        loop {
            if let Some(found) = check(self) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}; the page shows:\n{}",
                self.text("body").unwrap_or_default()
            );
            std::thread::park_timeout(Duration::from_millis(100));
        }
    }

    /// A PNG of the window, written to `path`.
    pub fn screenshot(&self, path: &std::path::Path) {
        use base64::Engine;
        let png = self.call(reqwest::Method::GET, "/screenshot", None);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("base64"))
            .expect("a PNG");
        std::fs::write(path, bytes).expect("writing the screenshot");
    }
}
