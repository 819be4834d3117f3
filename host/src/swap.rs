//! Replacing a tenant's plugin while it serves.
//!
//! A swap loads the tenant's plugin file again, admits the new component
//! ([`crate::admit`]: it must instantiate under the tenant's limits, answer
//! `list-tools` and `capabilities`, and accept the tenant's configuration),
//! and only then makes it the plugin new calls start on. Calls in flight keep the plugin they started on, and
//! tasks in the store carry on under the new one. A component that fails any
//! of this is refused with the reason, and the old one keeps serving.
//!
//! Three things trigger a swap: a change of the plugin file ([`watch`]),
//! SIGHUP (`settle reload`), and the admin endpoint.

use crate::bindings::settle::plugin::types::Tool;
use crate::events::Event;
use crate::plugin::Plugin;
use crate::runtime::Runtime;
use crate::tenant::{Tenant, Tenants};
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;

/// How often the watcher looks at the plugin files.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// How one tenant's swap went.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum SwapOutcome {
    /// The new plugin serves every call that starts from now on.
    Loaded {
        /// Loading, compiling (or reading the cached artifact) and checking.
        took_ms: f64,
        /// Its tool list differs from the old one; listeners were told.
        tools_changed: bool,
    },
    /// The file holds the bytes already serving; nothing changed.
    Unchanged,
    /// The new plugin was refused; the old one keeps serving.
    Refused {
        /// Why, for the operator.
        reason: String,
    },
}

/// One tenant's result, as the admin endpoint reports it.
#[derive(Debug, Clone, Serialize)]
pub struct TenantSwap {
    /// The tenant.
    pub tenant: String,
    /// What happened.
    #[serde(flatten)]
    pub outcome: SwapOutcome,
}

/// Swaps plugins of the runner's tenants.
pub struct Swapper {
    runtime: Arc<Runtime>,
    tenants: Arc<Tenants>,
}

impl Swapper {
    /// A swapper for these tenants.
    pub fn new(runtime: Arc<Runtime>, tenants: Arc<Tenants>) -> Swapper {
        Swapper { runtime, tenants }
    }

    /// The tenants it swaps for.
    pub fn tenants(&self) -> &Tenants {
        &self.tenants
    }

    /// Reloads every tenant's plugin from its file.
    pub async fn reload_all(&self) -> Vec<TenantSwap> {
        let mut results = Vec::new();
        for tenant in self.tenants.iter() {
            results.push(TenantSwap {
                tenant: tenant.name().to_string(),
                outcome: self.reload(tenant).await,
            });
        }
        results
    }

    /// Reloads one tenant's plugin from its file.
    pub async fn reload(&self, tenant: &Tenant) -> SwapOutcome {
        // One swap per tenant at a time: two at once could store the older
        // of the two last.
        let _one_at_a_time = tenant.swapping.lock().await;
        let started = Instant::now();
        let current = tenant.plugin.load_full();
        let path = current.source.clone();
        let runtime = self.runtime.clone();
        let loaded = tokio::task::spawn_blocking(move || runtime.load_plugin(&path)).await;
        let plugin = match loaded {
            Ok(Ok(plugin)) => Arc::new(plugin),
            Ok(Err(e)) => return self.refused(tenant, e.to_string()),
            Err(e) => return self.refused(tenant, format!("loading panicked: {e}")),
        };
        if plugin.digest == current.digest {
            return SwapOutcome::Unchanged;
        }
        let tools = match crate::admit::admit(&self.runtime, tenant, &plugin).await {
            Ok(admitted) => admitted.tools,
            Err(refusal) => {
                return self.refused(tenant, format!("{}: {refusal}", plugin.source.display()));
            }
        };
        let tools_changed = match current.cached_tools() {
            Some(old) => !same_tools(old, &tools),
            None => true,
        };
        if current.keeps_ended != plugin.keeps_ended
            && let Err(reason) = self.drop_views(tenant, &plugin).await
        {
            return self.refused(tenant, reason);
        }
        tenant.plugin.store(plugin.clone());
        let took = started.elapsed();
        tenant.context.metrics.swap(tenant.name(), "loaded");
        tracing::info!(
            tenant = %tenant.name(),
            plugin = %plugin.source.display(),
            digest = %&plugin.digest[..12],
            tools = tools.len(),
            tools_changed,
            "plugin swapped in {took:?}"
        );
        if tools_changed {
            tenant
                .context
                .events
                .publish_list_changed(tenant.name(), Event::ToolsListChanged);
        }
        SwapOutcome::Loaded {
            took_ms: took.as_secs_f64() * 1e3,
            tools_changed,
        }
    }

