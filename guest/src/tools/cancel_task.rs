//! `cancel_task`: stop tracking a task.

use super::args::Args;
use super::{Caller, Context, Definition, Failure, Output, TASK_ID_SCHEMA, TASK_SCHEMA};
use crate::host;
use crate::task::tool_result;
use serde_json::Value as Json;

pub const DEFINITION: Definition = Definition {
    name: "cancel_task",
    description: "Stop tracking a task. A command already sent is not recalled.",
    input_schema: TASK_ID_SCHEMA,
    output_schema: TASK_SCHEMA,
    read_only: false,
};

pub fn run(ctx: &Context, arguments: &Json, _caller: &Caller<'_>) -> Result<Output, Failure> {
    let args = Args::new(DEFINITION.name, arguments, &["task_id"]).map_err(Failure::Tool)?;
    let id = super::command::task_id_argument(&args)?;
    let now = host::now_ms();
    // Cancelling an ended task changes nothing; it answers with how it ended.
    let (record, _) = ctx
        .tasks
        .update(id, now, |t| t.cancel(now))
        .map_err(Failure::Internal)?
        .ok_or_else(|| super::command::unknown_task(id))?;
    Ok(Output::Result(tool_result(&record.to_tool_json(), false)))
}
