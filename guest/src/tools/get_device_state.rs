//! `get_device_state`: what the device's sensor endpoint reports now.

use super::args::Args;
use super::{Context, Definition, Failure, Output};
use crate::host;
use crate::model::Field;
use crate::task::tool_result;
use serde_json::{Map, Value as Json, json};

pub const DEFINITION: Definition = Definition {
    name: "get_device_state",
    description: "Read a device's sensors: the state it reports, and which fields can be read back.",
    input_schema: r#"{"type":"object","properties":{"device_id":{"type":"string"}},"required":["device_id"]}"#,
    output_schema: r#"{"type":"object","properties":{"online":{"type":"boolean"},"state":{"type":"object"}},"required":["online","state"]}"#,
    read_only: true,
};

pub fn run(ctx: &Context, arguments: &Json) -> Result<Output, Failure> {
    let args = Args::new(DEFINITION.name, arguments, &["device_id"]).map_err(Failure::Tool)?;
    let device_id = args.required_string("device_id").map_err(Failure::Tool)?;
    let reading = ctx
        .driver
        .read(device_id)
        .map_err(|e| Failure::Tool(format!("could not read {device_id}: {e}")))?;
    let readable: Vec<&str> = reading.values.keys().map(|f| f.name()).collect();
    let unreadable: Vec<&str> = Field::ALL
        .into_iter()
        .filter(|f| !reading.values.contains_key(f))
        .map(Field::name)
        .collect();
    // A failure to remember only costs a later command a fresh probe.
    if let Err(e) = ctx.tasks.remember_readable(
        device_id,
        reading.values.keys().copied().collect(),
        host::now_ms(),
    ) {
        host::log(
            host::Level::Warn,
            &format!("remembering readable fields: {e}"),
        );
    }
    let state: Map<String, Json> = reading
        .values
        .iter()
        .map(|(f, v)| (f.name().to_string(), json!(v)))
        .collect();
    let result = json!({
        "deviceId": device_id,
        "online": reading.online,
        "state": state,
        "roomTemperature": reading.room_temperature,
        "updatedAt": reading.updated_at,
        "readable": readable,
        "unreadable": unreadable,
    });
    Ok(Output::Result(tool_result(&result, false)))
}
