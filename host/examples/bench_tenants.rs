//! Run with `make bench` (or `cargo run --release -p settle --example
//! bench_tenants`).
//!
//! The numbers the tenants issue asks for, measured in one run:
//! - the time of a plugin swap with and without a cached compiled artifact
//!   (p50, p99);
//! - `settle serve` start to its first answered request, with an empty
//!   cache (cold) and a filled one (cached);
//! - a well-behaved tenant's latency (p50, p99) while a neighbour tenant
//!   runs the hostile plugin in a loop, next to the same with the
//!   neighbour idle.

use serde_json::{Value, json};
use settle::app::Runner;
use settle::cli::{Cli, Command};
use settle::config::RunnerConfig;
use settle::context::TenantContext;
use settle::runtime::Runtime;
use settle::store::Store;
use settle::swap::{SwapOutcome, Swapper};
use settle::tenant::{Tenant, Tenants};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The allocator the `settle` binary runs with (host/src/main.rs), so that
/// settle measured in this process allocates as it does in production.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn target() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target")
}

fn device_plugin() -> PathBuf {
    target().join("wasm32-wasip2/release/settle_devices.wasm")
}

fn hostile_plugin() -> PathBuf {
    target().join("wasm32-wasip2/release/settle_hostile.wasm")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The component with a custom section appended: new bytes, same plugin.
fn variant(component: &[u8], n: u32) -> Vec<u8> {
    let name = b"settle-bench-variant";
    let mut out = component.to_vec();
    out.extend([0, (1 + name.len() + 4) as u8, name.len() as u8]);
    out.extend_from_slice(name);
    out.extend_from_slice(&n.to_le_bytes());
    out
}

/// `SWAPS` swaps of one tenant, each to bytes it has not served before.
/// With a cache, every variant is compiled once beforehand (as a deploy
/// that pre-warms the cache, or a second replica, would find it).
async fn swap_times(cache: Option<&Path>) -> anyhow::Result<Vec<Duration>> {
    const SWAPS: u32 = 20;
    let dir = tempfile::tempdir()?;
    let original = std::fs::read(device_plugin())?;
    let file = dir.path().join("plugin.wasm");
    std::fs::write(&file, &original)?;
    let runtime = Arc::new(Runtime::new(
        Store::open("memory")?,
        cache.map(Path::to_path_buf),
    )?);
    if cache.is_some() {
        for n in 1..=SWAPS {
            let warm = dir.path().join("warm.wasm");
            std::fs::write(&warm, variant(&original, n))?;
            runtime.load_plugin(&warm)?;
        }
    }
    let context = TenantContext {
        name: "bench".into(),
        namespace: "bench".into(),
        // The device plugin refuses to load without a device API; nothing
        // is sent to it here.
        plugin_config: [("device_api".to_string(), "http://127.0.0.1:9".to_string())].into(),
        policy: settle::policy::OutboundPolicy::new(vec![]),
        limits: Default::default(),
        events: Default::default(),
        metrics: Default::default(),
    };
    let tenant = Tenant::new(context, runtime.load_plugin(&file)?);
    let tenants = Arc::new(Tenants::new([tenant]));
    let swapper = Swapper::new(runtime, tenants.clone());
    let tenant = tenants.get("bench").expect("added");
    let mut times = Vec::new();
    for n in 1..=SWAPS {
        std::fs::write(&file, variant(&original, n))?;
        let started = Instant::now();
        let outcome = swapper.reload(&tenant).await;
        let took = started.elapsed();
        anyhow::ensure!(
            matches!(outcome, SwapOutcome::Loaded { .. }),
            "swap {n}: {outcome:?}"
        );
        times.push(took);
    }
    times.sort();
    Ok(times)
}

/// Starts the `settle` binary and times until `tools/list` is answered.
async fn start_to_first_answer(cache: &Path) -> anyhow::Result<Duration> {
    use tokio::io::AsyncBufReadExt;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(target().join("release/settle"))
        .args(["serve", "--http", "127.0.0.1:0", "--store", "memory"])
        .arg("--plugin")
        .arg(device_plugin())
        .arg("--cache-dir")
        .arg(cache)
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("piped")).lines();
    let url = loop {
        let line = lines
            .next_line()
            .await?
            .ok_or_else(|| anyhow::anyhow!("settle exited before listening"))?;
        if let Some(rest) = line.split("serving MCP at ").nth(1) {
            break rest.trim().to_string();
        }
    };
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let reply: Value = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .body(body.to_string())
        .send()
        .await?
        .json()
        .await?;
    let took = started.elapsed();
    anyhow::ensure!(reply["result"]["tools"].is_array(), "{reply}");
    child.kill().await?;
    Ok(took)
}

