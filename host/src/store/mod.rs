//! Durable state: the plugins' key-value data and the scheduler's due times.
//!
//! Both live in one store so that a restarted runner (or, with a shared
//! backend, another replica) finds every task and every wake-up where it was
//! left. Keys are namespaced per tenant here, below the plugin's view: a
//! plugin can only name keys inside its own namespace.

mod memory;
mod redb_file;
mod redis_server;

use memory::MemoryStore;
use redb_file::RedbStore;
use redis_server::RedisStore;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A store failure. The plugin sees it as `wasi:keyvalue` `other(..)`, the
/// scheduler retries, MCP callers get an internal error that says so.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The backend could not be reached or refused the operation; retrying
    /// later may work.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored value is not what it should be; retrying will not help.
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
}

/// The result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// A request to advance a task at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    /// The task, within the plugin's namespace.
    pub task_id: String,
    /// Tasks of one group due together are advanced in one call.
    pub group: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// A task whose time has come, claimed for one advance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The tenant whose plugin advances it.
    pub namespace: String,
    /// The task, within that namespace.
    pub task_id: String,
    /// The group it was scheduled with.
    pub group: String,
}

/// One key of [`Store::compare_and_swap_many`]: `value` is written if the
/// key still holds `seen` (`None`: absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swap {
    /// The key, within the namespace.
    pub key: String,
    /// What the caller read there.
    pub seen: Option<Vec<u8>>,
    /// What to write.
    pub value: Vec<u8>,
}

/// The positions of the swaps whose key no longer holds what they saw;
/// `holds(key, seen)` tells whether it does.
pub(crate) fn changed_since_seen<E>(
    swaps: &[Swap],
    mut holds: impl FnMut(&str, Option<&[u8]>) -> Result<bool, E>,
) -> Result<Vec<u32>, E> {
    let mut changed = Vec::new();
    for (at, swap) in (0u32..).zip(swaps) {
        if !holds(&swap.key, swap.seen.as_deref())? {
            changed.push(at);
        }
    }
    Ok(changed)
}

/// The most keys one `list-keys` page returns; bounds a plugin's single call.
pub const LIST_PAGE: usize = 1000;

/// How replicas that share a store carry change notices to one another.
pub enum Relay {
    /// Pub/sub on the Redis server that holds the store.
    Redis(redis::Client),
}

/// When a write must be on disk (the file backend; Redis and memory keep
/// their own rules and ignore it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Before the write is acknowledged.
    OnWrite,
    /// By the next [`Store::flush`] (or sooner: a write that finds others
    /// waiting shares their fsync). The writes of a plugin call: a call
    /// writes several times, and only what leaves the runner (an outbound
    /// request that may change something, a notification, the call's
    /// answer) needs what came before it on disk. One fsync then covers
    /// them all, and every other call's waiting writes too.
    AtFlush,
}

/// Where state lives. Cheap to clone; clones share the backend.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    /// How this handle's writes reach the disk.
    durability: Durability,
    /// A deferring handle's mark: it wrote, or read a value not yet on
    /// disk, since its last [`Store::flush_owed`]. 0 when it did not;
    /// otherwise 1 + the backend's [`Store::epoch`] when it first did.
    owed: Option<Arc<AtomicU64>>,
}

#[derive(Clone)]
enum Backend {
    /// Process memory: tests, and runs where losing tasks on exit is fine.
    Memory(Arc<MemoryStore>),
    /// One redb file: the default, durable, no server to run.
    Redb(Arc<RedbStore>),
    /// A Redis server shared by several runner replicas.
    Redis(Arc<RedisStore>),
}

use Backend::{Memory, Redb, Redis};

/// The full key of `key` in `namespace`. Namespaces are tenant names, which
/// never contain `/`, so no key of one namespace can spell a key of another.
pub(crate) fn full_key(namespace: &str, key: &str) -> String {
    format!("{namespace}/{key}")
}

/// The schedule's name for a task: unique across namespaces.
pub(crate) fn task_ref(namespace: &str, task_id: &str) -> String {
    format!("{namespace}/{task_id}")
}

pub(crate) fn split_task_ref(task_ref: &str) -> Option<(&str, &str)> {
    task_ref.split_once('/')
}

