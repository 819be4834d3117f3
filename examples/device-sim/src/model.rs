//! The air conditioner's data model: enumerated settings with their two spellings, the
//! reported state, and a command (a partial set of writable fields).
//!
//! The API spells the same setting two ways on purpose (`"COOL"` to control, `"Cool"` when
//! reading back), because real cloud APIs do and the driver must map both.

use serde::Serialize;

/// Defines a setting enum whose values have a control spelling (upper case, what the control
/// endpoint takes) and a sensor spelling (title case, what the sensor endpoint reports).
macro_rules! spelled_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => ($control:literal, $sensor:literal)),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $(
                $(#[$vmeta])*
                #[doc = concat!("`\"", $control, "\"` to control, `\"", $sensor, "\"` when read back.")]
                $variant
            ),+
        }

        impl $name {
            /// Every value, in the order the API documents them (used in error messages).
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The control spelling (upper case), as the control endpoint takes it.
            pub fn control(self) -> &'static str {
                match self { $($name::$variant => $control),+ }
            }

            /// The sensor spelling (title case), as the sensor endpoint reports it.
            pub fn sensor(self) -> &'static str {
                match self { $($name::$variant => $sensor),+ }
            }

            /// Parses the control spelling exactly; any other case is rejected, because the
            /// simulator exists to catch drivers that send the sensor spelling back.
            pub fn from_control(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.control() == s)
            }

            /// The control spellings, quoted and comma-separated, for error messages.
            pub fn control_list() -> String {
                Self::ALL.iter().map(|v| format!("\"{}\"", v.control())).collect::<Vec<_>>().join(", ")
            }
        }
    };
}

spelled_enum!(
    /// Whether the unit runs.
    Power { On => ("ON", "On"), Off => ("OFF", "Off") }
);
spelled_enum!(
    /// Operating mode.
    Mode {
        Cool => ("COOL", "Cool"), Heat => ("HEAT", "Heat"), Dry => ("DRY", "Dry"),
        Fan => ("FAN", "Fan"), Auto => ("AUTO", "Auto"),
    }
);
spelled_enum!(
    /// Fan speed.
    FanSpeed {
        Auto => ("AUTO", "Auto"), Low => ("LOW", "Low"), Medium => ("MEDIUM", "Medium"),
        High => ("HIGH", "High"),
    }
);
spelled_enum!(
    /// Vertical vane position.
    VaneVertical {
        Auto => ("AUTO", "Auto"), Up => ("UP", "Up"), Middle => ("MIDDLE", "Middle"),
        Down => ("DOWN", "Down"), Swing => ("SWING", "Swing"),
    }
);
spelled_enum!(
    /// Horizontal vane position.
    VaneHorizontal {
        Auto => ("AUTO", "Auto"), Left => ("LEFT", "Left"), Center => ("CENTER", "Center"),
        Right => ("RIGHT", "Right"), Swing => ("SWING", "Swing"),
    }
);

/// Lowest target temperature the control endpoint takes, in °C.
pub const TARGET_MIN: f64 = 16.0;
/// Highest target temperature the control endpoint takes, in °C.
pub const TARGET_MAX: f64 = 30.0;
/// Target temperatures must be a multiple of this, in °C.
pub const TARGET_STEP: f64 = 0.5;

/// A field of the sensor reading; the first six are also the writable (control) fields.
///
/// Used to name fields in errors and to hide fields from the sensor endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SensorField {
    /// `power`
    Power,
    /// `mode`
    Mode,
    /// `target_temperature`
    TargetTemperature,
    /// `fan_speed`
    FanSpeed,
    /// `vane_vertical`
    VaneVertical,
    /// `vane_horizontal`
    VaneHorizontal,
    /// `room_temperature` (read-only)
    RoomTemperature,
}

impl SensorField {
    /// Every sensor field that can be hidden, in API order.
    pub const ALL: &'static [SensorField] = &[
        SensorField::Power,
        SensorField::Mode,
        SensorField::TargetTemperature,
        SensorField::RoomTemperature,
        SensorField::FanSpeed,
        SensorField::VaneVertical,
        SensorField::VaneHorizontal,
    ];

    /// The fields the control endpoint accepts.
    pub const WRITABLE: &'static [SensorField] = &[
        SensorField::Power,
        SensorField::Mode,
        SensorField::TargetTemperature,
        SensorField::FanSpeed,
        SensorField::VaneVertical,
        SensorField::VaneHorizontal,
    ];

    /// The JSON name of the field.
    pub fn name(self) -> &'static str {
        match self {
            SensorField::Power => "power",
            SensorField::Mode => "mode",
            SensorField::TargetTemperature => "target_temperature",
            SensorField::FanSpeed => "fan_speed",
            SensorField::VaneVertical => "vane_vertical",
            SensorField::VaneHorizontal => "vane_horizontal",
            SensorField::RoomTemperature => "room_temperature",
        }
    }

    /// Looks a field up by its JSON name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// Names of `fields`, comma-separated, for error messages.
    pub fn list(fields: &[SensorField]) -> String {
        fields
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Display for SensorField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SensorField {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_name(s).ok_or_else(|| {
            format!(
                "unknown sensor field `{s}`; expected one of {}",
                Self::list(Self::ALL)
            )
        })
    }
}

