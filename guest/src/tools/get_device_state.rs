//! `get_device_state`: what the device's sensor endpoint reports now.

use super::args::Args;
use super::{Caller, Context, Definition, Failure, Output};
use crate::task::tool_result;
use serde_json::Value as Json;

pub const DEFINITION: Definition = Definition {
    name: "get_device_state",
    description: "Read a device's sensors: the state it reports, and which fields can be read back.",
    input_schema: r#"{"type":"object","properties":{"device_id":{"type":"string"}},"required":["device_id"]}"#,
    output_schema: r#"{"type":"object","properties":{"online":{"type":"boolean"},"state":{"type":"object"}},"required":["online","state"]}"#,
    read_only: true,
    ranged: &[],
};

pub fn run(ctx: &Context<'_>, arguments: &Json, _caller: &Caller<'_>) -> Result<Output, Failure> {
    let args = Args::new(DEFINITION.name, arguments, &["device_id"]).map_err(Failure::Tool)?;
    let device_id = args.required_string("device_id").map_err(Failure::Tool)?;
    let reading = ctx
        .driver
        .read(device_id)
        .map_err(|e| Failure::Tool(format!("could not read {device_id}: {e}")))?;
    crate::app::readings::observed(ctx, device_id, &reading);
    let result = crate::app::readings::state_json(device_id, &reading);
    Ok(Output::Result(tool_result(result, false)))
}
