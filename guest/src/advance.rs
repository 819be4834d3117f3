//! What the runner's scheduler wakes the plugin for.
//!
//! Two kinds of wake arrive:
//! - a device's tick (`device:<id>`): one sensor read serves every task
//!   waiting on that device. When the device shows nothing new, only the
//!   device's waiting set is touched; tasks are loaded and written only when
//!   the state changed or a task's own check (its settle window, its TTL, a
//!   value that must hold) is due. This is what keeps very many waiting
//!   tasks cheap.
//! - a task's own wake: a send to retry, a person's answer that never came,
//!   or an ended task whose record may go.

use crate::host;
use crate::store::{Waiter, device_of_wake, device_wake_id};
use crate::task::{Stage, TaskRecord, next_grid_read};
use crate::tools::{Context, Failure, send_and_record};
use std::collections::BTreeMap;

/// Handles the wakes `ids` of group `group` (a device). Every wake is either
/// scheduled again or unscheduled before this returns; if this fails half
/// way, the runner wakes the rest again after its lease.
pub fn run(group: &str, ids: &[String]) -> Result<(), String> {
    let ctx = Context::load()?;
    let now = host::now_ms();
    let (ticks, tasks): (Vec<&String>, Vec<&String>) =
        ids.iter().partition(|id| device_of_wake(id).is_some());
    if !tasks.is_empty() {
        let tasks: Vec<String> = tasks.into_iter().cloned().collect();
        advance_tasks(&ctx, now, &tasks)?;
    }
    if !ticks.is_empty() {
        tick(&ctx, group, now)?;
    }
    Ok(())
}

/// Tasks woken on their own.
fn advance_tasks(ctx: &Context, now: u64, ids: &[String]) -> Result<(), String> {
    let records = ctx.tasks.load_many(ids)?;
    for (id, record) in ids.iter().zip(records) {
        let Some(record) = record else {
            host::unschedule(std::slice::from_ref(id))?;
            continue;
        };
        if record.is_terminal() {
            if now >= record.purge_at_ms() {
                ctx.tasks.purge(id)?;
            } else {
                host::schedule(id, &record.device_id, record.purge_at_ms())?;
            }
        } else if record.stage == Stage::Sending {
            resend(ctx, &record)?;
        } else if record.waits_on_device() {
            // Woken by a wake from before it was sent: its device's tick
            // looks after it from now on.
            ctx.tasks.join_waiting(&record, now)?;
        } else {
            // Waiting for a person: only the TTL can end it here.
            let outcome = ctx.tasks.update(id, now, |t| t.expire_if_due(now))?;
            if let Some((task, false)) = outcome
                && let Some(at) = task.next_wake_ms(now)
            {
                host::schedule(id, &task.device_id, at)?;
            }
        }
    }
    Ok(())
}

/// One read of a device for every task waiting on it.
fn tick(ctx: &Context, device_id: &str, now: u64) -> Result<(), String> {
    let waiting = ctx.tasks.waiting(device_id)?;
    let reading = if waiting.tasks.is_empty() {
        None
    } else {
        Some(ctx.driver.read(device_id).map_err(|e| e.to_string()))
    };
    let answered = matches!(reading, Some(Ok(_)));
    let state = match &reading {
        Some(Ok(r)) => {
            crate::resources::observed(ctx, device_id, r);
            Some(crate::question::digest(&format!(
                "{:?}|{:?}",
                r.online, r.values
            )))
        }
        _ => None,
    };
    let changed = answered && state != waiting.last_state;
    // The first failure is shown on every task; later ones only count.
    let first_failure = reading.as_ref().is_some_and(Result::is_err) && waiting.failed_streak == 0;
    let reads_now = waiting.reads + u64::from(answered);

    // Look at the tasks whose turn it is, and note what becomes of them:
    // `Some` stays waiting with a new check time, `None` leaves the set.
    let mut updates: BTreeMap<String, Option<Waiter>> = BTreeMap::new();
    if let Some(reading) = &reading {
        let due: Vec<String> = waiting
            .tasks
            .iter()
            .filter(|(_, w)| changed || first_failure || w.check_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let records = ctx.tasks.load_many(&due)?;
        for (id, record) in due.iter().zip(records) {
            let base = waiting.tasks[id].base;
            let update = match record {
                None => None,
                Some(_) => {
                    let reads = u32::try_from(reads_now.saturating_sub(base)).unwrap_or(u32::MAX);
                    let seen = reading.as_ref().map_err(String::as_str);
                    ctx.tasks
                        .update(id, now, |t| t.observe(now, seen, reads))?
                        .filter(|(t, _)| t.waits_on_device())
                        .map(|(t, _)| Waiter {
                            check_at: t.next_check_ms(now),
                            base,
                        })
                }
            };
            updates.insert(id.clone(), update);
        }
    }

    let poll = ctx.settings.timing.poll_interval_ms;
    let failed_streak = if answered || reading.is_none() {
        0
    } else {
        waiting.failed_streak + 1
    };
    let next_read = next_grid_read(device_id, now, poll, failed_streak);
    let leaves_empty = waiting
        .tasks
        .keys()
        .all(|id| matches!(updates.get(id), Some(None)));
    if leaves_empty {
        // Unschedule first: a task that joins after this finds no wake and
        // schedules one; one that joins before is seen by the update below.
        host::unschedule(&[device_wake_id(device_id)])?;
    }
    let next = ctx.tasks.update_waiting(device_id, |w| {
        w.reads += u64::from(answered);
        w.failed_streak = failed_streak;
        if answered {
            w.last_state = state.clone();
        }
        for (id, update) in &updates {
            match update {
                Some(waiter) if w.tasks.contains_key(id) => {
                    w.tasks.insert(id.clone(), *waiter);
                }
                Some(_) => {}
                None => {
                    w.tasks.remove(id);
                }
            }
        }
        if w.tasks.is_empty() {
            w.wake_at = None;
            return None;
        }
        // The next read, or earlier if a task's check is due before it.
        let at = w
            .tasks
            .values()
            .map(|t| t.check_at)
            .filter(|at| *at > now)
            .fold(next_read, u64::min);
        w.wake_at = Some(at);
        Some(at)
    })?;
    match next {
        Some(at) => host::schedule(&device_wake_id(device_id), device_id, at)?,
        // Emptied by someone else meanwhile: one more (empty) tick takes the
        // careful way out above rather than racing a task that joins now.
        None if !leaves_empty => host::schedule(&device_wake_id(device_id), device_id, next_read)?,
        None => {}
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
