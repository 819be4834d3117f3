//! The built-in `sim` profile as values rather than text.
//!
//! Every call runs in a fresh instance, so a profile given as text is
//! parsed on every call: for `sim` that parse was the plugin's largest
//! single cost (about 23 µs of the 80 a `get_device_state` spent in the
//! plugin in the twenty-third round's profile; building it instead cut
//! about 15 µs, docs/performance.md, "Twenty-fifth round"). [`sim`] builds the
//! same [`Profile`] directly. `profiles/sim.json` ([`SIM_PROFILE`]) stays
//! the profile's readable form and the source of truth: a test checks
//! that the two are equal, so neither can change alone.

#[cfg(doc)]
use super::SIM_PROFILE;
use super::{
    Auth, ControlSpec, FieldProfile, ListSpec, NumberSpec, Profile, SensorSpec, Spelling, Spellings,
};
use crate::model::Field;
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;

/// The simulator's API (`device-api.md`): equal to `Profile::parse(SIM_PROFILE)`.
pub fn sim() -> Profile {
    let choices = |field: Field, values: &[(&str, &str)]| FieldProfile {
        values: Some(Spellings(
            values
                .iter()
                .map(|&(model, write)| {
                    let spelling = Spelling {
                        write: Json::String(write.into()),
                        read: Vec::new(),
                    };
                    (model.to_string(), spelling)
                })
                .collect(),
        )),
        ..read_back(field)
    };
    let fields = BTreeMap::from([
        (
            Field::Power,
            choices(Field::Power, &[("on", "ON"), ("off", "OFF")]),
        ),
        (
            Field::Mode,
            choices(
                Field::Mode,
                &[
                    ("cool", "COOL"),
                    ("heat", "HEAT"),
                    ("dry", "DRY"),
                    ("fan", "FAN"),
                    ("auto", "AUTO"),
                ],
            ),
        ),
        (
            Field::TargetTemperature,
            FieldProfile {
                number: Some(NumberSpec {
                    min: 16.0,
                    max: 30.0,
                    step: 0.5,
                    scale: 1.0,
                    tolerance: 0.1,
                }),
                ..read_back(Field::TargetTemperature)
            },
        ),
        (
            Field::FanSpeed,
            choices(
                Field::FanSpeed,
                &[
                    ("auto", "AUTO"),
                    ("low", "LOW"),
                    ("medium", "MEDIUM"),
                    ("high", "HIGH"),
                ],
            ),
        ),
        (
            Field::VaneVertical,
            choices(
                Field::VaneVertical,
                &[
                    ("auto", "AUTO"),
                    ("up", "UP"),
                    ("middle", "MIDDLE"),
                    ("down", "DOWN"),
                    ("swing", "SWING"),
                ],
            ),
        ),
        (
            Field::VaneHorizontal,
            choices(
                Field::VaneHorizontal,
                &[
                    ("auto", "AUTO"),
                    ("left", "LEFT"),
                    ("center", "CENTER"),
                    ("right", "RIGHT"),
                    ("swing", "SWING"),
                ],
            ),
        ),
    ]);
    Profile {
        name: "settle device simulator (device-api.md)".into(),
        auth: Auth::Bearer,
        list: ListSpec {
            method: "GET".into(),
            path: "/api/v1/devices".into(),
            items: "/devices".into(),
            id: "/id".into(),
            name: Some("/name".into()),
            kind: Some("/kind".into()),
        },
        control: ControlSpec {
            method: "POST".into(),
            path: "/api/v1/devices/{device_id}/control".into(),
            body: Json::Object(Map::new()),
            together: Vec::new(),
        },
        sensors: SensorSpec {
            method: "GET".into(),
            path: "/api/v1/devices/{device_id}/sensors".into(),
            online: Some("/online".into()),
            room_temperature: Some("/room_temperature".into()),
            updated_at: Some("/updated_at".into()),
        },
        named_fields: BTreeMap::new(),
        fields,
        timing: None,
    }
}

/// A field the simulator takes and reports under its own name.
fn read_back(field: Field) -> FieldProfile {
    let pointer = format!("/{}", field.name());
    FieldProfile {
        write: pointer.clone(),
        read: Some(pointer),
        values: None,
        number: None,
        allowed_from: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::SIM_PROFILE;
    use super::*;

    /// The values and the text are one profile: a change to either alone
    /// fails here.
    #[test]
    fn the_built_in_sim_profile_is_its_json_text() {
        let parsed = Profile::parse(SIM_PROFILE).expect("profiles/sim.json is a valid profile");
        assert_eq!(sim(), parsed);
    }

    /// What the built-in profile says is also what the checks of a loaded
    /// profile accept (equality above implies it; this names the failure).
    #[test]
    fn the_built_in_sim_profile_passes_the_checks_of_a_loaded_one() {
        sim().check().expect("the built-in profile is valid");
    }
}
