//! Faults a device can have, how they are written (JSON for `/_sim`, `KIND[:PARAMS]` for
//! `--fault`), and the set of faults active on one device.
//!
//! Faults exist because a `200` from a control endpoint proves nothing; settle must notice
//! devices that are offline, ignore commands, apply something else, or answer slowly.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

/// Default lower bound of a `clamp` fault, °C.
pub const CLAMP_DEFAULT_MIN: f64 = 18.0;
/// Default upper bound of a `clamp` fault, °C.
pub const CLAMP_DEFAULT_MAX: f64 = 28.0;
/// Default failure share of a `flaky` fault given without a rate on the command line.
pub const FLAKY_DEFAULT_RATE: f64 = 0.5;

/// One fault. Serialises to the same JSON that `POST /_sim/devices/{id}/faults` takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Control still answers `200`, nothing is applied (not even commands already pending),
    /// sensors report the last values with `"online": false`.
    Offline,
    /// Online; control answers `200` and the command is dropped.
    Ignore,
    /// Applied target temperatures are rounded to whole degrees (if `round`), then clamped to
    /// `min..=max`. Other fields are untouched.
    Clamp {
        /// Lowest temperature the device applies.
        min: f64,
        /// Highest temperature the device applies.
        max: f64,
        /// Round to a whole degree before clamping.
        round: bool,
    },
    /// A share `rate` (0..=1) of sensor reads fail with `503`, after `hang_ms` if non-zero.
    Flaky {
        /// Share of sensor reads that fail.
        rate: f64,
        /// How long a failing read hangs before answering `503`.
        hang_ms: u64,
    },
    /// Every `/api/v1` response about the device is delayed by `ms`.
    Latency {
        /// Added delay in milliseconds.
        ms: u64,
    },
}

/// The kind of a [`Fault`], used to clear one kind (`DELETE /_sim/devices/{id}/faults/{kind}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// [`Fault::Offline`]
    Offline,
    /// [`Fault::Ignore`]
    Ignore,
    /// [`Fault::Clamp`]
    Clamp,
    /// [`Fault::Flaky`]
    Flaky,
    /// [`Fault::Latency`]
    Latency,
}

