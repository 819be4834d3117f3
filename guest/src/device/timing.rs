//! How long a device takes to act, learned from its own history, and the
//! reads that follow from it.
//!
//! A sample is the window in which one change happened: from the last read
//! that still showed the old value to the first read that showed the new
//! one, both counted from when the API took the command. Only windows whose
//! first read came after the send are samples; a change already visible at
//! the first read says only that the device is fast, not how fast.
//!
//! From a few samples comes an [`Estimate`]: when, after a send, the change
//! is expected. Reads are then placed densely across that window and
//! sparsely before it (closer together near it), spending no more reads
//! than fixed polling would. The
//! same estimate says when the wait is over: a value that differs from the
//! one sent is only the device's answer once the command should have
//! landed, and an unchanged device is "not applied" only after a patience
//! that follows the device (a unit that always takes 2 s is called sooner
//! than one that always takes 20 s).

use serde::{Deserialize, Serialize};

/// Samples kept per field; older ones fall out, so a device whose timing
/// changes is relearned.
pub const MAX_SAMPLES: usize = 8;

/// Samples an estimate is made from (the newest).
const USED_SAMPLES: usize = 6;

/// Reads before the window spend at most this share of what fixed polling
/// would have read up to the typical landing.
const READ_BUDGET_SHARE: f64 = 0.8;

/// The most reads placed before the window, whatever the budget.
const MAX_EARLY_READS: u64 = 8;

/// The most reads spread across one window: a device too erratic to
/// predict closely is read less densely rather than more often.
const MAX_WINDOW_READS: u64 = 20;

/// One observed change: it happened between `lo_ms` and `hi_ms` after the
/// command was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub lo_ms: u64,
    pub hi_ms: u64,
}

impl Sample {
    fn mid(self) -> f64 {
        (self.lo_ms + self.hi_ms) as f64 / 2.0
    }
}

/// Keeps `samples` at most [`MAX_SAMPLES`] long, newest last.
pub fn remember(samples: &mut Vec<Sample>, sample: Sample) {
    samples.push(sample);
    if samples.len() > MAX_SAMPLES {
        let excess = samples.len() - MAX_SAMPLES;
        samples.drain(..excess);
    }
}

/// When, after a send, a device's change is expected: between `lo_ms` and
/// `hi_ms`, typically at `typical_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub lo_ms: u64,
    pub hi_ms: u64,
    pub typical_ms: u64,
}

impl Estimate {
    /// From samples (any order). `None` without any.
    ///
    /// A sample only bounds one actuation: it took at least `lo` and at most
    /// `hi`. So the quickest actuation seen took at most the smallest `hi`,
    /// and the slowest at least the largest `lo`: those two (in order) are
    /// the core of the window, whatever the width of the samples, so a wide
    /// one (a change seen after a gap in reads) neither blurs nor shifts it.
    /// The core is then widened on both sides by how much the samples
    /// scatter (its width over `n - 1`, the expected gap beyond the
    /// extremes of `n` evenly spread delays) and by at least half a dense
    /// read. With one sample the scatter is unknown, and a tenth of the
    /// delay stands in for it.
    pub fn from_samples(samples: &[Sample], dense_ms: u64) -> Option<Estimate> {
        let recent = &samples[samples.len().saturating_sub(USED_SAMPLES)..];
        if recent.is_empty() {
            return None;
        }
        let quickest = recent.iter().map(|s| s.hi_ms).min()? as f64;
        let slowest = recent.iter().map(|s| s.lo_ms).max()? as f64;
        let (first, last) = (quickest.min(slowest), quickest.max(slowest));
        let mut mids: Vec<f64> = recent.iter().map(|s| s.mid()).collect();
        mids.sort_by(f64::total_cmp);
        let typical = mids[mids.len() / 2];
        let scatter = if recent.len() >= 2 {
            (last - first) / (recent.len() - 1) as f64
        } else {
            typical / 10.0
        };
        let margin = scatter.max(dense_ms as f64 / 2.0);
        Some(Estimate {
            lo_ms: (first - margin).max(0.0) as u64,
            hi_ms: (last + margin).ceil() as u64,
            typical_ms: typical.round() as u64,
        })
    }

    /// The union of two estimates (a command touching fields that act at
    /// different speeds waits for the slowest).
    pub fn union(self, other: Estimate) -> Estimate {
        Estimate {
            lo_ms: self.lo_ms.min(other.lo_ms),
            hi_ms: self.hi_ms.max(other.hi_ms),
            typical_ms: self.typical_ms.max(other.typical_ms),
        }
    }

