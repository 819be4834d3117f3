//! The driver for Home Assistant's REST API and its `climate` entities.
//!
//! Writes are service calls (`POST /api/services/climate/<service>`); reads
//! are the entity's state (`GET /api/states/<entity_id>`). Home Assistant
//! answers a service call once it has run it, but the entity's state can
//! still lag the unit, so the answer is only "taken": the verdict comes
//! from later state reads, as with every driver.
//!
//! What a device accepts comes from the entity's own attributes
//! (`hvac_modes`, `fan_modes`, `swing_modes`, `swing_horizontal_modes`,
//! `min_temp`, `max_temp`, `target_temp_step`), never from assumptions. A
//! field whose current value the entity does not report is unverifiable, so
//! the safety gate asks for confirmation as it does for any such field.
//!
//! Field mapping: `power` is the state being `off` or not; `mode` is the
//! state otherwise (Home Assistant's `fan_only` is the model's `fan`);
//! `target_temperature` is `temperature`; `fan_speed` is `fan_mode`;
//! `vane_vertical` is `swing_mode`; `vane_horizontal` is
//! `swing_horizontal_mode`.

use super::{Accepted, DeviceInfo, Driver, DriverError, Reading, exchange};
use crate::host::HttpRequest;
use crate::model::{Allowed, Comparison, Field, FieldSpec, Value};
use crate::url;
use serde_json::{Value as Json, json};

/// The step Home Assistant uses when an entity gives no `target_temp_step`
/// (tenths of a degree).
const DEFAULT_TEMPERATURE_STEP: f64 = 0.1;

/// Connection settings for one Home Assistant.
#[derive(Clone, Debug)]
pub struct HomeAssistant {
    /// Its base URL, e.g. `http://homeassistant.local:8123`.
    pub base_url: String,
    /// A long-lived access token.
    pub token: Option<String>,
    pub timeout_ms: u64,
    /// The largest answer taken.
    pub max_body_bytes: usize,
}

/// Home Assistant's spelling of a model mode, and back.
fn ha_mode(model: &str) -> &str {
    if model == "fan" { "fan_only" } else { model }
}

fn model_mode(ha: &str) -> String {
    if ha.eq_ignore_ascii_case("fan_only") {
        "fan".into()
    } else {
        ha.to_ascii_lowercase()
    }
}

/// The attribute that reports a field's current value, and the one that
/// lists what it accepts (fields that are not plain attributes have none).
fn attribute_of(field: Field) -> Option<(&'static str, &'static str)> {
    match field {
        Field::FanSpeed => Some(("fan_mode", "fan_modes")),
        Field::VaneVertical => Some(("swing_mode", "swing_modes")),
        Field::VaneHorizontal => Some(("swing_horizontal_mode", "swing_horizontal_modes")),
        _ => None,
    }
}

/// Entity ids go into the URL path: only `climate.<object_id>` with Home
/// Assistant's own characters is accepted.
fn checked_entity(entity_id: &str) -> Result<&str, DriverError> {
    let object_id = entity_id.strip_prefix("climate.").unwrap_or_default();
    let ok = !object_id.is_empty()
        && entity_id.len() <= 255
        && object_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(entity_id)
    } else {
        Err(DriverError::UnknownDevice(entity_id.to_string()))
    }
}

fn strings(value: Option<&Json>) -> Vec<String> {
    value
        .and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Json::as_str)
                .map(str::to_ascii_lowercase)
                .collect()
        })
        .unwrap_or_default()
}

/// What an entity accepts, from its attributes. A list the entity does not
/// give means the field is not offered on it.
pub fn specs_of(state: &Json) -> Vec<FieldSpec> {
    let attributes = &state["attributes"];
    let choice = |field, items: Vec<String>| FieldSpec {
        field,
        allowed: Allowed::Choices(items),
        comparison: Comparison::CaseInsensitive,
    };
    let mut specs = Vec::new();
    let hvac_modes = strings(attributes.get("hvac_modes"));
    if hvac_modes.iter().any(|m| m == "off") && hvac_modes.len() > 1 {
        specs.push(choice(Field::Power, vec!["on".into(), "off".into()]));
    }
    let modes: Vec<String> = hvac_modes
        .iter()
        .filter(|m| *m != "off")
        .map(|m| model_mode(m))
        .collect();
    if !modes.is_empty() {
        specs.push(choice(Field::Mode, modes));
    }
    if let (Some(min), Some(max)) = (
        attributes["min_temp"].as_f64(),
        attributes["max_temp"].as_f64(),
    ) {
        let step = attributes["target_temp_step"]
            .as_f64()
            .filter(|s| *s > 0.0)
            .unwrap_or(DEFAULT_TEMPERATURE_STEP);
        specs.push(FieldSpec {
            field: Field::TargetTemperature,
            allowed: Allowed::Range { min, max, step },
            // Less than half a step, so neighbouring setpoints never match.
            comparison: Comparison::Tolerance(step * 0.4),
        });
    }
    for field in [Field::FanSpeed, Field::VaneVertical, Field::VaneHorizontal] {
        let (_, list) = attribute_of(field).expect("attribute fields");
        let items = strings(attributes.get(list));
        if !items.is_empty() {
            specs.push(choice(field, items));
        }
    }
    specs
}

