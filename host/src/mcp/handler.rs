//! The MCP handler: rmcp calls it, it calls the tenant's plugin.
//!
//! It owns the protocol decisions the plugin should not have to know about:
//! which era a request is in, whether the client may receive a task, how long
//! to wait inline for a task before answering, how a legacy client answers a
//! plugin's questions, and how plugin outcomes and faults become MCP results
//! and JSON-RPC errors.

// MCP logging is deprecated (SEP-2577) but part of the legacy era settle
// serves, so rmcp's logging types are used on purpose.
#![allow(deprecated)]

use super::notify::Notifier;
use crate::bindings::settle::plugin::types::{
    CallError, CallOutcome, CallRequest, ClientContext, McpRequest, RequestOutcome, TaskError,
    TaskStatus, TaskView, Tool as PluginTool,
};
use crate::drain::Drain;
use crate::events::{Event, Hub, Interest};
use crate::runtime::{Fault, PluginInfo, Runtime};
use crate::state::RequestNotifier;
use crate::tenant::Tenant;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    CompleteRequestParams, CompleteResult, CreateTaskResult, CustomRequest, CustomResult,
    DetailedTask, ErrorCode, ErrorData, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    GetTaskParams, GetTaskResult, Implementation, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig,
    ServerRequest, SetLevelRequestParams, SubscribeRequestParams, Task, Tool,
    UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The protocol versions settle serves: 2026-07-28 statelessly, and the two
/// `initialize` versions most clients in use still speak.
const VERSIONS: [ProtocolVersion; 3] = [
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// Question rounds a legacy client is taken through before giving up: the
/// plugin may ask again after each answer, but not forever.
const MAX_QUESTION_ROUNDS: usize = 10;

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

/// One tenant's MCP server. rmcp asks for a handler per stateless request
/// and per legacy session: [`Settle::for_session`] makes one, sharing
/// everything but the session's own state.
#[derive(Clone)]
pub struct Settle {
    inner: Arc<Inner>,
    session: Arc<Session>,
}

struct Inner {
    runtime: Arc<Runtime>,
    tenant: Arc<Tenant>,
    options: ServeOptions,
    /// Counts calls in flight, so shutdown can let them finish.
    drain: Drain,
}

/// What a legacy (`initialize`) session remembers between its requests.
#[derive(Default)]
struct Session {
    /// The level `logging/setLevel` chose; until then every message goes.
    log_level: Mutex<Option<LoggingLevel>>,
    /// Forwarders of `resources/subscribe`, by URI; dropping one ends it.
    subscriptions: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        let subscriptions = self
            .subscriptions
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        for (_, forwarder) in subscriptions.drain() {
            forwarder.abort();
        }
    }
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
            session: Arc::default(),
        }
    }

    /// The same server with fresh session state.
    pub fn for_session(&self) -> Settle {
        Settle {
            inner: self.inner.clone(),
            session: Arc::default(),
        }
    }

    /// The calls this server has in flight.
    pub fn drain(&self) -> &Drain {
        &self.inner.drain
    }

    pub(super) fn hub(&self) -> &Arc<Hub> {
        &self.tenant().context.events
    }

    /// The tenant this server serves.
    pub fn tenant_name(&self) -> &str {
        self.tenant().name()
    }

    /// What the plugin said about its server when it was admitted.
    pub(super) fn plugin_info(&self) -> PluginInfo {
        self.tenant()
            .plugin
            .load()
            .cached_info()
            .cloned()
            .unwrap_or_default()
    }

    /// What the plugin serves beyond tools (read when it was admitted).
    pub(super) fn plugin_capabilities(&self) -> Value {
        self.plugin_info().capabilities
    }

    fn tenant(&self) -> &Tenant {
        &self.inner.tenant
    }

    fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// Where the plugin's progress and log messages for this request go.
    fn notifier(&self, cx: &RequestContext<RoleServer>) -> Arc<dyn RequestNotifier> {
        let min_level = if is_modern(cx) {
            #[allow(deprecated)]
            cx.meta.log_level()
        } else {
            Some(
                self.session
                    .log_level
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .unwrap_or(LoggingLevel::Debug),
            )
        };
        Arc::new(Notifier {
            peer: cx.peer.clone(),
            progress_token: cx.meta.get_progress_token(),
            min_level,
        })
    }
}

