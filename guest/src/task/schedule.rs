//! When a task is woken: its own wakes (a send to retry, a person's answer
//! that never came, an ended record to remove), and the poll grid that
//! device reads fall back to when the device has no history yet.

use super::Horizons;
use super::{KEEP_AFTER_END_MS, Stage, Status, TaskRecord};

impl TaskRecord {
    /// Whether the task waits on its device's reads: such tasks are woken
    /// by their device's tick (see `advance`), not one by one.
    pub fn waits_on_device(&self) -> bool {
        !self.is_terminal()
            && self.status == Status::Working
            && matches!(self.stage, Stage::Sent { .. })
    }

    /// When the task needs its own wake, if it does: a retry of its send,
    /// the TTL of a task waiting for a person, or the time an ended task's
    /// record may be removed. A task waiting on its device has none.
    pub fn next_wake_ms(&self, now_ms: u64) -> Option<u64> {
        if self.is_terminal() {
            return Some(self.purge_at_ms());
        }
        let next = match self.stage {
            Stage::Sending => self
                .retry_at_ms
                .unwrap_or_else(|| now_ms.saturating_add(self.timing.poll_interval_ms)),
            // Nothing happens until the answer comes; only the TTL remains.
            Stage::AwaitingConfirmation => self.deadline_ms(),
            Stage::Sent { .. } if self.status == Status::InputRequired => self.deadline_ms(),
            Stage::Sent { .. } => return None,
        };
        Some(next.min(self.deadline_ms()))
    }

    /// Creation plus TTL: after this an unfinished task fails.
    pub fn deadline_ms(&self) -> u64 {
        self.created_at_ms.saturating_add(self.timing.ttl_ms)
    }

    /// An ended task is kept for its TTL, and at least [`KEEP_AFTER_END_MS`]
    /// after it ended.
    pub fn purge_at_ms(&self) -> u64 {
        let ended = self.ended_at_ms.unwrap_or(self.updated_at_ms);
        self.deadline_ms()
            .max(ended.saturating_add(KEEP_AFTER_END_MS))
    }

    /// When a task waiting on its device must be looked at even if the
    /// device shows nothing new: at once while a different value is being
    /// confirmed or reads fail, else when the device's timing says the wait
    /// is over (`horizons`), and at the latest at its TTL.
    pub fn next_check_ms(&self, now_ms: u64, horizons: &Horizons) -> u64 {
        if self.diverged_streak > 0 || self.failed_streak > 0 {
            return now_ms;
        }
        [horizons.settled_at, Some(horizons.patience_at)]
            .into_iter()
            .flatten()
            .filter(|at| *at > now_ms)
            .fold(self.deadline_ms(), u64::min)
    }
}

/// The wait before attempt `n` (from 1) after failures: the poll interval,
/// doubling with each failure, at most [`MAX_BACKOFF_MS`] or the poll
/// interval itself when that is longer: a failing device is never read
/// more often than a healthy one. (Capped at 30 s whatever the interval,
/// a poll interval over 30 s made the next grid read underflow to never:
/// such devices were read once and their tasks waited out their TTL.)
pub fn backoff(poll_interval_ms: u64, n: u32) -> u64 {
    let poll = poll_interval_ms.max(1);
    let factor = 1u64 << n.saturating_sub(1).min(10);
    poll.saturating_mul(factor).min(MAX_BACKOFF_MS.max(poll))
}

/// When to read a device next, given that `failed_streak` reads in a row
/// failed: the first point of the device's poll grid after the back-off,
/// less one interval.
///
/// Reads land on the grid so that every task waiting on a device is due at
/// the same instant and one read serves them all. A read that ran a little
/// late (`now` just past a grid point) is followed by the very next grid
/// point, so reads stay one interval apart rather than two. Each device's
/// grid is shifted by a phase taken from its id, so that ten thousand
/// devices are not all read in the same millisecond.
pub fn next_grid_read(
    device_id: &str,
    now_ms: u64,
    poll_interval_ms: u64,
    failed_streak: u32,
) -> u64 {
    let poll = poll_interval_ms.max(1);
    let wait = backoff(poll, failed_streak + 1);
    let phase = device_phase(device_id, poll);
    let earliest = now_ms.saturating_add(wait.saturating_sub(poll) + 1);
    align_up(earliest.saturating_sub(phase), poll).saturating_add(phase)
}

/// A stable offset in `0..poll` for a device (FNV-1a of its id), the same
/// in every process and across restarts.
fn device_phase(device_id: &str, poll: u64) -> u64 {
    crate::stable_hash::fnv1a(device_id) % poll.max(1)
}

/// `t` rounded up to a multiple of `step`.
pub fn align_up(t: u64, step: u64) -> u64 {
    let step = step.max(1);
    t.div_ceil(step).saturating_mul(step)
}

/// The longest wait between retries of a failing device API.
pub const MAX_BACKOFF_MS: u64 = 30_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_land_on_the_device_grid_and_back_off_after_failures() {
        let device = "ac-living";
        let phase = device_phase(device, 1_000);
        let on_grid = 8_000 + phase;
        assert_eq!(
            next_grid_read(device, on_grid - 1_000 + 350, 1_000, 0),
            on_grid,
            "reads land on the device's grid, one interval apart even when late"
        );
        assert_eq!(next_grid_read(device, on_grid - 1, 1_000, 0), on_grid);
        assert_eq!(
            next_grid_read(device, on_grid, 1_000, 1),
            on_grid + 2_000,
            "one failure: two intervals"
        );
        let after_two = next_grid_read(device, on_grid, 1_000, 2);
        assert_eq!(after_two, on_grid + 4_000, "two failures: four intervals");
        let phases: std::collections::BTreeSet<u64> = (0..100)
            .map(|i| device_phase(&format!("ac-{i:05}"), 10_000))
            .collect();
        assert!(phases.len() > 90, "devices are spread over the interval");
        assert_eq!(backoff(1_000, 40), MAX_BACKOFF_MS);
    }

    #[test]
    fn a_poll_interval_longer_than_the_back_off_cap_reads_every_interval() {
        let device = "ac-living";
        let poll = 60_000;
        assert!(poll > MAX_BACKOFF_MS);
        let phase = device_phase(device, poll);
        let on_grid = 10 * poll + phase;
        assert_eq!(next_grid_read(device, on_grid - 1, poll, 0), on_grid);
        assert_eq!(
            next_grid_read(device, on_grid, poll, 0),
            on_grid + poll,
            "the next grid point, not never"
        );
        assert_eq!(
            next_grid_read(device, on_grid, poll, 3),
            on_grid + poll,
            "failing: no sooner than the interval, no later than the cap allows"
        );
        assert_eq!(backoff(poll, 1), poll);
        assert_eq!(backoff(poll, 40), poll);
    }
}