/// An entity's state object as a reading. What it does not report is left
/// out, which marks it unverifiable.
pub fn reading_of(state: &Json) -> Result<Reading, DriverError> {
    let hvac = state["state"]
        .as_str()
        .ok_or_else(|| DriverError::BadResponse("the entity state has no \"state\"".into()))?;
    let attributes = &state["attributes"];
    let online = !matches!(hvac, "unavailable" | "unknown");
    let mut reading = Reading {
        online,
        room_temperature: attributes["current_temperature"].as_f64(),
        updated_at: state["last_updated"].as_str().map(str::to_string),
        ..Reading::default()
    };
    if !online {
        return Ok(reading);
    }
    let off = hvac.eq_ignore_ascii_case("off");
    reading
        .values
        .insert(Field::Power, Value::choice(if off { "off" } else { "on" }));
    if !off {
        reading
            .values
            .insert(Field::Mode, Value::choice(&model_mode(hvac)));
    }
    if let Some(t) = attributes["temperature"].as_f64() {
        reading
            .values
            .insert(Field::TargetTemperature, Value::Number(t));
    }
    for field in [Field::FanSpeed, Field::VaneVertical, Field::VaneHorizontal] {
        let (current, _) = attribute_of(field).expect("attribute fields");
        if let Some(value) = attributes[current].as_str() {
            reading.values.insert(field, Value::choice(value));
        }
    }
    Ok(reading)
}

/// The service calls a command takes, in order: switching on (or changing
/// mode, which also switches on) first, the settings next, switching off
/// last.
pub fn service_calls(entity_id: &str, command: &[(Field, Value)]) -> Vec<(&'static str, Json)> {
    let value_of = |field| command.iter().find(|(f, _)| *f == field).map(|(_, v)| v);
    let text = |v: &Value| v.to_string();
    let mut calls = Vec::new();
    let power = value_of(Field::Power).map(text);
    match value_of(Field::Mode).map(text) {
        Some(mode) => calls.push((
            "set_hvac_mode",
            json!({"entity_id": entity_id, "hvac_mode": ha_mode(&mode)}),
        )),
        None if power.as_deref() == Some("on") => {
            calls.push(("turn_on", json!({"entity_id": entity_id})));
        }
        None => {}
    }
    if let Some(Value::Number(t)) = value_of(Field::TargetTemperature) {
        calls.push((
            "set_temperature",
            json!({"entity_id": entity_id, "temperature": t}),
        ));
    }
    for (field, service) in [
        (Field::FanSpeed, "set_fan_mode"),
        (Field::VaneVertical, "set_swing_mode"),
        (Field::VaneHorizontal, "set_swing_horizontal_mode"),
    ] {
        if let Some(value) = value_of(field) {
            let (key, _) = attribute_of(field).expect("attribute fields");
            calls.push((service, json!({"entity_id": entity_id, key: text(value)})));
        }
    }
    if power.as_deref() == Some("off") {
        calls.push(("turn_off", json!({"entity_id": entity_id})));
    }
    calls
}

impl HomeAssistant {
    fn request(&self, method: &str, path: &str, body: Option<Json>) -> Result<Json, DriverError> {
        let url = url::join(&self.base_url, path);
        exchange(&HttpRequest {
            method,
            url: &url,
            bearer: self.token.as_deref(),
            json_body: body.map(|b| crate::json::text(&b).into_bytes()),
            timeout_ms: self.timeout_ms,
            max_body_bytes: self.max_body_bytes,
        })
    }

    fn state(&self, entity_id: &str) -> Result<Json, DriverError> {
        let id = checked_entity(entity_id)?;
        self.request("GET", &format!("/api/states/{id}"), None)
            .map_err(|e| match e {
                DriverError::UnknownDevice(_) => DriverError::UnknownDevice(id.to_string()),
                other => other,
            })
    }
}

impl Driver for HomeAssistant {
    fn list_devices(&self) -> Result<Vec<DeviceInfo>, DriverError> {
        let states = self.request("GET", "/api/states", None)?;
        let states = states
            .as_array()
            .ok_or_else(|| DriverError::BadResponse("/api/states is not a list".into()))?;
        Ok(states
            .iter()
            .filter_map(|s| {
                let id = s["entity_id"].as_str()?;
                id.starts_with("climate.").then(|| DeviceInfo {
                    id: id.to_string(),
                    name: s["attributes"]["friendly_name"]
                        .as_str()
                        .unwrap_or(id)
                        .to_string(),
                    kind: "climate".into(),
                })
            })
            .collect())
    }

