//! Dispatch onto the plugin: one MCP request becomes plugin calls, and
//! their outcomes become the answer.
//!
//! The decisions the plugin should not have to know about are made here:
//! how long a call that became a task waits for it inline, whether the
//! client gets a `CreateTaskResult` or the tool result standing for the
//! task, and how a legacy client is taken through a plugin's questions.

use super::convert::{
    call_error, fault_error, questions_from_plugin, result_from_plugin, server_capabilities,
    task_error, task_from_plugin, to_mcp_tool, tool_result_from_plugin,
};
use super::era::Caller;
use super::legacy;
use crate::bindings::settle::plugin::types::{
    CallOutcome, CallRequest, McpRequest, RequestOutcome, TaskStatus, TaskView,
};
use crate::capabilities::runner::RequestNotifier;
use crate::drain::Drain;
use crate::events::{Hub, Interest};
use crate::plugin::{Plugin, PluginInfo};
use crate::runtime::Runtime;
use crate::tenant::Tenant;
use arc_swap::ArcSwapOption;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CreateTaskResult, ErrorData, InputRequiredResult,
    ServerCapabilities, Tool,
};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

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

/// How a plugin request ended.
pub enum Answer<T> {
    /// Its result.
    Done(T),
    /// MRTR questions, for a 2026-07-28 client.
    Questions(InputRequiredResult),
}

/// How a `tools/call` ended on the plugin's side, once it asks nothing more.
enum ToolEnd {
    /// A `CallToolResult`, as JSON.
    Result(String),
    /// A task.
    Task(TaskView),
}

/// One tenant's plugin, as MCP requests reach it.
pub struct Dispatch {
    runtime: Arc<Runtime>,
    tenant: Arc<Tenant>,
    options: ServeOptions,
    /// Counts calls in flight, so shutdown can let them finish.
    drain: Drain,
    /// The plugin's tools and server as rmcp types, converted once per
    /// loaded plugin rather than on every request.
    converted: ArcSwapOption<Converted>,
}

/// What one loaded plugin said about itself, as rmcp types. rmcp asks for
/// the server's info and the called tool on every request; converting the
/// plugin's JSON each time showed in the profile of a `tools/call`.
struct Converted {
    /// The plugin these came from: a swap makes them stale.
    plugin: Arc<Plugin>,
    /// `None` until the plugin's tool list has been read.
    tools: Option<Vec<Tool>>,
    /// The tools whose input schema maps an argument to an `Mcp-Param-*`
    /// header (SEP-2243): their calls are left to rmcp, which checks those
    /// headers against the body.
    param_headed: Vec<String>,
    /// `None` until the plugin accepted its configuration.
    server: Option<(ServerCapabilities, Option<String>)>,
}

impl Dispatch {
    /// Dispatch onto `tenant`'s plugin, run in `runtime`.
    pub fn new(
        runtime: Arc<Runtime>,
        tenant: Arc<Tenant>,
        options: ServeOptions,
        drain: Drain,
    ) -> Dispatch {
        Dispatch {
            runtime,
            tenant,
            options,
            drain,
            converted: ArcSwapOption::empty(),
        }
    }

    /// The current plugin's tools and server as rmcp types, converted the
    /// first time they are asked for after a load, a swap, or the plugin's
    /// first answer about them.
    fn converted(&self) -> Arc<Converted> {
        let plugin = self.tenant.plugin.load_full();
        if let Some(cached) = self.converted.load_full() {
            let stale = !Arc::ptr_eq(&cached.plugin, &plugin)
                || (cached.tools.is_none() && plugin.cached_tools().is_some())
                || (cached.server.is_none() && plugin.cached_info().is_some());
            if !stale {
                return cached;
            }
        }
        let tools = plugin.cached_tools().map(|tools| {
            tools
                .iter()
                .filter_map(|tool| match to_mcp_tool(tool) {
                    Ok(tool) => Some(tool),
                    Err(e) => {
                        tracing::warn!(tenant = %self.tenant.name(), tool = %tool.name, "tool left out: {}", e.message);
                        None
                    }
                })
                .collect()
        });
        let param_headed = tools
            .as_deref()
            .unwrap_or(&[] as &[Tool])
            .iter()
            .filter(|tool| maps_headers(&tool.input_schema))
            .map(|tool| tool.name.to_string())
            .collect();
        let server = plugin.cached_info().map(|info| {
            (
                server_capabilities(&info.capabilities),
                info.instructions.clone(),
            )
        });
        let fresh = Arc::new(Converted {
            plugin,
            tools,
            param_headed,
            server,
        });
        self.converted.store(Some(fresh.clone()));
        fresh
    }

