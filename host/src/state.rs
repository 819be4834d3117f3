//! The data of one plugin call's `Store`: a bag of per-capability contexts,
//! built fresh for every call from the tenant's context.

use crate::capabilities::config::ConfigView;
use crate::capabilities::fetch::FetchView;
use crate::capabilities::http::PolicyHooks;
use crate::capabilities::kv::{KvCtx, KvView};
use crate::capabilities::pool::ConnectionPool;
use crate::capabilities::runner::{RequestNotifier, RunnerView};
use crate::context::TenantContext;
use crate::ended::Pending;
use crate::store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// How much of a plugin's stderr is kept (it writes there when it panics).
pub const STDERR_CAPTURE_BYTES: usize = 64 * 1024;

/// The data of one call's `Store`.
pub struct HostState {
    /// Handles of every resource the plugin holds during the call.
    pub table: ResourceTable,
    /// WASI clocks, random and stdio; no filesystem, environment or network.
    pub wasi: WasiCtx,
    /// wasi:http's own state.
    pub http: WasiHttpCtx,
    /// The outbound allow-list check.
    pub hooks: PolicyHooks,
    /// The tenant's namespace in the store.
    pub kv: KvCtx,
    /// Settings, limits and event sink of the tenant this call serves.
    pub tenant: Arc<TenantContext>,
    /// Enforces the tenant's memory limit and remembers it was hit.
    pub limiter: MemoryLimiter,
    /// The client request this call serves, if any: where progress and log
    /// messages go.
    pub request: Option<std::sync::Arc<dyn RequestNotifier>>,
    /// The views of tasks this call ended, kept when the call is over;
    /// `None` for a plugin whose ended tasks the runner does not keep.
    pub ended: Option<Pending>,
}

impl HostState {
    /// A fresh state for one call of `tenant`; `stderr` receives the plugin's
    /// stderr so a crash can be logged with its message.
    pub fn new(
        tenant: Arc<TenantContext>,
        store: Store,
        stderr: MemoryOutputPipe,
        request: Option<Arc<dyn RequestNotifier>>,
        pool: Arc<ConnectionPool>,
        keeps_ended: bool,
    ) -> HostState {
        // The call's own handle: its writes reach the disk together, before
        // anything they led to leaves the runner (`Store::deferring`).
        let store = store.deferring();
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        HostState {
            table: ResourceTable::new(),
            wasi,
            http: WasiHttpCtx::new(),
            hooks: PolicyHooks {
                tenant: tenant.clone(),
                pool,
                writes: store.clone(),
            },
            kv: KvCtx {
                store,
                namespace: tenant.namespace.clone(),
            },
            limiter: MemoryLimiter::new(tenant.limits.memory_bytes),
            tenant,
            request,
            ended: keeps_ended.then(Pending::default),
        }
    }

    /// The key-value view, for the linker.
    pub fn kv(&mut self) -> KvView<'_> {
        KvView {
            ctx: &self.kv,
            table: &mut self.table,
        }
    }

    /// The config view, for the linker.
    pub fn config(&mut self) -> ConfigView<'_> {
        ConfigView {
            tenant: &self.tenant,
        }
    }

    /// The one-call HTTP view, for the linker.
    pub fn fetch(&mut self) -> FetchView<'_> {
        FetchView { hooks: &self.hooks }
    }

    /// The runner view, for the linker.
    pub fn runner(&mut self) -> RunnerView<'_> {
        RunnerView {
            kv: &self.kv,
            tenant: &self.tenant,
            request: self.request.as_deref(),
            ended: self.ended.as_ref(),
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// The error a plugin call ends with when it grows past its memory limit.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {limit} bytes exceeded (asked for {desired})")]
pub struct MemoryLimitExceeded {
    /// The tenant's limit, in bytes.
    pub limit: usize,
    /// The size the plugin asked for, in bytes.
    pub desired: usize,
}

/// Caps linear memory growth, and turns an attempt to pass the cap into a
/// trap the runner can name, instead of a failed `memory.grow` the plugin
/// might ignore.
pub struct MemoryLimiter {
    limit: usize,
    /// Set once the limit was hit, read after the call to name the fault.
    pub hit: Arc<AtomicBool>,
}

impl MemoryLimiter {
    /// A limiter capping memory at `limit` bytes.
    pub fn new(limit: usize) -> MemoryLimiter {
        MemoryLimiter {
            limit,
            hit: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.hit.store(true, Ordering::Relaxed);
            return Err(MemoryLimitExceeded {
                limit: self.limit,
                desired,
            }
            .into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Table elements are pointers; a table that large is an attack.
        Ok(desired <= 1_000_000)
    }
}
