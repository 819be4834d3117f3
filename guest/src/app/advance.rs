//! What the runner's scheduler wakes the plugin for.
//!
//! Two kinds of wake arrive:
//! - a device's tick (`device:<id>`): one sensor read serves every task
//!   waiting on that device. The reading first updates the device's model
//!   (which command landed, how long it took); then the tasks whose turn it
//!   is are judged against the model. When the device shows nothing new,
//!   only tasks whose own check is due are loaded, which keeps very many
//!   waiting tasks cheap. The next read is placed where the model expects
//!   the next change.
//! - a task's own wake: a send to retry, a person's answer that never came,
//!   or an ended task whose record may go.

use super::Context;
use super::Failure;
use super::command::{recovery_wake, send_and_record};
use super::readings::observed;
use crate::device::Waiter;
use crate::model::Field;
use crate::platform::{Level, schedule_one};
use crate::store::{Aftermath, Loaded, TaskChange, device_of_wake, device_wake_id};
use crate::task::Standing;
use crate::task::{FailureReason, Horizons, Sight, Stage, TaskRecord, backoff, next_grid_read};
use std::collections::BTreeMap;

/// Polls between reads of a device watched with no task waiting.
const WATCH_GAP_POLLS: u64 = 2;

/// A task a tick judges, with what the device's model says of it.
struct Judged {
    id: String,
    /// The device's read count when the task joined it.
    base: u64,
    /// Reads since the task's command was sent, this one included.
    reads: u32,
    standings: BTreeMap<Field, Standing>,
    horizons: Horizons,
    /// When an earlier command blocking this one runs out of time.
    unblocked_at: Option<u64>,
}

/// Handles the wakes `ids` of group `group` (a device). Every wake is either
/// scheduled again or unscheduled before this returns; if this fails half
/// way, the runner wakes the rest again after its lease.
pub fn run(ctx: &Context<'_>, group: &str, ids: &[String]) -> Result<(), String> {
    let now = ctx.now_ms();
    let (ticks, tasks): (Vec<&String>, Vec<&String>) =
        ids.iter().partition(|id| device_of_wake(id).is_some());
    if !tasks.is_empty() {
        let tasks: Vec<String> = tasks.into_iter().cloned().collect();
        advance_tasks(ctx, now, &tasks)?;
    }
    if !ticks.is_empty() {
        tick(ctx, group)?;
    }
    Ok(())
}

/// Tasks woken on their own.
fn advance_tasks(ctx: &Context<'_>, now: u64, ids: &[String]) -> Result<(), String> {
    let records = ctx.store.load_many(ids)?;
    for (id, record) in ids.iter().zip(records) {
        let Some(record) = record else {
            ctx.platform.unschedule(std::slice::from_ref(id))?;
            continue;
        };
        if record.is_terminal() {
            if now >= record.purge_at_ms() {
                ctx.store.purge(id)?;
            } else {
                schedule_one(ctx.platform, id, &record.device_id, record.purge_at_ms())?;
            }
        } else if record.stage == Stage::Sending {
            resend(ctx, &record)?;
        } else if record.waits_on_device() {
            // Woken by a wake from before it was sent: its device's tick
            // looks after it from now on.
            keep_waiting(ctx, &record, now)?;
        } else {
            // Waiting for a person: only the TTL can end it here.
            let outcome = ctx.store.update(id, now, |t| t.expire_if_due(now))?;
            if let Some((task, false)) = outcome
                && let Some(at) = task.next_wake_ms(now)
            {
                schedule_one(ctx.platform, id, &task.device_id, at)?;
            }
        }
    }
    Ok(())
}

/// Makes sure a sent task is in its device's waiting set and the device's
/// tick is coming.
fn keep_waiting(ctx: &Context<'_>, record: &TaskRecord, now: u64) -> Result<(), String> {
    let device_id = &record.device_id;
    let at = ctx.store.update_device(device_id, |model| {
        let base = model.reads;
        model
            .waiting
            .entry(record.id.clone())
            // Its check may have been set for later while it was not yet
            // marked sent; the device may show its values by now.
            .and_modify(|w| w.check_at = w.check_at.min(now))
            .or_insert(Waiter {
                check_at: now,
                base,
                deadline: record.deadline_ms(),
            });
        let at = now + ctx.settings.timing.dense_read_ms;
        model.wake_at = Some(model.wake_at.map_or(at, |w| w.min(at)));
        model.wake_at
    })?;
    // The device's wake first: a crash between the two leaves one wake too
    // many (harmless), never none.
    if let Some(at) = at {
        schedule_one(ctx.platform, &device_wake_id(device_id), device_id, at)?;
    }
    ctx.platform.unschedule(std::slice::from_ref(&record.id))
}

