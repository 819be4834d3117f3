//! Tenants from a tenants file, by area: bearer tokens and the operator's
//! endpoints (`access`), isolation of data, outbound hosts and faults with
//! the hostile plugin (`isolation`), hot swaps (`swaps`), and the file
//! itself, the artifact cache and stdio (`file`). This module holds what
//! they share: a directory with a tenants file, and settle serving it.

mod access;
mod file;
mod isolation;
mod swaps;

use crate::common::*;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ADMIN: &str = "admin-secret";
const METRICS: &str = "metrics-secret";

fn token(tenant: &str) -> String {
    format!("token-of-{tenant}")
}

/// One `[tenant.NAME]` table; its token is in `NAME.token` next to the file.
fn tenant(name: &str, plugin: &Path, api: &str, extra: &str) -> String {
    format!(
        "[tenant.{name}]\nplugin = {:?}\ndevice_api = {api:?}\ntoken_file = \"{name}.token\"\n\
         plugin_config = {{ poll_interval_ms = 200, settle_window_ms = 10000 }}\n{extra}\n",
        plugin.to_str().unwrap()
    )
}

/// A directory holding a tenants file, its token files and plugin copies.
struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    fn new() -> Dir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("admin.token"), ADMIN).unwrap();
        std::fs::write(dir.path().join("metrics.token"), METRICS).unwrap();
        Dir { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A private copy of a plugin, so a test can swap it.
    fn copy(&self, from: &Path, name: &str) -> PathBuf {
        let to = self.path(name);
        std::fs::copy(from, &to).unwrap();
        to
    }

    /// Writes `settle.toml` with a `[server]` table (admin and metrics on,
    /// the watcher as asked) and these tenant tables.
    fn write(&self, watch: bool, tenants: &[String]) -> PathBuf {
        let mut text = format!(
            "[server]\nadmin_token_file = \"admin.token\"\nmetrics_token_file = \"metrics.token\"\nwatch_plugins = {watch}\n\n"
        );
        for t in tenants {
            let name = t
                .strip_prefix("[tenant.")
                .and_then(|rest| rest.split(']').next())
                .unwrap();
            std::fs::write(self.path(&format!("{name}.token")), token(name)).unwrap();
            text.push_str(t);
        }
        let path = self.path("settle.toml");
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// settle serving a tenants file in this process (also used by the live
/// view's tests).
pub(crate) struct Tenants {
    pub(crate) server: Server,
    /// The server's root, where `/t/NAME/...` hangs.
    pub(crate) base: String,
}

impl Tenants {
    pub(crate) async fn start(config: &Path) -> Tenants {
        let cache = cache_dir();
        let args = serve_args(&[
            "settle",
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--store",
            "memory",
            "--cache-dir",
            cache.to_str().unwrap(),
        ]);
        let server =
            serve_http_config(settle::config::RunnerConfig::from_args(&args).expect("valid")).await;
        let base = server.url.trim_end_matches("/mcp").to_string();
        Tenants { server, base }
    }

    fn url(&self, tenant: &str) -> String {
        format!("{}/t/{tenant}/mcp", self.base)
    }

    async fn client(&self, tenant: &str) -> Client {
        modern_http_client_with_token(&self.url(tenant), Some(&token(tenant)), Declares::default())
            .await
    }

    /// One raw modern JSON-RPC request as `tenant`, with the tasks extension.
    async fn rpc(&self, tenant: &str, method: &str, params: Value, name: &str) -> (u16, Value) {
        let mut params = params;
        params["_meta"] = meta(true);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let auth = format!("Bearer {}", token(tenant));
        post(
            &self.url(tenant),
            &body.to_string(),
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", method),
                ("mcp-name", name),
                ("authorization", &auth),
            ],
        )
        .await
    }

    /// `POST /admin/reload/{tenant}`: the HTTP status and the one swap.
    async fn reload(&self, tenant: &str) -> (u16, Value) {
        let response = reqwest::Client::new()
            .post(format!("{}/admin/reload/{tenant}", self.base))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        (status, body["swaps"][0].clone())
    }

    async fn metrics(&self) -> String {
        reqwest::Client::new()
            .get(format!("{}/metrics", self.base))
            .bearer_auth(METRICS)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// Alice and Bob, both on the device plugin and one simulator.
async fn alice_and_bob(delay_ms: u64) -> (device_sim::RunningSim, Dir, Tenants) {
    let sim = sim(Duration::from_millis(delay_ms)).await;
    let dir = Dir::new();
    let plugin = plugin_path();
    let config = dir.write(
        false,
        &[
            tenant("alice", &plugin, &sim.base_url(), ""),
            tenant("bob", &plugin, &sim.base_url(), ""),
        ],
    );
    let tenants = Tenants::start(&config).await;
    (sim, dir, tenants)
}

/// Alice on the device plugin (devices that take 100 ms) and Mallory on the
/// hostile one, with `mallory_limits` as Mallory's extra settings.
async fn alice_and_mallory(mallory_limits: &str) -> (device_sim::RunningSim, Dir, Tenants) {
    let sim = sim(Duration::from_millis(100)).await;
    let dir = Dir::new();
    let config = dir.write(
        false,
        &[
            tenant("alice", &plugin_path(), &sim.base_url(), ""),
            tenant(
                "mallory",
                &hostile_plugin_path(),
                "http://127.0.0.1:9",
                mallory_limits,
            ),
        ],
    );
    let tenants = Tenants::start(&config).await;
    (sim, dir, tenants)
}

/// Alice on a private copy of the device plugin, so a test can swap it.
struct Swappable {
    /// Kept for the test's lifetime: the device API and the tenants file.
    _sim: device_sim::RunningSim,
    _dir: Dir,
    /// The device plugin's bytes, to make variants of.
    original: Vec<u8>,
    /// Alice's plugin file.
    plugin: PathBuf,
    tenants: Tenants,
}

impl Swappable {
    async fn start(delay_ms: u64, watch: bool) -> Swappable {
        let sim = sim(Duration::from_millis(delay_ms)).await;
        let dir = Dir::new();
        let original = std::fs::read(plugin_path()).unwrap();
        let plugin = dir.copy(&plugin_path(), "alice.wasm");
        let config = dir.write(watch, &[tenant("alice", &plugin, &sim.base_url(), "")]);
        let tenants = Tenants::start(&config).await;
        Swappable {
            _sim: sim,
            _dir: dir,
            original,
            plugin,
            tenants,
        }
    }

    async fn stop(self) {
        self.tenants.server.stop().await;
    }
}

/// The same component with a custom section appended: different bytes (so
/// a swap really compiles and replaces it), identical behaviour.
fn variant(component: &[u8], n: u32) -> Vec<u8> {
    let name = b"settle-test-variant";
    let payload = n.to_le_bytes();
    let mut out = component.to_vec();
    out.push(0); // custom section
    out.push((1 + name.len() + payload.len()) as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

/// Replaces a file the way a deploy should: write aside, then rename.
fn replace(path: &Path, bytes: &[u8]) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, bytes).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// The value of one metric line, 0 when absent.
fn metric(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Calls `get_device_state` as `tenant` until stopped; counts successes
/// and failures.
fn neighbour_load(
    client: Arc<Client>,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let reply = client
                .call_tool_once(
                    CallToolRequestParams::new("get_device_state")
                        .with_arguments(args(json!({"device_id": "ac-living"}))),
                )
                .await;
            match reply {
                Ok(rmcp::model::CallToolResponse::Complete(r)) if r.is_error != Some(true) => {
                    ok.fetch_add(1, Ordering::Relaxed)
                }
                other => {
                    eprintln!("neighbour call failed: {other:?}");
                    failed.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
    })
}
