//! Drives task progress: claims due tasks from the store, groups them by
//! tenant and group (the device), and calls the plugin's `advance` once per
//! group, so every task waiting on a device shares one sensor read.
//!
//! Due times live in the store, so after a restart the scheduler simply
//! carries on. A claimed task is leased: if its advance never reschedules it
//! (a crash, a trap, a deadline), it comes due again when the lease ends.

use crate::runtime::Runtime;
use crate::store::Due;
use crate::tenant::Tenants;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The most tasks taken from the store per claim.
const CLAIM_BATCH: usize = 10_000;

/// The longest the scheduler sleeps before looking at the store again; this
/// bounds how late a wake scheduled by another process is noticed.
const MAX_IDLE: Duration = Duration::from_millis(50);

/// Back-off after the store failed.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// Advances running at once, across tenants. A device's tick writes each
/// task it judges with its own compare-and-swap, and waits for that commit;
/// the store's writer commits every write waiting together, so the more
/// ticks run at once, the more tasks one disk flush serves. When 1,000
/// devices acted together with 100 tasks waiting on each, 64 ended 3,100
/// tasks a second and 256 ended 5,500 (`bench_scale`, docs/performance.md).
/// It stays well under the runtime's instance slots, so calls still find
/// one.
const MAX_PARALLEL_ADVANCES: usize = 256;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The scheduler of one runner.
pub struct Scheduler {
    /// Runs the plugins' `advance`, and holds the store of due times.
    pub runtime: Arc<Runtime>,
    /// Whose plugin advances a due task, by namespace.
    pub tenants: Arc<Tenants>,
    /// How long a claimed task belongs to this scheduler before another
    /// claim may take it again; longer than any call's deadline.
    pub lease: Duration,
}

impl Scheduler {
    /// Runs until `stop` is cancelled; advances in progress then finish.
    ///
    /// Claiming does not wait for the advances of an earlier claim: a group
    /// whose device answers slowly (up to its request timeout) must not hold
    /// back the reads of every other device, which are often due within a
    /// few hundred milliseconds. A claimed task is leased, so no second claim
    /// takes it while its advance runs.
    pub async fn run(self, stop: CancellationToken) {
        let store = self.runtime.store().clone();
        let mut running: JoinSet<()> = JoinSet::new();
        while !stop.is_cancelled() {
            while running.try_join_next().is_some() {}
            if running.len() >= MAX_PARALLEL_ADVANCES {
                tokio::select! {
                    _ = running.join_next() => {}
                    _ = stop.cancelled() => {}
                }
                continue;
            }
            let now = now_ms();
            let next = match store.next_due_ms().await {
                Ok(next) => next,
                Err(e) => {
                    tracing::error!("scheduler: {e}; retrying in {STORE_RETRY:?}");
                    sleep_or_stop(STORE_RETRY, &stop).await;
                    continue;
                }
            };
            match next {
                Some(at) if at <= now => {}
                other => {
                    let wait = other
                        .map(|at| Duration::from_millis(at - now))
                        .unwrap_or(MAX_IDLE)
                        .min(MAX_IDLE);
                    sleep_or_stop(wait, &stop).await;
                    continue;
                }
            }
            let due = match store
                .claim_due(now, self.lease.as_millis() as u64, CLAIM_BATCH)
                .await
            {
                Ok(due) => due,
                Err(e) => {
                    tracing::error!("scheduler: {e}; retrying in {STORE_RETRY:?}");
                    sleep_or_stop(STORE_RETRY, &stop).await;
                    continue;
                }
            };
            self.start_advances(due, &mut running, &stop).await;
        }
        while running.join_next().await.is_some() {}
    }

    /// Starts one plugin call per (tenant, group) of the claimed tasks, at
    /// most [`MAX_PARALLEL_ADVANCES`] at once (waiting for a free slot when
    /// needed). Once `stop` is cancelled no further group starts: their
    /// tasks stay leased, and come due again (here after a restart, or on
    /// another replica) when the lease ends, so a shutdown under load is not
    /// held up by a whole claimed batch.
    async fn start_advances(
        &self,
        due: Vec<Due>,
        running: &mut JoinSet<()>,
        stop: &CancellationToken,
    ) {
        let mut groups: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for d in due {
            groups
                .entry((d.namespace, d.group))
                .or_default()
                .push(d.task_id);
        }
        for ((namespace, group), task_ids) in groups {
            if stop.is_cancelled() {
                break;
            }
            let Some(tenant) = self.tenants.by_namespace(&namespace) else {
                tracing::warn!(
                    namespace = %namespace,
                    "scheduler: due tasks of a tenant that is not configured; leaving them"
                );
                continue;
            };
            if running.len() >= MAX_PARALLEL_ADVANCES {
                running.join_next().await;
            }
            let runtime = self.runtime.clone();
            running.spawn(async move {
                // A fault is logged by the runtime; the lease retries it.
                let _ = runtime.advance(&tenant, &group, &task_ids).await;
            });
        }
    }
}

async fn sleep_or_stop(wait: Duration, stop: &CancellationToken) {
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = stop.cancelled() => {}
    }
}
