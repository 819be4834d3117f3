//! The operator's endpoints: `/metrics` and `POST /admin/reload`.
//!
//! Both are off unless configured. `/metrics` is open for the single
//! default tenant (there is nothing to hide between tenants), and needs the
//! `metrics_token_env` token with a tenants file, because its labels name
//! the tenants. The admin endpoint needs `admin_token_env`'s token.

use super::auth::{authorized, unauthorized};
use crate::metrics::Metrics;
use crate::secret::Secret;
use crate::swap::{SwapOutcome, Swapper, TenantSwap};
use axum::Router;
use axum::extract::{Path, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// `GET /metrics` in the Prometheus text format.
pub fn metrics(metrics: Arc<Metrics>, token: Option<Secret>, open: bool) -> Router {
    if token.is_none() && !open {
        return Router::new();
    }
    Router::new().route(
        "/metrics",
        axum::routing::get(move |request: Request| {
            let metrics = metrics.clone();
            let token = token.clone();
            async move {
                if token.is_some() && !authorized(&request, token.as_ref()) {
                    return unauthorized();
                }
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.render(),
                )
                    .into_response()
            }
        }),
    )
}

/// `POST /admin/reload` (every tenant) and `POST /admin/reload/{tenant}`.
/// Answers `{"swaps": [...]}` with 200 when nothing was refused and 422
/// when something was (the old plugin then still serves).
pub fn reload(swapper: Arc<Swapper>, token: Option<Secret>) -> Router {
    let Some(token) = token else {
        return Router::new();
    };
    let all = {
        let (swapper, token) = (swapper.clone(), token.clone());
        move |request: Request| {
            let (swapper, token) = (swapper.clone(), token.clone());
            async move {
                if !authorized(&request, Some(&token)) {
                    return unauthorized();
                }
                report(swapper.reload_all().await)
            }
        }
    };
    let one = move |Path(name): Path<String>, request: Request| {
        let (swapper, token) = (swapper.clone(), token.clone());
        async move {
            if !authorized(&request, Some(&token)) {
                return unauthorized();
            }
            let Some(tenant) = swapper.tenants().get(&name) else {
                return (
                    StatusCode::NOT_FOUND,
                    axum::Json(serde_json::json!({"error": format!("no tenant {name:?}")})),
                )
                    .into_response();
            };
            let outcome = swapper.reload(&tenant).await;
            report(vec![TenantSwap {
                tenant: name,
                outcome,
            }])
        }
    };
    Router::new()
        .route("/admin/reload", axum::routing::post(all))
        .route("/admin/reload/{tenant}", axum::routing::post(one))
}

fn report(swaps: Vec<TenantSwap>) -> Response {
    let refused = swaps
        .iter()
        .any(|s| matches!(s.outcome, SwapOutcome::Refused { .. }));
    let status = if refused {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    (status, axum::Json(serde_json::json!({"swaps": swaps}))).into_response()
}
