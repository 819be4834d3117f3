//! One simulated device as a pure state machine: time is passed in, nothing sleeps.
//!
//! Accepted commands wait in a queue with the instant they take effect; the queue is drained
//! lazily whenever the device is observed or changed ([`DeviceModel::advance`]). This keeps
//! the cost per command constant with no timer tasks, which matters when a benchmark drives
//! 10,000 devices. Because the queue is kept sorted and drained in order, the result does not
//! depend on when (or how often) the device happens to be observed.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::fault::{Fault, FaultKind, Faults};
use crate::model::{AcState, Command, SensorField};

/// How fast the room temperature approaches the target while the unit conditions air, °C/s.
pub const ROOM_DRIFT_PER_SECOND: f64 = 0.1;

/// A command accepted but not yet applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// The id the control endpoint answered with.
    pub request_id: String,
    /// When the control endpoint accepted it.
    pub accepted_at: Instant,
    /// When it takes effect (never before an earlier command's `apply_at`).
    pub apply_at: Instant,
    /// What it sets.
    pub command: Command,
}

/// What became of a command the device took: applied (as it was applied,
/// clamped if a clamp fault was on) or dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    /// The id the control endpoint answered with.
    pub request_id: String,
    /// When the control endpoint accepted it.
    pub accepted_at: Instant,
    /// When it took effect, or was dropped.
    pub settled_at: Instant,
    /// False when the device dropped it (offline or ignoring commands).
    pub applied: bool,
    /// What it set, as applied.
    pub command: Command,
}

/// Commands remembered in [`DeviceModel::settled`]: enough for a test or a
/// benchmark to look up recent commands; older ones fall out.
pub const MAX_SETTLED: usize = 1024;

/// What a device reports at an instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The reported state (frozen while offline).
    pub state: AcState,
    /// False while the `offline` fault is active.
    pub online: bool,
    /// When the device last reported: the read instant while online, the instant it went
    /// offline otherwise.
    pub reported_at: Instant,
}

/// The simulated device.
#[derive(Debug, Clone)]
pub struct DeviceModel {
    state: AcState,
    /// Instant up to which the room temperature has been integrated.
    integrated_to: Instant,
    /// Last instant the device reported while online.
    reported_at: Instant,
    pending: VecDeque<Pending>,
    settled: VecDeque<Settled>,
    faults: Faults,
    delay: Duration,
    jitter: Duration,
    hidden: BTreeSet<SensorField>,
}

impl DeviceModel {
    /// A device in the documented initial state at `now`.
    pub fn new(now: Instant, delay: Duration, jitter: Duration) -> Self {
        DeviceModel {
            state: AcState::default(),
            integrated_to: now,
            reported_at: now,
            pending: VecDeque::new(),
            settled: VecDeque::new(),
            faults: Faults::default(),
            delay,
            jitter,
            hidden: BTreeSet::new(),
        }
    }

    /// Brings the device up to `now`: applies (or, while offline, drops) every command due
    /// by then, in order, and lets the room temperature drift in between.
    pub fn advance(&mut self, now: Instant) {
        while self.pending.front().is_some_and(|p| p.apply_at <= now) {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            self.integrate(p.apply_at);
            let applied = !self.faults.offline();
            let command = if applied {
                let cmd = self.clamped(p.command);
                self.state.apply(&cmd);
                cmd
            } else {
                p.command
            };
            self.settle(Settled {
                request_id: p.request_id,
                accepted_at: p.accepted_at,
                settled_at: p.apply_at,
                applied,
                command,
            });
        }
        self.integrate(now);
        if !self.faults.offline() {
            self.reported_at = self.reported_at.max(now);
        }
    }

    /// Accepts a command at `now`. It is queued to apply after the delay plus `jitter`
    /// (a sample the caller drew from `0..=self.jitter()`), unless the device is offline or
    /// ignores commands, in which case it is dropped. Returns whether it was queued.
    pub fn accept(
        &mut self,
        now: Instant,
        request_id: String,
        command: Command,
        jitter: Duration,
    ) -> bool {
        self.advance(now);
        if self.faults.offline() || self.faults.ignore() {
            self.settle(Settled {
                request_id,
                accepted_at: now,
                settled_at: now,
                applied: false,
                command,
            });
            return false;
        }
        let mut apply_at = now + self.delay + jitter.min(self.jitter);
        if let Some(last) = self.pending.back() {
            // Acceptance order wins over jitter: a later command never overtakes.
            apply_at = apply_at.max(last.apply_at);
        }
        self.pending.push_back(Pending {
            request_id,
            accepted_at: now,
            apply_at,
            command,
        });
        true
    }

    fn settle(&mut self, settled: Settled) {
        self.settled.push_back(settled);
        if self.settled.len() > MAX_SETTLED {
            self.settled.pop_front();
        }
    }

    /// Commands applied or dropped (as of the last `advance`), oldest first,
    /// at most [`MAX_SETTLED`].
    pub fn settled(&self) -> impl ExactSizeIterator<Item = &Settled> {
        self.settled.iter()
    }

