//! The `/_sim` control plane: a test side door to inspect true state, inject faults, change
//! timing and hidden fields, and read request counts.
//!
//! It never needs the token, even when `/api/v1` does, so tests can set up and inspect a
//! token-protected simulator without holding the token a driver under test is given. Do not
//! expose a simulator beyond loopback.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{ApiError, SimError};
use crate::fault::{Fault, FaultKind};
use crate::model::SensorField;
use crate::sim::{DeviceView, Sim, Stats};

/// The `/_sim` routes.
pub(crate) fn routes(sim: Sim) -> Router {
    Router::new()
        .route("/devices/{id}", get(inspect))
        .route("/devices/{id}/faults", post(add_fault).delete(clear_faults))
        .route("/devices/{id}/faults/{kind}", delete(clear_fault))
        .route("/devices/{id}/delay", post(set_delay))
        .route("/devices/{id}/hidden-fields", post(set_hidden))
        .route("/devices/{id}/state", post(set_by_hand))
        .route("/stats", get(stats).delete(reset_stats))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .with_state(sim)
}

async fn inspect(
    State(sim): State<Sim>,
    Path(id): Path<String>,
) -> Result<Json<DeviceView>, ApiError> {
    Ok(Json(sim.inspect(&id)?))
}

#[derive(Serialize)]
struct FaultList {
    faults: Vec<Fault>,
}

async fn add_fault(
    State(sim): State<Sim>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<FaultList>, ApiError> {
    known(&sim, &id)?;
    let fault = Fault::from_json(&body).map_err(ApiError::bad_request)?;
    tracing::info!(device = %id, ?fault, "fault set");
    Ok(Json(FaultList {
        faults: sim.set_fault(&id, fault)?,
    }))
}

#[derive(Serialize)]
struct ByHand {
    applied: bool,
}

/// `POST /_sim/devices/{id}/state`: a person at the device sets values (a
/// control-spelling body, as for the control endpoint), at once.
async fn set_by_hand(
    State(sim): State<Sim>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<ByHand>, ApiError> {
    known(&sim, &id)?;
    let command = crate::control::parse_command(&body).map_err(ApiError::bad_request)?;
    let applied = sim.set_by_hand(&id, command)?;
    tracing::info!(device = %id, applied, "set by hand");
    Ok(Json(ByHand { applied }))
}

async fn clear_faults(
    State(sim): State<Sim>,
    Path(id): Path<String>,
) -> Result<Json<FaultList>, ApiError> {
    sim.clear_faults(&id)?;
    tracing::info!(device = %id, "faults cleared");
    Ok(Json(FaultList { faults: Vec::new() }))
}

async fn clear_fault(
    State(sim): State<Sim>,
    Path((id, kind)): Path<(String, String)>,
) -> Result<Json<FaultList>, ApiError> {
    known(&sim, &id)?;
    let kind: FaultKind = kind.parse().map_err(ApiError::bad_request)?;
    tracing::info!(device = %id, %kind, "fault cleared");
    Ok(Json(FaultList {
        faults: sim.clear_fault(&id, kind)?,
    }))
}

#[derive(Serialize)]
struct Timing {
    delay_ms: u64,
    jitter_ms: u64,
}

/// Sets `delay_ms` and/or `jitter_ms`; a member left out keeps its current value.
async fn set_delay(
    State(sim): State<Sim>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Timing>, ApiError> {
    let current = sim.inspect(&id)?;
    let map = object(&body, r#"{"delay_ms":4000,"jitter_ms":0}"#)?;
    let mut timing = Timing {
        delay_ms: current.delay_ms,
        jitter_ms: current.jitter_ms,
    };
    if map.is_empty() {
        return Err(ApiError::bad_request(
            "set at least one of `delay_ms`, `jitter_ms`",
        ));
    }
    for (key, value) in &map {
        let slot = match key.as_str() {
            "delay_ms" => &mut timing.delay_ms,
            "jitter_ms" => &mut timing.jitter_ms,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "unknown member `{key}`; allowed: delay_ms, jitter_ms"
                )));
            }
        };
        *slot = value.as_u64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "`{key}` must be a whole number of milliseconds, got {value}"
            ))
        })?;
    }
    sim.set_timing(
        &id,
        Duration::from_millis(timing.delay_ms),
        Duration::from_millis(timing.jitter_ms),
    )?;
    Ok(Json(timing))
}

#[derive(Serialize)]
struct HiddenFields {
    fields: BTreeSet<SensorField>,
}

/// Replaces the hidden sensor fields; `{"fields":[]}` shows everything again.
async fn set_hidden(
    State(sim): State<Sim>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<HiddenFields>, ApiError> {
    known(&sim, &id)?;
    let map = object(&body, r#"{"fields":["room_temperature"]}"#)?;
    if let Some(key) = map.keys().find(|k| *k != "fields") {
        return Err(ApiError::bad_request(format!(
            "unknown member `{key}`; allowed: fields"
        )));
    }
    let Some(Value::Array(items)) = map.get("fields") else {
        return Err(ApiError::bad_request(
            "`fields` must be an array of sensor field names",
        ));
    };
    let mut fields = BTreeSet::new();
    for item in items {
        let field = item
            .as_str()
            .ok_or_else(|| format!("`fields` items must be strings, got {item}"))
            .and_then(str::parse::<SensorField>)
            .map_err(ApiError::bad_request)?;
        fields.insert(field);
    }
    sim.set_hidden_fields(&id, fields.clone())?;
    Ok(Json(HiddenFields { fields }))
}

async fn stats(State(sim): State<Sim>) -> Json<Stats> {
    Json(sim.stats())
}

async fn reset_stats(State(sim): State<Sim>) -> StatusCode {
    sim.reset_stats();
    StatusCode::NO_CONTENT
}

/// 404 for an unknown device before the body is looked at.
fn known(sim: &Sim, id: &str) -> Result<(), SimError> {
    if sim.has_device(id) {
        Ok(())
    } else {
        Err(SimError::UnknownDevice(id.to_owned()))
    }
}

/// Parses a body that must be a JSON object; `example` shows the expected shape.
fn object(body: &[u8], example: &str) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request(format!(
            "body must be a JSON object like {example}"
        ))),
        Err(e) => Err(ApiError::bad_request(format!(
            "body is not valid JSON: {e}"
        ))),
    }
}
