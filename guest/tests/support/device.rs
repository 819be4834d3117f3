//! A reference device that knows the truth: every command it took, when it
//! applied it (or dropped it), and what it held at every instant.
//!
//! It behaves like the simulator: commands apply in the order they were
//! taken, each `delay` plus some jitter after it was taken (never before an
//! earlier one); while `offline` the API still answers and due commands are
//! dropped; `ignore` drops commands as they arrive; `clamp` applies a
//! clamped temperature; `flaky` fails a share of reads; `latency` makes
//! every answer take longer. A person at the wall can set a value at once.

use settle_devices::model::{Field, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// One control request the device's API took.
#[derive(Clone, Debug)]
pub struct Taken {
    pub request_id: String,
    pub values: BTreeMap<Field, Value>,
    pub accepted_at: u64,
    pub apply_at: u64,
    pub outcome: Outcome,
    /// Applying it changed what the device held (a clamped value may not).
    pub changed: bool,
    /// Where in the history the changes that came after it begin.
    after: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Applied(u64),
    Dropped(u64),
}

/// Faults switched on and off by the script.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    pub offline: bool,
    pub ignore: bool,
    /// Temperatures are applied clamped to this range.
    pub clamp: Option<(f64, f64)>,
    /// The share of sensor reads that fail.
    pub flaky: f64,
    /// Every answer takes this long.
    pub latency_ms: u64,
}

pub struct RefDevice {
    pub delay_ms: u64,
    pub jitter_ms: u64,
    pub faults: Faults,
    /// Fields the sensors do not report.
    pub hidden: BTreeSet<Field>,
    /// Every request taken, in order.
    pub log: Vec<Taken>,
    pending: VecDeque<usize>,
    state: BTreeMap<Field, Value>,
    /// Each change of a field: when, and the new value.
    history: Vec<(u64, Field, Value)>,
    /// When reads became unreliable (flaky or slow) or reliable again.
    degraded: Vec<(u64, bool)>,
    next_request: u64,
}

impl RefDevice {
    pub fn new(delay_ms: u64, jitter_ms: u64, start_ms: u64) -> RefDevice {
        let state: BTreeMap<Field, Value> = [
            (Field::Power, Value::choice("on")),
            (Field::Mode, Value::choice("cool")),
            (Field::TargetTemperature, Value::Number(26.0)),
            (Field::FanSpeed, Value::choice("auto")),
            (Field::VaneVertical, Value::choice("auto")),
            (Field::VaneHorizontal, Value::choice("auto")),
        ]
        .into_iter()
        .collect();
        let history = state
            .iter()
            .map(|(f, v)| (start_ms, *f, v.clone()))
            .collect();
        RefDevice {
            delay_ms,
            jitter_ms,
            faults: Faults::default(),
            hidden: BTreeSet::new(),
            log: Vec::new(),
            pending: VecDeque::new(),
            state,
            history,
            degraded: Vec::new(),
            next_request: 0,
        }
    }

    /// Applies (or drops) every command due by `now`, in order.
    pub fn advance(&mut self, now: u64) {
        while let Some(&i) = self.pending.front() {
            let at = self.log[i].apply_at;
            if at > now {
                break;
            }
            self.pending.pop_front();
            if self.faults.offline {
                self.log[i].outcome = Outcome::Dropped(at);
                continue;
            }
            let values = self.log[i].values.clone();
            let mut changed = false;
            for (field, value) in values {
                let value = match (field, value, self.faults.clamp) {
                    (Field::TargetTemperature, Value::Number(t), Some((lo, hi))) => {
                        Value::Number(t.clamp(lo, hi))
                    }
                    (_, value, _) => value,
                };
                changed |= self.set(at, field, value);
            }
            self.log[i].outcome = Outcome::Applied(at);
            self.log[i].changed = changed;
            self.log[i].after = self.history.len();
        }
    }

    fn set(&mut self, at: u64, field: Field, value: Value) -> bool {
        if self.state.get(&field) == Some(&value) {
            return false;
        }
        self.history.push((at, field, value.clone()));
        self.state.insert(field, value);
        true
    }

