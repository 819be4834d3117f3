//! Run with `make bench-scale` (or `cargo run --release -p settle --example
//! bench_scale -- --help`).
//!
//! Many tasks in flight on one runner (or two replicas on Redis): the
//! simulator (`--devices` devices, a long actuation delay so every task is
//! in flight at once) and settle run as separate processes; this driver
//! creates the tasks over MCP, samples the runner's RSS, then checks every
//! stored task straight from the store: each must have completed within the
//! device's delay plus two poll intervals of its acceptance. It prints the
//! time taken, RSS, sensor reads per device, store size, the latency of
//! `tasks/get` with 10,000 and with all tasks stored (one at a time, while
//! tasks are in flight), and its throughput with 1 and 8 clients after the
//! wait for every task to end. Once a minute it prints the runners' CPU and
//! the simulator's sensor reads, so a runner falling behind shows; at the
//! end, how many polls after their device acted the tasks ended, and the
//! latest few of those over their limit. On Redis it also subscribes to the
//! replicas' relay of change notices, as a third replica would, and prints
//! how long after each task's stored end its notice was heard. `--keep DIR`
//! keeps the store and the logs to look into them afterwards.

use anyhow::{Context, bail, ensure};
use clap::Parser;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;

// `sorted` is for `bench`'s chart; this driver draws none.
#[allow(dead_code)]
#[path = "support/load.rs"]
mod load;
use load::{Load, load};

/// How long creating the tasks may take, on top of the devices' delay,
/// before a task's time to live runs out.
const CREATION_ALLOWANCE: Duration = Duration::from_secs(4 * 3600);

#[derive(Parser, Debug)]
struct Args {
    /// Tasks to create.
    #[arg(long, default_value_t = 1_000_000)]
    tasks: usize,
    /// Simulated devices; tasks are spread evenly over them.
    #[arg(long, default_value_t = 10_000)]
    devices: usize,
    /// `redb` (one runner, embedded store) or `redis` (two replicas).
    #[arg(long, default_value = "redb")]
    store: String,
    /// The simulator's actuation delay: long enough that creating every
    /// task finishes before the first one is applied.
    #[arg(long, default_value_t = 900_000)]
    delay_ms: u64,
    /// Spreads the devices' delays: device `i` acts `delay_ms + spread × i /
    /// devices` after its first command, as a fleet's devices do not all
    /// act at once. Each task is checked against its own device's delay.
    /// 0 (the default) has every device act together: a burst of every
    /// task ending at once.
    #[arg(long, default_value_t = 0)]
    delay_spread_ms: u64,
    /// The plugin's poll interval.
    #[arg(long, default_value_t = 10_000)]
    poll_ms: u64,
    /// Concurrent creating clients.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Keep the run's store and logs in this (new or empty) directory
    /// instead of a temporary one, to look into a task after the run.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Runs nothing: reads every task from the Redis at this URL (a kept
    /// run's store, served again with `redis-server --dir DIR
    /// --appendonly yes`) and checks each against its device's delay, as a
    /// run does at its end. The other arguments must be the run's.
    #[arg(long, value_name = "URL")]
    check_redis: Option<String>,
    /// Once every task is created, kills the runner with SIGKILL (its store
    /// is not closed, so redb repairs the file when it opens it), starts
    /// it again on the same store, and prints how long that took; the
    /// tasks are then checked as usual. Embedded store only.
    #[arg(long)]
    crash: bool,
    /// The device plugin to run instead of the one `make build` made: to
    /// compare two builds of the plugin on the same runner.
    #[arg(long, value_name = "WASM")]
    plugin: Option<PathBuf>,
}

impl Args {
    /// The longest any device takes to act: the base delay plus the spread.
    fn longest_delay_ms(&self) -> u64 {
        self.delay_ms + self.delay_spread_ms
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A child process that prints a line naming its address once it listens.
struct Child {
    child: tokio::process::Child,
    address: String,
}

async fn spawn(
    mut command: tokio::process::Command,
    pattern: &'static str,
    log: &Path,
) -> anyhow::Result<Child> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {command:?}"))?;
    let (found, mut address) = tokio::sync::mpsc::channel::<String>(1);
    let log = std::fs::File::create(log)?;
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let (found, mut log) = (found.clone(), log.try_clone()?);
        tokio::spawn(async move {
            use std::io::Write;
            let mut lines = tokio::io::BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = writeln!(log, "{line}");
                if let Some(rest) = line.split(pattern).nth(1) {
                    let _ = found.send(rest.trim().to_string()).await;
                }
            }
        });
    }
    let address = tokio::time::timeout(Duration::from_secs(60), address.recv())
        .await
        .ok()
        .flatten()
        .context("the process did not say where it listens")?;
    Ok(Child { child, address })
}

