//! Plugin JSON ↔ rmcp types, and plugin errors → JSON-RPC errors. Pure
//! code: no I/O, no protocol state.
//!
//! A plugin speaks MCP's shapes as JSON (`wit/world.wit`, `types.json`);
//! everything it returns is parsed here into rmcp's types, so a plugin that
//! breaks the contract gets an internal error that says where, never a
//! malformed answer on the wire. The plugin leaves out `resultType`: the
//! runner owns the envelope.

use crate::bindings::settle::plugin::types::{CallError, TaskError, Tool as PluginTool};
use crate::runtime::Fault;
use rmcp::model::{
    CallToolResult, ClientCapabilities, DetailedTask, ErrorCode, ErrorData, InputRequiredResult,
    InputResponses, PromptsCapability, ResourcesCapability, ResultType, ServerCapabilities, Task,
    TaskPayload, Tool,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A plugin call that did not return: an internal error that says why.
pub fn fault_error(fault: Fault) -> ErrorData {
    ErrorData::internal_error(fault.to_string(), None)
}

/// Parses JSON the plugin produced into an rmcp type.
pub fn from_plugin<T: DeserializeOwned>(what: &str, json: &str) -> Result<T, ErrorData> {
    serde_json::from_str(json).map_err(|e| invalid(what, e))
}

fn invalid(what: &str, e: serde_json::Error) -> ErrorData {
    ErrorData::internal_error(format!("the plugin returned an invalid {what}: {e}"), None)
}

/// Sets `resultType` on a result object that has none. Plugins leave the
/// envelope to the runner; rmcp removes `"complete"` again for legacy peers.
fn stamp(value: &mut Value, result_type: &str) {
    if let Some(object) = value.as_object_mut() {
        stamp_object(object, result_type);
    }
}

/// [`stamp`], on an object already known to be one.
fn stamp_object(object: &mut serde_json::Map<String, Value>, result_type: &str) {
    object
        .entry("resultType")
        .or_insert_with(|| json!(result_type));
}

/// A finished result the plugin produced, with `resultType` set.
pub fn result_from_plugin<T: DeserializeOwned>(what: &str, json: &str) -> Result<T, ErrorData> {
    let mut value: Value = from_plugin(what, json)?;
    stamp(&mut value, "complete");
    serde_json::from_value(value).map_err(|e| invalid(what, e))
}

/// A tool's result from the plugin: [`result_from_plugin`] for the answer
/// every `tools/call` carries, parsed once instead of through a `Value`.
pub fn tool_result_from_plugin(what: &str, json: &str) -> Result<CallToolResult, ErrorData> {
    let mut result: CallToolResult = from_plugin(what, json)?;
    result.result_type.get_or_insert(ResultType::COMPLETE);
    Ok(result)
}

/// A plugin's MRTR questions (an `InputRequiredResult` body).
pub fn questions_from_plugin(json: &str) -> Result<InputRequiredResult, ErrorData> {
    let mut value: Value = from_plugin("input-required result", json)?;
    stamp(&mut value, "input_required");
    serde_json::from_value(value).map_err(|e| invalid("input-required result", e))
}

/// A detailed task from the plugin, with its inlined `result` stamped as
/// the complete result it stands for: what `tasks/get` and
/// `notifications/tasks` carry.
pub fn detailed_from_plugin(json: &str) -> Result<Value, ErrorData> {
    let mut value: Value = from_plugin("detailed task", json)?;
    if let Some(result) = value.get_mut("result") {
        stamp(result, "complete");
    }
    Ok(value)
}

/// The same detailed task as rmcp's type, for `tasks/get`: parsed once,
/// then its result stamped.
pub fn detailed_task(json: &str) -> Result<DetailedTask, ErrorData> {
    let mut task: DetailedTask = from_plugin("detailed task", json)?;
    if let TaskPayload::Completed { result } = &mut task.payload {
        stamp_object(result, "complete");
    }
    Ok(task)
}

/// The task of a `CreateTaskResult`.
pub fn task_from_plugin(json: &str) -> Result<Task, ErrorData> {
    from_plugin("task", json)
}

fn parse_optional(what: &str, json: &Option<String>) -> Result<Option<Value>, ErrorData> {
    json.as_deref().map(|j| from_plugin(what, j)).transpose()
}

/// The plugin's description of a tool as an MCP `Tool`.
pub fn to_mcp_tool(tool: &PluginTool) -> Result<Tool, ErrorData> {
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

/// A `tasks/*` failure as its JSON-RPC error.
pub fn task_error(error: TaskError) -> ErrorData {
    match error {
        TaskError::NotFound(message) => {
            ErrorData::invalid_params(format!("Failed to retrieve task: {message}"), None)
        }
        TaskError::Internal(message) => ErrorData::internal_error(message, None),
    }
}

/// A request's failure as its JSON-RPC error (see `call-error` in the WIT).
pub fn call_error(error: CallError) -> ErrorData {
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

/// A request's params as the plugin receives them: without `_meta` and the
/// MRTR fields, which travel separately.
pub fn plugin_params(params: &impl serde::Serialize) -> String {
    let mut value = serde_json::to_value(params).unwrap_or_else(|_| json!({}));
    if let Some(object) = value.as_object_mut() {
        for key in ["_meta", "inputResponses", "requestState"] {
            object.remove(key);
        }
    }
    value.to_string()
}

/// A client's MRTR answers as the plugin receives them.
pub fn input_responses_json(responses: &Option<InputResponses>) -> Option<String> {
    responses
        .as_ref()
        .map(|r| serde_json::to_string(r).unwrap_or_default())
}

/// The server's capabilities: what the runner itself runs (tools and their
/// list changes, tasks, logging) and what the plugin says it serves
/// (`resources`, `prompts`, `completions`). A part of the plugin's JSON
/// that rmcp cannot read is left out, as if the plugin had not offered it.
pub fn server_capabilities(served: &Value) -> ServerCapabilities {
    let mut capabilities = ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .enable_tasks()
        .build();
    let part = |key: &str| served.get(key).cloned();
    capabilities.resources = part("resources").and_then(|v| serde_json::from_value(v).ok());
    capabilities.prompts = part("prompts").and_then(|v| serde_json::from_value(v).ok());
    capabilities.completions = part("completions").and_then(|v| serde_json::from_value(v).ok());
    capabilities.logging = Some(Default::default());
    capabilities
}

/// Whether clients may subscribe to the plugin's resources.
pub fn resources_subscribable(capabilities: &ServerCapabilities) -> bool {
    capabilities
        .resources
        .as_ref()
        .and_then(|r: &ResourcesCapability| r.subscribe)
        == Some(true)
}

/// Whether the plugin announces changes of its resource list.
pub fn resources_list_changes(capabilities: &ServerCapabilities) -> bool {
    capabilities
        .resources
        .as_ref()
        .and_then(|r: &ResourcesCapability| r.list_changed)
        == Some(true)
}

/// Whether the plugin announces changes of its prompt list.
pub fn prompts_list_changes(capabilities: &ServerCapabilities) -> bool {
    capabilities
        .prompts
        .as_ref()
        .and_then(|p: &PromptsCapability| p.list_changed)
        == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ReadResourceResult;

    fn tool(input_schema: &str) -> PluginTool {
        PluginTool {
            name: "t".into(),
            title: Some("T".into()),
            description: "does t".into(),
            input_schema: input_schema.into(),
            output_schema: None,
            annotations: Some(r#"{"readOnlyHint": true}"#.into()),
        }
    }

    #[test]
    fn a_tool_becomes_an_mcp_tool_and_a_broken_schema_says_where() {
        let mcp = to_mcp_tool(&tool(r#"{"type": "object"}"#)).unwrap();
        assert_eq!(mcp.name, "t");
        assert_eq!(mcp.title.as_deref(), Some("T"));
        assert_eq!(mcp.annotations.and_then(|a| a.read_only_hint), Some(true));
        let err = to_mcp_tool(&tool("{not json")).unwrap_err();
        assert_eq!(err.code, ErrorCode::INTERNAL_ERROR);
        assert!(
            err.message.contains("invalid input schema"),
            "{}",
            err.message
        );
    }

    #[test]
    fn results_get_their_envelope_and_bad_ones_an_internal_error() {
        let result: CallToolResult =
            result_from_plugin("tool result", r#"{"content": [], "isError": true}"#).unwrap();
        assert_eq!(result.is_error, Some(true));
        let err =
            result_from_plugin::<ReadResourceResult>("resource", r#"{"contents": 3}"#).unwrap_err();
        assert_eq!(err.code, ErrorCode::INTERNAL_ERROR);
        assert!(err.message.contains("invalid resource"), "{}", err.message);
    }

    /// `outcome` is the internal error that names the plugin's invalid `what`.
    fn refused_as_invalid<T: std::fmt::Debug>(
        outcome: Result<T, ErrorData>,
        what: &str,
        json: &str,
    ) {
        let err = outcome.unwrap_err();
        assert_eq!(err.code, ErrorCode::INTERNAL_ERROR, "{json}");
        let expected = format!("the plugin returned an invalid {what}");
        assert!(
            err.message.starts_with(&expected),
            "{json}: {}",
            err.message
        );
    }

    #[test]
    fn a_tool_result_parsed_once_is_the_one_parsed_through_a_value() {
        for json in [
            r#"{"content": [{"type": "text", "text": "21"}], "structuredContent": {"t": 21}, "isError": false}"#,
            r#"{"content": [], "isError": true}"#,
            r#"{"resultType": "complete", "structuredContent": null}"#,
        ] {
            let once = tool_result_from_plugin("tool result", json).unwrap();
            let through_value: CallToolResult = result_from_plugin("tool result", json).unwrap();
            assert_eq!(once, through_value, "{json}");
            assert_eq!(once.result_type, Some(ResultType::COMPLETE));
        }
        for json in [
            r#"{"resultType": "input_required", "content": []}"#,
            "{}",
            "[]",
        ] {
            // Refused both ways (the parse from text says where it stopped).
            assert!(result_from_plugin::<CallToolResult>("tool result", json).is_err());
            refused_as_invalid(
                tool_result_from_plugin("tool result", json),
                "tool result",
                json,
            );
        }
    }

    #[test]
    fn a_detailed_task_parsed_once_is_the_one_parsed_through_a_value() {
        for json in [
            r#"{"taskId": "a", "status": "completed", "createdAt": "2026-12-03T07:00:00Z", "lastUpdatedAt": "2026-12-03T07:00:01Z", "ttlMs": 60000, "result": {"content": [], "isError": false}}"#,
            r#"{"taskId": "a", "status": "completed", "createdAt": "2026-12-03T07:00:00Z", "lastUpdatedAt": "2026-12-03T07:00:01Z", "ttlMs": 60000, "result": {"resultType": "complete", "content": []}}"#,
            r#"{"taskId": "b", "status": "working", "statusMessage": "waiting", "createdAt": "2026-12-03T07:00:00Z", "lastUpdatedAt": "2026-12-03T07:00:01Z", "ttlMs": 60000, "pollIntervalMs": 1000}"#,
            r#"{"taskId": "c", "status": "failed", "createdAt": "2026-12-03T07:00:00Z", "lastUpdatedAt": "2026-12-03T07:00:01Z", "ttlMs": null, "error": {"code": -32001, "message": "not applied"}}"#,
        ] {
            let once = detailed_task(json).unwrap();
            let through_value: DetailedTask =
                serde_json::from_value(detailed_from_plugin(json).unwrap()).unwrap();
            assert_eq!(once, through_value, "{json}");
        }
        for json in [
            r#"{"taskId": "d", "status": "completed", "createdAt": "2026-12-03T07:00:00Z", "lastUpdatedAt": "2026-12-03T07:00:01Z", "ttlMs": 60000}"#,
            r#"{"taskId": "e"}"#,
            "[]",
        ] {
            refused_as_invalid(detailed_task(json), "detailed task", json);
        }
    }

    #[test]
    fn a_plugin_result_type_is_kept_and_a_missing_one_stamped() {
        let mut given = json!({"resultType": "input_required"});
        stamp(&mut given, "complete");
        assert_eq!(given["resultType"], "input_required");
        let detailed =
            detailed_from_plugin(r#"{"taskId": "a", "result": {"content": []}}"#).unwrap();
        assert_eq!(detailed["result"]["resultType"], "complete");
        assert!(
            detailed.get("resultType").is_none(),
            "the task itself is not a result"
        );
    }

    #[test]
    fn questions_parse_with_their_state() {
        let questions = questions_from_plugin(
            r#"{"inputRequests": {"q": {"method": "roots/list"}}, "requestState": "s"}"#,
        )
        .unwrap();
        assert_eq!(questions.request_state.as_deref(), Some("s"));
        assert!(questions_from_plugin("[]").is_err());
    }

    #[test]
    fn each_plugin_error_has_its_json_rpc_code() {
        let code = |e: CallError| call_error(e).code;
        assert_eq!(
            code(CallError::UnknownTool("x".into())),
            ErrorCode::INVALID_PARAMS
        );
        assert_eq!(
            code(CallError::InvalidParams("x".into())),
            ErrorCode::INVALID_PARAMS
        );
        assert_eq!(
            code(CallError::MethodNotFound("x".into())),
            ErrorCode::METHOD_NOT_FOUND
        );
        assert_eq!(
            code(CallError::Internal("x".into())),
            ErrorCode::INTERNAL_ERROR
        );
        assert_eq!(
            code(CallError::NotFound("x".into())),
            ErrorCode::RESOURCE_NOT_FOUND
        );
        let missing = call_error(CallError::MissingCapability(r#"{"sampling": {}}"#.into()));
        assert_eq!(missing.code, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY);
        let bad = call_error(CallError::MissingCapability("nope".into()));
        assert_eq!(bad.code, ErrorCode::INTERNAL_ERROR);
        assert_eq!(
            task_error(TaskError::NotFound("gone".into())).code,
            ErrorCode::INVALID_PARAMS
        );
        assert_eq!(
            task_error(TaskError::Internal("x".into())).code,
            ErrorCode::INTERNAL_ERROR
        );
        assert_eq!(
            fault_error(Fault::Trap("boom".into())).code,
            ErrorCode::INTERNAL_ERROR
        );
    }

    #[test]
    fn params_reach_the_plugin_without_meta_and_mrtr_fields() {
        let params = json!({"uri": "x", "_meta": {}, "inputResponses": {}, "requestState": "s"});
        assert_eq!(plugin_params(&params), r#"{"uri":"x"}"#);
    }

    #[test]
    fn capabilities_combine_the_runners_and_the_plugins() {
        let caps = server_capabilities(&json!({
            "resources": {"subscribe": true},
            "prompts": {"listChanged": true},
            "completions": {},
        }));
        assert!(caps.tools.is_some() && caps.supports_tasks() && caps.logging.is_some());
        assert!(resources_subscribable(&caps));
        assert!(!resources_list_changes(&caps));
        assert!(prompts_list_changes(&caps));
        assert!(caps.completions.is_some());
        let none = server_capabilities(&json!({"resources": "not an object"}));
        assert!(none.resources.is_none() && none.prompts.is_none());
        assert!(!resources_subscribable(&none));
    }
}
