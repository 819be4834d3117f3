//! Delivering a person's answers to a task (`tasks/update`).
//!
//! Each key is matched to an outstanding question; keys that are not
//! outstanding (never asked, already answered) are ignored, as the tasks
//! extension requires. A yes to a held command sends it now.

use super::command::{recovery_wake, send_after_answer};
use super::readings::observed;
use super::tasks::TaskError;
use super::{Context, Failure};
use crate::platform::schedule_one;
use crate::question::{QuestionKind, read_reply};
use crate::task::AfterAnswer;
use serde_json::Value as Json;

/// Delivers `responses` (the `inputResponses` object) to a task.
pub fn deliver(ctx: &Context<'_>, task_id: &str, responses: &Json) -> Result<(), TaskError> {
    let Some(responses) = responses.as_object() else {
        return Ok(());
    };
    let Some(asked) = ctx.store.load(task_id).map_err(TaskError::Internal)? else {
        return Err(TaskError::not_found(task_id));
    };
    for (key, response) in responses {
        // The device is not read while a task waits for a person: an answer
        // about what it showed gets a fresh look first.
        let about_the_device = asked
            .questions
            .iter()
            .any(|q| q.key == *key && q.kind == QuestionKind::AcceptDifferent);
        let fresh = about_the_device
            .then(|| ctx.driver.read(&asked.device_id).ok())
            .flatten();
        if let Some(reading) = &fresh {
            observed(ctx, &asked.device_id, reading);
        }
        let now = ctx.now_ms();
        let mut after = None;
        let outcome = ctx
            .store
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
                after = task.answer(now, key, read_reply(kind, response), fresh.as_ref());
                after.is_some()
            })
            .map_err(TaskError::Internal)?;
        let Some((record, _)) = outcome else {
            return Err(TaskError::not_found(task_id));
        };
        if after == Some(AfterAnswer::Send) {
            // In case the runner stops mid-send.
            schedule_one(
                ctx.platform,
                &record.id,
                &record.device_id,
                recovery_wake(ctx, now),
            )
            .map_err(TaskError::Internal)?;
            match send_after_answer(ctx, &record) {
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
