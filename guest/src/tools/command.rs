//! The verified command shared by `set_power_mode`, `set_temperature` and
//! `set_fan`: validate against the device, run the safety gate, store the
//! task, send, and hand the task back. Nothing is sent unless every check
//! before it passed.

use super::args::Args;
use super::{Context, Failure, Output};
use crate::driver::{DriverError, Reading};
use crate::gate::{self, Readability, Rules};
use crate::host;
use crate::model::{Field, Value};
use crate::task::{FieldState, TaskRecord};

/// A command as a tool parsed it from its arguments.
pub struct Command<'a> {
    pub tool: &'static str,
    pub device_id: &'a str,
    pub fields: Vec<(Field, Value)>,
    pub confirm: bool,
}

/// Reads an optional choice argument into a command field.
pub fn choice_field(
    args: &Args<'_>,
    key: &str,
    field: Field,
    into: &mut Vec<(Field, Value)>,
) -> Result<(), Failure> {
    if let Some(text) = args.string(key).map_err(Failure::Tool)? {
        into.push((field, Value::Choice(text.to_string())));
    }
    Ok(())
}

/// The `task_id` argument, which must look like an id a command returned.
pub fn task_id_argument<'a>(args: &Args<'a>) -> Result<&'a str, Failure> {
    let id = args.required_string("task_id").map_err(Failure::Tool)?;
    let well_formed = id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if well_formed {
        Ok(id)
    } else {
        Err(Failure::Tool(format!(
            "malformed task_id {id:?}: a task id is the 32-character hex string a command returned"
        )))
    }
}

pub fn unknown_task(id: &str) -> Failure {
    Failure::Tool(format!(
        "unknown task_id {id:?}: no such task (ended tasks are removed after their TTL)"
    ))
}

/// Runs a verified command.
pub fn run(ctx: &Context, command: Command<'_>) -> Result<Output, Failure> {
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
    if !reasons.is_empty() && !confirm {
        return Err(Failure::Tool(format!(
            "needs confirmation; nothing was sent: {}. Ask the user, and if they agree call {tool} again with confirm: true",
            reasons.join("; ")
        )));
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
    let now = host::now_ms();
    let mut record = TaskRecord::new(
        host::random_id(),
        tool,
        device_id,
        states,
        ctx.settings.timing,
        now,
    );
    // If the runner stops before the send below is recorded, this wake lets
    // the scheduler re-send (commands are absolute, so that is safe). It
    // lies past the send's own timeout so it never races a send in flight.
    let recovery_wake = now + ctx.settings.http_timeout_ms + ctx.settings.timing.poll_interval_ms;
    ctx.tasks
        .create(&record, recovery_wake)
        .map_err(Failure::Internal)?;
    supersede_earlier(ctx, &record, now)?;

    let sent = ctx.driver.send(device_id, &pairs);
    let now = host::now_ms();
    let refused = match &sent {
        Ok(_) | Err(DriverError::Unreachable(_)) => None,
        Err(e) => Some(e.to_string()),
    };
    let (stored, _) = ctx
        .tasks
        .update(&record.id, now, |t| match &sent {
            Ok(accepted) => t.mark_sent(now, accepted.request_id.clone()),
            Err(DriverError::Unreachable(why)) => t.mark_sent_unconfirmed(now, why),
            Err(e) => t.mark_not_sent(now, &e.to_string()),
        })
        .map_err(Failure::Internal)?
        .ok_or_else(|| Failure::Internal(format!("task {} vanished while sending", record.id)))?;
    if let Some(why) = refused {
        return Err(Failure::Tool(format!("{why}; the command was not applied")));
    }
    record = stored;
    Ok(Output::Task(Box::new(record)))
}

/// Checks each value against what the device accepts. Every problem is
/// reported at once, so one retry can fix them all.
fn validate(
    ctx: &Context,
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
fn probe(ctx: &Context, device_id: &str) -> Result<(Option<Reading>, Readability), Failure> {
    match ctx.driver.read(device_id) {
        Ok(reading) => {
            let fields = reading.values.keys().copied().collect();
            if let Err(e) = ctx.tasks.remember_readable(
                device_id,
                reading.values.keys().copied().collect(),
                host::now_ms(),
            ) {
                host::log(
                    host::Level::Warn,
                    &format!("remembering readable fields: {e}"),
                );
            }
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
                .tasks
                .remembered_readable(device_id)
                .map_err(Failure::Internal)?;
            Ok(match remembered {
                Some(fields) => (None, Readability::Known(fields)),
                None => (None, Readability::Unknown(e.to_string())),
            })
        }
    }
}

/// Ends earlier unfinished tasks on the same fields of the same device: they
/// would wait for a value that is no longer coming.
fn supersede_earlier(ctx: &Context, record: &TaskRecord, now: u64) -> Result<(), Failure> {
    let fields: Vec<Field> = record.fields.iter().map(|f| f.field).collect();
    let earlier = ctx
        .tasks
        .claim_fields(&record.device_id, &fields, &record.id)
        .map_err(Failure::Internal)?;
    for old in earlier {
        ctx.tasks
            .update(&old, now, |t| t.supersede(now, &record.id))
            .map_err(Failure::Internal)?;
    }
    Ok(())
}
