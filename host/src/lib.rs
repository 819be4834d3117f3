//! settle's runner: hosts plugins as WASI components and serves them to AI
//! agents over MCP. It knows nothing of what a plugin does: the device
//! plugin's settings are names on the command line ([`cli::ALIASES`]) and
//! nothing more.
//!
//! # Layout
//! - [`cli`]: the command line.
//! - [`app`]: wiring a configuration into a running runner, and stopping it.
//! - [`mcp`]: the MCP handler (rmcp) and the stdio and HTTP transports.
//! - [`runtime`]: wasmtime: engine, linker, one store per call, its faults.
//! - [`instances`]: making a call's instance, ahead of the call (a tenant's spare) when idle.
//! - [`contract`]: which `settle:plugin` version a component was built for.
//! - [`admit`]: the check a plugin passes before it serves a tenant.
//! - [`bindings`]: the host's only `bindgen!`.
//! - [`state`]: the per-call store data, and the memory limiter.
//! - [`capabilities`]: what a plugin may use: key-value, config, runner, HTTP.
//! - [`policy`]: the outbound allow-list (pure data).
//! - [`store`]: durable state: plugin data and due times (memory, redb, Redis).
//! - [`scheduler`]: wakes due tasks and calls the plugin's `advance`.
//! - [`ended`]: the views of ended tasks the runner keeps, so `tasks/get` of one needs no plugin call.
//! - [`events`]: change notices for callers waiting inline and listeners.
//! - [`relay`]: carrying those notices between replicas (Redis pub/sub).
//! - [`tenant`]: tenants (their context and current plugin), by name and namespace.
//! - [`context`]: what every plugin call of a tenant shares: settings, limits, allow-list.
//! - [`builtin`]: the plugin built into the binary, named `builtin`.
//! - [`plugin`]: a compiled, linked plugin, and the cache of compiled components.
//! - [`config`]: flags and the tenants file, checked into a runner's configuration.
//! - [`secret`]: tokens that never show in logs.
//! - [`swap`]: replacing a tenant's plugin while it serves.
//! - [`tasks`]: `settle tasks`: a running server's audit trail, over MCP.
//! - [`metrics`]: what operators see at `/metrics`.
//! - [`drain`]: counting calls in flight for an orderly shutdown.
//!
//! No module depends on one that depends back on it; a test
//! (`tests/e2e/layering.rs`) checks that, and that only [`cli`] names a
//! device setting.

#![deny(missing_docs)]

pub mod admit;
pub mod app;
#[allow(missing_docs)]
pub mod bindings;
pub mod builtin;
pub mod capabilities;
pub mod cli;
pub mod config;
pub mod context;
pub mod contract;
pub mod drain;
pub mod ended;
pub mod events;
pub mod instances;
pub mod mcp;
pub mod metrics;
pub mod plugin;
pub mod policy;
pub mod relay;
pub mod runtime;
pub mod scheduler;
pub mod secret;
pub mod self_wake;
pub mod state;
pub mod store;
pub mod swap;
pub mod tasks;
pub mod tenant;
pub mod timeline;