    /// Someone at the device (the wall remote) sets `command` at `now`: it
    /// takes effect at once, ahead of anything queued, and is not clamped.
    /// An offline device is out of reach; returns whether it was set.
    pub fn set_by_hand(&mut self, now: Instant, command: Command) -> bool {
        self.advance(now);
        if self.faults.offline() {
            return false;
        }
        self.state.apply(&command);
        true
    }

    /// What the device reports at `now`.
    pub fn reading(&mut self, now: Instant) -> Reading {
        self.advance(now);
        Reading {
            state: self.state.clone(),
            online: !self.faults.offline(),
            reported_at: self.reported_at,
        }
    }

    /// Activates a fault from `now` on.
    pub fn set_fault(&mut self, now: Instant, fault: Fault) {
        self.advance(now);
        self.faults.set(fault);
    }

    /// Clears one fault kind from `now` on.
    pub fn clear_fault(&mut self, now: Instant, kind: FaultKind) {
        self.advance(now);
        self.faults.clear(kind);
    }

    /// Clears every fault from `now` on.
    pub fn clear_faults(&mut self, now: Instant) {
        self.advance(now);
        self.faults.clear_all();
    }

    /// The active faults.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Commands accepted and not yet due (as of the last `advance`).
    pub fn pending(&self) -> impl ExactSizeIterator<Item = &Pending> {
        self.pending.iter()
    }

    /// Base actuation delay for commands accepted from now on.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Maximum extra random delay for commands accepted from now on.
    pub fn jitter(&self) -> Duration {
        self.jitter
    }

    /// Changes delay and jitter for commands accepted from now on.
    pub fn set_timing(&mut self, delay: Duration, jitter: Duration) {
        self.delay = delay;
        self.jitter = jitter;
    }

    /// Sensor fields the sensor endpoint omits.
    pub fn hidden(&self) -> &BTreeSet<SensorField> {
        &self.hidden
    }

    /// Replaces the set of hidden sensor fields.
    pub fn set_hidden(&mut self, hidden: BTreeSet<SensorField>) {
        self.hidden = hidden;
    }

    /// The command as the device would apply it under the current clamp fault.
    fn clamped(&self, mut cmd: Command) -> Command {
        if let (Some(t), Some((min, max, round))) = (cmd.target_temperature, self.faults.clamp()) {
            let t = if round { t.round() } else { t };
            cmd.target_temperature = Some(t.clamp(min, max));
        }
        cmd
    }

