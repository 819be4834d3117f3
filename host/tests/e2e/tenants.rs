//! Tenants from a tenants file: bearer tokens, isolation of data, outbound
//! hosts and faults (with the hostile plugin), hot swaps, and `/metrics`.

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

/// settle serving a tenants file in this process.
struct Tenants {
    server: Server,
    base: String,
}

impl Tenants {
    async fn start(config: &Path) -> Tenants {
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

#[tokio::test]
async fn every_refusal_is_the_same_401_so_tenants_cannot_be_discovered() {
    let (_sim, _dir, t) = alice_and_bob(100).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(false)}})
        .to_string();
    let headers = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/list"),
    ];
    let mut refusals = Vec::new();
    for (who, auth) in [
        ("alice", None),
        ("alice", Some("wrong".to_string())),
        ("alice", Some(token("bob"))),
        ("carol", Some(token("alice"))),
        ("carol", None),
    ] {
        let mut request = reqwest::Client::new()
            .post(t.url(who))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header(headers[0].0, headers[0].1)
            .header(headers[1].0, headers[1].1)
            .body(list.clone());
        if let Some(auth) = auth {
            request = request.bearer_auth(auth);
        }
        let response = request.send().await.unwrap();
        refusals.push((response.status().as_u16(), response.text().await.unwrap()));
    }
    assert!(refusals.iter().all(|r| r == &refusals[0]), "{refusals:?}");
    assert_eq!(refusals[0].0, 401);
    assert!(refusals[0].1.contains("bearer token"), "{refusals:?}");

    // With its own token, each tenant is served.
    for who in ["alice", "bob"] {
        let client = t.client(who).await;
        let tools = client.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|tool| tool.name == "set_temperature"));
    }
    t.server.stop().await;
}

#[tokio::test]
async fn one_tenant_can_never_read_update_or_cancel_anothers_task() {
    let (_sim, _dir, t) = alice_and_bob(1_500).await;
    let alice = t.client("alice").await;
    let bob = t.client("bob").await;
    let created = structured(&complete(
        call(
            &alice,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 23}),
        )
        .await,
    ));
    let id = created["taskId"].as_str().unwrap().to_string();

    let text = error_text(&complete(
        call(&bob, "get_task", json!({"task_id": id})).await,
    ));
    assert!(text.contains("no such task"), "{text}");
    let text = error_text(&complete(
        call(&bob, "cancel_task", json!({"task_id": id})).await,
    ));
    assert!(text.contains("no such task"), "{text}");
    for (method, params) in [
        ("tasks/get", json!({"taskId": id})),
        ("tasks/cancel", json!({"taskId": id})),
        (
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"confirm-1": {"action": "accept"}}}),
        ),
    ] {
        let (_, body) = t.rpc("bob", method, params, &id).await;
        assert_eq!(body["error"]["code"], -32602, "{method}: {body}");
    }

    // Alice's task was untouched by all of that, and completes.
    let done = wait_for_end(&alice, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    t.server.stop().await;
}

#[tokio::test]
async fn a_forbidden_host_is_denied_and_works_once_allowed() {
    let sim = sim(Duration::from_millis(100)).await;
    let target = format!("{}/api/v1/devices", sim.base_url());
    let dir = Dir::new();
    let hostile = hostile_plugin_path();
    // Mallory's own device API is elsewhere; the simulator is not hers.
    let denied = dir.write(
        false,
        &[tenant("mallory", &hostile, "http://127.0.0.1:9", "")],
    );
    let t = Tenants::start(&denied).await;
    let client = t.client("mallory").await;
    let result = complete(call(&client, "fetch", json!({"url": target})).await);
    let text = error_text(&result);
    assert!(text.contains("denied"), "{text}");
    assert!(text.contains(&sim.base_url()), "{text}");
    let metrics = t.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"settle_outbound_denied_total{tenant="mallory"} "#
        ),
        1.0,
        "{metrics}"
    );
    t.server.stop().await;

    let allowed = dir.write(
        false,
        &[tenant(
            "mallory",
            &hostile,
            "http://127.0.0.1:9",
            &format!(
                "allow_outbound = [\"http://127.0.0.1:9\", {:?}]",
                sim.base_url()
            ),
        )],
    );
    let t = Tenants::start(&allowed).await;
    let client = t.client("mallory").await;
    let result = structured(&complete(
        call(&client, "fetch", json!({"url": target})).await,
    ));
    assert_eq!(result["status"], 200, "{result}");
    t.server.stop().await;
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