/// Device `id`'s delay under `--delay-spread-ms` (`ac-00042` is device 42).
fn device_delay_ms(args: &Args, id: &str) -> u64 {
    let index: u64 = id
        .strip_prefix("ac-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    args.delay_ms + args.delay_spread_ms * index / args.devices.max(1) as u64
}

/// Kills `runner` with SIGKILL and starts `command` in its place, on the
/// same store. Answers the new runner, and how long after the kill it said
/// it serves and its `/readyz` first answered 200.
async fn crash_and_restart(
    runner: &mut Child,
    command: tokio::process::Command,
    log: &Path,
) -> anyhow::Result<(Child, (Duration, Duration))> {
    runner.child.start_kill()?;
    runner.child.wait().await?;
    let killed = Instant::now();
    let restarted = spawn(command, "serving MCP at ", log).await?;
    let serving = killed.elapsed();
    let readyz = restarted.address.replace("/mcp", "/readyz");
    let client = reqwest::Client::new();
    let deadline = killed + Duration::from_secs(600);
    loop {
        match client.get(&readyz).send().await {
            Ok(r) if r.status().is_success() => break,
            _ if Instant::now() > deadline => bail!("{readyz} not ready 600 s after the restart"),
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    Ok((restarted, (serving, killed.elapsed())))
}

/// Gives every device its own delay through the simulator's side door.
async fn spread_delays(api: &str, args: &Args) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    for i in 0..args.devices {
        let id = format!("ac-{i:05}");
        let delay_ms = device_delay_ms(args, &id);
        client
            .post(format!("{api}/_sim/devices/{id}/delay"))
            .json(&json!({ "delay_ms": delay_ms }))
            .send()
            .await?
            .error_for_status()
            .with_context(|| format!("setting {id}'s delay"))?;
    }
    Ok(())
}

/// CPU time `pid` has used so far, user and system, in clock ticks (100
/// a second on Linux).
fn cpu_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the command's name, which may hold spaces: the
            // state is the first, utime the 12th and stime the 13th.
            let rest = s.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

/// The simulator's request counts, by device.
async fn sim_stats(client: &reqwest::Client, api: &str) -> anyhow::Result<Value> {
    Ok(client
        .get(format!("{api}/_sim/stats"))
        .send()
        .await?
        .json()
        .await?)
}

/// One of the simulator's counts (`sensor`, `control`), over every device.
fn total(stats: &Value, count: &str) -> u64 {
    stats["devices"]
        .as_object()
        .map(|d| d.values().map(|v| v[count].as_u64().unwrap_or(0)).sum())
        .unwrap_or(0)
}

/// Sensor reads the simulator has answered so far, over every device.
async fn sensor_reads(client: &reqwest::Client, api: &str) -> anyhow::Result<u64> {
    Ok(total(&sim_stats(client, api).await?, "sensor"))
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn tasks_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    })
}

async fn rpc(
    client: &reqwest::Client,
    url: &str,
    method: &str,
    name: Option<&str>,
    params: Value,
) -> anyhow::Result<Value> {
    let mut request = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let text = request
        .body(json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string())
        .send()
        .await?
        .text()
        .await?;
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

/// One `tasks/get` of `id`, checked: how long its answer took.
async fn timed_tasks_get(
    client: &reqwest::Client,
    url: &str,
    id: &str,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let reply = rpc(
        client,
        url,
        "tasks/get",
        Some(id),
        json!({"taskId": id, "_meta": tasks_meta()}),
    )
    .await?;
    let took = started.elapsed();
    ensure!(
        reply["result"]["taskId"] == json!(id),
        "tasks/get failed: {reply}"
    );
    Ok(took)
}

/// A client for settle's MCP endpoint. It drops a kept-alive connection
/// after 5 s idle, before settle closes it (at its header-read timeout,
/// 10 s by default): a request sent on a connection just as the server
/// closes it fails with "connection closed before message completed".
/// With two replicas, a worker's connection to one can sit idle while a
/// slow request is out on the other.
fn settle_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .expect("a reqwest client with default TLS settings")
}

/// Median and p99 of `tasks/get` on random stored tasks, one at a time.
async fn tasks_get_cost(
    url: &str,
    ids: &[String],
    n: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let client = settle_client();
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        latencies.push(timed_tasks_get(&client, url, &ids[(i * 7919) % ids.len()]).await?);
    }
    latencies.sort();
    Ok((latencies[n / 2], latencies[n * 99 / 100]))
}

