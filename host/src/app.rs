//! Wiring: from a validated configuration to a running runner, and an
//! orderly stop. `main` and the tests both start settle through here.

use crate::cli::ServeArgs;
use crate::config::{Secret, TenantSpec, TenantsFile};
use crate::drain::Drain;
use crate::events::Hub;
use crate::mcp::http::HttpAccess;
use crate::mcp::{ServeOptions, Settle};
use crate::metrics::Metrics;
use crate::policy::{AllowedOrigin, OutboundPolicy};
use crate::runtime::Runtime;
use crate::scheduler::Scheduler;
use crate::store::Store;
use crate::swap::Swapper;
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

/// How tenants are reached over HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// No tenants file: the default tenant at `/mcp`, no bearer token.
    Single,
    /// A tenants file: each tenant at `/t/{name}/mcp` behind its token.
    Tenants,
}

/// Everything a runner needs, checked.
pub struct RunnerConfig {
    /// Where tasks and schedules live.
    pub store: Store,
    /// The Redis URL, when the store is shared by replicas: change notices
    /// travel between them through it.
    pub relay: Option<String>,
    /// The tenants served.
    pub tenants: Vec<TenantSpec>,
    /// How tenants are reached over HTTP.
    pub layout: Layout,
    /// The admin endpoint's token; the endpoint is off without one.
    pub admin_token: Option<Secret>,
    /// The token `/metrics` asks for; `None` serves it openly (single
    /// tenant) or not at all (tenants file).
    pub metrics_token: Option<Secret>,
    /// Swap a tenant's plugin when its file changes.
    pub watch_plugins: bool,
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
        match &args.config {
            Some(path) => RunnerConfig::from_file(args, path),
            None => RunnerConfig::single(args),
        }
    }

    /// The tenants of a tenants file; the flags still set the store, the
    /// HTTP access rules, the lease and the cache.
    fn from_file(args: &ServeArgs, path: &std::path::Path) -> anyhow::Result<RunnerConfig> {
        let file = TenantsFile::load(path)?;
        let mut config = RunnerConfig::shared(args)?;
        config.tenants = file.tenants;
        config.layout = Layout::Tenants;
        config.admin_token = file.admin_token;
        config.metrics_token = file.metrics_token;
        config.watch_plugins = file.watch_plugins;
        for tenant in &config.tenants {
            if tenant.limits.call_timeout >= config.lease {
                bail!(
                    "{}: tenant {}: call_timeout_ms {} must be below --lease-ms {}: a replica must finish advancing a task before another may take it",
                    path.display(),
                    tenant.name,
                    tenant.limits.call_timeout.as_millis(),
                    config.lease.as_millis()
                );
            }
        }
        if let Some(name) = &args.tenant {
            config.tenants.retain(|t| &t.name == name);
            if config.tenants.is_empty() {
                bail!("--tenant {name}: {} has no such tenant", path.display());
            }
        }
        Ok(config)
    }

    /// The default tenant, from the flags alone.
    fn single(args: &ServeArgs) -> anyhow::Result<RunnerConfig> {
        if let Some(name) = &args.tenant {
            bail!(
                "--tenant {name} needs --config: without a tenants file there is only the default tenant"
            );
        }
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
        let driver = match (&args.device_profile, args.driver.as_str()) {
            (Some(path), "sim" | "profile") => {
                plugin_config.insert("device_profile".into(), read_profile(path)?);
                "profile"
            }
            (Some(_), other) => bail!("--device-profile is for --driver profile, not {other}"),
            (None, "profile") => bail!("--driver profile needs --device-profile PATH"),
            (None, other) => other,
        };
        plugin_config.insert("driver".into(), driver.into());
        if let Some(token) = &args.device_token {
            plugin_config.insert("device_token".into(), token.clone());
        }
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
        let mut config = RunnerConfig::shared(args)?;
        config.tenants = vec![TenantSpec {
            name: DEFAULT_TENANT.into(),
            namespace: DEFAULT_TENANT.into(),
            plugin: args.plugin.clone(),
            plugin_config,
            policy: OutboundPolicy::new(origins),
            limits: Limits {
                memory_bytes: args.memory_mib << 20,
                call_timeout: Duration::from_millis(args.call_timeout_ms),
                ..Limits::default()
            },
            token: None,
        }];
        Ok(config)
    }

    /// What every layout shares: store, access, lease, cache; no tenants yet.
    fn shared(args: &ServeArgs) -> anyhow::Result<RunnerConfig> {
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
            tenants: Vec::new(),
            layout: Layout::Single,
            admin_token: None,
            metrics_token: None,
            watch_plugins: true,
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

/// A device profile's text, checked to be JSON (the plugin checks the rest
/// when it loads, and names the field that is wrong).
pub fn read_profile(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("device profile {}: cannot read it", path.display()))?;
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
        bail!(
            "device profile {}:{}:{}: {e}",
            path.display(),
            e.line(),
            e.column()
        );
    }
    Ok(text)
}

/// One served tenant: its MCP server and the token its clients present.
struct Served {
    settle: Settle,
    token: Option<Secret>,
}

/// A started runner: plugins loaded, scheduler running.
pub struct Runner {
    served: Vec<Served>,
    layout: Layout,
    store: Store,
    access: HttpAccess,
    admin_token: Option<Secret>,
    metrics_token: Option<Secret>,
    metrics: Arc<Metrics>,
    swapper: Arc<Swapper>,
    drain: Drain,
    background_stop: CancellationToken,
    scheduler: tokio::task::JoinHandle<()>,
}

