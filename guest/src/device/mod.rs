//! A model of each device: what it has been told, in order; what it shows;
//! how long it usually takes to act; and which tasks wait on its reads.
//!
//! Pure code over one record per device (`device/{id}/model`), which the
//! store writes with compare-and-swap, so replicas share it.
//!
//! # Why a model
//! A reading on its own cannot say whether a command worked. After "set 27"
//! then "set 23", a reading of 27 is the first command landing, not the
//! second one failing; after "set 27" then "set 26", a reading of 26 may be
//! the old value or the new one. Each command is therefore judged against
//! the device's command timeline: a reading that shows a value some earlier
//! command could still be applying is that command landing, and a task
//! concludes "settled on a different value" only when the value matches
//! nothing that could still land, or when the device's own timing says the
//! wait is over.
//!
//! # Assumptions, and what happens when they fail
//! Devices apply commands in the order the API took them (the simulator
//! does; so do the cloud APIs we know). A device that instead drops a
//! pending command when a newer one comes is still judged correctly, only
//! later: an earlier command that never shows stops counting once its own
//! timing has passed.

pub mod timing;

use crate::driver::Reading;
use crate::model::{Comparison, Field, Value};
use crate::task::{Horizons, Standing, Timing};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use timing::{Estimate, Sample};

/// Commands kept in a timeline. Older ones have landed or been given up on
/// long ago; an entry whose tasks still wait is never dropped for this.
pub const MAX_TIMELINE: usize = 64;

/// Tasks remembered per command. Beyond this the oldest are not told when a
/// newer command supersedes them; they still end by their own checks.
pub const MAX_TASKS_PER_COMMAND: usize = 1000;

/// Everything the plugin knows about one device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceModel {
    /// Commands the API took, oldest first. Consecutive commands with the
    /// same values share one entry: the device shows no difference between
    /// them.
    #[serde(default)]
    pub timeline: Vec<Sent>,
    /// The sequence number of the newest command ever recorded.
    #[serde(default)]
    pub last_seq: u64,
    /// Per commanded field: what the device shows, and how fast it acts.
    #[serde(default)]
    pub fields: BTreeMap<Field, Track>,
    /// Tasks waiting on this device's reads.
    #[serde(default)]
    pub waiting: BTreeMap<String, Waiter>,
    /// Sensor reads of this device that answered, ever.
    #[serde(default)]
    pub reads: u64,
    /// Reads in a row that did not answer.
    #[serde(default)]
    pub failed_streak: u32,
    /// When the last answered read came back: a change seen next happened
    /// after it.
    #[serde(default)]
    pub last_read_ms: Option<u64>,
    /// A digest of the last reading, to notice a change cheaply.
    #[serde(default)]
    pub last_state: Option<String>,
    /// When the device's tick is scheduled, as far as this record knows.
    #[serde(default)]
    pub wake_at: Option<u64>,
    /// When the latest commands were let through to the device, for its
    /// rate limit (only the last minute's are kept).
    #[serde(default)]
    pub recent_commands: Vec<u64>,
}

/// The window a device's command rate limit counts over.
pub const RATE_WINDOW_MS: u64 = 60_000;

/// One command (or a run of identical ones) the API took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sent {
    pub seq: u64,
    pub values: BTreeMap<Field, Value>,
    /// When the API took the first of the run: its landing is the one seen.
    pub first_sent_ms: u64,
    pub last_sent_ms: u64,
    /// How many identical commands the run holds.
    pub count: u32,
    /// Tasks that still wait for this command (superseded ones leave).
    pub tasks: Vec<String>,
    /// A task gave up on this command as not applied: until then the
    /// device is still read now and then (see [`DeviceModel::watching`]).
    #[serde(default)]
    pub watch_until: Option<u64>,
}

