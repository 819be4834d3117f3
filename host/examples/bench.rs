//! Run with `make bench` (or `cargo run --release -p settle --example bench`).
//!
//! Prints the numbers the foundation issue asks for, each measured in this
//! one run so they can be compared as ratios on a noisy machine:
//! - the added cost of the Wasm sandbox per tool call (median, µs), and
//!   `get_device_state` as a bare plugin call (no MCP);
//! - `get_device_state` over HTTP at concurrency 1 and 8 (requests/s, p50,
//!   p99), next to direct requests to the simulator; `BENCH_SETTLE=process`
//!   runs settle as its own process for these rows; and beside them two
//!   proxies that do nothing but carry the read (`support/proxy.rs`), the
//!   floor and ceiling any server in settle's place has on these cores;
//! - the byte size of the `tools/list` result;
//! - acceptance to `completed` with a 4 s actuation delay, and the sensor
//!   reads it took;
//! - `tasks/get` over HTTP with 10,000 stored tasks (requests/s, p50, p99),
//!   and the creation rate with 8 and with 64 clients, and one at a time,
//!   then the same through a bare durable proxy (`support/proxy.rs`): the
//!   most any server that puts each command on disk could create here;
//! - the delay from a task's change to a `subscriptions/listen` listener
//!   (p50, p99);
//! - `get_device_state` at concurrency 1 by stage (`settle::timeline`).
//!
//! `BENCH_ONLY=sandbox,calls,completion,tasks,timeline` runs only the parts
//! named.

use anyhow::Context;
use clap::Parser;
use device_sim::SimConfig;
use serde_json::{Value, json};
use settle::app::Runner;
use settle::bindings::settle::plugin::types::{CallRequest, ClientContext, TaskView};
use settle::cli::{Cli, Command};
use settle::config::RunnerConfig;
use settle::context::{Limits, TenantContext};
use settle::policy::{AllowedOrigin, OutboundPolicy};
use settle::runtime::Runtime;
use settle::store::Store;
use settle::tenant::Tenant;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/load.rs"]
mod load;
#[path = "support/process.rs"]
mod process;
#[path = "support/proxy.rs"]
mod proxy;
#[path = "support/timeline.rs"]
mod timeline;
use load::{Load, load, percentile};
use process::spawn_settle;

/// The allocator the `settle` binary runs with (host/src/main.rs), so that
/// settle measured in this process allocates as it does in production.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The device plugin: `make guest`'s, or `BENCH_PLUGIN` (another build,
/// for an A/B of two plugins on the same runner).
fn plugin() -> PathBuf {
    std::env::var_os("BENCH_PLUGIN").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/wasm32-wasip2/release/settle_devices.wasm")
        },
        PathBuf::from,
    )
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The sandbox: the same store read, once inside a fresh plugin instance
/// (`get-task` of an unknown id: instantiate, call, one key read) and once
/// natively.
async fn sandbox_cost(api: &str) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_file(&dir.path().join("bench.redb"))?;
    // Compiled plugins are cached where `make run` keeps them, so the
    // measurement does not start with a compile.
    let runtime = Runtime::new(
        store.clone(),
        Some(process::target_dir().join("settle-cache")),
    )?;
    let plugin = runtime.load_plugin(&plugin())?;
    let context = TenantContext {
        name: "default".into(),
        namespace: "default".into(),
        plugin_config: BTreeMap::from([("device_api".to_string(), api.to_string())]),
        policy: OutboundPolicy::new(vec![AllowedOrigin::of_url(api)?]),
        limits: Limits::default(),
        events: Default::default(),
        metrics: Default::default(),
    };
    let tenant = Tenant::new(context, plugin);
    let id = "0123456789abcdef0123456789abcdef";
    const N: usize = 2_000;
    let mut wasm = Vec::with_capacity(N);
    let mut native = Vec::with_capacity(N);
    for _ in 0..200 {
        let _ = runtime.get_task(&tenant, id).await;
    }
    for _ in 0..N {
        let t = Instant::now();
        let r: Result<Result<TaskView, _>, _> = runtime.get_task(&tenant, id).await;
        wasm.push(t.elapsed());
        assert!(matches!(r, Ok(Err(_))), "unknown id must be not-found");
        let t = Instant::now();
        let v = store.get("default", &format!("task/{id}")).await?;
        native.push(t.elapsed());
        assert!(v.is_none());
    }
    let mut device = Vec::with_capacity(N);
    let call = CallRequest {
        name: "get_device_state".into(),
        arguments: json!({"device_id": "ac-00000"}).to_string(),
        client: ClientContext {
            protocol_version: "2026-07-28".into(),
            tasks: true,
            elicitation: false,
            sampling: false,
            roots: false,
            client_name: None,
            client_version: None,
        },
        input_responses: None,
        request_state: None,
    };
    for i in 0..N + 200 {
        let t = Instant::now();
        let r = runtime.call_tool(&tenant, &call, None).await;
        if i >= 200 {
            device.push(t.elapsed());
        }
        assert!(
            matches!(r, Ok(Ok(_))),
            "get_device_state must answer: {r:?}"
        );
    }
    wasm.sort();
    native.sort();
    device.sort();
    let (w, n) = (percentile(&wasm, 0.5), percentile(&native, 0.5));
    println!("## Wasm sandbox cost per tool call ({N} calls, redb store)");
    println!(
        "  plugin call (fresh instance + one key read): median {:.1} µs, p99 {:.1} µs",
        micros(w),
        micros(percentile(&wasm, 0.99))
    );
    println!(
        "  the same key read, native:                   median {:.1} µs, p99 {:.1} µs",
        micros(n),
        micros(percentile(&native, 0.99))
    );
    println!(
        "  added by the sandbox:                        median {:.1} µs",
        micros(w.saturating_sub(n))
    );
    println!(
        "  get_device_state as a plugin call, no MCP:   median {:.1} µs, p99 {:.1} µs",
        micros(percentile(&device, 0.5)),
        micros(percentile(&device, 0.99))
    );
    Ok(())
}

