//! The faults: simulator faults switched on and off at random, and, in one
//! sequence so that at most one thing is down at a time, replicas killed
//! with `kill -9` and Redis killed with `kill -9`, each started again on
//! the same port and data after a random pause.

use super::cluster::{Redis, Replica};
use device_sim::{Fault, Sim};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How hard and how often.
#[derive(Clone, Debug)]
pub struct ChaosSpec {
    /// Replica kills to make at least.
    pub kills: u64,
    /// Redis restarts to make at least.
    pub redis_restarts: u64,
    /// Mean pause between two kills or restarts.
    pub every: Duration,
    /// Longest time a killed process stays down.
    pub max_down: Duration,
}

/// What the chaos did.
#[derive(Default, Debug)]
pub struct Counts {
    pub kills: AtomicU64,
    pub redis_restarts: AtomicU64,
    pub faults: AtomicU64,
    /// The longest time any process was down, in ms.
    pub longest_down_ms: AtomicU64,
}

/// A random device fault, with parameters that each make the device lie
/// in its own way (see the simulator's README).
fn random_fault() -> Fault {
    match rand::random_range(0..5) {
        0 => Fault::Offline,
        1 => Fault::Ignore,
        2 => Fault::Clamp {
            min: 20.0,
            max: 26.0,
            round: rand::random_bool(0.5),
        },
        3 => Fault::Flaky {
            rate: 0.5,
            hang_ms: rand::random_range(0..1_500),
        },
        _ => Fault::Latency {
            ms: rand::random_range(100..2_000),
        },
    }
}

/// Switches faults on random devices until `stop`, each for 0.5 to 4 s,
/// one every 0.5 to 4 s per 10 devices;
/// clears every fault before returning.
pub async fn switch_faults(
    sim: Sim,
    devices: Vec<String>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
) {
    let mut clears = tokio::task::JoinSet::new();
    while !stop.load(Ordering::Relaxed) {
        // Paced by the device count, so that about the same share of devices
        // (a tenth) is faulty at any time whatever the size of the run.
        let pause = rand::random_range(50..400) * 100 / devices.len().max(1) as u64;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let device = devices[rand::random_range(0..devices.len())].clone();
        if sim.set_fault(&device, random_fault()).is_ok() {
            counts.faults.fetch_add(1, Ordering::Relaxed);
        }
        let sim = sim.clone();
        clears.spawn(async move {
            tokio::time::sleep(Duration::from_millis(rand::random_range(500..4_000))).await;
            let _ = sim.clear_faults(&device);
        });
    }
    clears.abort_all();
    for device in &devices {
        let _ = sim.clear_faults(device);
    }
}

/// Kills replicas and Redis at random moments until `stop` is set and at
/// least the asked numbers of each were made; gives the processes back.
pub async fn kill_and_restart(
    mut replicas: Vec<Replica>,
    mut redis: Redis,
    spec: ChaosSpec,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(Vec<Replica>, Redis)> {
    let every_ms = spec.every.as_millis() as u64;
    let max_down_ms = spec.max_down.as_millis().max(1) as u64;
    loop {
        let kills = counts.kills.load(Ordering::Relaxed);
        let restarts = counts.redis_restarts.load(Ordering::Relaxed);
        if stop.load(Ordering::Relaxed) && kills >= spec.kills && restarts >= spec.redis_restarts {
            return Ok((replicas, redis));
        }
        tokio::time::sleep(Duration::from_millis(rand::random_range(
            every_ms / 2..=every_ms * 3 / 2,
        )))
        .await;
        let down = Duration::from_millis(rand::random_range(100..=max_down_ms));
        // Redis restarts in the share that spreads them over the kills.
        let redis_share = (spec.redis_restarts as f64
            / (spec.kills + spec.redis_restarts).max(1) as f64)
            .clamp(0.0, 1.0);
        let restart_redis = restarts < spec.redis_restarts
            && (kills >= spec.kills || rand::random_bool(redis_share));
        let started = std::time::Instant::now();
        if restart_redis {
            redis.kill_and_restart(down).await?;
            counts.redis_restarts.fetch_add(1, Ordering::Relaxed);
        } else {
            let which = rand::random_range(0..replicas.len());
            replicas[which].kill_and_restart(down).await?;
            counts.kills.fetch_add(1, Ordering::Relaxed);
        }
        counts
            .longest_down_ms
            .fetch_max(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}
