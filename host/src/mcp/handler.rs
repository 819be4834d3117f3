//! The MCP handler: rmcp calls it, it calls the tenant's plugin.
//!
//! It owns the protocol decisions the plugin should not have to know about:
//! which era a request is in, whether the client may receive a task, how long
//! to wait inline for a task before answering, and how plugin outcomes and
//! faults become MCP results and JSON-RPC errors.

use crate::bindings::settle::plugin::types::{
    CallError, CallOutcome, CallRequest, ClientContext, TaskError, TaskView, Tool as PluginTool,
};
use crate::drain::Drain;
use crate::runtime::{Fault, Runtime};
use crate::tenant::Tenant;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    CreateTaskResult, CustomRequest, CustomResult, DetailedTask, ErrorData, GetTaskParams,
    GetTaskResult, Implementation, InputRequiredResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Task, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// The protocol versions settle serves: 2026-07-28 statelessly, and the two
/// `initialize` versions most clients in use still speak.
const VERSIONS: [ProtocolVersion; 3] = [
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

const INSTRUCTIONS: &str = "Device commands are verified: each returns a task that completes only \
when the device's own sensors show the new state, or fails with what the device reported instead.";

/// How the handler serves, whatever the transport.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// How long a `tools/call` that became a task waits for it to end before
    /// answering with the unfinished task.
    pub inline_wait: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            inline_wait: Duration::from_millis(2_000),
        }
    }
}

/// One tenant's MCP server. Cheap to clone: rmcp makes one per request.
#[derive(Clone)]
pub struct Settle {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: Arc<Runtime>,
    tenant: Arc<Tenant>,
    options: ServeOptions,
    /// Counts calls in flight, so shutdown can let them finish.
    drain: Drain,
}

impl Settle {
    /// A server for `tenant`, running its plugin in `runtime`.
    pub fn new(
        runtime: Arc<Runtime>,
        tenant: Arc<Tenant>,
        options: ServeOptions,
        drain: Drain,
    ) -> Settle {
        Settle {
            inner: Arc::new(Inner {
                runtime,
                tenant,
                options,
                drain,
            }),
        }
    }

    /// The calls this server has in flight.
    pub fn drain(&self) -> &Drain {
        &self.inner.drain
    }

    fn tenant(&self) -> &Tenant {
        &self.inner.tenant
    }
}

/// A request served under 2026-07-28 (rather than a legacy `initialize`
/// session). The tasks extension exists only there: SEP-2663 forbids
/// enabling it for 2025-11-25 clients even when they declare it.
fn is_modern(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version().is_some_and(|v| !v.has_initialize())
}

fn declares_tasks(cx: &RequestContext<RoleServer>) -> bool {
    is_modern(cx) && cx.client_capabilities().is_some_and(|c| c.supports_tasks())
}

fn client_context(cx: &RequestContext<RoleServer>) -> ClientContext {
    let caps = cx.client_capabilities().unwrap_or_default();
    ClientContext {
        protocol_version: cx
            .protocol_version()
            .map(|v| v.to_string())
            .unwrap_or_default(),
        tasks: declares_tasks(cx),
        // MRTR questions are a 2026-07-28 mechanism.
        elicitation: is_modern(cx) && caps.elicitation.is_some(),
        sampling: caps.sampling.is_some(),
    }
}

fn fault_error(fault: Fault) -> ErrorData {
    ErrorData::internal_error(fault.to_string(), None)
}

/// Parses JSON the plugin produced into an rmcp type; a plugin that breaks
/// the contract gets an internal error that says where.
fn from_plugin<T: serde::de::DeserializeOwned>(what: &str, json: &str) -> Result<T, ErrorData> {
    serde_json::from_str(json).map_err(|e| {
        ErrorData::internal_error(format!("the plugin returned an invalid {what}: {e}"), None)
    })
}

fn parse_optional(what: &str, json: &Option<String>) -> Result<Option<Value>, ErrorData> {
    json.as_deref().map(|j| from_plugin(what, j)).transpose()
}

/// The plugin's description of a tool as an MCP `Tool`.
fn to_mcp_tool(tool: &PluginTool) -> Result<Tool, ErrorData> {
    let mut value = json!({
        "name": tool.name,
        "description": tool.description,
        "inputSchema": from_plugin::<Value>("input schema", &tool.input_schema)?,
    });
    if let Some(title) = &tool.title {
        value["title"] = json!(title);
    }
    if let Some(schema) = parse_optional("output schema", &tool.output_schema)? {
        value["outputSchema"] = schema;
    }
    if let Some(annotations) = parse_optional("annotations", &tool.annotations)? {
        value["annotations"] = annotations;
    }
    serde_json::from_value(value).map_err(|e| {
        ErrorData::internal_error(
            format!("the plugin's tool {} is invalid: {e}", tool.name),
            None,
        )
    })
}

fn task_error(error: TaskError) -> ErrorData {
    match error {
        TaskError::NotFound(message) => {
            ErrorData::invalid_params(format!("Failed to retrieve task: {message}"), None)
        }
        TaskError::Internal(message) => ErrorData::internal_error(message, None),
    }
}

