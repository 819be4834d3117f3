//! A closed-loop load: a number of workers each send one request, wait for
//! its answer and send the next, for a while; then the rate and the
//! latency percentiles. Shared by `bench` and `bench_scale`.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one load measured.
pub struct Load {
    pub rps: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub n: usize,
    /// Every latency, sorted: what the percentile chart draws.
    pub sorted: Vec<Duration>,
}

/// The latency at fraction `p` (0.5 for the median) of `sorted`.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Sends requests from `concurrency` workers for `duration`; `send` is
/// given the worker's number.
pub async fn load(
    concurrency: usize,
    duration: Duration,
    send: impl Fn(reqwest::Client, usize) -> futures::future::BoxFuture<'static, anyhow::Result<()>>
    + Send
    + Sync
    + 'static,
) -> anyhow::Result<Load> {
    let send = Arc::new(send);
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let (send, client) = (send.clone(), client.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while started.elapsed() < duration {
                let t = Instant::now();
                send(client.clone(), worker).await?;
                latencies.push(t.elapsed());
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await??);
    }
    anyhow::ensure!(!all.is_empty(), "no request answered within {duration:?}");
    let elapsed = started.elapsed();
    all.sort();
    Ok(Load {
        rps: all.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&all, 0.5),
        p99: percentile(&all, 0.99),
        n: all.len(),
        sorted: all,
    })
}
