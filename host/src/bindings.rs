//! The host's only `bindgen!`, generated from the workspace's `wit/` so the
//! runner and every plugin share one contract.
//!
//! WASI interfaces map onto wasmtime's own implementations; the key-value
//! resources map onto the handles in [`kv`], which
//! [`crate::capabilities::kv`] creates and reads. They are defined here so
//! the bindings depend on nothing else in the runner.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "settle:plugin/mcp-plugin",
    imports: { default: async | trappable },
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:random": wasmtime_wasi::p2::bindings::random,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        "wasi:keyvalue/store.bucket": crate::bindings::kv::Bucket,
        "wasi:keyvalue/atomics.cas": crate::bindings::kv::Cas,
    },
});

/// What the host holds for a plugin's `wasi:keyvalue` resources.
pub mod kv {
    /// An open bucket: the namespace it reads and writes.
    pub struct Bucket {
        pub(crate) namespace: String,
    }

    /// A compare-and-swap in progress: the value seen when it began.
    pub struct Cas {
        pub(crate) namespace: String,
        pub(crate) key: String,
        pub(crate) seen: Option<Vec<u8>>,
    }
}

use self::settle::plugin::types::TaskStatus;

impl TaskStatus {
    /// Every status, in the order the tasks extension lists them.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// Whether the task has ended: `completed`, `failed` or `cancelled`
    /// never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// The status as the tasks extension spells it (`input_required`): a
    /// metrics label and the form that travels between replicas.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// The status [`TaskStatus::as_str`] spells `text`.
    pub fn parse(text: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}
