//! The device API under `/api/v1`, as specified in `docs/device-api.md`: listing, control,
//! sensors, and the bearer-token check in front of them.

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use std::time::Duration;

use crate::control::parse_command;
use crate::error::ApiError;
use crate::model::{Command, SensorState};
use crate::sim::{SensorPlan, Sim};

/// The `/api/v1` routes, token-checked when the simulator has a token.
pub(crate) fn routes(sim: Sim) -> Router {
    Router::new()
        .route("/devices", get(list))
        .route("/devices/{id}/control", post(control))
        .route("/devices/{id}/sensors", get(sensors))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(sim.clone(), require_token))
        .with_state(sim)
}

/// Rejects requests without the right `Authorization: Bearer` header (when a token is set).
async fn require_token(State(sim): State<Sim>, req: Request, next: Next) -> Response {
    if let Some(token) = sim.token() {
        let presented = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented != Some(token) {
            let mut resp = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized").into_response();
            resp.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return resp;
        }
    }
    next.run(req).await
}

#[derive(Serialize)]
struct DeviceList<'a> {
    devices: Vec<DeviceEntry<'a>>,
}

#[derive(Serialize)]
struct DeviceEntry<'a> {
    id: &'a str,
    name: &'a str,
    kind: &'static str,
}

async fn list(State(sim): State<Sim>) -> Response {
    let devices = sim
        .devices()
        .map(|d| DeviceEntry {
            id: &d.id,
            name: &d.name,
            kind: "air_conditioner",
        })
        .collect();
    Json(DeviceList { devices }).into_response()
}

#[derive(Serialize)]
struct Accepted {
    result: &'static str,
    request_id: String,
    echo: Command,
}

/// Accepts a valid command. The answer is the same whether or not the device will act on
/// it: that uncertainty is what settle exists to resolve.
async fn control(
    State(sim): State<Sim>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Accepted>, ApiError> {
    let latency = sim.begin_control(&id)?;
    delay(latency).await;
    let command = parse_command(&body).map_err(|e| {
        tracing::debug!(device = %id, error = %e, "control rejected");
        ApiError::bad_request(e)
    })?;
    let request_id = sim.accept(&id, command.clone())?;
    tracing::debug!(device = %id, %request_id, ?command, "control accepted");
    Ok(Json(Accepted {
        result: "accepted",
        request_id,
        echo: command,
    }))
}

#[derive(Serialize)]
struct SensorBody {
    #[serde(flatten)]
    state: SensorState,
    online: bool,
    updated_at: String,
}

async fn sensors(
    State(sim): State<Sim>,
    Path(id): Path<String>,
) -> Result<Json<SensorBody>, ApiError> {
    match sim.begin_sensor(&id)? {
        SensorPlan::Fail { latency, hang } => {
            delay(latency + hang).await;
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "sensor temporarily unavailable",
            ))
        }
        SensorPlan::Answer { latency } => {
            delay(latency).await;
            let read = sim.read_sensors(&id)?;
            let mut state = SensorState::full(&read.reading.state, true);
            for field in &read.hidden {
                state.hide(*field);
            }
            Ok(Json(SensorBody {
                state,
                online: read.reading.online,
                updated_at: read.updated_at,
            }))
        }
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")
}

async fn delay(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}
