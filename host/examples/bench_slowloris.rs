//! A normal client's latency while slow connections attack: `tools/list`
//! over one kept-alive connection, idle, then while `--attackers` (1,000 by
//! default) slowloris connections each send a header line every 2 s (and
//! connect again when the server closes them at its header-read timeout).
//! Prints p50/p99 of both phases and their ratio, and what the server's
//! limits counted.
//!
//! `cargo run --release -p settle --example bench_slowloris [-- --attackers N --requests N]`

use clap::Parser;
use serde_json::json;
use settle::app::Runner;
use settle::cli::{Cli, Command};
use settle::config::RunnerConfig;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
struct Args {
    /// Slow connections attacking at once.
    #[arg(long, default_value_t = 1000)]
    attackers: usize,
    /// Requests the normal client sends in each phase.
    #[arg(long, default_value_t = 3000)]
    requests: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let plugin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm32-wasip2/release/settle_devices.wasm");
    let argv = [
        "settle",
        "serve",
        "--plugin",
        plugin.to_str().unwrap(),
        "--store",
        "memory",
        "--device-api",
        "http://127.0.0.1:9",
    ];
    let Command::Serve(serve) = Cli::try_parse_from(argv)?.command else {
        anyhow::bail!("not `settle serve`");
    };
    let runner = Runner::start(RunnerConfig::from_args(&serve)?).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}/mcp");
    tokio::spawn(runner.serve_http(listener, std::future::pending()));

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()?;
    // Warm up: the plugin instance, the connection.
    measure(&client, &url, 200).await?;
    let idle = measure(&client, &url, args.requests).await?;

    // The attack runs on its own threads, so that it competes with the
    // server for the machine as an outside attacker would, not for the
    // client's runtime.
    let connected = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicU64::new(0));
    let attack = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    for _ in 0..args.attackers {
        let (connected, closed) = (connected.clone(), closed.clone());
        attack.spawn(async move {
            loop {
                let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                connected.fetch_add(1, Ordering::Relaxed);
                let _ = tcp
                    .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    .await;
                let mut sink = [0u8; 512];
                loop {
                    tokio::select! {
                        read = tcp.read(&mut sink) => if !matches!(read, Ok(n) if n > 0) { break },
                        _ = tokio::time::sleep(Duration::from_secs(2)) => {
                            if tcp.write_all(b"X-Slow: 1\r\n").await.is_err() { break }
                        }
                    }
                }
                closed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while connected.load(Ordering::Relaxed) < args.attackers as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let attacked = measure(&client, &url, args.requests).await?;
    let metrics = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    println!(
        "## a normal client's tools/list while {} slowloris connections attack",
        args.attackers
    );
    println!("  {:<28} {:>10} {:>10} {:>8}", "", "p50 µs", "p99 µs", "n");
    for (name, q) in [("idle", &idle), ("under attack", &attacked)] {
        println!("  {name:<28} {:>10} {:>10} {:>8}", q.p50, q.p99, q.n);
    }
    println!(
        "  p99 under attack / idle: {:.2} (goal: within 2x)",
        attacked.p99 as f64 / idle.p99.max(1) as f64
    );
    println!(
        "  attack connections opened {}, closed by the server {} (header-read timeout)",
        connected.load(Ordering::Relaxed),
        closed.load(Ordering::Relaxed)
    );
    for line in metrics.lines().filter(|l| l.starts_with("settle_http_")) {
        println!("  {line}");
    }
    attack.shutdown_background();
    Ok(())
}

struct Quantiles {
    p50: u128,
    p99: u128,
    n: usize,
}

/// `requests` sequential `tools/list` calls; their latency quantiles.
async fn measure(
    client: &reqwest::Client,
    url: &str,
    requests: usize,
) -> anyhow::Result<Quantiles> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }}})
    .to_string();
    let mut took = Vec::with_capacity(requests);
    for _ in 0..requests {
        let start = Instant::now();
        let response = client
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/list")
            .body(body.clone())
            .send()
            .await?;
        anyhow::ensure!(response.status() == 200, "status {}", response.status());
        response.bytes().await?;
        took.push(start.elapsed().as_micros());
    }
    took.sort_unstable();
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    Ok(Quantiles {
        p50: at(0.5),
        p99: at(0.99),
        n: took.len(),
    })
}
