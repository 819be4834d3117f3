//! What the end-to-end tests share: the real plugin, the simulator on
//! loopback, settle served in-process or as the real binary, and rmcp as an
//! independent MCP client.

#![allow(dead_code)]

use clap::Parser;
use device_sim::{RunningSim, SimConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    Implementation, ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{Value, json};
use settle::app::Runner;
use settle::cli::{Cli, Command};
use settle::config::RunnerConfig;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Generous: CI machines are slow, and a deadline only bounds a failure.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Held for their whole run by the tests that keep the CPU busy on purpose
/// (a spinning plugin, a stream of swaps that each compile a new plugin,
/// compiling into a fresh cache) and by the tests whose premise is a time
/// bound (tasks all created before any can end, a swap compiled before a
/// task ends), so that none of them runs beside another: on two cores one
/// of the first kind can take the time the second kind counts on.
pub async fn cpu_heavy() -> tokio::sync::MutexGuard<'static, ()> {
    static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    HEAVY.lock().await
}

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(50);

/// Waits until `check` gives `Ok`, looking again every [`POLL`]; after
/// [`DEADLINE`] fails the test, naming `what` and the last thing `check`
/// said. The one way these tests wait for a condition. (`check` may panic
/// itself, for a state that must never be seen on the way.)
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + DEADLINE;
    let mut polls = tokio::time::interval(POLL);
    loop {
        polls.tick().await;
        match check().await {
            Ok(value) => return value,
            Err(last) => assert!(
                Instant::now() < deadline,
                "{what}: not within {DEADLINE:?}; last: {last}"
            ),
        }
    }
}

/// The workspace's target directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Where tests cache compiled plugins: inside the repository, so CI keeps
/// nothing outside it, and shared, so each plugin compiles once per run.
///
/// The first call fills it with every plugin the tests use, one after the
/// other, while the other tests wait. Otherwise, on a clean checkout, the
/// first runners of every test compile the same plugins at once (seconds of
/// Cranelift each, on every core), and tests whose premise is a time bound
/// (tasks created before any can end, a swap compiled before a task ends)
/// lose it.
pub fn cache_dir() -> PathBuf {
    static FILLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    let dir = target_dir().join("settle-cache");
    FILLED.get_or_init(|| {
        let store = settle::store::Store::memory();
        let runtime =
            settle::runtime::Runtime::new(store, Some(dir.clone())).expect("a runtime to compile");
        for plugin in [
            "settle_devices.wasm",
            "settle_hostile.wasm",
            "settle_hello.wasm",
            "settle_fixtures.wasm",
        ] {
            let path = target_dir().join("wasm32-wasip2/release").join(plugin);
            // A missing plugin is named by the test that needs it.
            if path.exists() {
                let _ = runtime.load_plugin(&path);
            }
        }
    });
    dir
}

/// A plugin component the Makefile builds (`make {target}`), by file name.
fn built_plugin(file: &str, target: &str) -> PathBuf {
    let path = target_dir().join("wasm32-wasip2/release").join(file);
    assert!(
        path.exists(),
        "{} is missing: run `make {target}` (or `make test`, which builds it) first",
        path.display()
    );
    path
}

/// The device plugin `make guest` builds.
pub fn plugin_path() -> PathBuf {
    built_plugin("settle_devices.wasm", "guest")
}

/// The hostile plugin (`examples/hostile-plugin`) `make fixtures` builds.
pub fn hostile_plugin_path() -> PathBuf {
    built_plugin("settle_hostile.wasm", "fixtures")
}

/// The hello plugin (`examples/hello-plugin`) `make fixtures` builds.
pub fn hello_plugin_path() -> PathBuf {
    built_plugin("settle_hello.wasm", "fixtures")
}

/// The conformance fixture plugin (`examples/conformance-fixtures`).
pub fn fixtures_plugin_path() -> PathBuf {
    built_plugin("settle_fixtures.wasm", "fixtures")
}

