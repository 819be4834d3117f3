//! `subscriptions/listen`, including the tasks extension's
//! `notifications.taskIds`.
//!
//! rmcp models listen without `taskIds` and refuses to send
//! `notifications/tasks` on a listen stream, so settle serves listen itself:
//! both transports rename an incoming `subscriptions/listen` request to
//! [`LISTEN_ALIAS`] before rmcp parses it ([`rename_listen`]); rmcp then hands
//! it to the handler's custom-request hook, which runs [`listen`] here. The
//! wire is unchanged: the client sees the acknowledgement, the notifications
//! tagged with its subscription id, and the final result, as the spec
//! describes.

use super::convert::{
    detailed_from_plugin, prompts_list_changes, resources_list_changes, resources_subscribable,
};
use super::era;
use crate::events::{Event, Hub, Interest};
use rmcp::RoleServer;
use rmcp::model::{
    CustomNotification, CustomResult, ErrorData, ServerCapabilities, ServerNotification,
};
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The method clients send.
pub const LISTEN: &str = "subscriptions/listen";
/// The private name rmcp sees, so the request reaches settle unparsed.
pub const LISTEN_ALIAS: &str = "settle/subscriptions/listen";

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Renames a listen request in place; returns whether it was one.
pub fn rename_listen(message: &mut Value) -> bool {
    let is_listen = message.get("method").and_then(Value::as_str) == Some(LISTEN)
        && message.get("id").is_some();
    if is_listen {
        message["method"] = json!(LISTEN_ALIAS);
    }
    is_listen
}

/// What the client asked to hear about.
struct Requested {
    tools_list: bool,
    prompts_list: bool,
    resources_list: bool,
    resources: Vec<String>,
    task_ids: Vec<String>,
}

fn parse(params: Option<&Value>) -> Result<Requested, ErrorData> {
    let bad = |what: &str| {
        ErrorData::invalid_params(
            format!("Invalid params for subscriptions/listen: {what}"),
            None,
        )
    };
    let notifications = params
        .and_then(|p| p.get("notifications"))
        .ok_or_else(|| bad("params.notifications is required"))?;
    let flag = |key: &str| -> Result<bool, ErrorData> {
        match notifications.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(bad(&format!("notifications.{key} must be a boolean"))),
        }
    };
    let list = |key: &str| -> Result<Vec<String>, ErrorData> {
        match notifications.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| bad(&format!("notifications.{key} must hold strings")))
                })
                .collect(),
            Some(_) => Err(bad(&format!("notifications.{key} must be an array"))),
        }
    };
    Ok(Requested {
        tools_list: flag("toolsListChanged")?,
        prompts_list: flag("promptsListChanged")?,
        resources_list: flag("resourcesListChanged")?,
        resources: list("resourceSubscriptions")?,
        task_ids: list("taskIds")?,
    })
}

/// Serves one listen request of `tenant` until the client closes it or the
/// server stops. `served` says which notifications the plugin's resources
/// and prompts can give.
pub async fn listen(
    hub: &Arc<Hub>,
    tenant: &str,
    served: &ServerCapabilities,
    params: Option<Value>,
    cx: RequestContext<RoleServer>,
) -> Result<CustomResult, ErrorData> {
    if !era::is_modern(&cx) {
        return Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            "subscriptions/listen is a 2026-07-28 method; use resources/subscribe in this session",
            None,
        ));
    }
    let requested = parse(params.as_ref())?;
    if !requested.task_ids.is_empty() && !era::declares_tasks(&cx) {
        return Err(era::missing_tasks());
    }
    let interest = Interest {
        tools_list: requested.tools_list,
        prompts_list: requested.prompts_list && prompts_list_changes(served),
        resources_list: requested.resources_list && resources_list_changes(served),
        resources: if resources_subscribable(served) {
            requested.resources.into_iter().collect()
        } else {
            Default::default()
        },
        task_ids: requested.task_ids.into_iter().collect(),
    };

    let id = serde_json::to_value(&cx.id).unwrap_or(Value::Null);
    let tag = json!({ SUBSCRIPTION_ID: id });
    let mut accepted = Map::new();
    for (key, on) in [
        ("toolsListChanged", interest.tools_list),
        ("promptsListChanged", interest.prompts_list),
        ("resourcesListChanged", interest.resources_list),
    ] {
        if on {
            accepted.insert(key.into(), json!(true));
        }
    }
    if !interest.resources.is_empty() {
        accepted.insert("resourceSubscriptions".into(), json!(interest.resources));
    }
    if !interest.task_ids.is_empty() {
        accepted.insert("taskIds".into(), json!(interest.task_ids));
    }

    // Follow before acknowledging, so nothing that happens after the
    // acknowledgement can be missed.
    let mut following = hub.follow(tenant, interest);
    let send = |method: &str, mut params: Value| {
        params["_meta"] = tag.clone();
        let notification =
            ServerNotification::CustomNotification(CustomNotification::new(method, Some(params)));
        let peer = cx.peer.clone();
        async move { peer.send_notification(notification).await.is_ok() }
    };
    if !send(
        "notifications/subscriptions/acknowledged",
        json!({ "notifications": accepted }),
    )
    .await
    {
        return Err(ErrorData::internal_error("the listen stream closed", None));
    }
    loop {
        let event = tokio::select! {
            _ = cx.ct.cancelled() => break,
            event = following.next() => event,
        };
        let delivered = match event {
            None => break,
            Some(Event::Task(view)) => match detailed_from_plugin(&view.detailed) {
                Ok(task) => send("notifications/tasks", task).await,
                Err(e) => {
                    tracing::error!("{}", e.message);
                    true
                }
            },
            Some(Event::ResourceUpdated(uri)) => {
                send("notifications/resources/updated", json!({ "uri": uri })).await
            }
            Some(Event::ToolsListChanged) => {
                send("notifications/tools/list_changed", json!({})).await
            }
            Some(Event::PromptsListChanged) => {
                send("notifications/prompts/list_changed", json!({})).await
            }
            Some(Event::ResourcesListChanged) => {
                send("notifications/resources/list_changed", json!({})).await
            }
        };
        if !delivered {
            break;
        }
    }
    Ok(CustomResult::new(json!({
        "resultType": "complete",
        "_meta": {
            SUBSCRIPTION_ID: id,
            "io.modelcontextprotocol/serverInfo": {"name": "settle", "version": env!("CARGO_PKG_VERSION")},
        },
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listen_requests_are_renamed() {
        let mut listen =
            json!({"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{}});
        assert!(rename_listen(&mut listen));
        assert_eq!(listen["method"], LISTEN_ALIAS);
        let mut other = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
        assert!(!rename_listen(&mut other));
        let mut notification = json!({"jsonrpc":"2.0","method":"subscriptions/listen"});
        assert!(!rename_listen(&mut notification));
    }

    #[test]
    fn params_are_checked_with_precise_messages() {
        let err = parse(Some(&json!({}))).err().unwrap();
        assert!(err.message.contains("params.notifications is required"));
        let err = parse(Some(&json!({"notifications": {"taskIds": "a"}})))
            .err()
            .unwrap();
        assert!(err.message.contains("taskIds must be an array"));
        let ok = parse(Some(
            &json!({"notifications": {"taskIds": ["a"], "toolsListChanged": true}}),
        ))
        .unwrap();
        assert_eq!(ok.task_ids, ["a"]);
        assert!(ok.tools_list);
    }
}
