//! Reading and cancelling a task, for `tasks/get`, `tasks/cancel` and the
//! `get_task` / `cancel_task` tools alike.

use crate::store::Store;
use crate::task::TaskRecord;

/// Why a task request failed.
#[derive(Debug, PartialEq)]
pub enum TaskError {
    /// No such task for this tenant (or it was removed after its TTL).
    NotFound(String),
    /// The store failed.
    Internal(String),
}

impl TaskError {
    pub fn not_found(task_id: &str) -> TaskError {
        TaskError::NotFound(format!("Task not found: {task_id:?}"))
    }
}

/// The task as it stands. Reading is also the moment an overdue task is
/// marked expired, so a late scheduler never shows a task past its TTL as
/// working.
///
/// It needs only the store, not the device: reading a task stays cheap.
pub fn get(store: &Store<'_>, now: u64, task_id: &str) -> Result<TaskRecord, TaskError> {
    let (record, _) = store
        .update(task_id, now, |t| t.expire_if_due(now))
        .map_err(TaskError::Internal)?
        .ok_or_else(|| TaskError::not_found(task_id))?;
    Ok(record)
}

/// Cancels a task: it ends at once; a command already sent is not recalled.
/// Cancelling an ended task changes nothing and returns it as it ended.
pub fn cancel(store: &Store<'_>, now: u64, task_id: &str) -> Result<TaskRecord, TaskError> {
    let (record, _) = store
        .update(task_id, now, |t| t.cancel(now))
        .map_err(TaskError::Internal)?
        .ok_or_else(|| TaskError::not_found(task_id))?;
    Ok(record)
}
