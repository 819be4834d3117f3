//! The safety gate: rules decided before anything is sent.
//!
//! A command the gate stops needs a person's confirmation. The gate only
//! lists reasons; how confirmation arrives (an argument, an elicitation)
//! is the caller's business, and no path skips this check.

use crate::model::{Field, Value};
use std::collections::BTreeSet;

/// The operator's rules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules {
    pub min_temperature: f64,
    pub max_temperature: f64,
}

/// Which fields the device's sensor endpoint reports.
#[derive(Clone, Debug, PartialEq)]
pub enum Readability {
    /// Read from the endpoint (just now, or remembered from a recent read).
    Known(BTreeSet<Field>),
    /// The endpoint could not be read and nothing is remembered.
    Unknown(String),
}

/// Every reason the command needs confirmation; empty when it may go.
pub fn reasons(rules: &Rules, command: &[(Field, Value)], readable: &Readability) -> Vec<String> {
    let mut reasons = Vec::new();
    for (field, value) in command {
        if let (Field::TargetTemperature, Value::Number(t)) = (field, value)
            && (*t < rules.min_temperature || *t > rules.max_temperature)
        {
            reasons.push(format!(
                "{field} {t} is outside the safe range {}..{}",
                rules.min_temperature, rules.max_temperature
            ));
        }
    }
    match readable {
        Readability::Known(fields) => {
            let unreadable: Vec<&str> = command
                .iter()
                .filter(|(f, _)| !fields.contains(f))
                .map(|(f, _)| f.name())
                .collect();
            if !unreadable.is_empty() {
                reasons.push(format!(
                    "{} cannot be read back from this device, so the result cannot be verified",
                    unreadable.join(", ")
                ));
            }
        }
        Readability::Unknown(why) => reasons.push(format!(
            "the sensor endpoint did not answer ({why}), so it is unknown whether the result can be verified"
        )),
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        min_temperature: 18.0,
        max_temperature: 28.0,
    };

    fn all_readable() -> Readability {
        Readability::Known(Field::ALL.into_iter().collect())
    }

    #[test]
    fn temperatures_inside_the_safe_range_pass() {
        for t in [18.0, 24.5, 28.0] {
            let command = [(Field::TargetTemperature, Value::Number(t))];
            assert!(reasons(&RULES, &command, &all_readable()).is_empty(), "{t}");
        }
    }

    #[test]
    fn temperatures_outside_the_safe_range_need_confirmation() {
        let command = [(Field::TargetTemperature, Value::Number(30.0))];
        assert_eq!(
            reasons(&RULES, &command, &all_readable()),
            ["target_temperature 30 is outside the safe range 18..28"]
        );
    }

    #[test]
    fn unreadable_fields_need_confirmation() {
        let readable = Readability::Known([Field::FanSpeed].into_iter().collect());
        let command = [
            (Field::FanSpeed, Value::choice("high")),
            (Field::VaneHorizontal, Value::choice("left")),
        ];
        let r = reasons(&RULES, &command, &readable);
        assert_eq!(r.len(), 1);
        assert!(
            r[0].starts_with("vane_horizontal cannot be read back"),
            "{r:?}"
        );
    }

    #[test]
    fn unknown_readability_needs_confirmation() {
        let command = [(Field::Power, Value::choice("on"))];
        let r = reasons(&RULES, &command, &Readability::Unknown("timeout".into()));
        assert!(r[0].contains("did not answer (timeout)"), "{r:?}");
    }
}
