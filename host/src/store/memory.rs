//! The in-memory backend: the reference for what every backend must do.

use super::{
    Due, StoreError, StoreResult, Swap, Wake, changed_since_seen, split_task_ref, task_ref,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    kv: BTreeMap<String, Vec<u8>>,
    /// (due time, task ref), ordered by time.
    due: BTreeSet<(u64, String)>,
    /// task ref → (due time, group).
    by_task: HashMap<String, (u64, String)>,
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().kv.get(key).cloned()
    }

    pub fn set(&self, key: String, value: Vec<u8>) {
        self.lock().kv.insert(key, value);
    }

    pub fn delete(&self, key: &str) {
        self.lock().kv.remove(key);
    }

    pub fn set_many(&self, pairs: Vec<(String, Vec<u8>)>) {
        self.lock().kv.extend(pairs);
    }

    pub fn delete_many(&self, keys: &[String]) {
        let mut inner = self.lock();
        for key in keys {
            inner.kv.remove(key);
        }
    }

    pub fn keys_after(
        &self,
        prefix: &str,
        start: &str,
        exclusive: bool,
        limit: usize,
    ) -> Vec<String> {
        self.lock()
            .kv
            .range(start.to_string()..)
            .map(|(k, _)| k)
            .skip_while(|k| exclusive && k.as_str() == start)
            .take_while(|k| k.starts_with(prefix))
            .take(limit)
            .cloned()
            .collect()
    }

    pub fn compare_and_swap(&self, key: String, expected: Option<&[u8]>, new: Vec<u8>) -> bool {
        let mut inner = self.lock();
        if inner.kv.get(&key).map(Vec::as_slice) != expected {
            return false;
        }
        inner.kv.insert(key, new);
        true
    }

    pub fn compare_and_swap_many(&self, swaps: Vec<Swap>) -> Vec<u32> {
        let mut inner = self.lock();
        let Ok(changed) = changed_since_seen(&swaps, |key, seen| {
            Ok::<_, std::convert::Infallible>(inner.kv.get(key).map(Vec::as_slice) == seen)
        });
        if changed.is_empty() {
            for swap in swaps {
                inner.kv.insert(swap.key, swap.value);
            }
        }
        changed
    }

    pub fn increment(&self, key: String, delta: i64) -> StoreResult<i64> {
        let mut inner = self.lock();
        let current = match inner.kv.get(&key) {
            None => 0,
            Some(bytes) => parse_counter(&key, bytes)?,
        };
        let next = current
            .checked_add(delta)
            .ok_or_else(|| StoreError::Corrupt(format!("{key}: counter overflow")))?;
        inner.kv.insert(key, next.to_string().into_bytes());
        Ok(next)
    }

    pub fn schedule(&self, ns: &str, wakes: &[Wake]) {
        let mut inner = self.lock();
        for wake in wakes {
            let r = task_ref(ns, &wake.task_id);
            if let Some((old_at, _)) = inner.by_task.remove(&r) {
                inner.due.remove(&(old_at, r.clone()));
            }
            inner.due.insert((wake.at_ms, r.clone()));
            inner.by_task.insert(r, (wake.at_ms, wake.group.clone()));
        }
    }

    pub fn unschedule(&self, ns: &str, task_ids: &[String]) {
        let mut inner = self.lock();
        for id in task_ids {
            let r = task_ref(ns, id);
            if let Some((at, _)) = inner.by_task.remove(&r) {
                inner.due.remove(&(at, r));
            }
        }
    }

    pub fn retry_leased(
        &self,
        ns: &str,
        task_ids: &[String],
        leased_until: u64,
        at_ms: u64,
    ) -> usize {
        let mut inner = self.lock();
        let mut moved = 0;
        for id in task_ids {
            let r = task_ref(ns, id);
            match inner.by_task.get_mut(&r) {
                Some(entry) if entry.0 == leased_until => entry.0 = at_ms,
                _ => continue,
            }
            inner.due.remove(&(leased_until, r.clone()));
            inner.due.insert((at_ms, r));
            moved += 1;
        }
        moved
    }

    pub fn claim_due(&self, now_ms: u64, lease_ms: u64, limit: usize) -> Vec<Due> {
        let mut inner = self.lock();
        let claimed: Vec<(u64, String)> = inner
            .due
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .take(limit)
            .cloned()
            .collect();
        let mut due = Vec::with_capacity(claimed.len());
        for (at, r) in claimed {
            inner.due.remove(&(at, r.clone()));
            let lease_until = now_ms.saturating_add(lease_ms);
            inner.due.insert((lease_until, r.clone()));
            let group = match inner.by_task.get_mut(&r) {
                Some(entry) => {
                    entry.0 = lease_until;
                    entry.1.clone()
                }
                None => continue,
            };
            if let Some((ns, id)) = split_task_ref(&r) {
                due.push(Due {
                    namespace: ns.to_string(),
                    task_id: id.to_string(),
                    group,
                });
            }
        }
        due
    }

    pub fn next_due_ms(&self) -> Option<u64> {
        self.lock().due.first().map(|(at, _)| *at)
    }
}

pub(super) fn parse_counter(key: &str, bytes: &[u8]) -> StoreResult<i64> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("{key}: not a decimal counter")))
}
