//! `get_task`: a task as it stands, for clients without the tasks extension.

use super::args::Args;
use super::{Caller, Context, Definition, Failure, Output, TASK_ID_SCHEMA, TASK_SCHEMA};
use crate::host;
use crate::task::tool_result;
use serde_json::Value as Json;

pub const DEFINITION: Definition = Definition {
    name: "get_task",
    description: "A task's status; its result once it ends.",
    input_schema: TASK_ID_SCHEMA,
    output_schema: TASK_SCHEMA,
    read_only: true,
};

pub fn run(ctx: &Context, arguments: &Json, _caller: &Caller<'_>) -> Result<Output, Failure> {
    let args = Args::new(DEFINITION.name, arguments, &["task_id"]).map_err(Failure::Tool)?;
    let id = super::command::task_id_argument(&args)?;
    let now = host::now_ms();
    // Reading is also the moment an overdue task is marked expired, so a late
    // scheduler never shows a task past its TTL as working.
    let (record, _) = ctx
        .tasks
        .update(id, now, |t| t.expire_if_due(now))
        .map_err(Failure::Internal)?
        .ok_or_else(|| super::command::unknown_task(id))?;
    Ok(Output::Result(tool_result(&record.to_tool_json(), false)))
}