fn mcp_request(
    client: &reqwest::Client,
    url: &str,
    id: u64,
    method: &str,
    params: Value,
) -> reqwest::RequestBuilder {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut request = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        request = request.header("mcp-name", name.to_string());
    }
    request.body(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string())
}

/// The JSON-RPC message of a response, whether sent as JSON or SSE.
async fn message(response: reqwest::Response) -> anyhow::Result<Value> {
    let text = response.text().await?;
    let data = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("data:")
                .map(str::trim)
                .filter(|d| !d.is_empty())
        })
        .unwrap_or(&text);
    serde_json::from_str(data).with_context(|| format!("not JSON-RPC: {text}"))
}

fn config(api: &str, store: &str, inline_wait_ms: &str) -> anyhow::Result<RunnerConfig> {
    let plugin = plugin();
    let argv = [
        "settle",
        "serve",
        "--plugin",
        plugin.to_str().unwrap(),
        "--store",
        store,
        "--device-api",
        api,
        "--inline-wait-ms",
        inline_wait_ms,
        // The per-tenant request limit protects a runner; a benchmark of
        // throughput must not measure it (a fast machine passes 5,000/s).
        "--max-requests-per-second",
        "0",
    ];
    let Command::Serve(args) = Cli::try_parse_from(argv)?.command else {
        anyhow::bail!("not `settle serve`");
    };
    RunnerConfig::from_args(&args)
}

async fn serve(config: RunnerConfig) -> anyhow::Result<(String, tokio::sync::oneshot::Sender<()>)> {
    let runner = Runner::start(config).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(runner.serve_http(listener, async move {
        let _ = stopped.await;
    }));
    Ok((url, stop))
}

/// The device the headline rows give worker `worker`: each worker reads its
/// own, so coalescing reads of one device could not inflate the figures.
fn own_device(worker: usize) -> String {
    format!("ac-{worker:05}")
}

/// Sensor reads the simulator served, over all devices.
fn sensor_reads(sim: &device_sim::RunningSim) -> u64 {
    sim.sim().stats().devices.values().map(|d| d.sensor).sum()
}

/// `get_device_state` through settle, `concurrency` workers for `duration`.
/// Which of settle's two routes a stateless `tools/call` takes.
#[derive(Clone, Copy, PartialEq)]
enum Route {
    /// As clients send it: served without rmcp's per-request service.
    Direct,
    /// With an `Accept` entry carrying a weight, which the direct route
    /// leaves to rmcp: the route every call took before the seventh round.
    Rmcp,
}

async fn device_state_load(
    url: &str,
    concurrency: usize,
    duration: Duration,
    route: Route,
) -> anyhow::Result<Load> {
    let mcp_url = url.to_string();
    load(concurrency, duration, move |client, worker| {
        let mut request = mcp_request(
            &client,
            &mcp_url,
            1,
            "tools/call",
            json!({"name": "get_device_state", "arguments": {"device_id": own_device(worker)}}),
        );
        if route == Route::Rmcp {
            request = request.header("accept", "text/event-stream;q=1");
        }
        Box::pin(async move {
            timeline::client_sends();
            let reply = message(request.send().await?).await?;
            timeline::client_has_the_answer();
            anyhow::ensure!(reply["result"]["isError"] == false, "call failed: {reply}");
            Ok(())
        })
    })
    .await
}

