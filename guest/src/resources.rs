//! Each device's state as an MCP resource, readable and subscribable.
//! Subscribers hear of changes through [`crate::app::readings::observed`].
//! The audit trail is one more, `settle://audit` ([`crate::audit`]).

use crate::app::Context;
use crate::app::readings::{TEMPLATE, device_of, observed, state_json, uri};
use crate::audit;
use serde_json::{Value as Json, json};

/// What the plugin serves beyond tools.
pub fn capabilities() -> Json {
    json!({"resources": {"subscribe": true, "listChanged": false}})
}

/// Why a resource request failed.
pub enum ResourceError {
    NotFound(String),
    Unavailable(String),
    MethodNotFound(String),
}

/// Serves `resources/list`, `resources/templates/list` and
/// `resources/read`.
pub fn serve(ctx: &Context<'_>, method: &str, params: &Json) -> Result<Json, ResourceError> {
    match method {
        "resources/list" => {
            let devices = ctx
                .driver
                .list_devices()
                .map_err(|e| ResourceError::Unavailable(format!("could not list devices: {e}")))?;
            let resources: Vec<Json> = devices
                .iter()
                .map(|d| {
                    json!({
                        "uri": uri(&d.id),
                        "name": format!("{} state", d.id),
                        "title": format!("{} (sensor state)", if d.name.is_empty() { &d.id } else { &d.name }),
                        "mimeType": "application/json",
                    })
                })
                .collect();
            let mut resources = resources;
            resources.push(json!({
                "uri": audit::URI,
                "name": "audit trail",
                "title": "Audit trail (every command as it ended, newest first)",
                "mimeType": "application/json",
            }));
            Ok(json!({ "resources": resources }))
        }
        "resources/templates/list" => Ok(json!({
            "resourceTemplates": [{
                "uriTemplate": TEMPLATE,
                "name": "device state",
                "description": "What a device's sensors report now.",
                "mimeType": "application/json",
            }, {
                "uriTemplate": audit::TEMPLATE,
                "name": "audit trail",
                "description": "Every command as it ended, newest first: client, tool, arguments, sent, observed, outcome (completed, failed, cancelled, gated, declined), reason and times. Filters: id, device, status, since and until (ms since the epoch), limit (1..1000, 100 by default).",
                "mimeType": "application/json",
            }],
        })),
        "resources/read" => {
            let requested = params.get("uri").and_then(Json::as_str).unwrap_or_default();
            if let Some(query) = audit_query(requested) {
                return read_audit(ctx, requested, query);
            }
            let device_id = device_of(requested).ok_or_else(|| {
                ResourceError::NotFound(format!("Resource not found: {requested}"))
            })?;
            let reading = ctx.driver.read(device_id).map_err(|e| match e {
                crate::driver::DriverError::UnknownDevice(_) => ResourceError::NotFound(format!(
                    "Resource not found: {requested} (no such device)"
                )),
                other => ResourceError::Unavailable(format!("could not read {device_id}: {other}")),
            })?;
            observed(ctx, device_id, &reading);
            Ok(json!({
                "contents": [{
                    "uri": requested,
                    "mimeType": "application/json",
                    "text": crate::json::text(&state_json(device_id, &reading)),
                }],
            }))
        }
        other => Err(ResourceError::MethodNotFound(other.to_string())),
    }
}

/// The query of an audit trail URI (empty for the whole trail).
fn audit_query(uri: &str) -> Option<&str> {
    let rest = uri.strip_prefix(audit::URI)?;
    match rest {
        "" => Some(""),
        _ => rest.strip_prefix('?'),
    }
}

fn read_audit(ctx: &Context<'_>, uri: &str, query: &str) -> Result<Json, ResourceError> {
    // A bad filter is the client's mistake: a not-found naming it.
    let filter = audit::Filter::parse_query(query)
        .map_err(|e| ResourceError::NotFound(format!("Resource not found: {uri}: {e}")))?;
    let entries = audit::list(ctx.platform, &filter).map_err(ResourceError::Unavailable)?;
    let records: Vec<Json> = entries.iter().map(audit::Entry::to_json).collect();
    Ok(json!({
        "contents": [{
            "uri": uri,
            "mimeType": "application/json",
            "text": crate::json::text(&json!({ "records": records })),
        }],
    }))
}
