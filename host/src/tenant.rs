//! A tenant: one user of the runner, with its own plugin, settings,
//! outbound allow-list, limits and store namespace.
//!
//! A tenant's plugin can be swapped while it serves: new calls start on the
//! new plugin, calls in flight finish on the one they started on (each
//! holds its own `Arc`).

use crate::events::Hub;
use crate::metrics::Metrics;
use crate::policy::OutboundPolicy;
use crate::runtime::Plugin;
use arc_swap::ArcSwap;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// What bounds one tenant's use of the runner.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Linear memory one plugin instance may grow to.
    pub memory_bytes: usize,
    /// Wall time one plugin call may take, waits on HTTP included.
    pub call_timeout: Duration,
    /// Plugin calls of this tenant running at once; more wait their turn.
    pub max_concurrent_calls: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 64 << 20,
            call_timeout: Duration::from_secs(15),
            max_concurrent_calls: 64,
        }
    }
}

/// Everything a plugin call needs to know about its tenant. Shared, never
/// mutated: a new configuration makes a new context.
pub struct TenantContext {
    /// The tenant's name: in its URL, its logs and its metrics.
    pub name: String,
    /// Where its data lives in the store. Tenants never share one, so this
    /// is what keeps one tenant's tasks out of another's reach.
    pub namespace: String,
    /// Values the plugin reads through `wasi:config`.
    pub plugin_config: BTreeMap<String, String>,
    /// Where its plugin may send HTTP requests.
    pub policy: OutboundPolicy,
    /// Bounds of each call.
    pub limits: Limits,
    /// Where the plugin's change notices go (shared by all tenants).
    pub events: Arc<Hub>,
    /// What operators see (shared by all tenants, labelled by name).
    pub metrics: Arc<Metrics>,
}

impl TenantContext {
    /// Counts one refused outbound request.
    pub fn count_denied(&self) {
        self.metrics.denied(&self.name);
    }
}

/// A tenant as the runner serves it: its context and its current plugin,
/// which a swap replaces while calls in flight keep the one they started on.
pub struct Tenant {
    /// Settings, limits and events, shared with every call.
    pub context: Arc<TenantContext>,
    /// The plugin new calls start on.
    pub plugin: ArcSwap<Plugin>,
    /// Admits at most `limits.max_concurrent_calls` calls at once.
    pub calls: tokio::sync::Semaphore,
    /// Held while a swap of this tenant's plugin is under way.
    pub swapping: tokio::sync::Mutex<()>,
}

impl Tenant {
    /// A tenant serving `plugin`.
    pub fn new(context: TenantContext, plugin: Plugin) -> Tenant {
        let permits = context.limits.max_concurrent_calls.max(1);
        Tenant {
            context: Arc::new(context),
            plugin: ArcSwap::from_pointee(plugin),
            calls: tokio::sync::Semaphore::new(permits),
            swapping: tokio::sync::Mutex::new(()),
        }
    }

    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.context.name
    }
}

/// Every tenant the runner serves, by name and by store namespace.
#[derive(Default)]
pub struct Tenants {
    by_name: HashMap<String, Arc<Tenant>>,
    by_namespace: HashMap<String, Arc<Tenant>>,
}

impl Tenants {
    /// A registry of these tenants.
    pub fn new(tenants: impl IntoIterator<Item = Tenant>) -> Tenants {
        let mut registry = Tenants::default();
        for tenant in tenants {
            let tenant = Arc::new(tenant);
            registry
                .by_namespace
                .insert(tenant.context.namespace.clone(), tenant.clone());
            registry.by_name.insert(tenant.name().to_string(), tenant);
        }
        registry
    }

    /// The tenant called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Tenant>> {
        self.by_name.get(name).cloned()
    }

    /// The tenant whose data lives in `namespace`: the scheduler finds a due
    /// task's owner this way.
    pub fn by_namespace(&self, namespace: &str) -> Option<Arc<Tenant>> {
        self.by_namespace.get(namespace).cloned()
    }

    /// Every tenant, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        let mut all: Vec<_> = self.by_name.values().collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all.into_iter()
    }
}
