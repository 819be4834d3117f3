//! Device APIs described as data: a profile (JSON) says how one HTTP device
//! API lists devices, takes commands and reports sensors, and how each
//! field is spelled on the way in and on the way out. The plugin receives
//! it through `wasi:config` (`device_profile`), so reaching another API
//! needs no Rust.
//!
//! The simulator's own API is the built-in profile `sim`
//! ([`SIM_PROFILE`]); `profiles/` holds more.
//!
//! A profile is checked when it is loaded; every problem names the field
//! (as a path into the profile) and what is wrong with it. This module owns
//! the format and the mapping between model and device spellings;
//! [`http`] speaks it to the API.

mod builtin;
mod http;

pub use builtin::sim;
pub use http::ProfileDriver;

use super::{DeviceInfo, DriverError, Reading};
use crate::json;
use crate::model::{Allowed, Comparison, Field, FieldSpec, Value};
use serde::Deserialize;
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;

/// The simulator's API (`device-api.md`) as a profile: its readable
/// form. The plugin runs the same profile built as values ([`sim`]), which
/// a test holds equal to this text.
pub const SIM_PROFILE: &str = include_str!("../../../../profiles/sim.json");

/// How requests prove who is asking.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Auth {
    /// `Authorization: Bearer <device_token>`.
    Bearer,
    /// The token as this query parameter.
    Query(String),
}

/// A request: method and path; `{device_id}` in the path is the device.
///
/// Each spec below holds its own `method` and `path` rather than a
/// flattened `Endpoint`: serde buffers every key of a struct with a
/// flattened field before reading it: the profile's parse, run on every
/// call, took 16 µs natively where it now takes 9 (docs/performance.md,
/// "Twenty-third round").
#[derive(Clone, Copy, Debug)]
pub struct Endpoint<'a> {
    pub method: &'a str,
    pub path: &'a str,
}

fn get() -> String {
    "GET".into()
}

/// Where the device list is, and where each device's fields are in it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ListSpec {
    #[serde(default = "get")]
    pub method: String,
    pub path: String,
    /// JSON pointer to the array of devices.
    pub items: String,
    /// Pointers inside one item.
    pub id: String,
    pub name: Option<String>,
    pub kind: Option<String>,
}

/// The control request.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ControlSpec {
    #[serde(default = "get")]
    pub method: String,
    pub path: String,
    /// The body every command starts from; fields are written into it at
    /// their `write` pointers.
    #[serde(default = "empty_object")]
    pub body: Json,
    /// Groups of fields the API only takes together: a command touching one
    /// sends the others too, at their current values.
    #[serde(default)]
    pub together: Vec<Vec<Field>>,
}

/// The request of each spec.
macro_rules! endpoint_of {
    ($($spec:ty),*) => {$(
        impl $spec {
            pub fn endpoint(&self) -> Endpoint<'_> {
                Endpoint {
                    method: &self.method,
                    path: &self.path,
                }
            }
        }
    )*};
}
endpoint_of!(ListSpec, ControlSpec, SensorSpec);

fn empty_object() -> Json {
    Json::Object(Map::new())
}

/// The sensor request and the device-wide parts of its answer.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SensorSpec {
    #[serde(default = "get")]
    pub method: String,
    pub path: String,
    /// Pointer to a boolean; absent means always online.
    pub online: Option<String>,
    pub room_temperature: Option<String>,
    pub updated_at: Option<String>,
}

/// One model value's spellings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Spelling {
    /// What is written.
    pub write: Json,
    /// What may be read back besides `write` (compared case-insensitively).
    #[serde(default)]
    pub read: Vec<Json>,
}

/// A field's model values and their spellings, in the order the profile
/// gives them. A handful per field: a list searched in order costs less
/// than a hash map to build, and the profile is read on every call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spellings(Vec<(String, Spelling)>);

impl Spellings {
    /// The spelling of one model value.
    pub fn get(&self, model: &str) -> Option<&Spelling> {
        self.iter().find(|(m, _)| *m == model).map(|(_, s)| s)
    }

