//! Command-line flags (each also settable through a `DEVICE_SIM_*` variable) and their
//! conversion into a [`SimConfig`].

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

use crate::fault::Fault;
use crate::model::SensorField;
use crate::sim::{DeviceSpec, SimConfig};

/// Upper bound for `--devices`: keeps a typo from allocating gigabytes (each device costs a
/// few hundred bytes).
pub const MAX_DEVICES: usize = 1_000_000;

/// A simulated air-conditioner cloud API with separate control and sensor endpoints.
///
/// Serves `/api/v1` (see docs/device-api.md) and the test side door `/_sim`, which never needs
/// the token. Prints `device-sim listening on http://ADDR` to stdout once bound; logs go to
/// stderr (`RUST_LOG=device_sim=debug` shows every command).
#[derive(Debug, Clone, Parser)]
#[command(name = "device-sim", version)]
pub struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "DEVICE_SIM_ADDR", default_value = "127.0.0.1:8081")]
    pub addr: SocketAddr,

    /// Require `Authorization: Bearer TOKEN` on every /api/v1 request (/_sim stays open).
    #[arg(long, env = "DEVICE_SIM_TOKEN", hide_env_values = true, value_parser = parse_token)]
    pub token: Option<String>,

    /// Milliseconds between accepting a command and the device applying it.
    #[arg(
        long,
        env = "DEVICE_SIM_DELAY_MS",
        value_name = "MS",
        default_value_t = 4000
    )]
    pub delay_ms: u64,

    /// Up to this many extra milliseconds (uniform random) per command.
    #[arg(
        long,
        env = "DEVICE_SIM_JITTER_MS",
        value_name = "MS",
        default_value_t = 0
    )]
    pub jitter_ms: u64,

    /// Start with a fault on a device; repeatable, comma-separated in the variable.
    /// KIND is offline, ignore, clamp[:MIN-MAX][:round], flaky[:RATE[:HANG_MS]] or
    /// latency:MS. Examples: ac-living=offline, ac-bedroom=clamp:18-28,
    /// ac-bedroom=clamp:round, ac-living=flaky:1.0:5000, ac-living=latency:200.
    #[arg(
        long = "fault",
        env = "DEVICE_SIM_FAULT",
        value_name = "DEVICE=KIND[:PARAMS]",
        value_parser = parse_fault,
        value_delimiter = ','
    )]
    pub faults: Vec<(String, Fault)>,

    /// Instead of ac-living and ac-bedroom, simulate N devices ac-00000, ac-00001, ...
    #[arg(long, env = "DEVICE_SIM_DEVICES", value_name = "N", value_parser = parse_device_count)]
    pub devices: Option<usize>,

    /// Omit FIELD from DEVICE's sensor readings (an API that cannot read it back);
    /// repeatable, comma-separated in the variable. FIELD is power, mode,
    /// target_temperature, room_temperature, fan_speed, vane_vertical or vane_horizontal.
    #[arg(
        long = "hide-field",
        env = "DEVICE_SIM_HIDE_FIELD",
        value_name = "DEVICE=FIELD",
        value_parser = parse_hidden_field,
        value_delimiter = ','
    )]
    pub hidden_fields: Vec<(String, SensorField)>,
}

impl Args {
    /// The simulator configuration these flags describe. Device names in `--fault` and
    /// `--hide-field` are checked when the [`Sim`](crate::Sim) is built.
    pub fn into_config(self) -> SimConfig {
        let defaults = SimConfig::default();
        SimConfig {
            devices: match self.devices {
                Some(n) => DeviceSpec::numbered(n),
                None => defaults.devices,
            },
            delay: Duration::from_millis(self.delay_ms),
            jitter: Duration::from_millis(self.jitter_ms),
            token: self.token,
            faults: self.faults,
            hidden_fields: self.hidden_fields,
        }
    }
}

/// Parses `DEVICE=KIND[:PARAMS]`.
pub fn parse_fault(s: &str) -> Result<(String, Fault), String> {
    let (device, spec) = split_device(s, "KIND[:PARAMS]", "ac-living=offline")?;
    Ok((device, Fault::from_flag(spec)?))
}

