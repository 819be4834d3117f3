//! Moving due tasks forward, called by the runner's scheduler.
//!
//! All tasks of one call wait on the same device, so one sensor read serves
//! them all, however many there are.

use crate::host;
use crate::task::{Stage, TaskRecord};
use crate::tools::{Context, Failure, send_and_record};

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
    if let Ok(reading) = &reading {
        crate::resources::observed(&ctx, group, reading);
    }
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
    host::log(
        host::Level::Info,
        &format!(
            "task {}: re-sending a command whose send was not recorded",
            record.id
        ),
    );
    match send_and_record(ctx, record) {
        // A refusal is recorded on the task; nobody waits for this call.
        Ok(_) | Err(Failure::Tool(_)) => Ok(()),
        Err(Failure::Internal(e) | Failure::UnknownTool(e)) => Err(e),
    }
}
