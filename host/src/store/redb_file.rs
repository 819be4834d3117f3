//! The embedded backend: one redb file, durable on every commit.
//!
//! redb is synchronous, so each operation runs on tokio's blocking pool.
//! Every write is one transaction, committed (fsynced) before the call
//! returns: an acknowledged write survives `kill -9`.

use super::memory::parse_counter;
use super::{Due, StoreError, StoreResult, Wake, split_task_ref, task_ref};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;
use std::sync::Arc;

/// Plugin data: full key → value.
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
/// The schedule in time order: (due ms, task ref) → group.
const DUE: TableDefinition<(u64, &str), &str> = TableDefinition::new("due");
/// The schedule by task: task ref → (due ms, group).
const DUE_BY_TASK: TableDefinition<&str, (u64, &str)> = TableDefinition::new("due_by_task");

pub struct RedbStore {
    db: Arc<Database>,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl RedbStore {
    pub fn open(path: &Path) -> StoreResult<RedbStore> {
        let db = Database::create(path)
            .map_err(|e| StoreError::Unavailable(format!("opening {}: {e}", path.display())))?;
        // Create the tables up front so that readers never meet a missing one.
        let txn = db.begin_write().map_err(unavailable)?;
        txn.open_table(KV).map_err(unavailable)?;
        txn.open_table(DUE).map_err(unavailable)?;
        txn.open_table(DUE_BY_TASK).map_err(unavailable)?;
        txn.commit().map_err(unavailable)?;
        Ok(RedbStore { db: Arc::new(db) })
    }

    /// Runs `f` on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| StoreError::Unavailable(format!("store worker failed: {e}")))?
    }

    pub async fn get(&self, key: String) -> StoreResult<Option<Vec<u8>>> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(KV).map_err(unavailable)?;
            Ok(table
                .get(key.as_str())
                .map_err(unavailable)?
                .map(|v| v.value().to_vec()))
        })
        .await
    }

    pub async fn get_many(&self, keys: Vec<String>) -> StoreResult<Vec<Option<Vec<u8>>>> {
        self.blocking(move |db| {
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
        .await
    }

    /// Runs `f` in one write transaction and commits it.
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let out = f(&txn)?;
            txn.commit().map_err(unavailable)?;
            Ok(out)
        })
        .await
    }

    pub async fn set(&self, key: String, value: Vec<u8>) -> StoreResult<()> {
        self.write(move |txn| {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            table
                .insert(key.as_str(), value.as_slice())
                .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    pub async fn delete(&self, key: String) -> StoreResult<()> {
        self.write(move |txn| {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            table.remove(key.as_str()).map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    pub async fn keys_after(
        &self,
        prefix: String,
        start: String,
        exclusive: bool,
        limit: usize,
    ) -> StoreResult<Vec<String>> {
        self.blocking(move |db| {
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

    pub async fn compare_and_swap(
        &self,
        key: String,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> StoreResult<bool> {
        self.write(move |txn| {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            let current = table
                .get(key.as_str())
                .map_err(unavailable)?
                .map(|v| v.value().to_vec());
            if current != expected {
                return Ok(false);
            }
            table
                .insert(key.as_str(), new.as_slice())
                .map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    pub async fn increment(&self, key: String, delta: i64) -> StoreResult<i64> {
        self.write(move |txn| {
            let mut table = txn.open_table(KV).map_err(unavailable)?;
            let current = match table.get(key.as_str()).map_err(unavailable)? {
                None => 0,
                Some(v) => parse_counter(&key, v.value())?,
            };
            let next = current
                .checked_add(delta)
                .ok_or_else(|| StoreError::Corrupt(format!("{key}: counter overflow")))?;
            table
                .insert(key.as_str(), next.to_string().as_bytes())
                .map_err(unavailable)?;
            Ok(next)
        })
        .await
    }

    pub async fn schedule(&self, ns: String, wakes: Vec<Wake>) -> StoreResult<()> {
        self.write(move |txn| {
            let mut due = txn.open_table(DUE).map_err(unavailable)?;
            let mut by_task = txn.open_table(DUE_BY_TASK).map_err(unavailable)?;
            for wake in &wakes {
                let r = task_ref(&ns, &wake.task_id);
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
            Ok(())
        })
        .await
    }

    pub async fn unschedule(&self, ns: String, task_ids: Vec<String>) -> StoreResult<()> {
        self.write(move |txn| {
            let mut due = txn.open_table(DUE).map_err(unavailable)?;
            let mut by_task = txn.open_table(DUE_BY_TASK).map_err(unavailable)?;
            for id in &task_ids {
                let r = task_ref(&ns, id);
                let old = by_task
                    .remove(r.as_str())
                    .map_err(unavailable)?
                    .map(|v| v.value().0);
                if let Some(at) = old {
                    due.remove((at, r.as_str())).map_err(unavailable)?;
                }
            }
            Ok(())
        })
        .await
    }

    pub async fn claim_due(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: usize,
    ) -> StoreResult<Vec<Due>> {
        self.write(move |txn| {
            let mut due = txn.open_table(DUE).map_err(unavailable)?;
            let mut by_task = txn.open_table(DUE_BY_TASK).map_err(unavailable)?;
            let mut claimed: Vec<(u64, String, String)> = Vec::new();
            for entry in due
                .range((0u64, "")..=(now_ms, "\u{10FFFF}"))
                .map_err(unavailable)?
            {
                let (k, v) = entry.map_err(unavailable)?;
                let (at, r) = k.value();
                claimed.push((at, r.to_string(), v.value().to_string()));
                if claimed.len() == limit {
                    break;
                }
            }
            let lease_until = now_ms.saturating_add(lease_ms);
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
            Ok(out)
        })
        .await
    }

    pub async fn next_due_ms(&self) -> StoreResult<Option<u64>> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(DUE).map_err(unavailable)?;
            Ok(table
                .first()
                .map_err(unavailable)?
                .map(|(k, _)| k.value().0))
        })
        .await
    }
}
