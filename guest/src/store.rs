//! The plugin's records in the tenant's key-value bucket: tasks, each
//! device's model, and each device's last reading.
//!
//! Every task write goes through compare-and-swap. Every change to a task
//! is published to the runner (for listeners and callers waiting inline)
//! and rescheduled in one place: [`Store::update_deferred`], whose wakes
//! [`Store::finish`] writes. The change that ends a task also writes its
//! [`crate::audit`] record; a device's tick writes those of all the tasks
//! it ended at once.

use crate::device::{DeviceModel, Waiter, state_digest};
use crate::driver::Reading;
use crate::model::{Field, Value};
use crate::platform::{
    CasUpdate, MAX_CAS_ATTEMPTS, Platform, Swap, Wake, cas_gave_up, cas_update, schedule_one,
};
use crate::task::{RECORD_FORMAT, TaskRecord};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

fn task_key(id: &str) -> String {
    format!("task/{id}")
}

/// Hex digits at the start of a task id that name its device's cluster.
const CLUSTER_DIGITS: usize = 4;

/// A new task's id: `random` (32 hex digits) with its first
/// [`CLUSTER_DIGITS`] replaced by a hash of the device, so the tasks of one
/// device sit side by side in the store's ordered keys (their records, the
/// runner's views of them, their wakes). A device's tick writes every task
/// it judges; with ids spread at random, each of a hundred records dirtied
/// pages of its own across the whole file, and at 1,000,000 tasks the
/// store's writer fell behind a burst on those pages
/// (docs/performance.md, "Twenty-first round"). The id stays 32 hex
/// digits, 112 of its bits random: still unguessable, still a bearer
/// handle, and ids from before are read as they always were.
pub fn clustered_task_id(device_id: &str, random: &str) -> String {
    // A fixed hash, so a device keeps its cluster through swaps and
    // restarts, xor-folded to 16 bits (CLUSTER_DIGITS hex digits) as FNV's
    // authors advise: its top 16 bits alone put 1,000 ids that differ in
    // their last digits into about a hundred clusters.
    let hash = crate::stable_hash::fnv1a(device_id);
    let folded = (hash ^ (hash >> 16) ^ (hash >> 32) ^ (hash >> 48)) & 0xffff;
    let cluster = format!("{folded:04x}");
    format!("{cluster}{}", &random[CLUSTER_DIGITS..])
}

fn model_key(device_id: &str) -> String {
    format!("device/{device_id}/model")
}

/// Where versions before the device model kept a device's waiting tasks;
/// read once to carry tasks in flight over a plugin swap.
fn old_waiting_key(device_id: &str) -> String {
    format!("device/{device_id}/waiting")
}

