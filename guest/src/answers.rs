//! Delivering a person's answers to a task (`tasks/update`).
//!
//! Each key is matched to an outstanding question; keys that are not
//! outstanding (never asked, already answered) are ignored, as the tasks
//! extension requires. A yes to a held command sends it now.

use crate::bindings::settle::plugin::types::TaskError;
use crate::host;
use crate::question::read_reply;
use crate::task::AfterAnswer;
use crate::tools::{Context, Failure, send_and_record};
use serde_json::Value as Json;

pub fn deliver(task_id: &str, responses: &Json) -> Result<(), TaskError> {
    let ctx = Context::load().map_err(TaskError::Internal)?;
    let Some(responses) = responses.as_object() else {
        return Ok(());
    };
    let exists = ctx
        .tasks
        .load(task_id)
        .map_err(TaskError::Internal)?
        .is_some();
    if !exists {
        return Err(TaskError::NotFound(format!("Task not found: {task_id:?}")));
    }
    for (key, response) in responses {
        let now = host::now_ms();
        let mut after = None;
        let outcome = ctx
            .tasks
            .update(task_id, now, |task| {
                let Some(kind) = task
                    .questions
                    .iter()
                    .find(|q| q.key == *key)
                    .map(|q| q.kind)
                else {
                    after = None;
                    return false;
                };
                after = task.answer(now, key, read_reply(kind, response));
                after.is_some()
            })
            .map_err(TaskError::Internal)?;
        let Some((record, _)) = outcome else {
            return Err(TaskError::NotFound(format!("Task not found: {task_id:?}")));
        };
        if after == Some(AfterAnswer::Send) {
            // Past the send's own timeout, in case the runner stops mid-send.
            let recovery =
                now + ctx.settings.http_timeout_ms + ctx.settings.timing.poll_interval_ms;
            host::schedule(&record.id, &record.device_id, recovery).map_err(TaskError::Internal)?;
            match send_and_record(&ctx, &record) {
                // A refusal is recorded on the task, where the client sees it.
                Ok(_) | Err(Failure::Tool(_)) => {}
                Err(Failure::Internal(e) | Failure::UnknownTool(e)) => {
                    return Err(TaskError::Internal(e));
                }
            }
        }
    }
    Ok(())
}
