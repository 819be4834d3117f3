//! settle's device plugin: the WASI component that knows devices and tasks.
//!
//! # Layout
//! - [`app`]: the application core: the verified command, the scheduler's
//!   wakes, answers, reading and cancelling tasks.
//! - [`device`]: the model of each device: its command timeline, what it
//!   shows, how long it takes to act (pure).
//! - [`task`]: the task state machine (pure), its views and wakes.
//! - [`tools`]: the MCP tools, one module each.
//! - [`resources`]: each device's state as a subscribable resource.
//! - [`gate`]: the safety gate (pure).
//! - [`json`]: JSON text, written fast.
//! - [`model`]: the device's fields and value comparison (pure).
//! - [`question`]: questions to a person and their answers (pure).
//! - [`driver`]: device APIs mapped onto the model.
//! - [`store`]: the records in key-value storage.
//! - [`audit`]: the audit trail: a record per command as it ends.
//! - [`platform`]: what the core needs from outside (clock, storage,
//!   wakes, notices) as traits, with the component's implementation and an
//!   in-memory one for native tests.
//! - [`settings`]: the plugin's configuration.
//! - [`ui`]: the live view's page and script, served at the runner's
//!   `/ui`.
//!
//! Dependencies point one way: `tools` and `resources` use `app`; `app`
//! uses `device`, `task`, `store`, `driver` and `platform`; those use the
//! pure modules. The runner's imports are reached only through
//! `settle_plugin_sdk::host`, from `platform::wasi` and the drivers' HTTP.
//!
//! This file only converts between WIT types and those modules.

pub mod app;
pub mod audit;
pub mod device;
pub mod driver;
pub mod gate;
pub mod json;
pub mod model;
pub mod platform;
pub mod question;
pub mod resources;
pub mod settings;
pub mod stable_hash;
pub mod store;
pub mod task;
pub mod tools;
pub mod ui;

// Bindings and the runner's imports come from the SDK every plugin shares;
// these names keep `crate::host` and friends short.
use settle_plugin_sdk::{bindings, host, url};

use app::tasks::TaskError as AppTaskError;
use app::{Caller, Client, Context, Failure, Output};
use bindings::exports::settle::plugin::plugin::Guest;
use bindings::settle::plugin::types::{
    Asset, CallError, CallOutcome, CallRequest, McpRequest, RequestOutcome, ServerInfo, TaskError,
    TaskView, Tool,
};
use platform::wasi::{WasiPlatform, task_view};
use serde_json::{Value as Json, json};
use store::Store;

// Natively (the unit tests) nothing exports it; see the end of this file.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
struct Plugin;

impl Guest for Plugin {
    fn capabilities() -> Result<ServerInfo, String> {
        /// The MCP server instructions the runner passes to clients.
        const INSTRUCTIONS: &str = "Device commands are verified: each returns a task that \
completes only when the device's own sensors show the new state, or fails with what the device \
reported instead.";
        // Read once when the runner loads the plugin: a configuration this
        // plugin cannot work with (a bad device profile, an unknown driver)
        // is refused then, not on every call.
        let platform = WasiPlatform::open()?;
        Context::load(&platform)?;
        Ok(ServerInfo {
            capabilities: resources::capabilities().to_string(),
            instructions: Some(INSTRUCTIONS.to_string()),
        })
    }

    fn list_tools() -> Vec<Tool> {
        // Schemas advertise what the configured devices accept; when the
        // device API cannot say (yet), they set no range, and every value
        // is still checked against its own device.
        let advertised = WasiPlatform::open()
            .ok()
            .and_then(|p| Context::load(&p).ok()?.driver.advertised().ok())
            .unwrap_or_default();
        tools::definitions(&advertised)
            .into_iter()
            .map(|listed| {
                let d = listed.definition;
                Tool {
                    name: d.name.to_string(),
                    title: None,
                    description: d.description.to_string(),
                    input_schema: listed.input_schema,
                    output_schema: Some(d.output_schema.to_string()),
                    annotations: d
                        .read_only
                        .then(|| json!({"readOnlyHint": true}).to_string()),
                }
            })
            .collect()
    }

