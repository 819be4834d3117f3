//! Stateless 2026-07-28 `tools/call` and `tasks/get`, served without rmcp's
//! per-request service.
//!
//! rmcp serves a stateless request by parsing the body a second time,
//! serialising it again to check its headers, building a service with its
//! own peer and channels, and spawning two tasks whose answers come back
//! through those channels: about half of what a `get_device_state` call
//! cost at concurrency 1 (docs/performance.md). The two requests agents
//! send most are served here instead, on the connection's own task.
//!
//! Only a request that rmcp would serve as it stands is taken:
//! [`recognise`] returns `None` for anything else, and rmcp serves it,
//! errors included. So this path never answers what rmcp would not; it only
//! answers sooner. Left to rmcp: sessions, browsers (`Origin`), requests
//! whose `_meta` asks for progress or log messages (their answer may become
//! an event stream), any `Accept` with parameters, a missing, repeated or
//! mismatching `MCP-Protocol-Version`, `Mcp-Method` or `Mcp-Name`, any
//! `Mcp-Param-*` header or a tool whose schema maps one, a `_meta` without
//! the client's capabilities and identity, params rmcp could not parse, and
//! `tasks/get` from a client or to a server without the tasks extension.
//! One difference cannot be seen from the parsed message: a body with a
//! key given twice, which the frame check's parser resolves to the last
//! value and rmcp's typed parse may refuse.

use super::dispatch::Dispatch;
use super::era::Caller;
use super::handler::Settle;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ErrorCode, ErrorData,
    GetTaskParams, RequestId, ServerJsonRpcMessage, ServerResult,
};
use serde::Deserialize;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The one protocol version served here.
const VERSION: &str = "2026-07-28";
/// `_meta` keys that may make the answer an event stream.
const NOTIFYING_META: [&str; 2] = ["progressToken", "io.modelcontextprotocol/logLevel"];
/// rmcp's prefix for a Base64-encoded header value: such a value is left
/// to rmcp to decode.
const BASE64_PREFIX: &str = "=?base64?";

/// A request this path serves: what to run, and for whom.
pub struct Direct {
    id: RequestId,
    caller: Caller,
    call: Call,
}

/// The two requests served here.
enum Call {
    Tool(CallToolRequestParams),
    Task(GetTaskParams),
}

/// What this path must know of the server's plugin before it takes a
/// request from rmcp.
pub trait Offer {
    /// A call to `tool` carries `Mcp-Param-*` headers that rmcp checks.
    fn maps_param_headers(&self, tool: &str) -> bool;
    /// The server offers the tasks extension.
    fn serves_tasks(&self) -> bool;
}

impl Offer for Dispatch {
    fn maps_param_headers(&self, tool: &str) -> bool {
        Dispatch::maps_param_headers(self, tool)
    }

    fn serves_tasks(&self) -> bool {
        Dispatch::serves_tasks(self)
    }
}

/// The `Host` values rmcp accepts, parsed once.
#[derive(Clone, Debug)]
pub struct Hosts(Vec<(String, Option<u16>)>);

impl Hosts {
    /// The allow-list rmcp is configured with, read as rmcp reads it.
    pub fn new(allowed: &[String]) -> Hosts {
        Hosts(
            allowed
                .iter()
                .map(|entry| entry.trim())
                .filter(|entry| !entry.is_empty())
                .map(|entry| match axum::http::uri::Authority::try_from(entry) {
                    Ok(authority) => (normalize(authority.host()), authority.port_u16()),
                    Err(_) => (normalize(entry), None),
                })
                .collect(),
        )
    }

    /// The request's `Host` is on the list (an empty list allows any).
    fn allow(&self, headers: &HeaderMap) -> bool {
        let Some(authority) = headers
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .and_then(|host| axum::http::uri::Authority::try_from(host).ok())
        else {
            return false;
        };
        let host = authority.host().trim_matches('[').trim_matches(']');
        let port = authority.port_u16();
        // The list is lower case already ([`normalize`]).
        self.0.is_empty()
            || self.0.iter().any(|(allowed, allowed_port)| {
                allowed.eq_ignore_ascii_case(host) && allowed_port.is_none_or(|p| port == Some(p))
            })
    }
}

