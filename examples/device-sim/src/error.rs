//! Errors: [`SimError`] for callers that match on what went wrong, [`ApiError`] for what an
//! HTTP handler answers.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Something a [`Sim`](crate::Sim) call cannot do.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    /// No device has this id.
    #[error("unknown device `{0}`")]
    UnknownDevice(String),
    /// Two devices in the configuration share an id.
    #[error("device id `{0}` is used twice")]
    DuplicateDevice(String),
    /// The configuration lists no devices.
    #[error("the simulator needs at least one device")]
    NoDevices,
}

/// An error response: a status and `{"error": message}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl From<SimError> for ApiError {
    fn from(e: SimError) -> Self {
        match e {
            // The wire message is fixed by the contract; the id is in the URL already.
            SimError::UnknownDevice(_) => ApiError::new(StatusCode::NOT_FOUND, "unknown device"),
            other => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}
