//! The verified command shared by `set_power_mode`, `set_temperature` and
//! `set_fan`: validate against the device, run the safety gate, store the
//! task, send, and hand the task back. Nothing is sent unless every check
//! before it passed.
//!
//! Once the API takes a command, it joins its device's timeline
//! ([`crate::device`]): earlier tasks asking for another value of one of its
//! fields are superseded there, and the task waits on the device's reads.

use super::{Caller, Context, Failure, Output};
use crate::audit::{self, Entry, Outcome};
use crate::device::{Commanded, DeviceModel, Recorded, Waiter};
use crate::driver::{DriverError, Reading};
use crate::gate::{self, Readability, Rules};
use crate::model::{Field, Value};
use crate::platform::schedule_one;
use crate::question::{self, Question, QuestionKind, Reply};
use crate::store::{clustered_task_id, device_wake_id};
use crate::task::{FieldState, Standing, TaskRecord, Timing, Verdict, next_grid_read};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;

/// A command as a tool parsed it from its arguments.
pub struct Command<'a> {
    pub tool: &'static str,
    pub device_id: &'a str,
    pub fields: Vec<(Field, Value)>,
    pub confirm: bool,
}

/// Runs a verified command.
pub fn run(
    ctx: &Context<'_>,
    command: Command<'_>,
    caller: &Caller<'_>,
) -> Result<Output, Failure> {
    let Command {
        tool,
        device_id,
        fields,
        confirm,
    } = command;
    let states = validate(ctx, device_id, fields)?;
    let pairs: Vec<(Field, Value)> = states.iter().map(|s| (s.field, s.sent.clone())).collect();

    let (reading, readability) = probe(ctx, device_id)?;
    let rules = Rules {
        min_temperature: ctx.settings.safe_min_temperature,
        max_temperature: ctx.settings.safe_max_temperature,
    };
    let reasons = gate::reasons(&rules, &pairs, &readability);
    let mut held_for_confirmation = None;
    if !reasons.is_empty() && !confirm {
        let question = format!(
            "{tool} on {device_id} ({}): {}. Send it anyway?",
            describe(&pairs),
            reasons.join("; ")
        );
        let not_sent = |outcome: Outcome, message: String| {
            let now = ctx.now_ms();
            let entry = Entry {
                id: ctx.platform.random_id(),
                device_id: device_id.to_string(),
                tool: tool.to_string(),
                client: caller.info.clone(),
                arguments: caller.arguments.clone(),
                outcome,
                sent: None,
                observed: None,
                reason: Some("gate".to_string()),
                message: message.clone(),
                accepted_at_ms: now,
                sent_at_ms: None,
                ended_at_ms: now,
            };
            // Nothing was sent either way; a record that cannot be
            // written is logged, and the caller still hears why.
            if let Err(e) = audit::append(ctx.platform, &entry) {
                ctx.platform.log(
                    crate::platform::Level::Warn,
                    &format!("audit trail: a {tool} on {device_id} not sent, not recorded: {e}"),
                );
            }
            Failure::Tool(message)
        };
        match confirmation(caller, tool, device_id, &pairs, &question) {
            Confirmation::OnTask => held_for_confirmation = Some(question),
            Confirmation::Given => {}
            Confirmation::Ask(questions) => return Ok(Output::Questions(questions)),
            Confirmation::Declined => {
                return Err(not_sent(
                    Outcome::Declined,
                    format!("not confirmed, so nothing was sent: {}", reasons.join("; ")),
                ));
            }
            Confirmation::Impossible => {
                return Err(not_sent(
                    Outcome::Gated,
                    format!(
                        "needs confirmation; nothing was sent: {}. Ask the user, and if they agree call {tool} again with confirm: true",
                        reasons.join("; ")
                    ),
                ));
            }
        }
    }

    let states: Vec<FieldState> = states
        .into_iter()
        .map(|mut state| {
            state.baseline = reading
                .as_ref()
                .and_then(|r| r.values.get(&state.field).cloned());
            state.readable = match &readability {
                Readability::Known(fields) => fields.contains(&state.field),
                // Confirmed without knowing: watch for it, and let the
                // settle window decide if it never shows up.
                Readability::Unknown(_) => true,
            };
            state
        })
        .collect();
    let now = ctx.now_ms();
    let mut record = TaskRecord::new(
        clustered_task_id(device_id, &ctx.platform.random_id()),
        tool,
        device_id,
        states,
        ctx.settings.timing,
        now,
    );
    record.can_ask = caller.client.tasks && caller.client.elicitation;
    record.client = Some(caller.info.clone());
    record.arguments = Some(caller.arguments.clone());
    if let Some(question) = held_for_confirmation {
        // Nothing is sent until the answer comes through tasks/update; the
        // only wake is the deadline, where an unanswered task expires.
        // It joins the device's timeline only once it is sent.
        record.await_confirmation(now, question);
        let deadline = record.deadline_ms();
        ctx.store
            .create(&record, deadline)
            .map_err(Failure::Internal)?;
        return Ok(Output::Task(Box::new(record)));
    }
    // If the runner stops before the send below is recorded, this wake lets
    // the scheduler re-send (commands are absolute, so that is safe). It
    // lies past the send's own timeout so it never races a send in flight.
    ctx.store
        .create_admitted(&record, recovery_wake(ctx, now), admission(ctx, &record))
        .map_err(Failure::Internal)??;
    record = send_and_record(ctx, &record)?;
    Ok(Output::Task(Box::new(record)))
}

