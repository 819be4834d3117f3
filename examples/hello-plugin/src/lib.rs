//! The smallest useful settle plugin: one tool, `hello`, and nothing else.
//!
//! Build it and serve it with the stock runner:
//!
//! ```sh
//! cargo build -p settle-hello --target wasm32-wasip2 --release
//! settle serve --http 127.0.0.1:8080 --store memory \
//!   --plugin target/wasm32-wasip2/release/settle_hello.wasm \
//!   --plugin-config greeting=Hi
//! ```
//!
//! A plugin implements the `plugin` interface of `wit/world.wit`: the
//! trait `Guest` below, one function per export. The runner makes a fresh
//! instance for every call, so nothing lives in memory between calls; state
//! that must last goes into the tenant's key-value bucket
//! (`settle_plugin_sdk::host::Kv`).

use serde_json::{Value, json};
use settle_plugin_sdk::bindings::exports::settle::plugin::plugin::Guest;
use settle_plugin_sdk::bindings::settle::plugin::types::{
    Asset, CallError, CallOutcome, CallRequest, McpRequest, RequestOutcome, ServerInfo, TaskError,
    TaskView, Tool,
};
use settle_plugin_sdk::host;

/// The plugin. Public, so native builds (`cargo clippy --workspace`) see
/// it as used even though only the component exports it.
pub struct Hello;

impl Guest for Hello {
    /// Read once when the runner loads the plugin, before it serves: the
    /// place to check the configuration. `Err` refuses it, and the runner
    /// does not serve this plugin (at a swap, the old one keeps serving).
    fn capabilities() -> Result<ServerInfo, String> {
        greeting()?;
        Ok(ServerInfo {
            // No resources, prompts or completions: tools only.
            capabilities: "{}".into(),
            instructions: Some("Call hello to be greeted.".into()),
        })
    }

    /// The tools; the list must be the same on every call.
    fn list_tools() -> Vec<Tool> {
        vec![Tool {
            name: "hello".into(),
            title: Some("Say hello".into()),
            description: "Greets `name` (or the world).".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"name": {"type": "string"}},
            })
            .to_string(),
            output_schema: None,
            annotations: Some(json!({"readOnlyHint": true}).to_string()),
        }]
    }

    /// One `tools/call`. A finished call is a `CallToolResult` as JSON; a
    /// mistake the caller can fix is a result with `isError`, not an `Err`.
    fn call_tool(request: CallRequest) -> Result<CallOutcome, CallError> {
        if request.name != "hello" {
            return Err(CallError::UnknownTool(request.name));
        }
        let arguments: Value = serde_json::from_str(&request.arguments)
            .map_err(|e| CallError::InvalidParams(format!("arguments are not JSON: {e}")))?;
        let name = match &arguments["name"] {
            Value::Null => "world",
            Value::String(name) => name,
            _ => return Ok(tool_error("name must be a string")),
        };
        let greeting = greeting().map_err(CallError::Internal)?;
        let text = format!("{greeting}, {name}!");
        Ok(CallOutcome::Complete(
            json!({
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"greeting": text},
            })
            .to_string(),
        ))
    }

    // This plugin serves no resources, prompts or completions, and makes
    // no tasks: the rest of the interface says so.

    fn serve(request: McpRequest) -> Result<RequestOutcome, CallError> {
        Err(CallError::MethodNotFound(request.method))
    }

    fn get_task(task_id: String) -> Result<TaskView, TaskError> {
        Err(TaskError::NotFound(format!("no task {task_id:?}")))
    }

    fn update_task(task_id: String, _input_responses: String) -> Result<(), TaskError> {
        Err(TaskError::NotFound(format!("no task {task_id:?}")))
    }

    fn cancel_task(task_id: String) -> Result<(), TaskError> {
        Err(TaskError::NotFound(format!("no task {task_id:?}")))
    }

    fn advance(_group: String, _task_ids: Vec<String>) {}

    /// No page: the runner's `/ui` answers 404 for this plugin.
    fn ui_asset(_path: String) -> Option<Asset> {
        None
    }
}

/// The greeting, from the tenant's plugin settings (`wasi:config`):
/// `--plugin-config greeting=Hi`, or `[tenant.NAME.plugin_config]`.
fn greeting() -> Result<String, String> {
    match host::config("greeting")? {
        None => Ok("Hello".into()),
        Some(g) if g.trim().is_empty() => Err("plugin configuration: greeting is empty".into()),
        Some(g) => Ok(g),
    }
}

fn tool_error(message: &str) -> CallOutcome {
    CallOutcome::Complete(
        json!({"content": [{"type": "text", "text": message}], "isError": true}).to_string(),
    )
}

// The component's exports. Only in the component: a native build cannot
// link the export names (they contain WIT's `:` and `/`).
#[cfg(target_arch = "wasm32")]
settle_plugin_sdk::export!(Hello);
