//! Admitting a plugin for a tenant: the one check a plugin passes before
//! it serves, at start and at every swap.
//!
//! The plugin must instantiate under the tenant's limits, list its tools
//! and say what it serves (`capabilities`), which is also where it accepts
//! or refuses the tenant's configuration. What it answers is kept on the
//! plugin, so serving never asks again.

use crate::bindings::settle::plugin::types::Tool;
use crate::plugin::{Plugin, PluginInfo};
use crate::runtime::{Fault, Runtime};
use crate::tenant::Tenant;
use std::sync::Arc;

/// What an admitted plugin said about itself.
#[derive(Debug)]
pub struct Admitted {
    /// Its tools.
    pub tools: Arc<Vec<Tool>>,
    /// What it serves beyond tools, and its instructions.
    pub info: Arc<PluginInfo>,
}

/// Why a plugin was not admitted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    /// A call of the check did not return (a trap, the deadline, memory).
    #[error("{call} failed: {fault}")]
    Fault {
        /// The export that was called.
        call: &'static str,
        /// How it ended.
        fault: Fault,
    },
    /// The plugin refused the tenant's configuration; its reason.
    #[error("refuses the tenant's configuration: {0}")]
    Configuration(String),
}

/// Checks that `plugin` works for `tenant`.
pub async fn admit(
    runtime: &Runtime,
    tenant: &Tenant,
    plugin: &Arc<Plugin>,
) -> Result<Admitted, Refusal> {
    let tools = runtime
        .tools_of(tenant, plugin.clone())
        .await
        .map_err(|fault| Refusal::Fault {
            call: "list-tools",
            fault,
        })?;
    let info = runtime
        .info_of(tenant, plugin.clone())
        .await
        .map_err(|fault| Refusal::Fault {
            call: "capabilities",
            fault,
        })?
        .map_err(Refusal::Configuration)?;
    Ok(Admitted { tools, info })
}
