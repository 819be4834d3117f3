//! What every plugin call of a tenant shares: its settings, outbound
//! allow-list, limits, namespace, and where its notices and metrics go.
//! Kept apart from [`crate::tenant`] (which also holds the tenant's current
//! plugin) so the per-call state and the capabilities depend on this alone.

use crate::events::Hub;
use crate::metrics::Metrics;
use crate::policy::OutboundPolicy;
use std::collections::BTreeMap;
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

#[cfg(test)]
impl TenantContext {
    /// A tenant for unit tests: its name is its namespace, nothing is
    /// configured, and `policy` says where it may send HTTP.
    pub(crate) fn for_tests(name: &str, policy: OutboundPolicy) -> Arc<TenantContext> {
        Arc::new(TenantContext {
            name: name.into(),
            namespace: name.into(),
            plugin_config: BTreeMap::from([("greeting".to_string(), "hello".to_string())]),
            policy,
            limits: Limits::default(),
            events: Arc::default(),
            metrics: Arc::default(),
        })
    }
}
