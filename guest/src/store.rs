//! Task records and per-device indexes in the tenant's key-value bucket.
//!
//! Every write of a task goes through compare-and-swap, and every change is
//! published to the runner (for listeners and callers waiting inline) and
//! rescheduled, in one place: [`Tasks::commit`].

use crate::bindings::settle::plugin::types::TaskView;
use crate::driver::Reading;
use crate::host::{self, CasUpdate, Kv};
use crate::model::{Field, Value};
use crate::task::{RECORD_FORMAT, TaskRecord, tool_result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

fn task_key(id: &str) -> String {
    format!("task/{id}")
}

fn claims_key(device_id: &str) -> String {
    format!("device/{device_id}/claims")
}

fn readable_key(device_id: &str) -> String {
    format!("device/{device_id}/readable")
}

fn waiting_key(device_id: &str) -> String {
    format!("device/{device_id}/waiting")
}

/// The scheduler id of a device's tick. Task ids are hex, so no task id
/// looks like this.
pub fn device_wake_id(device_id: &str) -> String {
    format!("device:{device_id}")
}

/// The device a tick id names.
pub fn device_of_wake(id: &str) -> Option<&str> {
    id.strip_prefix("device:")
}

/// The tasks waiting on one device's reads, and the device's read count.
///
/// With many tasks on one device, this is what makes an unchanged device
/// cheap: a tick reads the sensors once, compares the state, and touches
/// only this record unless something changed or a task's check is due.
#[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
pub struct Waiting {
    /// Waiting task id → when it must be looked at even if nothing changes,
    /// and the device's read count when it joined.
    pub tasks: BTreeMap<String, Waiter>,
    /// Sensor reads of this device that answered, ever.
    pub reads: u64,
    /// Reads in a row that did not answer.
    #[serde(default)]
    pub failed_streak: u32,
    /// A digest of the last reading the tasks were shown.
    pub last_state: Option<String>,
    /// When the device's tick is scheduled, as far as this record knows.
    pub wake_at: Option<u64>,
}

/// One waiting task.
#[derive(Serialize, Deserialize, Default, Debug, PartialEq, Clone, Copy)]
pub struct Waiter {
    pub check_at: u64,
    pub base: u64,
}

/// The value last commanded for each field of a device, and the tasks that
/// wait for it.
type Claims = BTreeMap<Field, Claim>;

#[derive(Serialize, Deserialize, Default)]
struct Claim {
    value: Option<Value>,
    tasks: Vec<String>,
}

/// Tasks remembered per field and value. Older ones have almost surely
/// ended; dropping them only means they are not told of a newer command.
const MAX_CLAIMANTS: usize = 1000;

/// What a device's sensor endpoint last reported, and when: which fields it
/// reports (for when it cannot be read), the state (to notice when it
/// changes, and as a command's baseline while it is fresh).
#[derive(Serialize, Deserialize, PartialEq)]
struct LastReading {
    fields: BTreeSet<Field>,
    state: String,
    #[serde(default)]
    values: BTreeMap<Field, Value>,
    #[serde(default)]
    online: bool,
    #[serde(default)]
    at_ms: u64,
}

/// A remembered reading is refreshed in the store once it is this old, even
/// if nothing changed, so it can stand in for a fresh read.
const REFRESH_AFTER_MS: u64 = 500;

pub struct Tasks {
    kv: Kv,
}

/// Both renderings of a task, as the runner receives them.
pub fn view(record: &TaskRecord) -> TaskView {
    TaskView {
        task_id: record.id.clone(),
        status: crate::wit_status(record.status),
        detailed: record.to_detailed_json().to_string(),
        tool_result: tool_result(&record.to_tool_json(), false).to_string(),
    }
}

fn decode(key: &str, bytes: &[u8]) -> Result<TaskRecord, String> {
    #[derive(Deserialize)]
    struct Format {
        format: u32,
    }
    let format: Format = serde_json::from_slice(bytes)
        .map_err(|e| format!("store: {key} is not a task record: {e}"))?;
    if format.format > RECORD_FORMAT {
        return Err(format!(
            "store: {key} has record format {}, newer than this plugin's {RECORD_FORMAT}",
            format.format
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("store: {key} is not a task record: {e}"))
}

fn encode(record: &TaskRecord) -> Vec<u8> {
    serde_json::to_vec(record).expect("task records always serialize")
}

impl Tasks {
    pub fn open() -> Result<Tasks, String> {
        Ok(Tasks { kv: Kv::open()? })
    }

    pub fn load(&self, id: &str) -> Result<Option<TaskRecord>, String> {
        let key = task_key(id);
        self.kv.get(&key)?.map(|b| decode(&key, &b)).transpose()
    }

    /// Loads several tasks in one round trip; a missing one is `None`.
    pub fn load_many(&self, ids: &[String]) -> Result<Vec<Option<TaskRecord>>, String> {
        let keys: Vec<String> = ids.iter().map(|id| task_key(id)).collect();
        self.kv
            .get_many(&keys)?
            .into_iter()
            .zip(&keys)
            .map(|(bytes, key)| bytes.map(|b| decode(key, &b)).transpose())
            .collect()
    }

    /// Stores a new task; durable and scheduled when this returns, so the id
    /// can be handed out.
    pub fn create(&self, record: &TaskRecord, first_wake_ms: u64) -> Result<(), String> {
        let bytes = encode(record);
        self.kv.cas_update(&task_key(&record.id), |current| {
            if current.is_some() {
                return Err(format!("store: task id {} already exists", record.id));
            }
            Ok(CasUpdate::Write(bytes.clone(), ()))
        })?;
        host::schedule(&record.id, &record.device_id, first_wake_ms)
    }

    /// Applies `change` to the stored task with compare-and-swap. `change`
    /// returns whether it changed anything; it may run more than once when
    /// another writer got there first, always on the fresh record. Returns
    /// the record as stored afterwards and whether this call changed it, or
    /// `None` when there is no such task.
    pub fn update(
        &self,
        id: &str,
        now_ms: u64,
        mut change: impl FnMut(&mut TaskRecord) -> bool,
    ) -> Result<Option<(TaskRecord, bool)>, String> {
        let key = task_key(id);
        let outcome = self.kv.cas_update(&key, |current| {
            let Some(bytes) = current else {
                return Ok(CasUpdate::Keep(None));
            };
            let mut record = decode(&key, bytes)?;
            let before = record.to_detailed_json();
            if change(&mut record) {
                let visible = record.to_detailed_json() != before;
                Ok(CasUpdate::Write(
                    encode(&record),
                    Some((record, true, visible)),
                ))
            } else {
                Ok(CasUpdate::Keep(Some((record, false, false))))
            }
        })?;
        if let Some((record, true, visible)) = &outcome {
            self.commit(record, now_ms, *visible)?;
        }
        Ok(outcome.map(|(record, changed, _)| (record, changed)))
    }

    /// After a change is stored: tell the runner if a client would see a
    /// difference (so a listener gets each visible change once, and no
    /// repeats for a bare read count), and schedule the task's own next wake
    /// if it needs one (a task waiting on its device is woken by the
    /// device's tick instead).
    pub fn commit(&self, record: &TaskRecord, now_ms: u64, visible: bool) -> Result<(), String> {
        if visible {
            host::task_changed(&view(record));
        }
        match record.next_wake_ms(now_ms) {
            Some(at) => host::schedule(&record.id, &record.device_id, at),
            None => Ok(()),
        }
    }

    /// The tasks waiting on a device's reads.
    pub fn waiting(&self, device_id: &str) -> Result<Waiting, String> {
        Ok(self
            .kv
            .get(&waiting_key(device_id))?
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default())
    }

    /// Changes a device's waiting set with compare-and-swap; `change` may
    /// run more than once. Returns what `change` returned last.
    pub fn update_waiting<T>(
        &self,
        device_id: &str,
        mut change: impl FnMut(&mut Waiting) -> T,
    ) -> Result<T, String> {
        self.kv.cas_update(&waiting_key(device_id), |current| {
            let mut waiting: Waiting = current
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or_default();
            let out = change(&mut waiting);
            let bytes = serde_json::to_vec(&waiting).expect("waiting sets serialize");
            Ok(CasUpdate::Write(bytes, out))
        })
    }

    /// Adds a task that was just sent to its device's waiting set, and makes
    /// sure the device's tick comes by `read_at_ms`.
    pub fn join_waiting(&self, record: &TaskRecord, now_ms: u64) -> Result<(), String> {
        let read_at = record.next_read_ms(now_ms);
        let check_at = record.next_check_ms(now_ms);
        let reschedule = self.update_waiting(&record.device_id, |waiting| {
            let base = waiting.reads;
            waiting
                .tasks
                .insert(record.id.clone(), Waiter { check_at, base });
            match waiting.wake_at {
                Some(at) if at <= read_at => None,
                _ => {
                    waiting.wake_at = Some(read_at);
                    Some(read_at)
                }
            }
        })?;
        // The task's own wake (the recovery wake of its send) is no longer
        // needed: the device's tick looks after it now.
        host::unschedule(std::slice::from_ref(&record.id))?;
        if let Some(at) = reschedule {
            host::schedule(&device_wake_id(&record.device_id), &record.device_id, at)?;
        }
        Ok(())
    }

    /// Removes an ended task whose time is up.
    pub fn purge(&self, id: &str) -> Result<(), String> {
        self.kv.delete(&task_key(id))?;
        host::unschedule(&[id.to_string()])
    }

    /// Records `task_id` as the latest command to these fields of
    /// `device_id`, and returns the earlier tasks it supersedes: those
    /// waiting for a *different* value of one of the fields. Tasks that wait
    /// for the same value keep waiting; the device will show it to all.
    pub fn claim_fields(
        &self,
        device_id: &str,
        command: &[(Field, Value)],
        task_id: &str,
    ) -> Result<Vec<String>, String> {
        self.kv.cas_update(&claims_key(device_id), |current| {
            let mut claims: Claims = current
                .and_then(|bytes| serde_json::from_slice(bytes).ok())
                .unwrap_or_default();
            let mut earlier = BTreeSet::new();
            for (field, value) in command {
                let claim = claims.entry(*field).or_default();
                if claim.value.as_ref() != Some(value) {
                    earlier.extend(claim.tasks.drain(..).filter(|t| t != task_id));
                    claim.value = Some(value.clone());
                }
                if !claim.tasks.iter().any(|t| t == task_id) {
                    claim.tasks.push(task_id.to_string());
                }
                if claim.tasks.len() > MAX_CLAIMANTS {
                    let excess = claim.tasks.len() - MAX_CLAIMANTS;
                    claim.tasks.drain(..excess);
                }
            }
            let bytes = serde_json::to_vec(&claims).expect("claims serialize");
            Ok(CasUpdate::Write(bytes, earlier.into_iter().collect()))
        })
    }

    /// Remembers a device's reading; returns whether its state differs from
    /// the reading remembered before (so subscribers can be told).
    pub fn remember_reading(
        &self,
        device_id: &str,
        reading: &Reading,
        now_ms: u64,
    ) -> Result<bool, String> {
        let fresh = LastReading {
            fields: reading.values.keys().copied().collect(),
            state: crate::question::digest(&format!("{:?}|{:?}", reading.online, reading.values)),
            values: reading.values.clone(),
            online: reading.online,
            at_ms: now_ms,
        };
        let bytes = serde_json::to_vec(&fresh).expect("readings serialize");
        self.kv.cas_update(&readable_key(device_id), |current| {
            // Reads are frequent and the state rarely changes: write when it
            // did, or when the remembered reading grows stale.
            let old = current.and_then(|c| serde_json::from_slice::<LastReading>(c).ok());
            let changed = old.as_ref().is_none_or(|o| o.state != fresh.state);
            let stale = old
                .as_ref()
                .is_none_or(|o| now_ms.saturating_sub(o.at_ms) >= REFRESH_AFTER_MS);
            Ok(if changed || stale {
                CasUpdate::Write(bytes.clone(), changed)
            } else {
                CasUpdate::Keep(false)
            })
        })
    }

    /// The device's last reading, if it was taken within `max_age_ms`: a
    /// command can use it as its baseline instead of reading again, so many
    /// commands to one device in a burst cost one read.
    pub fn recent_reading(
        &self,
        device_id: &str,
        now_ms: u64,
        max_age_ms: u64,
    ) -> Result<Option<Reading>, String> {
        Ok(self
            .kv
            .get(&readable_key(device_id))?
            .and_then(|b| serde_json::from_slice::<LastReading>(&b).ok())
            .filter(|r| r.at_ms > 0 && now_ms.saturating_sub(r.at_ms) <= max_age_ms)
            .map(|r| Reading {
                online: r.online,
                values: r.values,
                ..Reading::default()
            }))
    }

    /// The fields a device reported last time it could be read.
    pub fn remembered_readable(&self, device_id: &str) -> Result<Option<BTreeSet<Field>>, String> {
        Ok(self
            .kv
            .get(&readable_key(device_id))?
            .and_then(|b| serde_json::from_slice::<LastReading>(&b).ok())
            .map(|r| r.fields))
    }
}