/// `tasks/get` throughput on stored tasks with `concurrency` clients for
/// `span`.
async fn tasks_get_rate(
    url: &str,
    ids: Arc<Vec<String>>,
    concurrency: usize,
    span: Duration,
) -> anyhow::Result<Load> {
    let (url, next) = (url.to_string(), Arc::new(AtomicUsize::new(0)));
    load(concurrency, span, move |client, _| {
        let id = ids[next.fetch_add(7919, Ordering::Relaxed) % ids.len()].clone();
        let url = url.clone();
        Box::pin(async move { timed_tasks_get(&client, &url, &id).await.map(drop) })
    })
    .await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(url) = &args.check_redis {
        println!("## Results (the tasks stored in {url})");
        let verdict = check_tasks(&args, &read_redis(url).await?)?;
        println!(
            "  store size: {:.0} MiB",
            redis_memory(url).await? as f64 / (1 << 20) as f64
        );
        return verdict.into_result();
    }
    let root = root();
    if let Some(plugin) = &args.plugin {
        ensure!(
            plugin.exists(),
            "--plugin {}: no such file",
            plugin.display()
        );
    }
    let plugin = args
        .plugin
        .clone()
        .unwrap_or_else(|| root.join("target/wasm32-wasip2/release/settle_devices.wasm"));
    let settle = root.join("target/release/settle");
    let sim_binary = root.join("target/release/device-sim");
    for path in [&plugin, &settle, &sim_binary] {
        ensure!(
            path.exists(),
            "{} is missing: run `make build` first",
            path.display()
        );
    }
    // The run's store and logs: kept where `--keep` says, else removed when
    // the run ends.
    let (dir, _temporary) = match &args.keep {
        Some(keep) => {
            std::fs::create_dir_all(keep)?;
            ensure!(
                std::fs::read_dir(keep)?.next().is_none(),
                "{} is not empty: --keep needs a new or empty directory",
                keep.display()
            );
            (keep.clone(), None)
        }
        None => {
            let temporary = tempfile::tempdir()?;
            (temporary.path().to_path_buf(), Some(temporary))
        }
    };
    println!(
        "settle scale benchmark: {} tasks over {} devices, store {}, delay {} s (+ up to {} s by device), poll {} s",
        args.tasks,
        args.devices,
        args.store,
        args.delay_ms / 1000,
        args.delay_spread_ms / 1000,
        args.poll_ms / 1000
    );

    let mut sim_command = tokio::process::Command::new(&sim_binary);
    sim_command.args([
        "--addr",
        "127.0.0.1:0",
        "--devices",
        &args.devices.to_string(),
    ]);
    sim_command.args(["--delay-ms", &args.delay_ms.to_string()]);
    let sim = spawn(sim_command, "listening on ", &dir.join("sim.log")).await?;
    let api = sim.address.clone();
    if args.delay_spread_ms > 0 {
        spread_delays(&api, &args).await?;
    }
    // The longest any device takes; the plugin's windows are sized to it.
    let longest_delay_ms = args.longest_delay_ms();

    let (store, replicas, _redis) = match args.store.as_str() {
        "redb" => (dir.join("bench.redb").display().to_string(), 1, None),
        "redis" => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let mut redis = tokio::process::Command::new("redis-server");
            redis.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ]);
            redis.args(["--appendonly", "yes", "--appendfsync", "everysec"]);
            redis.arg("--dir").arg(&dir);
            let child = spawn(redis, "Ready to accept connections", &dir.join("redis.log"))
                .await
                .context("redis-server (install it: make redis)")?;
            (format!("redis://127.0.0.1:{port}/0"), 2, Some(child))
        }
        other => bail!("--store must be redb or redis, not {other}"),
    };
    // A task must outlive the run so it can be checked: creating 1,000,000
    // can take longer than the devices' delay (a run with a 300 s delay
    // created for 851 s, and its first tasks expired before the check).
    let ttl_ms = longest_delay_ms * 3 + CREATION_ALLOWANCE.as_millis() as u64;
    let settings = format!(
        "poll_interval_ms={},settle_window_ms={},ttl_ms={ttl_ms},probe_max_age_ms={}",
        args.poll_ms,
        longest_delay_ms * 2,
        longest_delay_ms
    );
    ensure!(
        !args.crash || args.store == "redb",
        "--crash is for the embedded store (--store redb)"
    );
    let runner_command = || {
        let mut command = tokio::process::Command::new(&settle);
        command.args(["serve", "--http", "127.0.0.1:0", "--inline-wait-ms", "0"]);
        // The per-tenant request limit is not what this measures: the
        // tasks/get rows at concurrency 8 pass 5,000 a second.
        command.args(["--max-requests-per-second", "0"]);
        command.arg("--plugin").arg(&plugin);
        command.args(["--store", &store, "--device-api", &api]);
        command.args(["--plugin-config", &settings]);
        command.env("RUST_LOG", "warn,settle=info");
        command
    };
    let mut runners = Vec::new();
    for n in 0..replicas {
        let log = dir.join(format!("settle-{n}.log"));
        runners.push(spawn(runner_command(), "serving MCP at ", &log).await?);
    }
    let mut urls: Vec<String> = runners.iter().map(|r| r.address.clone()).collect();
    let mut pids: Vec<u32> = runners.iter().filter_map(|r| r.child.id()).collect();

    // Sample the runners' RSS throughout, and once a minute print their CPU
    // and the simulator's sensor reads, so a runner falling behind shows.
    let peak = Arc::new(std::sync::Mutex::new(vec![0u64; pids.len()]));
    // The runners' pids, which `--crash` changes.
    let watched = Arc::new(std::sync::Mutex::new(pids.clone()));
    let sampler = {
        let (peak, watched, api) = (peak.clone(), watched.clone(), api.clone());
        let started = Instant::now();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let pids = || watched.lock().unwrap().clone();
            let mut pids_then = pids();
            let mut last = (
                Instant::now(),
                pids_then.iter().map(|p| cpu_ticks(*p)).collect::<Vec<_>>(),
            );
            let mut last_reads = sensor_reads(&client, &api).await.unwrap_or(0);
            for sample in 1u64.. {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let pids = pids();
                {
                    let mut peak = peak.lock().unwrap();
                    for (i, pid) in pids.iter().enumerate() {
                        peak[i] = peak[i].max(rss_kib(*pid, "VmRSS:"));
                    }
                }
                if sample % 120 != 0 {
                    continue;
                }
                let ticks: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
                if pids != pids_then {
                    // A runner started again: its CPU counts from zero.
                    last.1 = vec![0; pids.len()];
                    pids_then = pids.clone();
                }
                let seconds = last.0.elapsed().as_secs_f64();
                let cpu: Vec<String> = ticks
                    .iter()
                    .zip(&last.1)
                    .map(|(now, before)| format!("{:.0} %", (now - before) as f64 / seconds))
                    .collect();
                let reads = sensor_reads(&client, &api).await.unwrap_or(last_reads);
                println!(
                    "  [{:.0} s] runner CPU {} of one core; RSS {:?} MiB; sensor reads {:.0}/s",
                    started.elapsed().as_secs_f64(),
                    cpu.join(", "),
                    pids.iter()
                        .map(|p| rss_kib(*p, "VmRSS:") / 1024)
                        .collect::<Vec<_>>(),
                    (reads - last_reads) as f64 / seconds
                );
                last = (Instant::now(), ticks);
                last_reads = reads;
            }
        })
    };

    // On Redis, hear the replicas' change notices as a third replica would,
    // and time each task's end from its stored end to its notice here.
    let relay = match args.store.as_str() {
        "redis" => Some(RelayLag::follow(&store).await?),
        _ => None,
    };

    // Create the first 10,000 tasks, measure tasks/get while nothing else
    // is being created, then create the rest.
    let mut ids = vec![String::new(); args.tasks];
    let created_at = Instant::now();
    let first = 10_000.min(args.tasks);
    // When the last device had its first command, in ms after `created_at`.
    let last_first_command = Arc::new(AtomicU64::new(0));
    create(
        &args,
        &urls,
        &mut ids,
        0..first,
        created_at,
        &last_first_command,
    )
    .await?;
    let small_store_cost = tasks_get_cost(&urls[0], &ids[..first], 1_000).await?;
    create(
        &args,
        &urls,
        &mut ids,
        first..args.tasks,
        created_at,
        &last_first_command,
    )
    .await?;
    let creation = created_at.elapsed();
    println!(
        "  created {} tasks in {:.0} s ({:.0} tasks/s, {} concurrent clients)",
        ids.len(),
        creation.as_secs_f64(),
        ids.len() as f64 / creation.as_secs_f64(),
        args.concurrency
    );
    // The first command is applied `delay_ms` after it was accepted; if
    // creating took longer, not every task was in flight at the same time.
    let all_in_flight = creation < Duration::from_millis(args.delay_ms);
    println!(
        "  every task in flight at once: {}",
        if all_in_flight {
            "yes"
        } else {
            "NO (creation outlasted the delay)"
        }
    );
    let rss_in_flight: Vec<u64> = pids.iter().map(|p| rss_kib(*p, "VmRSS:")).collect();
    let crash = if args.crash {
        let log = dir.join("settle-0-after-the-crash.log");
        let (runner, took) = crash_and_restart(&mut runners[0], runner_command(), &log).await?;
        urls[0] = runner.address.clone();
        pids[0] = runner.child.id().unwrap_or(0);
        *watched.lock().unwrap() = pids.clone();
        runners[0] = runner;
        println!(
            "  SIGKILL, then started again on the same store ({:.0} MiB): serving after {:.2} s, ready after {:.2} s",
            std::fs::metadata(&store)?.len() as f64 / (1 << 20) as f64,
            took.0.as_secs_f64(),
            took.1.as_secs_f64()
        );
        Some(took)
    } else {
        None
    };
    let large_store_cost = tasks_get_cost(&urls[0], &ids, 1_000).await?;
    println!(
        "  tasks/get with {} tasks stored: p50 {:.0} µs, p99 {:.0} µs; RSS now {:?} KiB",
        ids.len(),
        large_store_cost.0.as_secs_f64() * 1e6,
        large_store_cost.1.as_secs_f64() * 1e6,
        rss_in_flight
    );

    // Every task asks its device for the same value, so a device acts once,
    // its delay after its first command, and the tasks created before
    // that end with it. A task created after it finds the value already
    // shown and ends at its device's next read. So everything has ended two
    // polls after the later of the two: wait that long after the last
    // device's first command (with one task per device, that is the end of
    // creation), then stop the runners and read the store.
    let settled_at = Duration::from_millis(
        last_first_command.load(Ordering::Relaxed) + longest_delay_ms + 2 * args.poll_ms + 5_000,
    );
    let wait = settled_at.saturating_sub(created_at.elapsed());
    println!(
        "  waiting {:.0} s for the devices to act and the tasks to settle",
        wait.as_secs_f64()
    );
    tokio::time::sleep(wait).await;
    // Throughput once the wait is over: by then every task should have
    // ended (the results say whether it did) and the scheduler be idle, as
    // in `make bench`'s tasks/get rows.
    let ids = Arc::new(ids);
    let mut rates = Vec::new();
    for concurrency in [1, 8] {
        let rate =
            tasks_get_rate(&urls[0], ids.clone(), concurrency, Duration::from_secs(5)).await?;
        rates.push((concurrency, rate));
    }
    let stats = sim_stats(&reqwest::Client::new(), &api).await?;
    sampler.abort();
    let relay = relay.map(RelayLag::stop);
    let peak = peak.lock().unwrap().clone();
    let hwm: Vec<u64> = pids.iter().map(|p| rss_kib(*p, "VmHWM:")).collect();
    let stopping = Instant::now();
    for mut runner in runners {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &runner.child.id().unwrap_or(0).to_string()])
            .status();
        // The store can only be read once the runner has let go of it.
        if tokio::time::timeout(Duration::from_secs(600), runner.child.wait())
            .await
            .is_err()
        {
            bail!("a runner did not stop within 600 s of SIGTERM");
        }
    }
    let shutdown = stopping.elapsed();

    let (reads, controls) = (total(&stats, "sensor"), total(&stats, "control"));

    // Every task, straight from the store.
    let records: Vec<Vec<u8>> = match args.store.as_str() {
        "redb" => read_redb(Path::new(&store))?,
        _ => read_redis(&store).await?,
    };
    let store_size = match args.store.as_str() {
        "redb" => std::fs::metadata(&store)?.len(),
        _ => redis_memory(&store).await?,
    };
    println!("## Results");
    let verdict = check_tasks(&args, &records)?;
    println!(
        "  sensor reads: {reads} over {} devices ({:.1} per device; {:.3} per task); control requests: {controls}",
        args.devices,
        reads as f64 / args.devices as f64,
        reads as f64 / args.tasks as f64
    );
    for i in 0..pids.len() {
        println!(
            "  runner {i} RSS: {:.0} MiB at the end of creation, peak sampled {:.0} MiB, high-water {:.0} MiB; {:.2} KiB per task",
            rss_in_flight[i] as f64 / 1024.0,
            peak[i] as f64 / 1024.0,
            hwm[i] as f64 / 1024.0,
            hwm[i] as f64 / (args.tasks as f64 / pids.len() as f64)
        );
    }
    if let Some(heard) = relay {
        report_relay_lags(relay_lags(&heard, &records), args.tasks);
    }
    println!(
        "  SIGTERM to every runner stopped: {:.1} s",
        shutdown.as_secs_f64()
    );
    if let Some((serving, ready)) = crash {
        println!(
            "  after SIGKILL once creation ended: serving again after {:.2} s, ready after {:.2} s",
            serving.as_secs_f64(),
            ready.as_secs_f64()
        );
    }
    println!(
        "  store size: {:.0} MiB",
        store_size as f64 / (1 << 20) as f64
    );
    println!(
        "  tasks/get with ~10,000 tasks stored: p50 {:.0} µs, p99 {:.0} µs",
        small_store_cost.0.as_secs_f64() * 1e6,
        small_store_cost.1.as_secs_f64() * 1e6
    );
    println!(
        "  tasks/get with {} tasks stored:   p50 {:.0} µs, p99 {:.0} µs",
        ids.len(),
        large_store_cost.0.as_secs_f64() * 1e6,
        large_store_cost.1.as_secs_f64() * 1e6
    );
    for (concurrency, rate) in rates {
        println!(
            "  tasks/get with {} tasks stored, after the wait, concurrency {concurrency}: {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs ({} requests)",
            ids.len(),
            rate.rps,
            rate.p50.as_secs_f64() * 1e6,
            rate.p99.as_secs_f64() * 1e6,
            rate.n
        );
    }
    drop(sim);
    verdict.into_result()
}

