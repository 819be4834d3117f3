//! The host's only `bindgen!`, generated from the workspace's `wit/` so the
//! runner and every plugin share one contract.
//!
//! WASI interfaces map onto wasmtime's own implementations; the key-value
//! resources map onto [`crate::capabilities::kv`]'s types.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "settle:plugin/device-plugin",
    imports: { default: async | trappable },
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:random": wasmtime_wasi::p2::bindings::random,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        "wasi:keyvalue/store.bucket": crate::capabilities::kv::Bucket,
        "wasi:keyvalue/atomics.cas": crate::capabilities::kv::Cas,
    },
});
