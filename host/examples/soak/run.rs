//! One soak: the simulator, Redis and two replicas started, the load and
//! the chaos run together, then every acknowledged task is read back and
//! the checker judges the run.

use super::chaos::{self, ChaosSpec, Counts};
use super::check::{self, Evidence, Policy, Verdict};
use super::cluster::{Redis, Replica, ReplicaSpec};
use super::ledger::{Ledger, is_terminal};
use super::load::{Lane, LaneSpec};
use super::mcp::{Answer, Clients};
use device_sim::{DeviceSpec, SimConfig};
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The size and settings of one soak.
#[derive(Clone, Debug)]
pub struct Options {
    pub tasks: usize,
    pub devices: usize,
    pub kills: u64,
    pub redis_restarts: u64,
    /// Mean pause between two kills or restarts.
    pub chaos_every: Duration,
    /// Longest time a killed process stays down.
    pub max_down: Duration,
    /// The simulator's actuation delay and jitter.
    pub delay: Duration,
    pub jitter: Duration,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    pub http_timeout_ms: u64,
    pub lease_ms: u64,
    /// How far past its TTL a task may end (see check.rs).
    pub margin_ms: u64,
    /// Share of tasks a lane follows to their end before the next command.
    pub follow_share: f64,
    /// The `settle` binary, and the plugin to serve (`None`: built in).
    pub settle: PathBuf,
    pub plugin: Option<PathBuf>,
    pub cache_dir: Option<PathBuf>,
    /// Where Redis keeps its data and every process its log.
    pub work_dir: PathBuf,
}

/// Figures of a run, and the checker's verdict.
pub struct Report {
    pub options: Options,
    pub acked: usize,
    pub kills: u64,
    pub redis_restarts: u64,
    pub faults: u64,
    pub longest_down_ms: u64,
    pub duration: Duration,
    pub load_duration: Duration,
    pub max_sends: u64,
    pub troubles: BTreeMap<String, u64>,
    pub verdict: Verdict,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.verdict.violation_count() == 0
    }

    pub fn describe(&self) -> String {
        let o = &self.options;
        let v = &self.verdict;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "soak: {} tasks acknowledged over {} devices, 2 replicas on one Redis (appendfsync always)",
            self.acked, o.devices
        );
        let _ = writeln!(
            out,
            "  kills (kill -9 of a replica) {}, Redis restarts (kill -9) {}, simulator faults switched {}, longest outage {} ms",
            self.kills, self.redis_restarts, self.faults, self.longest_down_ms
        );
        let _ = writeln!(
            out,
            "  duration {:.1} s (load {:.1} s); ttl {} ms, margin {} ms, poll {} ms, lease {} ms, device delay {} ms + jitter {} ms",
            self.duration.as_secs_f64(),
            self.load_duration.as_secs_f64(),
            o.ttl_ms,
            o.margin_ms,
            o.poll_interval_ms,
            o.lease_ms,
            o.delay.as_millis(),
            o.jitter.as_millis()
        );
        let _ = writeln!(
            out,
            "  statuses {:?} ({} seen ended, then removed after their TTL as designed)",
            v.statuses, v.removed_after_ttl
        );
        let _ = writeln!(
            out,
            "  time to end per task: p50 {} ms, p99 {} ms, max {} ms",
            v.percentile(50),
            v.percentile(99),
            v.percentile(100)
        );
        let _ = writeln!(
            out,
            "  control requests {} (bound {}: {} per command attempt, plus one per crash per device)",
            v.control_requests, v.control_bound, self.max_sends
        );
        for (what, count) in &self.troubles {
            let _ = writeln!(out, "  calls: {what} x{count}");
        }
        out.push_str(&v.describe());
        let _ = writeln!(
            out,
            "  violations total {} -> {}",
            v.violation_count(),
            if self.passed() { "PASS" } else { "FAIL" }
        );
        out
    }
}