impl FaultKind {
    /// Every kind, in documentation order.
    pub const ALL: &'static [FaultKind] = &[
        FaultKind::Offline,
        FaultKind::Ignore,
        FaultKind::Clamp,
        FaultKind::Flaky,
        FaultKind::Latency,
    ];

    /// The kind's name as written in JSON and flags.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Offline => "offline",
            FaultKind::Ignore => "ignore",
            FaultKind::Clamp => "clamp",
            FaultKind::Flaky => "flaky",
            FaultKind::Latency => "latency",
        }
    }

    fn list() -> String {
        Self::ALL
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::str::FromStr for FaultKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown fault kind `{s}`; expected one of {}", Self::list()))
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Fault {
    /// The fault's kind.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Offline => FaultKind::Offline,
            Fault::Ignore => FaultKind::Ignore,
            Fault::Clamp { .. } => FaultKind::Clamp,
            Fault::Flaky { .. } => FaultKind::Flaky,
            Fault::Latency { .. } => FaultKind::Latency,
        }
    }

    /// Parses the JSON body of `POST /_sim/devices/{id}/faults`, e.g.
    /// `{"kind":"clamp","min":18.0,"max":28.0,"round":false}`. Unknown or mistyped members
    /// are errors that name the member.
    pub fn from_json(body: &[u8]) -> Result<Fault, String> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| format!("body is not valid JSON: {e}"))?;
        let Value::Object(map) = value else {
            return Err("fault must be a JSON object like {\"kind\":\"offline\"}".to_owned());
        };
        let kind: FaultKind = match map.get("kind") {
            Some(Value::String(k)) => k.parse()?,
            Some(_) => return Err("fault member `kind` must be a string".to_owned()),
            None => {
                return Err(format!(
                    "fault is missing `kind`; expected one of {}",
                    FaultKind::list()
                ));
            }
        };
        let fields = Fields { kind, map: &map };
        let fault = match kind {
            FaultKind::Offline => {
                fields.only(&[])?;
                Fault::Offline
            }
            FaultKind::Ignore => {
                fields.only(&[])?;
                Fault::Ignore
            }
            FaultKind::Clamp => {
                fields.only(&["min", "max", "round"])?;
                Fault::Clamp {
                    min: fields.number("min")?.unwrap_or(CLAMP_DEFAULT_MIN),
                    max: fields.number("max")?.unwrap_or(CLAMP_DEFAULT_MAX),
                    round: fields.boolean("round")?.unwrap_or(false),
                }
            }
            FaultKind::Flaky => {
                fields.only(&["rate", "hang_ms"])?;
                Fault::Flaky {
                    rate: fields
                        .number("rate")?
                        .ok_or("fault `flaky` needs `rate`, a number from 0.0 to 1.0")?,
                    hang_ms: fields.millis("hang_ms")?.unwrap_or(0),
                }
            }
            FaultKind::Latency => {
                fields.only(&["ms"])?;
                Fault::Latency {
                    ms: fields
                        .millis("ms")?
                        .ok_or("fault `latency` needs `ms`, a whole number of milliseconds")?,
                }
            }
        };
        fault.validate()
    }

    /// Parses the `KIND[:PARAMS]` part of `--fault DEVICE=KIND[:PARAMS]`:
    /// `offline`, `ignore`, `clamp`, `clamp:18-28`, `clamp:round`, `clamp:18-28:round`,
    /// `flaky`, `flaky:0.3`, `flaky:1.0:5000` (rate, hang ms), `latency:200`.
    pub fn from_flag(spec: &str) -> Result<Fault, String> {
        let mut parts = spec.split(':');
        let kind: FaultKind = parts.next().unwrap_or_default().parse()?;
        let params: Vec<&str> = parts.collect();
        let fault = match kind {
            FaultKind::Offline | FaultKind::Ignore => {
                if !params.is_empty() {
                    return Err(format!("fault `{kind}` takes no parameters, got `{spec}`"));
                }
                if kind == FaultKind::Offline {
                    Fault::Offline
                } else {
                    Fault::Ignore
                }
            }
            FaultKind::Clamp => clamp_from_flag(&params)?,
            FaultKind::Flaky => {
                if params.len() > 2 {
                    return Err(format!(
                        "fault `flaky` takes at most RATE:HANG_MS, got `{spec}`"
                    ));
                }
                let rate = match params.first() {
                    Some(r) => r.parse::<f64>().map_err(|_| {
                        format!("flaky rate must be a number from 0.0 to 1.0, got `{r}`")
                    })?,
                    None => FLAKY_DEFAULT_RATE,
                };
                let hang_ms = match params.get(1) {
                    Some(h) => h
                        .parse::<u64>()
                        .map_err(|_| format!("flaky hang must be whole milliseconds, got `{h}`"))?,
                    None => 0,
                };
                Fault::Flaky { rate, hang_ms }
            }
            FaultKind::Latency => match params.as_slice() {
                [ms] => Fault::Latency {
                    ms: ms
                        .parse()
                        .map_err(|_| format!("latency must be whole milliseconds, got `{ms}`"))?,
                },
                _ => {
                    return Err(format!(
                        "fault `latency` needs exactly one parameter, milliseconds (e.g. latency:200), got `{spec}`"
                    ));
                }
            },
        };
        fault.validate()
    }

    /// Checks the values are usable (finite, ordered, a probability).
    fn validate(self) -> Result<Fault, String> {
        match &self {
            Fault::Clamp { min, max, .. } if !min.is_finite() || !max.is_finite() || min > max => {
                Err(format!(
                    "clamp needs finite min <= max, got min {min}, max {max}"
                ))
            }
            Fault::Flaky { rate, .. } if !(0.0..=1.0).contains(rate) => {
                Err(format!("flaky rate must be from 0.0 to 1.0, got {rate}"))
            }
            _ => Ok(self),
        }
    }
}

