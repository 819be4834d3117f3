//! Wiring: from a validated configuration to a running runner, and an
//! orderly stop. `main` and the tests both start settle through here.

use crate::cli::ServeArgs;
use crate::drain::Drain;
use crate::events::Hub;
use crate::mcp::http::HttpAccess;
use crate::mcp::{ServeOptions, Settle};
use crate::policy::{AllowedOrigin, OutboundPolicy};
use crate::runtime::Runtime;
use crate::scheduler::Scheduler;
use crate::store::Store;
use crate::tenant::{Limits, Tenant, TenantContext, Tenants};
use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The tenant a runner without a tenants file serves.
pub const DEFAULT_TENANT: &str = "default";

/// How long shutdown waits for calls in flight.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// One tenant's configuration, checked.
#[derive(Clone, Debug)]
pub struct TenantConfig {
    /// Also the tenant's store namespace.
    pub name: String,
    /// The component to load.
    pub plugin: PathBuf,
    /// What the plugin reads through `wasi:config`.
    pub plugin_config: BTreeMap<String, String>,
    /// Where the plugin may send HTTP requests.
    pub policy: OutboundPolicy,
    /// Memory, time and concurrency bounds of its calls.
    pub limits: Limits,
}

/// Everything a runner needs, checked.
pub struct RunnerConfig {
    /// Where tasks and schedules live.
    pub store: Store,
    /// The Redis URL, when the store is shared by replicas: change notices
    /// travel between them through it.
    pub relay: Option<String>,
    /// The one tenant served.
    pub tenant: TenantConfig,
    /// How MCP requests are answered.
    pub options: ServeOptions,
    /// Who may reach the HTTP endpoint.
    pub access: HttpAccess,
    /// How long a claimed due task belongs to this runner.
    pub lease: Duration,
    /// Where compiled plugins are cached; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
}

impl RunnerConfig {
    /// Checks the command line; each problem names the flag.
    pub fn from_args(args: &ServeArgs) -> anyhow::Result<RunnerConfig> {
        let device_api = url::Url::parse(&args.device_api)
            .with_context(|| format!("--device-api {:?} is not a URL", args.device_api))?;
        if !matches!(device_api.scheme(), "http" | "https") {
            bail!(
                "--device-api {:?} must be an http:// or https:// URL",
                args.device_api
            );
        }
        let origins = if args.allow_outbound.is_empty() {
            vec![AllowedOrigin::of_url(&args.device_api).context("--device-api")?]
        } else {
            args.allow_outbound
                .iter()
                .map(|o| AllowedOrigin::parse(o).context("--allow-outbound"))
                .collect::<anyhow::Result<_>>()?
        };
        let mut plugin_config: BTreeMap<String, String> =
            args.plugin_config.iter().cloned().collect();
        plugin_config.insert("device_api".into(), args.device_api.clone());
        if let Some(token) = &args.device_token {
            plugin_config.insert("device_token".into(), token.clone());
        }
        // Plugins seal MRTR `requestState` with this key so a client cannot
        // forge or alter it. Random per start unless configured, which is
        // enough for one process: a retry reaches the process that asked.
        plugin_config
            .entry("request_state_key".into())
            .or_insert_with(random_key);
        if args.memory_mib == 0 || args.memory_mib << 20 > crate::runtime::MAX_MEMORY_BYTES {
            bail!(
                "--memory-mib {} must be between 1 and {}",
                args.memory_mib,
                crate::runtime::MAX_MEMORY_BYTES >> 20
            );
        }
        if args.call_timeout_ms == 0 {
            bail!("--call-timeout-ms must be above 0");
        }
        if args.lease_ms <= args.call_timeout_ms {
            bail!(
                "--lease-ms {} must exceed --call-timeout-ms {}: a replica must finish advancing a task before another may take it",
                args.lease_ms,
                args.call_timeout_ms
            );
        }
        let store = Store::open(&args.store).with_context(|| format!("--store {}", args.store))?;
        let relay = store.is_shared().then(|| args.store.clone());
        let mut access = HttpAccess::default();
        access
            .allowed_hosts
            .extend(args.allowed_host.iter().cloned());
        access
            .allowed_origins
            .extend(args.allowed_origin.iter().cloned());
        Ok(RunnerConfig {
            store,
            relay,
            tenant: TenantConfig {
                name: DEFAULT_TENANT.into(),
                plugin: args.plugin.clone(),
                plugin_config,
                policy: OutboundPolicy::new(origins),
                limits: Limits {
                    memory_bytes: args.memory_mib << 20,
                    call_timeout: Duration::from_millis(args.call_timeout_ms),
                    ..Limits::default()
                },
            },
            options: ServeOptions {
                inline_wait: Duration::from_millis(args.inline_wait_ms),
            },
            access,
            lease: Duration::from_millis(args.lease_ms),
            cache_dir: cache_dir(args.cache_dir.as_deref()),
        })
    }
}

/// The compiled-plugin cache: the flag's directory, `none` for no cache,
/// or the user's cache directory by default (none when there is no home).
fn cache_dir(flag: Option<&str>) -> Option<PathBuf> {
    match flag {
        Some("none") => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
            .map(|base| base.join("settle")),
    }
}

