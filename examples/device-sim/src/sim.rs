//! The shared simulator handle: the fixed set of devices, each behind its own lock, plus
//! per-device request counters.
//!
//! The device set never changes after start-up, so lookups need no lock at all; each device
//! has its own `std::sync::Mutex`, held only for the few microseconds of a state update and
//! never across an `.await`. Thousands of sensor reads per second across many devices
//! therefore do not contend.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::device::{DeviceModel, Reading};
use crate::error::SimError;
use crate::fault::{Fault, FaultKind};
use crate::model::{AcState, Command, SensorField};

/// A device's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Stable id used in URLs, e.g. `ac-living`.
    pub id: String,
    /// Human-readable name, e.g. `Living room`.
    pub name: String,
}

impl DeviceSpec {
    /// A device with `id` and `name`.
    pub fn new(id: impl Into<String>, name: impl Into<String>) -> Self {
        DeviceSpec {
            id: id.into(),
            name: name.into(),
        }
    }

    /// `n` generated devices `ac-00000`, `ac-00001`, … named `AC 00000`, …, for load tests.
    pub fn numbered(n: usize) -> Vec<DeviceSpec> {
        (0..n)
            .map(|i| DeviceSpec::new(format!("ac-{i:05}"), format!("AC {i:05}")))
            .collect()
    }
}

/// Everything the simulator is started with.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The devices, in listing order.
    pub devices: Vec<DeviceSpec>,
    /// Actuation delay of every device at start-up.
    pub delay: Duration,
    /// Maximum uniform random extra delay per command.
    pub jitter: Duration,
    /// Bearer token every `/api/v1` request must carry; `None` for no auth.
    pub token: Option<String>,
    /// Faults active from start-up, as (device id, fault).
    pub faults: Vec<(String, Fault)>,
    /// Sensor fields hidden from start-up, as (device id, field).
    pub hidden_fields: Vec<(String, SensorField)>,
}

impl Default for SimConfig {
    /// `ac-living` and `ac-bedroom`, 4 s delay, no jitter, no token, no faults.
    fn default() -> Self {
        SimConfig {
            devices: vec![
                DeviceSpec::new("ac-living", "Living room"),
                DeviceSpec::new("ac-bedroom", "Bedroom"),
            ],
            delay: Duration::from_secs(4),
            jitter: Duration::ZERO,
            token: None,
            faults: Vec::new(),
            hidden_fields: Vec::new(),
        }
    }
}

/// Request counts for one device (requests that named it and passed auth, failed or not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// `POST /api/v1/devices/{id}/control` requests.
    pub control: u64,
    /// `GET /api/v1/devices/{id}/sensors` requests.
    pub sensor: u64,
}

/// Request counts for every device, as `GET /_sim/stats` returns them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Counts by device id.
    pub devices: BTreeMap<String, DeviceStats>,
}

/// A command still waiting to apply, as `GET /_sim/devices/{id}` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingView {
    /// The id the control endpoint answered with.
    pub request_id: String,
    /// When it was accepted (RFC 3339, milliseconds).
    pub accepted_at: String,
    /// When it takes effect (RFC 3339, milliseconds).
    pub apply_at: String,
    /// Milliseconds from now until it takes effect.
    pub apply_in_ms: u64,
    /// What it sets, in control spelling.
    pub command: Command,
}

/// The true internal state of one device (`GET /_sim/devices/{id}`).
#[derive(Debug, Clone, Serialize)]
pub struct DeviceView {
    /// Device id.
    pub id: String,
    /// Device name.
    pub name: String,
    /// False while offline.
    pub online: bool,
    /// When the device last reported (RFC 3339, seconds).
    pub updated_at: String,
    /// Current state, sensor spelling, nothing hidden, room temperature unrounded.
    pub state: AcState,
    /// Accepted commands not yet applied, in the order they will apply.
    pub pending: Vec<PendingView>,
    /// Recent commands that were applied or dropped, oldest first: when each
    /// took effect is what completion lag is measured from.
    pub settled: Vec<SettledView>,
    /// Active faults.
    pub faults: Vec<Fault>,
    /// Base actuation delay, ms.
    pub delay_ms: u64,
    /// Maximum random extra delay, ms.
    pub jitter_ms: u64,
    /// Fields the sensor endpoint omits.
    pub hidden_fields: Vec<SensorField>,
    /// Request counts.
    pub requests: DeviceStats,
}

