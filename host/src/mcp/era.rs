//! Which era a request is in, and what each era allows.
//!
//! settle serves the stateless 2026-07-28 protocol and the legacy
//! `initialize` era (2025-11-25, 2025-06-18) on the same endpoint. The
//! tasks extension exists only in 2026-07-28; some methods exist only in the
//! legacy era; and rmcp routes a known method whose params it cannot parse
//! to the custom-request hook, where [`unrouted`] gives it the right error.

use crate::bindings::settle::plugin::types::ClientContext;
use rmcp::RoleServer;
use rmcp::model::{
    ClientCapabilities, ErrorCode, ErrorData, Implementation, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{Peer, RequestContext};

/// The protocol versions settle serves: 2026-07-28 statelessly, and the two
/// `initialize` versions most clients in use still speak.
pub const VERSIONS: [ProtocolVersion; 3] = [
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// Methods rmcp knows, with the params each needs: a request for one of
/// them that reaches [`unrouted`] had params rmcp could not parse, which is
/// a malformed request (-32602), not an unknown method.
pub const KNOWN: [(&str, &str); 10] = [
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

/// Methods 2026-07-28 removed: unknown there, whatever their params.
pub const REMOVED: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// A request served under 2026-07-28 (rather than a legacy `initialize`
/// session). The tasks extension exists only there: SEP-2663 forbids
/// enabling it for 2025-11-25 clients even when they declare it.
pub fn is_modern(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version().is_some_and(|v| !v.has_initialize())
}

/// The client may receive tasks: a 2026-07-28 request that declares the
/// extension.
pub fn declares_tasks(cx: &RequestContext<RoleServer>) -> bool {
    is_modern(cx) && cx.client_capabilities().is_some_and(|c| c.supports_tasks())
}

/// The `tasks/*` methods need the extension declared on a 2026-07-28
/// request; rmcp checks the declaration, this adds the era.
pub fn require_task_client(cx: &RequestContext<RoleServer>) -> Result<(), ErrorData> {
    if declares_tasks(cx) {
        return Ok(());
    }
    Err(missing_tasks())
}

/// The error for a request that needs the tasks extension.
pub fn missing_tasks() -> ErrorData {
    ErrorData::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    )
}

/// Who sent a request, as the plugin and the era's rules need it: read
/// from rmcp's request context, or from the `_meta` of a request served
/// directly ([`super::direct`]), which has no rmcp context.
pub struct Caller {
    /// The client as the plugin receives it; `client.tasks` says whether
    /// it may be given tasks.
    pub client: ClientContext,
    /// A legacy session's peer, through which the plugin's questions are
    /// asked. `None` under 2026-07-28, where questions go back in the
    /// answer instead.
    pub legacy_peer: Option<Peer<RoleServer>>,
}

impl Caller {
    /// The caller of a request rmcp routed.
    pub fn of(cx: &RequestContext<RoleServer>) -> Caller {
        let capabilities = cx.client_capabilities().unwrap_or_default();
        Caller {
            client: client_context(
                cx.protocol_version(),
                &capabilities,
                cx.client_info(),
                declares_tasks(cx),
            ),
            legacy_peer: (!is_modern(cx)).then(|| cx.peer.clone()),
        }
    }

    /// The caller of a stateless 2026-07-28 request, from its `_meta`:
    /// `None` unless the meta names 2026-07-28 and carries the client's
    /// capabilities. A client that does not name itself is, as rmcp has it,
    /// rmcp's default implementation.
    pub fn stateless(meta: &RequestMetaObject) -> Option<Caller> {
        let version = meta.protocol_version()?;
        if version != ProtocolVersion::V_2026_07_28 {
            return None;
        }
        let capabilities = meta.client_capabilities()?;
        let info = meta.client_info().unwrap_or_default();
        let tasks = capabilities.supports_tasks();
        Some(Caller {
            client: client_context(Some(version), &capabilities, Some(info), tasks),
            legacy_peer: None,
        })
    }

    /// The client may receive tasks.
    pub fn declares_tasks(&self) -> bool {
        self.client.tasks
    }
}

/// What the client declared, as the plugin receives it.
fn client_context(
    version: Option<ProtocolVersion>,
    capabilities: &ClientCapabilities,
    info: Option<Implementation>,
    tasks: bool,
) -> ClientContext {
    ClientContext {
        protocol_version: version.map(|v| v.to_string()).unwrap_or_default(),
        tasks,
        elicitation: capabilities.elicitation.is_some(),
        sampling: capabilities.sampling.is_some(),
        roots: capabilities.roots.is_some(),
        client_name: info.as_ref().map(|i| i.name.clone()),
        client_version: info.map(|i| i.version),
    }
}

/// The error for a request rmcp could not route: a method the era removed,
/// a known method with params it could not parse, or an unknown method.
pub fn unrouted(method: &str, modern: bool) -> ErrorData {
    if modern && REMOVED.contains(&method) {
        return ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: {method} is not part of protocol 2026-07-28"),
            None,
        );
    }
    if let Some((_, usage)) = KNOWN.iter().find(|(m, _)| *m == method) {
        return ErrorData::invalid_params(format!("Invalid params for {method}: {usage}"), None);
    }
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("Method not found: {method}"),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_methods_are_unknown_only_in_2026_07_28() {
        let modern = unrouted("logging/setLevel", true);
        assert_eq!(modern.code, ErrorCode::METHOD_NOT_FOUND);
        assert!(modern.message.contains("not part of protocol 2026-07-28"));
        let legacy = unrouted("logging/setLevel", false);
        assert_eq!(legacy.code, ErrorCode::INVALID_PARAMS);
        assert!(legacy.message.contains("needs params {level: string}"));
    }

    #[test]
    fn a_known_method_with_bad_params_is_invalid_params_with_its_usage() {
        for (method, usage) in KNOWN {
            let err = unrouted(method, true);
            if REMOVED.contains(&method) {
                continue;
            }
            assert_eq!(err.code, ErrorCode::INVALID_PARAMS, "{method}");
            assert!(err.message.contains(usage), "{method}: {}", err.message);
        }
    }

    #[test]
    fn an_unknown_method_is_method_not_found() {
        for modern in [true, false] {
            let err = unrouted("nope/nothing", modern);
            assert_eq!(err.code, ErrorCode::METHOD_NOT_FOUND);
            assert_eq!(err.message, "Method not found: nope/nothing");
        }
    }
}