/// How many tasks are missing from the store, did not complete, or
/// completed past their limit: a run with any fails (everything is printed
/// first).
struct Verdict {
    /// Created, and found in the store.
    created: usize,
    tasks: usize,
    not_completed: usize,
    late: usize,
}

impl Verdict {
    fn into_result(self) -> anyhow::Result<()> {
        let Verdict {
            created,
            tasks,
            not_completed,
            late,
        } = self;
        ensure!(
            tasks == created,
            "{created} tasks were created and {tasks} are in the store"
        );
        ensure!(
            not_completed == 0 && late == 0,
            "of {tasks} tasks, {not_completed} did not complete and {late} completed past their device's delay + 2 polls"
        );
        Ok(())
    }
}

/// Checks every stored task against its device's delay plus two polls and
/// prints what it found: how many completed, how many were late, how many
/// polls after its device acted each ended, and when the completions ran.
fn check_tasks(args: &Args, records: &[Vec<u8>]) -> anyhow::Result<Verdict> {
    let limit_ms = |device: &str| device_delay_ms(args, device) + 2 * args.poll_ms;
    let outcomes = records
        .iter()
        .map(|bytes| serde_json::from_slice::<Outcome>(bytes))
        .collect::<Result<Vec<_>, _>>()?;
    // A device acts its delay after its first command (every task asks
    // for the same value, so it acts once).
    let mut first_command = std::collections::HashMap::<&str, u64>::new();
    for task in &outcomes {
        let first = first_command.entry(&task.device_id).or_insert(u64::MAX);
        *first = (*first).min(task.created_at_ms);
    }
    let acted_ms = |device: &str| first_command[device] + device_delay_ms(args, device);
    let (mut completed, mut other) = (0usize, 0usize);
    let mut late: Vec<&Outcome> = Vec::new();
    let mut spans = Vec::new();
    // When each completed task ended, and when the first task was accepted.
    let mut ends = Vec::new();
    let first_accepted = outcomes.iter().map(|t| t.created_at_ms).min().unwrap_or(0);
    // Of the tasks created before their device acted: how many polls after
    // it they ended (the limit allows two).
    let mut polls_after_acting = [0usize; 3];
    for task in &outcomes {
        if task.status != "completed" {
            other += 1;
            if other <= 3 {
                println!(
                    "  not completed: task {} on {}: {} ({})",
                    task.id, task.device_id, task.status, task.status_message
                );
            }
            continue;
        }
        completed += 1;
        let ended = task.ended_at_ms.unwrap_or(0);
        ends.push(ended);
        let span = ended.saturating_sub(task.created_at_ms);
        if span > limit_ms(&task.device_id) {
            late.push(task);
        }
        let acted = acted_ms(&task.device_id);
        if task.created_at_ms < acted {
            let polls = ended.saturating_sub(acted).div_ceil(args.poll_ms.max(1));
            polls_after_acting[(polls.max(1) as usize - 1).min(2)] += 1;
        }
        spans.push(span);
    }
    let late_count = late.len();
    spans.sort();
    println!(
        "  tasks stored: {}; completed {completed}; not completed {other}; over their device's delay + 2 polls ({}): {late_count}",
        records.len(),
        if args.delay_spread_ms == 0 {
            format!("{} s", (args.delay_ms + 2 * args.poll_ms) / 1000)
        } else {
            format!(
                "{}-{} s",
                (args.delay_ms + 2 * args.poll_ms) / 1000,
                (args.longest_delay_ms() + 2 * args.poll_ms) / 1000
            )
        }
    );
    if !spans.is_empty() {
        println!(
            "  acceptance to completed: median {:.1} s, max {:.1} s",
            spans[spans.len() / 2] as f64 / 1e3,
            spans[spans.len() - 1] as f64 / 1e3
        );
    }
    let [one, two, more] = polls_after_acting;
    println!(
        "  of the completed tasks created before their device acted, ended within one poll of it: {one}, within two: {two}, later: {more}"
    );
    let seconds = |ms: u64| ms.saturating_sub(first_accepted) as f64 / 1e3;
    late.sort_by_key(|t| {
        std::cmp::Reverse(t.ended_at_ms.unwrap_or(0) - t.created_at_ms - limit_ms(&t.device_id))
    });
    for task in late.iter().take(5) {
        println!(
            "  late: task {} on {}: accepted {:.1} s, device acted {:.1} s, ended {:.1} s ({:.1} s over its limit; {} reads)",
            task.id,
            task.device_id,
            seconds(task.created_at_ms),
            seconds(acted_ms(&task.device_id)),
            seconds(task.ended_at_ms.unwrap_or(0)),
            (task.ended_at_ms.unwrap_or(0) - task.created_at_ms - limit_ms(&task.device_id)) as f64
                / 1e3,
            task.reads
        );
    }
    ends.sort();
    if let (Some(first), Some(last)) = (ends.first(), ends.last()) {
        // With creation shorter than the delay, every task ends after the
        // devices act, so this is the rate at which one runner ends a burst.
        println!(
            "  completions: the first {:.1} s and the last {:.1} s after the first acceptance; {:.0} per second between",
            seconds(*first),
            seconds(*last),
            ends.len() as f64 / ((last - first).max(1) as f64 / 1e3)
        );
    }
    Ok(Verdict {
        created: args.tasks,
        tasks: outcomes.len(),
        not_completed: other,
        late: late_count,
    })
}