/// Reads `id` through the replicas until it has ended or `until` passes;
/// the last view, or why none could be read.
async fn read_back(
    clients: &Clients,
    ledger: &Ledger,
    id: &str,
    until: Instant,
) -> Result<Value, String> {
    let mut last: Result<Value, String>;
    let mut n = 0usize;
    loop {
        n += 1;
        match clients
            .call(n % clients.len(), "get_task", json!({"task_id": id}))
            .await
        {
            Answer::Ok(view) => {
                ledger.observe(&view);
                let ended = is_terminal(&view);
                last = Ok(view);
                if ended {
                    return last;
                }
            }
            Answer::ToolError(text) => last = Err(format!("get_task refused: {text}")),
            Answer::Unanswered(why) => last = Err(format!("get_task unanswered: {why}")),
        }
        if Instant::now() > until {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub async fn soak(options: Options) -> anyhow::Result<Report> {
    let started = Instant::now();
    std::fs::create_dir_all(&options.work_dir)?;
    let sim = device_sim::spawn(SimConfig {
        devices: DeviceSpec::numbered(options.devices),
        delay: options.delay,
        jitter: options.jitter,
        ..SimConfig::default()
    })
    .await?;
    let devices: Vec<String> = sim.sim().devices().map(|d| d.id.clone()).collect();
    let mut initial_targets = BTreeMap::new();
    for device in &devices {
        initial_targets.insert(
            device.clone(),
            sim.sim().inspect(device)?.state.target_temperature,
        );
    }

    let redis = Redis::start(&options.work_dir).await?;
    let mut args = Vec::new();
    if let Some(plugin) = &options.plugin {
        args.extend(["--plugin".to_string(), plugin.display().to_string()]);
    }
    args.extend([
        "--device-api".to_string(),
        sim.base_url(),
        "--store".to_string(),
        redis.url(),
        "--plugin-config".to_string(),
        format!(
            "poll_interval_ms={},ttl_ms={},http_timeout_ms={},settle_window_ms=3000,max_commands_per_minute=600",
            options.poll_interval_ms, options.ttl_ms, options.http_timeout_ms
        ),
        "--lease-ms".to_string(),
        options.lease_ms.to_string(),
        // Below the lease, as settle requires: a replica finishes advancing
        // a task before another may take it.
        "--call-timeout-ms".to_string(),
        (options.lease_ms * 2 / 3).to_string(),
        "--inline-wait-ms".to_string(),
        "0".to_string(),
    ]);
    let spec = ReplicaSpec {
        binary: options.settle.clone(),
        args,
        cache_dir: options.cache_dir.clone(),
    };
    let mut replicas = Vec::new();
    for n in 0..2 {
        let log = options.work_dir.join(format!("settle-{n}.log"));
        replicas.push(Replica::start(&spec, log).await?);
    }
    let clients = Arc::new(Clients::new(replicas.iter().map(Replica::url).collect()));
    let ledger = Arc::new(Ledger::default());
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));

    let faults = tokio::spawn(chaos::switch_faults(
        sim.sim().clone(),
        devices.clone(),
        counts.clone(),
        stop.clone(),
    ));
    let killer = tokio::spawn(chaos::kill_and_restart(
        replicas,
        redis,
        ChaosSpec {
            kills: options.kills,
            redis_restarts: options.redis_restarts,
            every: options.chaos_every,
            max_down: options.max_down,
        },
        counts.clone(),
        stop.clone(),
    ));

    let lane_spec = LaneSpec {
        tasks: 0,
        follow_share: options.follow_share,
        follow_for: Duration::from_millis(options.ttl_ms + options.margin_ms),
        poll: Duration::from_millis(300),
    };
    let mut lanes = tokio::task::JoinSet::new();
    for (n, device) in devices.iter().enumerate() {
        let tasks =
            options.tasks / options.devices + usize::from(n < options.tasks % options.devices);
        lanes.spawn(
            Lane {
                device: device.clone(),
                spec: LaneSpec {
                    tasks,
                    ..lane_spec.clone()
                },
                clients: clients.clone(),
                ledger: ledger.clone(),
            }
            .run(),
        );
    }
    while let Some(done) = lanes.join_next().await {
        done?;
    }
    let load_duration = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    faults.await?;
    let (mut replicas, redis) = killer.await??;

    // Every acknowledged task, read back once the load and the chaos are
    // over: each has its TTL and the margin to end.
    let read_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    let until = Instant::now() + Duration::from_millis(options.ttl_ms + options.margin_ms);
    let finals: HashMap<String, Result<Value, String>> =
        futures::stream::iter(ledger.acked_tasks())
            .map(|task| {
                let (clients, ledger) = (clients.clone(), ledger.clone());
                async move {
                    let view = read_back(&clients, &ledger, &task.id, until).await;
                    (task.id, view)
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
    let mut views = BTreeMap::new();
    for device in &devices {
        views.insert(device.clone(), sim.sim().inspect(device)?);
    }
    let kills = counts.kills.load(Ordering::Relaxed);
    let redis_restarts = counts.redis_restarts.load(Ordering::Relaxed);
    let policy = Policy {
        ttl_ms: options.ttl_ms,
        margin_ms: options.margin_ms,
        poll_interval_ms: options.poll_interval_ms,
        http_timeout_ms: options.http_timeout_ms,
    };
    let verdict = check::check(&Evidence {
        ledger: &ledger,
        finals: &finals,
        devices: &views,
        initial_targets: &initial_targets,
        read_at_ms,
        crashes: kills + redis_restarts,
        policy: policy.clone(),
    });
    for replica in &mut replicas {
        replica.stop().await;
    }
    drop(redis);
    Ok(Report {
        acked: ledger.acked_count(),
        kills,
        redis_restarts,
        faults: counts.faults.load(Ordering::Relaxed),
        longest_down_ms: counts.longest_down_ms.load(Ordering::Relaxed),
        duration: started.elapsed(),
        load_duration,
        max_sends: policy.max_sends(),
        troubles: ledger.troubles(),
        verdict,
        options,
    })
}