/// A host as rmcp compares it: no IPv6 brackets, lower case.
fn normalize(host: &str) -> String {
    host.trim_matches('[')
        .trim_matches(']')
        .to_ascii_lowercase()
}

/// The request, if this path serves it; `None` leaves it to rmcp.
pub fn recognise(
    hosts: &Hosts,
    offer: &impl Offer,
    parts: &Parts,
    message: &Value,
) -> Option<Direct> {
    let headers = &parts.headers;
    if headers.contains_key("mcp-session-id")
        || headers.contains_key(header::ORIGIN)
        || !hosts.allow(headers)
        || !accepts_json_and_events(headers)
        || !sends_json(headers)
        || sole(headers, "mcp-protocol-version")? != VERSION
        || headers
            .keys()
            .any(|name| name.as_str().starts_with("mcp-param-"))
    {
        return None;
    }
    let object = message.as_object()?;
    // A request with a result or an error too is not one rmcp parses.
    if object.contains_key("result") || object.contains_key("error") {
        return None;
    }
    let method = object.get("method")?.as_str()?;
    let params = object.get("params")?;
    let meta = params.get("_meta")?.as_object()?;
    if NOTIFYING_META.iter().any(|key| meta.contains_key(*key)) {
        return None;
    }
    let name_field = match method {
        "tools/call" => "name",
        "tasks/get" => "taskId",
        _ => return None,
    };
    if sole(headers, "mcp-method")? != method {
        return None;
    }
    let name = params.get(name_field)?.as_str()?;
    let name_header = sole(headers, "mcp-name")?;
    if name_header.starts_with(BASE64_PREFIX) || name_header != name {
        return None;
    }
    let id = RequestId::deserialize(object.get("id")?).ok()?;
    // The params are read once; their `_meta` becomes the caller.
    let (call, meta) = match method {
        "tools/call" => {
            if offer.maps_param_headers(name) {
                return None;
            }
            let mut params = CallToolRequestParams::deserialize(params).ok()?;
            let meta = params.meta.take()?;
            (Call::Tool(params), meta)
        }
        _ => {
            if !offer.serves_tasks() {
                return None;
            }
            let mut params = GetTaskParams::deserialize(params).ok()?;
            let meta = params.meta.take()?;
            (Call::Task(params), meta)
        }
    };
    let caller = Caller::stateless(&meta)?;
    if matches!(call, Call::Task(_)) && !caller.declares_tasks() {
        return None;
    }
    Some(Direct { id, caller, call })
}

/// Serves a recognised request: the JSON answer rmcp would have given.
pub async fn answer(settle: &Settle, request: Direct) -> Response {
    let Direct { id, caller, call } = request;
    let outcome = match call {
        Call::Tool(params) => {
            let settle = settle.clone();
            Finish::new(async move {
                let response = settle.call_tool_directly(&caller, &params).await?;
                // rmcp's own guard: a task only for a client that declared
                // the extension.
                if matches!(response, CallToolResponse::Task(_)) && !caller.declares_tasks() {
                    return Err(ErrorData::missing_required_client_capability(
                        ClientCapabilities::builder().enable_tasks().build(),
                    ));
                }
                Ok(ServerResult::from(response))
            })
            .await
        }
        Call::Task(params) => settle
            .task(&params.task_id)
            .await
            .map(ServerResult::GetTaskResult),
    };
    let (message, status) = match outcome {
        Ok(result) => (ServerJsonRpcMessage::response(result, id), StatusCode::OK),
        Err(error) => {
            let (error, status) = as_rmcp_answers(error);
            (ServerJsonRpcMessage::error(error, Some(id)), status)
        }
    };
    crate::timeline!("MCP answer built");
    match serde_json::to_vec(&message) {
        Ok(body) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the answer could not be serialised: {e}"),
        )
            .into_response(),
    }
}

