//! The MCP conformance suite's fixtures as a settle plugin.
//!
//! The suite (`@modelcontextprotocol/conformance`) calls fixed tools,
//! resources and prompts and checks what comes back. Serving them from a
//! plugin, through the same runner and WIT boundary as the device plugin,
//! means the suite tests settle's whole path, while the runner stays free
//! of test code.
//!
//! Build with `cargo build -p settle-fixtures --target wasm32-wasip2
//! --release`, then serve with `settle serve --http 127.0.0.1:PORT --plugin
//! target/wasm32-wasip2/release/settle_fixtures.wasm --store memory
//! --inline-wait-ms 0`.
//!
//! # Layout
//! - [`tools`]: the fixture tools, by family.
//! - [`questions`]: MRTR questions and reading the client's replies (pure).
//! - [`mrtr`]: sealing `requestState` with HMAC-SHA256 (pure).
//! - [`task`]: the fixture jobs and the task state machine (pure).
//! - [`store`]: task records in key-value storage; the `tasks/*` exports.
//! - [`serve`]: routing of the other requests to [`resources`] and
//!   [`prompts`] (pure); [`outcome`]: how those requests end.
//! - [`content`]: the binary payloads.
//!
//! The runner's imports are reached only through `settle_plugin_sdk::host`.
//! This file only converts between WIT types and those modules.

pub mod content;
pub mod mrtr;
pub mod outcome;
pub mod prompts;
pub mod questions;
pub mod resources;
pub mod serve;
mod store;
pub mod task;
pub mod tools;

use settle_plugin_sdk::host::{CasUpdate, Kv};
use settle_plugin_sdk::{bindings, host};

use bindings::exports::settle::plugin::plugin::Guest;
use bindings::settle::plugin::types::{
    Asset, CallError, CallOutcome, CallRequest, McpRequest, RequestOutcome, ServerInfo, TaskError,
    TaskView, Tool,
};
use serde_json::{Value as Json, json};
use serve::{Refusal, Served};
use tools::{Failure, Outcome};

/// The configuration key of an operator's `requestState` sealing key; when
/// it is not set, the plugin keeps its own in its key-value bucket.
const REQUEST_STATE_KEY: &str = "request_state_key";

/// Where the plugin's own sealing key lives in its key-value bucket.
const SEALING_KEY_ENTRY: &str = "seal/request-state-key";

/// The MCP server instructions the runner passes to clients.
const INSTRUCTIONS: &str = "Fixtures for the MCP conformance suite: each tool, resource and prompt \
answers as the suite's scenario expects. Not a service to use.";

/// The plugin. Public, so native builds (the unit tests, `cargo clippy
/// --workspace`) see everything the exports reach as used.
pub struct Plugin;

/// Parses optional JSON the runner passed on; unparseable counts as absent,
/// like `null` (the client then gets asked again).
fn parse_optional(json: Option<&str>) -> Option<Json> {
    json.and_then(|j| serde_json::from_str(j).ok())
}

/// The sealer of `requestState`: under the operator's key when one is
/// configured, otherwise under a random key the plugin keeps in its bucket.
/// The first call that finds none creates it with compare-and-swap, so
/// every instance and every replica sharing the store seals with the same
/// key (a retry may reach another replica), and the runner knows nothing
/// of it.
fn sealer() -> Result<mrtr::Sealer, String> {
    if let Some(key) = host::config(REQUEST_STATE_KEY)? {
        return Ok(mrtr::Sealer::new(key.as_bytes()));
    }
    let key = Kv::open()?.cas_update(SEALING_KEY_ENTRY, |current| {
        Ok(match current {
            Some(key) => CasUpdate::Keep(key.to_vec()),
            None => {
                let key = host::random_bytes(32);
                CasUpdate::Write(key.clone(), key)
            }
        })
    })?;
    Ok(mrtr::Sealer::new(&key))
}

/// A capability JSON as the runner wants it in `missing-capability`.
fn missing(capabilities: Json) -> CallError {
    CallError::MissingCapability(capabilities.to_string())
}

