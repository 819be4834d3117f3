//! The plugin's tools: one file per tool, each with its arguments, its
//! schema and what it does; shared verified-command logic in [`command`].
//!
//! Schemas and descriptions are kept short on purpose: every client sends
//! the whole tool list to its model on every turn.

mod args;
mod cancel_task;
mod command;
mod get_device_state;
mod get_task;
mod list_devices;
mod set_fan;
mod set_power_mode;
mod set_temperature;

pub use crate::app::{Caller, Context, Failure, Output};
use crate::model::{Allowed, Field, FieldSpec};
use serde_json::{Value as Json, json};

/// A tool as the plugin describes it.
pub struct Definition {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: &'static str,
    pub output_schema: &'static str,
    pub read_only: bool,
    /// Arguments that take a numeric field: their schema gets the range the
    /// configured devices accept.
    pub ranged: &'static [(&'static str, Field)],
}

/// The output schema every tool that returns a task shares.
pub(crate) const TASK_SCHEMA: &str = r#"{"type":"object","properties":{"taskId":{"type":"string"},"status":{"type":"string"}},"required":["taskId","status"]}"#;

/// The input schema of the tools that take a task id.
pub(crate) const TASK_ID_SCHEMA: &str =
    r#"{"type":"object","properties":{"task_id":{"type":"string"}},"required":["task_id"]}"#;

/// A tool: its definition and the function that runs it.
struct Tool {
    definition: Definition,
    run: fn(&Context<'_>, &Json, &Caller<'_>) -> Result<Output, Failure>,
}

/// All tools, in the order `tools/list` shows them.
const TOOLS: [Tool; 7] = [
    Tool {
        definition: list_devices::DEFINITION,
        run: list_devices::run,
    },
    Tool {
        definition: get_device_state::DEFINITION,
        run: get_device_state::run,
    },
    Tool {
        definition: set_power_mode::DEFINITION,
        run: set_power_mode::run,
    },
    Tool {
        definition: set_temperature::DEFINITION,
        run: set_temperature::run,
    },
    Tool {
        definition: set_fan::DEFINITION,
        run: set_fan::run,
    },
    Tool {
        definition: get_task::DEFINITION,
        run: get_task::run,
    },
    Tool {
        definition: cancel_task::DEFINITION,
        run: cancel_task::run,
    },
];

/// A tool as `tools/list` shows it.
pub struct Listed {
    pub definition: &'static Definition,
    /// The input schema, with the ranges the configured devices accept.
    pub input_schema: String,
}

/// The tools, with schemas fitted to what the configured devices accept
/// (`advertised`; empty when that is not known, and the schema then sets
/// no range). Every value is still checked against its own device.
pub fn definitions(advertised: &[FieldSpec]) -> Vec<Listed> {
    TOOLS
        .iter()
        .map(|tool| {
            let d = &tool.definition;
            let mut schema: Json =
                serde_json::from_str(d.input_schema).expect("tool schemas are JSON");
            for (argument, field) in d.ranged {
                let range = advertised.iter().find(|s| s.field == *field);
                if let (Some(property), Some(spec)) =
                    (schema["properties"].get_mut(*argument), range)
                {
                    add_range(property, &spec.allowed);
                }
            }
            Listed {
                definition: d,
                input_schema: schema.to_string(),
            }
        })
        .collect()
}

/// Adds `minimum`, `maximum` and, when every allowed value is a multiple of
/// the step, `multipleOf` (JSON Schema counts multiples from 0, a range
/// counts steps from its minimum).
fn add_range(property: &mut Json, allowed: &Allowed) {
    let Allowed::Range { min, max, step } = allowed else {
        return;
    };
    property["minimum"] = json!(min);
    property["maximum"] = json!(max);
    let steps_from_zero = min / step;
    if *step > 0.0 && (steps_from_zero - steps_from_zero.round()).abs() < 1e-9 {
        property["multipleOf"] = json!(step);
    }
}

/// Runs one tool.
pub fn call(
    ctx: &Context<'_>,
    name: &str,
    arguments: &Json,
    caller: &Caller<'_>,
) -> Result<Output, Failure> {
    let tool = TOOLS
        .iter()
        .find(|t| t.definition.name == name)
        .ok_or_else(|| Failure::UnknownTool(name.to_string()))?;
    (tool.run)(ctx, arguments, caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::Comparison;

    fn range(min: f64, max: f64, step: f64) -> FieldSpec {
        FieldSpec {
            field: Field::TargetTemperature,
            allowed: Allowed::Range { min, max, step },
            comparison: Comparison::Tolerance(0.1),
        }
    }

    #[test]
    fn every_schema_is_valid_json_with_an_object_root() {
        for listed in definitions(&[]) {
            let name = listed.definition.name;
            for schema in [
                listed.input_schema.as_str(),
                listed.definition.output_schema,
            ] {
                let v: Json =
                    serde_json::from_str(schema).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(v["type"], "object", "{name}");
            }
        }
    }

    #[test]
    fn the_temperature_schema_advertises_the_union_of_the_devices_ranges() {
        let union = crate::model::union_of_devices([range(16.0, 30.0, 0.5), range(7.0, 35.0, 1.0)]);
        let listed = definitions(&union);
        let set = listed
            .iter()
            .find(|l| l.definition.name == "set_temperature")
            .unwrap();
        let schema: Json = serde_json::from_str(&set.input_schema).unwrap();
        let t = &schema["properties"]["temperature"];
        assert_eq!(
            (t["minimum"].clone(), t["maximum"].clone()),
            (json!(7.0), json!(35.0))
        );
        assert_eq!(t["multipleOf"], json!(0.5));

        let odd = definitions(&crate::model::union_of_devices([
            range(16.0, 30.0, 0.5),
            range(10.0, 20.0, 0.3),
        ]));
        let schema: Json = serde_json::from_str(&odd[3].input_schema).unwrap();
        assert!(
            schema["properties"]["temperature"]
                .get("multipleOf")
                .is_none(),
            "no step shared by both devices: none advertised"
        );
        let unknown = definitions(&[]);
        let schema: Json = serde_json::from_str(&unknown[3].input_schema).unwrap();
        assert!(schema["properties"]["temperature"].get("minimum").is_none());
    }
}
