//! A hostile settle plugin, for the isolation tests and the neighbour
//! benchmark. Each tool tries one thing a plugin must not be able to do and
//! reports what happened; the runner must contain every one of them:
//!
//! | tool | tries to | the runner's answer |
//! | --- | --- | --- |
//! | `spin` | loop forever | stopped at the tenant's call deadline |
//! | `bomb` | allocate without end | stopped at the tenant's memory limit |
//! | `trap` | panic | only this call fails |
//! | `fetch` | reach any URL it is given | refused unless on the allow-list |
//! | `peek` | read keys outside its namespace | sees only its own keys |
//! | `escape` | read files, environment, open sockets | nothing there |
//! | `remember` | keep memory from an earlier call | every call starts in an instance that ran nothing |
//! | `ping` | nothing: a well-behaved call | answers |
//!
//! Its `advance` panics for the group `trap` (the scheduler's tests schedule
//! one directly), so a failing advance can be watched being retried.
//!
//! Build with `cargo build -p settle-hostile --target wasm32-wasip2 --release`.

use settle_plugin_sdk::bindings;
use settle_plugin_sdk::bindings::wasi::keyvalue::store;
use settle_plugin_sdk::host::{self, HttpRequest};

use bindings::exports::settle::plugin::plugin::Guest;
use bindings::settle::plugin::types::{
    Asset, CallError, CallOutcome, CallRequest, McpRequest, RequestOutcome, ServerInfo, TaskError,
    TaskView, Tool,
};
use serde_json::{Value as Json, json};

/// The plugin. Public, so native builds (`cargo clippy --workspace`) see
/// it as used even though only the component exports it.
pub struct Plugin;

const TOOLS: [(&str, &str); 8] = [
    ("ping", "Answers at once."),
    ("spin", "Loops forever."),
    ("bomb", "Allocates memory until stopped."),
    ("trap", "Panics."),
    ("fetch", "GETs `url`."),
    (
        "peek",
        "Reads `key` from bucket `bucket` (default \"default\") and lists keys.",
    ),
    (
        "escape",
        "Looks for files, environment variables and sockets.",
    ),
    (
        "remember",
        "Counts the calls its instance has served, this one included.",
    ),
];

/// Calls this instance has served: 1 in every call, unless an instance
/// (or its memory) outlives a call.
static CALLS_SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn text_result(value: Json, is_error: bool) -> CallOutcome {
    CallOutcome::Complete(
        json!({
            "content": [{"type": "text", "text": value.to_string()}],
            "structuredContent": value,
            "isError": is_error,
        })
        .to_string(),
    )
}

fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn bomb() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        // Touch every page so the memory is really used.
        hoard.push(std::hint::black_box(vec![0xA5; 1 << 20]));
    }
}

fn fetch(url: &str) -> CallOutcome {
    let request = HttpRequest {
        method: "GET",
        url,
        bearer: None,
        json_body: None,
        timeout_ms: 2_000,
        max_body_bytes: host::DEFAULT_MAX_BODY_BYTES,
    };
    match host::send(&request) {
        Ok(response) => text_result(json!({"status": response.status}), false),
        Err(e) => text_result(json!({"error": e.to_string()}), true),
    }
}

/// Opens `bucket`, reads `key` and lists the first page of keys, reporting
/// whatever it could see.
fn peek(bucket: &str, key: &str) -> CallOutcome {
    let opened = match store::open(bucket) {
        Ok(opened) => opened,
        Err(e) => return text_result(json!({"opened": false, "error": format!("{e:?}")}), false),
    };
    let value = opened
        .get(key)
        .map(|v| v.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()));
    let keys = opened.list_keys(None).map(|page| page.keys);
    text_result(
        json!({
            "opened": true,
            "value": value.unwrap_or(None),
            "keys": keys.unwrap_or_default(),
        }),
        false,
    )
}

/// Everything outside the declared imports: the answer must be "nothing".
fn escape() -> CallOutcome {
    let files = std::fs::read_dir("/")
        .map(|entries| entries.count())
        .map_err(|e| e.to_string());
    let environment: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    let socket = std::net::TcpStream::connect("127.0.0.1:1").map_err(|e| e.to_string());
    text_result(
        json!({
            "files": files.is_ok(),
            "files_error": files.err(),
            "environment": environment,
            "socket": socket.is_ok(),
            "socket_error": socket.err(),
        }),
        false,
    )
}

impl Guest for Plugin {
    fn capabilities() -> Result<ServerInfo, String> {
        Ok(ServerInfo {
            capabilities: "{}".into(),
            instructions: None,
        })
    }

    fn list_tools() -> Vec<Tool> {
        TOOLS
            .iter()
            .map(|(name, description)| Tool {
                name: name.to_string(),
                title: None,
                description: description.to_string(),
                input_schema: json!({"type": "object"}).to_string(),
                output_schema: None,
                annotations: None,
            })
            .collect()
    }

    fn call_tool(request: CallRequest) -> Result<CallOutcome, CallError> {
        let args: Json = serde_json::from_str(&request.arguments).unwrap_or(Json::Null);
        let text = |name: &str| args[name].as_str().unwrap_or_default().to_string();
        match request.name.as_str() {
            "ping" => Ok(text_result(json!({"pong": true}), false)),
            "spin" => spin(),
            "bomb" => bomb(),
            "trap" => panic!("the hostile plugin trapped on purpose"),
            "fetch" => Ok(fetch(&text("url"))),
            "peek" => {
                let bucket = args["bucket"].as_str().unwrap_or("default");
                Ok(peek(bucket, &text("key")))
            }
            "escape" => Ok(escape()),
            "remember" => {
                let seen = CALLS_SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                Ok(text_result(json!({"calls_seen": seen}), false))
            }
            other => Err(CallError::UnknownTool(other.to_string())),
        }
    }

    fn serve(request: McpRequest) -> Result<RequestOutcome, CallError> {
        Err(CallError::MethodNotFound(request.method))
    }

    fn get_task(task_id: String) -> Result<TaskView, TaskError> {
        Err(TaskError::NotFound(task_id))
    }

    fn update_task(task_id: String, _input_responses: String) -> Result<(), TaskError> {
        Err(TaskError::NotFound(task_id))
    }

    fn cancel_task(task_id: String) -> Result<(), TaskError> {
        Err(TaskError::NotFound(task_id))
    }

    fn advance(group: String, _task_ids: Vec<String>) {
        if group == "trap" {
            panic!("hostile: advance of the group `trap`");
        }
    }

    /// No page: the runner's `/ui` answers 404 for this plugin.
    fn ui_asset(_path: String) -> Option<Asset> {
        None
    }
}

#[cfg(target_arch = "wasm32")]
settle_plugin_sdk::export!(Plugin);
