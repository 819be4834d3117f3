//! The invariant checker: judges a finished run from the clients' ledger,
//! each acknowledged task's final view (read back through a replica's
//! `get_task`) and the simulator's own records (what each device applied or
//! dropped, when, and how many control requests it got).
//!
//! Where it is lenient, and why:
//! - A command attempt that got no answer (a replica killed mid-call, Redis
//!   down) is not an acknowledged task, so it is not checked for loss; but
//!   it may have reached the device, so it counts towards that device's
//!   control-request bound like a task.
//! - A crash between a send and the write that records it leaves the task
//!   `working` in the store with its send not recorded; the next replica to
//!   advance it sends again (commands are absolute, so this is safe). The
//!   bound allows one extra control request per device for every kill or
//!   Redis restart.
//! - A `completed` task's read-back is matched against every value the
//!   device held from one read window (two HTTP timeouts) before the
//!   completion was stamped until the stamp: the read happens before the
//!   stamp, and a later command may land in between.
//! - An ended task is removed from the store once its TTL has passed (by
//!   design), so the clients watch every task to its end and keep the first
//!   ended view; a task the final read-back no longer finds is lost only if
//!   it was never seen ended, or is gone before its TTL.
//! - The TTL is enforced when a task is advanced, so a task may end up to
//!   `margin` after its TTL: the margin covers a lease held by a killed
//!   replica, a Redis outage and a poll.

use super::ledger::{Ledger, is_terminal};
use device_sim::DeviceView;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// The plugin's send policy and the margins the checker allows.
#[derive(Clone, Debug)]
pub struct Policy {
    pub ttl_ms: u64,
    pub margin_ms: u64,
    pub poll_interval_ms: u64,
    pub http_timeout_ms: u64,
}

/// Mirrors the plugin's `backoff` (guest/src/task/schedule.rs): the wait
/// before send attempt `n + 1`, doubling from the poll interval up to 30 s.
fn backoff(poll_interval_ms: u64, n: u32) -> u64 {
    let factor = 1u64 << n.saturating_sub(1).min(10);
    poll_interval_ms.max(1).saturating_mul(factor).min(30_000)
}

impl Policy {
    /// The most control requests one task may make: the first send, then
    /// one more after each back-off that still starts within the TTL.
    pub fn max_sends(&self) -> u64 {
        let (mut at, mut sends) = (0u64, 1u64);
        for n in 1.. {
            at += backoff(self.poll_interval_ms, n);
            if at > self.ttl_ms {
                break;
            }
            sends += 1;
        }
        sends
    }
}

/// What the checker is given.
pub struct Evidence<'a> {
    pub ledger: &'a Ledger,
    /// Each acknowledged task's last view, or why it could not be read.
    pub finals: &'a HashMap<String, Result<Value, String>>,
    /// The simulator's view of each device at the end.
    pub devices: &'a BTreeMap<String, DeviceView>,
    /// Each device's target temperature before the run.
    pub initial_targets: &'a BTreeMap<String, f64>,
    /// When the final read-back started, in ms since the epoch.
    pub read_at_ms: u64,
    /// Kills plus Redis restarts.
    pub crashes: u64,
    pub policy: Policy,
}

/// The verdict: violations by kind (with a few examples each) and the
/// figures about the tasks.
#[derive(Default, Debug)]
pub struct Verdict {
    pub violations: BTreeMap<&'static str, Vec<String>>,
    pub statuses: BTreeMap<String, u64>,
    pub time_to_end_ms: Vec<u64>,
    pub control_requests: u64,
    pub control_bound: u64,
    /// Tasks seen ended, then gone from the store after their TTL.
    pub removed_after_ttl: u64,
}

impl Verdict {
    fn violation(&mut self, kind: &'static str, detail: String) {
        self.violations.entry(kind).or_default().push(detail);
    }

    pub fn violation_count(&self) -> usize {
        self.violations.values().map(Vec::len).sum()
    }

    /// `p` (0..=100) percentile of the time to end, in ms.
    pub fn percentile(&self, p: usize) -> u64 {
        let mut times = self.time_to_end_ms.clone();
        times.sort_unstable();
        match times.len() {
            0 => 0,
            n => times[((n - 1) * p / 100).min(n - 1)],
        }
    }

    pub fn describe(&self) -> String {
        let mut out = String::new();
        for kind in KINDS {
            let found = self.violations.get(kind).map_or(0, Vec::len);
            let _ = writeln!(out, "  violations {kind:<28} {found}");
            for example in self.violations.get(kind).into_iter().flatten().take(3) {
                let _ = writeln!(out, "    e.g. {example}");
            }
        }
        out
    }
}