    fn read(&self, device_id: &str) -> Result<Reading, DriverError> {
        reading_of(&self.state(device_id)?)
    }

    fn send(&self, device_id: &str, command: &[(Field, Value)]) -> Result<Accepted, DriverError> {
        let id = checked_entity(device_id)?;
        for (service, body) in service_calls(id, command) {
            self.request(
                "POST",
                &format!("/api/services/climate/{service}"),
                Some(body),
            )
            .map_err(|e| match e {
                DriverError::Rejected(m) => {
                    DriverError::Rejected(format!("climate.{service}: {m}"))
                }
                other => other,
            })?;
        }
        Ok(Accepted { request_id: None })
    }

    fn specs(&self, device_id: &str) -> Result<Vec<FieldSpec>, DriverError> {
        Ok(specs_of(&self.state(device_id)?))
    }

    /// One read of every state: the union over the climate entities.
    fn advertised(&self) -> Result<Vec<FieldSpec>, DriverError> {
        let states = self.request("GET", "/api/states", None)?;
        let climates = states
            .as_array()
            .ok_or_else(|| DriverError::BadResponse("/api/states is not a list".into()))?
            .iter()
            .filter(|s| {
                s["entity_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("climate."))
            });
        Ok(crate::model::union_of_devices(climates.flat_map(specs_of)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn living_room() -> Json {
        json!({"entity_id": "climate.living_room", "state": "fan_only", "attributes": {
            "hvac_modes": ["off", "cool", "fan_only"], "min_temp": 16, "max_temp": 30,
            "target_temp_step": 0.5, "fan_modes": ["Auto", "Low"], "swing_modes": ["off", "both"],
            "temperature": 24, "fan_mode": "Low", "current_temperature": 26.5},
            "last_updated": "2026-11-29T10:00:00+00:00"})
    }

    #[test]
    fn what_an_entity_accepts_comes_from_its_attributes() {
        let specs = specs_of(&living_room());
        let allowed = |field| {
            specs
                .iter()
                .find(|s| s.field == field)
                .map(|s| s.allowed.clone())
        };
        assert_eq!(
            allowed(Field::Mode),
            Some(Allowed::choices(&["cool", "fan"]))
        );
        assert_eq!(
            allowed(Field::FanSpeed),
            Some(Allowed::choices(&["auto", "low"]))
        );
        assert_eq!(
            allowed(Field::TargetTemperature),
            Some(Allowed::Range {
                min: 16.0,
                max: 30.0,
                step: 0.5
            })
        );
        // No swing_horizontal_modes: the field is not offered.
        assert_eq!(allowed(Field::VaneHorizontal), None);
    }

    #[test]
    fn a_reading_leaves_out_what_the_entity_does_not_report() {
        let reading = reading_of(&living_room()).unwrap();
        assert!(reading.online);
        assert_eq!(reading.values[&Field::Power], Value::choice("on"));
        assert_eq!(reading.values[&Field::Mode], Value::choice("fan"));
        assert_eq!(reading.values[&Field::FanSpeed], Value::choice("low"));
        assert_eq!(
            reading.values[&Field::TargetTemperature],
            Value::Number(24.0)
        );
        assert!(!reading.values.contains_key(&Field::VaneVertical));
        let gone = reading_of(&json!({"state": "unavailable", "attributes": {}})).unwrap();
        assert!(!gone.online && gone.values.is_empty());
    }

    #[test]
    fn commands_become_service_calls_in_a_safe_order() {
        let calls = service_calls(
            "climate.x",
            &[
                (Field::Power, Value::choice("on")),
                (Field::TargetTemperature, Value::Number(22.5)),
                (Field::FanSpeed, Value::choice("low")),
            ],
        );
        let names: Vec<_> = calls.iter().map(|(s, _)| *s).collect();
        assert_eq!(names, ["turn_on", "set_temperature", "set_fan_mode"]);
        assert_eq!(
            calls[1].1,
            json!({"entity_id": "climate.x", "temperature": 22.5})
        );
        let calls = service_calls(
            "climate.x",
            &[
                (Field::Power, Value::choice("off")),
                (Field::Mode, Value::choice("fan")),
            ],
        );
        assert_eq!(calls[0].1["hvac_mode"], "fan_only");
        assert_eq!(calls.last().unwrap().0, "turn_off");
    }

    #[test]
    fn entity_ids_that_would_change_the_path_are_refused() {
        assert!(checked_entity("climate.living_room").is_ok());
        assert!(checked_entity("climate.../x").is_err());
        assert!(checked_entity("light.kitchen").is_err());
        assert!(checked_entity("climate.").is_err());
    }
}
