//! Task change notices from plugins, delivered to whoever waits for them.
//!
//! A plugin reports every change it stores (`runner.task-changed`); a
//! `tools/call` that waits inline for its task to end watches its id here
//! instead of polling the plugin.

use crate::bindings::settle::plugin::types::TaskView;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

type Key = (String, String);

/// The runner-wide registry of watched tasks.
#[derive(Default)]
pub struct TaskEvents {
    watched: Mutex<HashMap<Key, watch::Sender<Option<TaskView>>>>,
}

impl TaskEvents {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, watch::Sender<Option<TaskView>>>> {
        self.watched.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A task of `tenant` changed.
    pub fn publish(&self, tenant: &str, view: TaskView) {
        let key = (tenant.to_string(), view.task_id.clone());
        if let Some(sender) = self.lock().get(&key) {
            sender.send_replace(Some(view));
        }
    }

    /// Starts watching a task; changes published from now on are seen.
    pub fn watch(self: &Arc<Self>, tenant: &str, task_id: &str) -> TaskWatch {
        let key = (tenant.to_string(), task_id.to_string());
        let rx = self
            .lock()
            .entry(key.clone())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe();
        TaskWatch {
            rx,
            key,
            events: self.clone(),
        }
    }
}

/// A watch on one task; stops watching when dropped.
pub struct TaskWatch {
    rx: watch::Receiver<Option<TaskView>>,
    key: Key,
    events: Arc<TaskEvents>,
}

impl TaskWatch {
    /// The task's view once it has ended, or `None` if it did not end
    /// within `wait`.
    pub async fn ended_within(&mut self, wait: Duration) -> Option<TaskView> {
        let ended = self.rx.wait_for(|v| v.as_ref().is_some_and(|v| v.terminal));
        match tokio::time::timeout(wait, ended).await {
            Ok(Ok(view)) => view.clone(),
            _ => None,
        }
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        let mut watched = self.events.lock();
        // The entry goes when its last watcher does (this one still counts).
        if watched
            .get(&self.key)
            .is_some_and(|s| s.receiver_count() <= 1)
        {
            watched.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: &str, terminal: bool) -> TaskView {
        TaskView {
            task_id: id.into(),
            terminal,
            detailed: "{}".into(),
            tool_result: "{}".into(),
        }
    }

    #[tokio::test]
    async fn a_watch_sees_its_task_end() {
        let events = Arc::new(TaskEvents::default());
        let mut w = events.watch("t", "a");
        events.publish("t", view("a", false));
        events.publish("t", view("b", true));
        events.publish("other", view("a", true));
        assert!(w.ended_within(Duration::from_millis(20)).await.is_none());
        events.publish("t", view("a", true));
        assert!(
            w.ended_within(Duration::from_secs(5))
                .await
                .unwrap()
                .terminal
        );
    }

    #[tokio::test]
    async fn dropping_the_last_watch_forgets_the_task() {
        let events = Arc::new(TaskEvents::default());
        let w1 = events.watch("t", "a");
        let w2 = events.watch("t", "a");
        drop(w1);
        assert_eq!(events.lock().len(), 1);
        drop(w2);
        assert!(events.lock().is_empty());
    }
}