/// One field of the device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Track {
    /// What the sensors showed last (`None` before any reading).
    pub shown: Option<Value>,
    /// Every command up to this one that touches the field has landed (or
    /// was overtaken by a later one that did); 0 before any did.
    pub shown_seq: u64,
    /// `shown` matches no command that could have put it there: the device
    /// clamped or rounded a value, or someone set it at the wall.
    pub foreign: bool,
    /// The first read that showed `shown`.
    pub since_ms: u64,
    /// The latest read of the field: a change seen next happened after it.
    #[serde(default)]
    pub seen_ms: u64,
    /// How a reading of this field is compared with a value.
    pub comparison: Comparison,
    /// How long commands to this field took, newest last.
    pub samples: Vec<Sample>,
}

/// One task waiting on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    /// When it must be looked at even if the device shows nothing new.
    pub check_at: u64,
    /// The device's read count when it joined, so it can count its own.
    pub base: u64,
    /// The task's TTL: it is looked at by then however the reads go.
    #[serde(default)]
    pub deadline: u64,
}

impl Waiter {
    /// The next time this task must be looked at after `now_ms`, if any:
    /// its own check, and its deadline.
    pub fn due_after(&self, now_ms: u64) -> Option<u64> {
        [self.check_at, self.deadline]
            .into_iter()
            .filter(|at| *at > now_ms)
            .min()
    }
}

/// A command's field: what was sent, and how a reading compares with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Commanded {
    pub field: Field,
    pub value: Value,
    pub comparison: Comparison,
    /// What the device showed just before the command, when known.
    pub baseline: Option<Value>,
}

/// What recording a send did.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// The command's place in the timeline.
    pub seq: u64,
    /// Earlier tasks that asked for another value of one of its fields.
    pub superseded: Vec<String>,
}

impl DeviceModel {
    /// Records a command the API took at `sent_ms` for `task_id`. Earlier
    /// tasks asking for another value of one of its fields are superseded
    /// (they leave the timeline's task lists, and are returned); their
    /// commands stay, because nothing is recalled.
    pub fn record_send(
        &mut self,
        task_id: &str,
        command: &[Commanded],
        sent_ms: u64,
        timing: &Timing,
    ) -> Recorded {
        let windows = self.landing_windows(timing);
        for c in command {
            let track = self.fields.entry(c.field).or_insert_with(|| Track {
                shown: c.baseline.clone(),
                shown_seq: 0,
                foreign: false,
                since_ms: sent_ms,
                seen_ms: sent_ms,
                comparison: c.comparison,
                samples: Vec::new(),
            });
            track.comparison = c.comparison;
            // The command's own read just before it (its baseline) is the
            // latest word on the field: the device may have changed while
            // nobody was reading it. It was taken before the send, so it
            // is dated a moment earlier and never counts as the answer.
            if let Some(baseline) = &c.baseline {
                let at = sent_ms.saturating_sub(1);
                see(track, &self.timeline, &windows, c.field, baseline, at);
            }
        }
        let mut superseded = Vec::new();
        for entry in &mut self.timeline {
            // A task sent again (a retry) counts from its newest send.
            entry.tasks.retain(|t| t != task_id);
            let conflicts = command.iter().any(|c| {
                entry
                    .values
                    .get(&c.field)
                    .is_some_and(|v| !c.comparison.matches(&c.value, v))
            });
            if conflicts {
                superseded.append(&mut entry.tasks);
            }
        }
        let values: BTreeMap<Field, Value> =
            command.iter().map(|c| (c.field, c.value.clone())).collect();
        let joins_last = self
            .timeline
            .last()
            .is_some_and(|last| self.same_values(last, &values) && !self.landed_any(last));
        let seq = match self.timeline.last_mut() {
            Some(last) if joins_last => {
                last.count += 1;
                last.last_sent_ms = sent_ms;
                last.tasks.push(task_id.to_string());
                cap_tasks(&mut last.tasks);
                last.seq
            }
            _ => {
                self.last_seq += 1;
                self.timeline.push(Sent {
                    seq: self.last_seq,
                    values,
                    first_sent_ms: sent_ms,
                    last_sent_ms: sent_ms,
                    count: 1,
                    tasks: vec![task_id.to_string()],
                    watch_until: None,
                });
                self.last_seq
            }
        };
        Recorded { seq, superseded }
    }

