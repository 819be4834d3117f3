//! `wasi:keyvalue` (store, atomics, batch) over the runner's [`Store`],
//! confined to the tenant's namespace.
//!
//! A plugin opens the bucket `"default"` and sees only its tenant's keys; it
//! cannot name another namespace. Compare-and-swap is what keeps a task's
//! terminal state from being overwritten by a racing writer.

use crate::bindings::kv::{Bucket, Cas};
use crate::bindings::wasi::keyvalue::{atomics, batch, store as wit};
use crate::store::{Store, StoreError};
use wasmtime::component::{HasData, Linker, Resource, ResourceTable};

/// The only bucket name a plugin may open.
pub const BUCKET: &str = "default";

/// The most keys one batch call may name: bounds what a plugin can make the
/// runner read or hold in one go.
pub const MAX_BATCH_KEYS: usize = 10_000;

/// Per-call key-value state.
pub struct KvCtx {
    /// Where the data lives; shared by every call of every tenant.
    pub store: Store,
    /// The tenant's namespace: the one thing that separates tenants' data.
    pub namespace: String,
}

/// The view the generated `Host` traits are implemented for.
pub struct KvView<'a> {
    /// The store and namespace.
    pub ctx: &'a KvCtx,
    /// Where the plugin's bucket and cas handles live.
    pub table: &'a mut ResourceTable,
}

struct HasKv;

impl HasData for HasKv {
    type Data<'a> = KvView<'a>;
}

/// Adds `wasi:keyvalue` store, atomics and batch to the linker.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> KvView<'_>,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasKv>(linker, view)?;
    atomics::add_to_linker::<T, HasKv>(linker, view)?;
    batch::add_to_linker::<T, HasKv>(linker, view)?;
    Ok(())
}

fn wit_error(e: StoreError) -> wit::Error {
    wit::Error::Other(e.to_string())
}

impl KvView<'_> {
    fn namespace_of(&self, bucket: &Resource<Bucket>) -> wasmtime::Result<String> {
        Ok(self.table.get(bucket)?.namespace.clone())
    }
}

impl wit::Host for KvView<'_> {
    async fn open(
        &mut self,
        identifier: String,
    ) -> wasmtime::Result<Result<Resource<Bucket>, wit::Error>> {
        if identifier != BUCKET {
            return Ok(Err(wit::Error::NoSuchStore));
        }
        let bucket = Bucket {
            namespace: self.ctx.namespace.clone(),
        };
        Ok(Ok(self.table.push(bucket)?))
    }
}

impl wit::HostBucket for KvView<'_> {
    async fn get(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, wit::Error>> {
        let ns = self.namespace_of(&bucket)?;
        Ok(self.ctx.store.get(&ns, &key).await.map_err(wit_error))
    }

    async fn set(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let ns = self.namespace_of(&bucket)?;
        Ok(self
            .ctx
            .store
            .set(&ns, &key, value)
            .await
            .map_err(wit_error))
    }

    async fn delete(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let ns = self.namespace_of(&bucket)?;
        Ok(self.ctx.store.delete(&ns, &key).await.map_err(wit_error))
    }

    async fn exists(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<bool, wit::Error>> {
        let ns = self.namespace_of(&bucket)?;
        Ok(self
            .ctx
            .store
            .get(&ns, &key)
            .await
            .map(|v| v.is_some())
            .map_err(wit_error))
    }

    async fn list_keys(
        &mut self,
        bucket: Resource<Bucket>,
        cursor: Option<String>,
    ) -> wasmtime::Result<Result<wit::KeyResponse, wit::Error>> {
        let ns = self.namespace_of(&bucket)?;
        Ok(self
            .ctx
            .store
            .list_keys(&ns, cursor)
            .await
            .map(|(keys, cursor)| wit::KeyResponse { keys, cursor })
            .map_err(wit_error))
    }

    async fn drop(&mut self, bucket: Resource<Bucket>) -> wasmtime::Result<()> {
        self.table.delete(bucket)?;
        Ok(())
    }
}

impl atomics::Host for KvView<'_> {
    async fn increment(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        delta: i64,
    ) -> wasmtime::Result<Result<i64, wit::Error>> {
        let ns = self.namespace_of(&bucket)?;
        Ok(self
            .ctx
            .store
            .increment(&ns, &key, delta)
            .await
            .map_err(wit_error))
    }

    async fn swap(
        &mut self,
        cas: Resource<Cas>,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), atomics::CasError>> {
        let Cas {
            namespace,
            key,
            seen,
        } = self.table.delete(cas)?;
        match self
            .ctx
            .store
            .compare_and_swap(&namespace, &key, seen, value)
            .await
        {
            Ok(true) => Ok(Ok(())),
            Ok(false) => {
                // Hand back a fresh handle, as the interface requires, so the
                // plugin can retry on the value that won.
                let fresh = match self.ctx.store.get(&namespace, &key).await {
                    Ok(v) => v,
                    Err(e) => return Ok(Err(atomics::CasError::StoreError(wit_error(e)))),
                };
                let handle = self.table.push(Cas {
                    namespace,
                    key,
                    seen: fresh,
                })?;
                Ok(Err(atomics::CasError::CasFailed(handle)))
            }
            Err(e) => Ok(Err(atomics::CasError::StoreError(wit_error(e)))),
        }
    }
}