async fn http_throughput(sim: &device_sim::RunningSim) -> anyhow::Result<()> {
    let api = sim.base_url();
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("http.redb");
    // `BENCH_SETTLE=process`: settle as its own process (the release binary,
    // with its own runtime), as a user runs it; otherwise in this process,
    // sharing the runtime with the client and the simulator.
    let own_process = std::env::var("BENCH_SETTLE").is_ok_and(|v| v == "process");
    let (url, _stop, _process) = if own_process {
        let settle = spawn_settle(&api, dir.path(), &["--inline-wait-ms", "0"]).await?;
        (settle.url.clone(), None, Some(settle))
    } else {
        let (url, stop) = serve(config(&api, store.to_str().unwrap(), "0")?).await?;
        (url, Some(stop), None)
    };
    // The floor and ceiling any server in settle's place has here (in this
    // process, like the simulator, whatever `BENCH_SETTLE` says).
    let proxies = proxy::start(&api, None).await?;
    println!(
        "## get_device_state over HTTP (3 s per row; settle {}; each worker its own device)",
        if own_process {
            "as its own process"
        } else {
            "in the client's process"
        }
    );
    println!(
        "  {:<40} {:>10} {:>10} {:>10} {:>8}",
        "", "req/s", "p50 µs", "p99 µs", "n"
    );
    let mut curves = Vec::new();
    for concurrency in [1, 8] {
        let mcp_url = url.clone();
        let no_io = load(concurrency, Duration::from_secs(3), move |client, _| {
            let request = mcp_request(&client, &mcp_url, 1, "tools/call", json!({"name": "get_task", "arguments": {"task_id": "0123456789abcdef0123456789abcdef"}}));
            Box::pin(async move {
                let reply = message(request.send().await?).await?;
                anyhow::ensure!(reply["result"]["isError"] == true, "unexpected: {reply}");
                Ok(())
            })
        })
        .await?;
        sim.sim().reset_stats();
        let through_settle =
            device_state_load(&url, concurrency, Duration::from_secs(3), Route::Direct).await?;
        let reads = sensor_reads(sim);
        let through_rmcp =
            device_state_load(&url, concurrency, Duration::from_secs(3), Route::Rmcp).await?;
        let api = api.clone();
        let direct = load(
            concurrency,
            Duration::from_secs(3),
            move |client, worker| {
                let sensors = format!("{api}/api/v1/devices/{}/sensors", own_device(worker));
                Box::pin(async move {
                    let response = client.get(&sensors).send().await?;
                    anyhow::ensure!(response.status().is_success());
                    response.bytes().await?;
                    Ok(())
                })
            },
        )
        .await?;
        let forward = proxies.clone();
        let bare = load(
            concurrency,
            Duration::from_secs(3),
            move |client, worker| {
                let request = client.post(format!("{forward}/forward/{}", own_device(worker)));
                Box::pin(async move {
                    let answer = request.send().await?.bytes().await?;
                    anyhow::ensure!(answer.starts_with(b"{"), "proxy failed: {answer:?}");
                    Ok(())
                })
            },
        )
        .await?;
        let mcp_proxy = format!("{proxies}/mcp");
        let bare_mcp = load(concurrency, Duration::from_secs(3), move |client, worker| {
            let request = mcp_request(
                &client,
                &mcp_proxy,
                1,
                "tools/call",
                json!({"name": "get_device_state", "arguments": {"device_id": own_device(worker)}}),
            );
            Box::pin(async move {
                let reply = message(request.send().await?).await?;
                anyhow::ensure!(reply["result"]["isError"] == false, "proxy failed: {reply}");
                Ok(())
            })
        })
        .await?;
        for (name, l) in [
            (
                format!("settle, get_task (no device I/O), c={concurrency}"),
                &no_io,
            ),
            (
                format!("settle (MCP tools/call), concurrency {concurrency}"),
                &through_settle,
            ),
            (
                format!("  the same through rmcp's route, c={concurrency}"),
                &through_rmcp,
            ),
            (
                format!("simulator directly, concurrency {concurrency}"),
                &direct,
            ),
            (format!("  a bare proxy in front, c={concurrency}"), &bare),
            (
                format!("  a bare MCP proxy in front, c={concurrency}"),
                &bare_mcp,
            ),
        ] {
            println!(
                "  {:<40} {:>10.0} {:>10.0} {:>10.0} {:>8}",
                name,
                l.rps,
                micros(l.p50),
                micros(l.p99),
                l.n
            );
        }
        println!(
            "  ratio at concurrency {concurrency}: settle/direct throughput {:.2} (goal at c=8: at least 0.50), p50 latency x{:.1}, settle adds {:.0} µs at p50 (goal at c=1: at most 150)",
            through_settle.rps / direct.rps,
            micros(through_settle.p50) / micros(direct.p50),
            micros(through_settle.p50) - micros(direct.p50),
        );
        println!(
            "  what any server in settle's place pays here: a bare proxy {:.2} of direct throughput, adds {:.0} µs at p50; a bare MCP proxy {:.2}, adds {:.0} µs",
            bare.rps / direct.rps,
            micros(bare.p50) - micros(direct.p50),
            bare_mcp.rps / direct.rps,
            micros(bare_mcp.p50) - micros(direct.p50),
        );
        println!(
            "  the direct route against rmcp's: p50 {:.0} against {:.0} µs ({:.0} µs less), throughput x{:.2}",
            micros(through_settle.p50),
            micros(through_rmcp.p50),
            micros(through_rmcp.p50) - micros(through_settle.p50),
            through_settle.rps / through_rmcp.rps,
        );
        println!(
            "  device reads per get_device_state: {:.3} ({reads} reads for {} calls)",
            reads as f64 / through_settle.n as f64,
            through_settle.n
        );
        curves.push((
            format!("settle get_device_state, c={concurrency}"),
            through_settle.sorted,
        ));
        curves.push((
            format!("simulator directly, c={concurrency}"),
            direct.sorted,
        ));
    }
    let chart = chart_path();
    if let Some(parent) = chart.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&chart, latency_chart(&curves))?;
    println!("  latency percentiles drawn to {}", chart.display());

    let client = reqwest::Client::new();
    let reply = message(
        mcp_request(&client, &url, 2, "tools/list", json!({}))
            .send()
            .await?,
    )
    .await?;
    let bytes = serde_json::to_vec(&reply["result"])?.len();
    let tools = reply["result"]["tools"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    println!("## tools/list");
    println!(
        "  result: {bytes} bytes for {tools} tools (goal: at most 3,000; the design this replaces: 5,082 for 8)"
    );
    Ok(())
}