    fn same_values(&self, entry: &Sent, values: &BTreeMap<Field, Value>) -> bool {
        entry.values.len() == values.len()
            && values.iter().all(|(field, value)| {
                let comparison = self.fields[field].comparison;
                entry
                    .values
                    .get(field)
                    .is_some_and(|v| comparison.matches(value, v))
            })
    }

    fn landed_any(&self, entry: &Sent) -> bool {
        entry
            .values
            .keys()
            .any(|f| self.fields.get(f).is_some_and(|t| t.shown_seq >= entry.seq))
    }

    fn landed_all(&self, entry: &Sent) -> bool {
        entry
            .values
            .keys()
            .all(|f| self.fields.get(f).is_some_and(|t| t.shown_seq >= entry.seq))
    }

    /// Takes one read of the device, answered or not, seen at `read_ms`.
    pub fn take_read(&mut self, reading: Result<&Reading, &str>, read_ms: u64, timing: &Timing) {
        match reading {
            Ok(reading) => {
                self.observe(reading, read_ms, timing);
                self.reads += 1;
                self.failed_streak = 0;
                self.last_state = Some(state_digest(reading));
            }
            Err(_) => self.failed_streak += 1,
        }
    }

    /// Takes an answered reading, seen at `read_ms`: each tracked field that
    /// changed is matched to the earliest command that could have put the
    /// new value there (that command landed, and the time it took is
    /// learned), or marked foreign if none could.
    pub fn observe(&mut self, reading: &Reading, read_ms: u64, timing: &Timing) {
        let previous_read = self.last_read_ms;
        let windows = self.landing_windows(timing);
        let timeline = &self.timeline;
        for (field, track) in &mut self.fields {
            let Some(value) = reading.values.get(field) else {
                continue;
            };
            if let Some(entry) = see(track, timeline, &windows, *field, value, read_ms)
                && let Some(before) = previous_read.filter(|b| *b >= entry.first_sent_ms)
            {
                timing::remember(
                    &mut track.samples,
                    Sample {
                        lo_ms: before - entry.first_sent_ms,
                        hi_ms: read_ms.saturating_sub(entry.first_sent_ms),
                    },
                );
            }
        }
        self.last_read_ms = Some(read_ms);
    }

    /// When each command in the timeline can plausibly land: no sooner than
    /// one window's width before the device's expected window (any time,
    /// without history), and no later than its time runs out (while it is
    /// watched, until then). A change outside that is not that command: a
    /// person at the wall, most likely, or a command the device dropped.
    fn landing_windows(&self, timing: &Timing) -> Vec<(u64, u64)> {
        self.timeline
            .iter()
            .map(|e| {
                let estimate = self.estimate(e.values.keys().copied(), timing);
                let quickest =
                    estimate.map_or(0, |est| est.lo_ms.saturating_sub(est.hi_ms - est.lo_ms));
                let latest = e
                    .last_sent_ms
                    .saturating_add(horizon(estimate, timing))
                    .max(e.watch_until.unwrap_or(0));
                (e.first_sent_ms + quickest, latest)
            })
            .collect()
    }

    /// How a task's field stands: the task sent `value` as command `seq`
    /// (0 for a task recorded before timelines existed) at `sent_ms`.
    pub fn standing(
        &self,
        field: Field,
        value: &Value,
        seq: u64,
        sent_ms: u64,
        now_ms: u64,
        timing: &Timing,
    ) -> Standing {
        let Some(track) = self.fields.get(&field) else {
            return Standing::NotReported;
        };
        let Some(shown) = &track.shown else {
            return Standing::NotReported;
        };
        if track.comparison.matches(value, shown) {
            let blocked = self
                .blockers(field, value, seq, track, now_ms, timing)
                .next()
                .is_some();
            return if blocked {
                Standing::Blocked
            } else {
                Standing::Landed
            };
        }
        // A value nobody sent that was there before this command is its
        // starting point, not its answer.
        let after_send = track.since_ms >= sent_ms;
        if (track.foreign && after_send) || (seq > 0 && track.shown_seq >= seq) {
            return Standing::Foreign;
        }
        Standing::Waiting {
            earlier: !track.foreign && track.shown_seq > 0 && after_send,
        }
    }