/// What the check needs of one stored task record.
#[derive(serde::Deserialize)]
struct Outcome {
    id: String,
    device_id: String,
    status: String,
    status_message: String,
    created_at_ms: u64,
    ended_at_ms: Option<u64>,
    reads: u32,
}

/// Creates tasks `range` with `args.concurrency` clients. Task i goes to
/// device i % devices, all with the same setpoint so none supersedes
/// another; replicas take turns.
async fn create(
    args: &Args,
    urls: &[String],
    ids: &mut [String],
    range: std::ops::Range<usize>,
    started: Instant,
    last_first_command: &Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let end = range.end;
    let next = Arc::new(AtomicUsize::new(range.start));
    let created = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..args.concurrency {
        let (next, created, urls) = (next.clone(), created.clone(), urls.to_vec());
        let last_first_command = last_first_command.clone();
        let devices = args.devices;
        workers.spawn(async move {
            let client = settle_client();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    return anyhow::Ok(());
                }
                let url = &urls[(i + w) % urls.len()];
                let params = json!({
                    "name": "set_temperature",
                    "arguments": {"device_id": format!("ac-{:05}", i % devices), "temperature": 24},
                    "_meta": tasks_meta(),
                });
                let reply =
                    rpc(&client, url, "tools/call", Some("set_temperature"), params).await?;
                let id = reply["result"]["taskId"]
                    .as_str()
                    .with_context(|| format!("task {i} was not created: {reply}"))?;
                created.lock().unwrap().push((i, id.to_string()));
                if i < devices {
                    // Device `i`'s first command: it acts its delay after this.
                    let at = started.elapsed().as_millis() as u64;
                    last_first_command.fetch_max(at, Ordering::Relaxed);
                }
            }
        });
    }
    let mut progress = tokio::time::interval(Duration::from_secs(30));
    progress.tick().await;
    loop {
        tokio::select! {
            joined = workers.join_next() => match joined {
                Some(result) => result??,
                None => break,
            },
            _ = progress.tick() => {
                let done = next.load(Ordering::Relaxed).min(end);
                let elapsed = started.elapsed().as_secs_f64();
                println!("  ... {done} tasks created in {elapsed:.0} s ({:.0}/s)", done as f64 / elapsed);
            }
        }
    }
    for (i, id) in created.lock().unwrap().drain(..) {
        ids[i] = id;
    }
    Ok(())
}