/// Every kind of violation, in report order.
pub const KINDS: [&str; 6] = [
    "acknowledged task lost",
    "task not ended",
    "ended task changed",
    "completed without read-back",
    "ended past TTL + margin",
    "control requests over policy",
];

fn millis(rfc3339: &Value) -> Option<u64> {
    let time = humantime::parse_rfc3339(rfc3339.as_str()?).ok()?;
    Some(time.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64)
}

/// Every target temperature `device` held from `from_ms` to `to_ms`.
fn targets_held(device: &DeviceView, initial: f64, from_ms: u64, to_ms: u64) -> Vec<f64> {
    let applied = device
        .settled
        .iter()
        .filter(|s| s.applied)
        .filter_map(|s| s.command.target_temperature.map(|t| (s.settled_at_ms, t)));
    let mut at_start = initial;
    let mut held = Vec::new();
    for (at, target) in applied {
        if at <= from_ms {
            at_start = target;
        } else if at <= to_ms {
            held.push(target);
        }
    }
    held.push(at_start);
    held
}

pub fn check(evidence: &Evidence) -> Verdict {
    let mut verdict = Verdict::default();
    let policy = &evidence.policy;
    for change in evidence.ledger.changes() {
        verdict.violation(
            "ended task changed",
            format!(
                "{}: first {} then {}",
                change.id, change.first, change.later
            ),
        );
    }
    for task in evidence.ledger.acked_tasks() {
        let first = evidence.ledger.first_terminal(&task.id);
        let view = match (evidence.finals.get(&task.id), &first) {
            (Some(Ok(view)), _) => view,
            // Ended tasks are removed from the store once their TTL has
            // passed (by design): seen ended before, and past its TTL now.
            (Some(Err(why)), Some(first))
                if why.contains("no such task")
                    && millis(&first["createdAt"])
                        .is_some_and(|c| c + policy.ttl_ms <= evidence.read_at_ms) =>
            {
                verdict.removed_after_ttl += 1;
                first
            }
            (Some(Err(why)), _) => {
                verdict.violation("acknowledged task lost", format!("{}: {why}", task.id));
                continue;
            }
            (None, _) => {
                verdict.violation("acknowledged task lost", format!("{}: never read", task.id));
                continue;
            }
        };
        let status = view["status"].as_str().unwrap_or("?").to_string();
        *verdict.statuses.entry(status.clone()).or_default() += 1;
        if !is_terminal(view) {
            verdict.violation("task not ended", format!("{}: {view}", task.id));
            continue;
        }
        if let Some(first) = &first
            && first != view
        {
            verdict.violation(
                "ended task changed",
                format!("{}: first {first} at the end {view}", task.id),
            );
        }
        let (Some(created), Some(ended)) =
            (millis(&view["createdAt"]), millis(&view["lastUpdatedAt"]))
        else {
            verdict.violation("task not ended", format!("{}: no times in {view}", task.id));
            continue;
        };
        let took = ended.saturating_sub(created);
        verdict.time_to_end_ms.push(took);
        if took > policy.ttl_ms + policy.margin_ms {
            verdict.violation(
                "ended past TTL + margin",
                format!("{}: ended {took} ms after creation", task.id),
            );
        }
        if status == "completed" {
            let observed = view["result"]["observed"]["target_temperature"].as_f64();
            let sent = view["result"]["sent"]["target_temperature"].as_f64();
            let device = &evidence.devices[&task.device];
            let initial = evidence.initial_targets[&task.device];
            let window = 2 * policy.http_timeout_ms;
            let held = targets_held(device, initial, ended.saturating_sub(window), ended);
            let matches = |v: f64| (v - task.temperature).abs() < 0.01;
            if sent.is_none_or(|s| !matches(s)) || observed.is_none_or(|o| !matches(o)) {
                verdict.violation(
                    "completed without read-back",
                    format!(
                        "{}: asked {} but the task shows {view}",
                        task.id, task.temperature
                    ),
                );
            } else if !held.into_iter().any(matches) {
                verdict.violation(
                    "completed without read-back",
                    format!(
                        "{}: completed at {ended} with {} on {}, which the simulator never applied around then",
                        task.id, task.temperature, task.device
                    ),
                );
            }
        }
    }
    let per_task = policy.max_sends();
    for (device, attempts) in evidence.ledger.attempts() {
        let requests = evidence.devices[&device].requests.control;
        let bound = attempts * per_task + evidence.crashes;
        verdict.control_requests += requests;
        verdict.control_bound += bound;
        if requests > bound {
            verdict.violation(
                "control requests over policy",
                format!(
                    "{device}: {requests} control requests for {attempts} command attempts (at most {per_task} each) and {} crashes",
                    evidence.crashes
                ),
            );
        }
    }
    verdict
}
