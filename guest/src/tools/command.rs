//! What the command tools share: their arguments, and the verified command
//! itself, which lives in the application core ([`crate::app::command`]).

use super::Failure;
use super::args::Args;
use crate::model::{Field, Value};

pub use crate::app::command::{Command, run};

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
