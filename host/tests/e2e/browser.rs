//! The live view in a real browser: Debian's headless Chromium, driven
//! over the DevTools protocol, loads `/ui` from settle serving the device
//! plugin against the simulator. It sees the devices, runs a command from
//! the page's form, and sees the task turn `completed` within 2 s of the
//! simulator showing the change; without the token the page says it was
//! refused. A screenshot is saved as `target/ui-screenshot.png`.
//!
//! Chromium is installed by `make test` (`make chromium`), which sets
//! `SETTLE_REQUIRE_CHROMIUM=1`: there a missing browser fails the test.
//! Elsewhere (a plain `cargo test`) the test says it did not run.
//!
//! The DevTools protocol travels over a pipe (`--remote-debugging-pipe`:
//! Chromium reads commands from fd 3 and writes answers to fd 4, each a
//! JSON message ending in a NUL byte), so no WebSocket client is needed.

use crate::common::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

const TOKEN: &str = "browser-test-token";
const CHROMIUM: &str = "/usr/bin/chromium";

/// A headless Chromium and one page of it.
struct Browser {
    child: Child,
    commands: ChildStdin,
    answers: BufReader<ChildStdout>,
    next_id: u64,
    session: Option<String>,
    /// What the page reported: exceptions, console and log entries (CSP
    /// and network errors among them), for failure messages.
    reports: Vec<String>,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn launch() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // The shell moves the pipes to fds 3 and 4, where Chromium looks
        // for them, and points its own stdin and stdout elsewhere.
        let command = format!(
            "exec {CHROMIUM} --headless --no-sandbox --disable-gpu --disable-quic \
--no-first-run --disable-background-networking --disable-component-update --disable-sync \
--disable-dev-shm-usage --hide-scrollbars --window-size=1280,1000 \
--user-data-dir={} --remote-debugging-pipe about:blank 3<&0 4>&1 0</dev/null 1>/dev/null",
            profile.path().display()
        );
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", &command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromium starts");
        let commands = child.stdin.take().unwrap();
        let answers = BufReader::new(child.stdout.take().unwrap());
        let mut browser = Browser {
            child,
            commands,
            answers,
            next_id: 1,
            session: None,
            reports: Vec::new(),
            _profile: profile,
        };
        let target = browser
            .send("Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let attached = browser
            .send(
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
            )
            .await;
        browser.session = Some(attached["sessionId"].as_str().unwrap().to_string());
        browser.send("Page.enable", json!({})).await;
        browser.send("Runtime.enable", json!({})).await;
        browser.send("Log.enable", json!({})).await;
        browser
            .send(
                "Emulation.setDeviceMetricsOverride",
                json!({"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": false}),
            )
            .await;
        browser
    }

    /// Sends one command (to the page, once attached) and returns its
    /// result; events in between are skipped.
    async fn send(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        self.commands.write_all(&bytes).await.unwrap();
        self.commands.flush().await.unwrap();
        let (answers, reports) = (&mut self.answers, &mut self.reports);
        let read = async {
            loop {
                let mut buffer = Vec::new();
                let n = answers.read_until(0, &mut buffer).await.unwrap();
                assert!(n > 0, "chromium closed its DevTools pipe");
                buffer.pop();
                let answer: Value = serde_json::from_slice(&buffer).unwrap();
                if answer["id"] == id {
                    return answer;
                }
                match answer["method"].as_str() {
                    Some("Runtime.exceptionThrown") => reports.push(format!(
                        "exception: {}",
                        answer["params"]["exceptionDetails"]
                    )),
                    Some("Runtime.consoleAPICalled") => reports.push(format!(
                        "console.{}: {}",
                        answer["params"]["type"], answer["params"]["args"]
                    )),
                    Some("Log.entryAdded") => {
                        reports.push(format!("log: {}", answer["params"]["entry"]["text"]))
                    }
                    _ => {}
                }
            }
        };
        let answer = tokio::time::timeout(DEADLINE, read)
            .await
            .unwrap_or_else(|_| panic!("chromium did not answer {method}"));
        if let Some(error) = answer.get("error") {
            panic!("{method}: {error}");
        }
        answer["result"].clone()
    }

    async fn navigate(&mut self, url: &str) {
        self.send("Page.navigate", json!({"url": url})).await;
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .send(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        if let Some(exception) = result.get("exceptionDetails") {
            panic!("{expression}: {exception}");
        }
        result["result"]["value"].clone()
    }

    async fn screenshot(&mut self, path: &std::path::Path) {
        use base64::Engine;
        let shot = self
            .send(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true}),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }

    async fn close(mut self) {
        self.session = None;
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            self.send("Browser.close", json!({})),
        )
        .await;
        let _ = self.child.kill().await;
    }
}