// Two worker threads, as `settle serve` has on a 2-core machine: a plugin
// that spins holds one of them for an epoch tick at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_plugin_is_contained_and_its_neighbour_keeps_being_served() {
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
                "memory_mib = 16\ncall_timeout_ms = 1000",
            ),
        ],
    );
    let t = Tenants::start(&config).await;
    let alice = Arc::new(t.client("alice").await);
    let mallory = t.client("mallory").await;

    // Something of Alice's for Mallory to look for.
    let created = structured(&complete(
        call(
            &alice,
            "set_temperature",
            json!({"device_id": "ac-bedroom", "temperature": 22}),
        )
        .await,
    ));
    let alice_task = created["taskId"].as_str().unwrap().to_string();

    let (stop, ok, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let load = neighbour_load(alice.clone(), stop.clone(), ok.clone(), failed.clone());

    let fault = |tool: &'static str| {
        let mallory = &mallory;
        async move {
            let started = Instant::now();
            let err = mallory
                .call_tool_once(CallToolRequestParams::new(tool).with_arguments(args(json!({}))))
                .await
                .expect_err("the call fails");
            (err.to_string(), started.elapsed())
        }
    };
    let (spin, took) = fault("spin").await;
    assert!(spin.contains("exceeded its deadline of 1s"), "{spin}");
    assert!(
        took < Duration::from_secs(5),
        "stopped at its deadline: {took:?}"
    );
    let (bomb, _) = fault("bomb").await;
    assert!(
        bomb.contains("exceeded its memory limit of 16 MiB"),
        "{bomb}"
    );
    let (trap, _) = fault("trap").await;
    assert!(trap.contains("plugin trapped"), "{trap}");

    // Alice's keys, by every name Mallory can think of.
    for (bucket, key) in [
        ("default", format!("task/{alice_task}")),
        ("default", format!("../alice/task/{alice_task}")),
        ("default", format!("alice/task/{alice_task}")),
        ("alice", format!("task/{alice_task}")),
    ] {
        let seen = structured(&complete(
            call(&mallory, "peek", json!({"bucket": bucket, "key": key})).await,
        ));
        assert!(seen["value"].is_null(), "{bucket}/{key}: {seen}");
        assert!(
            seen["keys"].as_array().is_none_or(|k| k.is_empty()),
            "{seen}"
        );
    }
    let escape = structured(&complete(call(&mallory, "escape", json!({})).await));
    assert_eq!(escape["files"], false, "{escape}");
    assert_eq!(escape["environment"], json!([]), "{escape}");
    assert_eq!(escape["socket"], false, "{escape}");

    // Again, now that the neighbour has been running a while.
    let (spin, _) = fault("spin").await;
    assert!(spin.contains("deadline"), "{spin}");
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!("neighbour calls during the hostile run: {ok} succeeded, {failed} failed");
    assert!(ok > 10, "the neighbour was served: {ok}");
    assert_eq!(failed, 0);

    // Mallory itself still answers a well-behaved call.
    let pong = structured(&complete(call(&mallory, "ping", json!({})).await));
    assert_eq!(pong["pong"], true);

    let metrics = t.metrics().await;
    for kind in ["deadline", "memory", "trap"] {
        assert!(
            metric(
                &metrics,
                &format!(r#"settle_plugin_faults_total{{tenant="mallory",kind="{kind}"}} "#)
            ) >= 1.0,
            "{kind}: {metrics}"
        );
    }
    assert_eq!(
        metric(
            &metrics,
            r#"settle_plugin_faults_total{tenant="alice",kind="deadline"} "#
        ),
        0.0
    );
    assert!(!metrics.contains(&token("alice")) && !metrics.contains(&token("mallory")));
    assert!(!metrics.contains("ac-bedroom") && !metrics.contains(&alice_task));
    t.server.stop().await;
}