/// A request served under 2026-07-28 (rather than a legacy `initialize`
/// session). The tasks extension exists only there: SEP-2663 forbids
/// enabling it for 2025-11-25 clients even when they declare it.
pub(super) fn is_modern(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version().is_some_and(|v| !v.has_initialize())
}

pub(super) fn declares_tasks(cx: &RequestContext<RoleServer>) -> bool {
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
        elicitation: caps.elicitation.is_some(),
        sampling: caps.sampling.is_some(),
        roots: caps.roots.is_some(),
    }
}

fn fault_error(fault: Fault) -> ErrorData {
    ErrorData::internal_error(fault.to_string(), None)
}

/// Parses a plugin's MRTR questions. The plugin leaves out `resultType`
/// (the runner owns the envelope); rmcp's type insists on it.
fn questions_from_plugin(json: &str) -> Result<InputRequiredResult, ErrorData> {
    let mut value: Value = from_plugin("input-required result", json)?;
    stamp(&mut value, "input_required");
    serde_json::from_value(value).map_err(|e| {
        ErrorData::internal_error(
            format!("the plugin returned an invalid input-required result: {e}"),
            None,
        )
    })
}

/// Sets `resultType` on a result object that has none. Plugins leave the
/// envelope to the runner; rmcp removes `"complete"` again for legacy peers.
fn stamp(value: &mut Value, result_type: &str) {
    if let Some(object) = value.as_object_mut() {
        object
            .entry("resultType")
            .or_insert_with(|| json!(result_type));
    }
}

/// Parses a finished result the plugin produced, with `resultType` set.
fn result_from_plugin<T: serde::de::DeserializeOwned>(
    what: &str,
    json: &str,
) -> Result<T, ErrorData> {
    let mut value: Value = from_plugin(what, json)?;
    stamp(&mut value, "complete");
    serde_json::from_value(value).map_err(|e| {
        ErrorData::internal_error(format!("the plugin returned an invalid {what}: {e}"), None)
    })
}

/// A detailed task from the plugin, with its inlined `result` stamped as
/// the complete result it stands for.
pub(super) fn detailed_from_plugin(json: &str) -> Result<Value, ErrorData> {
    let mut value: Value = from_plugin("detailed task", json)?;
    if let Some(result) = value.get_mut("result") {
        stamp(result, "complete");
    }
    Ok(value)
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
        // rmcp turns this into -32002 for legacy peers and keeps -32602 for
        // 2026-07-28.
        CallError::NotFound(message) => ErrorData::resource_not_found(message, None),
        CallError::MethodNotFound(method) => ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
            None,
        ),
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

/// A request's params as the plugin receives them: without `_meta` and the
/// MRTR fields, which travel separately.
fn plugin_params(params: &impl serde::Serialize) -> String {
    let mut value = serde_json::to_value(params).unwrap_or_else(|_| json!({}));
    if let Some(object) = value.as_object_mut() {
        for key in ["_meta", "inputResponses", "requestState"] {
            object.remove(key);
        }
    }
    value.to_string()
}