/// The simulator with the given actuation delay.
pub async fn sim(delay: Duration) -> RunningSim {
    device_sim::spawn(SimConfig {
        delay,
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts")
}

/// Plugin settings that keep tests quick: frequent reads, a short window
/// before "not applied".
pub const FAST: &str = "poll_interval_ms=200,settle_window_ms=2500";

/// settle serving HTTP in this process.
pub struct Server {
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Stops it the way SIGTERM does and waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(DEADLINE, &mut self.task)
            .await
            .expect("server stops in time")
            .expect("server task")
            .expect("server ran cleanly");
    }
}

/// `settle serve` arguments for the device plugin, checked as the binary
/// would.
pub fn config(extra: &[&str]) -> RunnerConfig {
    config_for(&plugin_path(), extra)
}

/// `settle serve --plugin PLUGIN` arguments, checked as the binary would.
pub fn config_for(plugin: &std::path::Path, extra: &[&str]) -> RunnerConfig {
    let mut argv = vec!["settle", "serve", "--plugin", plugin.to_str().unwrap()];
    if !extra.contains(&"--store") {
        argv.extend(["--store", "memory"]);
    }
    let cache = cache_dir();
    if !extra.contains(&"--cache-dir") {
        argv.extend(["--cache-dir", cache.to_str().unwrap()]);
    }
    argv.extend_from_slice(extra);
    RunnerConfig::from_args(&serve_args(&argv)).expect("test configuration is valid")
}

/// `settle serve` arguments, parsed as the binary parses them.
pub fn serve_args(argv: &[&str]) -> settle::cli::ServeArgs {
    match Cli::try_parse_from(argv)
        .expect("test arguments parse")
        .command
    {
        Command::Serve(args) => *args,
        other => panic!("not `settle serve`: {other:?}"),
    }
}

/// Starts settle over HTTP with `extra` arguments and connects a modern
/// client that declares nothing.
pub async fn serve_http_with_client(extra: &[&str]) -> (Server, Client) {
    let server = serve_http(extra).await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    (server, client)
}

/// Starts settle over HTTP on 127.0.0.1:0 with `extra` arguments.
pub async fn serve_http(extra: &[&str]) -> Server {
    serve_http_config(config(extra)).await
}

pub async fn serve_http_config(config: RunnerConfig) -> Server {
    let runner = Runner::start(config).await.expect("runner starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(runner.serve_http(listener, async move {
        let _ = stopped.await;
    }));
    Server {
        url,
        stop: Some(stop),
        task,
    }
}

/// Client capabilities a test declares.
#[derive(Clone, Copy, Default)]
pub struct Declares {
    pub tasks: bool,
    pub elicitation: bool,
}

fn client_info(declares: Declares) -> ClientConfig {
    let mut caps = ClientCapabilities::builder().build();
    if declares.tasks {
        caps = ClientCapabilities::builder().enable_tasks().build();
    }
    if declares.elicitation {
        caps.elicitation = Some(Default::default());
    }
    ClientConfig::new(caps, Implementation::new("settle-tests", "0"))
}

pub type Client = RunningService<RoleClient, ClientConfig>;

/// A 2026-07-28 (stateless) rmcp client over HTTP.
pub async fn modern_http_client(url: &str, declares: Declares) -> Client {
    modern_http_client_with_token(url, None, declares).await
}

/// A 2026-07-28 rmcp client over HTTP presenting a bearer token.
pub async fn modern_http_client_with_token(
    url: &str,
    token: Option<&str>,
    declares: Declares,
) -> Client {
    let mut config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_string(),
        );
    if let Some(token) = token {
        config = config.auth_header(token.to_string());
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    client_info(declares)
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("client connects")
}

/// A legacy (`initialize`, 2025-11-25) rmcp client over HTTP.
pub async fn legacy_http_client(url: &str) -> Client {
    let transport = StreamableHttpClientTransport::from_uri(url.to_string());
    client_info(Declares::default())
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .serve(transport)
        .await
        .expect("legacy client connects")
}

pub fn args(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().expect("arguments are an object").clone()
}

/// One `tools/call`, as the client received it.
pub async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResponse {
    client
        .call_tool_once(
            CallToolRequestParams::new(tool.to_string()).with_arguments(args(arguments)),
        )
        .await
        .unwrap_or_else(|e| panic!("{tool} call failed at the protocol level: {e}"))
}

/// A finished tool result, or a panic naming what came instead.
pub fn complete(response: CallToolResponse) -> CallToolResult {
    match response {
        CallToolResponse::Complete(result) => result,
        other => panic!("expected a complete tool result, got {other:?}"),
    }
}

/// The structured content of a successful result.
pub fn structured(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "tool error: {result:?}");
    result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("no structuredContent in {result:?}"))
}

/// The text of a tool error.
pub fn error_text(result: &CallToolResult) -> String {
    assert_eq!(
        result.is_error,
        Some(true),
        "expected a tool error: {result:?}"
    );
    serde_json::to_value(&result.content)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["text"].as_str().map(str::to_string))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls `get_task` until the task ends, and returns its last view.
pub async fn wait_for_end(client: &Client, task_id: &str) -> Value {
    eventually(&format!("task {task_id} ends"), async || {
        let task = structured(&complete(
            call(client, "get_task", json!({"task_id": task_id})).await,
        ));
        match task["status"].as_str() {
            Some("completed" | "failed" | "cancelled") => Ok(task),
            _ => Err(task.to_string()),
        }
    })
    .await
}

