//! Every sensor reading the plugin takes (a tool, a command's probe, a
//! device tick, a resource read) goes through [`observed`], which remembers
//! it and tells the runner when the state changed, so subscribers to the
//! device's resource hear about changes as soon as settle sees them.

use super::Context;
use crate::driver::Reading;
use crate::model::Field;
use crate::platform::Level;
use serde_json::{Map, Value as Json, json};

const PREFIX: &str = "settle://devices/";
const SUFFIX: &str = "/state";

/// The resource template of a device's state.
pub const TEMPLATE: &str = "settle://devices/{device_id}/state";

/// The state resource of a device.
pub fn uri(device_id: &str) -> String {
    format!("{PREFIX}{device_id}{SUFFIX}")
}

/// The device a state URI names.
pub fn device_of(uri: &str) -> Option<&str> {
    uri.strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)
        .filter(|d| !d.is_empty() && !d.contains('/'))
}

/// Records a fresh reading of a device, telling subscribers if it changed.
/// A failure to remember only costs a later command a fresh probe.
pub fn observed(ctx: &Context<'_>, device_id: &str, reading: &Reading) {
    match ctx.store.remember_reading(device_id, reading, ctx.now_ms()) {
        Ok(true) => ctx.platform.resource_updated(&uri(device_id)),
        Ok(false) => {}
        Err(e) => ctx
            .platform
            .log(Level::Warn, &format!("remembering a reading: {e}")),
    }
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
