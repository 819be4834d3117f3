//! The embedded backend: one redb file.
//!
//! Writes go through one writer thread that commits them in groups: every
//! write waiting when a transaction starts joins it, and all of them are
//! acknowledged after the one commit. Many concurrent writers share the
//! cost of a commit instead of queueing behind one commit each.
//!
//! A write asks for one of two [`Durability`]s. [`Durability::OnWrite`] is
//! on disk (fsync) when it is acknowledged and survives `kill -9`.
//! [`Durability::AtFlush`] may be committed without the fsync: every reader
//! sees it at once, and it reaches the disk with the next fsync'd commit,
//! which [`RedbStore::flush`] forces. It is, when it reaches the writer
//! alone; a write that finds others waiting shares their fsync, as every
//! write did before. So one command at a time (an agent's usual pace) pays
//! one fsync where its call needs one instead of one per write, and under
//! load the fsyncs are shared as before and the flushes find nothing left.
//! redb keeps commits in order, so a crash loses at most a suffix of the
//! writes not yet flushed, never one from the middle. Keys written without
//! the fsync are remembered until it ([`RedbStore::unflushed`]), so a
//! reader can tell it saw such a value.
//!
//! Reads run against a snapshot: point reads on the calling thread (a few
//! microseconds from redb's page cache, where a hop to tokio's blocking pool
//! and back cost about 100 µs here), scans on the blocking pool.
//!
//! A disk error is not the end of the store. After a commit fails (an
//! fsync that returns EIO, say), redb refuses every later operation until
//! the file is closed and opened again, so the writer does that at once,
//! and then every second while it fails ([`Database::open`] repairs the
//! file to its last durable commit). Meanwhile every read and write fails
//! with the reason, and `/readyz` with them. Writes committed without
//! their fsync before the reopen are gone with it: the store's
//! [`RedbStore::epoch`] counts reopens, so a call that owed a flush from
//! before one is told its writes were lost instead of being told they are
//! on disk.

use super::memory::parse_counter;
use super::{
    Due, Durability, StoreError, StoreResult, Swap, Wake, changed_since_seen, split_task_ref,
    task_ref,
};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Plugin data: full key → value.
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
/// The schedule in time order: (due ms, task ref) → group.
const DUE: TableDefinition<(u64, &str), &str> = TableDefinition::new("due");
/// The schedule by task: task ref → (due ms, group).
const DUE_BY_TASK: TableDefinition<&str, (u64, &str)> = TableDefinition::new("due_by_task");

/// The most writes one transaction takes: bounds the latency one commit adds
/// to the first writer in it.
const MAX_GROUP: usize = 4096;

/// redb's page cache. The file can be far larger; this bounds the memory
/// the store holds (it counts in the runner's RSS).
const CACHE_BYTES: usize = 256 << 20;

/// How often the writer tries to open the file again while it cannot.
const REOPEN_EVERY: Duration = Duration::from_secs(1);

/// How long a reopen waits for reads still holding the old database
/// before it tries again at the next [`REOPEN_EVERY`].
const READERS_GRACE: Duration = Duration::from_millis(200);