#[tokio::test]
async fn a_hostile_fault_is_logged_with_the_tenant_name() {
    let dir = Dir::new();
    let config = dir.write(
        false,
        &[tenant(
            "mallory",
            &hostile_plugin_path(),
            "http://127.0.0.1:9",
            "call_timeout_ms = 500",
        )],
    );
    let process =
        Process::start_with(&["--config", config.to_str().unwrap(), "--store", "memory"]).await;
    let url = process.url.replace("{tenant}", "mallory");
    let client =
        modern_http_client_with_token(&url, Some(&token("mallory")), Declares::default()).await;
    let err = client
        .call_tool_once(CallToolRequestParams::new("trap").with_arguments(args(json!({}))))
        .await
        .expect_err("the trap fails the call");
    assert!(err.to_string().contains("trapped"), "{err}");
    let deadline = Instant::now() + DEADLINE;
    while !process.log().contains("tenant=mallory") {
        assert!(Instant::now() < deadline, "{}", process.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = process.log();
    assert!(log.contains("plugin trapped"), "{log}");
    assert!(log.contains("hostile plugin trapped on purpose"), "{log}");
}

#[tokio::test]
async fn a_swap_under_continuous_load_fails_no_call() {
    let s = Swappable::start(100, false).await;
    let t = &s.tenants;
    let (original, plugin) = (&s.original, &s.plugin);
    let (stop, ok, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut loads = Vec::new();
    for _ in 0..4 {
        let client = Arc::new(t.client("alice").await);
        loads.push(neighbour_load(
            client,
            stop.clone(),
            ok.clone(),
            failed.clone(),
        ));
    }
    const SWAPS: u32 = 6;
    for n in 1..=SWAPS {
        replace(plugin, &variant(original, n));
        let (status, swap) = t.reload("alice").await;
        assert_eq!(
            (status, swap["result"].as_str()),
            (200, Some("loaded")),
            "{swap}"
        );
        assert_eq!(swap["tools_changed"], false, "{swap}");
    }
    stop.store(true, Ordering::Relaxed);
    for load in loads {
        load.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!("swap under load: {SWAPS} swaps, {ok} calls succeeded, {failed} failed");
    assert!(ok > 0);
    assert_eq!(failed, 0);
    let metrics = t.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"settle_plugin_swaps_total{tenant="alice",status="loaded"} "#
        ),
        SWAPS as f64
    );
    s.stop().await;
}

#[tokio::test]
async fn a_task_started_before_a_swap_completes_after_it() {
    // Long enough that compiling the new version ends first.
    let s = Swappable::start(8_000, false).await;
    let t = &s.tenants;
    let (original, plugin) = (&s.original, &s.plugin);
    let alice = t.client("alice").await;
    let created = structured(&complete(
        call(
            &alice,
            "set_temperature",
            json!({"device_id": "ac-living", "temperature": 25}),
        )
        .await,
    ));
    assert_eq!(created["status"], "working", "{created}");
    let id = created["taskId"].as_str().unwrap().to_string();

    replace(plugin, &variant(original, 1));
    let (_, swap) = t.reload("alice").await;
    assert_eq!(swap["result"], "loaded", "{swap}");
    let before = structured(&complete(
        call(&alice, "get_task", json!({"task_id": id})).await,
    ));
    assert_eq!(
        before["status"], "working",
        "the swap came before the end: {before}"
    );

    let done = wait_for_end(&alice, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    s.stop().await;
}

#[tokio::test]
async fn a_broken_plugin_is_refused_and_the_old_one_keeps_serving() {
    let s = Swappable::start(100, false).await;
    let t = &s.tenants;
    let plugin = &s.plugin;
    let alice = t.client("alice").await;

    // An empty component: valid, but it exports nothing.
    let empty_component = b"\0asm\x0d\0\x01\0".to_vec();
    for (bytes, expected) in [
        (
            b"not wasm at all".to_vec(),
            "is not a valid WebAssembly component",
        ),
        (
            empty_component,
            "does not fit the settle:plugin/device-plugin world",
        ),
    ] {
        replace(plugin, &bytes);
        let (status, swap) = t.reload("alice").await;
        assert_eq!(
            (status, swap["result"].as_str()),
            (422, Some("refused")),
            "{swap}"
        );
        let reason = swap["reason"].as_str().unwrap();
        assert!(reason.contains(expected), "{reason}");
        assert!(reason.contains("alice.wasm"), "{reason}");
        let state = structured(&complete(
            call(
                &alice,
                "get_device_state",
                json!({"device_id": "ac-living"}),
            )
            .await,
        ));
        assert_eq!(
            state["deviceId"], "ac-living",
            "the old plugin serves: {state}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn the_watcher_swaps_a_changed_file_and_refuses_a_broken_one() {
    let s = Swappable::start(100, true).await;
    let t = &s.tenants;
    let (original, plugin) = (&s.original, &s.plugin);
    let alice = t.client("alice").await;
    let swaps = |status: &'static str| {
        let t = &t;
        async move {
            metric(
                &t.metrics().await,
                &format!(r#"settle_plugin_swaps_total{{tenant="alice",status="{status}"}} "#),
            )
        }
    };
    let wait_for = |status: &'static str, count: f64| {
        let swaps = &swaps;
        async move {
            let deadline = Instant::now() + DEADLINE;
            while swaps(status).await < count {
                assert!(Instant::now() < deadline, "no {status} swap seen");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    replace(plugin, b"garbage");
    wait_for("refused", 1.0).await;
    let state = structured(&complete(
        call(
            &alice,
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await,
    ));
    assert_eq!(state["deviceId"], "ac-living");
    replace(plugin, &variant(original, 7));
    wait_for("loaded", 1.0).await;
    let state = structured(&complete(
        call(
            &alice,
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await,
    ));
    assert_eq!(state["deviceId"], "ac-living");
    s.stop().await;
}

#[tokio::test]
async fn a_new_tool_list_reaches_listening_clients() {
    let s = Swappable::start(100, false).await;
    let t = &s.tenants;
    let plugin = &s.plugin;
    let mut listen = Listen::open_with_token(
        &t.url("alice"),
        Some(&token("alice")),
        9,
        json!({"toolsListChanged": true}),
        json!({}),
    )
    .await;
    let ack = listen.next(DEADLINE).await.expect("acknowledged");
    assert!(ack.get("error").is_none(), "{ack}");

    replace(plugin, &std::fs::read(hostile_plugin_path()).unwrap());
    let (_, swap) = t.reload("alice").await;
    assert_eq!(swap["tools_changed"], true, "{swap}");
    let notice = listen.next(DEADLINE).await.expect("a notification");
    assert_eq!(
        notice["method"], "notifications/tools/list_changed",
        "{notice}"
    );
    let tools = t.client("alice").await.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|tool| tool.name == "ping"), "{tools:?}");
    s.stop().await;
}

#[tokio::test]
async fn settle_reload_signals_the_server_to_swap() {
    let sim = sim(Duration::from_millis(100)).await;
    let dir = Dir::new();
    let original = std::fs::read(plugin_path()).unwrap();
    let plugin = dir.copy(&plugin_path(), "alice.wasm");
    let config = dir.write(false, &[tenant("alice", &plugin, &sim.base_url(), "")]);
    let pid_file = dir.path("settle.pid");
    let process = Process::start_with(&[
        "--config",
        config.to_str().unwrap(),
        "--store",
        "memory",
        "--pid-file",
        pid_file.to_str().unwrap(),
    ])
    .await;
    replace(&plugin, &variant(&original, 3));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["reload", "--pid-file", pid_file.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + DEADLINE;
    while !process.log().contains("plugin swapped") {
        assert!(Instant::now() < deadline, "{}", process.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = process.url.replace("{tenant}", "alice");
    let alice =
        modern_http_client_with_token(&url, Some(&token("alice")), Declares::default()).await;
    let state = structured(&complete(
        call(
            &alice,
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await,
    ));
    assert_eq!(state["deviceId"], "ac-living");

    // Without a server behind the pid file, reload says so.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_settle"))
        .args([
            "reload",
            "--pid-file",
            dir.path("missing.pid").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read it"));
}

#[tokio::test]
async fn a_bad_tenants_file_stops_the_start_with_file_and_line() {
    let dir = Dir::new();
    let plugin = plugin_path();
    let cases = [
        (
            tenant("alice", &plugin, "http://127.0.0.1:1", "memory_mb = 3"),
            11,
            "unknown field `memory_mb`",
        ),
        (
            tenant("alice", &dir.path("nope.wasm"), "http://127.0.0.1:1", ""),
            7,
            "nope.wasm does not exist",
        ),
        (
            tenant(
                "alice",
                &plugin,
                "http://127.0.0.1:1",
                "allow_outbound = [\"127.0.0.1:80\"]",
            ),
            11,
            "expected scheme://host[:port]",
        ),
        (
            format!(
                "{}{}",
                tenant("alice", &plugin, "http://127.0.0.1:1", ""),
                tenant("alice", &plugin, "http://127.0.0.1:1", "")
            ),
            12,
            "duplicate key",
        ),
    ];
    for (text, line, expected) in cases {
        let config = dir.write(false, &[text]);
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_settle"))
            .args([
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--store",
                "memory",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        let located = format!("{}:{line}:", config.display());
        assert!(stderr.contains(&located), "expected {located}: {stderr}");
        assert!(stderr.contains(expected), "expected {expected}: {stderr}");
    }
}

#[tokio::test]
async fn compiled_plugins_are_cached_and_a_damaged_artifact_is_compiled_again() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = settle::runtime::Runtime::new(
        settle::store::Store::open("memory").unwrap(),
        Some(dir.path().to_path_buf()),
    )
    .unwrap();
    let plugin = runtime.load_plugin(&plugin_path()).expect("loads");
    let artifacts: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    let name = artifacts[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    // The key: the component's digest, the engine's compatibility hash and
    // settle's version.
    assert!(name.starts_with(&plugin.digest), "{name}");
    assert!(
        name.ends_with(&format!("-{}.cwasm", env!("CARGO_PKG_VERSION"))),
        "{name}"
    );
    let good = std::fs::metadata(&artifacts[0]).unwrap().len();

    std::fs::write(&artifacts[0], b"damaged").unwrap();
    runtime.load_plugin(&plugin_path()).expect("compiled again");
    assert_eq!(std::fs::metadata(&artifacts[0]).unwrap().len(), good);
}

#[tokio::test]
async fn stdio_serves_the_one_tenant_it_is_told_to() {
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    use rmcp::{ClientLifecycleMode, ClientServiceExt};
    let sim = sim(Duration::from_millis(100)).await;
    let dir = Dir::new();
    let config = dir.write(
        false,
        &[
            tenant("alice", &plugin_path(), &sim.base_url(), ""),
            tenant("mallory", &hostile_plugin_path(), "http://127.0.0.1:9", ""),
        ],
    );
    let settle = |extra: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_settle"));
        command
            .args(["serve", "--stdio", "--store", "memory", "--config"])
            .arg(&config)
            .args(extra)
            .env("SETTLE_CACHE_DIR", cache_dir())
            .stdin(std::process::Stdio::piped());
        command
    };

    // Two tenants and no --tenant: stdio cannot choose.
    let output = settle(&[])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("choose one with --tenant"), "{stderr}");

    let command = settle(&["--tenant", "mallory"]).configure(|c| {
        c.stderr(std::process::Stdio::null());
    });
    let client = rmcp::model::ClientConfig::new(
        Default::default(),
        rmcp::model::Implementation::new("t", "0"),
    )
    .serve_with_lifecycle(
        TokioChildProcess::new(command).unwrap(),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("stdio client connects");
    let tools = client.list_all_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "ping"),
        "mallory's plugin: {tools:?}"
    );
}

#[tokio::test]
async fn admin_and_metrics_endpoints_are_off_unless_configured() {
    let sim = sim(Duration::from_millis(100)).await;
    let dir = Dir::new();
    let config = dir.write(
        false,
        &[tenant("alice", &plugin_path(), &sim.base_url(), "")],
    );
    // The same tenant without a [server] table.
    let text = std::fs::read_to_string(&config).unwrap();
    let without_server = text[text.find("[tenant.").unwrap()..].to_string();
    std::fs::write(&config, without_server).unwrap();
    let t = Tenants::start(&config).await;
    let http = reqwest::Client::new();
    let reload = http
        .post(format!("{}/admin/reload", t.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status().as_u16(), 404);
    let metrics = http
        .get(format!("{}/metrics", t.base))
        .bearer_auth(METRICS)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status().as_u16(), 404);
    t.server.stop().await;
}