    /// After this long, a command that has not shown has not landed as
    /// sent: the window, plus a tenth of it and two dense reads, because
    /// a handful of samples rarely includes the slowest actuation.
    pub fn settled_after_ms(self, dense_ms: u64) -> u64 {
        self.hi_ms + (self.hi_ms / 10).max(2 * dense_ms)
    }

    /// How long an unchanged device is waited for before "not applied":
    /// twice the time the command should have landed in, and at least two
    /// polls more than it.
    pub fn patience_ms(self, dense_ms: u64, poll_ms: u64) -> u64 {
        let settled = self.settled_after_ms(dense_ms);
        (2 * settled).max(settled + 2 * poll_ms)
    }
}

/// When to read next for one command sent at `sent_ms` whose change is
/// expected per `estimate`, at `now_ms` or later (strictly later than
/// `now_ms`).
///
/// - Before the window: a few reads, crowding toward it
///   ([`early_read_ms`]), as many as the budget allows (what fixed polling
///   at `poll_ms` would spend up to the typical landing, minus the reads
///   the window itself is expected to take); devices that act within a few
///   polls get none.
/// - Across the window: one read every `dense_ms`.
/// - After it (the device is late): reads drift apart, half the time since
///   the window closed, at most one poll.
pub fn next_read_ms(
    estimate: Estimate,
    sent_ms: u64,
    now_ms: u64,
    dense_ms: u64,
    poll_ms: u64,
) -> u64 {
    let width = estimate.hi_ms - estimate.lo_ms;
    let dense = dense_ms.max(width / MAX_WINDOW_READS).max(1);
    let poll = poll_ms.max(dense);
    let start = sent_ms + estimate.lo_ms;
    let end = sent_ms + estimate.hi_ms;
    if now_ms < start {
        let early = early_reads(estimate, dense, poll);
        return (1..=early)
            .map(|k| sent_ms + early_read_ms(estimate.lo_ms, k, early))
            .find(|at| *at > now_ms)
            .unwrap_or(start);
    }
    if now_ms < end {
        let steps = (now_ms - start) / dense + 1;
        return start + steps * dense;
    }
    let late = now_ms - end;
    now_ms + (late / 2).clamp(dense, poll)
}

/// Where the `k`-th of `n` reads before a window starting `lo_ms` after
/// the send goes: at `lo × (1 − (1 − k/(n+1))²)`, so the reads crowd toward
/// the window. A command that lands before its window almost always lands
/// just before it (a few samples put the window's edge a little off), and
/// evenly spread reads left the longest gap there: a 29 s device's last
/// early read came 3 s before its window. Crowded, that gap is a ninth as
/// long (0.3 s) for the same number of reads; a device that suddenly acts
/// far sooner than it did is seen a little later, once, and relearned.
fn early_read_ms(lo_ms: u64, k: u64, n: u64) -> u64 {
    let left = n + 1 - k;
    lo_ms - lo_ms * left * left / ((n + 1) * (n + 1))
}