/// One read of a device for every task waiting on it.
fn tick(ctx: &Context<'_>, device_id: &str) -> Result<(), String> {
    let timing = ctx.settings.timing;
    let model = ctx.store.device(device_id)?;
    let reading = if model.waiting.is_empty() && !model.watching(ctx.now_ms()) {
        None
    } else {
        Some(ctx.driver.read(device_id).map_err(|e| e.to_string()))
    };
    // The reading stands for the moment it came back.
    let now = ctx.now_ms();
    if let Some(Ok(r)) = &reading {
        observed(ctx, device_id, r);
    }
    let seen_reading = reading.as_ref().map(|r| r.as_ref().map_err(String::as_str));
    let mut seen = model.clone();
    if let Some(r) = seen_reading {
        seen.take_read(r, now, &timing);
    }
    let changed = matches!(reading, Some(Ok(_))) && seen.last_state != model.last_state;
    // The first failure is shown on every task; later ones only count.
    let first_failure = matches!(reading, Some(Err(_))) && model.failed_streak == 0;

    // Look at the tasks whose turn it is, and note what becomes of them:
    // `Some` stays waiting with a new check time, `None` leaves the set.
    let mut updates: BTreeMap<String, Option<Waiter>> = BTreeMap::new();
    // Commands that tasks gave up on as not applied: watched a while longer.
    let mut given_up = Vec::new();
    // The audit records and own wakes of the tasks judged, written together
    // once every task has been judged.
    let mut after = Aftermath::default();
    if let Some(sight_reading) = seen_reading {
        let due: Vec<String> = seen
            .waiting
            .iter()
            .filter(|(_, w)| changed || first_failure || w.check_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let records = ctx.store.load_many_for_update(&due)?;
        // The tasks to judge, each with what the model says of it, judged
        // together below: their changes are written in one commit.
        let mut judged: Vec<Judged> = Vec::new();
        let mut loaded: Vec<Loaded> = Vec::new();
        for (id, record) in due.iter().zip(records) {
            let base = seen.waiting[id].base;
            match record {
                None => {
                    updates.insert(id.clone(), None);
                }
                // Joined its device a moment before the record of its send
                // lands (two writes, one after the other), or a crash fell
                // between them: nothing to judge yet, and its place stays.
                // The recovery wake the join took away comes back, so the
                // task is woken even if that record never lands. It is
                // counted from the record's last write, not from now, so
                // ticks that keep coming cannot keep pushing it away. And
                // the next read looks at it again, not its own check (which
                // may be far): this reading may already show what it asks
                // for, and later ones then show nothing new.
                Some(Loaded { record, .. }) if record.stage == Stage::Sending => {
                    let at = recovery_wake(ctx, record.updated_at_ms);
                    schedule_one(ctx.platform, id, &record.device_id, at)?;
                    let waiter = Waiter {
                        check_at: now,
                        ..seen.waiting[id]
                    };
                    updates.insert(id.clone(), Some(waiter));
                }
                Some(task) => {
                    let record = &task.record;
                    let reads = u32::try_from(seen.reads.saturating_sub(base)).unwrap_or(u32::MAX);
                    let sent = record.sent_at_ms().unwrap_or(now);
                    let fields = || record.fields.iter().map(|f| f.field);
                    let standings: BTreeMap<Field, Standing> = record
                        .fields
                        .iter()
                        .map(|f| {
                            let standing =
                                seen.standing(f.field, &f.sent, record.seq, sent, now, &timing);
                            (f.field, standing)
                        })
                        .collect();
                    let horizons = seen.horizons(fields(), sent, &timing);
                    let blocked = standings.values().any(|s| *s == Standing::Blocked);
                    let unblocked_at = if blocked {
                        seen.unblocked_at(
                            record.fields.iter().map(|f| (f.field, &f.sent)),
                            record.seq,
                            now,
                            &timing,
                        )
                    } else {
                        None
                    };
                    judged.push(Judged {
                        id: id.clone(),
                        base,
                        reads,
                        standings,
                        horizons,
                        unblocked_at,
                    });
                    loaded.push(task);
                }
            }
        }
        let changes: Vec<(Loaded, TaskChange<'_>)> = loaded
            .into_iter()
            .zip(&judged)
            .map(|(task, judged)| {
                let sight = Sight {
                    reading: sight_reading,
                    reads: judged.reads,
                    standings: &judged.standings,
                    horizons: judged.horizons,
                };
                let change: TaskChange<'_> = Box::new(move |t| t.observe(now, &sight));
                (task, change)
            })
            .collect();
        let stored = ctx.store.update_many_deferred(changes, now, &mut after)?;
        for (judged, stored) in judged.iter().zip(stored) {
            if let Some((t, false)) = &stored
                && t.is_terminal()
            {
                // Ended earlier, yet still waiting here: the call that
                // ended it stopped before it was taken off this device (a
                // crash). Its removal below may otherwise be the last
                // anyone sees of it, so its purge is planned again (a wake
                // replaces an equal one).
                after.wake(t, now);
            }
            if let Some((t, true)) = &stored
                && t.failure.as_ref().map(|f| f.reason) == Some(FailureReason::NotApplied)
            {
                given_up.push(t.seq);
            }
            let update = stored
                .filter(|(t, _)| t.waits_on_device())
                .map(|(t, _)| Waiter {
                    // Blocked by an earlier command: looked at again when
                    // that one's time runs out, as unchanged reads would
                    // pass it by until its own check.
                    check_at: t
                        .next_check_ms(now, &judged.horizons)
                        .min(judged.unblocked_at.unwrap_or(u64::MAX)),
                    base: judged.base,
                    deadline: t.deadline_ms(),
                });
            updates.insert(judged.id.clone(), update);
        }
    }
    // Before the device's model lets go of the tasks: if this fails, the
    // tick runs again after its lease, finds the tasks it ended still
    // waiting, and plans their wakes again (above).
    ctx.store.finish(after)?;

    let leaves_empty = seen
        .waiting
        .keys()
        .all(|id| matches!(updates.get(id), Some(None)))
        && given_up.is_empty()
        && !seen.watching(now);
    if leaves_empty {
        // Unschedule first: a task that joins after this finds no wake and
        // schedules one; one that joins before is seen by the update below.
        ctx.platform.unschedule(&[device_wake_id(device_id)])?;
    }
    let next = ctx.store.update_device(device_id, |m| {
        // The same reading, taken into the freshest model (a command may
        // have joined since it was loaded).
        if let Some(r) = seen_reading {
            m.take_read(r, now, &timing);
        }
        for (id, update) in &updates {
            match update {
                Some(waiter) if m.waiting.contains_key(id) => {
                    m.waiting.insert(id.clone(), *waiter);
                }
                Some(_) => {}
                // Only the waiter this tick judged: one a resend put back
                // meanwhile belongs to a send this tick did not see.
                None if m.waiting.get(id) == seen.waiting.get(id) => {
                    m.waiting.remove(id);
                }
                None => {}
            }
        }
        if changed {
            // Joined while this reading was on its way: its check was set
            // against the model from before it, and the device may show its
            // values already. Unchanged reads would pass it by until that
            // check came; the next read judges it instead.
            for (id, waiter) in m.waiting.iter_mut() {
                if !seen.waiting.contains_key(id) {
                    waiter.check_at = waiter.check_at.min(now);
                }
            }
        }
        for seq in &given_up {
            m.watch(*seq, now + timing.settle_window_ms);
        }
        m.prune(now, &timing);
        let watching = m.watching(now);
        if m.waiting.is_empty() && !watching {
            m.wake_at = None;
            return None;
        }
        let grid = next_grid_read(device_id, now, timing.poll_interval_ms, m.failed_streak);
        let mut at = m.next_read_ms(now, &timing, grid);
        if m.waiting.is_empty() {
            // Only watching: now and then is enough.
            at = at.max(now + WATCH_GAP_POLLS * timing.poll_interval_ms);
        }
        if m.failed_streak > 0 {
            at = at.max(now + failure_wait(&timing, m.failed_streak));
        }
        // Earlier if a task's check is due before it.
        let at = m
            .waiting
            .values()
            .filter_map(|w| w.due_after(now))
            .fold(at, u64::min);
        m.wake_at = Some(at);
        Some(at)
    })?;
    match next {
        Some(at) => schedule_one(ctx.platform, &device_wake_id(device_id), device_id, at)?,
        // Emptied by someone else meanwhile: one more (empty) tick takes the
        // careful way out above rather than racing a task that joins now.
        None if !leaves_empty => {
            let at = next_grid_read(device_id, now, timing.poll_interval_ms, 0);
            schedule_one(ctx.platform, &device_wake_id(device_id), device_id, at)?
        }
        None => {}
    }
    Ok(())
}

/// How long to wait after `streak` reads in a row failed: a few quick
/// retries (a flaky endpoint often answers the next time, and a change may
/// be due), then the poll interval, doubling, so an API that is down is not
/// hammered.
fn failure_wait(timing: &crate::task::Timing, streak: u32) -> u64 {
    const QUICK_RETRIES: u32 = 3;
    if streak <= QUICK_RETRIES {
        backoff(timing.dense_read_ms, streak).min(timing.poll_interval_ms)
    } else {
        backoff(timing.poll_interval_ms, streak - QUICK_RETRIES)
    }
}

/// A task whose send was never recorded: the runner stopped between storing
/// it and hearing back from the API, or the API did not answer. Device
/// commands are absolute ("set 24", never "one warmer"), so sending again
/// cannot do harm, while not sending would silently drop a command the
/// caller was told about.
fn resend(ctx: &Context<'_>, record: &TaskRecord) -> Result<(), String> {
    ctx.platform.log(
        Level::Info,
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
