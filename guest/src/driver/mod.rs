//! Drivers map the device model onto one concrete device API.
//!
//! A driver knows how the API spells each field when writing and when reading,
//! which values a device accepts, and how a read-back value is compared. It
//! never decides whether a command worked: that verdict belongs to the task
//! state machine, from what the sensor endpoint reports.

pub mod homeassistant;
pub mod profile;

use crate::host::{self, HttpError, HttpRequest};
use crate::model::{Field, FieldSpec, Value};
use serde::Serialize;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::fmt;

/// A device as the API lists it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceInfo {
    pub id: String,
    pub name: String,
    pub kind: String,
}

/// One sensor reading, in model spelling.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Reading {
    /// False when the device tells its API it cannot be reached.
    pub online: bool,
    /// The writable fields the sensor endpoint reported. A field missing here
    /// cannot be verified on this device.
    pub values: BTreeMap<Field, Value>,
    /// Read-only: the measured room temperature, when reported.
    pub room_temperature: Option<f64>,
    /// When the device last reported, as the API says.
    pub updated_at: Option<String>,
}

/// What the API said when it took a command. It says nothing about the device.
#[derive(Clone, Debug, PartialEq)]
pub struct Accepted {
    pub request_id: Option<String>,
}

/// Why a driver call produced no usable answer.
#[derive(Clone, Debug, PartialEq)]
pub enum DriverError {
    /// The runner's outbound policy refused the API's address.
    Denied(String),
    /// No answer, a timeout or a 5xx: worth retrying later.
    Unreachable(String),
    /// The API does not know this device.
    UnknownDevice(String),
    /// The API refused our credentials.
    Unauthorized(String),
    /// The API refused the request as invalid (4xx).
    Rejected(String),
    /// The API answered with something we cannot read.
    BadResponse(String),
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Denied(m) => f.write_str(m),
            DriverError::Unreachable(m) => write!(f, "device API unreachable: {m}"),
            DriverError::UnknownDevice(id) => write!(f, "unknown device {id:?}"),
            DriverError::Unauthorized(m) => write!(f, "device API refused the credentials: {m}"),
            DriverError::Rejected(m) => write!(f, "device API rejected the request: {m}"),
            DriverError::BadResponse(m) => write!(f, "device API answered unreadably: {m}"),
        }
    }
}

/// The operations settle needs from a device API.
pub trait Driver {
    fn list_devices(&self) -> Result<Vec<DeviceInfo>, DriverError>;

    /// Reads the device's reported state from its sensor endpoint.
    fn read(&self, device_id: &str) -> Result<Reading, DriverError>;

    /// Sends a command; `Ok` only means the API took it.
    fn send(&self, device_id: &str, command: &[(Field, Value)]) -> Result<Accepted, DriverError>;

    /// What each writable field accepts on this device and how it compares.
    fn specs(&self, device_id: &str) -> Result<Vec<FieldSpec>, DriverError>;

    /// What the devices behind this API accept, one spec per field across
    /// all of them (the union of their ranges), for tool schemas. It must
    /// not read every device one by one: a tenant may have thousands.
    fn advertised(&self) -> Result<Vec<FieldSpec>, DriverError>;
}

/// Sends one JSON request to a device API and reads its JSON answer; a
/// transport failure is `Unreachable` (worth retrying) unless the runner
/// denied the destination.
pub fn exchange(request: &HttpRequest<'_>) -> Result<Json, DriverError> {
    let response = host::send(request).map_err(|e| match e {
        HttpError::Denied(m) => DriverError::Denied(m),
        HttpError::Timeout(m) | HttpError::Failed(m) => DriverError::Unreachable(m),
    })?;
    classify_response(response.status, &response.body)
}

/// Maps an HTTP answer of the API onto a result, keeping the API's own
/// `error` message where it gave one.
pub fn classify_response(status: u16, body: &[u8]) -> Result<Json, DriverError> {
    let parsed: Option<Json> = serde_json::from_slice(body).ok();
    if (200..=299).contains(&status) {
        return parsed.ok_or_else(|| {
            DriverError::BadResponse(format!("status {status} with a body that is not JSON"))
        });
    }
    // Only a failure needs its message: every read is an answer to parse,
    // so a success builds nothing else.
    let message = parsed
        .as_ref()
        // The simulator says `error`, Home Assistant `message`.
        .and_then(|j| j.get("error").or_else(|| j.get("message")))
        .and_then(Json::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
    match status {
        401 | 403 => Err(DriverError::Unauthorized(format!("{status} {message}"))),
        404 => Err(DriverError::UnknownDevice(message)),
        400..=499 => Err(DriverError::Rejected(format!("{status} {message}"))),
        _ => Err(DriverError::Unreachable(format!(
            "answered {status} {message}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_classified_by_status() {
        assert!(classify_response(200, br#"{"ok":1}"#).is_ok());
        assert_eq!(
            classify_response(400, br#"{"error":"mode must be COOL"}"#),
            Err(DriverError::Rejected("400 mode must be COOL".into()))
        );
        assert!(matches!(
            classify_response(401, b"{}"),
            Err(DriverError::Unauthorized(_))
        ));
        assert!(matches!(
            classify_response(503, b"busy"),
            Err(DriverError::Unreachable(m)) if m.contains("503 busy")
        ));
        assert!(matches!(
            classify_response(200, b"not json"),
            Err(DriverError::BadResponse(_))
        ));
    }
}
