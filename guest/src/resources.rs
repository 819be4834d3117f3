//! Each device's state as an MCP resource, readable and subscribable.
//!
//! Every sensor read the plugin makes (a tool, a command's probe, a task's
//! wake, a resource read) goes through [`observed`], which remembers the
//! reading and tells the runner when the state changed, so subscribers hear
//! about changes as soon as settle sees them.

use crate::driver::Reading;
use crate::host;
use crate::model::Field;
use crate::tools::Context;
use serde_json::{Map, Value as Json, json};

const PREFIX: &str = "settle://devices/";
const SUFFIX: &str = "/state";

/// The resource template of a device's state.
pub const TEMPLATE: &str = "settle://devices/{device_id}/state";

pub fn uri(device_id: &str) -> String {
    format!("{PREFIX}{device_id}{SUFFIX}")
}

/// The device a state URI names.
pub fn device_of(uri: &str) -> Option<&str> {
    uri.strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)
        .filter(|d| !d.is_empty() && !d.contains('/'))
}

/// What the plugin serves beyond tools.
pub fn capabilities() -> Json {
    json!({"resources": {"subscribe": true, "listChanged": false}})
}

/// A reading as tools and resources show it.
pub fn state_json(device_id: &str, reading: &Reading) -> Json {
    let state: Map<String, Json> = reading
        .values
        .iter()
        .map(|(f, v)| (f.name().to_string(), json!(v)))
        .collect();
    let readable: Vec<&str> = reading.values.keys().map(|f| f.name()).collect();
    let unreadable: Vec<&str> = Field::ALL
        .into_iter()
        .filter(|f| !reading.values.contains_key(f))
        .map(Field::name)
        .collect();
    json!({
        "deviceId": device_id,
        "online": reading.online,
        "state": state,
        "roomTemperature": reading.room_temperature,
        "updatedAt": reading.updated_at,
        "readable": readable,
        "unreadable": unreadable,
    })
}

/// Records a fresh reading of a device, telling subscribers if it changed.
/// A failure to remember only costs a later command a fresh probe.
pub fn observed(ctx: &Context, device_id: &str, reading: &Reading) {
    match ctx
        .tasks
        .remember_reading(device_id, reading, host::now_ms())
    {
        Ok(true) => host::resource_updated(&uri(device_id)),
        Ok(false) => {}
        Err(e) => host::log(host::Level::Warn, &format!("remembering a reading: {e}")),
    }
}

/// Why a resource request failed.
pub enum ResourceError {
    NotFound(String),
    Unavailable(String),
    MethodNotFound(String),
}

/// Serves `resources/list`, `resources/templates/list` and
/// `resources/read`.
pub fn serve(ctx: &Context, method: &str, params: &Json) -> Result<Json, ResourceError> {
    match method {
        "resources/list" => {
            let devices = ctx
                .driver
                .list_devices()
                .map_err(|e| ResourceError::Unavailable(format!("could not list devices: {e}")))?;
            let resources: Vec<Json> = devices
                .iter()
                .map(|d| {
                    json!({
                        "uri": uri(&d.id),
                        "name": format!("{} state", d.id),
                        "title": format!("{} (sensor state)", if d.name.is_empty() { &d.id } else { &d.name }),
                        "mimeType": "application/json",
                    })
                })
                .collect();
            Ok(json!({ "resources": resources }))
        }
        "resources/templates/list" => Ok(json!({
            "resourceTemplates": [{
                "uriTemplate": TEMPLATE,
                "name": "device state",
                "description": "What a device's sensors report now.",
                "mimeType": "application/json",
            }],
        })),
        "resources/read" => {
            let requested = params.get("uri").and_then(Json::as_str).unwrap_or_default();
            let device_id = device_of(requested).ok_or_else(|| {
                ResourceError::NotFound(format!("Resource not found: {requested}"))
            })?;
            let reading = ctx.driver.read(device_id).map_err(|e| match e {
                crate::driver::DriverError::UnknownDevice(_) => ResourceError::NotFound(format!(
                    "Resource not found: {requested} (no such device)"
                )),
                other => ResourceError::Unavailable(format!("could not read {device_id}: {other}")),
            })?;
            observed(ctx, device_id, &reading);
            Ok(json!({
                "contents": [{
                    "uri": requested,
                    "mimeType": "application/json",
                    "text": state_json(device_id, &reading).to_string(),
                }],
            }))
        }
        other => Err(ResourceError::MethodNotFound(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_uris_round_trip_and_reject_other_shapes() {
        assert_eq!(uri("ac-living"), "settle://devices/ac-living/state");
        assert_eq!(
            device_of("settle://devices/ac-living/state"),
            Some("ac-living")
        );
        assert_eq!(device_of("settle://devices//state"), None);
        assert_eq!(device_of("settle://devices/a/b/state"), None);
        assert_eq!(device_of("file:///etc/passwd"), None);
    }
}