    /// Model values and spellings, in the profile's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Spelling)> {
        self.0.iter().map(|(m, s)| (m.as_str(), s))
    }

    /// The model values, in the profile's order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().map(|(m, _)| m)
    }

    /// The spellings, in the profile's order.
    pub fn values(&self) -> impl Iterator<Item = &Spelling> {
        self.iter().map(|(_, s)| s)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A JSON object of model value to spelling; a value named twice is an
/// error (which of the two would the profile mean?).
impl<'de> Deserialize<'de> for Spellings {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Spellings, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Spellings;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of model values and their spellings")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Spellings, A::Error> {
                // A field has a handful of values; a hint is not trusted
                // beyond that.
                let mut spellings: Vec<(String, Spelling)> =
                    Vec::with_capacity(map.size_hint().unwrap_or(8).min(16));
                while let Some(model) = map.next_key::<String>()? {
                    if spellings.iter().any(|(m, _)| *m == model) {
                        return Err(serde::de::Error::custom(format!(
                            "{model:?} is listed twice"
                        )));
                    }
                    let spelling = map.next_value()?;
                    spellings.push((model, spelling));
                }
                Ok(Spellings(spellings))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// A numeric field.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NumberSpec {
    pub min: f64,
    pub max: f64,
    pub step: f64,
    /// Device value = model value × scale (e.g. 10 for tenths of a degree).
    #[serde(default = "one")]
    pub scale: f64,
    /// How far a read-back (in model units) may be from the value sent.
    pub tolerance: f64,
}

fn one() -> f64 {
    1.0
}

/// One field of the model on this API.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FieldProfile {
    /// Pointer into the control body.
    pub write: String,
    /// Pointer into the sensor answer; absent when the API cannot report it.
    pub read: Option<String>,
    /// For choices: each model value and its spellings, in the order the
    /// profile gives them (error messages list them so).
    pub values: Option<Spellings>,
    /// For numbers.
    pub number: Option<NumberSpec>,
    /// Pointer into the sensor answer to the values this device accepts (an
    /// array, or an object whose keys are the values); absent means every
    /// value in `values`.
    pub allowed_from: Option<String>,
}

/// How long the devices behind this API usually take.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimingSpec {
    /// How long an unchanged device may take before "not applied".
    pub settle_window_ms: Option<u64>,
    /// Reads a different value must hold before it is the answer.
    pub stable_reads: Option<u32>,
}

/// A whole profile.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default = "bearer")]
    pub auth: Auth,
    pub list: ListSpec,
    pub control: ControlSpec,
    pub sensors: SensorSpec,
    /// As written, keyed by field name (so an error can name the key).
    #[serde(rename = "fields")]
    named_fields: BTreeMap<String, FieldProfile>,
    /// The same, by model field.
    #[serde(skip)]
    pub fields: BTreeMap<Field, FieldProfile>,
    pub timing: Option<TimingSpec>,
}

fn bearer() -> Auth {
    Auth::Bearer
}

/// Checks a JSON pointer; `at` names where it is, and is only worked out
/// for an error (the profile is checked on every call).
fn check_pointer(at: impl FnOnce() -> String, pointer: &str) -> Result<(), String> {
    if pointer.is_empty() || pointer.starts_with('/') {
        Ok(())
    } else {
        Err(format!(
            "{}: {pointer:?} is not a JSON pointer (it starts with /)",
            at()
        ))
    }
}

impl Profile {
    /// Reads and checks a profile; the error names the field and the
    /// problem.
    pub fn parse(text: &str) -> Result<Profile, String> {
        // The profile is parsed on every call (instances are fresh), and
        // tracking the path costs about as much as the parse: only a
        // profile that fails is parsed again to say where.
        let mut profile = match serde_json::from_str::<Profile>(text) {
            Ok(profile) => profile,
            Err(_) => return Err(Self::explain(text)),
        };
        for (name, spec) in std::mem::take(&mut profile.named_fields) {
            let field = Field::from_name(&name).ok_or_else(|| {
                format!(
                    "device profile {:?}: fields.{name}: not a field settle knows ({})",
                    profile.name,
                    Field::ALL.map(Field::name).join(", ")
                )
            })?;
            profile.fields.insert(field, spec);
        }
        profile
            .check()
            .map_err(|m| format!("device profile {:?}: {m}", profile.name))?;
        Ok(profile)
    }

