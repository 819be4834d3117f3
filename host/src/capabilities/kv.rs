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
        for (key, value) in key_values {
            if let Err(e) = self.ctx.store.set(&ns, &key, value).await {
                return Ok(Err(wit_error(e)));
            }
        }
        Ok(Ok(()))
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
        for key in keys {
            if let Err(e) = self.ctx.store.delete(&ns, &key).await {
                return Ok(Err(wit_error(e)));
            }
        }
        Ok(Ok(()))
    }
}

fn too_many(n: usize) -> wit::Error {
    wit::Error::Other(format!(
        "a batch may name at most {MAX_BATCH_KEYS} keys, not {n}"
    ))
}