fn clamp_from_flag(params: &[&str]) -> Result<Fault, String> {
    let (mut min, mut max, mut round) = (CLAMP_DEFAULT_MIN, CLAMP_DEFAULT_MAX, false);
    for p in params {
        if *p == "round" {
            round = true;
            continue;
        }
        let range = p.split_once('-').and_then(|(lo, hi)| {
            Some((
                lo.trim().parse::<f64>().ok()?,
                hi.trim().parse::<f64>().ok()?,
            ))
        });
        match range {
            Some((lo, hi)) => (min, max) = (lo, hi),
            None => {
                return Err(format!(
                    "clamp parameter must be MIN-MAX (e.g. 18-28) or `round`, got `{p}`"
                ));
            }
        }
    }
    Ok(Fault::Clamp { min, max, round })
}

/// Typed access to the members of a fault object, with errors that name the member.
struct Fields<'a> {
    kind: FaultKind,
    map: &'a Map<String, Value>,
}

impl Fields<'_> {
    fn only(&self, allowed: &[&str]) -> Result<(), String> {
        for key in self.map.keys() {
            if key != "kind" && !allowed.contains(&key.as_str()) {
                let expected = if allowed.is_empty() {
                    "it takes no other members".to_owned()
                } else {
                    format!("allowed: {}", allowed.join(", "))
                };
                return Err(format!(
                    "unknown member `{key}` for fault `{}`; {expected}",
                    self.kind
                ));
            }
        }
        Ok(())
    }

    fn number(&self, key: &str) -> Result<Option<f64>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                format!(
                    "fault `{}` member `{key}` must be a number, got {v}",
                    self.kind
                )
            }),
        }
    }

    fn millis(&self, key: &str) -> Result<Option<u64>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                format!(
                    "fault `{}` member `{key}` must be a whole number of milliseconds, got {v}",
                    self.kind
                )
            }),
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| {
                format!(
                    "fault `{}` member `{key}` must be true or false, got {v}",
                    self.kind
                )
            }),
        }
    }
}

/// The faults active on one device: at most one of each kind, several kinds at once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    list: Vec<Fault>,
}

impl Faults {
    /// Activates `fault`, replacing an active fault of the same kind.
    pub fn set(&mut self, fault: Fault) {
        self.clear(fault.kind());
        self.list.push(fault);
    }

    /// Deactivates the fault of `kind`, if active.
    pub fn clear(&mut self, kind: FaultKind) {
        self.list.retain(|f| f.kind() != kind);
    }

    /// Deactivates every fault.
    pub fn clear_all(&mut self) {
        self.list.clear();
    }

    /// The active faults, in the order they were set.
    pub fn list(&self) -> &[Fault] {
        &self.list
    }

    /// Whether the device is offline.
    pub fn offline(&self) -> bool {
        self.has(FaultKind::Offline)
    }

    /// Whether the device drops commands.
    pub fn ignore(&self) -> bool {
        self.has(FaultKind::Ignore)
    }

    /// The active clamp, as (min, max, round).
    pub fn clamp(&self) -> Option<(f64, f64, bool)> {
        self.list.iter().find_map(|f| match f {
            Fault::Clamp { min, max, round } => Some((*min, *max, *round)),
            _ => None,
        })
    }

    /// The active flakiness, as (rate, hang).
    pub fn flaky(&self) -> Option<(f64, Duration)> {
        self.list.iter().find_map(|f| match f {
            Fault::Flaky { rate, hang_ms } => Some((*rate, Duration::from_millis(*hang_ms))),
            _ => None,
        })
    }

    /// The added response latency (zero when none).
    pub fn latency(&self) -> Duration {
        self.list
            .iter()
            .find_map(|f| match f {
                Fault::Latency { ms } => Some(Duration::from_millis(*ms)),
                _ => None,
            })
            .unwrap_or_default()
    }

