//! The device model every driver maps onto, and the rule that says when a value
//! read back from a device equals the value that was sent.
//!
//! Drivers spell the same thing differently (`ON`, `On`, `1`); the model has one
//! canonical spelling (lower case, `°C` numbers), and comparisons happen there.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A writable quantity of an air conditioner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    Power,
    Mode,
    TargetTemperature,
    FanSpeed,
    VaneVertical,
    VaneHorizontal,
}

impl Field {
    /// Every field, in the order results list them.
    pub const ALL: [Field; 6] = [
        Field::Power,
        Field::Mode,
        Field::TargetTemperature,
        Field::FanSpeed,
        Field::VaneVertical,
        Field::VaneHorizontal,
    ];

    /// The field's name in tool arguments, results and the simulator's API.
    pub fn name(self) -> &'static str {
        match self {
            Field::Power => "power",
            Field::Mode => "mode",
            Field::TargetTemperature => "target_temperature",
            Field::FanSpeed => "fan_speed",
            Field::VaneVertical => "vane_vertical",
            Field::VaneHorizontal => "vane_horizontal",
        }
    }

    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A field's value in the model's canonical spelling. Stored as a bare JSON
/// number or string.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Number(f64),
    /// An enumerated value, always lower case in the model.
    Choice(String),
}

/// What `#[serde(untagged)]` would accept, without its cost: an untagged
/// enum tries `Number` first and builds an error message for every string
/// it then reads as a `Choice`, and every reading the plugin remembers
/// holds several.
impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
                Ok(Value::Number(n))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
                Ok(Value::Number(n as f64))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
                Ok(Value::Number(n as f64))
            }
            fn visit_str<E>(self, text: &str) -> Result<Value, E> {
                Ok(Value::Choice(text.to_string()))
            }
            fn visit_string<E>(self, text: String) -> Result<Value, E> {
                Ok(Value::Choice(text))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl Value {
    /// A choice in canonical (lower-case) spelling, whatever case it came in.
    pub fn choice(text: &str) -> Value {
        Value::Choice(text.trim().to_ascii_lowercase())
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Number(n) => write!(f, "{n}"),
            Value::Choice(c) => f.write_str(c),
        }
    }
}

/// The values a field may be set to on a device.
#[derive(Clone, Debug, PartialEq)]
pub enum Allowed {
    /// One of these canonical (lower-case) choices.
    Choices(Vec<String>),
    /// A number in `min..=max` that is a whole multiple of `step` from `min`.
    Range { min: f64, max: f64, step: f64 },
}

impl Allowed {
    pub fn choices(items: &[&str]) -> Allowed {
        Allowed::Choices(items.iter().map(|s| s.to_string()).collect())
    }

    /// Checks a requested value, returning it canonicalised, or a message that
    /// says what is allowed.
    pub fn check(&self, field: Field, value: &Value) -> Result<Value, String> {
        match (self, value) {
            (Allowed::Choices(choices), Value::Choice(c)) => {
                let canonical = c.to_ascii_lowercase();
                if choices.contains(&canonical) {
                    Ok(Value::Choice(canonical))
                } else {
                    Err(format!(
                        "{field} must be one of {}, not {c:?}",
                        choices.join(", ")
                    ))
                }
            }
            (Allowed::Range { min, max, step }, Value::Number(n)) => {
                if !n.is_finite() || *n < *min || *n > *max {
                    return Err(format!("{field} must be between {min} and {max}, not {n}"));
                }
                let steps = (n - min) / step;
                if (steps - steps.round()).abs() > 1e-9 {
                    return Err(format!("{field} must be a multiple of {step}, not {n}"));
                }
                Ok(Value::Number(*n))
            }
            (Allowed::Choices(choices), Value::Number(n)) => Err(format!(
                "{field} must be one of {}, not the number {n}",
                choices.join(", ")
            )),
            (Allowed::Range { min, max, .. }, Value::Choice(c)) => Err(format!(
                "{field} must be a number between {min} and {max}, not {c:?}"
            )),
        }
    }
}

/// How a value read back is compared with the value sent.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Comparison {
    /// Equal ignoring ASCII case (`ON` = `On` = `on`).
    CaseInsensitive,
    /// Equal within an absolute tolerance.
    Tolerance(f64),
}

impl Comparison {
    pub fn matches(self, sent: &Value, observed: &Value) -> bool {
        match (self, sent, observed) {
            (Comparison::CaseInsensitive, Value::Choice(a), Value::Choice(b)) => {
                a.eq_ignore_ascii_case(b)
            }
            (Comparison::Tolerance(t), Value::Number(a), Value::Number(b)) => (a - b).abs() <= t,
            // A number where a choice belongs (or the reverse) never matches.
            _ => false,
        }
    }
}

/// What the model knows about one field of one device.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldSpec {
    pub field: Field,
    pub allowed: Allowed,
    pub comparison: Comparison,
}

/// What several devices accept, as one spec per field: the union of their
/// ranges (a step shared by all, or none), the union of their choices.
pub fn union_of_devices(specs: impl IntoIterator<Item = FieldSpec>) -> Vec<FieldSpec> {
    let mut out: Vec<FieldSpec> = Vec::new();
    for spec in specs {
        let Some(known) = out.iter_mut().find(|s| s.field == spec.field) else {
            out.push(spec);
            continue;
        };
        known.allowed = match (&known.allowed, spec.allowed) {
            (
                Allowed::Range { min, max, step },
                Allowed::Range {
                    min: min2,
                    max: max2,
                    step: step2,
                },
            ) => Allowed::Range {
                min: min.min(min2),
                max: max.max(max2),
                step: common_step(*step, step2),
            },
            (Allowed::Choices(a), Allowed::Choices(b)) => {
                let mut all = a.clone();
                all.extend(b.into_iter().filter(|c| !a.contains(c)));
                Allowed::Choices(all)
            }
            (mine, _) => mine.clone(),
        };
    }
    out
}