/// A command the device applied or dropped, for `/_sim`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SettledView {
    /// The id the control endpoint answered with.
    pub request_id: String,
    /// When it was accepted (RFC 3339, milliseconds).
    pub accepted_at: String,
    /// When it took effect or was dropped (RFC 3339, milliseconds).
    pub settled_at: String,
    /// The same, in milliseconds since the Unix epoch.
    pub settled_at_ms: u64,
    /// False when the device dropped it (offline, or ignoring commands).
    pub applied: bool,
    /// What it set, as applied (clamped if a clamp fault was on).
    pub command: Command,
}

/// What a successful sensor read needs: the reading and which fields to leave out.
pub(crate) struct SensorRead {
    pub reading: Reading,
    pub hidden: BTreeSet<SensorField>,
    pub updated_at: String,
}

/// How a device answers a sensor read, decided before the read is made.
pub(crate) enum SensorPlan {
    /// Answer normally after `latency`.
    Answer { latency: Duration },
    /// Fail with 503 after `latency + hang`.
    Fail { latency: Duration, hang: Duration },
}

struct Device {
    spec: DeviceSpec,
    model: Mutex<DeviceModel>,
    control: AtomicU64,
    sensor: AtomicU64,
}

impl Device {
    fn model(&self) -> MutexGuard<'_, DeviceModel> {
        // A panic while holding the lock cannot leave the model half-updated in a way that
        // matters for a simulator; keep serving.
        self.model.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            control: self.control.load(Ordering::Relaxed),
            sensor: self.sensor.load(Ordering::Relaxed),
        }
    }
}

struct Inner {
    devices: Vec<Device>,
    index: HashMap<String, usize>,
    token: Option<String>,
    started: Instant,
    started_wall: SystemTime,
    request_prefix: String,
    next_request: AtomicU64,
}

/// Handle to a running simulation. Cheap to clone; every clone sees the same devices.
///
/// Tests can use it next to the HTTP API to inspect true state, read stats or inject faults.
#[derive(Clone)]
pub struct Sim {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("devices", &self.inner.devices.len())
            .field("token", &self.inner.token.is_some())
            .finish()
    }
}

impl Sim {
    /// Builds the devices from `config`. Fails on an empty or duplicated device list and on
    /// faults or hidden fields that name an unknown device.
    pub fn new(config: SimConfig) -> Result<Sim, SimError> {
        if config.devices.is_empty() {
            return Err(SimError::NoDevices);
        }
        let started = Instant::now();
        let mut index = HashMap::with_capacity(config.devices.len());
        let mut devices = Vec::with_capacity(config.devices.len());
        for (i, spec) in config.devices.into_iter().enumerate() {
            if index.insert(spec.id.clone(), i).is_some() {
                return Err(SimError::DuplicateDevice(spec.id));
            }
            devices.push(Device {
                spec,
                model: Mutex::new(DeviceModel::new(
                    started.into_std(),
                    config.delay,
                    config.jitter,
                )),
                control: AtomicU64::new(0),
                sensor: AtomicU64::new(0),
            });
        }
        let started_wall = SystemTime::now();
        let millis = started_wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let sim = Sim {
            inner: Arc::new(Inner {
                devices,
                index,
                token: config.token,
                started,
                started_wall,
                request_prefix: format!("req-{millis:x}"),
                next_request: AtomicU64::new(1),
            }),
        };
        for (id, fault) in config.faults {
            sim.set_fault(&id, fault)?;
        }
        let mut hidden: BTreeMap<String, BTreeSet<SensorField>> = BTreeMap::new();
        for (id, field) in config.hidden_fields {
            sim.device(&id)?;
            hidden.entry(id).or_default().insert(field);
        }
        for (id, fields) in hidden {
            sim.set_hidden_fields(&id, fields)?;
        }
        Ok(sim)
    }

    /// The devices, in listing order.
    pub fn devices(&self) -> impl Iterator<Item = &DeviceSpec> {
        self.inner.devices.iter().map(|d| &d.spec)
    }

    /// Whether a device has this id.
    pub fn has_device(&self, id: &str) -> bool {
        self.inner.index.contains_key(id)
    }

    /// The bearer token `/api/v1` requires, if any.
    pub fn token(&self) -> Option<&str> {
        self.inner.token.as_deref()
    }