/// Where the latency chart goes: `BENCH_CHART`, or `target/bench/latency.svg`.
fn chart_path() -> PathBuf {
    std::env::var_os("BENCH_CHART").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench/latency.svg"),
        PathBuf::from,
    )
}

/// The percentiles the chart plots: 0 to 99.9, denser near the tail.
const CHART_PERCENTILES: [f64; 12] = [
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.5, 99.8, 99.9,
];

/// An SVG line chart of latency (log scale, µs) against percentile, one
/// line per curve; written by hand so the benchmark needs no plotting crate.
fn latency_chart(curves: &[(String, Vec<Duration>)]) -> String {
    const COLOURS: [&str; 4] = ["#d62728", "#1f77b4", "#ff7f0e", "#2ca02c"];
    const DASHES: [&str; 4] = ["", "6 4", "", "6 4"];
    let (width, height) = (760.0, 440.0);
    let (left, right, top, bottom) = (70.0, 250.0, 30.0, 60.0);
    let (plot_w, plot_h) = (width - left - right, height - top - bottom);
    let points: Vec<Vec<f64>> = curves
        .iter()
        .map(|(_, sorted)| {
            CHART_PERCENTILES
                .iter()
                .map(|p| micros(percentile(sorted, p / 100.0)).max(1.0))
                .collect()
        })
        .collect();
    let all = points.iter().flatten().copied();
    let lo = all.clone().fold(f64::MAX, f64::min).log10().floor();
    let hi = all.fold(1.0, f64::max).log10().ceil().max(lo + 1.0);
    let x = |i: usize| left + plot_w * i as f64 / (CHART_PERCENTILES.len() - 1) as f64;
    let y = |us: f64| top + plot_h * (1.0 - (us.log10() - lo) / (hi - lo));
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{left}" y="18" font-size="14">get_device_state through settle against the simulator directly: latency by percentile</text>
"#
    );
    for decade in lo as i32..=hi as i32 {
        let us = 10f64.powi(decade);
        let label = if us >= 1000.0 {
            format!("{} ms", us / 1000.0)
        } else {
            format!("{us} µs")
        };
        svg += &format!(
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>
"##,
            left + plot_w,
            left - 6.0,
            y(us) + 4.0,
            yy = y(us),
        );
    }
    for (i, p) in CHART_PERCENTILES.iter().enumerate() {
        svg += &format!(
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{top}" y2="{}" stroke="#eee"/><text x="{xx:.1}" y="{}" text-anchor="middle">p{p}</text>
"##,
            top + plot_h,
            top + plot_h + 16.0,
            xx = x(i),
        );
    }
    svg += &format!(
        r#"<text x="{}" y="{}" text-anchor="middle">percentile (not to scale)</text>
"#,
        left + plot_w / 2.0,
        height - 18.0
    );
    for (n, ((name, _), ys)) in curves.iter().zip(&points).enumerate() {
        let path: Vec<String> = ys
            .iter()
            .enumerate()
            .map(|(i, us)| format!("{:.1},{:.1}", x(i), y(*us)))
            .collect();
        let (colour, dash) = (COLOURS[n % 4], DASHES[n % 4]);
        svg += &format!(
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}" points="{}"/>
<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{}" y="{}">{name} (p50 {:.0} µs)</text>
"#,
            path.join(" "),
            left + plot_w + 40.0,
            left + plot_w + 46.0,
            top + 24.0 * n as f64 + 4.0,
            ys[3],
            lx = left + plot_w + 10.0,
            ly = top + 24.0 * n as f64,
        );
    }
    svg + "</svg>\n"
}

