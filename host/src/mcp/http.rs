//! Streamable HTTP at `/mcp`, through rmcp's `StreamableHttpService`.
//!
//! Around rmcp: a frame check that answers malformed JSON-RPC with a JSON-RPC
//! error (rmcp answers plain text), an `Origin` allow-list (rmcp checks
//! `Host` by default but `Origin` only when told to), and a count of
//! responses still being sent, so shutdown waits until each answer has
//! actually left. A legacy session's `DELETE` is answered `204 No Content`
//! (rmcp answers `202`, which the official Python SDK logs as a failed
//! termination on every close). The stateless 2026-07-28 `tools/call` and
//! `tasks/get` that rmcp would accept as they stand are served by
//! [`super::direct`] instead, without rmcp's per-request service.

use super::direct::{self, Hosts};
use super::handler::Settle;
use super::limits::{StreamSlot, Throttle};
use super::{frame, listen};
use crate::drain::Drain;
use crate::store::Store;
use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The largest request body accepted; MCP messages are small.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// Who may talk to the HTTP endpoint.
#[derive(Clone, Debug)]
pub struct HttpAccess {
    /// Accepted `Host` header values (any port). Binding to localhost keeps
    /// the defaults; anything else must be listed, which is what stops DNS
    /// rebinding.
    pub allowed_hosts: Vec<String>,
    /// Accepted `Origin` values (`*` may stand for the port). A request with
    /// no `Origin` (not from a browser) is accepted.
    pub allowed_origins: Vec<String>,
}

impl Default for HttpAccess {
    fn default() -> Self {
        HttpAccess {
            allowed_hosts: ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec(),
            allowed_origins: ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// The router serving MCP at `/mcp`. `responses` counts answers still being
/// sent; cancelling `streams` ends long-lived streams (legacy sessions,
/// subscriptions): do it once `responses` has drained. `throttle` holds
/// the tenant's request rate and open listen streams.
pub fn router(
    settle: Settle,
    access: &HttpAccess,
    responses: Drain,
    streams: CancellationToken,
    throttle: Arc<Throttle>,
) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(access.allowed_hosts.clone())
        .with_allowed_origins(access.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        // One JSON body when the answer is a single message (most are); SSE
        // only when notifications come first.
        .with_json_response(true)
        .with_cancellation_token(streams.clone());
    let served = Arc::new(Served {
        responses,
        streams,
        throttle: throttle.clone(),
        settle: settle.clone(),
        hosts: Hosts::new(&access.allowed_hosts),
    });
    let service = StreamableHttpService::new(
        move || Ok(settle.for_session()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service("/mcp", service)
        .layer(middleware::from_fn(move |request, next| {
            check_frame(served.clone(), request, next)
        }))
        .layer(middleware::from_fn(move |request, next| {
            super::limits::rate_limit(throttle.clone(), request, next)
        }))
        .layer(middleware::from_fn(end_session))
}

/// A legacy session's `DELETE` that rmcp accepted (`202`) is answered
/// `204 No Content`: the session is closed by then, and clients (the
/// official Python SDK among them) expect 200 or 204. Other answers (no
/// session id, wrong protocol version, a modern client's 405) pass as rmcp
/// gave them.
async fn end_session(request: Request, next: Next) -> Response {
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = Body::empty();
    }
    response
}

/// `/healthz` (the process answers) and `/readyz` (the store answers and
/// the plugin is loaded, which it is once the runner started), for load
/// balancers and orchestrators.
pub fn health(store: Store) -> Router {
    Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let store = store.clone();
                async move {
                    match tokio::time::timeout(READY_TIMEOUT, store.ping()).await {
                        Ok(Ok(())) => (StatusCode::OK, "ready\n".to_string()),
                        Ok(Err(e)) => {
                            (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n"))
                        }
                        Err(_) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!(
                                "not ready: the store did not answer within {READY_TIMEOUT:?}\n"
                            ),
                        ),
                    }
                }
            }),
        )
}

/// How long `/readyz` waits for the store.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Methods whose response stream stays open for as long as the client
/// wants; shutdown ends them rather than waiting for them.
const LONG_LIVED: [&str; 1] = ["subscriptions/listen"];

/// What [`check_frame`] needs of the endpoint it guards, made once per
/// router.
struct Served {
    /// Answers still being sent.
    responses: Drain,
    /// Cancelled when shutdown stops waiting for answers.
    streams: CancellationToken,
    /// The tenant's rate and stream limits.
    throttle: Arc<Throttle>,
    /// The server, for requests served without rmcp.
    settle: Settle,
    /// The `Host` values rmcp accepts.
    hosts: Hosts,
}

/// Answers a malformed POST body with the JSON-RPC error it deserves,
/// serves what [`direct`] recognises, and counts every other POST until its
/// response body has been sent; a listen stream over the tenant's cap is
/// refused.
async fn check_frame(served: Arc<Served>, request: Request, next: Next) -> Response {
    crate::timeline!("request head in");
    let Served {
        responses,
        streams,
        throttle,
        settle,
        hosts,
    } = &*served;
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body larger than {MAX_BODY_BYTES} bytes"),
            )
                .into_response();
        }
    };
    crate::timeline!("request body read");
    let message = match frame::check(&bytes) {
        Ok(message) => message,
        Err(rejection) => {
            tracing::debug!(
                code = rejection.code,
                "rejected HTTP message: {}",
                rejection.message
            );
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "application/json")],
                rejection.to_json().to_string(),
            )
                .into_response();
        }
    };
    if let Some(request) = direct::recognise(hosts, settle.dispatch(), &parts, &message) {
        crate::timeline!("direct route chosen");
        count_route(settle, "direct");
        let in_flight = responses.enter();
        // As rmcp does for its own requests: once shutdown stops waiting,
        // an unanswered request gets a 500 (a tools/call still finishes).
        let response = tokio::select! {
            response = direct::answer(settle, request) => response,
            () = streams.cancelled() => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Encounter an error when empty response: the server is shutting down",
            )
                .into_response(),
        };
        return response.map(|body| Body::new(Holding::new(body, in_flight)));
    }
    count_route(settle, "rmcp");
    let long_lived = message
        .get("method")
        .and_then(|m| m.as_str())
        .is_some_and(|m| LONG_LIVED.contains(&m));
    let stream_slot = if long_lived {
        match throttle.open_stream() {
            Some(slot) => Some(slot),
            None => return too_many_streams(throttle, &message),
        }
    } else {
        None
    };
    let (mut parts, mut bytes, mut message) = (parts, bytes, message);
    if listen::rename_listen(&mut message) {
        // rmcp checks that Mcp-Method matches the body; keep them agreeing.
        if parts
            .headers
            .get("mcp-method")
            .is_some_and(|m| m == listen::LISTEN)
        {
            parts.headers.insert(
                "mcp-method",
                header::HeaderValue::from_static(listen::LISTEN_ALIAS),
            );
        }
        bytes = message.to_string().into();
    }
    let in_flight = (!long_lived).then(|| responses.enter());
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let Some(in_flight) = in_flight else {
        return hold_until_sent(response, stream_slot);
    };
    // The count ends when the body has been sent (or the client went away),
    // not when the handler returned: the answer may still be on its way.
    response.map(|body| Body::new(Holding::new(body, in_flight)))
}

