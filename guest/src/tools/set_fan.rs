//! `set_fan`: a verified fan speed and vane change.

use super::args::Args;
use super::command::{self, Command, choice_field};
use super::{Caller, Context, Definition, Failure, Output, TASK_SCHEMA};
use crate::model::Field;
use serde_json::Value as Json;

pub const DEFINITION: Definition = Definition {
    name: "set_fan",
    description: "Set fan speed and/or vanes. Returns a verified task.",
    input_schema: r#"{"type":"object","properties":{"device_id":{"type":"string"},"speed":{"type":"string","examples":["auto","low","medium","high"]},"vane_vertical":{"type":"string","examples":["auto","up","middle","down","swing"]},"vane_horizontal":{"type":"string","examples":["auto","left","center","right","swing"]},"confirm":{"type":"boolean"}},"required":["device_id"]}"#,
    output_schema: TASK_SCHEMA,
    read_only: false,
    ranged: &[],
};

pub fn run(ctx: &Context<'_>, arguments: &Json, caller: &Caller<'_>) -> Result<Output, Failure> {
    let args = Args::new(
        DEFINITION.name,
        arguments,
        &[
            "device_id",
            "speed",
            "vane_vertical",
            "vane_horizontal",
            "confirm",
        ],
    )
    .map_err(Failure::Tool)?;
    let device_id = args.required_string("device_id").map_err(Failure::Tool)?;
    let mut fields = Vec::new();
    choice_field(&args, "speed", Field::FanSpeed, &mut fields)?;
    choice_field(&args, "vane_vertical", Field::VaneVertical, &mut fields)?;
    choice_field(&args, "vane_horizontal", Field::VaneHorizontal, &mut fields)?;
    if fields.is_empty() {
        return Err(Failure::Tool(
            "set_fan: nothing to set; give speed, vane_vertical, vane_horizontal or several".into(),
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
