//! wasmtime, narrowed to what settle uses: one `Engine` and one `Linker` for
//! the whole runner, an `InstancePre` per loaded plugin, and a fresh `Store`
//! per call with the tenant's memory limit and deadline (made ahead of the
//! call when the runner is idle: [`crate::instances`]).
//!
//! Nothing outside this module touches `wasmtime::Config`.

use crate::bindings::McpPlugin;
use crate::bindings::settle::plugin::types::{
    Asset, CallError, CallOutcome, CallRequest, McpRequest, RequestOutcome, TaskError, TaskView,
    Tool,
};
use crate::capabilities;
use crate::capabilities::pool::ConnectionPool;
use crate::capabilities::runner::RequestNotifier;
use crate::ended::Pending;
use crate::instances::{Fresh, Maker, Spares};
use crate::plugin::{LoadError, Loader, Plugin, PluginInfo};
use crate::state::{HostState, MemoryLimitExceeded};
use crate::store::Store as StateStore;
use crate::tenant::Tenant;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wasmtime::component::Linker;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// How often the engine's epoch advances: a running plugin yields its
/// thread this often, and a deadline is checked this often.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Plugin instances that may exist at once across all tenants. Bounds the
/// pooling allocator's reservation; more concurrent calls wait for a slot.
const MAX_LIVE_INSTANCES: u32 = 1000;

/// How much of a recycled memory slot is zeroed in place rather than
/// handed back to the kernel: about what one call of a typical plugin
/// touches.
const KEEP_RESIDENT_BYTES: usize = 1 << 20;

/// Slots whose memory is returned to the kernel together.
const DECOMMIT_BATCH: usize = 16;

/// The largest linear memory any tenant may be given.
pub const MAX_MEMORY_BYTES: usize = 1 << 30;

/// Why a plugin call did not return a value. The runner keeps serving in
/// every case; only this call fails.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Fault {
    /// The call ran past the tenant's call timeout (an endless loop, or a
    /// wait that never ended) and was stopped.
    #[error("plugin call exceeded its deadline of {0:?}")]
    Deadline(Duration),
    /// The plugin tried to grow its memory past the tenant's limit (bytes).
    #[error("plugin exceeded its memory limit of {} MiB", .0 >> 20)]
    Memory(usize),
    /// The plugin trapped (a panic, an unreachable, a bad access).
    #[error("plugin trapped: {0}")]
    Trap(String),
    /// No instance could be made (no pool slot, shutdown, a link failure).
    #[error("plugin could not be instantiated: {0}")]
    Instantiate(String),
    /// The call returned, but what it wrote could not be put on disk, so
    /// its answer is not given: it might not survive a crash.
    #[error("the call's writes could not be put on disk: {0}")]
    Store(String),
}

impl Fault {
    /// A short name for metrics: `deadline`, `memory`, `trap`,
    /// `instantiate`, `store`.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Deadline(_) => "deadline",
            Fault::Memory(_) => "memory",
            Fault::Trap(_) => "trap",
            Fault::Instantiate(_) => "instantiate",
            Fault::Store(_) => "store",
        }
    }
}

/// The engine, linker and store shared by every plugin and call.
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    store: StateStore,
    ticker_stop: Arc<AtomicBool>,
    /// Makes every call's instance.
    maker: Maker,
    /// Makes each tenant's spare instance ahead of its call.
    spares: Spares,
    /// Where compiled plugins are kept so start-up and swaps skip Cranelift;
    /// `None` compiles every time.
    cache_dir: Option<PathBuf>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