/// A runner with two tenants: `good` (the device plugin) and `bad` (the
/// hostile plugin, 16 MiB, 200 ms per call).
async fn two_tenants(
    api: &str,
    dir: &Path,
) -> anyhow::Result<(String, tokio::sync::oneshot::Sender<()>)> {
    use clap::Parser;
    std::fs::write(dir.join("good.token"), "good")?;
    std::fs::write(dir.join("bad.token"), "bad")?;
    let config = format!(
        "[tenant.good]\nplugin = {:?}\ndevice_api = {api:?}\ntoken_file = \"good.token\"\n\n\
         [tenant.bad]\nplugin = {:?}\ndevice_api = \"http://127.0.0.1:9\"\ntoken_file = \"bad.token\"\n\
         memory_mib = 16\ncall_timeout_ms = 200\n",
        device_plugin().to_str().unwrap(),
        hostile_plugin().to_str().unwrap()
    );
    let path = dir.join("settle.toml");
    std::fs::write(&path, config)?;
    let Command::Serve(args) = Cli::try_parse_from([
        "settle",
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--store",
        "memory",
        "--cache-dir",
        "none",
    ])?
    .command
    else {
        anyhow::bail!("not `settle serve`");
    };
    let runner = Runner::start(RunnerConfig::from_args(&args)?).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(runner.serve_http(listener, async move {
        let _ = stopped.await;
    }));
    Ok((base, stop))
}

async fn call_tool(
    client: &reqwest::Client,
    base: &str,
    tenant: &str,
    tool: &str,
    arguments: Value,
) -> anyhow::Result<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    Ok(client
        .post(format!("{base}/t/{tenant}/mcp"))
        .bearer_auth(tenant)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(body.to_string())
        .send()
        .await?
        .json()
        .await?)
}

/// `good`'s `get_device_state` latencies over `n` sequential calls.
async fn good_latencies(base: &str, n: usize) -> anyhow::Result<Vec<Duration>> {
    let client = reqwest::Client::new();
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let reply = call_tool(
            &client,
            base,
            "good",
            "get_device_state",
            json!({"device_id": "ac-living"}),
        )
        .await?;
        all.push(started.elapsed());
        anyhow::ensure!(
            reply["result"]["isError"] != true && reply.get("error").is_none(),
            "the good tenant's call failed: {reply}"
        );
    }
    all.sort();
    Ok(all)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cache = tempfile::tempdir()?;
    println!("## Plugin swap (20 swaps each, device plugin)");
    let uncached = swap_times(None).await?;
    let cached = swap_times(Some(cache.path())).await?;
    for (label, times) in [("compiled", &uncached), ("cached artifact", &cached)] {
        println!(
            "  {label:>16}: p50 {:7.1} ms, p99 {:7.1} ms",
            ms(percentile(times, 0.5)),
            ms(percentile(times, 0.99))
        );
    }
    println!(
        "  cached / compiled (p50): {:.3}",
        percentile(&cached, 0.5).as_secs_f64() / percentile(&uncached, 0.5).as_secs_f64()
    );

    println!("## settle serve start to first answered request (5 starts each)");
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..5 {
        let empty = tempfile::tempdir()?;
        cold.push(start_to_first_answer(empty.path()).await?);
        warm.push(start_to_first_answer(empty.path()).await?);
    }
    cold.sort();
    warm.sort();
    println!(
        "  cold (empty cache): median {:.0} ms, max {:.0} ms",
        ms(percentile(&cold, 0.5)),
        ms(percentile(&cold, 1.0))
    );
    println!(
        "  cached:             median {:.0} ms, max {:.0} ms",
        ms(percentile(&warm, 0.5)),
        ms(percentile(&warm, 1.0))
    );

    println!(
        "## A tenant's latency next to a hostile neighbour (2,000 get_device_state calls each)"
    );
    let sim = device_sim::spawn(device_sim::SimConfig::default()).await?;
    let dir = tempfile::tempdir()?;
    let (base, _stop) = two_tenants(&sim.base_url(), dir.path()).await?;
    good_latencies(&base, 200).await?; // warm up
    let idle = good_latencies(&base, 2_000).await?;
    let running = Arc::new(AtomicBool::new(true));
    let hostile = {
        let (base, running) = (base.clone(), running.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut faults = 0u64;
            while running.load(Ordering::Relaxed) {
                for tool in ["spin", "bomb", "trap"] {
                    if let Ok(reply) = call_tool(&client, &base, "bad", tool, json!({})).await
                        && reply.get("error").is_some()
                    {
                        faults += 1;
                    }
                }
            }
            faults
        })
    };
    let busy = good_latencies(&base, 2_000).await?;
    running.store(false, Ordering::Relaxed);
    let faults = hostile.await?;
    for (label, times) in [("neighbour idle", &idle), ("neighbour hostile", &busy)] {
        println!(
            "  {label:>17}: p50 {:6.2} ms, p99 {:6.2} ms",
            ms(percentile(times, 0.5)),
            ms(percentile(times, 0.99))
        );
    }
    println!(
        "  p99 hostile / idle: {:.2} ({faults} hostile calls stopped meanwhile, none of the good tenant's failed)",
        percentile(&busy, 0.99).as_secs_f64() / percentile(&idle, 0.99).as_secs_f64()
    );
    Ok(())
}
