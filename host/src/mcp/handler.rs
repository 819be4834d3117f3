//! The MCP handler: rmcp calls it, and it hands each request to the
//! tenant's plugin through [`Dispatch`].
//!
//! This file is only the `ServerHandler`: which request goes where. The
//! decisions live beside it: [`super::era`] (what each protocol era
//! allows), [`super::dispatch`] (calling the plugin, tasks, questions),
//! [`super::convert`] (plugin JSON ↔ rmcp types and error codes),
//! [`super::legacy`] (session state of `initialize` clients) and
//! [`super::listen`] (`subscriptions/listen`).

// MCP logging is deprecated (SEP-2577) but part of the legacy era settle
// serves, so rmcp's logging types are used on purpose.
#![allow(deprecated)]

use super::convert::{
    fault_error, input_responses_json, plugin_params, resources_subscribable, result_from_plugin,
    task_error, to_mcp_tool,
};
use super::dispatch::{Answer, Dispatch, ServeOptions};
use super::era::Caller;
use super::legacy::Session;
use super::notify::Notifier;
use super::{era, listen};
use crate::capabilities::runner::RequestNotifier;
use crate::drain::Drain;
use crate::runtime::Runtime;
use crate::tenant::Tenant;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CustomRequest, CustomResult, ErrorCode, ErrorData, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, GetTaskParams, GetTaskResult, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool,
    UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::json;
use std::borrow::Cow;
use std::sync::Arc;

/// One tenant's MCP server. rmcp asks for a handler per stateless request
/// and per legacy session: [`Settle::for_session`] makes one, sharing
/// everything but the session's own state.
#[derive(Clone)]
pub struct Settle {
    dispatch: Arc<Dispatch>,
    session: Arc<Session>,
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
            dispatch: Arc::new(Dispatch::new(runtime, tenant, options, drain)),
            session: Arc::default(),
        }
    }

    /// The same server with fresh session state.
    pub fn for_session(&self) -> Settle {
        Settle {
            dispatch: self.dispatch.clone(),
            session: Arc::default(),
        }
    }

    /// The calls this server has in flight.
    pub fn drain(&self) -> &Drain {
        self.dispatch.drain()
    }

    /// The tenant this server serves.
    pub fn tenant_name(&self) -> &str {
        self.dispatch.tenant().name()
    }

    /// The file of the plugin's page at `path` (WIT `ui-asset`), for
    /// [`super::ui`].
    pub async fn ui_asset(
        &self,
        path: &str,
    ) -> Result<Option<crate::bindings::settle::plugin::types::Asset>, crate::runtime::Fault> {
        self.dispatch
            .runtime()
            .ui_asset(self.dispatch.tenant(), path)
            .await
    }

    /// Where the plugin's progress and log messages for this request go:
    /// log messages at the level the request asks for (2026-07-28) or the
    /// session chose (legacy).
    fn notifier(&self, cx: &RequestContext<RoleServer>) -> Arc<dyn RequestNotifier> {
        let min_level = if era::is_modern(cx) {
            cx.meta.log_level()
        } else {
            Some(self.session.log_level())
        };
        Arc::new(Notifier {
            peer: cx.peer.clone(),
            progress_token: cx.meta.get_progress_token(),
            min_level,
        })
    }

    /// A `tools/call` served without rmcp ([`super::direct`]): the request
    /// asked for no progress and no log messages, so nothing is sent
    /// while it runs.
    pub(super) async fn call_tool_directly(
        &self,
        caller: &Caller,
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, ErrorData> {
        self.dispatch.call_tool(caller, request, None).await
    }

    /// A task's current state, for `tasks/get` however it arrived (the
    /// caller was checked for the tasks extension before).
    pub(super) async fn task(&self, task_id: &str) -> Result<GetTaskResult, ErrorData> {
        let _in_flight = self.drain().enter();
        let runtime = self.dispatch.runtime();
        let tenant = self.dispatch.tenant();
        let ended = runtime.ended_task(tenant, task_id).await;
        let metrics = &tenant.context.metrics;
        metrics.task_read(tenant.name(), ended.is_some());
        let detailed = match ended {
            Some(ended) => ended,
            None => {
                runtime
                    .get_task(tenant, task_id)
                    .await
                    .map_err(fault_error)?
                    .map_err(task_error)?
                    .detailed
            }
        };
        Ok(GetTaskResult::new(super::convert::detailed_task(
            &detailed,
        )?))
    }

    /// What [`super::direct`] needs to know of the plugin before it takes
    /// a request from rmcp.
    pub(super) fn dispatch(&self) -> &Dispatch {
        &self.dispatch
    }

    /// Runs a request the plugin serves whose answer may be questions.
    async fn serve(
        &self,
        cx: &RequestContext<RoleServer>,
        method: &'static str,
        params: String,
        input_responses: Option<String>,
        request_state: Option<String>,
    ) -> Result<Answer<String>, ErrorData> {
        let notifier = self.notifier(cx);
        self.dispatch
            .serve(
                &Caller::of(cx),
                method,
                params,
                input_responses,
                request_state,
                notifier,
            )
            .await
    }

    /// Runs a request the plugin serves whose answer is a plain result.
    async fn serve_complete<T: serde::de::DeserializeOwned>(
        &self,
        cx: &RequestContext<RoleServer>,
        method: &'static str,
        params: String,
    ) -> Result<T, ErrorData> {
        let notifier = self.notifier(cx);
        self.dispatch
            .serve_complete(&Caller::of(cx), method, params, notifier)
            .await
    }
}