    fn call_tool(request: CallRequest) -> Result<CallOutcome, CallError> {
        let arguments: Json = serde_json::from_str(&request.arguments)
            .map_err(|e| CallError::InvalidParams(format!("arguments are not JSON: {e}")))?;
        let input_responses = request
            .input_responses
            .as_deref()
            .and_then(|r| serde_json::from_str::<Json>(r).ok());
        let caller = Caller {
            client: Client {
                tasks: request.client.tasks,
                elicitation: request.client.elicitation,
            },
            input_responses: input_responses.as_ref(),
            request_state: request.request_state.as_deref(),
            info: audit::ClientInfo {
                name: request.client.client_name.clone(),
                version: request.client.client_version.clone(),
            },
            arguments: &arguments,
        };
        let platform = WasiPlatform::open().map_err(CallError::Internal)?;
        let ctx = kept(Context::load(&platform).map_err(CallError::Internal)?);
        match tools::call(&ctx, &request.name, &arguments, &caller) {
            Ok(Output::Result(result)) => Ok(CallOutcome::Complete(json::text(&result))),
            Ok(Output::Task(record)) => Ok(CallOutcome::Task(task_view(&record))),
            Ok(Output::Questions(questions)) => {
                Ok(CallOutcome::InputRequired(json::text(&questions)))
            }
            Err(Failure::Tool(message)) => Ok(CallOutcome::Complete(
                json!({"content": [{"type": "text", "text": message}], "isError": true})
                    .to_string(),
            )),
            Err(Failure::UnknownTool(name)) => {
                Err(CallError::UnknownTool(format!("unknown tool {name:?}")))
            }
            Err(Failure::Internal(message)) => Err(CallError::Internal(message)),
        }
    }

    fn serve(request: McpRequest) -> Result<RequestOutcome, CallError> {
        let params: Json = serde_json::from_str(&request.params).unwrap_or_else(|_| json!({}));
        let platform = WasiPlatform::open().map_err(CallError::Internal)?;
        let ctx = kept(Context::load(&platform).map_err(CallError::Internal)?);
        resources::serve(&ctx, &request.method, &params)
            .map(|result| RequestOutcome::Complete(json::text(&result)))
            .map_err(|e| match e {
                resources::ResourceError::NotFound(m) => CallError::NotFound(m),
                resources::ResourceError::Unavailable(m) => CallError::Internal(m),
                resources::ResourceError::MethodNotFound(m) => CallError::MethodNotFound(m),
            })
    }

    fn get_task(task_id: String) -> Result<TaskView, TaskError> {
        let platform = WasiPlatform::open().map_err(TaskError::Internal)?;
        let record = app::tasks::get(&Store::new(&platform), host::now_ms(), &task_id)
            .map_err(task_error)?;
        Ok(task_view(&record))
    }

    fn update_task(task_id: String, input_responses: String) -> Result<(), TaskError> {
        let responses: Json = serde_json::from_str(&input_responses).unwrap_or_else(|_| json!({}));
        let platform = WasiPlatform::open().map_err(TaskError::Internal)?;
        let ctx = kept(Context::load(&platform).map_err(TaskError::Internal)?);
        app::answers::deliver(&ctx, &task_id, &responses).map_err(task_error)
    }

    fn cancel_task(task_id: String) -> Result<(), TaskError> {
        let platform = WasiPlatform::open().map_err(TaskError::Internal)?;
        app::tasks::cancel(&Store::new(&platform), host::now_ms(), &task_id)
            .map(|_| ())
            .map_err(task_error)
    }

    fn advance(group: String, task_ids: Vec<String>) {
        let outcome = WasiPlatform::open().and_then(|platform| {
            let ctx = kept(Context::load(&platform)?);
            app::advance::run(&ctx, &group, &task_ids)
        });
        if let Err(e) = outcome {
            host::log(host::Level::Error, &format!("advancing {group}: {e}"));
        }
    }

    /// The live view's files ([`ui`]).
    fn ui_asset(path: String) -> Option<Asset> {
        ui::asset(&path).map(|a| Asset {
            content_type: a.content_type.to_string(),
            body: a.body.to_vec(),
        })
    }
}

/// A call's context, never torn down. Each call runs in a fresh instance
/// that the runner throws away afterwards (`wit/world.wit`), so freeing
/// the settings, the driver with its profile and the store value by value
/// at the end of a call is work nobody needs: the twenty-third round's
/// profile put it at 7 µs of a `get_device_state`, and leaving it undone
/// saved 3 to 4 µs at the median (docs/performance.md, "Twenty-fifth
/// round").
/// Nothing in a context acts when dropped (it holds no resource handle:
/// those are the platform's, dropped as before).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn kept(ctx: Context<'_>) -> std::mem::ManuallyDrop<Context<'_>> {
    std::mem::ManuallyDrop::new(ctx)
}

#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn task_error(e: AppTaskError) -> TaskError {
    match e {
        AppTaskError::NotFound(m) => TaskError::NotFound(m),
        AppTaskError::Internal(m) => TaskError::Internal(m),
    }
}

// Exported only in the component: native builds (the unit tests) cannot link
// symbol names that contain WIT's `:` and `/`.
#[cfg(target_arch = "wasm32")]
settle_plugin_sdk::export!(Plugin);
