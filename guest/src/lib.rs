//! settle's device plugin: the WASI component that knows devices and tasks.
//!
//! # Layout
//! - [`tools`]: the MCP tools, one module each, and the verified command.
//! - [`task`]: the task state machine (pure).
//! - [`gate`]: the safety gate (pure).
//! - [`model`]: the device model and value comparison (pure).
//! - [`driver`]: device APIs mapped onto the model.
//! - [`store`]: task records and device indexes in key-value storage.
//! - [`advance`]: what the scheduler's wake-ups do.
//! - [`settings`]: configuration from `wasi:config`.
//! - [`host`]: the only module that calls the runner's imports.
//!
//! This file only converts between WIT types and those modules.

mod advance;
pub mod driver;
pub mod gate;
mod host;
pub mod model;
pub mod settings;
mod store;
pub mod task;
mod tools;
mod url;

/// The one place bindings are generated, from the workspace's `wit/`.
mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "settle:plugin/device-plugin",
        generate_all,
    });
}

use bindings::exports::settle::plugin::plugin::Guest;
use bindings::settle::plugin::types::{
    CallError, CallOutcome, CallRequest, TaskError, TaskView, Tool,
};
use serde_json::{Value as Json, json};
use tools::{Failure, Output};

struct Plugin;

impl Guest for Plugin {
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
        match tools::call(&request.name, &arguments) {
            Ok(Output::Result(result)) => Ok(CallOutcome::Complete(result.to_string())),
            Ok(Output::Task(record)) => Ok(CallOutcome::Task(store::view(&record))),
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

    fn get_task(task_id: String) -> Result<TaskView, TaskError> {
        let tasks = store::Tasks::open().map_err(TaskError::Internal)?;
        let now = host::now_ms();
        let (record, _) = tasks
            .update(&task_id, now, |t| t.expire_if_due(now))
            .map_err(TaskError::Internal)?
            .ok_or_else(|| not_found(&task_id))?;
        Ok(store::view(&record))
    }

    fn update_task(task_id: String, _input_responses: String) -> Result<(), TaskError> {
        // No device task asks for input yet, so no key is outstanding and
        // every response is ignored, as the extension requires.
        let tasks = store::Tasks::open().map_err(TaskError::Internal)?;
        match tasks.load(&task_id).map_err(TaskError::Internal)? {
            Some(_) => Ok(()),
            None => Err(not_found(&task_id)),
        }
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
bindings::export!(Plugin with_types_in bindings);
