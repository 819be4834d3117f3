//! A platform in memory, for native tests: a clock the test moves, a bucket
//! in a map, and the wakes, task changes and logs kept where the test can
//! look at them.

use super::{CasDecision, Kv, Level, Platform, Swap, Wake};
use crate::task::TaskRecord;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

/// An in-memory platform. Single-threaded, like a plugin call.
#[derive(Default)]
pub struct MemoryPlatform {
    now: Cell<u64>,
    next_id: Cell<u64>,
    config: RefCell<BTreeMap<String, String>>,
    kv: MemoryKv,
    wakes: RefCell<BTreeMap<String, Wake>>,
    changes: RefCell<Vec<TaskRecord>>,
    resources: RefCell<Vec<String>>,
    logs: RefCell<Vec<(Level, String)>>,
    /// Tasks the runner was told to forget, in order.
    forgotten: RefCell<Vec<String>>,
    /// Whether `forget_tasks` fails, as a runner whose store is down does.
    refuse_forget: Cell<bool>,
}

/// The bucket: a sorted map, so listings are stable.
#[derive(Default)]
pub struct MemoryKv {
    map: RefCell<BTreeMap<String, Vec<u8>>>,
    /// A write another caller makes just before the next
    /// [`Kv::swap_many`]: a race, for tests of the path that loses it.
    racing: RefCell<Option<(String, Vec<u8>)>>,
}

impl MemoryKv {
    /// Makes another writer put `value` at `key` just before the next
    /// [`Kv::swap_many`] checks its keys.
    pub fn race_next_swap(&self, key: &str, value: Vec<u8>) {
        *self.racing.borrow_mut() = Some((key.to_string(), value));
    }
}

impl Kv for MemoryKv {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        Ok(self.map.borrow().get(key).cloned())
    }

    fn get_many(&self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, String> {
        let map = self.map.borrow();
        Ok(keys.iter().map(|k| map.get(k).cloned()).collect())
    }

    fn delete(&self, key: &str) -> Result<(), String> {
        self.map.borrow_mut().remove(key);
        Ok(())
    }

    fn set_many(&self, pairs: &[(String, Vec<u8>)]) -> Result<(), String> {
        self.map.borrow_mut().extend(pairs.iter().cloned());
        Ok(())
    }

    fn delete_many(&self, keys: &[String]) -> Result<(), String> {
        let mut map = self.map.borrow_mut();
        for key in keys {
            map.remove(key);
        }
        Ok(())
    }

    fn swap_many(&self, swaps: Vec<Swap>) -> Result<Vec<u32>, String> {
        if let Some((key, value)) = self.racing.borrow_mut().take() {
            self.map.borrow_mut().insert(key, value);
        }
        let mut map = self.map.borrow_mut();
        let changed: Vec<u32> = (0u32..)
            .zip(&swaps)
            .filter(|(_, swap)| map.get(&swap.key) != swap.seen.as_ref())
            .map(|(at, _)| at)
            .collect();
        if changed.is_empty() {
            for swap in swaps {
                map.insert(swap.key, swap.value);
            }
        }
        Ok(changed)
    }

    fn cas(&self, key: &str, decide: &mut CasDecision<'_>) -> Result<(), String> {
        // Nobody else writes in between: one round always wins.
        let current = self.map.borrow().get(key).cloned();
        if let Some(bytes) = decide(current.as_deref())? {
            self.map.borrow_mut().insert(key.to_string(), bytes);
        }
        Ok(())
    }
}

impl MemoryPlatform {
    /// A platform whose clock reads `now_ms`, configured with `config`.
    pub fn new(now_ms: u64, config: &[(&str, &str)]) -> MemoryPlatform {
        let platform = MemoryPlatform::default();
        platform.now.set(now_ms);
        for (key, value) in config {
            platform.set_config(key, value);
        }
        platform
    }

    /// Makes another writer put `value` at `key` just before the next
    /// [`Kv::swap_many`] checks its keys: a race, for the path that loses it.
    pub fn race_next_swap(&self, key: &str, value: Vec<u8>) {
        self.kv.race_next_swap(key, value);
    }

