//! What the plugin needs from the world around it, as two small traits.
//!
//! In the component, [`wasi::WasiPlatform`] answers them with the runner's
//! imports (`wasi:keyvalue`, `wasi:clocks`, `settle:plugin/runner`). Natively,
//! [`memory::MemoryPlatform`] answers them from memory with a clock the
//! caller moves, so the whole command, wake and answer logic runs in plain
//! unit tests and in the randomized model test (`guest/tests/verdicts.rs`).
//!
//! Device APIs are not here: they sit behind the [`crate::driver::Driver`]
//! trait, which a test replaces with a device of its own.

pub mod memory;
pub mod wasi;

use crate::task::TaskRecord;

/// A single compare-and-swap's attempts and its give-up error, as the SDK
/// defines them: the store's loops over [`Kv::swap_many`] give up at the
/// same point with the same words.
pub use settle_plugin_sdk::host::{MAX_CAS_ATTEMPTS, cas_gave_up};

/// A key-value bucket with compare-and-swap: the tenant's namespace in the
/// runner's store.
pub trait Kv {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String>;

    /// Reads many keys in one round trip; a missing key is `None`.
    fn get_many(&self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, String>;

    fn delete(&self, key: &str) -> Result<(), String>;

    /// Writes many keys in one round trip, durable together: for records
    /// nobody else writes (an audit record under a number just reserved),
    /// since it overwrites without looking.
    fn set_many(&self, pairs: &[(String, Vec<u8>)]) -> Result<(), String>;

    /// Removes many keys in one round trip; a missing key is not an error.
    fn delete_many(&self, keys: &[String]) -> Result<(), String>;

    /// Reads `key`, lets `decide` choose what to write (`None` keeps it),
    /// and writes only if nobody wrote the key in between; otherwise runs
    /// `decide` again on the fresh value. [`cas_update`] is the typed way in.
    fn cas(&self, key: &str, decide: &mut CasDecision<'_>) -> Result<(), String>;

    /// Writes every swap's value if every key still holds what its swap
    /// saw, together (one commit); otherwise writes nothing and returns the
    /// positions of the swaps whose key changed. Empty: all were written.
    fn swap_many(&self, swaps: Vec<Swap>) -> Result<Vec<u32>, String>;
}

/// One key of [`Kv::swap_many`]: write `value` if the key still holds
/// `seen` (`None`: absent).
pub struct Swap {
    pub key: String,
    pub seen: Option<Vec<u8>>,
    pub value: Vec<u8>,
}

/// One round of a compare-and-swap: the current value in, the value to
/// write (or `None` to leave it) out.
pub type CasDecision<'a> = dyn FnMut(Option<&[u8]>) -> Result<Option<Vec<u8>>, String> + 'a;

/// What a compare-and-swap update wants to do with the current value.
pub enum CasUpdate<T> {
    /// Write this value and return `T`.
    Write(Vec<u8>, T),
    /// Leave the key as it is and return `T`.
    Keep(T),
}

/// Compare-and-swap with a result: `update` may run more than once, always
/// on the freshest value, and what it returned last is returned.
pub fn cas_update<T>(
    kv: &dyn Kv,
    key: &str,
    mut update: impl FnMut(Option<&[u8]>) -> Result<CasUpdate<T>, String>,
) -> Result<T, String> {
    let mut out = None;
    kv.cas(key, &mut |current| match update(current)? {
        CasUpdate::Write(bytes, value) => {
            out = Some(value);
            Ok(Some(bytes))
        }
        CasUpdate::Keep(value) => {
            out = Some(value);
            Ok(None)
        }
    })?;
    out.ok_or_else(|| format!("store: compare-and-swap of {key} decided nothing"))
}

/// A request to be woken: the runner calls `advance(group, [task_id])` at or
/// after `at_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wake {
    pub task_id: String,
    pub group: String,
    pub at_ms: u64,
}

/// Log levels, as the runner's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

/// Everything the plugin's logic reaches outside itself, except devices.
pub trait Platform {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// An opaque id with at least 128 random bits (it is a bearer handle).
    fn random_id(&self) -> String;

    /// A configuration value the operator set, if any.
    fn config(&self, key: &str) -> Result<Option<String>, String>;

    /// The tenant's bucket.
    fn kv(&self) -> &dyn Kv;

    /// On disk before anything the call does next leaves the runner (the
    /// runner's rule for every write); a later wake for the same id
    /// replaces an earlier one.
    fn schedule(&self, wakes: &[Wake]) -> Result<(), String>;

    fn unschedule(&self, task_ids: &[String]) -> Result<(), String>;

    /// These ended tasks are being removed: the runner stops answering
    /// `tasks/get` for them. Called before their records are deleted.
    fn forget_tasks(&self, task_ids: &[String]) -> Result<(), String>;

    /// A task changed in a way a client can see. `detailed` is its
    /// [`TaskRecord::to_detailed_json`], which the caller has already
    /// rendered to tell that the change is visible.
    fn task_changed(&self, task: &TaskRecord, detailed: serde_json::Value);

    /// A resource changed; its subscribers are told.
    fn resource_updated(&self, uri: &str);

    fn log(&self, level: Level, message: &str);
}

/// Schedules one wake.
pub fn schedule_one(
    platform: &dyn Platform,
    task_id: &str,
    group: &str,
    at_ms: u64,
) -> Result<(), String> {
    platform.schedule(&[Wake {
        task_id: task_id.to_string(),
        group: group.to_string(),
        at_ms,
    }])
}