/// A handler's error as rmcp sends it to a 2026-07-28 client: a missing
/// resource becomes invalid params (rmcp's `handle_request`), with the
/// HTTP status of its code.
fn as_rmcp_answers(mut error: ErrorData) -> (ErrorData, StatusCode) {
    if error.code == ErrorCode::RESOURCE_NOT_FOUND {
        error.code = ErrorCode::INVALID_PARAMS;
    }
    let status = status_of(error.code);
    (error, status)
}

/// The HTTP status of a 2026-07-28 error answer, as rmcp maps it for a
/// request whose `_meta` was well formed (which [`recognise`] checked).
fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// The header's one value; `None` when absent, repeated or not text.
fn sole<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// `Accept` names both `application/json` and `text/event-stream`, and no
/// entry has parameters (a weight of zero would exclude one; rmcp reads
/// those, this path does not).
fn accepts_json_and_events(headers: &HeaderMap) -> bool {
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',').map(str::trim) {
            if entry.contains(';') || entry.contains('"') {
                return false;
            }
            json |= entry.eq_ignore_ascii_case("application/json");
            events |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && events
}

/// `Content-Type` is `application/json`, parameters aside, as rmcp reads it.
fn sends_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// A future that runs to its end even when its caller stops waiting:
/// dropped unfinished (the client went away), it is spawned to finish on a
/// task of its own. A `tools/call` may have sent a command by then, and its
/// task must still be recorded, as it was when rmcp ran the handler on a
/// task of its own.
struct Finish<F: Future + Send + 'static>
where
    F::Output: Send,
{
    future: Option<Pin<Box<F>>>,
}

impl<F: Future + Send + 'static> Finish<F>
where
    F::Output: Send,
{
    fn new(future: F) -> Finish<F> {
        Finish {
            future: Some(Box::pin(future)),
        }
    }
}

impl<F: Future + Send + 'static> Future for Finish<F>
where
    F::Output: Send,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(future) = self.future.as_mut() else {
            panic!("Finish polled after it completed");
        };
        let output = std::task::ready!(future.as_mut().poll(cx));
        self.future = None;
        Poll::Ready(output)
    }
}

