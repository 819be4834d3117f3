//! Run with `make bench` (or `cargo run --release -p settle --example bench_lag`).
//!
//! Completion lag: from the moment the simulator applied a command (its own
//! record, `/_sim/devices/{id}` `settled`) to the moment settle recorded the
//! task `completed` (the task's `lastUpdatedAt`), and the sensor reads each
//! command cost. One device per actuation delay (2.3, 3.7, 5.2, 7.9, 11.4,
//! 19.6 and 29.1 s, ±5 %), a few warm-up commands each, then measured
//! commands. Beside it, in the same run and against the same simulator, a
//! plain poller that reads every second until it sees the value: the
//! reference. settle runs as its own process (release build), with its
//! default settings.
//!
//! `--warm-up N` and `--commands N` change how many commands each device
//! gets (3 and 8 by default); `--delays 2.3,5.2` picks delays.

use anyhow::Context;
use clap::Parser;
use device_sim::{DeviceSpec, SimConfig};
use serde_json::{Value, json};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[path = "support/process.rs"]
mod process;
use process::spawn_settle;

#[derive(Parser)]
struct Args {
    /// Warm-up commands per device, not measured (they teach settle the
    /// device's timing, as a day of use would).
    #[arg(long, default_value_t = 3)]
    warm_up: usize,
    /// Measured commands per device.
    #[arg(long, default_value_t = 8)]
    commands: usize,
    /// Actuation delays, seconds.
    #[arg(long, value_delimiter = ',', default_values_t = [2.3, 3.7, 5.2, 7.9, 11.4, 19.6, 29.1])]
    delays: Vec<f64>,
}

/// One measured command.
struct Sample {
    lag_ms: i64,
    reads: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let n = args.delays.len();
    let mut devices = Vec::new();
    for (i, _) in args.delays.iter().enumerate() {
        devices.push(DeviceSpec::new(format!("settle-{i}"), "settle"));
        devices.push(DeviceSpec::new(format!("poller-{i}"), "poller"));
    }
    let sim = device_sim::spawn(SimConfig {
        devices,
        ..SimConfig::default()
    })
    .await?;
    for (i, delay) in args.delays.iter().enumerate() {
        // ±5 %: the simulator's jitter is one-sided, so start 5 % early.
        let base = Duration::from_secs_f64(delay * 0.95);
        let jitter = Duration::from_secs_f64(delay * 0.10);
        for who in ["settle", "poller"] {
            sim.sim().set_timing(&format!("{who}-{i}"), base, jitter)?;
        }
    }
    let api = sim.base_url();
    let dir = tempfile::tempdir()?;
    let settle = spawn_settle(&api, dir.path(), &["--inline-wait-ms", "0"]).await?;
    let url = settle.url.clone();

    println!("## Completion lag: the simulator applying a command -> the task recorded completed");
    println!(
        "   {} devices per side, {} warm-up and {} measured commands each, delays ±5 %",
        n, args.warm_up, args.commands
    );
    let started = Instant::now();
    let mut runs = Vec::new();
    for i in 0..n {
        let (handle, url) = (sim.sim().clone(), url.clone());
        let (warm, count) = (args.warm_up, args.commands);
        runs.push(tokio::spawn(async move {
            let settle = settle_device(&handle, &url, &format!("settle-{i}"), warm, count).await;
            (i, settle)
        }));
        let (handle, api) = (sim.sim().clone(), api.clone());
        let (warm, count) = (args.warm_up, args.commands);
        runs.push(tokio::spawn(async move {
            let poller = poller_device(&handle, &api, &format!("poller-{i}"), warm, count).await;
            (i + n, poller)
        }));
    }
    let mut results: Vec<Option<Vec<Sample>>> = (0..2 * n).map(|_| None).collect();
    for run in runs {
        let (slot, samples) = run.await?;
        results[slot] = Some(samples?);
    }
    println!("   (ran {:.0} s)", started.elapsed().as_secs_f64());
    println!();
    println!(
        "   | delay | settle lag p50 / p95 / max (ms) | reads/cmd | 1 s poller lag p50 / p95 / max (ms) | reads/cmd |"
    );
    println!("   | --- | --- | --- | --- | --- |");
    let (mut all_settle, mut all_poller) = (Vec::new(), Vec::new());
    for (i, delay) in args.delays.iter().enumerate() {
        let settle = results[i].take().unwrap();
        let poller = results[i + n].take().unwrap();
        println!(
            "   | {delay} s | {} | {:.1} | {} | {:.1} |",
            summary(&settle),
            reads(&settle),
            summary(&poller),
            reads(&poller)
        );
        all_settle.extend(settle);
        all_poller.extend(poller);
    }
    println!(
        "   | all | {} | {:.1} | {} | {:.1} |",
        summary(&all_settle),
        reads(&all_settle),
        summary(&all_poller),
        reads(&all_poller)
    );
    let p95 = percentile(&all_settle, 0.95);
    println!();
    println!(
        "   settle: lag p95 {p95} ms (goal <= 250 ms); {:.2} reads per command against the poller's {:.2} (ratio {:.2}, goal <= 1)",
        reads(&all_settle),
        reads(&all_poller),
        reads(&all_settle) / reads(&all_poller)
    );
    drop(settle);
    Ok(())
}