/// Counts a well-formed MCP POST by the route that serves it.
fn count_route(settle: &Settle, route: &'static str) {
    let tenant = settle.dispatch().tenant();
    tenant.context.metrics.mcp_request(tenant.name(), route);
}

/// Keeps the listen stream's place taken until its response body ends.
fn hold_until_sent(response: Response, slot: Option<StreamSlot>) -> Response {
    let Some(slot) = slot else {
        return response;
    };
    response.map(|body| Body::new(Holding::new(body, slot)))
}

/// A response body that keeps `T` until the body is dropped: hyper drops
/// it once the last byte is written, or when the client goes away. The
/// body's frames and size pass through unchanged, so a JSON answer keeps
/// its `Content-Length` (a stream would be sent chunked).
struct Holding<T> {
    body: Body,
    _held: T,
}

impl<T> Holding<T> {
    fn new(body: Body, held: T) -> Holding<T> {
        Holding { body, _held: held }
    }
}

impl<T: Unpin> hyper::body::Body for Holding<T> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The JSON-RPC error (HTTP 429) for a listen stream over the cap.
fn too_many_streams(throttle: &Throttle, message: &serde_json::Value) -> Response {
    let error = serde_json::json!({
        "jsonrpc": "2.0",
        "id": message.get("id").cloned().unwrap_or(serde_json::Value::Null),
        "error": {
            "code": TOO_MANY_STREAMS,
            "message": format!(
                "too many open subscriptions/listen streams: this tenant may hold {} open; close one first",
                throttle.max_streams()
            ),
        },
    });
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::CONTENT_TYPE, "application/json")],
        error.to_string(),
    )
        .into_response()
}

/// The JSON-RPC error code of a refused listen stream (a server error, in
/// the range JSON-RPC leaves to implementations).
const TOO_MANY_STREAMS: i64 = -32000;
