//! What the clients saw: every acknowledged task, every terminal view of a
//! task (the first is kept and every later one compared with it), and every
//! command attempt per device, answered or not. The checker judges the run
//! from this and from the simulator's own records.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// A task a client got an id for.
#[derive(Clone, Debug)]
pub struct Acked {
    pub id: String,
    pub device: String,
    pub temperature: f64,
}

/// A terminal view that differed from the first one seen.
#[derive(Clone, Debug)]
pub struct Change {
    pub id: String,
    pub first: Value,
    pub later: Value,
}

#[derive(Default)]
struct Inner {
    acked: Vec<Acked>,
    terminal: HashMap<String, Value>,
    changes: Vec<Change>,
    /// Command attempts per device: acknowledged, refused or unanswered.
    attempts: BTreeMap<String, u64>,
    /// Why calls were refused or unanswered, by first line, counted.
    troubles: BTreeMap<String, u64>,
}

#[derive(Default)]
pub struct Ledger {
    inner: Mutex<Inner>,
}

/// A status that never changes once reached.
pub fn is_terminal(view: &Value) -> bool {
    matches!(
        view["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

impl Ledger {
    pub fn attempt(&self, device: &str) {
        *self
            .inner
            .lock()
            .unwrap()
            .attempts
            .entry(device.to_string())
            .or_default() += 1;
    }

    pub fn acked(&self, task: Acked) {
        self.inner.lock().unwrap().acked.push(task);
    }

    /// Counts a refusal or a missing answer under a short label.
    pub fn trouble(&self, what: &str, detail: &str) {
        // Ids and numbers vary; the first few words name the kind.
        let label: String = detail
            .split_whitespace()
            .take(6)
            .collect::<Vec<_>>()
            .join(" ");
        *self
            .inner
            .lock()
            .unwrap()
            .troubles
            .entry(format!("{what}: {label}"))
            .or_default() += 1;
    }

    /// Records a view of a task; a terminal one is kept the first time and
    /// compared with every later one.
    pub fn observe(&self, view: &Value) {
        let Some(id) = view["taskId"].as_str() else {
            return;
        };
        let mut inner = self.inner.lock().unwrap();
        match inner.terminal.get(id) {
            None if is_terminal(view) => {
                inner.terminal.insert(id.to_string(), view.clone());
            }
            None => {}
            Some(first) if first != view => {
                let change = Change {
                    id: id.to_string(),
                    first: first.clone(),
                    later: view.clone(),
                };
                inner.changes.push(change);
            }
            Some(_) => {}
        }
    }

    pub fn acked_tasks(&self) -> Vec<Acked> {
        self.inner.lock().unwrap().acked.clone()
    }

    pub fn acked_count(&self) -> usize {
        self.inner.lock().unwrap().acked.len()
    }

    pub fn first_terminal(&self, id: &str) -> Option<Value> {
        self.inner.lock().unwrap().terminal.get(id).cloned()
    }

    pub fn changes(&self) -> Vec<Change> {
        self.inner.lock().unwrap().changes.clone()
    }

    pub fn attempts(&self) -> BTreeMap<String, u64> {
        self.inner.lock().unwrap().attempts.clone()
    }

    pub fn troubles(&self) -> BTreeMap<String, u64> {
        self.inner.lock().unwrap().troubles.clone()
    }
}