fn read_redb(path: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    use redb::{ReadableDatabase, TableDefinition};
    const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
    let db = redb::Database::open(path)?;
    let txn = db.begin_read()?;
    let table = txn.open_table(KV)?;
    let mut out = Vec::new();
    for entry in table.range("default/task/".."default/task0")? {
        let (_, value) = entry?;
        out.push(value.value().to_vec());
    }
    Ok(out)
}

/// Every task record in the Redis at `url`, 10,000 keys a request. The
/// connection waits as long as Redis takes: the client's default response
/// timeout (under a second) is shorter than listing a million keys.
async fn read_redis(url: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    const PAGE: usize = 10_000;
    let client = redis::Client::open(url)?;
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let mut out = Vec::new();
    let mut from = "[default/task/".to_string();
    loop {
        let keys: Vec<String> = redis::cmd("ZRANGEBYLEX")
            .arg("settle:keys:default")
            .arg(&from)
            .arg("(default/task0")
            .arg("LIMIT")
            .arg(0)
            .arg(PAGE)
            .query_async(&mut conn)
            .await?;
        let Some(last) = keys.last() else {
            return Ok(out);
        };
        from = format!("({last}");
        let full: Vec<String> = keys.iter().map(|k| format!("settle:kv:{k}")).collect();
        let values: Vec<Option<Vec<u8>>> =
            redis::cmd("MGET").arg(&full).query_async(&mut conn).await?;
        out.extend(values.into_iter().flatten());
        if keys.len() < PAGE {
            return Ok(out);
        }
    }
}