impl Store {
    /// A store in process memory, empty.
    pub fn memory() -> Store {
        Store::on(Memory(Arc::new(MemoryStore::default())))
    }

    fn on(backend: Backend) -> Store {
        Store {
            backend,
            durability: Durability::OnWrite,
            owed: None,
        }
    }

    /// The same store for one plugin call: its writes are on disk by the
    /// next [`Store::flush`] instead of when each is acknowledged
    /// ([`Durability::AtFlush`]), and the handle remembers whether the
    /// call wrote or read anything not yet on disk, so that
    /// [`Store::flush_owed`] waits only when the call's answer depends on
    /// such a write.
    pub fn deferring(&self) -> Store {
        Store {
            backend: self.backend.clone(),
            durability: Durability::AtFlush,
            owed: Some(Arc::new(AtomicU64::new(0))),
        }
    }

    /// The same store, writing [`Durability::OnWrite`]: for the last write
    /// of a call whose writes must reach the disk anyway. One fsync'd
    /// commit then puts them all there, and the flush after it finds
    /// nothing left: one job fewer for the store's writer.
    pub fn on_write(&self) -> Store {
        Store::on(self.backend.clone())
    }

    /// Flushes if this handle wrote, or read a value not yet on disk, since
    /// its last flush: the step before a call's answer leaves.
    pub async fn flush_owed(&self) -> StoreResult<()> {
        match self
            .owed
            .as_ref()
            .map(|owed| owed.swap(0, Ordering::AcqRel))
        {
            None | Some(0) => Ok(()),
            Some(since) => self.flush_from(since - 1).await,
        }
    }

    /// Puts what this handle owes on disk, and every write before it; an
    /// error if the store was opened again after a disk error since the
    /// handle's first write of `epoch` (what it owed is gone, and must not
    /// be reported as on disk). Checked after the flush: a reopen during it
    /// may have lost them too.
    async fn flush_from(&self, epoch: u64) -> StoreResult<()> {
        self.flush_backend().await?;
        if self.epoch() != epoch {
            return Err(StoreError::Unavailable(
                "writes this call made were lost: the store was opened again after a disk error before they reached the disk".into(),
            ));
        }
        Ok(())
    }

    /// The file backend's reopen after a disk error, without the error.
    #[cfg(test)]
    pub(crate) fn fail_and_reopen(&self) {
        match &self.backend {
            Redb(r) => r.fail_and_reopen(),
            Memory(_) | Redis(_) => unreachable!("only a file is opened again"),
        }
    }

    /// Makes the file backend's next commit panic.
    #[cfg(test)]
    pub(crate) fn panic_in_next_commit(&self) {
        match &self.backend {
            Redb(r) => r.panic_in_next_commit(),
            Memory(_) | Redis(_) => unreachable!("only the file backend has a writer thread"),
        }
    }

    /// Whether [`Store::flush_owed`] would flush now.
    #[cfg(test)]
    pub(crate) fn owes_flush(&self) -> bool {
        self.owed
            .as_ref()
            .is_some_and(|owed| owed.load(Ordering::Acquire) != 0)
    }

    /// Marks a deferring handle as owing a flush, from the current epoch
    /// unless it owed one already.
    fn owe(&self) {
        self.owe_since(self.epoch());
    }

