//! Reading tool arguments with messages that say exactly what is wrong.
//!
//! Tool schemas tell a client what to send, but nothing forces it to; every
//! argument is checked again here, and every problem becomes a tool error the
//! model can read and act on.

use serde_json::{Map, Value as Json};

/// A tool's arguments, known to be an object with only expected keys.
pub struct Args<'a> {
    map: &'a Map<String, Json>,
}

impl<'a> Args<'a> {
    /// Checks the shape: an object whose keys are all in `accepted`.
    pub fn new(tool: &str, value: &'a Json, accepted: &[&str]) -> Result<Args<'a>, String> {
        let map = value
            .as_object()
            .ok_or_else(|| format!("{tool}: arguments must be a JSON object, not {value}"))?;
        if let Some(unknown) = map.keys().find(|k| !accepted.contains(&k.as_str())) {
            let takes = if accepted.is_empty() {
                "no arguments".to_string()
            } else {
                accepted.join(", ")
            };
            return Err(format!(
                "{tool}: unknown argument {unknown:?}; it takes {takes}"
            ));
        }
        Ok(Args { map })
    }

    fn present(&self, key: &str) -> Option<&'a Json> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn string(&self, key: &str) -> Result<Option<&'a str>, String> {
        match self.present(key) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(format!("{key} must be a string, not {other}")),
        }
    }

    pub fn required_string(&self, key: &str) -> Result<&'a str, String> {
        match self.string(key)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            Some(_) => Err(format!("{key} must not be empty")),
            None => Err(format!("{key} is required")),
        }
    }

    pub fn number(&self, key: &str) -> Result<Option<f64>, String> {
        match self.present(key) {
            None => Ok(None),
            Some(Json::Number(n)) => Ok(n.as_f64()),
            Some(other) => Err(format!("{key} must be a number, not {other}")),
        }
    }

    pub fn required_number(&self, key: &str) -> Result<f64, String> {
        self.number(key)?
            .ok_or_else(|| format!("{key} is required"))
    }

    pub fn flag(&self, key: &str) -> Result<bool, String> {
        match self.present(key) {
            None => Ok(false),
            Some(Json::Bool(b)) => Ok(*b),
            Some(other) => Err(format!("{key} must be true or false, not {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_arguments_are_named_with_what_is_accepted() {
        let v = json!({"device_id": "a", "temp": 3});
        let err = Args::new("set_temperature", &v, &["device_id", "temperature"])
            .err()
            .unwrap();
        assert_eq!(
            err,
            "set_temperature: unknown argument \"temp\"; it takes device_id, temperature"
        );
    }

    #[test]
    fn wrong_types_and_missing_values_are_precise() {
        let v = json!({"device_id": 5, "temperature": "hot", "confirm": "yes"});
        let args = Args::new("t", &v, &["device_id", "temperature", "confirm"]).unwrap();
        assert_eq!(
            args.required_string("device_id").unwrap_err(),
            "device_id must be a string, not 5"
        );
        assert_eq!(
            args.required_number("temperature").unwrap_err(),
            "temperature must be a number, not \"hot\""
        );
        assert_eq!(
            args.flag("confirm").unwrap_err(),
            "confirm must be true or false, not \"yes\""
        );
        let empty = json!({});
        let args = Args::new("t", &empty, &["device_id"]).unwrap();
        assert_eq!(
            args.required_string("device_id").unwrap_err(),
            "device_id is required"
        );
        let err = Args::new("t", &json!([1]), &[]).err().unwrap();
        assert!(err.contains("must be a JSON object"), "{err}");
    }
}