    /// The earlier commands that keep command `seq`, asking `field` for
    /// `value`, from counting as landed while the device shows `value`: ones
    /// for another value on that field that may still land.
    fn blockers<'a>(
        &'a self,
        field: Field,
        value: &'a Value,
        seq: u64,
        track: &'a Track,
        now_ms: u64,
        timing: &'a Timing,
    ) -> impl Iterator<Item = &'a Sent> + 'a {
        self.timeline.iter().filter(move |e| {
            e.seq < seq
                && e.values
                    .get(&field)
                    .is_some_and(|v| !track.comparison.matches(value, v))
                && self.may_still_land(e, track, now_ms, timing)
        })
    }

    /// When command `seq` (asking for `fields`) may stop being blocked: the
    /// first moment one of its blocked fields has no earlier command left
    /// that could still land. `None` when no field is blocked. An unchanged
    /// reading passes a waiting task by until its check, so a blocked task
    /// must be checked then, not only when its own time runs out.
    pub fn unblocked_at<'a>(
        &self,
        fields: impl Iterator<Item = (Field, &'a Value)>,
        seq: u64,
        now_ms: u64,
        timing: &Timing,
    ) -> Option<u64> {
        fields
            .filter_map(|(field, value)| {
                let track = self.fields.get(&field)?;
                let shown = track.shown.as_ref()?;
                if !track.comparison.matches(value, shown) {
                    return None;
                }
                self.blockers(field, value, seq, track, now_ms, timing)
                    .map(|e| self.time_runs_out(e, timing))
                    .max()
            })
            .min()
    }

    /// Whether `entry` may still change the field `track` follows. One that
    /// has not landed may, until its time runs out. One that has landed may
    /// too if it is a run of identical commands, the later of which are
    /// still on their way: after someone changed the value in between, they
    /// would change it back. A later command having landed means it cannot:
    /// commands land in order.
    fn may_still_land(&self, entry: &Sent, track: &Track, now_ms: u64, timing: &Timing) -> bool {
        let landed = track.shown_seq >= entry.seq;
        if track.shown_seq > entry.seq || (landed && entry.count <= 1) {
            return false;
        }
        self.could_still_land(entry, now_ms, timing)
    }

    /// Whether `entry` may still land: the device's timing for its fields
    /// has not run out since it was last sent.
    fn could_still_land(&self, entry: &Sent, now_ms: u64, timing: &Timing) -> bool {
        now_ms < self.time_runs_out(entry, timing)
    }

    /// When `entry`'s time to land runs out: the device's timing for its
    /// fields, from when it was last sent.
    fn time_runs_out(&self, entry: &Sent, timing: &Timing) -> u64 {
        let estimate = self.estimate(entry.values.keys().copied(), timing);
        entry.last_sent_ms.saturating_add(horizon(estimate, timing))
    }

    /// How long commands to `fields` usually take: each field's own
    /// history, or the device's as a whole where a field has none yet.
    pub fn estimate(
        &self,
        fields: impl Iterator<Item = Field>,
        timing: &Timing,
    ) -> Option<Estimate> {
        let dense = timing.dense_read_ms;
        let mut pooled: Option<Option<Estimate>> = None;
        let mut out: Option<Estimate> = None;
        for field in fields {
            let own = self
                .fields
                .get(&field)
                .and_then(|t| Estimate::from_samples(&t.samples, dense));
            let estimate = match own {
                Some(e) => Some(e),
                None => *pooled.get_or_insert_with(|| {
                    let all: Vec<Sample> = self
                        .fields
                        .values()
                        .flat_map(|t| t.samples.iter().copied())
                        .collect();
                    Estimate::from_samples(&all, dense)
                }),
            };
            if let Some(e) = estimate {
                out = Some(out.map_or(e, |o| o.union(e)));
            }
        }
        out
    }

    /// When a command to `fields` sent at `sent_ms` is judged.
    pub fn horizons(
        &self,
        fields: impl Iterator<Item = Field>,
        sent_ms: u64,
        timing: &Timing,
    ) -> Horizons {
        match self.estimate(fields, timing) {
            Some(e) => Horizons {
                settled_at: Some(sent_ms + e.settled_after_ms(timing.dense_read_ms)),
                patience_at: sent_ms + e.patience_ms(timing.dense_read_ms, timing.poll_interval_ms),
                typical_ms: Some(e.typical_ms),
            },
            None => Horizons {
                settled_at: None,
                patience_at: sent_ms.saturating_add(timing.settle_window_ms),
                typical_ms: None,
            },
        }
    }

    /// When to read next, after `now_ms`: around the expected landing of
    /// every command that has not shown yet. A command to a device without
    /// history is read on `grid` (the fixed poll), and so is a device with
    /// nothing pending (its waiting tasks want a verdict confirmed).
    pub fn next_read_ms(&self, now_ms: u64, timing: &Timing, grid: u64) -> u64 {
        self.timeline
            .iter()
            .filter(|e| !self.landed_all(e))
            .map(|e| match self.estimate(e.values.keys().copied(), timing) {
                Some(estimate) => timing::next_read_ms(
                    estimate,
                    e.first_sent_ms,
                    now_ms,
                    timing.dense_read_ms,
                    timing.poll_interval_ms,
                ),
                None => grid,
            })
            .min()
            .unwrap_or(grid)
    }

    /// Lets one more command (`values`) through to the device at `now_ms`
    /// if fewer than `per_minute` went in the last minute (0: no limit);
    /// otherwise says how long until the next may go. A command that only
    /// repeats the latest one changes nothing and is not counted. What is
    /// protected is the device, so this counts per device, not per client.
    pub fn admit_command(
        &mut self,
        now_ms: u64,
        per_minute: u32,
        values: &BTreeMap<Field, Value>,
    ) -> Result<(), u64> {
        self.recent_commands
            .retain(|at| now_ms.saturating_sub(*at) < RATE_WINDOW_MS);
        let repeats_latest = self.timeline.last().is_some_and(|last| {
            last.values.len() == values.len()
                && values.iter().all(|(field, value)| {
                    let comparison = self.fields.get(field).map(|t| t.comparison);
                    last.values
                        .get(field)
                        .zip(comparison)
                        .is_some_and(|(v, c)| c.matches(value, v))
                })
        });
        if repeats_latest {
            return Ok(());
        }
        if per_minute > 0 && self.recent_commands.len() >= per_minute as usize {
            let oldest = self.recent_commands.iter().copied().min().unwrap_or(now_ms);
            return Err((oldest + RATE_WINDOW_MS).saturating_sub(now_ms));
        }
        self.recent_commands.push(now_ms);
        Ok(())
    }

    /// Keeps reading the device until `until_ms` for command `seq`, which a
    /// task gave up on as not applied.
    pub fn watch(&mut self, seq: u64, until_ms: u64) {
        if let Some(entry) = self.timeline.iter_mut().find(|e| e.seq == seq) {
            entry.watch_until = Some(entry.watch_until.map_or(until_ms, |w| w.max(until_ms)));
        }
    }

    /// Whether to go on reading with no task waiting: a command given up on
    /// as not applied may still land late. If it does, the device is slower
    /// than its history said, and seeing the change teaches the model, so
    /// one wrong guess about a slow device is not repeated forever.
    pub fn watching(&self, now_ms: u64) -> bool {
        self.timeline
            .iter()
            .any(|e| e.watch_until.is_some_and(|w| now_ms < w) && !self.landed_all(e))
    }

    /// Forgets what can no longer matter: commands that landed (every one
    /// of a run), or whose time ran out, once no task waits for them; ended
    /// tasks. Keeps the timeline at most [`MAX_TIMELINE`] long.
    pub fn prune(&mut self, now_ms: u64, timing: &Timing) {
        let waiting = &self.waiting;
        for entry in &mut self.timeline {
            entry.tasks.retain(|t| waiting.contains_key(t));
        }
        let keep: Vec<bool> = self
            .timeline
            .iter()
            .map(|e| {
                // A run of identical commands whose first landed still has
                // the others on their way.
                let more_to_come = !self.landed_all(e)
                    || (e.count > 1 && self.could_still_land(e, now_ms, timing));
                !e.tasks.is_empty()
                    || (more_to_come && now_ms < e.last_sent_ms.saturating_add(timing.ttl_ms))
            })
            .collect();
        let mut keep = keep.into_iter();
        self.timeline.retain(|_| keep.next().unwrap_or(false));
        while self.timeline.len() > MAX_TIMELINE {
            let oldest_idle = self.timeline.iter().position(|e| e.tasks.is_empty());
            self.timeline.remove(oldest_idle.unwrap_or(0));
        }
    }
}