async fn redis_memory(url: &str) -> anyhow::Result<u64> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

/// A message heard on the relay's channel: (ms since the epoch, its bytes).
type Heard = (u64, Vec<u8>);

/// The replicas' change notices as they relay them to each other (Redis
/// pub/sub), heard by a subscriber of this process, as another replica
/// would hear them. It only keeps what it hears, with the time, and reads
/// it after the run, so that it never falls behind (Redis drops a
/// subscriber that lets 32 MB wait for it).
struct RelayLag {
    heard: Arc<std::sync::Mutex<Vec<Heard>>>,
    listening: tokio::task::JoinHandle<()>,
}

impl RelayLag {
    async fn follow(url: &str) -> anyhow::Result<RelayLag> {
        use futures::StreamExt;
        let client = redis::Client::open(url)?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe("settle:events").await?;
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = heard.clone();
        let listening = tokio::spawn(async move {
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                let at = unix_ms();
                keep.lock()
                    .unwrap()
                    .push((at, message.get_payload_bytes().to_vec()));
            }
        });
        Ok(RelayLag { heard, listening })
    }

    /// What was heard: (ms since the epoch, the message).
    fn stop(self) -> Vec<Heard> {
        self.listening.abort();
        std::mem::take(&mut *self.heard.lock().unwrap())
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How late each task's end was heard from the relay: ms from the end in
/// its stored record to the last notice about it (a notice of either
/// form: a task's id, or its views from an earlier version). Tasks whose
/// last notice came before their end (the end was not relayed) are left
/// out, so the count says how many ends were heard.
fn relay_lags(heard: &[Heard], records: &[Vec<u8>]) -> Vec<u64> {
    let mut last_heard = std::collections::HashMap::<String, u64>::new();
    for (at, payload) in heard {
        let Ok(envelope) = serde_json::from_slice::<Value>(payload) else {
            continue;
        };
        let event = &envelope["notice"]["event"];
        if let Some(id) = event["task_id"].as_str() {
            let last = last_heard.entry(id.to_string()).or_default();
            *last = (*last).max(*at);
        }
    }
    records
        .iter()
        .filter_map(|bytes| serde_json::from_slice::<Outcome>(bytes).ok())
        .filter_map(|task| {
            let ended = task.ended_at_ms?;
            let heard = *last_heard.get(&task.id)?;
            (heard >= ended).then(|| heard - ended)
        })
        .collect()
}

/// Prints how late the relayed ends were heard.
fn report_relay_lags(mut lags: Vec<u64>, tasks: usize) {
    lags.sort_unstable();
    let at = |p: f64| {
        lags.get(((lags.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "  task ends relayed, heard by a third process: {} of {tasks} tasks; from the stored end to the notice p50 {} ms, p99 {} ms, max {} ms",
        lags.len(),
        at(0.5),
        at(0.99),
        lags.last().copied().unwrap_or(0)
    );
}
