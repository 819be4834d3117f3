//! Wiring: from a checked configuration ([`crate::config`]) to a running
//! runner, and an orderly stop. `main` and the tests both start settle
//! through here.

use crate::config::{Layout, RunnerConfig, UiAccess};
use crate::context::TenantContext;
use crate::drain::{DRAIN_LIMIT, Drain};
use crate::events::Hub;
use crate::mcp::Settle;
use crate::mcp::http::HttpAccess;
use crate::mcp::limits::{HttpLimits, Throttle};
use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::scheduler::Scheduler;
use crate::secret::Secret;
use crate::store::Store;
use crate::swap::Swapper;
use crate::tenant::{Tenant, Tenants};
use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

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
    http_limits: HttpLimits,
    admin_token: Option<Secret>,
    metrics_token: Option<Secret>,
    ui: Option<UiAccess>,
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
        if let Some(relay) = store.relay() {
            let view_of = view_of(runtime.clone(), tenants.clone());
            crate::relay::start(relay, hub.clone(), metrics.relay_dropped(), view_of);
        }
        let drain = Drain::default();
        let mut served = Vec::new();
        for tenant in tenants.iter() {
            // The same check a swap makes: the plugin must work, under the
            // tenant's limits and with its configuration, before it serves.
            let plugin = tenant.plugin.load_full();
            let tools = crate::admit::admit(&runtime, tenant, &plugin)
                .await
                .map_err(|refusal| {
                    anyhow::anyhow!(
                        "tenant {}: plugin {} {refusal}",
                        tenant.name(),
                        plugin.source.display()
                    )
                })?
                .tools;
            settle_views(&store, tenant, plugin.keeps_ended).await?;
            tracing::info!(
                tenant = %tenant.name(),
                plugin = %plugin.source.display(),
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
            http_limits: config.http_limits,
            admin_token: config.admin_token,
            metrics_token: config.metrics_token,
            ui: config.ui,
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
                Throttle::new(
                    served.settle.tenant_name(),
                    &self.http_limits,
                    self.metrics.clone(),
                ),
            );
            app = match self.layout {
                Layout::Single => app.merge(mcp).merge(self.ui_routes(served, "")),
                Layout::Tenants => {
                    let prefix = format!("/t/{}", served.settle.tenant_name());
                    // With the view on, the admin's view of a tenant talks
                    // to the tenant's endpoint with the admin token.
                    let tokens: Vec<Secret> = served
                        .token
                        .iter()
                        .chain(self.ui.as_ref().and(self.admin_token.as_ref()))
                        .cloned()
                        .collect();
                    let ui = self.ui_routes(served, &prefix);
                    app.nest(
                        &prefix,
                        mcp.layer(axum::middleware::from_fn(move |request, next| {
                            crate::mcp::auth::require_bearer(tokens.clone(), request, next)
                        }))
                        .merge(ui),
                    )
                }
            };
        }
        if self.layout == Layout::Tenants {
            app = app.merge(crate::mcp::auth::unknown_tenants());
            if self.ui.is_some() {
                app = app.merge(crate::mcp::ui::unknown_tenants());
            }
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

    /// The live view's routes for one tenant (none when it is off), reached
    /// at `{prefix}/ui`.
    fn ui_routes(&self, served: &Served, prefix: &str) -> axum::Router {
        let tokens: Vec<Secret> = match &self.ui {
            None => return axum::Router::new(),
            Some(UiAccess::Token(token)) => vec![token.clone()],
            Some(UiAccess::Tenants) => served
                .token
                .iter()
                .chain(self.admin_token.as_ref())
                .cloned()
                .collect(),
        };
        crate::mcp::ui::router(served.settle.clone(), tokens, format!("{prefix}/ui"))
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
        // Once stopping: no new connections are taken and idle ones close;
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
        crate::mcp::accept::serve(
            listener,
            app,
            &self.http_limits,
            self.metrics.clone(),
            stopping,
        )
        .await;
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

/// Makes the tenant's views of ended tasks ([`crate::ended`]) fit the
/// plugin about to serve it. One that cannot say when it removes a task
/// disowns them (they could outlive their tasks, and be served again by a
/// later plugin); one that keeps them drops those an earlier run's plugin
/// disowned and could not drop. Either failing fails the start: the store
/// cannot take the write that makes serving safe.
async fn settle_views(store: &Store, tenant: &Tenant, keeps_ended: bool) -> anyhow::Result<()> {
    let namespace = &tenant.context.namespace;
    let dropped = if keeps_ended {
        crate::ended::vouch(store, namespace, false).await.map_err(|e| {
            anyhow::anyhow!(
                "tenant {}: a plugin that could not forget tasks served it before, and the views of ended tasks it left could not be dropped: {e}",
                tenant.name()
            )
        })?
    } else {
        crate::ended::disown(store, namespace).await.map_err(|e| {
            anyhow::anyhow!(
                "tenant {}: could not record that its plugin cannot forget tasks: {e}",
                tenant.name()
            )
        })?
    };
    if dropped > 0 {
        tracing::info!(
            tenant = %tenant.name(),
            "dropped {dropped} views of ended tasks kept for an earlier plugin"
        );
    }
    Ok(())
}

/// How the relay reads a task another replica changed, for a follower
/// here: through the tenant's plugin, as `tasks/get` would.
fn view_of(runtime: Arc<Runtime>, tenants: Arc<Tenants>) -> crate::relay::ViewOf {
    Arc::new(move |tenant, task_id| {
        let (runtime, tenants) = (runtime.clone(), tenants.clone());
        Box::pin(async move {
            let tenant = tenants.get(&tenant)?;
            match runtime.get_task(&tenant, &task_id).await {
                Ok(Ok(view)) => Some(view),
                Ok(Err(e)) => {
                    tracing::debug!(task = %task_id, "relay: the changed task is not there: {e:?}");
                    None
                }
                Err(fault) => {
                    tracing::warn!(task = %task_id, "relay: reading a changed task failed: {fault}");
                    None
                }
            }
        })
    })
}
