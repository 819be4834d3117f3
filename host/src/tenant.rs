//! A tenant: one user of the runner, with its own plugin, settings,
//! outbound allow-list, limits and store namespace.

use crate::events::Hub;
use crate::policy::OutboundPolicy;
use crate::runtime::Plugin;
use arc_swap::ArcSwap;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Counters an operator reads.
#[derive(Default, Debug)]
pub struct TenantStats {
    /// Outbound requests the allow-list refused.
    pub denied_outbound: AtomicU64,
}

/// Everything a plugin call needs to know about its tenant. Shared, never
/// mutated: a new configuration makes a new context.
pub struct TenantContext {
    /// The tenant's name, also its store namespace.
    pub name: String,
    /// Values the plugin reads through `wasi:config`.
    pub plugin_config: BTreeMap<String, String>,
    /// Where its plugin may send HTTP requests.
    pub policy: OutboundPolicy,
    /// Bounds of each call.
    pub limits: Limits,
    /// Where the plugin's change notices go (shared by all tenants).
    pub events: Arc<Hub>,
    /// Counters for operators.
    pub stats: TenantStats,
}

impl TenantContext {
    /// Counts one refused outbound request.
    pub fn count_denied(&self) {
        self.stats.denied_outbound.fetch_add(1, Ordering::Relaxed);
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
}

impl Tenant {
    /// A tenant serving `plugin`.
    pub fn new(context: TenantContext, plugin: Plugin) -> Tenant {
        let permits = context.limits.max_concurrent_calls.max(1);
        Tenant {
            context: Arc::new(context),
            plugin: ArcSwap::from_pointee(plugin),
            calls: tokio::sync::Semaphore::new(permits),
        }
    }

    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.context.name
    }
}

/// Every tenant the runner serves, by name.
#[derive(Default)]
pub struct Tenants {
    by_name: HashMap<String, Arc<Tenant>>,
}

impl Tenants {
    /// A registry of these tenants.
    pub fn new(tenants: impl IntoIterator<Item = Tenant>) -> Tenants {
        Tenants {
            by_name: tenants
                .into_iter()
                .map(|t| (t.name().to_string(), Arc::new(t)))
                .collect(),
        }
    }

    /// The tenant called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Tenant>> {
        self.by_name.get(name).cloned()
    }

    /// Every tenant.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.by_name.values()
    }
}
