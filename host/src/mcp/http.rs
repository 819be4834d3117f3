//! Streamable HTTP at `/mcp`, through rmcp's `StreamableHttpService`.
//!
//! Around rmcp: a frame check that answers malformed JSON-RPC with a JSON-RPC
//! error (rmcp answers plain text), and an `Origin` allow-list (rmcp checks
//! `Host` by default but `Origin` only when told to).

use super::frame;
use super::handler::Settle;
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

/// The router serving MCP at `/mcp`. Cancelling `streams` ends long-lived
/// streams (legacy sessions); do it once calls in flight have drained.
pub fn router(settle: Settle, access: &HttpAccess, streams: CancellationToken) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(access.allowed_hosts.clone())
        .with_allowed_origins(access.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(streams);
    let service = StreamableHttpService::new(
        move || Ok(settle.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service("/mcp", service)
        .layer(middleware::from_fn(check_frame))
}

/// Answers a malformed POST body with the JSON-RPC error it deserves and
/// passes everything else on untouched.
async fn check_frame(request: Request, next: Next) -> Response {
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
    if let Err(rejection) = frame::check(&bytes) {
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
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