pub struct RedbStore {
    shared: Arc<Shared>,
    /// `None` only while dropping.
    writes: Option<mpsc::Sender<Job>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        // Closing the channel ends the writer after its last commit; waiting
        // for it releases the file, so it can be opened again at once.
        self.writes.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// One write and where its outcome goes.
struct Job {
    op: WriteOp,
    durability: Durability,
    reply: oneshot::Sender<StoreResult<Outcome>>,
}

/// The writes committed without an fsync since the last commit with one.
#[derive(Default)]
struct Unflushed {
    /// Whether there are any. Set before such a commit makes its writes
    /// visible, cleared after the fsync'd commit that covers them: a
    /// caller that reads `false` after its own write was acknowledged
    /// knows that write is on disk.
    any: AtomicBool,
    /// Their plugin-data keys (full keys), for [`RedbStore::unflushed`].
    keys: Mutex<HashSet<String>>,
}

/// What the readers and the writer share.
struct Shared {
    path: PathBuf,
    /// The open database; `None` after a disk error until it is open again.
    db: RwLock<Option<Arc<Database>>>,
    /// The database being closed after a disk error, while reads still
    /// hold it.
    closing: Mutex<Option<Arc<Database>>>,
    /// Why `db` is `None`.
    broken: Mutex<String>,
    /// What is committed but not yet on disk; the writer keeps it.
    unflushed: Unflushed,
    /// How many times the file was opened again after a disk error.
    epoch: AtomicU64,
    /// Makes the writer's next commit panic, as a bug in redb would.
    #[cfg(test)]
    panic_in_next_commit: AtomicBool,
}

impl Shared {
    /// The open database, or why there is none.
    fn database(&self) -> StoreResult<Arc<Database>> {
        self.db
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                StoreError::Unavailable(
                    self.broken
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone(),
                )
            })
    }

    fn is_open(&self) -> bool {
        self.db
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    /// After a failed commit: the database is closed, to be opened again.
    fn failed(&self, error: &StoreError) {
        let old = self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        *self
            .broken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = format!(
            "the store file {} failed ({error}); it is being opened again",
            self.path.display()
        );
        if let Some(old) = old {
            *self
                .closing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(old);
        }
        tracing::error!(
            "the store file {} failed: {error}; reads and writes fail until it is opened again",
            self.path.display()
        );
    }

    /// Closes the failed database once no read holds it, and opens the
    /// file again. Whether it is open now.
    fn reopen(&self) -> bool {
        let mut closing = self
            .closing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(old) = closing.take() {
            match wait_for_readers(old) {
                Ok(db) => {
                    // A failed database cannot write its closing commit;
                    // the next open repairs the file instead.
                    if let Err(e) = db.close() {
                        tracing::debug!("closing the failed store: {e}");
                    }
                }
                Err(old) => {
                    *closing = Some(old);
                    return false;
                }
            }
        }
        drop(closing);
        match contain_panic("opening the store file again", || open_database(&self.path)) {
            Ok(db) => {
                // Whatever was committed without an fsync is gone now. The
                // epoch moves first: whoever then finds nothing unflushed
                // also finds the new epoch, and learns its writes were lost.
                self.epoch.fetch_add(1, Ordering::AcqRel);
                self.unflushed
                    .keys
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clear();
                self.unflushed.any.store(false, Ordering::Release);
                *self
                    .db
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(db));
                tracing::info!("the store file {} is open again", self.path.display());
                true
            }
            Err(e) => {
                *self
                    .broken
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = format!(
                    "the store file {} failed and cannot be opened again yet ({e}); retried every {}s",
                    self.path.display(),
                    REOPEN_EVERY.as_secs()
                );
                false
            }
        }
    }
}

