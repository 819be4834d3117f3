//! End-to-end tests: the real plugins (devices, hello, fixtures, hostile)
//! in the real runtime, the simulator on loopback, and real MCP clients
//! (rmcp, raw HTTP, stdio).
//!
//! One test binary with a module per area: every test binary links all of
//! wasmtime and rmcp, so one binary instead of six saves minutes of CI.
//! Some modules drive one part of the runner directly, without MCP
//! (`scheduler`, `swap`, `contract`), and `layering` only reads the
//! runner's source for its module dependencies.

mod common;

mod audit;
mod browser;
mod commands;
mod contract;
mod disk;
mod fixtures;
mod hello;
mod homeassistant;
mod hostile_device;
mod install;
mod layering;
mod lifecycle;
mod limits;
mod mcp_http;
mod outbound;
mod profiles;
mod replicas;
mod scheduler;
mod schemas;
mod sequences;
mod soak;
mod stdio;
mod swap;
mod tasks;
mod tenants;
mod ui;
