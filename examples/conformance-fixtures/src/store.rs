//! Task records in the tenant's key-value bucket, and the plugin's exports
//! that act on them (`get-task`, `update-task`, `cancel-task`, `advance`).
//!
//! Every write goes through compare-and-swap, so a cancel racing a step or
//! an answer leaves one consistent record; every change is then published
//! (`task-changed`) and the task's next wake scheduled, in one place:
//! [`commit`].

use crate::bindings::settle::plugin::types::{TaskError, TaskStatus, TaskView};
use crate::host::{self, CasUpdate, Kv};
use crate::task::{RECORD_FORMAT, Status, TaskRecord};
use serde_json::{Map, Value as Json};

/// The scheduler group of every fixture task: they share nothing, so one
/// group is as good as many.
const GROUP: &str = "fixtures";

fn key(id: &str) -> String {
    format!("task/{id}")
}

/// Both renderings of a task, as the runner receives them.
pub fn view(record: &TaskRecord) -> TaskView {
    TaskView {
        task_id: record.id.clone(),
        status: match record.status {
            Status::Working => TaskStatus::Working,
            Status::InputRequired => TaskStatus::InputRequired,
            Status::Completed => TaskStatus::Completed,
            Status::Failed => TaskStatus::Failed,
            Status::Cancelled => TaskStatus::Cancelled,
        },
        detailed: record.to_detailed_json().to_string(),
        tool_result: record.to_tool_result().to_string(),
    }
}

fn decode(key: &str, bytes: &[u8]) -> Result<TaskRecord, String> {
    let record: TaskRecord = serde_json::from_slice(bytes)
        .map_err(|e| format!("store: {key} is not a task record: {e}"))?;
    if record.format > RECORD_FORMAT {
        return Err(format!(
            "store: {key} has record format {}, newer than this plugin's {RECORD_FORMAT}",
            record.format
        ));
    }
    Ok(record)
}

fn encode(record: &TaskRecord) -> Vec<u8> {
    serde_json::to_vec(record).expect("task records always serialize")
}

fn not_found(id: &str) -> TaskError {
    TaskError::NotFound(format!("Task not found: {id:?}"))
}

/// Stores a new task and schedules its first step: when this returns the
/// task can be fetched, so its id can be handed out.
pub fn create(record: &TaskRecord) -> Result<(), String> {
    let kv = Kv::open()?;
    let bytes = encode(record);
    kv.cas_update(&key(&record.id), |current| {
        if current.is_some() {
            return Err(format!("store: task id {} already exists", record.id));
        }
        Ok(CasUpdate::Write(bytes.clone(), ()))
    })?;
    host::schedule(&record.id, GROUP, record.next_wake_ms())
}

/// Reads a task; an expired one counts as gone.
fn load(kv: &Kv, id: &str, now_ms: u64) -> Result<Option<TaskRecord>, String> {
    let key = key(id);
    let record = kv.get(&key)?.map(|b| decode(&key, &b)).transpose()?;
    Ok(record.filter(|r| !r.is_expired(now_ms)))
}

/// Applies `change` with compare-and-swap (it may run again on a fresher
/// record) and commits the result if it changed. `None`: no such task.
fn update(
    kv: &Kv,
    id: &str,
    now_ms: u64,
    mut change: impl FnMut(&mut TaskRecord) -> bool,
) -> Result<Option<(TaskRecord, bool)>, String> {
    let key = key(id);
    let outcome = kv.cas_update(&key, |current| {
        let Some(bytes) = current else {
            return Ok(CasUpdate::Keep(None));
        };
        let mut record = decode(&key, bytes)?;
        if record.is_expired(now_ms) {
            return Ok(CasUpdate::Keep(None));
        }
        if change(&mut record) {
            Ok(CasUpdate::Write(encode(&record), Some((record, true))))
        } else {
            Ok(CasUpdate::Keep(Some((record, false))))
        }
    })?;
    if let Some((record, true)) = &outcome {
        commit(record)?;
    }
    Ok(outcome)
}

/// After a change is stored: tell the runner, and schedule what comes next.
fn commit(record: &TaskRecord) -> Result<(), String> {
    host::task_changed(&view(record));
    host::schedule(&record.id, GROUP, record.next_wake_ms())
}

pub fn get(id: &str) -> Result<TaskView, TaskError> {
    let kv = Kv::open().map_err(TaskError::Internal)?;
    load(&kv, id, host::now_ms())
        .map_err(TaskError::Internal)?
        .map(|r| view(&r))
        .ok_or_else(|| not_found(id))
}

/// Delivers `tasks/update` answers; applied before this returns, so the
/// next `tasks/get` no longer shows the answered questions.
pub fn answer(id: &str, replies: &Json) -> Result<(), TaskError> {
    let kv = Kv::open().map_err(TaskError::Internal)?;
    let empty = Map::new();
    let replies = replies.as_object().unwrap_or(&empty);
    let now = host::now_ms();
    update(&kv, id, now, |task| task.answer(now, replies))
        .map_err(TaskError::Internal)?
        .map(|_| ())
        .ok_or_else(|| not_found(id))
}

pub fn cancel(id: &str) -> Result<(), TaskError> {
    let kv = Kv::open().map_err(TaskError::Internal)?;
    let now = host::now_ms();
    update(&kv, id, now, |task| task.cancel(now))
        .map_err(TaskError::Internal)?
        .map(|_| ())
        .ok_or_else(|| not_found(id))
}

/// The scheduler's wake-up: steps due tasks, removes expired ones, and
/// schedules every task it was given again, or unschedules it.
pub fn advance(ids: &[String]) -> Result<(), String> {
    let kv = Kv::open()?;
    let now = host::now_ms();
    for id in ids {
        let key = key(id);
        let stored = kv.get(&key)?.map(|b| decode(&key, &b)).transpose()?;
        match stored {
            None => host::unschedule(std::slice::from_ref(id))?,
            Some(record) if record.is_expired(now) => {
                kv.delete(&key)?;
                host::unschedule(std::slice::from_ref(id))?;
            }
            Some(_) => match update(&kv, id, now, |task| task.step(now))? {
                // A changed task was committed, which scheduled it.
                Some((_, true)) => {}
                // An unchanged one was not: schedule it here.
                Some((record, false)) => host::schedule(id, GROUP, record.next_wake_ms())?,
                // It expired in between.
                None => host::unschedule(std::slice::from_ref(id))?,
            },
        }
    }
    Ok(())
}
