//! What every settle plugin shares.
//!
//! - [`bindings`]: the guest side of the `settle:plugin/mcp-plugin` world,
//!   generated here once for all plugins. A plugin implements
//!   `bindings::exports::settle::plugin::plugin::Guest` and calls
//!   [`export!`] (on `wasm32` only).
//! - [`host`]: the only module that calls the runner's imports, as plain
//!   Rust (key-value with compare-and-swap, HTTP, clocks, config, wakes).
//! - [`url`]: the little URL checking an outbound request needs.

pub mod host;
pub mod url;

/// The one place guest bindings are generated, from the workspace's `wit/`.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "settle:plugin/mcp-plugin",
        generate_all,
        pub_export_macro: true,
        default_bindings_module: "settle_plugin_sdk::bindings",
    });
}

pub use bindings::export;
