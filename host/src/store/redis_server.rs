//! The shared backend: one Redis server, any number of runner replicas.
//!
//! Every operation that must be atomic across replicas is one Lua script:
//! compare-and-swap, and claiming due tasks (which is also the lease: a
//! claimed task's due time moves to the end of the lease, so no other replica
//! claims it until then). Durability is Redis's: run it with `appendonly yes`
//! (and `appendfsync always` where losing the last second after a crash of
//! Redis itself is not acceptable).
//!
//! Keys, all under the `settle:` prefix:
//! - `settle:kv:{full key}`: plugin values;
//! - `settle:keys:{namespace}`: a sorted set of the namespace's keys (score
//!   0, ordered by name) so `list-keys` pages in a stable order;
//! - `settle:due`: the schedule, task ref → due ms;
//! - `settle:group`: task ref → group.

use super::{Due, StoreError, StoreResult, Swap, Wake, split_task_ref, task_ref};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};
use std::time::Duration;

const DUE: &str = "settle:due";
const GROUP: &str = "settle:group";

fn value_key(full_key: &str) -> String {
    format!("settle:kv:{full_key}")
}

fn index_key(full_key: &str) -> String {
    let namespace = full_key.split('/').next().unwrap_or_default();
    format!("settle:keys:{namespace}")
}

/// Writes `new` if the key holds `expected` (or is absent when the flag is
/// 0), keeping the key index in step.
const CAS: &str = r#"
local current = redis.call('GET', KEYS[1])
local matches
if ARGV[1] == '0' then matches = (current == false) else matches = (current == ARGV[2]) end
if not matches then return 0 end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[4])
return 1
"#;

/// CAS's check for many keys, then their writes only if every key holds
/// what its swap saw: KEYS are each key's value and index keys in turn,
/// ARGV four for each (flag, expected, new, key). Answers the positions
/// (from 0) of the keys that changed, empty when all were written.
const CAS_MANY: &str = r#"
local changed = {}
for i = 1, #KEYS / 2 do
  local current = redis.call('GET', KEYS[2 * i - 1])
  local at = 4 * (i - 1)
  local matches
  if ARGV[at + 1] == '0' then matches = (current == false) else matches = (current == ARGV[at + 2]) end
  if not matches then table.insert(changed, i - 1) end
end
if #changed > 0 then return changed end
for i = 1, #KEYS / 2 do
  local at = 4 * (i - 1)
  redis.call('SET', KEYS[2 * i - 1], ARGV[at + 3])
  redis.call('ZADD', KEYS[2 * i], 0, ARGV[at + 4])
end
return changed
"#;

/// Takes due tasks and leases them in one step: no two replicas get the same
/// task until its lease runs out.
const CLAIM: &str = r#"
local refs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, ref in ipairs(refs) do
  redis.call('ZADD', KEYS[1], ARGV[2], ref)
  local group = redis.call('HGET', KEYS[2], ref)
  table.insert(out, ref)
  table.insert(out, group or '')
end
return out
"#;

/// Moves each task ref in ARGV[3..] whose wake is still the lease
/// ARGV[1] to ARGV[2]; answers how many moved.
const RETRY: &str = r#"
local moved = 0
for i = 3, #ARGV do
  local at = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if at and tonumber(at) == tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i])
    moved = moved + 1
  end
end
return moved
"#;

/// A store on a Redis server that several replicas share. Counters are
/// Redis's own INCRBY, which refuses a value that is not an integer.
pub struct RedisStore {
    /// Where the server is: the relay opens its own connections with it.
    client: redis::Client,
    connection: ConnectionManager,
    cas: Script,
    cas_many: Script,
    claim: Script,
    retry: Script,
    url: String,
}

fn unavailable(url: &str, e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis at {url}: {e}"))
}