impl Runner {
    /// Loads every tenant's plugin (refusing one that does not work), and
    /// starts the scheduler so that stored tasks carry on.
    pub async fn start(config: RunnerConfig) -> anyhow::Result<Runner> {
        if let Err(e) = config.store.ping().await {
            // Not fatal: the store may come up after the runner, and
            // /readyz says so meanwhile.
            tracing::warn!("the store is not reachable yet: {e}");
        }
        let store = config.store.clone();
        let runtime = Arc::new(Runtime::new(config.store, config.cache_dir)?);
        let hub = Arc::new(Hub::default());
        if let Some(url) = &config.relay {
            crate::relay::start(url, hub.clone()).context("relaying notices through redis")?;
        }
        let metrics = Arc::new(Metrics::default());
        let mut tenants = Vec::new();
        let mut tokens = BTreeMap::new();
        for spec in config.tenants {
            let plugin = runtime
                .load_plugin(&spec.plugin)
                .with_context(|| format!("tenant {}", spec.name))?;
            tokens.insert(spec.name.clone(), spec.token);
            let context = TenantContext {
                name: spec.name,
                namespace: spec.namespace,
                plugin_config: spec.plugin_config,
                policy: spec.policy,
                limits: spec.limits,
                events: hub.clone(),
                metrics: metrics.clone(),
            };
            tenants.push(Tenant::new(context, plugin));
        }
        let tenants = Arc::new(Tenants::new(tenants));
        let drain = Drain::default();
        let mut served = Vec::new();
        for tenant in tenants.iter() {
            let source = tenant.plugin.load().source.clone();
            let plugin = tenant.plugin.load_full();
            let tools = crate::admit::admit(&runtime, tenant, &plugin)
                .await
                .map_err(|refusal| {
                    anyhow::anyhow!(
                        "tenant {}: plugin {} {refusal}",
                        tenant.name(),
                        source.display()
                    )
                })?
                .tools;
            tracing::info!(
                tenant = %tenant.name(),
                plugin = %source.display(),
                tools = tools.len(),
                outbound = ?tenant.context.policy.origins().iter().map(ToString::to_string).collect::<Vec<_>>(),
                "plugin loaded"
            );
            served.push(Served {
                settle: Settle::new(
                    runtime.clone(),
                    tenant.clone(),
                    config.options.clone(),
                    drain.clone(),
                ),
                token: tokens.remove(tenant.name()).flatten(),
            });
        }
        let swapper = Arc::new(Swapper::new(runtime.clone(), tenants.clone()));
        let background_stop = CancellationToken::new();
        if config.watch_plugins {
            tokio::spawn(crate::swap::watch(swapper.clone(), background_stop.clone()));
        }
        let scheduler = tokio::spawn(
            Scheduler {
                runtime,
                tenants,
                lease: config.lease,
            }
            .run(background_stop.clone()),
        );
        Ok(Runner {
            served,
            layout: config.layout,
            store,
            access: config.access,
            admin_token: config.admin_token,
            metrics_token: config.metrics_token,
            metrics,
            swapper,
            drain,
            background_stop,
            scheduler,
        })
    }

    /// Swaps plugins; the same one SIGHUP, the watcher and the admin
    /// endpoint use.
    pub fn swapper(&self) -> Arc<Swapper> {
        self.swapper.clone()
    }

    /// Reloads every tenant's plugin on each SIGHUP (`settle reload`).
    #[cfg(unix)]
    pub fn reload_on_sighup(&self) -> anyhow::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = signal(SignalKind::hangup()).context("watching SIGHUP")?;
        let swapper = self.swapper.clone();
        let stop = self.background_stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = hangups.recv() => {}
                    _ = stop.cancelled() => return,
                }
                tracing::info!("SIGHUP: reloading plugins");
                for swap in swapper.reload_all().await {
                    tracing::info!(tenant = %swap.tenant, "reload: {:?}", swap.outcome);
                }
            }
        });
        Ok(())
    }

    /// The HTTP routes: MCP per tenant, health, metrics and admin.
    fn routes(&self, responses: &Drain, streams: &CancellationToken) -> axum::Router {
        let mut app = axum::Router::new();
        for served in &self.served {
            let mcp = crate::mcp::http::router(
                served.settle.clone(),
                &self.access,
                responses.clone(),
                streams.clone(),
            );
            app = match self.layout {
                Layout::Single => app.merge(mcp),
                Layout::Tenants => {
                    let token = served.token.clone();
                    app.nest(
                        &format!("/t/{}", served.settle.tenant_name()),
                        mcp.layer(axum::middleware::from_fn(move |request, next| {
                            crate::mcp::auth::require_bearer(token.clone(), request, next)
                        })),
                    )
                }
            };
        }
        if self.layout == Layout::Tenants {
            app = app.merge(crate::mcp::auth::unknown_tenants());
        }
        let metrics_open = self.layout == Layout::Single;
        app.merge(crate::mcp::http::health(self.store.clone()))
            .merge(crate::mcp::admin::metrics(
                self.metrics.clone(),
                self.metrics_token.clone(),
                metrics_open,
            ))
            .merge(crate::mcp::admin::reload(
                self.swapper.clone(),
                self.admin_token.clone(),
            ))
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
        let app = self.routes(&responses, &streams);
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
        // `settle serve` refuses stdio with several tenants before it
        // starts; this guards other callers.
        let [served] = self.served.as_slice() else {
            bail!("serve_stdio needs a runner with exactly one tenant");
        };
        crate::mcp::stdio::serve(served.settle.clone(), input, output, stop_reading).await?;
        watcher.abort();
        self.stop().await;
        Ok(())
    }

    async fn stop(self) {
        let left = self.drain.wait_idle(DRAIN_LIMIT).await;
        if left > 0 {
            tracing::warn!("{left} calls still running at exit");
        }
        self.background_stop.cancel();
        let _ = self.scheduler.await;
        tracing::info!("stopped");
    }
}