    /// A tool of the current plugin as rmcp describes it, if its tool list
    /// has been read.
    pub fn tool(&self, name: &str) -> Option<Tool> {
        self.converted()
            .tools
            .as_ref()?
            .iter()
            .find(|t| t.name == name)
            .cloned()
    }

    /// Whether rmcp must check the `Mcp-Param-*` headers of a call to
    /// `name`: its schema maps arguments to headers. Until the tool list
    /// has been read rmcp has no schema either, and checks none.
    pub fn maps_param_headers(&self, name: &str) -> bool {
        self.converted().param_headed.iter().any(|t| t == name)
    }

    /// Whether the server offers the tasks extension: without it, rmcp
    /// answers `tasks/*` as unknown methods.
    pub fn serves_tasks(&self) -> bool {
        self.converted()
            .server
            .as_ref()
            .is_some_and(|(capabilities, _)| capabilities.supports_tasks())
    }

    /// The tenant served.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Where its plugins run.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The calls in flight.
    pub fn drain(&self) -> &Drain {
        &self.drain
    }

    /// Where the tenant's change notices go.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.tenant.context.events
    }

    /// The server's instructions, as the plugin gave them when it was
    /// admitted.
    pub fn instructions(&self) -> Option<String> {
        self.converted().server.as_ref()?.1.clone()
    }

    /// The server's capabilities: the runner's and the plugin's.
    pub fn capabilities(&self) -> ServerCapabilities {
        match &self.converted().server {
            Some((capabilities, _)) => capabilities.clone(),
            None => server_capabilities(&PluginInfo::default().capabilities),
        }
    }

    /// Runs a `tools/call`.
    pub async fn call_tool(
        &self,
        caller: &Caller,
        request: &CallToolRequestParams,
        notifier: Option<Arc<dyn RequestNotifier>>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _in_flight = self.drain.enter();
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default()).to_string();
        let inputs = super::convert::input_responses_json(&request.input_responses);
        let answer = self
            .with_questions(
                caller,
                inputs,
                request.request_state.clone(),
                |inputs, state| {
                    let call = CallRequest {
                        name: name.clone(),
                        arguments: arguments.clone(),
                        client: caller.client.clone(),
                        input_responses: inputs,
                        request_state: state,
                    };
                    let notifier = notifier.clone();
                    async move {
                        let outcome = self
                            .runtime
                            .call_tool(&self.tenant, &call, notifier)
                            .await
                            .map_err(fault_error)?
                            .map_err(call_error)?;
                        Ok(match outcome {
                            CallOutcome::Complete(json) => Answer::Done(ToolEnd::Result(json)),
                            CallOutcome::InputRequired(json) => {
                                Answer::Questions(questions_from_plugin(&json)?)
                            }
                            CallOutcome::Task(view) => {
                                let context = &self.tenant.context;
                                context.metrics.task(&context.name, "created");
                                Answer::Done(ToolEnd::Task(view))
                            }
                        })
                    }
                },
            )
            .await?;
        match answer {
            Answer::Done(ToolEnd::Result(json)) => Ok(CallToolResponse::Complete(
                tool_result_from_plugin("tool result", &json)?,
            )),
            Answer::Done(ToolEnd::Task(view)) => {
                self.answer_with_task(view, caller.declares_tasks()).await
            }
            Answer::Questions(questions) => Ok(CallToolResponse::InputRequired(questions)),
        }
    }

    /// Runs a request the plugin serves other than `tools/call`; the
    /// result is the plugin's JSON.
    pub async fn serve(
        &self,
        caller: &Caller,
        method: &'static str,
        params: String,
        input_responses: Option<String>,
        request_state: Option<String>,
        notifier: Arc<dyn RequestNotifier>,
    ) -> Result<Answer<String>, ErrorData> {
        let _in_flight = self.drain.enter();
        self.with_questions(caller, input_responses, request_state, |inputs, state| {
            let request = McpRequest {
                method: method.to_string(),
                params: params.clone(),
                client: caller.client.clone(),
                input_responses: inputs,
                request_state: state,
            };
            let notifier = notifier.clone();
            async move {
                let outcome = self
                    .runtime
                    .serve(&self.tenant, &request, Some(notifier))
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
        })
        .await
    }

    /// A plugin-served list or read whose result is a plain MCP result,
    /// which cannot carry questions.
    pub async fn serve_complete<T: serde::de::DeserializeOwned>(
        &self,
        caller: &Caller,
        method: &'static str,
        params: String,
        notifier: Arc<dyn RequestNotifier>,
    ) -> Result<T, ErrorData> {
        match self
            .serve(caller, method, params, None, None, notifier)
            .await?
        {
            Answer::Done(json) => result_from_plugin(method, &json),
            Answer::Questions(_) => Err(ErrorData::internal_error(
                format!("the plugin asked questions for {method}, which cannot carry them"),
                None,
            )),
        }
    }

    /// Runs `once` (one plugin call), and while it asks a legacy client
    /// questions, asks them (server-to-client requests) and runs it again
    /// with the answers. A 2026-07-28 client gets the questions instead.
    async fn with_questions<T, F, Fut>(
        &self,
        caller: &Caller,
        mut input_responses: Option<String>,
        mut request_state: Option<String>,
        mut once: F,
    ) -> Result<Answer<T>, ErrorData>
    where
        F: FnMut(Option<String>, Option<String>) -> Fut,
        Fut: Future<Output = Result<Answer<T>, ErrorData>>,
    {
        for _ in 0..legacy::MAX_QUESTION_ROUNDS {
            let answer = once(input_responses.take(), request_state.take()).await?;
            let Answer::Questions(questions) = answer else {
                return Ok(answer);
            };
            let Some(peer) = &caller.legacy_peer else {
                return Ok(Answer::Questions(questions));
            };
            let (responses, state) = legacy::ask(peer, &questions).await?;
            input_responses = Some(responses);
            request_state = state;
        }
        Err(ErrorData::internal_error(
            format!(
                "the plugin kept asking questions after {} rounds",
                legacy::MAX_QUESTION_ROUNDS
            ),
            None,
        ))
    }

    /// Answers a call that became a task: waits briefly for it to end, then
    /// gives a task-aware client a `CreateTaskResult` and any other client
    /// the tool result that stands for the task.
    async fn answer_with_task(
        &self,
        created: TaskView,
        tasks_declared: bool,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut view = created;
        let inline_wait = self.options.inline_wait;
        if view.status == TaskStatus::Working && !inline_wait.is_zero() {
            let mut following = self
                .hub()
                .follow(self.tenant.name(), Interest::task(&view.task_id));
            view = match following.task_ended_within(inline_wait).await {
                Some(ended) => (*ended).clone(),
                // Still going: read it once more so the answer carries the
                // latest status message.
                None => self
                    .runtime
                    .get_task(&self.tenant, &view.task_id)
                    .await
                    .map_err(fault_error)?
                    .map_err(task_error)?,
            };
        }
        if tasks_declared && !view.status.is_terminal() {
            let task = task_from_plugin(&view.detailed)?;
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        Ok(CallToolResponse::Complete(tool_result_from_plugin(
            "task tool result",
            &view.tool_result,
        )?))
    }
}

/// Whether a tool's input schema annotates any property, at any depth,
/// with `x-mcp-header`. Broader than rmcp's reading (which follows only
/// `properties` chains and well-formed names), so that every call rmcp
/// would check is left to it.
fn maps_headers(schema: &serde_json::Map<String, Value>) -> bool {
    schema.iter().any(|(key, value)| {
        key == "x-mcp-header"
            || match value {
                Value::Object(inner) => maps_headers(inner),
                Value::Array(items) => items
                    .iter()
                    .any(|item| item.as_object().is_some_and(maps_headers)),
                _ => false,
            }
    })
}
