//! The plugin's settings, read from `wasi:config` on every call (instances are
//! fresh per call, so there is nothing to cache).

use crate::host;
use crate::task::{DEFAULT_DENSE_READ_MS, Timing};

/// Every key the plugin reads, with its meaning; the runner documents the
/// same list for operators.
pub const KEYS: &[(&str, &str)] = &[
    ("device_api", "base URL of the device API (required)"),
    ("device_token", "bearer token for the device API"),
    (
        "driver",
        "which API shape to speak: sim, profile or homeassistant",
    ),
    (
        "device_profile",
        "with driver=profile: the device profile (JSON) describing the API",
    ),
    ("ttl_ms", "task lifetime from creation"),
    (
        "poll_interval_ms",
        "time between sensor reads while a device has no history; the longest gap otherwise",
    ),
    (
        "dense_read_ms",
        "time between sensor reads while a device's change is expected",
    ),
    (
        "settle_window_ms",
        "how long an unchanged device may take before 'not applied', until its own timing is known",
    ),
    (
        "stable_reads",
        "reads a different value must hold to be the device's answer",
    ),
    ("http_timeout_ms", "timeout of one device API request"),
    (
        "probe_max_age_ms",
        "how old a remembered reading may be to serve as a command's baseline",
    ),
    (
        "max_commands_per_minute",
        "commands a device takes in any minute (0: no limit)",
    ),
    (
        "audit_retention_ms",
        "how long the audit trail keeps a record (30 days)",
    ),
    (
        "audit_max_records",
        "the most records the audit trail keeps (10,000; 0 keeps none)",
    ),
    (
        "safe_min_temperature",
        "lowest setpoint sent without confirmation",
    ),
    (
        "safe_max_temperature",
        "highest setpoint sent without confirmation",
    ),
];

/// Settings with their defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub device_api: String,
    pub device_token: Option<String>,
    pub driver: String,
    /// The profile (JSON text) of `driver = "profile"`.
    pub device_profile: Option<String>,
    pub timing: Timing,
    pub http_timeout_ms: u64,
    /// How old a remembered reading may be to stand in for a command's
    /// probe read: a burst of commands to one device then costs one read.
    pub probe_max_age_ms: u64,
    pub safe_min_temperature: f64,
    pub safe_max_temperature: f64,
    /// Commands a device takes in any minute; 0 for no limit. It guards
    /// the equipment against a runaway agent; no person would reach it.
    pub max_commands_per_minute: u32,
}

impl Settings {
    /// Reads every key through `lookup`, so tests can feed a map.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Result<Option<String>, String>,
    ) -> Result<Settings, String> {
        let device_api = lookup("device_api")?
            .filter(|v| !v.trim().is_empty())
            .ok_or("plugin configuration: device_api is not set")?;
        let number = |key: &str, default: u64| -> Result<u64, String> {
            match lookup(key)? {
                None => Ok(default),
                Some(text) => text.trim().parse().map_err(|_| {
                    format!("plugin configuration: {key} must be a whole number, not {text:?}")
                }),
            }
        };
        let celsius = |key: &str, default: f64| -> Result<f64, String> {
            match lookup(key)? {
                None => Ok(default),
                Some(text) => text.trim().parse().map_err(|_| {
                    format!("plugin configuration: {key} must be a number, not {text:?}")
                }),
            }
        };
        let stable_reads = number("stable_reads", 2)?;
        let poll_interval_ms = number("poll_interval_ms", 1_000)?.max(50);
        let settings = Settings {
            device_api,
            device_token: lookup("device_token")?.filter(|t| !t.is_empty()),
            driver: lookup("driver")?.unwrap_or_else(|| "sim".to_string()),
            device_profile: lookup("device_profile")?.filter(|p| !p.trim().is_empty()),
            timing: Timing {
                ttl_ms: number("ttl_ms", 300_000)?,
                poll_interval_ms,
                settle_window_ms: number("settle_window_ms", 30_000)?,
                stable_reads: u32::try_from(stable_reads.clamp(1, 100)).unwrap_or(2),
                // At least 20 ms (a read takes time), at most one poll.
                dense_read_ms: number("dense_read_ms", DEFAULT_DENSE_READ_MS)?
                    .clamp(20, poll_interval_ms),
            },
            http_timeout_ms: number("http_timeout_ms", 5_000)?.max(1),
            probe_max_age_ms: number("probe_max_age_ms", 1_000)?,
            max_commands_per_minute: u32::try_from(number("max_commands_per_minute", 30)?)
                .map_err(|_| {
                    "plugin configuration: max_commands_per_minute is too large".to_string()
                })?,
            safe_min_temperature: celsius("safe_min_temperature", 18.0)?,
            safe_max_temperature: celsius("safe_max_temperature", 28.0)?,
        };
        // Read where each command ends; checked here so a bad value is
        // refused when the plugin loads.
        crate::audit::Retention::from_lookup(&lookup)?;
        if settings.safe_min_temperature > settings.safe_max_temperature {
            return Err(format!(
                "plugin configuration: safe_min_temperature {} is above safe_max_temperature {}",
                settings.safe_min_temperature, settings.safe_max_temperature
            ));
        }
        Ok(settings)
    }

    /// The settings the runner handed to this instance.
    pub fn load() -> Result<Settings, String> {
        Settings::from_lookup(host::config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>, String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| Ok(map.get(k).cloned())
    }

    #[test]
    fn defaults_apply_when_only_the_api_is_set() {
        let s = Settings::from_lookup(lookup(&[("device_api", "http://h:1")])).unwrap();
        assert_eq!(s.timing.ttl_ms, 300_000);
        assert_eq!(s.driver, "sim");
        assert_eq!(
            (s.safe_min_temperature, s.safe_max_temperature),
            (18.0, 28.0)
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = Settings::from_lookup(lookup(&[("device_api", "http://h"), ("ttl_ms", "soon")]))
            .unwrap_err();
        assert_eq!(
            err,
            "plugin configuration: ttl_ms must be a whole number, not \"soon\""
        );
        let err = Settings::from_lookup(lookup(&[])).unwrap_err();
        assert!(err.contains("device_api is not set"));
        let err = Settings::from_lookup(lookup(&[
            ("device_api", "http://h"),
            ("safe_min_temperature", "29"),
        ]))
        .unwrap_err();
        assert!(err.contains("above safe_max_temperature"), "{err}");
    }
}