/// How many reads go before the window.
fn early_reads(estimate: Estimate, dense: u64, poll: u64) -> u64 {
    let polling = estimate.typical_ms as f64 / poll as f64;
    let in_window = (estimate.hi_ms - estimate.lo_ms) as f64 / dense as f64 / 2.0 + 1.0;
    let budget = READ_BUDGET_SHARE * polling - in_window - 1.0;
    if budget < 1.0 {
        0
    } else {
        (budget as u64).min(MAX_EARLY_READS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(around_ms: &[u64], width_ms: u64) -> Vec<Sample> {
        around_ms
            .iter()
            .map(|m| Sample {
                lo_ms: m - width_ms / 2,
                hi_ms: m + width_ms / 2,
            })
            .collect()
    }

    #[test]
    fn no_history_no_estimate() {
        assert_eq!(Estimate::from_samples(&[], 200), None);
    }

    #[test]
    fn a_steady_device_gets_a_narrow_window_around_its_delay() {
        let e = Estimate::from_samples(&samples(&[4_000, 4_100, 4_050], 200), 200).unwrap();
        assert!(e.lo_ms < 4_000 && e.lo_ms >= 3_800, "{e:?}");
        assert!(e.hi_ms > 4_100 && e.hi_ms <= 4_300, "{e:?}");
        assert_eq!(e.typical_ms, 4_050);
    }

    #[test]
    fn a_wide_sample_does_not_blur_narrow_ones() {
        let mut s = vec![Sample {
            lo_ms: 1_000,
            hi_ms: 5_000,
        }];
        s.extend(samples(&[4_000, 4_100, 4_050], 200));
        let e = Estimate::from_samples(&s, 200).unwrap();
        assert!(e.lo_ms >= 3_800 && e.hi_ms <= 4_300, "{e:?}");
    }

    #[test]
    fn one_sample_is_widened_by_a_tenth_of_the_delay() {
        let e = Estimate::from_samples(&samples(&[20_000], 200), 200).unwrap();
        assert_eq!((e.lo_ms, e.hi_ms), (17_900, 22_100));
    }

    #[test]
    fn only_the_newest_samples_count() {
        let mut s = samples(&[2_000; 6], 200);
        s.extend(samples(&[10_000; 6], 200));
        let e = Estimate::from_samples(&s, 200).unwrap();
        assert!(
            e.lo_ms > 9_000,
            "a device that slowed down is relearned: {e:?}"
        );
        let mut kept = Vec::new();
        for sample in s {
            remember(&mut kept, sample);
        }
        assert_eq!(kept.len(), MAX_SAMPLES);
    }

    #[test]
    fn patience_follows_the_device() {
        let quick = Estimate::from_samples(&samples(&[2_000; 3], 200), 200).unwrap();
        let slow = Estimate::from_samples(&samples(&[20_000; 3], 200), 200).unwrap();
        assert!(quick.patience_ms(200, 1_000) < 6_000, "{quick:?}");
        assert!(slow.patience_ms(200, 1_000) > 40_000, "{slow:?}");
        assert!(slow.settled_after_ms(200) > slow.hi_ms);
    }

    #[test]
    fn reads_are_dense_across_the_window_and_crowd_toward_it_before() {
        let e = Estimate {
            lo_ms: 27_000,
            hi_ms: 31_000,
            typical_ms: 29_000,
        };
        let mut at = 0;
        let mut reads = Vec::new();
        while at < e.typical_ms {
            at = next_read_ms(e, 0, at, 200, 1_000);
            reads.push(at);
        }
        let early: Vec<u64> = reads.iter().copied().filter(|r| *r < 27_000).collect();
        assert!((1..=8).contains(&early.len()), "{reads:?}");
        let mut edges = early.clone();
        edges.push(27_000);
        let gaps: Vec<u64> = edges.windows(2).map(|p| p[1] - p[0]).collect();
        assert!(
            gaps.windows(2).all(|g| g[1] < g[0]),
            "crowding toward the window: {early:?}"
        );
        assert!(
            *gaps.last().unwrap() <= 27_000 / (early.len() as u64 + 1) / 2,
            "the gap just before the window is under half an even one: {early:?}"
        );
        assert!(early[0] >= 1_000, "none in the first second: {early:?}");
        let dense: Vec<u64> = reads.iter().copied().filter(|r| *r >= 27_000).collect();
        assert!(dense.windows(2).all(|p| p[1] - p[0] == 200), "{dense:?}");
        assert!(
            reads.len() < 29,
            "fewer reads to the typical landing than polling every second: {}",
            reads.len()
        );
    }

    #[test]
    fn an_erratic_device_is_read_at_most_twenty_times_across_its_window() {
        let e = Estimate {
            lo_ms: 10_000,
            hi_ms: 70_000,
            typical_ms: 40_000,
        };
        let mut at = 10_000;
        let mut reads = 0;
        while at < 70_000 {
            at = next_read_ms(e, 0, at, 200, 5_000);
            reads += 1;
        }
        assert_eq!(reads, 20);
    }

    #[test]
    fn a_quick_device_gets_no_early_reads() {
        let e = Estimate {
            lo_ms: 2_100,
            hi_ms: 2_500,
            typical_ms: 2_300,
        };
        assert_eq!(next_read_ms(e, 10_000, 10_050, 200, 1_000), 12_100);
        assert_eq!(next_read_ms(e, 10_000, 12_100, 200, 1_000), 12_300);
    }

    #[test]
    fn a_late_device_is_read_less_and_less_often() {
        let e = Estimate {
            lo_ms: 2_100,
            hi_ms: 2_500,
            typical_ms: 2_300,
        };
        assert_eq!(next_read_ms(e, 0, 2_600, 200, 1_000), 2_800);
        assert_eq!(next_read_ms(e, 0, 4_500, 200, 1_000), 5_500);
        assert_eq!(next_read_ms(e, 0, 60_000, 200, 1_000), 61_000);
    }
}
