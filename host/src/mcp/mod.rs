//! MCP on the wire, through rmcp: the handler that dispatches onto the
//! plugin, and the stdio and Streamable HTTP transports around it.
//!
//! rmcp does the protocol; what it lacks and settle needs is added around it
//! and named where it is added (`frame` for parse errors, the era gate on
//! tasks in `handler`).

pub mod admin;
pub mod auth;
pub mod frame;
pub mod handler;
pub mod http;
pub mod listen;
pub mod notify;
pub mod stdio;

pub use handler::{ServeOptions, Settle};
