//! `set_power_mode`: a verified power and/or mode change.

use super::args::Args;
use super::command::{self, Command, choice_field};
use super::{Caller, Context, Definition, Failure, Output, TASK_SCHEMA};
use crate::model::Field;
use serde_json::Value as Json;

pub const DEFINITION: Definition = Definition {
    name: "set_power_mode",
    description: "Set power and/or mode. Returns a task that completes only when the sensors show it.",
    input_schema: r#"{"type":"object","properties":{"device_id":{"type":"string"},"power":{"enum":["on","off"]},"mode":{"type":"string","examples":["cool","heat","dry","fan","auto"]},"confirm":{"type":"boolean"}},"required":["device_id"]}"#,
    output_schema: TASK_SCHEMA,
    read_only: false,
    ranged: &[],
};

pub fn run(ctx: &Context<'_>, arguments: &Json, caller: &Caller<'_>) -> Result<Output, Failure> {
    let args = Args::new(
        DEFINITION.name,
        arguments,
        &["device_id", "power", "mode", "confirm"],
    )
    .map_err(Failure::Tool)?;
    let device_id = args.required_string("device_id").map_err(Failure::Tool)?;
    let mut fields = Vec::new();
    choice_field(&args, "power", Field::Power, &mut fields)?;
    choice_field(&args, "mode", Field::Mode, &mut fields)?;
    if fields.is_empty() {
        return Err(Failure::Tool(
            "set_power_mode: nothing to set; give power, mode or both".into(),
        ));
    }
    command::run(
        ctx,
        Command {
            tool: DEFINITION.name,
            device_id,
            fields,
            confirm: args.flag("confirm").map_err(Failure::Tool)?,
        },
        caller,
    )
}