    pub fn set_now(&self, now_ms: u64) {
        self.now.set(now_ms);
    }

    /// Moves the clock forward (a device read that takes time, say).
    pub fn advance(&self, ms: u64) {
        self.now.set(self.now.get() + ms);
    }

    pub fn set_config(&self, key: &str, value: &str) {
        self.config
            .borrow_mut()
            .insert(key.to_string(), value.to_string());
    }

    /// The wakes scheduled now, earliest first.
    pub fn wakes(&self) -> Vec<Wake> {
        let mut wakes: Vec<Wake> = self.wakes.borrow().values().cloned().collect();
        wakes.sort_by(|a, b| (a.at_ms, &a.task_id).cmp(&(b.at_ms, &b.task_id)));
        wakes
    }

    /// Takes the wakes due at `now_ms`, as the runner's scheduler claims
    /// them (a claimed wake is gone until the plugin schedules it again).
    pub fn take_due(&self, now_ms: u64) -> Vec<Wake> {
        let mut wakes = self.wakes.borrow_mut();
        let due: Vec<String> = wakes
            .values()
            .filter(|w| w.at_ms <= now_ms)
            .map(|w| w.task_id.clone())
            .collect();
        due.iter().filter_map(|id| wakes.remove(id)).collect()
    }

    /// Every visible task change so far, in order, and forgets them.
    pub fn take_changes(&self) -> Vec<TaskRecord> {
        std::mem::take(&mut *self.changes.borrow_mut())
    }

    /// Every resource update so far, and forgets them.
    pub fn take_resource_updates(&self) -> Vec<String> {
        std::mem::take(&mut *self.resources.borrow_mut())
    }

    /// Every log line so far, and forgets them.
    pub fn take_logs(&self) -> Vec<(Level, String)> {
        std::mem::take(&mut *self.logs.borrow_mut())
    }

    /// Every task the runner was told to forget so far, and forgets them.
    pub fn take_forgotten(&self) -> Vec<String> {
        std::mem::take(&mut *self.forgotten.borrow_mut())
    }

    /// Makes `forget_tasks` fail (`true`) or succeed again.
    pub fn refuse_forget(&self, refuse: bool) {
        self.refuse_forget.set(refuse);
    }

    /// The bucket's keys, for tests that check what is kept.
    pub fn keys(&self) -> Vec<String> {
        self.kv.map.borrow().keys().cloned().collect()
    }
}

impl Platform for MemoryPlatform {
    fn now_ms(&self) -> u64 {
        self.now.get()
    }

    fn random_id(&self) -> String {
        // Not random, but unique and shaped like a real id (32 hex digits),
        // which is what the code relies on; tests want to reproduce.
        let n = self.next_id.get() + 1;
        self.next_id.set(n);
        format!("{n:032x}")
    }

    fn config(&self, key: &str) -> Result<Option<String>, String> {
        Ok(self.config.borrow().get(key).cloned())
    }

    fn kv(&self) -> &dyn Kv {
        &self.kv
    }

    fn schedule(&self, wakes: &[Wake]) -> Result<(), String> {
        let mut map = self.wakes.borrow_mut();
        for wake in wakes {
            map.insert(wake.task_id.clone(), wake.clone());
        }
        Ok(())
    }

    fn unschedule(&self, task_ids: &[String]) -> Result<(), String> {
        let mut map = self.wakes.borrow_mut();
        for id in task_ids {
            map.remove(id);
        }
        Ok(())
    }

    fn forget_tasks(&self, task_ids: &[String]) -> Result<(), String> {
        if self.refuse_forget.get() {
            return Err("the runner's store is unreachable".into());
        }
        self.forgotten.borrow_mut().extend_from_slice(task_ids);
        Ok(())
    }

    fn task_changed(&self, task: &TaskRecord, _detailed: serde_json::Value) {
        self.changes.borrow_mut().push(task.clone());
    }

    fn resource_updated(&self, uri: &str) {
        self.resources.borrow_mut().push(uri.to_string());
    }

    fn log(&self, level: Level, message: &str) {
        self.logs.borrow_mut().push((level, message.to_string()));
    }
}
