//! The capabilities a plugin gets beyond plain computation, one module each.
//! WASI clocks, random and HTTP come from wasmtime; HTTP is narrowed by
//! [`http::PolicyHooks`], which [`fetch`] (HTTP in one call) uses too. Nothing here gives a plugin a filesystem, an
//! environment or sockets.

pub mod config;
pub mod fetch;
pub mod http;
pub mod kv;
pub mod pool;
pub mod runner;