/// `db` alone, once the reads that hold it are done ([`READERS_GRACE`]
/// at most); otherwise `db` back.
fn wait_for_readers(mut db: Arc<Database>) -> Result<Database, Arc<Database>> {
    let deadline = Instant::now() + READERS_GRACE;
    loop {
        match Arc::try_unwrap(db) {
            Ok(alone) => return Ok(alone),
            Err(shared) if Instant::now() < deadline => {
                db = shared;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(shared) => return Err(shared),
        }
    }
}

/// Opens (or creates) the file with every table in it, so that readers
/// never meet a missing one.
fn open_database(path: &Path) -> StoreResult<Database> {
    let db = Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create(path)
        .map_err(|e| StoreError::Unavailable(format!("opening {}: {e}", path.display())))?;
    let txn = db.begin_write().map_err(unavailable)?;
    txn.open_table(KV).map_err(unavailable)?;
    txn.open_table(DUE).map_err(unavailable)?;
    txn.open_table(DUE_BY_TASK).map_err(unavailable)?;
    txn.commit().map_err(unavailable)?;
    Ok(db)
}

enum WriteOp {
    Set(String, Vec<u8>),
    SetMany(Vec<(String, Vec<u8>)>),
    Delete(String),
    DeleteMany(Vec<String>),
    Cas(String, Option<Vec<u8>>, Vec<u8>),
    CasMany(Vec<Swap>),
    Increment(String, i64),
    Schedule(String, Vec<Wake>),
    Unschedule(String, Vec<String>),
    Claim {
        now_ms: u64,
        lease_ms: u64,
        limit: usize,
    },
    Retry {
        ns: String,
        task_ids: Vec<String>,
        leased_until: u64,
        at_ms: u64,
    },
    /// Nothing to write: the commit it joins is fsync'd, which puts every
    /// earlier commit on disk too.
    Flush,
}

impl WriteOp {
    /// Adds the plugin-data keys this write may change to `keys`.
    fn note_keys(&self, keys: &mut HashSet<String>) {
        match self {
            WriteOp::Set(key, _)
            | WriteOp::Delete(key)
            | WriteOp::Cas(key, _, _)
            | WriteOp::Increment(key, _) => {
                keys.insert(key.clone());
            }
            WriteOp::SetMany(pairs) => keys.extend(pairs.iter().map(|(key, _)| key.clone())),
            WriteOp::CasMany(swaps) => keys.extend(swaps.iter().map(|swap| swap.key.clone())),
            WriteOp::DeleteMany(written) => keys.extend(written.iter().cloned()),
            WriteOp::Schedule(..)
            | WriteOp::Unschedule(..)
            | WriteOp::Claim { .. }
            | WriteOp::Retry { .. }
            | WriteOp::Flush => {}
        }
    }
}

enum Outcome {
    Done,
    Swapped(bool),
    /// The positions of the swaps whose key had changed (nothing written).
    Changed(Vec<u32>),
    Counter(i64),
    Claimed(Vec<Due>),
    Moved(usize),
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl RedbStore {
    pub fn open(path: &Path) -> StoreResult<RedbStore> {
        let db = open_database(path)?;
        let shared = Arc::new(Shared {
            path: path.to_path_buf(),
            db: RwLock::new(Some(Arc::new(db))),
            closing: Mutex::new(None),
            broken: Mutex::new(String::new()),
            unflushed: Unflushed::default(),
            epoch: AtomicU64::new(0),
            #[cfg(test)]
            panic_in_next_commit: AtomicBool::new(false),
        });
        let (writes, jobs) = mpsc::channel();
        let for_writer = shared.clone();
        let writer = std::thread::Builder::new()
            .name("settle-store-writer".into())
            .spawn(move || write_loop(&for_writer, &jobs))
            .map_err(unavailable)?;
        Ok(RedbStore {
            shared,
            writes: Some(writes),
            writer: Some(writer),
        })
    }

    /// Makes the writer's next commit panic.
    #[cfg(test)]
    pub fn panic_in_next_commit(&self) {
        self.shared
            .panic_in_next_commit
            .store(true, Ordering::Release);
    }

    /// Acts as if a commit had failed: closes the database and opens it
    /// again, as the writer does after a disk error.
    #[cfg(test)]
    pub fn fail_and_reopen(&self) {
        self.shared
            .failed(&StoreError::Unavailable("a disk error, for a test".into()));
        assert!(self.shared.reopen(), "the file opens again");
    }

    /// How many times the file was opened again after a disk error. A
    /// write committed without its fsync in an earlier epoch is lost.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// Puts every write committed so far on disk; at once when they are.
    pub async fn flush(&self) -> StoreResult<()> {
        if !self.shared.unflushed.any.load(Ordering::Acquire) {
            return Ok(());
        }
        self.write(WriteOp::Flush, Durability::OnWrite)
            .await
            .map(|_| ())
    }

    /// Whether `key`'s value may not be on disk yet.
    pub fn unflushed(&self, key: &str) -> bool {
        let unflushed = &self.shared.unflushed;
        unflushed.any.load(Ordering::Acquire)
            && unflushed
                .keys
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(key)
    }

    /// Whether any write may not be on disk yet.
    pub fn any_unflushed(&self) -> bool {
        self.shared.unflushed.any.load(Ordering::Acquire)
    }

    /// Hands a write to the writer and waits for its commit.
    async fn write(&self, op: WriteOp, durability: Durability) -> StoreResult<Outcome> {
        let (reply, outcome) = oneshot::channel();
        self.writes
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("the store is closing".into()))?
            .send(Job {
                op,
                durability,
                reply,
            })
            .map_err(|_| StoreError::Unavailable("the store writer stopped".into()))?;
        outcome
            .await
            .map_err(|_| StoreError::Unavailable("the store writer stopped".into()))?
    }

    /// Runs a point read (a few keys) on the calling thread: it touches a
    /// handful of pages, mostly in redb's cache, so it is cheaper than the
    /// hop to the blocking pool and back.
    fn read_here<T>(&self, f: impl FnOnce(&Database) -> StoreResult<T>) -> StoreResult<T> {
        let db = self.shared.database()?;
        f(&db)
    }

    /// Runs a read that may walk many entries on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let db = self.shared.database()?;
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| StoreError::Unavailable(format!("store worker failed: {e}")))?
    }

    pub async fn get(&self, key: String) -> StoreResult<Option<Vec<u8>>> {
        self.read_here(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(KV).map_err(unavailable)?;
            Ok(table
                .get(key.as_str())
                .map_err(unavailable)?
                .map(|v| v.value().to_vec()))
        })
    }

    pub async fn get_many(&self, keys: Vec<String>) -> StoreResult<Vec<Option<Vec<u8>>>> {
        self.read_here(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(KV).map_err(unavailable)?;
            keys.iter()
                .map(|k| {
                    Ok(table
                        .get(k.as_str())
                        .map_err(unavailable)?
                        .map(|v| v.value().to_vec()))
                })
                .collect()
        })
    }

    pub async fn keys_after(
        &self,
        prefix: String,
        start: String,
        exclusive: bool,
        limit: usize,
    ) -> StoreResult<Vec<String>> {
        self.read(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(KV).map_err(unavailable)?;
            let mut keys = Vec::new();
            for entry in table.range(start.as_str()..).map_err(unavailable)? {
                let (k, _) = entry.map_err(unavailable)?;
                let k = k.value();
                if exclusive && k == start {
                    continue;
                }
                if !k.starts_with(&prefix) || keys.len() == limit {
                    break;
                }
                keys.push(k.to_string());
            }
            Ok(keys)
        })
        .await
    }

    pub async fn next_due_ms(&self) -> StoreResult<Option<u64>> {
        self.read_here(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(DUE).map_err(unavailable)?;
            Ok(table
                .first()
                .map_err(unavailable)?
                .map(|(k, _)| k.value().0))
        })
    }

    pub async fn set(
        &self,
        key: String,
        value: Vec<u8>,
        durability: Durability,
    ) -> StoreResult<()> {
        self.write(WriteOp::Set(key, value), durability)
            .await
            .map(|_| ())
    }

    pub async fn delete(&self, key: String, durability: Durability) -> StoreResult<()> {
        self.write(WriteOp::Delete(key), durability)
            .await
            .map(|_| ())
    }

    pub async fn set_many(
        &self,
        pairs: Vec<(String, Vec<u8>)>,
        durability: Durability,
    ) -> StoreResult<()> {
        self.write(WriteOp::SetMany(pairs), durability)
            .await
            .map(|_| ())
    }

    pub async fn delete_many(&self, keys: Vec<String>, durability: Durability) -> StoreResult<()> {
        self.write(WriteOp::DeleteMany(keys), durability)
            .await
            .map(|_| ())
    }

    pub async fn compare_and_swap(
        &self,
        key: String,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
        durability: Durability,
    ) -> StoreResult<bool> {
        match self
            .write(WriteOp::Cas(key, expected, new), durability)
            .await?
        {
            Outcome::Swapped(swapped) => Ok(swapped),
            _ => unreachable!("a CAS answers with Swapped"),
        }
    }

    pub async fn compare_and_swap_many(
        &self,
        swaps: Vec<Swap>,
        durability: Durability,
    ) -> StoreResult<Vec<u32>> {
        match self.write(WriteOp::CasMany(swaps), durability).await? {
            Outcome::Changed(changed) => Ok(changed),
            _ => unreachable!("a CAS of many keys answers with Changed"),
        }
    }

    pub async fn increment(
        &self,
        key: String,
        delta: i64,
        durability: Durability,
    ) -> StoreResult<i64> {
        match self
            .write(WriteOp::Increment(key, delta), durability)
            .await?
        {
            Outcome::Counter(value) => Ok(value),
            _ => unreachable!("an increment answers with Counter"),
        }
    }

    pub async fn schedule(
        &self,
        ns: String,
        wakes: Vec<Wake>,
        durability: Durability,
    ) -> StoreResult<()> {
        self.write(WriteOp::Schedule(ns, wakes), durability)
            .await
            .map(|_| ())
    }

    pub async fn unschedule(
        &self,
        ns: String,
        task_ids: Vec<String>,
        durability: Durability,
    ) -> StoreResult<()> {
        self.write(WriteOp::Unschedule(ns, task_ids), durability)
            .await
            .map(|_| ())
    }

    pub async fn claim_due(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: usize,
    ) -> StoreResult<Vec<Due>> {
        match self
            .write(
                WriteOp::Claim {
                    now_ms,
                    lease_ms,
                    limit,
                },
                Durability::OnWrite,
            )
            .await?
        {
            Outcome::Claimed(due) => Ok(due),
            _ => unreachable!("a claim answers with Claimed"),
        }
    }

    /// Not fsync'd on its own: lost in a crash, the tasks keep their
    /// lease, which is what they had.
    pub async fn retry_leased(
        &self,
        ns: String,
        task_ids: Vec<String>,
        leased_until: u64,
        at_ms: u64,
    ) -> StoreResult<usize> {
        match self
            .write(
                WriteOp::Retry {
                    ns,
                    task_ids,
                    leased_until,
                    at_ms,
                },
                Durability::AtFlush,
            )
            .await?
        {
            Outcome::Moved(moved) => Ok(moved),
            _ => unreachable!("a retry answers with Moved"),
        }
    }
}

