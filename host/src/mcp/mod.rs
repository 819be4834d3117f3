//! MCP on the wire, through rmcp: the handler that dispatches onto the
//! plugin, and the stdio and Streamable HTTP transports around it.
//!
//! rmcp does the protocol; what it lacks and settle needs is added around it
//! and named where it is added (`frame` for parse errors, `era` for what
//! each protocol era allows, `listen` for `subscriptions/listen`).
//!
//! # Layout
//! - [`handler`]: the `ServerHandler`: which request goes where.
//! - [`dispatch`]: calling the plugin; tasks waited for inline; questions.
//! - [`convert`]: plugin JSON ↔ rmcp types, error codes (pure).
//! - [`era`]: 2026-07-28 and the legacy era: versions, gates, method tables.
//! - [`legacy`]: `initialize` sessions: log level, subscriptions, questions.
//! - [`listen`]: `subscriptions/listen`, with the tasks extension's `taskIds`.
//! - [`notify`]: progress and log notifications of one request.
//! - [`frame`]: malformed JSON-RPC, answered before rmcp sees it.
//! - [`stdio`], [`http`]: the transports; [`auth`], [`admin`]: tokens and
//!   the operator's endpoints; [`ui`]: the plugin's page at `/ui`.
//! - [`accept`], [`limits`]: the HTTP server's limits (header-read timeout,
//!   connection cap; per tenant, request rate and listen streams).

pub mod accept;
pub mod admin;
pub mod auth;
pub mod convert;
pub mod direct;
pub mod dispatch;
pub mod era;
pub mod frame;
pub mod handler;
pub mod http;
pub mod legacy;
pub mod limits;
pub mod listen;
pub mod notify;
pub mod stdio;
pub mod ui;

pub use dispatch::ServeOptions;
pub use handler::Settle;