/// If the runner stops before a send is recorded, a wake at this time lets
/// the scheduler send again (commands are absolute, so that is safe). It
/// lies past the send's own timeout so it never races a send in flight.
pub fn recovery_wake(ctx: &Context<'_>, now: u64) -> u64 {
    now + ctx.settings.http_timeout_ms + ctx.settings.timing.poll_interval_ms
}

/// The command's fields as `name value, …`.
fn describe(pairs: &[(Field, Value)]) -> String {
    pairs
        .iter()
        .map(|(f, v)| format!("{f} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a gated command gets its confirmation.
enum Confirmation {
    /// The client follows tasks and answers elicitations: hold the command
    /// on a task in `input_required`.
    OnTask,
    /// An MRTR retry carried a yes for exactly this command.
    Given,
    /// Ask with MRTR (the `InputRequiredResult` body).
    Ask(Json),
    /// An MRTR retry carried a no.
    Declined,
    /// The client can answer no question: it must pass `confirm: true`.
    Impossible,
}

/// The MRTR key of the confirmation question.
const CONFIRM_KEY: &str = "confirm";

fn confirmation(
    caller: &Caller<'_>,
    tool: &str,
    device_id: &str,
    pairs: &[(Field, Value)],
    message: &str,
) -> Confirmation {
    let client = caller.client;
    if client.tasks && client.elicitation {
        return Confirmation::OnTask;
    }
    if !client.elicitation {
        return Confirmation::Impossible;
    }
    // The state names the exact command, so a yes given for one command
    // cannot be replayed onto another.
    let state = format!(
        "confirm:{}",
        question::digest(&format!("{tool}|{device_id}|{}", describe(pairs)))
    );
    let answer = caller
        .input_responses
        .and_then(|r| r.get(CONFIRM_KEY))
        .filter(|_| caller.request_state == Some(state.as_str()));
    match answer.map(|a| question::read_reply(QuestionKind::Confirm, a)) {
        Some(Reply::Yes) => Confirmation::Given,
        Some(_) => Confirmation::Declined,
        None => {
            let question = Question {
                key: CONFIRM_KEY.to_string(),
                kind: QuestionKind::Confirm,
                message: message.to_string(),
            };
            Confirmation::Ask(json!({
                "inputRequests": { CONFIRM_KEY: question.input_request() },
                "requestState": state,
            }))
        }
    }
}

/// Sends a stored task's command and records what the API said. A refusal
/// (4xx, denied, bad credentials) ends the task as not sent and is a tool
/// error; no answer at all is not a refusal: the command is sent again
/// later. Once the API took it, the command joins its device's timeline
/// and the task waits on the device's reads.
pub fn send_and_record(ctx: &Context<'_>, record: &TaskRecord) -> Result<TaskRecord, Failure> {
    let pairs: Vec<(Field, Value)> = record
        .fields
        .iter()
        .map(|f| (f.field, f.sent.clone()))
        .collect();
    let sent = ctx.driver.send(&record.device_id, &pairs);
    let now = ctx.now_ms();
    let refused = match &sent {
        Ok(_) | Err(DriverError::Unreachable(_)) => None,
        Err(e) => Some(e.to_string()),
    };
    let stored = match &sent {
        Ok(accepted) => join_timeline(ctx, record, now, &accepted.request_id)?,
        Err(why) => {
            let (stored, _) = ctx
                .store
                .update(&record.id, now, |t| match why {
                    DriverError::Unreachable(why) => t.retry_send_later(now, why),
                    refusal => t.mark_not_sent(now, &refusal.to_string()),
                })
                .map_err(Failure::Internal)?
                .ok_or_else(|| vanished(record))?;
            stored
        }
    };
    match refused {
        Some(why) => Err(Failure::Tool(format!("{why}; the command was not applied"))),
        None => Ok(stored),
    }
}

/// Counts a command against its device's rate limit (`max_commands_per_
/// minute`), or refuses it, saying when the next may go; nothing is sent.
fn admit(ctx: &Context<'_>, record: &TaskRecord) -> Result<(), Failure> {
    ctx.store
        .update_device(&record.device_id, admission(ctx, record))
        .map_err(Failure::Internal)?
}

/// The change to a device's model that admits `record`'s command under
/// its rate limit, or the refusal: [`admit`] applies it on its own, a new
/// task's creation in the same commit as the task.
fn admission<'r>(
    ctx: &Context<'_>,
    record: &'r TaskRecord,
) -> impl FnMut(&mut DeviceModel) -> Result<(), Failure> + 'r {
    let now = ctx.now_ms();
    let limit = ctx.settings.max_commands_per_minute;
    let values: BTreeMap<Field, Value> = record
        .fields
        .iter()
        .map(|f| (f.field, f.sent.clone()))
        .collect();
    move |model| {
        model
            .admit_command(now, limit, &values)
            .map_err(|wait_ms| rate_limited(&record.device_id, limit, wait_ms))
    }
}

/// Why a command over its device's rate limit was not sent, and when the
/// next may go.
fn rate_limited(device_id: &str, limit: u32, wait_ms: u64) -> Failure {
    Failure::Tool(format!(
        "{device_id} has taken {limit} commands in the last minute, the most it takes (max_commands_per_minute); nothing was sent. The next one may be sent in {} s",
        wait_ms.div_ceil(1000)
    ))
}

/// A task gone from the store while its command was being sent.
fn vanished(record: &TaskRecord) -> Failure {
    Failure::Internal(format!("task {} vanished while sending", record.id))
}

/// Sends a command that waited for a person (a confirmation, or "send it
/// again"): the device may have changed meanwhile, so it is read again
/// first and that reading becomes the command's baseline, as for a new
/// command.
pub fn send_after_answer(ctx: &Context<'_>, record: &TaskRecord) -> Result<TaskRecord, Failure> {
    let reading = match probe(ctx, &record.device_id) {
        Ok((reading, _)) => reading,
        // A device that cannot be read now is read after the send.
        Err(Failure::Tool(_)) => None,
        Err(other) => return Err(other),
    };
    match admit(ctx, record) {
        Ok(()) => {}
        Err(Failure::Tool(why)) => {
            let now = ctx.now_ms();
            ctx.store
                .update(&record.id, now, |t| t.mark_not_sent(now, &why))
                .map_err(Failure::Internal)?;
            return Err(Failure::Tool(why));
        }
        Err(other) => return Err(other),
    }
    let mut fresh = record.clone();
    if let Some(reading) = reading {
        let now = ctx.now_ms();
        let updated = ctx
            .store
            .update(&record.id, now, |t| {
                let mut changed = false;
                for field in &mut t.fields {
                    let seen = reading.values.get(&field.field).cloned();
                    if seen.is_some() && field.baseline != seen {
                        field.baseline = seen;
                        changed = true;
                    }
                }
                changed
            })
            .map_err(Failure::Internal)?;
        if let Some((record, _)) = updated {
            fresh = record;
        }
    }
    send_and_record(ctx, &fresh)
}

/// Records a command the API just took in its device's timeline, with the
/// task waiting on the device's reads; ends the earlier tasks it supersedes,
/// and makes sure the device's tick comes in time for the first read this
/// command needs. The task records the send (its place in the timeline,
/// and how long the device usually takes, if that is known) in the same
/// commit as the device's model; returns the task as stored.
fn join_timeline(
    ctx: &Context<'_>,
    record: &TaskRecord,
    now: u64,
    request_id: &Option<String>,
) -> Result<TaskRecord, Failure> {
    let command: Vec<Commanded> = record
        .fields
        .iter()
        .map(|f| Commanded {
            field: f.field,
            value: f.sent.clone(),
            comparison: f.comparison,
            baseline: f.baseline.clone(),
        })
        .collect();
    let timing = &ctx.settings.timing;
    let device_id = &record.device_id;
    let (joined, stored) = ctx
        .store
        .update_device_and_task(
            device_id,
            &record.id,
            now,
            |model| join(model, record, &command, now, timing),
            |joined, task| {
                task.mark_sent(now, request_id.clone(), joined.recorded.seq, joined.usually)
            },
        )
        .map_err(Failure::Internal)?
        .ok_or_else(|| vanished(record))?;
    // The task's own wake (the recovery wake of its send) is no longer
    // needed: the device's tick looks after it now. The device's wake is
    // written first, so a crash between the two leaves a wake too many
    // (harmless), never none.
    if let Some(at) = joined.reschedule {
        schedule_one(ctx.platform, &device_wake_id(device_id), device_id, at)
            .map_err(Failure::Internal)?;
    }
    ctx.platform
        .unschedule(std::slice::from_ref(&record.id))
        .map_err(Failure::Internal)?;
    for old in &joined.recorded.superseded {
        ctx.store
            .update(old, now, |t| t.supersede(now, &record.id))
            .map_err(Failure::Internal)?;
    }
    Ok(stored)
}

/// What a command joining its device's timeline did to the model.
struct Joined {
    /// Its place in the timeline, and the earlier tasks it supersedes.
    recorded: Recorded,
    /// When the device's tick must now come, if sooner than planned.
    reschedule: Option<u64>,
    /// How long the device usually takes to apply it, if that is known.
    usually: Option<u64>,
}

/// Records `record`'s send in the device's model, with the task waiting on
/// the device's reads, and plans the read that looks at it first.
fn join(
    model: &mut DeviceModel,
    record: &TaskRecord,
    command: &[Commanded],
    now: u64,
    timing: &Timing,
) -> Joined {
    let device_id = &record.device_id;
    let recorded = model.record_send(&record.id, command, now, timing);
    let horizons = model.horizons(record.fields.iter().map(|f| f.field), now, timing);
    let grid = next_grid_read(device_id, now, timing.poll_interval_ms, 0);
    // A command whose values the device already shows, with no earlier
    // command left that could change them, is looked at on the next read:
    // an unchanged reading would otherwise pass it by until its patience
    // ran out (the device's whole delay).
    let shown_already = record.fields.iter().all(|f| {
        model.standing(f.field, &f.sent, recorded.seq, now, now, timing) == Standing::Landed
    });
    let check_at = if shown_already {
        grid
    } else {
        // Shown, but an earlier command for another value may still land:
        // looked at when that one's time runs out.
        let unblocked_at = model.unblocked_at(
            record.fields.iter().map(|f| (f.field, &f.sent)),
            recorded.seq,
            now,
            timing,
        );
        horizons.patience_at.min(unblocked_at.unwrap_or(u64::MAX))
    }
    .min(record.deadline_ms());
    let base = model.reads;
    model.waiting.insert(
        record.id.clone(),
        Waiter {
            check_at,
            base,
            deadline: record.deadline_ms(),
        },
    );
    let read_at = model.next_read_ms(now, timing, grid).min(check_at);
    let reschedule = match model.wake_at {
        Some(at) if at > now && at <= read_at => None,
        _ => {
            model.wake_at = Some(read_at);
            Some(read_at)
        }
    };
    Joined {
        recorded,
        reschedule,
        usually: horizons.typical_ms,
    }
}

/// Checks each value against what the device accepts. Every problem is
/// reported at once, so one retry can fix them all.
fn validate(
    ctx: &Context<'_>,
    device_id: &str,
    fields: Vec<(Field, Value)>,
) -> Result<Vec<FieldState>, Failure> {
    let specs = ctx.driver.specs(device_id).map_err(|e| {
        Failure::Tool(format!(
            "could not learn what {device_id} accepts: {e}; nothing was sent"
        ))
    })?;
    let mut problems = Vec::new();
    let mut states = Vec::new();
    for (field, value) in fields {
        let Some(spec) = specs.iter().find(|s| s.field == field) else {
            problems.push(format!("{field} cannot be set on {device_id}"));
            continue;
        };
        match spec.allowed.check(field, &value) {
            Ok(sent) => states.push(FieldState {
                field,
                sent,
                baseline: None,
                observed: None,
                readable: true,
                comparison: spec.comparison,
                verdict: Verdict::Waiting,
            }),
            Err(problem) => problems.push(problem),
        }
    }
    if problems.is_empty() {
        Ok(states)
    } else {
        Err(Failure::Tool(format!(
            "{}; nothing was sent",
            problems.join("; ")
        )))
    }
}

/// Reads the device before commanding it: the reading is the baseline that
/// tells "never moved" from "moved elsewhere", and it shows which fields can
/// be read back at all.
fn probe(ctx: &Context<'_>, device_id: &str) -> Result<(Option<Reading>, Readability), Failure> {
    let fresh = ctx
        .store
        .recent_reading(device_id, ctx.now_ms(), ctx.settings.probe_max_age_ms)
        .map_err(Failure::Internal)?;
    if let Some(reading) = fresh {
        let fields = reading.values.keys().copied().collect();
        return Ok((Some(reading), Readability::Known(fields)));
    }
    match ctx.driver.read(device_id) {
        Ok(reading) => {
            let fields = reading.values.keys().copied().collect();
            super::readings::observed(ctx, device_id, &reading);
            Ok((Some(reading), Readability::Known(fields)))
        }
        Err(DriverError::UnknownDevice(id)) => Err(Failure::Tool(format!(
            "unknown device {id:?}; list_devices shows the devices. Nothing was sent"
        ))),
        Err(e @ (DriverError::Denied(_) | DriverError::Unauthorized(_))) => {
            Err(Failure::Tool(format!("{e}; nothing was sent")))
        }
        Err(e) => {
            let remembered = ctx
                .store
                .remembered_readable(device_id)
                .map_err(Failure::Internal)?;
            Ok(match remembered {
                Some(fields) => (None, Readability::Known(fields)),
                None => (None, Readability::Unknown(e.to_string())),
            })
        }
    }
}