pub const MODERN: &str = "2026-07-28";

pub fn meta(tasks: bool) -> Value {
    let caps = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// A modern client's `tools/list` POST on `client`, unsent, for tests
/// that read the HTTP response itself (status, headers, framing).
pub fn tools_list_request(client: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(false)}});
    client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "tools/list")
        .body(body.to_string())
}

/// POSTs one raw message with the headers a modern client sends, and
/// returns the status and the JSON-RPC message (from JSON or SSE).
pub async fn post(url: &str, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request reaches settle");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data:").map(str::trim))
        .filter(|d| !d.is_empty())
        .and_then(|d| serde_json::from_str(d).ok())
        .or_else(|| serde_json::from_str(&text).ok())
        .unwrap_or(Value::String(text));
    (status, json)
}

/// Control and sensor request counts the simulator saw for a device.
pub fn sim_counts(sim: &RunningSim, device: &str) -> (u64, u64) {
    let stats = sim.sim().stats();
    let d = &stats.devices[device];
    (d.control, d.sensor)
}

/// The `settle` binary running as a child process, HTTP on a free port.
pub struct Process {
    pub child: tokio::process::Child,
    pub url: String,
    /// Everything it wrote to stderr so far (its logs).
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Process {
    /// Starts `settle serve --http 127.0.0.1:0` with `extra` arguments and
    /// waits until it says where it listens.
    pub async fn start(extra: &[&str]) -> Process {
        Process::start_env(extra, &[]).await
    }

    /// Starts `settle serve --http 127.0.0.1:0` with exactly `args` (no
    /// default plugin: for `--config`).
    pub async fn start_with(args: &[&str]) -> Process {
        Process::start_binary(env!("CARGO_BIN_EXE_settle").as_ref(), args).await
    }

    /// Starts `BINARY serve --http 127.0.0.1:0` with exactly `args`: the
    /// binary the tests built, or another build of it.
    pub async fn start_binary(binary: &std::path::Path, args: &[&str]) -> Process {
        Process::start_binary_env(binary, args, &[]).await
    }

    /// [`Process::start`] with these environment variables as well
    /// (`RUST_LOG`, say).
    pub async fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Process {
        let plugin = plugin_path();
        let mut args = vec!["--plugin", plugin.to_str().unwrap()];
        args.extend_from_slice(extra);
        Process::start_binary_env(env!("CARGO_BIN_EXE_settle").as_ref(), &args, env).await
    }

    async fn start_binary_env(
        binary: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Process {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(binary)
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .env("SETTLE_CACHE_DIR", cache_dir())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("settle binary starts");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (found, mut address) = tokio::sync::mpsc::channel::<String>(1);
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("serving MCP at ").nth(1) {
                    let _ = found.send(rest.trim().to_string()).await;
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let url = tokio::time::timeout(DEADLINE, address.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("settle did not start; its log:\n{}", log.lock().unwrap()));
        Process { child, url, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Sends a signal by name (`TERM`, `KILL`).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().expect("still running").to_string();
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), pid])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Waits for the process to exit and returns its status.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("settle did not exit; its log:\n{}", self.log()))
            .unwrap()
    }
}

/// A raw `subscriptions/listen` stream, read as SSE.
pub struct Listen {
    response: reqwest::Response,
    buffer: String,
    /// The listen request's id (the subscription id).
    pub id: u64,
}

impl Listen {
    /// Opens a listen stream on `url` with `notifications` as the filter.
    pub async fn open(url: &str, id: u64, notifications: Value, capabilities: Value) -> Listen {
        Listen::open_with_token(url, None, id, notifications, capabilities).await
    }

    /// Opens a listen stream presenting a bearer token.
    pub async fn open_with_token(
        url: &str,
        token: Option<&str>,
        id: u64,
        notifications: Value,
        capabilities: Value,
    ) -> Listen {
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {
                "notifications": notifications,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": capabilities,
                },
            },
        });
        let mut request = reqwest::Client::new()
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request
            .body(body.to_string())
            .send()
            .await
            .expect("listen request reaches settle");
        Listen {
            response,
            buffer: String::new(),
            id,
        }
    }

    /// The HTTP status of the listen request's answer.
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    /// The next JSON-RPC message on the stream, or `None` at its end or after
    /// `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find('\n') {
                let line: String = self.buffer.drain(..=end).collect();
                // SSE `data:` lines, or a plain JSON body (an error answer).
                let line = line.trim();
                let data = line.strip_prefix("data:").map(str::trim).unwrap_or(line);
                if let Ok(message) = serde_json::from_str(data) {
                    return Some(message);
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .ok()?;
            match chunk {
                Ok(Some(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                _ if !self.buffer.trim().is_empty() => self.buffer.push('\n'),
                _ => return None,
            }
        }
    }
}