fn readable_key(device_id: &str) -> String {
    format!("device/{device_id}/readable")
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

/// What decides whether a fresh reading is written over a [`LastReading`].
#[derive(Deserialize)]
struct Remembered {
    state: String,
    /// Absent in records written before readings kept their values; such
    /// a record is compared by its digest.
    #[serde(default)]
    values: Option<BTreeMap<Field, Value>>,
    #[serde(default)]
    online: bool,
    #[serde(default)]
    at_ms: u64,
}

impl Remembered {
    /// Whether `reading` shows another state than this record. The values
    /// themselves are compared where the record has them: that is cheaper
    /// than the reading's digest (its Debug text, hashed), which is then
    /// only made to be written.
    fn differs_from(&self, reading: &Reading) -> bool {
        match &self.values {
            Some(values) => self.online != reading.online || *values != reading.values,
            None => self.state != state_digest(reading),
        }
    }
}

/// A remembered reading is refreshed in the store once it is this old, even
/// if nothing changed, so it can stand in for a fresh read.
const REFRESH_AFTER_MS: u64 = 500;

/// What storing tasks' changes leaves to write afterwards: the audit
/// records of the tasks that ended and the tasks' own next wakes. A
/// device's tick may end a hundred tasks on one reading; gathered, their
/// records and wakes take four store round trips in all instead of up to
/// four each, every one waiting for its own commit.
#[derive(Default)]
pub struct Aftermath {
    ended: Vec<crate::audit::Entry>,
    wakes: Vec<Wake>,
}

impl Aftermath {
    /// Plans `record`'s own next wake, if it needs one (a task waiting on
    /// its device is woken by the device's tick instead).
    pub fn wake(&mut self, record: &TaskRecord, now_ms: u64) {
        if let Some(at_ms) = record.next_wake_ms(now_ms) {
            self.wakes.push(Wake {
                task_id: record.id.clone(),
                group: record.device_id.clone(),
                at_ms,
            });
        }
    }
}

/// A task as [`Store::load_many_for_update`] read it.
pub struct Loaded {
    pub record: TaskRecord,
    /// What the record was read from: its write is checked against it.
    bytes: Vec<u8>,
}

/// A change [`Store::update_many_deferred`] makes to one task: whether it
/// changed anything. It runs again on the fresh record when another writer
/// got there first.
pub type TaskChange<'c> = Box<dyn FnMut(&mut TaskRecord) -> bool + 'c>;

/// Rounds of [`Store::update_many_deferred`]'s write together before the
/// tasks still contended are updated one by one.
const MAX_SWAP_ROUNDS: usize = 3;

/// A change applied to a task in memory, to be written.
enum Applied {
    /// `change` changed nothing.
    Unchanged(TaskRecord),
    /// Changed; `bytes` is the new record's encoding.
    Changed {
        record: TaskRecord,
        bytes: Vec<u8>,
        /// The detailed rendering, when a client would see a difference.
        visible: Option<serde_json::Value>,
        /// Whether this change ended the task.
        ended: bool,
    },
    /// Written and published already ([`Store::update_deferred`]).
    Published((TaskRecord, bool)),
}

impl Applied {
    fn record(&self) -> &TaskRecord {
        match self {
            Applied::Unchanged(record)
            | Applied::Changed { record, .. }
            | Applied::Published((record, _)) => record,
        }
    }

    /// The encoding of a changed record.
    fn bytes(&self) -> &[u8] {
        match self {
            Applied::Changed { bytes, .. } => bytes,
            Applied::Unchanged(_) | Applied::Published(_) => {
                unreachable!("only a changed record is written")
            }
        }
    }

    /// [`Applied::bytes`], moved out for the write (nothing after it
    /// needs them).
    fn take_bytes(&mut self) -> Vec<u8> {
        match self {
            Applied::Changed { bytes, .. } => std::mem::take(bytes),
            Applied::Unchanged(_) | Applied::Published(_) => {
                unreachable!("only a changed record is written")
            }
        }
    }
}

/// Applies `change` to `record`. Most updates are reads that change
/// nothing (`tasks/get`), so the record is rendered only when it changed: a
/// clone costs far less than a rendering, and the rendering is kept for the
/// listeners when it differs.
fn apply(mut record: TaskRecord, change: &mut dyn FnMut(&mut TaskRecord) -> bool) -> Applied {
    let before = record.clone();
    let was_terminal = record.is_terminal();
    if !change(&mut record) {
        return Applied::Unchanged(record);
    }
    let detailed = record.to_detailed_json();
    let visible = (detailed != before.to_detailed_json()).then_some(detailed);
    Applied::Changed {
        bytes: encode(&record),
        ended: !was_terminal && record.is_terminal(),
        record,
        visible,
    }
}

/// The records, over a platform's bucket.
pub struct Store<'p> {
    platform: &'p dyn Platform,
}

/// Reads a stored record. A record from a newer plugin is refused as such,
/// whether or not it also reads as this plugin's format (a newer field
/// would be silently dropped). The record is parsed once: the format alone
/// is looked up only when the whole record does not read, to tell "newer"
/// from "broken"; a first pass for it cost a third of every decode.
fn decode(key: &str, bytes: &[u8]) -> Result<TaskRecord, String> {
    #[derive(Deserialize)]
    struct Format {
        format: u32,
    }
    let newer = |format: u32| {
        format!("store: {key} has record format {format}, newer than this plugin's {RECORD_FORMAT}")
    };
    match serde_json::from_slice::<TaskRecord>(bytes) {
        Ok(record) if record.format > RECORD_FORMAT => Err(newer(record.format)),
        Ok(record) => Ok(record),
        Err(e) => match serde_json::from_slice::<Format>(bytes) {
            Ok(Format { format }) if format > RECORD_FORMAT => Err(newer(format)),
            _ => Err(format!("store: {key} is not a task record: {e}")),
        },
    }
}

fn encode(record: &TaskRecord) -> Vec<u8> {
    serde_json::to_vec(record).expect("task records always serialize")
}

