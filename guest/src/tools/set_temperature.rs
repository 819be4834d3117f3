//! `set_temperature`: a verified setpoint change.

use super::args::Args;
use super::command::{self, Command};
use super::{Caller, Context, Definition, Failure, Output, TASK_SCHEMA};
use crate::model::{Field, Value};
use serde_json::Value as Json;

pub const DEFINITION: Definition = Definition {
    name: "set_temperature",
    description: "Set the target °C. Outside the safe range needs confirm. Returns a verified task.",
    input_schema: r#"{"type":"object","properties":{"device_id":{"type":"string"},"temperature":{"type":"number"},"confirm":{"type":"boolean"}},"required":["device_id","temperature"]}"#,
    output_schema: TASK_SCHEMA,
    read_only: false,
    ranged: &[("temperature", Field::TargetTemperature)],
};

pub fn run(ctx: &Context<'_>, arguments: &Json, caller: &Caller<'_>) -> Result<Output, Failure> {
    let args = Args::new(
        DEFINITION.name,
        arguments,
        &["device_id", "temperature", "confirm"],
    )
    .map_err(Failure::Tool)?;
    let device_id = args.required_string("device_id").map_err(Failure::Tool)?;
    let temperature = args.required_number("temperature").map_err(Failure::Tool)?;
    command::run(
        ctx,
        Command {
            tool: DEFINITION.name,
            device_id,
            fields: vec![(Field::TargetTemperature, Value::Number(temperature))],
            confirm: args.flag("confirm").map_err(Failure::Tool)?,
        },
        caller,
    )
}