async fn time_to_completed() -> anyhow::Result<()> {
    // The simulator's default device: a 4 s actuation delay.
    let sim = device_sim::spawn(SimConfig::default()).await?;
    let api = sim.base_url();
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("settle.redb");
    let (url, _stop) = serve(config(&api, store.to_str().unwrap(), "0")?).await?;
    println!("## Acceptance to completed, 4 s actuation delay (default poll interval 1 s)");
    let client = reqwest::Client::new();
    let mut spans = Vec::new();
    for (i, (device, temperature)) in [
        ("ac-living", 22),
        ("ac-bedroom", 23),
        ("ac-living", 24),
        ("ac-bedroom", 25),
        ("ac-living", 21),
    ]
    .into_iter()
    .enumerate()
    {
        sim.sim().reset_stats();
        let reply = message(
            mcp_request(&client, &url, i as u64, "tools/call", json!({"name": "set_temperature", "arguments": {"device_id": device, "temperature": temperature}}))
                .send()
                .await?,
        )
        .await?;
        let accepted = Instant::now();
        let id = reply["result"]["structuredContent"]["taskId"]
            .as_str()
            .context("a task id")?
            .to_string();
        let task = loop {
            let reply = message(
                mcp_request(
                    &client,
                    &url,
                    100,
                    "tools/call",
                    json!({"name": "get_task", "arguments": {"task_id": id}}),
                )
                .send()
                .await?,
            )
            .await?;
            let task = reply["result"]["structuredContent"].clone();
            if task["status"] != "working" {
                break task;
            }
            anyhow::ensure!(
                accepted.elapsed() < Duration::from_secs(60),
                "no end: {task}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let observed = accepted.elapsed();
        let stats = sim.sim().stats();
        let reads = stats.devices[device].sensor;
        anyhow::ensure!(task["status"] == "completed", "{task}");
        println!(
            "  {device} -> {temperature}: completed {:.2} s after acceptance; {reads} sensor reads (1 before sending, {} while waiting)",
            observed.as_secs_f64(),
            reads - 1
        );
        spans.push(observed);
    }
    spans.sort();
    println!("  median {:.2} s", spans[spans.len() / 2].as_secs_f64());
    Ok(())
}

fn tasks_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    })
}

/// Creates one task per device, `concurrency` at a time; returns their ids.
async fn create_tasks(
    url: &str,
    devices: usize,
    concurrency: usize,
    temperature: f64,
) -> anyhow::Result<Vec<String>> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (next, url) = (next.clone(), url.to_string());
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut ids = Vec::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= devices {
                    return anyhow::Ok(ids);
                }
                let params = json!({"name": "set_temperature", "arguments": {"device_id": format!("ac-{n:05}"), "temperature": temperature}, "_meta": tasks_meta()});
                let reply = message(
                    client
                        .post(&url)
                        .header("accept", "application/json, text/event-stream")
                        .header("content-type", "application/json")
                        .header("mcp-protocol-version", "2026-07-28")
                        .header("mcp-method", "tools/call")
                        .header("mcp-name", "set_temperature")
                        .body(json!({"jsonrpc":"2.0","id":n,"method":"tools/call","params":params}).to_string())
                        .send()
                        .await?,
                )
                .await?;
                let id = reply["result"]["taskId"].as_str().context("a task")?.to_string();
                ids.push(id);
            }
        }));
    }
    let mut ids = Vec::new();
    for w in workers {
        ids.extend(w.await??);
    }
    Ok(ids)
}