impl Serialize for SensorField {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The settings a device holds (what it would report if nothing were hidden).
#[derive(Debug, Clone, PartialEq)]
pub struct AcState {
    /// Whether the unit runs.
    pub power: Power,
    /// Operating mode.
    pub mode: Mode,
    /// Target temperature in °C.
    pub target_temperature: f64,
    /// Measured room temperature in °C, kept unrounded; drifts toward the target.
    pub room_temperature: f64,
    /// Fan speed.
    pub fan_speed: FanSpeed,
    /// Vertical vane.
    pub vane_vertical: VaneVertical,
    /// Horizontal vane.
    pub vane_horizontal: VaneHorizontal,
}

impl Default for AcState {
    /// The documented initial state: on, cooling to 26.0 in a 27.4 °C room.
    fn default() -> Self {
        AcState {
            power: Power::On,
            mode: Mode::Cool,
            target_temperature: 26.0,
            room_temperature: 27.4,
            fan_speed: FanSpeed::Auto,
            vane_vertical: VaneVertical::Middle,
            vane_horizontal: VaneHorizontal::Center,
        }
    }
}

impl Serialize for AcState {
    /// Sensor spelling, every field, room temperature unrounded (the true internal state).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SensorState::full(self, false).serialize(s)
    }
}

/// A state in sensor spelling; fields set to `None` are omitted (hidden fields).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct SensorState {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room_temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fan_speed: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vane_vertical: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vane_horizontal: Option<&'static str>,
}

impl SensorState {
    /// Every field of `state`; with `round_room`, the room temperature to 0.1 °C as a sensor
    /// would report it.
    pub fn full(state: &AcState, round_room: bool) -> Self {
        let room = if round_room {
            (state.room_temperature * 10.0).round() / 10.0
        } else {
            state.room_temperature
        };
        SensorState {
            power: Some(state.power.sensor()),
            mode: Some(state.mode.sensor()),
            target_temperature: Some(state.target_temperature),
            room_temperature: Some(room),
            fan_speed: Some(state.fan_speed.sensor()),
            vane_vertical: Some(state.vane_vertical.sensor()),
            vane_horizontal: Some(state.vane_horizontal.sensor()),
        }
    }

    /// Drops `field` from the output.
    pub fn hide(&mut self, field: SensorField) {
        match field {
            SensorField::Power => self.power = None,
            SensorField::Mode => self.mode = None,
            SensorField::TargetTemperature => self.target_temperature = None,
            SensorField::RoomTemperature => self.room_temperature = None,
            SensorField::FanSpeed => self.fan_speed = None,
            SensorField::VaneVertical => self.vane_vertical = None,
            SensorField::VaneHorizontal => self.vane_horizontal = None,
        }
    }
}

impl AcState {
    /// Whether the room temperature moves toward the target: the unit runs and is not just
    /// moving air.
    pub fn conditions_air(&self) -> bool {
        self.power == Power::On && self.mode != Mode::Fan
    }

    /// Writes every field present in `cmd`, all at once.
    pub fn apply(&mut self, cmd: &Command) {
        if let Some(v) = cmd.power {
            self.power = v;
        }
        if let Some(v) = cmd.mode {
            self.mode = v;
        }
        if let Some(v) = cmd.target_temperature {
            self.target_temperature = v;
        }
        if let Some(v) = cmd.fan_speed {
            self.fan_speed = v;
        }
        if let Some(v) = cmd.vane_vertical {
            self.vane_vertical = v;
        }
        if let Some(v) = cmd.vane_horizontal {
            self.vane_horizontal = v;
        }
    }
}

/// A validated control request: the writable fields it sets, nothing else.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Command {
    /// `power`, if sent.
    pub power: Option<Power>,
    /// `mode`, if sent.
    pub mode: Option<Mode>,
    /// `target_temperature`, if sent.
    pub target_temperature: Option<f64>,
    /// `fan_speed`, if sent.
    pub fan_speed: Option<FanSpeed>,
    /// `vane_vertical`, if sent.
    pub vane_vertical: Option<VaneVertical>,
    /// `vane_horizontal`, if sent.
    pub vane_horizontal: Option<VaneHorizontal>,
}

impl Command {
    /// The command in control spelling, as the control endpoint echoes it.
    fn echo(&self) -> ControlEcho {
        ControlEcho {
            power: self.power.map(Power::control),
            mode: self.mode.map(Mode::control),
            target_temperature: self.target_temperature,
            fan_speed: self.fan_speed.map(FanSpeed::control),
            vane_vertical: self.vane_vertical.map(VaneVertical::control),
            vane_horizontal: self.vane_horizontal.map(VaneHorizontal::control),
        }
    }
}

impl Serialize for Command {
    /// Control spelling, omitting the fields the command does not set.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.echo().serialize(s)
    }
}

/// A command serialised in control spelling, omitting fields it does not set.
#[derive(Serialize)]
struct ControlEcho {
    #[serde(skip_serializing_if = "Option::is_none")]
    power: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fan_speed: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vane_vertical: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vane_horizontal: Option<&'static str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_spelling_is_exactly_upper_case() {
        assert_eq!(Mode::from_control("COOL"), Some(Mode::Cool));
        assert_eq!(Mode::from_control("Cool"), None);
        assert_eq!(Mode::from_control("cool"), None);
    }

    #[test]
    fn applying_a_command_changes_only_the_fields_it_sets() {
        let mut s = AcState::default();
        s.apply(&Command {
            mode: Some(Mode::Heat),
            target_temperature: Some(21.5),
            ..Command::default()
        });
        assert_eq!(s.mode, Mode::Heat);
        assert_eq!(s.target_temperature, 21.5);
        assert_eq!(s.power, Power::On);
        assert_eq!(s.fan_speed, FanSpeed::Auto);
    }

    #[test]
    fn echo_uses_control_spelling_and_omits_unset_fields() {
        let cmd = Command {
            power: Some(Power::Off),
            target_temperature: Some(22.0),
            ..Command::default()
        };
        let json = serde_json::to_string(&cmd).unwrap();
        assert_eq!(json, r#"{"power":"OFF","target_temperature":22.0}"#);
    }
}