/// The smaller step when the larger is a whole multiple of it (every value
/// either device accepts is then a multiple of it); otherwise 0, no step.
fn common_step(a: f64, b: f64) -> f64 {
    let (small, large) = if a <= b { (a, b) } else { (b, a) };
    let ratio = large / small;
    if small > 0.0 && (ratio - ratio.round()).abs() < 1e-9 {
        small
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_what_they_write_and_refuse_other_json() {
        for value in [
            Value::Number(21.5),
            Value::Number(-3.0),
            Value::Choice("cool".into()),
        ] {
            let text = serde_json::to_string(&value).unwrap();
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
        }
        // Integers, as a device or an older record may write them.
        assert_eq!(
            serde_json::from_str::<Value>("24").unwrap(),
            Value::Number(24.0)
        );
        assert_eq!(
            serde_json::from_str::<Value>("-2").unwrap(),
            Value::Number(-2.0)
        );
        // Inside a map, as readings store them, and through serde's
        // buffered path (a flattened struct).
        let map: std::collections::BTreeMap<Field, Value> =
            serde_json::from_str(r#"{"power":"on","target_temperature":23}"#).unwrap();
        assert_eq!(map[&Field::TargetTemperature], Value::Number(23.0));
        #[derive(Deserialize)]
        struct Outer {
            #[serde(flatten)]
            inner: Inner,
        }
        #[derive(Deserialize)]
        struct Inner {
            value: Value,
        }
        let outer: Outer = serde_json::from_str(r#"{"value":"heat"}"#).unwrap();
        assert_eq!(outer.inner.value, Value::Choice("heat".into()));
        for bad in ["true", "null", "[1]", r#"{"a":1}"#] {
            let error = serde_json::from_str::<Value>(bad).unwrap_err().to_string();
            assert!(error.contains("a number or a string"), "{bad}: {error}");
        }
    }

    #[test]
    fn choices_compare_case_insensitively() {
        let rule = Comparison::CaseInsensitive;
        assert!(rule.matches(&Value::choice("ON"), &Value::choice("On")));
        assert!(rule.matches(&Value::Choice("on".into()), &Value::Choice("ON".into())));
        assert!(!rule.matches(&Value::choice("on"), &Value::choice("off")));
    }

    #[test]
    fn numbers_compare_within_tolerance() {
        let rule = Comparison::Tolerance(0.1);
        assert!(rule.matches(&Value::Number(26.0), &Value::Number(26.05)));
        assert!(!rule.matches(&Value::Number(26.0), &Value::Number(26.5)));
        assert!(!rule.matches(&Value::Number(26.0), &Value::choice("26")));
    }

    #[test]
    fn range_rejects_values_off_step_or_out_of_range() {
        let allowed = Allowed::Range {
            min: 16.0,
            max: 30.0,
            step: 0.5,
        };
        let field = Field::TargetTemperature;
        assert_eq!(
            allowed.check(field, &Value::Number(26.5)),
            Ok(Value::Number(26.5))
        );
        let err = allowed.check(field, &Value::Number(26.3)).unwrap_err();
        assert!(err.contains("multiple of 0.5"), "{err}");
        let err = allowed.check(field, &Value::Number(31.0)).unwrap_err();
        assert!(err.contains("between 16 and 30"), "{err}");
        let err = allowed.check(field, &Value::Number(f64::NAN)).unwrap_err();
        assert!(err.contains("between"), "{err}");
    }

    #[test]
    fn choices_are_canonicalised_and_listed_on_error() {
        let allowed = Allowed::choices(&["on", "off"]);
        assert_eq!(
            allowed.check(Field::Power, &Value::Choice("ON".into())),
            Ok(Value::choice("on"))
        );
        let err = allowed
            .check(Field::Power, &Value::Choice("maybe".into()))
            .unwrap_err();
        assert_eq!(err, "power must be one of on, off, not \"maybe\"");
    }

    #[test]
    fn several_devices_accept_the_union_of_their_ranges_and_choices() {
        let spec = |allowed| FieldSpec {
            field: Field::TargetTemperature,
            allowed,
            comparison: Comparison::Tolerance(0.1),
        };
        let union = union_of_devices([
            spec(Allowed::Range {
                min: 16.0,
                max: 30.0,
                step: 0.5,
            }),
            spec(Allowed::Range {
                min: 7.0,
                max: 35.0,
                step: 1.0,
            }),
        ]);
        assert_eq!(
            union[0].allowed,
            Allowed::Range {
                min: 7.0,
                max: 35.0,
                step: 0.5
            }
        );
        let modes = union_of_devices([
            FieldSpec {
                field: Field::Mode,
                allowed: Allowed::choices(&["cool", "heat"]),
                comparison: Comparison::CaseInsensitive,
            },
            FieldSpec {
                field: Field::Mode,
                allowed: Allowed::choices(&["heat", "dry"]),
                comparison: Comparison::CaseInsensitive,
            },
        ]);
        assert_eq!(modes[0].allowed, Allowed::choices(&["cool", "heat", "dry"]));
        assert_eq!(common_step(0.5, 0.3), 0.0, "no step both share");
    }

    #[test]
    fn field_names_round_trip() {
        for field in Field::ALL {
            assert_eq!(Field::from_name(field.name()), Some(field));
        }
        assert_eq!(Field::from_name("room_temperature"), None);
    }
}