    /// The true internal state of device `id`.
    pub fn inspect(&self, id: &str) -> Result<DeviceView, SimError> {
        let device = self.device(id)?;
        let requests = device.stats();
        let mut model = device.model();
        let now = self.now();
        let reading = model.reading(now.into_std());
        let pending = model
            .pending()
            .map(|p| PendingView {
                request_id: p.request_id.clone(),
                accepted_at: self.rfc3339_millis(p.accepted_at),
                apply_at: self.rfc3339_millis(p.apply_at),
                apply_in_ms: millis(p.apply_at.saturating_duration_since(now.into_std())),
                command: p.command.clone(),
            })
            .collect();
        let settled = model
            .settled()
            .map(|c| SettledView {
                request_id: c.request_id.clone(),
                accepted_at: self.rfc3339_millis(c.accepted_at),
                settled_at: self.rfc3339_millis(c.settled_at),
                settled_at_ms: self.epoch_millis(c.settled_at),
                applied: c.applied,
                command: c.command.clone(),
            })
            .collect();
        Ok(DeviceView {
            id: device.spec.id.clone(),
            name: device.spec.name.clone(),
            online: reading.online,
            updated_at: self.rfc3339(reading.reported_at),
            state: reading.state,
            pending,
            settled,
            faults: model.faults().list().to_vec(),
            delay_ms: millis(model.delay()),
            jitter_ms: millis(model.jitter()),
            hidden_fields: model.hidden().iter().copied().collect(),
            requests,
        })
    }

    /// Request counts of every device.
    pub fn stats(&self) -> Stats {
        Stats {
            devices: self
                .inner
                .devices
                .iter()
                .map(|d| (d.spec.id.clone(), d.stats()))
                .collect(),
        }
    }

    /// Sets every request count back to zero.
    pub fn reset_stats(&self) {
        for d in &self.inner.devices {
            d.control.store(0, Ordering::Relaxed);
            d.sensor.store(0, Ordering::Relaxed);
        }
    }

    /// Activates `fault` on device `id` (replacing one of the same kind); returns the active
    /// faults.
    pub fn set_fault(&self, id: &str, fault: Fault) -> Result<Vec<Fault>, SimError> {
        self.with_model(id, |m, now| {
            m.set_fault(now, fault);
            m.faults().list().to_vec()
        })
    }

    /// Clears the fault of `kind` on device `id`, if active; returns the active faults.
    pub fn clear_fault(&self, id: &str, kind: FaultKind) -> Result<Vec<Fault>, SimError> {
        self.with_model(id, |m, now| {
            m.clear_fault(now, kind);
            m.faults().list().to_vec()
        })
    }

    /// Clears every fault on device `id`.
    pub fn clear_faults(&self, id: &str) -> Result<(), SimError> {
        self.with_model(id, |m, now| m.clear_faults(now))
    }

    /// Someone sets `command` on device `id` by hand (the wall remote): at
    /// once, ahead of queued commands. Returns false when the device is
    /// offline and out of reach.
    pub fn set_by_hand(&self, id: &str, command: Command) -> Result<bool, SimError> {
        self.with_model(id, |m, now| m.set_by_hand(now, command))
    }

    /// Changes the actuation delay and jitter of device `id` for commands accepted from now
    /// on (commands already pending keep their time).
    pub fn set_timing(&self, id: &str, delay: Duration, jitter: Duration) -> Result<(), SimError> {
        self.with_model(id, |m, _| m.set_timing(delay, jitter))
    }

    /// Replaces the sensor fields device `id` omits.
    pub fn set_hidden_fields(
        &self,
        id: &str,
        fields: BTreeSet<SensorField>,
    ) -> Result<(), SimError> {
        self.with_model(id, |m, _| m.set_hidden(fields))
    }

    /// Counts a control request and returns the device's current latency fault.
    pub(crate) fn begin_control(&self, id: &str) -> Result<Duration, SimError> {
        let device = self.device(id)?;
        device.control.fetch_add(1, Ordering::Relaxed);
        Ok(device.model().faults().latency())
    }

    /// Accepts `command` for device `id`; returns the request id. Whether the device will
    /// apply it is deliberately not returned, as the real API would not know either.
    pub(crate) fn accept(&self, id: &str, command: Command) -> Result<String, SimError> {
        let device = self.device(id)?;
        let n = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let request_id = format!("{}-{n:06}", self.inner.request_prefix);
        let mut model = device.model();
        let jitter = random_upto(model.jitter());
        model.accept(self.now().into_std(), request_id.clone(), command, jitter);
        Ok(request_id)
    }

    /// Counts a sensor request and decides, from the device's faults, how it will go.
    pub(crate) fn begin_sensor(&self, id: &str) -> Result<SensorPlan, SimError> {
        let device = self.device(id)?;
        device.sensor.fetch_add(1, Ordering::Relaxed);
        let (latency, flaky) = {
            let model = device.model();
            (model.faults().latency(), model.faults().flaky())
        };
        Ok(match flaky {
            Some((rate, hang)) if rand::random_bool(rate) => SensorPlan::Fail { latency, hang },
            _ => SensorPlan::Answer { latency },
        })
    }