fn engine_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(MAX_LIVE_INSTANCES);
    // A Rust component holds a few core instances, memories and tables.
    pool.total_core_instances(MAX_LIVE_INSTANCES * 4);
    pool.total_memories(MAX_LIVE_INSTANCES * 2);
    pool.total_tables(MAX_LIVE_INSTANCES * 4);
    pool.total_stacks(MAX_LIVE_INSTANCES);
    pool.max_memory_size(MAX_MEMORY_BYTES);
    // Every call gets a fresh instance, so slots are recycled constantly.
    // Zeroing the first pages with memset, and returning the rest to the
    // kernel in batches, avoids an madvise (and the TLB shootdown on every
    // core that follows it) per call.
    pool.linear_memory_keep_resident(KEEP_RESIDENT_BYTES);
    pool.table_keep_resident(KEEP_RESIDENT_BYTES / 16);
    pool.decommit_batch_size(DECOMMIT_BATCH);
    // Where the kernel can tell (Linux 6.7 and later), only the pages the
    // call actually dirtied are reset, instead of memset over the whole
    // kept-resident prefix (a Rust plugin's 1 MiB stack region, of which a
    // call touches a few pages): that memset was 7.5 % of the CPU of a
    // `get_device_state`. Elsewhere the memset stays.
    pool.pagemap_scan(wasmtime::Enabled::Auto);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    // For profiling only: names the plugin's compiled functions in
    // /tmp/perf-PID.map, so `perf report` can attribute time inside them.
    if std::env::var_os("SETTLE_PERF_MAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

impl Runtime {
    /// Builds the engine and linker, and starts the epoch ticker.
    pub fn new(store: StateStore, cache_dir: Option<PathBuf>) -> anyhow::Result<Runtime> {
        let engine = Engine::new(&engine_config())
            .map_err(|e| anyhow::anyhow!("creating the wasmtime engine: {e}"))?;
        let mut linker: Linker<HostState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| anyhow::anyhow!("linking WASI: {e}"))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(|e| anyhow::anyhow!("linking wasi:http: {e}"))?;
        capabilities::kv::add_to_linker(&mut linker, HostState::kv)
            .map_err(|e| anyhow::anyhow!("linking wasi:keyvalue: {e}"))?;
        capabilities::config::add_to_linker(&mut linker, HostState::config)
            .map_err(|e| anyhow::anyhow!("linking wasi:config: {e}"))?;
        capabilities::runner::add_to_linker(&mut linker, HostState::runner)
            .map_err(|e| anyhow::anyhow!("linking settle:plugin/runner: {e}"))?;
        capabilities::fetch::add_to_linker(&mut linker, HostState::fetch)
            .map_err(|e| anyhow::anyhow!("linking settle:plugin/outbound: {e}"))?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (ticking, stop) = (engine.clone(), ticker_stop.clone());
        std::thread::Builder::new()
            .name("settle-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    ticking.increment_epoch();
                }
            })?;
        let pool = ConnectionPool::new();
        let maker = Maker::new(engine.clone(), store.clone(), pool.clone());
        let spares = Spares::new(maker.clone());
        Ok(Runtime {
            engine,
            linker,
            store,
            ticker_stop,
            maker,
            spares,
            cache_dir,
        })
    }

    /// The store plugins' data and schedules live in.
    pub fn store(&self) -> &StateStore {
        &self.store
    }

    /// Compiles and links a plugin. A file that is not a component, one
    /// built for another version of the contract, or a component that does
    /// not fit the world, is refused with the reason.
    pub fn load_plugin(&self, path: &Path) -> Result<Plugin, LoadError> {
        Plugin::load(
            &Loader {
                engine: &self.engine,
                linker: &self.linker,
                cache_dir: self.cache_dir.as_deref(),
            },
            path,
        )
    }

    /// A fresh instance of the tenant's current plugin, with its limits:
    /// the tenant's spare when it has one, otherwise one made now.
    async fn start<'t>(
        &self,
        tenant: &'t Tenant,
        request: Option<Arc<dyn RequestNotifier>>,
    ) -> Result<Call<'t>, Fault> {
        let permit = admit(&tenant.calls).await?;
        self.start_admitted(tenant, request, permit).await
    }

    /// [`Runtime::start`] for one of the scheduler's advances, which has
    /// permits of its own ([`Tenant::advances`]).
    async fn start_advance<'t>(&self, tenant: &'t Tenant) -> Result<Call<'t>, Fault> {
        let permit = admit(&tenant.advances).await?;
        self.start_admitted(tenant, None, permit).await
    }

    async fn start_admitted<'t>(
        &self,
        tenant: &'t Tenant,
        request: Option<Arc<dyn RequestNotifier>>,
        permit: tokio::sync::SemaphorePermit<'t>,
    ) -> Result<Call<'t>, Fault> {
        let plugin = tenant.plugin.load_full();
        // Only a call alone (this one holds a permit) makes the next spare:
        // with others in flight the cores are busy, and making it ahead
        // would save no time.
        let alone = tenant.in_flight() <= 1;
        crate::timeline!("instance starts");
        let spare = self
            .spares
            .take(&tenant.spare, &tenant.context, &plugin, alone);
        let ahead = spare.is_some();
        let fresh = match spare {
            Some(mut spare) => {
                spare.arm(tenant.context.limits.call_timeout, request);
                spare
            }
            None => self
                .maker
                .make(&tenant.context, plugin, request)
                .await
                .map_err(Fault::Instantiate)?,
        };
        tenant.context.metrics.instance(tenant.name(), ahead);
        crate::timeline!("instance ready");
        Ok(Call::new(tenant, fresh, permit))
    }

    /// A fresh instance of `plugin` (the tenant's, or one being tried
    /// before a swap) under the tenant's limits.
    async fn start_on<'t>(
        &self,
        tenant: &'t Tenant,
        plugin: Arc<Plugin>,
        request: Option<Arc<dyn RequestNotifier>>,
    ) -> Result<Call<'t>, Fault> {
        let permit = admit(&tenant.calls).await?;
        let fresh = self
            .maker
            .make(&tenant.context, plugin, request)
            .await
            .map_err(Fault::Instantiate)?;
        tenant.context.metrics.instance(tenant.name(), false);
        Ok(Call::new(tenant, fresh, permit))
    }

    /// The plugin's tools, read once per loaded plugin.
    pub async fn list_tools(&self, tenant: &Tenant) -> Result<Arc<Vec<Tool>>, Fault> {
        self.tools_of(tenant, tenant.plugin.load_full()).await
    }

    /// The tools of `plugin`, run as `tenant`, read once per plugin.
    pub async fn tools_of(
        &self,
        tenant: &Tenant,
        plugin: Arc<Plugin>,
    ) -> Result<Arc<Vec<Tool>>, Fault> {
        plugin
            .tools
            .get_or_try_init(|| async {
                let mut call = self.start_on(tenant, plugin.clone(), None).await?;
                let exports = call.instance.settle_plugin_plugin();
                let tools = call
                    .probe
                    .guard("list-tools", exports.call_list_tools(&mut call.store))
                    .await?;
                Ok(Arc::new(tools))
            })
            .await
            .cloned()
    }

    /// What `plugin`, run as `tenant`, says about its server: `Ok` once it
    /// accepted the tenant's configuration (then kept, and not asked
    /// again), or the plugin's reason for refusing it. Capabilities that
    /// are not JSON count as `{}` and are logged.
    pub async fn info_of(
        &self,
        tenant: &Tenant,
        plugin: Arc<Plugin>,
    ) -> Result<Result<Arc<PluginInfo>, String>, Fault> {
        if let Some(info) = plugin.info.get() {
            return Ok(Ok(info.clone()));
        }
        let mut call = self.start_on(tenant, plugin.clone(), None).await?;
        let exports = call.instance.settle_plugin_plugin();
        let answer = call
            .probe
            .guard("capabilities", exports.call_capabilities(&mut call.store))
            .await?;
        let info = match answer {
            Ok(info) => info,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let capabilities = serde_json::from_str(&info.capabilities).unwrap_or_else(|e| {
            tracing::error!(tenant = %tenant.name(), "plugin capabilities are not JSON: {e}");
            serde_json::json!({})
        });
        let info = Arc::new(PluginInfo {
            capabilities,
            instructions: info.instructions,
        });
        Ok(Ok(plugin.info.get_or_init(|| async { info }).await.clone()))
    }

    /// Runs `call-tool`; `notifier` receives its progress and log messages.
    pub async fn call_tool(
        &self,
        tenant: &Tenant,
        request: &CallRequest,
        notifier: Option<Arc<dyn RequestNotifier>>,
    ) -> Result<Result<CallOutcome, CallError>, Fault> {
        let mut call = self.start(tenant, notifier).await?;
        let exports = call.instance.settle_plugin_plugin();
        let outcome = call
            .probe
            .guard(
                "call-tool",
                exports.call_call_tool(&mut call.store, request),
            )
            .await;
        crate::timeline!("plugin returned");
        call.end(&self.spares);
        outcome
    }

    /// Runs `serve` (resources, prompts, completion).
    pub async fn serve(
        &self,
        tenant: &Tenant,
        request: &McpRequest,
        notifier: Option<Arc<dyn RequestNotifier>>,
    ) -> Result<Result<RequestOutcome, CallError>, Fault> {
        let mut call = self.start(tenant, notifier).await?;
        let exports = call.instance.settle_plugin_plugin();
        let answer = call
            .probe
            .guard("serve", exports.call_serve(&mut call.store, request))
            .await;
        call.end(&self.spares);
        answer
    }

    /// The `detailed` view of a task that ended, kept by the runner
    /// ([`crate::ended`]), for `tasks/get`. `None` when the plugin must be
    /// asked: the task has not ended, its plugin does not let the runner
    /// keep views, or the store could not be read (the plugin then reports
    /// that itself).
    pub async fn ended_task(&self, tenant: &Tenant, task_id: &str) -> Option<String> {
        if !tenant.plugin.load().keeps_ended {
            return None;
        }
        crate::ended::read(&self.store, &tenant.context.namespace, task_id)
            .await
            .inspect_err(|e| {
                tracing::debug!(tenant = %tenant.name(), "an ended task's view could not be read: {e}")
            })
            .ok()
            .flatten()
    }

    /// Runs `get-task`.
    pub async fn get_task(
        &self,
        tenant: &Tenant,
        task_id: &str,
    ) -> Result<Result<TaskView, TaskError>, Fault> {
        let mut call = self.start(tenant, None).await?;
        let exports = call.instance.settle_plugin_plugin();
        let view = call
            .probe
            .guard("get-task", exports.call_get_task(&mut call.store, task_id))
            .await;
        call.end(&self.spares);
        view
    }

    /// Runs `update-task`.
    pub async fn update_task(
        &self,
        tenant: &Tenant,
        task_id: &str,
        input_responses: &str,
    ) -> Result<Result<(), TaskError>, Fault> {
        let mut call = self.start(tenant, None).await?;
        let exports = call.instance.settle_plugin_plugin();
        let answer = call
            .probe
            .guard(
                "update-task",
                exports.call_update_task(&mut call.store, task_id, &input_responses.to_string()),
            )
            .await;
        call.end(&self.spares);
        answer
    }

    /// Runs `cancel-task`.
    pub async fn cancel_task(
        &self,
        tenant: &Tenant,
        task_id: &str,
    ) -> Result<Result<(), TaskError>, Fault> {
        let mut call = self.start(tenant, None).await?;
        let exports = call.instance.settle_plugin_plugin();
        let answer = call
            .probe
            .guard(
                "cancel-task",
                exports.call_cancel_task(&mut call.store, task_id),
            )
            .await;
        call.end(&self.spares);
        answer
    }

    /// Runs `ui-asset`: the file of the plugin's page at `path`, if it has
    /// one.
    pub async fn ui_asset(&self, tenant: &Tenant, path: &str) -> Result<Option<Asset>, Fault> {
        let mut call = self.start(tenant, None).await?;
        let exports = call.instance.settle_plugin_plugin();
        let asset = call
            .probe
            .guard("ui-asset", exports.call_ui_asset(&mut call.store, path))
            .await;
        call.end(&self.spares);
        asset
    }

    /// Runs `advance` for tasks of one group.
    pub async fn advance(
        &self,
        tenant: &Tenant,
        group: &str,
        task_ids: &[String],
    ) -> Result<(), Fault> {
        let mut call = self.start_advance(tenant).await?;
        let exports = call.instance.settle_plugin_plugin();
        let advanced = call
            .probe
            .guard(
                "advance",
                exports.call_advance(&mut call.store, group, task_ids),
            )
            .await;
        call.end(&self.spares);
        advanced
    }
}