    /// Why `text` is not a profile, naming the field where parsing stopped.
    fn explain(text: &str) -> String {
        let mut de = serde_json::Deserializer::from_str(text);
        match serde_path_to_error::deserialize::<_, Profile>(&mut de) {
            Ok(_) => "device profile: not valid JSON for a profile".to_string(),
            Err(e) => {
                let path = e.path().to_string();
                let inner = e.into_inner();
                if path == "." {
                    format!("device profile: {inner}")
                } else {
                    format!("device profile: {path}: {inner}")
                }
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        for (at, path) in [
            ("list.path", &self.list.path),
            ("control.path", &self.control.path),
            ("sensors.path", &self.sensors.path),
        ] {
            if !path.starts_with('/') {
                return Err(format!("{at}: {path:?} must start with /"));
            }
        }
        for (at, path) in [
            ("control.path", &self.control.path),
            ("sensors.path", &self.sensors.path),
        ] {
            if !path.contains("{device_id}") {
                return Err(format!("{at}: {path:?} must contain {{device_id}}"));
            }
        }
        for (at, method) in [
            ("list.method", &self.list.method),
            ("control.method", &self.control.method),
            ("sensors.method", &self.sensors.method),
        ] {
            if !matches!(method.as_str(), "GET" | "POST" | "PUT" | "PATCH") {
                return Err(format!("{at}: {method:?} must be GET, POST, PUT or PATCH"));
            }
        }
        check_pointer(|| "list.items".into(), &self.list.items)?;
        check_pointer(|| "list.id".into(), &self.list.id)?;
        if !self.control.body.is_object() {
            return Err("control.body must be a JSON object".into());
        }
        if self.fields.is_empty() {
            return Err("fields: describe at least one field".into());
        }
        for (field, spec) in &self.fields {
            let at = |key: &str| format!("fields.{field}.{key}");
            check_pointer(|| at("write"), &spec.write)?;
            if spec.write.is_empty() {
                return Err(format!("{}: must point inside the body", at("write")));
            }
            if let Some(read) = &spec.read {
                check_pointer(|| at("read"), read)?;
            }
            match (field, &spec.values, &spec.number) {
                (Field::TargetTemperature, _, None) => {
                    return Err(format!(
                        "{}: is required for target_temperature",
                        at("number")
                    ));
                }
                (Field::TargetTemperature, Some(_), _) => {
                    return Err(format!("{}: target_temperature is a number", at("values")));
                }
                (Field::TargetTemperature, None, Some(n)) => {
                    if n.step <= 0.0 {
                        return Err(format!("{}: must be above 0", at("number.step")));
                    }
                    if n.min > n.max {
                        return Err(format!(
                            "{}: min {} is above max {}",
                            at("number"),
                            n.min,
                            n.max
                        ));
                    }
                    if n.scale <= 0.0 {
                        return Err(format!("{}: must be above 0", at("number.scale")));
                    }
                    if !(n.tolerance >= 0.0 && n.tolerance < n.step / 2.0) {
                        return Err(format!(
                            "{}: must be at least 0 and below half the step ({}), or neighbouring values would match",
                            at("number.tolerance"),
                            n.step / 2.0
                        ));
                    }
                }
                (_, None, _) => return Err(format!("{}: is required for {field}", at("values"))),
                (_, Some(_), Some(_)) => {
                    return Err(format!(
                        "{}: {field} takes values, not a number",
                        at("number")
                    ));
                }
                (_, Some(values), None) => {
                    if values.is_empty() {
                        return Err(format!("{}: list at least one value", at("values")));
                    }
                    if let Some(bad) = values.keys().find(|k| k.to_ascii_lowercase() != *k) {
                        return Err(format!(
                            "{}: model values are lower case, not {bad:?}",
                            at("values")
                        ));
                    }
                }
            }
            if let Some(from) = &spec.allowed_from {
                check_pointer(|| at("allowed_from"), from)?;
            }
        }
        for (i, group) in self.control.together.iter().enumerate() {
            if let Some(missing) = group.iter().find(|f| !self.fields.contains_key(f)) {
                return Err(format!(
                    "control.together[{i}]: {missing} is not one of the profile's fields"
                ));
            }
        }
        Ok(())
    }

    /// The model value a device spelling stands for.
    fn model_value(field: Field, spec: &FieldProfile, raw: &Json) -> Result<Value, DriverError> {
        if let Some(number) = &spec.number {
            let n = raw.as_f64().ok_or_else(|| {
                DriverError::BadResponse(format!("sensor field {field} is not a number: {raw}"))
            })?;
            return Ok(Value::Number(n / number.scale));
        }
        let same = |a: &Json, b: &Json| match (a, b) {
            (Json::String(x), Json::String(y)) => x.eq_ignore_ascii_case(y),
            _ => a == b,
        };
        let values = spec.values.as_ref().expect("checked at load");
        for (model, spelling) in values.iter() {
            if same(&spelling.write, raw) || spelling.read.iter().any(|r| same(r, raw)) {
                return Ok(Value::Choice(model.to_string()));
            }
        }
        // A value the profile does not spell is still reported as it is, so
        // a mismatch shows; one of another type than every spelling is an
        // answer the profile does not describe.
        let same_type =
            |s: &Spelling| std::mem::discriminant(&s.write) == std::mem::discriminant(raw);
        match raw {
            Json::String(s) if values.values().any(same_type) => Ok(Value::choice(s)),
            Json::Bool(_) | Json::Number(_) if values.values().any(same_type) => {
                Ok(Value::Choice(raw.to_string()))
            }
            other => Err(DriverError::BadResponse(format!(
                "sensor field {field} has unexpected value {other}"
            ))),
        }
    }

    /// The device spelling of a model value.
    fn device_value(field: Field, spec: &FieldProfile, value: &Value) -> Result<Json, DriverError> {
        match (value, &spec.number, &spec.values) {
            (Value::Number(n), Some(number), _) => Ok(serde_json::json!(n * number.scale)),
            (Value::Choice(c), _, Some(values)) => {
                values.get(c).map(|s| s.write.clone()).ok_or_else(|| {
                    DriverError::Rejected(format!("{field} {c} has no spelling in the profile"))
                })
            }
            _ => Err(DriverError::Rejected(format!("{field} cannot be {value}"))),
        }
    }

    /// Reads a sensor answer into model spelling. A field without a `read`
    /// pointer, or whose pointer finds nothing, is left out: unverifiable.
    pub fn parse_sensors(&self, body: &Json) -> Result<Reading, DriverError> {
        let at = |pointer: &Option<String>| pointer.as_ref().and_then(|p| json::pointer(body, p));
        let mut reading = Reading {
            online: at(&self.sensors.online)
                .map(|v| v.as_bool().unwrap_or(true))
                .unwrap_or(true),
            room_temperature: at(&self.sensors.room_temperature).and_then(Json::as_f64),
            updated_at: at(&self.sensors.updated_at)
                .and_then(Json::as_str)
                .map(str::to_string),
            ..Reading::default()
        };
        for (field, spec) in &self.fields {
            match at(&spec.read) {
                None | Some(Json::Null) => {}
                Some(raw) => {
                    reading
                        .values
                        .insert(*field, Self::model_value(*field, spec, raw)?);
                }
            }
        }
        Ok(reading)
    }

    /// The control body for a command (after `together` was filled in).
    pub fn control_body(&self, command: &[(Field, Value)]) -> Result<Json, DriverError> {
        let mut body = self.control.body.clone();
        for (field, value) in command {
            let spec = self.fields.get(field).ok_or_else(|| {
                DriverError::Rejected(format!("this API has no {field} (profile {})", self.name))
            })?;
            let device = Self::device_value(*field, spec, value)?;
            put(&mut body, &spec.write, device);
        }
        Ok(body)
    }

    /// The fields a command must also carry because the API takes them
    /// only together with one it has.
    pub fn companions(&self, command: &[(Field, Value)]) -> Vec<Field> {
        let has = |f: &Field| command.iter().any(|(c, _)| c == f);
        let mut missing = Vec::new();
        for group in &self.control.together {
            if group.iter().any(has) {
                for f in group {
                    if !has(f) && !missing.contains(f) {
                        missing.push(*f);
                    }
                }
            }
        }
        missing
    }

    /// What the device accepts; `sensors` is a sensor answer, needed only
    /// when a field's values come from the device.
    pub fn specs(&self, sensors: Option<&Json>) -> Vec<FieldSpec> {
        self.fields
            .iter()
            .map(|(field, spec)| {
                let (allowed, comparison) = match (&spec.number, &spec.values) {
                    (Some(n), _) => (
                        Allowed::Range {
                            min: n.min,
                            max: n.max,
                            step: n.step,
                        },
                        Comparison::Tolerance(n.tolerance),
                    ),
                    (None, values) => {
                        let fixed: Vec<String> = values
                            .iter()
                            .flat_map(|v| v.keys().map(str::to_string))
                            .collect();
                        let from_device = spec
                            .allowed_from
                            .as_ref()
                            .and_then(|p| sensors.and_then(|s| json::pointer(s, p)))
                            .map(|listed| {
                                let raws: Vec<Json> = match listed {
                                    Json::Array(items) => items.clone(),
                                    Json::Object(map) => {
                                        map.keys().map(|k| Json::String(k.clone())).collect()
                                    }
                                    _ => Vec::new(),
                                };
                                raws.iter()
                                    .filter_map(|raw| Self::model_value(*field, spec, raw).ok())
                                    .filter_map(|v| match v {
                                        Value::Choice(c) if fixed.contains(&c) => Some(c),
                                        _ => None,
                                    })
                                    .collect::<Vec<_>>()
                            });
                        (
                            Allowed::Choices(from_device.unwrap_or(fixed)),
                            Comparison::CaseInsensitive,
                        )
                    }
                };
                FieldSpec {
                    field: *field,
                    allowed,
                    comparison,
                }
            })
            .collect()
    }

    /// The device list answer.
    pub fn parse_devices(&self, body: &Json) -> Result<Vec<DeviceInfo>, DriverError> {
        let items = json::pointer(body, &self.list.items)
            .and_then(Json::as_array)
            .ok_or_else(|| {
                DriverError::BadResponse(format!("device list has no array at {}", self.list.items))
            })?;
        items
            .iter()
            .map(|item| {
                let text = |p: &Option<String>| {
                    p.as_ref()
                        .and_then(|p| json::pointer(item, p))
                        .and_then(Json::as_str)
                        .map(str::to_string)
                };
                Ok(DeviceInfo {
                    id: text(&Some(self.list.id.clone()))
                        .ok_or_else(|| DriverError::BadResponse("a device has no id".into()))?,
                    name: text(&self.list.name).unwrap_or_default(),
                    kind: text(&self.list.kind).unwrap_or_else(|| "unknown".into()),
                })
            })
            .collect()
    }
}

/// Writes `value` at `pointer` inside `body`, making objects on the way.
fn put(body: &mut Json, pointer: &str, value: Json) {
    let mut at = body;
    let parts: Vec<&str> = pointer.split('/').skip(1).collect();
    for (i, part) in parts.iter().enumerate() {
        let key = part.replace("~1", "/").replace("~0", "~");
        if !at.is_object() {
            *at = Json::Object(Map::new());
        }
        let map = at.as_object_mut().expect("made an object");
        if i + 1 == parts.len() {
            map.insert(key, value);
            return;
        }
        at = map.entry(key).or_insert_with(|| Json::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sim() -> Profile {
        Profile::parse(SIM_PROFILE).expect("the built-in profile is valid")
    }

    #[test]
    fn the_sim_profile_writes_upper_case_and_reads_any_case() {
        let p = sim();
        let body = p
            .control_body(&[
                (Field::Power, Value::choice("on")),
                (Field::TargetTemperature, Value::Number(24.5)),
            ])
            .unwrap();
        assert_eq!(body, json!({"power": "ON", "target_temperature": 24.5}));
        let reading = p
            .parse_sensors(
                &json!({"power":"On","mode":"Cool","target_temperature":26.0,
                "room_temperature":27.4,"online":false,"updated_at":"2026-11-29T10:00:04Z"}),
            )
            .unwrap();
        assert!(!reading.online);
        assert_eq!(reading.values[&Field::Power], Value::choice("on"));
        assert_eq!(reading.values[&Field::Mode], Value::choice("cool"));
        assert!(!reading.values.contains_key(&Field::FanSpeed));
        assert_eq!(reading.room_temperature, Some(27.4));
    }

    #[test]
    fn sensor_values_of_the_wrong_type_are_reported() {
        let err = sim().parse_sensors(&json!({"power": true})).unwrap_err();
        assert!(matches!(err, DriverError::BadResponse(m) if m.contains("power")));
    }

    /// The three request specs hold their own `method` and `path` (no
    /// flattened endpoint): a misspelt key in any of them is still refused
    /// by name, and a missing method is still GET.
    #[test]
    fn request_specs_refuse_unknown_keys_and_default_to_get() {
        for spec in ["list", "control", "sensors"] {
            let mut bad: Json = serde_json::from_str(SIM_PROFILE).unwrap();
            bad[spec]["methd"] = json!("GET");
            let err = Profile::parse(&bad.to_string()).unwrap_err();
            assert!(
                err.contains(spec) && err.contains("unknown field `methd`"),
                "{spec}: {err}"
            );
        }
        let p = sim();
        assert_eq!(p.list.endpoint().method, "GET");
        assert_eq!(p.sensors.endpoint().method, "GET");
        assert_eq!(p.control.endpoint().method, "POST");
        assert_eq!(
            p.sensors.endpoint().path,
            "/api/v1/devices/{device_id}/sensors"
        );
    }

    #[test]
    fn a_bad_profile_names_the_field_and_the_problem() {
        let mut bad: Json = serde_json::from_str(SIM_PROFILE).unwrap();
        bad["fields"]["power"]["writ"] = json!("/x");
        let err = Profile::parse(&bad.to_string()).unwrap_err();
        assert!(
            err.contains("fields.power") && err.contains("unknown field `writ`"),
            "{err}"
        );

        let mut bad: Json = serde_json::from_str(SIM_PROFILE).unwrap();
        bad["fields"]["target_temperature"]["number"]["tolerance"] = json!(0.5);
        let err = Profile::parse(&bad.to_string()).unwrap_err();
        assert!(
            err.contains("fields.target_temperature.number.tolerance"),
            "{err}"
        );

        let mut bad: Json = serde_json::from_str(SIM_PROFILE).unwrap();
        bad["sensors"]["path"] = json!("/api/v1/sensors");
        let err = Profile::parse(&bad.to_string()).unwrap_err();
        assert!(
            err.contains("sensors.path") && err.contains("{device_id}"),
            "{err}"
        );

        let mut bad: Json = serde_json::from_str(SIM_PROFILE).unwrap();
        bad["fields"]["fan_speed"]["values"] = json!({});
        let err = Profile::parse(&bad.to_string()).unwrap_err();
        assert!(err.contains("fields.fan_speed.values"), "{err}");

        let mut bad: Json = serde_json::from_str(SIM_PROFILE).unwrap();
        bad["fields"]["humidity"] = json!({"write": "/h"});
        let err = Profile::parse(&bad.to_string()).unwrap_err();
        assert!(err.contains("fields") && err.contains("humidity"), "{err}");

        let err = Profile::parse("{").unwrap_err();
        assert!(err.starts_with("device profile:"), "{err}");

        // A model value spelled twice: which one would the profile mean?
        let twice = SIM_PROFILE.replacen(
            r#""on": {"write": "ON"}"#,
            r#""on": {"write": "ON"}, "on": {"write": "1"}"#,
            1,
        );
        assert_ne!(twice, SIM_PROFILE);
        let err = Profile::parse(&twice).unwrap_err();
        assert!(
            err.contains("fields.power.values") && err.contains(r#""on" is listed twice"#),
            "{err}"
        );

        let mut bad: Json = serde_json::from_str(SIM_PROFILE).unwrap();
        bad["fields"]["power"]["read"] = json!("power");
        let err = Profile::parse(&bad.to_string()).unwrap_err();
        assert!(
            err.contains("fields.power.read") && err.contains("not a JSON pointer"),
            "{err}"
        );
    }

    #[test]
    fn values_can_come_from_the_device() {
        let profile = Profile::parse(include_str!("../../../../profiles/sensibo.json")).unwrap();
        let answer = json!({"result": {"remoteCapabilities": {"modes": {"cool": {}, "fan": {}}}}});
        let specs = profile.specs(Some(&answer));
        let mode = specs.iter().find(|s| s.field == Field::Mode).unwrap();
        assert_eq!(mode.allowed, Allowed::choices(&["cool", "fan"]));
    }

    #[test]
    fn fields_sent_together_are_filled_in() {
        let profile = Profile::parse(include_str!("../../../../profiles/sensibo.json")).unwrap();
        let missing = profile.companions(&[(Field::TargetTemperature, Value::Number(22.0))]);
        assert!(
            missing.contains(&Field::Power) && missing.contains(&Field::Mode),
            "{missing:?}"
        );
        let body = profile
            .control_body(&[
                (Field::Power, Value::choice("on")),
                (Field::TargetTemperature, Value::Number(22.0)),
            ])
            .unwrap();
        assert_eq!(body["acState"]["on"], json!(true));
        assert_eq!(body["acState"]["targetTemperature"], json!(22.0));
        assert_eq!(body["acState"]["temperatureUnit"], json!("C"));
    }
}
