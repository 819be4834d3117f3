//! Shared helpers: a small JSON client for a running simulator and a deadline-bounded wait.

#![allow(dead_code)] // Each test binary uses a different subset.

use std::future::Future;
use std::time::Duration;

use device_sim::{RunningSim, SimConfig};
use serde_json::Value;
use tokio::time::Instant;

/// Generous bound for conditions that should hold within milliseconds; only reached when
/// something is broken.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A simulator with `delay_ms` actuation delay and otherwise default settings.
pub async fn start(delay_ms: u64) -> RunningSim {
    device_sim::spawn(SimConfig {
        delay: Duration::from_millis(delay_ms),
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts")
}

/// A JSON-over-HTTP client for one simulator. Never uses a proxy: tests stay on loopback.
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// A response: status code and body (`Value::Null` when empty).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    /// The `error` member of an error body.
    pub fn error(&self) -> &str {
        self.body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {self:?}"))
    }
}

impl Client {
    pub fn new(sim: &RunningSim) -> Self {
        Client {
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client builds"),
            base: sim.base_url(),
            token: None,
        }
    }

    /// The same client, sending `Authorization: Bearer token`.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.http.get(self.url(path))).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send(self.http.delete(self.url(path))).await
    }

    /// POSTs `body` verbatim (so tests can send invalid JSON).
    pub async fn post_raw(&self, path: &str, body: &str) -> Reply {
        let req = self
            .http
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_owned());
        self.send(req).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.post_raw(path, &body.to_string()).await
    }

    pub async fn control(&self, device: &str, body: Value) -> Reply {
        self.post(&format!("/api/v1/devices/{device}/control"), body)
            .await
    }

    pub async fn sensors(&self, device: &str) -> Reply {
        self.get(&format!("/api/v1/devices/{device}/sensors")).await
    }

    /// Sensor reading that must succeed.
    pub async fn reading(&self, device: &str) -> Value {
        let r = self.sensors(device).await;
        assert_eq!(r.status, 200, "{r:?}");
        r.body
    }

    pub async fn set_fault(&self, device: &str, fault: Value) -> Reply {
        self.post(&format!("/_sim/devices/{device}/faults"), fault)
            .await
    }

    /// `GET /_sim/devices/{id}`, which must succeed.
    pub async fn inspect(&self, device: &str) -> Value {
        let r = self.get(&format!("/_sim/devices/{device}")).await;
        assert_eq!(r.status, 200, "{r:?}");
        r.body
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, mut req: reqwest::RequestBuilder) -> Reply {
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("request reaches the simulator");
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.expect("body arrives");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("body is not JSON ({e}): {bytes:?}"))
        };
        Reply { status, body }
    }
}

/// Polls `check` until it returns `Some`, or panics naming `what` after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