impl RedisStore {
    /// Prepares a connection to `url` (`redis://host:port/db`). The
    /// connection is made on first use and remade after a failure, so a
    /// runner can start before Redis and survives its restarts.
    pub fn open(url: &str) -> StoreResult<RedisStore> {
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::Unavailable(format!("--store {url}: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let connection = client
            .get_connection_manager_lazy(config)
            .map_err(|e| unavailable(url, e))?;
        Ok(RedisStore {
            client,
            connection,
            cas: Script::new(CAS),
            cas_many: Script::new(CAS_MANY),
            claim: Script::new(CLAIM),
            retry: Script::new(RETRY),
            url: redacted(url),
        })
    }

    /// The server, for the relay of change notices between replicas.
    pub fn client(&self) -> redis::Client {
        self.client.clone()
    }

    fn conn(&self) -> ConnectionManager {
        self.connection.clone()
    }

    fn fail(&self, e: redis::RedisError) -> StoreError {
        if e.kind() == redis::ErrorKind::Client
            || e.kind() == redis::ErrorKind::UnexpectedReturnType
        {
            return StoreError::Corrupt(format!("redis at {}: {e}", self.url));
        }
        unavailable(&self.url, e)
    }

    pub async fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.conn()
            .get(value_key(key))
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = keys.iter().map(|k| value_key(k)).collect();
        redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn set(&self, key: &str, value: Vec<u8>) -> StoreResult<()> {
        redis::pipe()
            .atomic()
            .set(value_key(key), value)
            .ignore()
            .zadd(index_key(key), key, 0)
            .ignore()
            .query_async::<()>(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn delete(&self, key: &str) -> StoreResult<()> {
        redis::pipe()
            .atomic()
            .del(value_key(key))
            .ignore()
            .zrem(index_key(key), key)
            .ignore()
            .query_async::<()>(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))
    }

    /// Writes every pair in one atomic pipeline: one round trip.
    pub async fn set_many(&self, pairs: &[(String, Vec<u8>)]) -> StoreResult<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (key, value) in pairs {
            pipe.set(value_key(key), value)
                .ignore()
                .zadd(index_key(key), key, 0)
                .ignore();
        }
        pipe.query_async::<()>(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))
    }

    /// Removes every key in one atomic pipeline: one round trip.
    pub async fn delete_many(&self, keys: &[String]) -> StoreResult<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for key in keys {
            pipe.del(value_key(key))
                .ignore()
                .zrem(index_key(key), key)
                .ignore();
        }
        pipe.query_async::<()>(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))
    }

    /// Keys of `prefix`'s namespace from `start` on, in name order.
    pub async fn keys_after(
        &self,
        prefix: &str,
        start: &str,
        exclusive: bool,
        limit: usize,
    ) -> StoreResult<Vec<String>> {
        let from = if exclusive {
            format!("({start}")
        } else {
            format!("[{start}")
        };
        let keys: Vec<String> = redis::cmd("ZRANGEBYLEX")
            .arg(index_key(prefix))
            .arg(from)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))?;
        Ok(keys
            .into_iter()
            .take_while(|k| k.starts_with(prefix))
            .collect())
    }

    pub async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> StoreResult<bool> {
        let written: i64 = self
            .cas
            .key(value_key(key))
            .key(index_key(key))
            .arg(if expected.is_some() { "1" } else { "0" })
            .arg(expected.unwrap_or_default())
            .arg(new)
            .arg(key)
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))?;
        Ok(written == 1)
    }

    pub async fn compare_and_swap_many(&self, swaps: Vec<Swap>) -> StoreResult<Vec<u32>> {
        if swaps.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = self.cas_many.prepare_invoke();
        for swap in &swaps {
            invocation
                .key(value_key(&swap.key))
                .key(index_key(&swap.key));
        }
        for swap in swaps {
            invocation
                .arg(if swap.seen.is_some() { "1" } else { "0" })
                .arg(swap.seen.unwrap_or_default())
                .arg(swap.value)
                .arg(swap.key);
        }
        invocation
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        let value: i64 =
            self.conn()
                .incr(value_key(key), delta)
                .await
                .map_err(|e| match e.kind() {
                    // "value is not an integer or out of range": the data, not
                    // the server, is wrong, as in the other backends.
                    redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) => {
                        StoreError::Corrupt(format!("redis at {}: {key}: {e}", self.url))
                    }
                    _ => self.fail(e),
                })?;
        let _: () = self
            .conn()
            .zadd(index_key(key), key, 0)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(value)
    }

    pub async fn schedule(&self, ns: &str, wakes: &[Wake]) -> StoreResult<()> {
        if wakes.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for wake in wakes {
            let r = task_ref(ns, &wake.task_id);
            pipe.zadd(DUE, &r, wake.at_ms).ignore();
            pipe.hset(GROUP, &r, &wake.group).ignore();
        }
        pipe.query_async::<()>(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn unschedule(&self, ns: &str, task_ids: &[String]) -> StoreResult<()> {
        if task_ids.is_empty() {
            return Ok(());
        }
        let refs: Vec<String> = task_ids.iter().map(|id| task_ref(ns, id)).collect();
        redis::pipe()
            .atomic()
            .zrem(DUE, &refs)
            .ignore()
            .hdel(GROUP, &refs)
            .ignore()
            .query_async::<()>(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn claim_due(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: usize,
    ) -> StoreResult<Vec<Due>> {
        let flat: Vec<String> = self
            .claim
            .key(DUE)
            .key(GROUP)
            .arg(now_ms)
            .arg(now_ms.saturating_add(lease_ms))
            .arg(limit)
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))?;
        Ok(flat
            .chunks(2)
            .filter_map(|pair| {
                let (ns, id) = split_task_ref(&pair[0])?;
                Some(Due {
                    namespace: ns.to_string(),
                    task_id: id.to_string(),
                    group: pair.get(1).cloned().unwrap_or_default(),
                })
            })
            .collect())
    }

    pub async fn retry_leased(
        &self,
        ns: &str,
        task_ids: &[String],
        leased_until: u64,
        at_ms: u64,
    ) -> StoreResult<usize> {
        if task_ids.is_empty() {
            return Ok(0);
        }
        let mut invocation = self.retry.key(DUE);
        invocation.arg(leased_until).arg(at_ms);
        for id in task_ids {
            invocation.arg(task_ref(ns, id));
        }
        invocation
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(e))
    }

    pub async fn next_due_ms(&self) -> StoreResult<Option<u64>> {
        let first: Vec<(String, f64)> = self
            .conn()
            .zrange_withscores(DUE, 0, 0)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(first.first().map(|(_, at)| *at as u64))
    }

    pub async fn ping(&self) -> StoreResult<()> {
        redis::cmd("PING")
            .query_async::<String>(&mut self.conn())
            .await
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }
}

/// A Redis URL without its password, for logs and errors.
fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_kept_out_of_messages() {
        assert_eq!(
            redacted("redis://:secret@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redacted("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
    }
}