/// Waits until one of a tenant's `permits` is free.
async fn admit(
    permits: &tokio::sync::Semaphore,
) -> Result<tokio::sync::SemaphorePermit<'_>, Fault> {
    // Closed only at shutdown, after which no call starts.
    permits
        .acquire()
        .await
        .map_err(|_| Fault::Instantiate("the runner is shutting down".into()))
}

/// One call in progress: its store, instance and what judges its end.
struct Call<'t> {
    store: Store<HostState>,
    instance: McpPlugin,
    probe: Probe<'t>,
}

impl<'t> Call<'t> {
    /// The call `fresh` serves for `tenant`, holding one of its `permit`s.
    fn new(tenant: &'t Tenant, fresh: Fresh, permit: tokio::sync::SemaphorePermit<'t>) -> Call<'t> {
        let writes = fresh.store.data().kv.store.clone();
        let ended = fresh.store.data().ended.clone();
        Call {
            store: fresh.store,
            instance: fresh.instance,
            probe: Probe {
                tenant,
                timeout: tenant.context.limits.call_timeout,
                memory_hit: fresh.memory_hit,
                stderr: fresh.stderr,
                source: fresh.plugin.source.clone(),
                writes,
                ended,
                _permit: permit,
            },
        }
    }

    /// Ends the call. When the tenant has no other call in flight, its
    /// instance is retired to the tenant's slot and dropped by the task
    /// that makes the next spare ([`Spares::retire`]): dropping it resets
    /// its pool slot's memory, which the answer need not wait for (the
    /// stage from the plugin's return to the MCP answer went from 30 to
    /// 10 µs; docs/performance.md, "Twenty-fourth round"). With other calls
    /// in flight every core is busy, and it is dropped here.
    ///
    /// An instance that hit its memory limit may hold much of it, so it
    /// is dropped here too.
    fn end(self, spares: &Spares) {
        let Call {
            mut store, probe, ..
        } = self;
        let tenant = probe.tenant;
        if tenant.in_flight() <= 1 && !probe.memory_hit.load(Ordering::Relaxed) {
            // What reaches outside the instance goes now, not with it: the
            // client request's notifier (it holds the client's session) and
            // any handle the plugin left open (an outbound exchange's
            // connection). The instance is never run again.
            let state = store.data_mut();
            state.request = None;
            drop(std::mem::take(&mut state.table));
            // Before the permit is given back, so the tenant's next call
            // finds it.
            spares.retire(&tenant.spare, &tenant.context, store);
        } else {
            drop(store);
        }
        drop(probe);
    }
}