/// Takes a value the device showed for `field` at `at`. When it differs
/// from what was shown before, it is matched to the earliest command that
/// could have put it there (returned: that command landed), or marked
/// foreign if none could.
///
/// `windows[i]` is when `timeline[i]` can plausibly land; a change seen
/// outside it is not that command.
fn see<'t>(
    track: &mut Track,
    timeline: &'t [Sent],
    windows: &[(u64, u64)],
    field: Field,
    value: &Value,
    at: u64,
) -> Option<&'t Sent> {
    let seen_before = track.seen_ms;
    track.seen_ms = at.max(seen_before);
    match &track.shown {
        Some(shown) if track.comparison.matches(shown, value) => return None,
        Some(_) => {}
        None => {
            track.shown = Some(value.clone());
            track.since_ms = at;
            return None;
        }
    }
    // The change happened after `seen_before`. A command explains it only
    // if it could land then, and if the field was seen after the command
    // was sent (its own read just before the send counts): otherwise the
    // value may have been set before the command was ever sent.
    let landed = timeline
        .iter()
        .zip(windows)
        .find_map(|(e, (soonest, latest))| {
            let explains = e.seq > track.shown_seq
                && (*soonest..=*latest).contains(&at)
                && seen_before.saturating_add(1) >= e.first_sent_ms
                && e.values
                    .get(&field)
                    .is_some_and(|v| track.comparison.matches(v, value));
            explains.then_some(e)
        });
    match landed {
        Some(entry) => {
            track.shown_seq = entry.seq;
            track.foreign = false;
        }
        None => track.foreign = true,
    }
    track.shown = Some(value.clone());
    track.since_ms = at;
    landed
}

/// How long after its send a command can still land: the device's own
/// timing, or the settle window without history.
fn horizon(estimate: Option<Estimate>, timing: &Timing) -> u64 {
    match estimate {
        Some(e) => e.settled_after_ms(timing.dense_read_ms),
        None => timing.settle_window_ms,
    }
}

/// A digest of a reading's state, to notice a change without keeping it.
///
/// The text hashed is the reading's Debug form, as it always was (stored
/// digests stay valid), written straight into the hash: every read of a
/// device computes it.
pub fn state_digest(reading: &Reading) -> String {
    use std::fmt::Write;
    let mut hash = crate::stable_hash::Fnv1a::new();
    write!(hash, "{:?}|{:?}", reading.online, reading.values).expect("hashing cannot fail");
    format!("{:016x}", hash.finish())
}

fn cap_tasks(tasks: &mut Vec<String>) {
    if tasks.len() > MAX_TASKS_PER_COMMAND {
        let excess = tasks.len() - MAX_TASKS_PER_COMMAND;
        tasks.drain(..excess);
    }
}

#[cfg(test)]
mod tests;