fn call_error(error: CallError) -> ErrorData {
    match error {
        CallError::UnknownTool(message) | CallError::InvalidParams(message) => {
            ErrorData::invalid_params(message, None)
        }
        CallError::MissingCapability(json) => {
            match serde_json::from_str::<ClientCapabilities>(&json) {
                Ok(required) => ErrorData::missing_required_client_capability(required),
                Err(e) => ErrorData::internal_error(
                    format!("the plugin named an invalid missing capability: {e}"),
                    None,
                ),
            }
        }
        CallError::Internal(message) => ErrorData::internal_error(message, None),
    }
}

/// The `tasks/*` methods need the extension declared on a 2026-07-28
/// request; rmcp checks the declaration, this adds the era.
fn require_task_client(cx: &RequestContext<RoleServer>) -> Result<(), ErrorData> {
    if declares_tasks(cx) {
        return Ok(());
    }
    Err(ErrorData::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    ))
}

impl Settle {
    /// Answers a call that became a task: waits briefly for it to end, then
    /// gives a task-aware client a `CreateTaskResult` and any other client
    /// the tool result that stands for the task.
    async fn answer_with_task(
        &self,
        created: TaskView,
        tasks_declared: bool,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut view = created;
        if !view.terminal {
            let events = self.tenant().context.events.clone();
            let mut watch = events.watch(self.tenant().name(), &view.task_id);
            view = match watch.ended_within(self.inner.options.inline_wait).await {
                Some(ended) => ended,
                // Still going: read it once more so the answer carries the
                // latest status message.
                None => self
                    .inner
                    .runtime
                    .get_task(self.tenant(), &view.task_id)
                    .await
                    .map_err(fault_error)?
                    .map_err(task_error)?,
            };
        }
        if tasks_declared && !view.terminal {
            let task: Task = from_plugin("task", &view.detailed)?;
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        let result: CallToolResult = from_plugin("task tool result", &view.tool_result)?;
        Ok(CallToolResponse::Complete(result))
    }
}

impl ServerHandler for Settle {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("settle", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&VERSIONS)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // Used by rmcp to check `Mcp-Param-*` headers; only the tool list
        // already read can answer synchronously.
        let plugin = self.tenant().plugin.load();
        plugin
            .cached_tools()?
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| to_mcp_tool(t).ok())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .inner
            .runtime
            .list_tools(self.tenant())
            .await
            .map_err(fault_error)?;
        let tools = tools
            .iter()
            .map(to_mcp_tool)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _in_flight = self.inner.drain.enter();
        let client = client_context(&cx);
        let tasks_declared = client.tasks;
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call = CallRequest {
            name: request.name.to_string(),
            arguments: arguments.to_string(),
            client,
            input_responses: request
                .input_responses
                .map(|r| serde_json::to_string(&r).unwrap_or_default()),
            request_state: request.request_state,
        };
        let outcome = self
            .inner
            .runtime
            .call_tool(self.tenant(), &call)
            .await
            .map_err(fault_error)?
            .map_err(call_error)?;
        match outcome {
            CallOutcome::Complete(json) => Ok(CallToolResponse::Complete(from_plugin(
                "tool result",
                &json,
            )?)),
            CallOutcome::InputRequired(json) => {
                let result: InputRequiredResult = from_plugin("input-required result", &json)?;
                Ok(CallToolResponse::InputRequired(result))
            }
            CallOutcome::Task(view) => self.answer_with_task(view, tasks_declared).await,
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let _in_flight = self.inner.drain.enter();
        require_task_client(&cx)?;
        let view = self
            .inner
            .runtime
            .get_task(self.tenant(), &request.task_id)
            .await
            .map_err(fault_error)?
            .map_err(task_error)?;
        let detailed: DetailedTask = from_plugin("detailed task", &view.detailed)?;
        Ok(GetTaskResult::new(detailed))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _in_flight = self.inner.drain.enter();
        require_task_client(&cx)?;
        let responses = serde_json::to_string(&request.input_responses)
            .map_err(|e| ErrorData::invalid_params(format!("inputResponses: {e}"), None))?;
        self.inner
            .runtime
            .update_task(self.tenant(), &request.task_id, &responses)
            .await
            .map_err(fault_error)?
            .map_err(task_error)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _in_flight = self.inner.drain.enter();
        require_task_client(&cx)?;
        self.inner
            .runtime
            .cancel_task(self.tenant(), &request.task_id)
            .await
            .map_err(fault_error)?
            .map_err(task_error)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _cx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        // rmcp routes a known method here when its params do not parse;
        // that is a malformed request (-32602), not an unknown method.
        const KNOWN: [(&str, &str); 6] = [
            (
                "tools/call",
                "tools/call needs params {name: string, arguments?: object}",
            ),
            ("tools/list", "tools/list takes params {cursor?: string}"),
            ("tasks/get", "tasks/get needs params {taskId: string}"),
            (
                "tasks/update",
                "tasks/update needs params {taskId: string, inputResponses: object}",
            ),
            ("tasks/cancel", "tasks/cancel needs params {taskId: string}"),
            (
                "server/discover",
                "server/discover takes no params besides _meta",
            ),
        ];
        let method = request.method.as_str();
        if let Some((_, usage)) = KNOWN.iter().find(|(m, _)| *m == method) {
            return Err(ErrorData::invalid_params(
                format!("Invalid params for {method}: {usage}"),
                None,
            ));
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
            None,
        ))
    }
}
