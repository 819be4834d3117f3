//! A tenant: one user of the runner, with its own plugin, settings,
//! outbound allow-list, limits and store namespace.
//!
//! A tenant's plugin can be swapped while it serves: new calls start on the
//! new plugin, calls in flight finish on the one they started on (each
//! holds its own `Arc`).

use crate::context::TenantContext;
use crate::instances::Slot;
use crate::plugin::Plugin;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::Arc;

/// A tenant as the runner serves it: its context and its current plugin,
/// which a swap replaces while calls in flight keep the one they started on.
pub struct Tenant {
    /// Settings, limits and events, shared with every call.
    pub context: Arc<TenantContext>,
    /// The plugin new calls start on.
    pub plugin: ArcSwap<Plugin>,
    /// Admits at most `limits.max_concurrent_calls` calls at once: what
    /// clients ask for (tools, resources, tasks).
    pub calls: tokio::sync::Semaphore,
    /// Admits at most [`ADVANCES_AT_ONCE`] of the scheduler's advances at
    /// once, apart from `calls`.
    pub advances: tokio::sync::Semaphore,
    /// Held while a swap of this tenant's plugin is under way.
    pub swapping: tokio::sync::Mutex<()>,
    /// Where the tenant's spare instance waits for its next call.
    pub spare: Arc<Slot>,
}

impl Tenant {
    /// A tenant serving `plugin`.
    pub fn new(context: TenantContext, plugin: Plugin) -> Tenant {
        let permits = call_permits(&context);
        Tenant {
            context: Arc::new(context),
            plugin: ArcSwap::from_pointee(plugin),
            calls: tokio::sync::Semaphore::new(permits),
            advances: tokio::sync::Semaphore::new(ADVANCES_AT_ONCE),
            swapping: tokio::sync::Mutex::new(()),
            spare: Arc::default(),
        }
    }

    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.context.name
    }

    /// The tenant's calls and advances running now (those that hold a
    /// permit of [`Tenant::calls`] or [`Tenant::advances`]).
    pub fn in_flight(&self) -> usize {
        call_permits(&self.context).saturating_sub(self.calls.available_permits())
            + ADVANCES_AT_ONCE.saturating_sub(self.advances.available_permits())
    }
}

/// How many of a tenant's advances (the scheduler's calls of its plugin
/// for due tasks) may run at once. Apart from the tenant's calls, so that
/// a burst of devices acting together neither waits behind clients' calls
/// nor makes them wait: with advances taking the calls' 64 permits, a
/// client's call during such a burst queued behind them, and the ticks,
/// 64 at a time, ended 100 tasks on each of 1,000 devices too slowly for
/// the last to end within two polls of their device acting
/// (docs/performance.md, seventeenth round). Half the scheduler's slots
/// (`scheduler::MAX_PARALLEL_ADVANCES`), so one tenant's advances, however
/// slow, leave the other half to the rest.
pub const ADVANCES_AT_ONCE: usize = 128;

/// How many calls of a tenant may run at once.
fn call_permits(context: &TenantContext) -> usize {
    context.limits.max_concurrent_calls.max(1)
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