impl<F: Future + Send + 'static> Drop for Finish<F>
where
    F::Output: Send,
{
    fn drop(&mut self) {
        if let Some(future) = self.future.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(future);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;
    use serde_json::json;

    /// A plugin whose `set_mode` maps a header, and which may offer tasks.
    struct Plugin {
        tasks: bool,
    }

    impl Offer for Plugin {
        fn maps_param_headers(&self, tool: &str) -> bool {
            tool == "set_mode"
        }

        fn serves_tasks(&self) -> bool {
            self.tasks
        }
    }

    const PLUGIN: Plugin = Plugin { tasks: true };

    fn hosts() -> Hosts {
        Hosts::new(&[
            "localhost".into(),
            "127.0.0.1".into(),
            "example.org:8443".into(),
        ])
    }

    fn meta() -> Value {
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "agent", "version": "1.2"},
        })
    }

    fn tool_call() -> Value {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "get_device_state", "arguments": {"device": "hall"}, "_meta": meta(),
        }})
    }

    /// The headers a modern client sends with `message`.
    fn headers_for(message: &Value) -> Vec<(&'static str, String)> {
        let method = message["method"].as_str().unwrap().to_string();
        let name = message["params"]["name"]
            .as_str()
            .or(message["params"]["taskId"].as_str())
            .unwrap()
            .to_string();
        vec![
            ("host", "127.0.0.1:8080".into()),
            ("accept", "application/json, text/event-stream".into()),
            ("content-type", "application/json".into()),
            ("mcp-protocol-version", "2026-07-28".into()),
            ("mcp-method", method),
            ("mcp-name", name),
        ]
    }

    fn parts(headers: &[(&str, String)]) -> Parts {
        let mut request = Request::post("/mcp");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn recognised(message: &Value, headers: &[(&str, String)]) -> Option<Direct> {
        recognise(&hosts(), &PLUGIN, &parts(headers), message)
    }

    /// `message` with its usual headers, one of them changed (`None`
    /// removes it).
    fn with_header(message: &Value, name: &'static str, value: Option<&str>) -> Option<Direct> {
        let mut headers = headers_for(message);
        headers.retain(|(n, _)| *n != name);
        if let Some(value) = value {
            headers.push((name, value.to_string()));
        }
        recognised(message, &headers)
    }

    #[test]
    fn a_plain_modern_tool_call_is_served_directly_with_its_caller() {
        let message = tool_call();
        let direct = recognised(&message, &headers_for(&message)).expect("served directly");
        assert_eq!(direct.id, RequestId::Number(7));
        let Call::Tool(params) = &direct.call else {
            panic!("a tool call");
        };
        assert_eq!(params.name, "get_device_state");
        assert!(params.meta.is_none(), "the meta became the caller");
        assert_eq!(direct.caller.client.protocol_version, "2026-07-28");
        assert_eq!(direct.caller.client.client_name.as_deref(), Some("agent"));
        assert!(direct.caller.declares_tasks());
        assert!(direct.caller.legacy_peer.is_none(), "a 2026-07-28 caller");
    }

    #[test]
    fn tasks_get_is_served_directly_for_a_task_client_of_a_task_server() {
        let message = json!({"jsonrpc": "2.0", "id": "a", "method": "tasks/get",
            "params": {"taskId": "t-1", "_meta": meta()}});
        let headers = headers_for(&message);
        let direct = recognised(&message, &headers).expect("served directly");
        assert!(matches!(&direct.call, Call::Task(p) if p.task_id == "t-1"));
        let no_tasks = Plugin { tasks: false };
        assert!(recognise(&hosts(), &no_tasks, &parts(&headers), &message).is_none());
        let mut plain = message.clone();
        plain["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
        assert!(recognised(&plain, &headers).is_none());
    }

    #[test]
    fn headers_rmcp_would_question_leave_the_request_to_rmcp() {
        let message = tool_call();
        let cases: [(&str, Option<&str>); 16] = [
            ("mcp-session-id", Some("s-1")),
            ("origin", Some("http://localhost:3000")),
            ("host", Some("evil.example:8080")),
            ("host", Some("example.org:8080")),
            ("host", None),
            ("accept", Some("application/json")),
            ("accept", Some("application/json, text/event-stream;q=0")),
            ("accept", None),
            ("content-type", Some("text/plain")),
            ("content-type", None),
            ("mcp-protocol-version", Some("2025-11-25")),
            ("mcp-protocol-version", None),
            ("mcp-method", Some("tools/list")),
            ("mcp-method", None),
            ("mcp-name", Some("=?base64?Z2V0X2RldmljZV9zdGF0ZQ==?=")),
            ("mcp-name", Some("set_mode")),
        ];
        for (name, value) in cases {
            assert!(
                with_header(&message, name, value).is_none(),
                "{name}: {value:?} was served directly"
            );
        }
        assert!(with_header(&message, "mcp-param-device", Some("hall")).is_none());
        assert!(with_header(&message, "host", Some("example.org:8443")).is_some());
        assert!(with_header(&message, "host", Some("LOCALHOST")).is_some());
        assert!(
            with_header(
                &message,
                "content-type",
                Some("application/json; charset=utf-8")
            )
            .is_some()
        );
    }

    #[test]
    fn a_repeated_header_leaves_the_request_to_rmcp() {
        let message = tool_call();
        for name in ["mcp-protocol-version", "mcp-method", "mcp-name"] {
            let mut headers = headers_for(&message);
            let again = headers.iter().find(|(n, _)| *n == name).unwrap().clone();
            headers.push(again);
            assert!(recognised(&message, &headers).is_none(), "{name} twice");
        }
    }

    #[test]
    fn bodies_rmcp_would_question_leave_the_request_to_rmcp() {
        let headers = headers_for(&tool_call());
        /// What is wrong, and how to make a good request so.
        type Change = (&'static str, fn(&mut Value));
        let changes: [Change; 10] = [
            ("a progress token", |m| {
                m["params"]["_meta"]["progressToken"] = json!(1)
            }),
            ("a log level", |m| {
                m["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info")
            }),
            ("no capabilities", |m| {
                m["params"]["_meta"]
                    .as_object_mut()
                    .unwrap()
                    .remove("io.modelcontextprotocol/clientCapabilities");
            }),
            ("an older version", |m| {
                m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] =
                    json!("2025-11-25")
            }),
            ("no meta", |m| {
                m["params"].as_object_mut().unwrap().remove("_meta");
            }),
            ("arguments not an object", |m| {
                m["params"]["arguments"] = json!([1])
            }),
            ("a fractional id", |m| m["id"] = json!(1.5)),
            ("no id", |m| {
                m.as_object_mut().unwrap().remove("id");
            }),
            ("a result beside the method", |m| m["result"] = json!({})),
            ("a name that is not text", |m| {
                m["params"]["name"] = json!(3)
            }),
        ];
        for (what, change) in changes {
            let mut message = tool_call();
            change(&mut message);
            assert!(
                recognised(&message, &headers).is_none(),
                "{what} was served directly"
            );
        }
    }

    #[test]
    fn other_methods_and_header_mapping_tools_go_to_rmcp() {
        let list =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}});
        let mut headers = headers_for(&tool_call());
        headers.retain(|(n, _)| *n != "mcp-method");
        headers.push(("mcp-method", "tools/list".into()));
        assert!(recognised(&list, &headers).is_none());
        let mut mapped = tool_call();
        mapped["params"]["name"] = json!("set_mode");
        assert!(recognised(&mapped, &headers_for(&mapped)).is_none());
    }

    #[test]
    fn a_client_without_a_name_is_rmcps_default_implementation() {
        let mut message = tool_call();
        message["params"]["_meta"]
            .as_object_mut()
            .unwrap()
            .remove("io.modelcontextprotocol/clientInfo");
        let direct = recognised(&message, &headers_for(&message)).expect("served directly");
        let default = rmcp::model::Implementation::default();
        assert_eq!(direct.caller.client.client_name, Some(default.name));
    }

    #[test]
    fn error_codes_map_to_the_statuses_rmcp_gives() {
        assert_eq!(
            status_of(ErrorCode::METHOD_NOT_FOUND),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status_of(ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(status_of(ErrorCode::INVALID_PARAMS), StatusCode::OK);
        assert_eq!(status_of(ErrorCode::INTERNAL_ERROR), StatusCode::OK);
        let (error, status) = as_rmcp_answers(ErrorData::resource_not_found("gone", None));
        assert_eq!(
            (error.code, status),
            (ErrorCode::INVALID_PARAMS, StatusCode::OK)
        );
        let (error, status) = as_rmcp_answers(ErrorData::method_not_found::<
            rmcp::model::CallToolRequestMethod,
        >());
        assert_eq!(
            (error.code, status),
            (ErrorCode::METHOD_NOT_FOUND, StatusCode::NOT_FOUND)
        );
    }

    #[tokio::test]
    async fn a_call_whose_caller_went_away_still_finishes() {
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let mut call = Box::pin(Finish::new(async move {
            wait.await.unwrap();
            done.send(()).unwrap();
        }));
        // Started, then abandoned, as when a client disconnects.
        assert!(futures::poll!(call.as_mut()).is_pending());
        drop(call);
        go.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), finished)
            .await
            .expect("the abandoned call finished on its own task")
            .unwrap();
    }
}
