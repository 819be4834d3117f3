//! Drives task progress: claims due tasks from the store, groups them by
//! tenant and group (the device), and calls the plugin's `advance` once per
//! group, so every task waiting on a device shares one sensor read.
//!
//! Due times live in the store, so after a restart the scheduler simply
//! carries on. A claimed task is leased: if this runner dies before its
//! advance reschedules it, it comes due again when the lease ends. An
//! advance that fails here (a trap, a deadline, a store that could not
//! write) is retried sooner: after a second, then twice as long for each
//! failure in a row, up to the lease.

use crate::runtime::Runtime;
use crate::store::Due;
use crate::tenant::Tenants;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
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

/// How soon a group whose advance failed is tried again, the first time
/// in a row; each further failure doubles it, up to the lease.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The most groups whose failures in a row are remembered. Past it the
/// count starts again (the next retry comes after [`FIRST_RETRY`]), so
/// groups that failed and then went away cannot grow it without end.
const MAX_FAILING_GROUPS: usize = 10_000;

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
        let failing = Arc::new(Failing::default());
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
            let leased_until = now + self.lease.as_millis() as u64;
            self.start_advances(due, leased_until, &failing, &mut running, &stop)
                .await;
        }
        while running.join_next().await.is_some() {}
    }

    /// Starts one plugin call per (tenant, group) of the claimed tasks, at
    /// most [`MAX_PARALLEL_ADVANCES`] at once (waiting for a free slot when
    /// needed). Once `stop` is cancelled no further group starts: their
    /// tasks stay leased, and come due again (here after a restart, or on
    /// another replica) when the lease ends, so a shutdown under load is not
    /// held up by a whole claimed batch. A group whose advance fails has
    /// the tasks it left at their lease (`leased_until`) brought forward.
    async fn start_advances(
        &self,
        due: Vec<Due>,
        leased_until: u64,
        failing: &Arc<Failing>,
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
            let failing = failing.clone();
            running.spawn(async move {
                let key = (namespace, group);
                // A fault is logged by the runtime.
                if runtime.advance(&tenant, &key.1, &task_ids).await.is_ok() {
                    failing.recovered(&key);
                    return;
                }
                let wait = failing.failed(&key);
                let at_ms = now_ms().saturating_add(wait.as_millis() as u64);
                if at_ms >= leased_until {
                    return;
                }
                match runtime
                    .store()
                    .retry_leased(&key.0, &task_ids, leased_until, at_ms)
                    .await
                {
                    Ok(moved) => tracing::info!(
                        namespace = %key.0,
                        group = %key.1,
                        "scheduler: the advance failed; {moved} of its {} tasks retried in {wait:?}",
                        task_ids.len()
                    ),
                    Err(e) => tracing::warn!(
                        namespace = %key.0,
                        group = %key.1,
                        "scheduler: the advance failed, and its retry could not be set ({e}); \
                         its tasks come due again when their lease ends"
                    ),
                }
            });
        }
    }
}

/// Failures in a row of each (namespace, group)'s advance, which set how
/// soon it is tried again. A group leaves when an advance of it works.
#[derive(Default)]
struct Failing(Mutex<HashMap<(String, String), u32>>);

impl Failing {
    /// Counts a failure; answers how long until the retry.
    fn failed(&self, key: &(String, String)) -> Duration {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if counts.len() >= MAX_FAILING_GROUPS && !counts.contains_key(key) {
            counts.clear();
        }
        let count = counts.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        retry_after(*count)
    }

    fn recovered(&self, key: &(String, String)) {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !counts.is_empty() {
            counts.remove(key);
        }
    }
}

/// The wait before the retry after `failures` failures in a row.
fn retry_after(failures: u32) -> Duration {
    FIRST_RETRY.saturating_mul(1 << failures.saturating_sub(1).min(20))
}

async fn sleep_or_stop(wait: Duration, stop: &CancellationToken) {
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = stop.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_failing_in_a_row_waits_twice_as_long_each_time_until_it_recovers() {
        let failing = Failing::default();
        let key = ("t".to_string(), "dev".to_string());
        let waits: Vec<u64> = (0..4).map(|_| failing.failed(&key).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8]);
        failing.recovered(&key);
        assert_eq!(failing.failed(&key), FIRST_RETRY);
        assert!(retry_after(u32::MAX) >= Duration::from_secs(1 << 20));
    }
}
