//! How an MCP request besides `tools/call` ends, shared by [`crate::serve`]
//! (which routes requests) and the modules that answer them
//! ([`crate::resources`], [`crate::prompts`]).

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

/// A string parameter, or an invalid-params refusal naming it.
pub fn string_param<'a>(params: &'a Json, name: &str) -> Result<&'a str, Refusal> {
    params
        .get(name)
        .and_then(Json::as_str)
        .ok_or_else(|| Refusal::InvalidParams(format!("params.{name} must be a string")))
}