    /// Moves the room temperature toward the target for the time up to `to`. Frozen while
    /// offline, since an offline device reports its last values.
    fn integrate(&mut self, to: Instant) {
        if to <= self.integrated_to {
            return;
        }
        let dt = (to - self.integrated_to).as_secs_f64();
        self.integrated_to = to;
        if self.faults.offline() || !self.state.conditions_air() {
            return;
        }
        let gap = self.state.target_temperature - self.state.room_temperature;
        let step = (ROOM_DRIFT_PER_SECOND * dt).min(gap.abs());
        self.state.room_temperature += step.copysign(gap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Mode, Power};

    const DELAY: Duration = Duration::from_secs(4);

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn temp(t: f64) -> Command {
        Command {
            target_temperature: Some(t),
            ..Command::default()
        }
    }

    fn device() -> (DeviceModel, Instant) {
        let t0 = Instant::now();
        (DeviceModel::new(t0, DELAY, Duration::ZERO), t0)
    }

    #[test]
    fn a_command_applies_exactly_at_its_delay() {
        let (mut d, t0) = device();
        assert!(d.accept(t0, "r1".into(), temp(22.0), Duration::ZERO));
        assert_eq!(d.reading(t0 + secs(3.999)).state.target_temperature, 26.0);
        assert_eq!(d.reading(t0 + DELAY).state.target_temperature, 22.0);
        assert_eq!(d.pending().len(), 0);
    }

    #[test]
    fn later_commands_never_overtake_earlier_ones_despite_jitter() {
        let t0 = Instant::now();
        let mut d = DeviceModel::new(t0, DELAY, secs(2.0));
        d.accept(t0, "a".into(), temp(20.0), secs(2.0));
        d.accept(t0 + secs(0.1), "b".into(), temp(21.0), Duration::ZERO);
        let p: Vec<_> = d.pending().map(|p| p.apply_at).collect();
        assert_eq!(p, vec![t0 + secs(6.0), t0 + secs(6.0)]);
        assert_eq!(d.reading(t0 + secs(6.0)).state.target_temperature, 21.0);
    }

    #[test]
    fn every_command_is_remembered_as_applied_or_dropped() {
        let (mut d, t0) = device();
        d.accept(t0, "a".into(), temp(22.0), Duration::ZERO);
        d.set_fault(t0 + secs(1.0), Fault::Ignore);
        d.accept(t0 + secs(1.0), "b".into(), temp(23.0), Duration::ZERO);
        d.reading(t0 + DELAY);
        let settled: Vec<(&str, bool, Instant)> = d
            .settled()
            .map(|s| (s.request_id.as_str(), s.applied, s.settled_at))
            .collect();
        assert_eq!(
            settled,
            vec![("b", false, t0 + secs(1.0)), ("a", true, t0 + DELAY)]
        );
    }

    #[test]
    fn a_value_set_by_hand_takes_effect_at_once_unless_offline() {
        let (mut d, t0) = device();
        assert!(d.set_by_hand(t0, temp(19.0)));
        assert_eq!(d.reading(t0).state.target_temperature, 19.0);
        d.set_fault(t0, Fault::Offline);
        assert!(!d.set_by_hand(t0, temp(20.0)));
        assert_eq!(d.reading(t0).state.target_temperature, 19.0);
    }

    #[test]
    fn jitter_larger_than_configured_is_capped() {
        let (mut d, t0) = device();
        d.accept(t0, "a".into(), temp(20.0), secs(100.0));
        assert_eq!(d.pending().next().unwrap().apply_at, t0 + DELAY);
    }

    #[test]
    fn the_result_does_not_depend_on_how_often_the_device_is_observed() {
        let (mut often, t0) = device();
        let mut rarely = often.clone();
        for d in [&mut often, &mut rarely] {
            d.accept(t0, "a".into(), temp(20.0), Duration::ZERO);
            d.accept(
                t0 + secs(1.0),
                "b".into(),
                Command {
                    mode: Some(Mode::Fan),
                    ..Command::default()
                },
                Duration::ZERO,
            );
        }
        for i in 0..100 {
            often.reading(t0 + secs(f64::from(i) * 0.1));
        }
        let end = t0 + secs(30.0);
        let (mut a, mut b) = (often.reading(end), rarely.reading(end));
        // Integrating in many small steps differs only by float rounding.
        assert!((a.state.room_temperature - b.state.room_temperature).abs() < 1e-9);
        a.state.room_temperature = 0.0;
        b.state.room_temperature = 0.0;
        assert_eq!(a, b);
    }

    #[test]
    fn room_temperature_drifts_toward_target_only_while_conditioning() {
        let (mut d, t0) = device();
        // Cooling from 27.4 to 26.0 at 0.1 °C/s.
        let r = d.reading(t0 + secs(10.0)).state.room_temperature;
        assert!((r - 26.4).abs() < 1e-9, "{r}");
        // Never overshoots.
        assert_eq!(d.reading(t0 + secs(100.0)).state.room_temperature, 26.0);

        let (mut off, t0) = device();
        off.accept(
            t0,
            "a".into(),
            Command {
                power: Some(Power::Off),
                ..Command::default()
            },
            Duration::ZERO,
        );
        let r = off.reading(t0 + secs(100.0)).state.room_temperature;
        assert!(
            (r - 27.0).abs() < 1e-9,
            "drifts only for the 4 s before power-off: {r}"
        );
    }

    #[test]
    fn offline_drops_pending_and_new_commands_and_freezes_the_reading() {
        let (mut d, t0) = device();
        d.accept(t0, "a".into(), temp(20.0), Duration::ZERO);
        d.set_fault(t0 + secs(1.0), Fault::Offline);
        assert!(!d.accept(t0 + secs(2.0), "b".into(), temp(21.0), Duration::ZERO));
        let r = d.reading(t0 + secs(10.0));
        assert!(!r.online);
        assert_eq!(r.state.target_temperature, 26.0);
        assert_eq!(r.reported_at, t0 + secs(1.0));
        d.clear_faults(t0 + secs(11.0));
        let r = d.reading(t0 + secs(20.0));
        assert!(r.online);
        assert_eq!(
            r.state.target_temperature, 26.0,
            "the dropped command stays dropped"
        );
    }

    #[test]
    fn commands_pending_when_offline_ends_still_apply() {
        let (mut d, t0) = device();
        d.accept(t0, "a".into(), temp(20.0), Duration::ZERO);
        d.set_fault(t0 + secs(1.0), Fault::Offline);
        d.clear_fault(t0 + secs(2.0), FaultKind::Offline);
        assert_eq!(d.reading(t0 + DELAY).state.target_temperature, 20.0);
    }

    #[test]
    fn ignore_drops_commands_but_stays_online() {
        let (mut d, t0) = device();
        d.set_fault(t0, Fault::Ignore);
        assert!(!d.accept(t0, "a".into(), temp(20.0), Duration::ZERO));
        let r = d.reading(t0 + secs(10.0));
        assert!(r.online);
        assert_eq!(r.state.target_temperature, 26.0);
    }

    #[test]
    fn clamp_limits_and_rounds_the_applied_temperature() {
        let (mut d, t0) = device();
        d.set_fault(
            t0,
            Fault::Clamp {
                min: 18.0,
                max: 28.0,
                round: false,
            },
        );
        d.accept(t0, "a".into(), temp(30.0), Duration::ZERO);
        assert_eq!(d.reading(t0 + DELAY).state.target_temperature, 28.0);
        d.set_fault(
            t0 + DELAY,
            Fault::Clamp {
                min: 18.0,
                max: 28.0,
                round: true,
            },
        );
        d.accept(t0 + DELAY, "b".into(), temp(22.5), Duration::ZERO);
        assert_eq!(d.reading(t0 + DELAY * 2).state.target_temperature, 23.0);
    }
}