/// `tasks/get` with many stored tasks, and task notifications.
async fn tasks_at_scale() -> anyhow::Result<()> {
    const DEVICES: usize = 10_000;
    let sim = device_sim::spawn(SimConfig {
        devices: device_sim::DeviceSpec::numbered(DEVICES),
        delay: Duration::from_millis(300),
        ..SimConfig::default()
    })
    .await?;
    let api = sim.base_url();
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("tasks.redb");
    let (url, _stop) = serve(config(&api, store.to_str().unwrap(), "0")?).await?;
    let started = Instant::now();
    let ids = Arc::new(create_tasks(&url, DEVICES, 8, 24.0).await?);
    println!(
        "## tasks/get over HTTP with {} stored tasks (redb store)",
        ids.len()
    );
    println!(
        "  created {} tasks with 8 clients in {:.1} s ({:.0}/s)",
        ids.len(),
        started.elapsed().as_secs_f64(),
        ids.len() as f64 / started.elapsed().as_secs_f64()
    );
    // Let every task end, so the scheduler is idle while we measure.
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "  {:<40} {:>10} {:>10} {:>10} {:>8}",
        "", "req/s", "p50 µs", "p99 µs", "n"
    );
    for concurrency in [1, 8] {
        let l = tasks_get_load(&url, &ids, concurrency, Duration::from_secs(3)).await?;
        println!(
            "  {:<40} {:>10.0} {:>10.0} {:>10.0} {:>8}",
            format!("tasks/get, concurrency {concurrency}"),
            l.rps,
            micros(l.p50),
            micros(l.p99),
            l.n
        );
    }
    notification_delay(&url).await?;
    // One command at a time, as an agent usually sends them: each waits
    // for its own writes to reach the disk, with no other call to share
    // an fsync with.
    const ALONE: usize = 500;
    let started = Instant::now();
    let alone = create_tasks(&url, ALONE, 1, 22.0).await?;
    let took = started.elapsed().as_secs_f64();
    println!(
        "  created {} tasks one at a time in {took:.1} s ({:.0}/s, {:.2} ms each)",
        alone.len(),
        alone.len() as f64 / took,
        took * 1e3 / alone.len() as f64
    );
    // The store commits every write waiting when a transaction starts
    // together, so more creators share each commit: whether the rate grows
    // with them tells commit time from CPU as the limit. Last, so its tasks
    // in flight do not load the notification figure.
    let started = Instant::now();
    let more = create_tasks(&url, DEVICES, 64, 23.0).await?;
    println!(
        "  created {} more tasks with 64 clients in {:.1} s ({:.0}/s)",
        more.len(),
        started.elapsed().as_secs_f64(),
        more.len() as f64 / started.elapsed().as_secs_f64()
    );
    // The same creations through a proxy that only reads, records on disk
    // twice and sends (`support/proxy.rs`): the most any server in
    // settle's place could create here. Once settle's tasks have ended, so
    // its polls do not load the proxy's figures.
    tasks_end(&url, more.last().context("a task")?).await?;
    let proxy = format!("{}/command", proxy::start(&api, Some(dir.path())).await?);
    for (count, clients) in [(DEVICES, 8), (ALONE, 1), (DEVICES, 64)] {
        let started = Instant::now();
        let created = create_tasks(&proxy, count, clients, 25.0).await?;
        let took = started.elapsed().as_secs_f64();
        println!(
            "  a bare durable proxy instead: {} commands with {clients} client(s) in {took:.1} s ({:.0}/s)",
            created.len(),
            created.len() as f64 / took
        );
    }
    Ok(())
}

/// A stateless `tasks/get` of the task `id`, as a task-aware client sends it.
fn tasks_get_request(client: &reqwest::Client, url: &str, id: &str) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tasks/get")
        .header("mcp-name", id)
        .body(json!({"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":id,"_meta":tasks_meta()}}).to_string())
}