/// The writer thread: takes every job waiting, applies them in one
/// transaction in arrival order, commits once, then answers each. The
/// commit is fsync'd when any job in it asks for that, and then covers
/// every commit before it. After a failed commit it closes the database
/// and opens it again, at once and then at most every [`REOPEN_EVERY`]
/// while that fails, answering every job meanwhile with why. Ends when the store is
/// dropped (redb puts what is still unflushed on disk when the database
/// closes).
fn write_loop(shared: &Shared, jobs: &mpsc::Receiver<Job>) {
    // When the last attempt to open the file again started: one a
    // REOPEN_EVERY at most, as an open may repair a large file.
    let mut last_reopen: Option<Instant> = None;
    let mut reopen_when_due = || {
        if last_reopen.is_some_and(|at| at.elapsed() < REOPEN_EVERY) {
            return false;
        }
        last_reopen = Some(Instant::now());
        shared.reopen()
    };
    loop {
        let first = if shared.is_open() {
            match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        } else {
            match jobs.recv_timeout(REOPEN_EVERY) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    reopen_when_due();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        };
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let db = match shared.database() {
            Ok(db) => db,
            Err(_) if reopen_when_due() => match shared.database() {
                Ok(db) => db,
                Err(e) => {
                    answer_all(group, &e);
                    continue;
                }
            },
            Err(e) => {
                answer_all(group, &e);
                continue;
            }
        };
        // Writes that find others waiting share an fsync, as every write did
        // before: under load it is paid once for many, and their calls'
        // flushes then find nothing to do. A write alone skips it until its
        // call needs it on disk (measured in docs/performance.md,
        // "Thirteenth round").
        let durable = group.len() > 1
            || group
                .iter()
                .any(|job| matches!(job.durability, Durability::OnWrite));
        let only_flushes = group.iter().all(|job| matches!(job.op, WriteOp::Flush));
        let unflushed = &shared.unflushed;
        if only_flushes && !unflushed.any.load(Ordering::Acquire) {
            // Everything is on disk already: nothing to commit.
            for job in group {
                let _ = job.reply.send(Ok(Outcome::Done));
            }
            continue;
        }
        let committed = contain_panic("committing", || {
            #[cfg(test)]
            if shared.panic_in_next_commit.swap(false, Ordering::AcqRel) {
                panic!("a commit that panics, for a test");
            }
            commit_group(&db, unflushed, &group, durable)
        });
        match committed {
            Ok(outcomes) => {
                for (job, outcome) in group.into_iter().zip(outcomes) {
                    let _ = job.reply.send(outcome);
                }
            }
            Err(e) => {
                answer_all(group, &e);
                drop(db);
                shared.failed(&e);
                reopen_when_due();
            }
        }
    }
}

