//! `get_task`: a task as it stands, for clients without the tasks extension.

use super::args::Args;
use super::{Caller, Context, Definition, Failure, Output, TASK_ID_SCHEMA, TASK_SCHEMA};
use crate::task::tool_result;
use serde_json::Value as Json;

pub const DEFINITION: Definition = Definition {
    name: "get_task",
    description: "A task's status; its result once it ends.",
    input_schema: TASK_ID_SCHEMA,
    output_schema: TASK_SCHEMA,
    read_only: true,
    ranged: &[],
};

pub fn run(ctx: &Context<'_>, arguments: &Json, _caller: &Caller<'_>) -> Result<Output, Failure> {
    let args = Args::new(DEFINITION.name, arguments, &["task_id"]).map_err(Failure::Tool)?;
    let id = super::command::task_id_argument(&args)?;
    let record = crate::app::tasks::get(&ctx.store, ctx.now_ms(), id).map_err(|e| match e {
        crate::app::tasks::TaskError::NotFound(_) => super::command::unknown_task(id),
        crate::app::tasks::TaskError::Internal(m) => Failure::Internal(m),
    })?;
    Ok(Output::Result(tool_result(record.to_tool_json(), false)))
}