    /// The API takes a command at `now` (`jitter` drawn by the caller from
    /// `0..=jitter_ms`). Returns the request id; the API answers the same
    /// whether or not the device will act on it.
    pub fn take(&mut self, now: u64, values: BTreeMap<Field, Value>, jitter: u64) -> String {
        self.advance(now);
        self.next_request += 1;
        let request_id = format!("r{}", self.next_request);
        let mut apply_at = now + self.delay_ms + jitter.min(self.jitter_ms);
        if let Some(&last) = self.pending.back() {
            apply_at = apply_at.max(self.log[last].apply_at);
        }
        let dropped = self.faults.offline || self.faults.ignore;
        self.log.push(Taken {
            request_id: request_id.clone(),
            values,
            accepted_at: now,
            apply_at,
            outcome: if dropped {
                Outcome::Dropped(now)
            } else {
                Outcome::Pending
            },
            changed: false,
            after: 0,
        });
        if !dropped {
            self.pending.push_back(self.log.len() - 1);
        }
        request_id
    }

    /// What the sensors report at `now`: the visible fields, and whether
    /// the device is online (while offline it reports the values it had).
    pub fn report(&mut self, now: u64) -> (bool, BTreeMap<Field, Value>) {
        self.advance(now);
        let values = self
            .state
            .iter()
            .filter(|(f, _)| !self.hidden.contains(f))
            .map(|(f, v)| (*f, v.clone()))
            .collect();
        (!self.faults.offline, values)
    }

    /// A person at the wall sets a value at `now`.
    pub fn wall(&mut self, now: u64, field: Field, value: Value) {
        self.advance(now);
        if !self.faults.offline {
            self.set(now, field, value);
        }
    }

    pub fn set_offline(&mut self, now: u64, offline: bool) {
        self.advance(now);
        self.faults.offline = offline;
    }

    /// What the device held for `field` at `at` (truth, not the sensors).
    pub fn held(&self, field: Field, at: u64) -> Option<&Value> {
        self.history
            .iter()
            .rev()
            .find(|(t, f, _)| *f == field && *t <= at)
            .map(|(_, _, v)| v)
    }

    pub fn request(&self, request_id: &str) -> Option<&Taken> {
        self.log.iter().find(|t| t.request_id == request_id)
    }

    /// The requests taken before `request_id` (in order), it excluded.
    pub fn before(&self, request_id: &str) -> impl Iterator<Item = &Taken> {
        self.log
            .iter()
            .take_while(move |t| t.request_id != request_id)
    }

    /// Notes that reads are (or no longer are) flaky or slow from `now`.
    pub fn note_reads(&mut self, now: u64) {
        let degraded = self.faults.flaky > 0.0 || self.faults.latency_ms > 0;
        self.degraded.push((now, degraded));
    }

    /// Whether reads were flaky or slow at any time in `from..=to`, when a
    /// short-lived state can slip between them.
    pub fn reads_degraded(&self, from: u64, to: u64) -> bool {
        let before = self
            .degraded
            .iter()
            .rev()
            .find(|(t, _)| *t <= from)
            .is_some_and(|(_, d)| *d);
        before
            || self
                .degraded
                .iter()
                .any(|(t, d)| *d && (from..=to).contains(t))
    }

    /// How long what `taken` applied stayed before something changed one of
    /// its fields again (`u64::MAX` if nothing did).
    pub fn visible_for(&self, taken: &Taken) -> u64 {
        let Outcome::Applied(at) = taken.outcome else {
            return 0;
        };
        self.history[taken.after..]
            .iter()
            .find(|(_, f, _)| taken.values.contains_key(f))
            .map_or(u64::MAX, |(t, _, _)| t - at)
    }

    /// Whether the request was still waiting to be applied at `at`.
    pub fn pending_at(taken: &Taken, at: u64) -> bool {
        match taken.outcome {
            Outcome::Pending => true,
            Outcome::Applied(t) | Outcome::Dropped(t) => t > at,
        }
    }
}
