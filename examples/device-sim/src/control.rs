//! Strict parsing of a control request body into a [`Command`].
//!
//! The simulator is a test double for drivers, so it is stricter than most real APIs: every
//! mistake a driver could make (sensor spelling sent back, a read-only field, an off-step
//! temperature) gets a `400` whose message names the field and what it accepts.

use serde_json::{Map, Value};

use crate::model::{
    Command, FanSpeed, Mode, Power, SensorField, TARGET_MAX, TARGET_MIN, TARGET_STEP,
    VaneHorizontal, VaneVertical,
};

/// Parses and validates a control body. On error, the message lists every problem found,
/// separated by `"; "`, in field-name order.
pub fn parse_command(body: &[u8]) -> Result<Command, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("body is not valid JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err(format!(
            "body must be a JSON object of control fields, got {}",
            describe(&value)
        ));
    };
    if map.is_empty() {
        return Err(format!(
            "body must set at least one writable field: {}",
            SensorField::list(SensorField::WRITABLE)
        ));
    }
    command_from_map(&map)
}

fn command_from_map(map: &Map<String, Value>) -> Result<Command, String> {
    let mut cmd = Command::default();
    let mut errors = Vec::new();
    for (key, value) in map {
        let result = match SensorField::from_name(key) {
            Some(SensorField::Power) => {
                setting::<Power>(key, value, Power::from_control, Power::control_list)
                    .map(|v| cmd.power = Some(v))
            }
            Some(SensorField::Mode) => setting(key, value, Mode::from_control, Mode::control_list)
                .map(|v| cmd.mode = Some(v)),
            Some(SensorField::FanSpeed) => {
                setting(key, value, FanSpeed::from_control, FanSpeed::control_list)
                    .map(|v| cmd.fan_speed = Some(v))
            }
            Some(SensorField::VaneVertical) => setting(
                key,
                value,
                VaneVertical::from_control,
                VaneVertical::control_list,
            )
            .map(|v| cmd.vane_vertical = Some(v)),
            Some(SensorField::VaneHorizontal) => setting(
                key,
                value,
                VaneHorizontal::from_control,
                VaneHorizontal::control_list,
            )
            .map(|v| cmd.vane_horizontal = Some(v)),
            Some(SensorField::TargetTemperature) => {
                temperature(value).map(|v| cmd.target_temperature = Some(v))
            }
            Some(SensorField::RoomTemperature) => Err(format!(
                "field `room_temperature` is read-only; writable fields are {}",
                SensorField::list(SensorField::WRITABLE)
            )),
            None => Err(format!(
                "unknown field `{key}`; writable fields are {}",
                SensorField::list(SensorField::WRITABLE)
            )),
        };
        if let Err(e) = result {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        Ok(cmd)
    } else {
        Err(errors.join("; "))
    }
}

/// Parses an enumerated setting in control spelling.
fn setting<T>(
    key: &str,
    value: &Value,
    parse: fn(&str) -> Option<T>,
    allowed: fn() -> String,
) -> Result<T, String> {
    let Value::String(s) = value else {
        return Err(format!(
            "field `{key}` must be a string, one of {}; got {}",
            allowed(),
            describe(value)
        ));
    };
    parse(s).ok_or_else(|| {
        format!(
            "field `{key}` must be one of {} (control spelling is exactly upper case); got \"{s}\"",
            allowed()
        )
    })
}

/// Parses `target_temperature`: a number in range and on the step grid.
fn temperature(value: &Value) -> Result<f64, String> {
    let key = SensorField::TargetTemperature.name();
    let Some(t) = value.as_f64() else {
        return Err(format!(
            "field `{key}` must be a number from {TARGET_MIN:.1} to {TARGET_MAX:.1} in steps of {TARGET_STEP}; got {}",
            describe(value)
        ));
    };
    if !(TARGET_MIN..=TARGET_MAX).contains(&t) {
        return Err(format!(
            "field `{key}` must be from {TARGET_MIN:.1} to {TARGET_MAX:.1}; got {t}"
        ));
    }
    if (t / TARGET_STEP).fract() != 0.0 {
        return Err(format!(
            "field `{key}` must be a multiple of {TARGET_STEP}; got {t}"
        ));
    }
    Ok(t)
}

/// Names a JSON value's type (and shows short scalars) for error messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) => format!("a number ({n})"),
        Value::String(s) => format!("a string (\"{s}\")"),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> String {
        parse_command(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn a_full_valid_body_sets_every_field() {
        let cmd = parse_command(
            br#"{"power":"ON","mode":"HEAT","target_temperature":21.5,"fan_speed":"HIGH",
                 "vane_vertical":"SWING","vane_horizontal":"LEFT"}"#,
        )
        .unwrap();
        assert_eq!(cmd.power, Some(Power::On));
        assert_eq!(cmd.mode, Some(Mode::Heat));
        assert_eq!(cmd.target_temperature, Some(21.5));
        assert_eq!(cmd.fan_speed, Some(FanSpeed::High));
        assert_eq!(cmd.vane_vertical, Some(VaneVertical::Swing));
        assert_eq!(cmd.vane_horizontal, Some(VaneHorizontal::Left));
    }

    #[test]
    fn integer_temperatures_are_taken_as_numbers() {
        let cmd = parse_command(br#"{"target_temperature":22}"#).unwrap();
        assert_eq!(cmd.target_temperature, Some(22.0));
    }

    #[test]
    fn sensor_spelling_is_rejected_with_the_allowed_values() {
        let e = err(r#"{"mode":"Cool"}"#);
        assert!(e.contains("`mode`"), "{e}");
        assert!(e.contains(r#""COOL", "HEAT", "DRY", "FAN", "AUTO""#), "{e}");
        assert!(e.contains(r#"got "Cool""#), "{e}");
    }

    #[test]
    fn room_temperature_is_read_only() {
        assert!(err(r#"{"room_temperature":22.0}"#).contains("`room_temperature` is read-only"));
    }

    #[test]
    fn unknown_fields_are_named() {
        assert!(err(r#"{"swing":"ON"}"#).contains("unknown field `swing`"));
    }

    #[test]
    fn wrong_types_are_named() {
        assert!(err(r#"{"power":true}"#).contains("`power` must be a string"));
        assert!(
            err(r#"{"target_temperature":"22"}"#).contains("`target_temperature` must be a number")
        );
    }

    #[test]
    fn temperatures_out_of_range_or_off_step_are_rejected() {
        assert!(err(r#"{"target_temperature":30.5}"#).contains("from 16.0 to 30.0; got 30.5"));
        assert!(err(r#"{"target_temperature":15.5}"#).contains("got 15.5"));
        assert!(err(r#"{"target_temperature":22.3}"#).contains("multiple of 0.5; got 22.3"));
    }

    #[test]
    fn empty_non_object_and_invalid_bodies_are_rejected() {
        assert!(err("{}").contains("at least one writable field"));
        assert!(err("[]").contains("must be a JSON object"));
        assert!(err("{").contains("not valid JSON"));
        assert!(err("").contains("not valid JSON"));
    }

    #[test]
    fn every_problem_in_a_body_is_reported() {
        let e = err(r#"{"power":"on","mode":"cool"}"#);
        assert!(e.contains("`power`") && e.contains("`mode`"), "{e}");
    }
}