/// 256 random bits as hex.
fn random_key() -> String {
    rand::random::<[u8; 32]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A started runner: plugin loaded, scheduler running.
pub struct Runner {
    settle: Settle,
    store: Store,
    access: HttpAccess,
    drain: Drain,
    scheduler_stop: CancellationToken,
    scheduler: tokio::task::JoinHandle<()>,
}

impl Runner {
    /// Loads the plugin (refusing one that does not work), and starts the
    /// scheduler so that stored tasks carry on.
    pub async fn start(config: RunnerConfig) -> anyhow::Result<Runner> {
        if let Err(e) = config.store.ping().await {
            // Not fatal: the store may come up after the runner, and
            // /readyz says so meanwhile.
            tracing::warn!("the store is not reachable yet: {e}");
        }
        let store = config.store.clone();
        let runtime = Arc::new(Runtime::new(config.store, config.cache_dir)?);
        let spec = config.tenant;
        let hub = Arc::new(Hub::default());
        if let Some(url) = &config.relay {
            crate::relay::start(url, hub.clone()).context("relaying notices through redis")?;
        }
        let plugin = runtime.load_plugin(&spec.plugin)?;
        let context = TenantContext {
            name: spec.name,
            plugin_config: spec.plugin_config,
            policy: spec.policy,
            limits: spec.limits,
            events: hub.clone(),
            stats: Default::default(),
        };
        let tenants = Arc::new(Tenants::new([Tenant::new(context, plugin)]));
        let tenant = tenants
            .get(DEFAULT_TENANT)
            .expect("the default tenant was just added");
        // Reading the tool list proves the plugin instantiates and answers.
        let tools = runtime
            .list_tools(&tenant)
            .await
            .with_context(|| format!("plugin {} failed its first call", spec.plugin.display()))?;
        runtime.capabilities(&tenant).await.with_context(|| {
            format!(
                "plugin {} failed to say what it serves",
                spec.plugin.display()
            )
        })?;
        tracing::info!(
            plugin = %spec.plugin.display(),
            tools = tools.len(),
            outbound = ?tenant.context.policy.origins().iter().map(ToString::to_string).collect::<Vec<_>>(),
            "plugin loaded"
        );
        let drain = Drain::default();
        let settle = Settle::new(runtime.clone(), tenant, config.options, drain.clone());
        let scheduler_stop = CancellationToken::new();
        let scheduler = tokio::spawn(
            Scheduler {
                runtime,
                tenants,
                lease: config.lease,
            }
            .run(scheduler_stop.clone()),
        );
        Ok(Runner {
            settle,
            store,
            access: config.access,
            drain,
            scheduler_stop,
            scheduler,
        })
    }

    /// Serves HTTP on `listener` until `shutdown` resolves; then stops taking
    /// new requests, lets calls in flight finish, and returns.
    pub async fn serve_http(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let streams = CancellationToken::new();
        let responses = Drain::default();
        let app = crate::mcp::http::router(
            self.settle.clone(),
            &self.access,
            responses.clone(),
            streams.clone(),
        )
        .merge(crate::mcp::http::health(self.store.clone()));
        let stopping = CancellationToken::new();
        let signal = tokio::spawn({
            let stopping = stopping.clone();
            async move {
                shutdown.await;
                stopping.cancel();
            }
        });
        // Once stopping: axum takes no new connections and closes idle ones;
        // calls in flight run to the end; then the long-lived streams (which
        // would otherwise hold the server open) are ended.
        let closer = tokio::spawn({
            let stopping = stopping.clone();
            async move {
                stopping.cancelled().await;
                tracing::info!("shutting down: no new requests; finishing calls in flight");
                let left = responses.wait_idle(DRAIN_LIMIT).await;
                if left > 0 {
                    tracing::warn!(
                        "{left} calls still running after {DRAIN_LIMIT:?}; stopping anyway"
                    );
                }
                streams.cancel();
            }
        });
        // Small JSON-RPC answers must not wait for Nagle's algorithm and the
        // peer's delayed ACK (40 ms each on Linux).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!("TCP_NODELAY: {e}");
            }
        });
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopping.cancelled_owned().await })
            .await
            .context("HTTP server")?;
        signal.abort();
        let _ = closer.await;
        self.stop().await;
        Ok(())
    }

    /// Serves one stdio client until it closes stdin or `shutdown` resolves.
    pub async fn serve_stdio<R, W>(
        self,
        input: R,
        output: W,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let stop_reading = CancellationToken::new();
        let watcher = tokio::spawn({
            let stop_reading = stop_reading.clone();
            async move {
                shutdown.await;
                stop_reading.cancel();
            }
        });
        crate::mcp::stdio::serve(self.settle.clone(), input, output, stop_reading).await?;
        watcher.abort();
        self.stop().await;
        Ok(())
    }

    async fn stop(self) {
        let left = self.drain.wait_idle(DRAIN_LIMIT).await;
        if left > 0 {
            tracing::warn!("{left} calls still running at exit");
        }
        self.scheduler_stop.cancel();
        let _ = self.scheduler.await;
        tracing::info!("stopped");
    }
}