fn input_responses_json(responses: &Option<rmcp::model::InputResponses>) -> Option<String> {
    responses
        .as_ref()
        .map(|r| serde_json::to_string(r).unwrap_or_default())
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
        let waiting = view.status == TaskStatus::Working;
        if waiting && !self.inner.options.inline_wait.is_zero() {
            let mut following = self
                .hub()
                .follow(self.tenant_name(), Interest::task(&view.task_id));
            view = match following
                .task_ended_within(self.inner.options.inline_wait)
                .await
            {
                Some(ended) => (*ended).clone(),
                // Still going: read it once more so the answer carries the
                // latest status message.
                None => self
                    .runtime()
                    .get_task(self.tenant(), &view.task_id)
                    .await
                    .map_err(fault_error)?
                    .map_err(task_error)?,
            };
        }
        if tasks_declared && !view.status.is_terminal() {
            let task: Task = from_plugin("task", &view.detailed)?;
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        let result: CallToolResult = result_from_plugin("task tool result", &view.tool_result)?;
        Ok(CallToolResponse::Complete(result))
    }

    /// Runs a plugin request, and for a legacy client answers the plugin's
    /// questions by asking the client directly (server-to-client requests),
    /// retrying with the answers: 2026-07-28 clients get the questions as an
    /// MRTR `InputRequiredResult` instead.
    async fn run_plugin(
        &self,
        cx: &RequestContext<RoleServer>,
        target: &Target,
        mut input_responses: Option<String>,
        mut request_state: Option<String>,
    ) -> Result<Answer, ErrorData> {
        for _ in 0..MAX_QUESTION_ROUNDS {
            let answer = self
                .run_plugin_once(cx, target, input_responses.take(), request_state.take())
                .await?;
            let Answer::Questions(questions) = answer else {
                return Ok(answer);
            };
            if is_modern(cx) {
                return Ok(Answer::Questions(questions));
            }
            let (responses, state) = self.ask_legacy_client(cx, &questions).await?;
            input_responses = Some(responses);
            request_state = state;
        }
        Err(ErrorData::internal_error(
            format!("the plugin kept asking questions after {MAX_QUESTION_ROUNDS} rounds"),
            None,
        ))
    }

    async fn run_plugin_once(
        &self,
        cx: &RequestContext<RoleServer>,
        target: &Target,
        input_responses: Option<String>,
        request_state: Option<String>,
    ) -> Result<Answer, ErrorData> {
        let client = client_context(cx);
        let notifier = Some(self.notifier(cx));
        match target {
            Target::Tool { name, arguments } => {
                let call = CallRequest {
                    name: name.clone(),
                    arguments: arguments.clone(),
                    client,
                    input_responses,
                    request_state,
                };
                let outcome = self
                    .runtime()
                    .call_tool(self.tenant(), &call, notifier)
                    .await
                    .map_err(fault_error)?
                    .map_err(call_error)?;
                Ok(match outcome {
                    CallOutcome::Complete(json) => Answer::Done(json),
                    CallOutcome::InputRequired(json) => {
                        Answer::Questions(questions_from_plugin(&json)?)
                    }
                    CallOutcome::Task(view) => {
                        let context = &self.tenant().context;
                        context.metrics.task(&context.name, "created");
                        Answer::Task(view)
                    }
                })
            }
            Target::Request { method, params } => {
                let request = McpRequest {
                    method: method.to_string(),
                    params: params.clone(),
                    client,
                    input_responses,
                    request_state,
                };
                let outcome = self
                    .runtime()
                    .serve(self.tenant(), &request, notifier)
                    .await
                    .map_err(fault_error)?
                    .map_err(call_error)?;
                Ok(match outcome {
                    RequestOutcome::Complete(json) => Answer::Done(json),
                    RequestOutcome::InputRequired(json) => {
                        Answer::Questions(questions_from_plugin(&json)?)
                    }
                })
            }
        }
    }

    /// Sends each of the plugin's questions to a legacy client as a
    /// server-to-client request and collects the answers by key.
    async fn ask_legacy_client(
        &self,
        cx: &RequestContext<RoleServer>,
        questions: &InputRequiredResult,
    ) -> Result<(String, Option<String>), ErrorData> {
        let mut answers = Map::new();
        for (key, question) in questions.input_requests.iter().flatten() {
            let request: ServerRequest = serde_json::to_value(question)
                .and_then(serde_json::from_value)
                .map_err(|e| {
                    ErrorData::internal_error(
                        format!("the plugin asked an invalid question {key}: {e}"),
                        None,
                    )
                })?;
            let reply = cx.peer.send_request(request).await.map_err(|e| {
                ErrorData::internal_error(format!("the client did not answer {key}: {e}"), None)
            })?;
            answers.insert(
                key.clone(),
                serde_json::to_value(reply).unwrap_or(Value::Null),
            );
        }
        Ok((
            Value::Object(answers).to_string(),
            questions.request_state.clone(),
        ))
    }

    async fn serve_request(
        &self,
        cx: &RequestContext<RoleServer>,
        method: &'static str,
        params: String,
        input_responses: Option<String>,
        request_state: Option<String>,
    ) -> Result<Answer, ErrorData> {
        let _in_flight = self.drain().enter();
        let target = Target::Request { method, params };
        self.run_plugin(cx, &target, input_responses, request_state)
            .await
    }

    /// A plugin-served list or read whose result is a plain MCP result.
    async fn serve_complete<T: serde::de::DeserializeOwned>(
        &self,
        cx: &RequestContext<RoleServer>,
        method: &'static str,
        params: String,
    ) -> Result<T, ErrorData> {
        match self.serve_request(cx, method, params, None, None).await? {
            Answer::Done(json) => result_from_plugin(method, &json),
            Answer::Questions(_) => Err(ErrorData::internal_error(
                format!("the plugin asked questions for {method}, which cannot carry them"),
                None,
            )),
            Answer::Task(_) => unreachable!("only tools/call makes tasks"),
        }
    }

    /// Forwards updates of `uri` to a legacy session's client.
    fn subscribe_legacy(&self, uri: String, cx: &RequestContext<RoleServer>) {
        let mut following = self.hub().follow(
            self.tenant_name(),
            Interest {
                resources: [uri.clone()].into(),
                ..Interest::default()
            },
        );
        let peer = cx.peer.clone();
        let forwarder = tokio::spawn(async move {
            while let Some(Event::ResourceUpdated(uri)) = following.next().await {
                if peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        let mut subscriptions = self
            .session
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(old) = subscriptions.insert(uri, forwarder) {
            old.abort();
        }
    }
}

/// What a plugin is asked to do.
enum Target {
    Tool {
        name: String,
        arguments: String,
    },
    Request {
        method: &'static str,
        params: String,
    },
}

/// How a plugin request ended.
enum Answer {
    /// The result, as JSON.
    Done(String),
    /// MRTR questions for a 2026-07-28 client.
    Questions(InputRequiredResult),
    /// A task (tools only).
    Task(TaskView),
}

impl ServerHandler for Settle {
    fn get_info(&self) -> ServerConfig {
        let PluginInfo {
            capabilities: served,
            instructions,
        } = self.plugin_info();
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        // The plugin says what else it serves; the runner adds what it runs.
        if let Some(resources) = served.get("resources") {
            capabilities.resources = serde_json::from_value(resources.clone()).ok();
        }
        if let Some(prompts) = served.get("prompts") {
            capabilities.prompts = serde_json::from_value(prompts.clone()).ok();
        }
        if let Some(completions) = served.get("completions") {
            capabilities.completions = serde_json::from_value(completions.clone()).ok();
        }
        capabilities.logging = Some(Default::default());
        let config = ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("settle", env!("CARGO_PKG_VERSION")));
        match instructions {
            Some(instructions) => config.with_instructions(instructions),
            None => config,
        }
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
            .runtime()
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
        let _in_flight = self.drain().enter();
        let tasks_declared = declares_tasks(&cx);
        let target = Target::Tool {
            name: request.name.to_string(),
            arguments: Value::Object(request.arguments.clone().unwrap_or_default()).to_string(),
        };
        let answer = self
            .run_plugin(
                &cx,
                &target,
                input_responses_json(&request.input_responses),
                request.request_state.clone(),
            )
            .await?;
        match answer {
            Answer::Done(json) => Ok(CallToolResponse::Complete(result_from_plugin(
                "tool result",
                &json,
            )?)),
            Answer::Questions(questions) => Ok(CallToolResponse::InputRequired(questions)),
            Answer::Task(view) => self.answer_with_task(view, tasks_declared).await,
        }
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.serve_complete(&cx, "resources/list", plugin_params(&request))
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.serve_complete(&cx, "resources/templates/list", plugin_params(&request))
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let answer = self
            .serve_request(
                &cx,
                "resources/read",
                plugin_params(&request),
                input_responses_json(&request.input_responses),
                request.request_state.clone(),
            )
            .await
            .map_err(|mut e| {
                // Name the missing resource, as SEP-2164 asks.
                if e.code == ErrorCode::RESOURCE_NOT_FOUND || e.code == ErrorCode::INVALID_PARAMS {
                    e.data.get_or_insert_with(|| json!({ "uri": request.uri }));
                }
                e
            })?;
        match answer {
            Answer::Done(json) => Ok(ReadResourceResponse::Complete(result_from_plugin::<
                ReadResourceResult,
            >(
                "resource", &json
            )?)),
            Answer::Questions(questions) => Ok(ReadResourceResponse::InputRequired(questions)),
            Answer::Task(_) => unreachable!("only tools/call makes tasks"),
        }
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.serve_complete(&cx, "prompts/list", plugin_params(&request))
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let answer = self
            .serve_request(
                &cx,
                "prompts/get",
                plugin_params(&request),
                input_responses_json(&request.input_responses),
                request.request_state.clone(),
            )
            .await?;
        match answer {
            Answer::Done(json) => Ok(GetPromptResponse::Complete(result_from_plugin::<
                GetPromptResult,
            >("prompt", &json)?)),
            Answer::Questions(questions) => Ok(GetPromptResponse::InputRequired(questions)),
            Answer::Task(_) => unreachable!("only tools/call makes tasks"),
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.serve_complete(&cx, "completion/complete", plugin_params(&request))
            .await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if is_modern(&cx) {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "logging/setLevel was removed in 2026-07-28; send io.modelcontextprotocol/logLevel in _meta",
                None,
            ));
        }
        *self
            .session
            .log_level
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(request.level);
        Ok(())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let subscribable = self.plugin_capabilities()["resources"]["subscribe"] == json!(true);
        if !subscribable {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "this server's resources cannot be subscribed to",
                None,
            ));
        }
        self.subscribe_legacy(request.uri, &cx);
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut subscriptions = self
            .session
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(forwarder) = subscriptions.remove(&request.uri) {
            forwarder.abort();
        }
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let _in_flight = self.drain().enter();
        require_task_client(&cx)?;
        let view = self
            .runtime()
            .get_task(self.tenant(), &request.task_id)
            .await
            .map_err(fault_error)?
            .map_err(task_error)?;
        let detailed: DetailedTask = serde_json::from_value(detailed_from_plugin(&view.detailed)?)
            .map_err(|e| {
                ErrorData::internal_error(
                    format!("the plugin returned an invalid detailed task: {e}"),
                    None,
                )
            })?;
        Ok(GetTaskResult::new(detailed))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _in_flight = self.drain().enter();
        require_task_client(&cx)?;
        let responses = serde_json::to_string(&request.input_responses)
            .map_err(|e| ErrorData::invalid_params(format!("inputResponses: {e}"), None))?;
        self.runtime()
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
        let _in_flight = self.drain().enter();
        require_task_client(&cx)?;
        self.runtime()
            .cancel_task(self.tenant(), &request.task_id)
            .await
            .map_err(fault_error)?
            .map_err(task_error)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        cx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if request.method == super::listen::LISTEN_ALIAS {
            return super::listen::listen(self, request.params, cx).await;
        }
        // rmcp routes a known method here when its params do not parse;
        // that is a malformed request (-32602), not an unknown method.
        const KNOWN: [(&str, &str); 10] = [
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
            (
                "resources/read",
                "resources/read needs params {uri: string}",
            ),
            (
                "prompts/get",
                "prompts/get needs params {name: string, arguments?: object}",
            ),
            (
                "completion/complete",
                "completion/complete needs params {ref, argument: {name, value}}",
            ),
            (
                "logging/setLevel",
                "logging/setLevel needs params {level: string}",
            ),
        ];
        let method = request.method.as_str();
        // Methods 2026-07-28 removed are unknown there, whatever their params.
        const REMOVED: [&str; 5] = [
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
        ];
        if is_modern(&cx) && REMOVED.contains(&method) {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("Method not found: {method} is not part of protocol 2026-07-28"),
                None,
            ));
        }
        if let Some((_, usage)) = KNOWN.iter().find(|(m, _)| *m == method) {
            return Err(ErrorData::invalid_params(
                format!("Invalid params for {method}: {usage}"),
                None,
            ));
        }
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
            None,
        ))
    }
}
