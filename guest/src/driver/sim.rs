//! The driver for settle's device simulator and APIs shaped like it
//! (`device-api.md`): upper-case control spelling, title-case sensor spelling,
//! separate control and sensor endpoints.

use super::{Accepted, DeviceInfo, Driver, DriverError, Reading};
use crate::host::{self, HttpError, HttpRequest};
use crate::model::{Allowed, Comparison, Field, FieldSpec, Value};
use crate::url;
use serde_json::{Map, Value as Json, json};

/// Numbers read back within this many °C of the value sent count as equal:
/// less than half of the 0.5 °C step, so neighbouring setpoints never match.
const TEMPERATURE_TOLERANCE: f64 = 0.1;

/// Connection settings for one API.
#[derive(Clone, Debug)]
pub struct SimDriver {
    pub base_url: String,
    pub token: Option<String>,
    pub timeout_ms: u64,
}

impl SimDriver {
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Json, DriverError> {
        let url = url::join(&self.base_url, path);
        let response = host::send(&HttpRequest {
            method,
            url: &url,
            bearer: self.token.as_deref(),
            json_body: body,
            timeout_ms: self.timeout_ms,
        })
        .map_err(|e| match e {
            HttpError::Denied(m) => DriverError::Denied(m),
            HttpError::Timeout(m) | HttpError::Failed(m) => DriverError::Unreachable(m),
        })?;
        classify_response(response.status, &response.body)
    }
}