impl Guest for Plugin {
    fn capabilities() -> Result<ServerInfo, String> {
        let capabilities = json!({
            "resources": {"subscribe": true},
            "prompts": {"listChanged": true},
            "completions": {},
        });
        Ok(ServerInfo {
            capabilities: capabilities.to_string(),
            instructions: Some(INSTRUCTIONS.to_string()),
        })
    }

    fn list_tools() -> Vec<Tool> {
        tools::all()
            .map(|t| Tool {
                name: t.name.to_string(),
                title: None,
                description: t.description.to_string(),
                input_schema: (t.input_schema)().to_string(),
                output_schema: None,
                annotations: None,
            })
            .collect()
    }

    fn call_tool(request: CallRequest) -> Result<CallOutcome, CallError> {
        let args: Json = serde_json::from_str(&request.arguments)
            .map_err(|e| CallError::InvalidParams(format!("arguments are not JSON: {e}")))?;
        let replies = parse_optional(request.input_responses.as_deref());
        let sealer = sealer().map_err(CallError::Internal)?;
        let outcome = tools::call(
            &request.name,
            &args,
            &request.client,
            replies.as_ref(),
            request.request_state.as_deref(),
            &sealer,
            &host::random_id(),
        );
        match outcome {
            Ok(Outcome::Complete(result)) => Ok(CallOutcome::Complete(result.to_string())),
            Ok(Outcome::InputRequired(body)) => Ok(CallOutcome::InputRequired(body.to_string())),
            Ok(Outcome::Task(record)) => Ok(CallOutcome::Task(store::view(&record))),
            Err(Failure::UnknownTool(m)) => Err(CallError::UnknownTool(m)),
            Err(Failure::InvalidParams(m)) => Err(CallError::InvalidParams(m)),
            Err(Failure::MissingCapability(c)) => Err(missing(c)),
            Err(Failure::Internal(m)) => Err(CallError::Internal(m)),
        }
    }

    fn serve(request: McpRequest) -> Result<RequestOutcome, CallError> {
        let params: Json = serde_json::from_str(&request.params).unwrap_or_else(|_| json!({}));
        let replies = parse_optional(request.input_responses.as_deref());
        let served = serve::serve(&serve::Request {
            method: &request.method,
            params: &params,
            client: &request.client,
            replies: replies.as_ref(),
        });
        match served {
            Ok(Served::Complete(result)) => Ok(RequestOutcome::Complete(result.to_string())),
            Ok(Served::InputRequired(body)) => Ok(RequestOutcome::InputRequired(body.to_string())),
            Err(Refusal::NotFound(m)) => Err(CallError::NotFound(m)),
            Err(Refusal::InvalidParams(m)) => Err(CallError::InvalidParams(m)),
            Err(Refusal::MissingCapability(c)) => Err(missing(c)),
            Err(Refusal::MethodNotFound(m)) => Err(CallError::MethodNotFound(m)),
        }
    }

    fn get_task(task_id: String) -> Result<TaskView, TaskError> {
        store::get(&task_id)
    }

    fn update_task(task_id: String, input_responses: String) -> Result<(), TaskError> {
        let replies: Json = serde_json::from_str(&input_responses).unwrap_or_else(|_| json!({}));
        store::answer(&task_id, &replies)
    }

    fn cancel_task(task_id: String) -> Result<(), TaskError> {
        store::cancel(&task_id)
    }

    fn advance(group: String, task_ids: Vec<String>) {
        if let Err(e) = store::advance(&task_ids) {
            host::log(host::Level::Error, &format!("advancing {group}: {e}"));
        }
    }
    /// No page: the runner's `/ui` answers 404 for this plugin.
    fn ui_asset(_path: String) -> Option<Asset> {
        None
    }
}

// Exported only in the component: native builds (the unit tests) cannot link
// symbol names that contain WIT's `:` and `/`.
#[cfg(target_arch = "wasm32")]
settle_plugin_sdk::export!(Plugin);