/// Runs `work` on the writer's thread, turning a panic in it (a bug in redb
/// met on a damaged file, say) into an error: the writer must outlive it,
/// or every later write would fail until a restart. After a panic in a
/// commit the writer treats the database as failed and opens it again,
/// which rolls back to its last durable commit.
fn contain_panic<T>(doing: &str, work: impl FnOnce() -> StoreResult<T>) -> StoreResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Err(StoreError::Unavailable(format!(
            "the store panicked while {doing}: {why}"
        )))
    })
}

/// Applies `group` in one transaction and commits it, fsync'd if `durable`.
/// Keys committed without the fsync are recorded before the commit makes
/// them visible, and forgotten once an fsync'd commit covers them.
fn commit_group(
    db: &Database,
    unflushed: &Unflushed,
    group: &[Job],
    durable: bool,
) -> StoreResult<Vec<StoreResult<Outcome>>> {
    let mut txn = db.begin_write().map_err(unavailable)?;
    if !durable {
        txn.set_durability(redb::Durability::None)
            .map_err(unavailable)?;
    }
    let outcomes: Vec<StoreResult<Outcome>> =
        group.iter().map(|job| apply(&txn, &job.op)).collect();
    if !durable {
        let mut keys = unflushed
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for job in group {
            job.op.note_keys(&mut keys);
        }
        unflushed.any.store(true, Ordering::Release);
    }
    txn.commit().map_err(unavailable)?;
    if durable {
        unflushed
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        unflushed.any.store(false, Ordering::Release);
    }
    Ok(outcomes)
}