impl<'p> Store<'p> {
    pub fn new(platform: &'p dyn Platform) -> Store<'p> {
        Store { platform }
    }

    pub fn load(&self, id: &str) -> Result<Option<TaskRecord>, String> {
        let key = task_key(id);
        self.platform
            .kv()
            .get(&key)?
            .map(|b| decode(&key, &b))
            .transpose()
    }

    /// Loads several tasks in one round trip; a missing one is `None`.
    pub fn load_many(&self, ids: &[String]) -> Result<Vec<Option<TaskRecord>>, String> {
        Ok(self
            .load_many_for_update(ids)?
            .into_iter()
            .map(|loaded| loaded.map(|loaded| loaded.record))
            .collect())
    }

    /// Stores a new task, scheduled. The runner puts it on disk before
    /// anything the call does next leaves it (the command, the answer with
    /// the id), so the id can be handed out.
    ///
    /// The wake is written first: a crash between the two leaves a wake
    /// with no record, which the scheduler drops when it comes, rather than
    /// a record that nothing ever wakes.
    pub fn create(&self, record: &TaskRecord, first_wake_ms: u64) -> Result<(), String> {
        let bytes = encode(record);
        schedule_one(self.platform, &record.id, &record.device_id, first_wake_ms)?;
        cas_update(self.platform.kv(), &task_key(&record.id), |current| {
            if current.is_some() {
                return Err(format!("store: task id {} already exists", record.id));
            }
            Ok(CasUpdate::Write(bytes.clone(), ()))
        })
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
        change: impl FnMut(&mut TaskRecord) -> bool,
    ) -> Result<Option<(TaskRecord, bool)>, String> {
        let mut after = Aftermath::default();
        let outcome = self.update_deferred(id, now_ms, change, &mut after)?;
        self.finish(after)?;
        Ok(outcome)
    }

    /// [`Store::update`], leaving the audit record of a task it ends and
    /// the task's own next wake in `after`, for [`Store::finish`] to write
    /// together with those of other tasks. Listeners hear of the change at
    /// once if a client would see a difference, so each visible change
    /// reaches them once and a bare read count not at all.
    pub fn update_deferred(
        &self,
        id: &str,
        now_ms: u64,
        mut change: impl FnMut(&mut TaskRecord) -> bool,
        after: &mut Aftermath,
    ) -> Result<Option<(TaskRecord, bool)>, String> {
        let key = task_key(id);
        let applied = cas_update(self.platform.kv(), &key, |current| {
            let Some(bytes) = current else {
                return Ok(CasUpdate::Keep(None));
            };
            Ok(match apply(decode(&key, bytes)?, &mut change) {
                Applied::Unchanged(record) => CasUpdate::Keep(Some(Applied::Unchanged(record))),
                mut changed => CasUpdate::Write(changed.take_bytes(), Some(changed)),
            })
        })?;
        Ok(applied.map(|applied| self.stored(applied, now_ms, after)))
    }

    /// Loads tasks for [`Store::update_many_deferred`], in one round trip;
    /// a missing one is `None`.
    pub fn load_many_for_update(&self, ids: &[String]) -> Result<Vec<Option<Loaded>>, String> {
        let keys: Vec<String> = ids.iter().map(|id| task_key(id)).collect();
        self.platform
            .kv()
            .get_many(&keys)?
            .into_iter()
            .zip(&keys)
            .map(|(bytes, key)| {
                bytes
                    .map(|bytes| {
                        Ok(Loaded {
                            record: decode(key, &bytes)?,
                            bytes,
                        })
                    })
                    .transpose()
            })
            .collect()
    }

    /// [`Store::update_deferred`] for many tasks at once: each change is
    /// made on the task as loaded, and every task that changed is written
    /// in one [`Kv::swap_many`], one commit for all, where a device's tick
    /// that ends a hundred tasks used to wait for a hundred. If another
    /// writer changed some of them since they were loaded, nothing was
    /// written: the others are written together again, and those are
    /// updated one by one on their fresh records, as `update_deferred`
    /// does. The outcomes are in the order of `tasks`.
    ///
    /// [`Kv::swap_many`]: crate::platform::Kv::swap_many
    pub fn update_many_deferred(
        &self,
        tasks: Vec<(Loaded, TaskChange<'_>)>,
        now_ms: u64,
        after: &mut Aftermath,
    ) -> Result<Vec<Option<(TaskRecord, bool)>>, String> {
        let mut outcomes: Vec<Option<Applied>> = Vec::with_capacity(tasks.len());
        let mut changes = Vec::with_capacity(tasks.len());
        // Positions in `outcomes` of the tasks to write, with what was read.
        let mut writes: Vec<(usize, Vec<u8>)> = Vec::new();
        for (at, (loaded, mut change)) in tasks.into_iter().enumerate() {
            let applied = apply(loaded.record, &mut change);
            if matches!(applied, Applied::Changed { .. }) {
                writes.push((at, loaded.bytes));
            }
            outcomes.push(Some(applied));
            changes.push(change);
        }
        let mut again = Vec::new();
        for _ in 0..MAX_SWAP_ROUNDS {
            if writes.is_empty() {
                break;
            }
            let swaps = writes
                .iter()
                .map(|(at, seen)| {
                    let applied = outcomes[*at].as_ref().expect("a write's outcome is kept");
                    Swap {
                        key: task_key(&applied.record().id),
                        seen: Some(seen.clone()),
                        value: applied.bytes().to_vec(),
                    }
                })
                .collect();
            let changed: BTreeSet<usize> = self
                .platform
                .kv()
                .swap_many(swaps)?
                .into_iter()
                .map(|at| at as usize)
                .collect();
            if changed.is_empty() {
                writes.clear();
                break;
            }
            let (stale, kept): (Vec<_>, Vec<_>) = writes
                .into_iter()
                .enumerate()
                .partition(|(position, _)| changed.contains(position));
            again.extend(stale.into_iter().map(|(_, (at, _))| at));
            writes = kept.into_iter().map(|(_, write)| write).collect();
        }
        // Still contended after every round: one at a time, like the stale.
        again.extend(writes.into_iter().map(|(at, _)| at));
        for at in again {
            let id = outcomes[at]
                .as_ref()
                .map(|applied| applied.record().id.clone())
                .expect("a write's outcome is kept");
            outcomes[at] = self
                .update_deferred(&id, now_ms, &mut changes[at], after)?
                .map(Applied::Published);
        }
        Ok(outcomes
            .into_iter()
            .map(|applied| applied.map(|applied| self.stored(applied, now_ms, after)))
            .collect())
    }

    /// What a stored change leads to: the audit record of a task it
    /// ended, the listeners told if a client would see a difference (so
    /// each visible change reaches them once and a bare read count not at
    /// all), and the task's own next wake.
    fn stored(&self, applied: Applied, now_ms: u64, after: &mut Aftermath) -> (TaskRecord, bool) {
        match applied {
            Applied::Unchanged(record) => (record, false),
            Applied::Published(outcome) => outcome,
            Applied::Changed {
                record,
                visible,
                ended,
                ..
            } => {
                if ended {
                    // The write that ended it happens once (terminal states
                    // never change), so each task is recorded once.
                    after.ended.push(crate::audit::Entry::of_task(&record));
                }
                if let Some(detailed) = visible {
                    self.platform.task_changed(&record, detailed);
                }
                after.wake(&record, now_ms);
                (record, true)
            }
        }
    }

    /// Writes what [`Store::update_deferred`] left: the audit records in
    /// one append, then the wakes in one schedule. A record that cannot be
    /// written is logged: the tasks have ended regardless, and their
    /// listeners have heard of it.
    pub fn finish(&self, after: Aftermath) -> Result<(), String> {
        if let Err(e) = crate::audit::append_many(self.platform, &after.ended) {
            let ids: Vec<&str> = after.ended.iter().map(|entry| entry.id.as_str()).collect();
            self.platform.log(
                crate::platform::Level::Warn,
                &format!("audit trail: tasks {} not recorded: {e}", ids.join(", ")),
            );
        }
        if after.wakes.is_empty() {
            return Ok(());
        }
        self.platform.schedule(&after.wakes)
    }

    /// Removes an ended task whose time is up. The runner forgets it
    /// first, so it never answers for a task whose record is gone; if the
    /// record outlives a failure here, the task's wake removes it later.
    pub fn purge(&self, id: &str) -> Result<(), String> {
        let ids = [id.to_string()];
        self.platform.forget_tasks(&ids)?;
        self.platform.kv().delete(&task_key(id))?;
        self.platform.unschedule(&ids)
    }

    /// A device's model (empty for a device never commanded).
    pub fn device(&self, device_id: &str) -> Result<DeviceModel, String> {
        match self.platform.kv().get(&model_key(device_id))? {
            Some(bytes) => decode_model(device_id, &bytes),
            None => self.migrated(device_id),
        }
    }

    /// Changes a device's model with compare-and-swap; `change` may run more
    /// than once, always on the fresh model. Returns what it returned last.
    pub fn update_device<T>(
        &self,
        device_id: &str,
        mut change: impl FnMut(&mut DeviceModel) -> T,
    ) -> Result<T, String> {
        let mut fallback = None;
        let key = model_key(device_id);
        cas_update(self.platform.kv(), &key, |current| {
            let mut model = self.model_from(device_id, current, &mut fallback)?;
            let out = change(&mut model);
            Ok(CasUpdate::Write(encode_model(&model), out))
        })
    }

    /// The model stored as `current`, or for a device with none yet, the
    /// one an earlier plugin version left ([`Store::migrated`]), read once
    /// into `fallback` however many times a compare-and-swap runs again.
    fn model_from(
        &self,
        device_id: &str,
        current: Option<&[u8]>,
        fallback: &mut Option<DeviceModel>,
    ) -> Result<DeviceModel, String> {
        match (current, fallback.as_ref()) {
            (Some(bytes), _) => decode_model(device_id, bytes),
            (None, Some(model)) => Ok(model.clone()),
            (None, None) => {
                let model = self.migrated(device_id)?;
                *fallback = Some(model.clone());
                Ok(model)
            }
        }
    }

    /// Stores a new task together with the change to its device's model
    /// that admits it (the command counted against the device's rate
    /// limit), in one [`Kv::swap_many`]: one commit where two
    /// compare-and-swaps took one each. `admit` decides on the model as read;
    /// when it refuses, nothing is written and its refusal is returned.
    /// When another writer changed the model first, `admit` decides again
    /// on the fresh one.
    ///
    /// As in [`Store::create`], the task's first wake is written before
    /// the record, so a crash between the two leaves a wake with no record
    /// (dropped when it comes), never a record nothing wakes.
    ///
    /// [`Kv::swap_many`]: crate::platform::Kv::swap_many
    pub fn create_admitted<E>(
        &self,
        record: &TaskRecord,
        first_wake_ms: u64,
        mut admit: impl FnMut(&mut DeviceModel) -> Result<(), E>,
    ) -> Result<Result<(), E>, String> {
        let device_id = &record.device_id;
        let keys = [model_key(device_id), task_key(&record.id)];
        let task = encode(record);
        let mut fallback = None;
        let mut scheduled = false;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let seen = self.platform.kv().get(&keys[0])?;
            let mut model = self.model_from(device_id, seen.as_deref(), &mut fallback)?;
            if let Err(refused) = admit(&mut model) {
                if scheduled {
                    self.platform.unschedule(std::slice::from_ref(&record.id))?;
                }
                return Ok(Err(refused));
            }
            if !scheduled {
                schedule_one(self.platform, &record.id, device_id, first_wake_ms)?;
                scheduled = true;
            }
            let swaps = vec![
                Swap {
                    key: keys[0].clone(),
                    seen,
                    value: encode_model(&model),
                },
                Swap {
                    key: keys[1].clone(),
                    seen: None,
                    value: task.clone(),
                },
            ];
            let changed = self.platform.kv().swap_many(swaps)?;
            if changed.contains(&1) {
                return Err(format!("store: task id {} already exists", record.id));
            }
            if changed.is_empty() {
                return Ok(Ok(()));
            }
        }
        Err(cas_gave_up(&keys[0]))
    }

    /// Changes a device's model and one of its tasks in one
    /// [`Kv::swap_many`]: a command the API took joins its device's
    /// timeline and its task records the send in one commit, so neither is
    /// ever on disk without the other, and the call waits for one commit
    /// instead of two. `task_change` runs after `model_change` on the same
    /// round and sees what it returned. Both run again, on fresh records,
    /// when another writer changed either first. The task's change is
    /// published and rescheduled as [`Store::update`] does. When
    /// `task_change` changes nothing, only the model is swapped, and a task
    /// another writer changes meanwhile does not send it round again: so
    /// `model_change` must not depend on the task's stored fields. `None`:
    /// there is no such task, and nothing was written.
    ///
    /// [`Kv::swap_many`]: crate::platform::Kv::swap_many
    pub fn update_device_and_task<T>(
        &self,
        device_id: &str,
        task_id: &str,
        now_ms: u64,
        mut model_change: impl FnMut(&mut DeviceModel) -> T,
        mut task_change: impl FnMut(&T, &mut TaskRecord) -> bool,
    ) -> Result<Option<(T, TaskRecord)>, String> {
        let keys = [model_key(device_id), task_key(task_id)];
        let mut fallback = None;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let mut seen = self.platform.kv().get_many(&keys)?.into_iter();
            let (seen_model, seen_task) = (seen.next().flatten(), seen.next().flatten());
            let Some(seen_task) = seen_task else {
                return Ok(None);
            };
            let mut model = self.model_from(device_id, seen_model.as_deref(), &mut fallback)?;
            let out = model_change(&mut model);
            let mut applied = apply(decode(&keys[1], &seen_task)?, &mut |t: &mut TaskRecord| {
                task_change(&out, t)
            });
            let mut swaps = vec![Swap {
                key: keys[0].clone(),
                seen: seen_model,
                value: encode_model(&model),
            }];
            if matches!(applied, Applied::Changed { .. }) {
                swaps.push(Swap {
                    key: keys[1].clone(),
                    seen: Some(seen_task),
                    value: applied.take_bytes(),
                });
            }
            if self.platform.kv().swap_many(swaps)?.is_empty() {
                let mut after = Aftermath::default();
                let (record, _) = self.stored(applied, now_ms, &mut after);
                self.finish(after)?;
                return Ok(Some((out, record)));
            }
        }
        Err(cas_gave_up(&keys[0]))
    }