/// Whether Chromium is here; without it the test fails when it must run
/// (`SETTLE_REQUIRE_CHROMIUM=1`, set by `make test`) and says it did not
/// run otherwise.
fn chromium_present() -> bool {
    if std::path::Path::new(CHROMIUM).exists() {
        return true;
    }
    assert!(
        std::env::var("SETTLE_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
        "{CHROMIUM} is not installed and SETTLE_REQUIRE_CHROMIUM=1: run `make chromium` (apt-get install chromium)"
    );
    eprintln!("browser test NOT RUN: {CHROMIUM} is not installed (make chromium installs it)");
    false
}

fn screenshot_path() -> PathBuf {
    target_dir().join("ui-screenshot.png")
}

#[tokio::test]
async fn the_live_view_runs_a_command_and_shows_it_complete_in_a_real_browser() {
    if !chromium_present() {
        return;
    }
    // A time bound is the point of this test: it does not share the CPU
    // with the tests that load it on purpose.
    let _alone = cpu_heavy().await;
    let sim = sim(Duration::from_millis(600)).await;
    let api = sim.base_url();
    let server = serve_http(&[
        "--device-api",
        api.as_str(),
        "--plugin-config",
        FAST,
        // The command answers with the task at once, so the page learns of
        // its end from the listen stream, as it does for any command that
        // takes longer than the runner waits.
        "--inline-wait-ms",
        "0",
        "--ui",
        "--ui-token",
        TOKEN,
    ])
    .await;
    let root = server.url.trim_end_matches("/mcp").to_string();
    let mut browser = Browser::launch().await;

    // Without the token, the page says it was refused.
    browser.navigate(&format!("{root}/ui")).await;
    let refused = eventually("the refusal page", async || {
        let text = browser
            .eval("document.body ? document.body.innerText : ''")
            .await;
        let text = text.as_str().unwrap_or_default().to_string();
        match text.contains("401") {
            true => Ok(text),
            false => Err(format!("page says {text:?}")),
        }
    })
    .await;
    assert!(refused.contains("needs a token"), "{refused}");

    // With it: the devices, online, each with its chart.
    browser.navigate(&format!("{root}/ui?token={TOKEN}")).await;
    eventually("the page to load its devices", async || {
        let ready = browser
            .eval("document.body && document.body.dataset.ready")
            .await;
        let online = browser
            .eval("document.querySelectorAll('[data-device] .online[data-online=\"true\"]').length")
            .await;
        match (ready.as_str(), online.as_u64()) {
            (Some("true"), Some(n)) if n >= 2 => Ok(()),
            (Some("error"), _) => {
                let problem = browser
                    .eval("document.getElementById('problem').innerText")
                    .await;
                panic!("the page failed to load: {problem}")
            }
            other => Err(format!(
                "ready, devices online: {other:?}; the page reported: {:?}",
                browser.reports
            )),
        }
    })
    .await;
    let address = browser.eval("location.href").await;
    assert!(
        !address.as_str().unwrap().contains(TOKEN),
        "the token left the address bar: {address}"
    );
    assert_eq!(
        browser
            .eval("document.querySelectorAll('[data-device=\"ac-living\"] .chart svg').length")
            .await,
        json!(1)
    );
    eventually("the live stream to open", async || {
        let state = browser
            .eval("document.getElementById('connection').dataset.state")
            .await;
        match state.as_str() {
            Some("live") => Ok(()),
            other => Err(format!("connection {other:?}")),
        }
    })
    .await;

    // Run a command from the page's form.
    let before = sim
        .sim()
        .inspect("ac-living")
        .unwrap()
        .state
        .target_temperature;
    let wanted = if before == 25.0 { 21.0 } else { 25.0 };
    browser
        .eval(&format!(
            "document.getElementById('command-device').value = 'ac-living';
             document.getElementById('command-temperature').value = '{wanted}';
             document.getElementById('command-send').click(); true"
        ))
        .await;

    // The simulator shows the change, and the page then shows the task
    // completed within 2 s of it.
    let mut applied_at = None;
    let shown_at = eventually("the task to show completed on the page", async || {
        if applied_at.is_none()
            && sim.sim().inspect("ac-living").unwrap().state.target_temperature == wanted
        {
            applied_at = Some(Instant::now());
        }
        let status = browser
            .eval("(document.querySelector('#live-tasks tr[data-task-id]') || {dataset: {}}).dataset.status || null")
            .await;
        match status.as_str() {
            Some("completed") => Ok(Instant::now()),
            Some("failed") | Some("cancelled") => panic!("the task ended {status}"),
            other => {
                let said = browser
                    .eval("document.getElementById('command-result').textContent")
                    .await;
                Err(format!(
                    "task status on the page: {other:?}; the form says {said}; the page reported: {:?}",
                    browser.reports
                ))
            }
        }
    })
    .await;
    let applied_at = applied_at.unwrap_or_else(|| {
        // The device changed between two looks and the page already
        // caught up; the simulator's own record says when.
        assert_eq!(
            sim.sim()
                .inspect("ac-living")
                .unwrap()
                .state
                .target_temperature,
            wanted
        );
        shown_at
    });
    // It learned of the end from the listen stream, not by polling.
    let pushed = browser
        .eval("Number(document.body.dataset.taskNotifications || 0)")
        .await;
    assert!(
        pushed.as_u64().unwrap_or(0) >= 1,
        "no notifications/tasks reached the page"
    );
    let lag = shown_at.duration_since(applied_at);
    eprintln!("browser: task shown completed {lag:?} after the simulator showed the change");
    assert!(
        lag <= Duration::from_secs(2),
        "the page showed the task completed {lag:?} after the device changed"
    );

    // The sent and observed values, and the audit trail's record of it.
    let sent = format!("target_temperature={wanted}");
    eventually("the task's sent and observed values", async || {
        let row = browser
            .eval("document.querySelector('#live-tasks tr[data-task-id]').innerText")
            .await;
        let row = row.as_str().unwrap_or_default().to_string();
        // Sent, then observed: the same value twice.
        match row.matches(&sent).count() {
            2 => Ok(()),
            _ => Err(format!("row {row:?}")),
        }
    })
    .await;
    eventually("the audit trail to show the command", async || {
        let status = browser
            .eval("(document.querySelector('#audit tr[data-audit-id]') || {dataset: {}}).dataset.status || null")
            .await;
        match status.as_str() {
            Some("completed") => Ok(()),
            other => Err(format!("newest audit record: {other:?}")),
        }
    })
    .await;
    // The device card shows the new setpoint, and its chart a line for it.
    eventually("the device card to show the new setpoint", async || {
        let shown = browser
            .eval("(document.querySelector('[data-device=\"ac-living\"] [data-field=\"target_temperature\"]') || {}).textContent")
            .await;
        let paths = browser
            .eval("document.querySelectorAll('[data-device=\"ac-living\"] .chart path.sent').length")
            .await;
        match (shown.as_str().and_then(|s| s.parse::<f64>().ok()), paths.as_u64()) {
            (Some(v), Some(1)) if v == wanted => Ok(()),
            other => Err(format!("setpoint shown, sent lines: {other:?}")),
        }
    })
    .await;

    let path = screenshot_path();
    browser.screenshot(&path).await;
    eprintln!("browser: screenshot at {}", path.display());
    browser.close().await;
    server.stop().await;
}