    fn owe_since(&self, epoch: u64) {
        if let Some(owed) = &self.owed {
            let _ = owed.compare_exchange(0, epoch + 1, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// How many times the file backend was opened again after a disk
    /// error: writes not on disk before then are lost. 0 for the others.
    fn epoch(&self) -> u64 {
        match &self.backend {
            Redb(r) => r.epoch(),
            Memory(_) | Redis(_) => 0,
        }
    }

    /// After a read of `key` in `ns` that started in `epoch`: a deferring
    /// handle owes a flush when the value it read may not be on disk yet,
    /// or the store was opened again during the read (the value may be one
    /// the reopen lost).
    fn saw(&self, ns: &str, key: &str, epoch: u64) {
        if self.owed.is_some() && (self.unflushed(ns, key) || self.epoch() != epoch) {
            self.owe_since(epoch);
        }
    }

    /// Puts every write acknowledged so far on disk (the file backend; the
    /// others already are, by their own rules). At once when nothing waits.
    /// On a deferring handle that owes a flush, an error if its writes were
    /// lost to a reopen ([`Store::flush_owed`]), and it still owes it
    /// after; once they are on disk it owes nothing for them, so a reopen
    /// later in the call (which cannot lose them) does not report them lost.
    pub async fn flush(&self) -> StoreResult<()> {
        let Some(owed) = &self.owed else {
            return self.flush_backend().await;
        };
        // Taken before the flush: a write the call makes while it runs may
        // not be covered, and marks the handle afresh.
        match owed.swap(0, Ordering::AcqRel) {
            0 => self.flush_backend().await,
            since => {
                let flushed = self.flush_from(since - 1).await;
                if flushed.is_err() {
                    // The oldest mark is the one whose writes may be lost.
                    let _ = owed.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                        (now == 0 || now > since).then_some(since)
                    });
                }
                flushed
            }
        }
    }

    async fn flush_backend(&self) -> StoreResult<()> {
        match &self.backend {
            Redb(r) => r.flush().await,
            Memory(_) | Redis(_) => Ok(()),
        }
    }

    /// Whether the value of `key` in `ns` may not be on disk yet: a caller
    /// that read it flushes before it passes on what it read.
    pub fn unflushed(&self, ns: &str, key: &str) -> bool {
        match &self.backend {
            Redb(r) => r.unflushed(&full_key(ns, key)),
            Memory(_) | Redis(_) => false,
        }
    }

    /// Whether any write may not be on disk yet.
    pub fn any_unflushed(&self) -> bool {
        match &self.backend {
            Redb(r) => r.any_unflushed(),
            Memory(_) | Redis(_) => false,
        }
    }

    /// Opens (or creates) a redb file.
    pub fn open_file(path: &Path) -> StoreResult<Store> {
        Ok(Store::on(Redb(Arc::new(RedbStore::open(path)?))))
    }

    /// Connects to Redis (`redis://host:port/db`); the connection is made
    /// on first use and remade after failures.
    pub fn open_redis(url: &str) -> StoreResult<Store> {
        Ok(Store::on(Redis(Arc::new(RedisStore::open(url)?))))
    }

    /// Chooses a backend from a `--store` value: `memory`, a `redis://` URL,
    /// or a file path.
    pub fn open(spec: &str) -> StoreResult<Store> {
        if spec == "memory" {
            Ok(Store::memory())
        } else if spec.starts_with("redis://") || spec.starts_with("rediss://") {
            Store::open_redis(spec)
        } else {
            Store::open_file(Path::new(spec))
        }
    }

    /// How change notices reach the other replicas sharing this store;
    /// `None` when the store is not shared. Each backend that can be shared
    /// says how for itself, so a new one cannot be taken for another.
    pub fn relay(&self) -> Option<Relay> {
        match &self.backend {
            Memory(_) | Redb(_) => None,
            Redis(r) => Some(Relay::Redis(r.client())),
        }
    }

    /// The value of `key` in namespace `ns`.
    pub async fn get(&self, ns: &str, key: &str) -> StoreResult<Option<Vec<u8>>> {
        let epoch = self.epoch();
        let value = match &self.backend {
            Memory(m) => Ok(m.get(&full_key(ns, key))),
            Redb(r) => r.get(full_key(ns, key)).await,
            Redis(r) => r.get(&full_key(ns, key)).await,
        };
        self.saw(ns, key, epoch);
        value
    }

    /// Several values in one round trip, in the order of `keys`.
    pub async fn get_many(&self, ns: &str, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let full: Vec<String> = keys.iter().map(|k| full_key(ns, k)).collect();
        let epoch = self.epoch();
        let values = match &self.backend {
            Memory(m) => Ok(full.iter().map(|k| m.get(k)).collect()),
            Redb(r) => r.get_many(full).await,
            Redis(r) => r.get_many(&full).await,
        };
        for key in keys {
            self.saw(ns, key, epoch);
        }
        values
    }

    /// Writes a value; on disk when this returns, or by the next flush
    /// (file backend, [`Durability`]).
    pub async fn set(&self, ns: &str, key: &str, value: Vec<u8>) -> StoreResult<()> {
        self.owe();
        match &self.backend {
            Memory(m) => {
                m.set(full_key(ns, key), value);
                Ok(())
            }
            Redb(r) => r.set(full_key(ns, key), value, self.durability).await,
            Redis(r) => r.set(&full_key(ns, key), value).await,
        }
    }

    /// Writes several values as one change: on the file backend one commit
    /// however many there are, so a plugin that writes a batch (the audit
    /// records of every task a device reading ended) waits for one disk
    /// flush, not one each.
    pub async fn set_many(&self, ns: &str, pairs: Vec<(String, Vec<u8>)>) -> StoreResult<()> {
        self.owe();
        let pairs: Vec<(String, Vec<u8>)> = pairs
            .into_iter()
            .map(|(key, value)| (full_key(ns, &key), value))
            .collect();
        match &self.backend {
            Memory(m) => {
                m.set_many(pairs);
                Ok(())
            }
            Redb(r) => r.set_many(pairs, self.durability).await,
            Redis(r) => r.set_many(&pairs).await,
        }
    }

    /// Removes several keys as one change (see [`Store::set_many`]).
    pub async fn delete_many(&self, ns: &str, keys: &[String]) -> StoreResult<()> {
        self.owe();
        let keys: Vec<String> = keys.iter().map(|key| full_key(ns, key)).collect();
        match &self.backend {
            Memory(m) => {
                m.delete_many(&keys);
                Ok(())
            }
            Redb(r) => r.delete_many(keys, self.durability).await,
            Redis(r) => r.delete_many(&keys).await,
        }
    }

    /// Removes a key; removing a missing key is not an error.
    pub async fn delete(&self, ns: &str, key: &str) -> StoreResult<()> {
        self.owe();
        match &self.backend {
            Memory(m) => {
                m.delete(&full_key(ns, key));
                Ok(())
            }
            Redb(r) => r.delete(full_key(ns, key), self.durability).await,
            Redis(r) => r.delete(&full_key(ns, key)).await,
        }
    }

    /// Up to [`LIST_PAGE`] keys of `ns` after `cursor` (exclusive), and the
    /// cursor of the next page if there is one.
    pub async fn list_keys(
        &self,
        ns: &str,
        cursor: Option<String>,
    ) -> StoreResult<(Vec<String>, Option<String>)> {
        let epoch = self.epoch();
        let prefix = full_key(ns, "");
        let start = match &cursor {
            Some(c) => full_key(ns, c),
            None => prefix.clone(),
        };
        let full = match &self.backend {
            Memory(m) => m.keys_after(&prefix, &start, cursor.is_some(), LIST_PAGE + 1),
            Redb(r) => {
                r.keys_after(prefix.clone(), start, cursor.is_some(), LIST_PAGE + 1)
                    .await?
            }
            Redis(r) => {
                r.keys_after(&prefix, &start, cursor.is_some(), LIST_PAGE + 1)
                    .await?
            }
        };
        let mut keys: Vec<String> = full
            .into_iter()
            .map(|k| k[prefix.len()..].to_string())
            .collect();
        let next = if keys.len() > LIST_PAGE {
            keys.truncate(LIST_PAGE);
            keys.last().cloned()
        } else {
            None
        };
        // A listing that may show a key not yet on disk (or one lost to a
        // reopen during the scan) must be flushed before it is passed on;
        // one taken when everything was on disk need not.
        if self.any_unflushed() || self.epoch() != epoch {
            self.owe_since(epoch);
        }
        Ok((keys, next))
    }

    /// Writes `new` only if the key still holds `expected` (`None`: absent).
    /// Returns whether it wrote.
    pub async fn compare_and_swap(
        &self,
        ns: &str,
        key: &str,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> StoreResult<bool> {
        self.owe();
        match &self.backend {
            Memory(m) => Ok(m.compare_and_swap(full_key(ns, key), expected.as_deref(), new)),
            Redb(r) => {
                r.compare_and_swap(full_key(ns, key), expected, new, self.durability)
                    .await
            }
            Redis(r) => r.compare_and_swap(&full_key(ns, key), expected, new).await,
        }
    }

    /// Writes every swap's value if every key still holds what its swap
    /// saw, all in one step (one commit on the file); otherwise writes
    /// nothing. Returns the positions of the swaps whose key changed: empty
    /// when everything was written.
    pub async fn compare_and_swap_many(&self, ns: &str, swaps: Vec<Swap>) -> StoreResult<Vec<u32>> {
        self.owe();
        let swaps: Vec<Swap> = swaps
            .into_iter()
            .map(|swap| Swap {
                key: full_key(ns, &swap.key),
                ..swap
            })
            .collect();
        match &self.backend {
            Memory(m) => Ok(m.compare_and_swap_many(swaps)),
            Redb(r) => r.compare_and_swap_many(swaps, self.durability).await,
            Redis(r) => r.compare_and_swap_many(swaps).await,
        }
    }

    /// Adds `delta` to a decimal integer value (absent counts as 0).
    pub async fn increment(&self, ns: &str, key: &str, delta: i64) -> StoreResult<i64> {
        self.owe();
        match &self.backend {
            Memory(m) => m.increment(full_key(ns, key), delta),
            Redb(r) => r.increment(full_key(ns, key), delta, self.durability).await,
            Redis(r) => r.increment(&full_key(ns, key), delta).await,
        }
    }

    /// Sets (or moves) the wake-up of each task.
    pub async fn schedule(&self, ns: &str, wakes: &[Wake]) -> StoreResult<()> {
        self.owe();
        match &self.backend {
            Memory(m) => {
                m.schedule(ns, wakes);
                Ok(())
            }
            Redb(r) => {
                r.schedule(ns.to_string(), wakes.to_vec(), self.durability)
                    .await
            }
            Redis(r) => r.schedule(ns, wakes).await,
        }
    }

    /// Removes the wake-ups of these tasks.
    pub async fn unschedule(&self, ns: &str, task_ids: &[String]) -> StoreResult<()> {
        self.owe();
        match &self.backend {
            Memory(m) => {
                m.unschedule(ns, task_ids);
                Ok(())
            }
            Redb(r) => {
                r.unschedule(ns.to_string(), task_ids.to_vec(), self.durability)
                    .await
            }
            Redis(r) => r.unschedule(ns, task_ids).await,
        }
    }

    /// Takes up to `limit` tasks due at `now_ms` and moves each one's wake to
    /// `now_ms + lease_ms`: if the advance never reschedules it (a crash, a
    /// trap), it comes due again when the lease runs out.
    pub async fn claim_due(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: usize,
    ) -> StoreResult<Vec<Due>> {
        match &self.backend {
            Memory(m) => Ok(m.claim_due(now_ms, lease_ms, limit)),
            Redb(r) => r.claim_due(now_ms, lease_ms, limit).await,
            Redis(r) => r.claim_due(now_ms, lease_ms, limit).await,
        }
    }

    /// Brings forward to `at_ms` the wake of each of these tasks that is
    /// still the lease a claim gave it (`leased_until`): its advance failed
    /// before rescheduling it, and a retry sooner than the lease's end
    /// costs one more advance, while waiting out the lease can cost a
    /// device's task half a minute. A task its advance rescheduled or
    /// ended, or that another claim took since, is left alone. Answers how
    /// many moved.
    pub async fn retry_leased(
        &self,
        ns: &str,
        task_ids: &[String],
        leased_until: u64,
        at_ms: u64,
    ) -> StoreResult<usize> {
        match &self.backend {
            Memory(m) => Ok(m.retry_leased(ns, task_ids, leased_until, at_ms)),
            Redb(r) => {
                r.retry_leased(ns.to_string(), task_ids.to_vec(), leased_until, at_ms)
                    .await
            }
            Redis(r) => r.retry_leased(ns, task_ids, leased_until, at_ms).await,
        }
    }

    /// When the earliest wake is, if any.
    pub async fn next_due_ms(&self) -> StoreResult<Option<u64>> {
        match &self.backend {
            Memory(m) => Ok(m.next_due_ms()),
            Redb(r) => r.next_due_ms().await,
            Redis(r) => r.next_due_ms().await,
        }
    }

    /// A cheap round trip, for readiness checks.
    pub async fn ping(&self) -> StoreResult<()> {
        match &self.backend {
            Redis(r) => r.ping().await,
            _ => self.next_due_ms().await.map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests;