    /// A device as an earlier plugin version left it: its waiting tasks and
    /// read count, so tasks in flight carry on after a swap.
    fn migrated(&self, device_id: &str) -> Result<DeviceModel, String> {
        #[derive(Deserialize, Default)]
        struct OldWaiting {
            #[serde(default)]
            tasks: BTreeMap<String, Waiter>,
            #[serde(default)]
            reads: u64,
            #[serde(default)]
            wake_at: Option<u64>,
        }
        let old: OldWaiting = self
            .platform
            .kv()
            .get(&old_waiting_key(device_id))?
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Ok(DeviceModel {
            waiting: old.tasks,
            reads: old.reads,
            wake_at: old.wake_at,
            ..DeviceModel::default()
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
        cas_update(self.platform.kv(), &readable_key(device_id), |current| {
            // Reads are frequent and the state rarely changes: write when it
            // did, or when the remembered reading grows stale. The record,
            // and its digest, are built only to be written.
            let old = current.and_then(|c| serde_json::from_slice::<Remembered>(c).ok());
            let changed = old.as_ref().is_none_or(|o| o.differs_from(reading));
            let stale = old
                .as_ref()
                .is_none_or(|o| now_ms.saturating_sub(o.at_ms) >= REFRESH_AFTER_MS);
            Ok(if changed || stale {
                let fresh = LastReading {
                    fields: reading.values.keys().copied().collect(),
                    state: state_digest(reading),
                    values: reading.values.clone(),
                    online: reading.online,
                    at_ms: now_ms,
                };
                let bytes = serde_json::to_vec(&fresh).expect("readings serialize");
                CasUpdate::Write(bytes, changed)
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
            .last_reading(device_id)?
            .filter(|r| r.at_ms > 0 && now_ms.saturating_sub(r.at_ms) <= max_age_ms)
            .map(|r| Reading {
                online: r.online,
                values: r.values,
                ..Reading::default()
            }))
    }

    /// The fields a device reported last time it could be read.
    pub fn remembered_readable(&self, device_id: &str) -> Result<Option<BTreeSet<Field>>, String> {
        Ok(self.last_reading(device_id)?.map(|r| r.fields))
    }

    fn last_reading(&self, device_id: &str) -> Result<Option<LastReading>, String> {
        Ok(self
            .platform
            .kv()
            .get(&readable_key(device_id))?
            .and_then(|b| serde_json::from_slice::<LastReading>(&b).ok()))
    }
}

fn encode_model(model: &DeviceModel) -> Vec<u8> {
    serde_json::to_vec(model).expect("device models serialize")
}

fn decode_model(device_id: &str, bytes: &[u8]) -> Result<DeviceModel, String> {
    serde_json::from_slice(bytes)
        .map_err(|e| format!("store: the model of {device_id} is unreadable: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{Status, Timing};

    fn timing() -> Timing {
        Timing {
            ttl_ms: 60_000,
            poll_interval_ms: 1_000,
            settle_window_ms: 10_000,
            stable_reads: 2,
            dense_read_ms: 200,
        }
    }

    fn record_text(format: u32) -> serde_json::Value {
        let mut record = TaskRecord::new("t1".into(), "set_power", "ac-1", vec![], timing(), 1_000);
        record.format = format;
        serde_json::to_value(&record).unwrap()
    }

    #[test]
    fn a_reading_is_a_change_when_its_values_or_presence_differ_and_old_records_by_digest() {
        use crate::platform::memory::MemoryPlatform;
        let platform = MemoryPlatform::new(1_000, &[]);
        let store = Store::new(&platform);
        let reading = |target: f64, online: bool| {
            let mut values = BTreeMap::new();
            values.insert(Field::TargetTemperature, Value::Number(target));
            values.insert(Field::Mode, Value::Choice("cool".into()));
            Reading {
                online,
                values,
                ..Reading::default()
            }
        };
        let stored = || -> serde_json::Value {
            let bytes = platform.kv().get(&readable_key("ac-1")).unwrap().unwrap();
            serde_json::from_slice(&bytes).unwrap()
        };
        let changes = |target: f64, online: bool, at_ms: u64| {
            store
                .remember_reading("ac-1", &reading(target, online), at_ms)
                .unwrap()
        };
        assert!(changes(22.0, true, 1_000));
        assert!(!changes(22.0, true, 1_100));
        assert!(changes(23.0, true, 1_200));
        assert!(changes(23.0, false, 1_300));
        // What is written still carries the digest earlier versions compare.
        assert_eq!(stored()["state"], state_digest(&reading(23.0, false)));
        // A record from before readings kept their values: its digest decides.
        let old = serde_json::json!({"fields": ["mode", "target_temperature"],
            "state": state_digest(&reading(23.0, false)), "at_ms": 1_300});
        platform
            .kv()
            .set_many(&[(readable_key("ac-1"), old.to_string().into_bytes())])
            .unwrap();
        assert!(!changes(23.0, false, 1_400));
        assert!(changes(24.0, false, 1_500));
    }

    #[test]
    fn a_devices_task_ids_start_alike_and_keep_the_rest_of_their_randomness() {
        let random = "0123456789abcdef0123456789abcdef";
        let other = "fedcba9876543210fedcba9876543210";
        let (a, b) = (
            clustered_task_id("ac-00001", random),
            clustered_task_id("ac-00001", other),
        );
        // Still the shape get_task accepts: 32 lower-case hex digits.
        for id in [&a, &b] {
            assert_eq!(id.len(), 32);
            assert!(
                id.bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
            );
        }
        assert_eq!(
            a[..CLUSTER_DIGITS],
            b[..CLUSTER_DIGITS],
            "one device, one cluster"
        );
        assert_eq!(a[CLUSTER_DIGITS..], random[CLUSTER_DIGITS..]);
        assert_eq!(b[CLUSTER_DIGITS..], other[CLUSTER_DIGITS..]);
        // The same from one run to the next (a fixed hash, not std's).
        assert_eq!(a, clustered_task_id("ac-00001", random));
        // Devices spread over the clusters: 1,000 devices, hardly any
        // sharing one (65,536 clusters).
        let clusters: BTreeSet<String> = (0..1_000)
            .map(|i| clustered_task_id(&format!("ac-{i:05}"), random)[..CLUSTER_DIGITS].to_string())
            .collect();
        assert!(clusters.len() > 950, "{} clusters", clusters.len());
    }

    #[test]
    fn tasks_updated_together_are_written_at_once_and_a_raced_one_on_its_own() {
        use crate::platform::memory::MemoryPlatform;
        let platform = MemoryPlatform::new(1_000, &[]);
        let store = Store::new(&platform);
        let ids: Vec<String> = ["t1", "t2", "t3", "t4"].map(String::from).to_vec();
        for id in &ids {
            let record = TaskRecord::new(id.clone(), "set_power", "ac-1", vec![], timing(), 1_000);
            store.create(&record, 5_000).unwrap();
        }
        // Someone else cancels t2 between the load and the write.
        let loaded = store.load_many_for_update(&ids).unwrap();
        let mut raced = loaded[1].as_ref().unwrap().record.clone();
        assert!(raced.cancel(1_500));
        platform.race_next_swap("task/t2", encode(&raced));
        platform.take_changes();

        let changes: Vec<(Loaded, TaskChange<'_>)> = loaded
            .into_iter()
            .map(|task| {
                let task = task.unwrap();
                // t4 is only read: nothing to write for it.
                let change: TaskChange<'_> = if task.record.id == "t4" {
                    Box::new(|_| false)
                } else {
                    Box::new(|t| t.cancel(2_000))
                };
                (task, change)
            })
            .collect();
        let mut after = Aftermath::default();
        let outcomes = store
            .update_many_deferred(changes, 2_000, &mut after)
            .unwrap();

        let outcome = |at: usize| {
            let (record, changed) = outcomes[at].as_ref().unwrap();
            (
                record.id.as_str(),
                record.status,
                record.updated_at_ms,
                *changed,
            )
        };
        assert_eq!(outcome(0), ("t1", Status::Cancelled, 2_000, true));
        // The cancel ran again on the record the other writer left, which
        // had ended already: nothing changed, and its time is the other's.
        assert_eq!(outcome(1), ("t2", Status::Cancelled, 1_500, false));
        assert_eq!(outcome(2), ("t3", Status::Cancelled, 2_000, true));
        assert_eq!(outcome(3), ("t4", Status::Working, 1_000, false));
        for (id, status) in [
            ("t1", Status::Cancelled),
            ("t2", Status::Cancelled),
            ("t3", Status::Cancelled),
            ("t4", Status::Working),
        ] {
            assert_eq!(store.load(id).unwrap().unwrap().status, status, "{id}");
        }
        assert_eq!(store.load("t2").unwrap().unwrap(), raced);
        // Each change this call made is told and recorded once.
        let told: Vec<String> = platform.take_changes().into_iter().map(|t| t.id).collect();
        assert_eq!(told, ["t1", "t3"]);
        let ended: Vec<&str> = after.ended.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ended, ["t1", "t3"]);
    }

    /// A model whose rate window holds commands sent at `at`.
    fn model_with_commands(at: &[u64]) -> Vec<u8> {
        encode_model(&DeviceModel {
            recent_commands: at.to_vec(),
            ..DeviceModel::default()
        })
    }

    #[test]
    fn a_task_is_stored_with_its_admission_in_one_write_or_not_at_all() {
        use crate::platform::memory::MemoryPlatform;
        let platform = MemoryPlatform::new(1_000, &[]);
        let store = Store::new(&platform);
        let task =
            |id: &str| TaskRecord::new(id.into(), "set_power", "ac-1", vec![], timing(), 1_000);
        let admit =
            |limit: u32| move |m: &mut DeviceModel| m.admit_command(1_000, limit, &BTreeMap::new());

        // Another writer counts a command just before the write: admission
        // is decided again on its model, and counts both.
        platform.race_next_swap("device/ac-1/model", model_with_commands(&[900]));
        assert_eq!(
            store.create_admitted(&task("t1"), 5_000, admit(2)).unwrap(),
            Ok(())
        );
        assert_eq!(store.device("ac-1").unwrap().recent_commands, [900, 1_000]);
        assert_eq!(store.load("t1").unwrap().unwrap(), task("t1"));
        let woken: Vec<String> = platform.wakes().into_iter().map(|w| w.task_id).collect();
        assert_eq!(woken, ["t1"]);

        // Over the limit: no record, no wake, the model as it was.
        let refused = store.create_admitted(&task("t2"), 5_000, admit(2)).unwrap();
        assert_eq!(refused, Err(59_900));
        assert_eq!(store.load("t2").unwrap(), None);
        assert_eq!(store.device("ac-1").unwrap().recent_commands, [900, 1_000]);

        // Admitted on the model as read, refused on the fresh one: the wake
        // written for it is taken back.
        platform.race_next_swap("device/ac-1/model", model_with_commands(&[700, 800, 900]));
        let refused = store.create_admitted(&task("t3"), 5_000, admit(3)).unwrap();
        assert_eq!(refused, Err(59_700));
        assert_eq!(store.load("t3").unwrap(), None);
        let woken: Vec<String> = platform.wakes().into_iter().map(|w| w.task_id).collect();
        assert_eq!(woken, ["t1"]);

        // An id taken already is an error, and the record stays as it was.
        let mut again = task("t1");
        again.tool = "set_fan".into();
        let err = store.create_admitted(&again, 5_000, admit(0)).unwrap_err();
        assert_eq!(err, "store: task id t1 already exists");
        assert_eq!(store.load("t1").unwrap().unwrap(), task("t1"));
    }

    #[test]
    fn a_device_and_its_task_change_together_and_again_on_fresh_records() {
        use crate::platform::memory::MemoryPlatform;
        let platform = MemoryPlatform::new(1_000, &[]);
        let store = Store::new(&platform);
        let record = TaskRecord::new("t1".into(), "set_power", "ac-1", vec![], timing(), 1_000);
        store.create(&record, 5_000).unwrap();
        platform.take_changes();
        let count_a_read = |m: &mut DeviceModel| {
            m.reads += 1;
            m.reads
        };

        // Both written, and the task's change sees the model's outcome.
        let (reads, stored) = store
            .update_device_and_task("ac-1", "t1", 2_000, count_a_read, |reads, t| {
                assert_eq!(*reads, 1);
                t.cancel(2_000)
            })
            .unwrap()
            .unwrap();
        assert_eq!((reads, stored.status), (1, Status::Cancelled));
        assert_eq!(store.load("t1").unwrap().unwrap(), stored);
        assert_eq!(store.device("ac-1").unwrap().reads, 1);
        let told: Vec<String> = platform.take_changes().into_iter().map(|t| t.id).collect();
        assert_eq!(told, ["t1"]);

        // Another writer changes the task first: nothing of the first round
        // is written, and both changes run again on the fresh records.
        let record = TaskRecord::new("t2".into(), "set_power", "ac-1", vec![], timing(), 1_000);
        store.create(&record, 5_000).unwrap();
        let mut raced = record.clone();
        assert!(raced.cancel(1_500));
        platform.race_next_swap("task/t2", encode(&raced));
        platform.take_changes();
        let (reads, stored) = store
            .update_device_and_task("ac-1", "t2", 2_000, count_a_read, |_, t| t.cancel(2_000))
            .unwrap()
            .unwrap();
        assert_eq!((reads, stored), (2, raced));
        assert_eq!(store.device("ac-1").unwrap().reads, 2);
        assert!(
            platform.take_changes().is_empty(),
            "the other writer's change is not ours"
        );

        // No such task: nothing written.
        let outcome = store
            .update_device_and_task("ac-2", "t9", 2_000, count_a_read, |_, _| true)
            .unwrap();
        assert!(outcome.is_none());
        assert!(!platform.keys().iter().any(|k| k.starts_with("device/ac-2")));
    }

    #[test]
    fn a_record_of_this_format_reads_back() {
        let text = record_text(RECORD_FORMAT).to_string();
        let record = decode("task/t1", text.as_bytes()).unwrap();
        assert_eq!((record.id.as_str(), record.format), ("t1", RECORD_FORMAT));
    }

    #[test]
    fn a_newer_record_is_refused_as_newer_whether_or_not_it_reads() {
        let newer = RECORD_FORMAT + 1;
        let expected = format!(
            "store: task/t1 has record format {newer}, newer than this plugin's {RECORD_FORMAT}"
        );
        // Readable as this format (its new fields would be dropped).
        let mut readable = record_text(newer);
        readable["a_field_from_the_future"] = serde_json::json!(true);
        assert_eq!(
            decode("task/t1", readable.to_string().as_bytes()).unwrap_err(),
            expected
        );
        // Not readable as this format at all.
        let unreadable = serde_json::json!({"format": newer, "shape": "new"});
        assert_eq!(
            decode("task/t1", unreadable.to_string().as_bytes()).unwrap_err(),
            expected
        );
    }

    #[test]
    fn a_broken_record_says_what_is_wrong() {
        let mut missing = record_text(RECORD_FORMAT);
        missing.as_object_mut().unwrap().remove("status");
        let err = decode("task/t1", missing.to_string().as_bytes()).unwrap_err();
        assert!(
            err.starts_with("store: task/t1 is not a task record: missing field `status`"),
            "{err}"
        );
        let err = decode("task/t1", b"{not json").unwrap_err();
        assert!(
            err.starts_with("store: task/t1 is not a task record: "),
            "{err}"
        );
    }
}