    /// Fits the tenant's views of ended tasks ([`crate::ended`]) to a swap
    /// to or from a plugin that cannot say when it removes a task: while
    /// one serves, tasks may go and their views stay. One taking over
    /// disowns them first (the swap is refused if that cannot be recorded);
    /// a plugin that keeps views taking over from one starts from no view
    /// it cannot vouch for (the swap is refused if they cannot be dropped).
    async fn drop_views(&self, tenant: &Tenant, next: &Plugin) -> Result<(), String> {
        let (store, namespace) = (self.runtime.store(), &tenant.context.namespace);
        let dropped = if next.keeps_ended {
            crate::ended::vouch(store, namespace, true).await.map_err(|e| {
                format!(
                    "the views of ended tasks kept before could not be dropped, and {} would serve them: {e}",
                    next.source.display()
                )
            })?
        } else {
            crate::ended::disown(store, namespace).await.map_err(|e| {
                format!(
                    "could not record that {} cannot forget tasks: {e}",
                    next.source.display()
                )
            })?
        };
        tracing::info!(tenant = %tenant.name(), "dropped {dropped} views of ended tasks at the swap");
        Ok(())
    }

    fn refused(&self, tenant: &Tenant, reason: String) -> SwapOutcome {
        tenant.context.metrics.swap(tenant.name(), "refused");
        tracing::error!(
            tenant = %tenant.name(),
            "plugin swap refused; the previous plugin keeps serving: {reason}"
        );
        SwapOutcome::Refused { reason }
    }
}

/// Two tool lists offer the same tools, described the same way.
fn same_tools(a: &[Tool], b: &[Tool]) -> bool {
    let key = |t: &Tool| {
        (
            t.name.clone(),
            t.title.clone(),
            t.description.clone(),
            t.input_schema.clone(),
            t.output_schema.clone(),
            t.annotations.clone(),
        )
    };
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| key(x) == key(y))
}

/// What the watcher compares: a file's modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &PathBuf) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Swaps a tenant's plugin when its file changes, until `stop`.
///
/// A file is reloaded once it has stopped changing for one interval, so a
/// build still writing it is not loaded half-written; if it is anyway (or is
/// broken), the swap is refused and tried again at the next change.
pub async fn watch(swapper: Arc<Swapper>, stop: CancellationToken) {
    let path_of = |t: &Tenant| t.plugin.load().source.clone();
    let mut applied: HashMap<String, Stamp> = swapper
        .tenants
        .iter()
        .map(|t| (t.name().to_string(), stamp(&path_of(t))))
        .collect();
    let mut pending: HashMap<String, Stamp> = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(WATCH_INTERVAL) => {}
            _ = stop.cancelled() => return,
        }
        for tenant in swapper.tenants.iter() {
            let name = tenant.name().to_string();
            let now = stamp(&path_of(tenant));
            if now.is_none() || applied.get(&name) == Some(&now) {
                pending.remove(&name);
                continue;
            }
            // Changed: wait until it holds still for one interval.
            if pending.get(&name) != Some(&now) {
                pending.insert(name, now);
                continue;
            }
            pending.remove(&name);
            applied.insert(name, now);
            swapper.reload(tenant).await;
        }
    }
}