    fn has(&self, kind: FaultKind) -> bool {
        self.list.iter().any(|f| f.kind() == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_forms_parse_to_faults() {
        assert_eq!(Fault::from_flag("offline"), Ok(Fault::Offline));
        assert_eq!(Fault::from_flag("ignore"), Ok(Fault::Ignore));
        assert_eq!(
            Fault::from_flag("clamp"),
            Ok(Fault::Clamp {
                min: 18.0,
                max: 28.0,
                round: false
            })
        );
        assert_eq!(
            Fault::from_flag("clamp:20-25"),
            Ok(Fault::Clamp {
                min: 20.0,
                max: 25.0,
                round: false
            })
        );
        assert_eq!(
            Fault::from_flag("clamp:round"),
            Ok(Fault::Clamp {
                min: 18.0,
                max: 28.0,
                round: true
            })
        );
        assert_eq!(
            Fault::from_flag("clamp:19.5-27:round"),
            Ok(Fault::Clamp {
                min: 19.5,
                max: 27.0,
                round: true
            })
        );
        assert_eq!(
            Fault::from_flag("flaky:0.3"),
            Ok(Fault::Flaky {
                rate: 0.3,
                hang_ms: 0
            })
        );
        assert_eq!(
            Fault::from_flag("flaky:1.0:5000"),
            Ok(Fault::Flaky {
                rate: 1.0,
                hang_ms: 5000
            })
        );
        assert_eq!(
            Fault::from_flag("latency:200"),
            Ok(Fault::Latency { ms: 200 })
        );
    }

    #[test]
    fn bad_flag_forms_get_precise_errors() {
        let e = |s| Fault::from_flag(s).unwrap_err();
        assert!(e("broken").contains("unknown fault kind `broken`; expected one of offline"));
        assert!(e("offline:1").contains("takes no parameters"));
        assert!(e("clamp:hot").contains("MIN-MAX"));
        assert!(e("clamp:28-18").contains("min <= max"));
        assert!(e("flaky:lots").contains("flaky rate must be a number"));
        assert!(e("flaky:1.5").contains("from 0.0 to 1.0, got 1.5"));
        assert!(e("flaky:0.5:soon").contains("whole milliseconds, got `soon`"));
        assert!(e("latency").contains("needs exactly one parameter"));
        assert!(e("latency:fast").contains("got `fast`"));
    }

    #[test]
    fn json_faults_parse_with_defaults() {
        assert_eq!(
            Fault::from_json(br#"{"kind":"clamp"}"#),
            Ok(Fault::Clamp {
                min: 18.0,
                max: 28.0,
                round: false
            })
        );
        assert_eq!(
            Fault::from_json(br#"{"kind":"flaky","rate":1}"#),
            Ok(Fault::Flaky {
                rate: 1.0,
                hang_ms: 0
            })
        );
        assert_eq!(
            Fault::from_json(br#"{"kind":"latency","ms":200}"#),
            Ok(Fault::Latency { ms: 200 })
        );
    }

    #[test]
    fn bad_json_faults_name_the_problem() {
        let e = |s: &str| Fault::from_json(s.as_bytes()).unwrap_err();
        assert!(e("{}").contains("missing `kind`"));
        assert!(e(r#"{"kind":"melt"}"#).contains("unknown fault kind `melt`"));
        assert!(
            e(r#"{"kind":"offline","ms":3}"#).contains("unknown member `ms` for fault `offline`")
        );
        assert!(e(r#"{"kind":"clamp","min":"low"}"#).contains("member `min` must be a number"));
        assert!(e(r#"{"kind":"clamp","round":1}"#).contains("`round` must be true or false"));
        assert!(e(r#"{"kind":"flaky"}"#).contains("needs `rate`"));
        assert!(e(r#"{"kind":"latency","ms":-1}"#).contains("whole number of milliseconds"));
        assert!(e("[1]").contains("must be a JSON object"));
        assert!(e("nope").contains("not valid JSON"));
    }

    #[test]
    fn faults_serialise_to_the_json_they_are_parsed_from() {
        let f = Fault::Flaky {
            rate: 0.5,
            hang_ms: 10,
        };
        let json = serde_json::to_vec(&f).unwrap();
        assert_eq!(Fault::from_json(&json), Ok(f));
    }

    #[test]
    fn setting_a_fault_replaces_one_of_the_same_kind_and_keeps_others() {
        let mut faults = Faults::default();
        faults.set(Fault::Latency { ms: 1 });
        faults.set(Fault::Offline);
        faults.set(Fault::Latency { ms: 2 });
        assert_eq!(faults.list().len(), 2);
        assert_eq!(faults.latency(), Duration::from_millis(2));
        faults.clear(FaultKind::Latency);
        assert_eq!(faults.list(), &[Fault::Offline]);
    }
}
