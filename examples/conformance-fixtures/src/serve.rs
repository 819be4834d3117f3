//! The MCP requests besides `tools/call` that the plugin serves, routed to
//! [`crate::resources`] and [`crate::prompts`].

use crate::bindings::settle::plugin::types::ClientContext;
use serde_json::Value as Json;

/// How a request ended.
#[derive(Debug, PartialEq)]
pub enum Served {
    /// The method's result (without `resultType` or cache hints).
    Complete(Json),
    /// MRTR: an `InputRequiredResult` body.
    InputRequired(Json),
}

/// Why a request was refused; each is a JSON-RPC error.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// No such resource (the runner adds the URI as `data.uri`).
    NotFound(String),
    InvalidParams(String),
    /// The `ClientCapabilities` the request needs and lacked.
    MissingCapability(Json),
    MethodNotFound(String),
}

/// One request, with the MRTR answers of a retry.
pub struct Request<'a> {
    pub method: &'a str,
    pub params: &'a Json,
    pub client: &'a ClientContext,
    pub replies: Option<&'a Json>,
}

pub fn serve(request: &Request<'_>) -> Result<Served, Refusal> {
    let params = request.params;
    match request.method {
        "resources/list" => Ok(Served::Complete(crate::resources::list())),
        "resources/templates/list" => Ok(Served::Complete(crate::resources::templates())),
        "resources/read" => crate::resources::read(params).map(Served::Complete),
        "prompts/list" => Ok(Served::Complete(crate::prompts::list())),
        "prompts/get" => crate::prompts::get(params, request.client, request.replies),
        "completion/complete" => crate::prompts::complete(params).map(Served::Complete),
        other => Err(Refusal::MethodNotFound(other.to_string())),
    }
}

/// A string parameter, or an invalid-params refusal naming it.
pub fn string_param<'a>(params: &'a Json, name: &str) -> Result<&'a str, Refusal> {
    params
        .get(name)
        .and_then(Json::as_str)
        .ok_or_else(|| Refusal::InvalidParams(format!("params.{name} must be a string")))
}