fn percentile(samples: &[Sample], p: f64) -> i64 {
    let mut lags: Vec<i64> = samples.iter().map(|s| s.lag_ms).collect();
    lags.sort();
    lags[((lags.len() as f64 - 1.0) * p).round() as usize]
}

fn summary(samples: &[Sample]) -> String {
    format!(
        "{} / {} / {}",
        percentile(samples, 0.5),
        percentile(samples, 0.95),
        percentile(samples, 1.0)
    )
}

fn reads(samples: &[Sample]) -> f64 {
    samples.iter().map(|s| s.reads).sum::<u64>() as f64 / samples.len() as f64
}

/// The temperature command `k` sets: alternating, so each one moves the
/// device.
fn temperature(k: usize) -> f64 {
    if k.is_multiple_of(2) { 21.0 } else { 24.5 }
}

fn sensor_reads(sim: &device_sim::Sim, device: &str) -> u64 {
    sim.stats().devices[device].sensor
}

/// When the simulator applied the command `request_id`, if it has.
fn applied_at(sim: &device_sim::Sim, device: &str, request_id: &str) -> Option<u64> {
    let view = sim.inspect(device).ok()?;
    view.settled
        .iter()
        .find(|s| s.request_id == request_id && s.applied)
        .map(|s| s.settled_at_ms)
}

/// When the simulator last applied a command to `device`.
fn latest_applied(sim: &device_sim::Sim, device: &str) -> Option<u64> {
    let view = sim.inspect(device).ok()?;
    view.settled
        .iter()
        .rev()
        .find(|s| s.applied)
        .map(|s| s.settled_at_ms)
}

/// Commands through settle, one at a time, each to completion.
async fn settle_device(
    sim: &device_sim::Sim,
    url: &str,
    device: &str,
    warm_up: usize,
    count: usize,
) -> anyhow::Result<Vec<Sample>> {
    let http = reqwest::Client::new();
    let mut samples = Vec::new();
    let mut completed = 0;
    let mut k = 0;
    while completed < warm_up + count {
        k += 1;
        anyhow::ensure!(
            k <= 2 * (warm_up + count),
            "{device}: too many commands failed"
        );
        let reads_before = sensor_reads(sim, device);
        let call = tool(
            &http,
            url,
            "set_temperature",
            json!({"device_id": device, "temperature": temperature(k)}),
        )
        .await?;
        let id = call["taskId"].as_str().context("a task id")?.to_string();
        let task = loop {
            let task = tool(&http, url, "get_task", json!({"task_id": id})).await?;
            if task["status"] != "working" {
                break task;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if task["status"] != "completed" {
            // A slow device's first command may outlast the default settle
            // window before settle knows its timing; it is learned, and the
            // bench goes on.
            println!(
                "   {device}: {} ({})",
                task["status"], task["statusMessage"]
            );
            continue;
        }
        completed += 1;
        // Commands to a device go one at a time: its latest applied command
        // is this task's.
        let applied = latest_applied(sim, device).context("applied")?;
        let done = humantime::parse_rfc3339(task["lastUpdatedAt"].as_str().unwrap())?
            .duration_since(UNIX_EPOCH)?
            .as_millis() as i64;
        if completed > warm_up {
            samples.push(Sample {
                lag_ms: done - applied as i64,
                reads: sensor_reads(sim, device) - reads_before,
            });
        }
    }
    Ok(samples)
}

/// Commands straight to the simulator, each polled every second until the
/// value shows: the reference.
async fn poller_device(
    sim: &device_sim::Sim,
    api: &str,
    device: &str,
    warm_up: usize,
    count: usize,
) -> anyhow::Result<Vec<Sample>> {
    let http = reqwest::Client::new();
    let mut samples = Vec::new();
    for k in 1..=warm_up + count {
        let t = temperature(k);
        let sent: Value = http
            .post(format!("{api}/api/v1/devices/{device}/control"))
            .json(&json!({"target_temperature": t}))
            .send()
            .await?
            .json()
            .await?;
        let request = sent["request_id"]
            .as_str()
            .context("request id")?
            .to_string();
        let mut reads = 0;
        let seen = loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            reads += 1;
            let reading: Value = http
                .get(format!("{api}/api/v1/devices/{device}/sensors"))
                .send()
                .await?
                .json()
                .await?;
            if reading["target_temperature"] == json!(t) {
                break now_ms();
            }
            anyhow::ensure!(reads < 120, "{device}: {t} never showed");
        };
        if k > warm_up {
            let applied = applied_at(sim, device, &request).context("applied")?;
            samples.push(Sample {
                lag_ms: seen as i64 - applied as i64,
                reads,
            });
        }
    }
    Ok(samples)
}

/// Calls a tool over MCP (2026-07-28) and returns its `structuredContent`.
async fn tool(
    http: &reqwest::Client,
    url: &str,
    name: &str,
    arguments: Value,
) -> anyhow::Result<Value> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": name, "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    });
    let reply: Value = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .body(body.to_string())
        .send()
        .await?
        .json()
        .await?;
    reply["result"]["structuredContent"]
        .as_object()
        .map(|_| reply["result"]["structuredContent"].clone())
        .with_context(|| format!("{name}: {reply}"))
}