impl atomics::HostCas for KvView<'_> {
    async fn new(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<Resource<Cas>, wit::Error>> {
        let namespace = self.namespace_of(&bucket)?;
        let seen = match self.ctx.store.get(&namespace, &key).await {
            Ok(v) => v,
            Err(e) => return Ok(Err(wit_error(e))),
        };
        Ok(Ok(self.table.push(Cas {
            namespace,
            key,
            seen,
        })?))
    }

    async fn current(
        &mut self,
        cas: Resource<Cas>,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, wit::Error>> {
        Ok(Ok(self.table.get(&cas)?.seen.clone()))
    }

    async fn drop(&mut self, cas: Resource<Cas>) -> wasmtime::Result<()> {
        self.table.delete(cas)?;
        Ok(())
    }
}

impl batch::Host for KvView<'_> {
    async fn get_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<Option<(String, Vec<u8>)>>, wit::Error>> {
        let ns = self.namespace_of(&bucket)?;
        if keys.len() > MAX_BATCH_KEYS {
            return Ok(Err(too_many(keys.len())));
        }
        Ok(self
            .ctx
            .store
            .get_many(&ns, &keys)
            .await
            .map(|values| {
                keys.into_iter()
                    .zip(values)
                    .map(|(k, v)| v.map(|v| (k, v)))
                    .collect()
            })
            .map_err(wit_error))
    }

    async fn set_many(
        &mut self,
        bucket: Resource<Bucket>,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let ns = self.namespace_of(&bucket)?;
        if key_values.len() > MAX_BATCH_KEYS {
            return Ok(Err(too_many(key_values.len())));
        }
        Ok(self
            .ctx
            .store
            .set_many(&ns, key_values)
            .await
            .map_err(wit_error))
    }

    async fn delete_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let ns = self.namespace_of(&bucket)?;
        if keys.len() > MAX_BATCH_KEYS {
            return Ok(Err(too_many(keys.len())));
        }
        Ok(self
            .ctx
            .store
            .delete_many(&ns, &keys)
            .await
            .map_err(wit_error))
    }
}