/// Parses `DEVICE=FIELD`.
pub fn parse_hidden_field(s: &str) -> Result<(String, SensorField), String> {
    let (device, field) = split_device(s, "FIELD", "ac-living=room_temperature")?;
    Ok((device, field.parse()?))
}

fn split_device<'a>(s: &'a str, what: &str, example: &str) -> Result<(String, &'a str), String> {
    match s.split_once('=') {
        Some((device, rest)) if !device.is_empty() => Ok((device.to_owned(), rest)),
        Some(_) => Err(format!(
            "device name before `=` is empty (expected DEVICE={what}, e.g. {example})"
        )),
        None => Err(format!("expected DEVICE={what}, e.g. {example}")),
    }
}

fn parse_device_count(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("expected a whole number of devices, got `{s}`"))?;
    if (1..=MAX_DEVICES).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "number of devices must be from 1 to {MAX_DEVICES}, got {n}"
        ))
    }
}

fn parse_token(s: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Err("token must be non-empty and contain no whitespace".to_owned())
    } else {
        Ok(s.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Args, String> {
        Args::try_parse_from(std::iter::once("device-sim").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn no_flags_give_the_documented_defaults() {
        let config = parse(&[]).unwrap().into_config();
        assert_eq!(config.delay, Duration::from_secs(4));
        assert_eq!(config.jitter, Duration::ZERO);
        assert_eq!(config.token, None);
        let ids: Vec<_> = config.devices.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["ac-living", "ac-bedroom"]);
    }

    #[test]
    fn repeated_faults_and_hidden_fields_are_collected() {
        let config = parse(&[
            "--fault",
            "ac-living=offline",
            "--fault",
            "ac-bedroom=clamp:18-28",
            "--fault",
            "ac-bedroom=latency:200",
            "--hide-field",
            "ac-living=room_temperature",
            "--devices",
            "3",
        ])
        .unwrap()
        .into_config();
        assert_eq!(
            config.faults,
            vec![
                ("ac-living".to_owned(), Fault::Offline),
                (
                    "ac-bedroom".to_owned(),
                    Fault::Clamp {
                        min: 18.0,
                        max: 28.0,
                        round: false
                    }
                ),
                ("ac-bedroom".to_owned(), Fault::Latency { ms: 200 }),
            ]
        );
        assert_eq!(
            config.hidden_fields,
            vec![("ac-living".to_owned(), SensorField::RoomTemperature)]
        );
        assert_eq!(config.devices.len(), 3);
        assert_eq!(config.devices[2].id, "ac-00002");
    }

    #[test]
    fn a_fault_without_a_device_is_rejected_with_the_expected_form() {
        let e = parse(&["--fault", "offline"]).unwrap_err();
        assert!(
            e.contains("expected DEVICE=KIND[:PARAMS], e.g. ac-living=offline"),
            "{e}"
        );
        let e = parse(&["--fault", "=offline"]).unwrap_err();
        assert!(e.contains("device name before `=` is empty"), "{e}");
    }

    #[test]
    fn a_fault_with_bad_parameters_names_the_problem() {
        let e = parse(&["--fault", "ac-living=latency:soon"]).unwrap_err();
        assert!(
            e.contains("latency must be whole milliseconds, got `soon`"),
            "{e}"
        );
        let e = parse(&["--fault", "ac-living=explode"]).unwrap_err();
        assert!(e.contains("unknown fault kind `explode`"), "{e}");
    }

    #[test]
    fn unknown_hidden_fields_list_the_valid_ones() {
        let e = parse(&["--hide-field", "ac-living=humidity"]).unwrap_err();
        assert!(
            e.contains("unknown sensor field `humidity`; expected one of power, mode"),
            "{e}"
        );
    }

    #[test]
    fn device_counts_must_be_positive_and_bounded() {
        assert!(
            parse(&["--devices", "0"])
                .unwrap_err()
                .contains("from 1 to 1000000, got 0")
        );
        assert!(
            parse(&["--devices", "many"])
                .unwrap_err()
                .contains("whole number of devices")
        );
        assert!(parse(&["--devices", "10000"]).is_ok());
    }

    #[test]
    fn empty_tokens_are_rejected() {
        assert!(
            parse(&["--token", ""])
                .unwrap_err()
                .contains("token must be non-empty")
        );
    }
}