/// What is needed to name how a call ended, kept apart from the store the
/// call's future borrows.
struct Probe<'t> {
    tenant: &'t Tenant,
    timeout: Duration,
    memory_hit: Arc<AtomicBool>,
    stderr: MemoryOutputPipe,
    /// The file the running plugin was loaded from, for the log.
    source: PathBuf,
    /// The call's handle on the store: flushed before the call's answer
    /// goes anywhere if the call wrote, or read what is not on disk yet.
    writes: crate::store::Store,
    /// The views of the tasks the call ended, stored when it is over.
    ended: Option<Pending>,
    _permit: tokio::sync::SemaphorePermit<'t>,
}

impl Probe<'_> {
    /// Runs the call under its deadline and turns a failure into a [`Fault`],
    /// logged with the tenant's name; counts it either way. Whatever the
    /// call wrote, or read that was not yet on disk, is on disk before its
    /// answer is returned: an answer never tells of a write a crash could
    /// undo.
    async fn guard<R>(
        &self,
        what: &str,
        call: impl Future<Output = wasmtime::Result<R>>,
    ) -> Result<R, Fault> {
        let started = std::time::Instant::now();
        let metrics = &self.tenant.context.metrics;
        let tenant = self.tenant.name();
        let ended = tokio::time::timeout(self.timeout, call).await;
        let namespace = &self.tenant.context.namespace;
        let viewed = match &self.ended {
            Some(views) => views.store(&self.writes, namespace).await,
            None => Vec::new(),
        };
        let flushed = self.writes.flush_owed().await;
        if flushed.is_err() {
            crate::ended::Pending::withdraw(&self.writes, namespace, &viewed).await;
        }
        let fault = match (ended, flushed) {
            (Ok(Ok(value)), Ok(())) => {
                metrics.call(tenant, what, "ok", started.elapsed());
                return Ok(value);
            }
            (Err(_elapsed), _) => Fault::Deadline(self.timeout),
            (Ok(Err(error)), _) => self.classify(&error),
            (Ok(Ok(_)), Err(e)) => Fault::Store(e.to_string()),
        };
        metrics.call(tenant, what, fault.kind(), started.elapsed());
        metrics.fault(tenant, fault.kind());
        let stderr = String::from_utf8_lossy(&self.stderr.contents())
            .trim()
            .to_string();
        tracing::error!(
            tenant = %self.tenant.name(),
            plugin = %self.source.display(),
            call = what,
            stderr = %stderr,
            "{fault}"
        );
        Err(fault)
    }

    fn classify(&self, error: &wasmtime::Error) -> Fault {
        if self.memory_hit.load(Ordering::Relaxed)
            || error.downcast_ref::<MemoryLimitExceeded>().is_some()
        {
            return Fault::Memory(self.tenant.context.limits.memory_bytes);
        }
        if let Some(wasmtime::Trap::Interrupt) = error.downcast_ref::<wasmtime::Trap>() {
            return Fault::Deadline(self.timeout);
        }
        Fault::Trap(format!("{error:#}"))
    }
}