fn too_many(n: usize) -> wit::Error {
    wit::Error::Other(format!(
        "a batch may name at most {MAX_BATCH_KEYS} keys, not {n}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wit::{Host as _, HostBucket as _};

    fn ctx(store: &Store, namespace: &str) -> KvCtx {
        KvCtx {
            store: store.clone(),
            namespace: namespace.into(),
        }
    }

    /// A borrow of a bucket the view holds, as a plugin passes it.
    fn borrow(bucket: &Resource<Bucket>) -> Resource<Bucket> {
        Resource::new_borrow(bucket.rep())
    }

    async fn open(view: &mut KvView<'_>) -> Resource<Bucket> {
        view.open(BUCKET.into()).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn only_the_tenants_bucket_opens() {
        let store = Store::memory();
        let alice = ctx(&store, "alice");
        let mut table = ResourceTable::new();
        let mut view = KvView {
            ctx: &alice,
            table: &mut table,
        };
        for other in ["other", "bob", "../bob", ""] {
            assert!(
                matches!(
                    view.open(other.into()).await.unwrap(),
                    Err(wit::Error::NoSuchStore)
                ),
                "{other:?} opened"
            );
        }
        let bucket = open(&mut view).await;
        view.set(borrow(&bucket), "k".into(), b"v".to_vec())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            view.get(borrow(&bucket), "k".into())
                .await
                .unwrap()
                .unwrap(),
            Some(b"v".to_vec())
        );
    }

    #[tokio::test]
    async fn a_tenant_sees_only_its_namespace() {
        let store = Store::memory();
        let (alice, bob) = (ctx(&store, "alice"), ctx(&store, "bob"));
        let (mut table_a, mut table_b) = (ResourceTable::new(), ResourceTable::new());
        let mut a = KvView {
            ctx: &alice,
            table: &mut table_a,
        };
        let mut b = KvView {
            ctx: &bob,
            table: &mut table_b,
        };
        let (bucket_a, bucket_b) = (open(&mut a).await, open(&mut b).await);
        a.set(borrow(&bucket_a), "task/1".into(), b"a".to_vec())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            b.get(borrow(&bucket_b), "task/1".into())
                .await
                .unwrap()
                .unwrap(),
            None
        );
        // A key that spells another namespace stays inside this one.
        assert_eq!(
            b.get(borrow(&bucket_b), "../alice/task/1".into())
                .await
                .unwrap()
                .unwrap(),
            None
        );
        let listed = b.list_keys(borrow(&bucket_b), None).await.unwrap().unwrap();
        assert!(listed.keys.is_empty());
        assert_eq!(
            store.get("alice", "task/1").await.unwrap(),
            Some(b"a".to_vec())
        );
    }

    #[tokio::test]
    async fn compare_and_swap_loses_to_a_write_in_between() {
        let store = Store::memory();
        let alice = ctx(&store, "alice");
        let mut table = ResourceTable::new();
        let mut view = KvView {
            ctx: &alice,
            table: &mut table,
        };
        let bucket = open(&mut view).await;
        let cas = atomics::HostCas::new(&mut view, borrow(&bucket), "k".into())
            .await
            .unwrap()
            .unwrap();
        store.set("alice", "k", b"racer".to_vec()).await.unwrap();
        let lost = atomics::Host::swap(&mut view, cas, b"mine".to_vec())
            .await
            .unwrap();
        let Err(atomics::CasError::CasFailed(fresh)) = lost else {
            panic!("the swap did not lose");
        };
        // The fresh handle holds the value that won, and a swap on it wins.
        assert_eq!(
            atomics::HostCas::current(&mut view, Resource::new_borrow(fresh.rep()))
                .await
                .unwrap()
                .unwrap(),
            Some(b"racer".to_vec())
        );
        atomics::Host::swap(&mut view, fresh, b"mine".to_vec())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            store.get("alice", "k").await.unwrap(),
            Some(b"mine".to_vec())
        );
    }

    #[tokio::test]
    async fn a_batch_beyond_the_limit_is_refused_and_one_within_it_works() {
        let store = Store::memory();
        let alice = ctx(&store, "alice");
        let mut table = ResourceTable::new();
        let mut view = KvView {
            ctx: &alice,
            table: &mut table,
        };
        let bucket = open(&mut view).await;
        let too_many: Vec<String> = (0..=MAX_BATCH_KEYS).map(|i| i.to_string()).collect();
        let refused = batch::Host::get_many(&mut view, borrow(&bucket), too_many)
            .await
            .unwrap();
        assert!(matches!(refused, Err(wit::Error::Other(m)) if m.contains("at most")));
        batch::Host::set_many(
            &mut view,
            borrow(&bucket),
            vec![("a".into(), b"1".to_vec()), ("b".into(), b"2".to_vec())],
        )
        .await
        .unwrap()
        .unwrap();
        let got = batch::Host::get_many(
            &mut view,
            borrow(&bucket),
            vec!["a".into(), "missing".into()],
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(got, [Some(("a".to_string(), b"1".to_vec())), None]);
    }
}
