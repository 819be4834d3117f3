//! `list_devices`: the devices the API lists.

use super::args::Args;
use super::{Caller, Context, Definition, Failure, Output};
use crate::task::tool_result;
use serde_json::{Value as Json, json};

pub const DEFINITION: Definition = Definition {
    name: "list_devices",
    description: "List the devices.",
    input_schema: r#"{"type":"object","additionalProperties":false}"#,
    output_schema: r#"{"type":"object","properties":{"devices":{"type":"array"}},"required":["devices"]}"#,
    read_only: true,
    ranged: &[],
};

pub fn run(ctx: &Context<'_>, arguments: &Json, _caller: &Caller<'_>) -> Result<Output, Failure> {
    Args::new(DEFINITION.name, arguments, &[]).map_err(Failure::Tool)?;
    let devices = ctx
        .driver
        .list_devices()
        .map_err(|e| Failure::Tool(format!("could not list devices: {e}")))?;
    Ok(Output::Result(tool_result(
        json!({ "devices": devices }),
        false,
    )))
}
