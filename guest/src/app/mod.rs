//! The plugin's application core: what a verified command, a scheduler
//! wake, an answer and a cancel do, over a [`Platform`] and a [`Driver`].
//!
//! Nothing here touches WIT or the runner's imports, so the same code runs
//! in the component and natively, over an in-memory platform and a device
//! of a test's own (`guest/tests/verdicts.rs`).
//!
//! - [`command`]: the verified command: validate, probe, gate, store, send.
//! - [`advance`]: what the scheduler's wakes do: one read per device for
//!   every task waiting on it.
//! - [`answers`]: a person's answers to a task's questions.
//! - [`tasks`]: reading and cancelling a task.
//! - [`readings`]: every sensor reading goes through here, so subscribers
//!   hear of changes.

pub mod advance;
pub mod answers;
pub mod command;
pub mod readings;
pub mod tasks;

use crate::driver::Driver;
use crate::driver::homeassistant::HomeAssistant;
use crate::driver::profile::{self, Profile, ProfileDriver};
use crate::platform::Platform;
use crate::settings::Settings;
use crate::store::Store;
use crate::task::TaskRecord;
use serde_json::Value as Json;

/// What the client of a request declared, as far as the plugin cares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Client {
    /// The tasks extension.
    pub tasks: bool,
    /// Form elicitation.
    pub elicitation: bool,
}

/// Who is calling, and what they sent besides the arguments.
pub struct Caller<'a> {
    pub client: Client,
    /// MRTR answers on a retried call.
    pub input_responses: Option<&'a Json>,
    /// MRTR state on a retried call.
    pub request_state: Option<&'a str>,
    /// The client's name and version, for the audit trail.
    pub info: crate::audit::ClientInfo,
    /// The tool's arguments as sent, for the audit trail.
    pub arguments: &'a Json,
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

/// What every operation needs: settings, the device API and the records.
pub struct Context<'p> {
    pub platform: &'p dyn Platform,
    pub settings: Settings,
    pub driver: Box<dyn Driver + 'p>,
    pub store: Store<'p>,
}

impl<'p> Context<'p> {
    /// The context the operator configured: settings from the platform's
    /// configuration, and the driver they name.
    pub fn load(platform: &'p dyn Platform) -> Result<Context<'p>, String> {
        let mut settings = Settings::from_lookup(|key| platform.config(key))?;
        let driver = build_driver(platform, &mut settings)?;
        Ok(Context::with_driver(platform, settings, driver))
    }

    /// A context with a driver of the caller's choosing (tests bring a
    /// device of their own).
    pub fn with_driver(
        platform: &'p dyn Platform,
        settings: Settings,
        driver: Box<dyn Driver + 'p>,
    ) -> Context<'p> {
        Context {
            platform,
            settings,
            driver,
            store: Store::new(platform),
        }
    }

    /// Milliseconds since the epoch, on the platform's clock.
    pub fn now_ms(&self) -> u64 {
        self.platform.now_ms()
    }
}

/// The driver `settings` name. A profile's timing becomes the default for
/// its devices; a setting the operator gave wins.
fn build_driver(
    platform: &dyn Platform,
    settings: &mut Settings,
) -> Result<Box<dyn Driver>, String> {
    let mut driver_of = |profile: Profile| -> Result<Box<dyn Driver>, String> {
        if let Some(timing) = &profile.timing {
            if let (Some(ms), None) = (
                timing.settle_window_ms,
                platform.config("settle_window_ms")?,
            ) {
                settings.timing.settle_window_ms = ms;
            }
            if let (Some(n), None) = (timing.stable_reads, platform.config("stable_reads")?) {
                settings.timing.stable_reads = n.clamp(1, 100);
            }
        }
        Ok(Box::new(ProfileDriver {
            profile,
            base_url: settings.device_api.clone(),
            token: settings.device_token.clone(),
            timeout_ms: settings.http_timeout_ms,
            max_body_bytes: settings.http_max_body_bytes,
        }))
    };
    match settings.driver.as_str() {
        // Built, not parsed: a fresh instance would parse it on every call
        // (`profile::sim`).
        "sim" => driver_of(profile::sim()),
        "profile" => {
            let text = settings.device_profile.clone().ok_or(
                "plugin configuration: driver \"profile\" needs device_profile (the profile's JSON)",
            )?;
            driver_of(Profile::parse(&text)?)
        }
        "homeassistant" => Ok(Box::new(HomeAssistant {
            base_url: settings.device_api.clone(),
            token: settings.device_token.clone(),
            timeout_ms: settings.http_timeout_ms,
            max_body_bytes: settings.http_max_body_bytes,
        })),
        other => Err(format!(
            "plugin configuration: driver {other:?} is not one this plugin has (sim, profile, homeassistant)"
        )),
    }
}
