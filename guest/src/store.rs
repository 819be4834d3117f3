//! Task records and per-device indexes in the tenant's key-value bucket.
//!
//! Every write of a task goes through compare-and-swap, and every change is
//! published to the runner (for listeners and callers waiting inline) and
//! rescheduled, in one place: [`Tasks::commit`].

use crate::bindings::settle::plugin::types::TaskView;
use crate::driver::Reading;
use crate::host::{self, CasUpdate, Kv};
use crate::model::Field;
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

/// Which unfinished task last commanded each field of a device.
type Claims = BTreeMap<Field, String>;

/// What a device's sensor endpoint last reported: which fields it reports
/// (for when it cannot be read) and a digest of the state (to notice when
/// it changes).
#[derive(Serialize, Deserialize, PartialEq)]
struct LastReading {
    fields: BTreeSet<Field>,
    state: String,
}

pub struct Tasks {
    kv: Kv,
}

/// Both renderings of a task, as the runner receives them.
pub fn view(record: &TaskRecord) -> TaskView {
    TaskView {
        task_id: record.id.clone(),
        terminal: record.is_terminal(),
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
    /// repeats for a bare read count), and schedule what comes next (the
    /// next read, or the removal of an ended task).
    pub fn commit(&self, record: &TaskRecord, now_ms: u64, visible: bool) -> Result<(), String> {
        if visible {
            host::task_changed(&view(record));
        }
        host::schedule(&record.id, &record.device_id, record.next_wake_ms(now_ms))
    }

    /// Removes an ended task whose time is up.
    pub fn purge(&self, id: &str) -> Result<(), String> {
        self.kv.delete(&task_key(id))?;
        host::unschedule(&[id.to_string()])
    }

    /// Records `task_id` as the latest command to `fields` of `device_id` and
    /// returns the earlier tasks it takes fields from.
    pub fn claim_fields(
        &self,
        device_id: &str,
        fields: &[Field],
        task_id: &str,
    ) -> Result<Vec<String>, String> {
        self.kv.cas_update(&claims_key(device_id), |current| {
            let mut claims: Claims = match current {
                Some(bytes) => serde_json::from_slice(bytes).unwrap_or_default(),
                None => Claims::new(),
            };
            let mut earlier = BTreeSet::new();
            for field in fields {
                if let Some(old) = claims.insert(*field, task_id.to_string())
                    && old != task_id
                {
                    earlier.insert(old);
                }
            }
            let bytes = serde_json::to_vec(&claims).expect("claims serialize");
            Ok(CasUpdate::Write(bytes, earlier.into_iter().collect()))
        })
    }

    /// Remembers a device's reading; returns whether its state differs from
    /// the reading remembered before (so subscribers can be told).
    pub fn remember_reading(&self, device_id: &str, reading: &Reading) -> Result<bool, String> {
        let fresh = LastReading {
            fields: reading.values.keys().copied().collect(),
            state: crate::question::digest(&format!("{:?}|{:?}", reading.online, reading.values)),
        };
        let bytes = serde_json::to_vec(&fresh).expect("readings serialize");
        self.kv.cas_update(&readable_key(device_id), |current| {
            // Reads are frequent and the state rarely changes: write only
            // when it did.
            let same = current
                .and_then(|c| serde_json::from_slice::<LastReading>(c).ok())
                .is_some_and(|old| old == fresh);
            Ok(if same {
                CasUpdate::Keep(false)
            } else {
                CasUpdate::Write(bytes.clone(), true)
            })
        })
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