    /// Reads device `id` now.
    pub(crate) fn read_sensors(&self, id: &str) -> Result<SensorRead, SimError> {
        let device = self.device(id)?;
        let mut model = device.model();
        let reading = model.reading(self.now().into_std());
        let hidden = model.hidden().clone();
        drop(model);
        Ok(SensorRead {
            updated_at: self.rfc3339(reading.reported_at),
            reading,
            hidden,
        })
    }

    fn device(&self, id: &str) -> Result<&Device, SimError> {
        self.inner
            .index
            .get(id)
            .map(|&i| &self.inner.devices[i])
            .ok_or_else(|| SimError::UnknownDevice(id.to_owned()))
    }

    fn with_model<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut DeviceModel, std::time::Instant) -> T,
    ) -> Result<T, SimError> {
        let device = self.device(id)?;
        let mut model = device.model();
        Ok(f(&mut model, self.now().into_std()))
    }

    /// The simulator's clock. Tokio's, so tests can pause and advance it.
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self, at: std::time::Instant) -> SystemTime {
        self.inner.started_wall + at.saturating_duration_since(self.inner.started.into_std())
    }

    fn rfc3339(&self, at: std::time::Instant) -> String {
        humantime::format_rfc3339_seconds(self.wall(at)).to_string()
    }

    fn epoch_millis(&self, at: std::time::Instant) -> u64 {
        millis(
            self.wall(at)
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
        )
    }

    fn rfc3339_millis(&self, at: std::time::Instant) -> String {
        humantime::format_rfc3339_millis(self.wall(at)).to_string()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A uniform random duration in `0..=max`, at millisecond resolution.
fn random_upto(max: Duration) -> Duration {
    let max = millis(max);
    if max == 0 {
        Duration::ZERO
    } else {
        Duration::from_millis(rand::random_range(0..=max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_naming_an_unknown_device_is_rejected() {
        let config = SimConfig {
            faults: vec![("ac-garage".into(), Fault::Offline)],
            ..SimConfig::default()
        };
        assert_eq!(
            Sim::new(config).unwrap_err().to_string(),
            "unknown device `ac-garage`"
        );
    }

    #[test]
    fn duplicate_and_empty_device_lists_are_rejected() {
        let dup = SimConfig {
            devices: vec![DeviceSpec::new("a", "A"), DeviceSpec::new("a", "B")],
            ..SimConfig::default()
        };
        assert!(matches!(Sim::new(dup), Err(SimError::DuplicateDevice(id)) if id == "a"));
        let empty = SimConfig {
            devices: vec![],
            ..SimConfig::default()
        };
        assert!(matches!(Sim::new(empty), Err(SimError::NoDevices)));
    }

    #[test]
    fn numbered_devices_are_zero_padded() {
        let d = DeviceSpec::numbered(10_001);
        assert_eq!(d[0].id, "ac-00000");
        assert_eq!(d[10_000].id, "ac-10000");
    }

    #[test]
    fn start_up_faults_and_hidden_fields_are_active() {
        let sim = Sim::new(SimConfig {
            faults: vec![("ac-living".into(), Fault::Ignore)],
            hidden_fields: vec![("ac-bedroom".into(), SensorField::RoomTemperature)],
            ..SimConfig::default()
        })
        .unwrap();
        assert_eq!(
            sim.inspect("ac-living").unwrap().faults,
            vec![Fault::Ignore]
        );
        assert_eq!(
            sim.inspect("ac-bedroom").unwrap().hidden_fields,
            vec![SensorField::RoomTemperature]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn accepted_commands_apply_after_the_delay_on_the_tokio_clock() {
        let sim = Sim::new(SimConfig::default()).unwrap();
        let cmd = Command {
            target_temperature: Some(21.0),
            ..Command::default()
        };
        let id = sim.accept("ac-living", cmd).unwrap();
        let view = sim.inspect("ac-living").unwrap();
        assert_eq!(view.pending[0].request_id, id);
        assert_eq!(view.pending[0].apply_in_ms, 4000);
        assert_eq!(view.state.target_temperature, 26.0);
        tokio::time::advance(Duration::from_secs(4)).await;
        let view = sim.inspect("ac-living").unwrap();
        assert!(view.pending.is_empty());
        assert_eq!(view.state.target_temperature, 21.0);
    }

    #[test]
    fn request_ids_are_unique() {
        let sim = Sim::new(SimConfig::default()).unwrap();
        let a = sim.accept("ac-living", Command::default()).unwrap();
        let b = sim.accept("ac-living", Command::default()).unwrap();
        assert_ne!(a, b);
    }
}
