//! The verified command shared by `set_power_mode`, `set_temperature` and
//! `set_fan`: validate against the device, run the safety gate, store the
//! task, send, and hand the task back. Nothing is sent unless every check
//! before it passed.

use super::args::Args;
use super::{Context, Failure, Output};
use crate::bindings::settle::plugin::types::ClientContext;
use crate::driver::{DriverError, Reading};
use crate::gate::{self, Readability, Rules};
use crate::host;
use crate::model::{Field, Value};
use crate::question::{self, Question, QuestionKind, Reply};
use crate::task::{FieldState, TaskRecord};
use serde_json::{Value as Json, json};

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
pub fn run(ctx: &Context, command: Command<'_>, caller: &Caller<'_>) -> Result<Output, Failure> {
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
        match confirmation(caller, tool, device_id, &pairs, &question) {
            Confirmation::OnTask => held_for_confirmation = Some(question),
            Confirmation::Given => {}
            Confirmation::Ask(questions) => return Ok(Output::Questions(questions)),
            Confirmation::Declined => {
                return Err(Failure::Tool(format!(
                    "not confirmed, so nothing was sent: {}",
                    reasons.join("; ")
                )));
            }
            Confirmation::Impossible => {
                return Err(Failure::Tool(format!(
                    "needs confirmation; nothing was sent: {}. Ask the user, and if they agree call {tool} again with confirm: true",
                    reasons.join("; ")
                )));
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
    let now = host::now_ms();
    let mut record = TaskRecord::new(
        host::random_id(),
        tool,
        device_id,
        states,
        ctx.settings.timing,
        now,
    );
    record.can_ask = caller.client.tasks && caller.client.elicitation;
    if let Some(question) = held_for_confirmation {
        // Nothing is sent until the answer comes through tasks/update; the
        // only wake is the deadline, where an unanswered task expires.
        record.await_confirmation(now, question);
        let deadline = record.deadline_ms();
        ctx.tasks
            .create(&record, deadline)
            .map_err(Failure::Internal)?;
        supersede_earlier(ctx, &record, now)?;
        return Ok(Output::Task(Box::new(record)));
    }
    // If the runner stops before the send below is recorded, this wake lets
    // the scheduler re-send (commands are absolute, so that is safe). It
    // lies past the send's own timeout so it never races a send in flight.
    let recovery_wake = now + ctx.settings.http_timeout_ms + ctx.settings.timing.poll_interval_ms;
    ctx.tasks
        .create(&record, recovery_wake)
        .map_err(Failure::Internal)?;
    supersede_earlier(ctx, &record, now)?;
    record = send_and_record(ctx, &record)?;
    Ok(Output::Task(Box::new(record)))
}

/// The command's fields as `name value, …`.
fn describe(pairs: &[(Field, Value)]) -> String {
    pairs
        .iter()
        .map(|(f, v)| format!("{f} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Who is calling, and what they sent besides the arguments.
pub struct Caller<'a> {
    pub client: &'a ClientContext,
    /// MRTR answers on a retried call.
    pub input_responses: Option<&'a Json>,
    /// MRTR state on a retried call.
    pub request_state: Option<&'a str>,
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
/// error; no answer at all is not a refusal: the sensors will tell.
pub fn send_and_record(ctx: &Context, record: &TaskRecord) -> Result<TaskRecord, Failure> {
    let pairs: Vec<(Field, Value)> = record
        .fields
        .iter()
        .map(|f| (f.field, f.sent.clone()))
        .collect();
    let sent = ctx.driver.send(&record.device_id, &pairs);
    let now = host::now_ms();
    let refused = match &sent {
        Ok(_) | Err(DriverError::Unreachable(_)) => None,
        Err(e) => Some(e.to_string()),
    };
    let (stored, _) = ctx
        .tasks
        .update(&record.id, now, |t| match &sent {
            Ok(accepted) => t.mark_sent(now, accepted.request_id.clone()),
            Err(DriverError::Unreachable(why)) => t.retry_send_later(now, why),
            Err(e) => t.mark_not_sent(now, &e.to_string()),
        })
        .map_err(Failure::Internal)?
        .ok_or_else(|| Failure::Internal(format!("task {} vanished while sending", record.id)))?;
    if stored.waits_on_device() {
        ctx.tasks
            .join_waiting(&stored, now)
            .map_err(Failure::Internal)?;
    }
    match refused {
        Some(why) => Err(Failure::Tool(format!("{why}; the command was not applied"))),
        None => Ok(stored),
    }
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
    let fresh = ctx
        .tasks
        .recent_reading(device_id, host::now_ms(), ctx.settings.probe_max_age_ms)
        .map_err(Failure::Internal)?;
    if let Some(reading) = fresh {
        let fields = reading.values.keys().copied().collect();
        return Ok((Some(reading), Readability::Known(fields)));
    }
    match ctx.driver.read(device_id) {
        Ok(reading) => {
            let fields = reading.values.keys().copied().collect();
            crate::resources::observed(ctx, device_id, &reading);
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

/// Ends earlier unfinished tasks that wait for another value of the same
/// field of the same device: that value is no longer coming.
fn supersede_earlier(ctx: &Context, record: &TaskRecord, now: u64) -> Result<(), Failure> {
    let command: Vec<(Field, Value)> = record
        .fields
        .iter()
        .map(|f| (f.field, f.sent.clone()))
        .collect();
    let earlier = ctx
        .tasks
        .claim_fields(&record.device_id, &command, &record.id)
        .map_err(Failure::Internal)?;
    for old in earlier {
        ctx.tasks
            .update(&old, now, |t| t.supersede(now, &record.id))
            .map_err(Failure::Internal)?;
    }
    Ok(())
}
