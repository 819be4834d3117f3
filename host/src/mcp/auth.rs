//! Bearer tokens on the tenants' MCP endpoints.
//!
//! A request to `/t/{tenant}/mcp` must carry `Authorization: Bearer TOKEN`
//! with that tenant's token. Every refusal is the same 401, whether the
//! token is missing, wrong, another tenant's, or the tenant does not exist,
//! so a caller cannot find out which tenants there are.

use crate::secret::Secret;
use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// The one refusal.
pub fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::WWW_AUTHENTICATE, "Bearer realm=\"settle\""),
            (header::CONTENT_TYPE, "application/json"),
        ],
        r#"{"error":"unauthorized: this endpoint needs a valid bearer token"}"#,
    )
        .into_response()
}

/// The token a request presents, if it presents one.
pub(crate) fn presented(request: &Request) -> Option<&[u8]> {
    let value = request.headers().get(header::AUTHORIZATION)?.as_bytes();
    let scheme = value.get(..7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| value[7..].trim_ascii())
}

/// The request carries `expected` (compared in constant time, so the
/// answer's timing does not leak how much of a guess was right).
pub fn authorized(request: &Request, expected: Option<&Secret>) -> bool {
    match (presented(request), expected) {
        (Some(given), Some(expected)) => bool::from(given.ct_eq(expected.expose().as_bytes())),
        _ => false,
    }
}

/// Middleware: lets the request through only with one of `tokens` (a
/// tenant's own, and the admin's when the live view is on).
pub async fn require_bearer(tokens: Vec<Secret>, request: Request, next: Next) -> Response {
    if tokens.iter().any(|t| authorized(&request, Some(t))) {
        next.run(request).await
    } else {
        unauthorized()
    }
}

/// Answers `/t/{anything}/mcp` for names that are not tenants with the
/// same 401 a wrong token gets.
pub fn unknown_tenants() -> Router {
    Router::new().route(
        "/t/{tenant}/mcp",
        axum::routing::any(|| async { unauthorized() }),
    )
}
