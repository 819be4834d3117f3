//! Run with `make soak` (or `cargo run --release -p settle --example soak
//! -- --help`).
//!
//! The fault soak: two `settle` replicas on one Redis and the device
//! simulator; tasks sent through real MCP clients (rmcp) to both replicas
//! while simulator faults are switched at random, replicas are killed with
//! `kill -9` and Redis is killed and restarted on its append-only file.
//! Then the invariant checker (check.rs) reads every acknowledged task back
//! and compares with the simulator's records. Prints the figures and exits
//! non-zero on any violation. `make test` runs a short budget of the same
//! code (host/tests/e2e/soak.rs).

mod chaos;
mod check;
mod cluster;
mod ledger;
mod load;
mod mcp;
mod run;

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
struct Args {
    /// Acknowledged tasks to create.
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// Simulated devices; tasks are spread evenly over them.
    #[arg(long, default_value_t = 100)]
    devices: usize,
    /// Replica kills (`kill -9`) to make at least.
    #[arg(long, default_value_t = 24)]
    kills: u64,
    /// Redis restarts (`kill -9`, then a start on the same data) to make at least.
    #[arg(long, default_value_t = 6)]
    redis_restarts: u64,
    /// Mean pause between two kills or restarts.
    #[arg(long, default_value_t = 4_000)]
    chaos_every_ms: u64,
    /// Longest time a killed process stays down before its restart.
    #[arg(long, default_value_t = 2_000)]
    max_down_ms: u64,
    /// The simulator's actuation delay.
    #[arg(long, default_value_t = 300)]
    delay_ms: u64,
    /// The simulator's extra random delay per command.
    #[arg(long, default_value_t = 300)]
    jitter_ms: u64,
    /// Task TTL.
    #[arg(long, default_value_t = 15_000)]
    ttl_ms: u64,
    /// The plugin's poll interval.
    #[arg(long, default_value_t = 250)]
    poll_ms: u64,
    /// The plugin's deadline for one device API request.
    #[arg(long, default_value_t = 1_000)]
    http_timeout_ms: u64,
    /// The scheduler's lease: how long a killed replica's tasks wait.
    #[arg(long, default_value_t = 3_000)]
    lease_ms: u64,
    /// How far past its TTL a task may end: a lease, an outage, a poll.
    #[arg(long, default_value_t = 8_000)]
    margin_ms: u64,
    /// Share of tasks followed to their end before a lane sends the next.
    #[arg(long, default_value_t = 0.8)]
    follow_share: f64,
    /// Where Redis's data and the processes' logs go.
    #[arg(long, default_value = "target/soak")]
    work_dir: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let work_dir = root.join(&args.work_dir);
    let _ = std::fs::remove_dir_all(&work_dir);
    let report = run::soak(run::Options {
        tasks: args.tasks,
        devices: args.devices,
        kills: args.kills,
        redis_restarts: args.redis_restarts,
        chaos_every: Duration::from_millis(args.chaos_every_ms),
        max_down: Duration::from_millis(args.max_down_ms),
        delay: Duration::from_millis(args.delay_ms),
        jitter: Duration::from_millis(args.jitter_ms),
        ttl_ms: args.ttl_ms,
        poll_interval_ms: args.poll_ms,
        http_timeout_ms: args.http_timeout_ms,
        lease_ms: args.lease_ms,
        margin_ms: args.margin_ms,
        follow_share: args.follow_share,
        settle: root.join("target/release/settle"),
        plugin: Some(root.join("target/wasm32-wasip2/release/settle_devices.wasm")),
        cache_dir: None,
        work_dir: work_dir.clone(),
    })
    .await?;
    print!("{}", report.describe());
    println!("  logs and Redis data: {}", work_dir.display());
    if !report.passed() {
        std::process::exit(1);
    }
    Ok(())
}
