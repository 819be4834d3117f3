//! The MCP requests besides `tools/call` that the plugin serves, routed to
//! [`crate::resources`] and [`crate::prompts`].

use crate::bindings::settle::plugin::types::ClientContext;
pub use crate::outcome::{Refusal, Served};
use serde_json::Value as Json;

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
