//! Moving due tasks forward, called by the runner's scheduler.
//!
//! All tasks of one call wait on the same device, so one sensor read serves
//! them all, however many there are.

use crate::driver::DriverError;
use crate::host;
use crate::model::{Field, Value};
use crate::task::{Stage, TaskRecord};
use crate::tools::Context;

/// Advances the tasks `ids`, all waiting on device `group`. Every task is
/// either scheduled again or unscheduled before this returns; if this fails
/// half way, the runner wakes the rest again after its lease.
pub fn run(group: &str, ids: &[String]) -> Result<(), String> {
    let ctx = Context::load()?;
    let now = host::now_ms();
    let records = ctx.tasks.load_many(ids)?;
    let mut waiting = Vec::new();
    for (id, record) in ids.iter().zip(records) {
        match record {
            None => host::unschedule(std::slice::from_ref(id))?,
            Some(record) if record.is_terminal() => {
                if now >= record.purge_at_ms() {
                    ctx.tasks.purge(id)?;
                } else {
                    host::schedule(id, &record.device_id, record.purge_at_ms())?;
                }
            }
            Some(record) => waiting.push(record),
        }
    }
    for record in waiting.iter().filter(|r| r.stage == Stage::Sending) {
        resend(&ctx, record)?;
    }
    if waiting.is_empty() {
        return Ok(());
    }
    let reading = ctx.driver.read(group).map_err(|e| e.to_string());
    for record in &waiting {
        let outcome = ctx.tasks.update(&record.id, now, |task| {
            task.observe(now, reading.as_ref().map_err(String::as_str))
        })?;
        // An unchanged task was not committed, so schedule its next read here.
        if let Some((task, false)) = outcome {
            host::schedule(&task.id, &task.device_id, task.next_wake_ms(now))?;
        }
    }
    Ok(())
}

/// A task whose send was never recorded: the runner stopped between storing
/// it and hearing back from the API. Device commands are absolute ("set 24",
/// never "one warmer"), so sending again cannot do harm, while not sending
/// would silently drop a command the caller was told about.
fn resend(ctx: &Context, record: &TaskRecord) -> Result<(), String> {
    let pairs: Vec<(Field, Value)> = record
        .fields
        .iter()
        .map(|f| (f.field, f.sent.clone()))
        .collect();
    host::log(
        host::Level::Info,
        &format!(
            "task {}: re-sending a command whose send was not recorded",
            record.id
        ),
    );
    let sent = ctx.driver.send(&record.device_id, &pairs);
    let now = host::now_ms();
    ctx.tasks.update(&record.id, now, |task| match &sent {
        Ok(accepted) => task.mark_sent(now, accepted.request_id.clone()),
        // Still no answer: the next wake tries again, within the TTL.
        Err(DriverError::Unreachable(_)) => task.expire_if_due(now),
        Err(e) => task.mark_not_sent(now, &e.to_string()),
    })?;
    Ok(())
}