impl ServerHandler for Settle {
    fn get_info(&self) -> ServerConfig {
        let instructions = self.dispatch.instructions();
        let config = ServerConfig::new(self.dispatch.capabilities())
            .with_server_info(Implementation::new("settle", env!("CARGO_PKG_VERSION")));
        match instructions {
            Some(instructions) => config.with_instructions(instructions),
            None => config,
        }
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&era::VERSIONS)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // Used by rmcp to check `Mcp-Param-*` headers; only the tool list
        // already read can answer synchronously.
        self.dispatch.tool(name)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .dispatch
            .runtime()
            .list_tools(self.dispatch.tenant())
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
        let notifier = self.notifier(&cx);
        self.dispatch
            .call_tool(&Caller::of(&cx), &request, Some(notifier))
            .await
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
            .serve(
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
        Ok(match answer {
            Answer::Done(json) => ReadResourceResponse::Complete(result_from_plugin::<
                ReadResourceResult,
            >("resource", &json)?),
            Answer::Questions(questions) => ReadResourceResponse::InputRequired(questions),
        })
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
            .serve(
                &cx,
                "prompts/get",
                plugin_params(&request),
                input_responses_json(&request.input_responses),
                request.request_state.clone(),
            )
            .await?;
        Ok(match answer {
            Answer::Done(json) => {
                GetPromptResponse::Complete(result_from_plugin::<GetPromptResult>("prompt", &json)?)
            }
            Answer::Questions(questions) => GetPromptResponse::InputRequired(questions),
        })
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
        if era::is_modern(&cx) {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "logging/setLevel was removed in 2026-07-28; send io.modelcontextprotocol/logLevel in _meta",
                None,
            ));
        }
        self.session.set_log_level(request.level);
        Ok(())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if !resources_subscribable(&self.dispatch.capabilities()) {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "this server's resources cannot be subscribed to",
                None,
            ));
        }
        self.session.subscribe(
            self.dispatch.hub(),
            self.tenant_name(),
            request.uri,
            cx.peer.clone(),
        );
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.session.unsubscribe(&request.uri);
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        era::require_task_client(&cx)?;
        self.task(&request.task_id).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _in_flight = self.drain().enter();
        era::require_task_client(&cx)?;
        let responses = serde_json::to_string(&request.input_responses)
            .map_err(|e| ErrorData::invalid_params(format!("inputResponses: {e}"), None))?;
        self.dispatch
            .runtime()
            .update_task(self.dispatch.tenant(), &request.task_id, &responses)
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
        era::require_task_client(&cx)?;
        self.dispatch
            .runtime()
            .cancel_task(self.dispatch.tenant(), &request.task_id)
            .await
            .map_err(fault_error)?
            .map_err(task_error)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        cx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if request.method == listen::LISTEN_ALIAS {
            let served = self.dispatch.capabilities();
            return listen::listen(
                self.dispatch.hub(),
                self.tenant_name(),
                &served,
                request.params,
                cx,
            )
            .await;
        }
        Err(era::unrouted(request.method.as_str(), era::is_modern(&cx)))
    }
}