fn answer_all(group: Vec<Job>, error: &StoreError) {
    for job in group {
        let _ = job.reply.send(Err(error.clone()));
    }
}

fn apply(txn: &WriteTransaction, op: &WriteOp) -> StoreResult<Outcome> {
    match op {
        WriteOp::Set(key, value) => {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            table
                .insert(key.as_str(), value.as_slice())
                .map_err(unavailable)?;
            Ok(Outcome::Done)
        }
        WriteOp::Delete(key) => {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            table.remove(key.as_str()).map_err(unavailable)?;
            Ok(Outcome::Done)
        }
        WriteOp::SetMany(pairs) => {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            for (key, value) in pairs {
                table
                    .insert(key.as_str(), value.as_slice())
                    .map_err(unavailable)?;
            }
            Ok(Outcome::Done)
        }
        WriteOp::DeleteMany(keys) => {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            for key in keys {
                table.remove(key.as_str()).map_err(unavailable)?;
            }
            Ok(Outcome::Done)
        }
        WriteOp::Cas(key, expected, new) => {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            let current = table
                .get(key.as_str())
                .map_err(unavailable)?
                .map(|v| v.value().to_vec());
            if current != *expected {
                return Ok(Outcome::Swapped(false));
            }
            table
                .insert(key.as_str(), new.as_slice())
                .map_err(unavailable)?;
            Ok(Outcome::Swapped(true))
        }
        WriteOp::CasMany(swaps) => {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            let changed = changed_since_seen(swaps, |key, seen| {
                let current = table.get(key).map_err(unavailable)?;
                Ok(current.as_ref().map(|v| v.value()) == seen)
            })?;
            if changed.is_empty() {
                for swap in swaps {
                    table
                        .insert(swap.key.as_str(), swap.value.as_slice())
                        .map_err(unavailable)?;
                }
            }
            Ok(Outcome::Changed(changed))
        }
        WriteOp::Increment(key, delta) => {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            let current = match table.get(key.as_str()).map_err(unavailable)? {
                None => 0,
                Some(v) => parse_counter(key, v.value())?,
            };
            let next = current
                .checked_add(*delta)
                .ok_or_else(|| StoreError::Corrupt(format!("{key}: counter overflow")))?;
            table
                .insert(key.as_str(), next.to_string().as_bytes())
                .map_err(unavailable)?;
            Ok(Outcome::Counter(next))
        }
        WriteOp::Schedule(ns, wakes) => {
            let mut due = txn.open_table(DUE).map_err(unavailable)?;
            let mut by_task = txn.open_table(DUE_BY_TASK).map_err(unavailable)?;
            for wake in wakes {
                let r = task_ref(ns, &wake.task_id);
                let old = by_task
                    .insert(r.as_str(), (wake.at_ms, wake.group.as_str()))
                    .map_err(unavailable)?
                    .map(|v| v.value().0);
                if let Some(old_at) = old {
                    due.remove((old_at, r.as_str())).map_err(unavailable)?;
                }
                due.insert((wake.at_ms, r.as_str()), wake.group.as_str())
                    .map_err(unavailable)?;
            }
            Ok(Outcome::Done)
        }
        WriteOp::Unschedule(ns, task_ids) => {
            let mut due = txn.open_table(DUE).map_err(unavailable)?;
            let mut by_task = txn.open_table(DUE_BY_TASK).map_err(unavailable)?;
            for id in task_ids {
                let r = task_ref(ns, id);
                let old = by_task
                    .remove(r.as_str())
                    .map_err(unavailable)?
                    .map(|v| v.value().0);
                if let Some(at) = old {
                    due.remove((at, r.as_str())).map_err(unavailable)?;
                }
            }
            Ok(Outcome::Done)
        }
        WriteOp::Flush => Ok(Outcome::Done),
        WriteOp::Claim {
            now_ms,
            lease_ms,
            limit,
        } => {
            let mut due = txn.open_table(DUE).map_err(unavailable)?;
            let mut by_task = txn.open_table(DUE_BY_TASK).map_err(unavailable)?;
            let mut claimed: Vec<(u64, String, String)> = Vec::new();
            for entry in due
                .range((0u64, "")..=(*now_ms, "\u{10FFFF}"))
                .map_err(unavailable)?
            {
                let (k, v) = entry.map_err(unavailable)?;
                let (at, r) = k.value();
                claimed.push((at, r.to_string(), v.value().to_string()));
                if claimed.len() == *limit {
                    break;
                }
            }
            let lease_until = now_ms.saturating_add(*lease_ms);
            let mut out = Vec::with_capacity(claimed.len());
            for (at, r, group) in claimed {
                due.remove((at, r.as_str())).map_err(unavailable)?;
                due.insert((lease_until, r.as_str()), group.as_str())
                    .map_err(unavailable)?;
                by_task
                    .insert(r.as_str(), (lease_until, group.as_str()))
                    .map_err(unavailable)?;
                if let Some((ns, id)) = split_task_ref(&r) {
                    out.push(Due {
                        namespace: ns.to_string(),
                        task_id: id.to_string(),
                        group,
                    });
                }
            }
            Ok(Outcome::Claimed(out))
        }
        WriteOp::Retry {
            ns,
            task_ids,
            leased_until,
            at_ms,
        } => {
            let mut due = txn.open_table(DUE).map_err(unavailable)?;
            let mut by_task = txn.open_table(DUE_BY_TASK).map_err(unavailable)?;
            let mut moved = 0;
            for id in task_ids {
                let r = task_ref(ns, id);
                let group = match by_task.get(r.as_str()).map_err(unavailable)? {
                    Some(v) if v.value().0 == *leased_until => v.value().1.to_string(),
                    _ => continue,
                };
                by_task
                    .insert(r.as_str(), (*at_ms, group.as_str()))
                    .map_err(unavailable)?;
                due.remove((*leased_until, r.as_str()))
                    .map_err(unavailable)?;
                due.insert((*at_ms, r.as_str()), group.as_str())
                    .map_err(unavailable)?;
                moved += 1;
            }
            Ok(Outcome::Moved(moved))
        }
    }
}
