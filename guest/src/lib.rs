//! settle's device plugin: the WASI component that knows devices and tasks.
//!
//! # Layout
//! - [`tools`]: the MCP tools, one module each, and the verified command.
//! - [`task`]: the task state machine (pure).
//! - [`gate`]: the safety gate (pure).
//! - [`model`]: the device model and value comparison (pure).
//! - [`question`]: questions to a person and their answers (pure).
//! - [`driver`]: device APIs mapped onto the model.
//! - [`store`]: task records and device indexes in key-value storage.
//! - [`advance`]: what the scheduler's wake-ups do.
//! - [`answers`]: a person's answers to a task's questions (`tasks/update`).
//! - [`resources`]: each device's state as a subscribable resource.
//! - [`settings`]: configuration from `wasi:config`.
//!
//! The runner's imports are reached only through `settle_plugin_sdk::host`.
//!
//! This file only converts between WIT types and those modules.

// Natively (for the unit tests of the pure modules) nothing is exported, so
// everything only the exports reach looks unused there.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod advance;
mod answers;
pub mod driver;
pub mod gate;
pub mod model;
pub mod question;
mod resources;
pub mod settings;
mod store;
pub mod task;
mod tools;

// Bindings and the runner's imports come from the SDK every plugin shares;
// these names keep `crate::host` and friends short.
use settle_plugin_sdk::{bindings, host, url};

use bindings::exports::settle::plugin::plugin::Guest;
use bindings::settle::plugin::types::{
    CallError, CallOutcome, CallRequest, McpRequest, RequestOutcome, ServerInfo, TaskError,
    TaskStatus, TaskView, Tool,
};
use serde_json::{Value as Json, json};
use tools::{Caller, Failure, Output};

/// The MCP server instructions the runner passes to clients.
const INSTRUCTIONS: &str = "Device commands are verified: each returns a task that completes only \
when the device's own sensors show the new state, or fails with what the device reported instead.";

/// A task's status as the runner receives it in a `task-view`.
fn wit_status(status: task::Status) -> TaskStatus {
    match status {
        task::Status::Working => TaskStatus::Working,
        task::Status::InputRequired => TaskStatus::InputRequired,
        task::Status::Completed => TaskStatus::Completed,
        task::Status::Failed => TaskStatus::Failed,
        task::Status::Cancelled => TaskStatus::Cancelled,
    }
}

struct Plugin;

impl Guest for Plugin {
    fn capabilities() -> Result<ServerInfo, String> {
        // Read once when the runner loads the plugin: a configuration this
        // plugin cannot work with (a bad device profile, an unknown driver)
        // is refused then, not on every call.
        tools::Context::load()?;
        Ok(ServerInfo {
            capabilities: resources::capabilities().to_string(),
            instructions: Some(INSTRUCTIONS.to_string()),
        })
    }

    fn list_tools() -> Vec<Tool> {
        tools::definitions()
            .map(|d| Tool {
                name: d.name.to_string(),
                title: None,
                description: d.description.to_string(),
                input_schema: d.input_schema.to_string(),
                output_schema: Some(d.output_schema.to_string()),
                annotations: d
                    .read_only
                    .then(|| json!({"readOnlyHint": true}).to_string()),
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
            client: &request.client,
            input_responses: input_responses.as_ref(),
            request_state: request.request_state.as_deref(),
        };
        match tools::call(&request.name, &arguments, &caller) {
            Ok(Output::Result(result)) => Ok(CallOutcome::Complete(result.to_string())),
            Ok(Output::Task(record)) => Ok(CallOutcome::Task(store::view(&record))),
            Ok(Output::Questions(questions)) => {
                Ok(CallOutcome::InputRequired(questions.to_string()))
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
        let ctx = tools::Context::load().map_err(CallError::Internal)?;
        resources::serve(&ctx, &request.method, &params)
            .map(|result| RequestOutcome::Complete(result.to_string()))
            .map_err(|e| match e {
                resources::ResourceError::NotFound(m) => CallError::NotFound(m),
                resources::ResourceError::Unavailable(m) => CallError::Internal(m),
                resources::ResourceError::MethodNotFound(m) => CallError::MethodNotFound(m),
            })
    }

    fn get_task(task_id: String) -> Result<TaskView, TaskError> {
        let tasks = store::Tasks::open().map_err(TaskError::Internal)?;
        let now = host::now_ms();
        let (record, _) = tasks
            .update(&task_id, now, |t| t.expire_if_due(now))
            .map_err(TaskError::Internal)?
            .ok_or_else(|| not_found(&task_id))?;
        Ok(store::view(&record))
    }

    fn update_task(task_id: String, input_responses: String) -> Result<(), TaskError> {
        let responses: Json = serde_json::from_str(&input_responses).unwrap_or_else(|_| json!({}));
        answers::deliver(&task_id, &responses)
    }

    fn cancel_task(task_id: String) -> Result<(), TaskError> {
        let tasks = store::Tasks::open().map_err(TaskError::Internal)?;
        let now = host::now_ms();
        tasks
            .update(&task_id, now, |t| t.cancel(now))
            .map_err(TaskError::Internal)?
            .ok_or_else(|| not_found(&task_id))?;
        Ok(())
    }

    fn advance(group: String, task_ids: Vec<String>) {
        if let Err(e) = advance::run(&group, &task_ids) {
            host::log(host::Level::Error, &format!("advancing {group}: {e}"));
        }
    }
}

fn not_found(task_id: &str) -> TaskError {
    TaskError::NotFound(format!("Task not found: {task_id:?}"))
}

// Exported only in the component: native builds (the unit tests) cannot link
// symbol names that contain WIT's `:` and `/`.
#[cfg(target_arch = "wasm32")]
settle_plugin_sdk::export!(Plugin);