/// Maps an HTTP answer of the API onto a result, keeping the API's own
/// `error` message where it gave one.
pub fn classify_response(status: u16, body: &[u8]) -> Result<Json, DriverError> {
    let parsed: Option<Json> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        // The simulator says `error`, Home Assistant `message`.
        .and_then(|j| j.get("error").or_else(|| j.get("message")))
        .and_then(Json::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
    match status {
        200..=299 => parsed.ok_or_else(|| {
            DriverError::BadResponse(format!("status {status} with a body that is not JSON"))
        }),
        401 | 403 => Err(DriverError::Unauthorized(format!("{status} {message}"))),
        404 => Err(DriverError::UnknownDevice(message)),
        400..=499 => Err(DriverError::Rejected(format!("{status} {message}"))),
        _ => Err(DriverError::Unreachable(format!(
            "answered {status} {message}"
        ))),
    }
}

/// The control spelling of a model value: upper case, numbers as they are.
pub fn control_value(value: &Value) -> Json {
    match value {
        Value::Number(n) => json!(n),
        Value::Choice(c) => json!(c.to_ascii_uppercase()),
    }
}

/// The control request body for a command.
pub fn control_body(command: &[(Field, Value)]) -> Json {
    let fields: Map<String, Json> = command
        .iter()
        .map(|(field, value)| (field.name().to_string(), control_value(value)))
        .collect();
    Json::Object(fields)
}

/// Reads a sensor answer into model spelling. Fields the endpoint does not
/// report are left out, which marks them unverifiable.
pub fn parse_sensors(body: &Json) -> Result<Reading, DriverError> {
    let object = body
        .as_object()
        .ok_or_else(|| DriverError::BadResponse("sensor answer is not an object".into()))?;
    let mut reading = Reading {
        online: object.get("online").and_then(Json::as_bool).unwrap_or(true),
        room_temperature: object.get("room_temperature").and_then(Json::as_f64),
        updated_at: object
            .get("updated_at")
            .and_then(Json::as_str)
            .map(str::to_string),
        ..Reading::default()
    };
    for field in Field::ALL {
        let value = match object.get(field.name()) {
            None | Some(Json::Null) => continue,
            Some(Json::String(s)) => Value::choice(s),
            Some(Json::Number(n)) => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
            Some(other) => {
                return Err(DriverError::BadResponse(format!(
                    "sensor field {field} has unexpected value {other}"
                )));
            }
        };
        reading.values.insert(field, value);
    }
    Ok(reading)
}

/// The device list answer.
pub fn parse_devices(body: &Json) -> Result<Vec<DeviceInfo>, DriverError> {
    let list = body
        .get("devices")
        .and_then(Json::as_array)
        .ok_or_else(|| DriverError::BadResponse("device list has no \"devices\" array".into()))?;
    list.iter()
        .map(|d| {
            let text = |key: &str| d.get(key).and_then(Json::as_str).map(str::to_string);
            Ok(DeviceInfo {
                id: text("id")
                    .ok_or_else(|| DriverError::BadResponse("a device has no id".into()))?,
                name: text("name").unwrap_or_default(),
                kind: text("kind").unwrap_or_else(|| "unknown".into()),
            })
        })
        .collect()
}

/// What the simulator's devices accept (device-api.md, control values).
pub fn field_specs() -> Vec<FieldSpec> {
    let choice = |field, items: &[&str]| FieldSpec {
        field,
        allowed: Allowed::choices(items),
        comparison: Comparison::CaseInsensitive,
    };
    vec![
        choice(Field::Power, &["on", "off"]),
        choice(Field::Mode, &["cool", "heat", "dry", "fan", "auto"]),
        FieldSpec {
            field: Field::TargetTemperature,
            allowed: Allowed::Range {
                min: 16.0,
                max: 30.0,
                step: 0.5,
            },
            comparison: Comparison::Tolerance(TEMPERATURE_TOLERANCE),
        },
        choice(Field::FanSpeed, &["auto", "low", "medium", "high"]),
        choice(
            Field::VaneVertical,
            &["auto", "up", "middle", "down", "swing"],
        ),
        choice(
            Field::VaneHorizontal,
            &["auto", "left", "center", "right", "swing"],
        ),
    ]
}

/// Path segments are device ids chosen by callers; anything outside this set
/// could change the request's meaning, so it is refused before sending.
fn checked_device_id(device_id: &str) -> Result<&str, DriverError> {
    let ok = !device_id.is_empty()
        && device_id.len() <= 128
        && device_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if ok {
        Ok(device_id)
    } else {
        Err(DriverError::UnknownDevice(device_id.to_string()))
    }
}

impl Driver for SimDriver {
    fn list_devices(&self) -> Result<Vec<DeviceInfo>, DriverError> {
        parse_devices(&self.request("GET", "/api/v1/devices", None)?)
    }

    fn read(&self, device_id: &str) -> Result<Reading, DriverError> {
        let id = checked_device_id(device_id)?;
        let body = self
            .request("GET", &format!("/api/v1/devices/{id}/sensors"), None)
            .map_err(|e| name_device(e, id))?;
        parse_sensors(&body)
    }

    fn send(&self, device_id: &str, command: &[(Field, Value)]) -> Result<Accepted, DriverError> {
        let id = checked_device_id(device_id)?;
        let body = serde_json::to_vec(&control_body(command))
            .map_err(|e| DriverError::BadResponse(e.to_string()))?;
        let answer = self
            .request("POST", &format!("/api/v1/devices/{id}/control"), Some(body))
            .map_err(|e| name_device(e, id))?;
        Ok(Accepted {
            request_id: answer
                .get("request_id")
                .and_then(Json::as_str)
                .map(str::to_string),
        })
    }

    fn specs(&self, _device_id: &str) -> Result<Vec<FieldSpec>, DriverError> {
        Ok(field_specs())
    }
}

/// A 404 body says "unknown device"; the caller wants to know which one.
fn name_device(error: DriverError, id: &str) -> DriverError {
    match error {
        DriverError::UnknownDevice(_) => DriverError::UnknownDevice(id.to_string()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_body_uses_upper_case_and_numbers() {
        let body = control_body(&[
            (Field::Power, Value::choice("on")),
            (Field::TargetTemperature, Value::Number(24.5)),
        ]);
        assert_eq!(body, json!({"power": "ON", "target_temperature": 24.5}));
    }

    #[test]
    fn sensor_reading_is_normalised_and_omits_unreported_fields() {
        let body = json!({"power":"On","mode":"Cool","target_temperature":26.0,
            "room_temperature":27.4,"fan_speed":"Auto","vane_vertical":"Middle",
            "online":false,"updated_at":"2026-11-29T10:00:04Z"});
        let reading = parse_sensors(&body).unwrap();
        assert!(!reading.online);
        assert_eq!(reading.values[&Field::Power], Value::choice("on"));
        assert_eq!(
            reading.values[&Field::TargetTemperature],
            Value::Number(26.0)
        );
        assert!(!reading.values.contains_key(&Field::VaneHorizontal));
        assert_eq!(reading.room_temperature, Some(27.4));
    }

    #[test]
    fn sensor_values_of_the_wrong_type_are_reported() {
        let err = parse_sensors(&json!({"power": true})).unwrap_err();
        assert!(matches!(err, DriverError::BadResponse(m) if m.contains("power")));
    }

    #[test]
    fn responses_are_classified_by_status() {
        assert!(classify_response(200, br#"{"ok":1}"#).is_ok());
        assert_eq!(
            classify_response(400, br#"{"error":"mode must be COOL"}"#),
            Err(DriverError::Rejected("400 mode must be COOL".into()))
        );
        assert!(matches!(
            classify_response(401, b"{}"),
            Err(DriverError::Unauthorized(_))
        ));
        assert!(matches!(
            classify_response(503, b"busy"),
            Err(DriverError::Unreachable(m)) if m.contains("503 busy")
        ));
        assert!(matches!(
            classify_response(200, b"not json"),
            Err(DriverError::BadResponse(_))
        ));
    }

    #[test]
    fn device_ids_that_would_change_the_path_are_refused() {
        assert!(checked_device_id("ac-living").is_ok());
        assert!(checked_device_id("../_sim").is_err());
        assert!(checked_device_id("a/b").is_err());
        assert!(checked_device_id("").is_err());
    }
}
