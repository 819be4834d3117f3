//! The views of tasks that ended, kept by the runner so that `tasks/get` of
//! an ended task is answered without a plugin call.
//!
//! Agents poll `tasks/get`, and most of what they poll has ended (a task
//! ends once, and is read until its result is fetched and after). Served by
//! the plugin, each read costs a fresh instance, the task's record decoded
//! and rendered again, for an answer that cannot change: the contract says
//! a task in a terminal status never changes again. So when a plugin
//! reports such a change (`task-changed`), the runner keeps the `detailed`
//! rendering it was given, as it was given, and answers from it. It never
//! reads it: the plugin stays the only one who knows what a task says.
//!
//! Kept only for a plugin that imports `forget-tasks`, which it calls
//! before it removes a task: a plugin that cannot tell the runner a task
//! is gone is asked every time, so no answer outlives its task.
//!
//! A view is stored after the change it shows is on disk (the plugin's
//! record was flushed before its notice), so serving it never tells of a
//! change a crash could undo; a view lost in a crash only sends the next
//! read to the plugin again.

use crate::bindings::settle::plugin::types::TaskView;
use crate::store::{Store, StoreResult};
use std::sync::{Arc, Mutex};

/// The namespace of `tenant_namespace`'s ended views. Tenant namespaces
/// are `a-z`, `0-9`, `-` and `_` (`config::tenant::valid_name`), so no
/// tenant's own namespace can be this one, and a plugin's bucket cannot
/// reach it.
pub fn namespace(tenant_namespace: &str) -> String {
    format!("{tenant_namespace}.ended")
}

/// The `detailed` view of `task_id`, if the task ended and its plugin
/// has not forgotten it.
pub async fn read(
    store: &Store,
    tenant_namespace: &str,
    task_id: &str,
) -> StoreResult<Option<String>> {
    let Some(bytes) = store.get(&namespace(tenant_namespace), task_id).await? else {
        return Ok(None);
    };
    // Stored from a WIT string, so UTF-8; anything else is not ours.
    Ok(String::from_utf8(bytes).ok())
}

/// Drops the views of `task_ids` (the plugin is removing the tasks).
pub async fn forget(store: &Store, tenant_namespace: &str, task_ids: &[String]) -> StoreResult<()> {
    store
        .delete_many(&namespace(tenant_namespace), task_ids)
        .await
}

/// The views one call's ended tasks left to store. They are written once,
/// at the end of the call (a device's reading may end a hundred tasks at
/// once, and one write for all of them costs far less than one each).
#[derive(Clone, Default)]
pub struct Pending(Arc<Mutex<Views>>);

/// Ended tasks' views: (task id, `detailed` text).
type Views = Vec<(String, Vec<u8>)>;

impl Pending {
    /// Keeps `task`'s view if it ended.
    pub fn note(&self, task: &TaskView) {
        if task.status.is_terminal() {
            self.lock()
                .push((task.task_id.clone(), task.detailed.clone().into_bytes()));
        }
    }

    /// Drops what is pending for `task_ids`: a task forgotten in the call
    /// that ended it leaves no view behind.
    pub fn drop_for(&self, task_ids: &[String]) {
        self.lock().retain(|(id, _)| !task_ids.contains(id));
    }

    /// Writes what is pending, on disk when this returns. It comes last in
    /// a call that wrote the tasks' records, whose writes must reach the
    /// disk before its answer anyway: one fsync'd commit covers them all
    /// ([`Store::on_write`]), instead of this write and then a flush, two
    /// jobs for the store's writer: with those two, creating tasks with 8
    /// clients while others ended ran 7 % slower than before views were
    /// kept; with one, 1 % (medians of seven runs, docs/performance.md).
    /// A failure is logged, not raised: the plugin answers for a task
    /// whose view is missing.
    pub async fn store(&self, store: &Store, tenant_namespace: &str) {
        let views = std::mem::take(&mut *self.lock());
        if views.is_empty() {
            return;
        }
        let count = views.len();
        let written = store
            .on_write()
            .set_many(&namespace(tenant_namespace), views)
            .await;
        if let Err(e) = written {
            tracing::warn!(
                namespace = tenant_namespace,
                "the views of {count} ended tasks were not kept; the plugin answers for them: {e}"
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Views> {
        // A panic while holding it leaves a plain list, still usable.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