/// A real redis-server for one test, on a free loopback port, persisting to
/// a temporary directory with an append-only file (fsync on every write).
pub struct Redis {
    child: Option<std::process::Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut redis = Redis {
            child: None,
            port,
            dir,
        };
        redis.spawn();
        redis
    }

    fn spawn(&mut self) {
        use std::io::{BufRead, BufReader};
        let mut child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--save", ""])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server runs (`make test` installs it; on its own: apt-get install redis-server)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let started = Instant::now();
        loop {
            let line = lines.next().and_then(Result::ok).unwrap_or_default();
            if line.contains("Ready to accept connections") {
                break;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "redis-server did not start: {line}"
            );
        }
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        self.child = Some(child);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Stops it (a clean shutdown that keeps the append-only file).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    /// Stops and starts it again on the same port and data.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A tenant `name` serving the plugin at `plugin` in `runtime`, with
/// `settings` as its plugin configuration, no outbound hosts and default
/// limits: for driving the runtime, scheduler and swapper without MCP.
pub fn bare_tenant(
    runtime: &settle::runtime::Runtime,
    name: &str,
    plugin: &std::path::Path,
    settings: &[(&str, &str)],
) -> settle::tenant::Tenant {
    let plugin = runtime.load_plugin(plugin).expect("the plugin loads");
    let context = settle::context::TenantContext {
        name: name.into(),
        namespace: name.into(),
        plugin_config: settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        policy: settle::policy::OutboundPolicy::new(vec![]),
        limits: settle::context::Limits::default(),
        events: Default::default(),
        metrics: Default::default(),
    };
    settle::tenant::Tenant::new(context, plugin)
}

/// A runtime on an in-memory store, sharing the tests' artifact cache.
pub fn memory_runtime() -> std::sync::Arc<settle::runtime::Runtime> {
    let store = settle::store::Store::memory();
    std::sync::Arc::new(settle::runtime::Runtime::new(store, Some(cache_dir())).expect("runtime"))
}

/// A component shaped like a plugin of contract `version`: it imports the
/// runner's interface and exports the plugin interface of that version.
/// Nothing else: the check must refuse it before the linker looks.
pub fn component_built_for(version: &str) -> Vec<u8> {
    use wasm_encoder::{
        Component, ComponentExportKind, ComponentExportSection, ComponentImportSection,
        ComponentInstanceSection, ComponentTypeRef, ComponentTypeSection, ComponentValType,
        InstanceType, PrimitiveValType,
    };
    let mut types = ComponentTypeSection::new();
    let mut runner = InstanceType::new();
    // `log: func(message: string)`, as type 0 of the instance type.
    runner
        .ty()
        .function()
        .params([(
            "message",
            ComponentValType::Primitive(PrimitiveValType::String),
        )])
        .result(None);
    runner.export("log", ComponentTypeRef::Func(0));
    types.instance(&runner);
    let mut imports = ComponentImportSection::new();
    imports.import(
        format!("settle:plugin/runner@{version}").as_str(),
        ComponentTypeRef::Instance(0),
    );
    // Instance 0 is the import; instance 1 is the (empty) export.
    let mut instances = ComponentInstanceSection::new();
    instances.export_items::<&str, [(&str, ComponentExportKind, u32); 0]>([]);
    let mut exports = ComponentExportSection::new();
    exports.export(
        format!("settle:plugin/plugin@{version}").as_str(),
        ComponentExportKind::Instance,
        1,
        None,
    );
    let mut component = Component::new();
    component
        .section(&types)
        .section(&imports)
        .section(&instances)
        .section(&exports);
    component.finish()
}

/// The runner's `/metrics` text, for the server whose MCP endpoint is
/// `mcp_url`, asked over `client` (pass a client that keeps its connection
/// where a test caps connections).
pub async fn metrics_text(client: &reqwest::Client, mcp_url: &str) -> String {
    let authority = mcp_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap();
    let response = client
        .get(format!("http://{authority}/metrics"))
        .send()
        .await
        .expect("/metrics answers");
    assert!(
        response.status().is_success(),
        "/metrics: {}",
        response.status()
    );
    response.text().await.unwrap()
}

/// The names of the tools `client`'s server lists, in its order.
pub async fn tool_names(client: &Client) -> Vec<String> {
    let tools = client.list_all_tools().await.expect("tools/list");
    tools.into_iter().map(|t| t.name.to_string()).collect()
}
