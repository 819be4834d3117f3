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

use crate::driver::Driver;
use crate::driver::homeassistant::HomeAssistant;
use crate::driver::profile::{Profile, ProfileDriver, SIM_PROFILE};
use crate::host;
use crate::settings::Settings;
use crate::store::Tasks;
use crate::task::TaskRecord;
use serde_json::Value as Json;

/// A tool as the plugin describes it.
pub struct Definition {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: &'static str,
    pub output_schema: &'static str,
    pub read_only: bool,
}

/// The output schema every tool that returns a task shares.
pub(crate) const TASK_SCHEMA: &str = r#"{"type":"object","properties":{"taskId":{"type":"string"},"status":{"type":"string"}},"required":["taskId","status"]}"#;

/// The input schema of the tools that take a task id.
pub(crate) const TASK_ID_SCHEMA: &str =
    r#"{"type":"object","properties":{"task_id":{"type":"string"}},"required":["task_id"]}"#;

/// A tool: its definition and the function that runs it.
struct Tool {
    definition: Definition,
    run: fn(&Context, &Json, &Caller<'_>) -> Result<Output, Failure>,
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

pub fn definitions() -> impl Iterator<Item = &'static Definition> {
    TOOLS.iter().map(|t| &t.definition)
}

/// What a tool produced.
pub enum Output {
    /// A finished `CallToolResult`.
    Result(Json),
    /// A verified command, now a stored task.
    Task(Box<TaskRecord>),
    /// MRTR: questions to answer before the tool can go on (the
    /// `InputRequiredResult` body).
    Questions(Json),
}

/// Why a tool call produced no output.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// No tool of that name: a protocol error.
    UnknownTool(String),
    /// The tool ran and refused or failed: a tool error the model can read.
    Tool(String),
    /// The plugin or its store is broken: an internal error.
    Internal(String),
}

/// What every tool needs: settings, the device API and the task store.
pub struct Context {
    pub settings: Settings,
    pub driver: Box<dyn Driver>,
    pub tasks: Tasks,
}

impl Context {
    pub fn load() -> Result<Context, String> {
        let mut settings = Settings::load()?;
        let mut profile = |text: &str| -> Result<Box<dyn Driver>, String> {
            let profile = Profile::parse(text)?;
            // The profile's timing is the default for its devices; a
            // setting the operator gave wins.
            if let Some(timing) = &profile.timing {
                if let (Some(ms), None) =
                    (timing.settle_window_ms, host::config("settle_window_ms")?)
                {
                    settings.timing.settle_window_ms = ms;
                }
                if let (Some(n), None) = (timing.stable_reads, host::config("stable_reads")?) {
                    settings.timing.stable_reads = n.clamp(1, 100);
                }
            }
            Ok(Box::new(ProfileDriver {
                profile,
                base_url: settings.device_api.clone(),
                token: settings.device_token.clone(),
                timeout_ms: settings.http_timeout_ms,
            }))
        };
        let driver: Box<dyn Driver> = match settings.driver.as_str() {
            "sim" => profile(SIM_PROFILE)?,
            "profile" => profile(settings.device_profile.as_deref().ok_or(
                "plugin configuration: driver \"profile\" needs device_profile (the profile's JSON)",
            )?)?,
            "homeassistant" => Box::new(HomeAssistant {
                base_url: settings.device_api.clone(),
                token: settings.device_token.clone(),
                timeout_ms: settings.http_timeout_ms,
            }),
            other => {
                return Err(format!(
                    "plugin configuration: driver {other:?} is not one this plugin has (sim, profile, homeassistant)"
                ));
            }
        };
        Ok(Context {
            settings,
            driver,
            tasks: Tasks::open()?,
        })
    }
}

pub use command::{Caller, send_and_record};

/// Runs one tool.
pub fn call(name: &str, arguments: &Json, caller: &Caller<'_>) -> Result<Output, Failure> {
    let tool = TOOLS
        .iter()
        .find(|t| t.definition.name == name)
        .ok_or_else(|| Failure::UnknownTool(name.to_string()))?;
    let ctx = Context::load().map_err(Failure::Internal)?;
    (tool.run)(&ctx, arguments, caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_is_valid_json_with_an_object_root() {
        for d in definitions() {
            for schema in [d.input_schema, d.output_schema] {
                let v: Json =
                    serde_json::from_str(schema).unwrap_or_else(|e| panic!("{}: {e}", d.name));
                assert_eq!(v["type"], "object", "{}", d.name);
            }
        }
    }
}