/// `tasks/get` of the tasks `ids`, spread over them, `concurrency` workers
/// for `duration`.
async fn tasks_get_load(
    url: &str,
    ids: &Arc<Vec<String>>,
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<Load> {
    let (ids, url) = (ids.clone(), url.to_string());
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    load(concurrency, duration, move |client, _| {
        let n = counter.fetch_add(7919, std::sync::atomic::Ordering::Relaxed) % ids.len();
        let request = tasks_get_request(&client, &url, &ids[n]);
        Box::pin(async move {
            let reply = message(request.send().await?).await?;
            anyhow::ensure!(
                reply["result"]["taskId"].is_string(),
                "tasks/get failed: {reply}"
            );
            Ok(())
        })
    })
    .await
}

/// Waits until the task `id` has ended (10 s at most).
async fn tasks_end(url: &str, id: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = message(tasks_get_request(&client, url, id).send().await?).await?;
        if reply["result"]["status"] != "working" {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "task {id} still working: {reply}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// From a task's change (its `lastUpdatedAt`, stamped by the plugin) to a
/// listener receiving it.
///
/// The devices act 300 ms after a command, so the first tasks created may
/// end before the listen stream is acknowledged; the stream owes nothing
/// for those. Once it is acknowledged (the runner follows the tasks from
/// then on), every task is read once with `tasks/get`: each still working
/// then must end on the stream, and the row says how many did.
async fn notification_delay(url: &str) -> anyhow::Result<()> {
    const TASKS: usize = 200;
    // A setpoint the devices are not at yet, so every task changes while
    // the listener follows it.
    let ids = create_tasks(url, TASKS, 4, 25.0).await?;
    let body = json!({"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"taskIds":ids},"_meta":tasks_meta()}});
    let mut response = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await?;
    let mut delays = Vec::new();
    let mut ended = std::collections::HashSet::new();
    // The tasks still working once the stream was acknowledged, read
    // beside the stream so its notifications are timed as they come.
    let mut working_at_ack: Option<tokio::task::JoinHandle<anyhow::Result<Vec<String>>>> = None;
    let mut owed: Option<Vec<String>> = None;
    let mut buffer = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(check) = working_at_ack.take_if(|check| check.is_finished()) {
            owed = Some(check.await??);
        }
        if owed
            .as_ref()
            .is_some_and(|owed| owed.iter().all(|id| ended.contains(id)))
            || Instant::now() >= deadline
        {
            break;
        }
        let chunk = match tokio::time::timeout(Duration::from_millis(100), response.chunk()).await {
            Ok(Ok(Some(chunk))) => chunk,
            Ok(_) => break,
            Err(_) => continue,
        };
        let received = std::time::SystemTime::now();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find('\n') {
            let line: String = buffer.drain(..=end).collect();
            let Some(data) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let Ok(note) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            if note["method"] == "notifications/subscriptions/acknowledged" {
                let (url, ids) = (url.to_string(), ids.clone());
                working_at_ack = Some(tokio::spawn(async move {
                    let client = reqwest::Client::new();
                    let mut working = Vec::new();
                    for id in ids {
                        let reply =
                            message(tasks_get_request(&client, &url, &id).send().await?).await?;
                        if reply["result"]["status"] == "working" {
                            working.push(id);
                        }
                    }
                    Ok(working)
                }));
                continue;
            }
            if note["method"] != "notifications/tasks" {
                continue;
            }
            let task = &note["params"];
            let Some(stamp) = task["lastUpdatedAt"]
                .as_str()
                .and_then(|t| humantime::parse_rfc3339(t).ok())
            else {
                continue;
            };
            if let Ok(delay) = received.duration_since(stamp) {
                delays.push(delay);
            }
            if matches!(
                task["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                ended.insert(task["taskId"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    let owed = owed.context("the listen stream was never acknowledged")?;
    let missed = owed.iter().filter(|id| !ended.contains(*id)).count();
    delays.sort();
    anyhow::ensure!(!delays.is_empty(), "no task notifications arrived");
    println!("## Task change to listener ({TASKS} tasks followed on one listen stream)");
    println!(
        "  {} notifications: p50 {:.2} ms, p99 {:.2} ms (ms resolution of lastUpdatedAt)",
        delays.len(),
        percentile(&delays, 0.5).as_secs_f64() * 1e3,
        percentile(&delays, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "  {} tasks still working when the stream was acknowledged, {} of them heard ending ({missed} not); {} had ended before",
        owed.len(),
        owed.len() - missed,
        TASKS - owed.len()
    );
    anyhow::ensure!(missed == 0, "{missed} tasks ended without a notification");
    Ok(())
}

/// `--profile SECONDS [CONCURRENCY]`: one kind of call only
/// (`get_device_state`, or what `BENCH_CALL` names: `tasks/get` or
/// `set_temperature`), at concurrency 1 unless told otherwise, for that
/// long, so a profiler attached to the process sees one kind of call.
fn profile_seconds() -> Option<(u64, usize)> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--profile")?;
    let seconds = args.get(at + 1).and_then(|s| s.parse().ok())?;
    let concurrency = args.get(at + 2).and_then(|s| s.parse().ok()).unwrap_or(1);
    Some((seconds, concurrency))
}

async fn profile(
    sim: &device_sim::RunningSim,
    seconds: u64,
    concurrency: usize,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("profile.redb");
    // `BENCH_SETTLE=process`: settle as its own process, for a profiler
    // attached to it (its pid is printed).
    let (url, _stop, _process) = if std::env::var("BENCH_SETTLE").is_ok_and(|v| v == "process") {
        let settle = spawn_settle(&sim.base_url(), dir.path(), &["--inline-wait-ms", "0"]).await?;
        println!("settle runs as pid {}", settle.pid());
        (settle.url.clone(), None, Some(settle))
    } else {
        let (url, stop) = serve(config(&sim.base_url(), store.to_str().unwrap(), "0")?).await?;
        (url, Some(stop), None)
    };
    // `BENCH_ROUTE=rmcp`: profile the route through rmcp's service.
    let route = match std::env::var("BENCH_ROUTE").as_deref() {
        Ok("rmcp") => Route::Rmcp,
        _ => Route::Direct,
    };
    // `BENCH_CALL=set_temperature`: profile creation, rounds of one
    // command to each of the 1,000 devices.
    if std::env::var("BENCH_CALL").is_ok_and(|c| c == "set_temperature") {
        return profile_creation(&url, seconds, concurrency).await;
    }
    // `BENCH_CALL=tasks/get`: profile `tasks/get` of 1,000 ended tasks.
    let tasks = if std::env::var("BENCH_CALL").is_ok_and(|c| c == "tasks/get") {
        let ids = Arc::new(create_tasks(&url, 1_000, 8, 24.0).await?);
        // Their devices act within 100 ms; wait until the last one ended.
        tasks_end(&url, ids.last().context("a task")?).await?;
        Some(ids)
    } else {
        device_state_load(&url, concurrency, Duration::from_secs(1), route).await?;
        None
    };
    let call = if tasks.is_some() {
        "tasks/get"
    } else {
        "get_device_state"
    };
    println!(
        "profiling: {call} at concurrency {concurrency} for {seconds} s (pid {})",
        std::process::id()
    );
    let duration = Duration::from_secs(seconds);
    let l = match &tasks {
        Some(ids) => tasks_get_load(&url, ids, concurrency, duration).await?,
        None => device_state_load(&url, concurrency, duration, route).await?,
    };
    println!(
        "  {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs, n {}",
        l.rps,
        micros(l.p50),
        micros(l.p99),
        l.n
    );
    Ok(())
}

/// Creation for a profiler: rounds of one `set_temperature` to each of
/// the 1,000 devices, the target changing every round, until `seconds`
/// have passed. The devices act within 100 ms, so by the time a round
/// comes back to a device its last task has mostly ended: the mix of
/// creation, polls and completions a busy runner sees.
async fn profile_creation(url: &str, seconds: u64, concurrency: usize) -> anyhow::Result<()> {
    println!(
        "profiling: set_temperature at concurrency {concurrency} for {seconds} s (pid {})",
        std::process::id()
    );
    let (start, mut created) = (Instant::now(), 0);
    for round in 0.. {
        if start.elapsed() >= Duration::from_secs(seconds) {
            break;
        }
        let temperature = if round % 2 == 0 { 22.0 } else { 23.0 };
        created += create_tasks(url, 1_000, concurrency, temperature)
            .await?
            .len();
    }
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "  created {created} tasks in {elapsed:.1} s ({:.0}/s)",
        created as f64 / elapsed
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    anyhow::ensure!(plugin().exists(), "build the plugin first: make guest");
    println!("settle benchmark, {}", std::env::consts::ARCH);
    let sim = device_sim::spawn(SimConfig {
        // Profiling `tasks/get` creates a task on each of 1,000 devices.
        devices: device_sim::DeviceSpec::numbered(if profile_seconds().is_some() {
            1_000
        } else {
            8
        }),
        delay: Duration::from_millis(100),
        ..SimConfig::default()
    })
    .await?;
    if let Some((seconds, concurrency)) = profile_seconds() {
        return profile(&sim, seconds, concurrency).await;
    }
    if part("sandbox") {
        sandbox_cost(&sim.base_url()).await?;
    }
    if part("calls") {
        http_throughput(&sim).await?;
    }
    if part("completion") {
        time_to_completed().await?;
    }
    if part("tasks") {
        tasks_at_scale().await?;
    }
    // Last: it installs a tracing subscriber for the rest of the process.
    if part("timeline") {
        call_timeline(&sim).await?;
    }
    Ok(())
}

/// `get_device_state` at concurrency 1 (in this process), broken down by
/// the stages [`settle::timeline`] marks: where each microsecond of one
/// call goes, from the client's send to its having the answer.
async fn call_timeline(sim: &device_sim::RunningSim) -> anyhow::Result<()> {
    let api = sim.base_url();
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("timeline.redb");
    let (url, _stop) = serve(config(&api, store.to_str().unwrap(), "0")?).await?;
    // Warm: the first calls open the device connection and fill caches.
    device_state_load(&url, 1, Duration::from_millis(500), Route::Direct).await?;
    timeline::record();
    let load = device_state_load(&url, 1, Duration::from_secs(3), Route::Direct).await?;
    let (stages, taken, calls) = timeline::stages();
    println!(
        "## get_device_state at concurrency 1, by stage ({taken} of {calls} calls passed every mark in order; end to end p50 {:.0} µs)",
        micros(load.p50)
    );
    for stage in &stages {
        println!(
            "  {:<62} p50 {:>6.1} µs   p10 {:>6.1}   p90 {:>6.1}",
            format!("{} → {}", stage.from, stage.to),
            stage.p50_us,
            stage.p10_us,
            stage.p90_us
        );
    }
    println!(
        "  {:<62} {:>10.1} µs",
        "sum of the stages' medians",
        stages.iter().map(|s| s.p50_us).sum::<f64>()
    );
    Ok(())
}

/// Whether to run one part of the benchmark: all of them, or those named
/// in `BENCH_ONLY` (comma-separated: sandbox, calls, completion, tasks,
/// timeline), for a quick measure of one change.
fn part(name: &str) -> bool {
    std::env::var("BENCH_ONLY").map_or(true, |only| only.split(',').any(|p| p.trim() == name))
}
