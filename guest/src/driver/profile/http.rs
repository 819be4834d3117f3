//! A device API spoken through a profile: building each request from the
//! profile and reading the answers back through it.

use super::{Auth, Endpoint, Profile};
use crate::driver::{Accepted, DeviceInfo, Driver, DriverError, Reading, exchange};
use crate::host::HttpRequest;
use crate::model::{Field, FieldSpec, Value};
use crate::url;
use serde_json::Value as Json;

/// Path segments are device ids chosen by callers; anything outside this
/// set could change the request's meaning, so it is refused before sending.
fn checked_device_id(device_id: &str) -> Result<&str, DriverError> {
    let ok = !device_id.is_empty()
        && device_id.len() <= 128
        && device_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if ok {
        Ok(device_id)
    } else {
        Err(DriverError::UnknownDevice(device_id.to_string()))
    }
}

/// A device API spoken through a profile.
#[derive(Clone, Debug)]
pub struct ProfileDriver {
    pub profile: Profile,
    pub base_url: String,
    pub token: Option<String>,
    pub timeout_ms: u64,
    /// The largest answer taken.
    pub max_body_bytes: usize,
}

impl ProfileDriver {
    fn request(
        &self,
        endpoint: Endpoint<'_>,
        device_id: Option<&str>,
        body: Option<&Json>,
    ) -> Result<Json, DriverError> {
        let path = match device_id {
            Some(id) => endpoint.path.replace("{device_id}", checked_device_id(id)?),
            None => endpoint.path.to_string(),
        };
        let mut url = url::join(&self.base_url, &path);
        let mut bearer = None;
        match (&self.profile.auth, &self.token) {
            (Auth::Bearer, Some(token)) => bearer = Some(token.as_str()),
            (Auth::Query(name), Some(token)) => {
                let sep = if url.contains('?') { '&' } else { '?' };
                url = format!("{url}{sep}{name}={}", query_escape(token));
            }
            (_, None) => {}
        }
        exchange(&HttpRequest {
            method: endpoint.method,
            url: &url,
            bearer,
            json_body: body.map(|b| crate::json::text(b).into_bytes()),
            timeout_ms: self.timeout_ms,
            max_body_bytes: self.max_body_bytes,
        })
        .map_err(|e| match (e, device_id) {
            (DriverError::UnknownDevice(_), Some(id)) => DriverError::UnknownDevice(id.to_string()),
            (other, _) => other,
        })
    }

    fn sensors(&self, device_id: &str) -> Result<Json, DriverError> {
        self.request(self.profile.sensors.endpoint(), Some(device_id), None)
    }
}

/// Percent-encodes a query value.
fn query_escape(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Driver for ProfileDriver {
    fn list_devices(&self) -> Result<Vec<DeviceInfo>, DriverError> {
        let body = self.request(self.profile.list.endpoint(), None, None)?;
        self.profile.parse_devices(&body)
    }

    fn read(&self, device_id: &str) -> Result<Reading, DriverError> {
        self.profile.parse_sensors(&self.sensors(device_id)?)
    }

    fn send(&self, device_id: &str, command: &[(Field, Value)]) -> Result<Accepted, DriverError> {
        let mut full = command.to_vec();
        let companions = self.profile.companions(command);
        if !companions.is_empty() {
            let current = self.read(device_id)?;
            for field in companions {
                let value = current.values.get(&field).cloned().ok_or_else(|| {
                    DriverError::Rejected(format!(
                        "this API takes {field} together with the fields sent, and the device does not report its current {field}"
                    ))
                })?;
                full.push((field, value));
            }
        }
        let body = self.profile.control_body(&full)?;
        let answer = self.request(
            self.profile.control.endpoint(),
            Some(device_id),
            Some(&body),
        )?;
        Ok(Accepted {
            request_id: answer
                .get("request_id")
                .and_then(Json::as_str)
                .map(str::to_string),
        })
    }

    fn specs(&self, device_id: &str) -> Result<Vec<FieldSpec>, DriverError> {
        let needs_device = self
            .profile
            .fields
            .values()
            .any(|f| f.allowed_from.is_some());
        let sensors = if needs_device {
            Some(self.sensors(device_id)?)
        } else {
            None
        };
        Ok(self.profile.specs(sensors.as_ref()))
    }

    /// The profile's own ranges: the same for every device it describes.
    fn advertised(&self) -> Result<Vec<FieldSpec>, DriverError> {
        Ok(self.profile.specs(None))
    }
}
